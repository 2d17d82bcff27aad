"""Signal operators (window generators, STFT, MelWeightMatrix, DFT) against PyTorch and onnxruntime."""
from __future__ import annotations

import numpy as np
import pytest

from d5.errors import ShapeError
from d5.frameworks.reference.operators import create_operator
from _helpers import assert_same, d5_outputs, onnxruntime_outputs, random_normal

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("periodic", [0, 1])
@pytest.mark.parametrize("size", [1, 2, 7, 16])
def test_windows_match_torch_and_onnxruntime(periodic, size):
    attributes, inputs = {"periodic": periodic, "output_datatype": 11}, [np.array(size, np.int64)]
    hann, blackman = (d5_outputs(op, inputs, attributes)[0] for op in ("HannWindow", "BlackmanWindow"))
    assert hann.dtype == np.float64
    if size == 1:  # torch gives [1]; ONNX's formula (and onnxruntime) a periodic [0], a symmetric one 0/0: d5 gives [1]
        assert hann.tolist() == [1.0 - periodic]
        return
    np.testing.assert_allclose(hann, torch.hann_window(size, periodic=bool(periodic), dtype=torch.float64).numpy(),
                               atol=1e-12)
    np.testing.assert_allclose(blackman, torch.blackman_window(size, periodic=bool(periodic),
                                                               dtype=torch.float64).numpy(), atol=1e-12)
    if size > 1:  # ONNX's Hamming alpha is 25/46, not torch's 0.54; onnxruntime gives NaN for symmetric size 1
        hamming = d5_outputs("HammingWindow", inputs, {"periodic": periodic})[0]
        assert hamming.dtype == np.float32
        np.testing.assert_allclose(hamming, onnxruntime_outputs("HammingWindow", inputs, 1, {"periodic": periodic}, opset=17)[0], atol=1e-6)


@pytest.mark.parametrize("onesided", [0, 1])
def test_stft_matches_torch(onesided):
    signal, window = random_normal((2, 50,)), torch.hann_window(12, dtype=torch.float64)
    out = d5_outputs("STFT", [signal[..., None], np.array(5), window.numpy(), np.array(12)], {"onesided": onesided})[0]
    expected = torch.stft(torch.tensor(signal), n_fft=12, hop_length=5, window=window, center=False,
                          onesided=bool(onesided), return_complex=True).transpose(1, 2).numpy()
    assert out.shape == expected.shape + (2,)
    np.testing.assert_allclose(out[..., 0] + 1j * out[..., 1], expected, atol=1e-12)


def test_stft_complex_signal_and_defaults_match_onnxruntime():
    signal = random_normal((1, 32, 2,), dtype=np.float32)
    inputs = [signal, np.array(4, np.int64), None, np.array(8, np.int64)]
    np.testing.assert_allclose(d5_outputs("STFT", inputs, {"onesided": 0})[0],
                               onnxruntime_outputs("STFT", inputs, 1, {"onesided": 0}, opset=17)[0], rtol=1e-4, atol=1e-4)
    whole = d5_outputs("STFT", [signal[..., :1], np.array(1)])[0]  # no window, no frame_length: one frame
    assert whole.shape == (1, 1, 17, 2)


@pytest.mark.parametrize("bins, dft, rate, low, high", [(8, 64, 16000, 0.0, 8000.0), (5, 31, 8000, 100.0, 3000.0),
                                                       (20, 256, 22050, 50.0, 11025.0)])
def test_mel_weight_matrix_matches_onnxruntime(bins, dft, rate, low, high):
    inputs = [np.array(bins, np.int64), np.array(dft, np.int64), np.array(rate, np.int64), np.array(low, np.float32),
              np.array(high, np.float32)]
    y = d5_outputs("MelWeightMatrix", inputs)[0]
    assert y.dtype == np.float32 and y.shape == (dft // 2 + 1, bins)
    np.testing.assert_allclose(y, onnxruntime_outputs("MelWeightMatrix", inputs, 1, None, opset=17)[0], atol=1e-6)


@pytest.mark.parametrize("attributes, shape, length, axis", [
    ({}, (2, 8, 1), None, 1),
    ({}, (2, 8, 2), None, -2),
    ({}, (3, 7, 5, 2), 10, 2),
    ({}, (3, 7, 5, 1), 4, 1),
    ({"onesided": 1}, (2, 9, 1), None, 1),
    ({"inverse": 1}, (2, 8, 2), None, 1),
    ({"inverse": 1}, (2, 6, 3, 2), 5, 1),
    ({"inverse": 1, "onesided": 1}, (2, 5, 2), None, 1),
    ({"inverse": 1, "onesided": 1}, (2, 5, 2), 9, 1),
])
def test_dft_matches_onnxruntime(attributes, shape, length, axis):
    x = random_normal(shape).astype(np.float32)
    inputs = [x, None if length is None else np.array(length, np.int64), np.array(axis, np.int64)]
    assert_same(d5_outputs("DFT", inputs, attributes), onnxruntime_outputs("DFT", inputs, 1, attributes, opset=20),
                 rtol=1e-4, atol=1e-4)


def test_dft_opset17_axis_attribute_matches_onnxruntime():
    x = random_normal((2, 4, 6, 1)).astype(np.float32)
    attributes = {"axis": 2}
    assert_same(d5_outputs("DFT", [x], attributes), onnxruntime_outputs("DFT", [x], 1, attributes, opset=17),
                rtol=1e-4, atol=1e-4)


def test_dft_bad_inputs_raise_shape_errors():
    op = create_operator("DFT", {})
    with pytest.raises(ShapeError, match=r"\[\.\.\., 1\] \(real\)"):
        op.forward([np.zeros((2, 8, 3))])
    with pytest.raises(ShapeError, match="signal axis"):
        op.forward([np.zeros((2, 8, 1)), None, np.array(-1)])
    with pytest.raises(ShapeError, match="dft_length"):
        op.forward([np.zeros((2, 8, 1)), np.array(0)])
