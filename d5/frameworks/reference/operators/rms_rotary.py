"""Reference transformer building blocks (ONNX opset 23-24): RMSNormalization, RotaryEmbedding, Swish and
SwiGLU, forward and backward in NumPy.

Narrow floats (float16, bfloat16) compute in float32 and are cast back; float64 stays float64.

>>> import numpy as np
>>> RMSNormalization(epsilon=0.0).forward([np.array([[3.0, 4.0]]), np.ones(2)]).round(4).tolist()
[[0.8485, 1.1314]]
"""
from __future__ import annotations

import numpy as np
import scipy.special

from d5.errors import ShapeError
from d5.frameworks.reference.operators.elementwise import unbroadcast
from d5.frameworks.reference.operators.checks import require_broadcastable
from d5.frameworks.reference.operators.registry import ReferenceOp, register

# ONNX TensorProto float types accepted as stash_type (float32, float16, float64, bfloat16).
_STASH_TYPES = (1, 10, 11, 16)


def _compute_dtype(*arrays) -> np.dtype:
    return np.dtype(np.float64) if any(np.asarray(a).dtype == np.float64 for a in arrays) else np.dtype(np.float32)


@register("RMSNormalization")
class RMSNormalization(ReferenceOp):
    """``Y = X / sqrt(mean(X^2) + epsilon) * scale`` with the mean over the axes ``axis..rank-1``.

    ``backward`` returns gradients for X and scale (summed back to scale's broadcast shape).

    >>> import numpy as np
    >>> x = np.arange(6, dtype=np.float32).reshape(2, 3)
    >>> RMSNormalization(axis=0).forward([x, np.ones((2, 3), np.float32)]).dtype
    dtype('float32')
    """

    def __init__(self, axis: int = -1, epsilon: float = 1e-5, stash_type: int = 1) -> None:
        super().__init__()
        self.axis = int(axis)
        self.epsilon = float(epsilon)
        if int(stash_type) not in _STASH_TYPES:
            raise ShapeError(f"RMSNormalization: stash_type must be a float TensorProto type (1 = float32, "
                             f"11 = float64, ...), got {stash_type}")
        self.stash_type = int(stash_type)

    def _prepare(self, inputs):
        if len(inputs) != 2 or inputs[0] is None or inputs[1] is None:
            raise ShapeError(f"RMSNormalization: expected inputs (X, scale), got {len(inputs)}")
        x, scale = np.asarray(inputs[0]), np.asarray(inputs[1])
        if not -x.ndim <= self.axis < x.ndim:
            raise ShapeError(f"RMSNormalization: axis={self.axis} is out of range for X of rank {x.ndim}")
        axes = tuple(range(self.axis % x.ndim, x.ndim))
        require_broadcastable("RMSNormalization", scale, "scale", x.shape)
        dtype = np.dtype(np.float64) if self.stash_type == 11 else _compute_dtype(x, scale)
        xc = x.astype(dtype, copy=False)
        inv_rms = 1.0 / np.sqrt(np.mean(xc * xc, axis=axes, keepdims=True) + self.epsilon)
        return x, scale, xc, scale.astype(dtype, copy=False), inv_rms, axes

    def forward(self, inputs):
        x, _, xc, scale, inv_rms, _ = self._prepare(inputs)
        return (xc * inv_rms * scale).astype(x.dtype, copy=False)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        x, scale_in, xc, scale, inv_rms, axes = self._prepare(fwd_inputs)
        dy = np.asarray(grads[0], dtype=xc.dtype)
        dxhat = np.broadcast_to(dy * scale, xc.shape)
        # d/dx (x * r) with r = mean(x^2)^-1/2: r * dxhat - x * r^3 * mean(x * dxhat)
        dx = inv_rms * dxhat - xc * inv_rms ** 3 * np.mean(xc * dxhat, axis=axes, keepdims=True)
        dscale = unbroadcast(dy * xc * inv_rms, scale_in.shape)
        return dx.astype(x.dtype, copy=False), dscale.astype(scale_in.dtype, copy=False)


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

    def __init__(self, interleaved: int = 0, num_heads: int = 0, rotary_embedding_dim: int = 0) -> None:
        super().__init__()
        self.interleaved = bool(interleaved)
        self.num_heads = int(num_heads)
        self.rotary_embedding_dim = int(rotary_embedding_dim)

    def forward(self, inputs):
        return self._rotate(inputs, inputs[0], sign=1.0)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        # A rotation's transpose is the rotation by the opposite angle: negate sin.
        dx = self._rotate(fwd_inputs, grads[0], sign=-1.0)
        return (dx,) + (None,) * (len(fwd_inputs) - 1)

    def _rotate(self, inputs, values, sign: float) -> np.ndarray:
        if len(inputs) < 3 or any(a is None for a in inputs[:3]):
            raise ShapeError("RotaryEmbedding: expected inputs (X, cos_cache, sin_cache[, position_ids])")
        x = np.asarray(values)
        cos, sin = np.asarray(inputs[1]), np.asarray(inputs[2])
        positions = inputs[3] if len(inputs) > 3 else None
        # Work in (batch, seq, heads, head_size).
        if x.ndim == 4:
            heads = x.transpose(0, 2, 1, 3)
        elif x.ndim == 3:
            if self.num_heads <= 0 or x.shape[2] % self.num_heads:
                raise ShapeError(f"RotaryEmbedding: 3-D input {x.shape} needs num_heads dividing its hidden size "
                                 f"{x.shape[2]}, got num_heads={self.num_heads}")
            heads = x.reshape(x.shape[0], x.shape[1], self.num_heads, -1)
        else:
            raise ShapeError(f"RotaryEmbedding: X must be 3-D or 4-D, got shape {x.shape}")
        dim = self.rotary_embedding_dim or heads.shape[3]
        if dim % 2 or dim > heads.shape[3]:
            raise ShapeError(f"RotaryEmbedding: rotary_embedding_dim={dim} must be even and at most the head "
                             f"size {heads.shape[3]}")
        if positions is not None:
            positions = np.asarray(positions)
            if cos.ndim != 2 or sin.shape != cos.shape or positions.shape != heads.shape[:2] \
                    or positions.dtype.kind not in "iu":
                raise ShapeError(f"RotaryEmbedding: with position_ids, the caches must be 2-D (max_position, "
                                 f"rotary_dim / 2) and position_ids integers of shape {heads.shape[:2]} (batch, seq); "
                                 f"got caches {cos.shape} and {sin.shape}, position_ids {positions.dtype} "
                                 f"{positions.shape}")
            if positions.size and (positions.min() < 0 or positions.max() >= cos.shape[0]):
                raise ShapeError(f"RotaryEmbedding: position_ids must lie in [0, {cos.shape[0]}) (the caches' "
                                 f"max_position), got values in [{positions.min()}, {positions.max()}]")
            cos, sin = cos[positions], sin[positions]
        if cos.ndim != 3 or cos.shape != sin.shape or cos.shape[:2] != heads.shape[:2]:
            raise ShapeError(f"RotaryEmbedding: cos/sin caches must be (batch, seq, rotary_dim / 2) = "
                             f"{heads.shape[:2] + (dim // 2,)} without position_ids, got {cos.shape} and {sin.shape}")
        if cos.shape[-1] != dim // 2 or sin.shape[-1] != dim // 2:
            raise ShapeError(f"RotaryEmbedding: cos/sin caches must end in rotary_embedding_dim / 2 = {dim // 2}, "
                             f"got {cos.shape} and {sin.shape}")
        dtype = _compute_dtype(x, cos)
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


def _sigmoid(x: np.ndarray, alpha: float) -> np.ndarray:
    return scipy.special.expit(alpha * x)


@register("Swish")
class Swish(ReferenceOp):
    """``X * sigmoid(alpha * X)`` (SiLU for ``alpha=1``).

    >>> import numpy as np
    >>> Swish().forward([np.array([0.0, 1.0])]).round(4).tolist()
    [0.0, 0.7311]
    """

    def __init__(self, alpha: float = 1.0) -> None:
        super().__init__()
        self.alpha = float(alpha)

    def forward(self, inputs):
        x = np.asarray(inputs[0])
        xc = x.astype(_compute_dtype(x), copy=False)
        return (xc * _sigmoid(xc, self.alpha)).astype(x.dtype, copy=False)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        x = np.asarray(fwd_inputs[0])
        xc = x.astype(_compute_dtype(x), copy=False)
        s = _sigmoid(xc, self.alpha)
        return (np.asarray(grads[0]) * (s + self.alpha * xc * s * (1 - s))).astype(x.dtype, copy=False)


@register("SwiGLU")
class SwiGLU(ReferenceOp):
    """``Swish_alpha(A) * B`` for A and B of one shape (no broadcasting).

    >>> import numpy as np
    >>> SwiGLU().forward([np.array([1.0]), np.array([2.0])]).round(4).tolist()
    [1.4621]
    """

    def __init__(self, alpha: float = 1.0) -> None:
        super().__init__()
        self.alpha = float(alpha)

    def _prepare(self, inputs):
        if len(inputs) != 2 or inputs[0] is None or inputs[1] is None:
            raise ShapeError(f"SwiGLU: expected inputs (A, B), got {len(inputs)}")
        a, b = np.asarray(inputs[0]), np.asarray(inputs[1])
        if a.shape != b.shape:
            raise ShapeError(f"SwiGLU: A and B must have the same shape (no broadcasting), got {a.shape} and "
                             f"{b.shape}; split the projection evenly or Expand first")
        dtype = _compute_dtype(a, b)
        return a, b, a.astype(dtype, copy=False), b.astype(dtype, copy=False)

    def forward(self, inputs):
        a, _, ac, bc = self._prepare(inputs)
        return (ac * _sigmoid(ac, self.alpha) * bc).astype(a.dtype, copy=False)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        a, b, ac, bc = self._prepare(fwd_inputs)
        g = np.asarray(grads[0], dtype=ac.dtype)
        s = _sigmoid(ac, self.alpha)
        da = g * bc * (s + self.alpha * ac * s * (1 - s))
        return da.astype(a.dtype, copy=False), (g * ac * s).astype(b.dtype, copy=False)


__all__ = ["RMSNormalization", "RotaryEmbedding", "SwiGLU", "Swish"]
