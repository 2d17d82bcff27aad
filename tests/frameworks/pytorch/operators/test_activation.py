"""What is PyTorch's own in its activation converters: Swish and SwiGLU in float16 are computed in float32, as the
reference (torch dtypes in and out). The comparisons of every framework's native_op with the reference (the case
table, the errors bad inputs raise) are in tests/frameworks/operators/."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from d5.frameworks.pytorch.operators import create_operator  # noqa: E402
from d5.frameworks.reference.operators import create_operator as reference_op  # noqa: E402


@pytest.mark.parametrize("op_type, attributes, count", [("Swish", {}, 1), ("Swish", {"alpha": 0.7}, 1),
                                                         ("SwiGLU", {}, 2), ("SwiGLU", {"alpha": 1.5}, 2)])
def test_float16_computed_in_float32_as_the_reference(op_type, attributes, count):
    rng = np.random.default_rng(0)
    arrays = [rng.uniform(-4, 4, (3, 5)).astype(np.float16) for _ in range(count)]
    got = create_operator(op_type, attributes)(*[torch.from_numpy(a) for a in arrays])
    expected = reference_op(op_type, attributes).forward(arrays)
    assert got.dtype == torch.float16
    # One float32 sigmoid against another, rounded to float16: at most one float16 step apart.
    np.testing.assert_allclose(got.numpy().astype(np.float32), expected.astype(np.float32), rtol=1e-3, atol=1e-3)
