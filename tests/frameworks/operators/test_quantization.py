"""Every framework's quantization operators (native_op) against the reference operators. The reference has no
gradients for them, so the oracle compares outputs (and integer dtypes) only."""
from __future__ import annotations

import numpy as np
import pytest

from _oracle import _ints, _rand, case_params, check_against_reference, check_error, framework_params
from d5.errors import ShapeError


def _f(values, dtype=np.float32):
    return _ints(values, dtype)


def _q(low, high, *shape, dtype=np.uint8):
    return lambda rng: rng.integers(low, high + 1, shape).astype(dtype)


# (id, op_type, attributes, [input makers (None: omitted)], options): see _oracle.py
CASES = [
    ("quantize_uint8", "QuantizeLinear", {}, [_rand(3, 4, low=-2, high=300), _f(2.0), _ints(128, np.uint8)], {}),
    ("quantize_default_uint8_ties", "QuantizeLinear", {}, [_f([0.5, 1.5, 2.5, -1.0, 511.0]), _f(1.0)], {}),
    ("quantize_int8_axis", "QuantizeLinear", {"axis": 1}, [_rand(2, 3, 2, low=-40, high=40), _f([0.5, 1.0, 0.25]),
                                                           _ints([0, -3, 5], np.int8)], {}),
    ("quantize_int16_negative_axis", "QuantizeLinear", {"axis": -1},
     [_rand(2, 3, low=-9e4, high=9e4), _f([1.0, 2.0, 0.5]), _ints([0, 10, -10], np.int16)], {}),
    ("quantize_uint16", "QuantizeLinear", {}, [_rand(5, low=-10, high=7e4), _f(1.5), _ints(30000, np.uint16)], {}),
    ("quantize_blocked", "QuantizeLinear", {"axis": 1, "block_size": 2},
     [_rand(3, 5, low=-20, high=20), _rand(3, 3, low=0.5, high=2.0), _ints(np.full((3, 3), 3), np.int8)], {}),
    ("quantize_output_dtype_int8", "QuantizeLinear", {"output_dtype": 3}, [_rand(4, low=-300, high=300), _f(1.0)], {}),
    ("quantize_precision_float16", "QuantizeLinear", {"precision": 10},
     [_rand(4, low=-100, high=100), _f(0.3), _ints(2, np.int8)], {}),
    ("quantize_float16_input", "QuantizeLinear", {}, [_f([0.0, 3.3, 99.0, -7.0], np.float16), _f(0.7, np.float16),
                                                       _ints(12, np.uint8)], {}),
    ("dequantize_uint8", "DequantizeLinear", {}, [_q(0, 255, 3, 4), _f(0.5), _ints(128, np.uint8)], {}),
    ("dequantize_int8_axis", "DequantizeLinear", {"axis": 0}, [_q(-128, 127, 3, 2, dtype=np.int8),
                                                               _f([0.5, 2.0, 1.0]), _ints([1, 0, -1], np.int8)], {}),
    ("dequantize_int32_no_zero_point", "DequantizeLinear", {}, [_q(-1000, 1000, 4, dtype=np.int32), _f(0.1)], {}),
    ("dequantize_uint16_float16_scale", "DequantizeLinear", {}, [_q(0, 65535, 4, dtype=np.uint16),
                                                                 _f(0.01, np.float16), _ints(500, np.uint16)], {}),
    ("dequantize_blocked", "DequantizeLinear", {"axis": 0, "block_size": 2},
     [_q(-128, 127, 5, 2, dtype=np.int8), _rand(3, 2, low=0.1, high=1.0), _ints(np.ones((3, 2)), np.int8)], {}),
    ("dequantize_output_dtype", "DequantizeLinear", {"output_dtype": 11}, [_q(0, 255, 3), _f(0.5)], {}),
    ("dynamic_quantize", "DynamicQuantizeLinear", {}, [_rand(3, 4, low=-2, high=5)], {}),
    ("dynamic_quantize_positive", "DynamicQuantizeLinear", {}, [_rand(5, low=1, high=3)], {}),
    ("dynamic_quantize_zeros", "DynamicQuantizeLinear", {}, [_f(np.zeros(3))], {}),
    ("matmul_integer", "MatMulInteger", {}, [_q(0, 255, 3, 4), _q(0, 255, 4, 2), _ints(12, np.uint8),
                                             _ints(3, np.uint8)], {}),
    ("matmul_integer_per_row_col", "MatMulInteger", {}, [_q(-128, 127, 2, 3, 4, dtype=np.int8),
                                                         _q(-128, 127, 4, 5, dtype=np.int8),
                                                         _ints([1, -2, 3], np.int8), _ints([0, 1, 2, 3, 4], np.int8)],
     {}),
    ("matmul_integer_no_zero_points", "MatMulInteger", {}, [_q(0, 255, 4), _q(0, 255, 4, 3)], {}),
    ("qlinear_matmul_uint8", "QLinearMatMul", {}, [_q(0, 255, 2, 4), _f(0.0066), _ints(113, np.uint8),
                                                   _q(0, 255, 4, 3), _f(0.00705), _ints(114, np.uint8), _f(0.0107),
                                                   _ints(118, np.uint8)], {}),
    ("qlinear_matmul_int8_3d_float16", "QLinearMatMul", {},
     [_q(-128, 127, 2, 2, 4, dtype=np.int8), _f(0.05, np.float16), _ints(-3, np.int8),
      _q(-128, 127, 4, 3, dtype=np.int8), _f(0.02, np.float16), _ints(5, np.int8), _f(0.6, np.float16),
      _ints(1, np.int8)], {}),
    ("conv_integer_pads", "ConvInteger", {"pads": [1, 1, 1, 1]}, [_q(0, 255, 1, 2, 4, 4), _q(0, 255, 3, 2, 2, 2),
                                                                  _ints(7, np.uint8)], {}),
    ("conv_integer_per_channel_w_zero", "ConvInteger", {"strides": [2], "group": 2},
     [_q(-128, 127, 2, 4, 7, dtype=np.int8), _q(-128, 127, 4, 2, 3, dtype=np.int8), _ints(-2, np.int8),
      _ints([1, 2, 3, 4], np.int8)], {}),
    ("qlinear_conv", "QLinearConv", {"pads": [0, 1, 1, 0]},
     [_q(0, 255, 1, 2, 5, 5), _f(0.02), _ints(100, np.uint8), _q(0, 255, 3, 2, 2, 2), _f([0.01, 0.03, 0.02]),
      _ints(120, np.uint8), _f(0.2), _ints(90, np.uint8), _ints([100, -200, 30], np.int32)], {}),
    ("qlinear_conv_int8_auto_pad", "QLinearConv", {"auto_pad": "SAME_UPPER", "strides": [2, 2]},
     [_q(-128, 127, 1, 1, 5, 4, dtype=np.int8), _f(0.1), _ints(0, np.int8), _q(-128, 127, 2, 1, 3, 3, dtype=np.int8),
      _f(0.05), _ints(0, np.int8), _f(3.0), _ints(-1, np.int8)], {}),
]


@pytest.mark.parametrize("framework, case", case_params(CASES))
def test_native_op_matches_reference(framework, case):
    check_against_reference(framework, case)


@pytest.mark.parametrize("framework, op_type, attributes, arrays, match", framework_params([
    ("QuantizeLinear", {"axis": 1}, [np.ones((2, 3), np.float32), np.ones(2, np.float32)],
     "per-axis values must be 1-D of length 3"),
    ("DequantizeLinear", {"axis": 1, "block_size": 2}, [np.ones((2, 5), np.uint8), np.ones((2, 2), np.float32)],
     "do not tile"),
    ("MatMulInteger", {}, [np.ones((2, 3), np.uint8), np.ones((2, 3), np.uint8)], "cannot multiply"),
    ("MatMulInteger", {}, [np.ones((2, 3), np.uint8), np.ones((3, 2), np.uint8), np.ones(3, np.uint8)],
     "a_zero_point"),
]))
def test_bad_layouts_raise_shape_errors(framework, op_type, attributes, arrays, match):
    check_error(framework, op_type, attributes, arrays, ShapeError, match)
