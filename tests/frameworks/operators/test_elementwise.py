"""Every framework's elementwise operators (native_op) against the reference operators: Mod, the trigonometric and
hyperbolic functions, IsInf, the bit operators, and the integer paths (division by 0 and -1, uint16/32/64 computed
bit for bit as NumPy does), plus the errors bad inputs raise (the reference's classes and messages)."""
from __future__ import annotations

import numpy as np
import pytest

from _oracle import _ints, _rand, case_params, check_against_reference, check_error, framework_params
from d5.errors import ShapeError, UnsupportedOperatorError

# The reference's NumPy warns where the cases divide integers by 0 or overflow on purpose.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def _full_range(dtype, *shape):
    """Integers over the whole range of ``dtype``: its extremes and small values (signs, 0, 1) first, then
    random ones, shuffled (each operand differently, so broadcasting pairs extremes with small values)."""
    def make(rng):
        info = np.iinfo(dtype)
        size = int(np.prod(shape))
        edges = [info.min, info.max, 0, 1, 2, info.max // 2] + ([-1, info.min + 1] if info.min else [])
        small = rng.integers(max(info.min, -9), 9, len(edges))
        values = rng.integers(info.min, info.max, size, dtype=dtype, endpoint=True)
        chosen = np.array(edges + list(small), dtype=object)[:size]
        values[:len(chosen)] = chosen.astype(dtype)
        return rng.permutation(values).reshape(shape)
    return make


def _mixed_signs(dtype):
    return _ints([[-7, 7, -7, 7, 0, 5], [3, -3, 0, 1, -1, 4]], dtype)


_INT64_MIN = np.iinfo(np.int64).min

# (id, op_type, attributes, [input makers], options): see _oracle.py
CASES = [
    # -- Mod: the sign of the divisor (fmod=0) or of the dividend (fmod=1); gradients 1 and -floor/trunc(a/b)
    ("mod_float_fmod", "Mod", {"fmod": 1}, [_rand(3, 4, low=-5, high=5), _rand(4, low=0.5, high=2)], {}),
    ("mod_float_python", "Mod", {}, [_rand(3, 4, low=-5, high=5), _rand(3, 1, low=-2, high=-0.5)], {}),
    ("mod_int32", "Mod", {}, [_mixed_signs(np.int32), _ints([2, -3, 5, 0, -1, 3], np.int32)], {}),
    ("mod_int8_fmod", "Mod", {"fmod": 1}, [_mixed_signs(np.int8), _ints([2, -3, 5, 0, -1, 3], np.int8)], {}),
    ("mod_int64_extremes", "Mod", {}, [_full_range(np.int64, 4, 8), _full_range(np.int64, 8)], {}),
    ("mod_uint64", "Mod", {}, [_full_range(np.uint64, 4, 8), _full_range(np.uint64, 8)], {}),
    ("mod_uint16_broadcast", "Mod", {}, [_full_range(np.uint16, 3, 2, 5), _ints([7], np.uint16)], {}),
    # -- trigonometric and hyperbolic functions, inside their domains (gradients too)
    ("tan", "Tan", {}, [_rand(3, 4)], {}),
    ("asin", "Asin", {}, [_rand(3, 4, low=-0.9, high=0.9)], {}),
    ("acos", "Acos", {}, [_rand(3, 4, low=-0.9, high=0.9)], {}),
    ("atan", "Atan", {}, [_rand(3, 4, low=-3, high=3)], {}),
    ("sinh", "Sinh", {}, [_rand(3, 4, low=-2, high=2)], {}),
    ("cosh", "Cosh", {}, [_rand(3, 4, low=-2, high=2)], {}),
    ("asinh", "Asinh", {}, [_rand(3, 4, low=-3, high=3)], {}),
    ("acosh", "Acosh", {}, [_rand(3, 4, low=1.1, high=4)], {}),
    ("atanh", "Atanh", {}, [_rand(3, 4, low=-0.9, high=0.9)], {}),
    ("asin_outside_domain", "Asin", {}, [_ints([1.5, -2.0, 0.5], np.float32)], {}),
    # -- IsInf
    ("isinf", "IsInf", {}, [_ints([-1.2, np.nan, np.inf, 2.8, -np.inf, np.inf], np.float32)], {}),
    ("isinf_positive", "IsInf", {"detect_negative": 0}, [_ints([np.inf, -np.inf, 1.0], np.float32)], {}),
    ("isinf_negative", "IsInf", {"detect_positive": 0}, [_ints([np.inf, -np.inf, 1.0], np.float64)], {}),
    ("isinf_neither", "IsInf", {"detect_negative": 0, "detect_positive": 0}, [_ints([np.inf, -np.inf], np.float32)],
     {}),
    ("isinf_float16", "IsInf", {}, [_ints([np.inf, -np.inf, 1.0], np.float16)], {}),
    # -- bits
    ("bitshift_left_uint8", "BitShift", {"direction": "LEFT"},
     [_ints([16, 4, 1], np.uint8), _ints([1, 2, 3], np.uint8)], {}),
    ("bitshift_right_uint16", "BitShift", {"direction": "RIGHT"},
     [_ints([16, 4, 65535], np.uint16), _ints([1, 2, 15], np.uint16)], {}),
    ("bitshift_left_uint32", "BitShift", {"direction": "LEFT"},
     [_ints([16, 4, 2 ** 31], np.uint32), _ints([1, 31, 1], np.uint32)], {}),
    ("bitshift_right_uint64", "BitShift", {"direction": "RIGHT"}, [_full_range(np.uint64, 12), _ints(
        [0, 1, 63, 64, 70, 3, 2, 5, 62, 1, 0, 33], np.uint64)], {}),
    ("bitshift_left_uint64", "BitShift", {"direction": "LEFT"}, [_full_range(np.uint64, 12), _ints(
        [0, 1, 63, 64, 70, 3, 2, 5, 62, 1, 0, 33], np.uint64)], {}),
    ("bitshift_right_int8_negative", "BitShift", {"direction": "RIGHT"},
     [_ints([-16, -1, 16, -128], np.int8), _ints([2, 7, 9, -1], np.int8)], {}),
    ("bitshift_left_int32_overflow", "BitShift", {"direction": "LEFT"},
     [_ints([1, -1, 3, 5], np.int32), _ints([31, 31, 32, -2], np.int32)], {}),
    ("bitshift_broadcast", "BitShift", {"direction": "LEFT"}, [_ints([[1], [2]], np.int64), _ints([0, 1, 2], np.int64)],
     {}),
    ("bitwise_and_int32", "BitwiseAnd", {}, [_full_range(np.int32, 3, 4), _full_range(np.int32, 4)], {}),
    ("bitwise_or_uint64", "BitwiseOr", {}, [_full_range(np.uint64, 3, 4), _full_range(np.uint64, 4)], {}),
    ("bitwise_xor_uint16", "BitwiseXor", {}, [_full_range(np.uint16, 2, 8), _full_range(np.uint16, 2, 8)], {}),
    ("bitwise_not_int8", "BitwiseNot", {}, [_full_range(np.int8, 2, 8)], {}),
    ("bitwise_not_uint16", "BitwiseNot", {}, [_full_range(np.uint16, 2, 8)], {}),
    ("bitwise_not_uint64", "BitwiseNot", {}, [_full_range(np.uint64, 2, 8)], {}),
    ("bitcast_float32_to_int32", "BitCast", {"to": 6}, [_rand(2, 3)], {}),
    ("bitcast_int64_to_float64", "BitCast", {"to": 11}, [_ints([1, 2 ** 62, -5], np.int64)], {}),
    ("bitcast_uint16_to_int16", "BitCast", {"to": 5}, [_ints([1, 65535, 32768], np.uint16)], {}),
    ("bitcast_bool_to_uint8", "BitCast", {"to": 2}, [_ints([True, False, True], bool)], {}),
    ("bitcast_scalar", "BitCast", {"to": 6}, [_ints(1.0, np.float32)], {}),
    # -- integer division: truncation, by 0 (NumPy's 0) and by -1 (INT_MIN / -1 wraps, never traps: torch's int64
    # kernel would raise SIGFPE)
    ("div_int32_signs", "Div", {}, [_mixed_signs(np.int32), _ints([2, -3, 5, 0, -1, 3], np.int32)], {}),
    ("div_int64_extremes", "Div", {}, [_full_range(np.int64, 4, 8), _full_range(np.int64, 8)], {}),
    ("div_uint8_by_zero", "Div", {}, [_ints([7, 255, 0], np.uint8), _ints([0, 2, 0], np.uint8)], {}),
    ("div_int64_min_by_minus_one", "Div", {}, [_ints([_INT64_MIN, 5]), _ints([-1, -1])], {}),
    ("mod_int64_min_fmod_by_minus_one_and_zero", "Mod", {"fmod": 1}, [_ints([_INT64_MIN, 5]), _ints([-1, 0])], {}),
    # -- uint16/32/64, which frameworks have few kernels for (torch none): bit for bit as NumPy
    ("add_uint16", "Add", {}, [_full_range(np.uint16, 3, 8), _full_range(np.uint16, 8)], {}),
    ("add_uint64", "Add", {}, [_full_range(np.uint64, 3, 8), _full_range(np.uint64, 8)], {}),
    ("sub_uint32", "Sub", {}, [_full_range(np.uint32, 3, 8), _full_range(np.uint32, 8)], {}),
    ("sub_uint64", "Sub", {}, [_full_range(np.uint64, 3, 8), _full_range(np.uint64, 8)], {}),
    ("mul_uint64", "Mul", {}, [_full_range(np.uint64, 3, 8), _full_range(np.uint64, 8)], {}),
    ("div_uint16", "Div", {}, [_full_range(np.uint16, 3, 8), _full_range(np.uint16, 8)], {}),
    ("div_uint32", "Div", {}, [_full_range(np.uint32, 3, 8), _full_range(np.uint32, 8)], {}),
    ("div_uint64", "Div", {}, [_full_range(np.uint64, 8, 8), _full_range(np.uint64, 8)], {}),
    ("less_uint64", "Less", {}, [_full_range(np.uint64, 3, 8), _full_range(np.uint64, 8)], {}),
    ("less_equal_uint32", "LessOrEqual", {}, [_full_range(np.uint32, 3, 8), _full_range(np.uint32, 8)], {}),
    ("greater_uint16", "Greater", {}, [_full_range(np.uint16, 3, 8), _full_range(np.uint16, 8)], {}),
    ("greater_equal_uint64", "GreaterOrEqual", {}, [_full_range(np.uint64, 3, 8), _full_range(np.uint64, 8)], {}),
    ("equal_uint32", "Equal", {}, [_full_range(np.uint32, 3, 8), _full_range(np.uint32, 8)], {}),
    ("max_uint64", "Max", {}, [_full_range(np.uint64, 3, 8), _full_range(np.uint64, 8), _full_range(np.uint64, 3, 1)],
     {}),
    ("min_uint32", "Min", {}, [_full_range(np.uint32, 3, 8), _full_range(np.uint32, 8)], {}),
    ("min_uint16_single", "Min", {}, [_full_range(np.uint16, 8)], {}),
    ("sum_uint64", "Sum", {}, [_full_range(np.uint64, 3, 8), _full_range(np.uint64, 8), _full_range(np.uint64, 8)], {}),
    ("abs_uint32", "Abs", {}, [_full_range(np.uint32, 8)], {}),
    ("sign_uint64", "Sign", {}, [_full_range(np.uint64, 8)], {}),
    ("clip_uint16", "Clip", {}, [_full_range(np.uint16, 8), _ints(3, np.uint16), _ints(40000, np.uint16)], {}),
    ("neg_int16", "Neg", {}, [_full_range(np.int16, 8)], {}),
    # -- the float paths the uint support must leave as they were (gradients too), and a float-to-float Cast's
    ("max_float_ties", "Max", {}, [_ints([1.0, 2.0, 3.0], np.float32), _ints([1.0, 0.5, 4.0], np.float32)], {}),
    ("sum_single", "Sum", {}, [_rand(2, 3)], {}),
    ("clip_no_bounds", "Clip", {}, [_rand(2, 3)], {}),
    ("cast_float64_to_float32", "Cast", {"to": 1}, [lambda rng: rng.standard_normal(4)], {}),
]


@pytest.mark.parametrize("framework, case", case_params(CASES))
def test_native_op_matches_reference(framework, case):
    check_against_reference(framework, case)


@pytest.mark.parametrize("framework, op_type, attributes, arrays, error, match", framework_params([
    ("Add", {}, [np.ones((2, 3), np.float32), np.ones(4, np.float32)], ShapeError, "not broadcastable"),
    ("Mod", {}, [np.ones((2, 3), np.int32), np.ones(2, np.int32)], ShapeError, "not broadcastable"),
    ("Max", {}, [np.ones(3, np.float32), np.ones(2, np.float32)], ShapeError, "not broadcastable"),
    ("BitShift", {"direction": "LEFT"}, [np.ones(2, np.float32), np.ones(2, np.float32)], ShapeError,
     "takes integer tensors"),
    ("BitwiseAnd", {}, [np.ones(2, bool), np.ones(2, bool)], ShapeError, "takes integer tensors"),
    ("BitwiseNot", {}, [np.ones(2, np.float32)], ShapeError, "takes integer tensors"),
    ("BitCast", {"to": 7}, [np.ones(2, np.float32)], ShapeError, "differ in width"),
    ("And", {}, [np.ones(2, np.float32), np.ones(2, bool)], ShapeError, "take bool tensors"),
    ("Clip", {}, [np.ones(2, np.float32), np.zeros(2, np.float32)], ShapeError, "min must be a scalar"),
    ("BitShift", {"direction": "UP"}, None, ShapeError, "direction must be"),
    ("BitCast", {"to": 8}, [np.ones(2, np.float32)], UnsupportedOperatorError, "strings have no fixed bit width"),
]))
def test_bad_inputs_raise_the_reference_errors(framework, op_type, attributes, arrays, error, match):
    check_error(framework, op_type, attributes, arrays, error, match)
