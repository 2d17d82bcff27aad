"""What only the TensorFlow executor does: channels-last activations with the layout changed at the graph boundary
only, one traced function per input signature (no retracing per step), the eager run of a network whose shapes are
fed as inputs, and a user's Keras model trained through from_native. The framework-neutral duties are the contract
suites' (tests/frameworks/test_contract*.py)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import d5
from d5.frameworks import reference
from d5.frameworks.base import FallbackWarning

tf = pytest.importorskip("tensorflow")
d5tf = pytest.importorskip("d5.frameworks.tensorflow")


def _traced_ops(executor, feeds, y=None):
    """The operation types of the traced function a pass runs (inference, or training with ``y``)."""
    fed = executor.check_inputs(feeds)
    function, inputs, _ = executor.plan(frozenset(fed), y)
    concrete = function.get_concrete_function(*[tf.constant(fed[name]) for name in inputs])
    return [op.type for op in concrete.graph.get_operations()]


@pytest.mark.parametrize("model, convolutions", [("lenet5", 2), ("resnet44", 43)])
def test_activations_change_layout_at_the_boundary_only_never_around_each_convolution(model, convolutions):
    network = d5.models.lenet5() if model == "lenet5" else d5.models.resnet(44)
    executor = d5tf.from_model(network)
    shape = (2, 1, 28, 28) if model == "lenet5" else (2, 3, 32, 32)
    feeds = {"input": np.zeros(shape, np.float32)}
    executor.inference(feeds)
    ops = _traced_ops(executor, feeds)
    assert ops.count("Conv2D") == convolutions
    # one transpose per weight (OIHW -> HWIO, a few KB) and two for the activations: in, and out before Flatten
    assert ops.count("Transpose") == convolutions + 2, ops.count("Transpose")


def test_one_trace_per_input_signature_and_none_per_step():
    executor = d5tf.from_model(d5.models.lenet5())
    optimizer = d5tf.MomentumOptimizer(executor, 0.01, 0.9)
    rng = np.random.default_rng(0)
    for step in range(4):
        optimizer.lr = 0.01 / (step + 1)  # a new learning rate every step: a variable, no retrace
        optimizer.step({"input": rng.standard_normal((4, 1, 28, 28)).astype(np.float32),
                        "label": rng.integers(0, 10, 4)})
    traced = [plan[0] for plan in executor._plans.values() if hasattr(plan[0], "experimental_get_tracing_count")]
    assert traced and all(function.experimental_get_tracing_count() == 1 for function in traced)


def test_a_shape_fed_as_an_input_runs_eagerly_with_a_warning_and_the_reference_s_result():
    network = d5.Network("fed-shape")
    network.add_input("x", (2, 6), np.float32)
    network.add_input("shape", (2,), np.int64)
    network.add_node("Reshape", ["x", "shape"], ["y"])
    network.add_node("Relu", ["y"], ["z"])
    network.add_output("z")
    feeds = {"x": np.linspace(-1, 1, 12, dtype=np.float32).reshape(2, 6), "shape": np.array([3, 4])}
    executor = d5tf.from_model(network)
    with pytest.warns(FallbackWarning, match="Reshape's shape.*runs eagerly"):
        out = executor.inference(feeds)
    np.testing.assert_array_equal(out["z"], reference.from_model(network).inference(feeds)["z"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once
        other = executor.inference({**feeds, "shape": np.array([4, 3])})
    assert other["z"].shape == (4, 3)


def test_a_keras_model_trains_through_d5_as_keras_trains_it():
    import keras

    def model():
        keras.utils.set_random_seed(0)
        return keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(3)])

    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((16, 4)).astype(np.float32), rng.integers(0, 3, 16)
    ours, theirs = model(), model()
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    executor = d5tf.from_native(ours, loss, {"input": ("N", 4)})
    optimizer = d5tf.GradientDescent(executor, 0.1)
    keras_optimizer = keras.optimizers.SGD(0.1)
    for _ in range(5):
        optimizer.step({"input": x, "label": y})
        with tf.GradientTape() as tape:
            value = loss(y, theirs(x, training=True))
        keras_optimizer.apply_gradients(zip(tape.gradient(value, theirs.trainable_variables),
                                            theirs.trainable_variables))
    for mine, reference_weight in zip(ours.trainable_variables, theirs.trainable_variables):
        np.testing.assert_allclose(mine.numpy(), reference_weight.numpy(), rtol=1e-5, atol=1e-6)
