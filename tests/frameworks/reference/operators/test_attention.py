"""Attention and RotaryEmbedding (and the ONNX node cases of Attention, RMSNormalization, RotaryEmbedding, Swish, SwiGLU)."""
from __future__ import annotations

import numpy as np
import pytest

from d5.bench.conformance import failures
from d5.bench.conformance import run_conformance
from d5.frameworks.reference.operators import create_operator
from d5.ops import test_gradient

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402


# *_bf16_expanded cases are graphs of other operators (Cast, Softmax, ...) that d5 runs in float32, not in
# bfloat16; they are owned by those operators, not by Attention.
_EXPECTED_FAILURES = {
    "test_attention_4d_causal_bf16_expanded", "test_attention_4d_padded_kv_bf16_expanded",
    "test_attention_4d_causal_padded_kv_bf16_expanded", "test_attention_4d_attn_mask_causal_bf16_expanded",
    "test_attention_3d_causal_bf16_expanded",
}


@pytest.fixture(scope="module")
def conformance_results():
    from d5.bench.conformance import run_conformance

    patterns = ("test_attention_", "test_rms_normalization", "test_rotary_embedding", "test_swish", "test_swiglu")
    return run_conformance(kinds=("node",), patterns=patterns, progress=False)


def _node_ops(result):
    return set(result.operators)


@pytest.mark.parametrize("op_type", ["Attention", "RMSNormalization", "RotaryEmbedding", "Swish", "SwiGLU"])
def test_onnx_node_cases_pass_with_d5_operators(conformance_results, op_type):
    cases = [r for r in conformance_results if op_type in _node_ops(r) and not r.name.endswith("_expanded")]
    assert cases, f"no ONNX node cases found for {op_type}"
    failures = [(r.name, r.reason) for r in cases if r.status != "pass" and r.name not in _EXPECTED_FAILURES]
    assert not failures, failures


def test_expanded_cases_of_own_operators_pass(conformance_results):
    # *_expanded graphs built from simpler ops, e.g. test_swiglu_*_expanded uses Swish.
    cases = [r for r in conformance_results if r.name.endswith("_expanded") and r.name not in _EXPECTED_FAILURES
             and r.status != "excluded" and "CausalConvWithState" not in r.operators]
    failures = [(r.name, r.reason) for r in cases if r.status != "pass"]
    assert len(cases) > 20 and not failures, failures


def _rng():
    return np.random.default_rng(1234)


@pytest.mark.parametrize("interleaved", [0, 1])
def test_rotary_embedding_gradient(interleaved):
    from d5.frameworks.reference.operators import create_operator
    from d5.ops.validation import test_gradient

    rng = np.random.default_rng(1234)
    x = rng.standard_normal((2, 3, 4, 6))                      # (batch, heads, seq, head_size)
    angles = rng.uniform(0, np.pi, (5, 2))                     # rotary_embedding_dim 4 of head_size 6
    positions = np.array([[0, 1, 2, 3], [4, 3, 2, 1]])
    op = create_operator("RotaryEmbedding", {"interleaved": interleaved, "rotary_embedding_dim": 4})
    result = test_gradient(op, [x, np.cos(angles), np.sin(angles), positions], wrt=[0])
    assert result.passed, result


def test_attention_matches_onnx_reference_on_random_gqa_with_cache():
    import onnx
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator

    from d5.frameworks.reference.operators import create_operator

    rng = np.random.default_rng(1234)
    q = rng.standard_normal((2, 4, 3, 8)).astype(np.float32)
    k, v = (rng.standard_normal((2, 2, 3, 8)).astype(np.float32) for _ in range(2))
    past_k, past_v = (rng.standard_normal((2, 2, 5, 8)).astype(np.float32) for _ in range(2))
    mask = rng.standard_normal((3, 8)).astype(np.float32)
    attrs = {"is_causal": 1, "softcap": 2.0, "qk_matmul_output_mode": 2, "scale": 0.3}
    names = ["Q", "K", "V", "attn_mask", "past_key", "past_value"]
    feeds = dict(zip(names, [q, k, v, mask, past_k, past_v]))
    node = helper.make_node("Attention", names, ["Y", "present_key", "present_value", "qk"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in names],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in node.output])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 24)])
    expected = ReferenceEvaluator(model).run(None, feeds)
    actual = create_operator("Attention", attrs).forward([feeds[n] for n in names])
    for got, want in zip(actual, expected):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
