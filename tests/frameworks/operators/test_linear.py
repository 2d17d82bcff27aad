"""Every framework's linear-algebra operators (native_op) against the reference operators: Det (forward and
gradient, batched), Einsum (a scalar operand, integer dtypes kept, uint32/64), and the errors bad inputs raise."""
from __future__ import annotations

import numpy as np
import pytest

from _oracle import _ints, _rand, case_params, check_against_reference, check_error, framework_params
from d5.errors import ShapeError


def _well_conditioned(*shape):
    # Identity plus noise: far from singular, so det's gradient (det * inv^T) is well defined.
    def make(rng):
        n = shape[-1]
        return (np.eye(n) * 2 + rng.uniform(-0.5, 0.5, shape)).astype(np.float32)
    return make


# (id, op_type, attributes, [input makers], options): see _oracle.py
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


@pytest.mark.parametrize("framework, case", case_params(CASES))
def test_native_op_matches_reference(framework, case):
    check_against_reference(framework, case)


@pytest.mark.parametrize("framework, op_type, attributes, arrays, match", framework_params([
    ("Det", {}, [np.ones((2, 3), np.float32)], "square matrices"),
    ("Det", {}, [np.ones(3, np.float32)], "square matrices"),
    ("Einsum", {"equation": "ij,jk->ik"}, [np.ones((2, 3), np.float32), np.ones((4, 2), np.float32)], "Einsum"),
    ("Einsum", {"equation": "ij->i"}, [np.ones(3, np.float32)], "Einsum"),
    ("Einsum", {"equation": "ij->i"}, [np.ones((2, 2), bool)], "Cast it first"),
]))
def test_bad_inputs_raise_shape_errors(framework, op_type, attributes, arrays, match):
    check_error(framework, op_type, attributes, arrays, ShapeError, match)
