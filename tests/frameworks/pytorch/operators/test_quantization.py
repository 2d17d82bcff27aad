"""What is PyTorch's own in its quantization converters: the types torch lacks (int4, uint4, int2, uint2, float8,
float4; int64 data) raise UnsupportedOperatorError. The comparisons of every framework's native_op with the
reference (the case table, the errors bad layouts raise) are in tests/frameworks/operators/."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from d5.errors import UnsupportedOperatorError  # noqa: E402
from d5.frameworks.pytorch.operators import create_operator  # noqa: E402


def test_types_torch_lacks_are_unsupported():
    with pytest.raises(UnsupportedOperatorError, match="output_dtype 22"):
        create_operator("QuantizeLinear", {"output_dtype": 22})(torch.ones(2), torch.tensor(1.0))
    with pytest.raises(UnsupportedOperatorError, match="torch.int64"):
        create_operator("DequantizeLinear", {})(torch.ones(2, dtype=torch.int64), torch.tensor(1.0))
