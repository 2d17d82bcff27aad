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

from d5.errors import ShapeError
from d5.frameworks.tensorflow.operators import TFOp, register
from d5.frameworks.tensorflow.operators._helpers import static, static_shape
from d5.ops.onnx_attributes import adopt, operator_attributes
from d5.ops.onnx_semantics import broadcast_shape

# qk_matmul_output_mode values: what the fourth output holds.
_QK_RAW, _QK_SOFTCAPPED, _QK_WITH_BIAS, _QK_SOFTMAX = 0, 1, 2, 3


def _compute_dtype(q, softmax_precision) -> tf.DType:
    if softmax_precision is not None and int(softmax_precision) == 11:
        return tf.float64
    if q.dtype in (tf.float64, tf.bfloat16):
        return q.dtype
    return tf.float32


def _cast(x, dtype):
    return x if x.dtype == dtype else tf.cast(x, dtype)


def _split_heads(x, num_heads: int, name: str):
    """(batch, seq, heads * size) -> (batch, heads, seq, size)."""
    if not num_heads:
        raise ShapeError(f"Attention: 3-D inputs need the q_num_heads and kv_num_heads attributes (to split "
                         f"the hidden size of {name} into heads)")
    batch, seq, hidden = static_shape(x)
    if hidden % num_heads:
        raise ShapeError(f"Attention: the hidden size {hidden} of {name} is not divisible by {num_heads} heads")
    return tf.transpose(tf.reshape(x, [batch, seq, num_heads, hidden // num_heads]), [0, 2, 1, 3])


def _broadcast(shape, target):
    """The broadcast of two static shapes, or None where they do not broadcast."""
    try:
        return broadcast_shape("Attention", tuple(shape), tuple(target))
    except ShapeError:
        return None


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
        if q is None or k is None or v is None:
            raise ShapeError("Attention: inputs Q, K and V are required")
        if (past_key is None) != (past_value is None):
            raise ShapeError("Attention: past_key and past_value must be given together (or neither)")
        if nonpad_kv_seqlen is not None and past_key is not None:
            raise ShapeError("Attention: nonpad_kv_seqlen (external KV cache) cannot be combined with past_key/"
                             "past_value (internal cache); use one of the two")
        rank = q.shape.rank
        if not (rank == k.shape.rank == v.shape.rank and rank in (3, 4)):
            raise ShapeError(f"Attention: Q, K and V must all be 3-D or all 4-D, got shapes {tuple(q.shape)}, "
                             f"{tuple(k.shape)}, {tuple(v.shape)}")
        out_dtype, dtype = q.dtype, _compute_dtype(q, self.softmax_precision)
        three_d = rank == 3
        if three_d:
            q = _split_heads(q, self.q_num_heads, "Q")
            k = _split_heads(k, self.kv_num_heads, "K")
            v = _split_heads(v, self.kv_num_heads, "V")
        q_shape, k_shape, v_shape = static_shape(q), static_shape(k), static_shape(v)
        past_len = 0
        if past_key is not None:
            pk, pv = tuple(past_key.shape), tuple(past_value.shape)
            if len(pk) != 4 or len(pv) != 4 or pk[:2] != k_shape[:2] or pv[:2] != v_shape[:2] \
                    or pk[3] != k_shape[3] or pv[3] != v_shape[3] or pk[2] != pv[2]:
                raise ShapeError(f"Attention: past_key and past_value must be 4-D (batch, kv_heads, past_len, "
                                 f"head_size) matching K {k_shape} and V {v_shape}, got {pk} and {pv}")
            past_len = pk[2]
            k = tf.concat([_cast(past_key, k.dtype), k], axis=2)
            v = tf.concat([_cast(past_value, v.dtype), v], axis=2)
            k_shape, v_shape = static_shape(k), static_shape(v)
        # tensors, not the input variables: outputs the tape can follow
        present_key, present_value = tf.identity(k), tf.identity(v)
        batch, q_heads, q_len, head_size = q_shape
        kv_heads, kv_len = k_shape[1], k_shape[2]
        if q_heads != kv_heads and (kv_heads == 0 or q_heads % kv_heads or v_shape[1] != kv_heads):
            raise ShapeError(f"Attention: {q_heads} query heads cannot be grouped over {kv_heads} key and "
                             f"{v_shape[1]} value heads (q_num_heads must be a multiple of kv_num_heads)")
        if k_shape[0] != batch or v_shape[0] != batch or v_shape[2] != kv_len or k_shape[3] != head_size:
            raise ShapeError(f"Attention: K {k_shape} and V {v_shape} (heads split) do not match Q {q_shape}: "
                             f"batch, key length and Q/K head size must agree")
        scale = self.scale if self.scale is not None else 1.0 / math.sqrt(head_size)
        q, k, v = _cast(q, dtype), _cast(k, dtype), _cast(v, dtype)
        bias = self._bias(attn_mask, q_len, kv_len, past_len, nonpad_kv_seqlen, batch, dtype)
        scores_shape = (batch, q_heads, q_len, kv_len)
        if bias is not None and _broadcast(bias.shape, scores_shape) != scores_shape:
            raise ShapeError(f"Attention: attn_mask (with the causal and padding masks) of shape "
                             f"{tuple(bias.shape)} does not broadcast to the scores' shape {scores_shape}")
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
        debug = {_QK_RAW: raw, _QK_SOFTCAPPED: scores, _QK_WITH_BIAS: biased, _QK_SOFTMAX: probabilities}
        return y, debug[self.qk_matmul_output_mode]

    def _bias(self, mask, q_len, kv_len, past_len, nonpad, batch, dtype):
        """Additive bias (0 or -inf, plus a float mask) broadcastable to (batch, heads, q, kv), or None."""
        neg_inf = tf.constant(-math.inf, dtype)
        zero = tf.constant(0, dtype)
        bias = None
        if mask is not None:
            if not 1 <= mask.shape.rank <= 4:
                raise ShapeError(f"Attention: attn_mask must have 1 to 4 dimensions (broadcast to (batch, heads, "
                                 f"q_len, kv_len)), got shape {tuple(mask.shape)}")
            if mask.shape[-1] > kv_len:
                raise ShapeError(f"Attention: attn_mask covers {mask.shape[-1]} keys but there are only {kv_len}")
            if mask.dtype == tf.bool:
                mask = tf.where(mask, zero, neg_inf)
            elif not mask.dtype.is_floating:
                raise ShapeError(f"Attention: attn_mask must be bool or float, got {mask.dtype.name}")
            mask = _cast(mask, dtype)
            if mask.shape[-1] < kv_len:
                # A mask shorter than the keys (external cache) leaves the keys past its end out of attention.
                paddings = [[0, 0]] * (mask.shape.rank - 1) + [[0, kv_len - mask.shape[-1]]]
                mask = tf.pad(mask, paddings, constant_values=-math.inf)
            bias = mask
        lengths = None
        if nonpad is not None:
            if nonpad.shape.num_elements() != batch:
                raise ShapeError(f"Attention: nonpad_kv_seqlen must have one length per batch item ({batch}), got "
                                 f"shape {tuple(nonpad.shape)}")
            lengths = tf.reshape(tf.cast(nonpad, tf.int64), [-1, 1, 1, 1])
        if self.is_causal or self.left_window_size >= 0 or self.right_window_size >= 0:
            rows = tf.reshape(tf.range(q_len, dtype=tf.int64), [q_len, 1])
            cols = tf.reshape(tf.range(kv_len, dtype=tf.int64), [1, kv_len])
            # Query i sits at absolute position i + offset (bottom-right alignment).
            offset = tf.constant(past_len, tf.int64) if lengths is None else lengths - q_len
            distance = rows + offset - cols  # how far key j lies behind query i
            allowed = tf.ones_like(distance, dtype=tf.bool)
            if self.is_causal:
                allowed &= distance >= 0
            if self.left_window_size >= 0:
                allowed &= distance <= self.left_window_size
            if self.right_window_size >= 0:
                allowed &= -distance <= self.right_window_size
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
        if x is None or cos is None or sin is None:
            raise ShapeError("RotaryEmbedding: expected inputs (X, cos_cache, sin_cache[, position_ids])")
        shape = static_shape(x)
        if len(shape) == 4:
            heads = tf.transpose(x, [0, 2, 1, 3])  # (batch, seq, heads, head_size)
        elif len(shape) == 3:
            if self.num_heads <= 0 or shape[2] % self.num_heads:
                raise ShapeError(f"RotaryEmbedding: 3-D input {shape} needs num_heads dividing its hidden size "
                                 f"{shape[2]}, got num_heads={self.num_heads}")
            heads = tf.reshape(x, [shape[0], shape[1], self.num_heads, shape[2] // self.num_heads])
        else:
            raise ShapeError(f"RotaryEmbedding: X must be 3-D or 4-D, got shape {shape}")
        lead, size = tuple(heads.shape[:2]), heads.shape[3]
        dim = self.rotary_embedding_dim or size
        if dim % 2 or dim > size:
            raise ShapeError(f"RotaryEmbedding: rotary_embedding_dim={dim} must be even and at most the head "
                             f"size {size}")
        # The caches are tables, not trained: the reference gives them no gradient.
        cos, sin = tf.stop_gradient(cos), tf.stop_gradient(sin)
        if position_ids is not None:
            if cos.shape.rank != 2 or sin.shape != cos.shape or tuple(position_ids.shape) != lead \
                    or not position_ids.dtype.is_integer:
                raise ShapeError(f"RotaryEmbedding: with position_ids, the caches must be 2-D (max_position, "
                                 f"rotary_dim / 2) and position_ids integers of shape {lead} (batch, seq); got "
                                 f"caches {tuple(cos.shape)} and {tuple(sin.shape)}, position_ids "
                                 f"{position_ids.dtype.name} {tuple(position_ids.shape)}")
            known = static(position_ids)  # checked where known while tracing; tf.gather refuses the rest
            if known is not None and known.size and (known.min() < 0 or known.max() >= cos.shape[0]):
                raise ShapeError(f"RotaryEmbedding: position_ids must lie in [0, {cos.shape[0]}) (the caches' "
                                 f"max_position), got values in [{int(known.min())}, {int(known.max())}]")
            positions = tf.cast(position_ids, tf.int64)
            cos, sin = tf.gather(cos, positions), tf.gather(sin, positions)
        if cos.shape.rank != 3 or cos.shape != sin.shape or tuple(cos.shape[:2]) != lead:
            raise ShapeError(f"RotaryEmbedding: cos/sin caches must be (batch, seq, rotary_dim / 2) = "
                             f"{lead + (dim // 2,)} without position_ids, got {tuple(cos.shape)} and "
                             f"{tuple(sin.shape)}")
        if cos.shape[-1] != dim // 2:
            raise ShapeError(f"RotaryEmbedding: cos/sin caches must end in rotary_embedding_dim / 2 = {dim // 2}, "
                             f"got {tuple(cos.shape)} and {tuple(sin.shape)}")
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
