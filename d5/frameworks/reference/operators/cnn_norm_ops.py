"""Reference LRN, GroupNormalization, MeanVarianceNormalization and MaxUnpool (ONNX semantics), forward and
backward in NumPy. GroupNormalization and MeanVarianceNormalization reuse LayerNormalization's helpers.

>>> import numpy as np
>>> x = np.array([[[1.0, 3.0], [5.0, 7.0]]])             # (N=1, C=2, 2)
>>> GroupNormalization(num_groups=1, epsilon=0.0).forward([x, np.ones(2), np.zeros(2)]).ravel().tolist()
[-1.3416407864998738, -0.4472135954999579, 0.4472135954999579, 1.3416407864998738]
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from d5.errors import ShapeError
from d5.frameworks.reference.kernels import compute_dtype
from d5.frameworks.reference.operators.image_ops import _optional_array
from d5.frameworks.reference.operators.layer_norm import _STASH_TYPES, _normalize, _normalize_backward
from d5.frameworks.reference.operators.registry import ReferenceOp, register
from d5.ops.onnx_semantics import check_window_attributes


def _channel_window_sum(a: np.ndarray, before: int, after: int) -> np.ndarray:
    """``out[:, c] = sum(a[:, c - before : c + after + 1])`` along axis 1, the window clipped to the channels.
    A window reaching past every channel sums them all: it costs at most ``2 * C - 1`` shifts, whatever its
    size (a size of 2**28 used to loop 2**28 times)."""
    out = np.zeros_like(a)
    channels = a.shape[1]
    before, after = min(before, channels - 1), min(after, channels - 1)
    for shift in range(-before, after + 1):
        lo, hi = max(0, -shift), min(channels, channels - shift)
        if lo < hi:
            out[:, lo:hi] += a[:, lo + shift:hi + shift]
    return out


# ---------------------------------------------------------------------------------------------------- LRN

@register("LRN")
class LRN(ReferenceOp):
    """Local response normalization across channels of (N, C, D1, ...):
    ``Y[c] = X[c] / (bias + alpha / size * sum(X[c']^2))^beta`` with ``c'`` in
    ``[c - (size - 1) / 2, c + (size - 1) / 2]`` (clipped to the channels), as PyTorch's ``local_response_norm``.

    ``size`` must be odd. ONNX's formula also defines even sizes (the extra channel after ``c``), but
    onnxruntime refuses them and PyTorch puts the extra channel before ``c``: a model with one has no
    portable answer, so d5 refuses it too. ``alpha``, ``beta`` and ``bias`` must be finite; zero or negative
    values are kept (the formula is defined for them; onnxruntime alone refuses ``alpha, beta <= 0``).

    >>> import numpy as np
    >>> x = np.array([[[1.0], [2.0]]])
    >>> LRN(size=1, alpha=1.0, beta=1.0, bias=0.0).forward([x]).ravel().tolist()
    [1.0, 0.5]
    """

    def __init__(self, size: int | None = None, alpha: float = 1e-4, beta: float = 0.75, bias: float = 1.0) -> None:
        super().__init__()
        if size is None or int(size) < 1 or int(size) % 2 == 0:
            raise ShapeError(f"LRN: the size attribute is required and must be odd and >= 1 (e.g. size=5), got "
                             f"{size}; an even window has no centre (onnxruntime refuses it, PyTorch and ONNX's "
                             f"formula centre it differently): use size - 1 or size + 1")
        self.size = int(size)
        self.alpha, self.beta, self.bias = float(alpha), float(beta), float(bias)
        for name, value in (("alpha", self.alpha), ("beta", self.beta), ("bias", self.bias)):
            if not np.isfinite(value):
                raise ShapeError(f"LRN: attribute {name!r} must be a finite number, got {value}")
        self.half = (self.size - 1) // 2  # channels on each side of c in the window

    def _prepare(self, inputs):
        if len(inputs) != 1 or inputs[0] is None:
            raise ShapeError(f"LRN: expected exactly one input X, got {len(inputs)}")
        x = np.asarray(inputs[0])
        if x.ndim < 2:
            raise ShapeError(f"LRN: X must be (N, C, ...), got shape {x.shape}")
        x = x.astype(compute_dtype("LRN", x), copy=False)
        denominator = self.bias + (self.alpha / self.size) * _channel_window_sum(x * x, self.half, self.half)
        return x, denominator

    def forward(self, inputs):
        x, denominator = self._prepare(inputs)
        return (x * denominator ** -self.beta).astype(np.asarray(inputs[0]).dtype, copy=False)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        x, denominator = self._prepare(fwd_inputs)
        dy = np.asarray(grads[0], dtype=x.dtype)
        scaled = denominator ** -self.beta
        # Channel c' feeds the denominators of the channels c whose window holds c' (the window is symmetric).
        through_denominator = _channel_window_sum(dy * x * scaled / denominator, self.half, self.half)
        dx = dy * scaled - (2.0 * self.beta * self.alpha / self.size) * x * through_denominator
        return dx.astype(np.asarray(fwd_inputs[0]).dtype, copy=False)


# ------------------------------------------------------------------------------------- GroupNormalization

@register("GroupNormalization")
class GroupNormalization(ReferenceOp):
    """``Y = scale * (X - mean) / sqrt(var + epsilon) + bias`` with statistics per instance and group of
    ``C / num_groups`` consecutive channels of X (N, C, D1, ...).

    ``scale`` and ``bias`` are per channel, shape (C,), since opset 21, and were per group, shape
    (num_groups,), in opset 18. The operator is built from attributes alone, so it tells the two apart by
    their shape (the same rule onnxruntime uses); when ``num_groups == C`` both readings agree. Statistics are
    computed in float32 (``stash_type=1``, the default) or float64 (``stash_type=11``, or any float64 input, as
    in LayerNormalization), and Y has X's dtype. ``backward`` returns gradients for X, scale and bias.

    >>> import numpy as np
    >>> x = np.arange(8.0).reshape(1, 4, 2)
    >>> y = GroupNormalization(num_groups=2).forward([x, np.ones(2), np.zeros(2)])   # opset-18 per-group form
    >>> np.round(y[0, :, 0], 3).tolist()
    [-1.342, 0.447, -1.342, 0.447]
    """

    def __init__(self, num_groups: int | None = None, epsilon: float = 1e-5, stash_type: int = 1) -> None:
        super().__init__()
        if num_groups is None or int(num_groups) < 1:
            raise ShapeError(f"GroupNormalization: the num_groups attribute is required and must be >= 1, "
                             f"got {num_groups}")
        self.num_groups, self.epsilon = int(num_groups), float(epsilon)
        if int(stash_type) not in _STASH_TYPES:
            raise ShapeError(f"GroupNormalization: stash_type must be a float TensorProto type (1 = float32, "
                             f"11 = float64, ...), got {stash_type}")
        self.stash_dtype = np.dtype(_STASH_TYPES[int(stash_type)])

    def _prepare(self, inputs):
        if len(inputs) != 3 or any(a is None for a in inputs):
            raise ShapeError(f"GroupNormalization: expected inputs (X, scale, bias), got {len(inputs)}")
        x, scale, bias = (np.asarray(a) for a in inputs)
        if x.ndim < 2 or x.shape[1] % self.num_groups:
            raise ShapeError(f"GroupNormalization: X must be (N, C, ...) with C divisible by num_groups="
                             f"{self.num_groups}, got shape {x.shape}")
        channels = x.shape[1]
        if scale.shape != bias.shape or scale.shape not in ((channels,), (self.num_groups,)):
            raise ShapeError(f"GroupNormalization: scale and bias must both have shape ({channels},) (per channel, "
                             f"opset 21) or ({self.num_groups},) (per group, opset 18); got {scale.shape} and "
                             f"{bias.shape}")
        dtype = compute_dtype("GroupNormalization", x, scale, bias)
        if self.stash_dtype == np.float64:
            dtype = np.dtype(np.float64)
        per_channel = channels // self.num_groups
        shape = (1, channels) + (1,) * (x.ndim - 2)
        scale, bias = (np.repeat(a.astype(dtype), per_channel if a.shape[0] != channels else 1).reshape(shape)
                       for a in (scale, bias))
        grouped = x.astype(dtype, copy=False).reshape(x.shape[0], self.num_groups, -1)
        return grouped, scale, bias

    def forward(self, inputs):
        grouped, scale, bias = self._prepare(inputs)
        x = np.asarray(inputs[0])
        xhat = _normalize(grouped, (2,), self.epsilon)[0].reshape(x.shape)
        return (xhat * scale + bias).astype(x.dtype, copy=False)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        grouped, scale, _ = self._prepare(fwd_inputs)
        shape = np.shape(fwd_inputs[0])
        xhat, _, inv_std = _normalize(grouped, (2,), self.epsilon)
        dy = np.asarray(grads[0], dtype=grouped.dtype).reshape(shape)
        dx = _normalize_backward((dy * scale).reshape(grouped.shape), xhat, inv_std, (2,)).reshape(shape)
        reduce = (0,) + tuple(range(2, len(shape)))
        dscale, dbias = (dy * xhat.reshape(shape)).sum(axis=reduce), dy.sum(axis=reduce)
        result = [dx]
        for grad, like in ((dscale, fwd_inputs[1]), (dbias, fwd_inputs[2])):
            like = np.asarray(like)
            if like.shape[0] != shape[1]:  # per-group parameters: sum their channels
                grad = grad.reshape(self.num_groups, -1).sum(axis=1)
            result.append(grad)
        dtypes = [np.asarray(a).dtype for a in fwd_inputs]
        return tuple(g.astype(t, copy=False) for g, t in zip(result, dtypes))


# ------------------------------------------------------------------------------ MeanVarianceNormalization

@register("MeanVarianceNormalization")
class MeanVarianceNormalization(ReferenceOp):
    """``Y = (X - mean) / (std + 1e-9)`` with the mean and (biased) standard deviation over ``axes``
    (default ``[0, 2, 3]``: per channel of an NCHW batch), exactly ONNX's function body: the epsilon is added to
    the standard deviation, so a constant slice normalizes to 0. ``backward`` treats ``1 / (std + 1e-9)`` as
    LayerNormalization's ``inv_std`` (exact up to a relative 1e-9 / std).

    >>> import numpy as np
    >>> np.round(MeanVarianceNormalization(axes=[1]).forward([np.array([[1.0, 3.0], [2.0, 2.0]])]), 6).tolist()
    [[-1.0, 1.0], [0.0, 0.0]]
    """

    EPSILON = 1e-9

    def __init__(self, axes: Sequence[int] = (0, 2, 3)) -> None:
        super().__init__()
        self.axes = tuple(int(a) for a in axes)

    def _prepare(self, inputs):
        if len(inputs) != 1 or inputs[0] is None:
            raise ShapeError(f"MeanVarianceNormalization: expected exactly one input X, got {len(inputs)}")
        x = np.asarray(inputs[0])
        if any(not -x.ndim <= a < x.ndim for a in self.axes) or not self.axes:
            raise ShapeError(f"MeanVarianceNormalization: axes {list(self.axes)} must be non-empty and lie in "
                             f"[{-x.ndim}, {x.ndim}) for X of shape {x.shape}; set the axes attribute to match X")
        axes = tuple(sorted({a % x.ndim for a in self.axes}))
        x = x.astype(compute_dtype("MeanVarianceNormalization", x), copy=False)
        centered = x - x.mean(axis=axes, keepdims=True)
        inv_std = 1.0 / (np.sqrt((centered * centered).mean(axis=axes, keepdims=True)) + self.EPSILON)
        return centered * inv_std, inv_std, axes

    def forward(self, inputs):
        return self._prepare(inputs)[0].astype(np.asarray(inputs[0]).dtype, copy=False)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        y, inv_std, axes = self._prepare(fwd_inputs)
        dx = _normalize_backward(np.asarray(grads[0], dtype=y.dtype), y, inv_std, axes)
        return dx.astype(np.asarray(fwd_inputs[0]).dtype, copy=False)


# ------------------------------------------------------------------------------------------------ MaxUnpool

@register("MaxUnpool")
class MaxUnpool(ReferenceOp):
    """Scatter X (N, C, D1, ...) into zeros at the flat indices ``I`` (int64, X's shape, as MaxPool's second
    output) of the unpooled tensor, whose spatial size is ``(in - 1) * stride - pad_begin - pad_end + kernel``.

    With the optional ``output_shape`` input (at least that size), the unpooled tensor is placed in its leading
    corner and the rest is zero: the ONNX reference and backend tests' reading, in which ``I`` indexes the
    inferred shape. (onnxruntime and PyTorch index ``output_shape`` instead; the two agree when
    ``output_shape`` equals the inferred shape.) When an index repeats, the last X element wins. ``backward``
    gathers the gradient for X from the written positions (``None`` for I and output_shape).

    >>> import numpy as np
    >>> op = MaxUnpool(kernel_shape=[2], strides=[2])
    >>> op.forward([np.array([[[5.0, 7.0]]]), np.array([[[1, 2]]])]).tolist()
    [[[0.0, 5.0, 7.0, 0.0]]]
    """

    def __init__(self, kernel_shape: Sequence[int] | None = None, pads: Sequence[int] | None = None,
                 strides: Sequence[int] | None = None) -> None:
        super().__init__()
        if not kernel_shape:
            raise ShapeError("MaxUnpool: the kernel_shape attribute is required (e.g. kernel_shape=[2, 2])")
        self.kernel_shape = tuple(int(k) for k in kernel_shape)
        rank = len(self.kernel_shape)
        self.pads = tuple(int(p) for p in pads) if pads else (0,) * (2 * rank)
        self.strides = tuple(int(s) for s in strides) if strides else (1,) * rank
        check_window_attributes("MaxUnpool", kernel_shape=self.kernel_shape, strides=self.strides, pads=self.pads)
        if len(self.pads) != 2 * rank or len(self.strides) != rank:
            raise ShapeError(f"MaxUnpool: kernel_shape {list(self.kernel_shape)} needs {2 * rank} pads and {rank} "
                             f"strides, got pads {list(self.pads)} and strides {list(self.strides)}")

    def _layout(self, inputs):
        """(X, flat indices of the last write per position, inferred shape, output shape)."""
        if len(inputs) not in (2, 3) or inputs[0] is None or inputs[1] is None:
            raise ShapeError(f"MaxUnpool: expected inputs (X, I) or (X, I, output_shape), got {len(inputs)}")
        x, indices = np.asarray(inputs[0]), np.asarray(inputs[1])
        rank = len(self.kernel_shape)
        if x.ndim != rank + 2 or indices.shape != x.shape:
            raise ShapeError(f"MaxUnpool: X must be (N, C) plus {rank} spatial axes (kernel_shape "
                             f"{list(self.kernel_shape)}) and I of X's shape; got X {x.shape}, I {indices.shape}")
        if not np.issubdtype(indices.dtype, np.integer):
            raise ShapeError(f"MaxUnpool: I must hold integer (int64) indices, got dtype {indices.dtype}")
        inferred = x.shape[:2] + tuple(
            (n - 1) * s - self.pads[i] - self.pads[i + rank] + k
            for i, (n, s, k) in enumerate(zip(x.shape[2:], self.strides, self.kernel_shape)))
        if min(inferred[2:], default=1) < 1:
            raise ShapeError(f"MaxUnpool: the unpooled shape {inferred} is empty; check kernel_shape, strides, pads")
        shape = inferred
        requested = _optional_array(inputs, 2)
        if requested is not None:
            shape = tuple(int(v) for v in requested.reshape(-1))
            if len(shape) != x.ndim or shape[:2] != x.shape[:2] or any(o < i for o, i in zip(shape, inferred)):
                raise ShapeError(f"MaxUnpool: output_shape {list(shape)} must have X's rank, N and C, and be at "
                                 f"least the unpooled shape {list(inferred)} on every axis")
        flat = indices.reshape(-1).astype(np.int64)
        total = int(np.prod(inferred))
        if flat.size and (flat.min() < 0 or flat.max() >= total):
            raise ShapeError(f"MaxUnpool: indices must lie in [0, {total}) (flat positions in the unpooled shape "
                             f"{list(inferred)}), got values in [{flat.min()}, {flat.max()}]")
        last = flat.size - 1 - np.unique(flat[::-1], return_index=True)[1]  # the last writer of each position
        return x, last, flat[last], inferred, shape

    def forward(self, inputs):
        x, winners, positions, inferred, shape = self._layout(inputs)
        unpooled = np.zeros(int(np.prod(inferred)), dtype=x.dtype)
        unpooled[positions] = x.reshape(-1)[winners]
        out = np.zeros(shape, dtype=x.dtype)
        out[tuple(slice(0, n) for n in inferred)] = unpooled.reshape(inferred)
        return out

    def backward(self, grads, fwd_inputs, fwd_outputs):
        x, winners, positions, inferred, _ = self._layout(fwd_inputs)
        dy = np.asarray(grads[0])[tuple(slice(0, n) for n in inferred)].reshape(-1)
        dx = np.zeros(x.size, dtype=np.result_type(dy.dtype, x.dtype))
        dx[winners] = dy[positions]
        return (dx.reshape(x.shape).astype(x.dtype, copy=False), None) + (None,) * (len(fwd_inputs) - 2)


__all__ = ["GroupNormalization", "LRN", "MaxUnpool", "MeanVarianceNormalization"]
