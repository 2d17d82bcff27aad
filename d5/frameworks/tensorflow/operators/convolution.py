"""Convolutions as native TensorFlow operations: Conv and ConvTranspose (1-D to 3-D, groups, dilations, ONNX's
padding rules resolved by :func:`d5.ops.onnx_semantics.window_geometry`), Col2Im (any rank) and DeformConv.

TensorFlow's CPU convolution kernels (and their gradients) take channels-last data only, so Conv and
ConvTranspose compute channels-last (:meth:`channels_last`); ``__call__`` (ONNX layout) transposes around it.
What the CPU kernels lack is rebuilt from what they have, measured on TensorFlow 2.21:

- 1-D convolutions run as 2-D ones over a height of 1 (what ``tf.nn.conv1d`` does);
- grouped convolutions: ``Conv2D`` with grouped filters has no CPU gradient ("Gradients for grouped convolutions
  are not supported on CPU"), and ``Conv3D`` none at all: one convolution per group, concatenated; with
  ``group == C`` in 1-D/2-D with equal strides, the depthwise kernel;
- dilations: the CPU backprop kernels refuse rates above 1 outside oneDNN's float32 path (and oneDNN's fails
  with strides too): with stride 1 the input goes through ``tf.nn.with_space_to_batch`` (TensorFlow's own
  dilation rewrite); with strides the kernel is dilated explicitly (zeros between its taps);
- padding: where ONNX's pads are TensorFlow's "SAME" ones the kernel pads by itself (measured fastest); otherwise
  X is padded (cropped) to exactly what "VALID" windows need (explicit paddings measured slower than both).

Weights stay in ONNX layout (M, C/group, kernel...) and are transposed (small) to TensorFlow's filter layout here.
"""
from __future__ import annotations

import itertools
import math
from typing import Any, NamedTuple

import numpy as np
import tensorflow as tf

from d5.errors import ShapeError
from d5.frameworks.tensorflow.operators import TFOp, register
from d5.frameworks.tensorflow.operators._helpers import ints, pad_sides, resolve_pads
from d5.frameworks.tensorflow.tensors import from_channels_last, to_channels_last
from d5.ops.onnx_attributes import adopt, operator_attributes
from d5.ops.onnx_semantics import col2im_geometry, conv_transpose_geometry
from d5.ops.window_checks import (check_col2im_ranks, check_conv_ranks, check_kernel_attribute, deform_conv_attributes,
                                  deform_conv_plan, deform_tap_grid)


def _common_float(x: Any, w: Any, b: Any = None):
    """X, W and B in one dtype (the reference computes mixed inputs in the wider one)."""
    dtypes = {t.dtype for t in (x, w, b) if t is not None}
    if len(dtypes) == 1:
        return x, w, b
    dtype = tf.float64 if tf.float64 in dtypes else tf.float32
    return tuple(None if t is None else tf.cast(t, dtype) for t in (x, w, b))


def same_sides(spatial, extents, strides) -> tuple[tuple[int, int], ...]:
    """The (begin, end) pads of TensorFlow's "SAME" padding per spatial axis: ``ceil(n / stride)`` outputs, the
    total pad split with the odd unit at the end."""
    sides = []
    for size, extent, stride in zip(spatial, extents, strides):
        total = max((-(-size // stride) - 1) * stride + extent - size, 0)
        sides.append((total // 2, total - total // 2))
    return tuple(sides)


def without_idle_crops(spatial, sides, extents, strides) -> tuple[tuple[int, int], ...]:
    """``sides`` without the trailing crops "VALID" windows need not: the last elements no window reaches (a 1x1
    stride-2 convolution of an even size) are left in place rather than sliced off in a copy."""
    trimmed = []
    for size, (begin, end), extent, stride in zip(spatial, sides, extents, strides):
        if end < 0 and (size + begin - extent) // stride == (size + begin + end - extent) // stride:
            end = 0
        trimmed.append((begin, end))
    return tuple(trimmed)


def _dilate_kernel(w: tf.Tensor, dilations, first_spatial: int) -> tf.Tensor:
    """``w`` with ``dilation - 1`` zeros between its taps along each spatial axis (from ``first_spatial`` on)."""
    for offset, rate in enumerate(dilations):
        if rate == 1:
            continue
        axis = first_spatial + offset
        shape = w.shape.as_list()
        taps = shape[axis]
        spread = tf.stack([w] + [tf.zeros_like(w)] * (rate - 1), axis=axis + 1)
        shape[axis] = taps * rate
        w = tf.reshape(spread, shape)
        w = w[(slice(None),) * axis + (slice(0, (taps - 1) * rate + 1),)]
    return w


class _ConvAttributes(TFOp):
    op_name = "Conv"
    channels_last_inputs = (0,)
    channels_last_ranks = (3, 4, 5)

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes(self.op_name, attributes))

    def _check(self, x_rank: int, w_shape) -> tuple[int, ...]:
        check_conv_ranks(self.op_name, x_rank, w_shape, f"of rank {x_rank}")
        return check_kernel_attribute(self.op_name, self.kernel_shape, w_shape[2:])

    def __call__(self, x, w, b=None):
        self._check(x.shape.rank, w.shape.as_list())
        return from_channels_last(self.channels_last(to_channels_last(x), w, b))


class _ConvPlan(NamedTuple):
    lift: bool            # 1-D: run as 2-D over a height of 1
    strides: tuple        # per spatial axis (after lifting)
    dilations: tuple
    sides: tuple          # (begin, end) pads per spatial axis
    mode: str             # "dense", "depthwise" or "grouped"
    dilate: str           # "", "space_to_batch" or "kernel"
    padding: str          # "SAME" (TensorFlow's own split of the pads) or "VALID" (X padded first)
    subsample: bool = False  # a 1x1 kernel with strides: X subsampled first, then a stride-1 convolution


@register("Conv")
class Conv(_ConvAttributes):
    """ONNX Conv: ``Y = conv(X, W) + B``; W is (M, C/group, kernel...)."""

    def channels_last(self, x, w, b=None):
        x, w, b = _common_float(x, w, b)
        plan = self.planned((tuple(x.shape.as_list()), tuple(w.shape.as_list())), self._plan,
                            x.shape.rank, tuple(x.shape.as_list()[1:]), tuple(w.shape.as_list()))
        if plan.lift:
            x, w = tf.expand_dims(x, 1), tf.expand_dims(w, 2)
        if plan.dilate == "kernel":
            w = _dilate_kernel(w, plan.dilations, 2)
        if plan.mode == "depthwise":  # (M, 1, kh, kw) -> (kh, kw, C, M / C): output channel c * mult + j
            channels = x.shape[-1]
            f = tf.transpose(tf.reshape(w, [channels, -1, *w.shape[2:]]), [2, 3, 0, 1])
        else:
            f = tf.transpose(w, [*range(2, w.shape.rank), 1, 0])  # (kernel..., C/group, M)
        if plan.padding == "VALID" or plan.subsample:
            x = pad_sides(x, plan.sides, 1)
        if plan.subsample:
            # The same outputs and gradients as the strided 1x1 convolution, without oneDNN's backward kernel for
            # it, which corrupts memory with 2+ threads on few input channels at odd batch sizes
            # (uxlfoundation/oneDNN#6035: "double free or corruption" training ResNet-18 at batch 3).
            x = x[(slice(None), *(slice(None, None, stride) for stride in plan.strides), slice(None))]
            y = self._convolve(x, f, plan._replace(strides=(1,) * len(plan.strides)), "VALID")
        elif plan.dilate == "space_to_batch":
            y = tf.nn.with_space_to_batch(x, plan.dilations, "VALID",
                                          lambda part, _rank, _padding: self._convolve(part, f, plan, "VALID"))
        else:
            y = self._convolve(x, f, plan, plan.padding)
        if plan.lift:
            y = tf.squeeze(y, 1)
        return y if b is None else tf.nn.bias_add(y, b)

    def _convolve(self, x, f, plan: _ConvPlan, padding):
        strides = [1, *plan.strides, 1]
        if plan.mode == "depthwise":
            return tf.raw_ops.DepthwiseConv2dNative(input=x, filter=f, strides=strides, padding=padding)
        conv = tf.nn.conv2d if x.shape.rank == 4 else tf.nn.conv3d
        if plan.mode == "dense":
            return conv(x, f, strides, padding)
        pieces = zip(tf.split(x, self.group, axis=-1), tf.split(f, self.group, axis=-1))
        return tf.concat([conv(part, weights, strides, padding) for part, weights in pieces], axis=-1)

    def _plan(self, rank: int, x_shape, w_shape) -> _ConvPlan:
        """How to run the convolution for these shapes (channels-last X shape without N)."""
        kernel = self._check(rank, w_shape)
        spatial, channels = x_shape[:-1], x_shape[-1]
        if None in spatial or channels is None:
            raise ShapeError(f"Conv: the TensorFlow framework needs X's spatial and channel sizes, got {x_shape}")
        if channels != w_shape[1] * self.group or w_shape[0] % self.group:
            raise ShapeError(f"Conv: X has {channels} channels but W {tuple(w_shape)} with group={self.group} "
                             f"expects {w_shape[1] * self.group} (and M divisible by group)")
        _, strides, dilations, sides = resolve_pads("Conv", spatial, kernel, self.strides, self.dilations,
                                                    self.pads, self.auto_pad, clamp_same_pads=True)
        lift = len(spatial) == 1
        if lift:
            spatial, kernel = (1, *spatial), (1, *kernel)
            strides, dilations, sides = (1, *strides), (1, *dilations), ((0, 0), *sides)
        mode = "dense" if self.group == 1 else "grouped"
        if self.group == channels and self.group > 1 and len(strides) == 2 and strides[0] == strides[1]:
            mode = "depthwise"  # the CPU depthwise kernels take equal row and column strides only
        dilate = ""
        if any(d > 1 for d in dilations):
            dilate = "space_to_batch" if all(s == 1 for s in strides) else "kernel"
        # Where the pads are TensorFlow's "SAME" ones the kernel pads by itself: measured fastest (oneDNN), faster
        # than a padded copy of X, itself faster than explicit paddings.
        extents = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
        if dilate != "space_to_batch":  # (with_space_to_batch pads by itself: the sides must stay exact)
            sides = without_idle_crops(spatial, sides, extents, strides)
        same = dilate != "space_to_batch" and tuple(sides) == same_sides(spatial, extents, strides)
        padding = "SAME" if same else "VALID"
        subsample = mode == "dense" and all(e == 1 for e in extents) and any(s > 1 for s in strides)
        return _ConvPlan(lift, tuple(strides), tuple(dilations), tuple(sides), mode, dilate, padding, subsample)


@register("ConvTranspose")
class ConvTranspose(_ConvAttributes):
    """ONNX ConvTranspose: W is (C, M/group, kernel...). Output size per axis ``stride * (in - 1) +
    output_padding + (k - 1) * dilation + 1 - pad_begin - pad_end``, or ``output_shape`` (the pads then derived),
    as the reference: TensorFlow's transposed convolution gives the unpadded output, which is then cropped by the
    pads and extended by output_padding zeros."""

    op_name = "ConvTranspose"

    def channels_last(self, x, w, b=None):
        x, w, b = _common_float(x, w, b)
        lift, geometry = self.planned((tuple(x.shape.as_list()), tuple(w.shape.as_list())), self._plan,
                                      x.shape.rank, tuple(x.shape.as_list()[1:]), tuple(w.shape.as_list()))
        if lift:
            x, w = tf.expand_dims(x, 1), tf.expand_dims(w, 2)
        dilations = (1, *geometry.dilations) if lift else geometry.dilations
        strides = (1, *geometry.strides) if lift else geometry.strides
        full = (1, *geometry.full) if lift else geometry.full
        w = _dilate_kernel(w, dilations, 2)  # the CPU backprop kernels take no dilation rates
        f = tf.transpose(w, [*range(2, w.shape.rank), 1, 0])  # (kernel..., M/group, C)
        batch = x.shape[0] if x.shape[0] is not None else tf.shape(x)[0]
        transpose = tf.nn.conv2d_transpose if x.shape.rank == 4 else tf.nn.conv3d_transpose
        per_group = f.shape[-2]

        def convolve(part, weights):
            return transpose(part, weights, tf.stack([batch, *full, per_group]) if isinstance(batch, tf.Tensor)
                             else [batch, *full, per_group], [1, *strides, 1], "VALID")

        if self.group == 1:
            y = convolve(x, f)
        else:
            y = tf.concat([convolve(part, weights) for part, weights in
                           zip(tf.split(x, self.group, axis=-1), tf.split(f, self.group, axis=-1))], axis=-1)
        if lift:
            y = tf.squeeze(y, 1)
        y = pad_sides(y, geometry.sides, 1)
        return y if b is None else tf.nn.bias_add(y, b)

    def _plan(self, rank: int, x_shape, w_shape):
        kernel = self._check(rank, w_shape)
        spatial, channels = x_shape[:-1], x_shape[-1]
        if None in spatial or channels is None:
            raise ShapeError(f"ConvTranspose: the TensorFlow framework needs X's spatial and channel sizes, got "
                             f"{x_shape}")
        if channels != w_shape[0] or channels % self.group:
            raise ShapeError(f"ConvTranspose: X has {channels} channels but W {tuple(w_shape)} expects {w_shape[0]} "
                             f"(divisible by group={self.group})")
        geometry = conv_transpose_geometry(tuple(spatial), kernel, strides=self.strides, dilations=self.dilations,
                                           output_padding=self.output_padding, pads=self.pads,
                                           output_shape=self.output_shape, auto_pad=self.auto_pad)
        return len(spatial) == 1, geometry


@register("Col2Im")
class Col2Im(TFOp):
    """Sum the columns of ``input`` (N, C * prod(block_shape), L) back into an image (N, C, *image_shape): the
    inverse layout of im2col, overlapping blocks added -- one segment sum of every (tap, block) column into its
    pixel of the padded image, then the pads cropped. Differentiable (the reference is not)."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("Col2Im", attributes))

    def __call__(self, columns, image_shape, block_shape):
        check_col2im_ranks(tuple(columns.shape), tuple(image_shape.shape), tuple(block_shape.shape))
        image, block = ints(image_shape, "Col2Im's image_shape"), ints(block_shape, "Col2Im's block_shape")
        shape = tuple(columns.shape.as_list())
        geometry, segments = self.planned((shape, tuple(image), tuple(block)), self._plan, shape, image, block)
        n, dims = shape[0], len(image)
        taps, count = math.prod(block), shape[2]
        # (N, C, taps, L) -> (taps * L, N * C): one row per column entry, summed into its pixel.
        data = tf.transpose(tf.reshape(columns, [n, geometry.channels, taps, count]), [2, 3, 0, 1])
        data = tf.reshape(data, [taps * count, n * geometry.channels])
        image_sums = tf.math.unsorted_segment_sum(data, segments, math.prod(geometry.padded))
        out = tf.reshape(tf.transpose(image_sums), [n, geometry.channels, *geometry.padded])
        pads = geometry.pads
        return pad_sides(out, [(-pads[i], -pads[i + dims]) for i in range(dims)], 2)

    def _plan(self, shape, image, block):
        geometry = col2im_geometry(shape, image, block, self.dilations, self.pads, self.strides)
        # The padded-image pixel of each (tap, block position), taps and blocks in row-major order.
        coords = []
        for axis in range(len(image)):
            tap = np.arange(block[axis]) * geometry.dilations[axis]
            start = np.arange(geometry.blocks[axis]) * geometry.strides[axis]
            coords.append(tap[:, None] + start[None, :])  # (block, blocks) along this axis
        grids = np.ix_(*[np.arange(b) for b in block], *[np.arange(n) for n in geometry.blocks])
        rank = len(image)
        pixel = np.zeros([*block, *geometry.blocks], dtype=np.int64)
        for axis in range(rank):
            along = coords[axis][grids[axis], grids[rank + axis]]
            pixel = pixel * geometry.padded[axis] + along
        return geometry, tf.constant(pixel.reshape(-1), tf.int64)


@register("DeformConv")
class DeformConv(TFOp):
    """ONNX DeformConv (opset 19), N-D: a grouped convolution whose kernel taps sample X at positions moved
    by ``offset`` (N, offset_group * taps * rank, *out) -- per axis, the tap's offsets in order -- with
    multilinear interpolation (zero outside X, ONNX's GridSample with align_corners=1), each sample scaled by
    ``mask`` (N, offset_group * taps, *out; default 1); ``Y = conv + B``. The output's spatial shape is the
    offset's. The reference framework has no DeformConv; this follows ONNX's reference implementation (as the
    PyTorch converter).

    >>> x = tf.reshape(tf.range(4.0), [1, 1, 2, 2])
    >>> DeformConv()(x, tf.ones([1, 1, 1, 1]), tf.fill([1, 2, 2, 2], 0.5)).numpy().tolist()
    [[[[1.5, 1.0], [1.25, 0.75]]]]
    """

    def __init__(self, dilations=None, group: int = 1, kernel_shape=None, offset_group: int = 1, pads=None,
                 strides=None) -> None:
        adopt(self, deform_conv_attributes(ints, dilations, group, kernel_shape, offset_group, pads, strides))

    def __call__(self, x, w, offset, b=None, mask=None):
        x_shape = tuple(x.shape.as_list())
        kernel, strides, dilations, pads, out = deform_conv_plan(
            x_shape, tuple(w.shape.as_list()), tuple(offset.shape.as_list()),
            None if mask is None else tuple(mask.shape.as_list()), self.kernel_shape, self.group, self.offset_group,
            self.strides, self.dilations, self.pads)
        rank, (n, channels) = len(x_shape) - 2, x_shape[:2]
        out_channels, taps = w.shape[0], math.prod(kernel)
        groups, offset_groups = self.group, self.offset_group
        positions = math.prod(out)
        offset = tf.cast(tf.reshape(offset, [n, offset_groups, taps, rank, positions]), x.dtype)
        samples = self._sample(x, offset, kernel, strides, dilations, pads, out)  # (N, og, C / og, taps, P)
        if mask is not None:
            samples = samples * tf.reshape(tf.cast(mask, x.dtype), [n, offset_groups, 1, taps, positions])
        columns = tf.reshape(samples, [n, groups, channels // groups * taps, positions])
        weights = tf.reshape(tf.cast(w, x.dtype), [groups, out_channels // groups, -1])
        y = tf.reshape(tf.einsum("gmk,ngkp->ngmp", weights, columns), [n, out_channels, *out])
        if b is not None:
            y = y + tf.reshape(tf.cast(b, x.dtype), [1, -1] + [1] * rank)
        return y

    @staticmethod
    def _sample(x, offset, kernel, strides, dilations, pads, out):
        """X sampled at every tap of every output position: (N, offset_group, C / offset_group, taps, P)."""
        n, channels = x.shape.as_list()[:2]
        rank, spatial = len(kernel), x.shape.as_list()[2:]
        offset_groups, taps, positions = offset.shape[1], math.prod(kernel), math.prod(out)
        coords = []  # per axis: (N, offset_group, taps, P) sampling coordinates in X
        for a in range(rank):
            grid = deform_tap_grid(kernel, out, strides, dilations, pads, a).reshape(taps, positions)
            coords.append(tf.constant(grid, x.dtype) + offset[:, :, :, a])
        flat = tf.reshape(x, [n, offset_groups, channels // offset_groups, -1])
        lows = [tf.floor(c) for c in coords]
        result = 0
        for corner in itertools.product((0, 1), repeat=rank):
            index, weight, inside = 0, 1, True
            for a, bit in enumerate(corner):
                at = lows[a] + bit
                weight = weight * (1 - tf.abs(coords[a] - at))
                inside = tf.logical_and(inside, tf.logical_and(at >= 0, at <= spatial[a] - 1))
                index = index * spatial[a] + tf.cast(tf.clip_by_value(at, 0, spatial[a] - 1), tf.int64)
            picked = tf.gather(flat, tf.reshape(index, [n, offset_groups, -1]), axis=3, batch_dims=2)
            scale = tf.reshape(weight * tf.cast(inside, x.dtype), [n, offset_groups, 1, -1])
            result = result + picked * scale
        return tf.reshape(result, [n, offset_groups, channels // offset_groups, taps, positions])
