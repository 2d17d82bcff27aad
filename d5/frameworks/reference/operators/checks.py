"""Input checks the reference operators share: ranks and one-value inputs.

Validation checks each node against its ONNX schema before a graph runs, but the ranks and values of the
tensors a node receives are only known when it runs. Without these checks an input of the wrong rank or
an empty "scalar" failed inside NumPy (``tuple index out of range``, ``not enough values to unpack``);
with them the error names the operator, the input and what it should have been.

>>> import numpy as np
>>> require_rank("DepthToSpace", np.zeros((2, 3)), "input", rank=4)
Traceback (most recent call last):
...
d5.errors.ShapeError: DepthToSpace: input must be a 4-D tensor, got shape (2, 3)
>>> scalar_input("TopK", np.array([3]), "k")
3
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from d5.errors import ShapeError


def require_rank(op_name: str, x: Any, what: str, rank: int | None = None, at_least: int | None = None) -> np.ndarray:
    """``x`` as an array after checking its rank is ``rank`` (or at least ``at_least``); else a ShapeError."""
    array = np.asarray(x)
    if rank is not None and array.ndim != rank:
        raise ShapeError(f"{op_name}: {what} must be a {rank}-D tensor, got shape {array.shape}")
    if at_least is not None and array.ndim < at_least:
        raise ShapeError(f"{op_name}: {what} must have at least {at_least} dimension{'' if at_least == 1 else 's'}, "
                         f"got shape {array.shape}")
    return array


def require_broadcastable(op_name: str, value: Any, what: str, shape: tuple[int, ...]) -> np.ndarray:
    """``value`` as an array after checking it broadcasts against a tensor of ``shape`` without changing that
    shape (a scale or bias applied to the tensor); else a ShapeError."""
    array = np.asarray(value)
    try:
        fits = np.broadcast_shapes(array.shape, tuple(shape)) == tuple(shape)
    except ValueError:
        fits = False
    if not fits:
        raise ShapeError(f"{op_name}: {what} of shape {array.shape} does not broadcast to the input's shape "
                         f"{tuple(shape)}")
    return array


def scalar_input(op_name: str, value: Any, what: str, kind: Callable[[Any], Any] = int) -> Any:
    """The one number in ``value`` (a scalar or a 1-element tensor, as ONNX allows for k, axis, depth...)
    converted by ``kind``; a ShapeError for an empty or longer tensor or a non-number."""
    array = np.asarray(value)
    if array.size != 1:
        raise ShapeError(f"{op_name}: {what} must be a single value (a scalar or a 1-element tensor), got shape "
                         f"{array.shape}")
    if array.dtype.kind not in "biuf" and array.dtype.name != "bfloat16":
        raise ShapeError(f"{op_name}: {what} must be a number, got dtype {array.dtype}")
    number = array.reshape(()).item()
    if kind is int and isinstance(number, float) and not np.isfinite(number):
        raise ShapeError(f"{op_name}: {what} must be a finite number, got {number}")
    return kind(number)


__all__ = ["require_broadcastable", "require_rank", "scalar_input"]
