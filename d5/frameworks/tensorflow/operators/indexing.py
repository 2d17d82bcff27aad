"""Indexing operators as native TensorFlow operations: the gathers (Gather, GatherElements, GatherND), the scatters
(ScatterElements and its deprecated alias Scatter, ScatterND, TensorScatter), OneHot, Trilu, TopK, Compress,
NonZero and Unique. Negative indices count from the end, as ONNX allows.

Indices out of range are a ShapeError where their values are known while tracing (eagerly, or constants);
inside a traced function on data-dependent indices, TensorFlow's CPU kernels refuse them at run time.

Every scatter is one scatter over rows of a flattened copy of data (:func:`_scatter_rows`). Reduction 'none'
writes through an owner map (which update each element takes: the last one naming it, as the reference's
NumPy assignment leaves), so the gradients are the reference's even where indices repeat: data gets the output
gradient where nothing was written, each update the gradient of the element it won. Compress, NonZero and
Unique have data-dependent output shapes (dynamic inside a traced function).
"""
from __future__ import annotations

import math

import numpy as np
import tensorflow as tf

from d5.errors import UnsupportedOperatorError
from d5.frameworks.tensorflow.operators import TFOp, register
from d5.frameworks.tensorflow.operators._helpers import ints, static, static_shape
from d5.ops.onnx_attributes import adopt, operator_attributes
from d5.ops.onnx_semantics import normalize_axis
from d5.ops.tensor_checks import (check_axis_indices, check_gather_elements, check_indices, check_one_hot_inputs,
                                  check_rank, check_scatter_elements, check_scatter_inputs, check_top_k,
                                  check_write_index_count, check_write_positions, compress_axis, element_offsets,
                                  gather_nd_depth, one_hot_depth, require_integer_indices, require_single_value,
                                  scatter_nd_depth, strides, tensor_scatter_axis, top_k_count, unique_axis)


def _integer_indices(op_name: str, indices) -> tf.Tensor:
    """``indices`` as int64 (a ShapeError for non-integer ones, as the reference)."""
    require_integer_indices(op_name, indices.dtype.is_integer, indices.dtype.name)
    return tf.cast(indices, tf.int64)


def _checked(op_name: str, indices, sizes, message: str = "position") -> tf.Tensor:
    """Integer ``indices`` as int64 with negative values wrapped once. ``sizes``: one axis length, or one per
    entry of the last axis of ``indices``. Values known while tracing are range-checked (a ShapeError naming
    the first bad index, as the PyTorch converter's)."""
    indices = _integer_indices(op_name, indices)
    sizes = np.asarray(sizes, dtype=np.int64)
    known = static(indices)
    if known is not None:
        if message == "range":  # the gathers: the range of the values found
            check_axis_indices(op_name, known, int(sizes))
        else:
            check_indices(op_name, known, sizes)
    sizes = tf.constant(sizes)
    return tf.where(indices < 0, indices + sizes, indices)


@register("Gather")
class Gather(TFOp):
    """``take`` along ``axis``: the output is data's shape with ``axis`` replaced by indices' shape."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("Gather", attributes))

    def __call__(self, data, indices):
        axis = normalize_axis("Gather", self.axis, data.shape.rank)
        dim = data.shape[axis]
        if dim is None:
            index = _integer_indices("Gather", indices)
            index = tf.where(index < 0, index + tf.shape(data, out_type=tf.int64)[axis], index)
        else:
            index = _checked("Gather", indices, dim, "range")
        return tf.gather(data, index, axis=axis)


@register("GatherElements")
class GatherElements(TFOp):
    """``out[i][j] = data[indices[i][j]][j]`` for ``axis=0``: one batched gather with ``axis`` moved last."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("GatherElements", attributes))

    def __call__(self, data, indices):
        rank = data.shape.rank
        axis = normalize_axis("GatherElements", self.axis, rank)
        shape, index_shape = static_shape(data), static_shape(indices)
        check_gather_elements(shape, index_shape, axis)
        index = _checked("GatherElements", indices, shape[axis], "range")
        # On the other axes data is read only where indices reach (the output has the shape of indices).
        crop = tuple(slice(None) if d == axis else slice(0, n) for d, n in enumerate(index_shape))
        if any(n != m for d, (n, m) in enumerate(zip(index_shape, shape)) if d != axis):
            data = data[crop]
        if axis == rank - 1:
            return tf.gather(data, index, batch_dims=rank - 1)
        perm = [d for d in range(rank) if d != axis] + [axis]
        inverse = np.argsort(perm).tolist()
        picked = tf.gather(tf.transpose(data, perm), tf.transpose(index, perm), batch_dims=rank - 1)
        return tf.transpose(picked, inverse)


@register("GatherND")
class GatherND(TFOp):
    """Slices of ``data`` at the index tuples in the last axis of ``indices`` (``batch_dims`` leading axes
    shared): tf.gather_nd."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("GatherND", attributes))

    def __call__(self, data, indices):
        b = self.batch_dims
        shape, index_shape = static_shape(data), static_shape(indices)
        require_integer_indices("GatherND", indices.dtype.is_integer, indices.dtype.name, "int64 (or int32)")
        depth = gather_nd_depth(shape, index_shape, b)
        index = _checked("GatherND", indices, shape[b:b + depth])
        return tf.gather_nd(data, index, batch_dims=b)


def _scatter_rows(flat: tf.Tensor, rows: tf.Tensor, values: tf.Tensor, reduction: str) -> tf.Tensor:
    """``flat`` (R, ...) with ``values`` (n, ...) written (or reduced) into rows ``rows`` (n,), int64 in [0, R)."""
    count = flat.shape[0]
    where = rows[:, None]
    if flat.dtype == tf.bool and reduction != "none":
        # No boolean kernels: NumPy's add/mul/max/min of booleans are or/and/or/and, which int32 then
        # "is nonzero" give.
        reduced = _scatter_rows(tf.cast(flat, tf.int32), rows, tf.cast(values, tf.int32), reduction)
        return tf.cast(reduced, tf.bool)
    if reduction == "add":
        return tf.tensor_scatter_nd_add(flat, where, values)
    if reduction == "max":
        return tf.tensor_scatter_nd_max(flat, where, values)
    if reduction == "min":
        return tf.tensor_scatter_nd_min(flat, where, values)
    if reduction == "mul":  # no scatter-multiply kernel: the product of each row's updates (1 where none)
        return flat * tf.math.unsorted_segment_prod(values, rows, count)
    # 'none': the owner of each row is the last update naming it (the largest update number), so the result is
    # deterministic and, differentiated through the gather, the reference's gradient.
    numbers = tf.range(tf.shape(rows, out_type=tf.int64)[0], dtype=tf.int64)
    owner = tf.tensor_scatter_nd_max(tf.fill([count], tf.constant(-1, tf.int64)), where, numbers)
    written = tf.reshape(owner >= 0, [count] + [1] * (flat.shape.rank - 1))
    return tf.where(written, tf.gather(values, tf.maximum(owner, 0)), flat)


class _Scatter(TFOp):
    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes(type(self).__name__, attributes))

    def _inputs(self, data, indices, updates):
        check_scatter_inputs(type(self).__name__, data, indices, updates, lambda x: tuple(x.shape.as_list()))
        return static_shape(data), static_shape(indices), static_shape(updates)


def _element_offsets(shape: tuple[int, ...], index_shape: tuple[int, ...], axis: int) -> tuple[tf.Tensor, int]:
    """ScatterElements' plan (:func:`~d5.ops.tensor_checks.element_offsets`) as a constant, and the stride of
    ``axis``."""
    return tf.constant(element_offsets(shape, index_shape, axis), tf.int64), strides(shape)[axis]


@register("ScatterElements", "Scatter")
class ScatterElements(_Scatter):
    """A copy of ``data`` with ``updates`` written (or reduced) at ``indices`` along ``axis``."""

    def __call__(self, data, indices, updates):
        shape, index_shape, update_shape = self._inputs(data, indices, updates)
        axis = normalize_axis("ScatterElements", self.axis, len(shape))
        check_scatter_elements(shape, index_shape, axis, update_shape)
        index = _checked("ScatterElements", indices, shape[axis])
        offsets, stride = self.planned(("elements", shape, index_shape, axis), _element_offsets, shape,
                                       index_shape, axis)
        rows = tf.reshape(offsets + index * stride, [-1])
        flat = tf.reshape(data, [-1])
        values = tf.reshape(tf.cast(updates, data.dtype), [-1])
        return tf.reshape(_scatter_rows(flat, rows, values, self.reduction), shape)


@register("ScatterND")
class ScatterND(_Scatter):
    """A copy of ``data`` with ``updates`` written (or reduced) at the index tuples in the last axis of
    ``indices`` (a tuple shorter than data's rank addresses a slice). The indexed leading axes of data are
    flattened into one, so every form is a scatter of rows."""

    def __call__(self, data, indices, updates):
        shape, index_shape, update_shape = self._inputs(data, indices, updates)
        depth = scatter_nd_depth(shape, index_shape, update_shape)
        index = _checked("ScatterND", indices, shape[:depth])
        rows = tf.reshape(tf.reduce_sum(index * tf.constant(strides(shape[:depth]), tf.int64), axis=-1), [-1])
        flat = tf.reshape(data, (-1,) + shape[depth:])
        values = tf.reshape(tf.cast(updates, data.dtype), (-1,) + shape[depth:])
        return tf.reshape(_scatter_rows(flat, rows, values, self.reduction), shape)


@register("TensorScatter")
class TensorScatter(TFOp):
    """Write ``update`` into a copy of ``past_cache`` along the sequence ``axis`` (never 0, the batch axis),
    starting for batch ``b`` at ``write_indices[b]`` (default 0); ``mode='circular'`` wraps the positions. The
    (batch, axis) pairs are flattened into rows of one scatter."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("TensorScatter", attributes))

    def __call__(self, cache, update, write_indices=None):
        shape, update_shape = tuple(cache.shape.as_list()), tuple(update.shape.as_list())
        if len(shape) >= 2:  # (else tensor_scatter_axis names the missing axes)
            shape, update_shape = static_shape(cache), static_shape(update)
        axis = tensor_scatter_axis(shape, update_shape, self.axis)
        batch, length, steps = shape[0], shape[axis], update_shape[axis]
        if write_indices is None or write_indices.shape.num_elements() == 0:
            starts = tf.zeros([batch], tf.int64)
        else:
            count = write_indices.shape.num_elements()
            check_write_index_count(batch, count, tuple(write_indices.shape.as_list()))
            starts = tf.reshape(tf.cast(write_indices, tf.int64), [batch])
            known = static(write_indices)
            if known is not None:
                check_write_positions(known.astype(np.int64).reshape(-1), steps, length, self.mode)
        positions = starts[:, None] + tf.range(steps, dtype=tf.int64)  # (batch, steps)
        if self.mode == "circular":
            positions = tf.math.floormod(positions, length)
        rows = tf.reshape(positions + tf.range(batch, dtype=tf.int64)[:, None] * length, [-1])
        # (batch, axis, rest...) order, so that the rows are (batch, position) pairs.
        perm = [0, axis] + [d for d in range(1, len(shape)) if d != axis]
        rest = [shape[d] for d in perm[2:]]
        flat = tf.reshape(tf.transpose(cache, perm), [batch * length] + rest)
        values = tf.reshape(tf.transpose(tf.cast(update, cache.dtype), perm), [batch * steps] + rest)
        out = tf.reshape(_scatter_rows(flat, rows, values, "none"), [batch, length] + rest)
        return tf.transpose(out, np.argsort(perm).tolist())


@register("OneHot")
class OneHot(TFOp):
    """One-hot encode ``indices`` with ``depth`` classes along a new ``axis``; ``values`` = [off, on]. An
    index out of ``[-depth, depth)`` gives a row of off values; the gradient reaches ``values`` (selected with
    tf.where: tf.one_hot does not differentiate its on/off values)."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("OneHot", attributes))

    def __call__(self, indices, depth, values):
        check_one_hot_inputs(tuple(depth.shape.as_list()), tuple(values.shape.as_list()), depth.dtype != tf.bool,
                             depth.dtype.name)
        known = static(depth)
        if known is None:
            raise UnsupportedOperatorError("OneHot: the TensorFlow framework needs depth as a value known while "
                                           "tracing, not a tensor computed from the data")
        count = one_hot_depth(float(np.asarray(known).reshape(-1)[0]))
        indices = tf.cast(indices, tf.int64)  # float indices truncate toward zero, as the spec's cast does
        indices = tf.where(indices < 0, indices + count, indices)
        rank = indices.shape.rank
        axis = normalize_axis("OneHot", self.axis, rank + 1)
        classes = tf.reshape(tf.range(count, dtype=tf.int64), [count] + [1] * (rank - axis))
        hot = tf.equal(tf.expand_dims(indices, axis), classes)
        return tf.where(hot, values[1], values[0])


@register("Trilu")
class Trilu(TFOp):
    """Keep the upper (``upper=1``) or lower triangle of the last two axes, offset by the optional input ``k``."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("Trilu", attributes))

    def __call__(self, x, k=None):
        check_rank("Trilu", tuple(x.shape.as_list()), "the input", at_least=2)
        if k is not None:
            require_single_value("Trilu", "k (input 1)", k.shape.num_elements(), tuple(k.shape.as_list()))
        offset = 0 if k is None else ints(k, "Trilu's k")[0]
        dims = tf.shape(x, out_type=tf.int64)
        diagonal = tf.range(dims[-1])[None, :] - tf.range(dims[-2])[:, None]  # column - row
        keep = diagonal >= offset if self.upper else diagonal <= offset
        return tf.where(keep, x, tf.zeros([], x.dtype))


@register("TopK")
class TopK(TFOp):
    """The ``k`` largest (or smallest) values along ``axis`` and their int64 indices; ties keep the lower
    index (tf.math.top_k's promise). The smallest are the largest of an order-reversing key: the negated
    values, or the complemented bits of integers (no overflow). ``k`` is the second input (opset 10+) or the
    attribute (opset 1)."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("TopK", attributes))

    def __call__(self, x, k=None):
        if k is not None:
            require_single_value("TopK", "k (input 1)", k.shape.num_elements(), tuple(k.shape.as_list()))
        count = top_k_count(None if k is None else ints(k, "TopK's k")[0], self.k)
        rank = x.shape.rank
        check_rank("TopK", tuple(x.shape.as_list()), "X", at_least=1)
        axis = normalize_axis("TopK", self.axis, rank)
        check_top_k(count, axis, x.shape[axis])
        perm = None if axis == rank - 1 else [d for d in range(rank) if d != axis] + [axis]
        moved = x if perm is None else tf.transpose(x, perm)
        if moved.dtype == tf.bool:  # top_k has no boolean kernel; the ordering of 0 and 1 is the same
            moved = tf.cast(moved, tf.uint8)
        if self.largest:
            key = moved
        elif moved.dtype.is_integer:
            key = tf.bitwise.invert(moved)
        else:
            key = -moved
        _, indices = tf.math.top_k(key, k=count, sorted=True)
        indices = tf.cast(indices, tf.int64)
        values = tf.cast(tf.gather(moved, indices, batch_dims=rank - 1), x.dtype)
        if perm is not None:
            inverse = np.argsort(perm).tolist()
            values, indices = tf.transpose(values, inverse), tf.transpose(indices, inverse)
        return values, indices


@register("Compress")
class Compress(TFOp):
    """The slices of the input along ``axis`` (flattened when absent) where ``condition`` is true; condition
    may be shorter than the axis (the rest is dropped), not longer."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("Compress", attributes))

    def __call__(self, x, condition):
        axis = compress_axis(tuple(x.shape.as_list()), tuple(condition.shape.as_list()), self.axis)
        if self.axis is None:
            x = tf.reshape(x, [-1])
        selected = condition if condition.dtype == tf.bool else tf.not_equal(condition, tf.zeros([], condition.dtype))
        return tf.gather(x, tf.reshape(tf.where(selected), [-1]), axis=axis)


@register("NonZero")
class NonZero(TFOp):
    """Indices of the non-zero elements, shape (rank, count), int64 (a 0-d input counts as rank 1)."""

    def __call__(self, x):
        if x.shape.rank == 0:
            x = tf.reshape(x, [1])
        selected = x if x.dtype == tf.bool else tf.not_equal(x, tf.zeros([], x.dtype))
        return tf.transpose(tf.where(selected))


def _lexicographic_order(keys: tf.Tensor) -> tf.Tensor:
    """The permutation sorting the rows of ``keys`` (U, K) lexicographically: stable sorts by column, the last
    column first (the rows are distinct, so there are no ties to keep)."""
    order = tf.range(tf.shape(keys, out_type=tf.int64)[0], dtype=tf.int64)
    for column in reversed(range(keys.shape[1])):
        order = tf.gather(order, tf.argsort(tf.gather(keys[:, column], order), stable=True))
    return order


@register("Unique")
class Unique(TFOp):
    """Unique elements (or slices along ``axis``): values, first-occurrence indices, inverse indices and
    counts (int64). TensorFlow's Unique gives them in order of first occurrence (``sorted=0``); ``sorted=1``
    reorders them ascending (slices lexicographically)."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("Unique", attributes))

    def __call__(self, x):
        rank = x.shape.rank
        boolean = x.dtype == tf.bool
        if boolean:  # no boolean Unique kernel: the same order and groups as uint8
            x = tf.cast(x, tf.uint8)
        if self.axis is None:
            flat, axis = tf.reshape(x, [-1]), 0
            values, inverse, counts = tf.unique_with_counts(flat, out_idx=tf.int64)
        else:
            axis = unique_axis(self.axis, rank)
            values, inverse, counts = tf.raw_ops.UniqueWithCountsV2(x=x, axis=tf.constant([axis], tf.int64),
                                                                   out_idx=tf.int64)
        positions = tf.range(tf.shape(inverse, out_type=tf.int64)[0], dtype=tf.int64)
        first = tf.math.unsorted_segment_min(positions, inverse, tf.shape(counts, out_type=tf.int64)[0])
        if self.sorted:
            if self.axis is None:
                keys = values[:, None]
            else:  # each unique slice as one row of keys
                width = math.prod(d for i, d in enumerate(static_shape(x)) if i != axis)
                moved = tf.transpose(values, [axis] + [d for d in range(rank) if d != axis])
                keys = tf.reshape(moved, tf.stack([tf.shape(values, out_type=tf.int64)[axis], width]))
            order = _lexicographic_order(keys)
            rank_of = tf.math.invert_permutation(order)
            values = tf.gather(values, order, axis=axis)
            first, counts, inverse = tf.gather(first, order), tf.gather(counts, order), tf.gather(rank_of, inverse)
        return tf.cast(values, tf.bool) if boolean else values, first, inverse, tf.cast(counts, tf.int64)
