"""Shape operators as native TensorFlow operations: Identity, Flatten, Reshape, Transpose, Concat, Split, Slice,
Pad, Squeeze, Unsqueeze, Expand, Tile, Shape, Size, SpaceToDepth, DepthToSpace, ReverseSequence.

Shape-like inputs (Reshape's shape, Slice's bounds, Pad's pads, Tile's repeats, ...) are read with
:func:`~d5.frameworks.tensorflow.operators._helpers.ints`: they are constants of the graph, known while tracing.
Where a data tensor's own shape is not fully known (the output of NonZero, Unique or Compress inside a traced
function) the operators that can do without it use ``tf.shape``; the others need the axes they work on static.
"""
from __future__ import annotations

import math

import numpy as np
import tensorflow as tf

from d5.errors import ShapeError
from d5.frameworks.tensorflow.operators import TFOp, register
from d5.frameworks.tensorflow.operators._helpers import ints, static, static_shape
from d5.network.memory import check_allocation
from d5.ops.onnx_attributes import adopt, operator_attributes
from d5.ops.onnx_semantics import normalize_axes, normalize_axis, reshape_target, split_lengths
from d5.ops.tensor_checks import (check_concat_shapes, check_rank, check_sequence_length_values, depth_to_space_plan,
                                  expand_shape, flatten_axis, pad_positions, pad_widths, reverse_sequence_lengths,
                                  shape_range, slice_arguments, slice_index, space_to_depth_plan, squeeze_axes,
                                  tile_shape, transpose_perm, unsqueeze_axes)


def _known(x: tf.Tensor) -> bool:
    return None not in x.shape.as_list()


def _numpy_dtype(x: tf.Tensor) -> np.dtype:
    # For check_allocation's sizes and messages (bfloat16 is two bytes, like float16).
    return np.dtype(np.float16) if x.dtype == tf.bfloat16 else np.dtype(x.dtype.as_numpy_dtype)


@register("Identity")
class Identity(TFOp):
    elementwise = True  # passes a channels-last tensor through unchanged

    def __call__(self, x):
        if isinstance(x, (list, tuple)):  # a sequence (only reference operators read it): one output
            return (x,)
        return tf.identity(x)


@register("Flatten")
class Flatten(TFOp):
    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("Flatten", attributes))

    def __call__(self, x):
        axis = flatten_axis(self.axis, tuple(x.shape.as_list()))
        if _known(x):
            shape = x.shape.as_list()
            return tf.reshape(x, [math.prod(shape[:axis]), math.prod(shape[axis:])])
        dims = tf.shape(x, out_type=tf.int64)
        return tf.reshape(x, tf.stack([tf.reduce_prod(dims[:axis]), tf.reduce_prod(dims[axis:])]))


@register("Reshape")
class Reshape(TFOp):
    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("Reshape", attributes))  # shape: the attribute of opsets 1-4

    def __call__(self, data, shape=None):
        target = self.shape if shape is None else ints(shape, "Reshape's shape")
        target = np.asarray(target, dtype=np.int64)
        if _known(data):
            return tf.reshape(data, reshape_target(tuple(data.shape.as_list()), target, self.allowzero))
        # Unknown input dimensions: 0 copies tf.shape's, -1 is left to tf.reshape to infer.
        dims = tf.shape(data, out_type=tf.int64)
        return tf.reshape(data, tf.stack([dims[i] if s == 0 and not self.allowzero else tf.constant(s, tf.int64)
                                          for i, s in enumerate(target.tolist())]))


@register("Transpose")
class Transpose(TFOp):
    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("Transpose", attributes))

    def __call__(self, x):
        return tf.transpose(x, transpose_perm(self.perm, x.shape.rank))


def _concat_shapes(inputs, axis: int) -> None:
    """A ShapeError (the reference's) for inputs that do not concatenate, where static shapes tell."""
    check_concat_shapes([tuple(x.shape.as_list()) for x in inputs], axis)


@register("Concat")
class Concat(TFOp):
    """Join the inputs along ``axis``; channels-last inputs (rank 3 to 5) join along the same ONNX axis, moved."""

    channels_last_inputs = "all"
    channels_last_ranks = (3, 4, 5)

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("Concat", attributes))

    def _axis(self, inputs) -> int:
        if not inputs:
            raise ShapeError("Concat: needs at least one input")
        return normalize_axis("Concat", self.axis, inputs[0].shape.rank)

    def __call__(self, *inputs):
        inputs = [x for x in inputs if x is not None]
        axis = self._axis(inputs)
        _concat_shapes(inputs, axis)
        return tf.concat(inputs, axis=axis)

    def channels_last(self, *inputs):
        inputs = [x for x in inputs if x is not None]
        axis = self._axis(inputs)
        rank = inputs[0].shape.rank
        # ONNX (N, C, spatial...) is held as (N, spatial..., C): C is last, spatial axis k sits at k - 1.
        stored = 0 if axis == 0 else rank - 1 if axis == 1 else axis - 1
        _concat_shapes(inputs, stored)
        return tf.concat(inputs, axis=stored)


@register("Split")
class Split(TFOp):
    """Pieces of the lengths in ``split`` (input from opset 13, attribute before), or ``num_outputs`` (or the
    node's output count) pieces of ceil(dim / n), the last shorter."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("Split", attributes))

    def __call__(self, x, split=None):
        axis = normalize_axis("Split", self.axis, x.shape.rank)
        dim = x.shape[axis]
        if dim is None:
            raise ShapeError(f"Split: the TensorFlow framework needs the length of axis {axis} while tracing")
        lengths = split_lengths("Split", dim, self.split if split is None else ints(split, "Split's split"),
                                self.num_outputs or self.node_output_count)
        return tuple(tf.split(x, lengths, axis=axis))


@register("Slice")
class Slice(TFOp):
    """``data[starts:ends:steps]`` along ``axes`` with ONNX's clamping (inputs from opset 10, attributes before),
    one strided slice."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("Slice", attributes))

    def __call__(self, x, starts=None, ends=None, axes=None, steps=None):
        starts, ends, axes, steps = slice_arguments(self, starts, ends, axes, steps, ints)
        shape = x.shape.as_list()
        if starts is not None and ends is not None:  # (else slice_index says they are required)
            sliced = normalize_axes("Slice", list(range(len(starts))) if axes is None else axes, len(shape))
            if any(shape[a] is None for a in sliced):
                raise ShapeError(f"Slice: the TensorFlow framework needs the lengths of the sliced axes {sliced} "
                                 f"while tracing, got shape {shape}")
        index = slice_index(shape, starts, ends, axes, steps)
        return x[index] if index else tf.identity(x)


@register("Pad")
class Pad(TFOp):
    """Pad (negative pads crop) by ``pads = [begin..., end...]`` in mode constant, reflect, edge or wrap;
    opset 18's ``axes`` input restricts the pads to those axes; before opset 11 pads and value were attributes.
    As the reference does, the positive pads are applied first, then the negative ones crop."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("Pad", attributes))

    def __call__(self, x, pads=None, constant_value=None, axes=None):
        widths = pad_widths(x.shape.rank, self.pads if pads is None else ints(pads, "Pad's pads"),
                            ints(axes, "Pad's axes"))
        positive = [[max(b, 0), max(e, 0)] for b, e in widths]
        shape = x.shape.as_list()
        if None not in shape:
            check_allocation("Pad output", [d + b + e for d, (b, e) in zip(shape, positive)], _numpy_dtype(x))
        if self.mode == "constant":
            if constant_value is None or constant_value.shape.num_elements() == 0:
                out = tf.pad(x, positive, constant_values=tf.cast(self.value, x.dtype))
            else:
                # The value as a tensor selected over the padded region, so it gets its gradient (the
                # reference's: the sum of the output gradient over the padding). Selected, not multiplied by
                # an indicator: 0 * -inf would be NaN where the value is infinite (attention masks pad with -inf).
                region = tf.pad(tf.zeros(tf.shape(x), tf.bool), positive, constant_values=True)
                value = tf.cast(tf.reshape(constant_value, []), x.dtype)
                out = tf.where(region, value, tf.pad(x, positive))
        else:
            out = x
            for axis, (begin, end) in enumerate(positive):
                if begin or end:
                    out = tf.gather(out, self._sources(axis, shape[axis], begin, end), axis=axis)
        crop = tuple(slice(max(-b, 0), None if e >= 0 else e) for b, e in widths)
        if any(s != slice(None) for s in crop):
            return out[crop]
        return tf.identity(out) if out is x else out  # a tensor of its own, never the input variable

    def _sources(self, axis: int, dim: int | None, begin: int, end: int) -> tf.Tensor:
        """Which input element each output element along ``axis`` copies in reflect/edge/wrap mode (NumPy's
        np.pad of the positions, as the reference pads): one gather per padded axis, which TensorFlow
        differentiates as a scatter-add."""
        if dim is None:
            raise ShapeError(f"Pad: mode {self.mode!r} needs the length of axis {axis} while tracing")
        if dim == 0:
            raise ShapeError(f"Pad: mode {self.mode!r} cannot pad an axis of length 0")
        return self.planned(("pad", dim, begin, end), lambda: tf.constant(pad_positions(self.mode, dim, begin, end)))


@register("Squeeze")
class Squeeze(TFOp):
    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("Squeeze", attributes))

    def __call__(self, x, axes=None):
        axes = self.axes if axes is None else ints(axes, "Squeeze's axes")
        shape = x.shape.as_list()
        if axes is None and None in shape:
            return tf.squeeze(x)
        axes = squeeze_axes(tuple(shape), axes)
        # tf.squeeze with no axes would drop every axis of length 1: nothing to drop is an identity.
        return tf.squeeze(x, axis=axes) if axes else tf.identity(x)


@register("Unsqueeze")
class Unsqueeze(TFOp):
    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("Unsqueeze", attributes))

    def __call__(self, x, axes=None):
        axes = self.axes if axes is None else ints(axes, "Unsqueeze's axes")
        out = x
        for axis in unsqueeze_axes(axes, x.shape.rank):  # positions in the output, in order
            out = tf.expand_dims(out, axis)
        return out if axes else tf.identity(x)


@register("Expand")
class Expand(TFOp):
    def __call__(self, x, shape):
        shape = ints(shape, "Expand's shape")
        own = x.shape.as_list()
        if None in own:
            return tf.broadcast_to(x, tf.broadcast_dynamic_shape(tf.shape(x, out_type=tf.int64),
                                                                 tf.constant(shape, tf.int64)))
        target = expand_shape(tuple(own), shape)
        check_allocation("Expand output", target, _numpy_dtype(x))
        return tf.broadcast_to(x, target)


@register("Tile")
class Tile(TFOp):
    def __call__(self, x, repeats, axis=None):
        repeats = ints(repeats, "Tile's repeats")
        tiled = tile_shape(x.shape.as_list(), repeats)
        if tiled is not None:
            check_allocation("Tile output", tiled, _numpy_dtype(x))
        if not repeats:
            return tf.identity(x)
        if x.dtype == tf.uint16:  # TensorFlow has no uint16 Tile kernel: tile the same bits as int16
            return tf.bitcast(tf.tile(tf.bitcast(x, tf.int16), repeats), tf.uint16)
        return tf.tile(x, repeats)


@register("Shape")
class Shape(TFOp):
    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("Shape", attributes))

    def __call__(self, x):
        start, end = shape_range(self.start, self.end, x.shape.rank)
        dims = x.shape.as_list()[start:end]
        if None in dims:
            return tf.shape(x, out_type=tf.int64)[start:end]
        return tf.constant(dims, dtype=tf.int64, shape=[len(dims)])


@register("Size")
class Size(TFOp):
    def __call__(self, x):
        count = x.shape.num_elements()
        return tf.size(x, out_type=tf.int64) if count is None else tf.constant(count, tf.int64)


def _rank4(op_type: str, x: tf.Tensor) -> tuple[int, ...]:
    check_rank(op_type, tuple(x.shape.as_list()), "input", rank=4)
    return static_shape(x)


@register("SpaceToDepth")
class SpaceToDepth(TFOp):
    """Move ``blocksize`` x ``blocksize`` spatial blocks into channels: (N, C, H, W) -> (N, C*b*b, H/b, W/b);
    ``mode`` DCR (default) puts the block offset before the channel in the output channel index, CRD after."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("SpaceToDepth", attributes))

    def __call__(self, x):
        plan = space_to_depth_plan(_rank4("SpaceToDepth", x), self.blocksize, self.mode)
        return tf.reshape(tf.transpose(tf.reshape(x, plan.split), plan.perm), plan.shape)


@register("DepthToSpace")
class DepthToSpace(TFOp):
    """Move channels into ``blocksize`` x ``blocksize`` spatial blocks: (N, C, H, W) -> (N, C/(b*b), H*b, W*b);
    ``mode`` DCR (default: depth, column, row) or CRD."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("DepthToSpace", attributes))

    def __call__(self, x):
        plan = depth_to_space_plan(_rank4("DepthToSpace", x), self.blocksize, self.mode)
        return tf.reshape(tf.transpose(tf.reshape(x, plan.split), plan.perm), plan.shape)


@register("ReverseSequence")
class ReverseSequence(TFOp):
    """Reverse the first ``sequence_lens[b]`` steps along ``time_axis`` of every batch entry ``b``
    (tf.reverse_sequence; the reference has no gradient)."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("ReverseSequence", attributes))

    def __call__(self, x, lengths):
        _, steps = reverse_sequence_lengths(tuple(x.shape.as_list()), self.batch_axis, self.time_axis,
                                            tuple(lengths.shape.as_list()), lengths.dtype.is_integer,
                                            lengths.dtype.name)
        known = static(lengths)
        if known is not None:
            check_sequence_length_values(known, steps)
        return tf.reverse_sequence(x, tf.cast(lengths, tf.int64), seq_axis=self.time_axis,
                                   batch_axis=self.batch_axis)
