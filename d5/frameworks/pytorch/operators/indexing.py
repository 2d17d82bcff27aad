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
from d5.ops.tensor_checks import (check_indices, check_one_hot_inputs, check_rank, check_scatter_elements,
                                  check_scatter_inputs, check_top_k, check_write_index_count, check_write_positions,
                                  compress_axis, one_hot_depth, require_integer_indices, require_single_value,
                                  scatter_nd_depth, strides, tensor_scatter_axis, top_k_count, unique_axis)


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
    integer = not (indices.dtype.is_floating_point or indices.dtype in (torch.bool, torch.complex64, torch.complex128))
    require_integer_indices(op_name, integer, indices.dtype)
    indices = indices.long()
    if indices.numel() and bool(((indices < -sizes) | (indices >= sizes)).any()):  # named by the NumPy check
        check_indices(op_name, indices.cpu().numpy(), sizes.cpu().numpy() if isinstance(sizes, torch.Tensor) else sizes)
    return torch.where(indices < 0, indices + sizes, indices)


# torch.scatter_reduce names for ONNX's reductions ('none' writes).
_REDUCTIONS = {"add": "sum", "mul": "prod", "max": "amax", "min": "amin"}


class _Scatter(TorchOp):
    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes(type(self).__name__, attributes))

    def _inputs(self, data, indices, updates):
        check_scatter_inputs(type(self).__name__, data, indices, updates, lambda x: tuple(x.shape))


@register("ScatterElements", "Scatter")
class ScatterElements(_Scatter):
    """A copy of ``data`` with ``updates`` written (or reduced) at ``indices`` along ``axis``."""

    def forward(self, data, indices, updates):
        self._inputs(data, indices, updates)
        axis = normalize_axis("ScatterElements", self.axis, data.dim())
        check_scatter_elements(tuple(data.shape), tuple(indices.shape), axis, tuple(updates.shape))
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
        depth = scatter_nd_depth(tuple(data.shape), tuple(indices.shape), tuple(updates.shape))
        sizes = torch.tensor(data.shape[:depth], dtype=torch.long, device=data.device)
        index = _checked(indices, sizes, "ScatterND").reshape(-1, depth)
        rows = (index * torch.tensor(strides(tuple(data.shape[:depth])), dtype=torch.long, device=data.device)).sum(-1)
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
        axis = tensor_scatter_axis(tuple(cache.shape), tuple(update.shape), self.axis)
        batch, length, steps = cache.shape[0], cache.shape[axis], update.shape[axis]
        if write_indices is None or write_indices.numel() == 0:
            starts = torch.zeros(batch, dtype=torch.long, device=cache.device)
        else:
            starts = write_indices.long().reshape(-1)
        check_write_index_count(batch, starts.numel(), tuple(starts.shape))
        positions = starts[:, None] + torch.arange(steps, device=cache.device)  # (batch, steps)
        if self.mode == "circular":
            positions = positions % length
        elif steps:
            check_write_positions(starts.cpu().numpy(), steps, length, self.mode)
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
        check_one_hot_inputs(tuple(depth.shape), tuple(values.shape), depth.dtype != torch.bool, depth.dtype)
        count = one_hot_depth(scalar(depth))
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
        check_rank("Trilu", tuple(x.shape), "the input", at_least=2)
        if k is not None:
            require_single_value("Trilu", "k (input 1)", k.numel(), tuple(k.shape))
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
        if k is not None:
            require_single_value("TopK", "k (input 1)", k.numel(), tuple(k.shape))
        count = top_k_count(None if k is None else scalar(k, int), self.k)
        check_rank("TopK", tuple(x.shape), "X", at_least=1)
        axis = normalize_axis("TopK", self.axis, x.dim())
        check_top_k(count, axis, x.shape[axis])
        values, indices = torch.sort(x, dim=axis, descending=self.largest, stable=True)
        return values.narrow(axis, 0, count), indices.narrow(axis, 0, count)


@register("Compress")
class Compress(TorchOp):
    """The slices of the input along ``axis`` (flattened when absent) where ``condition`` is true; condition
    may be shorter than the axis (the rest is dropped), not longer."""

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("Compress", attributes))

    def forward(self, x, condition):
        axis = compress_axis(tuple(x.shape), tuple(condition.shape), self.axis)
        if self.axis is None:
            x = x.reshape(-1)
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
            axis = unique_axis(self.axis, x.dim())
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
