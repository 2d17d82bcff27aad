"""The PyTorch generator converters against the reference operators: EyeLike (dtype, off-diagonal k), Range
(computed in the inputs' dtype or stash_type, as the reference: the same bits), ConstantOfShape and Constant,
and the errors bad inputs raise."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from _torch_oracle import _ints, _rand, check_against_reference  # noqa: E402
from d5.errors import InsufficientMemoryError, ShapeError  # noqa: E402
from d5.frameworks.pytorch.operators import create_operator  # noqa: E402
from d5.frameworks.reference.operators import create_operator as reference_op  # noqa: E402

# (id, op_type, attributes, [input makers], options)
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


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_converter_matches_reference(case):
    check_against_reference(case)


def test_float32_range_has_the_reference_bits():
    # Computed in float32 as the reference (start + arange * delta), not in float64 and rounded once.
    values = [np.array(v, np.float32) for v in (0.1, 50.0, 0.37)]
    got = create_operator("Range", {})(*[torch.from_numpy(v) for v in values])
    np.testing.assert_array_equal(got.numpy(), reference_op("Range", {}).forward(values))


@pytest.mark.parametrize("stash_type", [None, 1, 11])
def test_bfloat16_range_has_the_reference_bits(stash_type):
    attributes = {} if stash_type is None else {"stash_type": stash_type}
    values = [np.array(v, ml_dtypes.bfloat16) for v in (1.0, 30.0, 0.7)]
    tensors = [torch.from_numpy(v.view(np.int16)).view(torch.bfloat16) for v in values]
    got = create_operator("Range", attributes)(*tensors)
    expected = reference_op("Range", attributes).forward(values)
    assert got.dtype == torch.bfloat16
    np.testing.assert_array_equal(got.view(torch.int16).numpy(), expected.view(np.int16))


def test_constant_keeps_a_scalar_0d_and_holds_bfloat16():
    assert create_operator("Constant", {"value": np.array(2.0, np.float32)})().shape == ()
    value = np.array([1.5, -2.25], ml_dtypes.bfloat16)
    got = create_operator("Constant", {"value": value})()
    assert got.dtype == torch.bfloat16
    np.testing.assert_array_equal(got.view(torch.int16).numpy(), value.view(np.int16))


def test_generated_outputs_carry_no_gradient():
    start = torch.tensor(1.0, requires_grad=True)
    assert not create_operator("Range", {})(start, torch.tensor(4.0), torch.tensor(1.0)).requires_grad
    assert not create_operator("EyeLike", {})(torch.ones(2, 2, requires_grad=True)).requires_grad


@pytest.mark.parametrize("op_type, attributes, arrays, error, match", [
    ("Range", {}, [np.arange(5), np.array(9), np.array(1)], ShapeError, "Range: start must be a single value"),
    ("Range", {}, [np.array(1), np.array(9), np.array(0)], ShapeError, "delta must not be 0"),
    ("Range", {}, [np.array(0.0), np.array(np.inf), np.array(1.0)], ShapeError, "no finite number"),
    ("Range", {}, [np.array(0.0), np.array(1e18), np.array(1e-3)], InsufficientMemoryError, "Range output"),
    ("EyeLike", {}, [np.ones(3, np.float32)], ShapeError, "must be 2-D"),
    ("ConstantOfShape", {}, [np.array([2, -1])], ShapeError, "non-negative"),
])
def test_bad_inputs_raise_the_reference_errors(op_type, attributes, arrays, error, match):
    with pytest.raises(error, match=match):
        reference_op(op_type, attributes).forward(arrays)
    with pytest.raises(error, match=match):
        create_operator(op_type, attributes)(*[torch.from_numpy(a) for a in arrays])


def test_bad_stash_type_is_refused():
    for make in (create_operator, reference_op):
        with pytest.raises(ShapeError, match="stash_type must be"):
            make("Range", {"stash_type": 7})
