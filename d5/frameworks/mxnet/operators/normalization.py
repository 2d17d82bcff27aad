"""Normalizations as native MXNet operations: BatchNormalization (MXNet's ``BatchNorm`` kernel, the running
statistics its auxiliary states), InstanceNormalization (``InstanceNorm``), LayerNormalization (``LayerNorm``),
GroupNormalization (``GroupNorm``; opset 18's per-group and opset 21's per-channel scale/bias), and
RMSNormalization, LpNormalization, LRN, MeanVarianceNormalization as compositions of MXNet operators.

The kernels run where they compute the reference's result (float32, the statistics in float32); elsewhere (other
dtypes, the statistics outputs, a scale that varies along the batch axes) the expression's own operators run,
with the statistics in float32 (float64 when an input is float64, or ``stash_type=11``), as the reference's.

**Running statistics.** MXNet's ``BatchNorm`` updates its auxiliary states (``momentum * running + (1 - momentum)
* batch``, ONNX's rule and population variance) in its *backward* pass, not its forward, as Gluon's BatchNorm
does. A training pass of the executor always runs backward, so a network's BatchNormalization node (one output,
``training``) runs on the kernel with the live running statistics as its auxiliary states -- what Gluon's
ResNet training runs. Everywhere else the statistics are due when forward ends (the 3-output form, ``training_mode``
in a pass that runs no backward, a node alone as a d5 CustomOp): the batch statistics are computed explicitly and
``_RunningStatistics`` (a small MXNet custom operator whose auxiliary states are the running statistics) writes
the update in its forward.
"""
from __future__ import annotations

import mxnet as mx
import numpy as np

from d5.errors import ShapeError
from d5.frameworks.mxnet.operators import MXOp, register
from d5.frameworks.mxnet.operators._helpers import Symbol, as_symbol, dtype_of, reshape, shape_of
from d5.ops.onnx_attributes import adopt, operator_attributes
from d5.ops.onnx_semantics import normalize_axis
from d5.ops.window_checks import (STASH_DTYPE_NAMES, STASH_FLOAT64, check_batch_norm, check_broadcastable,
                                  check_group_norm, check_group_norm18, check_instance_norm, lrn_half_window, mvn_axes,
                                  normalized_axis, require_channels)

# The dtype of LayerNormalization's Mean and InvStdDev outputs per stash_type.
_STASH_DTYPES = {stash: np.dtype(name) for stash, name in STASH_DTYPE_NAMES.items()}
_FLOAT32 = np.dtype(np.float32)


def _compute_dtype(*values) -> np.dtype:
    """float64 when any input is float64, else float32 (narrow floats are cast back afterwards)."""
    return np.dtype(np.float64) if any(v is not None and dtype_of(v) == np.float64 for v in values) else _FLOAT32


def _cast(dtype, *values):
    return tuple(None if v is None else as_symbol(v, dtype) for v in values)


def _per_channel(value: Symbol, rank: int) -> Symbol:
    """A (C,) vector shaped (1, C, 1, ...) to broadcast over (N, C, ...)."""
    return reshape(value, (1, shape_of(value)[0]) + (1,) * (rank - 2))


def _broadcast(value: Symbol, shape) -> Symbol:
    """``value`` with leading size-1 axes up to ``len(shape)``, ready for ``broadcast_*`` against ``shape``."""
    own = shape_of(value)
    return reshape(value, (1,) * (len(shape) - len(own)) + own)


# ------------------------------------------------------------------------------------------ running statistics

class _RunningStatisticsOp(mx.operator.CustomOp):
    """``new = momentum * running + (1 - momentum) * batch`` for the mean and the variance, computed in the batch
    statistics' dtype and cast to the running statistics': the outputs, also written into the auxiliary states
    (the running statistics) in forward. Gradient: ``(1 - momentum)`` of the outputs' into the batch
    statistics."""

    def __init__(self, momentum: float) -> None:
        super().__init__()
        self.momentum = momentum

    def forward(self, is_train, req, in_data, out_data, aux):
        for position in range(2):
            batch, running = in_data[position], aux[position]
            new = running.astype(batch.dtype) * self.momentum + batch * (1.0 - self.momentum)
            new = new.astype(running.dtype)
            self.assign(out_data[position], req[position], new)
            self.assign(aux[position], "write", new)

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        for position in range(2):
            grad = out_grad[position].astype(in_data[position].dtype) * (1.0 - self.momentum)
            self.assign(in_grad[position], req[position], grad)


@mx.operator.register("d5_running_statistics")
class _RunningStatisticsProp(mx.operator.CustomOpProp):
    def __init__(self, momentum: str, dtype: str) -> None:
        super().__init__(need_top_grad=True)
        self.momentum, self.dtype = float(momentum), np.dtype(dtype).type

    def list_arguments(self):
        return ["batch_mean", "batch_var"]

    def list_auxiliary_states(self):
        return ["running_mean", "running_var"]

    def list_outputs(self):
        return ["mean", "var"]

    def infer_shape(self, in_shape):
        return in_shape, [in_shape[0], in_shape[1]], [in_shape[0], in_shape[1]]

    def infer_type(self, in_type):
        return in_type, [self.dtype, self.dtype], [self.dtype, self.dtype]

    def declare_backward_dependency(self, out_grad, in_data, out_data):
        return list(out_grad)

    def create_operator(self, ctx, shapes, dtypes):
        return _RunningStatisticsOp(self.momentum)


def _running_statistics(momentum: float, batch_mean: Symbol, batch_var: Symbol, mean, var):
    """The updated running mean and variance (computed in the batch statistics' dtype, given the running
    statistics' own), differentiable in the batch statistics; written into ``mean`` and ``var`` in forward where
    they are graph tensors (the executor's live buffers). Given as NumPy values (constants), they are only
    computed."""
    if isinstance(mean, Symbol) and isinstance(var, Symbol) and dtype_of(mean) == dtype_of(var):
        updated = mx.sym.Custom(batch_mean, batch_var, mean, var, op_type="d5_running_statistics",
                                momentum=repr(float(momentum)), dtype=dtype_of(mean).name)
        return updated[0], updated[1]
    new = []
    for running, batch in ((mean, batch_mean), (var, batch_var)):
        compute = dtype_of(batch)
        new.append(as_symbol(as_symbol(running, compute) * momentum + batch * (1.0 - momentum), dtype_of(running)))
    return tuple(new)


@register("BatchNormalization")
class BatchNormalization(MXOp):
    """ONNX BatchNormalization over (N, C, ...).

    With batch statistics (a training pass, or ``training_mode=1``): normalize by the batch mean and population
    variance over every axis but C and update the running statistics to ``momentum * running + (1 - momentum) *
    batch`` (ONNX's rule), in the ``input_mean`` and ``input_var`` tensors; returns ``(Y, running_mean,
    running_var)`` when the node names three outputs, else Y. Otherwise normalize by the given statistics
    (``BatchNorm`` with ``use_global_stats``).

    Where the update happens (see the module docstring): a one-output node in a training pass runs MXNet's kernel
    with the running statistics as its auxiliary states, updated by its backward pass, exactly as Gluon's
    BatchNorm; elsewhere the update is written in forward, by ``_RunningStatistics``, and Y is still the kernel's
    in a training pass (float32), the expression's otherwise (a pass that records nothing runs the kernel in
    inference mode, which reads the running statistics). With ``training_mode=1`` an inference pass writes the
    update too, as the PyTorch and TensorFlow converters do (the reference executor writes state in training
    passes only).

    >>> import numpy as np
    >>> from d5.frameworks.mxnet.custom_op import native_op
    >>> op = native_op("BatchNormalization", epsilon=0.0, momentum=0.5, training_mode=1)
    >>> x, ones, zeros = np.array([[[1.0]], [[3.0]]], np.float32), np.ones(1, np.float32), np.zeros(1, np.float32)
    >>> op.forward([x, ones, zeros, zeros, ones * 3]).ravel().tolist()
    [-1.0, 1.0]
    >>> {index: value.tolist() for index, value in op.state_updates().items()}   # 0.5 * input + 0.5 * batch
    {3: [1.0], 4: [2.0]}
    """

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("BatchNormalization", attributes))

    def __call__(self, x, scale=None, bias=None, mean=None, var=None):
        if any(v is None for v in (x, scale, bias, mean, var)):
            raise ShapeError("BatchNormalization: expected 5 inputs (X, scale, B, input_mean, input_var) with some "
                             "missing")
        shape = shape_of(x)
        check_batch_norm(shape, [shape_of(v) for v in (scale, bias, mean, var)], require_data=True)
        # The kernel computes float32 (float64 too, on the CPU) when every input has X's dtype.
        native = all(dtype_of(v) == dtype_of(x) for v in (scale, bias, mean, var)) and \
            dtype_of(x) in (np.float32, np.float64)
        kernel = dict(eps=float(self.epsilon), momentum=float(self.momentum), fix_gamma=False, axis=1,
                      cudnn_off=False)
        if not (self.training or self.training_mode):
            if native:
                return mx.sym.BatchNorm(x, as_symbol(scale), as_symbol(bias), as_symbol(mean), as_symbol(var),
                                        use_global_stats=True, **kernel)
            compute = _compute_dtype(x, scale, bias, mean, var)
            xc, s, b, m, v = _cast(compute, x, scale, bias, mean, var)
            inv = mx.sym.rsqrt(v + float(self.epsilon)) * s
            rank = len(shape)
            y = mx.sym.broadcast_add(mx.sym.broadcast_mul(xc, _per_channel(inv, rank)),
                                     _per_channel(b - m * inv, rank))
            return as_symbol(y, dtype_of(x))
        statistics = self.node_output_count is not None and self.node_output_count > 1
        if self.training and native and self.node_output_count == 1:
            # A network's node in a training pass: MXNet's kernel, the running statistics its auxiliary states
            # (updated by its backward pass, which every training pass runs), as Gluon's BatchNorm.
            return mx.sym.BatchNorm(x, as_symbol(scale), as_symbol(bias), as_symbol(mean), as_symbol(var),
                                    use_global_stats=False, **kernel)
        return self._with_statistics(x, scale, bias, mean, var, native, kernel, statistics)

    def _with_statistics(self, x, scale, bias, mean, var, native, kernel, statistics):
        """Batch statistics, the running statistics updated (and written) in forward; ``(Y, running_mean,
        running_var)`` when ``statistics`` else Y."""
        shape = shape_of(x)
        rank = len(shape)
        compute = _compute_dtype(x, scale, bias, mean, var)
        xc, s, b = _cast(compute, x, scale, bias)
        axes = (0,) + tuple(range(2, rank))
        batch_mean = mx.sym.mean(xc, axis=axes)
        centered = mx.sym.broadcast_sub(xc, _per_channel(batch_mean, rank))
        batch_var = mx.sym.mean(mx.sym.square(centered), axis=axes)
        new_mean, new_var = _running_statistics(float(self.momentum), batch_mean, batch_var, mean, var)
        # Y alone: a per-channel zero that depends on the update joins B, so that the update runs.
        after_update = None if statistics else as_symbol(mx.sym.zeros_like(mx.sym.BlockGrad(new_mean + new_var)),
                                                         compute)
        if self.training and native:
            # Y on the kernel (a training pass records in train mode: batch statistics), its auxiliary states
            # throwaway copies.
            if after_update is not None:
                b = b + after_update
            dummy_mean, dummy_var = as_symbol(np.zeros(shape[1], compute)), as_symbol(np.ones(shape[1], compute))
            y = mx.sym.BatchNorm(xc, s, b, dummy_mean, dummy_var, use_global_stats=False, **kernel)
        else:
            inv = mx.sym.rsqrt(batch_var + float(self.epsilon)) * s
            if after_update is not None:
                b = b + after_update
            y = mx.sym.broadcast_add(mx.sym.broadcast_mul(centered, _per_channel(inv, rank)), _per_channel(b, rank))
        y = as_symbol(y, dtype_of(x))
        return (y, new_mean, new_var) if statistics else y


@register("InstanceNormalization")
class InstanceNormalization(MXOp):
    """``Y = scale * (X - mean) / sqrt(var + epsilon) + B`` with statistics per image and channel of (N, C, ...):
    MXNet's ``InstanceNorm`` kernel for float32, the expression otherwise."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("InstanceNormalization", attributes))

    def __call__(self, x, scale=None, bias=None):
        if x is None or scale is None or bias is None:
            raise ShapeError("InstanceNormalization: expected inputs (X, scale, B)")
        shape = shape_of(x)
        check_instance_norm(shape, shape_of(scale), shape_of(bias))
        if all(dtype_of(v) == _FLOAT32 for v in (x, scale, bias)):
            return mx.sym.InstanceNorm(x, as_symbol(scale), as_symbol(bias), eps=float(self.epsilon))
        compute = _compute_dtype(x, scale, bias)
        xc, s, b = _cast(compute, x, scale, bias)
        rank = len(shape)
        normalized = _normalize(xc, tuple(range(2, rank)), float(self.epsilon))[0]
        y = mx.sym.broadcast_add(mx.sym.broadcast_mul(normalized, _per_channel(s, rank)), _per_channel(b, rank))
        return as_symbol(y, dtype_of(x))


def _normalize(x: Symbol, axes: tuple[int, ...], epsilon: float):
    """``((x - mean) * inv_std, mean, inv_std)`` over ``axes`` (kept as size-1 axes), the variance biased."""
    mean = mx.sym.mean(x, axis=axes, keepdims=True)
    centered = mx.sym.broadcast_sub(x, mean)
    inv_std = mx.sym.rsqrt(mx.sym.mean(mx.sym.square(centered), axis=axes, keepdims=True) + epsilon)
    return mx.sym.broadcast_mul(centered, inv_std), mean, inv_std


@register("LayerNormalization")
class LayerNormalization(MXOp):
    """Normalize over axes ``axis..rank-1``; returns ``(Y, Mean, InvStdDev)`` when the node names more than one
    output (the statistics keep the normalized axes as size 1, in the ``stash_type`` dtype), else Y. MXNet's
    ``LayerNorm`` kernel (over X viewed as (rows, normalized size)) runs for float32 with Y alone and a scale
    and bias that vary along the normalized axes only; the expression elsewhere, its statistics in float32
    (float64 for a float64 input or ``stash_type=11``), as the reference's."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("LayerNormalization", attributes))

    def __call__(self, x, scale=None, bias=None):
        if x is None or scale is None:
            raise ShapeError("LayerNormalization: expected inputs (X, Scale) or (X, Scale, B)")
        shape = shape_of(x)
        rank = len(shape)
        axis = normalized_axis("LayerNormalization", self.axis, rank)
        for value, what in ((scale, "Scale"), (bias, "B")):
            if value is not None:
                check_broadcastable("LayerNormalization", what, shape_of(value), shape)
        tail = shape[axis:]
        wants_statistics = self.node_output_count is not None and self.node_output_count > 1
        compute = np.dtype(np.float64) if self.stash_type == STASH_FLOAT64 else _compute_dtype(x, scale, bias)
        fits = all(v is None or _fits_tail(shape_of(v), len(tail)) for v in (scale, bias))
        if not wants_statistics and fits and compute == _FLOAT32 and dtype_of(x) == _FLOAT32 and 0 not in shape:
            size = int(np.prod(tail))
            gamma = _flat_tail(as_symbol(scale, _FLOAT32), tail)
            beta = as_symbol(np.zeros(size, np.float32)) if bias is None else _flat_tail(as_symbol(bias, _FLOAT32),
                                                                                         tail)
            rows = reshape(x, (int(np.prod(shape[:axis], dtype=np.int64)), size))
            return reshape(mx.sym.LayerNorm(rows, gamma, beta, axis=-1, eps=float(self.epsilon)), shape)
        xc, s, b = _cast(compute, x, scale, bias)
        normalized, mean, inv_std = _normalize(xc, tuple(range(axis, rank)), float(self.epsilon))
        y = mx.sym.broadcast_mul(normalized, _broadcast(s, shape))
        if b is not None:
            y = mx.sym.broadcast_add(y, _broadcast(b, shape))
        y = as_symbol(y, dtype_of(x))
        if wants_statistics:
            stash = np.float64 if compute == np.float64 else _STASH_DTYPES[self.stash_type]
            return y, as_symbol(mean, stash), as_symbol(inv_std, stash)
        return y


def _fits_tail(own, tail_rank: int) -> bool:
    """Whether a parameter of shape ``own`` varies along the last ``tail_rank`` axes only."""
    return all(d == 1 for d in own[:max(len(own) - tail_rank, 0)])


def _flat_tail(value: Symbol, tail) -> Symbol:
    """A parameter broadcast to the normalized axes' shape ``tail``, flattened."""
    own = shape_of(value)
    own = own[max(len(own) - len(tail), 0):]
    value = reshape(value, (1,) * (len(tail) - len(own)) + own)
    if tuple(own) != tuple(tail):
        value = mx.sym.broadcast_to(value, shape=tuple(tail))
    return reshape(value, (int(np.prod(tail)),))


@register("GroupNormalization", since=21)
class GroupNormalization(MXOp):
    """Statistics per instance and group of ``C / num_groups`` consecutive channels; scale and bias per channel
    (C,) or, as opset 18, per group (told apart by their shape, as the reference). MXNet's ``GroupNorm`` kernel
    for float32 (it takes per-group gamma and beta: per-channel ones are applied after it), the expression
    otherwise."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("GroupNormalization", attributes))

    def _check(self, shape, scale, bias) -> None:
        check_group_norm(shape, self.num_groups, shape_of(scale), shape_of(bias))

    def __call__(self, x, scale=None, bias=None):
        if x is None or scale is None or bias is None:
            raise ShapeError("GroupNormalization: expected inputs (X, scale, bias)")
        shape = shape_of(x)
        self._check(shape, scale, bias)
        channels, groups, rank = shape[1], self.num_groups, len(shape)
        compute = np.dtype(np.float64) if self.stash_type == STASH_FLOAT64 else _compute_dtype(x, scale, bias)
        xc, s, b = _cast(compute, x, scale, bias)
        per_group = shape_of(s)[0] != channels
        if compute == _FLOAT32 and dtype_of(x) == _FLOAT32 and rank >= 3 and 0 not in shape:
            # MXNet's kernel takes per-group gamma and beta (opset 18's form); per-channel ones apply after it.
            if per_group or groups == channels:
                return mx.sym.GroupNorm(x, s, b, num_groups=groups, eps=float(self.epsilon))
            ones, zeros = as_symbol(np.ones(groups, np.float32)), as_symbol(np.zeros(groups, np.float32))
            normalized = mx.sym.GroupNorm(x, ones, zeros, num_groups=groups, eps=float(self.epsilon))
            return mx.sym.broadcast_add(mx.sym.broadcast_mul(normalized, _per_channel(s, rank)), _per_channel(b, rank))
        if per_group:  # each group's value for its channels
            repeat = channels // groups
            s, b = (mx.sym.repeat(v, repeats=repeat, axis=0) for v in (s, b))
        grouped = reshape(xc, (shape[0], groups, int(np.prod(shape[1:], dtype=np.int64)) // groups))
        normalized = reshape(_normalize(grouped, (2,), float(self.epsilon))[0], shape)
        y = mx.sym.broadcast_add(mx.sym.broadcast_mul(normalized, _per_channel(s, rank)), _per_channel(b, rank))
        return as_symbol(y, dtype_of(x))


@register("GroupNormalization", since=18)
class GroupNormalization18(GroupNormalization):
    """GroupNormalization of opsets 18-20: ``scale`` and ``bias`` per group, shape (num_groups,); per-channel
    (C,) parameters are refused, as the reference, onnxruntime and ONNX's reference do."""

    def _check(self, shape, scale, bias) -> None:
        check_group_norm18(self.num_groups, shape_of(scale), shape_of(bias))
        super()._check(shape, scale, bias)


@register("RMSNormalization")
class RMSNormalization(MXOp):
    """``Y = X / sqrt(mean(X^2) + epsilon) * scale`` with the mean over the axes ``axis..rank-1``, computed in
    float32 (float64 for a float64 input or ``stash_type=11``) and cast back to X's dtype."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("RMSNormalization", attributes))

    def __call__(self, x, scale=None):
        if x is None or scale is None:
            raise ShapeError("RMSNormalization: expected inputs (X, scale)")
        shape = shape_of(x)
        rank = len(shape)
        axes = tuple(range(normalized_axis("RMSNormalization", self.axis, rank), rank))
        check_broadcastable("RMSNormalization", "scale", shape_of(scale), shape)
        compute = np.dtype(np.float64) if self.stash_type == STASH_FLOAT64 else _compute_dtype(x, scale)
        xc, s = _cast(compute, x, scale)
        inv_rms = mx.sym.rsqrt(mx.sym.mean(mx.sym.square(xc), axis=axes, keepdims=True) + float(self.epsilon))
        y = mx.sym.broadcast_mul(mx.sym.broadcast_mul(xc, inv_rms), _broadcast(s, shape))
        return as_symbol(y, dtype_of(x))


@register("LpNormalization")
class LpNormalization(MXOp):
    """``X / ||X||_p`` along ``axis`` (p is 1 or 2); an all-zero slice stays 0 (not 0/0), its gradient passing
    straight through, as the reference's."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("LpNormalization", attributes))

    def __call__(self, x):
        x = as_symbol(x)
        axis = normalize_axis("LpNormalization", self.axis, len(shape_of(x)))
        if self.p == 1:
            norm = mx.sym.sum(mx.sym.abs(x), axis=axis, keepdims=True)  # abs' gradient at 0 is 0
        else:
            squares = mx.sym.sum(mx.sym.square(x), axis=axis, keepdims=True)
            # sqrt's gradient at 0 is infinite: the root is taken of 1 there, so no NaN reaches X's gradient.
            norm = mx.sym.sqrt(mx.sym.where(squares == 0, mx.sym.ones_like(squares), squares))
        return mx.sym.broadcast_div(x, mx.sym.where(norm == 0, mx.sym.ones_like(norm), norm))


@register("LRN")
class LRN(MXOp):
    """Local response normalization across channels of (N, C, D1, ...): ``Y[c] = X[c] / (bias + alpha / size *
    sum(X[c']^2))^beta`` over ``c'`` in ``[c - (size - 1) / 2, c + (size - 1) / 2]`` clipped to the channels.
    The window sums are MXNet's sum pooling of the squares along C (zero padded). ``size`` must be odd, as the
    reference requires (an even window has no portable centre)."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("LRN", attributes))

    def __call__(self, x):
        shape = shape_of(x)
        require_channels("LRN", shape)
        compute = _compute_dtype(x)
        xc = as_symbol(x, compute)
        n, channels = shape[:2]
        half = lrn_half_window(self.size, channels)
        squares = reshape(mx.sym.square(xc), (n, 1, channels, int(np.prod(shape[2:], dtype=np.int64))))
        if half:
            sums = mx.sym.Pooling(squares, kernel=(2 * half + 1, 1), pad=(half, 0), stride=(1, 1), pool_type="sum",
                                  pooling_convention="valid")
        else:
            sums = squares
        denominator = reshape(sums, shape) * (float(self.alpha) / self.size) + float(self.bias)
        return as_symbol(xc * (denominator ** (-float(self.beta))), dtype_of(x))


@register("MeanVarianceNormalization")
class MeanVarianceNormalization(MXOp):
    """``Y = (X - mean) / (std + 1e-9)`` with the mean and biased standard deviation over ``axes`` (default
    ``[0, 2, 3]``), ONNX's function body: a constant slice normalizes to 0."""

    EPSILON = 1e-9

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("MeanVarianceNormalization", attributes))

    def __call__(self, x):
        axes = mvn_axes(self.axes, shape_of(x))
        xc = as_symbol(x, _compute_dtype(x))
        centered = mx.sym.broadcast_sub(xc, mx.sym.mean(xc, axis=axes, keepdims=True))
        variance = mx.sym.mean(mx.sym.square(centered), axis=axes, keepdims=True)
        # sqrt's gradient at 0 is infinite: a variance below 1e-30 (whose root is far below the 1e-9 epsilon)
        # is clamped, so a constant slice gets the reference's finite gradient instead of NaN.
        std = mx.sym.sqrt(mx.sym.maximum(variance, 1e-30))
        return as_symbol(mx.sym.broadcast_div(centered, std + self.EPSILON), dtype_of(x))
