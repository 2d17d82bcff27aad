"""Attention operators as native torch operations: Attention (ONNX opset 23-25 semantics) and RotaryEmbedding.

Attention follows the reference operator exactly: 3-D or 4-D inputs, grouped-query heads, boolean or additive
masks (a mask shorter than the keys leaves the rest out), causal and sliding-window masking aligned at the
bottom right (past keys or ``nonpad_kv_seqlen`` shift the frontier), the internal KV cache (``present_*``
outputs), softcap, scale and the ``qk_matmul_output`` debug output. It computes in float32 (float64 for
float64 inputs or ``softmax_precision=11``, bfloat16 natively, every step rounded as the reference's) and casts
back to Q's dtype; a query row with no key to attend gives zeros. When the node asks for neither softcap nor the
debug output (and Q is not bfloat16), the scores never leave ``F.scaled_dot_product_attention`` (its fused
kernels; its own causal mask when that is the only one); otherwise the product, softcap and softmax are
explicit. Unlike the reference (forward only), torch autograd differentiates it.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from d5.frameworks.pytorch.operators import TorchOp, register
from d5.ops.onnx_attributes import adopt, operator_attributes
from d5.ops.sequence_plans import (attention_geometry, attention_scale, check_attention_bias, check_attention_inputs,
                                   check_attention_ranks, check_attn_mask, check_nonpad_kv_seqlen, check_rotary_caches,
                                   check_rotary_inputs, check_rotary_position_ids, check_rotary_position_range,
                                   past_kv_length, qk_matmul_output, rotary_dim, rotary_heads, split_heads_shape,
                                   uses_window, wide_softmax, window_conditions)


def _compute_dtype(q: torch.Tensor, softmax_precision) -> torch.dtype:
    if wide_softmax(softmax_precision):
        return torch.float64
    if q.dtype in (torch.float64, torch.bfloat16):
        return q.dtype
    return torch.float32


def _split_heads(x: torch.Tensor, num_heads: int, name: str) -> torch.Tensor:
    """(batch, seq, heads * size) -> (batch, heads, seq, size)."""
    return x.reshape(split_heads_shape(tuple(x.shape), num_heads, name)).transpose(1, 2)


def _rounded_softmax(scores: torch.Tensor) -> torch.Tensor:
    """Softmax over the last axis rounding every step to the (bfloat16) dtype, the sum added key by key, as
    ONNX's reference (NumPy on bfloat16) computes its expected outputs: their tolerance is below one bfloat16
    unit, so torch's float32-internal softmax is one unit off."""
    peak = scores.amax(dim=-1, keepdim=True)
    peak = torch.where(torch.isfinite(peak), peak, torch.zeros((), dtype=peak.dtype))
    exp = torch.exp(scores - peak)
    total = exp[..., :1]
    for j in range(1, exp.shape[-1]):
        total = total + exp[..., j:j + 1]
    return exp / torch.where(total == 0, torch.ones((), dtype=total.dtype), total)


@register("Attention")
class Attention(TorchOp):
    """ONNX Attention: ``softmax(softcap(Q K^T * scale) + bias) V``; inputs ``Q, K, V[, attn_mask, past_key,
    past_value, nonpad_kv_seqlen]``, outputs ``(Y, present_key, present_value, qk_matmul_output)``.

    >>> q = torch.ones(1, 1, 2, 4)
    >>> v = torch.arange(8.0).reshape(1, 1, 2, 4)
    >>> Attention(is_causal=1)(q, q, v)[0][0, 0].tolist()
    [[0.0, 1.0, 2.0, 3.0], [2.0, 3.0, 4.0, 5.0]]
    """

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("Attention", attributes))

    def forward(self, q, k, v, attn_mask=None, past_key=None, past_value=None, nonpad_kv_seqlen=None):
        check_attention_inputs(q, k, v, past_key, past_value, nonpad_kv_seqlen)
        three_d = check_attention_ranks(tuple(q.shape), tuple(k.shape), tuple(v.shape)) == 3
        out_dtype, dtype = q.dtype, _compute_dtype(q, self.softmax_precision)
        if three_d:
            q = _split_heads(q, self.q_num_heads, "Q")
            k = _split_heads(k, self.kv_num_heads, "K")
            v = _split_heads(v, self.kv_num_heads, "V")
        past_len = 0
        if past_key is not None:
            past_len = past_kv_length(past_key.shape, past_value.shape, k.shape, v.shape)
            k = torch.cat([past_key.to(k.dtype), k], dim=2)
            v = torch.cat([past_value.to(v.dtype), v], dim=2)
        present_key, present_value = k, v
        batch, q_heads, q_len, head_size, _, kv_len = attention_geometry(q.shape, k.shape, v.shape)
        scale = attention_scale(self.scale, head_size)
        q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
        wants_debug = self.node_output_count is None or self.node_output_count > 3
        fused = not (self.softcap > 0 or wants_debug or kv_len == 0 or dtype == torch.bfloat16)
        # Only the causal mask without past keys: SDPA's own is_causal (top-left aligned, which is ONNX's
        # bottom-right alignment when no key precedes the queries) needs no bias and lets SDPA pick its kernels.
        if fused and self.is_causal and attn_mask is None and past_len == 0 and nonpad_kv_seqlen is None \
                and self.left_window_size < 0 and self.right_window_size < 0:
            y, debug = self._fused(q, k, v, None, None, scale, causal=True), None
        else:
            bias = self._bias(attn_mask, q_len, kv_len, past_len, nonpad_kv_seqlen, batch, dtype, q.device)
            if bias is not None:
                check_attention_bias(tuple(bias.shape), (batch, q_heads, q_len, kv_len))
            # A query row whose bias is -inf everywhere attends nothing: ONNX gives it zeros (not softmax's
            # NaN). Its bias is replaced by 0 so the softmax (and its gradient) stays finite, then its output
            # is zeroed.
            empty = None
            if bias is not None and kv_len:
                empty = torch.isneginf(bias.amax(dim=-1, keepdim=True))
                empty = empty if bool(empty.any()) else None
            if fused:
                y, debug = self._fused(q, k, v, bias, empty, scale, causal=False), None
            else:
                y, debug = self._explicit(q, k, v, bias, empty, scale)
        if three_d:
            y = y.transpose(1, 2).reshape(batch, q_len, -1)
        y = y.to(out_dtype)
        if debug is None:
            return y, present_key, present_value
        return y, present_key, present_value, debug.to(out_dtype)

    @staticmethod
    def _fused(q, k, v, bias, empty, scale, causal: bool):
        """F.scaled_dot_product_attention with the additive ``bias`` (None: none) or SDPA's own causal mask."""
        mask = bias
        if empty is not None:
            mask = torch.where(empty, torch.zeros((), dtype=mask.dtype, device=mask.device), mask)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, scale=scale,
                                           enable_gqa=q.shape[1] != k.shape[1])
        if empty is not None:
            y = torch.where(empty, torch.zeros((), dtype=y.dtype, device=y.device), y)
        return y

    def _explicit(self, q, k, v, bias, empty, scale):
        if q.shape[1] != k.shape[1]:
            # Grouped-query attention: query head h uses key/value head h // group.
            group = q.shape[1] // k.shape[1]
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        # ONNX scales Q and K by sqrt(scale) each before the product (keeps float16 from overflowing).
        root = torch.tensor(math.sqrt(scale), dtype=q.dtype, device=q.device)  # rounded to the compute dtype
        raw = torch.matmul(q * root, (k * root).transpose(-1, -2))
        scores = self.softcap * torch.tanh(raw / self.softcap) if self.softcap > 0 else raw
        biased = scores if bias is None else scores + bias
        safe = biased if empty is None else torch.where(empty, torch.zeros((), dtype=biased.dtype), biased)
        if not safe.shape[-1]:
            probabilities = safe
        elif safe.dtype == torch.bfloat16:
            probabilities = _rounded_softmax(safe)
        else:
            probabilities = torch.softmax(safe, dim=-1)
        if empty is not None:
            probabilities = torch.where(empty, torch.zeros((), dtype=probabilities.dtype), probabilities)
        y = torch.matmul(probabilities, v)
        return y, qk_matmul_output(self.qk_matmul_output_mode, raw, scores, biased, probabilities)

    def _bias(self, mask, q_len, kv_len, past_len, nonpad, batch, dtype, device):
        """Additive bias (0 or -inf, plus a float mask) broadcastable to (batch, heads, q, kv), or None."""
        neg_inf = torch.tensor(-math.inf, dtype=dtype, device=device)
        zero = torch.zeros((), dtype=dtype, device=device)
        bias = None
        if mask is not None:
            check_attn_mask(tuple(mask.shape), kv_len, dtype_ok=mask.dtype == torch.bool or mask.is_floating_point(),
                            dtype_name=str(mask.dtype))
            if mask.dtype == torch.bool:
                mask = torch.where(mask, zero, neg_inf)
            mask = mask.to(dtype)
            if mask.shape[-1] < kv_len:
                # A mask shorter than the keys (external cache) leaves the keys past its end out of attention.
                mask = F.pad(mask, (0, kv_len - mask.shape[-1]), value=-math.inf)
            bias = mask
        lengths = None
        if nonpad is not None:
            check_nonpad_kv_seqlen(nonpad.numel(), batch, tuple(nonpad.shape))
            lengths = nonpad.reshape(-1, 1, 1, 1).to(torch.int64)
        if uses_window(self.is_causal, self.left_window_size, self.right_window_size):
            rows = torch.arange(q_len, device=device).reshape(q_len, 1)
            cols = torch.arange(kv_len, device=device).reshape(1, kv_len)
            # Query i sits at absolute position i + offset (bottom-right alignment).
            offset = past_len if lengths is None else lengths - q_len
            distance = rows + offset - cols  # how far key j lies behind query i
            allowed = torch.ones(distance.shape, dtype=torch.bool, device=device)
            for condition in window_conditions(distance, self.is_causal, self.left_window_size,
                                               self.right_window_size):
                allowed &= condition
            window = torch.where(allowed, zero, neg_inf)
            bias = window if bias is None else bias + window
        if lengths is not None:
            valid = torch.arange(kv_len, device=device).reshape(1, 1, 1, kv_len) < lengths
            padding = torch.where(valid, zero, neg_inf)
            bias = padding if bias is None else bias + padding
        return bias


@register("RotaryEmbedding")
class RotaryEmbedding(TorchOp):
    """Rotates pairs of features by position-dependent angles (RoPE). ``X`` is (batch, heads, seq, head_size),
    or (batch, seq, hidden) with ``num_heads``; ``cos_cache`` / ``sin_cache`` are (max_position, rotary_dim / 2)
    indexed by ``position_ids`` (batch, seq), or (batch, seq, rotary_dim / 2) without them. The first
    ``rotary_embedding_dim`` features of each head (all by default) are rotated, as two halves or as
    (even, odd) pairs with ``interleaved=1``; the rest pass through. Differentiable in X (the caches get no
    gradient, as the reference).

    >>> x = torch.tensor([[[[1.0, 0.0]]]])
    >>> RotaryEmbedding()(x, torch.tensor([[0.0]]), torch.tensor([[1.0]]), torch.tensor([[0]])).tolist()
    [[[[0.0, 1.0]]]]
    """

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("RotaryEmbedding", attributes))

    def forward(self, x, cos, sin, position_ids=None):
        check_rotary_inputs((x, cos, sin))
        count, size = rotary_heads(tuple(x.shape), self.num_heads)
        heads = x.transpose(1, 2) if x.dim() == 4 else x.reshape(x.shape[0], x.shape[1], count, -1)
        dim = rotary_dim(self.rotary_embedding_dim, size)
        # The caches are tables, not trained: the reference gives them no gradient.
        cos, sin = cos.detach(), sin.detach()
        if position_ids is not None:
            integer = not (position_ids.is_floating_point() or position_ids.dtype == torch.bool)
            check_rotary_position_ids(cos.shape, sin.shape, position_ids.shape, tuple(heads.shape[:2]),
                                      integer=integer, dtype_name=str(position_ids.dtype))
            positions = position_ids.to(torch.int64)
            check_rotary_position_range(positions, positions.numel(), cos.shape[0])
            cos, sin = cos[positions], sin[positions]
        check_rotary_caches(cos.shape, sin.shape, tuple(heads.shape[:2]), dim)
        dtype = torch.float64 if torch.float64 in (x.dtype, cos.dtype, sin.dtype) else torch.float32
        cos, sin = cos.to(dtype).unsqueeze(2), sin.to(dtype).unsqueeze(2)
        rotated = heads[..., :dim].to(dtype)
        if self.interleaved:
            first, second = rotated[..., 0::2], rotated[..., 1::2]
        else:
            first, second = rotated[..., :dim // 2], rotated[..., dim // 2:]
        real, imag = cos * first - sin * second, sin * first + cos * second
        if self.interleaved:
            rotated = torch.stack([real, imag], dim=-1).reshape(rotated.shape)
        else:
            rotated = torch.cat([real, imag], dim=-1)
        out = torch.cat([rotated, heads[..., dim:].to(dtype)], dim=-1).to(x.dtype)
        return out.transpose(1, 2).contiguous() if x.dim() == 4 else out.reshape(x.shape)
