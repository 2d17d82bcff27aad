"""What is PyTorch's own in its generator converters: Range in float32 and bfloat16 with the reference's bits,
Constant's 0-d and bfloat16 tensors, and generated tensors that carry no autograd graph. The comparisons of every
framework's native_op with the reference (the case table, the errors bad inputs raise) are in
tests/frameworks/operators/."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from d5.frameworks.pytorch.operators import create_operator  # noqa: E402
from d5.frameworks.reference.operators import create_operator as reference_op  # noqa: E402


def test_float32_range_has_the_reference_bits():
    # Computed in float32 as the reference (start + arange * delta), not in float64 and rounded once.
    values = [np.array(v, np.float32) for v in (0.1, 50.0, 0.37)]
    got = create_operator("Range", {})(*[torch.from_numpy(v) for v in values])
    np.testing.assert_array_equal(got.numpy(), reference_op("Range", {}).forward(values))


@pytest.mark.parametrize("stash_type", [None, 1, 11])
def test_bfloat16_range_has_the_reference_bits(stash_type):
    attributes = {} if stash_type is None else {"stash_type": stash_type}
    values = [np.array(v, ml_dtypes.bfloat16) for v in (1.0, 30.0, 0.7)]
    tensors = [torch.from_numpy(v.view(np.int16)).view(torch.bfloat16) for v in values]
    got = create_operator("Range", attributes)(*tensors)
    expected = reference_op("Range", attributes).forward(values)
    assert got.dtype == torch.bfloat16
    np.testing.assert_array_equal(got.view(torch.int16).numpy(), expected.view(np.int16))


def test_constant_keeps_a_scalar_0d_and_holds_bfloat16():
    assert create_operator("Constant", {"value": np.array(2.0, np.float32)})().shape == ()
    value = np.array([1.5, -2.25], ml_dtypes.bfloat16)
    got = create_operator("Constant", {"value": value})()
    assert got.dtype == torch.bfloat16
    np.testing.assert_array_equal(got.view(torch.int16).numpy(), value.view(np.int16))


def test_generated_outputs_carry_no_gradient():
    start = torch.tensor(1.0, requires_grad=True)
    assert not create_operator("Range", {})(start, torch.tensor(4.0), torch.tensor(1.0)).requires_grad
    assert not create_operator("EyeLike", {})(torch.ones(2, 2, requires_grad=True)).requires_grad
