"""Reduction operators (ReduceLogSum, ...): op-specific checks against onnxruntime, onnx.reference and finite differences."""
from __future__ import annotations

import numpy as np
import pytest

from d5.frameworks.reference.operators import create_operator
from d5.ops.validation import test_gradient as check_gradient
from _helpers import d5_outputs, onnx_reference_outputs, onnxruntime_outputs


def _positive(shape, seed=0):
    return np.random.default_rng(seed).uniform(0.5, 2.0, shape)


@pytest.mark.parametrize("axes, keepdims", [([1], 1), ([0, 2], 0), ([-1], 1), (None, 0), (None, 1)])
def test_reduce_log_sum_matches_onnxruntime(axes, keepdims):
    x = _positive((3, 4, 5)).astype(np.float32)
    axes_input = None if axes is None else np.array(axes, np.int64)
    expected = onnxruntime_outputs("ReduceLogSum", [x, axes_input], 1, {"keepdims": keepdims}, opset=18)[0]
    inputs = [x] if axes_input is None else [x, axes_input]
    actual = d5_outputs("ReduceLogSum", inputs, {"keepdims": keepdims})[0]
    assert actual.dtype == np.float32 and actual.shape == expected.shape
    np.testing.assert_allclose(actual, expected, rtol=1e-6)


def test_reduce_log_sum_axes_attribute_matches_onnx_reference():
    # Before opset 18 the axes are an attribute.
    x = _positive((2, 3, 4))
    expected = onnx_reference_outputs("ReduceLogSum", [x], 1, {"axes": [0, 2], "keepdims": 0}, opset=13)[0]
    np.testing.assert_allclose(d5_outputs("ReduceLogSum", [x], {"axes": [0, 2], "keepdims": 0})[0], expected)


def test_reduce_log_sum_noop_and_empty_set():
    x = _positive((2, 3))
    assert d5_outputs("ReduceLogSum", [x], {"noop_with_empty_axes": 1})[0] is x
    empty = np.zeros((2, 0, 4), np.float32)
    out = d5_outputs("ReduceLogSum", [empty, np.array([1])], {"keepdims": 0})[0]
    assert out.shape == (2, 4) and np.all(out == -np.inf)


@pytest.mark.parametrize("attributes, inputs", [
    ({"axes": [1]}, [_positive((3, 4, 5))]),
    ({"keepdims": 0}, [_positive((3, 4, 5)), np.array([0, -1])]),
    ({}, [_positive((3, 4))]),
    ({"noop_with_empty_axes": 1}, [_positive((3, 4))]),
])
def test_reduce_log_sum_gradient(attributes, inputs):
    result = check_gradient(create_operator("ReduceLogSum", attributes), inputs)
    assert result.passed, result
