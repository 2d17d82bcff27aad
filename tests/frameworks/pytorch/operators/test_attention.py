"""What is PyTorch's own in its attention converters: torch autograd's gradient of Attention, checked numerically by
``gradcheck`` in float64 (the reference Attention is forward only), and bfloat16 tensors in and out. The
comparisons of every framework's native_op with the reference (the case tables, the errors bad inputs raise) are
in tests/frameworks/operators/."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from d5.frameworks.pytorch.operators import create_operator  # noqa: E402
from d5.frameworks.reference.operators import create_operator as reference_op  # noqa: E402


@pytest.mark.parametrize("attributes, outputs, extra", [
    ({}, 4, []),
    ({"is_causal": 1}, 1, []),                                       # SDPA with its own causal mask
    ({"softcap": 1.5, "scale": 0.7}, 4, ["mask"]),
    ({"is_causal": 1}, 3, ["mask", "past"]),                          # SDPA with an explicit mask
])
def test_attention_gradient_is_torch_autograd(attributes, outputs, extra):
    rng = np.random.default_rng(0)
    tensors = [torch.tensor(rng.uniform(-1, 1, shape), requires_grad=True)
               for shape in ((1, 2, 2, 3), (1, 2, 3, 3), (1, 2, 3, 2))]
    mask = torch.tensor(rng.uniform(-1, 1, (2, 3 + 2 * ("past" in extra))), requires_grad=True) \
        if "mask" in extra else None
    past = [torch.tensor(rng.uniform(-1, 1, (1, 2, 2, size)), requires_grad=True) for size in (3, 2)] \
        if "past" in extra else [None, None]
    op = create_operator("Attention", attributes, 23)
    op.node_output_count = outputs
    inputs = [*tensors, mask, *past]
    differentiable = [t for t in inputs if t is not None]

    def y(*values):
        it = iter(values)
        return op(*[None if t is None else next(it) for t in inputs])[0]
    assert torch.autograd.gradcheck(y, differentiable, fast_mode=True)


def test_attention_low_precision_dtypes_match_reference():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    rng = np.random.default_rng(1)
    arrays = [rng.uniform(-1, 1, (1, 2, 3, 4)).astype(np.float32) for _ in range(3)]
    reference = reference_op("Attention", {"is_causal": 1})
    converter = create_operator("Attention", {"is_causal": 1})
    expected = reference.forward([a.astype(ml_dtypes.bfloat16) for a in arrays])
    got = converter(*[torch.from_numpy(a).to(torch.bfloat16) for a in arrays])
    assert got[0].dtype == torch.bfloat16 and got[1].dtype == torch.bfloat16
    # Every step rounds to bfloat16 as the reference's: the results agree to the bit.
    np.testing.assert_array_equal(got[0].float().numpy(), expected[0].astype(np.float32))
    np.testing.assert_array_equal(got[3].float().numpy(), expected[3].astype(np.float32))
