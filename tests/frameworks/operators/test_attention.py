"""Every framework's attention operators (native_op: Attention, RotaryEmbedding) against the reference operators.

The reference Attention is forward only (Gradient.NONE), so the oracle compares its outputs only; RotaryEmbedding
is compared forward and gradient."""
from __future__ import annotations

import numpy as np
import pytest

from _oracle import _ints, _rand, case_params, check_against_reference, check_error, framework_params
from d5.errors import ShapeError


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


@pytest.mark.parametrize("framework, case", case_params(ATTENTION_CASES))
def test_attention_matches_reference(framework, case):
    check_against_reference(framework, case)


@pytest.mark.parametrize("framework, case", case_params(ROTARY_CASES))
def test_rotary_embedding_matches_reference(framework, case):
    check_against_reference(framework, case)


@pytest.mark.parametrize("framework, op_type, attributes, shapes", framework_params([
    ("Attention", {}, [(2, 3, 8), (2, 4, 8), (2, 4, 8)]),                                  # 3-D without head counts
    ("Attention", {"q_num_heads": 3, "kv_num_heads": 3}, [(2, 3, 8), (2, 4, 8), (2, 4, 8)]),  # 8 not divisible by 3
    ("Attention", {}, [(1, 3, 2, 4), (1, 2, 2, 4), (1, 2, 2, 4)]),                         # 3 query heads, 2 kv heads
    ("Attention", {}, [(1, 2, 2, 4), (1, 2, 3, 4), (1, 2, 3)]),                            # 3-D and 4-D mixed
]))
def test_attention_bad_shapes_raise_shape_error(framework, op_type, attributes, shapes):
    check_error(framework, op_type, attributes, [np.zeros(shape, np.float32) for shape in shapes], ShapeError)


_Q = np.zeros((1, 2, 3, 4), np.float32)
_X, _CACHE = np.zeros((1, 2, 3, 4), np.float32), np.zeros((5, 2), np.float32)


@pytest.mark.parametrize("framework, op_type, attributes, arrays, match", framework_params([
    ("Attention", {}, [_Q, _Q, _Q, np.zeros((3, 3), np.int64)], "bool or float"),
    ("Attention", {}, [_Q, _Q, _Q, np.zeros((3, 5), np.float32)], "covers 5 keys"),
    ("Attention", {}, [_Q, _Q, _Q, None, np.zeros((1, 2, 1, 4), np.float32)], "together"),
    ("Attention", {}, [_Q, _Q, _Q, np.zeros((3, 3, 3), np.float32)], "does not broadcast"),
    ("Attention", {"qk_matmul_output_mode": 4}, [_Q, _Q, _Q], "qk_matmul_output_mode"),
    ("RotaryEmbedding", {}, [_X, _CACHE, _CACHE, np.array([[0, 1, 5]])], "position_ids must lie"),
    ("RotaryEmbedding", {"rotary_embedding_dim": 3}, [_X, _CACHE, _CACHE, np.array([[0, 1, 2]])], "must be even"),
    ("RotaryEmbedding", {}, [np.zeros((1, 3, 4), np.float32), _CACHE, _CACHE, np.array([[0, 1, 2]])], "num_heads"),
]))
def test_bad_inputs_raise_the_reference_errors(framework, op_type, attributes, arrays, match):
    check_error(framework, op_type, attributes, arrays, ShapeError, match)
