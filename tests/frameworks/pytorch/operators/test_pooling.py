"""What is PyTorch's own in its LpPool and MaxUnpool converters: MaxUnpool undoing the MaxPool converter's indices,
and torch autograd's LpPool gradient, checked by gradcheck (the reference LpPool is forward only) and finite over
all-zero windows. The comparisons of every framework's native_op with the reference (the case tables, the errors
bad inputs and attributes raise) are in tests/frameworks/operators/."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from d5.frameworks.pytorch.operators import create_operator  # noqa: E402


def test_maxunpool_undoes_maxpool():
    x = torch.from_numpy(np.random.default_rng(0).permutation(144).reshape(2, 3, 4, 6) / 7.0 - 1.0).float()  # no ties
    pool = create_operator("MaxPool", {"kernel_shape": [2, 2], "strides": [2, 2]})
    pool.node_output_count = 2
    y, indices = pool(x)
    unpooled = create_operator("MaxUnpool", {"kernel_shape": [2, 2], "strides": [2, 2]})(y, indices)
    expected = torch.where(torch.isin(x, y), x, torch.zeros(()))
    assert torch.equal(unpooled, expected)


@pytest.mark.parametrize("attributes", [
    {"kernel_shape": [2, 2], "p": 2},
    {"kernel_shape": [3], "p": 3, "pads": [1, 1], "strides": [2]},
])
def test_lppool_gradient_is_torch_autograd(attributes):
    rank = len(attributes["kernel_shape"])
    x = torch.tensor(np.random.default_rng(0).uniform(-1, 1, (1, 2) + (5,) * rank), requires_grad=True)
    assert torch.autograd.gradcheck(create_operator("LpPool", attributes), (x,), fast_mode=True)


def test_lppool_zero_window_has_finite_gradient():
    x = torch.zeros(1, 1, 4, requires_grad=True)
    create_operator("LpPool", {"kernel_shape": [2]})(x).sum().backward()
    assert torch.isfinite(x.grad).all()
