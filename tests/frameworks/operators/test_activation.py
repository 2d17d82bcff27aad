"""Every framework's activation operators (native_op) against the reference operators: Shrink, Swish and SwiGLU
(forward and gradient, integer and float64 paths), and the errors bad inputs raise."""
from __future__ import annotations

import numpy as np
import pytest

from _oracle import _ints, _rand, case_params, check_against_reference, check_error, framework_params
from d5.errors import ShapeError

CASES = [
    ("shrink_default", "Shrink", {}, [_rand(3, 4, low=-2, high=2)], {}),
    ("shrink_soft", "Shrink", {"bias": 1.5, "lambd": 1.5}, [_rand(3, 4, low=-3, high=3)], {}),
    ("shrink_hard", "Shrink", {"lambd": 1.5}, [_ints([-2.0, -1.0, 0.0, 1.0, 2.0], np.float32)], {}),
    ("shrink_int8", "Shrink", {"bias": 1.5, "lambd": 1.0}, [_ints([-5, -1, 0, 1, 2, 5], np.int8)], {}),
    ("shrink_float64", "Shrink", {"bias": 0.25, "lambd": 0.5}, [lambda rng: rng.uniform(-2, 2, (2, 5))], {}),
    ("swish", "Swish", {}, [_rand(3, 4, low=-4, high=4)], {}),
    ("swish_alpha", "Swish", {"alpha": 0.5}, [_rand(3, 4, low=-4, high=4)], {}),
    ("swish_float64", "Swish", {"alpha": 2.0}, [lambda rng: rng.uniform(-4, 4, (2, 3))], {}),
    ("swiglu", "SwiGLU", {}, [_rand(2, 4, low=-3, high=3), _rand(2, 4, low=-3, high=3)], {}),
    ("swiglu_alpha", "SwiGLU", {"alpha": 0.5}, [_rand(2, 3, 4, low=-3, high=3), _rand(2, 3, 4)], {}),
]


@pytest.mark.parametrize("framework, case", case_params(CASES))
def test_native_op_matches_reference(framework, case):
    check_against_reference(framework, case)


@pytest.mark.parametrize("framework, op_type, attributes, arrays, error, match", framework_params([
    ("SwiGLU", {}, [np.ones((2, 4), np.float32), np.ones((2, 1), np.float32)], ShapeError,
     "A and B must have the same shape"),
    ("SwiGLU", {}, [np.ones((2, 4), np.float32)], ShapeError, "expected inputs"),
]))
def test_bad_inputs_raise_the_reference_errors(framework, op_type, attributes, arrays, error, match):
    check_error(framework, op_type, attributes, arrays, error, match)
