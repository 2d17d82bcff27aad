"""d5.network.validation.compare_executors: agreement of two executors, outputs and gradients, with a verdict."""
from __future__ import annotations

import numpy as np
import pytest

import d5
from d5.errors import D5Error
from d5.frameworks import reference
from d5.network.validation import compare_executors
from d5.ops import CustomPythonOp


class Scale(CustomPythonOp):
    """y = x * w (w a vector), with the forward and/or the backward off by a factor (a 'wrong framework')."""

    def __init__(self, forward_error: float = 1.0, backward_error: float = 1.0) -> None:
        super().__init__()
        self.forward_error, self.backward_error = forward_error, backward_error

    def forward(self, inputs):
        x, w = inputs
        return x * w * self.forward_error

    def backward(self, grads, fwd_inputs, fwd_outputs):
        x, w = fwd_inputs
        g = grads[0] * self.backward_error
        return g * w, (g * x).sum(axis=0)


def _network(op: Scale) -> d5.Network:
    net = d5.Network("scaled")
    net.add_input("x", ("N", 3))
    net.add_input("t", ("N", 3))
    net.add_param("w", np.array([1.0, 2.0, 3.0], np.float32))
    net.add_custom_node(op, ["x", "w"], ["y"])
    net.add_node("MeanSquaredError", ["y", "t"], ["loss"])
    net.add_output("y")
    net.add_output("loss")
    return net


BATCH = {"x": np.arange(6, dtype=np.float32).reshape(2, 3), "t": np.zeros((2, 3), np.float32)}


def test_identical_executors_agree_and_the_oracle_gets_the_executors_weights():
    executor, oracle = reference.from_model(_network(Scale())), reference.from_model(_network(Scale()))
    executor.network.feed_tensor("w", np.array([0.5, 0.5, 0.5], np.float32))
    result = compare_executors(executor, oracle, BATCH)
    assert result and result.failed == []
    assert [c.name for c in result.outputs] == ["y", "loss"] and [c.name for c in result.gradients] == ["w_grad"]
    np.testing.assert_array_equal(oracle.network.fetch_tensor("w"), 0.5)
    assert not np.shares_memory(oracle.network.fetch_tensor("w"), executor.network.fetch_tensor("w"))


def test_a_wrong_gradient_is_named_and_the_outputs_still_agree():
    result = compare_executors(reference.from_model(_network(Scale(backward_error=1.01))),
                               reference.from_model(_network(Scale())), BATCH)
    assert not result and result.failed == ["w_grad"]
    assert "DISAGREE" in str(result) and "'w_grad'" in str(result)


def test_a_wrong_forward_is_named_and_inference_only_compares_outputs():
    result = compare_executors(reference.from_model(_network(Scale(forward_error=1.001))),
                               reference.from_model(_network(Scale())), BATCH, y=None)
    assert result.failed == ["y", "loss"] and result.gradients == []


def test_the_tolerance_scales_with_the_tensors_largest_element():
    # An error of 1e-4 on a tensor whose largest element is 30: within atol * scale = 3e-4, though 1e-4 is far
    # from relative agreement on its small elements.
    loose = compare_executors(reference.from_model(_network(Scale())), reference.from_model(_network(Scale())),
                              BATCH, y=None, rtol=0, atol=1e-5)
    assert loose
    from d5.network.validation import _compare
    assert _compare(0, "y", np.array([1e-4, 30.0]), np.array([0.0, 30.0]), rtol=0, atol=1e-5).passed
    assert not _compare(0, "y", np.array([1e-3, 30.0]), np.array([0.0, 30.0]), rtol=0, atol=1e-5).passed


def test_different_networks_and_bad_tolerances_are_refused():
    other = reference.from_model(d5.models.mlp((3,), hidden=(2,), num_classes=3))
    with pytest.raises(D5Error, match="different networks"):
        compare_executors(reference.from_model(_network(Scale())), other, BATCH)
    with pytest.raises(D5Error, match="rtol and atol"):
        compare_executors(other, other, BATCH, rtol=-1)
