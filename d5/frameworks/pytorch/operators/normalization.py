"""Normalizations as native torch operations: BatchNormalization (batch statistics in training passes, the
running statistics updated in place), InstanceNormalization, LayerNormalization, GroupNormalization (opset 18's
per-group and opset 21's per-channel scale/bias)."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from d5.errors import ShapeError, UnsupportedOperatorError
from d5.frameworks.pytorch.operators import TorchOp, register
from d5.ops.onnx_semantics import normalize_axis


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

    def __init__(self, epsilon: float = 1e-5, momentum: float = 0.9, training_mode: int = 0, spatial: int = 1) -> None:
        super().__init__()
        self.epsilon, self.momentum, self.training_mode = float(epsilon), float(momentum), bool(training_mode)
        if int(spatial) != 1:
            raise UnsupportedOperatorError("BatchNormalization: spatial=0 (per-element statistics, opset < 9) is not "
                                           "supported; re-export the model with opset >= 9")

    def forward(self, x, scale, bias, mean, var):
        if x.dim() < 2:
            raise ShapeError(f"BatchNormalization: X must be (N, C, ...), got shape {tuple(x.shape)}")
        if not (self.training or self.training_mode):
            return F.batch_norm(x, mean, var, scale, bias, training=False, eps=self.epsilon)
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
        if self.node_output_count is not None and self.node_output_count > 1:
            return y, new_mean, new_var
        return y


@register("InstanceNormalization")
class InstanceNormalization(TorchOp):
    def __init__(self, epsilon: float = 1e-5) -> None:
        super().__init__()
        self.epsilon = float(epsilon)

    def forward(self, x, scale, bias):
        return F.instance_norm(x, weight=scale, bias=bias, eps=self.epsilon)


@register("LayerNormalization")
class LayerNormalization(TorchOp):
    """Normalize over axes ``axis..rank-1``; returns ``(Y, Mean, InvStdDev)`` when the node names more than one
    output (the statistics keep the normalized axes as size 1), else Y. ``stash_type`` is accepted; statistics
    are computed in X's dtype (float32 for float16/bfloat16 by torch)."""

    def __init__(self, axis: int = -1, epsilon: float = 1e-5, stash_type: int = 1) -> None:
        super().__init__()
        self.axis, self.epsilon = int(axis), float(epsilon)

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

    def __init__(self, num_groups: int | None = None, epsilon: float = 1e-5, stash_type: int = 1) -> None:
        super().__init__()
        if num_groups is None or int(num_groups) < 1:
            raise ShapeError(f"GroupNormalization: num_groups must be a positive integer, got {num_groups}")
        self.num_groups, self.epsilon = int(num_groups), float(epsilon)

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
