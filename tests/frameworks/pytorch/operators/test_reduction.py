"""What is PyTorch's own in its reduction converters: CumProd of floats, torch autograd's gradient checked by
gradcheck (the reference has none). The comparisons of every framework's native_op with the reference (the case
table, the errors bad scan inputs raise) are in tests/frameworks/operators/."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from d5.frameworks.pytorch.operators import create_operator  # noqa: E402
from d5.frameworks.reference.operators import create_operator as reference_op  # noqa: E402


@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
def test_cumprod_of_floats_matches_and_is_differentiable(exclusive, reverse):
    # The reference has no gradient for CumProd; torch's (exact with zeros) is checked numerically instead.
    attributes = {"exclusive": exclusive, "reverse": reverse}
    x = np.random.default_rng(0).uniform(0.5, 1.5, (3, 4))
    x[1, 2] = 0.0
    got = create_operator("CumProd", attributes)(torch.from_numpy(x), torch.tensor(1))
    np.testing.assert_allclose(got.numpy(), reference_op("CumProd", attributes).forward([x, np.array(1)]))
    op = create_operator("CumProd", attributes)
    assert torch.autograd.gradcheck(lambda t: op(t, torch.tensor(-1)), (torch.from_numpy(x).requires_grad_(),))
