"""The PyTorch elementwise converters against the reference operators: Mod, the trigonometric and hyperbolic
functions, IsInf, the bit operators, and the integer paths (division by 0 and -1, uint16/32/64 computed bit for
bit as NumPy does), plus the errors bad inputs raise (the reference's classes)."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from _torch_oracle import _ints, _rand, check_against_reference  # noqa: E402
from d5.errors import ShapeError, UnsupportedOperatorError  # noqa: E402
from d5.frameworks.pytorch.operators import create_operator  # noqa: E402
from d5.frameworks.reference.operators import create_operator as reference_op  # noqa: E402

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


_FLOAT_EDGES = [-4.3, 7.2, 5.0, 4.3, -7.2, 8.0, 0.0, np.inf, 3.0, -1.0, 1e-30, 2.5]
_DIVISOR_EDGES = [2.1, -3.4, 8.0, -2.1, 3.4, 5.0, 2.0, 2.0, np.inf, np.inf, -1e30, -0.5]

# (id, op_type, attributes, [input makers], options)
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
    # -- integer division: truncation, by 0 (NumPy's 0) and by -1 (INT_MIN / -1 wraps, never traps)
    ("div_int32_signs", "Div", {}, [_mixed_signs(np.int32), _ints([2, -3, 5, 0, -1, 3], np.int32)], {}),
    ("div_int64_extremes", "Div", {}, [_full_range(np.int64, 4, 8), _full_range(np.int64, 8)], {}),
    ("div_uint8_by_zero", "Div", {}, [_ints([7, 255, 0], np.uint8), _ints([0, 2, 0], np.uint8)], {}),
    # -- uint16/32/64: what torch has no kernel for, bit for bit as NumPy
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
    # -- the float paths the uint support must leave as they were (gradients too)
    ("max_float_ties", "Max", {}, [_ints([1.0, 2.0, 3.0], np.float32), _ints([1.0, 0.5, 4.0], np.float32)], {}),
    ("sum_single", "Sum", {}, [_rand(2, 3)], {}),
    ("clip_no_bounds", "Clip", {}, [_rand(2, 3)], {}),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_converter_matches_reference(case):
    check_against_reference(case)


def _outputs(op_type, attributes, arrays, opset=None):
    """(converter output, reference output) for NumPy inputs; no gradient."""
    got = create_operator(op_type, dict(attributes), opset)(*[torch.from_numpy(a.copy()) for a in arrays])
    expected = reference_op(op_type, dict(attributes), opset).forward([a.copy() for a in arrays])
    return got, np.asarray(expected)


def _bits(bfloat16_tensor):
    """The bits of a torch bfloat16 tensor as NumPy int16 (how the executor hands bfloat16 to ml_dtypes)."""
    return bfloat16_tensor.view(torch.int16).numpy()


def test_cast_to_and_from_bfloat16_rounds_as_ml_dtypes():
    # Round to nearest even on the bits, infinities and NaN included: the executor passes bfloat16 in and out by
    # viewing torch.bfloat16 as int16 and the int16 array as ml_dtypes.bfloat16.
    x = np.array([1.0, 1.00390625, 1.01171875, -3.14159, 65504.0, 3.4e38, np.inf, -np.inf, 1e-40], np.float32)
    got, expected = _outputs("Cast", {"to": 16}, [x])
    assert got.dtype == torch.bfloat16
    np.testing.assert_array_equal(_bits(got), expected.view(np.int16))
    back = create_operator("Cast", {"to": 1})(got)
    np.testing.assert_array_equal(back.numpy(), expected.astype(np.float32))
    like = create_operator("CastLike", {})(torch.from_numpy(x), torch.zeros(1, dtype=torch.bfloat16))
    np.testing.assert_array_equal(_bits(like), expected.view(np.int16))
    assert expected.dtype == ml_dtypes.bfloat16


def test_cast_between_floats_keeps_the_gradient():
    check_against_reference(("cast_f64_f32", "Cast", {"to": 1}, [lambda rng: rng.standard_normal(4)], {}))
    x = torch.tensor([1.5, -2.0], requires_grad=True)
    create_operator("Cast", {"to": 16})(x).float().sum().backward()
    assert x.grad.tolist() == [1.0, 1.0]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("fmod", [0, 1])
def test_float_mod_edges_forward(dtype, fmod):
    # Infinite and extreme operands: the values match NumPy's. (The gradient for B there is torch's exact floor
    # quotient, where the reference's floor(A / B) rounds A / B first: -1 // inf is -1 for torch, -0 for it.)
    got, expected = _outputs("Mod", {"fmod": fmod}, [np.array(_FLOAT_EDGES, dtype), np.array(_DIVISOR_EDGES, dtype)])
    assert got.dtype == torch.from_numpy(expected).dtype
    np.testing.assert_array_equal(got.numpy(), expected)


def test_float_mod_in_float16_matches_numpy():
    a = np.array([-4.3, 7.2, 5.0, 4.3, -7.2, 8.0], np.float16)
    b = np.array([2.1, -3.4, 8.0, -2.1, 3.4, 5.0], np.float16)
    for fmod in (0, 1):
        got, expected = _outputs("Mod", {"fmod": fmod}, [a, b])
        assert got.dtype == torch.float16
        np.testing.assert_array_equal(got.numpy(), expected)


def test_integer_division_by_minus_one_does_not_trap():
    # torch's int64 kernel would raise SIGFPE on INT64_MIN / -1: the converter answers -x (wrapping) instead.
    low = np.array([np.iinfo(np.int64).min, 5], np.int64)
    got, expected = _outputs("Div", {}, [low, np.array([-1, -1], np.int64)])
    np.testing.assert_array_equal(got.numpy(), expected)
    got, expected = _outputs("Mod", {"fmod": 1}, [low, np.array([-1, 0], np.int64)])
    np.testing.assert_array_equal(got.numpy(), expected)


def _assert_same_error(op_type, attributes, arrays, error, match):
    with pytest.raises(error, match=match):
        reference_op(op_type, dict(attributes)).forward([a.copy() for a in arrays])
    with pytest.raises(error, match=match):
        create_operator(op_type, dict(attributes))(*[torch.from_numpy(a.copy()) for a in arrays])


@pytest.mark.parametrize("op_type, attributes, arrays, error, match", [
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
])
def test_bad_inputs_raise_the_reference_errors(op_type, attributes, arrays, error, match):
    _assert_same_error(op_type, attributes, arrays, error, match)


def test_bad_attributes_raise_the_reference_errors():
    for make in (create_operator, reference_op):
        with pytest.raises(ShapeError, match="direction must be"):
            make("BitShift", {"direction": "UP"})
    with pytest.raises(UnsupportedOperatorError, match="strings have no fixed bit width"):
        create_operator("BitCast", {"to": 8})
