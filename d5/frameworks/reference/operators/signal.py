"""Reference signal operators (ONNX semantics, newest opset; DFT's opset-17 ``axis`` attribute is accepted
too): DFT, STFT, the window generators HannWindow, HammingWindow and BlackmanWindow, and MelWeightMatrix.

All are forward only (``Gradient.NONE``).

>>> import numpy as np
>>> from d5.frameworks.reference.operators import create_operator
>>> create_operator("HannWindow", {"periodic": 0}).forward([np.array(3)]).tolist()
[0.0, 1.0, 0.0]
"""
from __future__ import annotations

import numpy as np

from d5.errors import ShapeError
from d5.frameworks.reference.operators import ReferenceOp, register
from d5.frameworks.reference.operators._checks import onnx_dtype, optional_array, scalar_input
from d5.ops.onnx_attributes import adopt, operator_attributes
from d5.ops.onnx_semantics import COSINE_WINDOW_COEFFICIENTS, mel_weight_matrix
from d5.ops.operator import Gradient
from d5.ops.sequence_plans import (MEL_INPUT_NAMES, check_dft_input, check_mel_inputs, check_stft_signal,
                                   cosine_window_size, dft_axis, dft_points, output_datatype_error, stft_frames)


# --------------------------------------------------------------------------------------------------- DFT

def _complex_signal(x: np.ndarray) -> np.ndarray:
    """A ``[..., 1]`` (real) or ``[..., 2]`` (real, imaginary) tensor as a float64 or complex128 array."""
    return x[..., 0].astype(np.float64) if x.shape[-1] == 1 else x[..., 0] + 1j * x[..., 1].astype(np.float64)


def _real_pairs(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Complex ``values`` as ONNX's ``[..., 2]`` (real, imaginary) tensor of ``dtype``."""
    return np.stack([values.real, values.imag], axis=-1).astype(dtype)


@register("DFT")
class DFT(ReferenceOp):
    """Discrete Fourier transform of a real (``[..., 1]``) or complex (``[..., 2]``: real, imaginary) signal
    along ``axis`` (input 3 of opset 20, default -2; or the opset-17 attribute), zero-padded or cut to
    ``dft_length``. ``inverse`` gives the inverse transform (scaled by 1/n); ``onesided`` keeps the
    ``n // 2 + 1`` non-redundant frequencies of a real signal's transform, or with ``inverse`` takes such a
    half spectrum to a real signal (irfft; ``dft_length`` defaults to ``2 * (len - 1)``). Forward only.

    A node with neither the attribute nor the input uses opset 20's default -2; opset 17-19's default was 1,
    which is the same axis for the usual ``[batch, signal, 1|2]`` input.
    """

    gradient = Gradient.NONE

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("DFT", attributes))

    def forward(self, inputs):
        x = np.asarray(inputs[0])
        check_dft_input(x.shape)
        length, axis_input = optional_array(inputs, 1), optional_array(inputs, 2)
        axis = dft_axis(None if axis_input is None else axis_input.reshape(-1)[0], self.axis, x.ndim)
        signal = _complex_signal(x)
        n = dft_points(None if length is None else length.reshape(-1)[0], x.shape[axis], inverse=self.inverse,
                       onesided=self.onesided)
        if self.inverse and self.onesided:
            return np.fft.irfft(signal, n=n, axis=axis)[..., None].astype(x.dtype)
        result = (np.fft.ifft if self.inverse else np.fft.fft)(signal, n=n, axis=axis)
        if self.onesided:
            result = np.take(result, np.arange(n // 2 + 1), axis=axis)
        return _real_pairs(result, x.dtype)


# ------------------------------------------------------------------------------------------------ STFT

def _scalar_input(op_name: str, inputs, index: int, name: str) -> int | float | None:
    """Optional scalar (or one-element) input ``index`` as a Python number, None when absent."""
    value = optional_array(inputs, index)
    return None if value is None else scalar_input(op_name, value, f"input {name!r}", kind=lambda number: number)


@register("STFT")
class STFT(ReferenceOp):
    """Short-time Fourier transform of ``signal`` ([batch, length, 1] real or [batch, length, 2] complex):
    frames of ``frame_length`` samples every ``frame_step`` samples (no padding: ``1 + (length - frame_length)
    // frame_step`` frames), each multiplied by ``window`` (default all ones) and transformed with a DFT of
    ``frame_length`` points. Output [batch, frames, bins, 2] with ``bins = frame_length // 2 + 1`` when
    ``onesided`` (the default) else ``frame_length``. ``frame_length`` defaults to the window's length, or
    the signal's without a window. Forward only.

    >>> import numpy as np
    >>> out = STFT().forward([np.ones((1, 8, 1)), np.array(4), None, np.array(4)])
    >>> out.shape, out[0, :, 0, 0].tolist()
    ((1, 2, 3, 2), [4.0, 4.0])
    """

    gradient = Gradient.NONE

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("STFT", attributes))

    def forward(self, inputs):
        x = np.asarray(inputs[0])
        check_stft_signal(x.shape)
        step = _scalar_input("STFT", inputs, 1, "frame_step")
        window = optional_array(inputs, 2)
        frame_length = _scalar_input("STFT", inputs, 3, "frame_length")
        frame_length, step = stft_frames(x.shape[1], step, frame_length, None if window is None else window.shape)
        frames = np.lib.stride_tricks.sliding_window_view(_complex_signal(x), frame_length, axis=1)[:, ::step]
        if window is not None:
            frames = frames * window.astype(np.float64)
        spectrum = np.fft.fft(frames, axis=-1)
        if self.onesided:
            spectrum = spectrum[..., :frame_length // 2 + 1]
        return _real_pairs(spectrum, x.dtype)


# --------------------------------------------------------------------------------------------- windows

class _CosineSumWindow(ReferenceOp):
    """``w[n] = sum_k (-1)^k a_k cos(2 pi k n / N)`` for ``n < size``, with ``N = size`` (``periodic=1``, the
    default) or ``size - 1`` (symmetric; a symmetric window of size 1 is ``[1]``), as ``output_datatype``."""

    gradient = Gradient.NONE

    coefficients: tuple[float, ...] = ()

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes(type(self).__name__, attributes))
        try:
            self.dtype = onnx_dtype(self.output_datatype)
        except ShapeError:
            raise output_datatype_error(type(self).__name__, self.output_datatype) from None

    def forward(self, inputs):
        name = type(self).__name__
        size, period = cosine_window_size(name, _scalar_input(name, inputs, 0, "size"), self.periodic)
        if period == 0:
            return np.ones(size, dtype=self.dtype)
        phase = 2.0 * np.pi * np.arange(size) / period
        window = sum((-1) ** k * a * np.cos(k * phase) for k, a in enumerate(self.coefficients))
        return np.asarray(window, dtype=np.float64).astype(self.dtype)


@register("HannWindow")
class HannWindow(_CosineSumWindow):
    """Hann window ``0.5 - 0.5 cos(2 pi n / N)`` (``sin^2(pi n / N)``).

    >>> HannWindow(periodic=0).forward([np.array(3)]).tolist()
    [0.0, 1.0, 0.0]
    """

    coefficients = COSINE_WINDOW_COEFFICIENTS["HannWindow"]


@register("HammingWindow")
class HammingWindow(_CosineSumWindow):
    """Hamming window ``25/46 - 21/46 cos(2 pi n / N)`` (ONNX's exact alpha = 25/46, not PyTorch's 0.54).

    >>> np.round(HammingWindow(periodic=0, output_datatype=11).forward([np.array(3)]), 4).tolist()
    [0.087, 1.0, 0.087]
    """

    coefficients = COSINE_WINDOW_COEFFICIENTS["HammingWindow"]


@register("BlackmanWindow")
class BlackmanWindow(_CosineSumWindow):
    """Blackman window ``0.42 - 0.5 cos(2 pi n / N) + 0.08 cos(4 pi n / N)``.

    >>> np.round(BlackmanWindow(periodic=0, output_datatype=11).forward([np.array(3)]), 4).tolist()
    [-0.0, 1.0, -0.0]
    """

    coefficients = COSINE_WINDOW_COEFFICIENTS["BlackmanWindow"]


# -------------------------------------------------------------------------------------- MelWeightMatrix

@register("MelWeightMatrix")
class MelWeightMatrix(ReferenceOp):
    """Triangular mel filter bank, ``[dft_length // 2 + 1, num_mel_bins]``, mapping a onesided magnitude
    spectrum to mel bins. ``num_mel_bins + 2`` points equally spaced on the mel scale
    (``2595 log10(1 + f / 700)``) between ``lower_edge_hertz`` and ``upper_edge_hertz`` (step
    ``range / (num_mel_bins + 2)``, as the ONNX reference) are mapped to DFT bins
    ``floor((dft_length + 1) * f / sample_rate)``; filter ``i`` rises linearly from point ``i`` to 1 at point
    ``i + 1`` and falls to point ``i + 2``. Output dtype ``output_datatype`` (float32 by default).

    >>> m = MelWeightMatrix().forward([np.array(2), np.array(16), np.array(8000), np.array(0.0), np.array(4000.0)])
    >>> m.shape, m.dtype
    ((9, 2), dtype('float32'))
    """

    gradient = Gradient.NONE

    def __init__(self, **attributes) -> None:
        super().__init__()
        output_datatype = operator_attributes("MelWeightMatrix", attributes).output_datatype
        try:
            self.dtype = onnx_dtype(output_datatype)
        except ShapeError:
            raise output_datatype_error("MelWeightMatrix", output_datatype, examples="1 (float)") from None

    def forward(self, inputs):
        check_mel_inputs(len(inputs))
        mel_bins, dft_length, sample_rate, low, high = (_scalar_input("MelWeightMatrix", inputs, i, n)
                                                        for i, n in enumerate(MEL_INPUT_NAMES))
        return mel_weight_matrix(mel_bins, dft_length, sample_rate, low, high).astype(self.dtype)
