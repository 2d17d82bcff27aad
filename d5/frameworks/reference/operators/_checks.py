"""NumPy-side checks and conversions the reference operators share: ranks, one-value inputs, integer tensors,
optional inputs given as empty tensors, int lists from inputs, ONNX data type numbers, compute dtypes.

Framework-neutral rules (axes, optional inputs, broadcasting, attribute parsing) are in
:mod:`d5.ops.onnx_semantics`; what is here reads NumPy arrays.

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

from typing import Any, Callable, Sequence

import numpy as np

from d5.errors import ShapeError
from d5.ops.onnx_semantics import optional_input


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


def require_integer(op_name: str, *arrays: np.ndarray) -> None:
    """A ShapeError unless every array holds integers (bitwise operators)."""
    for array in arrays:
        if array.dtype.kind not in "iu":
            raise ShapeError(f"{op_name} takes integer tensors, got {array.dtype}; Cast to an integer type first")


def optional_array(inputs: Sequence[Any], index: int) -> np.ndarray | None:
    """Input ``index`` as an array, or None when absent or empty (ONNX's way of skipping an optional input).

    >>> optional_array([np.zeros(2), np.zeros(0)], 1) is None, optional_array([np.zeros(2)], 0).shape
    (True, (2,))
    """
    value = optional_input(inputs, index)
    if value is None:
        return None
    value = np.asarray(value)
    return None if value.size == 0 else value


def int_list(value: Any) -> list[int] | None:
    """An axes/shape/indices attribute or input as a list of Python ints (None stays None).

    >>> int_list(np.array([1, -1])), int_list(None)
    ([1, -1], None)
    """
    if value is None:
        return None
    return [int(v) for v in np.asarray(value).reshape(-1)]


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


def float_compute_dtype(*arrays) -> np.dtype:
    """float64 when any array is float64, else float32: the precision the NumPy transformer blocks compute in
    (RMSNormalization, RotaryEmbedding, Swish, SwiGLU; narrow floats are cast back afterwards)."""
    return np.dtype(np.float64) if any(np.asarray(a).dtype == np.float64 for a in arrays) else np.dtype(np.float32)


__all__ = ["float_compute_dtype", "int_list", "onnx_dtype", "optional_array", "require_broadcastable",
           "require_integer", "require_rank", "scalar_input"]
