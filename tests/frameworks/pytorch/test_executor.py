"""The PyTorch executor's own behaviour (the contract suite, tests/frameworks/test_contract.py, covers the rest):
the reference fallback through the custom-op bridge, strict mode, devices, native optimizers, from_native."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import d5  # noqa: E402
from d5.errors import D5Error, DivergenceError, GraphError, UnsupportedOperatorError  # noqa: E402
from d5.frameworks import pytorch, reference  # noqa: E402
from d5.frameworks.pytorch.executor import FallbackWarning  # noqa: E402
from d5.network.validation import compare_executors  # noqa: E402


def _network_with(op_type: str, **attrs) -> d5.Network:
    net = d5.Network("one")
    net.add_input("x", ("N", 4))
    net.add_node(op_type, ["x"], ["y"], **attrs)
    net.add_output("y")
    return net


def _unmapped_op_type() -> str:
    """An operator the reference implements and torch does not map (the fallback's case)."""
    from d5.frameworks.pytorch.operators import supported_operators as torch_ops
    from d5.frameworks.reference.operators import supported_operators as reference_ops

    for candidate in ("Shrink", "Softsign", "Mish", "ThresholdedRelu", "Celu"):
        if candidate in reference_ops() and candidate not in torch_ops():
            return candidate
    pytest.skip("every candidate operator has a torch mapping")


def test_unmapped_operators_run_on_the_reference_loudly_and_strict_refuses_them():
    op_type = _unmapped_op_type()
    net = _network_with(op_type)
    with pytest.warns(FallbackWarning, match=op_type):
        executor = pytorch.from_model(net)
    assert executor.fallback_operators == [op_type]
    x = np.linspace(-2, 2, 8, dtype=np.float32).reshape(2, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per executor, at build: running warns no more
        np.testing.assert_allclose(executor.inference({"x": x})["y"], reference.from_model(net).inference({"x": x})["y"])
    with pytest.raises(UnsupportedOperatorError, match=f"pytorch.*{op_type}|{op_type}.*pytorch"):
        pytorch.from_model(net, strict=True)


def test_an_operator_nobody_implements_is_refused_when_the_executor_is_built():
    net = d5.Network("unknown")
    net.add_input("x", ("N", 4))
    net.add_node("Relu", ["x"], ["y"])
    net.add_output("y")
    net.nodes[0].op_type = "NoSuchOp"  # what a hand-edited graph may hold; validation has no schema for it
    with pytest.raises((UnsupportedOperatorError, D5Error), match="NoSuchOp"):
        pytorch.from_model(net)


def test_a_gpu_this_machine_lacks_is_a_d5_error():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(D5Error, match="CPU"):
        pytorch.from_model(d5.models.lenet5(), device=d5.GPUDevice(0))


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


def test_a_nan_loss_is_a_divergence_error_before_any_update():
    executor = pytorch.from_model(d5.models.mlp((4,), hidden=(3,), num_classes=2))
    optimizer = pytorch.MomentumOptimizer(executor, lr=0.1)
    before = executor.network.fetch_tensor("fc2.weight").copy()
    with pytest.raises(DivergenceError, match="step 1"):
        optimizer.step({"input": np.full((2, 4), np.nan, np.float32), "label": np.array([0, 1])})
    np.testing.assert_array_equal(executor.network.fetch_tensor("fc2.weight"), before)


def test_native_optimizers_need_a_pytorch_executor():
    with pytest.raises(D5Error, match="pytorch executor"):
        pytorch.MomentumOptimizer(reference.from_model(d5.models.lenet5()))


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
    modules = [entry[0] for entry in executor._modules.values()]
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
