"""What is PyTorch's own in its elementwise converters: bfloat16 casts (torch.bfloat16 against ml_dtypes, bit for
bit), a cast's gradient through bfloat16, and the float Mod edges compared exactly with NumPy (float32, float64,
float16). The comparisons of every framework's native_op with the reference (the case table, integer division by 0
and -1 included, and the errors bad inputs raise) are in tests/frameworks/operators/."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from d5.frameworks.pytorch.operators import create_operator  # noqa: E402
from d5.frameworks.reference.operators import create_operator as reference_op  # noqa: E402

# The reference's NumPy warns on the infinite and extreme operands, on purpose.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

_FLOAT_EDGES = [-4.3, 7.2, 5.0, 4.3, -7.2, 8.0, 0.0, np.inf, 3.0, -1.0, 1e-30, 2.5]
_DIVISOR_EDGES = [2.1, -3.4, 8.0, -2.1, 3.4, 5.0, 2.0, 2.0, np.inf, np.inf, -1e30, -0.5]


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


def test_cast_through_bfloat16_keeps_the_gradient():
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
