"""Framework-neutral checks and plans of the indexing, shape, loss and linear-algebra operators.

The native converters (torch, TensorFlow, MXNet) and the NumPy reference implement the same ONNX semantics, with
the same argument checks and error messages and the same shape plans; those live here once, in plain Python and
NumPy, and the converters keep only the computation on their own tensors. Shapes are passed as tuples (a
dimension TensorFlow does not know while tracing may be None where a function says so); index and label values
as NumPy arrays; a dtype as the text a message shows (each framework names its dtypes its own way). Nothing here
imports a deep-learning framework. Errors are :class:`d5.errors.ShapeError` naming the operator.

- common: :func:`check_rank`, :func:`require_single_value`;
- indexing: :func:`require_integer_indices`, :func:`check_axis_indices`, :func:`check_indices`,
  :func:`check_gather_elements`, :func:`gather_nd_depth`, :func:`check_scatter_inputs`,
  :func:`check_scatter_elements`, :func:`scatter_nd_depth`, :func:`strides`, :func:`element_offsets`,
  :func:`tensor_scatter_axis`, :func:`check_write_index_count`, :func:`check_write_positions`,
  :func:`check_one_hot_inputs`, :func:`one_hot_depth`, :func:`one_hot_mask`, :func:`top_k_count`,
  :func:`check_top_k`, :func:`compress_axis`, :func:`unique_axis`;
- shape: :func:`flatten_axis`, :func:`transpose_perm`, :func:`concat_axis`, :func:`check_concat_shapes`,
  :func:`slice_arguments`, :func:`slice_index`, :func:`pad_widths`, :func:`pad_positions`, :func:`squeeze_axes`,
  :func:`unsqueeze_axes`, :func:`unsqueeze_shape`, :func:`expand_shape`, :func:`tile_shape`, :func:`shape_range`,
  :func:`space_to_depth_plan` and :func:`depth_to_space_plan` (a :class:`BlockPlan`),
  :func:`reverse_sequence_lengths`, :func:`check_sequence_length_values`;
- losses: :func:`check_loss_scores`, :func:`check_loss_inputs`, :func:`check_class_weights`, :func:`check_labels`;
- linear algebra: :func:`broadcasts_to`, :func:`check_gemm_operands`, :func:`check_gemm_bias`,
  :func:`gemm_shape`, :func:`matmul_mismatch`, :func:`check_matmul_shapes`, :func:`check_square_matrices`,
  :func:`require_einsum_dtype`, :func:`einsum_mismatch`.

>>> check_indices("ScatterND", np.array([[0, 3]]), (3, 3))
Traceback (most recent call last):
  ...
d5.errors.ShapeError: ScatterND: index 3 (at position [0, 1] of indices) is out of range for an axis of size 3; use indices in [-3, 2]
>>> slice_index((5, 4), [-1], [-100], [0], [-2])
(slice(4, None, -2), slice(None, None, None))
>>> gemm_shape((3, 4), (5, 4), (5,), trans_a=False, trans_b=True)
(3, 4, 5)
"""
from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np

from d5.errors import ShapeError
from d5.ops.onnx_semantics import normalize_axes, normalize_axis, slice_bounds


def _count(shape: Sequence[int | None]) -> int | None:
    """The number of elements of ``shape``; None when a dimension is unknown (None)."""
    return None if None in tuple(shape) else math.prod(shape)


# ------------------------------------------------------------------------------------------------ common

def check_rank(op_name: str, shape: Sequence[int | None], what: str, rank: int | None = None,
               at_least: int | None = None) -> None:
    """A ShapeError unless ``shape`` has ``rank`` dimensions (or at least ``at_least``); ``what`` names the input.

    >>> check_rank("DepthToSpace", (2, 3), "input", rank=4)
    Traceback (most recent call last):
      ...
    d5.errors.ShapeError: DepthToSpace: input must be a 4-D tensor, got shape (2, 3)
    """
    shape = tuple(shape)
    if rank is not None and len(shape) != rank:
        raise ShapeError(f"{op_name}: {what} must be a {rank}-D tensor, got shape {shape}")
    if at_least is not None and len(shape) < at_least:
        raise ShapeError(f"{op_name}: {what} must have at least {at_least} dimension{'' if at_least == 1 else 's'}, "
                         f"got shape {shape}")


def require_single_value(op_name: str, what: str, count: int | None, shape: Any) -> None:
    """A ShapeError unless an input holds exactly one value (``count`` elements; None: not known), as ONNX's k
    inputs must; the message shows ``shape``.

    >>> require_single_value("TopK", "k (input 1)", 2, (2,))
    Traceback (most recent call last):
      ...
    d5.errors.ShapeError: TopK: k (input 1) must be a single value (a scalar or a 1-element tensor), got shape (2,)
    """
    if count != 1:
        raise ShapeError(f"{op_name}: {what} must be a single value (a scalar or a 1-element tensor), got shape "
                         f"{shape}")


# ------------------------------------------------------------------------------------------------ indexing

def require_integer_indices(op_name: str, integer: bool, dtype: Any, expected: str = "int32 or int64") -> None:
    """A ShapeError unless the indices are ``integer`` (``dtype``: their dtype as the message shows it).

    >>> require_integer_indices("GatherND", False, "float32", "int64 (or int32)")
    Traceback (most recent call last):
      ...
    d5.errors.ShapeError: GatherND: indices must be int64 (or int32), got float32; Cast them first
    """
    if not integer:
        raise ShapeError(f"{op_name}: indices must be {expected}, got {dtype}; Cast them first")


def check_axis_indices(op_name: str, indices: np.ndarray, dim: int) -> None:
    """A ShapeError unless every value of the integer ``indices`` lies in ``[-dim, dim)`` (Gather's and
    GatherElements' message: the range of the values found).

    >>> check_axis_indices("Gather", np.array([0, 5]), 4)
    Traceback (most recent call last):
      ...
    d5.errors.ShapeError: Gather: indices must lie in [-4, 3] for an axis of length 4, got values in [0, 5]
    """
    if indices.size and (indices.min() < -dim or indices.max() >= dim):
        raise ShapeError(f"{op_name}: indices must lie in [{-dim}, {dim - 1}] for an axis of length {dim}, got "
                         f"values in [{indices.min()}, {indices.max()}]")


def check_indices(op_name: str, indices: np.ndarray, sizes: Any) -> None:
    """A ShapeError naming the first index out of ``[-size, size)``, where ``sizes`` (one axis length, or one per
    entry of the last axis of the integer ``indices``) broadcasts against ``indices`` (the scatters, GatherND)."""
    if not indices.size:
        return
    sizes = np.asarray(sizes, dtype=np.int64)
    bad = (indices < -sizes) | (indices >= sizes)
    if bad.any():
        where = [int(i) for i in np.argwhere(bad)[0]]
        size = int(sizes[where[-1]] if sizes.ndim else sizes)
        raise ShapeError(f"{op_name}: index {int(indices[tuple(where)])} (at position {where} of indices) is out "
                         f"of range for an axis of size {size}; use indices in [{-size}, {size - 1}]")


def check_gather_elements(shape: tuple[int, ...], index_shape: tuple[int, ...], axis: int) -> None:
    """GatherElements' shape rules: indices of data's rank, nowhere but on ``axis`` larger than data."""
    if len(index_shape) != len(shape):
        raise ShapeError(f"GatherElements: indices (shape {index_shape}) must have the rank of data {shape}")
    if any(n > m for d, (n, m) in enumerate(zip(index_shape, shape)) if d != axis):
        raise ShapeError(f"GatherElements: indices of shape {index_shape} are larger than data {shape} on an "
                         f"axis other than axis {axis}; there they may be at most as large as data")


def gather_nd_depth(shape: tuple[int, ...], index_shape: tuple[int, ...], batch_dims: int) -> int:
    """GatherND's index depth (the last length of ``index_shape``), after checking ``batch_dims`` and the depth
    against data's ``shape``.

    >>> gather_nd_depth((2, 3, 4), (2, 5, 1), batch_dims=1)
    1
    """
    b = batch_dims
    if not 0 <= b < min(len(index_shape), len(shape)) or tuple(index_shape[:b]) != tuple(shape[:b]):
        raise ShapeError(f"GatherND: batch_dims={b} needs data and indices of higher rank sharing their first "
                         f"{b} dimensions; got data {shape} and indices {index_shape}")
    depth = index_shape[-1]
    if depth > len(shape) - b:
        raise ShapeError(f"GatherND: indices of depth {depth} index more than the {len(shape) - b} non-batch "
                         f"axes of data of shape {shape}")
    return depth


def check_scatter_inputs(op_name: str, data: Any, indices: Any, updates: Any,
                         shape: Callable[[Any], tuple[int, ...]]) -> tuple[int, ...]:
    """Data's shape (by the framework's ``shape``) after checking the three inputs of a scatter are given and data
    has at least one dimension."""
    if data is None or indices is None or updates is None:
        raise ShapeError(f"{op_name}: expected the three inputs (data, indices, updates)")
    data_shape = shape(data)
    check_rank(op_name, data_shape, "data", at_least=1)
    return data_shape


def check_scatter_elements(shape: tuple[int, ...], index_shape: tuple[int, ...], axis: int,
                           update_shape: tuple[int, ...] | None = None) -> None:
    """ScatterElements' shape rules: indices of data's rank, nowhere but on ``axis`` larger than data; updates
    (when ``update_shape`` is given) of indices' shape."""
    if len(index_shape) != len(shape) or any(i > d for a, (i, d) in enumerate(zip(index_shape, shape)) if a != axis):
        raise ShapeError(f"ScatterElements: indices must have the rank of data ({len(shape)}) and, except on "
                         f"axis {axis}, no larger dimensions; got indices {index_shape} for data {shape}")
    if update_shape is not None and tuple(update_shape) != tuple(index_shape):
        raise ShapeError(f"ScatterElements: updates must have shape {index_shape} (that of indices), got "
                         f"{update_shape}")


def scatter_nd_depth(shape: tuple[int, ...], index_shape: tuple[int, ...],
                     update_shape: tuple[int, ...] | None = None) -> int:
    """ScatterND's index depth (the last length of ``index_shape``, from 1 to data's rank), after checking it and
    (when ``update_shape`` is given) that updates have the shape indices and data set.

    >>> scatter_nd_depth((4, 4, 4), (2, 1), (2, 4, 4))
    1
    """
    depth = index_shape[-1] if index_shape else 0
    if not index_shape or not 1 <= depth <= len(shape):
        raise ShapeError(f"ScatterND: indices must have at least one axis, whose last length (here {depth}) is "
                         f"from 1 to data's rank {len(shape)}; got indices {index_shape} for data {shape}")
    if update_shape is not None:
        expected = tuple(index_shape[:-1]) + tuple(shape[depth:])
        if tuple(update_shape) != expected:
            raise ShapeError(f"ScatterND: updates must have shape {expected} (set by data {shape} and indices "
                             f"{index_shape}), got {update_shape}")
    return depth


def strides(shape: Sequence[int]) -> list[int]:
    """The row-major element strides of ``shape``.

    >>> strides((2, 3, 4))
    [12, 4, 1]
    """
    return [math.prod(shape[d + 1:]) for d in range(len(shape))]


def element_offsets(shape: tuple[int, ...], index_shape: tuple[int, ...], axis: int) -> np.ndarray:
    """GatherElements'/ScatterElements' plan: the flat offset in data (of ``shape``) of each position of indices
    (of ``index_shape``) with its ``axis`` coordinate taken as 0, int64 of ``index_shape``.

    >>> element_offsets((2, 3), (2, 2), axis=1).tolist()
    [[0, 0], [3, 3]]
    """
    row = strides(shape)
    grid = np.indices(index_shape, dtype=np.int64, sparse=True)
    return sum((grid[d] * row[d] for d in range(len(shape)) if d != axis), np.zeros(index_shape, np.int64))


def tensor_scatter_axis(shape: tuple[int, ...], update_shape: tuple[int, ...], axis: int) -> int:
    """TensorScatter's sequence axis (non-negative), after checking past_cache's rank, that the axis is not the
    batch axis and that update has past_cache's shape but on the axis, where it may be shorter."""
    if len(shape) < 2:
        raise ShapeError(f"TensorScatter: past_cache needs a batch and a sequence axis, got shape {shape}")
    axis = normalize_axis("TensorScatter", axis, len(shape))
    if axis == 0:
        raise ShapeError("TensorScatter: axis cannot be 0 (the batch axis)")
    if (len(update_shape) != len(shape) or update_shape[axis] > shape[axis]
            or any(u != c for i, (u, c) in enumerate(zip(update_shape, shape)) if i != axis)):
        raise ShapeError(f"TensorScatter: update shape {update_shape} must equal past_cache shape {shape} "
                         f"except along axis {axis}, where it may not be longer")
    return axis


def check_write_index_count(batch: int, count: int | None, shape: Any) -> None:
    """A ShapeError unless TensorScatter's write_indices hold one index (``count`` of them) per batch entry; the
    message shows ``shape``."""
    if count != batch:
        raise ShapeError(f"TensorScatter: write_indices must have shape ({batch},), got {shape}")


def check_write_positions(starts: np.ndarray, steps: int, length: int, mode: str) -> None:
    """A ShapeError (in mode 'linear') naming the first write index whose ``steps`` positions do not fit a cache
    of ``length``.

    >>> check_write_positions(np.array([0, 3]), 2, 4, "linear")
    Traceback (most recent call last):
      ...
    d5.errors.ShapeError: TensorScatter: write index 3 + sequence length 2 exceeds the cache length 4 (mode='linear'); use mode='circular' to wrap around
    """
    if mode != "circular" and steps:
        bad = (starts < 0) | (starts + steps > length)
        if bad.any():
            raise ShapeError(f"TensorScatter: write index {starts[bad][0]} + sequence length {steps} exceeds the "
                             f"cache length {length} (mode='linear'); use mode='circular' to wrap around")


def check_one_hot_inputs(depth_shape: tuple[int | None, ...], values_shape: tuple[int | None, ...],
                         depth_is_number: bool, depth_dtype: Any) -> None:
    """OneHot's depth one number (``depth_is_number``: of a numeric dtype, shown as ``depth_dtype``) and values two;
    inputs given in the wrong order, (indices, values, depth), are named as such.

    >>> check_one_hot_inputs((2,), (), True, "float32")
    Traceback (most recent call last):
      ...
    d5.errors.ShapeError: OneHot: depth (input 1) must be one number (a scalar or a 1-element tensor), got float32 of shape (2,) (are depth and values swapped? The inputs are (indices, depth, values))
    """
    depth_count, value_count = _count(depth_shape), _count(values_shape)
    swapped = " (are depth and values swapped? The inputs are (indices, depth, values))" \
        if depth_count == 2 and value_count == 1 else ""
    if depth_count != 1 or len(depth_shape) > 1 or not depth_is_number:
        raise ShapeError(f"OneHot: depth (input 1) must be one number (a scalar or a 1-element tensor), got "
                         f"{depth_dtype} of shape {depth_shape}{swapped}")
    if value_count != 2 or len(values_shape) != 1:
        raise ShapeError(f"OneHot: values (input 2) must be a 1-D tensor of 2 elements, [off_value, on_value], "
                         f"got shape {values_shape}{swapped}")


def one_hot_depth(count: Any) -> int:
    """OneHot's number of classes: ``count`` (the depth input's one value) as a positive int.

    >>> one_hot_depth(3.7)
    3
    >>> one_hot_depth(0.0)
    Traceback (most recent call last):
      ...
    d5.errors.ShapeError: OneHot: depth must be at least 1 (the number of classes), got 0.0
    """
    if not math.isfinite(count) or int(count) < 1:
        raise ShapeError(f"OneHot: depth must be at least 1 (the number of classes), got {count}")
    return int(count)


def one_hot_mask(indices: np.ndarray, depth: int, axis: int) -> np.ndarray:
    """OneHot's boolean mask of the elements taking the on value: ``indices`` truncated to integers (as the spec's
    cast does), -depth .. -1 counting from the end, compared with the classes along the new ``axis``
    (non-negative); an index out of range is all off.

    >>> one_hot_mask(np.array([0, -1, 5]), 3, 1).astype(int).tolist()
    [[1, 0, 0], [0, 0, 1], [0, 0, 0]]
    """
    indices = indices.astype(np.int64)
    indices = np.where(indices < 0, indices + depth, indices)
    classes = np.arange(depth, dtype=np.int64).reshape((depth,) + (1,) * (indices.ndim - axis))
    return np.expand_dims(indices, axis) == classes


def top_k_count(value: Any, attribute: Any) -> int:
    """TopK's k: the second input's ``value`` (opset 10+), else the ``attribute`` (opset 1); a ShapeError when
    neither is given."""
    count = attribute if value is None else value
    if count is None:
        raise ShapeError("TopK: k is required (the second input from opset 10, the attribute before)")
    return int(count)


def check_top_k(count: int, axis: int, length: int | None) -> None:
    """A ShapeError unless 0 <= k <= the ``length`` of ``axis`` (None: not known while tracing, unchecked)."""
    if length is not None and not 0 <= count <= length:
        raise ShapeError(f"TopK: k={count} is out of range for axis {axis} of length {length}")


def compress_axis(shape: tuple[int | None, ...], condition_shape: tuple[int | None, ...], axis: int | None) -> int:
    """Compress' axis (non-negative; 0 of the flattened input when ``axis`` is None), after checking the condition
    is 1-D and no longer than that axis (where both lengths are known).

    >>> compress_axis((3, 2), (3,), -2)
    0
    """
    if len(condition_shape) != 1:
        raise ShapeError(f"Compress: condition must be a 1-D tensor, got shape {condition_shape}")
    flat = axis is None
    if flat:
        axis, length = 0, _count(shape)
    else:
        check_rank("Compress", shape, "input", at_least=1)
        axis = normalize_axis("Compress", axis, len(shape))
        length = shape[axis]
    entries = condition_shape[0]
    if length is not None and entries is not None and entries > length:
        raise ShapeError(f"Compress: condition has {entries} entries, more than the {length} "
                         f"{'elements of the input' if flat else f'slices along axis {axis}'}")
    return axis


def unique_axis(axis: int | None, rank: int) -> int | None:
    """Unique's axis as a non-negative index (None: the flattened input).

    >>> unique_axis(-1, 2), unique_axis(None, 2)
    (1, None)
    """
    if axis is None:
        return None
    if not -rank <= axis < rank:
        raise ShapeError(f"Unique: axis {axis} out of range for a rank-{rank} input")
    return axis % rank


# ------------------------------------------------------------------------------------------------ shape

def flatten_axis(axis: int, shape: tuple[int | None, ...]) -> int:
    """Flatten's axis in ``[-rank, rank]`` as a non-negative index.

    >>> flatten_axis(-1, (2, 3, 4))
    2
    """
    rank = len(shape)
    if not -rank <= axis <= rank:
        raise ShapeError(f"Flatten: axis {axis} is out of range for a {rank}-D input of shape {shape}; use an axis "
                         f"in [{-rank}, {rank}]")
    return axis % rank if axis < 0 else axis


def transpose_perm(perm: Sequence[int] | None, rank: int) -> list[int]:
    """Transpose's permutation: ``perm``, or the axes reversed when it is None; a ShapeError unless it permutes
    the ``rank`` axes.

    >>> transpose_perm(None, 3)
    [2, 1, 0]
    """
    perm = list(range(rank - 1, -1, -1)) if perm is None else list(perm)
    if sorted(perm) != list(range(rank)):
        raise ShapeError(f"Transpose: perm {perm} is not a permutation of the {rank} axes of the input")
    return perm


def concat_axis(axis: int, shapes: Sequence[tuple[int, ...]]) -> int:
    """Concat's axis (non-negative) for inputs of ``shapes`` (at least one), in ``[-rank, rank)`` of the first."""
    if not shapes:
        raise ShapeError("Concat: needs at least one input")
    rank = len(shapes[0])
    if not -rank <= axis < rank:
        raise ShapeError(f"Concat: axis {axis} is out of range for {rank}-D inputs; use [{-rank}, {rank})")
    return axis % rank


def check_concat_shapes(shapes: Sequence[tuple[int | None, ...]], axis: int, named_axis: int | None = None) -> None:
    """A ShapeError unless the ``shapes`` have one rank and agree on every dimension but ``axis`` (non-negative;
    a None dimension agrees with any); the message names ``named_axis`` (default ``axis``).

    >>> check_concat_shapes([(2, 3), (3, 3)], 1)
    Traceback (most recent call last):
      ...
    d5.errors.ShapeError: Concat: inputs of shapes (2, 3), (3, 3) must have the same rank and agree on every dimension except axis 1
    """
    first = shapes[0]
    rank = len(first)
    if any(len(s) != rank or any(a is not None and b is not None and a != b
                                 for i, (a, b) in enumerate(zip(s, first)) if i != axis) for s in shapes):
        listed = ", ".join(str(tuple(s)) for s in shapes)
        raise ShapeError(f"Concat: inputs of shapes {listed} must have the same rank and agree on every "
                         f"dimension except axis {axis if named_axis is None else named_axis}")


def slice_arguments(attributes: Any, starts: Any, ends: Any, axes: Any, steps: Any,
                    read: Callable[[Any, str], list[int] | None]) -> tuple[Any, Any, Any, Any]:
    """Slice's (starts, ends, axes, steps): the inputs (opset 10+) as int lists by the framework's ``read`` (a value
    and what it is, as a message names it; None stays None), or, without them, the ``attributes``' starts, ends
    and axes (before opset 10; no steps).

    >>> slice_arguments(None, [1], [3], None, [2], lambda value, what: value)
    ([1], [3], None, [2])
    """
    if starts is None:
        return attributes.starts, attributes.ends, attributes.axes, None
    return (read(starts, "Slice's starts"), read(ends, "Slice's ends"), read(axes, "Slice's axes"),
            read(steps, "Slice's steps"))


def slice_index(shape: Sequence[int], starts: Sequence[int] | None, ends: Sequence[int] | None,
                axes: Sequence[int] | None, steps: Sequence[int] | None) -> tuple[slice, ...]:
    """ONNX Slice as a Python index of ``shape`` (one slice per axis; :func:`~d5.ops.onnx_semantics.slice_bounds`
    clamps the bounds), an end before the front (-1) written None; a ShapeError without starts and ends."""
    if starts is None or ends is None:
        raise ShapeError("Slice: starts and ends are required (inputs 1 and 2, or attributes before opset 10)")
    index = [slice(None)] * len(shape)
    for axis, start, end, step in slice_bounds("Slice", shape, starts, ends, axes, steps):
        # A Python slice reads an end of -1 as "the last element"; None means "run past the front".
        index[axis] = slice(start, None if end < 0 else end, step)
    return tuple(index)


def pad_widths(rank: int, pads: Sequence[int] | None, axes: Sequence[int] | None,
               distinct_axes: bool = True) -> list[tuple[int, int]]:
    """Pad's (begin, end) per axis of a ``rank``-D input from ``pads = [begin..., end...]`` over ``axes`` (all
    axes when None; ``distinct_axes=False`` lets an axis named twice take its last pads); a ShapeError without
    pads or with two pads per axis missing.

    >>> pad_widths(3, [1, 2, 3, 4], [0, -1])
    [(1, 3), (0, 0), (2, 4)]
    """
    if pads is None:
        raise ShapeError("Pad: no pads given; pass them as the second input (opset 11+) or the attribute")
    if axes is None:
        axes = list(range(rank))
    elif distinct_axes:
        axes = normalize_axes("Pad", axes, rank)
    else:
        axes = [normalize_axis("Pad", a, rank) for a in axes]
    if len(pads) != 2 * len(axes):
        raise ShapeError(f"Pad: {len(pads)} pads for {len(axes)} axes; give a begin and an end per axis")
    widths = [(0, 0)] * rank
    for k, axis in enumerate(axes):
        widths[axis] = (pads[k], pads[k + len(axes)])
    return widths


def pad_positions(mode: str, dim: int, begin: int, end: int) -> np.ndarray:
    """Which input element each output element along an axis of length ``dim`` copies when it is padded by
    ``begin`` and ``end`` in mode reflect, edge or wrap (NumPy's np.pad of the positions, as the reference pads).

    >>> pad_positions("reflect", 3, 2, 1).tolist()
    [2, 1, 0, 1, 2, 1]
    """
    return np.pad(np.arange(dim, dtype=np.int64), (begin, end), mode=mode)


def squeeze_axes(shape: tuple[int | None, ...], axes: Sequence[int] | None) -> list[int]:
    """Squeeze's axes (non-negative): ``axes``, or every axis of length 1 when None; a ShapeError for an axis of
    another length (None, not known while tracing, passes)."""
    if axes is None:
        axes = [i for i, d in enumerate(shape) if d == 1]
    axes = normalize_axes("Squeeze", axes, len(shape))
    bad = [a for a in axes if shape[a] not in (1, None)]
    if bad:
        raise ShapeError(f"Squeeze: axes {bad} of the input of shape {tuple(shape)} are not of length 1")
    return axes


def unsqueeze_axes(axes: Sequence[int] | None, rank: int) -> list[int]:
    """Unsqueeze's new axes of a ``rank``-D input as positions in the output, in increasing order.

    >>> unsqueeze_axes([-1, 0], 2)
    [0, 3]
    """
    if axes is None:
        raise ShapeError("Unsqueeze: no axes given; pass them as the second input (opset 13+) or the attribute")
    return sorted(normalize_axes("Unsqueeze", axes, rank + len(axes)))


def unsqueeze_shape(shape: Sequence[int], axes: Sequence[int] | None) -> list[int]:
    """Unsqueeze's output shape: ``shape`` with axes of length 1 inserted at ``axes`` (positions in the output).

    >>> unsqueeze_shape((2, 3), [0, -1])
    [1, 2, 3, 1]
    """
    out = list(shape)
    for axis in unsqueeze_axes(axes, len(out)):
        out.insert(axis, 1)
    return out


def expand_shape(shape: tuple[int, ...], target: Sequence[int]) -> tuple[int, ...]:
    """Expand's output shape: ``shape`` and ``target`` broadcast together (both ways, as NumPy does).

    >>> expand_shape((2, 1), [3, 1, 4])
    (3, 2, 4)
    """
    try:
        return tuple(np.broadcast_shapes(tuple(shape), tuple(target)))
    except ValueError:
        raise ShapeError(f"Expand: the input of shape {tuple(shape)} cannot be broadcast to {target}") from None


def tile_shape(shape: Sequence[int | None], repeats: Sequence[int]) -> list[int] | None:
    """Tile's output shape (None when a dimension of ``shape`` is not known), after checking ``repeats`` holds
    one non-negative count per axis.

    >>> tile_shape((2, 3), [2, 0])
    [4, 0]
    """
    if len(repeats) != len(shape) or any(r < 0 for r in repeats):
        raise ShapeError(f"Tile: repeats {repeats} must hold one non-negative count per axis of the "
                         f"{len(shape)}-D input")
    return None if None in tuple(shape) else [d * r for d, r in zip(shape, repeats)]


def shape_range(start: int, end: int | None, rank: int) -> tuple[int, int]:
    """Shape's dimensions ``start:end`` (opset 15) of a ``rank``-D input, negative ones counted from the end and
    both clamped to ``[0, rank]``.

    >>> shape_range(-9, -1, 3)
    (0, 2)
    """
    start = min(max(start + rank if start < 0 else start, 0), rank)
    end = rank if end is None else min(max(end + rank if end < 0 else end, 0), rank)
    return start, end


class BlockPlan(NamedTuple):
    """SpaceToDepth's/DepthToSpace's rearrangement: reshape to ``split``, transpose by ``perm``, reshape to
    ``shape``."""

    split: tuple[int, ...]
    perm: tuple[int, ...]
    shape: tuple[int, ...]


def space_to_depth_plan(shape: tuple[int, ...], blocksize: int, mode: str = "DCR") -> BlockPlan:
    """SpaceToDepth of an (N, C, H, W) input: blocks of ``blocksize`` x ``blocksize`` into channels; ``mode`` DCR
    puts the block offset before the channel in the output channel index, CRD after.

    >>> space_to_depth_plan((1, 2, 4, 6), 2)
    BlockPlan(split=(1, 2, 2, 2, 3, 2), perm=(0, 3, 5, 1, 2, 4), shape=(1, 8, 2, 3))
    """
    check_rank("SpaceToDepth", shape, "input", rank=4)
    n, c, h, w = shape
    b = blocksize
    if h % b or w % b:
        raise ShapeError(f"SpaceToDepth: spatial size {h}x{w} is not divisible by blocksize {b}")
    # Axes of the (n, c, h/b, b, w/b, b) view in output order.
    perm = (0, 3, 5, 1, 2, 4) if mode == "DCR" else (0, 1, 3, 5, 2, 4)
    return BlockPlan((n, c, h // b, b, w // b, b), perm, (n, c * b * b, h // b, w // b))


def depth_to_space_plan(shape: tuple[int, ...], blocksize: int, mode: str = "DCR") -> BlockPlan:
    """DepthToSpace of an (N, C, H, W) input: channels into ``blocksize`` x ``blocksize`` spatial blocks, ``mode``
    DCR (depth, column, row) or CRD.

    >>> depth_to_space_plan((1, 8, 2, 3), 2, "CRD")
    BlockPlan(split=(1, 2, 2, 2, 2, 3), perm=(0, 1, 4, 2, 5, 3), shape=(1, 2, 4, 6))
    """
    check_rank("DepthToSpace", shape, "input", rank=4)
    n, c, h, w = shape
    b = blocksize
    if c % (b * b):
        raise ShapeError(f"DepthToSpace: {c} channels are not divisible by blocksize^2 = {b * b}")
    if mode == "DCR":
        split, perm = (n, b, b, c // (b * b), h, w), (0, 3, 4, 1, 5, 2)
    else:
        split, perm = (n, c // (b * b), b, b, h, w), (0, 1, 4, 2, 5, 3)
    return BlockPlan(split, perm, (n, c // (b * b), h * b, w * b))


def reverse_sequence_lengths(shape: tuple[int | None, ...], batch_axis: int, time_axis: int,
                             lengths_shape: tuple[int | None, ...], integer: bool, dtype: Any) -> tuple[Any, Any]:
    """ReverseSequence's (batch, steps), after checking the input has at least 2 dimensions and sequence_lens
    (``integer``, of ``dtype`` as the message shows it) holds one length per batch entry."""
    check_rank("ReverseSequence", shape, "input", at_least=2)
    batch, steps = shape[batch_axis], shape[time_axis]
    if tuple(lengths_shape) != (batch,) or not integer:
        raise ShapeError(f"ReverseSequence: sequence_lens must be an integer tensor of shape ({batch},) (one "
                         f"length per batch entry), got {dtype} of shape {tuple(lengths_shape)}")
    return batch, steps


def check_sequence_length_values(lengths: np.ndarray, steps: int | None) -> None:
    """A ShapeError unless every sequence length lies in ``[0, steps]`` (None: not known, unchecked).

    >>> check_sequence_length_values(np.array([1, 5]), 4)
    Traceback (most recent call last):
      ...
    d5.errors.ShapeError: ReverseSequence: sequence_lens must lie in [0, 4] (the time axis' length), got values in [1, 5]
    """
    if lengths.size and steps is not None and (lengths.min() < 0 or lengths.max() > steps):
        raise ShapeError(f"ReverseSequence: sequence_lens must lie in [0, {steps}] (the time axis' length), got "
                         f"values in [{lengths.min()}, {lengths.max()}]")


# ------------------------------------------------------------------------------------------------ losses

def check_loss_scores(op_name: str, shape: tuple[int | None, ...]) -> None:
    """A ShapeError unless a loss' scores are (N, C) or (N, C, d1, ...)."""
    if len(shape) < 2:
        raise ShapeError(f"{op_name}: scores must be (N, C) or (N, C, d1, ...), got shape {shape}")


def check_loss_inputs(op_name: str, shape: tuple[int | None, ...], labels_shape: tuple[int | None, ...],
                      integer: bool, labels_dtype: Any) -> None:
    """SoftmaxCrossEntropyLoss'/NegativeLogLikelihoodLoss' scores of ``shape`` (N, C, d1, ...) and labels (N, d1,
    ...) of class indices (``integer``; ``labels_dtype`` as the message shows it).

    >>> check_loss_inputs("NegativeLogLikelihoodLoss", (3, 4), (2,), True, "int64")
    Traceback (most recent call last):
      ...
    d5.errors.ShapeError: NegativeLogLikelihoodLoss: labels of shape (2,) do not match scores of shape (3, 4); expected labels of shape (3,)
    """
    check_loss_scores(op_name, shape)
    if not integer:
        raise ShapeError(f"{op_name}: labels must be integers (int64 class indices), got {labels_dtype}")
    expected = (shape[0], *shape[2:])
    if tuple(labels_shape) != expected:
        raise ShapeError(f"{op_name}: labels of shape {tuple(labels_shape)} do not match scores of shape {shape}; "
                         f"expected labels of shape {expected}")


def check_class_weights(op_name: str, shape: tuple[int | None, ...], weights_shape: tuple[int | None, ...] | None
                        ) -> None:
    """A ShapeError unless a loss' class weights (when given: ``weights_shape`` not None) have shape (C,)."""
    classes = shape[1]
    if weights_shape is not None and tuple(weights_shape) != (classes,):
        raise ShapeError(f"{op_name}: weights must have shape ({classes},) for scores of shape {shape}, got "
                         f"{tuple(weights_shape)}")


def check_labels(op_name: str, labels: np.ndarray, shape: tuple[int | None, ...], ignore_index: int | None) -> None:
    """A ShapeError naming the first label outside [0, C) (other than ``ignore_index``) for scores of ``shape``
    (C unknown, None: unchecked).

    >>> check_labels("NegativeLogLikelihoodLoss", np.array([1, 4, -1]), (3, 4), 4)
    Traceback (most recent call last):
      ...
    d5.errors.ShapeError: NegativeLogLikelihoodLoss: label -1 is out of range for scores of shape (3, 4) (4 classes); labels must be in [0, 4) or equal ignore_index=4
    """
    classes = shape[1]
    if classes is None or (labels.size and 0 <= labels.min() and labels.max() < classes):
        return  # unknown, or the common case (checked at every step on MXNet): two reductions
    counted = labels if ignore_index is None else labels[labels != ignore_index]
    bad = counted[(counted < 0) | (counted >= classes)]
    if bad.size:
        raise ShapeError(f"{op_name}: label {int(bad[0])} is out of range for scores of shape {shape} "
                         f"({classes} classes); labels must be in [0, {classes})"
                         + ("" if ignore_index is None else f" or equal ignore_index={ignore_index}"))


# ------------------------------------------------------------------------------------------------ linear algebra

def broadcasts_to(shape: Sequence[int], target: Sequence[int]) -> bool:
    """Whether ``shape`` broadcasts to ``target`` unchanged (ONNX's unidirectional broadcasting: Gemm's C may
    stretch to the output shape, never the reverse).

    >>> broadcasts_to((3, 1), (3, 5)), broadcasts_to((1, 5, 1), (3, 5))
    (True, False)
    """
    try:
        return np.broadcast_shapes(tuple(shape), tuple(target)) == tuple(target)
    except ValueError:
        return False


def check_gemm_operands(a_shape: tuple[int | None, ...], b_shape: tuple[int | None, ...]) -> None:
    """A ShapeError unless Gemm's A and B are matrices."""
    if len(a_shape) != 2 or len(b_shape) != 2:
        raise ShapeError(f"Gemm: A and B must be 2-D, got A {a_shape} and B {b_shape}; use MatMul for other ranks")


def check_gemm_bias(c_shape: tuple[int, ...], out_shape: tuple[int | None, ...]) -> None:
    """A ShapeError unless Gemm's C broadcasts to the output's ``out_shape`` (None dimensions: unchecked)."""
    if None not in out_shape and not broadcasts_to(c_shape, out_shape):
        raise ShapeError(f"Gemm: C of shape {c_shape} does not broadcast to the output shape {out_shape}")


def gemm_shape(a_shape: tuple[int | None, ...], b_shape: tuple[int | None, ...], c_shape: tuple[int, ...] | None,
               trans_a: bool, trans_b: bool) -> tuple[Any, Any, Any]:
    """Gemm's (rows, inner, columns) of ``A' @ B'`` (A' = A^T if ``trans_a``, B' likewise), after checking the
    operands are matrices with equal inner dimensions and C (when ``c_shape`` is given) broadcasts to the output.
    A None dimension (not known while tracing) passes; ``inner`` is then the one known, if any."""
    check_gemm_operands(a_shape, b_shape)
    rows, inner_a = (a_shape[1], a_shape[0]) if trans_a else a_shape
    inner_b, cols = (b_shape[1], b_shape[0]) if trans_b else b_shape
    if inner_a is not None and inner_b is not None and inner_a != inner_b:
        raise ShapeError(f"Gemm: inner dimensions differ: A {a_shape}, B {b_shape} with transA={int(trans_a)}, "
                         f"transB={int(trans_b)}; check the transpose flags")
    if c_shape is not None:
        check_gemm_bias(c_shape, (rows, cols))
    return rows, inner_a if inner_a is not None else inner_b, cols


def matmul_mismatch(a_shape: Any, b_shape: Any) -> ShapeError:
    """The ShapeError for MatMul operands of shapes that do not multiply.

    >>> matmul_mismatch((2, 3), (4, 5))
    ShapeError('MatMul: shapes (2, 3) and (4, 5) do not multiply (the last dimension of A must equal the second-to-last of B, batch dimensions must broadcast, no 0-D operands)')
    """
    return ShapeError(f"MatMul: shapes {a_shape} and {b_shape} do not multiply (the last dimension of A must equal "
                      "the second-to-last of B, batch dimensions must broadcast, no 0-D operands)")


def check_matmul_shapes(a_shape: tuple[int | None, ...], b_shape: tuple[int | None, ...], batch: bool = True) -> None:
    """A ShapeError (:func:`matmul_mismatch`) unless A and B multiply as NumPy's matmul: no 0-D operand, A's last
    dimension B's second to last (a None dimension passes), and (``batch``) the batch dimensions broadcasting.

    >>> check_matmul_shapes((2, 1, 2, 3), (5, 3, 4))
    """
    inner_b = None if not b_shape else b_shape[-2] if len(b_shape) > 1 else b_shape[0]
    if not a_shape or not b_shape or (None not in (a_shape[-1], inner_b) and a_shape[-1] != inner_b):
        raise matmul_mismatch(a_shape, b_shape)
    if batch:
        try:
            np.broadcast_shapes(tuple(a_shape[:-2]), tuple(b_shape[:-2]))
        except ValueError:
            raise matmul_mismatch(a_shape, b_shape) from None


def check_square_matrices(shape: tuple[int | None, ...]) -> None:
    """A ShapeError unless Det's input holds square matrices in its last two axes."""
    if len(shape) < 2 or shape[-1] != shape[-2]:
        raise ShapeError(f"Det: input must be (..., M, M) square matrices, got shape {shape}")


def require_einsum_dtype(index: int, supported: bool, dtype: Any) -> None:
    """A ShapeError unless Einsum's operand ``index`` has a ``supported`` dtype (``dtype`` as the message shows
    it): integers, float16, float32, float64 or bfloat16."""
    if not supported:
        raise ShapeError(f"Einsum: operand {index} has dtype {dtype}; Einsum takes integer tensors and float16, "
                         "float32, float64 or bfloat16. Cast it first")


def einsum_mismatch(equation: str, shapes: Sequence[Any], reason: Any) -> ShapeError:
    """The ShapeError for an Einsum ``equation`` that does not fit operands of ``shapes``, saying why.

    >>> einsum_mismatch("ij,jk->ik", [(2, 3), (4, 5)], "subscript 'j' has sizes 3 and 4")
    ShapeError("Einsum: equation 'ij,jk->ik' does not fit the operand shapes [(2, 3), (4, 5)]: subscript 'j' has sizes 3 and 4")
    """
    return ShapeError(f"Einsum: equation {equation!r} does not fit the operand shapes {list(shapes)}: {reason}")


__all__ = ["BlockPlan", "broadcasts_to", "check_axis_indices", "check_class_weights", "check_concat_shapes",
           "check_gather_elements", "check_gemm_bias", "check_gemm_operands", "check_indices", "check_labels",
           "check_loss_inputs", "check_loss_scores", "check_matmul_shapes", "check_one_hot_inputs", "check_rank",
           "check_scatter_elements", "check_scatter_inputs", "check_sequence_length_values", "check_square_matrices",
           "check_top_k", "check_write_index_count", "check_write_positions", "compress_axis", "concat_axis",
           "depth_to_space_plan", "einsum_mismatch", "element_offsets", "expand_shape", "flatten_axis",
           "gather_nd_depth", "gemm_shape", "matmul_mismatch", "one_hot_depth", "one_hot_mask", "pad_positions",
           "pad_widths", "require_einsum_dtype", "require_integer_indices", "require_single_value",
           "reverse_sequence_lengths", "scatter_nd_depth", "shape_range", "slice_arguments", "slice_index",
           "space_to_depth_plan", "squeeze_axes", "strides", "tensor_scatter_axis", "tile_shape", "top_k_count",
           "transpose_perm", "unique_axis", "unsqueeze_axes", "unsqueeze_shape"]
