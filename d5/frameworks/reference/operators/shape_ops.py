"""Reference shape and indexing operators (ONNX semantics, newest opset; older attribute forms accepted).

Transpose, Squeeze, Unsqueeze, Slice, Gather, GatherElements, Split, Shape, Size, Constant, ConstantOfShape,
Cast, CastLike, Expand, Tile, Pad, Range, Where. Outputs keep their input's dtype. Index, shape and axes
inputs get ``None`` gradients; operators whose outputs carry no gradient at all (Shape, Size, Constant,
ConstantOfShape, Range) set ``differentiable = False``.

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
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from d5.errors import ShapeError
from d5.frameworks.reference.operators.checks import scalar_input
from d5.frameworks.reference.operators.elementwise import ensure_array, unbroadcast
from d5.frameworks.reference.operators.registry import ReferenceOp, register
from d5.network.memory import check_allocation


# ----------------------------------------------------------------------------------------------- helpers

def int_list(value: Any) -> list[int] | None:
    """An axes/shape/indices attribute or input as a list of Python ints (None stays None).

    >>> int_list(np.array([1, -1])), int_list(None)
    ([1, -1], None)
    """
    if value is None:
        return None
    return [int(v) for v in np.asarray(value).reshape(-1)]


def normalize_axes(op_name: str, axes: Sequence[int], ndim: int) -> list[int]:
    """``axes`` (each in ``[-ndim, ndim)``) as non-negative indices; a ShapeError names the operator.

    >>> normalize_axes("Squeeze", [-1, 0], 3)
    [2, 0]
    """
    result = []
    for axis in axes:
        if not -ndim <= axis < ndim:
            raise ShapeError(f"{op_name}: axis {axis} is out of range for a {ndim}-D tensor; use [{-ndim}, {ndim})")
        result.append(axis % ndim)
    if len(set(result)) != len(result):
        raise ShapeError(f"{op_name}: axes {list(axes)} name the same axis twice")
    return result


def tensor_attribute(value: Any) -> np.ndarray:
    """A tensor-valued attribute (an ``onnx.TensorProto`` or anything numpy accepts) as an ndarray.

    >>> tensor_attribute([1.5]).dtype
    dtype('float64')
    """
    if hasattr(value, "data_type") and hasattr(value, "dims"):  # an onnx.TensorProto, decoded lazily
        from onnx import numpy_helper
        return numpy_helper.to_array(value)
    return np.asarray(value)


def onnx_dtype(to: Any) -> np.dtype:
    """The numpy dtype of an ONNX ``TensorProto.DataType`` number (or anything ``np.dtype`` accepts).

    >>> onnx_dtype(1), onnx_dtype(7)
    (dtype('float32'), dtype('int64'))
    """
    if isinstance(to, (int, np.integer)) and not isinstance(to, bool):
        from onnx import helper
        try:
            return np.dtype(helper.tensor_dtype_to_np_dtype(int(to)))
        except (KeyError, ValueError, TypeError):
            raise ShapeError(f"Cast: unknown ONNX data type {to}; use a TensorProto.DataType value") from None
    return np.dtype(to)


def _is_float(array: Any) -> bool:
    return isinstance(array, np.ndarray) and np.issubdtype(array.dtype, np.floating)


def _optional(inputs: Sequence[Any], index: int) -> Any:
    return inputs[index] if len(inputs) > index else None


def _nones(count: int) -> tuple:
    return (None,) * count


# ------------------------------------------------------------------------------------------- operators

@register("Transpose")
class Transpose(ReferenceOp):
    """Permute the axes by ``perm`` (default: reverse them)."""

    def __init__(self, perm: Sequence[int] | None = None) -> None:
        super().__init__()
        self.perm = int_list(perm)

    def _perm(self, ndim: int) -> list[int]:
        if self.perm is None:
            return list(range(ndim))[::-1]
        if sorted(self.perm) != list(range(ndim)):
            raise ShapeError(f"Transpose: perm {self.perm} is not a permutation of the {ndim} axes of the input")
        return self.perm

    def forward(self, inputs):
        x = inputs[0]
        return np.transpose(x, self._perm(x.ndim))

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return np.transpose(grads[0], np.argsort(self._perm(fwd_inputs[0].ndim)))


@register("Squeeze")
class Squeeze(ReferenceOp):
    """Remove the axes of length 1 named by ``axes`` (input from opset 13, attribute before); all of them
    when none are given."""

    def __init__(self, axes: Sequence[int] | None = None) -> None:
        super().__init__()
        self.axes = int_list(axes)

    def forward(self, inputs):
        x = inputs[0]
        axes = int_list(_optional(inputs, 1))
        axes = self.axes if axes is None else axes
        if axes is None:
            return x.reshape([d for d in x.shape if d != 1])
        axes = normalize_axes("Squeeze", axes, x.ndim)
        bad = [a for a in axes if x.shape[a] != 1]
        if bad:
            raise ShapeError(f"Squeeze: axes {bad} of the input of shape {x.shape} are not of length 1")
        return x.reshape([d for i, d in enumerate(x.shape) if i not in axes])

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return (grads[0].reshape(fwd_inputs[0].shape),) + _nones(len(fwd_inputs) - 1)


@register("Unsqueeze")
class Unsqueeze(ReferenceOp):
    """Insert axes of length 1 at ``axes`` (positions in the output; input from opset 13, attribute before)."""

    def __init__(self, axes: Sequence[int] | None = None) -> None:
        super().__init__()
        self.axes = int_list(axes)

    def forward(self, inputs):
        x = inputs[0]
        axes = int_list(_optional(inputs, 1))
        axes = self.axes if axes is None else axes
        if axes is None:
            raise ShapeError("Unsqueeze: no axes given; pass them as the second input (opset 13+) or the attribute")
        out_ndim = x.ndim + len(axes)
        shape = list(x.shape)
        for axis in sorted(normalize_axes("Unsqueeze", axes, out_ndim)):
            shape.insert(axis, 1)
        return x.reshape(shape)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return (grads[0].reshape(fwd_inputs[0].shape),) + _nones(len(fwd_inputs) - 1)


@register("Slice")
class Slice(ReferenceOp):
    """``data[starts:ends:steps]`` along ``axes`` with ONNX's clamping (inputs from opset 10, attributes before)."""

    def __init__(self, starts: Sequence[int] | None = None, ends: Sequence[int] | None = None,
                 axes: Sequence[int] | None = None) -> None:
        super().__init__()
        self.starts, self.ends, self.axes = int_list(starts), int_list(ends), int_list(axes)

    def _slices(self, inputs) -> tuple:
        x = inputs[0]
        if len(inputs) > 1:
            starts, ends = int_list(inputs[1]), int_list(inputs[2])
            axes, steps = int_list(_optional(inputs, 3)), int_list(_optional(inputs, 4))
        else:
            starts, ends, axes, steps = self.starts, self.ends, self.axes, None
        if starts is None or ends is None:
            raise ShapeError("Slice: starts and ends are required (inputs 1 and 2, or attributes before opset 10)")
        axes = list(range(len(starts))) if axes is None else axes
        steps = [1] * len(starts) if steps is None else steps
        if not len(starts) == len(ends) == len(axes) == len(steps):
            raise ShapeError(f"Slice: starts {starts}, ends {ends}, axes {axes} and steps {steps} must have equal lengths")
        slices = [slice(None)] * x.ndim
        for axis, start, end, step in zip(normalize_axes("Slice", axes, x.ndim), starts, ends, steps):
            if step == 0:
                raise ShapeError("Slice: a step of 0 is not allowed")
            dim = x.shape[axis]
            start = start + dim if start < 0 else start
            end = end + dim if end < 0 else end
            if step > 0:
                start, end = min(max(start, 0), dim), min(max(end, 0), dim)
            else:
                start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
            # A Python slice reads an end of -1 as "the last element"; None means "run past the front".
            slices[axis] = slice(start, None if end < 0 else end, step)
        return tuple(slices)

    def forward(self, inputs):
        return inputs[0][self._slices(inputs)]

    def backward(self, grads, fwd_inputs, fwd_outputs):
        x = fwd_inputs[0]
        grad = np.zeros(x.shape, dtype=grads[0].dtype)
        grad[self._slices(fwd_inputs)] = grads[0]
        return (grad,) + _nones(len(fwd_inputs) - 1)


def _checked_indices(op_name: str, indices: np.ndarray, dim: int) -> np.ndarray:
    indices = np.asarray(indices)
    if not np.issubdtype(indices.dtype, np.integer):
        raise ShapeError(f"{op_name}: indices must be an integer tensor, got {indices.dtype}")
    if indices.size and (indices.min() < -dim or indices.max() >= dim):
        raise ShapeError(f"{op_name}: indices must lie in [{-dim}, {dim - 1}] for an axis of length {dim}, got "
                         f"values in [{indices.min()}, {indices.max()}]")
    return np.where(indices < 0, indices + dim, indices)


@register("Gather")
class Gather(ReferenceOp):
    """Take the entries of ``data`` along ``axis`` at ``indices`` (negative indices count from the end)."""

    def __init__(self, axis: int = 0) -> None:
        super().__init__()
        self.axis = int(axis)

    def forward(self, inputs):
        data = inputs[0]
        axis = normalize_axes("Gather", [self.axis], data.ndim)[0]
        return np.take(data, _checked_indices("Gather", inputs[1], data.shape[axis]), axis=axis)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        data, g = fwd_inputs[0], grads[0]
        axis = normalize_axes("Gather", [self.axis], data.ndim)[0]
        indices = _checked_indices("Gather", fwd_inputs[1], data.shape[axis])
        grad = np.zeros(data.shape, dtype=g.dtype)
        # Move the gathered axis (of grad) and the index axes (of g) to the front, then scatter-add rows:
        # repeated indices must accumulate, which np.add.at does and fancy assignment does not.
        g_rows = np.moveaxis(g, list(range(axis, axis + indices.ndim)), list(range(indices.ndim)))
        np.add.at(np.moveaxis(grad, axis, 0), indices.reshape(-1),
                  g_rows.reshape((-1,) + data.shape[:axis] + data.shape[axis + 1:]))
        return grad, None


@register("GatherElements")
class GatherElements(ReferenceOp):
    """``out[i][j] = data[indices[i][j]][j]`` for ``axis=0`` (and likewise for other axes)."""

    def __init__(self, axis: int = 0) -> None:
        super().__init__()
        self.axis = int(axis)

    def forward(self, inputs):
        data, indices = inputs[0], np.asarray(inputs[1])
        axis = normalize_axes("GatherElements", [self.axis], data.ndim)[0]
        if indices.ndim != data.ndim:
            raise ShapeError(f"GatherElements: indices (shape {indices.shape}) must have the rank of data {data.shape}")
        if any(n > m for d, (n, m) in enumerate(zip(indices.shape, data.shape)) if d != axis):
            raise ShapeError(f"GatherElements: indices of shape {indices.shape} are larger than data {data.shape} on an "
                             f"axis other than axis {axis}; there they may be at most as large as data")
        # The output has the shape of indices: on the other axes, data is read only where indices reach (numpy
        # would instead broadcast indices of size 1 up to data's size).
        data = data[tuple(slice(None) if d == axis else slice(0, n) for d, n in enumerate(indices.shape))]
        return np.take_along_axis(data, _checked_indices("GatherElements", indices, data.shape[axis]), axis=axis)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        data, g = fwd_inputs[0], grads[0]
        axis = normalize_axes("GatherElements", [self.axis], data.ndim)[0]
        indices = _checked_indices("GatherElements", fwd_inputs[1], data.shape[axis])
        coordinates = list(np.indices(indices.shape, sparse=True))
        coordinates[axis] = indices
        grad = np.zeros(data.shape, dtype=g.dtype)
        np.add.at(grad, tuple(coordinates), g)
        return grad, None


@register("Split")
class Split(ReferenceOp):
    """Split along ``axis`` into pieces of the lengths in ``split`` (input from opset 13, attribute before),
    or into ``num_outputs`` pieces (opset 18: all of length ceil(dim / n) but the last).

    ONNX also allows neither, meaning "as many equal pieces as the node has outputs": executors tell the
    operator that count in ``node_output_count``.
    """

    def __init__(self, axis: int = 0, split: Sequence[int] | None = None, num_outputs: int | None = None) -> None:
        super().__init__()
        self.axis, self.split = int(axis), int_list(split)
        self.num_outputs = None if num_outputs is None else int(num_outputs)

    def _lengths(self, inputs) -> tuple[int, list[int]]:
        x = inputs[0]
        axis = normalize_axes("Split", [self.axis], x.ndim)[0]
        dim = x.shape[axis]
        lengths = int_list(_optional(inputs, 1))
        lengths = self.split if lengths is None else lengths
        if lengths is None:
            pieces = self.num_outputs or self.node_output_count
            if not pieces or pieces < 1:
                raise ShapeError("Split: give the piece lengths ('split' input or attribute) or num_outputs "
                                 "(the number of outputs of the node)")
            chunk = -(-dim // pieces)
            lengths = [min(chunk, max(dim - k * chunk, 0)) for k in range(pieces)]
        if sum(lengths) != dim or any(n < 0 for n in lengths):
            raise ShapeError(f"Split: lengths {lengths} must be non-negative and sum to the axis length {dim}")
        return axis, lengths

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

    differentiable = False

    def __init__(self, start: int = 0, end: int | None = None) -> None:
        super().__init__()
        self.start, self.end = int(start), None if end is None else int(end)

    def forward(self, inputs):
        shape = np.asarray(inputs[0].shape, dtype=np.int64)
        ndim = len(shape)
        start = min(max(self.start + ndim if self.start < 0 else self.start, 0), ndim)
        end = ndim if self.end is None else min(max(self.end + ndim if self.end < 0 else self.end, 0), ndim)
        return shape[start:end].copy()

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return None


@register("Size")
class Size(ReferenceOp):
    """The number of elements of the input, an int64 scalar."""

    differentiable = False

    def forward(self, inputs):
        return np.asarray(inputs[0].size, dtype=np.int64)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return None


@register("Constant")
class Constant(ReferenceOp):
    """A constant tensor from exactly one of the attributes ``value`` (tensor), ``value_float(s)``,
    ``value_int(s)``, ``value_string(s)``."""

    differentiable = False

    def __init__(self, value: Any = None, value_float: float | None = None, value_floats: Sequence[float] | None = None,
                 value_int: int | None = None, value_ints: Sequence[int] | None = None,
                 value_string: Any = None, value_strings: Sequence[Any] | None = None, sparse_value: Any = None) -> None:
        super().__init__()
        given = {name: v for name, v in [("value", value), ("value_float", value_float), ("value_floats", value_floats),
                                          ("value_int", value_int), ("value_ints", value_ints),
                                          ("value_string", value_string), ("value_strings", value_strings),
                                          ("sparse_value", sparse_value)] if v is not None}
        if len(given) != 1:
            raise ShapeError(f"Constant: exactly one value attribute must be set, got {sorted(given) or 'none'}")
        if sparse_value is not None:
            raise ShapeError("Constant: sparse_value is not supported by the reference framework; use a dense 'value'")
        if value is not None:
            self.value = tensor_attribute(value)
        elif value_float is not None or value_floats is not None:
            self.value = np.asarray(value_float if value_floats is None else list(value_floats), dtype=np.float32)
        elif value_int is not None or value_ints is not None:
            self.value = np.asarray(value_int if value_ints is None else list(value_ints), dtype=np.int64)
        else:
            strings = [value_string] if value_strings is None else list(value_strings)
            decoded = [s.decode("utf-8") if isinstance(s, bytes) else str(s) for s in strings]
            self.value = np.asarray(decoded[0] if value_strings is None else decoded, dtype=object)

    def forward(self, inputs):
        return self.value

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return ()


@register("ConstantOfShape")
class ConstantOfShape(ReferenceOp):
    """A tensor of the shape given by the (int64) input, filled with ``value`` (a one-element tensor; default
    float32 0)."""

    differentiable = False

    def __init__(self, value: Any = None) -> None:
        super().__init__()
        self.value = np.zeros(1, np.float32) if value is None else tensor_attribute(value)
        if self.value.size != 1:
            raise ShapeError(f"ConstantOfShape: value must hold exactly one element, got shape {self.value.shape}")

    def forward(self, inputs):
        shape = int_list(inputs[0])
        if any(d < 0 for d in shape):
            raise ShapeError(f"ConstantOfShape: dimensions must be non-negative, got {shape}")
        check_allocation("ConstantOfShape output", shape, self.value.dtype)
        return np.full(shape, self.value.reshape(()), dtype=self.value.dtype)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return None


def _cast(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    if x.dtype == dtype:
        return x
    if dtype == object:  # to STRING: ONNX writes floats in their shortest round-trip form
        return np.array([_to_string(v) for v in x.reshape(-1)], dtype=object).reshape(x.shape)
    if x.dtype == object:  # from STRING: parse as a Python number first ("INF", "-NaN" included)
        return np.array([float(v) for v in x.reshape(-1)], dtype=np.float64).reshape(x.shape).astype(dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        return x.astype(dtype)


def _to_string(value: Any) -> str:
    return repr(float(value)) if isinstance(value, np.floating) else str(value)


@register("Cast")
class Cast(ReferenceOp):
    """Convert to the ONNX data type ``to`` (a ``TensorProto.DataType`` number). The gradient flows back
    (cast to the input's dtype) between floating types only."""

    def __init__(self, to: Any, saturate: int = 1, round_mode: Any = "up") -> None:
        super().__init__()
        self.dtype = onnx_dtype(to)

    def forward(self, inputs):
        return _cast(inputs[0], self.dtype)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        x = fwd_inputs[0]
        return grads[0].astype(x.dtype, copy=False) if _is_float(x) and _is_float(fwd_outputs[0]) else None


@register("CastLike")
class CastLike(ReferenceOp):
    """Convert the first input to the dtype of the second."""

    def __init__(self, saturate: int = 1, round_mode: Any = "up") -> None:
        super().__init__()

    def forward(self, inputs):
        return _cast(inputs[0], inputs[1].dtype)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        x = fwd_inputs[0]
        return (grads[0].astype(x.dtype, copy=False) if _is_float(x) and _is_float(fwd_outputs[0]) else None), None


@register("Expand")
class Expand(ReferenceOp):
    """Broadcast the input against ``shape`` (bidirectionally, as numpy does)."""

    def forward(self, inputs):
        x, shape = inputs[0], int_list(inputs[1])
        try:
            target = np.broadcast_shapes(x.shape, tuple(shape))
        except ValueError:
            raise ShapeError(f"Expand: the input of shape {x.shape} cannot be broadcast to {shape}") from None
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
        if len(repeats) != x.ndim or any(r < 0 for r in repeats):
            raise ShapeError(f"Tile: repeats {repeats} must hold one non-negative count per axis of the "
                             f"{x.ndim}-D input")
        check_allocation("Tile output", [d * r for d, r in zip(x.shape, repeats)], x.dtype)
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

    def __init__(self, mode: Any = "constant", pads: Sequence[int] | None = None, value: float = 0.0) -> None:
        super().__init__()
        mode = mode.decode() if isinstance(mode, bytes) else str(mode)
        if mode not in self._MODES:
            raise ShapeError(f"Pad: unknown mode {mode!r}; use one of {sorted(self._MODES)}")
        self.mode, self.pads, self.value = mode, int_list(pads), float(value)

    def _widths(self, inputs) -> list[tuple[int, int]]:
        x = inputs[0]
        pads = int_list(_optional(inputs, 1))
        pads = self.pads if pads is None else pads
        if pads is None:
            raise ShapeError("Pad: no pads given; pass them as the second input (opset 11+) or the attribute")
        axes = int_list(_optional(inputs, 3))
        axes = list(range(x.ndim)) if axes is None else normalize_axes("Pad", axes, x.ndim)
        if len(pads) != 2 * len(axes):
            raise ShapeError(f"Pad: {len(pads)} pads for {len(axes)} axes; give a begin and an end per axis")
        widths = [(0, 0)] * x.ndim
        for k, axis in enumerate(axes):
            widths[axis] = (pads[k], pads[k + len(axes)])
        return widths

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
        constant = _optional(inputs, 2)
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
        constant = _optional(fwd_inputs, 2)
        if _is_float(constant):
            result[2] = np.asarray(g[~copied].sum(), dtype=constant.dtype).reshape(constant.shape)
        return result[0] if len(result) == 1 else tuple(result)


# Range's stash_type (opset 27): the ONNX element type float16/bfloat16 inputs are computed in.
_RANGE_STASH_DTYPES = {1: np.dtype(np.float32), 11: np.dtype(np.float64)}


@register("Range")
class Range(ReferenceOp):
    """``start, start + delta, ...`` up to (excluding) ``limit``; scalars of one dtype in, the same dtype out.

    ``stash_type`` (opset 27; 1 = float32, 11 = float64) is the precision float16/bfloat16 inputs are computed
    in before the result is cast back; it has no effect on other types. Without it (older opsets) the
    elements are computed in the inputs' own dtype.
    """

    differentiable = False

    def __init__(self, stash_type: int | None = None) -> None:
        super().__init__()
        if stash_type is not None and int(stash_type) not in _RANGE_STASH_DTYPES:
            raise ShapeError(f"Range: stash_type must be 1 (FLOAT) or 11 (DOUBLE), got {stash_type}")
        self.stash_dtype = None if stash_type is None else _RANGE_STASH_DTYPES[int(stash_type)]

    def forward(self, inputs):
        for value, what in zip(inputs[:3], ("start", "limit", "delta")):
            scalar_input("Range", value, what, float)  # each must be one number
        start, limit, delta = (np.asarray(v).reshape(()) for v in inputs[:3])
        if delta == 0:
            raise ShapeError("Range: delta must not be 0")
        dtype = start.dtype
        compute = self.stash_dtype if self.stash_dtype is not None and dtype.name in ("float16", "bfloat16") else dtype
        start, delta = start.astype(compute), delta.astype(compute)
        steps = (float(limit) - float(start)) / float(delta)
        if not math.isfinite(steps):
            raise ShapeError(f"Range: start {start}, limit {limit} and delta {delta} give no finite number of elements")
        count = max(int(math.ceil(steps)), 0)
        check_allocation("Range output", [count], compute)
        return (start + np.arange(count, dtype=compute) * delta).astype(dtype, copy=False)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return None, None, None


@register("Where")
class Where(ReferenceOp):
    """``X`` where ``condition`` is true, ``Y`` elsewhere (all three broadcast together)."""

    def forward(self, inputs):
        condition, x, y = inputs[0], inputs[1], inputs[2]
        try:
            return ensure_array(np.where(condition, x, y))
        except ValueError:
            raise ShapeError(f"Where: shapes {condition.shape}, {x.shape}, {y.shape} do not broadcast together") from None

    def backward(self, grads, fwd_inputs, fwd_outputs):
        condition, x, y = fwd_inputs
        g = grads[0]
        zero = np.zeros((), dtype=g.dtype)
        grad_x = unbroadcast(ensure_array(np.where(condition, g, zero)), x.shape) if _is_float(x) else None
        grad_y = unbroadcast(ensure_array(np.where(condition, zero, g)), y.shape) if _is_float(y) else None
        return None, grad_x, grad_y
