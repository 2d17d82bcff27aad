"""What is PyTorch's own in its signal converters: torch autograd differentiates DFT and STFT (gradcheck; the
reference has no gradients for them). The comparisons of every framework's native_op with the reference (the case
table, the errors bad inputs raise) are in tests/frameworks/operators/."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from d5.frameworks.pytorch.operators import create_operator  # noqa: E402


def test_dft_and_stft_are_differentiable():
    x = torch.rand(1, 6, 2, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(create_operator("DFT", {"onesided": 1}), (x,))
    signal = torch.rand(1, 9, 1, dtype=torch.float64, requires_grad=True)
    window = torch.rand(4, dtype=torch.float64, requires_grad=True)
    stft = create_operator("STFT", {})
    assert torch.autograd.gradcheck(lambda s, w: stft(s, torch.tensor(2), w), (signal, window))
