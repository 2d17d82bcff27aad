"""Pooling as native torch operations: MaxPool (with its Indices output), AveragePool (count_include_pad),
GlobalAveragePool, GlobalMaxPool, LpPool, for 1-D to 3-D windows, and MaxUnpool (any rank).

ONNX's padding (explicit pads, auto_pad SAME_* with possibly negative pads, ceil_mode overhang) is resolved by
:func:`d5.ops.onnx_semantics.window_geometry`, the rule every framework shares; the input is then padded
(cropped) to exactly the extent the windows cover, so torch pools it with no padding of its own."""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from d5.errors import UnsupportedOperatorError
from d5.frameworks.pytorch.operators import TorchOp, register
from d5.frameworks.pytorch.operators._helpers import ints, pad_spatial, resolve_pads
from d5.ops.onnx_attributes import adopt, operator_attributes
from d5.ops.onnx_semantics import unpooled_shape
from d5.ops.window_checks import (check_global_pool_input, check_lp_pool_rank, check_pool_rank,
                                  check_unpool_index_range, check_unpool_inputs, plane_steps, subsamples,
                                  unpool_output_shape, window_counts)

_MAX_POOL = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}
_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}


class _WindowPool(TorchOp):
    op_name = "Pool"

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes(self.op_name, attributes))

    def _window(self, x):
        """The window geometry, strides, dilations and pads (see resolve_pads) for X's shape."""
        return self.planned(x.shape, self._resolve_window, x)

    def _resolve_window(self, x):
        check_pool_rank(self.op_name, x.dim(), x.shape, self.kernel_shape)
        return resolve_pads(self.op_name, tuple(x.shape[2:]), self.kernel_shape, self.strides, self.dilations,
                            self.pads, self.auto_pad, ceil_mode=self.ceil_mode)


@register("MaxPool")
class MaxPool(_WindowPool):
    """ONNX MaxPool. Returns Y, or ``(Y, Indices)`` when the node names two outputs: int64 flat indices into X
    (row-major over the whole tensor, or column-major per plane with ``storage_order=1``). Windows that see
    only padding give -inf (index -1), as the reference."""

    op_name = "MaxPool"

    def forward(self, x):
        geometry, strides, dilations, sides, subsample = self.planned(x.shape, self._plan, x)
        want_indices = self.node_output_count is not None and self.node_output_count > 1
        if not want_indices and subsample is not None:
            return x[subsample]
        integer = not x.is_floating_point()
        source = x.to(torch.float64) if integer else x
        padded = pad_spatial(source, sides, value=-math.inf)
        rank = x.dim() - 2
        if not (want_indices or integer):  # torch's kernel without indices (what nn.MaxPool2d calls)
            return _MAX_POOL[rank](padded, self.kernel_shape, strides, 0, dilations, ceil_mode=False)
        y, flat = _MAX_POOL[rank](padded, self.kernel_shape, strides, 0, dilations, ceil_mode=False,
                                  return_indices=True)
        if integer:
            lowest = torch.tensor(torch.iinfo(x.dtype).min, dtype=y.dtype, device=y.device)
            y = torch.where(torch.isinf(y), lowest, y).to(x.dtype)  # a window of padding only: the dtype's minimum
        if not want_indices:
            return y
        return y, self._onnx_indices(flat, padded.shape[2:], x.shape, sides, torch.isinf(y) & (y < 0))

    def _plan(self, x):
        """The window (see _window) and, when the pooling only subsamples, the strided slice that does it."""
        geometry, strides, dilations, sides = self._resolve_window(x)
        subsample = None
        if subsamples(self.kernel_shape, sides, geometry.out, x.shape[2:], strides):
            # A 1x1 window with strides only picks every stride-th element (a CIFAR ResNet's option-A shortcut):
            # a strided view, free, where the pooling kernel would read and write the whole tensor.
            subsample = (slice(None), slice(None), *(slice(None, None, step) for step in strides))
        return geometry, strides, dilations, sides, subsample

    def _onnx_indices(self, flat, padded_spatial, x_shape, sides, empty):
        # torch's indices are flat within each padded (n, c) plane: back to coordinates in X's plane.
        coords, rest = [], flat
        for size in reversed(padded_spatial):
            coords.append(rest % size)
            rest = rest // size
        coords.reverse()
        spatial = x_shape[2:]
        inside = ~empty
        index = torch.zeros_like(flat)
        strides = plane_steps(spatial, self.storage_order)
        for axis, coord in enumerate(coords):
            original = coord - sides[axis][0]
            inside &= (original >= 0) & (original < spatial[axis])
            index = index + original * strides[axis]
        plane = math.prod(spatial)
        n, c = x_shape[0], x_shape[1]
        offsets = (torch.arange(n * c, device=flat.device) * plane).reshape(n, c, *(1,) * len(spatial))
        return torch.where(inside, index + offsets, torch.full_like(index, -1))


@register("AveragePool")
class AveragePool(_WindowPool):
    """ONNX AveragePool: each window's sum divided by its count of taps inside X, plus (``count_include_pad``)
    those in the declared pads, never those of a ceil_mode overhang (as the reference and PyTorch)."""

    op_name = "AveragePool"

    def forward(self, x):
        geometry, strides, dilations, sides = self._window(x)
        rank = x.dim() - 2
        padded = pad_spatial(x, sides, value=0.0)
        n, c = x.shape[:2]
        ones = torch.ones((1, 1, *self.kernel_shape), dtype=x.dtype, device=x.device)
        # Window sums as a depthwise convolution with a ones kernel (handles dilations, which torch's
        # avg_pool lacks).
        sums = _CONV[rank](padded.reshape(n * c, 1, *padded.shape[2:]), ones, stride=strides, dilation=dilations)
        sums = sums.reshape(n, c, *sums.shape[2:])
        counts = self.planned((x.shape, x.dtype, x.device), self._divisors, x, geometry, strides, dilations)
        return torch.where(counts > 0, sums / torch.clamp(counts, min=1), torch.zeros_like(sums))

    def _divisors(self, x, geometry, strides, dilations) -> torch.Tensor:
        counts = self._counts(x.shape[2:], geometry, strides, dilations)
        return torch.as_tensor(counts, dtype=x.dtype, device=x.device)

    def _counts(self, spatial, geometry, strides, dilations) -> np.ndarray:
        return window_counts(spatial, geometry, self.kernel_shape, strides, dilations, bool(self.count_include_pad))


@register("GlobalAveragePool")
class GlobalAveragePool(TorchOp):
    def forward(self, x):
        check_global_pool_input("GlobalAveragePool", x.shape)
        return x.mean(dim=tuple(range(2, x.dim())), keepdim=True)


@register("GlobalMaxPool")
class GlobalMaxPool(TorchOp):
    def forward(self, x):
        check_global_pool_input("GlobalMaxPool", x.shape)
        return x.amax(dim=tuple(range(2, x.dim())), keepdim=True)


@register("LpPool")
class LpPool(TorchOp):
    """``(sum |x|^p)^(1/p)`` over sliding windows (1-D to 3-D; zero padding, auto_pad, dilations, ceil_mode),
    computed in float32 (float64 for float64 input) and cast back. Differentiable (the reference is not); a
    window of zeros gets a zero gradient, not NaN."""

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("LpPool", attributes))

    def forward(self, x):
        rank = len(self.kernel_shape)
        check_lp_pool_rank(x.dim(), x.shape, self.kernel_shape)
        if rank not in _CONV:
            raise UnsupportedOperatorError(f"LpPool: the PyTorch framework pools 1 to 3 spatial axes, got {rank}")
        _, strides, dilations, sides = resolve_pads("LpPool", tuple(x.shape[2:]), self.kernel_shape, self.strides,
                                                    self.dilations, self.pads, self.auto_pad,
                                                    ceil_mode=self.ceil_mode)
        xc = x.to(torch.float64 if x.dtype == torch.float64 else torch.float32)
        # Padding (and a ceil_mode overhang) reads zeros, which add nothing to the sums.
        powered = pad_spatial(xc.abs().pow(self.p), sides, value=0.0)
        n, c = x.shape[:2]
        ones = torch.ones((1, 1, *self.kernel_shape), dtype=xc.dtype, device=xc.device)
        sums = _CONV[rank](powered.reshape(n * c, 1, *powered.shape[2:]), ones, stride=strides, dilation=dilations)
        sums = sums.reshape(n, c, *sums.shape[2:])
        positive = sums > 0
        root = torch.where(positive, sums, torch.ones_like(sums)).pow(1.0 / self.p)
        return torch.where(positive, root, torch.zeros_like(root)).to(x.dtype)


@register("MaxUnpool")
class MaxUnpool(TorchOp):
    """Scatter X (N, C, D1, ...) into zeros at the flat indices ``I`` (MaxPool's second output: positions in the
    whole unpooled tensor, whose spatial size is ``(in - 1) * stride - pad_begin - pad_end + kernel``). With
    ``output_shape`` (at least that size) the unpooled tensor sits in its leading corner, the rest zero, as
    the reference and ONNX's tests read it. When an index repeats, the last X element wins."""

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("MaxUnpool", attributes))

    def forward(self, x, indices, output_shape=None):
        integer = not (indices.is_floating_point() or indices.is_complex() or indices.dtype == torch.bool)
        check_unpool_inputs(tuple(x.shape), tuple(indices.shape), self.kernel_shape, integer, indices.dtype)
        inferred = unpooled_shape("MaxUnpool", tuple(x.shape), self.kernel_shape, self.strides, self.pads)
        shape = unpool_output_shape(inferred, None if output_shape is None else ints(output_shape))
        flat = indices.reshape(-1).to(torch.int64)
        total = math.prod(inferred)
        if flat.numel():
            check_unpool_index_range(int(flat.min()), int(flat.max()), inferred)
        # The last writer of each position, deterministically (a scatter of repeated indices is not).
        order = torch.arange(flat.numel(), device=flat.device)
        last = torch.full((total,), -1, dtype=torch.int64, device=flat.device).scatter_reduce(
            0, flat, order, reduce="amax")
        values = x.reshape(-1)[last.clamp(min=0)]
        unpooled = torch.where(last >= 0, values, torch.zeros((), dtype=x.dtype, device=x.device))
        unpooled = unpooled.reshape(inferred)
        return pad_spatial(unpooled, [(0, o - i) for o, i in zip(shape[2:], inferred[2:])])
