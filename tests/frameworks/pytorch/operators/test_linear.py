"""The PyTorch linear-algebra converters against the reference operators: Det (forward and gradient, batched,
narrow floats), Einsum (a scalar operand, integer dtypes kept, uint16/32/64, bfloat16), and the errors bad
inputs raise."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from _torch_oracle import _ints, _rand, check_against_reference  # noqa: E402
from d5.errors import ShapeError  # noqa: E402
from d5.frameworks.pytorch.operators import create_operator  # noqa: E402
from d5.frameworks.reference.operators import create_operator as reference_op  # noqa: E402


def _well_conditioned(*shape):
    # Identity plus noise: far from singular, so det's gradient (det * inv^T) is well defined.
    def make(rng):
        n = shape[-1]
        return (np.eye(n) * 2 + rng.uniform(-0.5, 0.5, shape)).astype(np.float32)
    return make


# (id, op_type, attributes, [input makers], options)
CASES = [
    ("det_2d", "Det", {}, [_well_conditioned(3, 3)], {}),
    ("det_nd", "Det", {}, [_well_conditioned(2, 3, 4, 4)], {}),
    ("det_float64", "Det", {}, [lambda rng: rng.uniform(-1, 1, (2, 2)) + 3 * np.eye(2)], {}),
    ("einsum_scalar", "Einsum", {"equation": "->"}, [_ints(5.0, np.float64)], {}),
    ("einsum_scalar_times_matrix", "Einsum", {"equation": ",ij->ij"}, [_ints(2.5, np.float32), _rand(2, 3)], {}),
    ("einsum_sum_int32", "Einsum", {"equation": "ij->"}, [_ints([[1, 2], [3, 4]], np.int32)], {}),
    ("einsum_batch_matmul_int64", "Einsum", {"equation": "bij,bjk->bik"},
     [_ints(np.arange(12).reshape(2, 2, 3)), _ints(np.arange(12).reshape(2, 3, 2))], {}),
    ("einsum_uint32_wraps", "Einsum", {"equation": "i,i->"}, [_ints([2 ** 31, 3], np.uint32), _ints([2, 5], np.uint32)],
     {}),
    ("einsum_uint64", "Einsum", {"equation": "ij,jk->ik"},
     [_ints([[2 ** 63, 1], [3, 2 ** 40]], np.uint64), _ints([[3, 1], [2 ** 30, 7]], np.uint64)], {}),
    ("einsum_implicit", "Einsum", {"equation": "ij,jk"}, [_rand(2, 3), _rand(3, 4)], {}),
    ("einsum_ellipsis", "Einsum", {"equation": "...ii->...i"}, [_rand(2, 3, 3)], {}),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_converter_matches_reference(case):
    check_against_reference(case)


def test_det_of_float16_is_computed_in_float32():
    x = (np.eye(3) * 2 + np.random.default_rng(0).uniform(-0.5, 0.5, (2, 3, 3))).astype(np.float16)
    got = create_operator("Det", {})(torch.from_numpy(x))
    assert got.dtype == torch.float16
    np.testing.assert_allclose(got.numpy().astype(np.float32), np.linalg.det(x.astype(np.float32)), rtol=1e-3)


def test_einsum_in_bfloat16_keeps_the_dtype():
    rng = np.random.default_rng(0)
    a, b = (rng.uniform(-1, 1, shape).astype(ml_dtypes.bfloat16) for shape in ((2, 3, 4), (2, 4, 5)))
    as_torch = [torch.from_numpy(v.view(np.int16)).view(torch.bfloat16) for v in (a, b)]
    got = create_operator("Einsum", {"equation": "bij,bjk->bik"})(*as_torch)
    expected = reference_op("Einsum", {"equation": "bij,bjk->bik"}).forward([a, b])
    assert got.dtype == torch.bfloat16
    np.testing.assert_allclose(got.float().numpy(), expected.astype(np.float32), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("op_type, attributes, arrays, match", [
    ("Det", {}, [np.ones((2, 3), np.float32)], "square matrices"),
    ("Det", {}, [np.ones(3, np.float32)], "square matrices"),
    ("Einsum", {"equation": "ij,jk->ik"}, [np.ones((2, 3), np.float32), np.ones((4, 2), np.float32)], "Einsum"),
    ("Einsum", {"equation": "ij->i"}, [np.ones(3, np.float32)], "Einsum"),
    ("Einsum", {"equation": "ij->i"}, [np.ones((2, 2), bool)], "Cast it first"),
])
def test_bad_inputs_raise_shape_errors(op_type, attributes, arrays, match):
    with pytest.raises(ShapeError, match=match):
        reference_op(op_type, attributes).forward(arrays)
    with pytest.raises(ShapeError, match=match):
        create_operator(op_type, attributes)(*[torch.from_numpy(a) for a in arrays])
