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

from d5.errors import ShapeError, UnsupportedOperatorError
from d5.frameworks.tensorflow.operators import TFOp, register
from d5.frameworks.tensorflow.operators._helpers import ints, static, static_shape
from d5.ops.onnx_attributes import adopt, operator_attributes
from d5.ops.onnx_semantics import normalize_axis


def _integer_indices(op_name: str, indices) -> tf.Tensor:
    """``indices`` as int64 (a ShapeError for non-integer ones, as the reference)."""
    if not indices.dtype.is_integer:
        raise ShapeError(f"{op_name}: indices must be int32 or int64, got {indices.dtype.name}; Cast them first")
    return tf.cast(indices, tf.int64)


def _checked(op_name: str, indices, sizes, message: str = "position") -> tf.Tensor:
    """Integer ``indices`` as int64 with negative values wrapped once. ``sizes``: one axis length, or one per
    entry of the last axis of ``indices``. Values known while tracing are range-checked (a ShapeError naming
    the first bad index, as the PyTorch converter's)."""
    indices = _integer_indices(op_name, indices)
    sizes = np.asarray(sizes, dtype=np.int64)
    known = static(indices)
    if known is not None and known.size:
        bad = (known < -sizes) | (known >= sizes)
        if bad.any():
            if message == "range":  # the gathers: the range of the values found
                dim = int(sizes)
                raise ShapeError(f"{op_name}: indices must lie in [{-dim}, {dim - 1}] for an axis of length {dim}, "
                                 f"got values in [{known.min()}, {known.max()}]")
            where = [int(i) for i in np.argwhere(bad)[0]]
            size = int(sizes[where[-1]] if sizes.ndim else sizes)
            raise ShapeError(f"{op_name}: index {int(known[tuple(where)])} (at position {where} of indices) is out "
                             f"of range for an axis of size {size}; use indices in [{-size}, {size - 1}]")
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
        if len(index_shape) != rank:
            raise ShapeError(f"GatherElements: indices (shape {index_shape}) must have the rank of data {shape}")
        if any(n > m for d, (n, m) in enumerate(zip(index_shape, shape)) if d != axis):
            raise ShapeError(f"GatherElements: indices of shape {index_shape} are larger than data {shape} on an "
                             f"axis other than axis {axis}; there they may be at most as large as data")
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
        if not indices.dtype.is_integer:
            raise ShapeError(f"GatherND: indices must be int64 (or int32), got {indices.dtype.name}; Cast them first")
        if not 0 <= b < min(len(index_shape), len(shape)) or index_shape[:b] != shape[:b]:
            raise ShapeError(f"GatherND: batch_dims={b} needs data and indices of higher rank sharing their first "
                             f"{b} dimensions; got data {shape} and indices {index_shape}")
        depth = index_shape[-1]
        if depth > len(shape) - b:
            raise ShapeError(f"GatherND: indices of depth {depth} index more than the {len(shape) - b} non-batch "
                             f"axes of data of shape {shape}")
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
        name = type(self).__name__
        if data is None or indices is None or updates is None:
            raise ShapeError(f"{name}: expected the three inputs (data, indices, updates)")
        if data.shape.rank < 1:
            raise ShapeError(f"{name}: data must have at least 1 dimension, got shape {tuple(data.shape.as_list())}")
        return static_shape(data), static_shape(indices), static_shape(updates)


def _element_offsets(shape: tuple[int, ...], index_shape: tuple[int, ...], axis: int) -> tuple[tf.Tensor, int]:
    """ScatterElements' plan: the flat offset in data of each indices position with its ``axis`` coordinate
    taken as 0, and the stride of ``axis``."""
    strides = [math.prod(shape[d + 1:]) for d in range(len(shape))]
    grid = np.indices(index_shape, dtype=np.int64) if index_shape else np.zeros((0,), np.int64)
    offsets = sum((grid[d] * strides[d] for d in range(len(shape)) if d != axis), np.zeros(index_shape, np.int64))
    return tf.constant(offsets, tf.int64), strides[axis]


@register("ScatterElements", "Scatter")
class ScatterElements(_Scatter):
    """A copy of ``data`` with ``updates`` written (or reduced) at ``indices`` along ``axis``."""

    def __call__(self, data, indices, updates):
        shape, index_shape, update_shape = self._inputs(data, indices, updates)
        axis = normalize_axis("ScatterElements", self.axis, len(shape))
        if len(index_shape) != len(shape) or any(i > d for a, (i, d) in enumerate(zip(index_shape, shape))
                                                 if a != axis):
            raise ShapeError(f"ScatterElements: indices must have the rank of data ({len(shape)}) and, except on "
                             f"axis {axis}, no larger dimensions; got indices {index_shape} for data {shape}")
        if update_shape != index_shape:
            raise ShapeError(f"ScatterElements: updates must have shape {index_shape} (that of indices), got "
                             f"{update_shape}")
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
        depth = index_shape[-1] if index_shape else 0
        if not index_shape or not 1 <= depth <= len(shape):
            raise ShapeError(f"ScatterND: indices must have at least one axis, whose last length (here {depth}) is "
                             f"from 1 to data's rank {len(shape)}; got indices {index_shape} for data {shape}")
        expected = index_shape[:-1] + shape[depth:]
        if update_shape != expected:
            raise ShapeError(f"ScatterND: updates must have shape {expected} (set by data {shape} and indices "
                             f"{index_shape}), got {update_shape}")
        index = _checked("ScatterND", indices, shape[:depth])
        strides = [math.prod(shape[d + 1:depth]) for d in range(depth)]
        rows = tf.reshape(tf.reduce_sum(index * tf.constant(strides, tf.int64), axis=-1), [-1])
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
        if cache.shape.rank < 2:
            raise ShapeError(f"TensorScatter: past_cache needs a batch and a sequence axis, got shape "
                             f"{tuple(cache.shape.as_list())}")
        shape, update_shape = static_shape(cache), static_shape(update)
        axis = normalize_axis("TensorScatter", self.axis, len(shape))
        if axis == 0:
            raise ShapeError("TensorScatter: axis cannot be 0 (the batch axis)")
        if (len(update_shape) != len(shape) or update_shape[axis] > shape[axis]
                or any(u != c for i, (u, c) in enumerate(zip(update_shape, shape)) if i != axis)):
            raise ShapeError(f"TensorScatter: update shape {update_shape} must equal past_cache shape {shape} "
                             f"except along axis {axis}, where it may not be longer")
        batch, length, steps = shape[0], shape[axis], update_shape[axis]
        if write_indices is None or write_indices.shape.num_elements() == 0:
            starts = tf.zeros([batch], tf.int64)
        else:
            if write_indices.shape.num_elements() != batch:
                raise ShapeError(f"TensorScatter: write_indices must have shape ({batch},), got "
                                 f"{tuple(write_indices.shape.as_list())}")
            starts = tf.reshape(tf.cast(write_indices, tf.int64), [batch])
            known = static(write_indices)
            if known is not None and self.mode != "circular" and steps:
                known = known.astype(np.int64).reshape(-1)
                bad = (known < 0) | (known + steps > length)
                if bad.any():
                    raise ShapeError(f"TensorScatter: write index {known[bad][0]} + sequence length {steps} exceeds "
                                     f"the cache length {length} (mode='linear'); use mode='circular' to wrap around")
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
        depth_count, value_count = depth.shape.num_elements(), values.shape.num_elements()
        swapped = " (are depth and values swapped? The inputs are (indices, depth, values))" \
            if depth_count == 2 and value_count == 1 else ""
        if depth_count != 1 or depth.shape.rank > 1 or depth.dtype == tf.bool:
            raise ShapeError(f"OneHot: depth (input 1) must be one number (a scalar or a 1-element tensor), got "
                             f"{depth.dtype.name} of shape {tuple(depth.shape.as_list())}{swapped}")
        if value_count != 2 or values.shape.rank != 1:
            raise ShapeError(f"OneHot: values (input 2) must be a 1-D tensor of 2 elements, [off_value, on_value], "
                             f"got shape {tuple(values.shape.as_list())}{swapped}")
        known = static(depth)
        if known is None:
            raise UnsupportedOperatorError("OneHot: the TensorFlow framework needs depth as a value known while "
                                           "tracing, not a tensor computed from the data")
        count = float(np.asarray(known).reshape(-1)[0])
        if not math.isfinite(count) or int(count) < 1:
            raise ShapeError(f"OneHot: depth must be at least 1 (the number of classes), got {count}")
        count = int(count)
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
        if x.shape.rank < 2:
            raise ShapeError(f"Trilu: the input must have at least 2 dimensions, got shape {tuple(x.shape.as_list())}")
        if k is not None and k.shape.num_elements() != 1:
            raise ShapeError(f"Trilu: k (input 1) must be a single value (a scalar or a 1-element tensor), got "
                             f"shape {tuple(k.shape.as_list())}")
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
        if k is not None and k.shape.num_elements() != 1:
            raise ShapeError(f"TopK: k (input 1) must be a single value (a scalar or a 1-element tensor), got shape "
                             f"{tuple(k.shape.as_list())}")
        count = self.k if k is None else ints(k, "TopK's k")[0]
        if count is None:
            raise ShapeError("TopK: k is required (the second input from opset 10, the attribute before)")
        count = int(count)
        rank = x.shape.rank
        if rank < 1:
            raise ShapeError(f"TopK: X must have at least 1 dimension, got shape {tuple(x.shape.as_list())}")
        axis = normalize_axis("TopK", self.axis, rank)
        dim = x.shape[axis]
        if dim is not None and not 0 <= count <= dim:
            raise ShapeError(f"TopK: k={count} is out of range for axis {axis} of length {dim}")
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
        if condition.shape.rank != 1:
            raise ShapeError(f"Compress: condition must be a 1-D tensor, got shape "
                             f"{tuple(condition.shape.as_list())}")
        if self.axis is None:
            x, axis = tf.reshape(x, [-1]), 0
        else:
            if x.shape.rank < 1:
                raise ShapeError(f"Compress: input must have at least 1 dimension, got shape "
                                 f"{tuple(x.shape.as_list())}")
            axis = normalize_axis("Compress", self.axis, x.shape.rank)
        length, entries = x.shape[axis], condition.shape[0]
        if length is not None and entries is not None and entries > length:
            raise ShapeError(f"Compress: condition has {entries} entries, more than the {length} "
                             f"{'elements of the input' if self.axis is None else f'slices along axis {axis}'}")
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
            if not -rank <= self.axis < rank:
                raise ShapeError(f"Unique: axis {self.axis} out of range for a rank-{rank} input")
            axis = self.axis % rank
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
