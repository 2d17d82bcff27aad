"""Indexing operators as native torch operations: the gathers (Gather, GatherElements, GatherND), the scatters
(ScatterElements and its deprecated alias Scatter, ScatterND, TensorScatter), OneHot, Trilu, TopK, Compress,
NonZero and Unique. Negative indices count from the end, as ONNX allows; indices out of range are a ShapeError.

Gradients are torch autograd's. Where the reference has one (gathers, scatters with reduction none/add,
TensorScatter, OneHot's values, Trilu) they agree; where two updates of a scatter write the same element (ONNX
leaves the result undefined) torch gives each its gathered gradient, the reference only the one written last.
"""
from __future__ import annotations

import torch

from d5.errors import ShapeError
from d5.frameworks.pytorch.operators import TorchOp, register
from d5.frameworks.pytorch.operators._helpers import scalar
from d5.ops.onnx_attributes import adopt, operator_attributes
from d5.ops.onnx_semantics import normalize_axis


def _wrap(indices: torch.Tensor, size: int, op_name: str) -> torch.Tensor:
    indices = indices.long()
    if indices.numel() and (bool((indices < -size).any()) or bool((indices >= size).any())):
        raise ShapeError(f"{op_name}: indices out of range for an axis of length {size}")
    return torch.where(indices < 0, indices + size, indices)


@register("Gather")
class Gather(TorchOp):
    """``take`` along ``axis``: the output is data's shape with ``axis`` replaced by indices' shape."""

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("Gather", attributes))

    def forward(self, data, indices):
        axis = normalize_axis("Gather", self.axis, data.dim())
        index = _wrap(indices, data.shape[axis], "Gather")
        picked = torch.index_select(data, axis, index.reshape(-1))
        return picked.reshape((*data.shape[:axis], *index.shape, *data.shape[axis + 1:]))  # () for a scalar


@register("GatherElements")
class GatherElements(TorchOp):
    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("GatherElements", attributes))

    def forward(self, data, indices):
        axis = normalize_axis("GatherElements", self.axis, data.dim())
        return torch.gather(data, axis, _wrap(indices, data.shape[axis], "GatherElements"))


@register("GatherND")
class GatherND(TorchOp):
    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("GatherND", attributes))

    def forward(self, data, indices):
        b = self.batch_dims
        depth = indices.shape[-1]
        batch_shape = data.shape[:b]
        batch = int(torch.tensor(batch_shape).prod()) if b else 1
        flat_data = data.reshape(batch, *data.shape[b:])
        flat_idx = indices.long().reshape(batch, -1, depth)
        sizes = torch.tensor(data.shape[b:b + depth], dtype=torch.long, device=data.device)
        flat_idx = torch.where(flat_idx < 0, flat_idx + sizes, flat_idx)
        rows = torch.arange(batch, device=data.device).unsqueeze(1).expand(-1, flat_idx.shape[1])
        picked = flat_data[(rows, *flat_idx.unbind(-1))]
        return picked.reshape(*indices.shape[:-1], *data.shape[b + depth:])


def _checked(indices: torch.Tensor, sizes: torch.Tensor | int, op_name: str) -> torch.Tensor:
    """Integer ``indices`` as int64 with negative values wrapped once; a ShapeError naming the first index out
    of ``[-size, size)`` (``sizes`` broadcasts against ``indices``: one size, or one per last-axis entry)."""
    if indices.dtype.is_floating_point or indices.dtype in (torch.bool, torch.complex64, torch.complex128):
        raise ShapeError(f"{op_name}: indices must be int32 or int64, got {indices.dtype}; Cast them first")
    indices = indices.long()
    bad = (indices < -sizes) | (indices >= sizes)
    if indices.numel() and bool(bad.any()):
        where = [int(i) for i in torch.nonzero(bad)[0]]
        size = int(sizes[where[-1]]) if isinstance(sizes, torch.Tensor) else int(sizes)
        raise ShapeError(f"{op_name}: index {int(indices[tuple(where)])} (at position {where} of indices) is out "
                         f"of range for an axis of size {size}; use indices in [{-size}, {size - 1}]")
    return torch.where(indices < 0, indices + sizes, indices)


# torch.scatter_reduce names for ONNX's reductions ('none' writes).
_REDUCTIONS = {"add": "sum", "mul": "prod", "max": "amax", "min": "amin"}


class _Scatter(TorchOp):
    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes(type(self).__name__, attributes))

    def _inputs(self, data, indices, updates):
        name = type(self).__name__
        if data is None or indices is None or updates is None:
            raise ShapeError(f"{name}: expected the three inputs (data, indices, updates)")
        if data.dim() < 1:
            raise ShapeError(f"{name}: data must have at least 1 dimension, got shape {tuple(data.shape)}")


@register("ScatterElements", "Scatter")
class ScatterElements(_Scatter):
    """A copy of ``data`` with ``updates`` written (or reduced) at ``indices`` along ``axis``."""

    def forward(self, data, indices, updates):
        self._inputs(data, indices, updates)
        axis = normalize_axis("ScatterElements", self.axis, data.dim())
        if indices.dim() != data.dim() or any(i > d for a, (i, d) in enumerate(zip(indices.shape, data.shape))
                                              if a != axis):
            raise ShapeError(f"ScatterElements: indices must have the rank of data ({data.dim()}) and, except on "
                             f"axis {axis}, no larger dimensions; got indices {tuple(indices.shape)} for data "
                             f"{tuple(data.shape)}")
        if updates.shape != indices.shape:
            raise ShapeError(f"ScatterElements: updates must have shape {tuple(indices.shape)} (that of indices), "
                             f"got {tuple(updates.shape)}")
        index = _checked(indices, data.shape[axis], "ScatterElements")
        updates = updates.to(data.dtype)
        if self.reduction == "none":
            return torch.scatter(data, axis, index, updates)
        return torch.scatter_reduce(data, axis, index, updates, _REDUCTIONS[self.reduction], include_self=True)


@register("ScatterND")
class ScatterND(_Scatter):
    """A copy of ``data`` with ``updates`` written (or reduced) at the index tuples in the last axis of
    ``indices`` (a tuple shorter than data's rank addresses a slice). The indexed leading axes of data are
    flattened into one, so every form is a scatter along axis 0."""

    def forward(self, data, indices, updates):
        self._inputs(data, indices, updates)
        depth = indices.shape[-1] if indices.dim() else 0
        if indices.dim() < 1 or not 1 <= depth <= data.dim():
            raise ShapeError(f"ScatterND: indices must have at least one axis, whose last length (here {depth}) is "
                             f"from 1 to data's rank {data.dim()}; got indices {tuple(indices.shape)} for data "
                             f"{tuple(data.shape)}")
        expected = tuple(indices.shape[:-1]) + tuple(data.shape[depth:])
        if tuple(updates.shape) != expected:
            raise ShapeError(f"ScatterND: updates must have shape {expected} (set by data {tuple(data.shape)} and "
                             f"indices {tuple(indices.shape)}), got {tuple(updates.shape)}")
        sizes = torch.tensor(data.shape[:depth], dtype=torch.long, device=data.device)
        index = _checked(indices, sizes, "ScatterND").reshape(-1, depth)
        strides = torch.ones(depth, dtype=torch.long, device=data.device)
        for axis in range(depth - 2, -1, -1):
            strides[axis] = strides[axis + 1] * data.shape[axis + 1]
        rows = (index * strides).sum(-1)
        flat = data.reshape(-1, *data.shape[depth:])
        values = updates.to(data.dtype).reshape(-1, *data.shape[depth:])
        if self.reduction == "none":
            out = flat.index_put((rows,), values)
        else:
            spread = rows.reshape(-1, *([1] * (flat.dim() - 1))).expand_as(values)
            out = torch.scatter_reduce(flat, 0, spread, values, _REDUCTIONS[self.reduction], include_self=True)
        return out.reshape(data.shape)


@register("TensorScatter")
class TensorScatter(TorchOp):
    """Write ``update`` into a copy of ``past_cache`` along the sequence ``axis`` (never 0, the batch axis),
    starting for batch ``b`` at ``write_indices[b]`` (default 0); ``mode='circular'`` wraps the positions."""

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("TensorScatter", attributes))

    def forward(self, cache, update, write_indices=None):
        if cache.dim() < 2:
            raise ShapeError(f"TensorScatter: past_cache needs a batch and a sequence axis, got shape "
                             f"{tuple(cache.shape)}")
        axis = normalize_axis("TensorScatter", self.axis, cache.dim())
        if axis == 0:
            raise ShapeError("TensorScatter: axis cannot be 0 (the batch axis)")
        if (update.dim() != cache.dim() or update.shape[axis] > cache.shape[axis]
                or any(u != c for i, (u, c) in enumerate(zip(update.shape, cache.shape)) if i != axis)):
            raise ShapeError(f"TensorScatter: update shape {tuple(update.shape)} must equal past_cache shape "
                             f"{tuple(cache.shape)} except along axis {axis}, where it may not be longer")
        batch, length, steps = cache.shape[0], cache.shape[axis], update.shape[axis]
        if write_indices is None or write_indices.numel() == 0:
            starts = torch.zeros(batch, dtype=torch.long, device=cache.device)
        else:
            starts = write_indices.long().reshape(-1)
        if tuple(starts.shape) != (batch,):
            raise ShapeError(f"TensorScatter: write_indices must have shape ({batch},), got {tuple(starts.shape)}")
        positions = starts[:, None] + torch.arange(steps, device=cache.device)  # (batch, steps)
        if self.mode == "circular":
            positions = positions % length
        elif steps and bool(((starts < 0) | (starts + steps > length)).any()):
            start = int(starts[(starts < 0) | (starts + steps > length)][0])
            raise ShapeError(f"TensorScatter: write index {start} + sequence length {steps} exceeds the cache length "
                             f"{length} (mode='linear'); use mode='circular' to wrap around")
        view = [batch] + [1] * (cache.dim() - 1)
        view[axis] = steps
        return torch.scatter(cache, axis, positions.reshape(view).expand(update.shape), update.to(cache.dtype))


@register("OneHot")
class OneHot(TorchOp):
    """One-hot encode ``indices`` with ``depth`` classes along a new ``axis``; ``values`` = [off, on]. An
    index out of ``[-depth, depth)`` gives a row of off values; the gradient reaches ``values``."""

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("OneHot", attributes))

    def forward(self, indices, depth, values):
        swapped = " (are depth and values swapped? The inputs are (indices, depth, values))" \
            if depth.numel() == 2 and values.numel() == 1 else ""
        if depth.numel() != 1 or depth.dim() > 1 or depth.dtype == torch.bool:
            raise ShapeError(f"OneHot: depth (input 1) must be one number (a scalar or a 1-element tensor), got "
                             f"{depth.dtype} of shape {tuple(depth.shape)}{swapped}")
        if values.numel() != 2 or values.dim() != 1:
            raise ShapeError(f"OneHot: values (input 2) must be a 1-D tensor of 2 elements, [off_value, on_value], "
                             f"got shape {tuple(values.shape)}{swapped}")
        count = scalar(depth)
        if count != count or count in (float("inf"), float("-inf")) or int(count) < 1:
            raise ShapeError(f"OneHot: depth must be at least 1 (the number of classes), got {count}")
        count = int(count)
        indices = indices.long()  # float indices truncate toward zero, as the spec's cast does
        indices = torch.where(indices < 0, indices + count, indices)
        axis = normalize_axis("OneHot", self.axis, indices.dim() + 1)
        classes = torch.arange(count, device=indices.device).reshape((count,) + (1,) * (indices.dim() - axis))
        hot = indices.unsqueeze(axis) == classes
        return torch.where(hot, values[1], values[0])


@register("Trilu")
class Trilu(TorchOp):
    """Keep the upper (``upper=1``) or lower triangle of the last two axes, offset by the optional input ``k``."""

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("Trilu", attributes))

    def forward(self, x, k=None):
        if x.dim() < 2:
            raise ShapeError(f"Trilu: the input must have at least 2 dimensions, got shape {tuple(x.shape)}")
        if k is not None and k.numel() != 1:
            raise ShapeError(f"Trilu: k (input 1) must be a single value (a scalar or a 1-element tensor), got "
                             f"shape {tuple(k.shape)}")
        offset = 0 if k is None else scalar(k, int)
        rows, cols = x.shape[-2:]
        offset = max(min(offset, cols + 1), -rows - 1)  # beyond the matrix every offset keeps all or nothing
        return torch.triu(x, offset) if self.upper else torch.tril(x, offset)


@register("TopK")
class TopK(TorchOp):
    """The ``k`` largest (or smallest) values along ``axis`` and their int64 indices; ties keep the lower
    index (a stable sort, which torch.topk does not promise). ``k`` is the second input (opset 10+) or the
    attribute (opset 1)."""

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("TopK", attributes))

    def forward(self, x, k=None):
        if k is not None and k.numel() != 1:
            raise ShapeError(f"TopK: k (input 1) must be a single value (a scalar or a 1-element tensor), got shape "
                             f"{tuple(k.shape)}")
        count = self.k if k is None else scalar(k, int)
        if count is None:
            raise ShapeError("TopK: k is required (the second input from opset 10, the attribute before)")
        if x.dim() < 1:
            raise ShapeError(f"TopK: X must have at least 1 dimension, got shape {tuple(x.shape)}")
        axis = normalize_axis("TopK", self.axis, x.dim())
        if not 0 <= int(count) <= x.shape[axis]:
            raise ShapeError(f"TopK: k={count} is out of range for axis {axis} of length {x.shape[axis]}")
        values, indices = torch.sort(x, dim=axis, descending=self.largest, stable=True)
        return values.narrow(axis, 0, int(count)), indices.narrow(axis, 0, int(count))


@register("Compress")
class Compress(TorchOp):
    """The slices of the input along ``axis`` (flattened when absent) where ``condition`` is true; condition
    may be shorter than the axis (the rest is dropped), not longer."""

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("Compress", attributes))

    def forward(self, x, condition):
        if condition.dim() != 1:
            raise ShapeError(f"Compress: condition must be a 1-D tensor, got shape {tuple(condition.shape)}")
        if self.axis is None:
            x, axis = x.reshape(-1), 0
        else:
            if x.dim() < 1:
                raise ShapeError(f"Compress: input must have at least 1 dimension, got shape {tuple(x.shape)}")
            axis = normalize_axis("Compress", self.axis, x.dim())
        if condition.numel() > x.shape[axis]:
            raise ShapeError(f"Compress: condition has {condition.numel()} entries, more than the {x.shape[axis]} "
                             f"{'elements of the input' if self.axis is None else f'slices along axis {axis}'}")
        return torch.index_select(x, axis, torch.nonzero(condition.bool()).reshape(-1))


@register("NonZero")
class NonZero(TorchOp):
    """Indices of the non-zero elements, shape (rank, count), int64 (a 0-d input counts as rank 1)."""

    def forward(self, x):
        return torch.nonzero(x.reshape(1) if x.dim() == 0 else x).T.contiguous()


@register("Unique")
class Unique(TorchOp):
    """Unique elements (or slices along ``axis``): values, first-occurrence indices, inverse indices and
    counts (int64). ``sorted=1`` sorts ascending (slices lexicographically), ``sorted=0`` keeps the order of
    first occurrence."""

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("Unique", attributes))

    def forward(self, x):
        if self.axis is None:
            flat, axis = x.reshape(-1), 0
            values, inverse, counts = torch.unique(flat, sorted=True, return_inverse=True, return_counts=True)
        else:
            if not -x.dim() <= self.axis < x.dim():
                raise ShapeError(f"Unique: axis {self.axis} out of range for a rank-{x.dim()} input")
            axis = self.axis % x.dim()
            values, inverse, counts = torch.unique(x, sorted=True, return_inverse=True, return_counts=True, dim=axis)
        inverse = inverse.reshape(-1)
        positions = torch.arange(inverse.numel(), device=x.device)
        first = torch.full((counts.numel(),), inverse.numel(), dtype=torch.long, device=x.device)
        first = first.scatter_reduce(0, inverse, positions, "amin")
        if not self.sorted:
            order = torch.argsort(first)  # first occurrences are distinct: no ties
            rank = torch.empty_like(order)
            rank[order] = torch.arange(order.numel(), device=x.device)
            values = torch.index_select(values, axis, order)
            first, counts, inverse = first[order], counts[order], rank[inverse]
        return values, first, inverse, counts.long()
