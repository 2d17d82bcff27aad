"""Support shared by the TensorFlow converters: ONNX data types, reading shape-like inputs (as Python values where
they are known while tracing, as tensors otherwise), and explicit per-side pads for TensorFlow's windows."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import tensorflow as tf

from d5.errors import ShapeError, UnsupportedOperatorError
from d5.ops.onnx_semantics import as_text, window_sides

# ONNX TensorProto.DataType -> TensorFlow dtype (the types TensorFlow has).
_ONNX_DTYPES = {1: tf.float32, 2: tf.uint8, 3: tf.int8, 4: tf.uint16, 5: tf.int16, 6: tf.int32, 7: tf.int64,
                9: tf.bool, 10: tf.float16, 11: tf.float64, 12: tf.uint32, 13: tf.uint64, 14: tf.complex64,
                15: tf.complex128, 16: tf.bfloat16}
_NAMED_DTYPES = {"float32": tf.float32, "float": tf.float32, "float64": tf.float64, "double": tf.float64,
                 "float16": tf.float16, "bfloat16": tf.bfloat16, "int64": tf.int64, "int32": tf.int32,
                 "int16": tf.int16, "int8": tf.int8, "uint8": tf.uint8, "bool": tf.bool}


def tf_dtype(to: Any) -> tf.DType:
    """The TensorFlow dtype of an ONNX data type number (or a dtype name, or a NumPy dtype)."""
    if isinstance(to, tf.DType):
        return to
    if isinstance(to, np.dtype):
        return tf.as_dtype(to)
    if isinstance(to, (bytes, str)):
        name = as_text(to).lower()
        if name in _NAMED_DTYPES:
            return _NAMED_DTYPES[name]
    elif int(to) in _ONNX_DTYPES:
        return _ONNX_DTYPES[int(to)]
    raise ShapeError(f"unsupported ONNX data type {to!r} for the TensorFlow framework; use one of "
                     f"{sorted(_ONNX_DTYPES)} (TensorProto.DataType)")


def static(value: Any) -> np.ndarray | None:
    """The value of a shape-like input as NumPy when it is known without running the graph (a NumPy array, an
    eager tensor, a constant or a computation TensorFlow folds while tracing); None when it is not."""
    if value is None:
        return None
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, (list, tuple, int, float)):
        return np.asarray(value)
    if isinstance(value, tf.Variable):
        return value.numpy() if tf.executing_eagerly() else None
    if isinstance(value, tf.Tensor):
        if hasattr(value, "numpy") and tf.executing_eagerly():
            return value.numpy()
        return tf.get_static_value(value)
    return np.asarray(value)


class ValueNeededWhileTracing(UnsupportedOperatorError):
    """A converter needs an input's value (a shape, axes) that only exists when the traced function runs: the
    executor then runs that network eagerly, where every value is known."""


def ints(value: Any, what: str = "input") -> list[int] | None:
    """A shape-like input (int64 tensor, sequence or scalar) as a list of Python ints; None stays None. A value
    only known when the graph runs is refused (UnsupportedOperatorError): use :func:`static` and a tensor
    computation for inputs that may be dynamic."""
    if value is None:
        return None
    known = static(value)
    if known is None:
        raise ValueNeededWhileTracing(f"the TensorFlow framework needs {what} as a value known while tracing, not a "
                                       "tensor computed from the data")
    return [int(v) for v in np.asarray(known).reshape(-1)]


def scalar(value: Any, kind=float):
    """A 0-d/1-element input as a Python number (it must be known while tracing)."""
    return kind(ints(value)[0]) if kind is int else kind(np.asarray(static(value)).reshape(-1)[0])


def static_shape(x: tf.Tensor) -> tuple[int, ...]:
    """``x``'s shape as Python ints (the executor traces per input shape, so shapes are known); a ShapeError if
    some axis is not."""
    shape = x.shape.as_list()
    if None in shape:
        raise ShapeError(f"the TensorFlow framework needs static shapes here, got {shape}")
    return tuple(shape)


def resolve_pads(op_name: str, spatial: Sequence[int], kernel: Sequence[int], strides, dilations, pads,
                 auto_pad: str, ceil_mode: bool = False, clamp_same_pads: bool = False):
    """The window geometry and, per spatial axis, the (begin, end) amounts to pad (negative: crop) the input by
    so that plain stride/dilation windows with no padding ("VALID") give exactly ONNX's output (ceil_mode
    overhang included). Memoized per geometry."""
    def optional(values):
        return None if not values else tuple(values)

    return window_sides(op_name, tuple(spatial), tuple(kernel), optional(strides), optional(dilations),
                         optional(pads), auto_pad, bool(ceil_mode), bool(clamp_same_pads))


def pad_sides(x: tf.Tensor, sides: Sequence[tuple[int, int]], first_spatial: int, value: float = 0.0) -> tf.Tensor:
    """Pad (or crop, for negative amounts) the spatial axes of ``x`` starting at axis ``first_spatial`` (2 for
    ONNX layout, 1 for channels-last) by ``sides`` (begin, end) each."""
    if all(b == 0 and e == 0 for b, e in sides):
        return x
    rank = x.shape.rank
    crop = [slice(None)] * rank
    paddings = [[0, 0] for _ in range(rank)]
    for offset, (begin, end) in enumerate(sides):
        axis = first_spatial + offset
        paddings[axis] = [max(begin, 0), max(end, 0)]
        if begin < 0 or end < 0:
            crop[axis] = slice(max(-begin, 0), None if end >= 0 else end)
    if any(sum(p) for p in paddings):
        x = tf.pad(x, paddings, constant_values=tf.cast(value, x.dtype))
    return x[tuple(crop)] if any(s != slice(None) for s in crop) else x
