"""The PyTorch bridge of Python operators: outputs and gradients are handed to torch without a copy only when
nothing else can change them; otherwise torch gets its own copy."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from d5.frameworks.pytorch import custom_op
from d5.ops import CustomPythonOp


class Square(CustomPythonOp):
    def forward(self, inputs):
        return inputs[0] * inputs[0]

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return 2 * grads[0] * fwd_inputs[0]


class ReusesItsBuffer(CustomPythonOp):
    """Keeps the array it returns and overwrites it on the next call (legal: d5 must copy it)."""

    def __init__(self):
        super().__init__()
        self.buffer = None

    def forward(self, inputs):
        if self.buffer is None or self.buffer.shape != inputs[0].shape:
            self.buffer = np.empty_like(inputs[0])
        np.multiply(inputs[0], 3, out=self.buffer)
        return self.buffer

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return 3 * grads[0]


class ReturnsItsInput(CustomPythonOp):
    def forward(self, inputs):
        return inputs[0]

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return grads[0]


def test_fresh_results_are_taken_without_a_copy_and_kept_ones_are_copied(monkeypatch):
    seen = {}
    original = Square.forward

    def spy(self, inputs, keep):
        result = original(self, inputs)
        seen["address"] = result.__array_interface__["data"][0]  # an int: no reference to the array
        if keep:
            seen["array"] = result
        return result

    monkeypatch.setattr(Square, "forward", lambda self, inputs: spy(self, inputs, keep=False))
    x = torch.arange(4.0, requires_grad=True)
    y = custom_op(Square())(x)
    assert y.data_ptr() == seen["address"]  # nothing else refers to the array: no copy
    y.backward(torch.ones(4))
    torch.testing.assert_close(y, x.detach() ** 2)
    torch.testing.assert_close(x.grad, 2 * x.detach())
    monkeypatch.setattr(Square, "forward", lambda self, inputs: spy(self, inputs, keep=True))
    y = custom_op(Square())(torch.arange(4.0))
    assert y.data_ptr() != seen["address"]  # the spy keeps a reference: copied


def test_an_op_reusing_its_output_buffer_does_not_change_earlier_outputs():
    module = custom_op(ReusesItsBuffer())
    first = module(torch.ones(3))
    second = module(torch.full((3,), 2.0))
    torch.testing.assert_close(first, torch.full((3,), 3.0))
    torch.testing.assert_close(second, torch.full((3,), 6.0))


def test_an_op_returning_its_input_gives_torch_a_separate_tensor():
    x = torch.ones(3)
    y = custom_op(ReturnsItsInput())(x)
    y.add_(1)
    torch.testing.assert_close(x, torch.ones(3))


def test_an_in_place_change_of_an_output_before_backward_is_refused():
    x = torch.arange(1.0, 4.0, requires_grad=True)
    y = custom_op(Square())(x)
    y.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()
