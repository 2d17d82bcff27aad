"""Reference LayerNormalization and InstanceNormalization (ONNX semantics), forward and backward in NumPy.

>>> import numpy as np
>>> y, mean, inv_std = LayerNormalization(epsilon=0.0).forward([np.array([[1.0, 3.0]]), np.ones(2), np.zeros(2)])
>>> y.tolist(), mean.tolist(), inv_std.tolist()
([[-1.0, 1.0]], [[2.0]], [[1.0]])
"""
from __future__ import annotations

import numpy as np

from d5.errors import ShapeError
from d5.frameworks.reference.kernels import compute_dtype
from d5.frameworks.reference.operators.checks import require_broadcastable
from d5.frameworks.reference.operators.registry import ReferenceOp, register

# ONNX TensorProto data types allowed as LayerNormalization's stash_type.
_STASH_TYPES = {1: np.float32, 11: np.float64, 10: np.float16, 16: np.float32}  # bfloat16 -> float32


def _normalize(x: np.ndarray, axes: tuple[int, ...], epsilon: float):
    mean = x.mean(axis=axes, keepdims=True)
    centered = x - mean
    inv_std = 1.0 / np.sqrt((centered * centered).mean(axis=axes, keepdims=True) + epsilon)
    return centered * inv_std, mean, inv_std


def _normalize_backward(dxhat: np.ndarray, xhat: np.ndarray, inv_std: np.ndarray, axes: tuple[int, ...]):
    # d/dx of (x - mean) * inv_std for the biased variance: the classic three-term formula.
    return inv_std * (dxhat - dxhat.mean(axis=axes, keepdims=True)
                      - xhat * (dxhat * xhat).mean(axis=axes, keepdims=True))


@register("LayerNormalization")
class LayerNormalization(ReferenceOp):
    """``Y = (X - mean) / sqrt(var + epsilon) * Scale + B`` over the axes ``axis..rank-1``.

    Outputs ``Y`` (X's dtype), ``Mean`` and ``InvStdDev`` (shape of X with the normalized axes set to 1; dtype
    ``stash_type``, float32 by default). The statistics are computed in float64 for float64 inputs (so that
    float64 gradient checks are exact) and in float32 otherwise. ``backward`` returns gradients for X,
    Scale and B, including the contribution of gradients flowing into Mean and InvStdDev.

    >>> import numpy as np
    >>> x = np.arange(6, dtype=np.float32).reshape(2, 3)
    >>> y, mean, inv_std = LayerNormalization().forward([x, np.ones(3, np.float32)])
    >>> y.dtype, mean.ravel().tolist()
    (dtype('float32'), [1.0, 4.0])
    """

    def __init__(self, axis: int = -1, epsilon: float = 1e-5, stash_type: int = 1) -> None:
        super().__init__()
        self.axis = int(axis)
        self.epsilon = float(epsilon)
        if int(stash_type) not in _STASH_TYPES:
            raise ShapeError(f"LayerNormalization: stash_type must be a float TensorProto type (1 = float32, "
                             f"11 = float64, ...), got {stash_type}")
        self.stash_dtype = np.dtype(_STASH_TYPES[int(stash_type)])

    def _prepare(self, inputs):
        if len(inputs) not in (2, 3) or inputs[0] is None or inputs[1] is None:
            raise ShapeError(f"LayerNormalization: expected inputs (X, Scale) or (X, Scale, B), got {len(inputs)}")
        x = np.asarray(inputs[0])
        if not -x.ndim <= self.axis < x.ndim:
            raise ShapeError(f"LayerNormalization: axis={self.axis} is out of range for X of rank {x.ndim}")
        axis = self.axis % x.ndim
        axes = tuple(range(axis, x.ndim))
        arrays = [np.asarray(a) for a in inputs if a is not None]
        for array, what in zip(arrays[1:], ("Scale", "B")):
            require_broadcastable("LayerNormalization", array, what, x.shape)
        dtype = compute_dtype("LayerNormalization", *arrays)
        if self.stash_dtype == np.float64:
            dtype = np.dtype(np.float64)
        return x, axes, dtype

    def forward(self, inputs):
        x, axes, dtype = self._prepare(inputs)
        xhat, mean, inv_std = _normalize(x.astype(dtype, copy=False), axes, self.epsilon)
        y = xhat * np.asarray(inputs[1], dtype=dtype)
        if len(inputs) > 2 and inputs[2] is not None:
            y = y + np.asarray(inputs[2], dtype=dtype)
        stash = np.float64 if dtype == np.float64 else self.stash_dtype
        return y.astype(x.dtype, copy=False), mean.astype(stash, copy=False), inv_std.astype(stash, copy=False)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        x, axes, dtype = self._prepare(fwd_inputs)
        xc = x.astype(dtype, copy=False)
        xhat, mean, inv_std = _normalize(xc, axes, self.epsilon)
        scale = np.asarray(fwd_inputs[1], dtype=dtype)
        dy = np.asarray(grads[0], dtype=dtype)
        lead = tuple(range(x.ndim - len(axes)))  # the batch-like axes Scale and B are shared over
        dx = _normalize_backward(dy * scale, xhat, inv_std, axes)
        count = int(np.prod([x.shape[a] for a in axes]))
        if len(grads) > 1 and grads[1] is not None and np.any(grads[1]):
            dx = dx + np.asarray(grads[1], dtype=dtype) / count
        if len(grads) > 2 and grads[2] is not None and np.any(grads[2]):
            # d inv_std / dx = -inv_std^3 (x - mean) / count
            dx = dx - np.asarray(grads[2], dtype=dtype) * inv_std ** 3 * (xc - mean) / count
        result = [dx.astype(x.dtype, copy=False), _unbroadcast_to((dy * xhat).sum(axis=lead), fwd_inputs[1])]
        if len(fwd_inputs) > 2:
            b = fwd_inputs[2]
            result.append(None if b is None else _unbroadcast_to(dy.sum(axis=lead), b))
        return tuple(result)


def _unbroadcast_to(grad: np.ndarray, like) -> np.ndarray:
    # Scale and B may be given with fewer (or size-1) dimensions than the normalized block: sum back.
    like = np.asarray(like)
    extra = grad.ndim - like.ndim
    if extra > 0:
        grad = grad.sum(axis=tuple(range(extra)))
    axes = tuple(i for i, n in enumerate(like.shape) if n == 1 and grad.shape[i] != 1)
    if axes:
        grad = grad.sum(axis=axes, keepdims=True)
    return grad.reshape(like.shape).astype(like.dtype, copy=False)


@register("InstanceNormalization")
class InstanceNormalization(ReferenceOp):
    """``Y = scale * (X - mean) / sqrt(var + epsilon) + B`` with statistics per image and channel of (N, C, ...).

    >>> import numpy as np
    >>> x = np.array([[[1.0, 3.0]]])
    >>> InstanceNormalization(epsilon=0.0).forward([x, np.ones(1), np.zeros(1)]).tolist()
    [[[-1.0, 1.0]]]
    """

    def __init__(self, epsilon: float = 1e-5) -> None:
        super().__init__()
        self.epsilon = float(epsilon)

    def _prepare(self, inputs):
        if len(inputs) != 3 or any(a is None for a in inputs):
            raise ShapeError(f"InstanceNormalization: expected inputs (X, scale, B), got {len(inputs)}")
        x, scale, bias = (np.asarray(a) for a in inputs)
        if x.ndim < 3 or scale.shape != (x.shape[1],) or bias.shape != (x.shape[1],):
            raise ShapeError(f"InstanceNormalization: X must be (N, C, D1, ...) and scale, B of shape (C,); got X "
                             f"{x.shape}, scale {scale.shape}, B {bias.shape}")
        dtype = compute_dtype("InstanceNormalization", x, scale, bias)
        shape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
        return (x.astype(dtype, copy=False), scale.astype(dtype).reshape(shape), bias.astype(dtype).reshape(shape),
                tuple(range(2, x.ndim)))

    def forward(self, inputs):
        x, scale, bias, axes = self._prepare(inputs)
        xhat, _, _ = _normalize(x, axes, self.epsilon)
        return (xhat * scale + bias).astype(np.asarray(inputs[0]).dtype, copy=False)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        x, scale, bias, axes = self._prepare(fwd_inputs)
        xhat, _, inv_std = _normalize(x, axes, self.epsilon)
        dy = np.asarray(grads[0], dtype=x.dtype)
        dx = _normalize_backward(dy * scale, xhat, inv_std, axes)
        reduce = (0,) + axes
        dtypes = [np.asarray(a).dtype for a in fwd_inputs]
        return (dx.astype(dtypes[0], copy=False), (dy * xhat).sum(axis=reduce).astype(dtypes[1], copy=False),
                dy.sum(axis=reduce).astype(dtypes[2], copy=False))


__all__ = ["InstanceNormalization", "LayerNormalization"]
