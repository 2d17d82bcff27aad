"""Generator operators (Constant, Range): op-specific checks."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from d5.errors import ShapeError
from d5.frameworks.reference.operators import create_operator
from _helpers import d5_outputs, onnx_reference_outputs

onnx = pytest.importorskip("onnx")


def test_constant_accepts_a_tensor_proto():
    from onnx import numpy_helper

    value = np.arange(6, dtype=np.int32).reshape(2, 3)
    out = create_operator("Constant", {"value": numpy_helper.from_array(value)}).forward([])
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, value)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("stash_type", [1, 11])
def test_range_stash_type_matches_onnx_reference(dtype, stash_type):
    import ml_dtypes

    np_dtype = np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)
    # Past 2048 (float16) / 256 (bfloat16) consecutive integers are not representable: computing in the
    # narrow type and in float32 round differently.
    start, limit, delta = (np.array(v, dtype=np_dtype) for v in (1.0, 3000.0, 1.5))
    expected = onnx_reference_outputs("Range", [start, limit, delta], 1, {"stash_type": stash_type}, opset=27)[0]
    actual = d5_outputs("Range", [start, limit, delta], {"stash_type": stash_type})[0]
    assert actual.dtype == np_dtype and actual.shape == expected.shape
    np.testing.assert_array_equal(actual.astype(np.float64), expected.astype(np.float64))
    exact = (1.0 + np.arange(len(actual)) * 1.5).astype(np_dtype)
    np.testing.assert_array_equal(actual.astype(np.float64), exact.astype(np.float64))


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float32, np.float64])
def test_range_stash_type_has_no_effect_on_other_types(dtype):
    start, limit, delta = np.array(10, dtype), np.array(-7, dtype), np.array(-3, dtype)
    expected = onnx_reference_outputs("Range", [start, limit, delta], 1, {"stash_type": 1}, opset=27)[0]
    actual = d5_outputs("Range", [start, limit, delta], {"stash_type": 1})[0]
    assert actual.dtype == expected.dtype
    np.testing.assert_array_equal(actual, expected)
    np.testing.assert_array_equal(actual, d5_outputs("Range", [start, limit, delta], {})[0])


def test_range_rejects_unknown_stash_type():
    with pytest.raises(ShapeError, match="stash_type must be 1"):
        create_operator("Range", {"stash_type": 10})
