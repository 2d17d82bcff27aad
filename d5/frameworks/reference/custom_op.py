"""Custom operators on the reference framework: a d5.ops.CustomOp already is a NumPy operator."""
from __future__ import annotations

from d5.errors import UnsupportedOperatorError
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
    if not isinstance(op, CustomOp):
        raise UnsupportedOperatorError(f"custom_op expects a d5.ops.CustomOp, got {type(op).__name__}")
    return op
