"""Signal operators as native torch operations: DFT (torch.fft; opset 17's ``axis`` attribute and opset 20's
axis input), STFT, the windows HannWindow, HammingWindow and BlackmanWindow, and MelWeightMatrix.

Signals are ONNX's ``[..., 1]`` (real) or ``[..., 2]`` (real, imaginary) tensors; transforms run in the input's
precision (float16 in float32) and are differentiable by autograd (the reference has no gradients here). The
window coefficients and the mel filter bank are the framework-neutral rules of :mod:`d5.ops.onnx_semantics`.
"""
from __future__ import annotations

import math

import torch

from d5.frameworks.pytorch.operators import TorchOp, register
from d5.frameworks.pytorch.operators._helpers import scalar, torch_dtype
from d5.ops.onnx_attributes import adopt, operator_attributes
from d5.ops.onnx_semantics import COSINE_WINDOW_COEFFICIENTS, mel_weight_matrix
from d5.ops.sequence_plans import (MEL_INPUT_NAMES, check_dft_input, check_mel_inputs, check_stft_signal,
                                   cosine_window_size, dft_axis, dft_points, single_value_present, stft_frames)


def _complex_signal(x: torch.Tensor) -> torch.Tensor:
    """A ``[..., 1]`` or ``[..., 2]`` tensor as a real or complex tensor (without the last axis)."""
    if x.dtype not in (torch.float32, torch.float64):
        x = x.to(torch.float32)
    return x[..., 0] if x.shape[-1] == 1 else torch.complex(x[..., 0], x[..., 1])


def _real_pairs(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Complex ``values`` as ONNX's ``[..., 2]`` (real, imaginary) tensor of ``dtype``."""
    return torch.view_as_real(values.resolve_conj()).to(dtype) if values.is_complex() else \
        torch.stack([values, torch.zeros_like(values)], dim=-1).to(dtype)


def _optional_scalar(op_name: str, value: torch.Tensor | None, what: str):
    """An optional one-value input as a Python number (None when absent or empty)."""
    if value is None or not single_value_present(op_name, what, value.numel(), tuple(value.shape)):
        return None
    return scalar(value, lambda number: number)


@register("DFT")
class DFT(TorchOp):
    """Discrete Fourier transform along ``axis`` (input 3 of opset 20, default -2; or the opset-17 attribute),
    zero-padded or cut to ``dft_length``; ``inverse`` scales by 1/n; ``onesided`` keeps the ``n // 2 + 1``
    non-redundant frequencies, or with ``inverse`` takes such a half spectrum to a real signal (irfft)."""

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("DFT", attributes))

    def forward(self, x, dft_length=None, axis=None):
        check_dft_input(tuple(x.shape))
        axis = dft_axis(_optional_scalar("DFT", axis, "axis (input 2)"), self.axis, x.dim())
        n = dft_points(_optional_scalar("DFT", dft_length, "dft_length (input 1)"), x.shape[axis],
                       inverse=self.inverse, onesided=self.onesided)
        signal = _complex_signal(x)
        if self.inverse and self.onesided:
            return torch.fft.irfft(signal, n=n, dim=axis).unsqueeze(-1).to(x.dtype)
        result = (torch.fft.ifft if self.inverse else torch.fft.fft)(signal, n=n, dim=axis)
        if self.onesided:
            result = result.narrow(axis, 0, n // 2 + 1)
        return _real_pairs(result, x.dtype)


@register("STFT")
class STFT(TorchOp):
    """Short-time Fourier transform of ``signal`` ([batch, length, 1 or 2]): frames of ``frame_length`` samples
    every ``frame_step`` (no padding), times ``window``, each transformed by a DFT of ``frame_length`` points;
    output [batch, frames, bins, 2], ``bins = frame_length // 2 + 1`` when ``onesided``."""

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("STFT", attributes))

    def forward(self, signal, frame_step, window=None, frame_length=None):
        check_stft_signal(tuple(signal.shape))
        step = _optional_scalar("STFT", frame_step, "input 'frame_step'")
        frame = _optional_scalar("STFT", frame_length, "input 'frame_length'")
        if window is not None and window.numel() == 0:
            window = None
        frame, step = stft_frames(signal.shape[1], step, frame, None if window is None else tuple(window.shape))
        frames = _complex_signal(signal).unfold(1, frame, step)  # (batch, frames, frame_length)
        if window is not None:
            frames = frames * window.to(frames.real.dtype)
        spectrum = torch.fft.fft(frames, dim=-1)
        if self.onesided:
            spectrum = spectrum[..., :frame // 2 + 1]
        return _real_pairs(spectrum, signal.dtype)


class _CosineSumWindow(TorchOp):
    """``w[n] = sum_k (-1)^k a_k cos(2 pi k n / N)`` for ``n < size``, ``N = size`` (``periodic=1``) or
    ``size - 1`` (a symmetric window of size 1 is ``[1]``), computed in float64, as ``output_datatype``."""

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes(type(self).__name__, attributes))
        self.dtype = torch_dtype(self.output_datatype)
        self.coefficients = COSINE_WINDOW_COEFFICIENTS[type(self).__name__]

    def forward(self, size):
        name = type(self).__name__
        count, period = cosine_window_size(name, _optional_scalar(name, size, "input 'size'"), self.periodic)
        if period == 0:
            return torch.ones(count, dtype=self.dtype, device=size.device)
        phase = torch.arange(count, dtype=torch.float64, device=size.device) * (2.0 * math.pi / period)
        window = sum((-1) ** k * a * torch.cos(k * phase) for k, a in enumerate(self.coefficients))
        return window.to(self.dtype)


@register("HannWindow")
class HannWindow(_CosineSumWindow):
    """Hann window ``0.5 - 0.5 cos(2 pi n / N)``."""


@register("HammingWindow")
class HammingWindow(_CosineSumWindow):
    """Hamming window ``25/46 - 21/46 cos(2 pi n / N)`` (ONNX's alpha, not PyTorch's 0.54)."""


@register("BlackmanWindow")
class BlackmanWindow(_CosineSumWindow):
    """Blackman window ``0.42 - 0.5 cos(2 pi n / N) + 0.08 cos(4 pi n / N)``."""


@register("MelWeightMatrix")
class MelWeightMatrix(TorchOp):
    """Triangular mel filter bank ``[dft_length // 2 + 1, num_mel_bins]`` as ``output_datatype`` (its scalar
    inputs fix it entirely: :func:`d5.ops.onnx_semantics.mel_weight_matrix`)."""

    def __init__(self, **attributes) -> None:
        super().__init__()
        self.dtype = torch_dtype(operator_attributes("MelWeightMatrix", attributes).output_datatype)

    def forward(self, *inputs):
        check_mel_inputs(len(inputs))
        values = [_optional_scalar("MelWeightMatrix", value, f"input {name!r}")
                  for value, name in zip(inputs, MEL_INPUT_NAMES)]
        matrix = mel_weight_matrix(*values)
        return torch.from_numpy(matrix).to(inputs[0].device, self.dtype)
