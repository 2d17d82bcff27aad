"""Convolutions as native MXNet operations: Conv on ``Convolution`` and ConvTranspose on ``Deconvolution`` (1-D to
3-D, groups, dilations, ONNX's padding rules resolved by :func:`d5.ops.onnx_semantics.window_sides` and
:func:`~d5.ops.onnx_semantics.conv_transpose_geometry`), Col2Im (``Deconvolution`` by one-hot kernels) and
DeformConv (sampling by ``take``, then per-group matrix products).

MXNet computes in ONNX's layout (NCHW; oneDNN on the CPU, cuDNN on the GPU) with ONNX's weight layouts, so the
weights go to the kernels as they are. Symmetric pads go to the kernel (the common case: a ResNet's and LeNet's
convolutions); asymmetric ones (auto_pad SAME_*, explicit uneven pads) pad X first. A transposed convolution
whose pads and output_padding are MXNet's ``pad`` and ``adj`` runs as one kernel; otherwise the kernel computes
the unpadded output, which is cropped by the pads and extended by output_padding zeros, the bias added after.
Inputs of mixed dtypes compute in the wider one, float16 in float32 (as the reference), cast back.
"""
from __future__ import annotations

import itertools
import math

import mxnet as mx
import numpy as np

from d5.errors import ShapeError, UnsupportedOperatorError
from d5.frameworks.mxnet.operators import MXOp, register
from d5.frameworks.mxnet.operators._helpers import (as_symbol, dtype_of, ints, pad_sides, reshape, resolve_pads,
                                                    shape_of)
from d5.ops.onnx_attributes import adopt, operator_attributes
from d5.ops.onnx_semantics import col2im_geometry, conv_transpose_geometry
from d5.ops.window_checks import (check_conv_inputs, check_conv_transpose_weights, check_kernel_of_weights,
                                  deform_conv_attributes, deform_conv_plan, deform_tap_grid)

_NATIVE_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def _compute_dtypes(op_name: str, *values):
    """(the dtype the kernel computes in, the output's dtype) for these inputs, as the reference: float64 if any
    is float64, else float32; the output keeps the inputs' dtype when they agree."""
    dtypes = [dtype_of(v) for v in values if v is not None]
    for dtype in dtypes:
        if dtype.kind != "f":
            raise ShapeError(f"{op_name}: expected floating-point inputs, got dtype {dtype}; cast the input to "
                             "float32 or float64")
    compute = np.dtype(np.float64) if np.dtype(np.float64) in dtypes else np.dtype(np.float32)
    return compute, (dtypes[0] if len(set(dtypes)) == 1 else compute)


def _cast(dtype, *values):
    return tuple(None if v is None else as_symbol(v, dtype) for v in values)


def _per_channel(b, rank: int):
    return reshape(b, (1, shape_of(b)[0]) + (1,) * (rank - 2))


def _dilate_kernel(w, dilations):
    """``w`` (C, M/group, kernel...) with ``dilation - 1`` zeros between its taps along each spatial axis."""
    for offset, rate in enumerate(dilations):
        if rate == 1:
            continue
        axis = 2 + offset
        shape = list(shape_of(w))
        taps = shape[axis]
        spread = mx.sym.stack(w, *[mx.sym.zeros_like(w)] * (rate - 1), axis=axis + 1)
        shape[axis] = taps * rate
        w = mx.sym.slice_axis(reshape(spread, shape), axis=axis, begin=0, end=(taps - 1) * rate + 1)
    return w


class _ConvAttributes(MXOp):
    op_name = "Conv"

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes(self.op_name, attributes))

    def _check_kernel(self, ws) -> tuple[int, ...]:
        return check_kernel_of_weights(self.op_name, self.kernel_shape, ws)


@register("Conv")
class Conv(_ConvAttributes):
    """ONNX Conv: ``Y = conv(X, W) + B`` on MXNet's ``Convolution``; W is (M, C/group, kernel...)."""

    def __call__(self, x, w, b=None):
        if x is None or w is None:
            raise ShapeError("Conv: expected inputs (X, W) or (X, W, B)")
        xs, ws = shape_of(x), shape_of(w)
        group = int(self.group)
        kernel, m = check_conv_inputs(xs, ws, group, self.kernel_shape, None if b is None else shape_of(b))
        compute, out_dtype = _compute_dtypes("Conv", x, w, b)
        plan = self.planned((xs, ws), self._plan, xs, kernel)
        strides, dilations, sides, pad = plan
        if all(dtype_of(v) == compute for v in (x, w, b) if v is not None):
            x, w, b = as_symbol(x), as_symbol(w), None if b is None else as_symbol(b)
        else:
            x, w, b = _cast(compute, x, w, b)
        if pad is None:
            x, pad = pad_sides(x, sides), (0,) * len(kernel)
        options = dict(kernel=kernel, stride=strides, dilate=dilations, pad=pad, num_filter=m, num_group=group)
        y = mx.sym.Convolution(x, w, no_bias=True, **options) if b is None else \
            mx.sym.Convolution(x, w, b, no_bias=False, **options)
        return y if out_dtype == compute else as_symbol(y, out_dtype)

    def _plan(self, xs, kernel):
        # SAME_* never pads Conv by a negative amount (as the reference, onnx.reference's Conv and TensorFlow).
        _, strides, dilations, sides = resolve_pads("Conv", xs[2:], kernel, self.strides, self.dilations, self.pads,
                                                    self.auto_pad, clamp_same_pads=True)
        pad = _kernel_pad(xs[2:], kernel, strides, dilations, sides)
        return tuple(strides), tuple(dilations), tuple(sides), pad


def _kernel_pad(spatial, kernel, strides, dilations, sides) -> tuple[int, ...] | None:
    """The symmetric pads MXNet's Convolution takes for ``sides`` ((begin, end) per axis), or None: each begin
    non-negative, each end no more than it, and the same windows -- so a stride-2 3x3 convolution with ONNX pads
    (1, 1) on an even size, whose last pad no window reaches (``sides`` (1, 0)), pads in the kernel, not in a copy
    of X."""
    for size, k, stride, dilation, (begin, end) in zip(spatial, kernel, strides, dilations, sides):
        extent = (k - 1) * dilation + 1
        if begin < 0 or end > begin or \
                (size + 2 * begin - extent) // stride != (size + begin + end - extent) // stride:
            return None
    return tuple(begin for begin, _ in sides)


@register("ConvTranspose")
class ConvTranspose(_ConvAttributes):
    """ONNX ConvTranspose on MXNet's ``Deconvolution``: W is (C, M/group, kernel...). Output size per axis
    ``stride * (in - 1) + output_padding + (k - 1) * dilation + 1 - pad_begin - pad_end``, or ``output_shape``
    (the pads then derived, the odd unit at the end for SAME_UPPER, at the beginning otherwise), as the
    reference."""

    op_name = "ConvTranspose"

    def __call__(self, x, w, b=None):
        if x is None or w is None:
            raise ShapeError("ConvTranspose: expected inputs (X, W) or (X, W, B)")
        xs, ws = shape_of(x), shape_of(w)
        if len(xs) not in (3, 4, 5):
            raise UnsupportedOperatorError(
                f"ConvTranspose: 1-D, 2-D and 3-D transposed convolutions (3-D to 5-D X) are implemented, got X of "
                f"shape {xs}")
        group = int(self.group)
        m = check_conv_transpose_weights(xs, ws, group, None if b is None else shape_of(b))
        kernel = self._check_kernel(ws)
        compute, out_dtype = _compute_dtypes("ConvTranspose", x, w, b)
        geometry, pad, adj = self.planned((xs, ws), self._plan, xs, kernel)
        x, w, b = _cast(compute, x, w, b)
        dilations = geometry.dilations
        if len(kernel) == 3 and any(d > 1 for d in dilations):  # 3-D Deconvolution takes no dilate
            w, kernel, dilations = _dilate_kernel(w, dilations), shape_of(_dilate_kernel(w, dilations))[2:], (1,) * 3
        options = dict(kernel=kernel, stride=geometry.strides, dilate=dilations, num_filter=m, num_group=group)
        if pad is not None:
            y = mx.sym.Deconvolution(x, w, no_bias=True, pad=pad, adj=adj, **options) if b is None else \
                mx.sym.Deconvolution(x, w, b, no_bias=False, pad=pad, adj=adj, **options)
        else:
            full = mx.sym.Deconvolution(x, w, no_bias=True, pad=(0,) * len(kernel), adj=(0,) * len(kernel),
                                        **options)
            # The unpadded output grows by output_padding zeros at the end, then loses the pads on both sides.
            y = pad_sides(full, geometry.sides)
            if b is not None:
                y = mx.sym.broadcast_add(y, _per_channel(b, len(xs)))
        return y if out_dtype == compute else as_symbol(y, out_dtype)

    def _plan(self, xs, kernel):
        """The geometry, and MXNet's ``pad`` and ``adj`` giving exactly it (None: crop and pad afterwards)."""
        geometry = conv_transpose_geometry(tuple(xs[2:]), kernel, strides=self.strides, dilations=self.dilations,
                                           output_padding=self.output_padding, pads=self.pads,
                                           output_shape=self.output_shape, auto_pad=self.auto_pad)
        # MXNet's output is full - 2 * pad + adj positions from pad on (zeros past full), adj < stride.
        adj = tuple(out - full + 2 * begin for out, full, begin in zip(geometry.out, geometry.full,
                                                                       geometry.pads_begin))
        if all(0 <= a < s for a, s in zip(adj, geometry.strides)):
            return geometry, tuple(geometry.pads_begin), adj
        return geometry, None, None


@register("Col2Im")
class Col2Im(MXOp):
    """Sum the columns of ``input`` (N, C * prod(block_shape), L) back into an image (N, C, *image_shape): the
    inverse layout of im2col, overlapping blocks added -- the transposed convolution (``Deconvolution``, one group
    per channel) of the blocks by one-hot kernels, one per tap, of the padded image, then the pads cropped. Any
    number of spatial axes MXNet's kernel takes (1 to 3); differentiable (the reference is not)."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("Col2Im", attributes))

    def __call__(self, columns, image_shape, block_shape):
        for value, what, rank in ((columns, "input (N, C * prod(block_shape), L)", 3), (image_shape, "image_shape", 1),
                                  (block_shape, "block_shape", 1)):
            if len(shape_of(value)) != rank:
                raise ShapeError(f"Col2Im: {what} must be a {rank}-D tensor, got shape {shape_of(value)}")
        image, block = ints(image_shape, "Col2Im's image_shape"), ints(block_shape, "Col2Im's block_shape")
        shape = shape_of(columns)
        geometry = col2im_geometry(shape, image, block, self.dilations, self.pads, self.strides)
        dims = len(image)
        if dims > 3:
            raise UnsupportedOperatorError(f"Col2Im: MXNet's kernels take 1 to 3 spatial axes, got image_shape "
                                           f"{image}")
        n, channels, taps = shape[0], geometry.channels, math.prod(block)
        dtype = dtype_of(columns)
        compute = dtype if dtype in _NATIVE_DTYPES else np.dtype(np.float64 if dtype.kind in "iub" else np.float32)
        blocks = reshape(as_symbol(columns, compute), (n, channels * taps, *geometry.blocks))
        # One-hot kernels with the dilation's zeros between their taps (3-D Deconvolution takes no dilate).
        extents = tuple(d * (k - 1) + 1 for d, k in zip(geometry.dilations, block))
        one_hot = np.zeros((taps, 1, *extents), compute)
        for tap, offset in enumerate(itertools.product(*[range(k) for k in block])):
            one_hot[(tap, 0, *(o * d for o, d in zip(offset, geometry.dilations)))] = 1
        one_hot = np.tile(one_hot, (channels,) + (1,) * (dims + 1))
        full = [s * (b - 1) + e for s, b, e in zip(geometry.strides, geometry.blocks, extents)]
        image_sums = mx.sym.Deconvolution(blocks, as_symbol(one_hot), kernel=extents, stride=geometry.strides,
                                          pad=(0,) * dims, num_filter=channels, num_group=channels, no_bias=True)
        pads = geometry.pads
        out = pad_sides(image_sums, [(-pads[i], geometry.padded[i] - full[i] - pads[i + dims]) for i in range(dims)])
        if dtype == compute:
            return out
        if dtype.kind in "iub":
            out = mx.sym.round(out)
        return as_symbol(out, dtype)


@register("DeformConv")
class DeformConv(MXOp):
    """ONNX DeformConv (opset 19), N-D: a grouped convolution whose kernel taps sample X at positions moved
    by ``offset`` (N, offset_group * taps * rank, *out) -- per axis, the tap's offsets in order -- with
    multilinear interpolation (zero outside X, ONNX's GridSample with align_corners=1), each sample scaled by
    ``mask`` (N, offset_group * taps, *out; default 1); ``Y = conv + B``. The output's spatial shape is the
    offset's. The samples are gathered with ``take`` (its gradient scatters back into X), the convolution is one
    ``batch_dot`` per group. MXNet's own DeformableConvolution has no CPU gradient, hence this. The reference
    framework has no DeformConv; this follows ONNX's reference implementation (as the TensorFlow and PyTorch
    converters).

    >>> import numpy as np
    >>> from d5.frameworks.mxnet.custom_op import native_op
    >>> x, w = np.arange(4.0, dtype=np.float32).reshape(1, 1, 2, 2), np.ones((1, 1, 1, 1), np.float32)
    >>> offset = np.full((1, 2, 2, 2), 0.5, np.float32)          # 1x1 taps moved by half a pixel
    >>> native_op("DeformConv").forward([x, w, offset]).tolist()
    [[[[1.5, 1.0], [1.25, 0.75]]]]
    """

    def __init__(self, dilations=None, group: int = 1, kernel_shape=None, offset_group: int = 1, pads=None,
                 strides=None) -> None:
        adopt(self, deform_conv_attributes(lambda values: [int(v) for v in np.asarray(values).reshape(-1)],
                                           dilations, group, kernel_shape, offset_group, pads, strides))

    def __call__(self, x, w, offset, b=None, mask=None):
        xs, ws, os_ = shape_of(x), shape_of(w), shape_of(offset)
        kernel, strides, dilations, pads, out = deform_conv_plan(
            xs, ws, os_, None if mask is None else shape_of(mask), self.kernel_shape, self.group, self.offset_group,
            self.strides, self.dilations, self.pads)
        rank, (n, channels) = len(xs) - 2, xs[:2]
        out_channels, taps = ws[0], math.prod(kernel)
        groups, offset_groups = self.group, self.offset_group
        dtype = dtype_of(x)
        x = as_symbol(x)
        positions = math.prod(out)
        offset = reshape(as_symbol(offset, dtype), (n, offset_groups, taps, rank, positions))
        samples = self._sample(x, offset, kernel, strides, dilations, pads, out)  # (N, og, C / og, taps, P)
        if mask is not None:
            samples = mx.sym.broadcast_mul(samples, reshape(as_symbol(mask, dtype),
                                                            (n, offset_groups, 1, taps, positions)))
        per_group = channels // groups * taps
        # (G, C/G * taps, N * P) columns, (G, M/G, C/G * taps) weights: one product per group.
        columns = mx.sym.transpose(reshape(samples, (n, groups, per_group, positions)), axes=(1, 2, 0, 3))
        columns = reshape(columns, (groups, per_group, n * positions))
        weights = reshape(as_symbol(w, dtype), (groups, out_channels // groups, per_group))
        y = reshape(mx.sym.batch_dot(weights, columns), (groups, out_channels // groups, n, positions))
        y = reshape(mx.sym.transpose(y, axes=(2, 0, 1, 3)), (n, out_channels, *out))
        if b is not None:
            y = mx.sym.broadcast_add(y, _per_channel(as_symbol(b, dtype), len(xs)))
        return y

    @staticmethod
    def _sample(x, offset, kernel, strides, dilations, pads, out):
        """X sampled at every tap of every output position: (N, offset_group, C / offset_group, taps, P)."""
        n, channels = shape_of(x)[:2]
        spatial = shape_of(x)[2:]
        dtype = dtype_of(x)
        rank, size = len(kernel), math.prod(spatial)
        _, offset_groups, taps, _, positions = shape_of(offset)
        per_group = channels // offset_groups
        coords = []  # per axis: (N, offset_group, taps, P) sampling coordinates in X
        for a in range(rank):
            grid = deform_tap_grid(kernel, out, strides, dilations, pads, a)
            grid = grid.reshape(1, 1, taps, positions).astype(dtype)
            along = reshape(mx.sym.slice_axis(offset, axis=3, begin=a, end=a + 1), (n, offset_groups, taps, positions))
            coords.append(mx.sym.broadcast_add(along, as_symbol(grid)))
        # X as rows of (N * offset_group * S, C / offset_group): a sample is a row, gathered by its flat index.
        rows = reshape(mx.sym.transpose(reshape(x, (n, offset_groups, per_group, size)), axes=(0, 1, 3, 2)),
                       (n * offset_groups * size, per_group))
        first_row = as_symbol((np.arange(n * offset_groups, dtype=np.float64) * size).reshape(n, offset_groups, 1, 1))
        lows = [mx.sym.BlockGrad(mx.sym.floor(c)) for c in coords]
        result = None
        for corner in itertools.product((0, 1), repeat=rank):
            index, weight, inside = None, None, None
            for a, bit in enumerate(corner):
                at = lows[a] + bit
                term = 1 - mx.sym.abs(coords[a] - at)
                weight = term if weight is None else weight * term
                fits = (at >= 0) * (at <= spatial[a] - 1)
                inside = fits if inside is None else inside * fits
                clipped = mx.sym.cast(mx.sym.clip(at, 0, spatial[a] - 1), "float64")
                index = clipped if index is None else index * spatial[a] + clipped
            flat = mx.sym.BlockGrad(reshape(mx.sym.broadcast_add(index, first_row), (n * offset_groups * taps *
                                                                                     positions,)))
            picked = reshape(mx.sym.take(rows, flat, axis=0), (n, offset_groups, taps * positions, per_group))
            picked = mx.sym.transpose(picked, axes=(0, 1, 3, 2))  # (N, og, C / og, taps * P)
            scale = reshape(weight * mx.sym.BlockGrad(inside), (n, offset_groups, 1, taps * positions))
            term = mx.sym.broadcast_mul(picked, scale)
            result = term if result is None else result + term
        return reshape(result, (n, offset_groups, per_group, taps, positions))
