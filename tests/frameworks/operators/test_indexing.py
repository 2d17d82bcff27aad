"""Every framework's indexing operators (native_op: Trilu, the scatters, TensorScatter, OneHot, TopK, Compress,
NonZero, Unique) against the reference operators: forward outputs, and gradients where the reference has them (TopK,
Compress, NonZero, Unique and the scatters' mul/max/min reductions are forward only in the reference, so the oracle
compares their outputs only)."""
from __future__ import annotations

import numpy as np
import pytest

from _oracle import _distinct, _ints, _rand, case_params, check_against_reference, check_error, framework_params
from d5.errors import ShapeError

# (id, op_type, attributes, [input makers (None: omitted)], options): see _oracle.py
GRADIENT_CASES = [
    ("triu", "Trilu", {}, [_rand(4, 5)], {}),
    ("triu_k_negative_batched", "Trilu", {}, [_rand(2, 3, 4), _ints(-1)], {}),
    ("tril_k_positive", "Trilu", {"upper": 0}, [_rand(3, 5), _ints(2)], {}),
    ("tril_k_beyond", "Trilu", {"upper": 0}, [_rand(3, 4), _ints(-7)], {}),
    ("triu_k_beyond", "Trilu", {}, [_rand(3, 4), _ints(9)], {}),
    ("tril_zero_rows", "Trilu", {"upper": 0}, [_rand(0, 5)], {}),
    ("scatter_elements_axis0", "ScatterElements", {}, [_rand(3, 3), _ints([[1, 0, 2], [0, 2, 1]]), _rand(2, 3)], {}),
    ("scatter_elements_axis1_negative", "ScatterElements", {"axis": 1}, [_rand(2, 5), _ints([[1, -1], [-5, 3]]),
                                                                        _rand(2, 2)], {}),
    ("scatter_elements_add_duplicates", "ScatterElements", {"axis": 1, "reduction": "add"},
     [_rand(1, 5), _ints([[1, 1, 3]]), _rand(1, 3)], {}),
    ("scatter_opset10_alias", "Scatter", {"axis": 1}, [_rand(2, 4), _ints([[3, 0]], np.int32), _rand(1, 2)],
     {"opset": 10}),
    ("scatternd_elements", "ScatterND", {}, [_rand(2, 3, 4), _ints([[0, 1, 2], [1, 2, -1]]), _rand(2)], {}),
    ("scatternd_slices", "ScatterND", {}, [_rand(4, 4, 4), _ints([[0], [2]]), _rand(2, 4, 4)], {}),
    ("scatternd_add_duplicates", "ScatterND", {"reduction": "add"}, [_rand(4, 3), _ints([[1], [1], [3]]),
                                                                     _rand(3, 3)], {}),
    ("tensorscatter_linear", "TensorScatter", {}, [_rand(2, 6, 3), _rand(2, 2, 3), _ints([1, 4])], {}),
    ("tensorscatter_circular_axis", "TensorScatter", {"axis": 2, "mode": "circular"},
     [_rand(2, 3, 5, 2), _rand(2, 3, 3, 2), _ints([4, 1])], {}),
    ("tensorscatter_default_indices", "TensorScatter", {"axis": 1}, [_rand(2, 4), _rand(2, 3)], {}),
    ("onehot", "OneHot", {}, [_ints([0, 2, 1]), _ints(3), _rand(2)], {}),
    ("onehot_axis_negative_indices", "OneHot", {"axis": 0}, [_ints([[1, -1], [-4, 9]]), _ints([4.0], np.float32),
                                                             _rand(2)], {}),
    ("onehot_float_indices_axis_middle", "OneHot", {"axis": -2}, [_ints([[0.5, 2.7], [1.0, -1.2]], np.float32),
                                                                  _ints(3), _rand(2)], {}),
]

FORWARD_CASES = [
    ("trilu_int", "Trilu", {"upper": 0}, [_ints(np.arange(12).reshape(3, 4))], {}),
    ("scatter_elements_mul", "ScatterElements", {"axis": 1, "reduction": "mul"},
     [_rand(1, 5), _ints([[1, 1, 3]]), _rand(1, 3)], {}),
    ("scatter_elements_max", "ScatterElements", {"reduction": "max"}, [_rand(3, 2), _ints([[0, 1], [0, 1]]),
                                                                       _rand(2, 2)], {}),
    ("scatter_elements_min_int", "ScatterElements", {"reduction": "min"},
     [_ints([[5, 5], [5, 5]]), _ints([[1, 0], [1, 1]]), _ints([[3, 9], [7, 1]])], {}),
    ("scatternd_mul", "ScatterND", {"reduction": "mul"}, [_rand(4, 3), _ints([[1], [1]]), _rand(2, 3)], {}),
    ("scatternd_max_elements", "ScatterND", {"reduction": "max"}, [_rand(3, 3), _ints([[0, 0], [0, 0], [2, 1]]),
                                                                   _rand(3)], {}),
    ("scatternd_min", "ScatterND", {"reduction": "min"}, [_rand(2, 2, 2), _ints([[1, 0]]), _rand(1, 2)], {}),
    ("topk", "TopK", {}, [_distinct(3, 5), _ints([2])], {}),
    ("topk_smallest_axis0_unsorted", "TopK", {"axis": 0, "largest": 0, "sorted": 0}, [_distinct(4, 3), _ints(3)], {}),
    ("topk_ties_keep_lower_index", "TopK", {}, [_ints([[3, 1, 3, 2, 3, 1]], np.float32), _ints([4])], {}),
    ("topk_ties_smallest", "TopK", {"largest": 0}, [_ints([[3, 1, 3, 2, 1, 1]], np.int32), _ints([3])], {}),
    ("topk_opset1_attribute", "TopK", {"k": 2, "axis": -1}, [_distinct(2, 4)], {"opset": 1}),
    ("topk_k0", "TopK", {}, [_distinct(2, 4), _ints([0])], {}),
    ("compress_axis0", "Compress", {"axis": 0}, [_rand(3, 2), _ints([False, True, True])], {}),
    ("compress_flat_short_condition", "Compress", {}, [_rand(3, 2), _ints([True, False, True, True])], {}),
    ("compress_negative_axis", "Compress", {"axis": -1}, [_rand(2, 3), _ints([True, False, True])], {}),
    ("nonzero", "NonZero", {}, [_ints([[1, 0, 3], [0, 0, 2]])], {}),
    ("nonzero_scalar", "NonZero", {}, [_ints(5)], {}),
    ("nonzero_float_none", "NonZero", {}, [_ints([[0.0, 0.0]], np.float32)], {}),
    ("unique_sorted", "Unique", {}, [_ints([2, 1, 1, 3, 4, 3])], {}),
    ("unique_not_sorted", "Unique", {"sorted": 0}, [_ints([2.0, 1.0, 1.0, 3.0, 4.0, 3.0], np.float32)], {}),
    ("unique_axis0", "Unique", {"axis": 0}, [_ints([[1, 0, 0], [1, 0, 0], [2, 3, 4]])], {}),
    ("unique_axis_negative_3d_unsorted", "Unique", {"axis": -2, "sorted": 0},
     [_ints([[[1, 1], [0, 1], [2, 1], [0, 1]], [[1, 1], [0, 1], [2, 1], [0, 1]]])], {}),
    ("unique_matrix_flattened", "Unique", {}, [_ints([[3, 1], [3, 2]])], {}),
]


@pytest.mark.parametrize("framework, case", case_params(GRADIENT_CASES))
def test_native_op_matches_reference(framework, case):
    check_against_reference(framework, case)


@pytest.mark.parametrize("framework, case", case_params(FORWARD_CASES))
def test_forward_only_native_op_matches_reference(framework, case):
    check_against_reference(framework, case)  # the reference has no gradient for these: outputs only


@pytest.mark.parametrize("framework, op_type, attributes, arrays, match", framework_params([
    ("ScatterElements", {}, [np.zeros(3, np.float32), np.array([3]), np.ones(1, np.float32)],
     "index 3 .*out of range for .*size 3"),
    ("ScatterND", {}, [np.zeros((3, 2), np.float32), np.array([[1]]), np.ones(2, np.float32)],
     "updates must have shape"),
    ("TensorScatter", {}, [np.zeros((1, 3, 2), np.float32), np.ones((1, 2, 2), np.float32), np.array([2])],
     "exceeds the cache length"),
    ("TopK", {}, [np.ones(4, np.float32), np.array([5])], "k=5 is out of range"),
    ("OneHot", {}, [np.array([1]), np.array([0.0, 1.0], np.float32), np.array(3.0, np.float32)], "swapped"),
    ("Compress", {"axis": 0}, [np.ones(2, np.float32), np.array([True, True, False])], "more than"),
]))
def test_bad_inputs_raise_the_reference_errors(framework, op_type, attributes, arrays, match):
    check_error(framework, op_type, attributes, arrays, ShapeError, match)
