"""What is PyTorch's own in its linear-algebra converters: Det of float16 computed in float32, and Einsum keeping
torch.bfloat16. The comparisons of every framework's native_op with the reference (the case table, the errors bad
inputs raise) are in tests/frameworks/operators/."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from d5.frameworks.pytorch.operators import create_operator  # noqa: E402
from d5.frameworks.reference.operators import create_operator as reference_op  # noqa: E402


def test_det_of_float16_is_computed_in_float32():
    x = (np.eye(3) * 2 + np.random.default_rng(0).uniform(-0.5, 0.5, (2, 3, 3))).astype(np.float16)
    got = create_operator("Det", {})(torch.from_numpy(x))
    assert got.dtype == torch.float16
    np.testing.assert_allclose(got.numpy().astype(np.float32), np.linalg.det(x.astype(np.float32)), rtol=1e-3)


def test_einsum_in_bfloat16_keeps_the_dtype():
    rng = np.random.default_rng(0)
    a, b = (rng.uniform(-1, 1, shape).astype(ml_dtypes.bfloat16) for shape in ((2, 3, 4), (2, 4, 5)))
    as_torch = [torch.from_numpy(v.view(np.int16)).view(torch.bfloat16) for v in (a, b)]
    got = create_operator("Einsum", {"equation": "bij,bjk->bik"})(*as_torch)
    expected = reference_op("Einsum", {"equation": "bij,bjk->bik"}).forward([a, b])
    assert got.dtype == torch.bfloat16
    np.testing.assert_allclose(got.float().numpy(), expected.astype(np.float32), rtol=1e-2, atol=1e-2)
