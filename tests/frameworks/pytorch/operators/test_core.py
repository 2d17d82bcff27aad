"""What is PyTorch's own in its converters of the zoo's and common operators: every zoo operator has a converter,
converters are torch modules chosen by opset, and Dropout's training-mode mask on torch tensors. The comparisons of
every framework's native_op with the reference (the case table) are in tests/frameworks/operators/test_core.py."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from d5.frameworks.pytorch.operators import create_operator, supported_operators  # noqa: E402


def test_zoo_operators_are_registered():
    import d5

    models = [d5.models.lenet5(), d5.models.resnet(20), d5.models.wide_resnet(10, 1),
              d5.models.mobilenet_v1((3, 32, 32), num_classes=10, width=0.25), d5.models.lstm_lm(50, 8, 2, 4),
              d5.models.simple_cnn(), d5.models.mlp()]
    used = {node.op_type for model in models for node in model.nodes}
    assert used - set(supported_operators()) == set()


def test_converters_are_modules_with_versions():
    assert isinstance(create_operator("Relu", {}), torch.nn.Module)
    assert type(create_operator("Softmax", {}, opset=11)).__name__ == "Softmax1"
    assert type(create_operator("Softmax", {}, opset=13)).__name__ == "Softmax"


def test_dropout_in_training_masks_and_scales():
    op = create_operator("Dropout", {"seed": 3})
    op.train(True)
    op.node_output_count = 2
    x = torch.ones(1000, requires_grad=True)
    y, mask = op(x, torch.tensor(0.25))
    assert mask.dtype == torch.bool and 0.6 < mask.float().mean().item() < 0.9
    torch.testing.assert_close(y, mask.float() / 0.75)
    y.sum().backward()
    torch.testing.assert_close(x.grad, mask.float() / 0.75)
    op.eval()
    assert torch.equal(op(x, torch.tensor(0.25))[0], x)
    assert op(x, torch.tensor(0.25), torch.tensor(True))[1].float().mean().item() < 1  # training_mode input
