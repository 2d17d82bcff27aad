"""Reference image operators (ONNX semantics, newest opset; older attribute forms accepted): Resize (nearest /
linear / cubic, every coordinate_transformation_mode, scales or sizes, antialias, keep_aspect_ratio_policy,
axes), GridSample, AffineGrid, CenterCropPad, RoiAlign and NonMaxSuppression. Older schemas whose
semantics differ have their own classes: Resize11 (opsets 10-12: ``tf_half_pixel_for_nn``) and RoiAlign10.

Resize is separable: each resized axis is a matrix ``W`` (output length x input length) applied along that
axis, which also makes its gradient ``W.T``. Resize and AffineGrid have gradients; the others declare
``Gradient.NONE``.

>>> import numpy as np
>>> from d5.frameworks.reference.operators import create_operator
>>> x = np.array([[[[1., 2.], [3., 4.]]]])
>>> create_operator("Resize", {"mode": "nearest"}).forward([x, None, np.array([1., 1., 2., 2.])])[0, 0]
array([[1., 1., 2., 2.],
       [1., 1., 2., 2.],
       [3., 3., 4., 4.],
       [3., 3., 4., 4.]])
"""
from __future__ import annotations

import itertools
from typing import Any, Callable

import numpy as np

from d5.errors import ShapeError
from d5.frameworks.reference.operators import ReferenceOp, register
from d5.frameworks.reference.operators._checks import optional_array, require_rank, scalar_input
from d5.ops.onnx_attributes import adopt, operator_attributes
from d5.ops.onnx_semantics import grid_sample_taps, resize_plan
from d5.ops.operator import Gradient
from d5.ops.sequence_plans import (affine_grid_base, center_crop_pad_plan, check_affine_grid, check_iou_threshold,
                                   check_nms_dtypes, check_nms_shapes, check_roi_align_rois, check_roi_align_x,
                                   check_roi_batch_indices, resize_axis_taps, resize_coordinate_mode, roi_align_region)


def _cast_like(values: np.ndarray, like: np.ndarray) -> np.ndarray:
    if np.issubdtype(like.dtype, np.integer):
        info = np.iinfo(like.dtype)
        return np.clip(np.rint(values), info.min, info.max).astype(like.dtype)
    return values.astype(like.dtype)


def _apply_along(matrix: np.ndarray, x: np.ndarray, axis: int) -> np.ndarray:
    """``matrix @ x`` along ``axis`` of ``x`` (the axis keeps its place)."""
    return np.moveaxis(np.tensordot(matrix, x, axes=([1], [axis])), 0, axis)


# ------------------------------------------------------------------------------------------------- Resize

@register("Resize", since=13)  # opsets 10-12: Resize11
class Resize(ReferenceOp):
    """Resize ``X`` by ``scales`` or to ``sizes`` (inputs: X, roi, scales, sizes; opset 10: X, scales).

    >>> Resize(mode="linear").forward([np.array([[0., 4.]]), None, np.array([1., 2.])])
    array([[0., 1., 3., 4.]])
    """

    #: Opsets 10-12 (Resize11) also accept coordinate_transformation_mode 'tf_half_pixel_for_nn'.
    legacy_modes = False

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("Resize", attributes))

    # -- geometry (the rules are d5.ops.onnx_semantics.resize_plan / resize_taps)
    def _plan(self, inputs) -> list[tuple[int, float, int, tuple[float, float] | None]]:
        """(axis, scale, output length, roi) for every axis that changes."""
        x = require_rank("Resize", inputs[0], "X", at_least=1)
        if len(inputs) == 2:  # opset 10: (X, scales), asymmetric coordinates
            roi, scales, sizes = None, optional_array(inputs, 1), None
        else:
            roi, scales, sizes = (optional_array(inputs, i) for i in (1, 2, 3))
        return resize_plan("Resize", x.shape, roi, scales, sizes, self.axes, self.policy, self.coordinate_mode)

    def _matrix(self, in_len: int, out_len: int, scale: float, window, opset10: bool):
        """The interpolation matrix of one axis and the mask of output positions set to extrapolation_value."""
        index, weights, outside = resize_axis_taps(self, in_len, out_len, scale, window,
                                                   resize_coordinate_mode(self, opset10))
        matrix = np.zeros((out_len, in_len))
        rows = np.repeat(np.arange(out_len), index.shape[1])
        # Indices past the edges read the edge value (edge padding), so their weight lands on the edge.
        np.add.at(matrix, (rows, index.reshape(-1)), weights.reshape(-1))
        return matrix, outside

    def forward(self, inputs):
        x = inputs[0]
        opset10 = len(inputs) == 2
        result = x.astype(np.float64)
        for axis, scale, length, window in self._plan(inputs):
            matrix, outside = self._matrix(result.shape[axis], length, scale, window, opset10)
            result = _apply_along(matrix, result, axis)
            if outside is not None and outside.any():
                shape = [1] * result.ndim
                shape[axis] = length
                result = np.where(outside.reshape(shape), self.extrapolation_value, result)
        return _cast_like(result, x)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        x = fwd_inputs[0]
        opset10 = len(fwd_inputs) == 2
        lengths, matrices = list(x.shape), []
        for axis, scale, length, window in self._plan(fwd_inputs):
            matrices.append((axis, self._matrix(lengths[axis], length, scale, window, opset10)[0]))
            lengths[axis] = length
        grad = grads[0].astype(np.float64)
        for axis, matrix in reversed(matrices):
            grad = _apply_along(matrix.T, grad, axis)
        return (grad.astype(grads[0].dtype),) + (None,) * (len(fwd_inputs) - 1)


# --------------------------------------------------------------------------------------------- GridSample

@register("GridSample")
class GridSample(ReferenceOp):
    """Sample ``X`` (N, C, *spatial) at the normalized coordinates of ``grid`` (N, *out, ndim), last axis
    in (x, y[, z]) order, with ``mode`` nearest / linear / cubic (opset 16: bilinear / bicubic)."""

    gradient = Gradient.NONE

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("GridSample", attributes))

    def forward(self, inputs):
        x = require_rank("GridSample", inputs[0], "X (N, C, *spatial)", at_least=3)
        grid = require_rank("GridSample", inputs[1], "grid (N, *output, spatial rank)", rank=x.ndim).astype(np.float64)
        spatial = x.shape[2:]
        if grid.shape[-1] != len(spatial) or grid.shape[0] != x.shape[0]:
            raise ShapeError(f"GridSample: grid of shape {grid.shape} does not match X of shape {x.shape}; "
                             f"expected (N, *output, {len(spatial)})")
        batch = np.arange(x.shape[0]).reshape((-1,) + (1,) * (grid.ndim - 2))
        channels_last = np.moveaxis(x, 1, -1)
        # grid's last axis is (x, y, z): the spatial axes in reverse order.
        per_axis = [grid_sample_taps(grid[..., len(spatial) - 1 - axis], size, align_corners=self.align_corners,
                                     mode=self.mode, padding_mode=self.padding_mode)
                    for axis, size in enumerate(spatial)]
        out = np.zeros(grid.shape[:-1] + (x.shape[1],))
        for combination in itertools.product(*per_axis):
            weight = np.prod([w for _, w in combination], axis=0)
            out += weight[..., None] * channels_last[(batch,) + tuple(i for i, _ in combination)]
        return _cast_like(np.moveaxis(out, -1, 1), x)


# -------------------------------------------------------------------------------------------- AffineGrid

@register("AffineGrid")
class AffineGrid(ReferenceOp):
    """The GridSample grid of the affine maps ``theta``: (N, 2, 3) -> (N, H, W, 2) for ``size`` (N, C, H, W),
    (N, 3, 4) -> (N, D, H, W, 3) for (N, C, D, H, W). Each output point's normalized coordinates
    ``b = (x, y[, z], 1)`` map to ``theta[n] @ b``, so the gradient of theta is the sum of ``grad (x) b``;
    ``size`` (int64) has none.

    >>> import numpy as np
    >>> theta = np.array([[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]])
    >>> AffineGrid(align_corners=1).forward([theta, np.array([1, 1, 2, 2])])[0].tolist()
    [[[-1.0, -1.0], [1.0, -1.0]], [[-1.0, 1.0], [1.0, 1.0]]]
    """

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("AffineGrid", attributes))

    def _base(self, inputs) -> tuple[np.ndarray, np.ndarray, tuple[int, ...]]:
        """theta, the (points, ndim + 1) homogeneous base coordinates in row-major order, and the output size."""
        if len(inputs) != 2 or inputs[0] is None or inputs[1] is None:
            raise ShapeError(f"AffineGrid: expected the inputs theta and size, got {len(inputs)} inputs")
        theta, size = np.asarray(inputs[0]), [int(v) for v in np.asarray(inputs[1]).reshape(-1)]
        check_affine_grid(size, theta.shape)
        spatial = tuple(size[2:])
        return theta, affine_grid_base(spatial, self.align_corners), spatial

    def forward(self, inputs):
        theta, base, spatial = self._base(inputs)
        grid = np.einsum("nij,pj->npi", theta, base)
        return grid.reshape((theta.shape[0],) + spatial + (theta.shape[1],)).astype(theta.dtype, copy=False)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        theta, base, _ = self._base(fwd_inputs)
        g = np.asarray(grads[0]).reshape(theta.shape[0], base.shape[0], theta.shape[1])
        return np.einsum("npi,pj->nij", g, base).astype(theta.dtype, copy=False), None


@register("CenterCropPad")
class CenterCropPad(ReferenceOp):
    """Center-crop or zero-pad ``input_data`` to ``shape`` along ``axes`` (default: all)."""

    gradient = Gradient.NONE

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("CenterCropPad", attributes))

    def forward(self, inputs):
        x = inputs[0]
        x = require_rank("CenterCropPad", x, "input_data", at_least=1)
        target = [int(v) for v in np.asarray(inputs[1]).reshape(-1)]
        axes = list(range(x.ndim)) if self.axes is None else [a % x.ndim for a in self.axes]
        crops, pads, out_shape = center_crop_pad_plan(x.shape, target, axes)
        source = tuple(slice(None) if crop is None else slice(*crop) for crop in crops)
        destination = tuple(slice(None) if pad == (0, 0) else slice(pad[0], pad[0] + have)
                            for pad, have in zip(pads, x.shape))
        out = np.zeros(out_shape, dtype=x.dtype)
        out[destination] = x[source]
        return out


# ---------------------------------------------------------------------------------------------- RoiAlign

def _sample_axis(start: float, bin_size: float, bins: int, grid: int, size: int):
    """Bilinear sampling along one axis of RoiAlign: for the ``bins * grid`` sample points, the low and high
    pixel indices and their weights (zero for points outside ``[-1, size]``), as onnxruntime computes them."""
    points = start + np.arange(bins)[:, None] * bin_size + (np.arange(grid)[None, :] + 0.5) * bin_size / grid
    points = points.reshape(-1)
    outside = (points < -1.0) | (points > size)
    points = np.maximum(points, 0.0)
    low = points.astype(np.int64)
    at_edge = low >= size - 1
    low = np.where(at_edge, size - 1, low)
    high = np.where(at_edge, size - 1, low + 1)
    points = np.where(at_edge, low, points)
    frac = points - low
    keep = ~outside
    return low, high, (1.0 - frac) * keep, frac * keep


@register("RoiAlign", since=16)  # opsets 10-15: RoiAlign10
class RoiAlign(ReferenceOp):
    """Pool each region ``rois[r] = [x1, y1, x2, y2]`` (scaled by ``spatial_scale``) of image
    ``batch_indices[r]`` of ``X`` (N, C, H, W) into an ``output_height x output_width`` grid: each bin averages
    (``mode='avg'``) or takes the max (``mode='max'``) of bilinear samples on a ``sampling_ratio`` grid
    (adaptive ``ceil(roi_size / output_size)`` when 0). ``coordinate_transformation_mode='half_pixel'`` shifts the
    coordinates by -0.5; ``'output_half_pixel'`` does not and enlarges degenerate regions to 1x1.

    Max mode follows onnxruntime and the ONNX reference: the max is taken over the weighted corner terms
    ``w_i * X[corner_i]`` of each sample, not over interpolated values. Forward only.
    """

    gradient = Gradient.NONE

    #: The opset whose RoiAlign attributes (and defaults) this version takes.
    since = 16

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("RoiAlign", attributes, opset=self.since))

    def forward(self, inputs):
        x, rois, batch_indices = (np.asarray(v) for v in inputs[:3])
        check_roi_align_x(x.ndim, x.shape)
        check_roi_align_rois(rois.shape, batch_indices.shape)
        n, channels, height, width = x.shape
        check_roi_batch_indices(batch_indices, n)
        out = np.zeros((rois.shape[0], channels, self.output_height, self.output_width), dtype=np.float64)
        for r, (box, image) in enumerate(zip(rois.astype(np.float64), batch_indices.astype(np.int64))):
            x1, y1, bin_h, bin_w, grid_h, grid_w = roi_align_region(box, self)
            if grid_h <= 0 or grid_w <= 0:
                continue  # no sample points: the bins stay 0, as in onnxruntime
            y_low, y_high, wy_low, wy_high = _sample_axis(y1, bin_h, self.output_height, grid_h, height)
            x_low, x_high, wx_low, wx_high = _sample_axis(x1, bin_w, self.output_width, grid_w, width)
            image_x = x[image].astype(np.float64)
            corners = [image_x[:, ys][:, :, xs] * (wy[:, None] * wx[None, :])
                       for ys, wy in ((y_low, wy_low), (y_high, wy_high))
                       for xs, wx in ((x_low, wx_low), (x_high, wx_high))]
            shape = (channels, self.output_height, grid_h, self.output_width, grid_w)
            if self.mode == "avg":
                out[r] = sum(corners).reshape(shape).sum(axis=(2, 4)) / (grid_h * grid_w)
            else:
                out[r] = np.maximum.reduce(corners).reshape(shape).max(axis=(2, 4))
        return out.astype(x.dtype)


@register("NonMaxSuppression")
class NonMaxSuppression(ReferenceOp):
    """Greedy per-batch, per-class box selection: keep the best-scoring box, drop those overlapping it by
    more than ``iou_threshold``, repeat. Output rows are ``[batch, class, box]`` (int64).

    Inputs: boxes (B, N, 4), scores (B, C, N), optional max_output_boxes_per_class (absent: no output),
    iou_threshold (in [0, 1], default 0) and score_threshold (keep only scores above it) scalars.
    ``center_point_box=1`` reads boxes as ``[x_center, y_center, w, h]``, 0 as two opposite corners
    ``[y1, x1, y2, x2]``.

    Decisions equal onnxruntime's: candidates in descending score order, equal scores by box index; the IoU
    computed in float32 with onnxruntime's formula (so a box exactly at the threshold goes the same way);
    a box of zero (or NaN) area neither suppresses nor is suppressed.

    >>> boxes = np.array([[[0, 0, 1, 1], [0, 0.1, 1, 1.1], [0, 5, 1, 6]]], np.float32)
    >>> NonMaxSuppression().forward([boxes, np.array([[[0.9, 0.8, 0.7]]], np.float32), np.array([3]),
    ...                              np.array([0.5], np.float32)]).tolist()
    [[0, 0, 0], [0, 0, 2]]
    """

    gradient = Gradient.NONE
    no_gradient_reason = "its outputs are discrete"

    # The greedy loop runs over candidates in blocks: all (block member, later candidate) pairs whose boxes
    # may overlap are tested for suppression in one vectorized step; only the bookkeeping of which member
    # survives stays a Python loop. At most _BLOCK members and about _PAIRS pairs per step bound the memory.
    _BLOCK = 128
    _PAIRS = 1 << 19

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("NonMaxSuppression", attributes))

    def _corners(self, boxes: np.ndarray) -> np.ndarray:
        """(…, 4) float32 boxes as ``[x_min, y_min, x_max, y_max]``, computed as onnxruntime does (in float32;
        corners may come flipped, center-format boxes are not flipped)."""
        boxes = boxes.astype(np.float32, copy=False)
        if self.center_point_box:
            xc, yc, w, h = np.moveaxis(boxes, -1, 0)
            return np.stack([xc - w / 2, yc - h / 2, xc + w / 2, yc + h / 2], axis=-1)
        y1, x1, y2, x2 = np.moveaxis(boxes, -1, 0)
        return np.stack([np.minimum(x1, x2), np.minimum(y1, y2), np.maximum(x1, x2), np.maximum(y1, y2)], axis=-1)

    @staticmethod
    def _suppresses(edges: tuple, area: np.ndarray, s: np.ndarray, j: np.ndarray, limit: np.float32):
        """The pairs of ``s`` and ``j`` (boxes of positive area) where box s suppresses box j, IoU > limit, computed
        as onnxruntime does in float32. ``edges`` are the x_min, y_min, x_max, y_max arrays."""
        x_min, y_min, x_max, y_max = edges
        x0, y0 = np.maximum(x_min[s], x_min[j]), np.maximum(y_min[s], y_min[j])
        x1, y1 = np.minimum(x_max[s], x_max[j]), np.minimum(y_max[s], y_max[j])
        intersection = (x1 - x0) * (y1 - y0)
        union = area[s] + area[j] - intersection
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            hit = (x1 > x0) & (y1 > y0) & (intersection > 0) & (union > 0) & (intersection / union > limit)
        hit = np.flatnonzero(hit)
        return s[hit], j[hit]

    def _select(self, box: np.ndarray, scores: np.ndarray, max_boxes: int, iou_limit: np.float32,
                score_limit: np.float32 | None) -> np.ndarray:
        """Indices of the boxes kept for one batch entry and class, in selection order."""
        candidates = np.arange(scores.size) if score_limit is None else np.flatnonzero(scores > score_limit)
        order = candidates[np.argsort(-scores[candidates], kind="stable")]
        box = box[order]  # from here on a box is named by its rank in the greedy order
        with np.errstate(invalid="ignore", over="ignore"):
            area = (box[:, 2] - box[:, 0]) * (box[:, 3] - box[:, 1])
        can_overlap = area > 0  # boxes of zero or NaN area neither suppress nor are suppressed
        if not can_overlap.any():
            return order[:max_boxes]
        edges = tuple(np.ascontiguousarray(box[:, axis]) for axis in range(4))
        # Sweep structure: the undecided boxes that can overlap (the pool), sorted by left edge. Box j can
        # overlap box s only if x_min[s] - widest < x_min[j] < x_max[s], a contiguous range of the pool. The
        # lower bound is computed in float64 and widened a little, so that rounding never drops a pair; the
        # exact float32 test follows.
        pool = np.flatnonzero(can_overlap)
        widest = float(np.max(edges[2][pool].astype(np.float64) - edges[0][pool])) * (1 + 2.0 ** -40)
        lower = np.nextafter(edges[0].astype(np.float64) - widest, -np.inf)
        pool = pool[np.argsort(edges[0][pool], kind="stable")]
        suppressed = np.zeros(len(box), bool)
        kept: list[int] = []
        start = 0
        while start < len(box):
            if start:  # drop the boxes decided so far (suppressed, or ranked before this block): it stays sorted
                pool = pool[(pool >= start) & ~suppressed[pool]]
            left = edges[0][pool]
            members = np.arange(start, min(start + self._BLOCK, len(box)))
            active = members[can_overlap[members] & ~suppressed[members]]
            lo = np.searchsorted(left, lower[active], "left")
            hi = np.maximum(np.searchsorted(left, edges[2][active], "left"), lo)
            # Bound the pairs examined at once; the block ends before the first active box left out.
            fits = max(1, int(np.searchsorted(np.cumsum(hi - lo), self._PAIRS, "right")))
            stop = int(active[fits]) if fits < active.size else int(members[-1]) + 1
            active, lo, hi = active[:fits], lo[:fits], hi[:fits]
            s, j = self._candidate_pairs(edges, active, lo, hi, pool)
            s, j = self._suppresses(edges, area, s, j, iou_limit)  # s stays sorted: grouped by suppressor
            first, last = np.searchsorted(s, members, "left"), np.searchsorted(s, members, "right")
            for rank in range(start, stop):
                if suppressed[rank]:
                    continue
                kept.append(rank)
                if len(kept) == max_boxes:
                    return order[kept]
                k = rank - start
                if last[k] > first[k]:
                    suppressed[j[first[k]:last[k]]] = True
            start = stop
        return order[kept]

    @staticmethod
    def _candidate_pairs(edges: tuple, active: np.ndarray, lo: np.ndarray, hi: np.ndarray, pool: np.ndarray):
        """The pairs (s, j) with s in ``active`` and j a later-ranked box in s's range ``pool[lo:hi]`` that
        overlaps s vertically, grouped by s in ``active`` order."""
        counts = hi - lo
        # Pair number p of suppressor a (pairs numbered consecutively) reads pool[lo[a] + p - first pair of a].
        positions = np.repeat(lo - (np.cumsum(counts) - counts), counts)
        positions += np.arange(positions.size)
        j = pool[positions]
        del positions
        # The pair arrays are the bulk of the work: filter them at once by the cheap vertical test, and by
        # integer positions (np.flatnonzero), which is several times faster than boolean indexing here.
        y_min, y_max = edges[1], edges[3]
        s = np.repeat(active, counts)
        keep = np.minimum(y_max[s], y_max[j]) > np.maximum(y_min[s], y_min[j])
        keep &= j > s
        keep = np.flatnonzero(keep)
        return s[keep], j[keep]

    @staticmethod
    def _scalar(value: Any, what: str, kind: Callable, default: Any) -> Any:
        # An omitted optional input may also come as an empty tensor.
        return default if value is None or np.size(value) == 0 else scalar_input("NonMaxSuppression", value, what, kind)

    def forward(self, inputs):
        inputs = list(inputs) + [None] * (5 - len(inputs))
        boxes, scores, max_boxes, iou_threshold, score_threshold = inputs[:5]
        boxes, scores = np.asarray(boxes), np.asarray(scores)
        check_nms_shapes(boxes.shape, scores.shape)
        check_nms_dtypes(boxes.dtype, scores.dtype)
        max_boxes = max(self._scalar(max_boxes, "max_output_boxes_per_class (input 2)", int, 0), 0)
        iou_limit = self._scalar(iou_threshold, "iou_threshold (input 3)", np.float32, np.float32(0))
        check_iou_threshold(iou_limit)
        score_limit = self._scalar(score_threshold, "score_threshold (input 4)", np.float32, None)
        corners = self._corners(boxes)
        scores = scores.astype(np.float32, copy=False)
        selected = [np.empty((0, 3), np.int64)]
        for batch in range(scores.shape[0] if max_boxes else 0):
            for cls in range(scores.shape[1]):
                kept = self._select(corners[batch], scores[batch, cls], max_boxes, iou_limit, score_limit)
                rows = np.empty((kept.size, 3), np.int64)
                rows[:, 0], rows[:, 1], rows[:, 2] = batch, cls, kept
                selected.append(rows)
        return np.concatenate(selected)


@register("RoiAlign", since=1)
class RoiAlign10(RoiAlign):
    """RoiAlign of opsets 10-15: no pixel shift. The attribute ``coordinate_transformation_mode`` came with
    opset 16, whose default ``'half_pixel'`` shifts; the older schema always computes ``'output_half_pixel'``."""

    since = 10


@register("Resize", since=1)
class Resize11(Resize):
    """Resize of opsets 10-12. Opset 10 takes (X, scales) and always maps coordinates asymmetrically; opset 11
    takes (X, roi, scales[, sizes]), roi and scales required but commonly empty (exporters give an empty roi
    and an empty scales tensor beside ``sizes``), and has one more ``coordinate_transformation_mode``, removed
    at opset 13: ``'tf_half_pixel_for_nn'``, ``x_original = (x_resized + 0.5) / scale`` (TensorFlow's
    half-pixel centers for nearest neighbour, without the ``- 0.5``).

    >>> x = np.array([[0., 1., 2., 3.]])
    >>> Resize11(coordinate_transformation_mode="tf_half_pixel_for_nn").forward(
    ...     [x, np.zeros(0), np.zeros(0), np.array([1, 2])])
    array([[1., 3.]])
    """

    legacy_modes = True
