"""The PyTorch signal converters (DFT, STFT, the cosine-sum windows, MelWeightMatrix) against the reference
operators. The reference has no gradients for them, so the cases run under ``torch.inference_mode()``: the
oracle then compares outputs only; a separate test checks that torch differentiates the transforms."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from _torch_oracle import _ints, _rand, check_against_reference  # noqa: E402
from d5.errors import ShapeError  # noqa: E402
from d5.frameworks.pytorch.operators import create_operator  # noqa: E402


def _f(values, dtype=np.float32):
    return _ints(values, dtype)


# (id, op_type, attributes, [input makers (None: omitted)], options)
CASES = [
    ("dft_real", "DFT", {}, [_rand(2, 8, 1)], {}),
    ("dft_complex_length_axis_input", "DFT", {}, [_rand(2, 3, 6, 2), _ints(8), _ints(2)], {}),
    ("dft_truncate_axis_1", "DFT", {}, [_rand(1, 7, 3, 2), _ints(5), _ints(1)], {}),
    ("dft_inverse", "DFT", {"inverse": 1}, [_rand(3, 5, 2)], {}),
    ("dft_onesided", "DFT", {"onesided": 1}, [_rand(2, 9, 1)], {}),
    ("dft_irfft", "DFT", {"inverse": 1, "onesided": 1}, [_rand(2, 5, 2)], {}),
    ("dft_irfft_length", "DFT", {"inverse": 1, "onesided": 1}, [_rand(1, 4, 2), _ints(7)], {}),
    ("dft_opset17_axis_attribute", "DFT", {"axis": 1}, [_rand(2, 6, 4, 1)], {"opset": 17}),
    ("dft_opset17_negative_axis_float64", "DFT", {"axis": -3, "onesided": 1},
     [lambda rng: rng.standard_normal((4, 3, 1))], {"opset": 17}),
    ("stft_window", "STFT", {}, [_rand(2, 16, 1), _ints(4), _f(np.hanning(6)), _ints(6)], {}),
    ("stft_no_window_two_sided", "STFT", {"onesided": 0}, [_rand(1, 10, 1), _ints(3), None, _ints(4)], {}),
    ("stft_complex_window_length", "STFT", {"onesided": 0}, [_rand(1, 9, 2), _ints(2), _rand(5)], {}),
    ("stft_whole_signal", "STFT", {}, [_rand(1, 8, 1), _ints(1)], {}),
    ("hann_periodic", "HannWindow", {}, [_ints(10)], {}),
    ("hann_symmetric_double", "HannWindow", {"periodic": 0, "output_datatype": 11}, [_ints(7)], {}),
    ("hann_size_one_periodic", "HannWindow", {}, [_ints(1)], {}),
    ("hamming_symmetric", "HammingWindow", {"periodic": 0}, [_ints(6)], {}),
    ("hamming_periodic_int32", "HammingWindow", {"output_datatype": 6}, [_ints(5, np.int32)], {}),
    ("blackman_periodic", "BlackmanWindow", {}, [_ints(9)], {}),
    ("blackman_symmetric_size_one", "BlackmanWindow", {"periodic": 0}, [_ints(1)], {}),
    ("window_empty", "HannWindow", {}, [_ints(0)], {}),
    ("mel_weight_matrix", "MelWeightMatrix", {}, [_ints(8), _ints(16), _ints(8192), _f(0.0), _f(8192 / 2)], {}),
    ("mel_weight_matrix_double", "MelWeightMatrix", {"output_datatype": 11},
     [_ints(5, np.int32), _ints(64), _ints(16000), _f(100.0), _f(7000.0)], {}),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_converter_matches_reference(case):
    with torch.inference_mode():  # the reference has no gradient for these operators
        check_against_reference(case)


def test_dft_and_stft_are_differentiable():
    x = torch.rand(1, 6, 2, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(create_operator("DFT", {"onesided": 1}), (x,))
    signal = torch.rand(1, 9, 1, dtype=torch.float64, requires_grad=True)
    window = torch.rand(4, dtype=torch.float64, requires_grad=True)
    stft = create_operator("STFT", {})
    assert torch.autograd.gradcheck(lambda s, w: stft(s, torch.tensor(2), w), (signal, window))


def test_bad_inputs_raise_shape_errors():
    with pytest.raises(ShapeError, match="signal axis"):
        create_operator("DFT", {})(torch.ones(2, 3, 1), None, torch.tensor(-1))
    with pytest.raises(ShapeError, match=r"\[..., 1\] \(real\) or \[..., 2\]"):
        create_operator("DFT", {})(torch.ones(2, 3))
    with pytest.raises(ShapeError, match="frame_step"):
        create_operator("STFT", {})(torch.ones(1, 8, 1), torch.tensor(0))
    with pytest.raises(ShapeError, match="non-negative integer"):
        create_operator("HannWindow", {})(torch.tensor(-2))
    with pytest.raises(ShapeError, match="upper_edge_hertz"):
        create_operator("MelWeightMatrix", {})(*(torch.tensor(v) for v in (4, 16, 8000, 0.0, 16000.0)))
