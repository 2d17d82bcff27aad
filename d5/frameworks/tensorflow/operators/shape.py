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
from d5.ops.onnx_semantics import normalize_axes, normalize_axis, reshape_target, slice_bounds, split_lengths


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
        rank = x.shape.rank
        if not -rank <= self.axis <= rank:
            raise ShapeError(f"Flatten: axis {self.axis} is out of range for a {rank}-D input of shape "
                             f"{tuple(x.shape.as_list())}; use an axis in [{-rank}, {rank}]")
        axis = self.axis % rank if self.axis < 0 else self.axis
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
        rank = x.shape.rank
        perm = list(range(rank - 1, -1, -1)) if self.perm is None else list(self.perm)
        if sorted(perm) != list(range(rank)):
            raise ShapeError(f"Transpose: perm {perm} is not a permutation of the {rank} axes of the input")
        return tf.transpose(x, perm)


def _concat_shapes(inputs, axis: int) -> None:
    """A ShapeError (the reference's) for inputs that do not concatenate, where static shapes tell."""
    shapes = [x.shape.as_list() for x in inputs]
    rank = len(shapes[0])
    if any(len(s) != rank or any(a is not None and b is not None and a != b
                                 for i, (a, b) in enumerate(zip(s, shapes[0])) if i != axis) for s in shapes):
        listed = ", ".join(str(tuple(s)) for s in shapes)
        raise ShapeError(f"Concat: inputs of shapes {listed} must have the same rank and agree on every "
                         f"dimension except axis {axis}")


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
        if starts is not None:
            starts, ends = ints(starts, "Slice's starts"), ints(ends, "Slice's ends")
            axes, steps = ints(axes, "Slice's axes"), ints(steps, "Slice's steps")
        else:
            starts, ends, axes = self.starts, self.ends, self.axes
        if starts is None or ends is None:
            raise ShapeError("Slice: starts and ends are required (inputs 1 and 2, or attributes before opset 10)")
        shape = x.shape.as_list()
        sliced = normalize_axes("Slice", list(range(len(starts))) if axes is None else axes, len(shape))
        if any(shape[a] is None for a in sliced):
            raise ShapeError(f"Slice: the TensorFlow framework needs the lengths of the sliced axes {sliced} while "
                             f"tracing, got shape {shape}")
        index = [slice(None)] * len(shape)
        for axis, start, end, step in slice_bounds("Slice", shape, starts, ends, axes, steps):
            # A Python slice reads an end of -1 as "the last element"; None means "run past the front".
            index[axis] = slice(start, None if end < 0 else end, step)
        return x[tuple(index)] if index else tf.identity(x)


@register("Pad")
class Pad(TFOp):
    """Pad (negative pads crop) by ``pads = [begin..., end...]`` in mode constant, reflect, edge or wrap;
    opset 18's ``axes`` input restricts the pads to those axes; before opset 11 pads and value were attributes.
    As the reference does, the positive pads are applied first, then the negative ones crop."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("Pad", attributes))

    def _widths(self, x, pads, axes) -> list[tuple[int, int]]:
        rank = x.shape.rank
        pads = self.pads if pads is None else ints(pads, "Pad's pads")
        if pads is None:
            raise ShapeError("Pad: no pads given; pass them as the second input (opset 11+) or the attribute")
        axes = list(range(rank)) if axes is None else normalize_axes("Pad", ints(axes, "Pad's axes"), rank)
        if len(pads) != 2 * len(axes):
            raise ShapeError(f"Pad: {len(pads)} pads for {len(axes)} axes; give a begin and an end per axis")
        widths = [(0, 0)] * rank
        for k, axis in enumerate(axes):
            widths[axis] = (pads[k], pads[k + len(axes)])
        return widths

    def __call__(self, x, pads=None, constant_value=None, axes=None):
        widths = self._widths(x, pads, axes)
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
        return self.planned(("pad", dim, begin, end), lambda: tf.constant(
            np.pad(np.arange(dim, dtype=np.int64), (begin, end), mode=self.mode)))


@register("Squeeze")
class Squeeze(TFOp):
    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("Squeeze", attributes))

    def __call__(self, x, axes=None):
        axes = self.axes if axes is None else ints(axes, "Squeeze's axes")
        shape = x.shape.as_list()
        if axes is None:
            if None in shape:
                return tf.squeeze(x)
            axes = [i for i, d in enumerate(shape) if d == 1]
        axes = normalize_axes("Squeeze", axes, len(shape))
        bad = [a for a in axes if shape[a] not in (1, None)]
        if bad:
            raise ShapeError(f"Squeeze: axes {bad} of the input of shape {tuple(shape)} are not of length 1")
        # tf.squeeze with no axes would drop every axis of length 1: nothing to drop is an identity.
        return tf.squeeze(x, axis=axes) if axes else tf.identity(x)


@register("Unsqueeze")
class Unsqueeze(TFOp):
    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("Unsqueeze", attributes))

    def __call__(self, x, axes=None):
        axes = self.axes if axes is None else ints(axes, "Unsqueeze's axes")
        if axes is None:
            raise ShapeError("Unsqueeze: no axes given; pass them as the second input (opset 13+) or the attribute")
        rank = x.shape.rank + len(axes)
        out = x
        for axis in sorted(normalize_axes("Unsqueeze", axes, rank)):  # positions in the output, in order
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
        try:
            target = np.broadcast_shapes(tuple(own), tuple(shape))
        except ValueError:
            raise ShapeError(f"Expand: the input of shape {tuple(own)} cannot be broadcast to {shape}") from None
        check_allocation("Expand output", target, _numpy_dtype(x))
        return tf.broadcast_to(x, target)


@register("Tile")
class Tile(TFOp):
    def __call__(self, x, repeats, axis=None):
        repeats = ints(repeats, "Tile's repeats")
        if len(repeats) != x.shape.rank or any(r < 0 for r in repeats):
            raise ShapeError(f"Tile: repeats {repeats} must hold one non-negative count per axis of the "
                             f"{x.shape.rank}-D input")
        shape = x.shape.as_list()
        if None not in shape:
            check_allocation("Tile output", [d * r for d, r in zip(shape, repeats)], _numpy_dtype(x))
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
        ndim = x.shape.rank
        start = min(max(self.start + ndim if self.start < 0 else self.start, 0), ndim)
        end = ndim if self.end is None else min(max(self.end + ndim if self.end < 0 else self.end, 0), ndim)
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
    if x.shape.rank != 4:
        raise ShapeError(f"{op_type}: input must be a 4-D tensor, got shape {tuple(x.shape.as_list())}")
    return static_shape(x)


@register("SpaceToDepth")
class SpaceToDepth(TFOp):
    """Move ``blocksize`` x ``blocksize`` spatial blocks into channels: (N, C, H, W) -> (N, C*b*b, H/b, W/b);
    ``mode`` DCR (default) puts the block offset before the channel in the output channel index, CRD after."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("SpaceToDepth", attributes))
        # Axes of the (n, c, h/b, b, w/b, b) view in output order.
        self.perm = (0, 3, 5, 1, 2, 4) if self.mode == "DCR" else (0, 1, 3, 5, 2, 4)

    def __call__(self, x):
        n, c, h, w = _rank4("SpaceToDepth", x)
        b = self.blocksize
        if h % b or w % b:
            raise ShapeError(f"SpaceToDepth: spatial size {h}x{w} is not divisible by blocksize {b}")
        blocks = tf.transpose(tf.reshape(x, [n, c, h // b, b, w // b, b]), self.perm)
        return tf.reshape(blocks, [n, c * b * b, h // b, w // b])


@register("DepthToSpace")
class DepthToSpace(TFOp):
    """Move channels into ``blocksize`` x ``blocksize`` spatial blocks: (N, C, H, W) -> (N, C/(b*b), H*b, W*b);
    ``mode`` DCR (default: depth, column, row) or CRD."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("DepthToSpace", attributes))

    def __call__(self, x):
        n, c, h, w = _rank4("DepthToSpace", x)
        b = self.blocksize
        if c % (b * b):
            raise ShapeError(f"DepthToSpace: {c} channels are not divisible by blocksize^2 = {b * b}")
        if self.mode == "DCR":
            blocks = tf.transpose(tf.reshape(x, [n, b, b, c // (b * b), h, w]), (0, 3, 4, 1, 5, 2))
        else:
            blocks = tf.transpose(tf.reshape(x, [n, c // (b * b), b, b, h, w]), (0, 1, 4, 2, 5, 3))
        return tf.reshape(blocks, [n, c // (b * b), h * b, w * b])


@register("ReverseSequence")
class ReverseSequence(TFOp):
    """Reverse the first ``sequence_lens[b]`` steps along ``time_axis`` of every batch entry ``b``
    (tf.reverse_sequence; the reference has no gradient)."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("ReverseSequence", attributes))

    def __call__(self, x, lengths):
        if x.shape.rank < 2:
            raise ShapeError(f"ReverseSequence: input must have at least 2 dimensions, got shape "
                             f"{tuple(x.shape.as_list())}")
        batch, steps = x.shape[self.batch_axis], x.shape[self.time_axis]
        if lengths.shape.as_list() != [batch] or not lengths.dtype.is_integer:
            raise ShapeError(f"ReverseSequence: sequence_lens must be an integer tensor of shape ({batch},) (one "
                             f"length per batch entry), got {lengths.dtype.name} of shape "
                             f"{tuple(lengths.shape.as_list())}")
        known = static(lengths)
        if known is not None and known.size and steps is not None and (known.min() < 0 or known.max() > steps):
            raise ShapeError(f"ReverseSequence: sequence_lens must lie in [0, {steps}] (the time axis' length), got "
                             f"values in [{known.min()}, {known.max()}]")
        return tf.reverse_sequence(x, tf.cast(lengths, tf.int64), seq_axis=self.time_axis,
                                   batch_axis=self.batch_axis)
