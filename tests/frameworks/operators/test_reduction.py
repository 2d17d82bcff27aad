"""Every framework's reduction operators (native_op) against the reference operators: the scans CumSum and CumProd
(exclusive, reverse, integer dtypes kept), ReduceMax/ReduceMin over empty sets (the reductions' identities) and over
the wide unsigned dtypes, and the errors bad inputs raise."""
from __future__ import annotations

import numpy as np
import pytest

from _oracle import _distinct, _ints, _rand, case_params, check_against_reference, check_error, framework_params
from d5.errors import ShapeError


def _uints(dtype, *shape):
    return lambda rng: rng.integers(0, np.iinfo(dtype).max, shape, dtype=dtype, endpoint=True)


# (id, op_type, attributes, [input makers], options): see _oracle.py
CASES = [
    ("cumsum", "CumSum", {}, [_rand(2, 5), _ints(1, np.int32)], {}),
    ("cumsum_exclusive", "CumSum", {"exclusive": 1}, [_rand(2, 5), _ints(-1)], {}),
    ("cumsum_reverse", "CumSum", {"reverse": 1}, [_rand(3, 4), _ints(0)], {}),
    ("cumsum_reverse_exclusive", "CumSum", {"reverse": 1, "exclusive": 1}, [_rand(3, 4, 2), _ints([1])], {}),
    ("cumsum_int32", "CumSum", {}, [_ints([[1, 2, 3], [4, 5, 6]], np.int32), _ints(0, np.int32)], {}),
    ("cumsum_int32_exclusive", "CumSum", {"exclusive": 1}, [_ints([1, 2, 3, 4, 5], np.int32), _ints(0, np.int32)], {}),
    ("cumsum_int8_wraps", "CumSum", {"reverse": 1}, [_ints([100, 100, 100], np.int8), _ints(0)], {}),
    ("cumsum_uint32_reverse", "CumSum", {"reverse": 1, "exclusive": 1}, [_uints(np.uint32, 2, 4), _ints(1)], {}),
    ("cumsum_empty_exclusive", "CumSum", {"exclusive": 1}, [_rand(0), _ints(0)], {}),
    ("cumsum_inf_exclusive", "CumSum", {"exclusive": 1}, [_ints([1.0, np.inf, 2.0], np.float32), _ints(0)], {}),
    ("cumprod_int32", "CumProd", {}, [_ints([[1, 2, 3], [4, 5, 6]], np.int32), _ints(1, np.int32)], {}),
    ("cumprod_int64_reverse_exclusive", "CumProd", {"exclusive": 1, "reverse": 1},
     [_ints([[1, -2, 3], [4, 0, 6]]), _ints(-1)], {}),
    ("cumprod_uint64_wraps", "CumProd", {}, [_uints(np.uint64, 5), _ints(0)], {}),
    ("reduce_max_empty_set", "ReduceMax", {"keepdims": 1}, [_rand(2, 0, 4), _ints([1])], {}),
    ("reduce_min_empty_set", "ReduceMin", {"keepdims": 0}, [_rand(2, 0, 4), _ints([1])], {}),
    ("reduce_max_empty_set_bool", "ReduceMax", {}, [_ints(np.zeros((2, 0, 4), bool), bool), _ints([1])], {}),
    ("reduce_min_empty_set_bool", "ReduceMin", {}, [_ints(np.zeros((2, 0, 4), bool), bool), _ints([1])], {}),
    ("reduce_max_empty_set_int32", "ReduceMax", {}, [_ints(np.zeros((0, 3)), np.int32)], {}),
    ("reduce_min_empty_set_uint8_attr", "ReduceMin", {"axes": [0]}, [_ints(np.zeros((0, 3)), np.uint8)],
     {"opset": 13}),
    ("reduce_max_uint64", "ReduceMax", {"keepdims": 0}, [_uints(np.uint64, 3, 4), _ints([1])], {}),
    ("reduce_min_uint16", "ReduceMin", {}, [_uints(np.uint16, 3, 4)], {}),
    ("reduce_max_attr_axes", "ReduceMax", {"axes": [0, -1], "keepdims": 0}, [_distinct(2, 3, 4)], {"opset": 13}),
    ("reduce_min_bool", "ReduceMin", {"keepdims": 0}, [_ints([[True, False], [True, True]], bool), _ints([1])], {}),
]


@pytest.mark.parametrize("framework, case", case_params(CASES))
def test_native_op_matches_reference(framework, case):
    check_against_reference(framework, case)


_SCAN_ERRORS = [
    (np.ones(5, np.float32), np.zeros(0, np.int32), r"axis \(input 1\) must be a single value"),
    (np.ones(5, np.float32), np.array([0, 0]), r"axis \(input 1\) must be a single value"),
    (np.ones((2, 3), np.float32), np.array(2), "out of range"),
    (np.array(1.0, np.float32), np.array(0), "at least 1 dimension"),
]


@pytest.mark.parametrize("framework, op_type, x, axis, match", framework_params(
    [(op_type, *row) for op_type in ("CumSum", "CumProd") for row in _SCAN_ERRORS]))
def test_bad_scan_inputs_raise_shape_errors(framework, op_type, x, axis, match):
    check_error(framework, op_type, {}, [x, axis], ShapeError, match)
