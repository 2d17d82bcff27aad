"""The reference GraphExecutor: input checking, planning, and gradients against PyTorch autograd."""
import numpy as np
import pytest

import d5
from d5.errors import GraphError, ShapeError
from d5.frameworks import reference


@pytest.fixture(scope="module")
def lenet_executor():
    return reference.from_model(d5.models.lenet5(seed=3))


def batch(n=8, seed=0):
    rng = np.random.default_rng(seed)
    return {"input": rng.normal(size=(n, 1, 28, 28)).astype(np.float32),
            "label": rng.integers(0, 10, size=n).astype(np.int64)}


def test_wrong_shape_names_tensor_and_shapes(lenet_executor):
    bad = batch()
    bad["input"] = bad["input"][:, :, :27, :]
    with pytest.raises(ShapeError, match=r"'input'.*\(N, 1, 28, 28\).*\(8, 1, 27, 28\)"):
        lenet_executor.inference(bad)


def test_wrong_rank_and_batch_mismatch(lenet_executor):
    bad = batch()
    bad["input"] = bad["input"][0]
    with pytest.raises(ShapeError, match="rank"):
        lenet_executor.inference(bad)
    bad = batch()
    bad["label"] = bad["label"][:5]
    with pytest.raises(ShapeError, match="'N'"):
        lenet_executor.inference(bad)


def test_wrong_dtype_kind_is_rejected_same_kind_is_cast(lenet_executor):
    bad = batch()
    bad["label"] = bad["label"].astype(np.float32)
    with pytest.raises(ShapeError, match=r"'label'.*int64.*float32"):
        lenet_executor.inference(bad)
    ok = batch()
    ok["input"] = ok["input"].astype(np.float64)
    ok["label"] = ok["label"].astype(np.int32)
    assert lenet_executor.inference(ok)["output"].dtype == np.float32


def test_unknown_input_is_named(lenet_executor):
    with pytest.raises(GraphError, match="'image'"):
        lenet_executor.inference({"image": np.zeros((1, 1, 28, 28), np.float32)})


def test_inference_without_labels_returns_predictions_only(lenet_executor):
    out = lenet_executor.inference({"input": batch()["input"]})
    assert set(out) == {"output"} and out["output"].shape == (8, 10)


def test_executor_works_on_a_copy():
    net = d5.models.lenet5()
    executor = reference.from_model(net)
    executor.network.feed_tensor("conv1.weight", np.zeros_like(net.params["conv1.weight"]))
    assert np.any(net.params["conv1.weight"] != 0)


def torch_lenet_from(network):
    import torch
    from torch import nn

    model = nn.Sequential(nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(6, 16, 5), nn.ReLU(),
                          nn.MaxPool2d(2), nn.Flatten(), nn.Linear(400, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(),
                          nn.Linear(84, 10)).double()
    names = ["conv1", "conv4", "fc8", "fc10", "output"]
    layers = [m for m in model if isinstance(m, (nn.Conv2d, nn.Linear))]
    with torch.no_grad():
        for name, layer in zip(names, layers):
            layer.weight.copy_(torch.from_numpy(network.params[f"{name}.weight"].astype(np.float64)))
            layer.bias.copy_(torch.from_numpy(network.params[f"{name}.bias"].astype(np.float64)))
    return model, dict(zip(names, layers))


def test_lenet_loss_and_every_gradient_match_pytorch_autograd():
    torch = pytest.importorskip("torch")
    net = d5.models.lenet5(seed=1)
    assert {p.split(".")[0] for p in net.get_params()} == {"conv1", "conv4", "fc8", "fc10", "output"}
    model, layers = torch_lenet_from(net)
    data = batch(16, seed=2)
    executor = reference.from_model(net)
    out = executor.inference_and_backprop(data, y="loss")
    x = torch.from_numpy(data["input"].astype(np.float64))
    loss = torch.nn.functional.cross_entropy(model(x), torch.from_numpy(data["label"]))
    loss.backward()
    np.testing.assert_allclose(out["loss"], loss.item(), rtol=1e-5)
    for param, grad_name in executor.network.gradient("loss"):
        layer, kind = param.split(".")
        expected = getattr(layers[layer], kind).grad.numpy()
        got = executor.network.fetch_tensors([grad_name])[0]
        np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-5, err_msg=param)


def batchnorm_network():
    net = d5.Network("bn")
    net.add_input("x", ("N", 3, 4, 4))
    net.add_param("scale", np.ones(3, np.float32))
    net.add_param("bias", np.zeros(3, np.float32))
    net.add_param("mean", np.zeros(3, np.float32), trainable=False)
    net.add_param("var", np.ones(3, np.float32), trainable=False)
    net.add_node("BatchNormalization", ["x", "scale", "bias", "mean", "var"], ["y"], momentum=0.9)
    net.add_output("y")
    return net


def test_batchnorm_updates_running_statistics_only_in_training():
    executor = reference.from_model(batchnorm_network())
    x = np.random.default_rng(0).normal(loc=2.0, scale=3.0, size=(8, 3, 4, 4)).astype(np.float32)
    before = executor.inference({"x": x})["y"]
    np.testing.assert_allclose(before, x / np.sqrt(1 + 1e-5), rtol=1e-5)  # running stats: mean 0, var 1
    assert executor.network.fetch_tensors(["mean"])[0].tolist() == [0, 0, 0]
    train_out = executor.inference_and_backprop({"x": x}, y="y")["y"]
    np.testing.assert_allclose(train_out.mean(axis=(0, 2, 3)), 0, atol=1e-5)  # batch statistics
    mean, var = executor.network.fetch_tensors(["mean", "var"])
    np.testing.assert_allclose(mean, 0.1 * x.mean(axis=(0, 2, 3)), rtol=1e-5)
    np.testing.assert_allclose(var, 0.9 + 0.1 * x.var(axis=(0, 2, 3)), rtol=1e-5)
    assert executor.network.get_params() == ["scale", "bias"]


def test_custom_python_operator_in_a_network():
    class IPowOp(d5.CustomPythonOp):
        def __init__(self, power):
            super().__init__()
            self.power = power

        def forward(self, inputs):
            return inputs[0] ** self.power

        def backward(self, grads, fwd_inputs, fwd_outputs):
            return grads[0] * self.power * fwd_inputs[0] ** (self.power - 1)

    net = d5.Network()
    net.add_input("x", ("N", 2), "float64")
    net.add_input("t", ("N", 2), "float64")
    net.add_param("w", np.array([1.0, 2.0]))
    net.add_node("Mul", ["x", "w"], ["xw"])
    net.add_custom_node(IPowOp(3), ["xw"], ["cubed"])
    net.add_node("MeanSquaredError", ["cubed", "t"], ["loss"], reduction="sum")
    net.add_output("loss")
    x = np.array([[1.0, 1.0], [2.0, 0.5]])
    executor = reference.from_model(net)
    executor.inference_and_backprop({"x": x, "t": np.zeros_like(x)}, y="loss")
    # loss = sum((x w)^6)  =>  dloss/dw = sum_rows 6 x^6 w^5
    expected = (6 * x ** 6 * np.array([1.0, 2.0]) ** 5).sum(axis=0)
    np.testing.assert_allclose(executor.network.fetch_tensors(["w_grad"])[0], expected)


def test_inference_releases_intermediate_tensors_after_their_last_reader():
    import weakref

    class Probe(d5.CustomPythonOp):
        """Returns x + 1, remembering a weak reference to that result."""
        def __init__(self):
            super().__init__()
            self.result = None

        def forward(self, inputs):
            out = inputs[0] + 1.0
            self.result = weakref.ref(out)
            return out

        def backward(self, grads, fwd_inputs, fwd_outputs):
            return grads[0]

    class AliveCheck(d5.CustomPythonOp):
        """Records, when it runs, whether the probe's result is still held by anyone."""
        def __init__(self, probe):
            super().__init__()
            self.probe, self.alive = probe, None

        def forward(self, inputs):
            self.alive = self.probe.result() is not None
            return inputs[0] * 2.0

        def backward(self, grads, fwd_inputs, fwd_outputs):
            return grads[0] * 2.0

    probe = Probe()
    check = AliveCheck(probe)
    net = d5.Network()
    net.add_input("x", ("N", 3), "float64")
    net.add_custom_node(probe, ["x"], ["probed"])
    net.add_node("Relu", ["probed"], ["relu"])   # the last reader of "probed"
    net.add_custom_node(check, ["relu"], ["y"])
    net.add_output("y")
    executor = reference.from_model(net)
    x = np.array([[-1.0, 0.0, 2.0]])
    np.testing.assert_array_equal(executor.inference({"x": x})["y"], [[0.0, 2.0, 6.0]])
    assert check.alive is False


def test_a_training_step_stores_each_update_without_a_copy():
    """The reference's live state keeps the array an optimizer feeds (no copy per parameter per step), and the
    next pass reads that very array."""
    executor = reference.from_model(d5.models.mlp((4,), hidden=(3,), num_classes=2))
    batch = {"input": np.ones((2, 4), np.float32), "label": np.array([0, 1])}
    new = np.zeros((3, 4), np.float32)
    executor.network.feed_tensor("fc2.weight", new)
    assert executor.network.fetch_tensor("fc2.weight") is new
    executor.inference_and_backprop(batch)
    assert executor.network.fetch_tensor("fc2.weight") is new
    grad = executor.network.fetch_tensor("fc2.weight_grad")
    assert executor.network.fetch_tensors(["fc2.weight_grad"])[0] is grad
