"""Elementwise operators (arithmetic, unary math, trigonometry, bit shifts): op-specific checks."""
from __future__ import annotations

import numpy as np
import pytest

from d5.frameworks.reference.operators import create_operator
from d5.ops.validation import test_gradient as check_gradient
from _helpers import assert_same, d5_outputs, onnx_reference_outputs, onnxruntime_outputs

torch = pytest.importorskip("torch")


def test_pow_gradient_edges_follow_torch():
    x = torch.tensor([0.0, 0.0, 2.0, -2.0], dtype=torch.float64, requires_grad=True)
    y = torch.tensor([0.0, 2.0, 0.0, 3.0], dtype=torch.float64, requires_grad=True)
    (x ** y).sum().backward()
    op = create_operator("Pow", {})
    xs, ys = x.detach().numpy(), y.detach().numpy()
    out = op.forward([xs, ys])
    grad_x, grad_y = op.backward([np.ones(4)], [xs, ys], [out])
    np.testing.assert_allclose(grad_x, x.grad.numpy())
    np.testing.assert_allclose(grad_y[:3], y.grad.numpy()[:3])  # torch gives NaN at (-2)**3's exponent too
    assert np.isnan(grad_y[3]) and np.isnan(y.grad.numpy()[3])


def test_binary_ops_do_not_write_into_inputs():
    a, b = np.ones((2, 3)), np.full(3, 2.0)
    for op_type in ("Add", "Sub", "Mul", "Div"):
        op = create_operator(op_type, {})
        out = op.forward([a, b])
        op.backward([np.ones_like(out)], [a, b], [out])
    np.testing.assert_array_equal(a, 1.0)
    np.testing.assert_array_equal(b, 2.0)


def test_bitshift_left_wraps_signed_values():
    x = np.array([64, -128, 1], np.int8)
    got = create_operator("BitShift", {"direction": "LEFT"}).forward([x, np.array([1, 1, 8], np.int8)])
    np.testing.assert_array_equal(got, np.array([-128, 0, 0], np.int8))


TRIG = ["Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh"]


def _trig_input(op_type, dtype=np.float64, seed=0):
    rng = np.random.default_rng(seed)
    if op_type in ("Asin", "Acos", "Atanh"):
        return rng.uniform(-0.9, 0.9, (3, 4)).astype(dtype)
    if op_type == "Acosh":
        return rng.uniform(1.1, 4.0, (3, 4)).astype(dtype)
    if op_type == "Tan":
        return rng.uniform(-1.3, 1.3, (3, 4)).astype(dtype)
    return rng.uniform(-3.0, 3.0, (3, 4)).astype(dtype)


@pytest.mark.parametrize("op_type", TRIG)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_trigonometry_matches_oracles(op_type, dtype):
    x = _trig_input(op_type, dtype)
    # onnxruntime implements most of these for float32 only.
    oracle = onnxruntime_outputs if dtype == np.float32 else onnx_reference_outputs
    assert_same(d5_outputs(op_type, [x]), oracle(op_type, [x], opset=13), rtol=1e-5)


@pytest.mark.parametrize("op_type", TRIG)
def test_trigonometry_gradients_match_finite_differences(op_type):
    result = check_gradient(create_operator(op_type, {}), [_trig_input(op_type, seed=1)])
    assert result.passed, result


def test_trigonometry_outside_the_domain_is_nan_without_warnings():
    with np.errstate(all="raise"):
        assert np.isnan(create_operator("Acos", {}).forward([np.array([2.0])])).all()
        assert np.isnan(create_operator("Acosh", {}).forward([np.array([0.5])])).all()
    assert create_operator("Acos", {}).forward([np.float32(0.5) * np.ones((), np.float32)]).dtype == np.float32
