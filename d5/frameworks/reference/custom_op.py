"""Custom operators on the reference framework: a d5.ops.CustomOp already is a NumPy operator."""
from __future__ import annotations

from typing import Any

from d5.frameworks.native_executor import check_custom_op
from d5.ops.operator import CustomOp


def custom_op(op: CustomOp) -> CustomOp:
    """Return ``op`` as an operator of this framework (the reference framework runs CustomOps as they are).

    >>> import numpy as np
    >>> from d5.ops import CustomPythonOp
    >>> class Double(CustomPythonOp):
    ...     def forward(self, inputs): return 2 * inputs[0]
    ...     def backward(self, grads, fwd_inputs, fwd_outputs): return 2 * grads[0]
    >>> custom_op(Double()).forward([np.ones(2)])
    array([2., 2.])
    """
    return check_custom_op(op, "reference")


def native_op(op_type: str, opset: int | None = None, **attributes: Any) -> CustomOp:
    """The reference framework's own implementation of ONNX operator ``op_type`` (with these attributes, at
    ``opset``): its operators already are d5 CustomOps, so this is the operator itself -- the oracle other
    frameworks' ``native_op`` are validated against.

    >>> import numpy as np
    >>> native_op("Relu").forward([np.array([-1.0, 2.0])]).tolist()
    [0.0, 2.0]
    """
    from d5.frameworks.reference.operators import create_operator

    return create_operator(op_type, attributes, opset)
