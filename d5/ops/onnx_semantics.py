"""Framework-neutral ONNX semantics that every framework's operators share. They read shapes and attribute
values only, never tensor values, so a NumPy, PyTorch or TensorFlow operator calls them alike:

- sliding windows: :func:`check_window_attributes`, :func:`window_geometry` (``auto_pad``, ``pads``,
  ``ceil_mode``) for Conv, ConvTranspose and pooling, :func:`conv_transpose_geometry` for ConvTranspose's output;
- axes: :func:`normalize_axis`, :func:`normalize_axes`;
- optional inputs: :func:`optional_input`;
- broadcasting: :func:`broadcast_shape`, :func:`not_broadcastable`, :func:`unbroadcast_axes`;
- attributes: :func:`int_tuple`, :func:`as_text` (each operator's attributes are parsed in
  :mod:`d5.ops.onnx_attributes`);
- sampling geometry taking the array namespace (``xp``: numpy or torch) as an argument, so that one piece of
  code computes it on either framework's tensors: :func:`grid_sample_taps`, :func:`cubic_kernel`,
  :func:`reflect_coordinates`.

Errors are :class:`d5.errors.ShapeError` naming the operator.

Checking happens here, in Python, before any kernel is entered: a crafted model with ``strides=[2**32]`` or
``pads=[2**32 - 1, ...]`` is a legal ONNX file, and a C++ kernel given such numbers computes buffer sizes that
overflow. :func:`check_window_attributes` validates the attributes alone (once, when an operator is built);
:func:`window_geometry` validates them against an input's spatial shape and resolves the output size.

>>> check_window_attributes("Conv", strides=[2**32, 1])
Traceback (most recent call last):
  ...
d5.errors.ShapeError: Conv: attribute 'strides' must hold integers from 1 to 2147483647, got [4294967296, 1]
>>> window_geometry((28,), (5,), strides=(1,), dilations=(1,), pads=(2, 2), auto_pad="NOTSET")
WindowGeometry(out=(28,), pads_begin=(2,), pads_end=(2,))
"""
from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Sequence

import numpy as np

from d5.errors import ShapeError, UnsupportedOperatorError

AUTO_PAD_MODES = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")

#: Largest kernel size, stride, dilation, pad, padded input extent or output extent d5 accepts on one
#: spatial axis. Real networks stay many orders of magnitude below it; beyond it kernels would need
#: 64-bit offsets where they use 32-bit ones (vector gathers) and buffer sizes could overflow.
MAX_WINDOW_EXTENT = 2**31 - 1

#: Largest number of output positions (the product of the output's spatial sizes) of one window operator,
#: per image and channel.
MAX_WINDOW_POSITIONS = 2**31 - 1

# attribute name -> smallest legal value
_MINIMUM = {"kernel_shape": 1, "strides": 1, "dilations": 1, "pads": 0, "output_padding": 0}


def check_window_attributes(op_name: str, *, auto_pad: str = "NOTSET", **attributes: Sequence[int] | None) -> None:
    """Check ONNX window attributes (``kernel_shape``, ``strides``, ``dilations``, ``pads``, ``output_padding``;
    ``None`` = absent) on their own: integers in range, and lengths that agree (``pads`` twice the others).
    Raises :class:`d5.errors.ShapeError` naming the operator and the attribute.

    >>> check_window_attributes("MaxPool", kernel_shape=[2, 2], strides=[2, 2], pads=[0, 0, 0, 0])
    >>> check_window_attributes("MaxPool", kernel_shape=[2, 2], pads=[0, 0])
    Traceback (most recent call last):
      ...
    d5.errors.ShapeError: MaxPool: attribute 'pads' must have 4 values (2 begins, then 2 ends) for 2 spatial axes, got [0, 0]
    """
    if auto_pad not in AUTO_PAD_MODES:
        raise ShapeError(f"{op_name}: attribute 'auto_pad' must be one of {', '.join(AUTO_PAD_MODES)}, got {auto_pad!r}")
    rank = None
    for name, values in attributes.items():
        if values is None:
            continue
        minimum = _MINIMUM[name]
        values = list(values)
        if any(not _is_int(v) or not minimum <= int(v) <= MAX_WINDOW_EXTENT for v in values):
            raise ShapeError(f"{op_name}: attribute {name!r} must hold integers from {minimum} to {MAX_WINDOW_EXTENT}, "
                             f"got {values}")
        length = len(values) // 2 if name == "pads" else len(values)
        if name == "pads" and len(values) % 2:
            raise ShapeError(f"{op_name}: attribute 'pads' must have an even number of values (begins, then ends), "
                             f"got {values}")
        if rank is None:
            rank = length
        elif length != rank:
            expected = f"{2 * rank} values ({rank} begins, then {rank} ends)" if name == "pads" else f"{rank} values"
            raise ShapeError(f"{op_name}: attribute {name!r} must have {expected} for {rank} spatial axes, got {values}")


def _is_int(value) -> bool:
    try:
        return int(value) == value
    except (TypeError, ValueError, OverflowError):
        return False


@dataclasses.dataclass(frozen=True)
class WindowGeometry:
    """Output size and pads per spatial axis. A pad is negative only under ``auto_pad`` SAME_* when the
    stride exceeds the dilated kernel: the windows then start ``-pad`` elements into the input (begin) or
    never reach its last ``-pad`` elements (end). Kernels take :attr:`crops` and :attr:`applied_pads`.

    >>> WindowGeometry(out=(2,), pads_begin=(-1,), pads_end=(0,)).crops
    (1, 0)
    """

    out: tuple[int, ...]
    pads_begin: tuple[int, ...]
    pads_end: tuple[int, ...]

    @property
    def crops(self) -> tuple[int, ...]:
        """Elements no window reaches, to drop from the input (begins, then ends, as ONNX ``pads``)."""
        return tuple(max(-pad, 0) for pad in (*self.pads_begin, *self.pads_end))

    @property
    def applied_pads(self) -> tuple[int, ...]:
        """The pads (all >= 0) to add around the input once :attr:`crops` are dropped (begins, then ends)."""
        return tuple(max(pad, 0) for pad in (*self.pads_begin, *self.pads_end))


def window_geometry(spatial: Sequence[int], kernel: Sequence[int], *, strides: Sequence[int],
                    dilations: Sequence[int], pads: Sequence[int], auto_pad: str = "NOTSET",
                    ceil_mode: bool = False, clamp_same_pads: bool = False,
                    op_name: str = "window") -> WindowGeometry:
    """Resolve ONNX padding attributes into output sizes and explicit pads (begin/end per axis).

    ``pads`` is in ONNX order ``[x1_begin, x2_begin, ..., x1_end, x2_end, ...]`` and is used only when
    ``auto_pad`` is ``NOTSET``. ``VALID`` pads nothing. With ``ceil_mode`` (pooling) the last window may
    overhang, but, as in PyTorch, it must start inside the input or the leading pad.

    ``SAME_UPPER``/``SAME_LOWER`` give ``ceil(in / stride)`` outputs and the total pad of the pooling
    operators' documentation, ``(out - 1) * stride + (kernel - 1) * dilation + 1 - in``, split in two
    halves as the spec words it: "the extra padding is added at the end for SAME_UPPER and at the
    beginning for SAME_LOWER" -- also when the total is negative (stride larger than the dilated kernel):
    the half nearer zero comes first under SAME_UPPER (truncating division, as onnxruntime), and SAME_LOWER
    is SAME_UPPER mirrored, so -1 splits as (0, -1) under SAME_UPPER and (-1, 0) under SAME_LOWER, -2 as
    (-1, -1) under both. Measured against onnxruntime 1.31 and
    onnx.reference 1.23 on 1-D to 3-D grids (the reference framework's same-padding tests):

    * pooling (MaxPool, AveragePool, LpPool) keeps negative pads, as both of them do where they answer:
      onnxruntime's AveragePool/LpPool (and MaxPool with dilations; without them it refuses negative pads)
      and onnx.reference's MaxPool apply the formula unclamped. They round differently for the two
      halves of a negative total: onnxruntime's C++ division truncates (-1 splits as (0, -1) under both
      modes, -2 as (0, -2) under SAME_LOWER), onnx.reference's MaxPool floors under both modes (and its
      SAME_LOWER outputs ``floor(in / stride)`` values). d5 follows the spec's words, which onnxruntime
      does under SAME_UPPER; where the two agree without dilations, d5 agrees with both.
    * Conv passes ``clamp_same_pads=True``: a negative total becomes 0, as onnx.reference's Conv, ONNX's
      shape inference and TensorFlow's SAME do, and as onnxruntime's Conv does wherever the two agree
      (its own rule, a total raised by one when twice it would lose an output, then truncated, differs).
    * dilations: d5 uses the dilated kernel, as the formula says and onnx.reference does; onnxruntime
      pads as if the dilation were 1 for pooling and refuses Conv (microsoft/onnxruntime#1224, #10083).
    * a window that sees only padding (possible with dilations larger than the input) gives -inf in
      MaxPool (onnx.reference gives 0, onnxruntime an empty output).

    Negative pads describe the geometry only: kernels drop :attr:`WindowGeometry.crops` from the input
    and pad it by :attr:`WindowGeometry.applied_pads`.

    Raises :class:`d5.errors.ShapeError` when the attributes are out of range (see
    :func:`check_window_attributes`), the input has an empty spatial axis, the kernel does not fit the
    padded input, or an extent or the output would exceed :data:`MAX_WINDOW_EXTENT` /
    :data:`MAX_WINDOW_POSITIONS`.

    >>> window_geometry((5,), (2,), strides=(2,), dilations=(1,), pads=(0, 0), ceil_mode=True)
    WindowGeometry(out=(3,), pads_begin=(0,), pads_end=(0,))
    >>> window_geometry((5,), (3,), strides=(2,), dilations=(1,), pads=(0, 0), auto_pad="SAME_LOWER")
    WindowGeometry(out=(3,), pads_begin=(1,), pads_end=(1,))
    >>> window_geometry((5,), (1,), strides=(3,), dilations=(1,), pads=(0, 0), auto_pad="SAME_UPPER")
    WindowGeometry(out=(2,), pads_begin=(0,), pads_end=(-1,))
    >>> window_geometry((5,), (1,), strides=(3,), dilations=(1,), pads=(0, 0), auto_pad="SAME_UPPER",
    ...                 clamp_same_pads=True)
    WindowGeometry(out=(2,), pads_begin=(0,), pads_end=(0,))
    """
    rank = len(spatial)
    check_window_attributes(op_name, auto_pad=auto_pad, kernel_shape=kernel, strides=strides, dilations=dilations,
                            pads=pads)
    for name, values in (("kernel_shape", kernel), ("strides", strides), ("dilations", dilations)):
        if len(values) != rank:
            raise ShapeError(f"{op_name}: attribute {name!r} must have {rank} values (one per spatial axis of the "
                             f"input), got {list(values)}")
    if len(pads) != 2 * rank:
        raise ShapeError(f"{op_name}: attribute 'pads' must have {2 * rank} values (begins, then ends) for an input "
                         f"with {rank} spatial axes, got {list(pads)}")
    if any(int(size) < 1 for size in spatial):
        raise ShapeError(f"{op_name}: the input's spatial axes {list(spatial)} include an empty one; every spatial "
                         "axis needs at least one element")
    out, begin, end = [], [], []
    for axis in range(rank):
        size, stride = int(spatial[axis]), int(strides[axis])
        extent = (int(kernel[axis]) - 1) * int(dilations[axis]) + 1  # the dilated kernel's reach
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            n_out = -(-size // stride)
            total = (n_out - 1) * stride + extent - size
            if clamp_same_pads:
                total = max(total, 0)
            # The half nearer zero first under SAME_UPPER, last under SAME_LOWER (the spec: "the extra padding
            # is added at the end for SAME_UPPER and at the beginning for SAME_LOWER"), also when negative.
            near = int(total / 2)  # truncated toward zero: -1 splits as (0, -1) under SAME_UPPER
            pad_begin, pad_end = (near, total - near) if auto_pad == "SAME_UPPER" else (total - near, near)
        else:
            pad_begin, pad_end = (0, 0) if auto_pad == "VALID" else (int(pads[axis]), int(pads[axis + rank]))
            span = size + pad_begin + pad_end - extent
            if span < 0:
                raise ShapeError(f"{op_name}: the kernel (extent {extent} with dilation) is larger than spatial axis "
                                 f"{axis} of the padded input ({size} + pads {pad_begin}+{pad_end}); use a smaller "
                                 "kernel or more padding")
            n_out = (math.ceil(span / stride) if ceil_mode else span // stride) + 1
            if ceil_mode and (n_out - 1) * stride >= size + pad_begin:
                n_out -= 1  # the last window would start in the trailing pad and see no input
        padded = size + pad_begin + pad_end
        if max(extent, padded, (n_out - 1) * stride + extent) > MAX_WINDOW_EXTENT:
            raise ShapeError(f"{op_name}: on spatial axis {axis} the padded input ({size} + pads {pad_begin}+{pad_end}) "
                             f"or the dilated kernel (extent {extent}) exceeds {MAX_WINDOW_EXTENT} elements; check the "
                             "'pads', 'kernel_shape', 'dilations' and 'strides' attributes")
        out.append(n_out)
        begin.append(pad_begin)
        end.append(pad_end)
    if math.prod(out) > MAX_WINDOW_POSITIONS:
        raise ShapeError(f"{op_name}: the output would have {math.prod(out)} positions per channel (spatial shape "
                         f"{tuple(out)}), more than d5 supports ({MAX_WINDOW_POSITIONS}); check the 'pads' and "
                         "'strides' attributes")
    return WindowGeometry(tuple(out), tuple(begin), tuple(end))


@functools.lru_cache(maxsize=4096)
def window_sides(op_name: str, spatial: tuple, kernel: tuple, strides: tuple | None, dilations: tuple | None,
                 pads: tuple | None, auto_pad: str, ceil_mode: bool, clamp_same_pads: bool) -> tuple:
    """A window operator's geometry as a framework runs it with unpadded ("VALID") windows: ``(geometry, strides,
    dilations, sides)``, ``sides`` per spatial axis the (begin, end) amounts to pad (negative: crop) X by so that
    plain stride/dilation windows give exactly ONNX's outputs, ``ceil_mode``'s overhang included. Memoized (a
    converter meets the same shapes step after step); arguments hashable (tuples, None for the defaults).

    >>> window_sides("MaxPool", (5,), (2,), (2,), None, None, "NOTSET", True, False)[3]
    ((0, 1),)
    """
    rank = len(spatial)
    strides = strides or (1,) * rank
    dilations = dilations or (1,) * rank
    pads = pads or (0,) * (2 * rank)
    geometry = window_geometry(spatial, kernel, strides=strides, dilations=dilations, pads=pads,
                               auto_pad=auto_pad, ceil_mode=ceil_mode, clamp_same_pads=clamp_same_pads,
                               op_name=op_name)
    sides = []
    for axis, size in enumerate(spatial):
        extent = (kernel[axis] - 1) * dilations[axis] + 1
        needed = (geometry.out[axis] - 1) * strides[axis] + extent
        begin = geometry.pads_begin[axis]
        sides.append((begin, needed - size - begin))
    return geometry, strides, dilations, tuple(sides)


@dataclasses.dataclass(frozen=True)
class TransposedWindowGeometry:
    """ConvTranspose's geometry per spatial axis: the transposed convolution by the kernel with ``strides`` and
    ``dilations`` spans ``full`` positions, ``stride * (in - 1) + (kernel - 1) * dilation + 1``; the output is
    the ``out`` positions from ``pads_begin`` on of those plus ``output_padding`` zeros at the end.

    >>> TransposedWindowGeometry(strides=(2,), dilations=(1,), full=(5,), out=(4,), pads_begin=(1,)).sides
    ((-1, 0),)
    """

    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    full: tuple[int, ...]
    out: tuple[int, ...]
    pads_begin: tuple[int, ...]

    @property
    def sides(self) -> tuple[tuple[int, int], ...]:
        """Per spatial axis, the (begin, end) amounts to pad ``full`` by (negative: crop) to get the output."""
        return tuple((-begin, begin + out - full) for begin, out, full in zip(self.pads_begin, self.out, self.full))


def conv_transpose_geometry(spatial: Sequence[int], kernel: Sequence[int], *, strides: Sequence[int] | None,
                            dilations: Sequence[int] | None, output_padding: Sequence[int] | None,
                            pads: Sequence[int] | None, output_shape: Sequence[int] | None,
                            auto_pad: str = "NOTSET") -> TransposedWindowGeometry:
    """ConvTranspose's attributes (None: absent) resolved for an input of spatial shape ``spatial`` and a kernel
    of shape ``kernel``. Output size per axis: ``stride * (in - 1) + output_padding + (kernel - 1) * dilation +
    1 - pad_begin - pad_end``, or ``output_shape`` when given: the pads are then derived from it, the total
    ``natural - output_shape`` split evenly with the odd unit at the end for ``auto_pad=SAME_UPPER`` and at the
    beginning otherwise (ONNX's rule, as onnxruntime applies it). A ShapeError for attributes of the wrong
    length, an UnsupportedOperatorError for negative leading pads or an empty output.

    >>> conv_transpose_geometry((2,), (3,), strides=(2,), dilations=None, output_padding=None, pads=(1, 1),
    ...                         output_shape=None)
    TransposedWindowGeometry(strides=(2,), dilations=(1,), full=(5,), out=(3,), pads_begin=(1,))
    """
    rank = len(spatial)
    strides, dilations = tuple(strides or (1,) * rank), tuple(dilations or (1,) * rank)
    output_padding = tuple(output_padding or (0,) * rank)
    for name, values in (("strides", strides), ("dilations", dilations), ("output_padding", output_padding)):
        if len(values) != rank:
            raise ShapeError(f"ConvTranspose: {name} must have {rank} values (one per spatial axis), got "
                             f"{list(values)}")
    full = tuple(s * (i - 1) + (k - 1) * d + 1 for s, i, k, d in zip(strides, spatial, kernel, dilations))
    natural = [f + op for f, op in zip(full, output_padding)]
    if output_shape or (auto_pad in ("SAME_UPPER", "SAME_LOWER") and pads is None):
        if not output_shape:
            # Under SAME_* the output is input * stride; where that is more than the unpadded output (stride >
            # dilated kernel), the total pad is clamped at 0, as onnxruntime and ONNX's shape inference have it.
            out = [min(nat, i * s) for nat, i, s in zip(natural, spatial, strides)]
        elif len(output_shape) not in (rank, rank + 2):  # the spatial sizes (or, leniently, N, C too)
            raise ShapeError(f"ConvTranspose: output_shape must have {rank} values (one per spatial axis), got "
                             f"{list(output_shape)}")
        else:  # a given output_shape overrides the pads
            out = [int(o) for o in output_shape[-rank:]]
        # The pads derived from the output: the odd unit of the total at the end for SAME_UPPER, else first.
        totals = [nat - o for nat, o in zip(natural, out)]
        begin = [t // 2 if auto_pad == "SAME_UPPER" else t - t // 2 for t in totals]
    else:
        pads = (0,) * (2 * rank) if pads is None or auto_pad == "VALID" else tuple(pads)
        if len(pads) != 2 * rank:
            raise ShapeError(f"ConvTranspose: pads must have {2 * rank} values (begins, then ends), got {list(pads)}")
        begin = list(pads[:rank])
        out = [nat - pb - pe for nat, pb, pe in zip(natural, pads[:rank], pads[rank:])]
    if any(p < 0 for p in begin) or any(o <= 0 for o in out):
        raise UnsupportedOperatorError(
            f"ConvTranspose: the attributes give output size {out} with leading pads {begin}; negative leading "
            "pads and empty outputs are not supported; check output_shape/pads")
    return TransposedWindowGeometry(strides, dilations, full, tuple(out), tuple(begin))


# ------------------------------------------------------------------------------------------------------ axes

def normalize_axis(op_name: str, axis: int, rank: int) -> int:
    """``axis`` in ``[-rank, rank)`` as a non-negative index, or a ShapeError naming the operator.

    >>> normalize_axis("Softmax", -1, 3)
    2
    >>> normalize_axis("Softmax", 3, 3)
    Traceback (most recent call last):
      ...
    d5.errors.ShapeError: Softmax: axis 3 is out of range for a 3-D tensor; use an axis in [-3, 3)
    """
    axis, rank = int(axis), int(rank)
    if not -rank <= axis < rank:
        raise ShapeError(f"{op_name}: axis {axis} is out of range for a {rank}-D tensor; use an axis in "
                         f"[{-rank}, {rank})")
    return axis % rank


def normalize_axes(op_name: str, axes: Sequence[int], rank: int) -> list[int]:
    """``axes`` (each in ``[-rank, rank)``, none named twice) as non-negative indices, in the given order.

    >>> normalize_axes("Squeeze", [-1, 0], 3)
    [2, 0]
    >>> normalize_axes("Squeeze", [0, -3], 3)
    Traceback (most recent call last):
      ...
    d5.errors.ShapeError: Squeeze: axes [0, -3] name the same axis twice
    """
    result = [normalize_axis(op_name, axis, rank) for axis in axes]
    if len(set(result)) != len(result):
        raise ShapeError(f"{op_name}: axes {[int(a) for a in axes]} name the same axis twice")
    return result


# ------------------------------------------------------------------------------------------ optional inputs

def optional_input(inputs: Sequence[Any], index: int) -> Any:
    """Input ``index`` of a node, or None where the node leaves it out (too few inputs, or an empty name,
    which executors pass as None).

    >>> optional_input(["x", None], 1), optional_input(["x"], 2), optional_input(["x", "k"], 1)
    (None, None, 'k')
    """
    return inputs[index] if len(inputs) > index else None


# ------------------------------------------------------------------------------------------- broadcasting

def not_broadcastable(op_name: str, *shapes: Sequence[int]) -> ShapeError:
    """The ShapeError for input shapes that do not broadcast together (ONNX multidirectional broadcasting)."""
    listed = ", ".join(str(tuple(shape)) for shape in shapes)
    return ShapeError(f"{op_name}: input shapes {listed} are not broadcastable (numpy rules: trailing dimensions "
                      "must be equal or 1); reshape or unsqueeze an input")


def broadcast_shape(op_name: str, *shapes: Sequence[int]) -> tuple[int, ...]:
    """The shape ONNX multidirectional (numpy) broadcasting gives ``shapes``, or a ShapeError.

    >>> broadcast_shape("Add", (2, 1, 3), (4, 1))
    (2, 4, 3)
    >>> broadcast_shape("Add", (2, 3), (4,))
    Traceback (most recent call last):
      ...
    d5.errors.ShapeError: Add: input shapes (2, 3), (4,) are not broadcastable (numpy rules: trailing dimensions must be equal or 1); reshape or unsqueeze an input
    """
    rank = max((len(shape) for shape in shapes), default=0)
    result = [1] * rank
    for shape in shapes:
        for i, size in enumerate(shape, start=rank - len(shape)):
            size = int(size)
            if size != 1 and result[i] not in (1, size):
                raise not_broadcastable(op_name, *shapes)
            if size != 1:
                result[i] = size
    return tuple(result)


def unbroadcast_axes(grad_shape: Sequence[int], target_shape: Sequence[int]) -> tuple[int, ...]:
    """The axes of a gradient shaped like a broadcast result (``grad_shape``) to sum so that it reshapes to an
    input of ``target_shape``: the leading axes broadcasting prepended and the axes it stretched from 1.

    >>> unbroadcast_axes((4, 2, 3), (2, 1))
    (0, 2)
    """
    leading = len(grad_shape) - len(target_shape)
    return tuple(range(leading)) + tuple(leading + i for i, size in enumerate(target_shape)
                                         if size == 1 and grad_shape[leading + i] != 1)


# ------------------------------------------------------------------------------------------------ attributes

def int_tuple(values: Any) -> tuple[int, ...] | None:
    """An ``ints`` attribute as a tuple of Python ints; None (absent) stays None.

    >>> int_tuple([1, 2]), int_tuple(None)
    ((1, 2), None)
    """
    return None if values is None else tuple(int(v) for v in values)


def as_text(value: Any) -> str:
    """A ``string`` attribute as ``str`` (ONNX gives bytes; Python callers give str).

    >>> as_text(b"SAME_UPPER"), as_text("linear")
    ('SAME_UPPER', 'linear')
    """
    return value.decode() if isinstance(value, bytes) else str(value)


# ------------------------------------------------------------------------------------------- shapes, tensors

def reshape_target(data_shape: tuple, shape: np.ndarray, allowzero: bool) -> tuple[int, ...]:
    """The output shape of ONNX Reshape: 0 copies the input dimension (unless ``allowzero``), -1 is inferred.

    >>> reshape_target((2, 3, 4), np.array([0, -1]), allowzero=False)
    (2, 12)
    """
    if shape.ndim != 1 or not np.issubdtype(shape.dtype, np.integer):
        raise ShapeError(f"Reshape: the shape input must be a 1-D integer (int64) tensor, got {shape.dtype} of "
                         f"shape {shape.shape}")
    target = [int(s) for s in shape]
    if target.count(-1) > 1:
        raise ShapeError(f"Reshape: at most one dimension may be -1, got shape {target}")
    if any(s < -1 for s in target):
        raise ShapeError(f"Reshape: dimensions must be >= -1, got shape {target}")
    if allowzero and 0 in target and -1 in target:
        raise ShapeError(f"Reshape: with allowzero=1 a shape may not hold both 0 and -1, got {target}")
    if not allowzero:
        for i, s in enumerate(target):
            if s == 0:
                if i >= len(data_shape):
                    raise ShapeError(f"Reshape: shape {target} copies dimension {i} (a 0) but the input {data_shape} "
                                     f"has only {len(data_shape)} dimensions")
                target[i] = data_shape[i]
    size = math.prod(data_shape)
    if -1 in target:
        known = math.prod(s for s in target if s != -1)
        if known == 0 or size % known:
            raise ShapeError(f"Reshape: cannot reshape an input of shape {tuple(data_shape)} ({size} elements) to "
                             f"{[int(s) for s in shape]}: the -1 dimension cannot be inferred")
        target[target.index(-1)] = size // known
    if math.prod(target) != size:
        raise ShapeError(f"Reshape: cannot reshape an input of shape {tuple(data_shape)} ({size} elements) to "
                         f"{tuple(target)} ({math.prod(target)} elements)")
    return tuple(target)


def tensor_attribute(value: Any) -> np.ndarray:
    """A tensor-valued attribute (an ``onnx.TensorProto`` or anything numpy accepts) as an ndarray.

    >>> tensor_attribute([1.5]).dtype
    dtype('float64')
    """
    if hasattr(value, "data_type") and hasattr(value, "dims"):  # an onnx.TensorProto, decoded lazily
        from onnx import numpy_helper
        return numpy_helper.to_array(value)
    return np.asarray(value)


# -------------------------------------------------------------------------------------------- Slice

def slice_bounds(op_name: str, shape: Sequence[int], starts: Sequence[int], ends: Sequence[int],
                 axes: Sequence[int] | None, steps: Sequence[int] | None) -> list[tuple[int, int, int, int]]:
    """ONNX Slice resolved against ``shape``: ``(axis, start, end, step)`` per sliced axis, with negative
    indices counted from the end and clamped as the spec says (to ``[0, dim]`` for a positive step, ``start``
    to ``[0, dim - 1]`` and ``end`` to ``[-1, dim - 1]`` for a negative one; an end of -1 then means "past the
    front").

    >>> slice_bounds("Slice", (5,), [-1], [-100], None, [-2])
    [(0, 4, -1, -2)]
    """
    axes = list(range(len(starts))) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ShapeError(f"{op_name}: starts {list(starts)}, ends {list(ends)}, axes {list(axes)} and steps "
                         f"{list(steps)} must have equal lengths")
    bounds = []
    for axis, start, end, step in zip(normalize_axes(op_name, axes, len(shape)), starts, ends, steps):
        if step == 0:
            raise ShapeError(f"{op_name}: a step of 0 is not allowed")
        dim = shape[axis]
        start = start + dim if start < 0 else start
        end = end + dim if end < 0 else end
        if step > 0:
            start, end = min(max(start, 0), dim), min(max(end, 0), dim)
        else:
            start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
        bounds.append((axis, start, end, int(step)))
    return bounds


# -------------------------------------------------------------------------------------------- Split

def split_lengths(op_name: str, dim: int, lengths: Sequence[int] | None, pieces: int | None) -> list[int]:
    """The piece lengths of ONNX Split along an axis of length ``dim``: ``lengths`` as given, or ``pieces``
    equal pieces (the last one smaller when ``dim`` does not divide; opset 18's ``num_outputs``, or the
    node's output count before it).

    >>> split_lengths("Split", 7, None, 3)
    [3, 3, 1]
    """
    if lengths is None:
        if not pieces or pieces < 1:
            raise ShapeError(f"{op_name}: give the piece lengths ('split' input or attribute) or num_outputs "
                             "(the number of outputs of the node)")
        chunk = -(-dim // pieces)
        lengths = [min(chunk, max(dim - k * chunk, 0)) for k in range(pieces)]
    lengths = [int(n) for n in lengths]
    if sum(lengths) != dim or any(n < 0 for n in lengths):
        raise ShapeError(f"{op_name}: lengths {lengths} must be non-negative and sum to the axis length {dim}")
    return lengths


__all__ = ["AUTO_PAD_MODES", "MAX_WINDOW_EXTENT", "MAX_WINDOW_POSITIONS", "TransposedWindowGeometry",
           "WindowGeometry", "as_text", "broadcast_shape", "check_window_attributes", "conv_transpose_geometry",
           "int_tuple", "normalize_axes", "normalize_axis", "not_broadcastable", "optional_input", "reshape_target",
           "slice_bounds", "split_lengths", "tensor_attribute", "unbroadcast_axes", "window_geometry", "window_sides"]


# -------------------------------------------------------------------------- Resize (separable interpolation)
# Resize's geometry depends on shapes, scales/sizes, roi and attributes only, never on X's values: per resized
# axis, each output position reads a few input positions (taps) with fixed weights. Every framework applies
# these taps its own way (the reference as a dense matrix, PyTorch as gathers).

def cubic_kernel(distance: Any, a: float, xp: Any = np) -> Any:
    """Keys' cubic convolution kernel with parameter ``a`` at ``|distance|`` (Resize, GridSample). ``xp`` is the
    array namespace (``numpy``, or ``torch`` for a framework's tensors: the same names work in both).

    >>> cubic_kernel(np.array([0.0, 1.0, 0.5]), -0.75).tolist()
    [1.0, 0.0, 0.59375]
    """
    d = xp.abs(distance)
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return xp.where(d <= 1, near, xp.where(d < 2, far, xp.zeros_like(d)))


def reflect_coordinates(x: Any, low: float, high: float, xp: Any = np) -> Any:
    """Fold coordinates back into ``[low, high]`` by mirroring at the borders, repeatedly (GridSample's
    reflection padding); ``xp`` as for :func:`cubic_kernel`.

    >>> reflect_coordinates(np.array([-0.5, 2.5, 1.0]), 0.0, 2.0).tolist()
    [0.5, 1.5, 1.0]
    """
    span = high - low
    if span <= 0:
        return xp.full_like(x, low)
    below, above = low - x, x - high
    folds_below, folds_above = xp.floor(below / span), xp.floor(above / span)
    rest_below, rest_above = below - folds_below * span, above - folds_above * span
    from_below = xp.where(folds_below % 2 == 0, low + rest_below, high - rest_below)
    from_above = xp.where(folds_above % 2 == 0, high - rest_above, low + rest_above)
    return xp.where(x < low, from_below, xp.where(x > high, from_above, x))


def resize_plan(op_name: str, shape: Sequence[int], roi: np.ndarray | None, scales: np.ndarray | None,
                sizes: np.ndarray | None, axes: Sequence[int] | None, keep_aspect_ratio_policy: str,
                coordinate_mode: str) -> list[tuple[int, float, int, tuple[float, float] | None]]:
    """``(axis, scale, output length, roi window)`` for every axis of an input of ``shape`` that Resize changes
    (``roi``, ``scales``, ``sizes``: the inputs, None when absent or empty; the window only under
    ``tf_crop_and_resize``). Sizes give the scales ``size / length`` (one common scale, rounded lengths, under
    ``keep_aspect_ratio_policy`` not_larger / not_smaller); scales give the lengths ``floor(scale * length)``.

    >>> resize_plan("Resize", (1, 4), None, np.array([1.0, 0.5]), None, None, "stretch", "half_pixel")
    [(1, 0.5, 2, None)]
    """
    ndim = len(shape)
    if axes is not None and not all(-ndim <= a < ndim for a in axes):
        raise ShapeError(f"{op_name}: axes {list(axes)} out of range for X of rank {ndim}; use axes in "
                         f"[{-ndim}, {ndim})")
    axes = list(range(ndim)) if axes is None else [int(a) % ndim for a in axes]
    if scales is None and sizes is None:
        raise ShapeError(f"{op_name}: give either scales or sizes")
    if sizes is not None:
        sizes = [int(s) for s in np.asarray(sizes).reshape(-1)]
        if len(sizes) != len(axes):
            raise ShapeError(f"{op_name}: {len(sizes)} sizes for {len(axes)} axes")
        if min(sizes, default=0) < 0:
            raise ShapeError(f"{op_name}: sizes must not be negative, got {sizes}")
        scale_of = {a: s / shape[a] for a, s in zip(axes, sizes)}
        if keep_aspect_ratio_policy != "stretch":
            pick = min if keep_aspect_ratio_policy == "not_larger" else max
            common = pick(scale_of.values())
            scale_of = dict.fromkeys(axes, common)
            length_of = {a: int(common * shape[a] + 0.5) for a in axes}
        else:
            length_of = dict(zip(axes, sizes))
    else:
        scales = [float(s) for s in np.asarray(scales).reshape(-1)]
        if len(scales) != len(axes):
            raise ShapeError(f"{op_name}: {len(scales)} scales for {len(axes)} axes")
        scale_of = dict(zip(axes, scales))
        length_of = {a: int(s * shape[a]) for a, s in scale_of.items()}
    roi_of: dict[int, tuple[float, float]] = {}
    if roi is not None and coordinate_mode == "tf_crop_and_resize":
        roi = np.asarray(roi).reshape(-1).astype(np.float64)
        count = len(axes)
        if roi.size != 2 * count:
            raise ShapeError(f"{op_name}: roi must hold 2 values per resized axis (starts, then ends): {2 * count} "
                             f"for {count} axes, got {roi.size}")
        roi_of = {a: (roi[i], roi[count + i]) for i, a in enumerate(axes)}
    plan = []
    for axis in axes:
        scale, length, window = scale_of[axis], length_of[axis], roi_of.get(axis)
        identity = np.isclose(scale, 1.0) and length == shape[axis] and (
            window is None or (np.isclose(window[0], 0.0) and np.isclose(window[1], 1.0)))
        if not identity:
            plan.append((axis, scale, length, window))
    return plan


def resize_source_coordinates(op_name: str, mode: str, out_len: int, in_len: int, scale: float,
                              window: tuple[float, float] | None, legacy: bool = False):
    """The input coordinate of every output position under ``coordinate_transformation_mode`` ``mode``, and
    (tf_crop_and_resize) the mask of positions outside the input, else None. ``legacy`` (opsets 10-12) admits
    ``tf_half_pixel_for_nn``, ``(y + 0.5) / scale``, removed at opset 13."""
    y = np.arange(out_len, dtype=np.float64)
    # ONNX's reference computes the "resized length" as scale * input length, a float; matching it
    # matters for align_corners / half_pixel_symmetric with scales that do not divide evenly.
    resized = scale * in_len
    outside = None
    if legacy and mode == "tf_half_pixel_for_nn":
        x = (y + 0.5) / scale
    elif mode == "align_corners":
        x = np.zeros(out_len) if resized == 1 else y * (in_len - 1) / (resized - 1)
    elif mode == "asymmetric":
        x = y / scale
    elif mode == "pytorch_half_pixel":
        x = np.full(out_len, -0.5) if resized == 1 else (y + 0.5) / scale - 0.5
    elif mode == "half_pixel":
        x = (y + 0.5) / scale - 0.5
    elif mode == "half_pixel_symmetric":
        offset = in_len / 2 * (1 - out_len / resized)
        x = offset + (y + 0.5) / scale - 0.5
    elif mode == "tf_crop_and_resize":
        start, end = window if window is not None else (0.0, 1.0)
        if resized == 1:
            x = np.full(out_len, (end - start) * (in_len - 1) / 2)
        else:
            x = y * (end - start) * (in_len - 1) / (resized - 1)
        x = x + start * (in_len - 1)
        outside = (x < 0) | (x > in_len - 1)
    else:
        raise ShapeError(f"{op_name}: unknown coordinate_transformation_mode {mode!r}")
    return x, outside


def _resize_weights(op_name: str, mode: str, nearest_mode: str, cubic_a: float, antialias: bool,
                    ratio: np.ndarray, exact: np.ndarray, scale: float) -> np.ndarray:
    """Weights (out_len x taps) of the input points around each source coordinate, left to right."""
    if mode == "nearest":
        if nearest_mode == "round_prefer_floor":
            right = ratio > 0.5
        elif nearest_mode == "round_prefer_ceil":
            right = ratio >= 0.5
        elif nearest_mode == "floor":
            right = np.zeros_like(ratio, dtype=bool)
        elif nearest_mode == "ceil":
            right = np.ones_like(ratio, dtype=bool)
        else:
            raise ShapeError(f"{op_name}: unknown nearest_mode {nearest_mode!r}")
        right = right | exact  # an exact source coordinate is its own nearest point (the right tap)
        return np.stack([~right, right], axis=1).astype(np.float64)
    # Antialiasing stretches the kernel by 1/scale when downsampling (scale < 1).
    stretch = min(scale, 1.0) if antialias else 1.0
    support = 1 if mode == "linear" else 2
    first = int(np.floor(-support / stretch) + 1) if antialias else 1 - support
    offsets = np.arange(first, 2 - first)  # positions of the taps relative to floor(x)
    distance = (offsets[None, :] - ratio[:, None]) * stretch
    if mode == "linear":
        weights = np.clip(1 - np.abs(distance), 0, 1)
    else:
        weights = cubic_kernel(distance, cubic_a)
    if antialias:
        weights = weights / weights.sum(axis=1, keepdims=True)
    return weights


def resize_taps(op_name: str, *, in_len: int, out_len: int, scale: float, window: tuple[float, float] | None,
                mode: str, coordinate_mode: str, nearest_mode: str = "round_prefer_floor", cubic_a: float = -0.75,
                exclude_outside: bool = False, antialias: bool = False, legacy: bool = False):
    """One resized axis as taps: ``(index, weights, outside)`` with ``index`` (out_len x taps, int64, in
    ``[0, in_len)``: positions past an edge read the edge) and ``weights`` (float64) such that output ``o`` is
    ``sum_t weights[o, t] * x[index[o, t]]``; ``outside`` (or None) marks the positions that take
    ``extrapolation_value`` (their weights are 0). ``antialias`` applies to linear and cubic modes only.

    >>> index, weights, _ = resize_taps("Resize", in_len=2, out_len=4, scale=2.0, window=None, mode="linear",
    ...                                 coordinate_mode="asymmetric")
    >>> (index * weights).sum(axis=1).tolist()
    [0.0, 0.5, 1.0, 1.0]
    """
    x, outside = resize_source_coordinates(op_name, coordinate_mode, out_len, in_len, scale, window, legacy)
    base = np.floor(x)
    exact = x == base
    # At an exact integer the reference takes the window to its left with ratio 1 (same point, same value).
    ratio = np.where(exact, 1.0, x - base)
    base = np.where(exact, base - 1, base).astype(np.int64)
    antialias = antialias and mode != "nearest"
    weights = _resize_weights(op_name, mode, nearest_mode, cubic_a, antialias, ratio, exact, scale)
    taps = weights.shape[1]
    index = base[:, None] + np.arange(taps)[None, :] - (taps // 2 - 1)
    if exclude_outside:
        weights = np.where((index < 0) | (index >= in_len), 0.0, weights)
        total = weights.sum(axis=1, keepdims=True)
        weights = weights / np.where(total == 0, 1.0, total)
    if outside is not None:
        weights = np.where(outside[:, None], 0.0, weights)
    return np.clip(index, 0, in_len - 1), weights, outside


# ------------------------------------------------------------------------------------ AffineGrid, GridSample

def normalized_grid_positions(size: int, align_corners: bool) -> np.ndarray:
    """The normalized coordinates of ``size`` pixels along one axis (AffineGrid, GridSample): their centres in
    (-1, 1), or evenly from -1 to 1 with ``align_corners`` (a single pixel sits at 0 then, as in PyTorch).

    >>> normalized_grid_positions(2, False).tolist(), normalized_grid_positions(3, True).tolist()
    ([-0.5, 0.5], [-1.0, 0.0, 1.0])
    """
    if align_corners:
        return np.linspace(-1.0, 1.0, size) if size > 1 else np.zeros(size)
    return (2.0 * np.arange(size) + 1.0) / size - 1.0


def grid_sample_taps(grid: Any, size: int, *, align_corners: bool, mode: str, padding_mode: str,
                     xp: Any = np) -> list[tuple[Any, Any]]:
    """GridSample along one spatial axis of ``size`` pixels, as onnx.reference: the ``(index, weight)`` taps
    that the normalized coordinates ``grid`` read (int64 indices in ``[0, size)``; the output sums, over one tap
    per axis, the product of their weights times the input there). Outside the image a coordinate is moved
    in by ``padding_mode`` (border: clamped, reflection: mirrored) and a tap reads 0 (zeros), the edge (border)
    or its mirror image. ``xp`` is ``grid``'s array namespace (``numpy`` or ``torch``, as for :func:`cubic_kernel`).

    >>> [(i.tolist(), w.tolist()) for i, w in grid_sample_taps(np.array([-1.0, 0.25]), 2, align_corners=False,
    ...                                                        mode="linear", padding_mode="zeros")]
    [([0, 0], [0.0, 0.25]), ([0, 1], [0.5, 0.75])]
    """
    if align_corners:
        coordinate, low, high = (grid + 1) / 2 * (size - 1), 0.0, size - 1.0
    else:
        coordinate, low, high = ((grid + 1) * size - 1) / 2, -0.5, size - 0.5
    if mode == "nearest":
        coordinate = xp.round(coordinate)  # half to even (numpy's and torch's round), as onnx.reference's rint
    if padding_mode == "border":
        outside = (coordinate < low) | (coordinate > high)
        coordinate = xp.where(outside, xp.clip(coordinate, 0, size - 1), coordinate)
    elif padding_mode == "reflection":
        coordinate = reflect_coordinates(coordinate, low, high, xp)
    if mode == "nearest":
        taps = [(_cast(coordinate, xp.int64), xp.ones_like(coordinate))]
    else:
        base = xp.floor(coordinate)
        t = coordinate - base
        base = _cast(base, xp.int64)
        if mode == "linear":
            taps = [(base, 1 - t), (base + 1, t)]
        else:
            taps = [(base + k, cubic_kernel(t - k, -0.75, xp)) for k in (-1, 0, 1, 2)]
    padded = []
    for index, weight in taps:
        if padding_mode == "zeros":
            weight = weight * _cast((index >= 0) & (index < size), weight.dtype)
        elif padding_mode == "reflection":
            index = _cast(xp.trunc(reflect_coordinates(_cast(index, weight.dtype), low, high, xp)), xp.int64)
        padded.append((xp.clip(index, 0, size - 1), weight))
    return padded


def _cast(x: Any, dtype: Any) -> Any:
    """A NumPy array or torch tensor converted to ``dtype`` (``astype`` or ``to``)."""
    return x.astype(dtype) if hasattr(x, "astype") else x.to(dtype)


# ------------------------------------------------------------------------------------------ signal windows

#: The cosine-sum windows: ``w[n] = sum_k (-1)^k a_k cos(2 pi k n / N)`` with these ``a_k`` (ONNX's exact
#: Hamming alpha 25/46, not PyTorch's 0.54).
COSINE_WINDOW_COEFFICIENTS: dict[str, tuple[float, ...]] = {
    "HannWindow": (0.5, 0.5),
    "HammingWindow": (25.0 / 46.0, 21.0 / 46.0),
    "BlackmanWindow": (0.42, 0.5, 0.08),
}


def mel_weight_matrix(num_mel_bins: float, dft_length: float, sample_rate: float, lower_edge_hertz: float,
                      upper_edge_hertz: float) -> np.ndarray:
    """ONNX MelWeightMatrix in float64, ``[dft_length // 2 + 1, num_mel_bins]``: ``num_mel_bins + 2`` points
    equally spaced on the mel scale (``2595 log10(1 + f / 700)``) between the edges (step ``range /
    (num_mel_bins + 2)``, as the ONNX reference) mapped to DFT bins ``floor((dft_length + 1) * f /
    sample_rate)``; filter ``i`` rises linearly from point ``i`` to 1 at point ``i + 1`` and falls to point
    ``i + 2``. A ShapeError for values out of range.

    >>> mel_weight_matrix(2, 16, 8000, 0.0, 4000.0).shape
    (9, 2)
    """
    values = (num_mel_bins, dft_length, sample_rate, lower_edge_hertz, upper_edge_hertz)
    if None in values or num_mel_bins < 1 or dft_length < 1 or sample_rate <= 0 \
            or not 0 <= lower_edge_hertz < upper_edge_hertz:
        raise ShapeError(f"MelWeightMatrix: need num_mel_bins >= 1, dft_length >= 1, sample_rate > 0 and "
                         f"0 <= lower_edge_hertz < upper_edge_hertz; got {', '.join(str(v) for v in values)}")
    mel_bins, dft_length = int(num_mel_bins), int(dft_length)
    spectrogram_bins = dft_length // 2 + 1
    low_mel, high_mel = (2595.0 * np.log1p(f / 700.0) / np.log(10.0)
                         for f in (float(lower_edge_hertz), float(upper_edge_hertz)))
    mel = np.arange(mel_bins + 2) * ((high_mel - low_mel) / (mel_bins + 2)) + low_mel
    hertz = 700.0 * np.expm1(mel / 2595.0 * np.log(10.0))
    points = ((dft_length + 1) * hertz // float(sample_rate)).astype(np.int64)
    left, center, right = points[:-2], points[1:-1], points[2:]
    if right[-1] > spectrogram_bins or center[-1] >= spectrogram_bins:
        raise ShapeError(f"MelWeightMatrix: upper_edge_hertz {upper_edge_hertz} maps past the last of the "
                         f"{spectrogram_bins} DFT bins; keep it at most sample_rate / 2 ({float(sample_rate) / 2})")
    j = np.arange(spectrogram_bins)[:, None].astype(np.float64)
    rising = np.where(center > left, (j - left) / np.maximum(center - left, 1), 1.0)
    falling = (right - j) / np.maximum(right - center, 1)
    return np.where((j >= left) & (j <= center), rising, np.where((j > center) & (j < right), falling, 0.0))


# ------------------------------------------------------------------------------------------- quantization

def quantization_axis(what: str, value_shape: Sequence[int], shape: Sequence[int], axis: int,
                      block_size: int) -> int | None:
    """How a scale or zero point of ``value_shape`` applies to a tensor of ``shape`` (QuantizeLinear,
    DequantizeLinear): None per tensor (one value, no blocks), else the (non-negative) axis it runs along,
    one value per index (``block_size`` 0) or per block of ``block_size`` indices (the last may be partial).
    A ShapeError, naming ``what``, when it does not fit.

    >>> quantization_axis("scale", (), (2, 3), 1, 0), quantization_axis("scale", (3,), (2, 3), -1, 0)
    (None, 1)
    >>> quantization_axis("scale", (2, 2), (2, 3), 1, 2)
    1
    """
    value_shape, shape = tuple(int(s) for s in value_shape), tuple(int(s) for s in shape)
    if math.prod(value_shape) == 1 and not block_size:
        return None
    if not -len(shape) <= axis < len(shape):
        raise ShapeError(f"{what}: values of shape {value_shape} apply along axis {axis}, which a tensor of shape "
                         f"{shape} does not have; give one value (a scalar) or fix the axis attribute")
    axis = axis % len(shape)
    if not block_size:
        if len(value_shape) != 1 or value_shape[0] != shape[axis]:
            raise ShapeError(f"{what}: per-axis values must be 1-D of length {shape[axis]} (axis {axis}), "
                             f"got shape {value_shape}")
        return axis
    if len(value_shape) != len(shape):
        raise ShapeError(f"{what}: blocked values must have the input's rank {len(shape)}, got shape {value_shape}")
    if block_size < 0 or value_shape[axis] * block_size < shape[axis] or any(
            v != s for i, (v, s) in enumerate(zip(value_shape, shape)) if i != axis):
        raise ShapeError(f"{what}: blocked values of shape {value_shape} with block_size {block_size} do not "
                         f"tile an input of shape {shape} along axis {axis}")
    return axis


__all__ += ["COSINE_WINDOW_COEFFICIENTS", "cubic_kernel", "grid_sample_taps", "mel_weight_matrix",
            "normalized_grid_positions",
            "quantization_axis", "resize_plan", "resize_source_coordinates", "resize_taps"]


# ------------------------------------------------------------------------------------------------- MaxUnpool

def unpooled_shape(op_name: str, x_shape: Sequence[int], kernel: Sequence[int], strides: Sequence[int],
                   pads: Sequence[int]) -> tuple[int, ...]:
    """MaxUnpool's inferred output shape: N, C, then ``(in - 1) * stride - pad_begin - pad_end + kernel`` per
    spatial axis (the size MaxPool with these attributes maps back to ``x_shape``); a ShapeError when empty.

    >>> unpooled_shape("MaxUnpool", (1, 2, 2, 3), (2, 2), (2, 2), (0, 0, 0, 1))
    (1, 2, 4, 5)
    """
    rank = len(kernel)
    shape = tuple(int(s) for s in x_shape[:2]) + tuple(
        (int(size) - 1) * int(s) - int(pads[i]) - int(pads[i + rank]) + int(k)
        for i, (size, s, k) in enumerate(zip(x_shape[2:], strides, kernel)))
    if min(shape[2:], default=1) < 1:
        raise ShapeError(f"{op_name}: the unpooled shape {shape} is empty; check kernel_shape, strides, pads")
    return shape


__all__ += ["unpooled_shape"]


# ------------------------------------------------------------------------------- Range, DepthToSpace/SpaceToDepth

def range_length(start: float, limit: float, delta: float, op_name: str = "Range") -> int:
    """How many elements ONNX Range gives: ``max(ceil((limit - start) / delta), 0)``; a ShapeError for a zero
    delta or values that give no finite count.

    >>> range_length(10, 4, -3), range_length(1, 1, 1)
    (2, 0)
    """
    start, limit, delta = float(start), float(limit), float(delta)
    if delta == 0:
        raise ShapeError(f"{op_name}: delta must not be 0")
    steps = (limit - start) / delta
    if not math.isfinite(steps):
        raise ShapeError(f"{op_name}: start {start}, limit {limit} and delta {delta} give no finite number of elements")
    return max(int(math.ceil(steps)), 0)


__all__ += ["range_length"]


@dataclasses.dataclass(frozen=True)
class Col2ImGeometry:
    """Col2Im's resolved layout: per-axis dilations, pads (begins then ends) and strides, the padded image,
    the number of blocks along each axis, and the channel count."""

    dilations: tuple[int, ...]
    pads: tuple[int, ...]
    strides: tuple[int, ...]
    padded: tuple[int, ...]
    blocks: tuple[int, ...]
    channels: int


def col2im_geometry(columns_shape: Sequence[int], image: Sequence[int], block: Sequence[int],
                    dilations: Sequence[int] | None, pads: Sequence[int] | None,
                    strides: Sequence[int] | None) -> Col2ImGeometry:
    """Check Col2Im's input (N, C * prod(block), L) against ``image`` and ``block`` and resolve its layout: the
    blocks are the windows of a convolution of the padded image by the block (:func:`window_geometry`).

    >>> col2im_geometry((1, 4, 9), [4, 4], [2, 2], None, None, None).blocks
    (3, 3)
    """
    image, block = [int(v) for v in image], [int(v) for v in block]
    dims = len(image)
    if len(block) != dims or min(image + block, default=1) < 1:
        raise ShapeError(f"Col2Im: image_shape {image} and block_shape {block} must have the same length and "
                         "positive entries")
    dilations = tuple(dilations or (1,) * dims)
    pads = tuple(pads or (0,) * (2 * dims))
    strides = tuple(strides or (1,) * dims)
    _, rows, count = columns_shape
    taps = math.prod(block)
    if rows % taps:
        raise ShapeError(f"Col2Im: input dimension 1 ({rows}) is not a multiple of prod(block_shape) = {taps}")
    blocks = tuple(window_geometry(image, block, strides=strides, dilations=dilations, pads=pads,
                                   op_name="Col2Im").out)
    if math.prod(blocks) != count:
        raise ShapeError(f"Col2Im: input has {count} blocks but image_shape {image}, block_shape {block}, pads, "
                         f"strides and dilations give {math.prod(blocks)}")
    padded = tuple(image[i] + pads[i] + pads[i + dims] for i in range(dims))
    return Col2ImGeometry(dilations, pads, strides, padded, blocks, rows // taps)

