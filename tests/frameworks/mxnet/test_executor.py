"""What only the MXNet executor does: one composed graph (one CachedOp) per input signature and none per step,
gradients through the composed graph equal to the node-by-node run's and the reference's, constants folded before
running, a shape fed as an input run node by node with a warning, the bridge inside a composed graph, and a user's
Gluon block trained through from_native as Gluon trains it. The framework-neutral duties are the contract suites'
(tests/frameworks/test_contract*.py)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import d5
from d5.frameworks import reference
from d5.frameworks.base import FallbackWarning

d5mx = pytest.importorskip("d5.frameworks.mxnet")
import mxnet as mx  # noqa: E402  (imported by d5.frameworks.mxnet with its numpy.bool alias)


def _batch(shape, seed=0):
    rng = np.random.default_rng(seed)
    return {"input": rng.standard_normal(shape).astype(np.float32), "label": rng.integers(0, 10, shape[0])}


def test_one_composed_graph_per_input_signature_and_none_per_step():
    executor = d5mx.from_model(d5.models.lenet5())
    optimizer = d5mx.MomentumOptimizer(executor, 0.01, 0.9)
    for step in range(4):
        optimizer.lr = 0.01 / (step + 1)  # a new learning rate every step: nothing is composed again
        optimizer.step(_batch((4, 1, 28, 28), step))
    assert len(executor._compiled) == 1
    optimizer.step(_batch((3, 1, 28, 28)))  # another batch size: a second graph
    assert len(executor._compiled) == 2


@pytest.mark.parametrize("eager", [False, True])
def test_resnet_gradients_match_the_reference_composed_and_node_by_node(eager):
    network = d5.models.resnet(8, input_shape=(3, 16, 16))
    executor, oracle = d5mx.from_model(network), reference.from_model(network)
    executor.eager = eager
    batch = _batch((4, 3, 16, 16))
    got, want = executor.inference_and_backprop(batch), oracle.inference_and_backprop(batch)
    np.testing.assert_allclose(got["loss"], want["loss"], rtol=1e-5)
    for name in network.get_params():
        expected = oracle.network.fetch_tensor(f"{name}_grad")
        np.testing.assert_allclose(executor.network.fetch_tensor(f"{name}_grad"), expected, rtol=1e-3,
                                   atol=1e-4 * float(np.abs(expected).max()), err_msg=name)
    # training-mode BatchNormalization moved the running statistics as the reference's did
    np.testing.assert_allclose(executor.network.fetch_tensor("bn1.running_var"),
                               oracle.network.fetch_tensor("bn1.running_var"), rtol=1e-5)


def test_shape_arithmetic_is_folded_before_the_graph_runs():
    network = d5.Network("folded")
    network.add_input("x", ("N", 2, 3), np.float32)
    network.add_node("Shape", ["x"], ["s"])
    network.add_param("first", np.array([0], np.int64))
    network.add_node("Gather", ["s", "first"], ["n"], axis=0)
    network.add_param("rest", np.array([6], np.int64))
    network.add_node("Concat", ["n", "rest"], ["target"], axis=0)
    network.add_node("Reshape", ["x", "target"], ["y"])
    network.add_node("Relu", ["y"], ["z"])
    network.add_output("z")
    executor = d5mx.from_model(network)
    feeds = {"x": np.linspace(-1, 1, 24, dtype=np.float32).reshape(4, 2, 3)}
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)  # no fallback, no node-by-node run
        out = executor.inference(feeds)
    np.testing.assert_array_equal(out["z"], reference.from_model(network).inference(feeds)["z"])
    assert not executor.eager


def test_a_shape_fed_as_an_input_runs_node_by_node_with_a_warning_and_the_reference_s_result():
    network = d5.Network("fed-shape")
    network.add_input("x", (2, 6), np.float32)
    network.add_input("shape", (2,), np.int64)
    network.add_node("Reshape", ["x", "shape"], ["y"])
    network.add_node("Relu", ["y"], ["z"])
    network.add_output("z")
    feeds = {"x": np.linspace(-1, 1, 12, dtype=np.float32).reshape(2, 6), "shape": np.array([3, 4])}
    executor = d5mx.from_model(network)
    with pytest.warns(FallbackWarning, match="runs node by node"):
        out = executor.inference(feeds)
    np.testing.assert_array_equal(out["z"], reference.from_model(network).inference(feeds)["z"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once
        other = executor.inference({**feeds, "shape": np.array([4, 3])})
    assert other["z"].shape == (4, 3)


def test_a_python_operator_trains_inside_the_composed_graph():
    from d5.ops import CustomPythonOp

    class Cube(CustomPythonOp):
        def forward(self, inputs):
            return inputs[0] ** 3

        def backward(self, grads, fwd_inputs, fwd_outputs):
            return 3 * fwd_inputs[0] ** 2 * grads[0]

    network = d5.Network("cube")
    network.add_input("x", ("N", 3), np.float32)
    network.add_param("w", np.full((3, 2), 0.5, np.float32))
    network.add_node("MatMul", ["x", "w"], ["h"])
    network.add_custom_node(Cube(), ["h"], ["c"], name="cube")
    network.add_node("ReduceSum", ["c"], ["s"], keepdims=0)
    network.add_output("s")
    x = np.arange(6, dtype=np.float32).reshape(2, 3) / 6
    executor = d5mx.from_model(network)
    executor.inference_and_backprop({"x": x}, "s")
    assert not executor.eager  # the bridge is one mx.sym.Custom node of the composed graph
    h = x @ np.full((3, 2), 0.5, np.float32)
    np.testing.assert_allclose(executor.network.fetch_tensor("w_grad"), x.T @ (3 * h ** 2), rtol=1e-5)


def test_a_gluon_block_trains_through_d5_as_gluon_trains_it():
    def block():
        mx.random.seed(0)
        net = mx.gluon.nn.HybridSequential()
        net.add(mx.gluon.nn.Dense(8, activation="relu", in_units=4), mx.gluon.nn.Dense(3, in_units=8))
        net.initialize(mx.init.Xavier())
        return net

    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((16, 4)).astype(np.float32), rng.integers(0, 3, 16)
    ours, theirs = block(), block()
    loss = mx.gluon.loss.SoftmaxCrossEntropyLoss()
    executor = d5mx.from_native(ours, loss, {"input": ("N", 4)})
    optimizer = d5mx.GradientDescent(executor, 0.1)
    trainer = mx.gluon.Trainer(theirs.collect_params(), "sgd", {"learning_rate": 0.1})
    data, label = mx.nd.array(x), mx.nd.array(y)
    for _ in range(5):
        optimizer.step({"input": x, "label": y})
        with mx.autograd.record():
            value = loss(theirs(data), label).mean()
        value.backward()
        trainer.step(1)
    for mine, gluons in zip(ours.collect_params().values(), theirs.collect_params().values()):
        np.testing.assert_allclose(mine.data().asnumpy(), gluons.data().asnumpy(), rtol=1e-5, atol=1e-6)


def test_from_native_with_a_loss_that_does_not_fit_names_both():
    net = mx.gluon.nn.Dense(3, in_units=4)
    net.initialize()
    executor = d5mx.from_native(net, lambda output, label: (output - label).mean(), {"input": ("N", 4)},
                                label_dtype="float32")
    with pytest.raises(d5.errors.ShapeError, match="does not fit the loss"):
        executor.inference_and_backprop({"input": np.ones((5, 4), np.float32), "label": np.ones((5, 7), np.float32)})


def test_the_fused_momentum_kernel_follows_the_reference_in_float32_with_the_rate_changing():
    network = d5.models.mlp((5,), hidden=(4,), num_classes=3, seed=0)
    rng = np.random.default_rng(0)
    ours, oracle = d5mx.from_model(network), reference.from_model(network)
    fused = d5mx.MomentumOptimizer(ours, 0.1, 0.9, weight_decay=0.01)
    expected = d5.MomentumOptimizer(oracle, 0.1, 0.9, weight_decay=0.01)
    for step in range(8):
        batch = {"input": rng.standard_normal((8, 5)).astype(np.float32), "label": rng.integers(0, 3, 8)}
        fused.lr = expected.lr = 0.1 * (1 + step % 3)
        fused.step(batch)
        expected.step(batch)
    assert "scale" in vars(fused.native)  # the multi-tensor kernel ran
    for name in network.get_params():
        np.testing.assert_allclose(ours.network.fetch_tensor(name), oracle.network.fetch_tensor(name), atol=5e-6)
    # the saved state is torch's velocity: a run resumed from it continues exactly
    state, params = fused.state_dict(), {name: ours.network.fetch_tensor(name) for name in network.get_params()}
    resumed_executor = d5mx.from_model(network)
    for name, value in params.items():
        resumed_executor.network.feed_tensor(name, value)
    resumed = d5mx.MomentumOptimizer(resumed_executor, 0.1, 0.9, weight_decay=0.01)
    resumed.load_state_dict(state)
    for step in range(2):
        batch = {"input": rng.standard_normal((8, 5)).astype(np.float32), "label": rng.integers(0, 3, 8)}
        fused.lr = resumed.lr = 0.05 * (step + 1)
        fused.step(batch)
        resumed.step(batch)
    for name in network.get_params():
        np.testing.assert_allclose(resumed_executor.network.fetch_tensor(name), ours.network.fetch_tensor(name),
                                   rtol=1e-6, atol=1e-7)
