"""Signal operators as native MXNet operations: DFT (opset 17's ``axis`` attribute and opset 20's axis input), STFT,
the windows HannWindow, HammingWindow and BlackmanWindow, and MelWeightMatrix.

Signals are ONNX's ``[..., 1]`` (real) or ``[..., 2]`` (real, imaginary) tensors. MXNet 1.9's FFT
(``contrib.fft``) runs on GPUs only, so a transform here is a ``dot`` with its DFT matrices (cosines and sines of
the static length, built once in float64 and rounded to the compute dtype: float32, float64 for float64 input),
the zero-padding or cutting to ``dft_length`` and the onesided/irfft halving folded into the matrices; STFT's
frames are one ``take`` of the signal. They are differentiable by ``mx.autograd`` (the reference has no gradients
here). The window coefficients and the mel filter bank are the framework-neutral rules of
:mod:`d5.ops.onnx_semantics`; lengths, steps and sizes must be known while composing (they fix output shapes).

>>> import numpy as np
>>> from d5.frameworks.mxnet.custom_op import native_op
>>> native_op("DFT").forward([np.array([[[1.0], [0.0], [0.0], [0.0]]], np.float32)])[0, :, 0].tolist()
[1.0, 1.0, 1.0, 1.0]
"""
from __future__ import annotations

import math

import mxnet as mx
import numpy as np

from d5.errors import ShapeError
from d5.frameworks.mxnet.operators import MXOp, register
from d5.frameworks.mxnet.operators._helpers import (ValueNeededWhileTracing, as_symbol, dtype_of, np_dtype, reshape,
                                                   shape_of, static)
from d5.ops.onnx_attributes import adopt, operator_attributes
from d5.ops.onnx_semantics import COSINE_WINDOW_COEFFICIENTS, mel_weight_matrix
from d5.ops.sequence_plans import (MEL_INPUT_NAMES, check_dft_input, check_mel_inputs, check_stft_signal,
                                   cosine_window_size, dft_axis, dft_points, output_datatype_error,
                                   single_value_present, stft_frames)


def _optional_scalar(op_name: str, value, what: str):
    """An optional one-value input as a Python number (None when absent or empty); it must be known while
    composing."""
    if value is None or not single_value_present(op_name, what, math.prod(shape_of(value)), shape_of(value)):
        return None
    known = static(value)
    if known is None:
        raise ValueNeededWhileTracing(f"the MXNet framework needs {op_name}'s {what} as a value known while "
                                      "tracing, not a tensor computed from the data")
    return np.asarray(known).reshape(-1)[0].item()


def _parts(x, dtype: np.dtype):
    """A ``[..., 1]`` or ``[..., 2]`` tensor as its real part and its imaginary part (None for a real signal),
    without the last axis, in ``dtype``."""
    shape = shape_of(x)
    x = as_symbol(x, dtype)
    if shape[-1] == 1:
        return reshape(x, shape[:-1]), None
    pieces = mx.sym.split(x, num_outputs=2, axis=-1, squeeze_axis=True)
    return pieces[0], pieces[1]


def _compute_dtype(dtype: np.dtype) -> np.dtype:
    return np.dtype(np.float64) if dtype == np.float64 else np.dtype(np.float32)


def _transform(real, imag, cos: np.ndarray, sin: np.ndarray, sign: float, dtype: np.dtype):
    """``sum_t (real + i imag)[..., t] * (cos[t, k] + sign * i sin[t, k])`` along the last axis: (real, imag)."""
    c, s = as_symbol(cos.astype(dtype)), as_symbol((sign * sin).astype(dtype))
    out_real, out_imag = mx.sym.dot(real, c), mx.sym.dot(real, s)
    if imag is not None:
        out_real = out_real - mx.sym.dot(imag, s)
        out_imag = out_imag + mx.sym.dot(imag, c)
    return out_real, out_imag


def _dft_matrices(length: int, n: int, bins: int, inverse: bool):
    """The (length, bins) cosines and sines of an ``n``-point DFT of a signal of ``length`` samples (its first
    ``min(length, n)`` samples: zero-padded or cut to n), keeping the first ``bins`` frequencies; scaled by 1/n
    when ``inverse``."""
    t = np.arange(length)[:, None]
    k = np.arange(bins)[None, :]
    angle = 2.0 * np.pi * ((t * k) % n) / n
    scale = (1.0 / n if inverse else 1.0) * (t < n)
    return np.cos(angle) * scale, np.sin(angle) * scale


def _irfft_matrices(length: int, n: int):
    """The (length, n) matrices of NumPy's irfft of a half spectrum of ``length`` bins to ``n`` real samples: the
    first ``n // 2 + 1`` bins (a shorter spectrum zero-padded), the others' conjugate symmetry doubling the inner
    bins; the imaginary parts of bin 0 (and of bin n / 2 for even n) do not contribute."""
    k = np.arange(length)[:, None]
    t = np.arange(n)[None, :]
    weight = np.where((k == 0) | ((n % 2 == 0) & (k == n // 2)), 1.0, 2.0) * (k <= n // 2) / n
    angle = 2.0 * np.pi * ((k * t) % n) / n
    return np.cos(angle) * weight, np.sin(angle) * weight


def _pairs(real, imag, dtype: np.dtype):
    """(real, imaginary) as ONNX's ``[..., 2]`` tensor of ``dtype``."""
    pairs = mx.sym.stack(real, imag, axis=-1)
    return pairs if dtype == _compute_dtype(dtype) else mx.sym.cast(pairs, dtype.name)


@register("DFT")
class DFT(MXOp):
    """Discrete Fourier transform along ``axis`` (input 3 of opset 20, default -2; or the opset-17 attribute),
    zero-padded or cut to ``dft_length``; ``inverse`` scales by 1/n; ``onesided`` keeps the ``n // 2 + 1``
    non-redundant frequencies, or with ``inverse`` takes such a half spectrum to a real signal (irfft)."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("DFT", attributes))

    def __call__(self, x, dft_length=None, axis=None):
        shape = shape_of(x)
        rank = len(shape)
        check_dft_input(shape)
        axis = dft_axis(_optional_scalar("DFT", axis, "axis (input 2)"), self.axis, rank)
        n = dft_points(_optional_scalar("DFT", dft_length, "dft_length (input 1)"), shape[axis],
                       inverse=self.inverse, onesided=self.onesided)
        out_dtype = dtype_of(x)
        dtype = _compute_dtype(out_dtype)
        real, imag = _parts(x, dtype)
        last = rank - 2  # the signal's axis in the parts, moved last and back
        if axis != last:
            real = mx.sym.swapaxes(real, axis, last)
            imag = None if imag is None else mx.sym.swapaxes(imag, axis, last)
        size = shape[axis]
        if self.inverse and self.onesided:
            cos, sin = self.planned(("irfft", size, n), _irfft_matrices, size, n)
            out, _ = _transform(real, imag, cos, sin, 1.0, dtype)  # Re((a + ib) e^{+i theta})
            out = out if axis == last else mx.sym.swapaxes(out, axis, last)
            out = mx.sym.expand_dims(out, axis=-1)
            return out if out_dtype == dtype else mx.sym.cast(out, out_dtype.name)
        bins = n // 2 + 1 if self.onesided else n
        cos, sin = self.planned(("dft", size, n, bins, bool(self.inverse)), _dft_matrices, size, n, bins,
                                bool(self.inverse))
        out_real, out_imag = _transform(real, imag, cos, sin, 1.0 if self.inverse else -1.0, dtype)
        if axis != last:
            out_real, out_imag = mx.sym.swapaxes(out_real, axis, last), mx.sym.swapaxes(out_imag, axis, last)
        return _pairs(out_real, out_imag, out_dtype)


@register("STFT")
class STFT(MXOp):
    """Short-time Fourier transform of ``signal`` ([batch, length, 1 or 2]): frames of ``frame_length`` samples
    every ``frame_step`` (no padding; one ``take``), times ``window``, each transformed by a DFT of
    ``frame_length`` points; output [batch, frames, bins, 2], ``bins = frame_length // 2 + 1`` when
    ``onesided``."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("STFT", attributes))

    def __call__(self, signal, frame_step, window=None, frame_length=None):
        shape = shape_of(signal)
        check_stft_signal(shape)
        length = shape[1]
        step = _optional_scalar("STFT", frame_step, "input 'frame_step'")
        frame = _optional_scalar("STFT", frame_length, "input 'frame_length'")
        if window is not None and math.prod(shape_of(window)) == 0:
            window = None
        frame, step = stft_frames(length, step, frame, None if window is None else shape_of(window))
        out_dtype = dtype_of(signal)
        dtype = _compute_dtype(out_dtype)
        count = 1 + (length - frame) // step
        index = np.arange(count)[:, None] * step + np.arange(frame)[None, :]
        real, imag = _parts(signal, dtype)
        taps = as_symbol(index.astype(np.int64))
        real = mx.sym.take(real, taps, axis=1)                                    # (batch, frames, frame)
        imag = None if imag is None else mx.sym.take(imag, taps, axis=1)
        if window is not None:
            window = reshape(as_symbol(window, dtype), (1, 1, frame))
            real = mx.sym.broadcast_mul(real, window)
            imag = None if imag is None else mx.sym.broadcast_mul(imag, window)
        bins = frame // 2 + 1 if self.onesided else frame
        cos, sin = self.planned(("dft", frame, bins), _dft_matrices, frame, frame, bins, False)
        return _pairs(*_transform(real, imag, cos, sin, -1.0, dtype), out_dtype)


class _CosineSumWindow(MXOp):
    """``w[n] = sum_k (-1)^k a_k cos(2 pi k n / N)`` for ``n < size``, ``N = size`` (``periodic=1``) or
    ``size - 1`` (a symmetric window of size 1 is ``[1]``), computed in float64 (MXNet's ``cos``), as
    ``output_datatype``."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes(type(self).__name__, attributes))
        try:
            self.dtype = np_dtype(self.output_datatype)
        except ShapeError:
            raise output_datatype_error(type(self).__name__, self.output_datatype,
                                        "is not a data type the MXNet framework holds") from None
        self.coefficients = COSINE_WINDOW_COEFFICIENTS[type(self).__name__]

    def __call__(self, size):
        name = type(self).__name__
        count, period = cosine_window_size(name, _optional_scalar(name, size, "input 'size'"), self.periodic)
        if period == 0 or count == 0:
            return mx.sym.identity(as_symbol(np.ones(count, self.dtype)))
        # The phases as the reference rounds them (a constant of the graph); the cosines are MXNet's.
        phase = as_symbol(2.0 * np.pi * np.arange(count) / period)
        window = None
        for k, a in enumerate(self.coefficients):
            term = mx.sym.cos(phase * float(k)) * float((-1) ** k * a) if k else \
                mx.sym.ones_like(phase) * float(a)
            window = term if window is None else window + term
        return mx.sym.cast(window, self.dtype.name)


@register("HannWindow")
class HannWindow(_CosineSumWindow):
    """Hann window ``0.5 - 0.5 cos(2 pi n / N)``."""


@register("HammingWindow")
class HammingWindow(_CosineSumWindow):
    """Hamming window ``25/46 - 21/46 cos(2 pi n / N)`` (ONNX's alpha)."""


@register("BlackmanWindow")
class BlackmanWindow(_CosineSumWindow):
    """Blackman window ``0.42 - 0.5 cos(2 pi n / N) + 0.08 cos(4 pi n / N)``."""


@register("MelWeightMatrix")
class MelWeightMatrix(MXOp):
    """Triangular mel filter bank ``[dft_length // 2 + 1, num_mel_bins]`` as ``output_datatype``: its scalar
    inputs fix it entirely (:func:`d5.ops.onnx_semantics.mel_weight_matrix`), so it is a constant of the graph,
    built once per set of values (all five inputs are read as values while composing)."""

    #: Every input is read as a value while composing.
    value_inputs = (0, 1, 2, 3, 4)

    def __init__(self, **attributes) -> None:
        output_datatype = operator_attributes("MelWeightMatrix", attributes).output_datatype
        try:
            self.dtype = np_dtype(output_datatype)
        except ShapeError:
            raise output_datatype_error("MelWeightMatrix", output_datatype,
                                        "is not a data type the MXNet framework holds", "1 (float)") from None

    def __call__(self, *inputs):
        check_mel_inputs(len(inputs))
        values = tuple(_optional_scalar("MelWeightMatrix", value, f"input {name!r}")
                       for value, name in zip(inputs, MEL_INPUT_NAMES))
        matrix = self.planned(values, mel_weight_matrix, *values)
        return mx.sym.identity(as_symbol(matrix.astype(self.dtype)))


__all__ = ["BlackmanWindow", "DFT", "HammingWindow", "HannWindow", "MelWeightMatrix", "STFT"]
