"""Loss operators (MeanSquaredError, NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss)."""
from __future__ import annotations

import numpy as np
import pytest

from d5.errors import ShapeError, UnsupportedOperatorError
from d5.frameworks.reference.operators import create_operator
from d5.ops.validation import test_gradient as check_gradient

torch = pytest.importorskip("torch")


def test_bad_reduction_and_unknown_attribute():
    with pytest.raises(ShapeError, match="reduction"):
        create_operator("MeanSquaredError", {"reduction": "average"})
    with pytest.raises(UnsupportedOperatorError, match="Relu"):
        create_operator("Relu", {"alpha": 1.0})


def test_loss_output_is_zero_dim_array_of_score_dtype():
    for dtype in (np.float32, np.float64):
        loss = create_operator("MeanSquaredError", {}).forward([np.ones(3, dtype), np.zeros(3, dtype)])
        assert isinstance(loss, np.ndarray) and loss.shape == () and loss.dtype == dtype


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("with_weights", [False, True])
def test_negative_log_likelihood_loss_matches_torch_and_finite_differences(reduction, with_weights):
    import torch

    rng = np.random.default_rng(0)
    log_prob = np.log(rng.dirichlet(np.ones(5), size=(6, 3)).transpose(0, 2, 1))  # (N=6, C=5, d=3)
    labels = rng.integers(0, 5, size=(6, 3))
    weights = rng.uniform(0.5, 2.0, size=5) if with_weights else None
    inputs = [log_prob, labels] + ([weights] if with_weights else [])
    op = create_operator("NegativeLogLikelihoodLoss", {"reduction": reduction})
    expected = torch.nn.functional.nll_loss(torch.from_numpy(log_prob), torch.from_numpy(labels),
                                            weight=None if weights is None else torch.from_numpy(weights),
                                            reduction=reduction).numpy()
    np.testing.assert_allclose(op.forward(inputs), expected, rtol=1e-10)
    result = check_gradient(op, inputs)
    assert result.passed, str(result)
