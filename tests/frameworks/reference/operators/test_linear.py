"""Linear-algebra operators (Einsum, Det)."""
from __future__ import annotations

import numpy as np
import pytest

from d5.frameworks.reference.operators import create_operator
from d5.ops import test_gradient

torch = pytest.importorskip("torch")


def test_einsum_matches_torch():
    rng = np.random.default_rng(8)
    a, b = rng.standard_normal((2, 3, 4)).astype(np.float32), rng.standard_normal((2, 4, 5)).astype(np.float32)
    y = create_operator("Einsum", {"equation": "bij,bjk->bik"}).forward([a, b])
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, torch.einsum("bij,bjk->bik", torch.from_numpy(a), torch.from_numpy(b)).numpy(),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("equation, shapes", [
    ("ij,jk->ik", [(2, 3), (3, 4)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ii->i", [(3, 3)]),
    ("ii", [(3, 3)]),
    ("iij->j", [(3, 3, 2)]),
    ("ij->", [(2, 3)]),
    ("ab,cd->ad", [(2, 3), (4, 5)]),
    ("...ij,...jk->...ik", [(2, 3, 4), (1, 4, 5)]),
    ("...ij,jk", [(5, 2, 3, 4), (4, 5)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]),
])
def test_einsum_gradient(equation, shapes):
    rng = np.random.default_rng(13)
    inputs = [rng.standard_normal(shape) for shape in shapes]
    result = test_gradient(create_operator("Einsum", {"equation": equation}), inputs)
    assert result.passed, result.summary()


def test_det_gradient_by_finite_differences():
    from d5.ops import test_gradient

    x = np.random.default_rng(0).standard_normal((2, 3, 3)) + 2 * np.eye(3)
    result = test_gradient(create_operator("Det", {}), [x])
    assert result.passed, result
