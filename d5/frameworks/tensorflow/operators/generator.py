"""Generators as native TensorFlow operations: Constant, ConstantOfShape, Range, EyeLike. Their outputs carry no
gradient (Range's values are treated as constants, EyeLike's output is locally constant), as in the reference.

ConstantOfShape's shape and Range's bounds are read while tracing where they are known (the output shape is
then static and its size checked against the memory available); otherwise the output shape is dynamic.
"""
from __future__ import annotations

import numpy as np
import tensorflow as tf

from d5.errors import ShapeError, UnsupportedOperatorError
from d5.frameworks.tensorflow.operators import TFOp, register
from d5.frameworks.tensorflow.operators._helpers import static, tf_dtype
from d5.frameworks.tensorflow.tensors import as_tf_value
from d5.network.memory import check_allocation
from d5.ops.onnx_attributes import operator_attributes
from d5.ops.onnx_semantics import range_length, tensor_attribute


def _numpy_dtype(dtype: tf.DType) -> np.dtype:
    """The NumPy dtype of a TensorFlow dtype, for :func:`check_allocation` (bfloat16: two bytes, as float16)."""
    return np.dtype(np.float16) if dtype == tf.bfloat16 else np.dtype(dtype.as_numpy_dtype)


def _as_array(value) -> np.ndarray:
    # np.array, not np.ascontiguousarray: that makes a 0-d value 1-d (NumPy < 2).
    array = np.array(tensor_attribute(value), order="C", copy=True)
    if array.dtype == object or array.dtype.kind in "SU":
        raise ShapeError("the TensorFlow framework keeps strings out of its graphs (they stay NumPy, on the "
                         "reference); keep string constants out of the graph")
    return array


@register("Constant")
class Constant(TFOp):
    def __init__(self, **attributes) -> None:
        name, value = operator_attributes("Constant", attributes)  # the one value attribute given
        if name == "value":
            self.value = _as_array(value)
        elif name in ("value_float", "value_floats"):
            self.value = np.asarray(value if name == "value_float" else list(value), dtype=np.float32)
        elif name in ("value_int", "value_ints"):
            self.value = np.asarray(value if name == "value_int" else list(value), dtype=np.int64)
        else:
            raise ShapeError("Constant: string and sparse constants are not supported by the TensorFlow framework")

    def __call__(self):
        return as_tf_value(self.value)  # a constant of the traced graph (a fresh eager tensor eagerly)


@register("ConstantOfShape")
class ConstantOfShape(TFOp):
    def __init__(self, **attributes) -> None:
        value = operator_attributes("ConstantOfShape", attributes).value
        fill = np.zeros(1, np.float32) if value is None else _as_array(value)
        if fill.size != 1:
            raise ShapeError(f"ConstantOfShape: value must hold exactly one element, got shape {fill.shape}")
        self.fill = fill.reshape(())

    def __call__(self, shape):
        fill = as_tf_value(self.fill)
        known = static(shape)
        if known is None:  # computed from data inside a traced function: a dynamic shape
            return tf.fill(tf.cast(tf.reshape(shape, [-1]), tf.int64), fill)
        dims = [int(d) for d in np.asarray(known).reshape(-1)]
        if any(d < 0 for d in dims):
            raise ShapeError(f"ConstantOfShape: dimensions must be non-negative, got {dims}")
        check_allocation("ConstantOfShape output", dims, _numpy_dtype(fill.dtype))
        return tf.fill(tf.constant(dims, tf.int64, shape=[len(dims)]), fill)


_RANGE_STASH_DTYPES = {1: tf.float32, 11: tf.float64}


@register("Range")
class Range(TFOp):
    """``start, start + delta, ...`` up to (excluding) ``limit``, computed as the reference does: in the inputs'
    own dtype, or in ``stash_type`` (opset 27: 1 = float32, 11 = float64) for float16/bfloat16 inputs."""

    def __init__(self, **attributes) -> None:
        stash_type = operator_attributes("Range", attributes).stash_type
        self.stash_dtype = None if stash_type is None else _RANGE_STASH_DTYPES[stash_type]

    def __call__(self, start, limit, delta):
        for value, what in ((start, "start"), (limit, "limit"), (delta, "delta")):
            if value.shape.num_elements() != 1:
                raise ShapeError(f"Range: {what} must be a single value (a scalar or a 1-element tensor), got shape "
                                 f"{tuple(value.shape.as_list())}")
        start, limit, delta = (tf.stop_gradient(tf.reshape(v, [])) for v in (start, limit, delta))
        dtype = start.dtype
        if dtype == tf.bool:
            raise UnsupportedOperatorError("Range: the TensorFlow framework has no bool Range (ONNX's Range takes "
                                           "numbers); Cast the inputs first")
        compute = self.stash_dtype if self.stash_dtype is not None and dtype in (tf.float16, tf.bfloat16) \
            else dtype
        start, delta = tf.cast(start, compute), tf.cast(delta, compute)
        known = [static(v) for v in (start, limit, delta)]
        if all(v is not None for v in known):
            count = range_length(*(np.asarray(v).reshape(()) for v in known))
            check_allocation("Range output", [count], _numpy_dtype(compute))
        else:  # bounds computed from data inside a traced function: the count as a tensor
            steps = (tf.cast(limit, tf.float64) - tf.cast(start, tf.float64)) / tf.cast(delta, tf.float64)
            count = tf.cast(tf.maximum(tf.math.ceil(steps), 0), tf.int64)
        steps = tf.cast(tf.range(count, dtype=tf.int64), compute)
        return tf.cast(start + steps * delta, dtype)


@register("EyeLike")
class EyeLike(TFOp):
    """A 2-D matrix shaped like the input with ones on diagonal ``k`` (above the main one for k > 0), of
    ``dtype`` (default: the input's)."""

    def __init__(self, **attributes) -> None:
        eye = operator_attributes("EyeLike", attributes)
        self.dtype, self.k = None if eye.dtype is None else tf_dtype(eye.dtype), eye.k

    def __call__(self, x):
        if x.shape.rank != 2:
            raise ShapeError(f"EyeLike: the input must be 2-D, got shape {tuple(x.shape.as_list())}")
        dims = tf.shape(x, out_type=tf.int64)
        diagonal = tf.range(dims[1])[None, :] - tf.range(dims[0])[:, None]  # column - row
        return tf.cast(tf.equal(diagonal, self.k), x.dtype if self.dtype is None else self.dtype)
