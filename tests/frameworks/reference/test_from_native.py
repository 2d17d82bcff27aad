"""reference.from_native: a model written natively for the reference framework (NumPy code) as an executor."""
from __future__ import annotations

import numpy as np
import pytest

from d5.errors import GraphError, UnsupportedOperatorError
from d5.frameworks import reference
from d5.ops import CustomPythonOp, test_gradient


class Affine(CustomPythonOp):
    """y = x @ w + b, with its backward."""

    def forward(self, inputs):
        x, w, b = inputs
        return x @ w + b

    def backward(self, grads, fwd_inputs, fwd_outputs):
        x, w, _ = fwd_inputs
        g = grads[0]
        return g @ w.T, x.T @ g, g.sum(axis=0)


class SquaredError(CustomPythonOp):
    """sum((output - label)^2) / 2: a loss written as a CustomOp."""

    def forward(self, inputs):
        out, label = inputs
        return np.asarray(0.5 * np.sum((out - label) ** 2), out.dtype)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        out, label = fwd_inputs
        return grads[0] * (out - label), None


def _params(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"w": rng.normal(size=(3, 4)), "b": rng.normal(size=4)}


def test_a_custom_op_with_a_named_loss_trains_like_its_own_gradient():
    params = _params()
    executor = reference.from_native(Affine(), "SoftmaxCrossEntropyLoss", params=params, input_dtype="float64")
    x, label = np.random.default_rng(1).normal(size=(5, 3)), np.array([0, 1, 2, 3, 0])
    outputs = executor.inference_and_backprop({"input": x, "label": label})
    logits = x @ params["w"] + params["b"]
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    np.testing.assert_allclose(outputs["loss"], -log_probs[np.arange(5), label].mean(), rtol=1e-10)
    # The parameters' gradients are those of the CustomOp's backward, which a finite-difference check confirms.
    assert test_gradient(Affine(), [x, params["w"], params["b"]]).passed
    probs = np.exp(log_probs)
    probs[np.arange(5), label] -= 1
    np.testing.assert_allclose(executor.network.fetch_tensor("w_grad"), x.T @ probs / 5, rtol=1e-8)
    assert executor.network.get_params() == ["w", "b"]


def test_a_custom_op_loss_and_an_optimizer_step():
    params = _params()
    executor = reference.from_native(Affine(), SquaredError(), params=params, input_dtype="float64")
    x, label = np.ones((2, 3)), np.zeros((2, 4))
    before = float(executor.inference({"input": x, "label": label})["loss"])
    optimizer = reference.GradientDescent(executor, lr=0.05)
    for _ in range(5):
        optimizer.step({"input": x, "label": label})
    assert float(executor.inference({"input": x, "label": label})["loss"]) < before


def test_a_plain_function_runs_inference_and_refuses_training_by_name():
    executor = reference.from_native(lambda x, scale: x * scale, params={"scale": np.array(2.0, np.float32)})
    np.testing.assert_array_equal(executor.inference({"input": np.ones(3, np.float32)})["output"], [2, 2, 2])
    with pytest.raises(UnsupportedOperatorError, match="has no gradient.*pass a d5.ops.CustomOp with backward"):
        executor.inference_and_backprop({"input": np.ones(3, np.float32)}, y="output")


@pytest.mark.parametrize("model, loss, message", [
    (42, None, "must be a d5.ops.CustomOp or a callable"),
    (Affine(), "HingeLoss", "unknown loss 'HingeLoss'"),
    (Affine(), 3.5, "loss must be a loss operator's name or a d5.ops.CustomOp"),
])
def test_bad_arguments_are_d5_errors(model, loss, message):
    with pytest.raises(GraphError, match=message):
        reference.from_native(model, loss, params=_params())
