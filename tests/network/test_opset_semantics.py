"""d5 at the older opsets (11 on) of every operator whose ONNX schema changed after opset 11.

ONNX's node cases of each such operator are written at the opsets where an older schema applies (see
:mod:`d5.bench.opset_conformance`), run on onnxruntime and on d5's reference framework, and must agree:
d5 imports models at opsets 11 to the newest as they are, so each operator follows its node's opset
(Softmax before opset 13 normalizes the input flattened to 2-D). ``python -m d5.bench.opset_conformance``
prints the same judgement as a table.
"""
import collections

import numpy as np
import pytest

pytest.importorskip("onnxruntime")

from d5.bench.opset_conformance import (FAIL, PASS, all_pairs, changed_operators, express_at,  # noqa: E402
                                        pair_status, run_pair)
from d5.bench.conformance import _load_case  # noqa: E402

PAIRS = all_pairs()


def test_the_operators_whose_schema_changed_after_opset_11_are_found():
    changed = changed_operators()
    assert len(changed) >= 100
    for op_type, first_opsets in {"Softmax": (11, 13), "LogSoftmax": (11, 13), "Hardmax": (11, 13),
                                  "ReduceSum": (11, 13), "Split": (11, 13, 18)}.items():
        assert changed[op_type] == first_opsets
    assert "Relu" in changed and "Gelu" not in changed  # Relu: types at 13 and 14; Gelu: added at 20, one schema
    assert len(PAIRS) == sum(len(opsets) - 1 for opsets in changed.values())


def test_softmax_at_opset_11_exercises_the_old_semantics():
    """The version converter keeps Softmax as it is (13 -> 12 only makes the axis explicit), so the opset-11
    model computes the flattened softmax: onnxruntime's answer differs from the case's opset-13 one."""
    import onnx

    from d5.bench.opset_conformance import _ort_outputs, cases_for

    case = next(c for c in cases_for("Softmax") if c.name == "test_softmax_axis_1")
    model, data_sets = _load_case(case)
    (how, old), = express_at(model, 11)
    assert how == "converted" and [n.op_type for n in old.graph.node] == ["Softmax"]
    onnx.checker.check_model(old, full_check=True)
    inputs, expected_13 = data_sets[0]
    assert not np.allclose(_ort_outputs(old, inputs)[0], expected_13[0], atol=1e-3)


@pytest.mark.parametrize("op_type, opset", PAIRS, ids=[f"{op}-opset{opset}" for op, opset in PAIRS])
def test_operator_at_older_opset_matches_onnxruntime(op_type, opset):
    results = run_pair(op_type, opset)
    failing = [r for r in results if r.status == FAIL]
    assert not failing, "\n".join(f"{r.case} ({r.how}): {r.reason}" for r in failing)
    if pair_status(results) != PASS:
        counts = collections.Counter(r.status for r in results)
        reasons = sorted({r.reason for r in results if r.reason})[:3]
        pytest.skip(f"no case of {op_type} runs at opset {opset}: {dict(counts) or 'no case'} {reasons}")


@pytest.mark.parametrize("op_type", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_opset_11_softmax_gradients(op_type, axis):
    from d5.frameworks.reference.operators import create_operator
    from d5.ops.validation import test_gradient as check_gradient

    x = np.random.default_rng(axis + 1).standard_normal((2, 3, 4))
    op = create_operator(op_type, {"axis": axis}, opset=11)
    assert type(op).__name__ == f"{op_type}1"
    assert check_gradient(op, [x]).passed
    # The newest version is unchanged: along one axis.
    assert type(create_operator(op_type, {"axis": axis}, opset=13)).__name__ == op_type
