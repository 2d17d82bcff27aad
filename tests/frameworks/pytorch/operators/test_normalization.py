"""What is PyTorch's own in its RMSNormalization, LpNormalization, LRN and MeanVarianceNormalization converters:
torch.float16 in and out, matching the reference. The comparisons of every framework's native_op with the reference
(the case table, the errors bad inputs and attributes raise) are in tests/frameworks/operators/."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from d5.frameworks.pytorch.operators import create_operator  # noqa: E402
from d5.frameworks.reference.operators import create_operator as reference_op  # noqa: E402


def test_float16_keeps_dtype_and_matches_reference():
    x = np.random.default_rng(0).uniform(-1, 1, (2, 3, 4)).astype(np.float16)
    scale = np.ones(4, np.float16)
    for op_type, inputs in (("RMSNormalization", [x, scale]), ("LRN", [x]), ("MeanVarianceNormalization", [x]),
                            ("LpNormalization", [x])):
        attributes = {"size": 3} if op_type == "LRN" else {"axes": [0, 2]} if op_type.startswith("Mean") else {}
        expected = reference_op(op_type, attributes).forward(inputs)
        got = create_operator(op_type, attributes)(*[torch.from_numpy(a) for a in inputs])
        assert got.dtype == torch.float16, op_type
        np.testing.assert_allclose(got.numpy().astype(np.float32), expected.astype(np.float32), atol=1e-3,
                                   err_msg=op_type)
