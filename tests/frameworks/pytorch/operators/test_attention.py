"""The PyTorch framework's attention converters (Attention, RotaryEmbedding) against the reference operators.

The reference Attention is forward only (Gradient.NONE): its cases check the forward through the shared oracle,
which then stops at the reference's backward (:func:`check_forward_only`), and torch autograd's gradient of
the converter is checked numerically by ``gradcheck`` in float64 instead."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from _torch_oracle import _ints, _rand, check_against_reference  # noqa: E402
from d5.errors import ShapeError, UnsupportedOperatorError  # noqa: E402
from d5.frameworks.pytorch.operators import create_operator  # noqa: E402
from d5.frameworks.reference.operators import create_operator as reference_op  # noqa: E402


def check_forward_only(case) -> None:
    """The oracle's forward comparison for an operator the reference cannot differentiate: the oracle runs
    torch's backward, then asks the reference for its gradient, which it refuses."""
    with pytest.raises(UnsupportedOperatorError, match="has no gradient"):
        check_against_reference(case)


def _bool(*shape, p=0.7):
    return lambda rng: rng.random(shape) < p


def _rows_masked(*shape):
    # A boolean mask whose first query row attends nothing (ONNX: that row's output is zeros).
    def make(rng):
        mask = rng.random(shape) < 0.7
        mask[..., 0, :] = False
        return mask
    return make


def _float_mask(*shape):
    # An additive mask with some -inf entries, never a whole row.
    def make(rng):
        mask = rng.uniform(-1, 1, shape).astype(np.float32)
        mask[..., 1:, 0] = -np.inf
        return mask
    return make


Q4, K4, V4 = _rand(2, 3, 4, 8), _rand(2, 3, 6, 8), _rand(2, 3, 6, 8)

# (id, op_type, attributes, [input makers (None: omitted)], options)
ATTENTION_CASES = [
    ("4d", "Attention", {}, [Q4, K4, V4], {"opset": 23}),
    ("4d_fused", "Attention", {}, [Q4, K4, V4], {"outputs": 3}),
    ("4d_scale_softmax_output", "Attention", {"scale": 0.3, "qk_matmul_output_mode": 3}, [Q4, K4, V4], {}),
    ("3d_gqa", "Attention", {"q_num_heads": 4, "kv_num_heads": 2},
     [_rand(2, 3, 8), _rand(2, 5, 4), _rand(2, 5, 4)], {}),
    ("3d_gqa_fused_causal", "Attention", {"q_num_heads": 4, "kv_num_heads": 2, "is_causal": 1},
     [_rand(2, 3, 8), _rand(2, 5, 4), _rand(2, 5, 6)], {"outputs": 1}),
    ("4d_gqa_mask_fused", "Attention", {}, [_rand(1, 4, 3, 4), _rand(1, 2, 5, 4), _rand(1, 2, 5, 4), _bool(3, 5)],
     {"outputs": 3}),
    ("causal_fused", "Attention", {"is_causal": 1}, [Q4, K4, V4], {"outputs": 1}),
    ("causal_more_queries_than_keys", "Attention", {"is_causal": 1},
     [_rand(1, 2, 5, 4), _rand(1, 2, 3, 4), _rand(1, 2, 3, 4)], {"outputs": 1}),
    ("causal_bool_mask_fused", "Attention", {"is_causal": 1}, [Q4, K4, V4, _bool(4, 6)], {"outputs": 3}),
    ("float_mask_4d_with_bias_output", "Attention", {"qk_matmul_output_mode": 2},
     [Q4, K4, V4, _float_mask(2, 3, 4, 6)], {}),
    ("mask_3d_broadcast", "Attention", {}, [Q4, K4, V4, _float_mask(3, 4, 6)], {"outputs": 3}),
    ("diff_head_sizes", "Attention", {"is_causal": 1}, [Q4, K4, _rand(2, 3, 6, 5)], {}),
    ("past_present_softcap", "Attention", {"is_causal": 1, "softcap": 2.0, "qk_matmul_output_mode": 1},
     [Q4, K4, V4, None, _rand(2, 3, 2, 8), _rand(2, 3, 2, 8)], {}),
    ("past_present_fused_mask", "Attention", {"is_causal": 1},
     [Q4, K4, V4, _bool(2, 1, 4, 8), _rand(2, 3, 2, 8), _rand(2, 3, 2, 8)], {"outputs": 3}),
    ("3d_past_present", "Attention", {"q_num_heads": 2, "kv_num_heads": 2},
     [_rand(2, 3, 8), _rand(2, 2, 8), _rand(2, 2, 8), None, _rand(2, 2, 1, 4), _rand(2, 2, 1, 4)], {}),
    ("short_mask_padded", "Attention", {}, [Q4, K4, V4, _float_mask(4, 4)], {"outputs": 3}),
    ("fully_masked_row", "Attention", {"qk_matmul_output_mode": 3}, [Q4, K4, V4, _rows_masked(2, 1, 4, 6)], {}),
    ("fully_masked_row_fused", "Attention", {}, [Q4, K4, V4, _rows_masked(2, 1, 4, 6)], {"outputs": 3}),
    ("nonpad_kv_seqlen_causal", "Attention", {"is_causal": 1},
     [_rand(2, 3, 2, 8), K4, V4, None, None, None, _ints([4, 6])], {"opset": 24}),
    ("nonpad_kv_seqlen_fused", "Attention", {},
     [Q4, K4, V4, _bool(4, 6), None, None, _ints([3, 6])], {"opset": 24, "outputs": 3}),
    ("sliding_window", "Attention", {"left_window_size": 1, "right_window_size": 1}, [Q4, K4, V4], {}),
    ("causal_left_window_with_past", "Attention", {"is_causal": 1, "left_window_size": 2},
     [Q4, K4, V4, None, _rand(2, 3, 2, 8), _rand(2, 3, 2, 8)], {"outputs": 3}),
    ("softmax_precision_double", "Attention", {"softmax_precision": 11, "qk_matmul_output_mode": 3},
     [Q4, K4, V4], {}),
    ("float16", "Attention", {"is_causal": 1},
     [lambda rng: rng.uniform(-1, 1, (1, 2, 3, 4)).astype(np.float16)] * 3, {}),
]

ROTARY_CASES = [
    ("rotary", "RotaryEmbedding", {}, [_rand(2, 3, 4, 8), _rand(10, 4), _rand(10, 4), _ints([[0, 1, 2, 3], [5, 6, 7, 9]])],
     {"opset": 23}),
    ("rotary_interleaved", "RotaryEmbedding", {"interleaved": 1},
     [_rand(2, 3, 4, 8), _rand(10, 4), _rand(10, 4), _ints([[0, 1, 2, 3], [5, 6, 7, 9]])], {}),
    ("rotary_partial_dim", "RotaryEmbedding", {"rotary_embedding_dim": 4},
     [_rand(2, 3, 4, 8), _rand(10, 2), _rand(10, 2), _ints([[0, 1, 2, 3], [5, 6, 7, 9]])], {}),
    ("rotary_partial_interleaved", "RotaryEmbedding", {"rotary_embedding_dim": 4, "interleaved": 1},
     [_rand(2, 3, 4, 8), _rand(10, 2), _rand(10, 2), _ints([[0, 1, 2, 3], [5, 6, 7, 9]])], {}),
    ("rotary_3d", "RotaryEmbedding", {"num_heads": 2},
     [_rand(2, 4, 12), _rand(8, 3), _rand(8, 3), _ints([[0, 1, 2, 3], [4, 5, 6, 7]])], {}),
    ("rotary_no_position_ids", "RotaryEmbedding", {}, [_rand(2, 3, 4, 6), _rand(2, 4, 3), _rand(2, 4, 3)], {}),
    ("rotary_no_position_ids_interleaved_3d", "RotaryEmbedding", {"interleaved": 1, "num_heads": 3},
     [_rand(2, 4, 12), _rand(2, 4, 2), _rand(2, 4, 2)], {}),
    ("rotary_float64", "RotaryEmbedding", {},
     [lambda rng: rng.uniform(-1, 1, (1, 2, 3, 4)), _rand(3, 2), _rand(3, 2), _ints([[2, 0, 1]])], {}),
]


@pytest.mark.parametrize("case", ATTENTION_CASES, ids=[c[0] for c in ATTENTION_CASES])
def test_attention_matches_reference(case):
    check_forward_only(case)


@pytest.mark.parametrize("case", ROTARY_CASES, ids=[c[0] for c in ROTARY_CASES])
def test_rotary_embedding_matches_reference(case):
    check_against_reference(case)


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


@pytest.mark.parametrize("attributes, shapes", [
    ({}, [(2, 3, 8), (2, 4, 8), (2, 4, 8)]),                                  # 3-D without head counts
    ({"q_num_heads": 3, "kv_num_heads": 3}, [(2, 3, 8), (2, 4, 8), (2, 4, 8)]),  # 8 not divisible by 3
    ({}, [(1, 3, 2, 4), (1, 2, 2, 4), (1, 2, 2, 4)]),                         # 3 query heads over 2 kv heads
    ({}, [(1, 2, 2, 4), (1, 2, 3, 4)]),                                      # 3-D and 4-D mixed
])
def test_attention_bad_shapes_raise_shape_error(attributes, shapes):
    arrays = [np.zeros(shape, np.float32) for shape in shapes]
    if len(arrays) == 2:
        arrays.append(np.zeros((1, 2, 3), np.float32))
    with pytest.raises(ShapeError):
        reference_op("Attention", attributes).forward(arrays)
    with pytest.raises(ShapeError):
        create_operator("Attention", attributes)(*[torch.from_numpy(a) for a in arrays])


def test_attention_bad_inputs_raise_shape_error():
    q = torch.zeros(1, 2, 3, 4)
    op = create_operator("Attention", {})
    with pytest.raises(ShapeError, match="bool or float"):
        op(q, q, q, torch.zeros(3, 3, dtype=torch.int64))
    with pytest.raises(ShapeError, match="covers 5 keys"):
        op(q, q, q, torch.zeros(3, 5))
    with pytest.raises(ShapeError, match="together"):
        op(q, q, q, None, torch.zeros(1, 2, 1, 4))
    with pytest.raises(ShapeError, match="does not broadcast"):
        op(q, q, q, torch.zeros(3, 3, 3))
    with pytest.raises(ShapeError, match="qk_matmul_output_mode"):
        create_operator("Attention", {"qk_matmul_output_mode": 4})


def test_rotary_embedding_bad_inputs_raise_shape_error():
    x, cache = torch.zeros(1, 2, 3, 4), torch.zeros(5, 2)
    with pytest.raises(ShapeError, match="position_ids must lie"):
        create_operator("RotaryEmbedding", {})(x, cache, cache, torch.tensor([[0, 1, 5]]))
    with pytest.raises(ShapeError, match="must be even"):
        create_operator("RotaryEmbedding", {"rotary_embedding_dim": 3})(x, cache, cache, torch.tensor([[0, 1, 2]]))
    with pytest.raises(ShapeError, match="num_heads"):
        create_operator("RotaryEmbedding", {})(torch.zeros(1, 3, 4), cache, cache, torch.tensor([[0, 1, 2]]))
