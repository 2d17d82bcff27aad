"""Image operators as native torch operations: Resize (opsets 13+, and Resize11 for opsets 10-12), GridSample,
AffineGrid, CenterCropPad, RoiAlign (and RoiAlign10 for opsets 10-15) and NonMaxSuppression.

Resize is separable and its geometry depends on shapes and attributes only: the framework-neutral
:func:`d5.ops.onnx_semantics.resize_plan` / :func:`~d5.ops.onnx_semantics.resize_taps` give, per resized axis, the
input positions each output reads and their weights, applied here as one gather along the axis (nearest: a
single index_select). ``torch.nn.functional.interpolate`` takes over where it computes exactly the same thing
(mode linear, half_pixel / pytorch_half_pixel / align_corners coordinates on the trailing spatial axes, no
antialias). GridSample follows ONNX's reference (onnx.reference): ``F.grid_sample`` for nearest and linear on
2-D/3-D images, gathers for cubic and other ranks.

Resize, GridSample, AffineGrid, CenterCropPad and RoiAlign are differentiable by autograd (the reference has
gradients for Resize and AffineGrid only); NonMaxSuppression's output is indices.
"""
from __future__ import annotations

import itertools
import math

import numpy as np
import torch
import torch.nn.functional as F

from d5.frameworks.pytorch.operators import TorchOp, register
from d5.frameworks.pytorch.operators._helpers import ints, scalar
from d5.ops.onnx_attributes import adopt, operator_attributes
from d5.ops.onnx_semantics import grid_sample_taps, resize_plan
from d5.ops.sequence_plans import (affine_grid_base, center_crop_pad_axes, center_crop_pad_plan, check_affine_grid,
                                   check_at_least_1d, check_grid_sample_shapes, check_iou_threshold, check_nms_shapes,
                                   check_roi_align_rois, check_roi_align_x, check_roi_batch_indices, resize_axis_taps,
                                   resize_coordinate_mode, resize_inputs, roi_align_region, row_major_strides,
                                   single_value_present)


def _compute_dtype(x: torch.Tensor) -> torch.dtype:
    """The dtype interpolation runs in: float64 for float64 and integer inputs, float32 otherwise."""
    return x.dtype if x.dtype in (torch.float32, torch.float64) else \
        torch.float32 if x.is_floating_point() else torch.float64


def _cast_like(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Interpolated ``values`` in the input's ``dtype``: integers rounded (half to even) and saturated."""
    if dtype.is_floating_point:
        return values.to(dtype)
    if dtype == torch.bool:
        return values != 0
    info = torch.iinfo(dtype)
    return torch.round(values).clamp(info.min, info.max).to(dtype)


def _host(value: torch.Tensor | None) -> np.ndarray | None:
    """A small shape-like input (roi, scales, sizes) as a NumPy array; None when absent or empty."""
    if value is None or value.numel() == 0:
        return None
    return value.detach().to("cpu", torch.float64 if value.is_floating_point() else torch.int64).numpy()


# ------------------------------------------------------------------------------------------------- Resize

@register("Resize", since=13)  # opsets 10-12: Resize11
class Resize(TorchOp):
    """Resize ``X`` by ``scales`` or to ``sizes`` (inputs: X, roi, scales, sizes; opset 10: X, scales)."""

    #: Opsets 10-12 (Resize11) also accept coordinate_transformation_mode 'tf_half_pixel_for_nn'.
    legacy_modes = False

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("Resize", attributes))

    def forward(self, x, *rest):
        check_at_least_1d("Resize", "X", x.dim(), tuple(x.shape))
        given, opset10 = resize_inputs(rest)  # opset 10: (X, scales), asymmetric coordinates
        roi, scales, sizes = (_host(value) for value in given)
        coordinate_mode = resize_coordinate_mode(self, opset10)
        plan = resize_plan("Resize", tuple(x.shape), roi, scales, sizes, self.axes, self.policy, coordinate_mode)
        if not plan:
            return x.clone()
        dtype = x.dtype
        result = x.to(_compute_dtype(x))
        fast = self._interpolate(result, plan, coordinate_mode, sizes is not None)
        if fast is not None:
            return _cast_like(fast, dtype)
        for axis, scale, length, window in plan:
            index, weights, outside = resize_axis_taps(self, result.shape[axis], length, scale, window,
                                                       coordinate_mode)
            result = _apply_taps(result, axis, index, weights, self.mode == "nearest")
            if outside is not None and outside.any():
                shape = [1] * result.dim()
                shape[axis] = length
                mask = torch.from_numpy(outside).to(result.device).reshape(shape)
                result = torch.where(mask, torch.tensor(self.extrapolation_value, dtype=result.dtype,
                                                        device=result.device), result)
        return _cast_like(result, dtype)

    def _interpolate(self, x: torch.Tensor, plan, coordinate_mode: str, by_sizes: bool) -> torch.Tensor | None:
        """``F.interpolate`` where it computes exactly what the taps would (else None): linear interpolation of
        the trailing spatial axes of an (N, C, 1-3 spatial) input, no antialias or exclude_outside, with
        half_pixel (torch's align_corners=False), pytorch_half_pixel with no axis resized to 1, or
        align_corners where every scale times its length is the output length."""
        if self.mode != "linear" or self.antialias or self.exclude_outside or self.policy != "stretch" \
                or not 3 <= x.dim() <= 5 or any(axis < 2 for axis, *_ in plan):
            return None
        resized = {axis: (scale, length) for axis, scale, length, _ in plan}
        scales = [resized.get(axis, (1.0, x.shape[axis]))[0] for axis in range(2, x.dim())]
        lengths = [resized.get(axis, (1.0, x.shape[axis]))[1] for axis in range(2, x.dim())]
        if coordinate_mode == "align_corners":
            if any(scale * size != length for scale, size, length in zip(scales, x.shape[2:], lengths)):
                return None
            align = True
        elif coordinate_mode == "half_pixel" or (coordinate_mode == "pytorch_half_pixel" and min(lengths) > 1):
            align = False
        else:
            return None
        kind = {3: "linear", 4: "bilinear", 5: "trilinear"}[x.dim()]
        if by_sizes:  # the scales are length / size: torch computes them from the sizes alike
            return F.interpolate(x, size=lengths, mode=kind, align_corners=align)
        return F.interpolate(x, scale_factor=scales, mode=kind, align_corners=align, recompute_scale_factor=False)


def _apply_taps(x: torch.Tensor, axis: int, index: np.ndarray, weights: np.ndarray, nearest: bool) -> torch.Tensor:
    """Output ``o`` along ``axis`` is ``sum_t weights[o, t] * x[index[o, t]]`` (the resize_taps layout)."""
    device = x.device
    if nearest:  # one tap of weight 1 per row (0 where exclude_outside removed it): a plain index_select
        column = weights.argmax(axis=1)
        rows = np.arange(index.shape[0])
        chosen = torch.from_numpy(index[rows, column]).to(device)
        out = torch.index_select(x, axis, chosen)
        factor = weights[rows, column]
        if not (factor == 1).all():
            shape = [1] * x.dim()
            shape[axis] = -1
            out = out * torch.from_numpy(factor).to(device, x.dtype).reshape(shape)
        return out
    out_len, taps = index.shape
    moved = x.movedim(axis, -1)
    gathered = torch.index_select(moved, -1, torch.from_numpy(index.reshape(-1)).to(device))
    gathered = gathered.reshape(*moved.shape[:-1], out_len, taps)
    out = (gathered * torch.from_numpy(weights).to(device, x.dtype)).sum(-1)
    return out.movedim(-1, axis)


@register("Resize", since=1)
class Resize11(Resize):
    """Resize of opsets 10-12: opset 10 takes (X, scales) with asymmetric coordinates; opset 11 adds roi and
    the mode ``tf_half_pixel_for_nn`` (removed at opset 13)."""

    legacy_modes = True


# --------------------------------------------------------------------------------------------- GridSample

@register("GridSample")
class GridSample(TorchOp):
    """Sample ``X`` (N, C, *spatial) at the normalized coordinates of ``grid`` (N, *out, ndim), last axis in
    (x, y[, z]) order, with ``mode`` nearest / linear / cubic (opset 16: bilinear / bicubic), as
    onnx.reference: a coordinate outside the image is moved in by ``padding_mode`` (border: clamped,
    reflection: mirrored), then every tap outside reads 0 (zeros), the edge (border) or its mirror image."""

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("GridSample", attributes))

    def forward(self, x, grid):
        check_grid_sample_shapes(tuple(x.shape), tuple(grid.shape))
        dtype = x.dtype
        compute = _compute_dtype(x)
        x, grid = x.to(compute), grid.to(compute)
        if self.mode != "cubic" and x.dim() in (4, 5):
            kind = "bilinear" if self.mode == "linear" else "nearest"
            out = F.grid_sample(x, grid, mode=kind, padding_mode=self.padding_mode, align_corners=self.align_corners)
            return _cast_like(out, dtype)
        return _cast_like(self._gather(x, grid), dtype)

    def _gather(self, x: torch.Tensor, grid: torch.Tensor) -> torch.Tensor:
        n, channels, spatial = x.shape[0], x.shape[1], tuple(x.shape[2:])
        # grid's last axis is (x, y, z): the spatial axes in reverse order.
        per_axis = [grid_sample_taps(grid[..., len(spatial) - 1 - axis], size, align_corners=self.align_corners,
                                     mode=self.mode, padding_mode=self.padding_mode, xp=torch)
                    for axis, size in enumerate(spatial)]
        strides = row_major_strides(spatial)
        flat = x.reshape(n, channels, -1)
        out = None
        for combination in itertools.product(*per_axis):
            position = sum(index * stride for (index, _), stride in zip(combination, strides)).reshape(n, 1, -1)
            weight = math.prod(w for _, w in combination).reshape(n, 1, -1)
            term = weight * torch.gather(flat, 2, position.expand(n, channels, position.shape[-1]))
            out = term if out is None else out + term
        return out.reshape(n, channels, *grid.shape[1:-1])


# -------------------------------------------------------------------------------------------- AffineGrid

@register("AffineGrid")
class AffineGrid(TorchOp):
    """The GridSample grid of the affine maps ``theta``: (N, 2, 3) -> (N, H, W, 2) for ``size`` (N, C, H, W),
    (N, 3, 4) -> (N, D, H, W, 3) for (N, C, D, H, W); differentiable in theta."""

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("AffineGrid", attributes))

    def forward(self, theta, size):
        size = ints(size)
        ndim = check_affine_grid(size, tuple(theta.shape))
        spatial = tuple(size[2:])
        base = torch.from_numpy(affine_grid_base(spatial, self.align_corners)).to(theta.device, theta.dtype)
        grid = torch.einsum("nij,pj->npi", theta, base)
        return grid.reshape(theta.shape[0], *spatial, ndim)


@register("CenterCropPad")
class CenterCropPad(TorchOp):
    """Center-crop or zero-pad ``input_data`` to ``shape`` along ``axes`` (default: all); an odd difference
    puts the extra element at the end."""

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("CenterCropPad", attributes))

    def forward(self, x, shape):
        check_at_least_1d("CenterCropPad", "input_data", x.dim(), tuple(x.shape))
        target = ints(shape)
        crops, pads, _ = center_crop_pad_plan(tuple(x.shape), target, center_crop_pad_axes(self.axes, x.dim()))
        for axis, crop in enumerate(crops):
            if crop is not None:
                x = x.narrow(axis, crop[0], crop[1] - crop[0])
        flat = [side for pair in reversed(pads) for side in pair]  # F.pad lists the last axis first
        return F.pad(x, flat) if any(flat) else x


# ---------------------------------------------------------------------------------------------- RoiAlign

def _sample_axis(start: float, bin_size: float, bins: int, grid: int, size: int, device):
    """Bilinear sampling along one axis of RoiAlign: for the ``bins * grid`` sample points, the low and high
    pixel indices and their weights (zero for points outside ``[-1, size]``), as onnxruntime computes them."""
    steps = torch.arange(bins, dtype=torch.float64, device=device)[:, None]
    cells = torch.arange(grid, dtype=torch.float64, device=device)[None, :]
    points = (start + steps * bin_size + (cells + 0.5) * bin_size / grid).reshape(-1)
    keep = ((points >= -1.0) & (points <= size)).to(torch.float64)
    points = points.clamp_min(0.0)
    low = points.long()
    at_edge = low >= size - 1
    low = torch.where(at_edge, torch.full_like(low, size - 1), low)
    high = torch.where(at_edge, low, low + 1)
    points = torch.where(at_edge, low.to(torch.float64), points)
    frac = points - low
    return low, high, (1.0 - frac) * keep, frac * keep


@register("RoiAlign", since=16)  # opsets 10-15: RoiAlign10
class RoiAlign(TorchOp):
    """Pool each region ``rois[r] = [x1, y1, x2, y2]`` (times ``spatial_scale``) of image ``batch_indices[r]``
    into an ``output_height x output_width`` grid of bins, each the average (or max) of bilinear samples on a
    ``sampling_ratio`` grid (adaptive when 0), as onnxruntime; ``half_pixel`` shifts coordinates by -0.5."""

    #: The opset whose RoiAlign attributes (and defaults) this version takes.
    since = 16

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("RoiAlign", attributes, opset=self.since))

    def forward(self, x, rois, batch_indices):
        check_roi_align_x(x.dim(), tuple(x.shape))
        check_roi_align_rois(tuple(rois.shape), tuple(batch_indices.shape))
        n, channels, height, width = x.shape
        images = batch_indices.long().tolist()
        check_roi_batch_indices(images, n)
        pooled = []
        for box, image in zip(rois.detach().to("cpu", torch.float64).tolist(), images):
            x1, y1, bin_h, bin_w, grid_h, grid_w = roi_align_region(box, self)
            if grid_h <= 0 or grid_w <= 0:  # no sample points: the bins stay 0, as in onnxruntime
                pooled.append(x.new_zeros((channels, self.output_height, self.output_width), dtype=torch.float64))
                continue
            y_low, y_high, wy_low, wy_high = _sample_axis(y1, bin_h, self.output_height, grid_h, height, x.device)
            x_low, x_high, wx_low, wx_high = _sample_axis(x1, bin_w, self.output_width, grid_w, width, x.device)
            picture = x[image].to(torch.float64)
            corners = [torch.index_select(torch.index_select(picture, 1, ys), 2, xs) * (wy[:, None] * wx[None, :])
                       for ys, wy in ((y_low, wy_low), (y_high, wy_high))
                       for xs, wx in ((x_low, wx_low), (x_high, wx_high))]
            shape = (channels, self.output_height, grid_h, self.output_width, grid_w)
            if self.mode == "avg":
                pooled.append(sum(corners).reshape(shape).sum(dim=(2, 4)) / (grid_h * grid_w))
            else:  # the max of the weighted corner terms, as onnxruntime
                best = torch.stack(corners).amax(dim=0).reshape(shape)
                pooled.append(best.amax(dim=4).amax(dim=2))
        if not pooled:
            return x.new_zeros((0, channels, self.output_height, self.output_width))
        return torch.stack(pooled).to(x.dtype)


@register("RoiAlign", since=1)
class RoiAlign10(RoiAlign):
    """RoiAlign of opsets 10-15: no pixel shift (the later attribute's 'output_half_pixel')."""

    since = 10


# ------------------------------------------------------------------------------------- NonMaxSuppression

@register("NonMaxSuppression")
class NonMaxSuppression(TorchOp):
    """Greedy per-batch, per-class box selection (rows ``[batch, class, box]``, int64), with onnxruntime's
    decisions as the reference: candidates by descending score (ties by box index), IoU in float32 with
    onnxruntime's formula, boxes of zero area neither suppress nor are suppressed. The suppression pairs are
    computed in blocks on the tensors' device; the greedy pass over them runs on the host."""

    _BLOCK = 1024

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("NonMaxSuppression", attributes))

    def _corners(self, boxes: torch.Tensor) -> torch.Tensor:
        """(..., 4) float32 boxes as ``[x_min, y_min, x_max, y_max]`` (center boxes are not flipped)."""
        if self.center_point_box:
            xc, yc, w, h = boxes.unbind(-1)
            return torch.stack([xc - w / 2, yc - h / 2, xc + w / 2, yc + h / 2], dim=-1)
        y1, x1, y2, x2 = boxes.unbind(-1)
        return torch.stack([torch.minimum(x1, x2), torch.minimum(y1, y2), torch.maximum(x1, x2),
                            torch.maximum(y1, y2)], dim=-1)

    @staticmethod
    def _optional(value, what: str, kind, default):
        if value is None or not single_value_present("NonMaxSuppression", what, value.numel(), tuple(value.shape)):
            return default
        return kind(scalar(value, float if kind is not int else int))

    def forward(self, boxes, scores, max_output_boxes_per_class=None, iou_threshold=None, score_threshold=None):
        check_nms_shapes(tuple(boxes.shape), tuple(scores.shape))
        max_boxes = max(self._optional(max_output_boxes_per_class, "max_output_boxes_per_class (input 2)", int, 0), 0)
        limit = self._optional(iou_threshold, "iou_threshold (input 3)", float, 0.0)
        check_iou_threshold(limit)
        score_limit = self._optional(score_threshold, "score_threshold (input 4)", float, None)
        corners = self._corners(boxes.detach().to(torch.float32))
        scores = scores.detach().to(torch.float32)
        limit = torch.tensor(limit, dtype=torch.float32, device=boxes.device)
        rows = [torch.empty((0, 3), dtype=torch.long)]
        for batch in range(scores.shape[0] if max_boxes else 0):
            for cls in range(scores.shape[1]):
                kept = self._select(corners[batch], scores[batch, cls], max_boxes, limit, score_limit)
                block = torch.empty((len(kept), 3), dtype=torch.long)
                block[:, 0], block[:, 1], block[:, 2] = batch, cls, torch.tensor(kept, dtype=torch.long)
                rows.append(block)
        return torch.cat(rows).to(boxes.device)

    def _select(self, box: torch.Tensor, scores: torch.Tensor, max_boxes: int, limit: torch.Tensor,
                score_limit: float | None) -> list[int]:
        """Indices of the boxes kept for one batch entry and class, in selection order."""
        candidates = torch.arange(scores.numel(), device=scores.device)
        if score_limit is not None:
            candidates = candidates[scores > torch.tensor(score_limit, dtype=torch.float32, device=scores.device)]
        order = candidates[torch.sort(scores[candidates], descending=True, stable=True).indices]
        box = box[order]
        x_min, y_min, x_max, y_max = box.unbind(-1)
        area = (x_max - x_min) * (y_max - y_min)
        can_overlap = area > 0  # boxes of zero or NaN area neither suppress nor are suppressed
        count = order.numel()
        later = torch.arange(count, device=box.device)
        order = order.cpu().tolist()
        removed = np.zeros(count, dtype=bool)
        kept: list[int] = []
        for start in range(0, count, self._BLOCK):  # the pairs (s, j) where box s suppresses a later box j
            s = torch.arange(start, min(start + self._BLOCK, count), device=box.device)[:, None]
            x0, y0 = torch.maximum(x_min[s], x_min), torch.maximum(y_min[s], y_min)
            x1, y1 = torch.minimum(x_max[s], x_max), torch.minimum(y_max[s], y_max)
            intersection = (x1 - x0) * (y1 - y0)
            union = area[s] + area - intersection
            hit = (x1 > x0) & (y1 > y0) & (intersection > 0) & (union > 0) & (intersection / union > limit)
            hit = (hit & can_overlap[s] & can_overlap & (later > s)).cpu().numpy()
            for offset, row in enumerate(hit):
                if removed[start + offset]:
                    continue
                kept.append(order[start + offset])
                if len(kept) == max_boxes:
                    return kept
                removed |= row
        return kept
