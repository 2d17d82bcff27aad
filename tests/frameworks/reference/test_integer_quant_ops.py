"""Integer, bitwise, set/box and quantization reference operators.

Oracle: ONNX's own node conformance cases (expected outputs produced by onnx's reference implementations)
run through d5.bench.conformance with d5's operators only; gradients against float64 finite differences
(d5.ops.validation.test_gradient); a few direct checks against numpy/onnx.reference for edge cases the
conformance cases do not reach.
"""
from __future__ import annotations

import numpy as np
import pytest

# Every node case of these operators must pass on d5's own operators. Deliberate exclusions are those the
# conformance runner itself excludes (float8/float4 quantization types), reported with status "excluded".
_PATTERNS = ("test_bitshift", "test_bitwise", "test_bitcast", "test_quantizelinear", "test_dequantizelinear",
             "test_dynamicquantizelinear", "test_qlinearmatmul", "test_qlinearconv", "test_matmulinteger",
             "test_convinteger", "test_unique", "test_nonzero", "test_nonmaxsuppression", "test_det_",
             "test_shrink")


@pytest.fixture(scope="module")
def conformance_results():
    from d5.bench.conformance import run_conformance

    return run_conformance(kinds=("node",), patterns=_PATTERNS, progress=False)


def test_conformance_cases_pass_with_own_operators(conformance_results):
    judged = [r for r in conformance_results if r.status != "excluded"]
    failures = [f"{r.name}: {r.reason}" for r in judged if r.status != "pass"]
    assert len(judged) >= 110, f"expected the ~114 judged node cases, found {len(judged)}"
    assert not failures, "\n".join(failures)


def test_only_low_precision_cases_are_excluded(conformance_results):
    excluded = [r for r in conformance_results if r.status == "excluded"]
    assert excluded and all("float8/float4" in r.reason for r in excluded), [(r.name, r.reason) for r in excluded]


def _op(op_type, **attributes):
    from d5.frameworks.reference.operators import create_operator

    return create_operator(op_type, attributes)


def _onnx_reference(op_type, inputs, **attributes):
    """The single output of one node run through onnx.reference.ReferenceEvaluator (the independent oracle)."""
    return _onnx_reference_outputs(op_type, inputs, 1, **attributes)[0]


@pytest.mark.parametrize("block_size", [2, 3])
def test_blocked_quantize_round_trip_matches_onnx_reference(block_size):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 7)).astype(np.float32)
    blocks = -(-7 // block_size)
    scale = rng.uniform(0.01, 0.1, (3, blocks)).astype(np.float32)
    zero = rng.integers(-5, 5, (3, blocks)).astype(np.int8)
    got = _op("QuantizeLinear", axis=1, block_size=block_size).forward([x, scale, zero])
    want = _onnx_reference("QuantizeLinear", [x, scale, zero], axis=1, block_size=block_size)
    np.testing.assert_array_equal(got, want)
    back = _op("DequantizeLinear", axis=1, block_size=block_size).forward([got, scale, zero])
    np.testing.assert_allclose(back, _onnx_reference("DequantizeLinear", [want, scale, zero], axis=1,
                                                     block_size=block_size))


def test_matmul_integer_per_row_zero_points_match_onnx_reference():
    rng = np.random.default_rng(4)
    a = rng.integers(0, 255, (4, 3)).astype(np.uint8)
    b = rng.integers(0, 255, (3, 5)).astype(np.uint8)
    a_zero = rng.integers(0, 255, (4,)).astype(np.uint8)
    b_zero = rng.integers(0, 255, (5,)).astype(np.uint8)
    want = (a.astype(np.int64) - a_zero[:, None]) @ (b.astype(np.int64) - b_zero)
    got = _op("MatMulInteger").forward([a, b, a_zero, b_zero])
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, want)


def test_unique_unsorted_with_axis_matches_onnx_reference():
    x = np.array([[3, 1], [0, 2], [3, 1], [0, 2], [1, 1]], np.int64)
    got = _op("Unique", axis=0, sorted=0).forward([x])
    want = _onnx_reference_outputs("Unique", [x], 4, axis=0, sorted=0)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def _onnx_reference_outputs(op_type, inputs, count, **attributes):
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    names = [f"in{i}" for i in range(len(inputs))]
    outputs = [f"out{i}" for i in range(count)]
    evaluator = ReferenceEvaluator(helper.make_node(op_type, names, outputs, **attributes))
    return evaluator.run(None, dict(zip(names, inputs)))


def test_bitshift_left_wraps_signed_values():
    x = np.array([64, -128, 1], np.int8)
    got = _op("BitShift", direction="LEFT").forward([x, np.array([1, 1, 8], np.int8)])
    np.testing.assert_array_equal(got, np.array([-128, 0, 0], np.int8))


def test_discrete_operators_have_no_gradient():
    from d5.errors import UnsupportedOperatorError

    op = _op("BitwiseAnd")
    assert op.differentiable is False
    with pytest.raises(UnsupportedOperatorError, match="no gradient"):
        op.backward([np.zeros(2, np.int32)], [np.zeros(2, np.int32)] * 2, [np.zeros(2, np.int32)])
    with pytest.raises(UnsupportedOperatorError, match="no gradient"):
        _op("QuantizeLinear").backward([np.zeros(2)], [np.zeros(2), np.float32(1)], [np.zeros(2, np.uint8)])


def test_bad_inputs_raise_d5_errors():
    from d5.errors import ShapeError, UnsupportedOperatorError

    with pytest.raises(ShapeError, match="integer"):
        _op("BitwiseOr").forward([np.ones(2, np.float32), np.ones(2, np.float32)])
    with pytest.raises(ShapeError, match="width"):
        _op("BitCast", to=7).forward([np.ones(2, np.float32)])  # 7 = INT64
    with pytest.raises(ShapeError, match="square"):
        _op("Det").forward([np.ones((2, 3))])
    with pytest.raises(UnsupportedOperatorError, match="not supported"):
        _op("QuantizeLinear", output_dtype=1).forward([np.ones(2, np.float32), np.float32(1)])  # 1 = FLOAT


def test_det_gradient_by_finite_differences():
    from d5.ops import test_gradient

    x = np.random.default_rng(0).standard_normal((2, 3, 3)) + 2 * np.eye(3)
    result = test_gradient(_op("Det"), [x])
    assert result.passed, result


def test_shrink_gradient_by_finite_differences():
    from d5.ops import test_gradient

    # Away from the kinks at +-lambd, where the gradient jumps.
    x = np.array([-2.0, -1.3, -0.2, 0.1, 0.4, 1.6, 3.0])
    result = test_gradient(_op("Shrink", lambd=1.0, bias=0.3), [x])
    assert result.passed, result
