"""Reference shape operators: Flatten, Reshape, Concat, Identity (ONNX semantics).

Flatten, Reshape and Identity return views of their input (no copy), and their gradients are views of the
incoming gradient; executors treat tensors as read-only.

>>> import numpy as np
>>> from d5.frameworks.reference.operators import create_operator
>>> reshape = create_operator("Reshape", {})
>>> reshape.forward([np.zeros((2, 3, 4)), np.array([0, -1], dtype=np.int64)]).shape
(2, 12)
"""
from __future__ import annotations

import math

import numpy as np

from d5.errors import ShapeError
from d5.frameworks.reference.operators.registry import ReferenceOp, register


@register("Flatten")
class Flatten(ReferenceOp):
    """Reshape to 2-D: dimensions before ``axis`` become the rows, the rest the columns (axis in [-r, r])."""

    def __init__(self, axis: int = 1) -> None:
        super().__init__()
        self.axis = int(axis)

    def forward(self, inputs):
        x = inputs[0]
        if not -x.ndim <= self.axis <= x.ndim:
            raise ShapeError(f"Flatten: axis {self.axis} is out of range for a {x.ndim}-D input of shape {x.shape}; "
                             f"use an axis in [{-x.ndim}, {x.ndim}]")
        axis = self.axis % x.ndim if self.axis < 0 else self.axis
        # Explicit sizes (not -1) so zero-size tensors reshape too.
        return x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return grads[0].reshape(fwd_inputs[0].shape)


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


@register("Reshape")
class Reshape(ReferenceOp):
    """Reshape ``data`` to the shape given as second input (int64): 0 copies the input's dimension
    (``allowzero=0``, the default) or means a literal 0 (``allowzero=1``); one -1 is inferred."""

    def __init__(self, allowzero: int = 0) -> None:
        super().__init__()
        self.allowzero = bool(allowzero)

    def forward(self, inputs):
        data = inputs[0]
        return data.reshape(reshape_target(data.shape, np.asarray(inputs[1]), self.allowzero))

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return grads[0].reshape(fwd_inputs[0].shape), None


@register("Concat")
class Concat(ReferenceOp):
    """Join the inputs along ``axis`` (required, as in ONNX; negative counts from the end)."""

    def __init__(self, axis: int) -> None:
        super().__init__()
        self.axis = int(axis)

    def forward(self, inputs):
        if not inputs:
            raise ShapeError("Concat: needs at least one input")
        ndim = inputs[0].ndim
        if not -ndim <= self.axis < ndim:
            raise ShapeError(f"Concat: axis {self.axis} is out of range for {ndim}-D inputs; use [{-ndim}, {ndim})")
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
