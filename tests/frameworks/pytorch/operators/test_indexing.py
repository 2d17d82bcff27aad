"""What is PyTorch's own in its indexing converters: TopK on torch.uint64 tensors. The comparisons of every
framework's native_op with the reference (the case tables, the errors bad indices raise) are in
tests/frameworks/operators/."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from d5.frameworks.pytorch.operators import create_operator  # noqa: E402


def test_topk_takes_unsigned_64_bit_values():
    x = torch.from_numpy(np.array([[5, 2 ** 63 + 5, 3, 2 ** 63 + 5]], np.uint64))
    values, indices = create_operator("TopK", {})(x, torch.tensor([2]))
    assert values.dtype == torch.uint64 and indices.tolist() == [[1, 3]]
