"""Normalizations as native torch operations: BatchNormalization (batch statistics in training passes, the
running statistics updated in place), InstanceNormalization, LayerNormalization, GroupNormalization (opset 18's
per-group and opset 21's per-channel scale/bias), and the transformer-era and older ones: RMSNormalization,
LpNormalization, LRN, MeanVarianceNormalization."""
from __future__ import annotations


import torch
import torch.nn.functional as F

from d5.errors import ShapeError
from d5.frameworks.pytorch.operators import TorchOp, register
from d5.ops.onnx_attributes import adopt, operator_attributes
from d5.ops.onnx_semantics import normalize_axis
from d5.ops.window_checks import (STASH_FLOAT64, check_batch_norm, check_broadcastable, lrn_half_window, mvn_axes,
                                  normalized_axis, require_channels)


@register("BatchNormalization")
class BatchNormalization(TorchOp):
    """ONNX BatchNormalization over (N, C, ...).

    With batch statistics (a training pass, or ``training_mode=1``): normalize by the batch mean and biased
    variance over every axis but C and update the running statistics, ``running = momentum * running +
    (1 - momentum) * batch`` (ONNX's momentum, the reverse of torch's), IN PLACE in the ``input_mean`` and
    ``input_var`` tensors (the executor passes its live buffers), as the reference's state_updates do. Returns
    Y when the node has one output (or the count is unknown), else ``(Y, running_mean, running_var)`` (the
    updated statistics, as the reference's 3-output form). Otherwise normalize by the given statistics.
    """

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("BatchNormalization", attributes))

    def forward(self, x, scale, bias, mean, var):
        check_batch_norm(tuple(x.shape))
        if not (self.training or self.training_mode):
            return F.batch_norm(x, mean, var, scale, bias, training=False, eps=self.epsilon)
        if self.node_output_count is not None and self.node_output_count > 1:
            return self._with_statistics(x, scale, bias, mean, var)
        # torch's fused kernel (what nn.BatchNorm2d runs) normalizes by the batch statistics; it is given no
        # running statistics because it would update them torch's way (unbiased variance, reversed momentum).
        # The biased batch variance ONNX's update wants is recovered from the kernel's saved 1/sqrt(var + eps).
        y, batch_mean, inverse_std = torch.native_batch_norm(x, scale, bias, None, None, True, 0.0, self.epsilon)
        with torch.no_grad():
            batch_var = inverse_std.pow(-2).sub_(self.epsilon)
            mean.mul_(self.momentum).add_(batch_mean.to(mean.dtype), alpha=1.0 - self.momentum)
            var.mul_(self.momentum).add_(batch_var.to(var.dtype), alpha=1.0 - self.momentum)
        return y

    def _with_statistics(self, x, scale, bias, mean, var):
        """The 3-output form: the updated statistics are outputs too, differentiable in X (the fused kernel's
        saved statistics are not), so it is computed explicitly."""
        axes = [0, *range(2, x.dim())]
        batch_mean = x.mean(dim=axes)
        batch_var = x.var(dim=axes, unbiased=False)
        shape = (1, -1, *(1,) * (x.dim() - 2))
        y = (x - batch_mean.reshape(shape)) * torch.rsqrt(batch_var.reshape(shape) + self.epsilon) \
            * scale.reshape(shape) + bias.reshape(shape)
        new_mean = self.momentum * mean + (1.0 - self.momentum) * batch_mean.to(mean.dtype)
        new_var = self.momentum * var + (1.0 - self.momentum) * batch_var.to(var.dtype)
        with torch.no_grad():
            mean.copy_(new_mean.detach())
            var.copy_(new_var.detach())
        return y, new_mean, new_var


@register("InstanceNormalization")
class InstanceNormalization(TorchOp):
    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("InstanceNormalization", attributes))

    def forward(self, x, scale, bias):
        return F.instance_norm(x, weight=scale, bias=bias, eps=self.epsilon)


@register("LayerNormalization")
class LayerNormalization(TorchOp):
    """Normalize over axes ``axis..rank-1``; returns ``(Y, Mean, InvStdDev)`` when the node names more than one
    output (the statistics keep the normalized axes as size 1), else Y. ``stash_type`` is accepted; statistics
    are computed in X's dtype (float32 for float16/bfloat16 by torch)."""

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("LayerNormalization", attributes))

    def forward(self, x, scale, bias=None):
        axis = normalize_axis("LayerNormalization", self.axis, x.dim())
        axes = list(range(axis, x.dim()))
        mean = x.mean(dim=axes, keepdim=True)
        centered = x - mean
        inv_std = torch.rsqrt((centered * centered).mean(dim=axes, keepdim=True) + self.epsilon)
        y = centered * inv_std * scale
        if bias is not None:
            y = y + bias
        if self.node_output_count is not None and self.node_output_count > 1:
            return y, mean, inv_std
        return y


@register("GroupNormalization", since=21)
class GroupNormalization(TorchOp):
    """Statistics per instance and group of ``C / num_groups`` channels; scale and bias per channel (C,) (or,
    as opset 18, per group)."""

    per_group = False

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("GroupNormalization", attributes))

    def forward(self, x, scale, bias):
        channels = x.shape[1]
        if channels % self.num_groups:
            raise ShapeError(f"GroupNormalization: {channels} channels do not split into {self.num_groups} groups")
        if scale.shape[0] != channels:
            if scale.shape[0] != self.num_groups:
                raise ShapeError(f"GroupNormalization: scale and bias must have shape ({channels},) (per channel), "
                                 f"got {tuple(scale.shape)}")
            repeat = channels // self.num_groups
            scale, bias = scale.repeat_interleave(repeat), bias.repeat_interleave(repeat)
        return F.group_norm(x, self.num_groups, scale, bias, self.epsilon)


@register("GroupNormalization", since=18)
class GroupNormalization18(GroupNormalization):
    per_group = True


def _float_compute_dtype(*tensors) -> torch.dtype:
    """float64 when any input is float64, else float32 (narrow floats are cast back afterwards), as the
    reference's transformer-block normalizations."""
    return torch.float64 if any(t.dtype == torch.float64 for t in tensors) else torch.float32


@register("RMSNormalization")
class RMSNormalization(TorchOp):
    """``Y = X / sqrt(mean(X^2) + epsilon) * scale`` with the mean over the axes ``axis..rank-1``, computed in
    float32 (float64 for a float64 input or ``stash_type=11``) and cast back to X's dtype."""

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("RMSNormalization", attributes))

    def forward(self, x, scale):
        if x is None or scale is None:
            raise ShapeError("RMSNormalization: expected inputs (X, scale)")
        axes = list(range(normalized_axis("RMSNormalization", self.axis, x.dim()), x.dim()))
        check_broadcastable("RMSNormalization", "scale", tuple(scale.shape), x.shape)
        dtype = torch.float64 if self.stash_type == STASH_FLOAT64 else _float_compute_dtype(x, scale)
        xc = x.to(dtype)
        inv_rms = torch.rsqrt((xc * xc).mean(dim=axes, keepdim=True) + self.epsilon)
        return (xc * inv_rms * scale.to(dtype)).to(x.dtype)


@register("LpNormalization")
class LpNormalization(TorchOp):
    """``X / ||X||_p`` along ``axis`` (p is 1 or 2); an all-zero slice stays 0 (not 0/0)."""

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("LpNormalization", attributes))

    def forward(self, x):
        axis = normalize_axis("LpNormalization", self.axis, x.dim())
        # vector_norm's gradient at a zero norm is 0 (not NaN): a zero slice passes its gradient straight through.
        norm = torch.linalg.vector_norm(x, ord=self.p, dim=axis, keepdim=True)
        return x / torch.where(norm == 0, torch.ones((), dtype=norm.dtype, device=norm.device), norm)


@register("LRN")
class LRN(TorchOp):
    """Local response normalization across channels of (N, C, D1, ...): ``Y[c] = X[c] / (bias + alpha / size *
    sum(X[c']^2))^beta`` over ``c'`` in ``[c - (size - 1) / 2, c + (size - 1) / 2]`` clipped to the channels.
    ``size`` must be odd, as the reference requires (an even window has no portable centre)."""

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("LRN", attributes))

    def forward(self, x):
        require_channels("LRN", x.shape)
        xc = x.to(_float_compute_dtype(x))
        n, channels = x.shape[:2]
        half = lrn_half_window(self.size, channels)
        squares = (xc * xc).reshape(n, channels, -1).transpose(1, 2).reshape(-1, 1, channels)
        ones = torch.ones((1, 1, 2 * half + 1), dtype=xc.dtype, device=xc.device)
        sums = F.conv1d(F.pad(squares, (half, half)), ones)
        sums = sums.reshape(n, -1, channels).transpose(1, 2).reshape(xc.shape)
        denominator = self.bias + (self.alpha / self.size) * sums
        return (xc * denominator.pow(-self.beta)).to(x.dtype)


@register("MeanVarianceNormalization")
class MeanVarianceNormalization(TorchOp):
    """``Y = (X - mean) / (std + 1e-9)`` with the mean and biased standard deviation over ``axes`` (default
    ``[0, 2, 3]``), ONNX's function body: a constant slice normalizes to 0."""

    EPSILON = 1e-9

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("MeanVarianceNormalization", attributes))

    def forward(self, x):
        axes = list(mvn_axes(self.axes, tuple(x.shape)))
        xc = x.to(_float_compute_dtype(x))
        centered = xc - xc.mean(dim=axes, keepdim=True)
        variance = (centered * centered).mean(dim=axes, keepdim=True)
        # sqrt's gradient at 0 is infinite: a variance below 1e-30 (whose root is far below the 1e-9 epsilon)
        # is clamped, so a constant slice gets the reference's finite gradient instead of NaN.
        std = torch.sqrt(variance.clamp_min(1e-30))
        return (centered / (std + self.EPSILON)).to(x.dtype)
