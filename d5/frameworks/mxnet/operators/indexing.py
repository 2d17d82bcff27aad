"""Indexing operators as native MXNet operations: the gathers (Gather, GatherElements, GatherND), the scatters
(ScatterElements and its deprecated alias Scatter, ScatterND, TensorScatter), OneHot, Trilu, TopK, Compress,
NonZero and Unique. Negative indices count from the end, as ONNX allows.

**Gathers** run on MXNet's ``take`` kernel (its backward accumulates repeated indices, as the reference's): Gather
directly, GatherElements and GatherND as a ``take`` of flat offsets into data (the offsets of the other axes are a
NumPy plan per shape). Indices known before the graph runs (constants, and every integer input of ``native_op``)
are range-checked (a ShapeError naming the first bad one) and wrapped in NumPy; indices computed from the data are
wrapped in the graph, where MXNet clips the ones out of range.

**Scatters** need their indices' values while composing (:class:`ValueNeededWhileTracing` otherwise: the executor
then runs the network node by node, where integer tensors are values). From them a NumPy plan gives, per row of
the flattened data, which update it takes: reduction 'none' is one ``take`` from data's rows followed by the
updates' (the update written last owns a row, as the reference's NumPy assignment leaves it, so the gradients are
the reference's: data gets the output gradient where nothing was written, each update that of the element it won).
The reductions apply the updates in passes, the k-th update naming a row in pass k (``take`` then ``where`` on the
written rows), which is the order of NumPy's ``ufunc.at``; 'add' with many repeats uses MXNet's scatter-add
(``_backward_gather_nd``) instead. MXNet's ``concat``/``where`` have no boolean kernels: booleans go through int32.

**TopK** sorts with MXNet's ``topk``, whose CPU kernel (``std::sort``/``std::partial_sort``) does not keep the
order of ties; a second sort on the unique int64 key (run of equal values, index) restores the reference's order
(ties keep the lower index) exactly, for every dtype.

**Data-dependent output shapes** (NonZero, Unique) cannot be in a static MXNet graph: a symbolic input raises
ValueNeededWhileTracing; inputs known before running are computed at once by ``mx.np.nonzero``/``mx.np.unique``
and returned as NumPy values. Compress has a static shape when its condition is known (a ``take`` of the kept
positions), and needs it otherwise. OneHot needs ``depth``, Trilu ``k`` and TopK ``k`` known while composing.

>>> import numpy as np
>>> from d5.frameworks.mxnet.custom_op import native_op
>>> values, indices = native_op("TopK").forward([np.array([[3.0, 1.0, 3.0, 2.0, 3.0]], np.float32), np.array([2])])
>>> values.tolist(), indices.tolist()
([[3.0, 3.0]], [[0, 2]])
"""
from __future__ import annotations

import math

import mxnet as mx
import numpy as np

from d5.errors import ShapeError
from d5.frameworks.mxnet.operators import MXOp, register
from d5.frameworks.mxnet.operators._helpers import (HELD_DTYPES, Symbol, ValueNeededWhileTracing, as_symbol, dtype_of,
                                                    ints, reshape, shape_of, static)
from d5.frameworks.mxnet.tensors import MX_BFLOAT16
from d5.ops.onnx_attributes import adopt, operator_attributes
from d5.ops.onnx_semantics import normalize_axis
from d5.ops.tensor_checks import (check_axis_indices, check_gather_elements, check_indices, check_one_hot_inputs,
                                  check_rank, check_scatter_elements, check_scatter_inputs, check_top_k,
                                  check_write_index_count, check_write_positions, compress_axis, element_offsets,
                                  gather_nd_depth, one_hot_depth, one_hot_mask, require_integer_indices,
                                  require_single_value, scatter_nd_depth, strides, tensor_scatter_axis, top_k_count,
                                  unique_axis)


# ------------------------------------------------------------------------------------------ indices

def _integer(op_name: str, indices) -> None:
    dtype = dtype_of(indices)
    require_integer_indices(op_name, dtype.kind in "iu", dtype.name)


def _wrapped(op_name: str, indices, sizes, message: str = "position"):
    """Integer ``indices`` with negative values wrapped once: an int64 NumPy array where their values are known
    (range-checked: a ShapeError naming the first bad index, as the TensorFlow converter's), else an int64 symbol.
    ``sizes``: one axis length, or one per entry of the last axis of ``indices``."""
    _integer(op_name, indices)
    sizes = np.asarray(sizes, dtype=np.int64)
    known = static(indices)
    if known is not None:
        known = known.astype(np.int64)
        if message == "range":  # the gathers: the range of the values found
            check_axis_indices(op_name, known, int(sizes))
        else:
            check_indices(op_name, known, sizes)
        return np.where(known < 0, known + sizes, known)
    index = as_symbol(indices, np.int64)
    negative = index < 0
    if sizes.ndim == 0:
        return index + negative * int(sizes)
    return index + mx.sym.broadcast_mul(negative, as_symbol(sizes))


def _known_indices(op_name: str, indices, what: str = "indices") -> np.ndarray:
    """Indices whose values a plan needs while composing (the scatters)."""
    _integer(op_name, indices)
    known = static(indices)
    if known is None:
        raise ValueNeededWhileTracing(f"{op_name}: the MXNet framework needs {what} as a value known while "
                                      "tracing, not a tensor computed from the data")
    return known


def _flat(x, shape) -> Symbol:
    return reshape(as_symbol(x), (math.prod(shape),))


def _take_flat(x, shape, offsets) -> Symbol:
    """``x`` (of ``shape``) read at flat ``offsets`` (NumPy int64 or an int64 symbol): the result has their shape."""
    return mx.sym.take(_flat(x, shape), as_symbol(offsets), axis=0, mode="clip")


def _transpose(x: Symbol, perm) -> Symbol:
    """``x`` with its axes permuted; bfloat16 through float32 (MXNet's transpose misplaces bfloat16 values)."""
    perm = tuple(int(p) for p in perm)
    if perm == tuple(range(len(perm))):
        return x
    if dtype_of(x) == MX_BFLOAT16:
        return mx.sym.cast(mx.sym.transpose(mx.sym.cast(x, "float32"), axes=perm), "bfloat16")
    return mx.sym.transpose(x, axes=perm)


# ------------------------------------------------------------------------------------------ gathers

@register("Gather")
class Gather(MXOp):
    """``take`` along ``axis``: the output is data's shape with ``axis`` replaced by indices' shape."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("Gather", attributes))

    def __call__(self, data, indices):
        shape = shape_of(data)
        axis = normalize_axis("Gather", self.axis, len(shape))
        index = _wrapped("Gather", indices, shape[axis], "range")
        return mx.sym.take(as_symbol(data), as_symbol(index), axis=axis, mode="clip")


@register("GatherElements")
class GatherElements(MXOp):
    """``out[i][j] = data[indices[i][j]][j]`` for ``axis=0``: one ``take`` of flat offsets (read only where the
    indices reach, so the output has their shape)."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("GatherElements", attributes))

    def __call__(self, data, indices):
        shape, index_shape = shape_of(data), shape_of(indices)
        rank = len(shape)
        axis = normalize_axis("GatherElements", self.axis, rank)
        check_gather_elements(shape, index_shape, axis)
        index = _wrapped("GatherElements", indices, shape[axis], "range")
        base = self.planned(("elements", shape, index_shape, axis), element_offsets, shape, index_shape, axis)
        stride = strides(shape)[axis]
        if isinstance(index, np.ndarray):
            offsets = base + index * stride
        else:
            offsets = (index * stride if stride != 1 else index) + as_symbol(base)
        return _take_flat(data, shape, offsets)


def _batch_rows(shape: tuple[int, ...], index_shape: tuple[int, ...], batch_dims: int, block: int) -> np.ndarray:
    """GatherND's plan: per index tuple, the first row of its batch element in data seen as rows."""
    batch = np.arange(math.prod(shape[:batch_dims]), dtype=np.int64).reshape(
        shape[:batch_dims] + (1,) * (len(index_shape) - 1 - batch_dims))
    return np.broadcast_to(batch * block, index_shape[:-1]).copy()


@register("GatherND")
class GatherND(MXOp):
    """Slices of ``data`` at the index tuples in the last axis of ``indices`` (``batch_dims`` leading axes
    shared): data as rows (its batch and indexed axes flattened), one ``take`` of the rows' numbers."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("GatherND", attributes))

    def __call__(self, data, indices):
        b = self.batch_dims
        shape, index_shape = shape_of(data), shape_of(indices)
        dtype = dtype_of(indices)
        require_integer_indices("GatherND", dtype.kind in "iu", dtype.name, "int64 (or int32)")
        depth = gather_nd_depth(shape, index_shape, b)
        inner, rest = shape[b:b + depth], shape[b + depth:]
        index = _wrapped("GatherND", indices, inner)
        inner_strides = np.asarray(strides(inner), dtype=np.int64)
        base = self.planned(("nd", shape, index_shape, b), _batch_rows, shape, index_shape, b, math.prod(inner))
        if isinstance(index, np.ndarray):
            rows = base + (index * inner_strides).sum(axis=-1)
        else:
            summed = mx.sym.sum(mx.sym.broadcast_mul(index, as_symbol(inner_strides)), axis=-1)
            rows = reshape(mx.sym.broadcast_add(summed, as_symbol(base)), index_shape[:-1])
        table = reshape(as_symbol(data), (math.prod(shape[:b + depth]),) + rest)
        return mx.sym.take(table, as_symbol(rows), axis=0, mode="clip")


# ------------------------------------------------------------------------------------------ scatters

_MOST_PASSES = 8  # 'add' with more repeats of one row than this scatter-adds in one kernel instead


def _combine(reduction: str, a: Symbol, b: Symbol) -> Symbol:
    return {"add": mx.sym.broadcast_add, "mul": mx.sym.broadcast_mul, "max": mx.sym.broadcast_maximum,
            "min": mx.sym.broadcast_minimum}[reduction](a, b)


def _scatter_rows(flat: Symbol, count: int, rows: np.ndarray, values: Symbol, reduction: str,
                  dtype: np.dtype) -> Symbol:
    """``flat`` (count, ...) with ``values`` (n, ...) written (or reduced) into its rows ``rows`` (NumPy (n,),
    in [0, count)); see the module docstring."""
    rows = np.asarray(rows, dtype=np.int64).reshape(-1)
    n = rows.size
    if n == 0:
        return flat
    if dtype == np.bool_:  # no boolean concat/where kernels; NumPy's add/mul/max/min of booleans are or/and/or/and
        flat, values = mx.sym.cast(flat, "int32"), mx.sym.cast(values, "int32")
        result = _scatter_rows(flat, count, rows, values, reduction, np.dtype(np.int32))
        return mx.sym.cast(result if reduction != "add" else mx.sym.clip(result, 0, 1), "bool")
    if reduction == "none":
        owner = np.full(count, -1, dtype=np.int64)
        owner[rows] = np.arange(n, dtype=np.int64)  # the last update naming a row owns it, as NumPy leaves it
        source = np.where(owner >= 0, count + owner, np.arange(count, dtype=np.int64))
        return mx.sym.take(mx.sym.concat(flat, values, dim=0), as_symbol(source), axis=0, mode="clip")
    order = np.argsort(rows, kind="stable")
    ordered = rows[order]
    starts = np.r_[True, ordered[1:] != ordered[:-1]]
    first = np.maximum.accumulate(np.where(starts, np.arange(n), 0))
    occurrence = np.empty(n, dtype=np.int64)
    occurrence[order] = np.arange(n) - first  # the k-th update naming its row is applied in pass k
    passes = int(occurrence.max()) + 1
    if reduction == "add" and passes > _MOST_PASSES:
        added = mx.sym._internal._backward_gather_nd(values, as_symbol(rows.reshape(1, n)),
                                                      shape=tuple(shape_of(flat)))
        return flat + added
    out = flat
    for step in range(passes):
        chosen = np.nonzero(occurrence == step)[0]
        source = np.zeros(count, dtype=np.int64)
        source[rows[chosen]] = chosen
        written = np.zeros(count, dtype=dtype)
        written[rows[chosen]] = 1
        update = mx.sym.take(values, as_symbol(source), axis=0, mode="clip")
        out = mx.sym.where(as_symbol(written), _combine(reduction, out, update), out)
    return out


class _Scatter(MXOp):
    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes(type(self).__name__, attributes))

    def _inputs(self, data, indices, updates):
        shape = check_scatter_inputs(type(self).__name__, data, indices, updates, shape_of)
        return shape, shape_of(indices), shape_of(updates)


@register("ScatterElements", "Scatter")
class ScatterElements(_Scatter):
    """A copy of ``data`` with ``updates`` written (or reduced) at ``indices`` along ``axis``: a scatter into
    the elements of the flattened data."""

    def __call__(self, data, indices, updates):
        shape, index_shape, update_shape = self._inputs(data, indices, updates)
        axis = normalize_axis("ScatterElements", self.axis, len(shape))
        check_scatter_elements(shape, index_shape, axis, update_shape)
        _known_indices("ScatterElements", indices)
        index = _wrapped("ScatterElements", indices, shape[axis])
        base = self.planned(("elements", shape, index_shape, axis), element_offsets, shape, index_shape, axis)
        rows = base + index * strides(shape)[axis]
        dtype = dtype_of(data)
        values = _flat(as_symbol(updates, dtype), update_shape)
        out = _scatter_rows(_flat(data, shape), math.prod(shape), rows, values, self.reduction, dtype)
        return reshape(out, shape)


@register("ScatterND")
class ScatterND(_Scatter):
    """A copy of ``data`` with ``updates`` written (or reduced) at the index tuples in the last axis of
    ``indices`` (a tuple shorter than data's rank addresses a slice): data's indexed leading axes flattened into
    one, so every form is a scatter of rows."""

    def __call__(self, data, indices, updates):
        shape, index_shape, update_shape = self._inputs(data, indices, updates)
        depth = scatter_nd_depth(shape, index_shape, update_shape)
        _known_indices("ScatterND", indices)
        index = _wrapped("ScatterND", indices, shape[:depth])
        rows = (index * np.asarray(strides(shape[:depth]), dtype=np.int64)).sum(axis=-1).reshape(-1)
        rest = shape[depth:]
        count = math.prod(shape[:depth])
        dtype = dtype_of(data)
        flat = reshape(as_symbol(data), (count,) + rest)
        values = reshape(as_symbol(updates, dtype), (rows.size,) + rest)
        return reshape(_scatter_rows(flat, count, rows, values, self.reduction, dtype), shape)


@register("TensorScatter")
class TensorScatter(MXOp):
    """Write ``update`` into a copy of ``past_cache`` along the sequence ``axis`` (never 0, the batch axis),
    starting for batch ``b`` at ``write_indices[b]`` (default 0); ``mode='circular'`` wraps the positions. The
    (batch, axis) pairs are flattened into rows of one scatter (the write indices must be known while composing)."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("TensorScatter", attributes))

    def __call__(self, cache, update, write_indices=None):
        shape, update_shape = shape_of(cache), shape_of(update)
        axis = tensor_scatter_axis(shape, update_shape, self.axis)
        batch, length, steps = shape[0], shape[axis], update_shape[axis]
        if write_indices is None or math.prod(shape_of(write_indices)) == 0:
            starts = np.zeros(batch, np.int64)
        else:
            check_write_index_count(batch, math.prod(shape_of(write_indices)), shape_of(write_indices))
            starts = np.asarray(ints(write_indices, "TensorScatter's write_indices"), np.int64)
            check_write_positions(starts, steps, length, self.mode)
        positions = starts[:, None] + np.arange(steps, dtype=np.int64)  # (batch, steps)
        if self.mode == "circular":
            positions = np.mod(positions, length)
        rows = (positions + np.arange(batch, dtype=np.int64)[:, None] * length).reshape(-1)
        # (batch, axis, rest...) order, so that the rows are (batch, position) pairs.
        perm = [0, axis] + [d for d in range(1, len(shape)) if d != axis]
        rest = tuple(shape[d] for d in perm[2:])
        dtype = dtype_of(cache)
        flat = reshape(_transpose(as_symbol(cache), perm), (batch * length,) + rest)
        values = reshape(_transpose(as_symbol(update, dtype), perm), (batch * steps,) + rest)
        out = reshape(_scatter_rows(flat, batch * length, rows, values, "none", dtype), (batch, length) + rest)
        return _transpose(out, np.argsort(perm))


# ------------------------------------------------------------------------------------------ OneHot, Trilu

def _selected(mask: Symbol, on: Symbol, off: Symbol, dtype: np.dtype) -> Symbol:
    """``where(mask, on, off)``; booleans through uint8 (MXNet's where has no boolean kernel)."""
    if dtype == np.bool_:
        return mx.sym.cast(mx.sym.where(mask, mx.sym.cast(on, "uint8"), mx.sym.cast(off, "uint8")), "bool")
    return mx.sym.where(mask, on, off)


def _broadcast(x: Symbol, shape) -> Symbol:
    """``x`` broadcast to ``shape`` (NumPy's rules: legacy broadcast_to reads 0 as 'keep this axis')."""
    return mx.sym.np.broadcast_to(x.as_np_ndarray(), tuple(shape)).as_nd_ndarray()


@register("OneHot")
class OneHot(MXOp):
    """One-hot encode ``indices`` with ``depth`` classes along a new ``axis``; ``values`` = [off, on]. An index
    out of ``[-depth, depth)`` gives a row of off values. The mask is computed in NumPy where the indices are
    known; the output is ``where(mask, on, off)``, so the gradient reaches ``values``."""

    value_inputs = (1,)  # depth, floating or not, sets the output's shape

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("OneHot", attributes))

    def __call__(self, indices, depth, values):
        depth_dtype = dtype_of(depth)
        check_one_hot_inputs(shape_of(depth), shape_of(values), depth_dtype.kind in "iuf", depth_dtype.name)
        if dtype_of(indices).kind not in "iuf":
            raise ShapeError(f"OneHot: indices (input 0) must be numbers, got dtype {dtype_of(indices).name}")
        known = static(depth)
        if known is None:
            raise ValueNeededWhileTracing("OneHot: the MXNet framework needs depth as a value known while tracing, "
                                          "not a tensor computed from the data")
        count = one_hot_depth(float(np.asarray(known).reshape(-1)[0]))
        index_shape = shape_of(indices)
        rank = len(index_shape)
        axis = normalize_axis("OneHot", self.axis, rank + 1)
        out_shape = index_shape[:axis] + (count,) + index_shape[axis:]
        classes = np.arange(count, dtype=np.int64).reshape((count,) + (1,) * (rank - axis))
        known_indices = static(indices)
        if known_indices is not None:  # float indices truncate toward zero, as the spec's cast does
            hot = as_symbol(one_hot_mask(known_indices, count, axis).astype(np.uint8))
        else:
            index = as_symbol(indices, np.int64)
            index = index + (index < 0) * count
            hot = mx.sym.broadcast_equal(mx.sym.expand_dims(index, axis=axis), as_symbol(classes))
        dtype = dtype_of(values)
        values = as_symbol(values)
        ones = (1,) * len(out_shape)
        off = _broadcast(reshape(mx.sym.slice_axis(values, axis=0, begin=0, end=1), ones), out_shape)
        on = _broadcast(reshape(mx.sym.slice_axis(values, axis=0, begin=1, end=2), ones), out_shape)
        return _selected(hot, on, off, dtype)


@register("Trilu")
class Trilu(MXOp):
    """Keep the upper (``upper=1``) or lower triangle of the last two axes, offset by the optional input ``k``
    (known while composing): ``where`` with a NumPy mask, so the gradient is the mask's."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("Trilu", attributes))

    def __call__(self, x, k=None):
        shape = shape_of(x)
        check_rank("Trilu", shape, "the input", at_least=2)
        if k is not None:
            require_single_value("Trilu", "k (input 1)", math.prod(shape_of(k)), shape_of(k))
        offset = 0 if k is None else ints(k, "Trilu's k")[0]
        ones = np.ones(shape[-2:], dtype=bool)
        keep = np.triu(ones, offset) if self.upper else np.tril(ones, offset)
        dtype = dtype_of(x)
        x = as_symbol(x)
        if math.prod(shape) == 0:
            return x
        mask = _broadcast(as_symbol(keep.astype(np.uint8)), shape)
        if dtype == np.bool_:
            x = mx.sym.cast(x, "uint8")
        kept = mx.sym.where(mask, x, mx.sym.zeros_like(x))
        return mx.sym.cast(kept, "bool") if dtype == np.bool_ else kept


# ------------------------------------------------------------------------------------------ TopK

@register("TopK")
class TopK(MXOp):
    """The ``k`` largest (or smallest) values along ``axis`` and their int64 indices; ties keep the lower index
    (see the module docstring: MXNet's sort, then a sort of the unique (run, index) keys). ``k`` is the second
    input (opset 10+) or the attribute (opset 1)."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("TopK", attributes))

    def __call__(self, x, k=None):
        if k is not None:
            require_single_value("TopK", "k (input 1)", math.prod(shape_of(k)), shape_of(k))
        count = top_k_count(None if k is None else ints(k, "TopK's k")[0], self.k)
        shape = shape_of(x)
        rank = len(shape)
        check_rank("TopK", shape, "X", at_least=1)
        axis = normalize_axis("TopK", self.axis, rank)
        length = shape[axis]
        check_top_k(count, axis, length)
        out_shape = shape[:axis] + (count,) + shape[axis + 1:]
        x = as_symbol(x)
        if count == 0 or math.prod(shape) == 0:  # nothing to sort: an empty output of the right shape
            positions = as_symbol(np.arange(count, dtype=np.int64))
            return mx.sym.take(x, positions, axis=axis), as_symbol(np.zeros(out_shape, np.int64))
        perm = [d for d in range(rank) if d != axis] + [axis]
        rows = math.prod(shape) // length
        moved = reshape(_transpose(x, perm), (rows, length))
        dtype = dtype_of(x)
        key = mx.sym.cast(moved, "uint8" if dtype == np.bool_ else "float32") \
            if dtype == np.bool_ or dtype == MX_BFLOAT16 else moved
        ordered, order = mx.sym.topk(key, axis=1, k=length, ret_typ="both", is_ascend=not self.largest,
                                     dtype="int64")
        if length > 1:
            # Runs of equal values in sorted order, numbered from 1; (run, index) is a unique key in the
            # reference's order, which any sort keeps.
            differs = mx.sym.slice_axis(ordered, axis=1, begin=1, end=length) != \
                mx.sym.slice_axis(ordered, axis=1, begin=0, end=length - 1)
            starts = mx.sym.concat(as_symbol(np.ones((rows, 1), np.int64)), mx.sym.cast(differs, "int64"), dim=1)
            run = mx.sym.np.cumsum(starts.as_np_ndarray(), axis=1).as_nd_ndarray()
            keys = mx.sym.topk(run * length + order, axis=1, k=count, ret_typ="value", is_ascend=True)
            order = keys % length
        else:
            order = mx.sym.slice_axis(order, axis=1, begin=0, end=count)
        offsets = mx.sym.broadcast_add(order, as_symbol(np.arange(rows, dtype=np.int64)[:, None] * length))
        values = mx.sym.take(reshape(moved, (rows * length,)), offsets, axis=0, mode="clip")
        moved_shape = tuple(shape[d] for d in perm[:-1]) + (count,)
        inverse = np.argsort(perm)
        values = _transpose(reshape(values, moved_shape), inverse)
        indices = _transpose(reshape(order, moved_shape), inverse)
        return values, indices


# ------------------------------------------------------------------------------------------ data-dependent shapes

def _dynamic(op_name: str, x) -> np.ndarray:
    """The input of an operator whose output shape depends on its values: only a value known while composing."""
    if isinstance(x, Symbol):
        raise ValueNeededWhileTracing(f"{op_name}: its output shape depends on the values of its input, which a "
                                      "static MXNet graph cannot have; the MXNet framework needs the input as a "
                                      "value known while tracing")
    return np.asarray(x)


def _held(x: np.ndarray) -> mx.np.ndarray:
    return mx.np.array(x, dtype=x.dtype)


@register("Compress")
class Compress(MXOp):
    """The slices of the input along ``axis`` (flattened when absent) where ``condition`` is true; condition may
    be shorter than the axis (the rest is dropped), not longer. With the condition known, a ``take`` of the kept
    positions."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("Compress", attributes))

    def __call__(self, x, condition):
        shape = shape_of(x)
        axis = compress_axis(shape, shape_of(condition), self.axis)
        if self.axis is None:
            x = _flat(x, shape)
        known = _dynamic("Compress", condition)
        positions = np.nonzero(known.astype(bool))[0].astype(np.int64)
        return mx.sym.take(as_symbol(x), as_symbol(positions), axis=axis, mode="clip")


@register("NonZero")
class NonZero(MXOp):
    """Indices of the non-zero elements, shape (rank, count), int64 (a 0-d input counts as rank 1): MXNet's
    ``np.nonzero`` on an input known while composing."""

    value_inputs = (0,)  # the output's shape is the count of its non-zero elements

    def __call__(self, x):
        x = _dynamic("NonZero", x)
        if x.ndim == 0:
            x = x.reshape(1)
        if x.dtype not in HELD_DTYPES:
            x = x != 0
        found = mx.np.nonzero(_held(x))
        return np.stack([np.asarray(f.asnumpy(), dtype=np.int64) for f in found]).reshape(x.ndim, -1)


@register("Unique")
class Unique(MXOp):
    """Unique elements (or slices along ``axis``): values, first-occurrence indices, inverse indices and counts
    (int64), by MXNet's ``np.unique`` (sorted ascending, slices lexicographically) on an input known while
    composing; ``sorted=0`` reorders them by first occurrence."""

    value_inputs = (0,)  # the output's shape is the count of its distinct elements

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("Unique", attributes))

    def __call__(self, x):
        x = _dynamic("Unique", x)
        axis = unique_axis(self.axis, x.ndim)
        dtype = x.dtype
        held = x.astype(np.uint8) if dtype == np.bool_ else x
        if held.dtype not in HELD_DTYPES:
            raise ValueNeededWhileTracing(f"Unique: the MXNet framework holds no {dtype} tensors")
        values, first, inverse, counts = mx.np.unique(_held(held), return_index=True, return_inverse=True,
                                                      return_counts=True, axis=axis)
        inverse = inverse.reshape(-1)
        if not self.sorted:
            order = mx.np.argsort(first)  # first occurrences are distinct: any sort gives their order
            rank = mx.np.argsort(order)
            values = mx.np.take(values, order, axis=0 if axis is None else axis)
            first, counts, inverse = mx.np.take(first, order), mx.np.take(counts, order), mx.np.take(rank, inverse)
        as_int64 = lambda a: np.asarray(a.asnumpy(), dtype=np.int64)  # noqa: E731
        return (values.asnumpy().astype(dtype, copy=False), as_int64(first), as_int64(inverse), as_int64(counts))
