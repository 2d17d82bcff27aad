"""Reference shape operators (ONNX semantics, newest opset; older attribute forms accepted): Reshape,
Flatten, Squeeze, Unsqueeze, Transpose, Concat, Split, Slice, Pad, Tile, Expand, Shape, Size, Identity,
DepthToSpace, SpaceToDepth and ReverseSequence.

Flatten, Reshape and Identity return views of their input (no copy), and their gradients are views of the
incoming gradient; executors treat tensors as read-only. Outputs keep their input's dtype. Shape and Size
(int64 outputs) and ReverseSequence have no gradient.

Where an input of a newer opset was an attribute in an older one (Squeeze/Unsqueeze ``axes`` before 13,
Split ``split`` before 13, Pad ``pads``/``value`` before 11, Slice ``starts``/``ends``/``axes`` before 10),
the attribute is accepted and used when the input is absent.

>>> import numpy as np
>>> from d5.frameworks.reference.operators import create_operator
>>> x = np.arange(6, dtype=np.float32).reshape(2, 3)
>>> create_operator("Transpose", {}).forward([x]).shape
(3, 2)
>>> create_operator("Slice", {}).forward([x, np.array([1]), np.array([3]), np.array([1])])
array([[1., 2.],
       [4., 5.]], dtype=float32)
>>> create_operator("Reshape", {}).forward([np.zeros((2, 3, 4)), np.array([0, -1], dtype=np.int64)]).shape
(2, 12)
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from d5.errors import ShapeError
from d5.frameworks.reference.operators import ReferenceOp, register
from d5.frameworks.reference.operators._checks import int_list
from d5.frameworks.reference.operators.elementwise import ensure_array, is_float, unbroadcast
from d5.network.memory import check_allocation
from d5.ops.onnx_attributes import adopt, operator_attributes
from d5.ops.onnx_semantics import normalize_axes, optional_input, reshape_target, split_lengths
from d5.ops.operator import Gradient
from d5.ops.tensor_checks import (check_sequence_length_values, concat_axis, depth_to_space_plan, expand_shape,
                                  flatten_axis, pad_widths, reverse_sequence_lengths, shape_range, slice_index,
                                  space_to_depth_plan, squeeze_axes, tile_shape, transpose_perm, unsqueeze_shape)


def _nones(count: int) -> tuple:
    return (None,) * count


def _ints_input(inputs, index: int, attribute: list[int] | None) -> list[int] | None:
    """Input ``index`` as a list of ints, or, when the node leaves it out, the attribute older opsets used."""
    value = int_list(optional_input(inputs, index))
    return attribute if value is None else value


@register("Flatten")
class Flatten(ReferenceOp):
    """Reshape to 2-D: dimensions before ``axis`` become the rows, the rest the columns (axis in [-r, r])."""

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("Flatten", attributes))

    def forward(self, inputs):
        x = inputs[0]
        axis = flatten_axis(self.axis, x.shape)
        # Explicit sizes (not -1) so zero-size tensors reshape too.
        return x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return grads[0].reshape(fwd_inputs[0].shape)


@register("Reshape")
class Reshape(ReferenceOp):
    """Reshape ``data`` to the shape given as second input (int64; the ``shape`` attribute before opset 5): 0
    copies the input's dimension (``allowzero=0``, the default) or means a literal 0 (``allowzero=1``); one -1
    is inferred."""

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("Reshape", attributes))

    def forward(self, inputs):
        data, shape = inputs[0], optional_input(inputs, 1)
        return data.reshape(reshape_target(data.shape, np.asarray(self.shape if shape is None else shape),
                                           self.allowzero))

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return (grads[0].reshape(fwd_inputs[0].shape),) + _nones(len(fwd_inputs) - 1)


@register("Concat")
class Concat(ReferenceOp):
    """Join the inputs along ``axis`` (required, as in ONNX; negative counts from the end)."""

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("Concat", attributes))

    def forward(self, inputs):
        concat_axis(self.axis, [np.shape(x) for x in inputs])
        try:
            return np.concatenate(inputs, axis=self.axis)
        except ValueError:
            shapes = ", ".join(str(x.shape) for x in inputs)
            raise ShapeError(f"Concat: inputs of shapes {shapes} must have the same rank and agree on every "
                             f"dimension except axis {self.axis}") from None

    def backward(self, grads, fwd_inputs, fwd_outputs):
        axis = self.axis % fwd_inputs[0].ndim
        boundaries = np.cumsum([x.shape[axis] for x in fwd_inputs[:-1]])
        return tuple(np.split(grads[0], boundaries, axis=axis))


@register("Identity")
class Identity(ReferenceOp):
    """Returns its input unchanged (the same array, or the same sequence or optional value)."""

    def forward(self, inputs):
        return (inputs[0],)  # a 1-tuple: a sequence (a list) is one output, not several

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return grads[0]


@register("Transpose")
class Transpose(ReferenceOp):
    """Permute the axes by ``perm`` (default: reverse them)."""

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("Transpose", attributes))

    def _perm(self, ndim: int) -> list[int]:
        return transpose_perm(self.perm, ndim)

    def forward(self, inputs):
        x = inputs[0]
        return np.transpose(x, self._perm(x.ndim))

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return np.transpose(grads[0], np.argsort(self._perm(fwd_inputs[0].ndim)))


@register("Squeeze")
class Squeeze(ReferenceOp):
    """Remove the axes of length 1 named by ``axes`` (input from opset 13, attribute before); all of them
    when none are given."""

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("Squeeze", attributes))

    def forward(self, inputs):
        x = inputs[0]
        axes = squeeze_axes(x.shape, _ints_input(inputs, 1, self.axes))
        return x.reshape([d for i, d in enumerate(x.shape) if i not in axes])

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return (grads[0].reshape(fwd_inputs[0].shape),) + _nones(len(fwd_inputs) - 1)


@register("Unsqueeze")
class Unsqueeze(ReferenceOp):
    """Insert axes of length 1 at ``axes`` (positions in the output; input from opset 13, attribute before)."""

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("Unsqueeze", attributes))

    def forward(self, inputs):
        x = inputs[0]
        return x.reshape(unsqueeze_shape(x.shape, _ints_input(inputs, 1, self.axes)))

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return (grads[0].reshape(fwd_inputs[0].shape),) + _nones(len(fwd_inputs) - 1)


@register("Slice")
class Slice(ReferenceOp):
    """``data[starts:ends:steps]`` along ``axes`` with ONNX's clamping (inputs from opset 10, attributes before)."""

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("Slice", attributes))

    def _slices(self, inputs) -> tuple:
        x = inputs[0]
        if len(inputs) > 1:
            starts, ends = int_list(inputs[1]), int_list(inputs[2])
            axes, steps = int_list(optional_input(inputs, 3)), int_list(optional_input(inputs, 4))
        else:
            starts, ends, axes, steps = self.starts, self.ends, self.axes, None
        return slice_index(x.shape, starts, ends, axes, steps)

    def forward(self, inputs):
        return inputs[0][self._slices(inputs)]

    def backward(self, grads, fwd_inputs, fwd_outputs):
        x = fwd_inputs[0]
        grad = np.zeros(x.shape, dtype=grads[0].dtype)
        grad[self._slices(fwd_inputs)] = grads[0]
        return (grad,) + _nones(len(fwd_inputs) - 1)


@register("Split")
class Split(ReferenceOp):
    """Split along ``axis`` into pieces of the lengths in ``split`` (input from opset 13, attribute before),
    or into ``num_outputs`` pieces (opset 18: all of length ceil(dim / n) but the last).

    ONNX also allows neither, meaning "as many equal pieces as the node has outputs": executors tell the
    operator that count in ``node_output_count``.
    """

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("Split", attributes))

    def _lengths(self, inputs) -> tuple[int, list[int]]:
        x = inputs[0]
        axis = normalize_axes("Split", [self.axis], x.ndim)[0]
        dim = x.shape[axis]
        return axis, split_lengths("Split", dim, _ints_input(inputs, 1, self.split),
                                   self.num_outputs or self.node_output_count)

    def forward(self, inputs):
        axis, lengths = self._lengths(inputs)
        return tuple(np.split(inputs[0], np.cumsum(lengths)[:-1], axis=axis))

    def backward(self, grads, fwd_inputs, fwd_outputs):
        axis, _ = self._lengths(fwd_inputs)
        pieces = [np.zeros_like(out) if g is None else g for g, out in zip(grads, fwd_outputs)]
        return (np.concatenate(pieces, axis=axis),) + _nones(len(fwd_inputs) - 1)


@register("Shape")
class Shape(ReferenceOp):
    """The input's shape as an int64 vector, optionally only dimensions ``start:end`` (opset 15, clamped)."""

    gradient = Gradient.NONE

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("Shape", attributes))

    def forward(self, inputs):
        shape = np.asarray(inputs[0].shape, dtype=np.int64)
        start, end = shape_range(self.start, self.end, len(shape))
        return shape[start:end].copy()

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return None


@register("Size")
class Size(ReferenceOp):
    """The number of elements of the input, an int64 scalar."""

    gradient = Gradient.NONE

    def forward(self, inputs):
        return np.asarray(inputs[0].size, dtype=np.int64)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return None


@register("Expand")
class Expand(ReferenceOp):
    """Broadcast the input against ``shape`` (bidirectionally, as numpy does)."""

    def forward(self, inputs):
        x = inputs[0]
        target = expand_shape(x.shape, int_list(inputs[1]))
        check_allocation("Expand output", target, x.dtype)
        # A copy, not numpy's read-only broadcast view, so consumers get an ordinary array.
        return np.broadcast_to(x, target).copy()

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return unbroadcast(grads[0], fwd_inputs[0].shape), None


@register("Tile")
class Tile(ReferenceOp):
    """Repeat the input ``repeats[i]`` times along axis ``i``."""

    def forward(self, inputs):
        x, repeats = inputs[0], int_list(inputs[1])
        check_allocation("Tile output", tile_shape(x.shape, repeats), x.dtype)
        return np.tile(x, repeats)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        x, repeats = fwd_inputs[0], int_list(fwd_inputs[1])
        # Output axis i is (repeat r_i, original d_i) in row-major order: sum over the repeat axes.
        split = [n for pair in zip(repeats, x.shape) for n in pair]
        grad = grads[0].reshape(split).sum(axis=tuple(range(0, 2 * x.ndim, 2)))
        return grad.astype(grads[0].dtype, copy=False), None


@register("Pad")
class Pad(ReferenceOp):
    """Pad (or, with negative pads, crop) by ``pads = [begin_0, ..., begin_n, end_0, ..., end_n]`` in mode
    ``constant`` (with ``constant_value``), ``reflect``, ``edge`` or ``wrap``. Opset 18's ``axes`` input
    restricts the pads to those axes; before opset 11 ``pads`` and ``value`` were attributes."""

    _MODES = {"constant": "constant", "reflect": "reflect", "edge": "edge", "wrap": "wrap"}

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("Pad", attributes))

    def _widths(self, inputs) -> list[tuple[int, int]]:
        return pad_widths(inputs[0].ndim, _ints_input(inputs, 1, self.pads), int_list(optional_input(inputs, 3)))

    def _pad(self, x: np.ndarray, widths: list[tuple[int, int]], constant: Any) -> np.ndarray:
        # Pad by the positive parts, then crop the negative ones.
        positive = [(max(b, 0), max(e, 0)) for b, e in widths]
        if self.mode == "constant":
            out = np.pad(x, positive, mode="constant", constant_values=constant)
        else:
            if any(w and d == 0 for (b, e), d in zip(positive, x.shape) for w in (b, e)):
                raise ShapeError(f"Pad: mode {self.mode!r} cannot pad an axis of length 0 (input shape {x.shape})")
            out = np.pad(x, positive, mode=self._MODES[self.mode])
        crop = tuple(slice(-min(b, 0), out.shape[i] + min(e, 0)) for i, (b, e) in enumerate(widths))
        return out[crop]

    def forward(self, inputs):
        x = inputs[0]
        constant = optional_input(inputs, 2)
        constant = self.value if constant is None else np.asarray(constant).reshape(-1)[0]
        widths = self._widths(inputs)
        check_allocation("Pad output", [d + max(b, 0) + max(e, 0) for d, (b, e) in zip(x.shape, widths)], x.dtype)
        return ensure_array(self._pad(x, widths, np.asarray(constant).astype(x.dtype)))

    def backward(self, grads, fwd_inputs, fwd_outputs):
        x, g = fwd_inputs[0], grads[0]
        # Pad an array of element numbers the same way (-1 for the constant): each output element then names
        # the input element it copies, and the gradient is a scatter-add of g onto those.
        source = self._pad(np.arange(x.size, dtype=np.int64).reshape(x.shape), self._widths(fwd_inputs), -1)
        copied = source >= 0
        grad = np.zeros(x.size, dtype=g.dtype)
        np.add.at(grad, source[copied], g[copied])
        result = [grad.reshape(x.shape)] + [None] * (len(fwd_inputs) - 1)
        constant = optional_input(fwd_inputs, 2)
        if is_float(constant):
            result[2] = np.asarray(g[~copied].sum(), dtype=constant.dtype).reshape(constant.shape)
        return result[0] if len(result) == 1 else tuple(result)


@register("SpaceToDepth")
class SpaceToDepth(ReferenceOp):
    """Move ``blocksize`` x ``blocksize`` spatial blocks into channels: (N, C, H, W) -> (N, C*b*b, H/b, W/b).

    ``mode`` DCR (default) puts the block offset before the channel in the output channel index, CRD after.
    """

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("SpaceToDepth", attributes))

    def forward(self, inputs):
        x = np.asarray(inputs[0])
        plan = space_to_depth_plan(x.shape, self.blocksize, self.mode)
        return np.ascontiguousarray(x.reshape(plan.split).transpose(plan.perm)).reshape(plan.shape)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        shape = fwd_inputs[0].shape
        split, perm, _ = space_to_depth_plan(shape, self.blocksize, self.mode)
        g = grads[0].reshape(tuple(split[p] for p in perm)).transpose(np.argsort(perm))
        return np.ascontiguousarray(g).reshape(shape)


@register("DepthToSpace")
class DepthToSpace(ReferenceOp):
    """Move channels into ``blocksize`` x ``blocksize`` spatial blocks (``mode`` DCR or CRD)."""

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("DepthToSpace", attributes))

    def forward(self, inputs):
        x = np.asarray(inputs[0])
        plan = depth_to_space_plan(x.shape, self.blocksize, self.mode)
        return np.ascontiguousarray(x.reshape(plan.split).transpose(plan.perm)).reshape(plan.shape)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        shape = fwd_inputs[0].shape
        split, perm, _ = depth_to_space_plan(shape, self.blocksize, self.mode)
        permuted_shape = tuple(split[p] for p in perm)
        g = grads[0].reshape(permuted_shape).transpose(np.argsort(perm))
        return np.ascontiguousarray(g).reshape(shape)


@register("ReverseSequence")
class ReverseSequence(ReferenceOp):
    """Reverse the first ``sequence_lens[b]`` steps along ``time_axis`` of every batch entry ``b``."""

    gradient = Gradient.NONE

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("ReverseSequence", attributes))

    def forward(self, inputs):
        x, lengths = np.asarray(inputs[0]), np.asarray(inputs[1])
        _, steps = reverse_sequence_lengths(x.shape, self.batch_axis, self.time_axis, lengths.shape,
                                            lengths.dtype.kind in "iu", lengths.dtype)
        check_sequence_length_values(lengths, steps)
        out = x.copy()
        for b, length in enumerate(lengths):
            index = [slice(None)] * x.ndim
            index[self.batch_axis] = b
            index[self.time_axis] = slice(0, int(length))
            source = [slice(None)] * x.ndim
            source[self.batch_axis] = b
            source[self.time_axis] = slice(int(length) - 1, None, -1) if length > 0 else slice(0, 0)
            out[tuple(index)] = x[tuple(source)]
        return out
