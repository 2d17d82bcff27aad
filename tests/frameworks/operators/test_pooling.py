"""Every framework's LpPool and MaxUnpool (native_op) against the reference operators (MaxPool, AveragePool and the
global pools are in test_core.py). The reference LpPool is forward only, so the oracle compares its outputs only."""
from __future__ import annotations

import numpy as np
import pytest

from _oracle import _distinct, _ints, _rand, case_params, check_against_reference, check_error, framework_params
from d5.errors import ShapeError

# (id, op_type, attributes, [input makers (None: omitted)], options): see _oracle.py
LP_POOL_CASES = [
    ("lppool_1d", "LpPool", {"kernel_shape": [2]}, [_rand(2, 3, 5)], {"opset": 11}),
    ("lppool_2d_p3", "LpPool", {"kernel_shape": [2, 2], "p": 3}, [_rand(1, 2, 4, 5)], {"opset": 2}),
    ("lppool_2d_pads_strides", "LpPool", {"kernel_shape": [3, 2], "pads": [1, 0, 1, 1], "strides": [2, 1]},
     [_rand(1, 2, 5, 4)], {}),
    ("lppool_2d_dilations", "LpPool", {"kernel_shape": [2, 2], "dilations": [2, 1]}, [_rand(1, 1, 5, 4)],
     {"opset": 18}),
    ("lppool_same_upper", "LpPool", {"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER", "strides": [2, 2]},
     [_rand(1, 2, 5, 6)], {}),
    ("lppool_same_lower", "LpPool", {"kernel_shape": [2, 2], "auto_pad": "SAME_LOWER"}, [_rand(1, 2, 3, 4)], {}),
    ("lppool_negative_same_pads", "LpPool", {"kernel_shape": [1], "auto_pad": "SAME_UPPER", "strides": [3]},
     [_rand(1, 1, 5)], {}),
    ("lppool_ceil_mode", "LpPool", {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1},
     [_rand(1, 1, 5, 5)], {}),
    ("lppool_3d_p1", "LpPool", {"kernel_shape": [2, 2, 2], "p": 1}, [_rand(1, 2, 3, 3, 3)], {}),
]


def _unpool_indices(x_shape, unpooled_spatial, rng_picks):
    # Valid MaxPool-style indices: flat positions in the whole unpooled tensor, each inside its own plane.
    def make(rng):
        n, c = x_shape[:2]
        plane = int(np.prod(unpooled_spatial))
        inner = rng.integers(0, plane, x_shape) if rng_picks is None else np.asarray(rng_picks).reshape(x_shape)
        offsets = (np.arange(n * c) * plane).reshape(n, c, *(1,) * (len(x_shape) - 2))
        return (inner + offsets).astype(np.int64)
    return make


MAX_UNPOOL_CASES = [
    ("maxunpool_2d", "MaxUnpool", {"kernel_shape": [2, 2], "strides": [2, 2]},
     [_rand(1, 2, 2, 2), _unpool_indices((1, 2, 2, 2), (4, 4), [0, 3, 9, 14, 5, 6, 8, 15])], {}),
    ("maxunpool_2d_output_shape", "MaxUnpool", {"kernel_shape": [2, 2], "strides": [2, 2]},
     [_rand(1, 1, 2, 2), _unpool_indices((1, 1, 2, 2), (4, 4), [1, 2, 12, 15]), _ints([1, 1, 5, 6])],
     {"opset": 11}),
    ("maxunpool_1d_pads", "MaxUnpool", {"kernel_shape": [3], "strides": [2], "pads": [1, 0]},
     [_rand(2, 2, 3), _unpool_indices((2, 2, 3), (6,), None)], {"opset": 9}),
    ("maxunpool_repeated_index_last_wins", "MaxUnpool", {"kernel_shape": [2], "strides": [1]},
     [_distinct(1, 1, 4), _unpool_indices((1, 1, 4), (5,), [1, 1, 3, 1])], {}),
    ("maxunpool_3d", "MaxUnpool", {"kernel_shape": [2, 2, 2], "strides": [2, 2, 2]},
     [_rand(1, 1, 1, 2, 1), _unpool_indices((1, 1, 1, 2, 1), (2, 4, 2), [7, 9])], {}),
]


@pytest.mark.parametrize("framework, case", case_params(LP_POOL_CASES))
def test_lppool_matches_reference(framework, case):
    check_against_reference(framework, case)


@pytest.mark.parametrize("framework, case", case_params(MAX_UNPOOL_CASES))
def test_maxunpool_matches_reference(framework, case):
    check_against_reference(framework, case)


@pytest.mark.parametrize("framework, op_type, attributes, arrays", framework_params([
    ("LpPool", {"kernel_shape": [2, 2]}, [np.zeros((1, 2, 3), np.float32)]),          # rank mismatch
    ("LpPool", {"kernel_shape": [4]}, [np.zeros((1, 1, 3), np.float32)]),             # kernel larger than X
    ("MaxUnpool", {"kernel_shape": [2]}, [np.zeros((1, 1, 2), np.float32), np.array([[[0, 3]]])]),
    ("MaxUnpool", {"kernel_shape": [2]}, [np.zeros((1, 1, 2), np.float32), np.array([[[0, 1]]]),
                                          np.array([1, 1, 2])]),                      # output_shape too small
    ("MaxUnpool", {"kernel_shape": [2]}, [np.zeros((1, 1, 2), np.float32), np.zeros((1, 1, 2), np.float32)]),
]))
def test_bad_inputs_raise_shape_error(framework, op_type, attributes, arrays):
    check_error(framework, op_type, attributes, arrays, ShapeError)


@pytest.mark.parametrize("framework, op_type, attributes", framework_params([
    ("LpPool", {}), ("MaxUnpool", {}), ("LpPool", {"kernel_shape": [2], "strides": [0]}),
    ("MaxUnpool", {"kernel_shape": [2], "pads": [1]}),
]))
def test_bad_attributes_raise_shape_error(framework, op_type, attributes):
    check_error(framework, op_type, attributes, None, ShapeError)
