"""The forward table CASES (_tables.py): every case, run in float32 by d5's reference operator, matches its oracle
(torch.nn.functional, or onnx.reference.ReferenceEvaluator on a one-node model) and keeps float32 outputs."""
from __future__ import annotations

import numpy as np
import pytest

from d5.frameworks.reference.operators import create_operator
from d5.ops import as_tuple, test_forward
from _tables import CASES, make_case_inputs


class _FirstOutputs:
    """Compare only the outputs an oracle computes (Dropout's mask, say, is checked separately)."""

    def __init__(self, op, count):
        self.op, self.count = op, count
        self.training = False

    def forward(self, inputs):
        self.op.training = self.training
        outputs = self.op.forward(inputs)
        return outputs[:self.count] if isinstance(outputs, tuple) else outputs


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_forward_matches_oracle_float32(case):
    op = create_operator(case.op_type, case.attrs)
    inputs = make_case_inputs(case, np.float32)
    result = test_forward(_FirstOutputs(op, case.compared_outputs), inputs, case.oracle, rtol=1e-5, atol=1e-5)
    assert result, result.summary()
    # Dtype preservation: a float32 network stays float32 (reduced losses as 0-d float32 arrays).
    for output in as_tuple(op.forward(list(inputs))):
        assert isinstance(output, np.ndarray)
        assert output.dtype in (np.float32, np.bool_), output.dtype
