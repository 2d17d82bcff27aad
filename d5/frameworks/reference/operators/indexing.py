"""Reference indexing operators (ONNX semantics, newest opset; older attribute forms accepted): Gather,
GatherElements, GatherND, ScatterElements (and its deprecated alias Scatter), ScatterND, TensorScatter,
OneHot, Compress, NonZero, Unique, TopK and Trilu.

The gathers, the scatters (reductions 'none' and 'add'), TensorScatter, OneHot (for its values) and Trilu have
gradients; index, shape and axes inputs get ``None``. Compress, NonZero, Unique and TopK declare
``Gradient.NONE``. Every index is range-checked (:func:`_checked_indices`, :func:`_axis_indices`) before NumPy sees it.

>>> import numpy as np
>>> from d5.frameworks.reference.operators import create_operator
>>> create_operator("Trilu", {"upper": 0}).forward([np.ones((2, 2))])
array([[1., 0.],
       [1., 1.]])
>>> create_operator("NonZero", {}).forward([np.array([[1, 0], [0, 3]])])
array([[0, 1],
       [0, 1]])
>>> cache = np.zeros((1, 4, 1))
>>> create_operator("TensorScatter", {}).forward([cache, np.ones((1, 2, 1)), np.array([1])])[0, :, 0]
array([0., 1., 1., 0.])
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from d5.errors import ShapeError, UnsupportedOperatorError
from d5.frameworks.reference.operators import ReferenceOp, register
from d5.frameworks.reference.operators._checks import optional_array, require_rank, scalar_input
from d5.ops.onnx_attributes import adopt, operator_attributes
from d5.ops.onnx_semantics import normalize_axes, normalize_axis, optional_input
from d5.ops.operator import Gradient
from d5.ops.tensor_checks import (check_axis_indices, check_gather_elements, check_one_hot_inputs, check_rank,
                                  check_scatter_elements, check_top_k, check_write_index_count, check_write_positions,
                                  compress_axis, gather_nd_depth, one_hot_depth, one_hot_mask,
                                  require_integer_indices, scatter_nd_depth, tensor_scatter_axis, top_k_count,
                                  unique_axis)


_REDUCTIONS = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _reduction(op_name: str, reduction: str):
    if reduction == "none":
        return None
    try:
        return _REDUCTIONS[reduction]
    except KeyError:
        raise ShapeError(f"{op_name}: unknown reduction {reduction!r}; use one of none, {', '.join(_REDUCTIONS)}") from None


def _checked_indices(op_name: str, indices: Any, sizes: Sequence[int], axes: Sequence[int]) -> np.ndarray:
    """``indices`` as int64 with negative values wrapped once; the last axis of ``indices`` runs over ``axes``
    (data axes of sizes ``sizes``) when there are several. Raises ShapeError naming the first bad index."""
    indices = np.asarray(indices)
    require_integer_indices(op_name, indices.dtype.kind in "iu", indices.dtype)
    if indices.dtype.kind == "u" and indices.size and indices.max() > np.iinfo(np.int64).max:
        raise ShapeError(f"{op_name}: index {int(indices.max())} is out of range for any axis; use int64 indices")
    indices = indices.astype(np.int64)
    sizes = np.asarray(sizes, dtype=np.int64)
    bad = (indices < -sizes) | (indices >= sizes)
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        column = where[-1] if len(axes) > 1 else 0
        size = int(sizes[column] if sizes.ndim else sizes)
        raise ShapeError(f"{op_name}: index {int(indices[where])} (at position {list(where)} of indices) is out of "
                         f"range for axis {axes[column]} of data, of size {size}; use indices in [{-size}, {size - 1}]")
    return np.where(indices < 0, indices + sizes, indices)


def _axis_indices(op_name: str, indices: np.ndarray, dim: int) -> np.ndarray:
    """Gather's and GatherElements' ``indices`` into an axis of length ``dim``, negative ones wrapped; a
    ShapeError gives the range of the indices found (the scatters and GatherND use :func:`_checked_indices`)."""
    indices = np.asarray(indices)
    if not np.issubdtype(indices.dtype, np.integer):
        raise ShapeError(f"{op_name}: indices must be an integer tensor, got {indices.dtype}")
    check_axis_indices(op_name, indices, dim)
    return np.where(indices < 0, indices + dim, indices)


@register("Gather")
class Gather(ReferenceOp):
    """Take the entries of ``data`` along ``axis`` at ``indices`` (negative indices count from the end)."""

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("Gather", attributes))

    def forward(self, inputs):
        data = inputs[0]
        axis = normalize_axes("Gather", [self.axis], data.ndim)[0]
        return np.take(data, _axis_indices("Gather", inputs[1], data.shape[axis]), axis=axis)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        data, g = fwd_inputs[0], grads[0]
        axis = normalize_axes("Gather", [self.axis], data.ndim)[0]
        indices = _axis_indices("Gather", fwd_inputs[1], data.shape[axis])
        grad = np.zeros(data.shape, dtype=g.dtype)
        # Move the gathered axis (of grad) and the index axes (of g) to the front, then scatter-add rows:
        # repeated indices must accumulate, which np.add.at does and fancy assignment does not.
        g_rows = np.moveaxis(g, list(range(axis, axis + indices.ndim)), list(range(indices.ndim)))
        np.add.at(np.moveaxis(grad, axis, 0), indices.reshape(-1),
                  g_rows.reshape((-1,) + data.shape[:axis] + data.shape[axis + 1:]))
        return grad, None


@register("GatherElements")
class GatherElements(ReferenceOp):
    """``out[i][j] = data[indices[i][j]][j]`` for ``axis=0`` (and likewise for other axes)."""

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("GatherElements", attributes))

    def forward(self, inputs):
        data, indices = inputs[0], np.asarray(inputs[1])
        axis = normalize_axes("GatherElements", [self.axis], data.ndim)[0]
        check_gather_elements(data.shape, indices.shape, axis)
        # The output has the shape of indices: on the other axes, data is read only where indices reach (numpy
        # would instead broadcast indices of size 1 up to data's size).
        data = data[tuple(slice(None) if d == axis else slice(0, n) for d, n in enumerate(indices.shape))]
        return np.take_along_axis(data, _axis_indices("GatherElements", indices, data.shape[axis]), axis=axis)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        data, g = fwd_inputs[0], grads[0]
        axis = normalize_axes("GatherElements", [self.axis], data.ndim)[0]
        indices = _axis_indices("GatherElements", fwd_inputs[1], data.shape[axis])
        coordinates = list(np.indices(indices.shape, sparse=True))
        coordinates[axis] = indices
        grad = np.zeros(data.shape, dtype=g.dtype)
        np.add.at(grad, tuple(coordinates), g)
        return grad, None


def _gather_nd_index(data_shape: tuple, indices: np.ndarray, batch_dims: int) -> tuple:
    """Numpy advanced-index tuple equivalent to ONNX GatherND (``out = data[index]``, already batch-flattened)."""
    batch_shape = data_shape[:batch_dims]
    require_integer_indices("GatherND", indices.dtype.kind in "iu", indices.dtype, "int64 (or int32)")
    depth = gather_nd_depth(data_shape, indices.shape, batch_dims)
    dims = np.asarray(data_shape[batch_dims:batch_dims + depth], dtype=np.int64)
    idx = _checked_indices("GatherND", indices, dims, tuple(range(batch_dims, batch_dims + depth)))
    # Batch coordinates broadcast over the index grid: shape batch + (1,)*(inner index dims).
    inner = idx.ndim - 1 - batch_dims
    batch_index = tuple(np.arange(n).reshape((1,) * i + (n,) + (1,) * (batch_dims - i - 1 + inner))
                        for i, n in enumerate(batch_shape))
    return batch_index + tuple(idx[..., j] for j in range(depth))


@register("GatherND")
class GatherND(ReferenceOp):
    """Gather slices of ``data`` at the index tuples in the last axis of ``indices`` (``batch_dims`` leading axes
    shared).

    >>> GatherND().forward([np.array([[0, 1], [2, 3]]), np.array([[1, 0]])])
    array([2])
    """

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("GatherND", attributes))

    def forward(self, inputs):
        data, indices = inputs[0], np.asarray(inputs[1])
        return np.asarray(data[_gather_nd_index(data.shape, indices, self.batch_dims)], order="C")

    def backward(self, grads, fwd_inputs, fwd_outputs):
        data, indices = fwd_inputs[0], np.asarray(fwd_inputs[1])
        grad = np.zeros(data.shape, dtype=grads[0].dtype)
        np.add.at(grad, _gather_nd_index(data.shape, indices, self.batch_dims), grads[0])
        return grad, None


@register("OneHot")
class OneHot(ReferenceOp):
    """One-hot encode ``indices`` with ``depth`` classes along a new ``axis``; ``values`` = [off, on].

    The output is linear in ``values`` (each element is the off or the on value), so ``values`` gets a
    gradient: the sums of the output gradient where the output is off and where it is on. ``indices`` and
    ``depth`` select, and get none.

    >>> op = OneHot()
    >>> x = [np.array([0, 2]), np.array(3), np.array([0., 1.])]
    >>> op.forward(x)
    array([[1., 0., 0.],
           [0., 0., 1.]])
    >>> op.backward([np.arange(6.).reshape(2, 3)], x, None)
    (None, None, array([10.,  5.]))
    """

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("OneHot", attributes))

    def forward(self, inputs):
        hot, values = self._hot(inputs)
        return np.where(hot, values[1], values[0]).astype(values.dtype)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        hot, values = self._hot(fwd_inputs)
        dy = np.asarray(grads[0])
        on = dy.sum(where=hot)
        off = dy.sum(where=~hot)
        return None, None, np.array([off, on]).astype(values.dtype, copy=False).reshape(values.shape)

    def _hot(self, inputs) -> tuple[np.ndarray, np.ndarray]:
        """The boolean mask of the output elements that take the on value, and ``values``."""
        if len(inputs) != 3:
            raise ShapeError(f"OneHot: expected inputs (indices, depth, values), got {len(inputs)} inputs")
        indices, depth, values = (np.asarray(x) for x in inputs)
        # depth one number and values two (inputs given in the wrong order fail here rather than deep in numpy)
        check_one_hot_inputs(depth.shape, values.shape, depth.dtype.kind in "iuf", depth.dtype)
        depth = one_hot_depth(depth.reshape(-1)[0])
        if indices.dtype.kind not in "iuf":
            raise ShapeError(f"OneHot: indices (input 0) must be numbers, got dtype {indices.dtype}")
        axis = normalize_axis("OneHot", self.axis, indices.ndim + 1)
        return one_hot_mask(indices, depth, axis), values


class _Scatter(ReferenceOp):
    """Shared forward and backward of the write-into-tensor operators (the ONNX form of slice assignment):
    ``out = copy(data); out[index(i)] = updates[i]`` (or reduced into it), with ``_index`` giving the numpy
    index tuple and the shape of ``updates`` that the indices address.

    Gradients (data and updates; indices get None): reduction ``none`` passes ``grad`` to ``data`` with the
    written positions zeroed and gathers ``grad`` at them for ``updates``; where indices repeat (ONNX leaves
    the result undefined) only the update that was written last gets it, as in the forward pass. Reduction
    ``add`` passes ``grad`` to ``data`` and gathers it for ``updates``. ``mul``, ``max`` and ``min`` have no
    gradient in d5.
    """

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes(type(self).__name__, attributes))

    def _index(self, data: np.ndarray, indices: Any) -> tuple[tuple, tuple]:
        raise NotImplementedError

    def _prepare(self, inputs) -> tuple[np.ndarray, tuple, Any]:
        name = type(self).__name__
        if len(inputs) != 3 or any(x is None for x in inputs):
            given = ", ".join("absent" if x is None else f"shape {np.shape(x)}" for x in inputs)
            raise ShapeError(f"{name}: expected the three inputs (data, indices, updates), got ({given})")
        data = require_rank(name, inputs[0], "data", at_least=1)
        updates = np.asarray(inputs[2])
        index, updates_shape = self._index(data, inputs[1])
        if updates.shape != updates_shape:
            raise ShapeError(f"{name}: updates must have shape {updates_shape} (set by data {data.shape} and "
                             f"indices {np.shape(inputs[1])}), got {updates.shape}")
        return data, index, updates

    def forward(self, inputs):
        data, index, updates = self._prepare(inputs)
        out = data.copy()
        function = _reduction(type(self).__name__, self.reduction)
        if function is None:
            out[index] = updates
        else:
            function.at(out, index, updates)
        return out

    def backward(self, grads, fwd_inputs, fwd_outputs):
        if self.reduction not in ("none", "add"):
            raise UnsupportedOperatorError(f"{type(self).__name__} with reduction={self.reduction!r} has no gradient "
                                           "in d5 (only 'none' and 'add' do); stop backpropagation before it")
        data, index, updates = self._prepare(fwd_inputs)
        g = np.asarray(grads[0])
        wanted = self.input_grad_required or (True, False, True)
        grad_data = grad_updates = None
        if wanted[0]:
            grad_data = g.copy()
            if self.reduction == "none":
                grad_data[index] = 0
        if wanted[2]:
            grad_updates = np.array(g[index], dtype=g.dtype, copy=True).reshape(updates.shape)
            if self.reduction == "none":
                grad_updates *= self._written_last(data, index, updates.shape)
        return grad_data, None, grad_updates

    @staticmethod
    def _written_last(data: np.ndarray, index: tuple, updates_shape: tuple) -> np.ndarray:
        """Per update element (broadcastable to ``updates_shape``), whether its value is the one the forward
        pass left in the output: write each update's number with the same indexing and read back who won."""
        count = int(np.prod(updates_shape))
        owner = np.full(data.shape, -1, dtype=np.int64)
        numbers = np.arange(count, dtype=np.int64).reshape(updates_shape)
        owner[index] = numbers
        return owner[index] == numbers


@register("ScatterElements", "Scatter")
class ScatterElements(_Scatter):
    """A copy of ``data`` with ``updates`` written (or reduced) at ``indices`` along ``axis``:
    ``out[..., indices[i, j], ...] = updates[i, j]`` with the index in place of the coordinate on ``axis``.

    >>> ScatterElements(axis=1).forward([np.zeros((1, 4)), np.array([[3, -4]]), np.array([[1., 2.]])])
    array([[2., 0., 0., 1.]])
    """

    def _index(self, data, indices):
        indices = np.asarray(indices)
        axis = normalize_axis("ScatterElements", self.axis, data.ndim)
        check_scatter_elements(data.shape, indices.shape, axis)
        grid = list(np.indices(indices.shape, sparse=True))
        grid[axis] = _checked_indices("ScatterElements", indices, data.shape[axis], (axis,))
        return tuple(grid), indices.shape


@register("ScatterND")
class ScatterND(_Scatter):
    """A copy of ``data`` with ``updates`` written (or reduced) at the index tuples in the last axis of
    ``indices``: ``out[tuple(indices[i])] = updates[i]`` (a tuple shorter than data's rank addresses a slice).

    >>> ScatterND().forward([np.zeros((2, 3)), np.array([[1], [-2]]), np.array([[1., 2., 3.], [4., 5., 6.]])])
    array([[4., 5., 6.],
           [1., 2., 3.]])
    """

    def _index(self, data, indices):
        indices = np.asarray(indices)
        depth = scatter_nd_depth(data.shape, indices.shape)
        indices = _checked_indices("ScatterND", indices, data.shape[:depth], tuple(range(depth)))
        index = tuple(indices[..., j] for j in range(depth))
        return index, indices.shape[:-1] + data.shape[depth:]


# ----------------------------------------------------------------------------------------- TensorScatter

@register("TensorScatter")
class TensorScatter(ReferenceOp):
    """Write ``update`` into a copy of ``past_cache`` along the sequence ``axis`` (never 0, the batch axis),
    starting for batch ``b`` at ``write_indices[b]`` (default 0). ``mode='circular'`` wraps the positions modulo
    the cache length; ``mode='linear'`` requires ``write_indices[b] + sequence_length <= max_sequence_length``.
    """

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("TensorScatter", attributes))

    def _positions(self, inputs) -> tuple[int, list[np.ndarray]]:
        """The (positive) axis and, per batch element, the cache positions that update rows are written to."""
        cache, update = np.asarray(inputs[0]), np.asarray(inputs[1])
        axis = tensor_scatter_axis(cache.shape, update.shape, self.axis)
        batch, length, steps = cache.shape[0], cache.shape[axis], update.shape[axis]
        indices = optional_array(inputs, 2)
        indices = np.zeros(batch, np.int64) if indices is None else indices.astype(np.int64).reshape(-1)
        check_write_index_count(batch, indices.size, indices.shape)
        check_write_positions(indices, steps, length, self.mode)
        positions = []
        for start in indices:
            rows = start + np.arange(steps)
            if self.mode == "circular":
                rows %= length
            positions.append(rows)
        return axis, positions

    @staticmethod
    def _along(axis: int, rows) -> tuple:
        # Index of one batch element's slice (batch axis dropped) picking ``rows`` on ``axis``.
        return (slice(None),) * (axis - 1) + (rows,)

    def forward(self, inputs):
        cache, update = inputs[0], inputs[1]
        axis, positions = self._positions(inputs)
        out = np.array(cache, copy=True)
        for b, rows in enumerate(positions):
            out[b][self._along(axis, rows)] = update[b]
        return out

    def backward(self, grads, fwd_inputs, fwd_outputs):
        g = np.asarray(grads[0])
        axis, positions = self._positions(fwd_inputs)
        grad_cache = g.copy()
        grad_update = np.empty(np.shape(fwd_inputs[1]), dtype=g.dtype)
        for b, rows in enumerate(positions):
            grad_update[b] = g[b][self._along(axis, rows)]
            grad_cache[b][self._along(axis, rows)] = 0
        return (grad_cache, grad_update) + (None,) * (len(fwd_inputs) - 2)


@register("TopK")
class TopK(ReferenceOp):
    """The ``k`` largest (or smallest) values along ``axis`` and their int64 indices; ties keep the lower index.

    ``k`` is the second input (opset 10+) or the attribute (opset 1).

    >>> values, indices = TopK().forward([np.array([1., 3., 2.]), np.array([2])])
    >>> values.tolist(), indices.tolist()
    ([3.0, 2.0], [1, 2])
    """

    gradient = Gradient.NONE

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("TopK", attributes))

    def forward(self, inputs):
        x = inputs[0]
        k = optional_input(inputs, 1)
        k = top_k_count(None if k is None else scalar_input("TopK", k, "k (input 1)"), self.k)
        axis = normalize_axis("TopK", self.axis, require_rank("TopK", x, "X", at_least=1).ndim)
        check_top_k(k, axis, x.shape[axis])
        # A stable ascending sort keeps equal values in index order, as ONNX requires; for "largest" sort the
        # negated values (unsigned integers widened first so that negation cannot wrap around).
        if self.largest:
            key = -(x.astype(np.int64) if np.issubdtype(x.dtype, np.unsignedinteger) else x)
        else:
            key = x
        order = np.argsort(key, axis=axis, kind="stable")
        indices = np.take(order, np.arange(k), axis=axis).astype(np.int64)
        return np.take_along_axis(x, indices, axis=axis), indices


@register("Compress")
class Compress(ReferenceOp):
    """The slices of the input along ``axis`` (flattened when absent) where ``condition`` is true."""

    gradient = Gradient.NONE

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("Compress", attributes))

    def forward(self, inputs):
        x, condition = inputs[0], np.asarray(inputs[1])
        axis = compress_axis(np.shape(x), condition.shape, self.axis)  # ONNX lets condition be shorter, not longer
        return np.compress(condition.astype(bool), x, axis=None if self.axis is None else axis)


@register("NonZero")
class NonZero(ReferenceOp):
    """Indices of the non-zero elements, shape (rank, count), int64 (a 0-d input counts as rank 1)."""

    gradient = Gradient.NONE
    no_gradient_reason = "its outputs are discrete"

    def forward(self, inputs):
        x = np.asarray(inputs[0])
        return np.array(np.nonzero(np.atleast_1d(x) if x.ndim == 0 else x), dtype=np.int64)


@register("Unique")
class Unique(ReferenceOp):
    """Unique elements (or slices along ``axis``) with first-occurrence indices, inverse indices and counts.

    ``sorted=0`` keeps the order of first occurrence, as ONNX asks.

    >>> y, first, inverse, counts = Unique(sorted=0).forward([np.array([2, 1, 1, 3, 4, 3])])
    >>> y.tolist(), first.tolist(), inverse.tolist(), counts.tolist()
    ([2, 1, 3, 4], [0, 1, 3, 4], [0, 1, 1, 2, 3, 2], [1, 2, 2, 1])
    """

    gradient = Gradient.NONE
    no_gradient_reason = "its outputs are discrete"

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("Unique", attributes))

    def forward(self, inputs):
        x = np.asarray(inputs[0])
        axis = unique_axis(self.axis, x.ndim)
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


@register("Trilu")
class Trilu(ReferenceOp):
    """Keep the upper (``upper=1``) or lower triangle of the last two axes, offset by the optional input ``k``.

    >>> Trilu(upper=1).forward([np.ones((2, 3)), np.array(1)])
    array([[0., 1., 1.],
           [0., 0., 1.]])
    """

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("Trilu", attributes))

    def _mask(self, inputs) -> np.ndarray:
        x = inputs[0]
        k = optional_input(inputs, 1)
        k = 0 if k is None else scalar_input("Trilu", k, "k (input 1)")
        rows, cols = x.shape[-2:]
        ones = np.ones((rows, cols), dtype=bool)
        return np.triu(ones, k) if self.upper else np.tril(ones, k)

    def forward(self, inputs):
        x = inputs[0]
        check_rank("Trilu", x.shape, "the input", at_least=2)
        return np.where(self._mask(inputs), x, np.zeros((), x.dtype)).astype(x.dtype)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        grad = np.where(self._mask(fwd_inputs), grads[0], 0).astype(grads[0].dtype)
        return (grad,) + (None,) * (len(fwd_inputs) - 1)
