"""Every framework's signal operators (native_op: DFT, STFT, the cosine-sum windows, MelWeightMatrix) against the
reference operators. The reference has no gradients for them, so the oracle compares outputs only."""
from __future__ import annotations

import numpy as np
import pytest

from _oracle import _ints, _rand, case_params, check_against_reference, check_error, framework_params
from d5.errors import ShapeError


def _f(values, dtype=np.float32):
    return _ints(values, dtype)


# (id, op_type, attributes, [input makers (None: omitted)], options): see _oracle.py
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


@pytest.mark.parametrize("framework, case", case_params(CASES))
def test_native_op_matches_reference(framework, case):
    check_against_reference(framework, case)


@pytest.mark.parametrize("framework, op_type, arrays, match", framework_params([
    ("DFT", [np.ones((2, 3, 1), np.float32), None, np.array(-1)], "signal axis"),
    ("DFT", [np.ones((2, 3), np.float32)], r"\[..., 1\] \(real\) or \[..., 2\]"),
    ("STFT", [np.ones((1, 8, 1), np.float32), np.array(0)], "frame_step"),
    ("HannWindow", [np.array(-2)], "non-negative integer"),
    ("MelWeightMatrix", [np.array(v) for v in (4, 16, 8000, 0.0, 16000.0)], "upper_edge_hertz"),
]))
def test_bad_inputs_raise_shape_errors(framework, op_type, arrays, match):
    check_error(framework, op_type, {}, arrays, ShapeError, match)
