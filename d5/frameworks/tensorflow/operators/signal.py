"""Signal operators as native TensorFlow operations: DFT (tf.signal; opset 17's ``axis`` attribute and opset 20's
axis input), STFT, the windows HannWindow, HammingWindow and BlackmanWindow, and MelWeightMatrix.

Signals are ONNX's ``[..., 1]`` (real) or ``[..., 2]`` (real, imaginary) tensors; transforms run in complex64
(complex128 for float64 input; float16 goes through float32) along the last axis, where tf.signal transforms,
the signal axis moved there and back. They are differentiable by ``tf.GradientTape`` (the reference has no
gradients here). The window coefficients and the mel filter bank are the framework-neutral rules of
:mod:`d5.ops.onnx_semantics`; lengths, steps and sizes must be known while tracing (they fix output shapes).
"""
from __future__ import annotations

import math

import numpy as np
import tensorflow as tf

from d5.errors import UnsupportedOperatorError
from d5.frameworks.tensorflow.operators import TFOp, register
from d5.frameworks.tensorflow.operators._helpers import static, static_shape, tf_dtype
from d5.ops.onnx_attributes import adopt, operator_attributes
from d5.ops.onnx_semantics import COSINE_WINDOW_COEFFICIENTS, mel_weight_matrix
from d5.ops.sequence_plans import (MEL_INPUT_NAMES, check_dft_input, check_mel_inputs, check_stft_signal,
                                   cosine_window_size, dft_axis, dft_points, single_value_present, stft_frames)


def _complex_signal(x):
    """A ``[..., 1]`` or ``[..., 2]`` tensor as a real or complex tensor (without the last axis), in float32 or
    float64."""
    if x.dtype not in (tf.float32, tf.float64):
        x = tf.cast(x, tf.float32)
    return x[..., 0] if x.shape[-1] == 1 else tf.complex(x[..., 0], x[..., 1])


def _as_complex(values):
    if values.dtype.is_complex:
        return values
    return tf.complex(values, tf.zeros_like(values))


def _real_pairs(values, dtype: tf.DType):
    """Complex ``values`` as ONNX's ``[..., 2]`` (real, imaginary) tensor of ``dtype``."""
    pairs = tf.stack([tf.math.real(values), tf.math.imag(values)], axis=-1)
    return pairs if pairs.dtype == dtype else tf.cast(pairs, dtype)


def _optional_scalar(op_name: str, value, what: str):
    """An optional one-value input as a Python number (None when absent or empty); it must be known while
    tracing."""
    if value is None or not single_value_present(op_name, what, value.shape.num_elements(), tuple(value.shape)):
        return None
    known = static(value)
    if known is None:
        raise UnsupportedOperatorError(f"the TensorFlow framework needs {op_name}'s {what} as a value known while "
                                       "tracing, not a tensor computed from the data")
    return np.asarray(known).reshape(-1)[0].item()


def _last_axis(x, axis: int):
    """``x`` with ``axis`` swapped to the end, and the permutation (its own inverse) to swap it back."""
    rank = x.shape.rank
    if axis == rank - 1:
        return x, None
    perm = list(range(rank))
    perm[axis], perm[-1] = perm[-1], perm[axis]
    return tf.transpose(x, perm), perm


def _fit_last(x, n: int):
    """Zero-pad or cut the last axis of ``x`` to ``n``."""
    size = x.shape[-1]
    if size > n:
        return x[..., :n]
    if size < n:
        return tf.pad(x, [[0, 0]] * (x.shape.rank - 1) + [[0, n - size]])
    return x


@register("DFT")
class DFT(TFOp):
    """Discrete Fourier transform along ``axis`` (input 3 of opset 20, default -2; or the opset-17 attribute),
    zero-padded or cut to ``dft_length``; ``inverse`` scales by 1/n; ``onesided`` keeps the ``n // 2 + 1``
    non-redundant frequencies, or with ``inverse`` takes such a half spectrum to a real signal (irfft)."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("DFT", attributes))

    def __call__(self, x, dft_length=None, axis=None):
        check_dft_input(tuple(x.shape))
        axis = dft_axis(_optional_scalar("DFT", axis, "axis (input 2)"), self.axis, x.shape.rank)
        n = dft_points(_optional_scalar("DFT", dft_length, "dft_length (input 1)"), x.shape[axis],
                       inverse=self.inverse, onesided=self.onesided)
        signal, perm = _last_axis(_complex_signal(x), axis)  # the signal tensor has rank - 1 axes
        if self.inverse and self.onesided:
            # irfft takes the first n // 2 + 1 bins, zero-padding a shorter half spectrum, as NumPy's.
            out = tf.signal.irfft(_as_complex(signal), fft_length=[n])
            out = out if perm is None else tf.transpose(out, perm)
            return tf.cast(out[..., None], x.dtype)
        transform = tf.signal.ifft if self.inverse else tf.signal.fft
        result = transform(_fit_last(_as_complex(signal), n))
        if self.onesided:
            result = result[..., :n // 2 + 1]
        return _real_pairs(result if perm is None else tf.transpose(result, perm), x.dtype)


@register("STFT")
class STFT(TFOp):
    """Short-time Fourier transform of ``signal`` ([batch, length, 1 or 2]): frames of ``frame_length`` samples
    every ``frame_step`` (no padding), times ``window``, each transformed by a DFT of ``frame_length`` points;
    output [batch, frames, bins, 2], ``bins = frame_length // 2 + 1`` when ``onesided``."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("STFT", attributes))

    def __call__(self, signal, frame_step, window=None, frame_length=None):
        check_stft_signal(tuple(signal.shape))
        length = static_shape(signal)[1]
        step = _optional_scalar("STFT", frame_step, "input 'frame_step'")
        frame = _optional_scalar("STFT", frame_length, "input 'frame_length'")
        if window is not None and window.shape.num_elements() == 0:
            window = None
        frame, step = stft_frames(length, step, frame, None if window is None else tuple(window.shape))
        frames = tf.signal.frame(_complex_signal(signal), frame, step, axis=1)  # (batch, frames, frame)
        if window is not None:
            real = frames.dtype.real_dtype
            frames = frames * tf.cast(tf.cast(window, real), frames.dtype)
        spectrum = tf.signal.fft(_as_complex(frames))
        if self.onesided:
            spectrum = spectrum[..., :frame // 2 + 1]
        return _real_pairs(spectrum, signal.dtype)


class _CosineSumWindow(TFOp):
    """``w[n] = sum_k (-1)^k a_k cos(2 pi k n / N)`` for ``n < size``, ``N = size`` (``periodic=1``) or
    ``size - 1`` (a symmetric window of size 1 is ``[1]``), computed in float64, as ``output_datatype``."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes(type(self).__name__, attributes))
        self.dtype = tf_dtype(self.output_datatype)
        self.coefficients = COSINE_WINDOW_COEFFICIENTS[type(self).__name__]

    def __call__(self, size):
        name = type(self).__name__
        count, period = cosine_window_size(name, _optional_scalar(name, size, "input 'size'"), self.periodic)
        if period == 0:
            return tf.ones([count], self.dtype)
        phase = tf.range(count, dtype=tf.float64) * (2.0 * math.pi / period)
        window = sum((-1) ** k * a * tf.cos(k * phase) for k, a in enumerate(self.coefficients))
        return tf.cast(window, self.dtype)


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
class MelWeightMatrix(TFOp):
    """Triangular mel filter bank ``[dft_length // 2 + 1, num_mel_bins]`` as ``output_datatype``: its scalar
    inputs fix it entirely (:func:`d5.ops.onnx_semantics.mel_weight_matrix`), so it is a constant, built once
    per set of values."""

    def __init__(self, **attributes) -> None:
        self.dtype = tf_dtype(operator_attributes("MelWeightMatrix", attributes).output_datatype)

    def __call__(self, *inputs):
        check_mel_inputs(len(inputs))
        values = tuple(_optional_scalar("MelWeightMatrix", value, f"input {name!r}")
                       for value, name in zip(inputs, MEL_INPUT_NAMES))
        matrix = self.planned(values, mel_weight_matrix, *values)
        return tf.cast(tf.constant(matrix), self.dtype)
