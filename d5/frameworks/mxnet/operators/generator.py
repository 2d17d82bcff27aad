"""Generators for the MXNet framework: Constant, ConstantOfShape, Range, EyeLike. Their outputs carry no gradient
(Range's values are treated as constants, EyeLike's output is locally constant), as in the reference.

Each output depends only on attributes, shapes and shape-like values, which are all known while the executor
composes a graph (shapes are static there): the converters compute it as a NumPy value, which the executor folds
into the graph as a constant, as Shape's is. ConstantOfShape's shape and Range's bounds are read with
:func:`~d5.frameworks.mxnet.operators._helpers.ints`/``scalar``: bounds computed from the data make the executor
run the network node by node, where integer bounds are values. (Floating bounds still reach a converter as
tensors there: MXNet's static shapes cannot hold a Range whose length depends on floating data.)

>>> import numpy as np
>>> from d5.frameworks.mxnet.custom_op import native_op
>>> native_op("Range").forward([np.array(1), np.array(7), np.array(2)])
array([1, 3, 5])
"""
from __future__ import annotations

import numpy as np

from d5.errors import ShapeError
from d5.frameworks.mxnet.operators import MXOp, register
from d5.frameworks.mxnet.operators._helpers import ValueNeededWhileTracing, dtype_of, ints, shape_of, static
from d5.frameworks.mxnet.tensors import MX_BFLOAT16
from d5.network.memory import check_allocation
from d5.ops.onnx_attributes import operator_attributes
from d5.ops.onnx_semantics import as_text, range_length, tensor_attribute


def _onnx_dtype(to) -> np.dtype:
    """The NumPy dtype of an ONNX data type number (the values are NumPy here: any type ONNX has)."""
    from onnx import helper

    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(int(to)))
    except (KeyError, ValueError, TypeError):
        raise ShapeError(f"EyeLike: unknown ONNX data type {to}; use a TensorProto.DataType value") from None


@register("Constant")
class Constant(MXOp):
    """The tensor of exactly one of the attributes ``value``, ``value_float(s)``, ``value_int(s)``,
    ``value_string(s)`` (strings stay NumPy values: only reference operators read them)."""

    def __init__(self, **attributes) -> None:
        name, value = operator_attributes("Constant", attributes)  # the one value attribute given
        if name == "sparse_value":
            raise ShapeError("Constant: sparse_value is not supported by the MXNet framework; use a dense 'value'")
        if name == "value":
            self.value = np.array(tensor_attribute(value), order="C", copy=True)
        elif name in ("value_float", "value_floats"):
            self.value = np.asarray(value if name == "value_float" else list(value), dtype=np.float32)
        elif name in ("value_int", "value_ints"):
            self.value = np.asarray(value if name == "value_int" else list(value), dtype=np.int64)
        else:
            decoded = [as_text(s) for s in ([value] if name == "value_string" else list(value))]
            self.value = np.asarray(decoded[0] if name == "value_string" else decoded, dtype=object)

    def __call__(self):
        return self.value.copy()


@register("ConstantOfShape")
class ConstantOfShape(MXOp):
    """A tensor of the shape given by the (int64) input, filled with ``value`` (one element; default float32 0)."""

    def __init__(self, **attributes) -> None:
        value = operator_attributes("ConstantOfShape", attributes).value
        fill = np.zeros(1, np.float32) if value is None else np.asarray(tensor_attribute(value))
        if fill.size != 1:
            raise ShapeError(f"ConstantOfShape: value must hold exactly one element, got shape {fill.shape}")
        self.fill = fill.reshape(())

    def __call__(self, shape):
        dims = ints(shape, "ConstantOfShape's shape")
        if any(d < 0 for d in dims):
            raise ShapeError(f"ConstantOfShape: dimensions must be non-negative, got {dims}")
        check_allocation("ConstantOfShape output", dims, self.fill.dtype)
        return np.full(dims, self.fill, dtype=self.fill.dtype)


_RANGE_STASH_DTYPES = {1: np.dtype(np.float32), 11: np.dtype(np.float64)}


@register("Range")
class Range(MXOp):
    """``start, start + delta, ...`` up to (excluding) ``limit``, computed as the reference does: in the inputs'
    own dtype, or in ``stash_type`` (opset 27: 1 = float32, 11 = float64) for float16/bfloat16 inputs."""

    value_inputs = (0, 1, 2)  # the output's length depends on all three, floating or not

    def __init__(self, **attributes) -> None:
        stash_type = operator_attributes("Range", attributes).stash_type
        self.stash_dtype = None if stash_type is None else _RANGE_STASH_DTYPES[stash_type]

    def __call__(self, start, limit, delta):
        for value, what in ((start, "start"), (limit, "limit"), (delta, "delta")):
            if int(np.prod(shape_of(value))) != 1:
                raise ShapeError(f"Range: {what} must be a single value (a scalar or a 1-element tensor), got shape "
                                 f"{shape_of(value)}")
        known = [static(v) for v in (start, limit, delta)]
        if any(v is None for v in known):
            raise ValueNeededWhileTracing("the MXNet framework needs Range's start, limit and delta as values known "
                                          "while tracing (its length depends on them)")
        start, limit, delta = (np.asarray(v).reshape(()) for v in known)
        dtype = start.dtype
        compute = self.stash_dtype if self.stash_dtype is not None and dtype.name in ("float16", "bfloat16") \
            else dtype
        start, delta = start.astype(compute), delta.astype(compute)
        count = range_length(start, limit, delta)
        check_allocation("Range output", [count], compute)
        return (start + np.arange(count, dtype=compute) * delta).astype(dtype, copy=False)


@register("EyeLike")
class EyeLike(MXOp):
    """A 2-D matrix shaped like the input with ones on diagonal ``k`` (above the main one for k > 0), of ``dtype``
    (default: the input's)."""

    def __init__(self, **attributes) -> None:
        eye = operator_attributes("EyeLike", attributes)
        self.dtype, self.k = None if eye.dtype is None else _onnx_dtype(eye.dtype), eye.k

    def __call__(self, x):
        shape = shape_of(x)
        if len(shape) != 2:
            raise ShapeError(f"EyeLike: the input must be 2-D, got shape {shape}")
        dtype = self.dtype
        if dtype is None:
            dtype = dtype_of(x)
            if dtype == MX_BFLOAT16:  # MXNet's bfloat16 record: the value is ml_dtypes' bfloat16
                import ml_dtypes

                dtype = np.dtype(ml_dtypes.bfloat16)
        return np.eye(shape[0], shape[1], k=self.k, dtype=dtype)
