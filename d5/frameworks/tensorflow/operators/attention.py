"""Attention operators as native TensorFlow operations: Attention (ONNX opset 23-25 semantics) and RotaryEmbedding.

Attention follows the reference operator exactly: 3-D or 4-D inputs, grouped-query heads, boolean or additive
masks (a mask shorter than the keys leaves the rest out), causal and sliding-window masking aligned at the
bottom right (past keys or ``nonpad_kv_seqlen`` shift the frontier), the internal KV cache (``present_*``
outputs), softcap, scale and the ``qk_matmul_output`` debug output. It computes in float32 (float64 for float64
inputs or ``softmax_precision=11``, bfloat16 natively, every step rounded as the reference's) and casts back to
Q's dtype; a query row with no key to attend gives zeros. TensorFlow has no fused attention kernel, so the
product, softcap and softmax are always explicit; the debug output is returned only when the node names it.
Unlike the reference (forward only), ``tf.GradientTape`` differentiates it.
"""
from __future__ import annotations

import math

import tensorflow as tf

from d5.frameworks.tensorflow.operators import TFOp, register
from d5.frameworks.tensorflow.operators._helpers import static, static_shape
from d5.ops.onnx_attributes import adopt, operator_attributes
from d5.ops.sequence_plans import (attention_geometry, attention_scale, check_attention_bias, check_attention_inputs,
                                   check_attention_ranks, check_attn_mask, check_nonpad_kv_seqlen, check_rotary_caches,
                                   check_rotary_inputs, check_rotary_position_ids, check_rotary_position_range,
                                   past_kv_length, qk_matmul_output, rotary_dim, rotary_heads, split_heads_shape,
                                   uses_window, wide_softmax, window_conditions)


def _compute_dtype(q, softmax_precision) -> tf.DType:
    if wide_softmax(softmax_precision):
        return tf.float64
    if q.dtype in (tf.float64, tf.bfloat16):
        return q.dtype
    return tf.float32


def _cast(x, dtype):
    return x if x.dtype == dtype else tf.cast(x, dtype)


def _split_heads(x, num_heads: int, name: str):
    """(batch, seq, heads * size) -> (batch, heads, seq, size)."""
    return tf.transpose(tf.reshape(x, list(split_heads_shape(static_shape(x), num_heads, name))), [0, 2, 1, 3])


def _rounded_softmax(scores):
    """Softmax over the last axis rounding every step to the (bfloat16) dtype, the sum added key by key, as
    ONNX's reference (NumPy on bfloat16) computes its expected outputs: their tolerance is below one bfloat16
    unit."""
    peak = tf.reduce_max(scores, axis=-1, keepdims=True)
    peak = tf.where(tf.math.is_finite(peak), peak, tf.zeros_like(peak))
    exp = tf.exp(scores - peak)
    total = exp[..., :1]
    for j in range(1, exp.shape[-1]):
        total = total + exp[..., j:j + 1]
    return exp / tf.where(tf.equal(total, 0), tf.ones_like(total), total)


@register("Attention")
class Attention(TFOp):
    """ONNX Attention: ``softmax(softcap(Q K^T * scale) + bias) V``; inputs ``Q, K, V[, attn_mask, past_key,
    past_value, nonpad_kv_seqlen]``, outputs ``(Y, present_key, present_value[, qk_matmul_output])``.

    >>> q = tf.ones([1, 1, 2, 4])
    >>> v = tf.reshape(tf.range(8.0), [1, 1, 2, 4])
    >>> Attention(is_causal=1)(q, q, v)[0][0, 0].numpy().tolist()
    [[0.0, 1.0, 2.0, 3.0], [2.0, 3.0, 4.0, 5.0]]
    """

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("Attention", attributes))

    def __call__(self, q, k, v, attn_mask=None, past_key=None, past_value=None, nonpad_kv_seqlen=None):
        check_attention_inputs(q, k, v, past_key, past_value, nonpad_kv_seqlen)
        rank = check_attention_ranks(tuple(q.shape), tuple(k.shape), tuple(v.shape))
        out_dtype, dtype = q.dtype, _compute_dtype(q, self.softmax_precision)
        three_d = rank == 3
        if three_d:
            q = _split_heads(q, self.q_num_heads, "Q")
            k = _split_heads(k, self.kv_num_heads, "K")
            v = _split_heads(v, self.kv_num_heads, "V")
        q_shape, k_shape, v_shape = static_shape(q), static_shape(k), static_shape(v)
        past_len = 0
        if past_key is not None:
            past_len = past_kv_length(tuple(past_key.shape), tuple(past_value.shape), k_shape, v_shape)
            k = tf.concat([_cast(past_key, k.dtype), k], axis=2)
            v = tf.concat([_cast(past_value, v.dtype), v], axis=2)
            k_shape, v_shape = static_shape(k), static_shape(v)
        # tensors, not the input variables: outputs the tape can follow
        present_key, present_value = tf.identity(k), tf.identity(v)
        batch, q_heads, q_len, head_size, _, kv_len = attention_geometry(q_shape, k_shape, v_shape)
        scale = attention_scale(self.scale, head_size)
        q, k, v = _cast(q, dtype), _cast(k, dtype), _cast(v, dtype)
        bias = self._bias(attn_mask, q_len, kv_len, past_len, nonpad_kv_seqlen, batch, dtype)
        if bias is not None:
            check_attention_bias(tuple(bias.shape), (batch, q_heads, q_len, kv_len))
        # A query row whose bias is -inf everywhere attends nothing: ONNX gives it zeros (not softmax's NaN). Its
        # bias is replaced by 0 so the softmax (and its gradient) stays finite, then its output is zeroed.
        empty = None
        if bias is not None and kv_len:
            empty = tf.equal(tf.reduce_max(bias, axis=-1, keepdims=True), -math.inf)
        y, debug = self._explicit(q, k, v, bias, empty, scale)
        if three_d:
            y = tf.reshape(tf.transpose(y, [0, 2, 1, 3]), [batch, q_len, -1])
        y = _cast(y, out_dtype)
        if self.node_output_count is not None and self.node_output_count <= 3:
            return y, present_key, present_value
        return y, present_key, present_value, _cast(debug, out_dtype)

    def _explicit(self, q, k, v, bias, empty, scale):
        if q.shape[1] != k.shape[1]:
            # Grouped-query attention: query head h uses key/value head h // group.
            group = q.shape[1] // k.shape[1]
            k, v = tf.repeat(k, group, axis=1), tf.repeat(v, group, axis=1)
        # ONNX scales Q and K by sqrt(scale) each before the product (keeps float16 from overflowing).
        root = tf.constant(math.sqrt(scale), q.dtype)  # rounded to the compute dtype
        raw = tf.matmul(q * root, k * root, transpose_b=True)
        scores = self.softcap * tf.tanh(raw / self.softcap) if self.softcap > 0 else raw
        biased = scores if bias is None else scores + bias
        safe = biased if empty is None else tf.where(empty, tf.zeros_like(biased), biased)
        if not safe.shape[-1]:
            probabilities = safe
        elif safe.dtype == tf.bfloat16:
            probabilities = _rounded_softmax(safe)
        else:
            probabilities = tf.nn.softmax(safe, axis=-1)
        if empty is not None:
            probabilities = tf.where(empty, tf.zeros_like(probabilities), probabilities)
        y = tf.matmul(probabilities, v)
        return y, qk_matmul_output(self.qk_matmul_output_mode, raw, scores, biased, probabilities)

    def _bias(self, mask, q_len, kv_len, past_len, nonpad, batch, dtype):
        """Additive bias (0 or -inf, plus a float mask) broadcastable to (batch, heads, q, kv), or None."""
        neg_inf = tf.constant(-math.inf, dtype)
        zero = tf.constant(0, dtype)
        bias = None
        if mask is not None:
            check_attn_mask(tuple(mask.shape), kv_len, dtype_ok=mask.dtype == tf.bool or mask.dtype.is_floating,
                            dtype_name=mask.dtype.name)
            if mask.dtype == tf.bool:
                mask = tf.where(mask, zero, neg_inf)
            mask = _cast(mask, dtype)
            if mask.shape[-1] < kv_len:
                # A mask shorter than the keys (external cache) leaves the keys past its end out of attention.
                paddings = [[0, 0]] * (mask.shape.rank - 1) + [[0, kv_len - mask.shape[-1]]]
                mask = tf.pad(mask, paddings, constant_values=-math.inf)
            bias = mask
        lengths = None
        if nonpad is not None:
            check_nonpad_kv_seqlen(nonpad.shape.num_elements(), batch, tuple(nonpad.shape))
            lengths = tf.reshape(tf.cast(nonpad, tf.int64), [-1, 1, 1, 1])
        if uses_window(self.is_causal, self.left_window_size, self.right_window_size):
            rows = tf.reshape(tf.range(q_len, dtype=tf.int64), [q_len, 1])
            cols = tf.reshape(tf.range(kv_len, dtype=tf.int64), [1, kv_len])
            # Query i sits at absolute position i + offset (bottom-right alignment).
            offset = tf.constant(past_len, tf.int64) if lengths is None else lengths - q_len
            distance = rows + offset - cols  # how far key j lies behind query i
            allowed = tf.ones_like(distance, dtype=tf.bool)
            for condition in window_conditions(distance, self.is_causal, self.left_window_size,
                                               self.right_window_size):
                allowed &= condition
            window = tf.where(allowed, zero, neg_inf)
            bias = window if bias is None else bias + window
        if lengths is not None:
            valid = tf.reshape(tf.range(kv_len, dtype=tf.int64), [1, 1, 1, kv_len]) < lengths
            padding = tf.where(valid, zero, neg_inf)
            bias = padding if bias is None else bias + padding
        return bias


@register("RotaryEmbedding")
class RotaryEmbedding(TFOp):
    """Rotates pairs of features by position-dependent angles (RoPE). ``X`` is (batch, heads, seq, head_size),
    or (batch, seq, hidden) with ``num_heads``; ``cos_cache`` / ``sin_cache`` are (max_position, rotary_dim / 2)
    indexed by ``position_ids`` (batch, seq), or (batch, seq, rotary_dim / 2) without them. The first
    ``rotary_embedding_dim`` features of each head (all by default) are rotated, as two halves or as
    (even, odd) pairs with ``interleaved=1``; the rest pass through. Differentiable in X (the caches get no
    gradient, as the reference).

    >>> x = tf.constant([[[[1.0, 0.0]]]])
    >>> RotaryEmbedding()(x, tf.constant([[0.0]]), tf.constant([[1.0]]), tf.constant([[0]])).numpy().tolist()
    [[[[0.0, 1.0]]]]
    """

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("RotaryEmbedding", attributes))

    def __call__(self, x, cos, sin, position_ids=None):
        check_rotary_inputs((x, cos, sin))
        shape = static_shape(x)
        count, size = rotary_heads(shape, self.num_heads)
        if len(shape) == 4:
            heads = tf.transpose(x, [0, 2, 1, 3])  # (batch, seq, heads, head_size)
        else:
            heads = tf.reshape(x, [shape[0], shape[1], count, size])
        lead = tuple(heads.shape[:2])
        dim = rotary_dim(self.rotary_embedding_dim, size)
        # The caches are tables, not trained: the reference gives them no gradient.
        cos, sin = tf.stop_gradient(cos), tf.stop_gradient(sin)
        if position_ids is not None:
            check_rotary_position_ids(tuple(cos.shape), tuple(sin.shape), tuple(position_ids.shape), lead,
                                      integer=position_ids.dtype.is_integer, dtype_name=position_ids.dtype.name)
            known = static(position_ids)  # checked where known while tracing; tf.gather refuses the rest
            if known is not None:
                check_rotary_position_range(known, known.size, cos.shape[0])
            positions = tf.cast(position_ids, tf.int64)
            cos, sin = tf.gather(cos, positions), tf.gather(sin, positions)
        check_rotary_caches(tuple(cos.shape), tuple(sin.shape), lead, dim)
        dtype = tf.float64 if tf.float64 in (x.dtype, cos.dtype, sin.dtype) else tf.float32
        cos, sin = _cast(cos, dtype)[:, :, None, :], _cast(sin, dtype)[:, :, None, :]
        rotated = _cast(heads[..., :dim], dtype)
        if self.interleaved:
            first, second = rotated[..., 0::2], rotated[..., 1::2]
        else:
            first, second = rotated[..., :dim // 2], rotated[..., dim // 2:]
        real, imag = cos * first - sin * second, sin * first + cos * second
        if self.interleaved:
            rotated = tf.reshape(tf.stack([real, imag], axis=-1), rotated.shape)
        else:
            rotated = tf.concat([real, imag], axis=-1)
        out = _cast(tf.concat([rotated, _cast(heads[..., dim:], dtype)], axis=-1), x.dtype)
        return tf.transpose(out, [0, 2, 1, 3]) if len(shape) == 4 else tf.reshape(out, shape)
