"""Image operators as native MXNet operations: Resize (opsets 13+, and Resize11 for opsets 10-12), GridSample,
AffineGrid, CenterCropPad, RoiAlign (and RoiAlign10 for opsets 10-15) and NonMaxSuppression.

Resize is separable and its geometry depends on shapes and attributes only: the framework-neutral
:func:`d5.ops.onnx_semantics.resize_plan` / :func:`~d5.ops.onnx_semantics.resize_taps` give, per resized axis, the
input positions each output reads and their weights, applied here as one ``take`` along the axis and a weighted sum
(``take``'s gradient, a scatter-add, is the reference's transposed matrix). MXNet's ``BilinearResize2D`` and
``contrib.BilinearResize2D`` are not used: their coordinate rules are not ONNX's. Its roi/scales/sizes must be known
while composing (:attr:`Resize.value_inputs`). GridSample follows ONNX's reference (onnx.reference): the taps of
:func:`~d5.ops.onnx_semantics.grid_sample_taps` computed with symbol operations (its cubic kernel and reflection run
unchanged on a namespace of MXNet symbol functions) and gathered with ``take`` (MXNet's ``GridGenerator`` /
``BilinearSampler`` have neither ONNX's coordinates nor its padding modes). RoiAlign samples the same way
(``contrib.ROIAlign`` has neither ``half_pixel`` nor the max mode); with the adaptive sampling grid
(``sampling_ratio=0``) the number of samples depends on the regions' values, so it reads rois as a value
(:attr:`RoiAlign.value_inputs`; regions computed in the network make it run node by node).

NonMaxSuppression's output length depends on the data, which no MXNet symbol can declare: it reads boxes and scores
as values (:attr:`NonMaxSuppression.value_inputs`; a network computing them runs node by node) and runs its greedy
selection imperatively on NDArrays, all batch entries and classes at once, one step per score rank.
"""
from __future__ import annotations

import itertools
import math
import types

import mxnet as mx
import numpy as np

from d5.frameworks.mxnet.operators import MXOp, register
from d5.frameworks.mxnet.operators._helpers import (Symbol, ValueNeededWhileTracing, as_symbol, dtype_of, ints,
                                                   reshape, shape_of, static)
from d5.frameworks.mxnet.tensors import to_ndarray
from d5.ops.onnx_attributes import adopt, operator_attributes
from d5.ops.onnx_semantics import cubic_kernel, reflect_coordinates
from d5.ops.sequence_plans import (affine_grid_base, center_crop_pad_axes, center_crop_pad_plan, check_affine_grid,
                                   check_at_least_1d, check_grid_sample_shapes, check_iou_threshold, check_nms_dtypes,
                                   check_nms_shapes, check_roi_align_rois, check_roi_align_x, check_roi_batch_indices,
                                   resize_host_value, resize_inputs, resize_steps, row_major_strides,
                                   single_value_present, value_key)

#: The array namespace onnx_semantics' cubic_kernel and reflect_coordinates need, on MXNet symbols.
_MX = types.SimpleNamespace(abs=mx.sym.abs, where=mx.sym.where, zeros_like=mx.sym.zeros_like, floor=mx.sym.floor,
                            full_like=lambda x, value: mx.sym.zeros_like(x) + float(value))


def _compute_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype interpolation runs in: float64 for float64 and integer inputs, float32 otherwise."""
    if dtype in (np.float32, np.float64):
        return np.dtype(dtype)
    return np.dtype(np.float32) if dtype.kind == "f" else np.dtype(np.float64)


def _round_half_even(x):
    """``x`` rounded to the nearest integer, ties to even (NumPy's rint; MXNet's ``rint`` rounds ties down)."""
    low = mx.sym.floor(x)
    rest = x - low
    odd = low - mx.sym.floor(low * 0.5) * 2.0  # 1 where low is odd
    return mx.sym.where(rest > 0.5, low + 1.0, mx.sym.where(rest < 0.5, low, low + odd))


def _cast_like(values, dtype: np.dtype):
    """Interpolated ``values`` in the input's ``dtype``: integers rounded (half to even) and saturated."""
    if dtype.kind == "f":
        return values if dtype_of(values) == dtype else mx.sym.cast(values, dtype.name)
    if dtype == np.bool_:
        return mx.sym.cast(values != 0.0, "bool")
    info = np.iinfo(dtype)
    return mx.sym.cast(mx.sym.clip(_round_half_even(values), float(info.min), float(info.max)), dtype.name)


def _host(value, what: str) -> np.ndarray | None:
    """A small shape-like input (roi, scales, sizes) as a NumPy array; None when absent or empty. It must be known
    while composing: the taps are planned from it."""
    if value is None or math.prod(shape_of(value)) == 0:
        return None
    known = static(value)
    if known is None:
        raise ValueNeededWhileTracing(f"Resize: the MXNet framework needs {what} as a value known while tracing, "
                                      "not a tensor computed from the data")
    return resize_host_value(known)


def _along(values: np.ndarray, axis: int, rank: int) -> np.ndarray:
    """A 1-D ``values`` shaped to broadcast along ``axis`` of a rank-``rank`` tensor."""
    return np.reshape(values, [-1 if k == axis else 1 for k in range(rank)])


# ------------------------------------------------------------------------------------------------- Resize

@register("Resize", since=13)  # opsets 10-12: Resize11
class Resize(MXOp):
    """Resize ``X`` by ``scales`` or to ``sizes`` (inputs: X, roi, scales, sizes; opset 10: X, scales)."""

    #: Opsets 10-12 (Resize11) also accept coordinate_transformation_mode 'tf_half_pixel_for_nn'.
    legacy_modes = False
    #: The inputs read as values while composing (roi, scales, sizes; opset 10's scales is input 1).
    value_inputs = (1, 2, 3)

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("Resize", attributes))

    def __call__(self, x, *rest):
        shape = shape_of(x)
        check_at_least_1d("Resize", "X", len(shape), shape)
        given, opset10 = resize_inputs(rest)  # opset 10: (X, scales), asymmetric coordinates
        roi, scales, sizes = (_host(value, what) for value, what in zip(given, ("roi", "scales", "sizes")))
        key = (shape, value_key(roi), value_key(scales), value_key(sizes), opset10)
        steps = self.planned(key, resize_steps, self, shape, roi, scales, sizes, opset10)
        if not steps:
            return mx.sym.identity(as_symbol(x))
        dtype = dtype_of(x)
        compute = _compute_dtype(dtype)
        result = as_symbol(x, compute)
        for axis, index, weights, outside in steps:
            result = _apply_taps(result, axis, index, weights, self.mode == "nearest", compute)
            if outside is not None:
                mask = as_symbol(_along(outside, axis, len(shape)))
                fill = as_symbol(np.full((1,) * len(shape), self.extrapolation_value, compute))
                result = mx.sym.np.where(mask.as_np_ndarray(), fill.as_np_ndarray(),
                                         result.as_np_ndarray()).as_nd_ndarray()
        return _cast_like(result, dtype)


def _apply_taps(x, axis: int, index: np.ndarray, weights: np.ndarray, nearest: bool, dtype: np.dtype):
    """Output ``o`` along ``axis`` is ``sum_t weights[o, t] * x[index[o, t]]`` (the resize_taps layout)."""
    rank = len(shape_of(x))
    if nearest:  # one tap of weight 1 per row (0 where exclude_outside removed it): a plain take
        rows = np.arange(index.shape[0])
        column = weights.argmax(axis=1)
        out = mx.sym.take(x, as_symbol(index[rows, column].astype(np.int64)), axis=axis)
        factor = weights[rows, column]
        if not (factor == 1).all():
            out = mx.sym.broadcast_mul(out, as_symbol(_along(factor, axis, rank).astype(dtype)))
        return out
    out_len, taps = index.shape
    gathered = mx.sym.take(x, as_symbol(index.astype(np.int64)), axis=axis)  # x.shape[:axis] + (out, taps) + ...
    weights = weights.reshape((out_len, taps) + (1,) * (rank - axis - 1)).astype(dtype)
    return mx.sym.sum(mx.sym.broadcast_mul(gathered, as_symbol(weights)), axis=axis + 1)


@register("Resize", since=1)
class Resize11(Resize):
    """Resize of opsets 10-12: opset 10 takes (X, scales) with asymmetric coordinates; opset 11 adds roi and
    the mode ``tf_half_pixel_for_nn`` (removed at opset 13)."""

    legacy_modes = True


# --------------------------------------------------------------------------------------------- GridSample

def _grid_taps(grid, size: int, *, align_corners: bool, mode: str, padding_mode: str):
    """:func:`d5.ops.onnx_semantics.grid_sample_taps` on MXNet symbols: the (index, weight) taps of the normalized
    coordinates ``grid`` along one axis of ``size`` pixels (indices as exact integers of the compute dtype)."""
    if align_corners:
        coordinate, low, high = (grid + 1.0) / 2.0 * float(size - 1), 0.0, size - 1.0
    else:
        coordinate, low, high = ((grid + 1.0) * float(size) - 1.0) / 2.0, -0.5, size - 0.5
    if mode == "nearest":
        coordinate = _round_half_even(coordinate)  # as onnx.reference's rint
    if padding_mode == "border":
        outside = (coordinate < low) + (coordinate > high)
        coordinate = mx.sym.where(outside, mx.sym.clip(coordinate, 0.0, size - 1.0), coordinate)
    elif padding_mode == "reflection":
        coordinate = reflect_coordinates(coordinate, low, high, _MX)
    if mode == "nearest":
        taps = [(coordinate, mx.sym.ones_like(coordinate))]
    else:
        base = mx.sym.floor(coordinate)
        t = coordinate - base
        if mode == "linear":
            taps = [(base, 1.0 - t), (base + 1.0, t)]
        else:
            taps = [(base + float(k), cubic_kernel(t - float(k), -0.75, _MX)) for k in (-1, 0, 1, 2)]
    padded = []
    for index, weight in taps:
        if padding_mode == "zeros":
            weight = weight * ((index >= 0.0) * (index < float(size)))
        elif padding_mode == "reflection":  # truncated toward zero, as the helper's trunc
            index = mx.sym.trunc(reflect_coordinates(index, low, high, _MX))
        padded.append((mx.sym.clip(index, 0.0, size - 1.0), weight))
    return padded


@register("GridSample")
class GridSample(MXOp):
    """Sample ``X`` (N, C, *spatial) at the normalized coordinates of ``grid`` (N, *out, ndim), last axis in
    (x, y[, z]) order, with ``mode`` nearest / linear / cubic (opset 16: bilinear / bicubic), as
    onnx.reference: a coordinate outside the image is moved in by ``padding_mode`` (border: clamped,
    reflection: mirrored), then every tap outside reads 0 (zeros), the edge (border) or its mirror image."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("GridSample", attributes))

    def __call__(self, x, grid):
        shape, grid_shape = shape_of(x), shape_of(grid)
        check_grid_sample_shapes(shape, grid_shape)
        n, channels, spatial = shape[0], shape[1], shape[2:]
        dtype = dtype_of(x)
        compute = _compute_dtype(dtype)
        grid = as_symbol(grid, compute)
        out_shape = tuple(grid_shape[1:-1])
        ndim = len(spatial)
        coordinates = mx.sym.split(grid, num_outputs=ndim, axis=-1, squeeze_axis=True) if ndim > 1 else \
            [reshape(grid, grid_shape[:-1])]
        # grid's last axis is (x, y, z): the spatial axes in reverse order.
        per_axis = [_grid_taps(coordinates[ndim - 1 - axis], size, align_corners=self.align_corners,
                               mode=self.mode, padding_mode=self.padding_mode)
                    for axis, size in enumerate(spatial)]
        strides = row_major_strides(spatial)
        pixels = math.prod(spatial)
        flat = reshape(mx.sym.transpose(as_symbol(x, compute), axes=(0,) + tuple(range(2, ndim + 2)) + (1,)),
                       (n * pixels, channels))
        first = as_symbol((np.arange(n) * pixels).reshape((n,) + (1,) * len(out_shape)).astype(compute))
        out = None
        for combination in itertools.product(*per_axis):
            position = combination[0][0] * float(strides[0])
            for (index, _), stride in zip(combination[1:], strides[1:]):
                position = position + index * float(stride)
            weight = combination[0][1]
            for _, w in combination[1:]:
                weight = weight * w
            values = mx.sym.take(flat, mx.sym.broadcast_add(position, first), axis=0)  # (n, *out, channels)
            term = mx.sym.broadcast_mul(values, mx.sym.expand_dims(weight, axis=-1))
            out = term if out is None else out + term
        out = mx.sym.transpose(out, axes=(0, ndim + 1) + tuple(range(1, ndim + 1)))
        return _cast_like(out, dtype)


# -------------------------------------------------------------------------------------------- AffineGrid

@register("AffineGrid")
class AffineGrid(MXOp):
    """The GridSample grid of the affine maps ``theta``: (N, 2, 3) -> (N, H, W, 2) for ``size`` (N, C, H, W),
    (N, 3, 4) -> (N, D, H, W, 3) for (N, C, D, H, W); differentiable in theta (one ``dot`` with the constant
    homogeneous coordinates)."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("AffineGrid", attributes))

    def __call__(self, theta, size):
        size = ints(size, "AffineGrid's size")
        ndim = check_affine_grid(size, shape_of(theta))
        spatial = tuple(size[2:])
        base = self.planned(spatial, affine_grid_base, spatial, self.align_corners)
        dtype = dtype_of(theta)
        grid = mx.sym.dot(as_symbol(theta), as_symbol(base.T.astype(dtype)))  # (N, ndim, points)
        return reshape(mx.sym.swapaxes(grid, 1, 2), (size[0],) + spatial + (ndim,))


@register("CenterCropPad")
class CenterCropPad(MXOp):
    """Center-crop or zero-pad ``input_data`` to ``shape`` along ``axes`` (default: all); an odd difference
    puts the extra element at the end. A ``slice`` and a constant ``pad``."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("CenterCropPad", attributes))

    def __call__(self, x, shape):
        have_shape = shape_of(x)
        rank = len(have_shape)
        check_at_least_1d("CenterCropPad", "input_data", rank, have_shape)
        target = ints(shape, "CenterCropPad's shape")
        crops, pads, _ = center_crop_pad_plan(have_shape, target, center_crop_pad_axes(self.axes, rank))
        begin = [None if crop is None else crop[0] for crop in crops]
        end = [None if crop is None else crop[1] for crop in crops]
        x = as_symbol(x)
        if any(b is not None for b in begin):
            x = mx.sym.slice(x, begin=tuple(begin), end=tuple(end))
        if any(p for pair in pads for p in pair):
            return mx.sym.np.pad(x.as_np_ndarray(), tuple(pads), mode="constant").as_nd_ndarray()
        return mx.sym.identity(x)


# ---------------------------------------------------------------------------------------------- RoiAlign

def _sample_axis(start, bin_size, bins: int, samples: int, size: int):
    """Bilinear sampling along one axis of RoiAlign for every region on a fixed grid of ``samples`` per bin
    (float64 (R, 1, 1) symbols ``start`` and ``bin_size``): for the ``bins * samples`` points, the low and high pixel
    indices (exact float64 integers) and their weights (zero for points outside ``[-1, size]``), as onnxruntime
    computes them. Shapes (R, bins * samples)."""
    steps = as_symbol(np.arange(bins, dtype=np.float64).reshape(1, bins, 1))
    cells = as_symbol((np.arange(samples, dtype=np.float64) + 0.5).reshape(1, 1, samples))
    points = mx.sym.broadcast_add(mx.sym.broadcast_add(start, mx.sym.broadcast_mul(steps, bin_size)),
                                  mx.sym.broadcast_mul(cells, bin_size) / float(samples))
    points = mx.sym.reshape(points, shape=(0, -1))
    keep = (points >= -1.0) * (points <= float(size))
    points = mx.sym.maximum(points, 0.0)
    low = mx.sym.floor(points)  # truncation: the points are >= 0
    at_edge = low >= float(size - 1)
    low = mx.sym.where(at_edge, mx.sym.zeros_like(low) + float(size - 1), low)
    high = mx.sym.where(at_edge, low, low + 1.0)
    points = mx.sym.where(at_edge, low, points)
    frac = points - low
    return low, high, (1.0 - frac) * keep, frac * keep


def _sample_axis_known(start, bin_size, grid, bins: int, samples: int, size: int):
    """:func:`_sample_axis` for regions known while composing (NumPy float64 (R,) ``start``, ``bin_size`` and
    ``grid``, each region's own sample count per bin; ``samples`` >= every grid): the samples past a region's grid
    weigh 0."""
    steps = np.arange(bins, dtype=np.float64)[None, :, None]
    cells = np.arange(samples, dtype=np.float64)[None, None, :]
    start, bin_size, grid = start[:, None, None], bin_size[:, None, None], grid[:, None, None]
    # A region with no samples (grid 0) divides by 1 instead: its points are masked, and must stay finite.
    points = start + steps * bin_size + (cells + 0.5) * bin_size / np.maximum(grid, 1.0)
    keep = ((points >= -1.0) & (points <= size) & (cells < grid)).reshape(len(start), -1)
    points = np.maximum(points.reshape(len(start), -1), 0.0)
    low = np.floor(points)
    at_edge = low >= size - 1
    low = np.where(at_edge, size - 1.0, low)
    high = np.where(at_edge, low, low + 1.0)
    frac = np.where(at_edge, low, points) - low
    return low, high, (1.0 - frac) * keep, frac * keep


@register("RoiAlign", since=16)  # opsets 10-15: RoiAlign10
class RoiAlign(MXOp):
    """Pool each region ``rois[r] = [x1, y1, x2, y2]`` (times ``spatial_scale``) of image ``batch_indices[r]``
    into an ``output_height x output_width`` grid of bins, each the average (or max) of bilinear samples on a
    ``sampling_ratio`` grid, as onnxruntime; ``half_pixel`` shifts coordinates by -0.5. The adaptive grid
    (``sampling_ratio=0``, ``ceil(roi_size / output_size)`` samples) needs the regions as values
    (:attr:`value_inputs`): every region is then sampled on the largest region's grid, the extra samples weighted 0
    (masked for max)."""

    #: The opset whose RoiAlign attributes (and defaults) this version takes.
    since = 16
    #: The adaptive grid reads rois as a value while composing.
    value_inputs = (1,)

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("RoiAlign", attributes, opset=self.since))

    def __call__(self, x, rois, batch_indices):
        shape = shape_of(x)
        check_roi_align_x(len(shape), shape)
        roi_shape = shape_of(rois)
        check_roi_align_rois(roi_shape, shape_of(batch_indices))
        n, channels, height, width = shape
        images = static(batch_indices)
        if images is not None:
            check_roi_batch_indices(images, n)
        out_h, out_w = self.output_height, self.output_width
        count = roi_shape[0]
        dtype = dtype_of(x)
        if count == 0:
            return mx.sym.np.zeros((0, channels, out_h, out_w), dtype=dtype.name).as_nd_ndarray()
        if self.sampling_ratio > 0:
            samples_h = samples_w = self.sampling_ratio
            taps = self._fixed_taps(rois, count, height, width)
            counts = None
        else:
            known = static(rois)
            if known is None:
                raise ValueNeededWhileTracing("RoiAlign: the MXNet framework needs rois as a value known while "
                                              "tracing for the adaptive sampling grid (sampling_ratio=0)")
            taps, counts, samples_h, samples_w = self._adaptive_taps(known, height, width)
        compute = _compute_dtype(dtype)
        flat = reshape(mx.sym.transpose(as_symbol(x, compute), axes=(0, 2, 3, 1)), (n * height * width, channels))
        base = mx.sym.reshape(as_symbol(batch_indices, np.float64) * float(height * width), shape=(count, 1, 1))
        (y_low, y_high, wy_low, wy_high), (x_low, x_high, wx_low, wx_high) = taps
        corners = []
        for ys, wy in ((y_low, wy_low), (y_high, wy_high)):
            for xs, wx in ((x_low, wx_low), (x_high, wx_high)):
                position = mx.sym.broadcast_add(mx.sym.broadcast_add(base, mx.sym.expand_dims(ys * float(width), 2)),
                                                mx.sym.expand_dims(xs, 1))
                values = mx.sym.take(flat, position, axis=0)                      # (R, Sy, Sx, C)
                weight = mx.sym.broadcast_mul(mx.sym.expand_dims(wy, 2), mx.sym.expand_dims(wx, 1))
                corners.append(mx.sym.broadcast_mul(values, mx.sym.expand_dims(mx.sym.cast(weight, compute.name), 3)))
        grouped = (count, out_h, samples_h, out_w, samples_w, channels)
        if self.mode == "avg":
            total = mx.sym.sum(mx.sym.reshape(corners[0] + corners[1] + corners[2] + corners[3], shape=grouped),
                               axis=(2, 4))
            if counts is None:
                pooled = total / float(samples_h * samples_w)
            else:  # a region without samples pools to 0
                present, total_samples = counts[0], counts[1] * counts[2]
                scale = np.where(present, 1.0 / np.maximum(total_samples, 1.0), 0.0).reshape(count, 1, 1, 1)
                pooled = mx.sym.broadcast_mul(total, as_symbol(scale.astype(compute)))
        else:  # the max of the weighted corner terms, as onnxruntime, over the region's own samples
            best = mx.sym.maximum(mx.sym.maximum(corners[0], corners[1]), mx.sym.maximum(corners[2], corners[3]))
            if counts is not None:
                inside = self._inside(counts, samples_h, samples_w)
                best = mx.sym.np.where(as_symbol(inside).as_np_ndarray(), best.as_np_ndarray(),
                                       as_symbol(np.full((1, 1, 1, 1), -np.inf, compute)).as_np_ndarray()
                                       ).as_nd_ndarray()
            pooled = mx.sym.max(mx.sym.reshape(best, shape=grouped), axis=(2, 4))
            if counts is not None:
                pooled = mx.sym.np.where(as_symbol(counts[0].reshape(count, 1, 1, 1)).as_np_ndarray(),
                                         pooled.as_np_ndarray(),
                                         as_symbol(np.zeros((1, 1, 1, 1), compute)).as_np_ndarray()).as_nd_ndarray()
        return _cast_like(mx.sym.transpose(pooled, axes=(0, 3, 1, 2)), dtype)

    def _regions(self, boxes):
        """x1, y1, bin_h, bin_w of every region (NumPy float64 (R,) values, or (R, 1) symbols)."""
        offset = 0.5 if self.half_pixel else 0.0
        maximum = np.maximum if isinstance(boxes, np.ndarray) else mx.sym.maximum
        if isinstance(boxes, np.ndarray):
            x1, y1, x2, y2 = (boxes.astype(np.float64) * self.spatial_scale - offset).T
        else:
            parts = mx.sym.split(boxes * float(self.spatial_scale) - offset, num_outputs=4, axis=1)
            x1, y1, x2, y2 = (parts[i] for i in range(4))
        roi_w, roi_h = x2 - x1, y2 - y1
        if not self.half_pixel:
            roi_w, roi_h = maximum(roi_w, 1.0), maximum(roi_h, 1.0)
        return x1, y1, roi_h / float(self.output_height), roi_w / float(self.output_width), roi_h, roi_w

    def _fixed_taps(self, rois, count, height, width):
        x1, y1, bin_h, bin_w, _, _ = self._regions(as_symbol(rois, np.float64))

        def column(v):
            return mx.sym.reshape(v, shape=(count, 1, 1))

        return (_sample_axis(column(y1), column(bin_h), self.output_height, self.sampling_ratio, height),
                _sample_axis(column(x1), column(bin_w), self.output_width, self.sampling_ratio, width))

    def _adaptive_taps(self, rois, height, width):
        x1, y1, bin_h, bin_w, roi_h, roi_w = self._regions(np.asarray(rois))
        # ceil(roi / bins), as the reference; a region of no positive size has no samples (its bins stay 0)
        grid_h = np.ceil(roi_h / self.output_height)
        grid_w = np.ceil(roi_w / self.output_width)
        samples_h, samples_w = max(int(grid_h.max()), 1), max(int(grid_w.max()), 1)
        taps = [[as_symbol(v) for v in _sample_axis_known(y1, bin_h, grid_h, self.output_height, samples_h, height)],
                [as_symbol(v) for v in _sample_axis_known(x1, bin_w, grid_w, self.output_width, samples_w, width)]]
        return taps, ((grid_h > 0) & (grid_w > 0), grid_h, grid_w), samples_h, samples_w

    def _inside(self, counts, samples_h, samples_w):
        """(R, out_h * samples_h, out_w * samples_w, 1) booleans: the samples inside each region's own grid."""
        _, grid_h, grid_w = counts
        inside_h = np.tile(np.arange(samples_h)[None, None, :] < grid_h[:, None, None], (1, self.output_height, 1))
        inside_w = np.tile(np.arange(samples_w)[None, None, :] < grid_w[:, None, None], (1, self.output_width, 1))
        inside = inside_h.reshape(len(grid_h), -1)[:, :, None] & inside_w.reshape(len(grid_w), -1)[:, None, :]
        return inside[..., None]


@register("RoiAlign", since=1)
class RoiAlign10(RoiAlign):
    """RoiAlign of opsets 10-15: no pixel shift (the later attribute's 'output_half_pixel')."""

    since = 10


# ------------------------------------------------------------------------------------- NonMaxSuppression

@register("NonMaxSuppression")
class NonMaxSuppression(MXOp):
    """Greedy per-batch, per-class box selection (rows ``[batch, class, box]``, int64), with onnxruntime's
    decisions as the reference: candidates by descending score (ties by box index: a stable ``argsort``), IoU in
    float32 with onnxruntime's formula, boxes of zero area neither suppress nor are suppressed. Computed on
    NDArrays from the inputs' values (the output's length depends on them), returned as a NumPy value."""

    #: Every input is read as a value: the selection decides the output's shape.
    value_inputs = (0, 1, 2, 3, 4)

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("NonMaxSuppression", attributes))

    @staticmethod
    def _optional(value, what: str, kind, default):
        """A scalar input as a Python number; ``default`` if absent or empty."""
        if value is None or not single_value_present("NonMaxSuppression", what, math.prod(shape_of(value)),
                                                     shape_of(value)):
            return default
        known = static(value)
        if known is None:
            raise ValueNeededWhileTracing(f"NonMaxSuppression: the MXNet framework needs {what} as a value known "
                                          "while tracing")
        return kind(np.asarray(known).reshape(-1)[0])

    def _corners(self, boxes: mx.nd.NDArray) -> mx.nd.NDArray:
        """(..., 4) float32 boxes as ``[x_min, y_min, x_max, y_max]`` (center boxes are not flipped)."""
        a, b, c, d = mx.nd.split(boxes, num_outputs=4, axis=-1, squeeze_axis=True)
        if self.center_point_box:
            return mx.nd.stack(a - c / 2, b - d / 2, a + c / 2, b + d / 2, axis=-1)
        y1, x1, y2, x2 = a, b, c, d
        return mx.nd.stack(mx.nd.minimum(x1, x2), mx.nd.minimum(y1, y2), mx.nd.maximum(x1, x2),
                           mx.nd.maximum(y1, y2), axis=-1)

    def __call__(self, boxes, scores, max_output_boxes_per_class=None, iou_threshold=None, score_threshold=None):
        score_shape = shape_of(scores)
        check_nms_shapes(shape_of(boxes), score_shape)
        check_nms_dtypes(dtype_of(boxes), dtype_of(scores))
        max_boxes = max(self._optional(max_output_boxes_per_class, "max_output_boxes_per_class (input 2)", int, 0), 0)
        limit = self._optional(iou_threshold, "iou_threshold (input 3)", np.float32, np.float32(0))
        check_iou_threshold(limit)
        score_limit = self._optional(score_threshold, "score_threshold (input 4)", np.float32, None)
        if isinstance(boxes, Symbol) or isinstance(scores, Symbol):
            raise ValueNeededWhileTracing("NonMaxSuppression: its output's length depends on the boxes and scores, "
                                          "which the MXNet framework needs as values known while tracing")
        batches, classes, count = score_shape
        if not max_boxes or not batches * classes * count:
            return np.zeros((0, 3), np.int64)
        kept, order = self._select(np.asarray(boxes, np.float32), np.asarray(scores, np.float32), max_boxes, limit,
                                   score_limit)
        rows, ranks = np.nonzero(kept)  # row-major: per (batch, class), in selection (rank) order
        return np.stack([rows // classes, rows % classes, order[rows, ranks]], axis=1).astype(np.int64)

    @staticmethod
    def _order(scores: mx.nd.NDArray) -> mx.nd.NDArray:
        """Each row's indices by descending score, equal scores by index. MXNet's ``argsort`` is not stable: the
        rows are sorted once by score, then by (the rank of the score's value, the index), keys all distinct."""
        rows, count = scores.shape
        order = mx.nd.argsort(scores, axis=-1, is_ascend=False, dtype="float64")
        row_start = to_ndarray(np.arange(rows, dtype=np.float64)[:, None] * count)
        ranked = mx.nd.take(scores.reshape((-1,)), mx.nd.broadcast_add(order, row_start))
        if count > 1:
            changes = mx.nd.concat(mx.nd.zeros((rows, 1)), mx.nd.slice_axis(ranked, axis=1, begin=1, end=None) !=
                                   mx.nd.slice_axis(ranked, axis=1, begin=0, end=-1), dim=1)
            value_rank = mx.np.cumsum(changes.astype("float64").as_np_ndarray(), axis=1).as_nd_ndarray()
            resorted = mx.nd.argsort(value_rank * count + order, axis=-1, is_ascend=True, dtype="float64")
            order = mx.nd.take(order.reshape((-1,)), mx.nd.broadcast_add(resorted, row_start))
        return order.astype("int64")

    def _select(self, boxes: np.ndarray, scores: np.ndarray, max_boxes: int, limit, score_limit):
        """The (B * C, N) mask of the kept ranks and the (B * C, N) box index of each rank."""
        batches, classes, count = scores.shape
        with mx.util.np_shape(True):
            corners = self._corners(to_ndarray(boxes))                 # (B, N, 4)
            ranked_scores = to_ndarray(scores).reshape((batches * classes, count))
            order = self._order(ranked_scores)                                            # (R, N)
            first = to_ndarray(np.repeat(np.arange(batches, dtype=np.int64) * count, classes)[:, None])
            flat = corners.reshape((batches * count, 4))
            ranked = mx.nd.take(flat, mx.nd.broadcast_add(order, first), axis=0)          # (R, N, 4)
            if score_limit is None:
                valid = mx.nd.ones((batches * classes, count), dtype="float32")
            else:
                row_start = to_ndarray(np.arange(batches * classes, dtype=np.int64)[:, None] * count)
                sorted_scores = mx.nd.take(ranked_scores.reshape((-1,)), mx.nd.broadcast_add(order, row_start))
                valid = sorted_scores > float(score_limit)
                valid = mx.nd.cast(valid, "float32")
            x_min, y_min, x_max, y_max = mx.nd.split(ranked, num_outputs=4, axis=-1, squeeze_axis=True)
            area = (x_max - x_min) * (y_max - y_min)
            can_overlap = area > 0  # boxes of zero or NaN area neither suppress nor are suppressed
            ranks = to_ndarray(np.arange(count, dtype=np.float32)[None, :])
            removed = mx.nd.zeros((batches * classes, count), dtype="float32")
            kept = mx.nd.zeros((batches * classes, count), dtype="float32")
            taken = mx.nd.zeros((batches * classes, 1), dtype="float32")
            threshold = float(limit)
            for i in range(count):
                column = slice(i, i + 1)
                alive = valid[:, column] * (1 - removed[:, column]) * (taken < max_boxes)     # (R, 1)
                x0 = mx.nd.broadcast_maximum(x_min[:, column], x_min)
                y0 = mx.nd.broadcast_maximum(y_min[:, column], y_min)
                x1 = mx.nd.broadcast_minimum(x_max[:, column], x_max)
                y1 = mx.nd.broadcast_minimum(y_max[:, column], y_max)
                intersection = (x1 - x0) * (y1 - y0)
                union = mx.nd.broadcast_add(area[:, column], area) - intersection
                ratio = intersection / mx.nd.where(union > 0, union, mx.nd.ones_like(union))
                hit = (x1 > x0) * (y1 > y0) * (intersection > 0) * (union > 0) * (ratio > threshold)
                hit = mx.nd.broadcast_mul(hit * can_overlap, can_overlap[:, column] * alive)
                hit = mx.nd.broadcast_mul(hit, ranks > i)
                removed = mx.nd.maximum(removed, hit)
                kept[:, column] = alive
                taken = taken + alive
                if i % 16 == 15 and float((taken < max_boxes).sum().asscalar()) == 0:
                    break
            return kept.asnumpy() > 0, order.asnumpy()


__all__ = ["AffineGrid", "CenterCropPad", "GridSample", "NonMaxSuppression", "Resize", "Resize11", "RoiAlign",
           "RoiAlign10"]
