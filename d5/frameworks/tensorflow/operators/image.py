"""Image operators as native TensorFlow operations: Resize (opsets 13+, and Resize11 for opsets 10-12), GridSample,
AffineGrid, CenterCropPad, RoiAlign (and RoiAlign10 for opsets 10-15) and NonMaxSuppression.

Resize is separable and its geometry depends on shapes and attributes only: the framework-neutral
:func:`d5.ops.onnx_semantics.resize_plan` / :func:`~d5.ops.onnx_semantics.resize_taps` give, per resized axis, the
input positions each output reads and their weights, applied here as one ``tf.gather`` along the axis (whose
gradient, a scatter-add, is the reference's transposed matrix). ``tf.image.resize`` is not used: its coordinate
rules are not ONNX's. GridSample follows ONNX's reference (onnx.reference) with gathers; its taps are
:func:`~d5.ops.onnx_semantics.grid_sample_taps` ported to TensorFlow (that helper converts dtypes with
``astype``/``to``, which tensors lack; its cubic kernel and reflection run unchanged on a TensorFlow namespace).

Resize, GridSample and RoiAlign take X channels-last (the executor's layout for spatial activations) and return
channels-last results; their ``__call__`` converts ONNX-layout tensors around the same computation. NonMaxSuppression
runs its greedy selection as a ``tf.while_loop`` over the score ranks, all batch entries and classes at once.
"""
from __future__ import annotations

import itertools
import math
import types

import numpy as np
import tensorflow as tf

from d5.errors import UnsupportedOperatorError
from d5.frameworks.tensorflow.operators import TFOp, register
from d5.frameworks.tensorflow.operators._helpers import ints, static, static_shape
from d5.frameworks.tensorflow.tensors import channels_last_permutation, from_channels_last, to_channels_last
from d5.ops.onnx_attributes import adopt, operator_attributes
from d5.ops.onnx_semantics import cubic_kernel, reflect_coordinates
from d5.ops.sequence_plans import (affine_grid_base, center_crop_pad_axes, center_crop_pad_plan, check_affine_grid,
                                   check_at_least_1d, check_grid_sample_shapes, check_iou_threshold, check_nms_shapes,
                                   check_roi_align_rois, check_roi_align_x, check_roi_batch_indices, resize_host_value,
                                   resize_inputs, resize_steps, row_major_strides, single_value_present, value_key)

#: The array namespace onnx_semantics' cubic_kernel and reflect_coordinates need, on TensorFlow tensors.
_TF = types.SimpleNamespace(abs=tf.abs, where=tf.where, zeros_like=tf.zeros_like, floor=tf.floor,
                            full_like=lambda x, value: tf.fill(tf.shape(x), tf.cast(value, x.dtype)))


def exact_divide(x, y):
    """``x / y`` rounded as IEEE division also inside ``tf.function``: Grappler rewrites a division by a constant
    into a multiplication by its reciprocal, which changes the last bit (and so rounding, ceil and the like).
    DivNoNan escapes the rewrite; where ``y`` is 0 the plain quotient (x * inf there, as x / 0) is taken."""
    return tf.where(tf.equal(y, 0), x / y, tf.math.divide_no_nan(x, y))


def _compute_dtype(dtype: tf.DType) -> tf.DType:
    """The dtype interpolation runs in: float64 for float64 and integer inputs, float32 otherwise."""
    if dtype in (tf.float32, tf.float64):
        return dtype
    return tf.float32 if dtype.is_floating else tf.float64


def _cast_like(values: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
    """Interpolated ``values`` in the input's ``dtype``: integers rounded (half to even) and saturated."""
    if dtype.is_floating:
        return tf.cast(values, dtype)
    if dtype == tf.bool:
        return tf.not_equal(values, 0)
    values = tf.clip_by_value(tf.round(values), float(dtype.min), float(dtype.max))
    return tf.cast(values, dtype)


def _host(value, what: str) -> np.ndarray | None:
    """A small shape-like input (roi, scales, sizes) as a NumPy array; None when absent or empty. It must be known
    while tracing: the taps are planned from it."""
    if value is None or math.prod(tuple(np.shape(value) if isinstance(value, np.ndarray) else value.shape)) == 0:
        return None
    known = static(value)
    if known is None:
        raise UnsupportedOperatorError(f"Resize: the TensorFlow framework needs {what} as a value known while "
                                       "tracing, not a tensor computed from the data")
    return resize_host_value(known)


# ------------------------------------------------------------------------------------------------- Resize

@register("Resize", since=13)  # opsets 10-12: Resize11
class Resize(TFOp):
    """Resize ``X`` by ``scales`` or to ``sizes`` (inputs: X, roi, scales, sizes; opset 10: X, scales)."""

    #: Opsets 10-12 (Resize11) also accept coordinate_transformation_mode 'tf_half_pixel_for_nn'.
    legacy_modes = False
    channels_last_inputs = (0,)
    channels_last_ranks = (3, 4, 5)

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("Resize", attributes))

    def __call__(self, x, *rest):
        return self._resize(x, rest, None)

    def channels_last(self, x, *rest):
        return self._resize(x, rest, channels_last_permutation(x.shape.rank))

    def _resize(self, x, rest, permutation):
        """Resize ``x``, whose axis k is ONNX axis ``permutation[k]`` (None: ONNX layout)."""
        check_at_least_1d("Resize", "X", x.shape.rank, x.shape)
        shape = static_shape(x)
        if permutation is not None:  # the ONNX shape the geometry is defined on
            shape = tuple(shape[permutation.index(axis)] for axis in range(len(shape)))
        given, opset10 = resize_inputs(rest)  # opset 10: (X, scales), asymmetric coordinates
        roi, scales, sizes = (_host(value, what) for value, what in zip(given, ("roi", "scales", "sizes")))
        key = (shape, value_key(roi), value_key(scales), value_key(sizes), opset10)
        steps = self.planned(key, resize_steps, self, shape, roi, scales, sizes, opset10)
        if not steps:
            return tf.identity(x)
        dtype = x.dtype
        result = tf.cast(x, _compute_dtype(dtype))
        for axis, index, weights, outside in steps:
            position = axis if permutation is None else permutation.index(axis)
            result = _apply_taps(result, position, index, weights, self.mode == "nearest")
            if outside is not None:
                mask = np.reshape(outside, [-1 if k == position else 1 for k in range(len(shape))])
                result = tf.where(tf.constant(mask), tf.constant(self.extrapolation_value, result.dtype), result)
        return _cast_like(result, dtype)


def _apply_taps(x: tf.Tensor, axis: int, index: np.ndarray, weights: np.ndarray, nearest: bool) -> tf.Tensor:
    """Output ``o`` along ``axis`` is ``sum_t weights[o, t] * x[index[o, t]]`` (the resize_taps layout)."""
    rank = x.shape.rank
    if nearest:  # one tap of weight 1 per row (0 where exclude_outside removed it): a plain gather
        rows = np.arange(index.shape[0])
        column = weights.argmax(axis=1)
        out = tf.gather(x, index[rows, column], axis=axis)
        factor = weights[rows, column]
        if not (factor == 1).all():
            out = out * tf.constant(factor.reshape([-1 if k == axis else 1 for k in range(rank)]), x.dtype)
        return out
    out_len, taps = index.shape
    gathered = tf.gather(x, index, axis=axis)  # x.shape[:axis] + (out_len, taps) + x.shape[axis + 1:]
    weights = weights.reshape((out_len, taps) + (1,) * (rank - axis - 1))
    return tf.reduce_sum(gathered * tf.constant(weights, x.dtype), axis=axis + 1)


@register("Resize", since=1)
class Resize11(Resize):
    """Resize of opsets 10-12: opset 10 takes (X, scales) with asymmetric coordinates; opset 11 adds roi and
    the mode ``tf_half_pixel_for_nn`` (removed at opset 13)."""

    legacy_modes = True


# --------------------------------------------------------------------------------------------- GridSample

def _grid_taps(grid: tf.Tensor, size: int, *, align_corners: bool, mode: str, padding_mode: str):
    """:func:`d5.ops.onnx_semantics.grid_sample_taps` on TensorFlow tensors: the (int64 index, weight) taps of
    the normalized coordinates ``grid`` along one axis of ``size`` pixels."""
    if align_corners:
        coordinate, low, high = (grid + 1) / 2 * (size - 1), 0.0, size - 1.0
    else:
        coordinate, low, high = ((grid + 1) * size - 1) / 2, -0.5, size - 0.5
    if mode == "nearest":
        coordinate = tf.round(coordinate)  # half to even, as onnx.reference's rint
    if padding_mode == "border":
        outside = (coordinate < low) | (coordinate > high)
        coordinate = tf.where(outside, tf.clip_by_value(coordinate, 0.0, size - 1.0), coordinate)
    elif padding_mode == "reflection":
        coordinate = reflect_coordinates(coordinate, low, high, _TF)
    if mode == "nearest":
        taps = [(tf.cast(coordinate, tf.int64), tf.ones_like(coordinate))]
    else:
        base = tf.floor(coordinate)
        t = coordinate - base
        base = tf.cast(base, tf.int64)
        if mode == "linear":
            taps = [(base, 1 - t), (base + 1, t)]
        else:
            taps = [(base + k, cubic_kernel(t - k, -0.75, _TF)) for k in (-1, 0, 1, 2)]
    padded = []
    for index, weight in taps:
        if padding_mode == "zeros":
            weight = weight * tf.cast((index >= 0) & (index < size), weight.dtype)
        elif padding_mode == "reflection":  # cast truncates toward zero, as the helper's trunc
            index = tf.cast(reflect_coordinates(tf.cast(index, weight.dtype), low, high, _TF), tf.int64)
        padded.append((tf.clip_by_value(index, 0, size - 1), weight))
    return padded


@register("GridSample")
class GridSample(TFOp):
    """Sample ``X`` (N, C, *spatial) at the normalized coordinates of ``grid`` (N, *out, ndim), last axis in
    (x, y[, z]) order, with ``mode`` nearest / linear / cubic (opset 16: bilinear / bicubic), as
    onnx.reference: a coordinate outside the image is moved in by ``padding_mode`` (border: clamped,
    reflection: mirrored), then every tap outside reads 0 (zeros), the edge (border) or its mirror image."""

    channels_last_inputs = (0,)
    channels_last_ranks = (3, 4, 5)

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("GridSample", attributes))

    def __call__(self, x, grid):
        check_grid_sample_shapes(static_shape(x), static_shape(grid))
        return from_channels_last(self.channels_last(to_channels_last(x), grid))

    def channels_last(self, x, grid):
        shape = static_shape(x)
        check_grid_sample_shapes((shape[0], shape[-1]) + shape[1:-1], static_shape(grid))  # X's ONNX-layout shape
        n, spatial, channels = shape[0], shape[1:-1], shape[-1]
        dtype = x.dtype
        compute = _compute_dtype(dtype)
        grid = tf.cast(grid, compute)
        out_shape = tuple(grid.shape[1:-1])
        # grid's last axis is (x, y, z): the spatial axes in reverse order.
        per_axis = [_grid_taps(grid[..., len(spatial) - 1 - axis], size, align_corners=self.align_corners,
                               mode=self.mode, padding_mode=self.padding_mode)
                    for axis, size in enumerate(spatial)]
        strides = row_major_strides(spatial)
        flat = tf.reshape(tf.cast(x, compute), [n, -1, channels])
        points = math.prod(out_shape)
        out = None
        for combination in itertools.product(*per_axis):
            position = tf.reshape(sum(index * stride for (index, _), stride in zip(combination, strides)), [n, points])
            weight = tf.reshape(math.prod(w for _, w in combination), [n, points, 1])
            term = weight * tf.gather(flat, position, batch_dims=1)
            out = term if out is None else out + term
        return _cast_like(tf.reshape(out, (n,) + out_shape + (channels,)), dtype)


# -------------------------------------------------------------------------------------------- AffineGrid

@register("AffineGrid")
class AffineGrid(TFOp):
    """The GridSample grid of the affine maps ``theta``: (N, 2, 3) -> (N, H, W, 2) for ``size`` (N, C, H, W),
    (N, 3, 4) -> (N, D, H, W, 3) for (N, C, D, H, W); differentiable in theta."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("AffineGrid", attributes))

    def __call__(self, theta, size):
        size = ints(size, "AffineGrid's size")
        ndim = check_affine_grid(size, tuple(theta.shape))
        spatial = tuple(size[2:])
        base = self.planned(spatial, affine_grid_base, spatial, self.align_corners)
        grid = tf.einsum("nij,pj->npi", theta, tf.constant(base, theta.dtype))
        return tf.reshape(grid, (size[0],) + spatial + (ndim,))


@register("CenterCropPad")
class CenterCropPad(TFOp):
    """Center-crop or zero-pad ``input_data`` to ``shape`` along ``axes`` (default: all); an odd difference
    puts the extra element at the end."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("CenterCropPad", attributes))

    def __call__(self, x, shape):
        check_at_least_1d("CenterCropPad", "input_data", x.shape.rank, x.shape)
        have_shape = static_shape(x)
        rank = len(have_shape)
        target = ints(shape, "CenterCropPad's shape")
        crops, pads, _ = center_crop_pad_plan(have_shape, target, center_crop_pad_axes(self.axes, rank))
        x = x[tuple(slice(None) if crop is None else slice(*crop) for crop in crops)]
        return tf.pad(x, [list(pair) for pair in pads]) if any(p for pair in pads for p in pair) else tf.identity(x)


# ---------------------------------------------------------------------------------------------- RoiAlign

def _sample_axis(start, bin_size, grid, bins: int, samples, size: int):
    """Bilinear sampling along one axis of RoiAlign for every region (float64 (R,) ``start``, ``bin_size`` and
    ``grid``, the region's sample count per bin; ``samples`` >= every grid): for the ``bins * samples`` points, the
    low and high pixel indices and their weights (zero for points outside ``[-1, size]`` and for the samples past
    the region's grid), as onnxruntime computes them. Shapes (R, bins * samples)."""
    steps = tf.range(bins, dtype=tf.float64)[None, :, None]
    cells = tf.range(samples, dtype=tf.float64)[None, None, :]
    start, bin_size, grid = start[:, None, None], bin_size[:, None, None], grid[:, None, None]
    # A region with no samples (grid 0) divides by 1 instead: its points are masked, and must stay finite.
    points = start + steps * bin_size + exact_divide((cells + 0.5) * bin_size, tf.maximum(grid, 1.0))
    keep = (points >= -1.0) & (points <= size) & (cells < grid)
    points = tf.reshape(points, [tf.shape(points)[0], -1])
    keep = tf.cast(tf.reshape(keep, tf.shape(points)), tf.float64)
    points = tf.maximum(points, 0.0)
    low = tf.cast(points, tf.int64)  # truncation: the points are >= 0
    at_edge = low >= size - 1
    low = tf.where(at_edge, tf.constant(size - 1, tf.int64), low)
    high = tf.where(at_edge, low, low + 1)
    points = tf.where(at_edge, tf.cast(low, tf.float64), points)
    frac = points - tf.cast(low, tf.float64)
    return low, high, (1.0 - frac) * keep, frac * keep


@register("RoiAlign", since=16)  # opsets 10-15: RoiAlign10
class RoiAlign(TFOp):
    """Pool each region ``rois[r] = [x1, y1, x2, y2]`` (times ``spatial_scale``) of image ``batch_indices[r]``
    into an ``output_height x output_width`` grid of bins, each the average (or max) of bilinear samples on a
    ``sampling_ratio`` grid (adaptive when 0), as onnxruntime; ``half_pixel`` shifts coordinates by -0.5. Every
    region is sampled on the largest region's grid, the extra samples weighted 0 (masked for max)."""

    #: The opset whose RoiAlign attributes (and defaults) this version takes.
    since = 16
    channels_last_inputs = (0,)
    channels_last_ranks = (4,)

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("RoiAlign", attributes, opset=self.since))

    def __call__(self, x, rois, batch_indices):
        check_roi_align_x(x.shape.rank, x.shape)
        return from_channels_last(self.channels_last(to_channels_last(x), rois, batch_indices))

    def channels_last(self, x, rois, batch_indices):
        check_roi_align_x(x.shape.rank, x.shape)
        check_roi_align_rois(tuple(rois.shape), tuple(batch_indices.shape))
        n, height, width, channels = static_shape(x)
        images = static(batch_indices)
        if images is not None:
            check_roi_batch_indices(images, n)
        out_h, out_w = self.output_height, self.output_width
        count = rois.shape[0]
        if count == 0:
            return tf.zeros((0, out_h, out_w, channels), x.dtype)
        offset = 0.5 if self.half_pixel else 0.0
        x1, y1, x2, y2 = tf.unstack(tf.cast(rois, tf.float64) * self.spatial_scale - offset, axis=1)
        roi_w, roi_h = x2 - x1, y2 - y1
        if not self.half_pixel:
            roi_w, roi_h = tf.maximum(roi_w, 1.0), tf.maximum(roi_h, 1.0)
        bin_h = exact_divide(roi_h, tf.constant(float(out_h), tf.float64))
        bin_w = exact_divide(roi_w, tf.constant(float(out_w), tf.float64))
        if self.sampling_ratio > 0:
            grid_h = grid_w = tf.fill(tf.shape(roi_h), tf.constant(float(self.sampling_ratio), tf.float64))
            samples_h = samples_w = self.sampling_ratio
        else:  # ceil(roi / bins); a region of no positive size has no samples (its bins stay 0)
            grid_h, grid_w = tf.math.ceil(bin_h), tf.math.ceil(bin_w)
            samples_h = tf.cast(tf.maximum(tf.reduce_max(grid_h), 1.0), tf.int32)
            samples_w = tf.cast(tf.maximum(tf.reduce_max(grid_w), 1.0), tf.int32)
        y_low, y_high, wy_low, wy_high = _sample_axis(y1, bin_h, grid_h, out_h, samples_h, height)
        x_low, x_high, wx_low, wx_high = _sample_axis(x1, bin_w, grid_w, out_w, samples_w, width)
        compute = _compute_dtype(x.dtype)
        flat = tf.reshape(tf.cast(x, compute), [-1, channels])
        base = tf.cast(batch_indices, tf.int64)[:, None, None] * (height * width)
        corners = []
        for ys, wy in ((y_low, wy_low), (y_high, wy_high)):
            for xs, wx in ((x_low, wx_low), (x_high, wx_high)):
                values = tf.gather(flat, base + ys[:, :, None] * width + xs[:, None, :])  # (R, Sy, Sx, C)
                corners.append(values * tf.cast(wy[:, :, None] * wx[:, None, :], compute)[..., None])
        shape = [count, out_h, samples_h, out_w, samples_w, channels]
        samples = (grid_h * grid_w)[:, None, None, None]
        if self.mode == "avg":
            total = tf.reduce_sum(tf.reshape(tf.add_n(corners), shape), axis=(2, 4))
            pooled = tf.where(samples > 0, exact_divide(total, tf.cast(tf.maximum(samples, 1.0), compute)), 0.0)
        else:  # the max of the weighted corner terms, as onnxruntime, over the region's own samples
            best = tf.reduce_max(tf.stack(corners), axis=0)
            inside_h = tf.range(samples_h, dtype=tf.float64)[None, None, :] < grid_h[:, None, None]
            inside_w = tf.range(samples_w, dtype=tf.float64)[None, None, :] < grid_w[:, None, None]
            inside_h = tf.reshape(tf.tile(inside_h, [1, out_h, 1]), [count, -1])
            inside_w = tf.reshape(tf.tile(inside_w, [1, out_w, 1]), [count, -1])
            inside = (inside_h[:, :, None] & inside_w[:, None, :])[..., None]
            best = tf.where(inside, best, tf.constant(-np.inf, compute))
            pooled = tf.reduce_max(tf.reshape(best, shape), axis=(2, 4))
            pooled = tf.where(samples > 0, pooled, 0.0)
        return tf.cast(tf.reshape(pooled, (count, out_h, out_w, channels)), x.dtype)


@register("RoiAlign", since=1)
class RoiAlign10(RoiAlign):
    """RoiAlign of opsets 10-15: no pixel shift (the later attribute's 'output_half_pixel')."""

    since = 10


# ------------------------------------------------------------------------------------- NonMaxSuppression

def _greedy(boxes, valid, limit, max_boxes):
    """The greedy pass over boxes in rank order, for every row (batch entry x class) at once: ``boxes`` (R, N, 4)
    ``[x_min, y_min, x_max, y_max]`` float32 sorted by descending score, ``valid`` (R, N) the candidates (above
    score_threshold). Returns the (R, N) mask of the kept ranks."""
    rows, count = tf.shape(boxes)[0], tf.shape(boxes)[1]
    x_min, y_min, x_max, y_max = tf.unstack(boxes, axis=-1)
    area = (x_max - x_min) * (y_max - y_min)
    can_overlap = area > 0  # boxes of zero or NaN area neither suppress nor are suppressed
    ranks = tf.range(count)

    def step(i, removed, kept, taken):
        alive = valid[:, i] & ~removed[:, i] & (taken < max_boxes)
        x0, y0 = tf.maximum(x_min[:, i:i + 1], x_min), tf.maximum(y_min[:, i:i + 1], y_min)
        x1, y1 = tf.minimum(x_max[:, i:i + 1], x_max), tf.minimum(y_max[:, i:i + 1], y_max)
        intersection = (x1 - x0) * (y1 - y0)
        union = area[:, i:i + 1] + area - intersection
        hit = (x1 > x0) & (y1 > y0) & (intersection > 0) & (union > 0) & (intersection / union > limit)
        hit = hit & can_overlap[:, i:i + 1] & can_overlap & (ranks > i)[None, :] & alive[:, None]
        kept = kept | ((ranks == i)[None, :] & alive[:, None])
        return i + 1, removed | hit, kept, taken + tf.cast(alive, tf.int64)

    def more(i, removed, kept, taken):
        return (i < count) & tf.reduce_any(taken < max_boxes)

    state = (tf.constant(0), tf.zeros([rows, count], tf.bool), tf.zeros([rows, count], tf.bool),
             tf.zeros([rows], tf.int64))
    return tf.while_loop(more, step, state)[2]


#: Traced once per input signature, so that eager calls run the loop as a graph rather than op by op.
_greedy_function = tf.function(_greedy, reduce_retracing=True)


@register("NonMaxSuppression")
class NonMaxSuppression(TFOp):
    """Greedy per-batch, per-class box selection (rows ``[batch, class, box]``, int64), with onnxruntime's
    decisions as the reference: candidates by descending score (ties by box index), IoU in float32 with
    onnxruntime's formula, boxes of zero area neither suppress nor are suppressed. The thresholds may be tensors
    computed in the graph (then iou_threshold is not range-checked)."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("NonMaxSuppression", attributes))

    def _corners(self, boxes: tf.Tensor) -> tf.Tensor:
        """(..., 4) float32 boxes as ``[x_min, y_min, x_max, y_max]`` (center boxes are not flipped)."""
        if self.center_point_box:
            xc, yc, w, h = tf.unstack(boxes, axis=-1)
            return tf.stack([xc - w / 2, yc - h / 2, xc + w / 2, yc + h / 2], axis=-1)
        y1, x1, y2, x2 = tf.unstack(boxes, axis=-1)
        return tf.stack([tf.minimum(x1, x2), tf.minimum(y1, y2), tf.maximum(x1, x2), tf.maximum(y1, y2)], axis=-1)

    @staticmethod
    def _optional(value, what: str, dtype: tf.DType, default):
        """A scalar input as a Python number where known while tracing, else a tensor; ``default`` if absent."""
        if value is None or not single_value_present("NonMaxSuppression", what, value.shape.num_elements(),
                                                     tuple(value.shape)):
            return default
        known = static(value)
        if known is not None:
            number = np.asarray(known).reshape(-1)[0]
            return int(number) if dtype.is_integer else float(np.float32(number))
        return tf.cast(tf.reshape(value, ()), dtype)

    def __call__(self, boxes, scores, max_output_boxes_per_class=None, iou_threshold=None, score_threshold=None):
        check_nms_shapes(tuple(boxes.shape), tuple(scores.shape))
        max_boxes = self._optional(max_output_boxes_per_class, "max_output_boxes_per_class (input 2)", tf.int64, 0)
        limit = self._optional(iou_threshold, "iou_threshold (input 3)", tf.float32, 0.0)
        if isinstance(limit, float):
            check_iou_threshold(limit)
        score_limit = self._optional(score_threshold, "score_threshold (input 4)", tf.float32, None)
        batches, classes, count = static_shape(scores)
        if (isinstance(max_boxes, int) and max_boxes <= 0) or not batches * classes * count:
            return tf.zeros((0, 3), tf.int64)
        corners = self._corners(tf.cast(boxes, tf.float32))
        scores = tf.cast(scores, tf.float32)
        order = tf.argsort(scores, axis=-1, direction="DESCENDING", stable=True)  # (B, C, N), ties by index
        ranked = tf.reshape(tf.gather(corners, order, batch_dims=1), [batches * classes, count, 4])
        if score_limit is None:
            valid = tf.ones([batches * classes, count], tf.bool)
        else:
            valid = tf.reshape(tf.gather(scores, order, batch_dims=2) > score_limit, [batches * classes, count])
        kept = _greedy_function(ranked, valid, tf.cast(limit, tf.float32), tf.maximum(tf.cast(max_boxes, tf.int64), 0))
        chosen = tf.where(kept)  # (K, 2): row (batch * classes + class), rank; row-major: selection order per row
        box = tf.gather_nd(tf.reshape(tf.cast(order, tf.int64), [batches * classes, count]), chosen)
        row = chosen[:, 0]
        return tf.stack([row // classes, row % classes, box], axis=1)
