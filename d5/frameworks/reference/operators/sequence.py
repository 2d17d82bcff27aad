"""Reference sequence and optional operators (ONNX semantics, newest opset).

SequenceConstruct, SequenceEmpty, SequenceAt, SequenceInsert, SequenceErase, SequenceLength,
SplitToSequence, ConcatFromSequence, Optional, OptionalHasElement, OptionalGetElement.

A sequence is a Python ``list`` of arrays and an empty optional is ``None`` (the executor passes both
between nodes like arrays; see :data:`d5.network.graph.VALUE_KINDS`). Operators never modify an input
list: SequenceInsert and SequenceErase return new lists. Every ``forward`` returns a 1-tuple, so a list
output is one sequence, not several outputs. None of these operators has a gradient (``Gradient.NONE``).

>>> import numpy as np
>>> from d5.frameworks.reference.operators import create_operator
>>> seq = create_operator("SplitToSequence", {"axis": 0}).forward([np.arange(6.0).reshape(3, 2), np.array(2)])[0]
>>> [part.shape for part in seq]
[(2, 2), (1, 2)]
>>> create_operator("ConcatFromSequence", {"axis": 0}).forward([seq])[0].shape
(3, 2)
>>> create_operator("OptionalHasElement", {}).forward([None])[0]
array(False)
"""
from __future__ import annotations

from typing import Any

import numpy as np

from d5.errors import ShapeError
from d5.frameworks.reference.operators import ReferenceOp, register
from d5.ops.onnx_semantics import optional_input
from d5.ops.operator import Gradient


class _SequenceOp(ReferenceOp):

    gradient = Gradient.NONE
    no_gradient_reason = "sequences and optionals are inference only; stop backpropagation before it"


def _sequence(op_name: str, value: Any, what: str = "input 0") -> list:
    if value is None:
        raise ShapeError(f"{op_name}: {what} is an empty optional, but a sequence is required; check it with "
                         "OptionalHasElement first")
    if not isinstance(value, (list, tuple)):
        shape = f" of shape {value.shape}" if isinstance(value, np.ndarray) else ""
        raise ShapeError(f"{op_name}: {what} must be a sequence (a list of arrays), got a {type(value).__name__}"
                         f"{shape}; build one with SequenceConstruct or SplitToSequence")
    return list(value)


def _tensor(op_name: str, value: Any, what: str) -> np.ndarray:
    if value is None or isinstance(value, (list, tuple)):
        got = "an empty optional" if value is None else "a sequence"
        raise ShapeError(f"{op_name}: {what} must be a tensor, got {got}")
    return np.asarray(value)


def _position(op_name: str, value: Any, length: int, low: int, high: int) -> int:
    """A scalar (or one-element) integer position, normalized, checked against ``[low, high]``."""
    position = np.asarray(value)
    if position.size != 1 or position.dtype.kind not in "iu":
        raise ShapeError(f"{op_name}: position must be one int32/int64 value, got dtype {position.dtype} shape "
                         f"{position.shape}")
    index = int(position.reshape(-1)[0])
    if not low <= index <= high:
        raise ShapeError(f"{op_name}: position {index} is out of range for a sequence of length {length}; use "
                         f"[{low}, {high}]")
    return index + length if index < 0 else index


def _check_same_dtype(op_name: str, items: list, dtype: np.dtype | None = None) -> None:
    dtypes = {np.asarray(item).dtype for item in items} | ({np.dtype(dtype)} if dtype is not None else set())
    if len(dtypes) > 1:
        raise ShapeError(f"{op_name}: all tensors of a sequence must have one dtype, got {sorted(map(str, dtypes))}; "
                         "Cast them first")


@register("SequenceConstruct")
class SequenceConstruct(_SequenceOp):
    """A sequence of the input tensors (all of one dtype).

    >>> len(SequenceConstruct().forward([np.zeros(2), np.ones(3)])[0])
    2
    """

    def forward(self, inputs):
        items = [_tensor("SequenceConstruct", x, f"input {i}") for i, x in enumerate(inputs)]
        if not items:
            raise ShapeError("SequenceConstruct: needs at least one input tensor; use SequenceEmpty for an empty sequence")
        _check_same_dtype("SequenceConstruct", items)
        return (items,)


@register("SequenceEmpty")
class SequenceEmpty(_SequenceOp):
    """An empty sequence (``dtype`` names the element type ONNX-side; the empty list carries none)."""

    def __init__(self, dtype: int | None = None) -> None:
        super().__init__()
        self.dtype = dtype

    def forward(self, inputs):
        return ([],)


@register("SequenceAt")
class SequenceAt(_SequenceOp):
    """The tensor at ``position`` (negative counts from the back; range ``[-n, n-1]``)."""

    def forward(self, inputs):
        seq = _sequence("SequenceAt", inputs[0])
        n = len(seq)
        return (seq[_position("SequenceAt", inputs[1], n, -n, n - 1)],)


@register("SequenceInsert")
class SequenceInsert(_SequenceOp):
    """A new sequence with ``tensor`` inserted before ``position`` (default: appended; range ``[-n, n]``).

    >>> [int(x) for x in SequenceInsert().forward([[np.array(1), np.array(2)], np.array(0), np.array(0)])[0]]
    [0, 1, 2]
    """

    def forward(self, inputs):
        seq = _sequence("SequenceInsert", inputs[0])
        tensor = _tensor("SequenceInsert", inputs[1], "input 1 (tensor)")
        if seq:
            _check_same_dtype("SequenceInsert", seq, tensor.dtype)
        position = optional_input(inputs, 2)
        n = len(seq)
        index = n if position is None else _position("SequenceInsert", position, n, -n, n)
        seq.insert(index, tensor)
        return (seq,)


@register("SequenceErase")
class SequenceErase(_SequenceOp):
    """A new sequence without the tensor at ``position`` (default: the last; range ``[-n, n-1]``)."""

    def forward(self, inputs):
        seq = _sequence("SequenceErase", inputs[0])
        n = len(seq)
        if n == 0:
            raise ShapeError("SequenceErase: the sequence is empty; there is nothing to erase")
        position = optional_input(inputs, 1)
        index = n - 1 if position is None else _position("SequenceErase", position, n, -n, n - 1)
        del seq[index]
        return (seq,)


@register("SequenceLength")
class SequenceLength(_SequenceOp):
    """The number of tensors in the sequence, an int64 scalar."""

    def forward(self, inputs):
        return (np.array(len(_sequence("SequenceLength", inputs[0])), dtype=np.int64),)


@register("SplitToSequence")
class SplitToSequence(_SequenceOp):
    """Split a tensor along ``axis`` into a sequence: by ``split`` (a scalar chunk length, the last chunk
    shorter, or a 1-D list of lengths) or, without ``split``, into pieces of length 1 that ``keepdims=0``
    squeezes.

    >>> [p.shape for p in SplitToSequence(axis=1, keepdims=0).forward([np.zeros((2, 3))])[0]]
    [(2,), (2,), (2,)]
    """

    def __init__(self, axis: int = 0, keepdims: int = 1) -> None:
        super().__init__()
        self.axis, self.keepdims = int(axis), bool(keepdims)

    def forward(self, inputs):
        x = _tensor("SplitToSequence", inputs[0], "input 0")
        ndim = x.ndim
        if not -ndim <= self.axis < max(ndim, 1) or ndim == 0:
            raise ShapeError(f"SplitToSequence: axis {self.axis} is out of range for a {ndim}-D tensor; use "
                             f"[{-ndim}, {ndim})" if ndim else "SplitToSequence: cannot split a 0-D tensor")
        axis = self.axis % ndim
        dim = x.shape[axis]
        split = optional_input(inputs, 1)
        if split is None:
            lengths = [1] * dim
        else:
            split = np.asarray(split)
            if split.dtype.kind not in "iu":
                raise ShapeError(f"SplitToSequence: split must be int32/int64, got {split.dtype}")
            if split.ndim == 0:
                chunk = int(split)
                if chunk <= 0:
                    raise ShapeError(f"SplitToSequence: a scalar split must be positive, got {chunk}")
                lengths = [chunk] * (dim // chunk) + ([dim % chunk] if dim % chunk else [])
            elif split.ndim == 1:
                lengths = [int(v) for v in split]
                if any(v < 0 for v in lengths) or sum(lengths) != dim:
                    raise ShapeError(f"SplitToSequence: lengths {lengths} must be non-negative and sum to the axis "
                                     f"length {dim} (axis {self.axis} of shape {x.shape})")
            else:
                raise ShapeError(f"SplitToSequence: split must be a scalar or 1-D, got shape {split.shape}")
        pieces = np.split(x, np.cumsum(lengths)[:-1].astype(np.int64), axis=axis) if lengths else []
        if split is None and not self.keepdims:
            pieces = [np.squeeze(p, axis=axis) for p in pieces]
        return ([p.copy() for p in pieces],)  # own memory (not views of x); copy() keeps 0-d pieces 0-d


@register("ConcatFromSequence")
class ConcatFromSequence(_SequenceOp):
    """Concatenate the sequence's tensors along ``axis``, or stack them on a new axis (``new_axis=1``).

    >>> ConcatFromSequence(axis=-1, new_axis=1).forward([[np.zeros((2, 3)), np.ones((2, 3))]])[0].shape
    (2, 3, 2)
    """

    def __init__(self, axis: int | None = None, new_axis: int = 0) -> None:
        super().__init__()
        if axis is None:
            raise ShapeError("ConcatFromSequence: the 'axis' attribute is required")
        self.axis, self.new_axis = int(axis), bool(new_axis)

    def forward(self, inputs):
        seq = [np.asarray(x) for x in _sequence("ConcatFromSequence", inputs[0])]
        if not seq:
            raise ShapeError("ConcatFromSequence: the sequence is empty; there is nothing to concatenate")
        _check_same_dtype("ConcatFromSequence", seq)
        rank = seq[0].ndim + (1 if self.new_axis else 0)
        if not -rank <= self.axis < rank or rank == 0:
            raise ShapeError(f"ConcatFromSequence: axis {self.axis} is out of range for tensors of rank {seq[0].ndim}"
                             f"{' with new_axis=1' if self.new_axis else ''}; use [{-rank}, {rank - 1}]")
        try:
            result = np.stack(seq, axis=self.axis) if self.new_axis else np.concatenate(seq, axis=self.axis)
        except ValueError as err:
            shapes = [x.shape for x in seq]
            raise ShapeError(f"ConcatFromSequence: tensors of shapes {shapes[:8]} cannot be "
                             f"{'stacked' if self.new_axis else 'concatenated'} along axis {self.axis} ({err})") from None
        return (result,)


@register("Optional")
class Optional(_SequenceOp):
    """An optional holding the input (a tensor or a sequence), or an empty one (``None``) without input;
    the ``type`` attribute names the type of the empty optional ONNX-side."""

    def __init__(self, type: Any = None) -> None:  # noqa: A002 - the ONNX attribute's name
        super().__init__()
        self.type = type

    def forward(self, inputs):
        return (optional_input(inputs, 0),)


@register("OptionalHasElement")
class OptionalHasElement(_SequenceOp):
    """A bool scalar: whether the input (an optional, tensor or sequence) holds a value; no input is False."""

    def forward(self, inputs):
        return (np.array(optional_input(inputs, 0) is not None),)


@register("OptionalGetElement")
class OptionalGetElement(_SequenceOp):
    """The value an optional holds (a tensor or a sequence passes through); an empty optional raises."""

    def forward(self, inputs):
        value = optional_input(inputs, 0)
        if value is None:
            raise ShapeError("OptionalGetElement: the optional is empty; check it with OptionalHasElement first, "
                             "or feed a value")
        return (value,)
