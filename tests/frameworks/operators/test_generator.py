"""Every framework's generator operators (native_op) against the reference operators: EyeLike (dtype, off-diagonal
k), Range (computed in the inputs' dtype or stash_type, as the reference), ConstantOfShape and Constant, and the
errors bad inputs raise."""
from __future__ import annotations

import numpy as np
import pytest

from _oracle import _ints, _rand, case_params, check_against_reference, check_error, framework_params
from d5.errors import InsufficientMemoryError, ShapeError

# (id, op_type, attributes, [input makers], options): see _oracle.py
CASES = [
    ("eyelike", "EyeLike", {}, [_ints(np.zeros((4, 4)), np.int32)], {}),
    ("eyelike_dtype", "EyeLike", {"dtype": 11}, [_ints(np.zeros((3, 4)), np.int32)], {}),
    ("eyelike_above", "EyeLike", {"dtype": 1, "k": 1}, [_ints(np.zeros((4, 5)), np.int32)], {}),
    ("eyelike_below_float", "EyeLike", {"k": -2}, [_rand(5, 3)], {}),
    ("eyelike_beyond", "EyeLike", {"k": 7, "dtype": 9}, [_rand(3, 4)], {}),
    ("eyelike_empty", "EyeLike", {}, [_rand(0, 3)], {}),
    ("range_int32_negative_delta", "Range", {}, [_ints(10, np.int32), _ints(6, np.int32), _ints(-3, np.int32)], {}),
    ("range_float32", "Range", {}, [_ints(0.1, np.float32), _ints(7.3, np.float32), _ints(0.7, np.float32)], {}),
    ("range_float64", "Range", {}, [_ints(-1.0, np.float64), _ints(1.0, np.float64), _ints(0.3, np.float64)], {}),
    ("range_float16", "Range", {}, [_ints(0.5, np.float16), _ints(9.0, np.float16), _ints(0.3, np.float16)], {}),
    ("range_float16_stash", "Range", {"stash_type": 1},
     [_ints(0.5, np.float16), _ints(9.0, np.float16), _ints(0.3, np.float16)], {}),
    ("range_empty", "Range", {}, [_ints(5), _ints(1), _ints(2)], {}),
    ("constant_of_shape_int", "ConstantOfShape", {"value": np.array([7], np.int32)}, [_ints([2, 0, 3])], {}),
    ("constant_of_shape_default", "ConstantOfShape", {}, [_ints([3])], {}),
    ("constant_scalar", "Constant", {"value": np.array(1.5, np.float32)}, [], {}),
    ("constant_scalar_int", "Constant", {"value_int": 3}, [], {}),
]


@pytest.mark.parametrize("framework, case", case_params(CASES))
def test_native_op_matches_reference(framework, case):
    check_against_reference(framework, case)


@pytest.mark.parametrize("framework, op_type, attributes, arrays, error, match", framework_params([
    ("Range", {}, [np.arange(5), np.array(9), np.array(1)], ShapeError, "Range: start must be a single value"),
    ("Range", {}, [np.array(1), np.array(9), np.array(0)], ShapeError, "delta must not be 0"),
    ("Range", {}, [np.array(0.0), np.array(np.inf), np.array(1.0)], ShapeError, "no finite number"),
    ("Range", {}, [np.array(0.0), np.array(1e18), np.array(1e-3)], InsufficientMemoryError, "Range output"),
    ("EyeLike", {}, [np.ones(3, np.float32)], ShapeError, "must be 2-D"),
    ("ConstantOfShape", {}, [np.array([2, -1])], ShapeError, "non-negative"),
    ("Range", {"stash_type": 7}, None, ShapeError, "stash_type must be"),
]))
def test_bad_inputs_raise_the_reference_errors(framework, op_type, attributes, arrays, error, match):
    check_error(framework, op_type, attributes, arrays, error, match)
