"""Activation operators (Relu .. Softmax, Dropout, PRelu, Shrink, Swish, ...): op-specific checks against torch, onnxruntime and finite differences."""
from __future__ import annotations

import numpy as np
import pytest

from d5.frameworks.reference.operators import create_operator
from d5.ops import test_gradient
from d5.ops.validation import test_gradient as check_gradient

torch = pytest.importorskip("torch")


def test_dropout_training_drops_and_rescales_reproducibly():
    x = np.random.default_rng(1).standard_normal((200, 100)).astype(np.float32)
    op = create_operator("Dropout", {"seed": 7})
    op.training = True
    out, mask = op.forward([x, np.array(0.3, np.float32)])
    assert out.dtype == np.float32 and mask.dtype == bool
    np.testing.assert_allclose(out, np.where(mask, x / 0.7, 0), rtol=1e-6)
    assert abs(1 - mask.mean() - 0.3) < 0.02  # 20,000 draws: the standard deviation is 0.003
    again = create_operator("Dropout", {"seed": 7})
    again.training = True
    np.testing.assert_array_equal(again.forward([x, np.array(0.3, np.float32)])[1], mask)
    op.reset_rng()
    np.testing.assert_array_equal(op.forward([x, np.array(0.3, np.float32)])[1], mask)
    assert not np.array_equal(op.forward([x, np.array(0.3, np.float32)])[1], mask)  # the stream moves on


def test_dropout_training_mode_input_activates_it():
    x = np.ones((50, 50))
    op = create_operator("Dropout", {"seed": 0})
    out, mask = op.forward([x, np.array(0.5), np.array(True)])
    assert 0 < mask.mean() < 1
    np.testing.assert_array_equal(out, np.where(mask, 2.0, 0.0))
    out, mask = op.forward([x, np.array(0.5), np.array(False)])
    assert mask.all() and np.array_equal(out, x)


@pytest.mark.parametrize("ratio", [0.2, 0.5])
def test_dropout_gradient_in_training(ratio):
    x = np.random.default_rng(0).standard_normal((6, 7))
    op = create_operator("Dropout", {"seed": 3})
    result = test_gradient(op, [x, np.array(ratio)], training=True, wrt=[0])
    assert result, result.summary()
    op.training = True
    out, mask = op.forward([x, np.array(ratio)])
    assert 0 < mask.mean() < 1
    grad = op.backward([np.ones_like(x), np.zeros_like(mask)], [x, np.array(ratio)], [out, mask])[0]
    np.testing.assert_allclose(grad, mask / (1 - ratio))


def test_softmax_family_is_stable_for_huge_inputs():
    x = np.array([[1e4, 0.0, -1e4]], dtype=np.float32)
    np.testing.assert_allclose(create_operator("Softmax", {}).forward([x]), [[1, 0, 0]])
    np.testing.assert_allclose(create_operator("LogSoftmax", {}).forward([x]), [[0, -1e4, -2e4]])
    loss, _ = create_operator("SoftmaxCrossEntropyLoss", {}).forward([x, np.array([2])])
    assert np.isfinite(loss) and loss.dtype == np.float32 and loss.shape == ()
    np.testing.assert_allclose(loss, 2e4)


@pytest.mark.parametrize("shape", [(2, 3, 4), (2, 3, 4, 5), (1, 3, 2, 2, 2)])
def test_prelu_per_channel_slope_matches_torch_prelu(shape):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    x, slope, dy = rng.normal(size=shape), rng.uniform(0.1, 0.5, 3), rng.normal(size=shape)
    op = create_operator("PRelu", {})
    y = op.forward([x, slope])
    tx, tslope = (torch.tensor(a, requires_grad=True) for a in (x, slope))
    expected = torch.nn.functional.prelu(tx, tslope)  # PyTorch's weight of C values applies along axis 1
    expected.backward(torch.tensor(dy))
    np.testing.assert_allclose(y, expected.detach().numpy(), rtol=1e-12)
    grad_x, grad_slope = op.backward([dy], [x, slope], [y])
    np.testing.assert_allclose(grad_x, tx.grad.numpy(), rtol=1e-12)
    assert grad_slope.shape == (3,)
    np.testing.assert_allclose(grad_slope, tslope.grad.numpy(), rtol=1e-10)


def test_piecewise_gradients_away_from_kinks():
    x = np.array([[-4.0, -2.0, -0.5, 0.7, 2.5, 4.0]])
    assert check_gradient(create_operator("HardSwish", {}), [x]).passed
    assert check_gradient(create_operator("ThresholdedRelu", {"alpha": 0.5}), [x]).passed


def test_shrink_gradient_by_finite_differences():
    from d5.ops import test_gradient

    # Away from the kinks at +-lambd, where the gradient jumps.
    x = np.array([-2.0, -1.3, -0.2, 0.1, 0.4, 1.6, 3.0])
    result = test_gradient(create_operator("Shrink", {"lambd": 1.0, "bias": 0.3}), [x])
    assert result.passed, result


@pytest.mark.parametrize("op_type, alpha", [("Swish", 1.0), ("Swish", 0.7), ("SwiGLU", 1.3)])
def test_swish_family_gradient(op_type, alpha):
    from d5.frameworks.reference.operators import create_operator
    from d5.ops.validation import test_gradient

    rng = np.random.default_rng(1234)
    inputs = [rng.standard_normal((3, 5)) for _ in range(1 if op_type == "Swish" else 2)]
    assert test_gradient(create_operator(op_type, {"alpha": alpha}), inputs).passed
