"""Framework-neutral checks and plans of the window, normalization, reduction, activation and quantization
operators, shared by every framework's converters (PyTorch, TensorFlow, MXNet) and, where it repeats them, the
reference. They read shapes, dtypes' kinds and attribute values only, never tensor values, and import no framework,
so each framework calls them on its own tensors' shapes and keeps only its own computation:

- pooling: :func:`check_pool_input`, :func:`check_pool_rank`, :func:`check_lp_pool_rank`,
  :func:`check_global_pool_input`, :func:`subsamples`, :func:`plane_steps`, :func:`pool_index_table`,
  :func:`window_counts`, and MaxUnpool's :func:`check_unpool_inputs`, :func:`unpool_output_shape`,
  :func:`check_unpool_index_range`;
- normalization: :func:`require_channels`, :func:`check_batch_norm`, :func:`check_instance_norm`,
  :func:`check_group_norm`, :func:`check_group_norm18`, :func:`check_broadcastable`, :func:`normalized_axis`,
  :func:`mvn_axes`, :func:`lrn_half_window`, and the ``stash_type`` constants :data:`STASH_FLOAT64`,
  :data:`STASH_DTYPE_NAMES`;
- reduction: :func:`reduce_axes`, :func:`kept_shape`, :func:`reduced_shape`, :func:`empty_extremum`,
  :func:`arg_axis`, :func:`scan_axis`;
- convolution: :func:`check_conv_inputs`, :func:`check_conv_transpose_weights`, :func:`check_conv_ranks`,
  :func:`check_kernel_of_weights`, :func:`check_kernel_attribute`, :func:`check_group_channels`,
  :func:`check_conv_weights`, :func:`check_col2im_ranks`, and DeformConv's :func:`deform_conv_attributes`,
  :func:`deform_conv_plan`, :func:`deform_tap_grid`;
- activation: :func:`check_dropout_ratio`, :func:`per_channel_slope`, :func:`check_swiglu_inputs`,
  :func:`check_float_input`, :func:`coerced_2d_shape` and the mixin :class:`CoercedTo2D` of the opset 1-12
  Softmax, LogSoftmax and Hardmax;
- quantization: :data:`QUANTIZED_RANGES`, :func:`check_matmul_integer`, :func:`a_zero_point_rows`,
  :func:`check_b_zero_point`, :func:`matmul_plan`, :func:`qlinear_matmul_shapes`,
  :func:`check_zero_point_broadcast`, :func:`zero_point_broadcast_error`, :func:`check_requantize_broadcast`,
  :func:`requantize_broadcast_error`.

Errors are :class:`d5.errors.ShapeError` (or :class:`d5.errors.UnsupportedOperatorError`) naming the operator,
with the reference's wording, so every framework reports a bad input alike.

>>> check_pool_rank("MaxPool", 3, (1, 2, 5), (2, 2))
Traceback (most recent call last):
  ...
d5.errors.ShapeError: MaxPool: X must be (N, C, spatial...) with 2 spatial axes for kernel_shape [2, 2], got shape (1, 2, 5)
>>> reduce_axes("ReduceSum", [-1, 0], 3, noop_with_empty_axes=False)
[0, 2]
"""
from __future__ import annotations

import math
from typing import Any, Callable, Iterable, NamedTuple, Sequence

import numpy as np

from d5.errors import ShapeError, UnsupportedOperatorError
from d5.ops.onnx_attributes import operator_attributes
from d5.ops.onnx_semantics import broadcast_shape, check_window_attributes, normalize_axes, normalize_axis
from d5.ops.onnx_semantics import window_geometry

__all__: list[str] = []


# ------------------------------------------------------------------------------------------------- pooling

def check_pool_input(op_name: str, shape: Sequence[int], kernel_shape: Sequence[int]) -> None:
    """Raise a ShapeError unless X of ``shape`` is (N, C, L), (N, C, H, W) or (N, C, D, H, W) with as many
    spatial axes as ``kernel_shape`` (MaxPool, AveragePool).

    >>> check_pool_input("AveragePool", (1, 1, 4), (2, 2))
    Traceback (most recent call last):
      ...
    d5.errors.ShapeError: AveragePool: kernel_shape [2, 2] has 2 axes but X of shape (1, 1, 4) has 1 spatial axes
    """
    if len(shape) not in (3, 4, 5):
        raise ShapeError(f"{op_name}: X must be (N, C, L), (N, C, H, W) or (N, C, D, H, W), got shape {shape}")
    if len(kernel_shape) != len(shape) - 2:
        raise ShapeError(f"{op_name}: kernel_shape {list(kernel_shape)} has {len(kernel_shape)} axes but X of shape "
                         f"{shape} has {len(shape) - 2} spatial axes")


def check_pool_rank(op_name: str, rank: int, shape: Sequence, kernel_shape: Sequence[int]) -> None:
    """Raise a ShapeError unless X (of ``rank``, ``shape`` as the message shows it) has 1 to 3 spatial axes, as
    many as ``kernel_shape``."""
    if rank not in (3, 4, 5) or len(kernel_shape) != rank - 2:
        raise ShapeError(f"{op_name}: X must be (N, C, spatial...) with {len(kernel_shape)} spatial axes for "
                         f"kernel_shape {list(kernel_shape)}, got shape {tuple(shape)}")


def check_lp_pool_rank(rank: int, shape: Sequence, kernel_shape: Sequence[int]) -> None:
    """Raise LpPool's ShapeError unless X (of ``rank``) has N, C and one spatial axis per kernel axis."""
    if rank != len(kernel_shape) + 2:
        raise ShapeError(f"LpPool: X must have N, C and {len(kernel_shape)} spatial axes (from kernel_shape), got "
                         f"shape {tuple(shape)}")


def check_global_pool_input(op_name: str, shape: Sequence[int], require_data: bool = False) -> None:
    """Raise a ShapeError unless X of ``shape`` is (N, C, spatial...) (with ``require_data``: non-empty spatial
    axes too, the wording of the reference's check)."""
    if require_data:
        if len(shape) < 3 or 0 in shape[2:]:
            raise ShapeError(f"{op_name}: X must be (N, C, spatial...) with non-empty spatial axes, got shape "
                             f"{shape}")
    elif len(shape) < 3:
        raise ShapeError(f"{op_name}: X must be (N, C, spatial...), got shape {tuple(shape)}")


def subsamples(kernel: Sequence[int], sides: Sequence[tuple[int, int]], out: Sequence[int] | None = None,
               spatial: Sequence[int] | None = None, strides: Sequence[int] | None = None) -> bool:
    """Whether a max pooling only subsamples X: 1-wide windows and no padding (``sides``: (begin, end) per
    spatial axis, an end below 0 a crop) and, given ``out``, ``spatial`` and ``strides``, as many outputs as a
    strided slice ``x[::stride]`` gives.

    >>> subsamples((1, 1), ((0, 0), (0, -1)), (2, 2), (4, 4), (2, 2))
    True
    """
    if not (all(k == 1 for k in kernel) and all(begin == 0 and end <= 0 for begin, end in sides)):
        return False
    return out is None or all(o == -(-n // step) for o, n, step in zip(out, spatial, strides))


def plane_steps(spatial: Sequence[int], storage_order: int = 0) -> list[int]:
    """The flat-index step of each spatial axis within one (n, c) plane: row-major, or column-major (the first
    spatial axis fastest) for MaxPool's ``storage_order=1``.

    >>> plane_steps((2, 3)), plane_steps((2, 3), storage_order=1)
    ([3, 1], [1, 2])
    """
    rank = len(spatial)
    if storage_order == 1:
        return [math.prod(spatial[:a]) for a in range(rank)]
    return [math.prod(spatial[a + 1:]) for a in range(rank)]


def pool_index_table(spatial: Sequence[int], out: Sequence[int], kernel: Sequence[int], strides: Sequence[int],
                     dilations: Sequence[int], begins: Sequence[int], storage_order: int = 0) -> np.ndarray:
    """(*out, *kernel) int64: the in-plane flat index in X (see :func:`plane_steps`) of each output position's
    tap, -1 where the tap reads padding; ``begins`` are the leading pads per spatial axis.

    >>> pool_index_table((3,), (2,), (2,), (2,), (1,), (1,)).tolist()
    [[-1, 0], [1, 2]]
    """
    rank = len(spatial)
    steps = plane_steps(spatial, storage_order)
    index = np.zeros([*out, *kernel], dtype=np.int64)
    inside = np.ones([*out, *kernel], dtype=bool)
    grids = np.ix_(*[np.arange(n) for n in out], *[np.arange(k) for k in kernel])
    for a in range(rank):
        coord = grids[a] * strides[a] + grids[rank + a] * dilations[a] - begins[a]
        inside = inside & (coord >= 0) & (coord < spatial[a])
        index = index + coord * steps[a]
    return np.where(inside, index, -1)


def window_counts(spatial: Sequence[int], geometry: Any, kernel: Sequence[int], strides: Sequence[int],
                  dilations: Sequence[int], include_pad: bool) -> np.ndarray:
    """AveragePool's divisor per output position (an int64 array of ``geometry.out``'s shape): the taps of its
    window inside X (cropped by ``geometry.crops``), plus with ``include_pad`` those in the applied pads (never
    those of a ceil_mode overhang).

    >>> from d5.ops.onnx_semantics import window_geometry
    >>> g = window_geometry((3,), (2,), strides=(2,), dilations=(1,), pads=(1, 1))
    >>> [window_counts((3,), g, (2,), (2,), (1,), include).tolist() for include in (False, True)]
    [[1, 2], [2, 2]]
    """
    counts = np.ones((), dtype=np.int64)
    crops, applied = geometry.crops, geometry.applied_pads
    rank = len(spatial)
    for axis, size in enumerate(spatial):
        size = size - crops[axis] - crops[axis + rank]  # the windows see the cropped input
        begin, end = applied[axis], applied[axis + rank]
        low, high = (-begin, size + end) if include_pad else (0, size)
        coords = (np.arange(geometry.out[axis])[:, None] * strides[axis] - begin
                  + np.arange(kernel[axis])[None, :] * dilations[axis])
        counts = np.multiply.outer(counts, ((coords >= low) & (coords < high)).sum(axis=1))
    return counts


def check_unpool_inputs(x_shape: Sequence[int], i_shape: Sequence[int], kernel_shape: Sequence[int],
                        integer: bool, i_dtype: Any) -> None:
    """Raise MaxUnpool's ShapeError unless X is (N, C) plus one spatial axis per kernel axis, I has X's shape
    and (``integer``) holds integers; ``i_dtype`` is I's dtype as the message shows it."""
    rank = len(kernel_shape)
    if len(x_shape) != rank + 2 or tuple(i_shape) != tuple(x_shape):
        raise ShapeError(f"MaxUnpool: X must be (N, C) plus {rank} spatial axes (kernel_shape "
                         f"{list(kernel_shape)}) and I of X's shape; got X {x_shape}, I {i_shape}")
    if not integer:
        raise ShapeError(f"MaxUnpool: I must hold integer (int64) indices, got dtype {i_dtype}")


def unpool_output_shape(inferred: tuple[int, ...], requested: Sequence[int] | None) -> tuple[int, ...]:
    """MaxUnpool's output shape: the ``requested`` output_shape input (None: absent), which must have the
    inferred shape's rank, N and C and be at least as large on every axis, else ``inferred``.

    >>> unpool_output_shape((1, 1, 4), [1, 1, 5]), unpool_output_shape((1, 1, 4), None)
    ((1, 1, 5), (1, 1, 4))
    """
    if requested is None:
        return inferred
    shape = tuple(requested)
    if len(shape) != len(inferred) or shape[:2] != inferred[:2] or any(o < i for o, i in zip(shape, inferred)):
        raise ShapeError(f"MaxUnpool: output_shape {list(shape)} must have X's rank, N and C, and be at least the "
                         f"unpooled shape {list(inferred)} on every axis")
    return shape


def check_unpool_index_range(low: int, high: int, inferred: Sequence[int]) -> int:
    """The number of positions in the unpooled shape ``inferred``, after checking that MaxUnpool's (non-empty)
    indices, from ``low`` to ``high``, lie among them; else a ShapeError."""
    total = math.prod(inferred)
    if low < 0 or high >= total:
        raise ShapeError(f"MaxUnpool: indices must lie in [0, {total}) (flat positions in the unpooled shape "
                         f"{list(inferred)}), got values in [{low}, {high}]")
    return total


__all__ += ["check_global_pool_input", "check_lp_pool_rank", "check_pool_input", "check_pool_rank",
            "check_unpool_index_range", "check_unpool_inputs", "plane_steps", "pool_index_table", "subsamples",
            "unpool_output_shape", "window_counts"]


# ------------------------------------------------------------------------------------------- normalization

_BATCH_NORM_PARAMETERS = ("scale", "B", "input_mean", "input_var")

#: The ``stash_type`` (a TensorProto float type) that widens the statistics of LayerNormalization,
#: GroupNormalization and RMSNormalization to float64.
STASH_FLOAT64 = 11

#: The dtype, by NumPy name, of LayerNormalization's Mean and InvStdDev outputs per ``stash_type`` (bfloat16's, as
#: the reference's, float32).
STASH_DTYPE_NAMES = {1: "float32", 10: "float16", 11: "float64", 16: "float32"}


def require_channels(op_name: str, shape: Sequence) -> None:
    """Raise a ShapeError unless X of ``shape`` is (N, C, ...) (BatchNormalization, LRN)."""
    if len(shape) < 2:
        raise ShapeError(f"{op_name}: X must be (N, C, ...), got shape {tuple(shape)}")


def check_batch_norm(shape: Sequence[int], parameter_shapes: Sequence[Sequence[int]] = (),
                     require_data: bool = False) -> None:
    """Raise BatchNormalization's ShapeError unless X of ``shape`` is (N, C, ...), the ``parameter_shapes``
    (scale, B, input_mean, input_var, those given) are (C,) and, with ``require_data``, X is not empty.

    >>> check_batch_norm((2, 3, 4), [(3,), (3,), (3,), (4,)])
    Traceback (most recent call last):
      ...
    d5.errors.ShapeError: BatchNormalization: input 'input_var' must have shape (3,) (one value per channel of X (2, 3, 4)), got (4,)
    """
    require_channels("BatchNormalization", shape)
    for name, own in zip(_BATCH_NORM_PARAMETERS, parameter_shapes):
        if tuple(own) != (shape[1],):
            raise ShapeError(f"BatchNormalization: input {name!r} must have shape ({shape[1]},) (one value per "
                             f"channel of X {shape}), got {own}")
    if require_data and 0 in shape:
        raise ShapeError(f"BatchNormalization: X is empty (shape {shape}); there are no statistics to compute")


def check_instance_norm(shape: Sequence[int], scale_shape: Sequence[int], bias_shape: Sequence[int]) -> None:
    """Raise InstanceNormalization's ShapeError unless X is (N, C, D1, ...) and scale and B are (C,)."""
    if len(shape) < 3 or (tuple(scale_shape), tuple(bias_shape)) != ((shape[1],), (shape[1],)):
        raise ShapeError(f"InstanceNormalization: X must be (N, C, D1, ...) and scale, B of shape (C,); got X "
                         f"{shape}, scale {scale_shape}, B {bias_shape}")


def check_group_norm(shape: Sequence[int], num_groups: int, scale_shape: Sequence[int],
                     bias_shape: Sequence[int]) -> None:
    """Raise GroupNormalization's ShapeError unless X is (N, C, ...) with C divisible by ``num_groups`` and
    scale and bias share one shape, (C,) (per channel, opset 21) or (num_groups,) (per group, opset 18)."""
    if len(shape) < 2 or shape[1] % num_groups:
        raise ShapeError(f"GroupNormalization: X must be (N, C, ...) with C divisible by num_groups={num_groups}, "
                         f"got shape {shape}")
    channels = shape[1]
    if tuple(scale_shape) != tuple(bias_shape) or tuple(scale_shape) not in ((channels,), (num_groups,)):
        raise ShapeError(f"GroupNormalization: scale and bias must both have shape ({channels},) (per channel, "
                         f"opset 21) or ({num_groups},) (per group, opset 18); got {scale_shape} and {bias_shape}")


def check_group_norm18(num_groups: int, scale_shape: Sequence[int], bias_shape: Sequence[int]) -> None:
    """Raise the ShapeError of GroupNormalization opsets 18-20 unless scale and bias are both (num_groups,).

    >>> check_group_norm18(2, (4,), (4,))
    Traceback (most recent call last):
      ...
    d5.errors.ShapeError: GroupNormalization (opset 18-20): scale and bias must both have shape (2,) (one per group; per-channel (C,) parameters came with opset 21), got (4,) and (4,)
    """
    if tuple(scale_shape) != tuple(bias_shape) or tuple(scale_shape) != (num_groups,):
        raise ShapeError(f"GroupNormalization (opset 18-20): scale and bias must both have shape ({num_groups},) "
                         f"(one per group; per-channel (C,) parameters came with opset 21), got {scale_shape} and "
                         f"{bias_shape}")


def check_broadcastable(op_name: str, what: str, value_shape: Sequence[int], shape: Sequence[int]) -> None:
    """Raise a ShapeError unless a scale or bias (``what``) of ``value_shape`` broadcasts to the input's
    ``shape`` without changing it.

    >>> check_broadcastable("RMSNormalization", "scale", (3,), (2, 4))
    Traceback (most recent call last):
      ...
    d5.errors.ShapeError: RMSNormalization: scale of shape (3,) does not broadcast to the input's shape (2, 4)
    """
    try:
        fits = np.broadcast_shapes(tuple(value_shape), tuple(shape)) == tuple(shape)
    except ValueError:
        fits = False
    if not fits:
        raise ShapeError(f"{op_name}: {what} of shape {tuple(value_shape)} does not broadcast to the input's shape "
                         f"{tuple(shape)}")


def normalized_axis(op_name: str, axis: int, rank: int) -> int:
    """``axis`` (in ``[-rank, rank)``) as a non-negative axis of X, the first of LayerNormalization's or
    RMSNormalization's normalized axes; else a ShapeError.

    >>> normalized_axis("LayerNormalization", -1, 3)
    2
    """
    if not -rank <= axis < rank:
        raise ShapeError(f"{op_name}: axis={axis} is out of range for X of rank {rank}")
    return axis % rank


def mvn_axes(axes: Sequence[int], shape: Sequence[int]) -> tuple[int, ...]:
    """MeanVarianceNormalization's ``axes`` for X of ``shape``: non-negative, sorted, each once; a ShapeError
    when they are empty or out of range.

    >>> mvn_axes((0, -1, 2), (2, 3, 4))
    (0, 2)
    """
    rank = len(shape)
    if not axes or any(not -rank <= a < rank for a in axes):
        raise ShapeError(f"MeanVarianceNormalization: axes {list(axes)} must be non-empty and lie in [{-rank}, "
                         f"{rank}) for X of shape {tuple(shape)}; set the axes attribute to match X")
    return tuple(sorted({a % rank for a in axes}))


def lrn_half_window(size: int, channels: int) -> int:
    """The channels on each side of LRN's window of ``size``, clipped to ``channels - 1``: a window reaching
    past every channel sums them all, so a huge size costs no more.

    >>> lrn_half_window(5, 16), lrn_half_window(2**28 + 1, 3)
    (2, 2)
    """
    return min((size - 1) // 2, channels - 1)


__all__ += ["STASH_DTYPE_NAMES", "STASH_FLOAT64", "check_batch_norm", "check_broadcastable", "check_group_norm",
            "check_group_norm18", "check_instance_norm", "lrn_half_window", "mvn_axes", "normalized_axis",
            "require_channels"]


# ----------------------------------------------------------------------------------------------- reduction

def reduce_axes(op_name: str, axes: Sequence[int] | None, rank: int, noop_with_empty_axes: bool) -> list[int] | None:
    """A reduction's axes (non-negative, sorted; a ShapeError for one out of range or named twice): all axes
    when ``axes`` is empty or None, or None (the identity) when ``noop_with_empty_axes`` then says so.

    >>> reduce_axes("ReduceMax", [], 2, noop_with_empty_axes=False), reduce_axes("ReduceMax", None, 2, True)
    ([0, 1], None)
    """
    if not axes:
        if noop_with_empty_axes:
            return None
        axes = list(range(rank))
    return sorted(normalize_axes(op_name, axes, rank))


def kept_shape(shape: Sequence[int], axes: Sequence[int]) -> tuple[int, ...]:
    """``shape`` with the reduced ``axes`` kept as size 1 (keepdims).

    >>> kept_shape((2, 3, 4), [1])
    (2, 1, 4)
    """
    return tuple(1 if i in axes else d for i, d in enumerate(shape))


def reduced_shape(shape: Sequence[int], axes: Sequence[int]) -> list[int]:
    """``shape`` without the reduced ``axes`` (keepdims=0).

    >>> reduced_shape((2, 3, 4), [0, 2])
    [3]
    """
    return [d for i, d in enumerate(shape) if i not in axes]


def empty_extremum(largest: bool, floating: bool, boolean: bool, limits: Callable[[], Any]) -> Any:
    """The maximum (``largest``) or minimum of an empty set, the reduction's identity: -inf/+inf for floats,
    False/True for bools, else the integer type's minimum/maximum (``limits()``: its ``.min`` and ``.max``).

    >>> empty_extremum(True, True, False, None), empty_extremum(False, False, False, lambda: np.iinfo(np.int8))
    (-inf, 127)
    """
    if floating:
        return -math.inf if largest else math.inf
    if boolean:
        return not largest  # max of nothing is False, min of nothing True
    info = limits()
    return info.min if largest else info.max


def arg_axis(op_name: str, axis: int, shape: Sequence[int]) -> int:
    """ArgMax/ArgMin's ``axis`` of an input of ``shape``, non-negative; a ShapeError when it is out of range or
    empty (no position to return).

    >>> arg_axis("ArgMax", -1, (2, 0))
    Traceback (most recent call last):
      ...
    d5.errors.ShapeError: ArgMax: axis -1 of the input of shape (2, 0) is empty
    """
    normalized = normalize_axis(op_name, axis, len(shape))
    if shape[normalized] == 0:
        raise ShapeError(f"{op_name}: axis {axis} of the input of shape {shape} is empty")
    return normalized


def _shape_of(value: Any) -> tuple:
    return tuple(value.shape) if hasattr(value, "shape") else tuple(np.shape(value))


def scan_axis(op_name: str, shape: Sequence[int], axis: Any, read: Callable[[Any], list[int]],
              rank_first: bool = True) -> int:
    """CumSum/CumProd's axis for x of ``shape``, non-negative: ``axis`` (the input, None when absent) read as
    Python ints by ``read`` (the framework's reader), which must give one value; x must have a dimension (checked
    before reading the axis, or after it without ``rank_first``). Else a ShapeError.

    >>> scan_axis("CumSum", (2, 3), np.array(-1), lambda a: [int(v) for v in np.ravel(a)])
    1
    """
    if axis is None:
        raise ShapeError(f"{op_name}: the axis input (a scalar) is required")
    if rank_first:
        _require_scan_rank(op_name, shape)
    values = read(axis)
    if len(values) != 1:
        raise ShapeError(f"{op_name}: axis (input 1) must be a single value (a scalar or a 1-element tensor), got "
                         f"shape {_shape_of(axis)}")
    if not rank_first:
        _require_scan_rank(op_name, shape)
    return normalize_axis(op_name, values[0], len(shape))


def _require_scan_rank(op_name: str, shape: Sequence[int]) -> None:
    if len(shape) < 1:
        raise ShapeError(f"{op_name}: x must have at least 1 dimension, got shape {tuple(shape)}")


__all__ += ["arg_axis", "empty_extremum", "kept_shape", "reduce_axes", "reduced_shape", "scan_axis"]


# --------------------------------------------------------------------------------------------- convolution

def check_kernel_of_weights(op_name: str, kernel_shape: Sequence[int] | None, w_shape: Sequence[int]) -> tuple:
    """W's kernel (its spatial sizes), after checking that the ``kernel_shape`` attribute, when given, agrees
    with W of ``w_shape`` (the message shows W's shape); else a ShapeError."""
    kernel = tuple(w_shape[2:])
    if kernel_shape is not None and tuple(kernel_shape) != kernel:
        raise ShapeError(f"{op_name}: attribute kernel_shape={list(kernel_shape)} disagrees with W of shape "
                         f"{w_shape}; fix the attribute or the weights")
    return kernel


def check_kernel_attribute(op_name: str, kernel_shape: Sequence[int] | None, kernel: Sequence[int]) -> tuple:
    """``kernel`` (W's spatial sizes) as a tuple, after checking that the ``kernel_shape`` attribute, when
    given, agrees with it; else a ShapeError.

    >>> check_kernel_attribute("Conv", (3, 3), (3, 1))
    Traceback (most recent call last):
      ...
    d5.errors.ShapeError: Conv: attribute kernel_shape=[3, 3] disagrees with W's kernel [3, 1]; fix the attribute or the weights
    """
    kernel = tuple(kernel)
    if kernel_shape is not None and tuple(kernel_shape) != kernel:
        raise ShapeError(f"{op_name}: attribute kernel_shape={list(kernel_shape)} disagrees with W's kernel "
                         f"{list(kernel)}; fix the attribute or the weights")
    return kernel


def check_conv_ranks(op_name: str, x_rank: int | None, w_shape: Sequence, x_described: Any, note: str = "") -> None:
    """Raise an UnsupportedOperatorError unless X (of ``x_rank``, shown as ``x_described``) and W of ``w_shape``
    are both 3-D to 5-D, of one rank (the convolutions the frameworks' kernels take); ``note`` ends the message."""
    if x_rank not in (3, 4, 5) or len(w_shape) != x_rank:
        raise UnsupportedOperatorError(f"{op_name}: X and W must both be 3-D to 5-D (1 to 3 spatial axes), got X "
                                       f"{x_described} and W {tuple(w_shape)}{note}")


def check_group_channels(op_name: str, channels: int, w_shape: Sequence[int], group: int) -> None:
    """Raise a ShapeError unless X's ``channels`` are W's (M, C/group, kernel...) input channels times
    ``group``."""
    if channels != w_shape[1] * group:
        raise ShapeError(f"{op_name}: X has {channels} channels but W {tuple(w_shape)} with group={group} expects "
                         f"{w_shape[1] * group}")


def check_conv_weights(op_name: str, x_shape: Sequence[int], w_shape: Sequence[int], channels: int,
                       kernel_shape: Sequence[int] | None, group: int, note: str = "") -> tuple:
    """W's kernel, after :func:`check_conv_ranks`, :func:`check_kernel_attribute` and
    :func:`check_group_channels` for X of ``x_shape`` with ``channels`` (ConvInteger, QLinearConv)."""
    check_conv_ranks(op_name, len(x_shape), w_shape, x_shape, note)
    kernel = check_kernel_attribute(op_name, kernel_shape, w_shape[2:])
    check_group_channels(op_name, channels, w_shape, group)
    return kernel


def check_conv_inputs(x_shape: Sequence[int], w_shape: Sequence[int], group: int,
                      kernel_shape: Sequence[int] | None, b_shape: Sequence[int] | None) -> tuple[tuple, int]:
    """Conv's ``(kernel, M)`` after checking X (N, C, spatial...) of 1 to 3 spatial axes, W (M, C/group,
    kernel...) of X's rank with C and M divisible by ``group``, the ``kernel_shape`` attribute and B (M,)
    (``b_shape`` None: no B); else a ShapeError.

    >>> check_conv_inputs((1, 4, 8, 8), (6, 2, 3, 3), 2, None, (6,))
    ((3, 3), 6)
    """
    if len(x_shape) not in (3, 4, 5):
        raise ShapeError(f"Conv: X must be (N, C, L), (N, C, H, W) or (N, C, D, H, W), got shape {x_shape}")
    if len(w_shape) != len(x_shape):
        raise ShapeError(f"Conv: W must have the rank of X ({len(x_shape)}): (M, C/group, kernel...), got shape "
                         f"{w_shape} for X of shape {x_shape}")
    channels, m = x_shape[1], w_shape[0]
    if channels % group or m % group or w_shape[1] * group != channels:
        raise ShapeError(f"Conv: with group={group}, X of shape {x_shape} needs W of shape (M, {channels / group:g}, "
                         f"kernel...) with C={channels} and M both divisible by {group}; got W of shape {w_shape}")
    kernel = check_kernel_of_weights("Conv", kernel_shape, w_shape)
    if b_shape is not None and tuple(b_shape) != (m,):
        raise ShapeError(f"Conv: B must have shape ({m},) (one bias per output channel), got {b_shape}")
    return kernel, m


def check_conv_transpose_weights(x_shape: Sequence[int], w_shape: Sequence[int], group: int,
                                 b_shape: Sequence[int] | None) -> int:
    """ConvTranspose's output channels M, after checking W (C, M/group, kernel...) of X's rank with C X's
    channels, divisible by ``group``, and B (M,) (``b_shape`` None: no B); else a ShapeError."""
    if len(w_shape) != len(x_shape) or w_shape[0] != x_shape[1] or x_shape[1] % group:
        raise ShapeError(f"ConvTranspose: W must be (C, M/group, kernel...) with C = X's channels ({x_shape[1]}, "
                         f"divisible by group={group}); got W {w_shape} for X {x_shape}")
    m = w_shape[1] * group
    if b_shape is not None and tuple(b_shape) != (m,):
        raise ShapeError(f"ConvTranspose: B must have shape ({m},) (one bias per output channel), got {b_shape}")
    return m


def check_col2im_ranks(columns_shape: Sequence, image_shape_shape: Sequence, block_shape_shape: Sequence) -> None:
    """Raise Col2Im's ShapeError unless its input is 3-D (N, C * prod(block_shape), L) and image_shape and
    block_shape are 1-D."""
    if len(columns_shape) != 3 or len(image_shape_shape) != 1 or len(block_shape_shape) != 1:
        raise ShapeError(f"Col2Im: expected input (N, C * prod(block_shape), L) and 1-D image_shape and block_shape, "
                         f"got shapes {tuple(columns_shape)}, {tuple(image_shape_shape)}, {tuple(block_shape_shape)}")


class DeformConvAttributes(NamedTuple):
    """DeformConv's attributes (opset 19), the window lists None where absent."""

    dilations: list[int] | None
    group: int
    kernel_shape: list[int] | None
    offset_group: int
    pads: list[int] | None
    strides: list[int] | None


def deform_conv_attributes(read: Callable[[Any], list[int] | None], dilations: Any = None, group: Any = 1,
                           kernel_shape: Any = None, offset_group: Any = 1, pads: Any = None,
                           strides: Any = None) -> DeformConvAttributes:
    """DeformConv's attributes: the window attributes read as int lists by ``read`` (the framework's reader;
    None stays None) and checked (:func:`~d5.ops.onnx_semantics.check_window_attributes`), ``group`` and
    ``offset_group`` as positive ints; else a ShapeError.

    >>> deform_conv_attributes(list, strides=(2, 2)).strides
    [2, 2]
    >>> deform_conv_attributes(list, group=0)
    Traceback (most recent call last):
      ...
    d5.errors.ShapeError: DeformConv: group and offset_group must be positive integers, got 0 and 1
    """
    def listed(values):
        return None if values is None else read(values)

    dilations, kernel_shape, pads, strides = listed(dilations), listed(kernel_shape), listed(pads), listed(strides)
    groups, offset_groups = int(group), int(offset_group)
    if groups < 1 or offset_groups < 1:
        raise ShapeError(f"DeformConv: group and offset_group must be positive integers, got {group} and "
                         f"{offset_group}")
    check_window_attributes("DeformConv", kernel_shape=kernel_shape, strides=strides, dilations=dilations, pads=pads)
    return DeformConvAttributes(dilations, groups, kernel_shape, offset_groups, pads, strides)


def deform_conv_plan(x_shape: tuple, w_shape: tuple, offset_shape: tuple, mask_shape: tuple | None,
                     kernel_shape: list[int] | None, group: int, offset_group: int, strides: list[int] | None,
                     dilations: list[int] | None, pads: list[int] | None) -> tuple[list, list, list, list, list]:
    """DeformConv's ``(kernel, strides, dilations, pads, out)`` (lists; the attributes' defaults filled in)
    after checking X (N, C, spatial...), W (M, C/group, kernel...), offset (N, offset_group * taps * rank, *out)
    with ``out`` the convolution's output and mask (N, offset_group * taps, *out) (``mask_shape`` None: no mask);
    else a ShapeError.

    >>> deform_conv_plan((1, 1, 2, 2), (1, 1, 1, 1), (1, 2, 2, 2), None, None, 1, 1, None, None, None)
    ([1, 1], [1, 1], [1, 1], [0, 0, 0, 0], [2, 2])
    """
    rank = len(x_shape) - 2
    kernel = list(w_shape[2:])
    if rank < 1 or len(w_shape) != len(x_shape) or len(offset_shape) != len(x_shape):
        raise ShapeError(f"DeformConv: X, W and offset must have the same rank (N, C, spatial...), got {x_shape}, "
                         f"{w_shape}, {offset_shape}")
    if kernel_shape is not None and kernel_shape != kernel:
        raise ShapeError(f"DeformConv: attribute kernel_shape={kernel_shape} disagrees with W's kernel {kernel}")
    n, channels = x_shape[:2]
    out_channels, taps, out = w_shape[0], math.prod(kernel), list(offset_shape[2:])
    if channels != w_shape[1] * group or out_channels % group or channels % offset_group:
        raise ShapeError(f"DeformConv: X {x_shape} and W {w_shape} do not fit group={group} and offset_group="
                         f"{offset_group} (C = W.shape[1] * group; M and C divisible)")
    if offset_shape[0] != n or offset_shape[1] != offset_group * taps * rank:
        raise ShapeError(f"DeformConv: offset must be (N, offset_group * prod(kernel) * {rank}, ...) = "
                         f"({n}, {offset_group * taps * rank}, ...), got {offset_shape}")
    strides = strides or [1] * rank
    dilations = dilations or [1] * rank
    pads = pads or [0] * (2 * rank)
    expected = list(window_geometry(list(x_shape[2:]), kernel, strides=strides, dilations=dilations, pads=pads,
                                    op_name="DeformConv").out)
    if expected != out:
        raise ShapeError(f"DeformConv: the offset's spatial shape {out} is not the convolution's output "
                         f"{expected} (from X, pads, strides, dilations and the kernel)")
    if mask_shape is not None and tuple(mask_shape) != (n, offset_group * taps, *out):
        raise ShapeError(f"DeformConv: mask must be {(n, offset_group * taps, *out)}, got {tuple(mask_shape)}")
    return kernel, strides, dilations, pads, out


def deform_tap_grid(kernel: Sequence[int], out: Sequence[int], strides: Sequence[int], dilations: Sequence[int],
                    pads: Sequence[int], axis: int) -> np.ndarray:
    """(*kernel, *out) int64: DeformConv's sampling coordinate along spatial ``axis`` of each tap of each output
    position before its offset, ``tap * dilation + position * stride - pad_begin``.

    >>> deform_tap_grid((2,), (3,), (2,), (1,), (1, 0), 0).tolist()
    [[-1, 1, 3], [0, 2, 4]]
    """
    rank = len(kernel)
    tap = np.arange(kernel[axis]) * dilations[axis]
    base = np.arange(out[axis]) * strides[axis] - pads[axis]
    grid = (tap.reshape([-1 if i == axis else 1 for i in range(rank)] + [1] * rank)
            + base.reshape([1] * rank + [-1 if i == axis else 1 for i in range(rank)]))
    return np.array(np.broadcast_to(grid, [*kernel, *out]))


__all__ += ["check_col2im_ranks", "check_conv_inputs", "check_conv_ranks", "check_conv_transpose_weights",
            "check_conv_weights", "check_group_channels", "check_kernel_attribute", "check_kernel_of_weights",
            "DeformConvAttributes", "deform_conv_attributes", "deform_conv_plan", "deform_tap_grid"]


# ---------------------------------------------------------------------------------------------- activation

def check_dropout_ratio(ratio: float) -> None:
    """Raise Dropout's ShapeError unless the drop probability ``ratio`` is in [0, 1]."""
    if not 0.0 <= ratio <= 1.0:
        raise ShapeError(f"Dropout: ratio must be in [0, 1], got {ratio}; pass the drop probability")


def per_channel_slope(x_shape: Sequence[int], slope_shape: Sequence[int]) -> bool:
    """Whether PRelu's 1-D slope of C values applies along axis 1 of an (N, C, ...) input of ``x_shape``
    (NumPy would align it with the last axis, which it does not match): as the reference's PRelu.

    >>> per_channel_slope((1, 2, 3), (2,)), per_channel_slope((1, 2, 2), (2,))
    (True, False)
    """
    return (len(slope_shape) == 1 and len(x_shape) > 2 and x_shape[1] == slope_shape[0] != 1
            and x_shape[-1] != slope_shape[0])


def check_swiglu_inputs(a_shape: Sequence[int], b_shape: Sequence[int] | None) -> None:
    """Raise SwiGLU's ShapeError unless B is given (``b_shape`` None: absent) and has A's shape (no
    broadcasting)."""
    if b_shape is None:
        raise ShapeError("SwiGLU: expected inputs (A, B), got 1")
    if tuple(a_shape) != tuple(b_shape):
        raise ShapeError(f"SwiGLU: A and B must have the same shape (no broadcasting), got {tuple(a_shape)} and "
                         f"{tuple(b_shape)}; split the projection evenly or Expand first")


def check_float_input(op_name: str, floating: bool, found: Any) -> None:
    """Raise the ShapeError of a Softmax-like operator, defined on floats only, unless its input is
    ``floating``; ``found`` is the input's dtype (or type) as the message names it."""
    if not floating:
        raise ShapeError(f"{op_name} takes a floating-point tensor (float16, float32, float64 or bfloat16), got "
                         f"{found}; Cast it first")


class CoercedTo2D:
    """Mixin of the opset 1-12 versions of Softmax, LogSoftmax and Hardmax, which coerce X to 2-D at ``axis``
    (default 1) and normalize each row: listed before the newest version in the bases, it builds that version
    along the last axis (of the 2-D view) and keeps the coercion axis as ``coerce_axis``; :meth:`coerced_shape`
    gives the 2-D view."""

    op_name: str

    def __init__(self, **attributes) -> None:
        super().__init__(axis=-1)
        self.coerce_axis = operator_attributes(self.op_name, attributes, opset=12).axis

    def coerced_shape(self, shape: Sequence[int]) -> tuple[int, int]:
        """X's shape coerced to 2-D at ``coerce_axis`` (see :func:`coerced_2d_shape`)."""
        return coerced_2d_shape(type(self).__name__, shape, self.coerce_axis)


def coerced_2d_shape(op_name: str, shape: Sequence[int], axis: int) -> tuple[int, int]:
    """The 2-D view Softmax, LogSoftmax and Hardmax of opsets 1-12 work on: ``shape`` coerced at ``axis``,
    ``(prod(shape[:axis]), prod(shape[axis:]))``.

    >>> coerced_2d_shape("Softmax", (2, 3, 4), 1), coerced_2d_shape("Softmax", (2, 3, 4), -1)
    ((2, 12), (6, 4))
    """
    axis = normalize_axis(op_name, axis, len(shape))
    return math.prod(shape[:axis]), math.prod(shape[axis:])


__all__ += ["CoercedTo2D", "check_dropout_ratio", "check_float_input", "check_swiglu_inputs", "coerced_2d_shape",
            "per_channel_slope"]


# -------------------------------------------------------------------------------------------- quantization

#: The saturation range of each integer type a quantization targets, by NumPy dtype name (the packed int4/uint4
#: and int2/uint2 types have no ``np.iinfo``).
QUANTIZED_RANGES = {"uint8": (0, 255), "int8": (-128, 127), "uint16": (0, 65535), "int16": (-32768, 32767),
                    "uint4": (0, 15), "int4": (-8, 7), "uint2": (0, 3), "int2": (-2, 1),
                    "int32": (-2 ** 31, 2 ** 31 - 1)}


def _size(shape: Sequence) -> int | None:
    return None if None in shape else math.prod(shape)


def check_matmul_integer(a_shape: Sequence, b_shape: Sequence) -> None:
    """Raise MatMulInteger's ShapeError unless A and B have at least one dimension each."""
    if len(a_shape) < 1 or len(b_shape) < 1:
        raise ShapeError(f"MatMulInteger: A and B must have at least one dimension, got shapes {tuple(a_shape)} and "
                         f"{tuple(b_shape)}")


def a_zero_point_rows(a_shape: Sequence, zero_shape: Sequence) -> int:
    """A's rows (1 for a 1-D A), after checking that MatMulInteger's a_zero_point of ``zero_shape`` is a scalar
    or one value per row; else a ShapeError.

    >>> a_zero_point_rows((4, 3), (4,)), a_zero_point_rows((3,), ())
    (4, 1)
    """
    rows = a_shape[-2] if len(a_shape) > 1 else 1
    if _size(zero_shape) != 1 and tuple(zero_shape) != (rows,):
        raise ShapeError(f"MatMulInteger: a_zero_point must be a scalar or 1-D of length {rows} (A's rows), got "
                         f"shape {tuple(zero_shape)}")
    return rows


def check_b_zero_point(b_shape: Sequence, zero_shape: Sequence | None) -> None:
    """Raise MatMulInteger's ShapeError unless b_zero_point (``zero_shape`` None: absent) is a scalar or one
    value per column of B."""
    if zero_shape is not None and _size(zero_shape) != 1 and tuple(zero_shape) != tuple(b_shape[-1:]):
        raise ShapeError(f"MatMulInteger: b_zero_point must be a scalar or 1-D of length {b_shape[-1]} (B's "
                         f"columns), got shape {tuple(zero_shape)}")


def matmul_plan(op_name: str, a_shape: Sequence, b_shape: Sequence, shapes: str) -> tuple:
    """NumPy's matmul on static shapes: ``(A's shape, B's shape, batch shape, drop_row, drop_column)`` with a
    1-D A lifted to a row (``drop_row``: the result loses that axis) and a 1-D B to a column, the batch axes
    broadcast; a ShapeError naming ``shapes`` where they do not multiply (an unknown inner size passes).

    >>> matmul_plan("MatMulInteger", (3,), (2, 3, 4), "A and B")
    ((1, 3), (2, 3, 4), (2,), True, False)
    """
    a, b = tuple(a_shape), tuple(b_shape)
    if not a or not b:
        raise ShapeError(f"{op_name}: cannot multiply {shapes}")
    drop_row, drop_column = len(a) == 1, len(b) == 1
    if drop_row:
        a = (1,) + a
    if drop_column:
        b = b + (1,)
    try:
        if None not in (a[-1], b[-2]) and a[-1] != b[-2]:
            raise ShapeError("inner dimensions differ")
        batch = broadcast_shape(op_name, a[:-2], b[:-2])
    except ShapeError:
        raise ShapeError(f"{op_name}: cannot multiply {shapes}") from None
    return a, b, batch, drop_row, drop_column


def qlinear_matmul_shapes(a_shape: Sequence, b_shape: Sequence, a_zero_shape: Sequence | None,
                          b_zero_shape: Sequence | None) -> str:
    """QLinearMatMul's operands as its error messages name them (a zero point None: absent, shown as ``()``).

    >>> qlinear_matmul_shapes((2, 3), (3,), None, (1,))
    'A (2, 3) and B (3,) with zero points of shapes () and (1,)'
    """
    return (f"A {tuple(a_shape)} and B {tuple(b_shape)} with zero points of shapes "
            f"{() if a_zero_shape is None else tuple(a_zero_shape)} and "
            f"{() if b_zero_shape is None else tuple(b_zero_shape)}")


def zero_point_broadcast_error(op_name: str, shapes: str) -> ShapeError:
    """The ShapeError for zero points that do not broadcast against their operand (``shapes`` names them)."""
    return ShapeError(f"{op_name}: zero points must be scalars or broadcast against {shapes}")


def check_zero_point_broadcast(op_name: str, value_shape: Sequence, zero_shape: Sequence, shapes: str) -> None:
    """Raise :func:`zero_point_broadcast_error` unless ``zero_shape`` broadcasts against ``value_shape``."""
    try:
        broadcast_shape(op_name, value_shape, zero_shape)
    except ShapeError:
        raise zero_point_broadcast_error(op_name, shapes) from None


def requantize_broadcast_error(product_shape: Sequence) -> ShapeError:
    """QLinearMatMul's ShapeError for scales or a y_zero_point that do not broadcast against the product."""
    return ShapeError(f"QLinearMatMul: the scales and y_zero_point must be scalars or broadcast against the product "
                      f"of shape {tuple(product_shape)}")


def check_requantize_broadcast(product_shape: Sequence, term_shapes: Iterable[Sequence]) -> None:
    """Raise :func:`requantize_broadcast_error` unless every scale and zero point of ``term_shapes`` (read
    inside the check: a ShapeError reading them is this one too) broadcasts against QLinearMatMul's product."""
    try:
        broadcast_shape("QLinearMatMul", product_shape, *term_shapes)
    except ShapeError:
        raise requantize_broadcast_error(product_shape) from None


__all__ += ["QUANTIZED_RANGES", "a_zero_point_rows", "check_b_zero_point", "check_matmul_integer",
            "check_requantize_broadcast", "check_zero_point_broadcast", "matmul_plan", "qlinear_matmul_shapes",
            "requantize_broadcast_error", "zero_point_broadcast_error"]
