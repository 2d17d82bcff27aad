"""Every framework's Col2Im (native_op) against the reference operator (Conv and ConvTranspose are in
test_core.py). The reference Col2Im is forward only, so the oracle compares its outputs only."""
from __future__ import annotations

import numpy as np
import pytest

from _oracle import _ints, _rand, case_params, check_against_reference, check_error, framework_params
from d5.errors import ShapeError

# (id, op_type, attributes, [input makers (None: omitted)], options): see _oracle.py
COL2IM_CASES = [
    ("col2im_2d", "Col2Im", {}, [_rand(1, 5, 5), _ints([5, 5]), _ints([1, 5])], {"opset": 18}),
    ("col2im_2d_overlap", "Col2Im", {}, [_rand(2, 8, 9), _ints([4, 4]), _ints([2, 2])], {}),
    ("col2im_2d_strides_dilations_pads", "Col2Im", {"strides": [2, 1], "dilations": [1, 2], "pads": [1, 0, 0, 1]},
     [_rand(1, 12, 3), _ints([5, 4]), _ints([2, 3])], {}),
    ("col2im_1d", "Col2Im", {"strides": [2], "pads": [1, 2]}, [_rand(2, 6, 4), _ints([6]), _ints([3])], {}),
    ("col2im_3d", "Col2Im", {"dilations": [1, 1, 2]}, [_rand(1, 16, 12), _ints([3, 4, 4]), _ints([2, 2, 2])], {}),
]


@pytest.mark.parametrize("framework, case", case_params(COL2IM_CASES))
def test_col2im_matches_reference(framework, case):
    check_against_reference(framework, case)


@pytest.mark.parametrize("framework, op_type, arrays", framework_params([
    ("Col2Im", [np.zeros((1, 5, 15), np.float32), np.array([5, 5]), np.array([2, 5])]),  # 5 rows, blocks of 10
    ("Col2Im", [np.zeros((1, 5, 14), np.float32), np.array([5, 5]), np.array([1, 5])]),  # 14 blocks, 15 expected
    ("Col2Im", [np.zeros((1, 5, 15), np.float32), np.array([5, 5]), np.array([5])]),     # ranks differ
]))
def test_col2im_bad_inputs_raise_shape_error(framework, op_type, arrays):
    check_error(framework, op_type, {}, arrays, ShapeError)
