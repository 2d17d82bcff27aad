"""L0 — operators: the operator interface, validation of forward and gradient, C++ operators compiled at run
time (:func:`compile_cpp_op`), and operator benchmarks.

Framework-neutral: nothing here imports a deep-learning framework.
"""
from d5.ops.cpp_build import compile_cpp_op, include_dir
from d5.ops.operator import CustomOp, CustomPythonOp, Gradient, as_tuple
from d5.ops.validation import ForwardCheckResult, GradientCheckResult, test_forward, test_gradient

__all__ = ["CustomOp", "CustomPythonOp", "Gradient", "as_tuple", "compile_cpp_op", "include_dir",
           "ForwardCheckResult", "GradientCheckResult", "test_forward", "test_gradient"]
