"""Reference attention operators: Attention (ONNX opset 23-25 semantics) and RotaryEmbedding (opset 23).

Attention: scaled dot-product attention with MHA/GQA/MQA heads, boolean or additive masks, causal masking, an
internal KV cache, softcap and the qk_matmul debug output. Computed in float32 (float64 for float64 inputs)
and cast back to Q's dtype, so float16/bfloat16 models run at the precision ONNX's reference gets. Forward
only (``Gradient.NONE``). RotaryEmbedding rotates pairs of features by position-dependent angles and has a
gradient. (TensorScatter, the KV-cache update, is with the indexing operators.)

>>> import numpy as np
>>> q = np.ones((1, 1, 2, 4), np.float32)
>>> v = np.arange(8, dtype=np.float32).reshape(1, 1, 2, 4)
>>> y, *_ = Attention(is_causal=1).forward([q, q, v])
>>> y[0, 0].tolist()                     # query 0 sees key 0 only; query 1 averages both keys
[[0.0, 1.0, 2.0, 3.0], [2.0, 3.0, 4.0, 5.0]]
"""
from __future__ import annotations

import numpy as np

from d5.frameworks.reference.operators import ReferenceOp, register
from d5.frameworks.reference.operators._checks import float_compute_dtype, require_broadcastable
from d5.ops.onnx_attributes import adopt, operator_attributes
from d5.ops.operator import Gradient
from d5.ops.sequence_plans import (check_attention_inputs, check_attention_ranks, check_attn_mask, check_head_groups,
                                   check_nonpad_kv_seqlen, check_rotary_caches, check_rotary_inputs,
                                   check_rotary_position_ids, check_rotary_position_range, past_kv_length,
                                   qk_matmul_output, rotary_dim, rotary_heads, split_heads_shape, uses_window,
                                   wide_softmax, window_conditions)


def _compute_dtype(array: np.ndarray) -> np.dtype:
    # float64 stays float64 and float16 widens to float32. bfloat16 (an ml_dtypes extension type, kind 'V')
    # computes natively: its 8-bit mantissa rounds each step, and ONNX's tests expect exactly that rounding
    # (their tolerance is below bfloat16's resolution).
    if array.dtype == np.float64 or array.dtype.kind == "V":
        return array.dtype
    return np.dtype(np.float32)


def _split_heads(x: np.ndarray, num_heads: int | None, name: str) -> np.ndarray:
    """(batch, seq, heads * size) -> (batch, heads, seq, size)."""
    return x.reshape(split_heads_shape(x.shape, num_heads, name)).transpose(0, 2, 1, 3)


def _allowed_window(q_len: int, kv_len: int, offset, causal: bool, left: int, right: int) -> np.ndarray | None:
    """Boolean (q, kv) -- or (batch, 1, q, kv) for a per-batch offset -- of keys each query may attend under
    causal and sliding-window masking, or None when neither applies. Query i sits at absolute position
    ``i + offset`` (bottom-right alignment: offset = keys that precede the query block)."""
    if not uses_window(causal, left, right):
        return None
    rows = np.arange(q_len).reshape(q_len, 1)
    cols = np.arange(kv_len).reshape(1, kv_len)
    offset = np.asarray(offset).reshape(-1, 1, 1, 1) if np.ndim(offset) else int(offset)
    distance = rows + offset - cols  # how far key j lies behind query i
    allowed = np.ones(np.shape(distance), dtype=bool)
    for condition in window_conditions(distance, causal, left, right):
        allowed &= condition
    return allowed


@register("Attention")
class Attention(ReferenceOp):
    """ONNX Attention: ``softmax(softcap(Q K^T * scale) + bias) V`` for 3-D (batch, seq, hidden) or 4-D
    (batch, heads, seq, head_size) inputs.

    Inputs ``Q, K, V[, attn_mask, past_key, past_value, nonpad_kv_seqlen]``; outputs ``Y, present_key,
    present_value, qk_matmul_output``. K/V heads are repeated for grouped-query attention; ``past_key`` /
    ``past_value`` are concatenated in front of K/V (and shift the causal frontier); a boolean mask marks the
    keys to attend, a float mask is added to the scores; a query row with no key to attend yields zeros.

    >>> import numpy as np
    >>> q = np.zeros((2, 3, 8), np.float32)                    # 3-D: 4 query heads of size 2
    >>> kv = np.ones((2, 5, 4), np.float32)                    # 2 key/value heads (GQA)
    >>> y, present_k, present_v, _ = Attention(q_num_heads=4, kv_num_heads=2).forward([q, kv, kv])
    >>> y.shape, present_k.shape
    ((2, 3, 8), (2, 2, 5, 2))
    """

    gradient = Gradient.NONE
    no_gradient_reason = "it is forward only in d5; train through the equivalent MatMul/Softmax subgraph instead"

    def __init__(self, **attributes) -> None:
        super().__init__()
        # softmax_precision only asks for at least the input's precision; d5 always computes the softmax in
        # float32 or wider, which meets every float request but float64.
        adopt(self, operator_attributes("Attention", attributes))

    def forward(self, inputs):
        q, k, v, mask, past_key, past_value, nonpad = (list(inputs) + [None] * 7)[:7]
        check_attention_inputs(q, k, v, past_key, past_value, nonpad)
        q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
        out_dtype = q.dtype
        dtype = _compute_dtype(q)
        if wide_softmax(self.softmax_precision):
            dtype = np.dtype(np.float64)
        three_d = check_attention_ranks(q.shape, k.shape, v.shape) == 3
        if three_d:
            q = _split_heads(q, self.q_num_heads, "Q")
            k = _split_heads(k, self.kv_num_heads, "K")
            v = _split_heads(v, self.kv_num_heads, "V")
        if past_key is not None:
            past_key, past_value = np.asarray(past_key), np.asarray(past_value)
            past_kv_length(past_key.shape, past_value.shape, k.shape, v.shape)
            k = np.concatenate([np.asarray(past_key).astype(k.dtype, copy=False), k], axis=2)
            v = np.concatenate([np.asarray(past_value).astype(v.dtype, copy=False), v], axis=2)
        present_key, present_value = k, v
        q_heads, kv_heads = q.shape[1], k.shape[1]
        check_head_groups(q_heads, kv_heads, v.shape[1])
        if q_heads != kv_heads:
            # Grouped-query attention: query head h uses key/value head h // group.
            k = np.repeat(k, q_heads // kv_heads, axis=1)
            v = np.repeat(v, q_heads // kv_heads, axis=1)

        scale = self.scale if self.scale is not None else 1.0 / np.sqrt(q.shape[3])
        # ONNX scales Q and K by sqrt(scale) each before the matmul (keeps float16 from overflowing).
        root = np.sqrt(scale).astype(dtype) if isinstance(scale, np.ndarray) else dtype.type(np.sqrt(scale))
        # numpy's matmul promotes bfloat16 to float32: round back so every step keeps the compute dtype.
        scores = np.matmul(q.astype(dtype) * root, np.swapaxes(k.astype(dtype) * root, -1, -2)).astype(dtype)
        raw_scores = scores
        if self.softcap > 0:
            scores = self.softcap * np.tanh(scores / self.softcap)
        bias = self._bias(mask, q.shape[2], k.shape[2], past_key, nonpad, q.shape[0], dtype)
        require_broadcastable("Attention", bias, "attn_mask (with the causal and padding masks)", scores.shape)
        with np.errstate(invalid="ignore"):
            biased = scores + bias
        probabilities = self._softmax(biased, bias)
        y = np.matmul(probabilities, v.astype(dtype)).astype(dtype)
        if three_d:
            y = y.transpose(0, 2, 1, 3).reshape(y.shape[0], y.shape[2], -1)
        debug = qk_matmul_output(self.qk_matmul_output_mode, raw_scores, scores, biased, probabilities)
        return (y.astype(out_dtype), present_key, present_value, debug.astype(out_dtype))

    # -- helpers ----------------------------------------------------------------------------------------

    def _bias(self, mask, q_len: int, kv_len: int, past_key, nonpad, batch: int, dtype) -> np.ndarray:
        """Additive bias (0 or -inf, plus a float mask), broadcastable to (batch, heads, q, kv)."""
        if nonpad is not None:
            check_nonpad_kv_seqlen(np.size(nonpad), batch, np.shape(nonpad))
        bias = np.zeros((q_len, kv_len), dtype)
        if mask is not None:
            mask = np.asarray(mask)
            usable = mask.dtype == np.bool_ or np.issubdtype(mask.dtype, np.floating) or mask.dtype.kind == "V"
            check_attn_mask(mask.shape, kv_len, dtype_ok=usable, dtype_name=str(mask.dtype))
            if mask.dtype == np.bool_:
                mask = np.where(mask, dtype.type(0), dtype.type(-np.inf))
            mask = mask.astype(dtype)
            if mask.shape[-1] < kv_len:
                # A mask shorter than the keys (external cache) leaves the keys past its end out of attention.
                pad = [(0, 0)] * (mask.ndim - 1) + [(0, kv_len - mask.shape[-1])]
                mask = np.pad(mask, pad, constant_values=-np.inf)
            bias = bias + mask
        if past_key is not None:
            offset = np.asarray(past_key).shape[2]
        elif nonpad is not None:
            offset = np.asarray(nonpad).reshape(-1).astype(np.int64) - q_len
        else:
            offset = 0
        allowed = _allowed_window(q_len, kv_len, offset, self.is_causal, self.left_window_size,
                                  self.right_window_size)
        if allowed is not None:
            bias = bias + np.where(allowed, dtype.type(0), dtype.type(-np.inf))
        if nonpad is not None:
            lengths = np.asarray(nonpad).reshape(-1).astype(np.int64)
            check_nonpad_kv_seqlen(lengths.shape[0], batch, np.shape(nonpad))
            valid = np.arange(kv_len).reshape(1, 1, 1, kv_len) < lengths.reshape(-1, 1, 1, 1)
            bias = bias + np.where(valid, dtype.type(0), dtype.type(-np.inf))
        return bias

    @staticmethod
    def _softmax(scores: np.ndarray, bias: np.ndarray) -> np.ndarray:
        # A query row whose bias is -inf everywhere attends nothing: ONNX defines its probabilities (and so its
        # output row) as zeros rather than the NaN a plain softmax gives. Decided on the bias, not the scores.
        fully_masked = np.isneginf(np.max(bias, axis=-1, keepdims=True))
        peak = np.max(scores, axis=-1, keepdims=True)
        zero, one = scores.dtype.type(0), scores.dtype.type(1)  # typed scalars: no promotion of bfloat16
        peak = np.where(np.isfinite(peak), peak, zero)
        with np.errstate(invalid="ignore", over="ignore"):
            exp = np.exp(scores - peak)
            total = exp.sum(axis=-1, keepdims=True)
            probabilities = exp / np.where(total == zero, one, total)
        return np.where(fully_masked, zero, probabilities)


@register("RotaryEmbedding")
class RotaryEmbedding(ReferenceOp):
    """Rotates pairs of features by position-dependent angles (RoPE).

    ``X`` is (batch, heads, seq, head_size), or (batch, seq, hidden) with ``num_heads``; ``cos_cache`` /
    ``sin_cache`` are (max_position, rotary_dim / 2) indexed by ``position_ids`` (batch, seq), or
    (batch, seq, rotary_dim / 2) without them. The first ``rotary_embedding_dim`` features of each head (all
    by default) are rotated: as two halves, or as (even, odd) pairs when ``interleaved=1``; the rest pass
    through. ``backward`` gives X's gradient (the inverse rotation); the caches get none.

    >>> import numpy as np
    >>> x = np.array([[[[1.0, 0.0]]]])                       # one head of size 2 at position 0
    >>> cos, sin = np.array([[0.0]]), np.array([[1.0]])      # a 90-degree rotation
    >>> RotaryEmbedding().forward([x, cos, sin, np.array([[0]])]).tolist()
    [[[[0.0, 1.0]]]]
    """

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("RotaryEmbedding", attributes))

    def forward(self, inputs):
        return self._rotate(inputs, inputs[0], sign=1.0)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        # A rotation's transpose is the rotation by the opposite angle: negate sin.
        dx = self._rotate(fwd_inputs, grads[0], sign=-1.0)
        return (dx,) + (None,) * (len(fwd_inputs) - 1)

    def _rotate(self, inputs, values, sign: float) -> np.ndarray:
        check_rotary_inputs(inputs)
        x = np.asarray(values)
        cos, sin = np.asarray(inputs[1]), np.asarray(inputs[2])
        positions = inputs[3] if len(inputs) > 3 else None
        # Work in (batch, seq, heads, head_size).
        count, size = rotary_heads(x.shape, self.num_heads)
        heads = x.transpose(0, 2, 1, 3) if x.ndim == 4 else x.reshape(x.shape[0], x.shape[1], count, -1)
        dim = rotary_dim(self.rotary_embedding_dim, size)
        if positions is not None:
            positions = np.asarray(positions)
            check_rotary_position_ids(cos.shape, sin.shape, positions.shape, heads.shape[:2],
                                      integer=positions.dtype.kind in "iu", dtype_name=str(positions.dtype))
            check_rotary_position_range(positions, positions.size, cos.shape[0])
            cos, sin = cos[positions], sin[positions]
        check_rotary_caches(cos.shape, sin.shape, heads.shape[:2], dim)
        dtype = float_compute_dtype(x, cos)
        cos = cos.astype(dtype)[:, :, None, :]
        sin = sign * sin.astype(dtype)[:, :, None, :]
        rotated = heads[..., :dim].astype(dtype)
        first, second = ((rotated[..., 0::2], rotated[..., 1::2]) if self.interleaved
                         else (rotated[..., :dim // 2], rotated[..., dim // 2:]))
        real, imag = cos * first - sin * second, sin * first + cos * second
        if self.interleaved:
            rotated = np.stack([real, imag], axis=-1).reshape(rotated.shape)
        else:
            rotated = np.concatenate([real, imag], axis=-1)
        out = np.concatenate([rotated, heads[..., dim:].astype(dtype)], axis=-1)
        out = out.transpose(0, 2, 1, 3) if x.ndim == 4 else out.reshape(x.shape)
        return np.asarray(out, dtype=x.dtype, order="C")


__all__ = ["Attention", "RotaryEmbedding"]
