"""The PyTorch executor's own behaviour: native optimizers against torch.optim, from_native, the generated fx
module. What every framework does alike is checked on every framework by the contract suite
(tests/frameworks/test_contract*.py)."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import d5  # noqa: E402
from d5.errors import GraphError, ShapeError  # noqa: E402
from d5.frameworks import pytorch, reference  # noqa: E402
from d5.network.validation import compare_executors  # noqa: E402


def test_native_momentum_optimizer_matches_a_hand_written_torch_loop():
    net = d5.models.lenet5()
    rng = np.random.default_rng(0)
    batch = {"input": rng.normal(size=(4, 1, 28, 28)).astype(np.float32), "label": rng.integers(0, 10, 4)}
    executor = pytorch.from_model(net)
    optimizer = pytorch.MomentumOptimizer(executor, lr=0.05, momentum=0.9)
    params = {name: torch.nn.Parameter(torch.from_numpy(value.copy())) for name, value in net.params.items()}
    by_hand = torch.optim.SGD(params.values(), lr=0.05, momentum=0.9)
    for _ in range(3):
        optimizer.step(batch)
        # The same steps by hand: d5's graph on the reference gives the gradients, torch.optim applies them.
        oracle = reference.from_model(net)
        for name, param in params.items():
            oracle.network.feed_tensor(name, param.detach().numpy().copy())
        oracle.inference_and_backprop(batch)
        for name, param in params.items():
            param.grad = torch.from_numpy(oracle.network.fetch_tensor(f"{name}_grad").copy())
        by_hand.step()
    for name, param in params.items():
        np.testing.assert_allclose(executor.network.fetch_tensor(name), param.detach().numpy(), rtol=1e-4, atol=1e-6)


def test_a_learning_rate_schedule_reaches_the_torch_optimizer():
    executor = pytorch.from_model(d5.models.mlp((4,), hidden=(3,), num_classes=2))
    optimizer = pytorch.GradientDescent(executor, lr=0.1)
    optimizer.lr = 0.0
    before = executor.network.fetch_tensor("fc2.weight").copy()
    optimizer.step({"input": np.ones((2, 4), np.float32), "label": np.array([0, 1])})
    np.testing.assert_array_equal(executor.network.fetch_tensor("fc2.weight"), before)


def test_hyperparameters_set_between_steps_reach_the_torch_parameter_groups():
    executor = pytorch.from_model(d5.models.mlp((4,), hidden=(3,), num_classes=2))
    adam = pytorch.AdamOptimizer(executor, lr=0.1)
    adam.beta1, adam.epsilon, adam.weight_decay = 0.5, 1e-3, 0.01
    group = adam.torch_optimizer.param_groups[0]
    assert (group["betas"], group["eps"], group["weight_decay"], group["lr"]) == ((0.5, 0.999), 1e-3, 0.01, 0.1)
    momentum = pytorch.MomentumOptimizer(executor, lr=0.1)
    momentum.momentum, momentum.nesterov = 0.5, True
    assert momentum.torch_optimizer.param_groups[0]["momentum"] == 0.5
    assert momentum.torch_optimizer.param_groups[0]["nesterov"] is True


def test_converters_plan_each_input_shape_anew():
    """Conv and pooling memoize their geometry per input shape: a new shape gets its own (SAME padding differs
    between odd and even sizes), checked against the reference on each."""
    net = d5.Network()
    net.add_input("x", ("N", 1, "H", "W"), "float32")
    net.add_param("w", np.random.default_rng(0).standard_normal((2, 1, 3, 3)).astype(np.float32))
    net.add_node("Conv", ["x", "w"], ["c"], auto_pad="SAME_UPPER", strides=[2, 2])
    net.add_node("MaxPool", ["c"], ["y"], kernel_shape=[2, 2], auto_pad="SAME_LOWER", strides=[2, 2])
    net.add_node("AveragePool", ["c"], ["z"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    net.add_output("y")
    net.add_output("z")
    executor, oracle = pytorch.from_model(net), reference.from_model(net)
    for shape in [(2, 1, 7, 7), (1, 1, 8, 6), (2, 1, 7, 7), (3, 1, 5, 9)]:
        x = {"x": np.random.default_rng(len(shape)).standard_normal(shape).astype(np.float32)}
        ours, expected = executor.inference(x), oracle.inference(x)
        for name in ("y", "z"):
            np.testing.assert_allclose(ours[name], expected[name], rtol=1e-5, atol=1e-6)


def test_from_native_trains_a_users_module_in_place_like_torch():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(),
                                torch.nn.Linear(8, 3))
    twin = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(),
                               torch.nn.Linear(8, 3))
    twin.load_state_dict(model.state_dict())
    executor = pytorch.from_native(model, torch.nn.CrossEntropyLoss(), {"input": ("N", 2, 2)})
    optimizer = pytorch.MomentumOptimizer(executor, lr=0.1, momentum=0.9)
    by_hand = torch.optim.SGD(twin.parameters(), lr=0.1, momentum=0.9)
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(6, 2, 2)).astype(np.float32), rng.integers(0, 3, 6)
    for _ in range(3):
        loss = float(optimizer.step({"input": x, "label": y})["loss"])
        by_hand.zero_grad()
        expected = torch.nn.functional.cross_entropy(twin(torch.from_numpy(x)), torch.from_numpy(y))
        expected.backward()
        by_hand.step()
        assert loss == pytest.approx(float(expected), rel=1e-5)
    for (name, a), b in zip(model.state_dict().items(), twin.state_dict().values()):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6, err_msg=name)
    assert executor.network.fetch_tensor("2.running_mean").shape == (8,)  # the module's buffers are the live state


def test_from_native_refuses_what_is_not_a_module_or_loss():
    with pytest.raises(GraphError, match="torch.nn.Module"):
        pytorch.from_native(lambda x: x)
    with pytest.raises(GraphError, match="unknown loss"):
        pytorch.from_native(torch.nn.Linear(2, 2), "HingeLoss")


def test_the_generated_module_is_a_torch_fx_graph_module_per_fed_input_set():
    executor = pytorch.from_model(d5.models.lenet5())
    batch = {"input": np.zeros((2, 1, 28, 28), np.float32), "label": np.array([1, 2])}
    assert sorted(executor.inference({"input": batch["input"]})) == ["output"]
    executor.inference_and_backprop(batch)
    modules = [entry[0].__self__ for entry in executor._plans.values()]  # the bound generated forward
    assert len(modules) == 2 and all(isinstance(m, torch.fx.GraphModule) for m in modules)
    assert compare_executors(executor, reference.from_model(d5.models.lenet5()), batch)


@pytest.mark.parametrize("starts, ends, steps", [([-100], [-200], [-1]), ([-1], [-100], [-2]), ([2], [100], [2]),
                                                 ([100], [0], [-1]), ([-3], [4], [1])])
def test_slice_follows_the_same_clamping_as_the_reference(starts, ends, steps):
    """Both frameworks resolve Slice with d5.ops.onnx_semantics.slice_bounds (the spec's clamping)."""
    from d5.frameworks.pytorch.operators import create_operator as torch_op
    from d5.frameworks.reference.operators import create_operator as reference_op

    x = np.arange(5, dtype=np.float32)
    args = [np.array(v, np.int64) for v in (starts, ends, [0], steps)]
    expected = reference_op("Slice", {}).forward([x, *args])
    actual = torch_op("Slice", {})(torch.from_numpy(x), *[torch.from_numpy(a) for a in args])
    np.testing.assert_array_equal(actual.numpy(), expected)


def test_without_torch_the_package_import_names_the_extra_to_install():
    import subprocess
    import sys

    code = ("import sys; sys.modules['torch'] = None\n"
            "from d5.errors import FrameworkNotInstalledError\n"
            "try:\n    import d5.frameworks.pytorch\nexcept FrameworkNotInstalledError as err:\n    print(err)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pip install -e '.[torch]' -c constraints.txt" in done.stdout


def test_from_native_names_the_model_and_the_loss_when_they_do_not_fit():
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 3))
    executor = pytorch.from_native(model, torch.nn.CrossEntropyLoss(), {"input": ("N", 2, 2)})
    batch = {"input": np.ones((5, 2, 2), np.float32), "label": np.zeros((5, 7), np.int64)}
    with pytest.raises(ShapeError, match=r"Sequential \(shape \(5, 3\).*CrossEntropyLoss.*\(5, 7\)"):
        executor.inference_and_backprop(batch)


def test_the_fused_cross_entropy_keeps_onnx_weights_and_ignore_index():
    rng = np.random.default_rng(0)
    net = d5.Network("xent")
    net.add_input("scores", ("N", 4), np.float32)
    net.add_input("labels", ("N",), np.int64)
    net.add_param("weights", np.array([0.5, 1.0, 2.0, 0.25], np.float32), trainable=False)
    net.add_node("SoftmaxCrossEntropyLoss", ["scores", "labels", "weights"], ["loss"], ignore_index=2)
    net.add_output("loss")
    feeds = {"scores": rng.standard_normal((6, 4)).astype(np.float32), "labels": np.array([0, 2, 3, 1, 2, 0])}
    np.testing.assert_allclose(pytorch.from_model(net).inference(feeds)["loss"],
                               reference.from_model(net).inference(feeds)["loss"], rtol=1e-6)
