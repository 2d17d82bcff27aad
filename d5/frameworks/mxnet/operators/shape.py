"""Shape operators as native MXNet operations: Identity, Flatten, Reshape, Transpose, Concat, Split, Slice, Pad,
Squeeze, Unsqueeze, Expand, Tile, Shape, Size, SpaceToDepth, DepthToSpace, ReverseSequence.

Shapes are static while the executor composes a graph, so every target shape is computed here in Python with
ONNX's rules (:func:`~d5.ops.onnx_semantics.reshape_target`, ``slice_bounds``, ``split_lengths``) and handed to
MXNet explicitly: Reshape, Flatten, Squeeze and Unsqueeze are one ``reshape`` to an explicit shape, Slice one
strided ``slice`` (negative steps included), Split one ``slice`` per piece (``slice_axis`` and ``split_v2`` refuse
empty pieces or booleans), Expand NumPy's ``broadcast_to`` (legacy ``broadcast_to`` reads 0 as "keep"). Shape and
Size return NumPy values, folded into what reads them, and so do Slice, Split and Pad for a result with no
elements (MXNet's ``slice`` to an empty result corrupts its engine). Shape-like inputs (Reshape's shape, Slice's bounds, Pad's
pads, Tile's repeats, ...) are read with :func:`~d5.frameworks.mxnet.operators._helpers.ints`: one computed from
the data makes the executor run the network node by node, where it is a value.

Pad's constant mode is MXNet's ``_npi_pad`` (called directly: ``mx.sym.np.pad`` drops ``constant_values`` in
MXNet 1.9.1 and pads with 0; a 1-D input goes through it as a row, as it misreads 1-D widths); a constant value computed in the graph is selected over the padded region, so it gets
its gradient. Reflect, edge and wrap gather along each padded axis the positions NumPy's ``np.pad`` gives
(``take``, whose gradient is a scatter-add). MXNet's ``transpose``, ``concat`` and ``SequenceReverse`` have no
bool kernels and mishandle bfloat16 (``transpose`` corrupts the heap): those go through them as uint8 and float32.

>>> import numpy as np
>>> from d5.frameworks.mxnet.custom_op import native_op
>>> native_op("Slice").forward([np.arange(6, dtype=np.float32), np.array([-1]), np.array([-10]),
...                             np.array([0]), np.array([-2])]).tolist()
[5.0, 3.0, 1.0]
>>> native_op("Reshape").forward([np.zeros((2, 3, 4), np.float32), np.array([0, -1])]).shape
(2, 12)
"""
from __future__ import annotations

import math

import mxnet as mx
import numpy as np
from mxnet.symbol.numpy import _internal as _npi

from d5.errors import ShapeError, UnsupportedOperatorError
from d5.frameworks.mxnet.operators import MXOp, register
from d5.frameworks.mxnet.operators._helpers import (HELD_DTYPES, Symbol, as_symbol, dtype_of, ints, pad_constant,
                                                    reshape, shape_of, static)
from d5.frameworks.mxnet.tensors import MX_BFLOAT16
from d5.network.memory import check_allocation
from d5.ops.onnx_attributes import adopt, operator_attributes
from d5.ops.onnx_semantics import normalize_axis, reshape_target, split_lengths
from d5.ops.tensor_checks import (check_concat_shapes, check_sequence_length_values, concat_axis, depth_to_space_plan,
                                  expand_shape, flatten_axis, pad_positions, pad_widths, reverse_sequence_lengths,
                                  shape_range, slice_arguments, slice_index, space_to_depth_plan, squeeze_axes,
                                  tile_shape, transpose_perm, unsqueeze_shape)


def _held(dtype: np.dtype) -> bool:
    """Whether MXNet holds tensors of ``dtype`` (its bfloat16 record included)."""
    return dtype in HELD_DTYPES or dtype == MX_BFLOAT16


def _numpy_dtype(dtype: np.dtype) -> np.dtype:
    """The NumPy dtype of a value of a symbol's ``dtype`` (MXNet's bfloat16 record as ml_dtypes' bfloat16)."""
    if dtype == MX_BFLOAT16:
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return dtype


def _dtype_name(dtype: np.dtype) -> str:
    """``dtype`` as MXNet's ``cast`` names it."""
    return "bfloat16" if dtype == MX_BFLOAT16 else dtype.name


def _symbol(x) -> Symbol:
    """A data input as a symbol (a NumPy value becomes a graph constant), refusing dtypes MXNet does not hold."""
    if not isinstance(x, Symbol) and np.asarray(x).dtype not in HELD_DTYPES:
        raise UnsupportedOperatorError(f"the MXNet framework has no {np.asarray(x).dtype} tensors")
    return as_symbol(x)


def _new(x: Symbol) -> Symbol:
    """``x`` as a result of its own (a graph output cannot be one of its inputs)."""
    return mx.sym.identity(x)


def _empty(shape, dtype) -> np.ndarray:
    """An output with no elements, as a value: MXNet's ``slice`` to an empty result leaves its output unallocated
    and fails the engine's next synchronization ("Check failed: delay_alloc"); an empty tensor has no data and no
    gradient to compute anyway."""
    return np.zeros(tuple(shape), _numpy_dtype(dtype))


def _reshaped(x, shape) -> Symbol:
    x = _symbol(x)
    return _new(x) if tuple(shape) == shape_of(x) else reshape(x, shape)


#: The dtype tensors of a dtype MXNet's transpose, concat and SequenceReverse have no kernel for go through them
#: as (exactly: bfloat16 is a truncated float32; transpose on bfloat16 corrupts the heap).
_STAND_INS = {np.dtype(np.bool_): "uint8", MX_BFLOAT16: "float32"}


def _through(function, x: Symbol, *args, **kwargs) -> Symbol:
    """``function(x, ...)`` for an MXNet operator without a kernel for bool or bfloat16: those go through it as
    uint8 and float32 (:data:`_STAND_INS`) and are cast back."""
    dtype = dtype_of(x)
    stand_in = _STAND_INS.get(dtype)
    if stand_in is None:
        return function(x, *args, **kwargs)
    return mx.sym.cast(function(mx.sym.cast(x, stand_in), *args, **kwargs), _dtype_name(dtype))


def _transpose(x: Symbol, perm) -> Symbol:
    perm = tuple(int(p) for p in perm)
    if perm == tuple(range(len(perm))):
        return _new(x)
    return _through(mx.sym.transpose, x, axes=perm)


@register("Identity")
class Identity(MXOp):
    """Its input: a symbol (as a new one), or a NumPy value or sequence as it is."""

    def __init__(self, **attributes) -> None:
        pass

    def __call__(self, x):
        if isinstance(x, (list, tuple)):  # a sequence (only reference operators read it): one output
            return (x,)
        return _new(x) if isinstance(x, Symbol) else x


@register("Flatten")
class Flatten(MXOp):
    """(d0, ..., dn) to (d0 * ... * d(axis-1), d(axis) * ... * dn), axis in [-r, r]."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("Flatten", attributes))

    def __call__(self, x):
        shape = shape_of(x)
        axis = flatten_axis(self.axis, shape)
        return _reshaped(x, (math.prod(shape[:axis]), math.prod(shape[axis:])))


@register("Reshape")
class Reshape(MXOp):
    """To the shape given as second input (the ``shape`` attribute before opset 5): 0 copies the input's dimension
    (unless ``allowzero``), one -1 is inferred."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("Reshape", attributes))

    def __call__(self, data, shape=None):
        if shape is None:
            target = self.shape
            if target is None:
                raise ShapeError("Reshape: no shape given; pass it as the second input (opset 5+) or the attribute")
            target = np.asarray(target, np.int64)
        elif isinstance(shape, Symbol) and dtype_of(shape).kind not in "iu":
            target = np.zeros(shape_of(shape), dtype_of(shape))  # reshape_target's ShapeError for the dtype
        else:
            target = static(shape)
            if target is None:
                ints(shape, "Reshape's shape")  # ValueNeededWhileTracing
        return _reshaped(data, reshape_target(shape_of(data), target, self.allowzero))


@register("Transpose")
class Transpose(MXOp):
    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("Transpose", attributes))

    def __call__(self, x):
        return _transpose(_symbol(x), transpose_perm(self.perm, len(shape_of(x))))


@register("Concat")
class Concat(MXOp):
    """Join the inputs along ``axis``; inputs empty along it are left out (MXNet's concat needs none)."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("Concat", attributes))

    def __call__(self, *inputs):
        present = [x for x in inputs if x is not None]
        shapes = [shape_of(x) for x in present]
        axis = concat_axis(self.axis, shapes)
        check_concat_shapes(shapes, axis, self.axis)
        # One dtype: a constant takes the graph's (ONNX requires them equal).
        dtype = dtype_of(next((x for x in present if isinstance(x, Symbol)), present[0]))
        if not _held(dtype):
            raise UnsupportedOperatorError(f"the MXNet framework has no {dtype} tensors")
        pieces = [x if isinstance(x, Symbol) else _symbol(np.asarray(x).astype(_numpy_dtype(dtype)))
                  for x, s in zip(present, shapes) if s[axis] != 0]
        if not pieces:  # all empty along the axis: the result is empty too
            return _empty(tuple(sum(s[axis] for s in shapes) if i == axis else d for i, d in enumerate(shapes[0])),
                          dtype)
        if len(pieces) == 1:
            return _new(pieces[0])
        stand_in = _STAND_INS.get(dtype)
        if stand_in is not None:
            joined = _concatenate([mx.sym.cast(p, stand_in) for p in pieces], axis)
            return mx.sym.cast(joined, _dtype_name(dtype))
        return _concatenate(pieces, axis)


def _concatenate(pieces: list[Symbol], axis: int) -> Symbol:
    """MXNet's NumPy ``concatenate``, not the legacy ``concat``: the latter's oneDNN backward kernel
    (``MKLDNNConcatBackward``) divides by zero -- a SIGFPE that kills the process -- in a DenseNet's composed
    backward pass (measured on MXNet 1.9.1; with MXNET_MKLDNN_ENABLED=0 the same graph trains)."""
    return mx.sym.np.concatenate([p.as_np_ndarray() for p in pieces], axis=axis).as_nd_ndarray()


@register("Split")
class Split(MXOp):
    """Pieces of the lengths in ``split`` (input from opset 13, attribute before), or ``num_outputs`` (opset 18;
    before it the node's output count) pieces of ceil(dim / n), the last shorter; one ``slice`` each."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("Split", attributes))

    def __call__(self, x, split=None):
        shape = shape_of(x)
        axis = normalize_axis("Split", self.axis, len(shape))
        lengths = split_lengths("Split", shape[axis], self.split if split is None else ints(split, "Split's split"),
                                self.num_outputs or self.node_output_count)
        x = _symbol(x)
        pieces, begin = [], 0
        for length in lengths:
            if length == 0:
                pieces.append(_empty(shape[:axis] + (0,) + shape[axis + 1:], dtype_of(x)))
                continue
            starts, ends = [None] * len(shape), [None] * len(shape)
            starts[axis], ends[axis] = begin, begin + length
            pieces.append(mx.sym.slice(x, begin=tuple(starts), end=tuple(ends)))
            begin += length
        return tuple(pieces)


@register("Slice")
class Slice(MXOp):
    """``data[starts:ends:steps]`` along ``axes`` with ONNX's clamping (inputs from opset 10, attributes before):
    one strided ``slice``, negative steps included."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("Slice", attributes))

    def __call__(self, x, starts=None, ends=None, axes=None, steps=None):
        starts, ends, axes, steps = slice_arguments(self, starts, ends, axes, steps, ints)
        shape = shape_of(x)
        index = slice_index(shape, starts, ends, axes, steps)
        x = _symbol(x)
        if all(s == slice(None) for s in index):
            return _new(x)
        out_shape = np.empty(shape, np.bool_)[index].shape
        if 0 in out_shape:
            return _empty(out_shape, dtype_of(x))
        return mx.sym.slice(x, begin=tuple(s.start for s in index), end=tuple(s.stop for s in index),
                            step=tuple(s.step for s in index))


@register("Pad")
class Pad(MXOp):
    """Pad (negative pads crop) by ``pads = [begin..., end...]`` in mode constant, reflect, edge or wrap; opset
    18's ``axes`` input restricts the pads to those axes; before opset 11 pads and value were attributes. As the
    reference does, the positive pads are applied first, then the negative ones crop."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("Pad", attributes))

    def __call__(self, x, pads=None, constant_value=None, axes=None):
        shape = shape_of(x)
        widths = pad_widths(len(shape), self.pads if pads is None else ints(pads, "Pad's pads"),
                            ints(axes, "Pad's axes"))
        positive = tuple((max(b, 0), max(e, 0)) for b, e in widths)
        padded_shape = tuple(d + b + e for d, (b, e) in zip(shape, positive))
        dtype = dtype_of(x)
        check_allocation("Pad output", padded_shape, dtype)
        x = _symbol(x)
        out = x
        if any(b or e for b, e in positive):
            if self.mode == "constant":
                out = self._constant(x, shape, dtype, positive, padded_shape, constant_value)
            else:
                for axis, (begin, end) in enumerate(positive):
                    if begin or end:
                        out = mx.sym.take(out, self._sources(shape, axis, begin, end), axis=axis)
        if any(b < 0 or e < 0 for b, e in widths):
            cropped = tuple(max(d + min(b, 0) + min(e, 0), 0) for d, (b, e) in zip(padded_shape, widths))
            if 0 in cropped:
                return _empty(cropped, dtype)
            out = mx.sym.slice(out, begin=tuple(max(-b, 0) for b, _ in widths),
                               end=tuple(d + min(e, 0) for d, (_, e) in zip(padded_shape, widths)))
        return _new(out) if out is x else out

    def _constant(self, x, shape, dtype, positive, padded_shape, constant_value):
        value = constant_value
        if value is not None and np.prod(shape_of(value)) == 0:
            value = None
        if not isinstance(value, Symbol):
            value = self.value if value is None else np.asarray(value).reshape(-1)[0]
            fill = np.asarray(value).astype(_numpy_dtype(dtype))  # the reference's cast (truncation for integers)
            return pad_constant(x, positive, float(fill))
        # A value computed in the graph, selected over the padded region so that it gets its gradient (the sum of
        # the output gradient over the padding). Selected, not multiplied by an indicator: 0 * -inf would be NaN.
        region = pad_constant(mx.sym.zeros_like(x), positive, 1.0)  # 1 where padded, in the graph
        value = mx.sym.cast(value, _dtype_name(dtype)) if dtype_of(value) != dtype else value
        value = reshape(value, (1,) * len(shape))
        filled = mx.sym.np.broadcast_to(value.as_np_ndarray(), padded_shape).as_nd_ndarray()
        zeros = pad_constant(x, positive, 0.0)
        return mx.sym.where(region, filled, zeros)

    def _sources(self, shape, axis: int, begin: int, end: int) -> Symbol:
        """Which input element each output element along ``axis`` copies in reflect/edge/wrap mode (NumPy's np.pad
        of the positions, as the reference pads)."""
        dim = shape[axis]
        if dim == 0:
            raise ShapeError(f"Pad: mode {self.mode!r} cannot pad an axis of length 0 (input shape {shape})")
        return as_symbol(self.planned(("pad", self.mode, dim, begin, end), pad_positions, self.mode, dim, begin, end))


@register("Squeeze")
class Squeeze(MXOp):
    """Drop the axes of length 1 named by ``axes`` (input from opset 13, attribute before); all of them when none
    are given."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("Squeeze", attributes))

    def __call__(self, x, axes=None):
        shape = shape_of(x)
        axes = squeeze_axes(shape, self.axes if axes is None else ints(axes, "Squeeze's axes"))
        return _reshaped(x, [d for i, d in enumerate(shape) if i not in axes])


@register("Unsqueeze")
class Unsqueeze(MXOp):
    """Insert axes of length 1 at ``axes`` (positions in the output; input from opset 13, attribute before)."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("Unsqueeze", attributes))

    def __call__(self, x, axes=None):
        axes = self.axes if axes is None else ints(axes, "Unsqueeze's axes")
        return _reshaped(x, unsqueeze_shape(shape_of(x), axes))


@register("Expand")
class Expand(MXOp):
    """Broadcast the input against ``shape`` (both ways, as NumPy does)."""

    def __init__(self, **attributes) -> None:
        pass

    def __call__(self, x, shape):
        own = shape_of(x)
        target = expand_shape(own, ints(shape, "Expand's shape"))
        check_allocation("Expand output", target, dtype_of(x))
        x = _symbol(x)
        if target == own:
            return _new(x)
        return mx.sym.np.broadcast_to(x.as_np_ndarray(), target).as_nd_ndarray()


@register("Tile")
class Tile(MXOp):
    """Repeat the input ``repeats[i]`` times along axis ``i``: one ``tile`` per repeated axis."""

    def __init__(self, **attributes) -> None:
        pass

    def __call__(self, x, repeats, axis=None):
        repeats = ints(repeats, "Tile's repeats")
        check_allocation("Tile output", tile_shape(shape_of(x), repeats), dtype_of(x))
        x = _symbol(x)
        if all(r == 1 for r in repeats):
            return _new(x)
        # One axis at a time: MXNet's tile of several axes at once fails ("Too many reduction axes") from three
        # repeated axes on, in its forward pass too.
        for axis, count in enumerate(repeats):
            if count != 1:
                x = mx.sym.tile(x, reps=tuple(count if i == axis else 1 for i in range(len(repeats))))
        return x


@register("Shape")
class Shape(MXOp):
    """The static shape as an int64 value, optionally only dimensions ``start:end`` (opset 15, clamped)."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("Shape", attributes))

    def __call__(self, x):
        shape = shape_of(x)
        start, end = shape_range(self.start, self.end, len(shape))
        return np.asarray(shape[start:end], np.int64).reshape(-1)


@register("Size")
class Size(MXOp):
    """The number of elements as an int64 scalar value."""

    def __init__(self, **attributes) -> None:
        pass

    def __call__(self, x):
        return np.asarray(math.prod(shape_of(x)), np.int64)


@register("SpaceToDepth")
class SpaceToDepth(MXOp):
    """Move ``blocksize`` x ``blocksize`` spatial blocks into channels: (N, C, H, W) -> (N, C*b*b, H/b, W/b);
    ``mode`` DCR (default) puts the block offset before the channel in the output channel index, CRD after. One
    6-D reshape, transpose and reshape."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("SpaceToDepth", attributes))

    def __call__(self, x):
        plan = space_to_depth_plan(shape_of(x), self.blocksize, self.mode)
        return reshape(_transpose(reshape(_symbol(x), plan.split), plan.perm), plan.shape)


@register("DepthToSpace")
class DepthToSpace(MXOp):
    """Move channels into ``blocksize`` x ``blocksize`` spatial blocks: (N, C, H, W) -> (N, C/(b*b), H*b, W*b);
    ``mode`` DCR (default: depth, column, row) or CRD. One 6-D reshape, transpose and reshape."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("DepthToSpace", attributes))

    def __call__(self, x):
        plan = depth_to_space_plan(shape_of(x), self.blocksize, self.mode)
        return reshape(_transpose(reshape(_symbol(x), plan.split), plan.perm), plan.shape)


@register("ReverseSequence")
class ReverseSequence(MXOp):
    """Reverse the first ``sequence_lens[b]`` steps along ``time_axis`` of every batch entry ``b``: MXNet's
    ``SequenceReverse`` (time-major; a batch-major input is transposed around it). The reference has no gradient."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("ReverseSequence", attributes))

    def __call__(self, x, lengths):
        shape = shape_of(x)
        _, steps = reverse_sequence_lengths(shape, self.batch_axis, self.time_axis, shape_of(lengths),
                                            dtype_of(lengths).kind in "iu", dtype_of(lengths))
        known = static(lengths)
        if known is not None:
            check_sequence_length_values(known, steps)
        x = _symbol(x)
        lengths = as_symbol(lengths, np.int64)
        swap = self.time_axis != 0
        perm = (1, 0) + tuple(range(2, len(shape)))
        if swap:
            x = _transpose(x, perm)
        out = _through(mx.sym.SequenceReverse, x, lengths, use_sequence_length=True)
        return _transpose(out, perm) if swap else out
