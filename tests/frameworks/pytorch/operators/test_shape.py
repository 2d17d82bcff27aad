"""What is PyTorch's own in its shape converters: ReverseSequence of floats, torch autograd's gradient checked by
gradcheck (the reference has none). The comparisons of every framework's native_op with the reference (the case
table, the errors bad inputs and attributes raise) are in tests/frameworks/operators/."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from d5.frameworks.pytorch.operators import create_operator  # noqa: E402
from d5.frameworks.reference.operators import create_operator as reference_op  # noqa: E402


@pytest.mark.parametrize("batch_axis, time_axis", [(1, 0), (0, 1)])
def test_reverse_sequence_of_floats_matches_and_is_differentiable(batch_axis, time_axis):
    # The reference has no gradient for ReverseSequence; torch's (a gather) is checked numerically instead.
    attributes = {"batch_axis": batch_axis, "time_axis": time_axis}
    x = np.random.default_rng(0).standard_normal((4, 4, 3))
    lengths = np.array([4, 0, 2, 1])
    op = create_operator("ReverseSequence", attributes)
    got = op(torch.from_numpy(x), torch.from_numpy(lengths))
    np.testing.assert_array_equal(got.numpy(), reference_op("ReverseSequence", attributes).forward([x, lengths]))
    assert torch.autograd.gradcheck(lambda t: op(t, torch.from_numpy(lengths)),
                                    (torch.from_numpy(x).requires_grad_(),))
