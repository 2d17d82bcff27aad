"""Attention operators as native MXNet operations: Attention (ONNX opset 23-25 semantics) and RotaryEmbedding.

Attention follows the reference operator exactly: 3-D or 4-D inputs, grouped-query heads (``repeat`` of the K/V
heads), boolean or additive masks (a mask shorter than the keys leaves the rest out), causal and sliding-window
masking aligned at the bottom right (past keys or ``nonpad_kv_seqlen`` shift the frontier), the internal KV cache
(``present_*`` outputs), softcap, scale and the ``qk_matmul_output`` debug output. MXNet 1.9 has no fused attention
kernel for this (``interleaved_matmul_*`` is GPU-only and has no mask or GQA), so the products are NumPy-style
``matmul`` and the softmax MXNet's ``softmax``. Computes in float32 (float64 for float64 inputs or
``softmax_precision=11``; bfloat16 in float32 rounded to bfloat16 after every step, as the reference's NumPy
computes it) and casts back to Q's dtype; a query row with no key to attend gives zeros. The masks
are built in NumPy where their inputs are known while composing (constants of the graph), from symbols otherwise.
Unlike the reference (forward only), ``mx.autograd`` differentiates it.

RotaryEmbedding rotates (as two halves, or (even, odd) pairs) with elementwise symbol operations; the caches pass
no gradient, as in the reference.

>>> import numpy as np
>>> from d5.frameworks.mxnet.custom_op import native_op
>>> q = np.ones((1, 1, 2, 4), np.float32)
>>> v = np.arange(8, dtype=np.float32).reshape(1, 1, 2, 4)
>>> native_op("Attention", is_causal=1).forward([q, q, v])[0][0, 0].tolist()
[[0.0, 1.0, 2.0, 3.0], [2.0, 3.0, 4.0, 5.0]]
"""
from __future__ import annotations

import math

import mxnet as mx
import numpy as np

from d5.frameworks.mxnet.operators import MXOp, register
from d5.frameworks.mxnet.operators._helpers import Symbol, as_symbol, dtype_of, reshape, shape_of, static
from d5.frameworks.mxnet.tensors import MX_BFLOAT16
from d5.ops.onnx_attributes import adopt, operator_attributes
from d5.ops.sequence_plans import (QK_WITH_BIAS, attention_geometry, attention_scale, check_attention_bias,
                                   check_attention_inputs, check_attention_ranks, check_attn_mask,
                                   check_nonpad_kv_seqlen, check_rotary_caches, check_rotary_inputs,
                                   check_rotary_position_ids, check_rotary_position_range, past_kv_length,
                                   qk_matmul_output, rotary_dim, rotary_heads, split_heads_shape, uses_window,
                                   wide_softmax, window_conditions)


def _np(x: Symbol):
    return x.as_np_ndarray()


def _bfloat16(dtype: np.dtype) -> bool:
    """bfloat16: MXNet's record type (a symbol's dtype) or ml_dtypes' (a NumPy value's)."""
    return dtype == MX_BFLOAT16 or dtype.name == "bfloat16"


def _cast(x, dtype):
    dtype = np.dtype(dtype)
    if not isinstance(x, Symbol):
        if _bfloat16(np.asarray(x).dtype):
            return np.asarray(x).astype(np.float32).astype(dtype)
        return np.asarray(x, dtype)
    if dtype_of(x) == dtype:
        return x
    return mx.sym.cast(x, "bfloat16" if _bfloat16(dtype) else dtype.name)


def _bf16_round(x):
    """float32 ``x`` rounded to the nearest bfloat16 value, ties to even (as ml_dtypes and NumPy round; MXNet's
    cast to bfloat16 truncates); infinities, NaN and zeros pass as they are."""
    if not isinstance(x, Symbol):
        import ml_dtypes

        return np.asarray(x, np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)
    size = mx.sym.abs(x)
    exponent = mx.sym.floor(mx.sym.log2(size))
    # log2 may miss by one next to a power of two: 2**exponent <= |x| < 2**(exponent + 1) exactly
    exponent = mx.sym.where(2.0 ** exponent > size, exponent - 1.0, exponent)
    exponent = mx.sym.where(2.0 ** (exponent + 1.0) <= size, exponent + 1.0, exponent)
    unit = 2.0 ** (exponent - 7.0)  # bfloat16 keeps 8 significant bits
    quotient = x / unit
    low = mx.sym.floor(quotient)
    rest = quotient - low
    odd = low - mx.sym.floor(low * 0.5) * 2.0
    rounded = mx.sym.where(rest > 0.5, low + 1.0, mx.sym.where(rest < 0.5, low, low + odd)) * unit
    plain = (size == 0.0) + (size == np.inf) + (x != x)
    return mx.sym.where(plain, x, rounded)


def _identity(x):
    return x


def _split_heads(x, num_heads: int, name: str):
    """(batch, seq, heads * size) -> (batch, heads, seq, size)."""
    split = split_heads_shape(shape_of(x), num_heads, name)
    x = as_symbol(x)
    if _bfloat16(dtype_of(x)):  # exactly, in float32: MXNet's CPU transpose has no bfloat16 kernel
        x = mx.sym.cast(x, "float32")
    return mx.sym.transpose(reshape(x, split), axes=(0, 2, 1, 3))


def _add(a, b):
    """``a + b`` broadcasting, for NumPy values (stays NumPy) and symbols."""
    if a is None or b is None:
        return b if a is None else a
    if not isinstance(a, Symbol) and not isinstance(b, Symbol):
        with np.errstate(invalid="ignore"):
            return a + b
    dtype = dtype_of(a if isinstance(a, Symbol) else b)
    return mx.sym.broadcast_add(as_symbol(a, dtype), as_symbol(b, dtype))


def _masked(allowed, dtype):
    """0 where ``allowed`` (NumPy bool, or a bool or 0/1 symbol), -inf elsewhere."""
    if not isinstance(allowed, Symbol):
        return np.where(allowed, dtype.type(0), dtype.type(-np.inf))
    return mx.sym.np.where(_np(allowed), mx.sym.np.zeros((1,), dtype=dtype.name),
                           mx.sym.np.full((1,), -np.inf, dtype=dtype.name)).as_nd_ndarray()


def _rounded_softmax(scores, kv_len: int):
    """Softmax over the last axis of bfloat16 values held in float32, every step rounded to bfloat16 and the sum
    added key by key, as ONNX's reference (NumPy on bfloat16) computes its expected outputs: their tolerance is
    below one bfloat16 unit."""
    peak = mx.sym.max(scores, axis=-1, keepdims=True)
    peak = mx.sym.where(mx.sym.abs(peak) == np.inf, mx.sym.zeros_like(peak), peak)
    exp = _bf16_round(mx.sym.exp(_bf16_round(mx.sym.broadcast_sub(scores, peak))))
    keys = mx.sym.split(exp, num_outputs=kv_len, axis=-1) if kv_len > 1 else [exp]
    total = keys[0]
    for j in range(1, kv_len):
        total = _bf16_round(total + keys[j])
    total = mx.sym.where(total == 0.0, mx.sym.ones_like(total), total)
    return _bf16_round(mx.sym.broadcast_div(exp, total))


@register("Attention")
class Attention(MXOp):
    """ONNX Attention: ``softmax(softcap(Q K^T * scale) + bias) V``; inputs ``Q, K, V[, attn_mask, past_key,
    past_value, nonpad_kv_seqlen]``, outputs ``(Y, present_key, present_value[, qk_matmul_output])``."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("Attention", attributes))

    def __call__(self, q, k, v, attn_mask=None, past_key=None, past_value=None, nonpad_kv_seqlen=None):
        check_attention_inputs(q, k, v, past_key, past_value, nonpad_kv_seqlen)
        rank = check_attention_ranks(shape_of(q), shape_of(k), shape_of(v))
        out_dtype = dtype_of(q)
        dtype = np.dtype(np.float64) if out_dtype == np.float64 or wide_softmax(self.softmax_precision) \
            else np.dtype(np.float32)
        # bfloat16 computes as the reference's NumPy does, every step rounded to bfloat16 (emulated in float32).
        self._round = _bf16_round if _bfloat16(out_dtype) and dtype == np.float32 else _identity
        three_d = rank == 3
        k_dtype, v_dtype = dtype_of(k), dtype_of(v)
        if three_d:
            q = _split_heads(q, self.q_num_heads, "Q")
            k = _split_heads(k, self.kv_num_heads, "K")
            v = _split_heads(v, self.kv_num_heads, "V")
        q, k, v = as_symbol(q), as_symbol(k), as_symbol(v)
        q_shape, k_shape, v_shape = shape_of(q), shape_of(k), shape_of(v)
        past_len = 0
        if past_key is not None:
            past_len = past_kv_length(shape_of(past_key), shape_of(past_value), k_shape, v_shape)
            if past_len:
                k, v = self._concat(past_key, k), self._concat(past_value, v)
            k_shape, v_shape = shape_of(k), shape_of(v)
        present_key, present_value = mx.sym.identity(_cast(k, k_dtype)), mx.sym.identity(_cast(v, v_dtype))
        batch, q_heads, q_len, head_size, _, kv_len = attention_geometry(q_shape, k_shape, v_shape)
        scale = attention_scale(self.scale, head_size)
        q, k, v = _cast(q, dtype), _cast(k, dtype), _cast(v, dtype)
        bias = self._bias(attn_mask, q_len, kv_len, past_len, nonpad_kv_seqlen, batch, dtype)
        if bias is not None:
            check_attention_bias(shape_of(bias), (batch, q_heads, q_len, kv_len))
        y, debug = self._attend(q, k, v, bias, scale, dtype, kv_len)
        if three_d:
            y = reshape(mx.sym.transpose(y, axes=(0, 2, 1, 3)), (batch, q_len, q_heads * shape_of(v)[3]))
        y = _cast(y, out_dtype)
        if self.node_output_count is not None and self.node_output_count <= 3:
            return y, present_key, present_value
        return y, present_key, present_value, _cast(debug, out_dtype)

    @staticmethod
    def _concat(past, new):
        """``past`` (cast to ``new``'s dtype) then ``new`` along the sequence axis (bfloat16 through float32)."""
        dtype = dtype_of(new)
        if _bfloat16(dtype):
            return mx.sym.cast(mx.sym.concat(_cast(as_symbol(past), np.float32), _cast(new, np.float32), dim=2),
                               "bfloat16")
        return mx.sym.concat(as_symbol(past, dtype), new, dim=2)

    def _attend(self, q, k, v, bias, scale, dtype, kv_len):
        if shape_of(q)[1] != shape_of(k)[1]:
            # Grouped-query attention: query head h uses key/value head h // group.
            group = shape_of(q)[1] // shape_of(k)[1]
            k, v = mx.sym.repeat(k, repeats=group, axis=1), mx.sym.repeat(v, repeats=group, axis=1)
        # ONNX scales Q and K by sqrt(scale) each before the product (keeps float16 from overflowing).
        r = self._round
        root = float(r(dtype.type(math.sqrt(scale))))  # rounded to the compute dtype
        raw = r(mx.sym.np.matmul(_np(r(q * root)), _np(mx.sym.swapaxes(r(k * root), 2, 3))).as_nd_ndarray())
        scores = r(r(mx.sym.tanh(r(raw / self.softcap))) * self.softcap) if self.softcap > 0 else raw
        mode = self.qk_matmul_output_mode
        if bias is None:
            biased = safe = scores
            empty = None
        else:
            # A query row whose bias is -inf everywhere attends nothing: ONNX gives it zeros (not softmax's NaN).
            # Its bias is replaced by 0 so the softmax (and its gradient) stays finite, then its output is zeroed.
            empty, safe_bias = self._empty_rows(bias, kv_len, dtype)
            biased = r(_add(scores, bias)) if mode == QK_WITH_BIAS else None
            safe = r(_add(scores, safe_bias))
        if not kv_len:
            probabilities = safe
        elif r is _identity:
            probabilities = mx.sym.softmax(safe, axis=-1)
        else:
            probabilities = _rounded_softmax(safe, kv_len)
        if empty is not None:
            probabilities = mx.sym.broadcast_mul(probabilities, as_symbol(1.0 - empty, dtype) if not isinstance(
                empty, Symbol) else 1.0 - empty)
        y = r(mx.sym.np.matmul(_np(probabilities), _np(v)).as_nd_ndarray())
        return y, qk_matmul_output(mode, raw, scores, biased, probabilities)

    @staticmethod
    def _empty_rows(bias, kv_len, dtype):
        """(rows attending nothing as 1.0 of shape bias[..., :1], the bias with those rows 0)."""
        if not kv_len:
            return None, bias
        if not isinstance(bias, Symbol):
            empty = np.isneginf(np.max(bias, axis=-1, keepdims=True))
            return empty.astype(dtype), np.where(empty, dtype.type(0), bias)
        empty = mx.sym.max(bias, axis=-1, keepdims=True) == -np.inf
        safe = mx.sym.np.where(_np(empty), mx.sym.np.zeros((1,), dtype=dtype.name), _np(bias)).as_nd_ndarray()
        return empty, _cast(safe, dtype)

    def _bias(self, mask, q_len, kv_len, past_len, nonpad, batch, dtype):
        """Additive bias (0 or -inf, plus a float mask) broadcastable to (batch, heads, q, kv), or None: a NumPy
        value where the mask and lengths are known while composing, else a symbol."""
        bias = None
        if mask is not None:
            shape, kind = shape_of(mask), dtype_of(mask)
            check_attn_mask(shape, kv_len, dtype_ok=kind == np.bool_ or kind.kind == "f" or _bfloat16(kind),
                            dtype_name=kind.name)
            if kind == np.bool_:
                mask = _masked(mask, dtype)
            mask = _cast(mask, dtype)
            if kind != np.bool_ and not _bfloat16(kind):
                mask = self._round(mask)  # a float mask in the compute dtype (bfloat16: rounded)
            if shape[-1] < kv_len:
                # A mask shorter than the keys (external cache) leaves the keys past its end out of attention.
                fill = np.full(shape[:-1] + (kv_len - shape[-1],), -np.inf, dtype)
                mask = np.concatenate([mask, fill], axis=-1) if not isinstance(mask, Symbol) else \
                    mx.sym.concat(mask, as_symbol(fill), dim=len(shape) - 1)
            bias = mask
        lengths = None
        if nonpad is not None:
            check_nonpad_kv_seqlen(int(np.prod(shape_of(nonpad))), batch, shape_of(nonpad))
            known = static(nonpad)
            lengths = known.reshape(-1, 1, 1, 1).astype(np.int64) if known is not None else \
                reshape(mx.sym.cast(nonpad, dtype.name), (batch, 1, 1, 1))
        if uses_window(self.is_causal, self.left_window_size, self.right_window_size):
            rows = np.arange(q_len).reshape(q_len, 1)
            cols = np.arange(kv_len).reshape(1, kv_len)
            # Query i sits at absolute position i + offset (bottom-right alignment).
            if isinstance(lengths, Symbol):
                distance = mx.sym.broadcast_add(as_symbol((rows - q_len - cols).astype(dtype)), lengths)
                allowed = None
                for condition in self._window(distance):
                    allowed = condition if allowed is None else allowed * condition
            else:
                distance = rows + (past_len if lengths is None else lengths - q_len) - cols
                allowed = np.ones(np.shape(distance), bool)
                for condition in self._window(distance):
                    allowed &= condition
            bias = _add(bias, _masked(allowed, dtype))
        if lengths is not None:
            keys = np.arange(kv_len).reshape(1, 1, 1, kv_len)
            valid = keys < lengths if not isinstance(lengths, Symbol) else \
                mx.sym.broadcast_lesser(as_symbol(keys.astype(dtype)), lengths)
            bias = _add(bias, _masked(valid, dtype))
        return bias

    def _window(self, distance):
        """The conditions (on how far key j lies behind query i) of causal and sliding-window masking."""
        return window_conditions(distance, self.is_causal, self.left_window_size, self.right_window_size)


@register("RotaryEmbedding")
class RotaryEmbedding(MXOp):
    """Rotates pairs of features by position-dependent angles (RoPE). ``X`` is (batch, heads, seq, head_size),
    or (batch, seq, hidden) with ``num_heads``; ``cos_cache`` / ``sin_cache`` are (max_position, rotary_dim / 2)
    indexed by ``position_ids`` (batch, seq), or (batch, seq, rotary_dim / 2) without them. The first
    ``rotary_embedding_dim`` features of each head (all by default) are rotated, as two halves or as
    (even, odd) pairs with ``interleaved=1``; the rest pass through. Differentiable in X (the caches get no
    gradient, as the reference)."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("RotaryEmbedding", attributes))

    def __call__(self, x, cos, sin, position_ids=None):
        check_rotary_inputs((x, cos, sin))
        shape = shape_of(x)
        x_dtype = dtype_of(x)
        x = as_symbol(x)
        count, size = rotary_heads(shape, self.num_heads)
        if len(shape) == 4:
            heads = mx.sym.transpose(x, axes=(0, 2, 1, 3))  # (batch, seq, heads, head_size)
            lead = (shape[0], shape[2])
        else:
            heads = reshape(x, (shape[0], shape[1], count, size))
            lead = shape[:2]
        dim = rotary_dim(self.rotary_embedding_dim, size)
        cos_shape, sin_shape = shape_of(cos), shape_of(sin)
        dtype = np.dtype(np.float64) if np.float64 in (x_dtype, dtype_of(cos)) else np.dtype(np.float32)
        # The caches are tables, not trained: the reference gives them no gradient.
        cos, sin = mx.sym.BlockGrad(as_symbol(cos, dtype)), mx.sym.BlockGrad(as_symbol(sin, dtype))
        if position_ids is not None:
            ids_dtype = dtype_of(position_ids)
            check_rotary_position_ids(cos_shape, sin_shape, shape_of(position_ids), lead,
                                      integer=ids_dtype.kind in "iu", dtype_name=ids_dtype.name)
            known = static(position_ids)
            if known is not None:
                check_rotary_position_range(known, known.size, cos_shape[0])
            positions = as_symbol(position_ids)
            cos, sin = mx.sym.take(cos, positions, axis=0), mx.sym.take(sin, positions, axis=0)
            cos_shape = sin_shape = lead + cos_shape[1:]
        check_rotary_caches(cos_shape, sin_shape, lead, dim)
        half = dim // 2
        cos, sin = reshape(cos, lead + (1, half)), reshape(sin, lead + (1, half))
        heads = _cast(heads, dtype)
        rotated = heads if dim == size else mx.sym.slice_axis(heads, axis=3, begin=0, end=dim)
        if self.interleaved:
            pairs = mx.sym.split(reshape(rotated, lead + (count, half, 2)), num_outputs=2, axis=4, squeeze_axis=True)
            first, second = pairs[0], pairs[1]
        else:
            halves = mx.sym.split(rotated, num_outputs=2, axis=3)
            first, second = halves[0], halves[1]
        real = mx.sym.broadcast_mul(first, cos) - mx.sym.broadcast_mul(second, sin)
        imag = mx.sym.broadcast_mul(first, sin) + mx.sym.broadcast_mul(second, cos)
        if self.interleaved:
            rotated = reshape(mx.sym.stack(real, imag, axis=-1), lead + (count, dim))
        else:
            rotated = mx.sym.concat(real, imag, dim=3)
        if dim < size:
            rotated = mx.sym.concat(rotated, mx.sym.slice_axis(heads, axis=3, begin=dim, end=size), dim=3)
        out = _cast(rotated, x_dtype)
        return mx.sym.transpose(out, axes=(0, 2, 1, 3)) if len(shape) == 4 else reshape(out, shape)


__all__ = ["Attention", "RotaryEmbedding"]
