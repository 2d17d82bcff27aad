"""L0 — operators: the operator interface, validation of forward and gradient, and operator benchmarks.

Framework-neutral: nothing here imports a deep-learning framework.
"""
from d5.ops.operator import CustomOp, CustomPythonOp, Gradient, as_tuple
from d5.ops.validation import ForwardCheckResult, GradientCheckResult, test_forward, test_gradient

__all__ = ["CustomOp", "CustomPythonOp", "Gradient", "as_tuple",
           "ForwardCheckResult", "GradientCheckResult", "test_forward", "test_gradient"]
