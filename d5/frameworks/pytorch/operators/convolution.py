"""Convolutions as native torch operations: Conv and ConvTranspose, 1-D to 3-D, with groups, dilations and
ONNX's padding rules (explicit asymmetric pads, auto_pad) resolved by the framework-neutral
:func:`d5.ops.onnx_semantics.window_geometry`; asymmetric or negative pads become an explicit F.pad. Also
Col2Im (any rank)."""
from __future__ import annotations

import itertools
import math

import torch
import torch.nn.functional as F

from d5.frameworks.pytorch.operators import TorchOp, register
from d5.frameworks.pytorch.operators._helpers import ints, pad_spatial, resolve_pads
from d5.ops.onnx_attributes import adopt, operator_attributes
from d5.ops.onnx_semantics import col2im_geometry, conv_transpose_geometry
from d5.ops.window_checks import (check_col2im_ranks, check_conv_ranks, check_group_channels, check_kernel_attribute,
                                  deform_conv_attributes, deform_conv_plan, deform_tap_grid)

_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
_CONV_T = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}


class _ConvAttributes(TorchOp):
    op_name = "Conv"

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes(self.op_name, attributes))

    def _check(self, x, w):
        check_conv_ranks(self.op_name, x.dim(), w.shape, tuple(x.shape))
        return check_kernel_attribute(self.op_name, self.kernel_shape, w.shape[2:])


@register("Conv")
class Conv(_ConvAttributes):
    """ONNX Conv: ``Y = conv(X, W) + B``; W is (M, C/group, kernel...)."""

    def forward(self, x, w, b=None):
        conv, sides, strides, padding, dilations = self.planned((x.shape, w.shape), self._plan, x, w)
        if sides is not None:
            x = pad_spatial(x, sides)
        return conv(x, w, b, strides, padding, dilations, self.group)

    def _plan(self, x, w):
        """torch's convolution and its arguments for these shapes; ``sides`` (None: none) pads X first."""
        kernel = self._check(x, w)
        check_group_channels("Conv", x.shape[1], w.shape, self.group)
        _, strides, dilations, sides = resolve_pads("Conv", tuple(x.shape[2:]), kernel, self.strides,
                                                    self.dilations, self.pads, self.auto_pad, clamp_same_pads=True)
        symmetric = all(begin == end >= 0 for begin, end in sides)
        padding = [begin for begin, _ in sides] if symmetric else 0
        return _CONV[x.dim() - 2], None if symmetric else sides, strides, padding, dilations


@register("ConvTranspose")
class ConvTranspose(_ConvAttributes):
    """ONNX ConvTranspose: W is (C, M/group, kernel...). Output size per axis ``stride * (in - 1) +
    output_padding + (k - 1) * dilation + 1 - pad_begin - pad_end``, or ``output_shape`` (the pads then
    derived, the odd unit at the end for SAME_UPPER, at the beginning otherwise), as the reference."""

    op_name = "ConvTranspose"

    def forward(self, x, w, b=None):
        conv, geometry = self.planned((x.shape, w.shape), self._plan, x, w)
        full = conv(x, w, None, stride=geometry.strides, padding=0, dilation=geometry.dilations, groups=self.group)
        # The unpadded output grows by output_padding zeros at the end, then loses the pads on both sides.
        y = pad_spatial(full, geometry.sides)
        if b is not None:
            y = y + b.reshape(1, -1, *(1,) * len(geometry.out))
        return y

    def _plan(self, x, w):
        """torch's transposed convolution and the geometry (see conv_transpose_geometry) for these shapes."""
        kernel = self._check(x, w)
        geometry = conv_transpose_geometry(tuple(x.shape[2:]), kernel, strides=self.strides, dilations=self.dilations,
                                           output_padding=self.output_padding, pads=self.pads,
                                           output_shape=self.output_shape, auto_pad=self.auto_pad)
        return _CONV_T[len(kernel)], geometry


@register("Col2Im")
class Col2Im(TorchOp):
    """Sum the columns of ``input`` (N, C * prod(block_shape), L) back into an image (N, C, *image_shape): the
    inverse layout of im2col, overlapping blocks added (``F.fold`` for 2-D images, a loop over the block's taps
    otherwise). Differentiable (the reference is not)."""

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("Col2Im", attributes))

    def forward(self, columns, image_shape, block_shape):
        check_col2im_ranks(columns.shape, image_shape.shape, block_shape.shape)
        image, block = ints(image_shape), ints(block_shape)
        geometry = col2im_geometry(columns.shape, image, block, self.dilations, self.pads, self.strides)
        dims, n = len(image), columns.shape[0]
        dilations, pads, strides = list(geometry.dilations), list(geometry.pads), list(geometry.strides)
        padded, blocks, channels = list(geometry.padded), list(geometry.blocks), geometry.channels
        if dims == 2:
            out = F.fold(columns, padded, block, dilation=dilations, stride=strides)
        else:
            cols = columns.reshape(n, channels, *block, *blocks)
            out = columns.new_zeros((n, channels, *padded))
            for offset in itertools.product(*[range(k) for k in block]):
                index = tuple(slice(o * d, o * d + (b - 1) * s + 1, s)
                              for o, d, b, s in zip(offset, dilations, blocks, strides))
                out[(slice(None), slice(None)) + index] += cols[(slice(None), slice(None)) + offset]
        return pad_spatial(out, [(-pads[i], -pads[i + dims]) for i in range(dims)])


@register("DeformConv")
class DeformConv(TorchOp):
    """ONNX DeformConv (opset 19), N-D: a grouped convolution whose kernel taps sample X at positions moved
    by ``offset`` (N, offset_group * taps * rank, *out) -- per axis, the tap's offsets in order -- with
    multilinear interpolation (zero outside X, ONNX's GridSample with align_corners=1), each sample scaled by
    ``mask`` (N, offset_group * taps, *out; default 1); ``Y = conv + B``. The output's spatial shape is the
    offset's. The reference framework has no DeformConv; this follows ONNX's reference implementation.

    >>> x = torch.arange(4.0).reshape(1, 1, 2, 2)
    >>> DeformConv()(x, torch.ones(1, 1, 1, 1), torch.full((1, 2, 2, 2), 0.5)).tolist()   # 1x1 taps moved by half a pixel
    [[[[1.5, 1.0], [1.25, 0.75]]]]
    """

    def __init__(self, dilations=None, group: int = 1, kernel_shape=None, offset_group: int = 1, pads=None,
                 strides=None) -> None:
        super().__init__()
        adopt(self, deform_conv_attributes(ints, dilations, group, kernel_shape, offset_group, pads, strides))

    def forward(self, x, w, offset, b=None, mask=None):
        kernel, strides, dilations, pads, out = deform_conv_plan(
            tuple(x.shape), tuple(w.shape), tuple(offset.shape), None if mask is None else tuple(mask.shape),
            self.kernel_shape, self.group, self.offset_group, self.strides, self.dilations, self.pads)
        rank, (n, channels) = x.dim() - 2, x.shape[:2]
        out_channels, taps = w.shape[0], math.prod(kernel)
        groups, offset_groups = self.group, self.offset_group
        samples = self._sample(x, offset.reshape(n, offset_groups, *kernel, rank, *out).to(x.dtype), kernel,
                               strides, dilations, pads, out)  # (N, offset_group, C / offset_group, taps, P)
        if mask is not None:
            samples = samples * mask.reshape(n, offset_groups, 1, taps, -1).to(x.dtype)
        columns = samples.reshape(n, groups, channels // groups * taps, -1)
        weights = w.reshape(groups, out_channels // groups, -1)
        y = torch.einsum("gmk,ngkp->ngmp", weights, columns).reshape(n, out_channels, *out)
        if b is not None:
            y = y + b.reshape(1, -1, *(1,) * rank)
        return y

    @staticmethod
    def _sample(x, offset, kernel, strides, dilations, pads, out):
        """X sampled at every tap of every output position: (N, offset_group, C / offset_group, taps, P)."""
        n, channels = x.shape[:2]
        rank, spatial = len(kernel), list(x.shape[2:])
        offset_groups = offset.shape[1]
        taps, positions = math.prod(kernel), math.prod(out)
        coords = []  # per axis: (N, offset_group, taps, P) sampling coordinates in X
        for a in range(rank):
            grid = torch.as_tensor(deform_tap_grid(kernel, out, strides, dilations, pads, a), device=x.device)
            coords.append((grid.to(x.dtype) + offset.select(2 + rank, a)).reshape(n, offset_groups, taps, positions))
        flat = x.reshape(n, offset_groups, channels // offset_groups, -1)
        lows = [torch.floor(c) for c in coords]
        result = 0
        for corner in itertools.product((0, 1), repeat=rank):
            index, weight, inside = 0, 1, True
            for a, bit in enumerate(corner):
                at = lows[a] + bit
                weight = weight * (1 - (coords[a] - at).abs())
                inside = inside & (at >= 0) & (at <= spatial[a] - 1)
                index = index * spatial[a] + at.clamp(0, spatial[a] - 1).to(torch.int64)
            picked = torch.gather(flat, 3, index.reshape(n, offset_groups, 1, -1).expand(-1, -1, flat.shape[2], -1))
            result = result + picked * (weight * inside).reshape(n, offset_groups, 1, -1)
        return result.reshape(n, offset_groups, channels // offset_groups, taps, positions)
