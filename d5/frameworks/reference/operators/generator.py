"""Reference generators (ONNX semantics, newest opset): Constant, ConstantOfShape, Range and EyeLike.

None of them has a gradient: Constant and ConstantOfShape declare ``Gradient.NONE`` (their inputs, if any, are
integer shapes); EyeLike's output is locally constant and Range's is treated as constant (``Gradient.ZERO``).

>>> import numpy as np
>>> from d5.frameworks.reference.operators import create_operator
>>> create_operator("Range", {}).forward([np.array(1), np.array(7), np.array(2)])
array([1, 3, 5])
"""
from __future__ import annotations

import numpy as np

from d5.errors import ShapeError
from d5.frameworks.reference.operators import ReferenceOp, register
from d5.frameworks.reference.operators._checks import int_list, onnx_dtype, scalar_input
from d5.network.memory import check_allocation
from d5.ops.onnx_attributes import adopt, operator_attributes
from d5.ops.onnx_semantics import as_text, range_length, tensor_attribute
from d5.ops.operator import Gradient


@register("Constant")
class Constant(ReferenceOp):
    """A constant tensor from exactly one of the attributes ``value`` (tensor), ``value_float(s)``,
    ``value_int(s)``, ``value_string(s)``."""

    gradient = Gradient.NONE

    def __init__(self, **attributes) -> None:
        super().__init__()
        name, value = operator_attributes("Constant", attributes)  # the one value attribute given
        if name == "sparse_value":
            raise ShapeError("Constant: sparse_value is not supported by the reference framework; use a dense 'value'")
        if name == "value":
            self.value = tensor_attribute(value)
        elif name in ("value_float", "value_floats"):
            self.value = np.asarray(value if name == "value_float" else list(value), dtype=np.float32)
        elif name in ("value_int", "value_ints"):
            self.value = np.asarray(value if name == "value_int" else list(value), dtype=np.int64)
        else:
            decoded = [as_text(s) for s in ([value] if name == "value_string" else list(value))]
            self.value = np.asarray(decoded[0] if name == "value_string" else decoded, dtype=object)

    def forward(self, inputs):
        return self.value

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return ()


@register("ConstantOfShape")
class ConstantOfShape(ReferenceOp):
    """A tensor of the shape given by the (int64) input, filled with ``value`` (a one-element tensor; default
    float32 0)."""

    gradient = Gradient.NONE

    def __init__(self, **attributes) -> None:
        super().__init__()
        value = operator_attributes("ConstantOfShape", attributes).value
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


_RANGE_STASH_DTYPES = {1: np.dtype(np.float32), 11: np.dtype(np.float64)}


@register("Range")
class Range(ReferenceOp):
    """``start, start + delta, ...`` up to (excluding) ``limit``; scalars of one dtype in, the same dtype out.

    ``stash_type`` (opset 27; 1 = float32, 11 = float64) is the precision float16/bfloat16 inputs are computed
    in before the result is cast back; it has no effect on other types. Without it (older opsets) the
    elements are computed in the inputs' own dtype.
    """

    # The element count is piecewise constant in the inputs; d5 treats the values as constants too (no gradient
    # reaches start or delta), as it always has: backpropagation stops here instead of failing.
    gradient = Gradient.ZERO

    def __init__(self, **attributes) -> None:
        super().__init__()
        stash_type = operator_attributes("Range", attributes).stash_type
        self.stash_dtype = None if stash_type is None else _RANGE_STASH_DTYPES[stash_type]

    def forward(self, inputs):
        for value, what in zip(inputs[:3], ("start", "limit", "delta")):
            scalar_input("Range", value, what, float)  # each must be one number
        start, limit, delta = (np.asarray(v).reshape(()) for v in inputs[:3])
        dtype = start.dtype
        compute = self.stash_dtype if self.stash_dtype is not None and dtype.name in ("float16", "bfloat16") else dtype
        start, delta = start.astype(compute), delta.astype(compute)
        count = range_length(start, limit, delta)
        check_allocation("Range output", [count], compute)
        return (start + np.arange(count, dtype=compute) * delta).astype(dtype, copy=False)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return None, None, None


@register("EyeLike")
class EyeLike(ReferenceOp):
    """A 2-D identity-like matrix shaped like the input, ones on diagonal ``k``, of ``dtype`` (default: the
    input's)."""

    gradient = Gradient.ZERO  # an identity: locally constant

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("EyeLike", attributes))

    def forward(self, inputs):
        x = inputs[0]
        if x.ndim != 2:
            raise ShapeError(f"EyeLike: the input must be 2-D, got shape {x.shape}")
        dtype = x.dtype if self.dtype is None else onnx_dtype(self.dtype)
        return np.eye(x.shape[0], x.shape[1], k=self.k, dtype=dtype)
