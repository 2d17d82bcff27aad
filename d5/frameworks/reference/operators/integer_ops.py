"""Reference integer, bit-level, set and box operators (ONNX semantics).

BitShift, BitwiseAnd, BitwiseOr, BitwiseXor, BitwiseNot, BitCast, Unique, NonZero, NonMaxSuppression
(no gradient: integer or index outputs) and Det, Shrink (differentiable).

>>> import numpy as np
>>> from d5.frameworks.reference.operators import create_operator
>>> create_operator("BitShift", {"direction": "LEFT"}).forward([np.array([1, 2], np.uint8), np.array([1, 3], np.uint8)])
array([ 2, 16], dtype=uint8)
>>> create_operator("NonZero", {}).forward([np.array([[1, 0], [0, 3]])])
array([[0, 1],
       [0, 1]])
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from d5.errors import ShapeError, UnsupportedOperatorError
from d5.frameworks.reference.operators.checks import scalar_input
from d5.frameworks.reference.operators.elementwise import broadcast_error, ensure_array
from d5.frameworks.reference.operators.registry import NonDifferentiableOp, ReferenceOp, register


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class _NoGradient(NonDifferentiableOp):
    """Operators whose outputs are integers, bits or indices: d5 defines no gradient for them."""

    no_gradient_reason = "its outputs are discrete"


def _require_integer(op_name: str, *arrays: np.ndarray) -> None:
    for array in arrays:
        if array.dtype.kind not in "iu":
            raise ShapeError(f"{op_name} takes integer tensors, got {array.dtype}; Cast to an integer type first")


# ------------------------------------------------------------------------------------------- bitwise

@register("BitShift")
class BitShift(_NoGradient):
    """``X << Y`` (direction ``LEFT``) or ``X >> Y`` (``RIGHT``) elementwise, with broadcasting.

    Shifts outside ``[0, bit width)`` give 0 (or -1 for a right shift of a negative signed value), and left
    shifts of signed values wrap, as two's complement hardware does (numpy's << on signed would not).

    >>> BitShift(direction="RIGHT").forward([np.array([16, -16], np.int8), np.array([2, 9], np.int8)])
    array([ 4, -1], dtype=int8)
    """

    def __init__(self, direction: str = "") -> None:
        super().__init__()
        self.direction = _text(direction).upper()
        if self.direction not in ("LEFT", "RIGHT"):
            raise ShapeError(f"BitShift: direction must be 'LEFT' or 'RIGHT', got {direction!r}")

    def forward(self, inputs):
        x, shift = inputs[0], inputs[1]
        _require_integer("BitShift", x, shift)
        try:
            x, shift = np.broadcast_arrays(x, shift)
        except ValueError:
            raise broadcast_error("BitShift", inputs[0], inputs[1]) from None
        width = x.dtype.itemsize * 8
        valid = (shift >= 0) & (shift < width)
        safe_shift = np.where(valid, shift, 0).astype(np.uint64 if x.dtype.kind == "u" else np.int64)
        if self.direction == "RIGHT":
            shifted = np.right_shift(x, safe_shift.astype(x.dtype))
            overflow = np.where(x < 0, -1, 0).astype(x.dtype) if x.dtype.kind == "i" else np.zeros_like(x)
        else:
            unsigned = x.view(np.dtype(f"u{x.dtype.itemsize}"))
            shifted = np.left_shift(unsigned, safe_shift.astype(unsigned.dtype)).view(x.dtype)
            overflow = np.zeros_like(x)
        return ensure_array(np.where(valid, shifted, overflow).astype(x.dtype))


class _Bitwise(_NoGradient):
    function: Callable = None

    def forward(self, inputs):
        _require_integer(type(self).__name__, *inputs)
        try:
            return ensure_array(type(self).function(*inputs))
        except ValueError:
            raise broadcast_error(type(self).__name__, *inputs) from None


def _bitwise(op_type: str, function: Callable, doc: str) -> type:
    cls = type(op_type, (_Bitwise,), {"function": staticmethod(function), "__doc__": doc})
    cls.__module__ = __name__
    return register(op_type)(cls)


BitwiseAnd = _bitwise("BitwiseAnd", np.bitwise_and, "``A & B`` on integer tensors, with broadcasting.")
BitwiseOr = _bitwise("BitwiseOr", np.bitwise_or, "``A | B`` on integer tensors, with broadcasting.")
BitwiseXor = _bitwise("BitwiseXor", np.bitwise_xor, "``A ^ B`` on integer tensors, with broadcasting.")
BitwiseNot = _bitwise("BitwiseNot", np.invert, "``~X`` on integer tensors.")


@register("BitCast")
class BitCast(_NoGradient):
    """Reinterpret the bits of ``X`` as the ONNX type ``to`` (same width; no value conversion).

    >>> from onnx import TensorProto
    >>> BitCast(to=TensorProto.INT32).forward([np.array([1.0], np.float32)])
    array([1065353216], dtype=int32)
    """

    def __init__(self, to: int = 0) -> None:
        super().__init__()
        self.to = int(to)

    def forward(self, inputs):
        from onnx import TensorProto, helper

        x = np.asarray(inputs[0])
        if self.to == TensorProto.STRING or x.dtype.kind in "OUS":
            raise UnsupportedOperatorError("BitCast: strings have no fixed bit width; use Cast instead")
        target = np.dtype(helper.tensor_dtype_to_np_dtype(self.to))
        if target.itemsize != x.dtype.itemsize:
            raise ShapeError(f"BitCast: {x.dtype} ({x.dtype.itemsize * 8} bits) and {target} "
                             f"({target.itemsize * 8} bits) differ in width; BitCast needs equal widths")
        return ensure_array(np.array(x, order="C", copy=True).view(target))


# ---------------------------------------------------------------------------------------- set / index

@register("NonZero")
class NonZero(_NoGradient):
    """Indices of the non-zero elements, shape (rank, count), int64 (a 0-d input counts as rank 1)."""

    def forward(self, inputs):
        x = np.asarray(inputs[0])
        return np.array(np.nonzero(np.atleast_1d(x) if x.ndim == 0 else x), dtype=np.int64)


@register("Unique")
class Unique(_NoGradient):
    """Unique elements (or slices along ``axis``) with first-occurrence indices, inverse indices and counts.

    ``sorted=0`` keeps the order of first occurrence, as ONNX asks.

    >>> y, first, inverse, counts = Unique(sorted=0).forward([np.array([2, 1, 1, 3, 4, 3])])
    >>> y.tolist(), first.tolist(), inverse.tolist(), counts.tolist()
    ([2, 1, 3, 4], [0, 1, 3, 4], [0, 1, 1, 2, 3, 2], [1, 2, 2, 1])
    """

    def __init__(self, axis: int | None = None, sorted: int = 1) -> None:  # noqa: A002 (ONNX name)
        super().__init__()
        self.axis = None if axis is None else int(axis)
        self.sorted = bool(sorted)

    def forward(self, inputs):
        x = np.asarray(inputs[0])
        axis = self.axis
        if axis is not None:
            if not -x.ndim <= axis < x.ndim:
                raise ShapeError(f"Unique: axis {axis} out of range for a rank-{x.ndim} input")
            axis %= x.ndim
        values, first, inverse, counts = np.unique(x, return_index=True, return_inverse=True,
                                                   return_counts=True, axis=axis)
        inverse = inverse.reshape(-1)
        if not self.sorted:
            # Reorder from sorted order to order of first appearance, and renumber the inverse accordingly.
            order = np.argsort(first, kind="stable")
            rank = np.empty_like(order)
            rank[order] = np.arange(order.size)
            values = np.take(values, order, axis=0 if axis is None else axis)
            first, counts, inverse = first[order], counts[order], rank[inverse]
        as_int64 = lambda a: np.asarray(a, dtype=np.int64)  # noqa: E731
        return values, as_int64(first), as_int64(inverse), as_int64(counts)


@register("NonMaxSuppression")
class NonMaxSuppression(_NoGradient):
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

    # The greedy loop runs over candidates in blocks: all (block member, later candidate) pairs whose boxes
    # may overlap are tested for suppression in one vectorized step; only the bookkeeping of which member
    # survives stays a Python loop. At most _BLOCK members and about _PAIRS pairs per step bound the memory.
    _BLOCK = 128
    _PAIRS = 1 << 19

    def __init__(self, center_point_box: int = 0) -> None:
        super().__init__()
        self.center_point_box = int(center_point_box)
        if self.center_point_box not in (0, 1):
            raise ShapeError(f"NonMaxSuppression: center_point_box must be 0 or 1, got {center_point_box}")

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
        if boxes.ndim != 3 or boxes.shape[-1] != 4 or scores.ndim != 3 or scores.shape[::2] != boxes.shape[:2]:
            raise ShapeError(f"NonMaxSuppression: boxes must be (B, N, 4) and scores (B, C, N), got "
                             f"{boxes.shape} and {scores.shape}")
        if boxes.dtype.kind not in "fiu" or scores.dtype.kind not in "fiu":
            raise ShapeError(f"NonMaxSuppression: boxes and scores must be float tensors, got {boxes.dtype} and "
                             f"{scores.dtype}")
        max_boxes = max(self._scalar(max_boxes, "max_output_boxes_per_class (input 2)", int, 0), 0)
        iou_limit = self._scalar(iou_threshold, "iou_threshold (input 3)", np.float32, np.float32(0))
        if not 0 <= iou_limit <= 1:
            raise ShapeError(f"NonMaxSuppression: iou_threshold must be in [0, 1], got {iou_limit}")
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


# ---------------------------------------------------------------------------------------- differentiable

@register("Det")
class Det(ReferenceOp):
    """Determinant of the square matrices in the last two axes; gradient ``g * det(X) * inv(X)^T``.

    >>> Det().forward([np.array([[2.0, 1.0], [1.0, 3.0]], np.float32)])
    array(5., dtype=float32)
    """

    def forward(self, inputs):
        x = inputs[0]
        if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
            raise ShapeError(f"Det: input must be (..., M, M) square matrices, got shape {x.shape}")
        return ensure_array(np.linalg.det(x)).astype(x.dtype)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        x, g = fwd_inputs[0], grads[0]
        # d det(X) / dX = adj(X)^T = det(X) * inv(X)^T (singular X would need the adjugate; rare in practice).
        inverse_t = np.swapaxes(np.linalg.inv(x.astype(np.float64)), -1, -2)
        det = np.asarray(fwd_outputs[0], np.float64)[..., None, None]
        return ensure_array(np.asarray(g, np.float64)[..., None, None] * det * inverse_t).astype(x.dtype)


@register("Shrink")
class Shrink(ReferenceOp):
    """``X + bias`` where ``X < -lambd``, ``X - bias`` where ``X > lambd``, 0 elsewhere; gradient 1 outside
    ``[-lambd, lambd]``.

    >>> Shrink(lambd=1.0, bias=0.5).forward([np.array([-2.0, 0.5, 2.0], np.float32)])
    array([-1.5,  0. ,  1.5], dtype=float32)
    """

    def __init__(self, bias: float = 0.0, lambd: float = 0.5) -> None:
        super().__init__()
        self.bias, self.lambd = float(bias), float(lambd)

    def forward(self, inputs):
        x = inputs[0]
        bias = np.asarray(self.bias).astype(x.dtype)
        zero = np.zeros((), x.dtype)
        out = np.where(x < -self.lambd, x + bias, np.where(x > self.lambd, x - bias, zero))
        return ensure_array(out).astype(x.dtype)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        x, g = fwd_inputs[0], grads[0]
        return ensure_array(g * (np.abs(x) > self.lambd).astype(g.dtype))
