"""The model zoo: published parameter counts, equality with independent PyTorch implementations (weights
copied by name), ONNX export checked by onnx.checker and onnxruntime, and whole-network gradients against
float64 finite differences."""
from __future__ import annotations

import numpy as np
import pytest

import d5
from d5.errors import ShapeError
from d5.frameworks import reference
from d5.frameworks.reference.operators import supported_operators
from d5.models import lenet5, lstm_lm, mlp, resnet, simple_cnn, wide_resnet
from d5.models.resnet import IMAGENET_LAYOUTS
from d5.network.gradient_check import check_network_gradient
from d5.ops import CustomPythonOp


def trainable_count(net) -> int:
    return sum(net.params[p].size for p in net.get_params())


# ------------------------------------------------------------------------------------------ parameter counts

@pytest.mark.parametrize("build, expected", [
    # CIFAR, option A (parameter-free shortcuts): the counts of He et al. 2016 table 6 / Idelbayev's code.
    (lambda: resnet(20), 269_722), (lambda: resnet(32), 464_154), (lambda: resnet(44), 658_586),
    (lambda: resnet(56), 853_018), (lambda: resnet(110), 1_727_962),
    # Option B adds a 1x1 conv + BN on the two down-sampling shortcuts: 16*32 + 64 + 32*64 + 128 = 2,752.
    (lambda: resnet(20, shortcut="B"), 272_474), (lambda: resnet(44, shortcut="B"), 661_338),
    # ImageNet, torchvision's figures.
    (lambda: resnet(18, "imagenet"), 11_689_512), (lambda: resnet(34, "imagenet"), 21_797_672),
    (lambda: resnet(50, "imagenet"), 25_557_032),
    (lambda: resnet(18, "imagenet", num_classes=10, input_shape=(3, 64, 64)), 11_181_642),
    # Wide ResNets (Zagoruyko & Komodakis): WRN-16-4 2.7M, WRN-28-10 36.5M.
    (lambda: wide_resnet(16, 4), 2_748_890), (lambda: wide_resnet(28, 10), 36_479_194),
    (lambda: lenet5(), 61_706), (lambda: mlp(), 535_818), (lambda: simple_cnn(), 421_642),
    # 2 * 10k * 200 (embedding + decoder) + 10k decoder bias + 2 layers * (2 * 4 * 200 * 200 + 8 * 200).
    (lambda: lstm_lm(), 4_653_200),
])
def test_published_parameter_counts(build, expected):
    assert trainable_count(build()) == expected


def test_batch_norm_statistics_are_not_trainable_and_convs_before_bn_have_no_bias():
    net = resnet(20)
    assert "layer1.0.bn1.running_mean" in net.params and not net.is_trainable("layer1.0.bn1.running_mean")
    assert not any(name.endswith(".bias") and name.split(".")[-2].startswith("conv") for name in net.params)
    np.testing.assert_array_equal(net.params["bn1.weight"], 1)
    np.testing.assert_array_equal(net.params["bn1.bias"], 0)
    # Kaiming normal, fan_out: std = sqrt(2 / (64 * 3 * 3)) for the last stage's convs.
    assert net.params["layer3.2.conv2.weight"].std() == pytest.approx(np.sqrt(2 / 576), rel=0.05)


def test_every_registered_model_builds_with_a_symbolic_batch():
    for name, builder in d5.models.MODELS.items():
        net = builder() if name not in ("resnet", "wide_resnet") else builder(20 if name == "resnet" else 16, *(
            (2,) if name == "wide_resnet" else ()))
        assert isinstance(net, d5.Network), name
        assert net.inputs["input"].shape[0] == "N" and net.inputs["label"].shape[0] == "N", name
        assert net.outputs == ["output", "loss"], name
        net.validate()


def test_seeds_make_models_reproducible():
    a, b, c = resnet(8, seed=1), resnet(8, seed=1), resnet(8, seed=2)
    assert all(np.array_equal(a.params[k], b.params[k]) for k in a.params)
    assert not np.array_equal(a.params["conv1.weight"], c.params["conv1.weight"])


@pytest.mark.parametrize("call, message", [
    (lambda: resnet(21), r"6n\+2"), (lambda: resnet(18), r"dataset=.imagenet."),
    (lambda: resnet(19, "imagenet"), "no ImageNet ResNet"),
    (lambda: resnet(20, "svhn"), "unknown dataset"), (lambda: resnet(20, shortcut="C"), "shortcut"),
    (lambda: resnet(18, "imagenet", input_shape=(3, 16, 16)), "H, W >= 32"),
    (lambda: wide_resnet(15, 2), r"6n\+4"), (lambda: lstm_lm(hidden=0), "hidden"),
    (lambda: simple_cnn((1, 2, 2)), "too small"),
])
def test_bad_arguments_raise_shape_errors(call, message):
    with pytest.raises(ShapeError, match=message):
        call()


# ------------------------------------------------------------------------- independent PyTorch implementation

def torch_resnet(kind: str, depth: int, num_classes: int, shortcut: str = "A"):
    """A from-scratch PyTorch ResNet with the parameter names of torchvision / Idelbayev's CIFAR code."""
    torch = pytest.importorskip("torch")
    nn = torch.nn

    class ZeroPadShortcut(nn.Module):
        def __init__(self, extra):
            super().__init__()
            self.extra = extra

        def forward(self, x):
            x = x[:, :, ::2, ::2]
            return torch.cat([x, torch.zeros_like(x).repeat(1, self.extra, 1, 1)], 1)

    def conv_bn(cin, cout, k, stride):
        return nn.Sequential(nn.Conv2d(cin, cout, k, stride, k // 2, bias=False), nn.BatchNorm2d(cout))

    class Block(nn.Module):
        def __init__(self, cin, planes, stride, bottleneck, shortcut_name):
            super().__init__()
            cout = planes * (4 if bottleneck else 1)
            shapes = [(cin, planes, 1, 1), (planes, planes, 3, stride), (planes, cout, 1, 1)] if bottleneck else \
                [(cin, planes, 3, stride), (planes, planes, 3, 1)]
            for i, (a, b, k, s) in enumerate(shapes, 1):
                setattr(self, f"conv{i}", nn.Conv2d(a, b, k, s, k // 2, bias=False))
                setattr(self, f"bn{i}", nn.BatchNorm2d(b))
            self.n = len(shapes)
            self.shortcut_name = shortcut_name
            if stride != 1 or cin != cout:
                setattr(self, shortcut_name, ZeroPadShortcut(cout // cin - 1) if shortcut == "A" and kind == "cifar"
                        else conv_bn(cin, cout, 1, stride))
            else:
                setattr(self, shortcut_name, nn.Identity())

        def forward(self, x):
            out = x
            for i in range(1, self.n + 1):
                out = getattr(self, f"bn{i}")(getattr(self, f"conv{i}")(out))
                if i < self.n:
                    out = torch.relu(out)
            return torch.relu(out + getattr(self, self.shortcut_name)(x))

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            if kind == "cifar":
                stages, widths, bottleneck, stem = [(depth - 2) // 6] * 3, (16, 32, 64), False, 16
                self.conv1, self.pool = nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.Identity()
            else:
                kind_, stages = IMAGENET_LAYOUTS[depth]
                widths, bottleneck, stem = (64, 128, 256, 512), kind_ == "bottleneck", 64
                self.conv1, self.pool = nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.MaxPool2d(3, 2, 1)
            self.bn1 = nn.BatchNorm2d(stem)
            cin = stem
            for s, (count, planes) in enumerate(zip(stages, widths)):
                blocks = []
                for i in range(count):
                    blocks.append(Block(cin, planes, 2 if s and not i else 1, bottleneck,
                                        "shortcut" if kind == "cifar" else "downsample"))
                    cin = planes * (4 if bottleneck else 1)
                setattr(self, f"layer{s + 1}", nn.Sequential(*blocks))
            setattr(self, "linear" if kind == "cifar" else "fc", nn.Linear(cin, num_classes))
            self.head = "linear" if kind == "cifar" else "fc"

        def forward(self, x):
            x = self.pool(torch.relu(self.bn1(self.conv1(x))))
            for s in range(1, 4 if kind == "cifar" else 5):
                x = getattr(self, f"layer{s}")(x)
            return getattr(self, self.head)(x.mean((2, 3)))

    return Net()


def copy_weights_into_torch(net, model):
    import torch

    state = {k: v for k, v in model.state_dict().items() if not k.endswith("num_batches_tracked")}
    assert set(state) == set(net.params)
    for name, tensor in state.items():
        assert tuple(tensor.shape) == net.params[name].shape, name
        tensor.copy_(torch.from_numpy(net.params[name]))


def randomize_bn_statistics(net, seed=0):
    rng = np.random.default_rng(seed)
    for name, value in net.params.items():
        if name.endswith("running_mean"):
            value[...] = rng.normal(0, 0.1, value.shape)
        elif name.endswith("running_var"):
            value[...] = rng.uniform(0.5, 1.5, value.shape)
        elif name.endswith("bn1.weight") or name.endswith("bn2.weight") or name.endswith("bn3.weight"):
            value[...] = rng.uniform(0.5, 1.0, value.shape)


@pytest.mark.parametrize("depth, dataset, shortcut, size", [
    (20, "cifar10", "A", 32), (8, "cifar10", "B", 16), (18, "imagenet", "B", 64), (50, "imagenet", "B", 64),
])
def test_resnet_matches_an_independent_pytorch_implementation(depth, dataset, shortcut, size):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    classes = 10 if dataset == "cifar10" else 7
    net = resnet(depth, dataset, num_classes=classes, shortcut=shortcut, input_shape=(3, size, size))
    randomize_bn_statistics(net)
    model = torch_resnet("cifar" if dataset == "cifar10" else "imagenet", depth, classes, shortcut)
    copy_weights_into_torch(net, model)
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, 3, size, size)).astype(np.float32)
    label = np.array([1, 3])
    executor = reference.from_model(net)
    model.eval()
    with torch.no_grad():
        expected = model(torch.from_numpy(x)).numpy()
    got = executor.inference({"input": x, "label": label})["output"]
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())
    if depth > 20:
        return
    # Training mode (batch statistics), gradients and running-statistics updates too.
    model.train()
    logits = model(torch.from_numpy(x))
    loss = torch.nn.functional.cross_entropy(logits, torch.from_numpy(label))
    loss.backward()
    outputs = executor.inference_and_backprop({"input": x, "label": label})
    assert float(outputs["loss"]) == pytest.approx(loss.item(), rel=1e-5)
    for name, param in model.named_parameters():
        expected_grad = param.grad.numpy()  # float32 sums over many terms: tolerance relative to the largest
        np.testing.assert_allclose(executor.network.fetch_tensor(f"{name}_grad"), expected_grad, rtol=1e-3,
                                   atol=1e-4 * np.abs(expected_grad).max(), err_msg=name)
    running = dict(model.named_buffers())
    np.testing.assert_allclose(executor.network.fetch_tensor("bn1.running_mean"), running["bn1.running_mean"].numpy(),
                               rtol=1e-4, atol=1e-6)
    # ONNX updates the running variance with the biased batch variance, PyTorch with the unbiased one.
    # layer3 works at 1/4 of a CIFAR input and 1/16 of an ImageNet one.
    name, count = "layer3.0.bn2.running_var", 2 * (size // (4 if dataset == "cifar10" else 16)) ** 2
    old = net.params[name]
    batch_var_biased = (running[name].numpy() - 0.9 * old) / 0.1 * (count - 1) / count
    np.testing.assert_allclose(executor.network.fetch_tensor(name), 0.9 * old + 0.1 * batch_var_biased, rtol=1e-4)


# ------------------------------------------------------------------------------- ONNX export + onnxruntime

def small_zoo():
    """(name, network, inputs) for every zoo model at a small size."""
    rng = np.random.default_rng(0)

    def images(c, h, w, n=2):
        return rng.normal(size=(n, c, h, w)).astype(np.float32)

    def labels(n, classes):
        return rng.integers(0, classes, n)

    words = rng.integers(0, 50, (2, 5))
    return [
        ("lenet5", lenet5(), {"input": images(1, 28, 28), "label": labels(2, 10)}),
        ("mlp", mlp(), {"input": images(1, 28, 28), "label": labels(2, 10)}),
        ("simple_cnn", simple_cnn((3, 16, 16)), {"input": images(3, 16, 16), "label": labels(2, 10)}),
        ("resnet20", resnet(20), {"input": images(3, 32, 32), "label": labels(2, 10)}),
        ("resnet8_B", resnet(8, shortcut="B", input_shape=(3, 16, 16)), {"input": images(3, 16, 16), "label": labels(2, 10)}),
        ("resnet18", resnet(18, "imagenet", input_shape=(3, 64, 64)), {"input": images(3, 64, 64), "label": labels(2, 1000)}),
        ("resnet50", resnet(50, "imagenet", input_shape=(3, 64, 64)), {"input": images(3, 64, 64, 1), "label": labels(1, 1000)}),
        ("wrn16_2_dropout", wide_resnet(16, 2, dropout=0.3), {"input": images(3, 32, 32), "label": labels(2, 10)}),
        ("lstm_lm", lstm_lm(50, 8, 2, 5), {"input": words, "label": np.roll(words, -1, axis=1)}),
    ]


def missing_reference_ops(net) -> list[str]:
    return sorted({n.op_type for n in net.nodes} - set(supported_operators()))


@pytest.mark.parametrize("name, net, inputs", small_zoo(), ids=[case[0] for case in small_zoo()])
def test_zoo_model_exports_to_valid_onnx_matching_the_reference_executor(name, net, inputs):
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    model = net.to_onnx()
    onnx.checker.check_model(model, full_check=True)
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "N"
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = dict(zip([o.name for o in session.get_outputs()], session.run(None, inputs)))
    missing = missing_reference_ops(net)
    if missing:
        # d5's reference cannot run it yet: still check the exported graph against ONNX's own evaluator.
        from onnx.reference import ReferenceEvaluator

        expected = dict(zip(net.outputs, ReferenceEvaluator(model).run(None, inputs)))
        np.testing.assert_allclose(got["output"], expected["output"], rtol=1e-4, atol=1e-5)
        pytest.skip(f"the reference framework lacks {missing}; compared onnxruntime with onnx.reference only")
    expected = reference.from_model(net).inference(inputs)
    for key in ("output", "loss"):
        np.testing.assert_allclose(got[key], expected[key], rtol=1e-4, atol=1e-5, err_msg=f"{name}: {key}")


# ----------------------------------------------------------------------------------- whole-network gradients

def gradient_cases():
    rng = np.random.default_rng(0)
    img = lambda c, h, n=3: rng.normal(size=(n, c, h, h))  # noqa: E731
    words = rng.integers(0, 11, (2, 4))
    return [
        ("mlp", mlp((1, 6, 6), hidden=(7, 5), num_classes=3), {"input": img(1, 6), "label": np.array([0, 2, 1])}),
        ("simple_cnn", simple_cnn((2, 8, 8), channels=(3, 4), hidden=6, num_classes=3),
         {"input": img(2, 8), "label": np.array([0, 2, 1])}),
        ("lenet5", lenet5(), {"input": img(1, 28, 2), "label": np.array([3, 7])}),
        ("resnet8_A", resnet(8, num_classes=3, input_shape=(3, 8, 8)), {"input": img(3, 8), "label": np.array([0, 1, 2])}),
        ("resnet8_B", resnet(8, num_classes=3, shortcut="B", input_shape=(3, 8, 8)),
         {"input": img(3, 8), "label": np.array([0, 1, 2])}),
        ("wrn10_1", wide_resnet(10, 1, num_classes=3, input_shape=(3, 8, 8)),
         {"input": img(3, 8), "label": np.array([0, 1, 2])}),
        ("lstm_lm", lstm_lm(11, 4, 2, 4), {"input": words, "label": np.roll(words, 1, axis=1)}),
    ]


@pytest.mark.parametrize("name, net, inputs", gradient_cases(), ids=[case[0] for case in gradient_cases()])
def test_whole_network_gradients_match_finite_differences(name, net, inputs):
    missing = missing_reference_ops(net)
    if missing:
        pytest.skip(f"the reference framework lacks {missing} (being added); nothing to differentiate yet")
    result = check_network_gradient(net, inputs, from_model=reference.from_model)
    assert result.passed, result.summary()
    assert len(result.param_names) == len(net.get_params())


class ScaleWithWrongGradient(CustomPythonOp):
    def forward(self, inputs):
        return inputs[0] * 3

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return grads[0] * 2  # should be 3


def test_gradient_check_names_the_parameters_behind_a_wrong_gradient():
    net = d5.Network("broken")
    net.add_input("x", ("N", 4), "float32")
    net.add_input("t", ("N", 2), "float32")
    rng = np.random.default_rng(0)
    net.add_param("W1", rng.normal(size=(3, 4)).astype(np.float32))
    net.add_param("W2", rng.normal(size=(2, 3)).astype(np.float32))
    net.add_node("Gemm", ["x", "W1"], ["h"], transB=1)
    net.add_custom_node(ScaleWithWrongGradient(), ["h"], ["h3"])
    net.add_node("Gemm", ["h3", "W2"], ["y"], transB=1)
    net.add_node("MeanSquaredError", ["y", "t"], ["loss"])
    net.add_output("loss")
    result = check_network_gradient(net, {"x": rng.normal(size=(5, 4)), "t": rng.normal(size=(5, 2))},
                                    from_model=reference.from_model)
    assert not result.passed
    assert result.failed_params == ["W1"]  # W2 is downstream of the broken operator, so its gradient is right
    assert "W1" in result.summary()
    assert net.params["W1"].dtype == np.float32  # the caller's network is left alone
