"""Reference normalizations (ONNX semantics): BatchNormalization (per-channel loops in C++, d5._C),
InstanceNormalization, LayerNormalization, GroupNormalization, RMSNormalization, LRN, LpNormalization and
MeanVarianceNormalization (NumPy), forward and backward.

InstanceNormalization, GroupNormalization and MeanVarianceNormalization reuse LayerNormalization's helpers
(:func:`_normalize`, :func:`_normalize_backward`). Dropout is with the activations.

>>> import numpy as np
>>> x = np.array([[[1.0]], [[3.0]]])                    # (N=2, C=1, 1)
>>> ones, zeros = np.ones(1), np.zeros(1)
>>> op = BatchNormalization(epsilon=0.0, momentum=0.5)
>>> op.training = True
>>> y, running_mean, running_var = op.forward([x, ones, zeros, zeros, ones])
>>> y.ravel().tolist(), running_mean.tolist(), running_var.tolist()
([-1.0, 1.0], [1.0], [1.0])
>>> sorted(op.state_updates())
[3, 4]
>>> y, mean, inv_std = LayerNormalization(epsilon=0.0).forward([np.array([[1.0, 3.0]]), np.ones(2), np.zeros(2)])
>>> y.tolist(), mean.tolist(), inv_std.tolist()
([[-1.0, 1.0]], [[2.0]], [[1.0]])
"""
from __future__ import annotations

import numpy as np

from d5.errors import ShapeError
from d5.frameworks.reference.kernels import as_kernel_array, compute_dtype, load_native
from d5.frameworks.reference.operators import ReferenceOp, register
from d5.frameworks.reference.operators._checks import float_compute_dtype, require_broadcastable
from d5.frameworks.reference.operators.elementwise import unbroadcast
from d5.ops.onnx_attributes import adopt, operator_attributes
from d5.ops.onnx_semantics import normalize_axis
from d5.ops.window_checks import (STASH_DTYPE_NAMES, STASH_FLOAT64, check_batch_norm, check_group_norm,
                                  check_group_norm18, check_instance_norm, mvn_axes, normalized_axis, require_channels)


_INPUT_NAMES = ("X", "scale", "B", "input_mean", "input_var")


@register("BatchNormalization")
class BatchNormalization(ReferenceOp):
    """ONNX BatchNormalization over (N, C, ...) inputs.

    With batch statistics (``self.training`` set by the executor, or ``training_mode=1``): normalize by
    the batch mean and biased variance over every axis but C, return ``(Y, running_mean, running_var)``
    with ``running = momentum * input + (1 - momentum) * batch``, and offer the same running statistics
    as :meth:`state_updates` ``{3: mean, 4: var}`` so the executor writes them back. Otherwise normalize by
    ``input_mean``/``input_var`` and return ``Y`` only. ``backward`` returns gradients for X, scale and B
    (``None`` for the statistics inputs, which are not trained by gradient).

    >>> import numpy as np
    >>> x = np.zeros((2, 3, 4, 4), np.float32)
    >>> c = np.ones(3, np.float32)
    >>> BatchNormalization().forward([x, c, c, c * 0, c]).dtype
    dtype('float32')
    """

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("BatchNormalization", attributes))
        self._state: dict[int, np.ndarray] = {}
        # Statistics of the last batch-statistics forward, reused by backward for that same input array.
        self._saved: tuple | None = None

    @property
    def uses_batch_statistics(self) -> bool:
        """True when forward normalizes by the batch's own statistics."""
        return self.training or self.training_mode

    def forward(self, inputs):
        x, scale, bias, mean, var, shape = self._prepare(inputs)
        out_dtype = np.asarray(inputs[0]).dtype
        native = load_native()
        if not self.uses_batch_statistics:
            self._state = {}
            y = native.batch_norm_forward_inference(x, scale, bias, mean, var, self.epsilon)
            return y.reshape(shape).astype(out_dtype, copy=False)
        y, batch_mean, batch_var, invstd = native.batch_norm_forward_training(x, scale, bias, self.epsilon)
        self._saved = (inputs[0], batch_mean, invstd)
        stats_dtype = np.asarray(inputs[3]).dtype
        running_mean = (self.momentum * mean + (1.0 - self.momentum) * batch_mean).astype(stats_dtype, copy=False)
        running_var = (self.momentum * var + (1.0 - self.momentum) * batch_var).astype(stats_dtype, copy=False)
        self._state = {3: running_mean, 4: running_var}
        return y.reshape(shape).astype(out_dtype, copy=False), running_mean, running_var

    def backward(self, grads, fwd_inputs, fwd_outputs):
        x, scale, bias, mean, var, shape = self._prepare(fwd_inputs)
        native = load_native()
        dy = as_kernel_array(grads[0], x.dtype).reshape(x.shape)
        if not self.uses_batch_statistics:
            dx, dscale, dbias = native.batch_norm_backward_inference(dy, x, scale, mean, var, self.epsilon)
        else:
            if self._saved is not None and self._saved[0] is fwd_inputs[0]:
                batch_mean, invstd = self._saved[1], self._saved[2]
            else:  # backward of another input than the last forward: recompute its statistics
                _, batch_mean, _, invstd = native.batch_norm_forward_training(x, scale, bias, self.epsilon)
            dx, dscale, dbias = native.batch_norm_backward_training(dy, x, scale, batch_mean, invstd)
            dx = self._add_running_stat_grads(dx, grads, x, batch_mean)
        dtypes = [np.asarray(a).dtype for a in fwd_inputs[:3]]
        return (dx.reshape(shape).astype(dtypes[0], copy=False), dscale.astype(dtypes[1], copy=False),
                dbias.astype(dtypes[2], copy=False), None, None)

    def state_updates(self) -> dict[int, np.ndarray]:
        """``{3: new running mean, 4: new running var}`` after a batch-statistics forward, else ``{}``."""
        return dict(self._state)

    # -- helpers ----------------------------------------------------------------------------------------

    def _add_running_stat_grads(self, dx, grads, x, batch_mean):
        # The running-statistics outputs depend on X through the batch mean and variance; when a graph
        # consumes them, their gradients flow into dX too (d mean/dx = 1/M, d var/dx = 2 (x - mean) / M).
        count = x.shape[0] * x.shape[2]
        weight = (1.0 - self.momentum) / count
        for index in (1, 2):
            if len(grads) <= index or grads[index] is None:
                continue
            g = np.asarray(grads[index], dtype=x.dtype).reshape(1, -1, 1)
            if not g.any():
                continue
            dx = dx + weight * g if index == 1 else dx + 2.0 * weight * g * (x - batch_mean.reshape(1, -1, 1))
        return dx

    def _prepare(self, inputs):
        """Inputs as contiguous arrays of one compute dtype, X viewed as (N, C, S), plus X's shape."""
        if len(inputs) != 5 or any(a is None for a in inputs):
            raise ShapeError(f"BatchNormalization: expected 5 inputs ({', '.join(_INPUT_NAMES)}), got "
                             f"{len(inputs)}{' with some missing' if len(inputs) == 5 else ''}")
        arrays = [np.asarray(a) for a in inputs]
        x = arrays[0]
        check_batch_norm(x.shape, [array.shape for array in arrays[1:]], require_data=True)
        channels = x.shape[1]
        dtype = compute_dtype("BatchNormalization", *arrays)
        x3 = as_kernel_array(x, dtype).reshape(x.shape[0], channels, -1)
        return (x3, *(as_kernel_array(a, dtype) for a in arrays[1:]), x.shape)


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

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("LayerNormalization", attributes))
        self.stash_dtype = np.dtype(STASH_DTYPE_NAMES[self.stash_type])

    def _prepare(self, inputs):
        if len(inputs) not in (2, 3) or inputs[0] is None or inputs[1] is None:
            raise ShapeError(f"LayerNormalization: expected inputs (X, Scale) or (X, Scale, B), got {len(inputs)}")
        x = np.asarray(inputs[0])
        axes = tuple(range(normalized_axis("LayerNormalization", self.axis, x.ndim), x.ndim))
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
    return unbroadcast(grad, like.shape).astype(like.dtype, copy=False)


@register("InstanceNormalization")
class InstanceNormalization(ReferenceOp):
    """``Y = scale * (X - mean) / sqrt(var + epsilon) + B`` with statistics per image and channel of (N, C, ...).

    >>> import numpy as np
    >>> x = np.array([[[1.0, 3.0]]])
    >>> InstanceNormalization(epsilon=0.0).forward([x, np.ones(1), np.zeros(1)]).tolist()
    [[[-1.0, 1.0]]]
    """

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("InstanceNormalization", attributes))

    def _prepare(self, inputs):
        if len(inputs) != 3 or any(a is None for a in inputs):
            raise ShapeError(f"InstanceNormalization: expected inputs (X, scale, B), got {len(inputs)}")
        x, scale, bias = (np.asarray(a) for a in inputs)
        check_instance_norm(x.shape, scale.shape, bias.shape)
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

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("LRN", attributes))
        self.half = (self.size - 1) // 2  # channels on each side of c in the window

    def _prepare(self, inputs):
        if len(inputs) != 1 or inputs[0] is None:
            raise ShapeError(f"LRN: expected exactly one input X, got {len(inputs)}")
        x = np.asarray(inputs[0])
        require_channels("LRN", x.shape)
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

@register("GroupNormalization", since=21)  # opsets 18-20: GroupNormalization18
class GroupNormalization(ReferenceOp):
    """``Y = scale * (X - mean) / sqrt(var + epsilon) + bias`` with statistics per instance and group of
    ``C / num_groups`` consecutive channels of X (N, C, D1, ...).

    ``scale`` and ``bias`` are per channel, shape (C,), since opset 21, and were per group, shape
    (num_groups,), in opset 18 (:class:`GroupNormalization18`, which refuses the per-channel form). This
    newest version tells the two apart by their shape, so it also takes per-group parameters; when
    ``num_groups == C`` both readings agree. Statistics are
    computed in float32 (``stash_type=1``, the default) or float64 (``stash_type=11``, or any float64 input, as
    in LayerNormalization), and Y has X's dtype. ``backward`` returns gradients for X, scale and bias.

    >>> import numpy as np
    >>> x = np.arange(8.0).reshape(1, 4, 2)
    >>> y = GroupNormalization(num_groups=2).forward([x, np.ones(2), np.zeros(2)])   # opset-18 per-group form
    >>> np.round(y[0, :, 0], 3).tolist()
    [-1.342, 0.447, -1.342, 0.447]
    """

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("GroupNormalization", attributes))
        self.stash_dtype = np.dtype(STASH_DTYPE_NAMES[self.stash_type])

    def _prepare(self, inputs):
        if len(inputs) != 3 or any(a is None for a in inputs):
            raise ShapeError(f"GroupNormalization: expected inputs (X, scale, bias), got {len(inputs)}")
        x, scale, bias = (np.asarray(a) for a in inputs)
        check_group_norm(x.shape, self.num_groups, scale.shape, bias.shape)
        channels = x.shape[1]
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


@register("GroupNormalization", since=18)
class GroupNormalization18(GroupNormalization):
    """GroupNormalization of opsets 18-20: ``scale`` and ``bias`` per group, shape (num_groups,), no
    ``stash_type`` attribute. ONNX deprecated this schema at opset 21 (onnx.checker refuses models that use it,
    so d5's importer does too; onnx.version_converter turns them into opset 21's per-channel form); built
    directly, the operator computes it and refuses per-channel (C,) parameters, as onnxruntime and ONNX's
    reference do, rather than read them as opset 21's.

    >>> x = np.arange(8.0).reshape(1, 4, 2)
    >>> GroupNormalization18(num_groups=2).forward([x, np.ones(4), np.zeros(4)])
    Traceback (most recent call last):
    ...
    d5.errors.ShapeError: GroupNormalization (opset 18-20): scale and bias must both have shape (2,) (one per group; per-channel (C,) parameters came with opset 21), got (4,) and (4,)
    """

    def _prepare(self, inputs):
        if len(inputs) == 3 and all(a is not None for a in inputs):
            check_group_norm18(self.num_groups, np.shape(inputs[1]), np.shape(inputs[2]))
        return super()._prepare(inputs)


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

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("MeanVarianceNormalization", attributes))

    def _prepare(self, inputs):
        if len(inputs) != 1 or inputs[0] is None:
            raise ShapeError(f"MeanVarianceNormalization: expected exactly one input X, got {len(inputs)}")
        x = np.asarray(inputs[0])
        axes = mvn_axes(self.axes, x.shape)
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


@register("RMSNormalization")
class RMSNormalization(ReferenceOp):
    """``Y = X / sqrt(mean(X^2) + epsilon) * scale`` with the mean over the axes ``axis..rank-1``.

    ``backward`` returns gradients for X and scale (summed back to scale's broadcast shape).

    >>> import numpy as np
    >>> x = np.arange(6, dtype=np.float32).reshape(2, 3)
    >>> RMSNormalization(axis=0).forward([x, np.ones((2, 3), np.float32)]).dtype
    dtype('float32')
    """

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("RMSNormalization", attributes))

    def _prepare(self, inputs):
        if len(inputs) != 2 or inputs[0] is None or inputs[1] is None:
            raise ShapeError(f"RMSNormalization: expected inputs (X, scale), got {len(inputs)}")
        x, scale = np.asarray(inputs[0]), np.asarray(inputs[1])
        axes = tuple(range(normalized_axis("RMSNormalization", self.axis, x.ndim), x.ndim))
        require_broadcastable("RMSNormalization", scale, "scale", x.shape)
        dtype = np.dtype(np.float64) if self.stash_type == STASH_FLOAT64 else float_compute_dtype(x, scale)
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


@register("LpNormalization")
class LpNormalization(ReferenceOp):
    """``x / ||x||_p`` along ``axis`` (p is 1 or 2)."""

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("LpNormalization", attributes))

    def _norm(self, x: np.ndarray) -> np.ndarray:
        axis = normalize_axis("LpNormalization", self.axis, x.ndim)
        if self.p == 1:
            return np.sum(np.abs(x), axis=axis, keepdims=True)
        return np.sqrt(np.sum(x * x, axis=axis, keepdims=True))

    def forward(self, inputs):
        x = inputs[0]
        norm = self._norm(x)
        # An all-zero slice has norm 0: ONNX's expected outputs keep it 0 rather than 0/0 = NaN.
        return (x / np.where(norm == 0, 1, norm)).astype(x.dtype)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        x, g = fwd_inputs[0], grads[0]
        axis = normalize_axis("LpNormalization", self.axis, x.ndim)
        norm = self._norm(x)
        norm = np.where(norm == 0, 1, norm)
        dot = np.sum(g * x, axis=axis, keepdims=True)
        # d||x||_p / dx is sign(x) for p=1 and x/||x|| for p=2.
        dnorm = np.sign(x) if self.p == 1 else x / norm
        return (g / norm - dot * dnorm / norm ** 2).astype(g.dtype)
