"""Quantization and integer operators (QuantizeLinear, DequantizeLinear, MatMulInteger, ...)."""
from __future__ import annotations

import numpy as np
import pytest

from d5.errors import ShapeError, UnsupportedOperatorError
from d5.frameworks.reference.operators import create_operator
from _helpers import onnx_reference_outputs


@pytest.mark.parametrize("block_size", [2, 3])
def test_blocked_quantize_round_trip_matches_onnx_reference(block_size):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 7)).astype(np.float32)
    blocks = -(-7 // block_size)
    scale = rng.uniform(0.01, 0.1, (3, blocks)).astype(np.float32)
    zero = rng.integers(-5, 5, (3, blocks)).astype(np.int8)
    got = create_operator("QuantizeLinear", {"axis": 1, "block_size": block_size}).forward([x, scale, zero])
    want = onnx_reference_outputs("QuantizeLinear", [x, scale, zero], 1, {"axis": 1, "block_size": block_size})[0]
    np.testing.assert_array_equal(got, want)
    back = create_operator("DequantizeLinear", {"axis": 1, "block_size": block_size}).forward([got, scale, zero])
    np.testing.assert_allclose(back, onnx_reference_outputs("DequantizeLinear", [want, scale, zero], 1, {"axis": 1, "block_size": block_size})[0])


def test_matmul_integer_per_row_zero_points_match_onnx_reference():
    rng = np.random.default_rng(4)
    a = rng.integers(0, 255, (4, 3)).astype(np.uint8)
    b = rng.integers(0, 255, (3, 5)).astype(np.uint8)
    a_zero = rng.integers(0, 255, (4,)).astype(np.uint8)
    b_zero = rng.integers(0, 255, (5,)).astype(np.uint8)
    want = (a.astype(np.int64) - a_zero[:, None]) @ (b.astype(np.int64) - b_zero)
    got = create_operator("MatMulInteger", {}).forward([a, b, a_zero, b_zero])
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, want)


def test_bad_inputs_raise_d5_errors():
    from d5.errors import ShapeError, UnsupportedOperatorError

    with pytest.raises(ShapeError, match="integer"):
        create_operator("BitwiseOr", {}).forward([np.ones(2, np.float32), np.ones(2, np.float32)])
    with pytest.raises(ShapeError, match="width"):
        create_operator("BitCast", {"to": 7}).forward([np.ones(2, np.float32)])  # 7 = INT64
    with pytest.raises(ShapeError, match="square"):
        create_operator("Det", {}).forward([np.ones((2, 3))])
    with pytest.raises(UnsupportedOperatorError, match="not supported"):
        create_operator("QuantizeLinear", {"output_dtype": 1}).forward([np.ones(2, np.float32), np.float32(1)])  # 1 = FLOAT
