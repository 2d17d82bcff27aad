"""Normalizations as native TensorFlow operations: BatchNormalization (batch statistics in training passes, the
running statistics assigned to the ``tf.Variable`` inputs), InstanceNormalization, LayerNormalization,
GroupNormalization (opset 18's per-group and opset 21's per-channel scale/bias), and RMSNormalization,
LpNormalization, LRN, MeanVarianceNormalization.

BatchNormalization, InstanceNormalization and GroupNormalization also compute channels-last
(:meth:`channels_last`, the channel the last axis), so the executor keeps a CNN's activations channels-last
through them; float32 BatchNormalization runs on TensorFlow's fused kernel where its gradient is the
expression's. Statistics are computed in float32 (float64 when an input is float64), as the reference's.
"""
from __future__ import annotations

import numpy as np
import tensorflow as tf

from d5.errors import ShapeError
from d5.frameworks.tensorflow.operators import TFOp, register
from d5.frameworks.tensorflow.tensors import from_channels_last, to_channels_last
from d5.ops.onnx_attributes import adopt, operator_attributes
from d5.ops.onnx_semantics import normalize_axis
from d5.ops.window_checks import (STASH_DTYPE_NAMES, STASH_FLOAT64, check_batch_norm, check_broadcastable,
                                  check_group_norm, check_group_norm18, check_instance_norm, lrn_half_window, mvn_axes,
                                  normalized_axis, require_channels)

# The dtype of LayerNormalization's Mean and InvStdDev outputs per stash_type.
_STASH_DTYPES = {stash: tf.as_dtype(name) for stash, name in STASH_DTYPE_NAMES.items()}


def _compute_dtype(*tensors) -> tf.DType:
    """float64 when any input is float64, else float32 (narrow floats are cast back afterwards)."""
    return tf.float64 if any(t is not None and t.dtype == tf.float64 for t in tensors) else tf.float32


def _cast(dtype: tf.DType, *tensors):
    return tuple(None if t is None else tf.cast(t, dtype) for t in tensors)


class _ChannelsLastNormalization(TFOp):
    """A normalization over (N, C, ...) whose :meth:`channels_last` takes X channels-last; ``__call__`` transposes
    X (rank 3 and more) around it."""

    channels_last_inputs = (0,)
    channels_last_ranks = (3, 4, 5)
    channels_last_outputs = (0,)

    def __call__(self, x, *rest):
        if x.shape.rank is None or x.shape.rank <= 2:  # (N, C): already channels-last
            return self.channels_last(x, *rest)
        outputs = self.channels_last(to_channels_last(x), *rest)
        if isinstance(outputs, tuple):
            return (from_channels_last(outputs[0]), *outputs[1:])
        return from_channels_last(outputs)

    def _checked(self, x, *rest) -> None:
        """:meth:`_check` of channels-last X (the executor's inputs, unchecked otherwise), X's shape given back in
        ONNX layout for the messages."""
        shape = x.shape.as_list() if x.shape.rank is not None else []
        self._check(tuple(shape[:1] + shape[-1:] + shape[1:-1]) if len(shape) > 2 else tuple(shape), *rest)

    def _check(self, shape, *rest) -> None:
        """Raise the reference's ShapeError for inputs of these shapes (X's in ONNX layout)."""


@register("BatchNormalization")
class BatchNormalization(_ChannelsLastNormalization):
    """ONNX BatchNormalization over (N, C, ...).

    With batch statistics (a training pass, or ``training_mode=1``): normalize by the batch mean and biased
    (population) variance over every axis but C, and update the running statistics ``running = momentum * running
    + (1 - momentum) * batch`` (ONNX's momentum and population variance), assigned to the ``input_mean`` and
    ``input_var`` inputs where they are ``tf.Variable`` s (the executor's live buffers), as the reference's
    state_updates. Returns Y when the node has one output (or the count is unknown), else ``(Y, running_mean,
    running_var)``. Otherwise normalize by the given statistics. The statistics outputs are per-channel vectors,
    so only Y is channels-last.

    Float32 runs on TensorFlow's fused kernel (``FusedBatchNormV3``): with batch statistics when the node names
    Y only (its gradient is Y's, which is all such a node has); with the given statistics in passes nothing
    differentiates (``differentiated`` False: its gradient gives the statistics none), where grappler also folds
    it into the convolution before it. Elsewhere, and for other dtypes, the expression's own operations.
    """

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("BatchNormalization", attributes))

    def _check(self, shape, scale, bias, mean, var) -> None:
        check_batch_norm(shape, [tuple(value.shape.as_list()) for value in (scale, bias, mean, var)])

    def channels_last(self, x, scale, bias, mean, var):
        self._checked(x, scale, bias, mean, var)
        compute = _compute_dtype(x, scale, bias, mean, var)
        xc, s, b = _cast(compute, x, scale, bias)
        if not (self.training or self.training_mode):
            if not self.differentiated and _fusable(x, scale, bias, mean, var):
                # one pass, and grappler folds it into the convolution before it (and the Relu after)
                y = tf.raw_ops.FusedBatchNormV3(x=_as_4d(x), scale=scale, offset=bias, mean=mean, variance=var,
                                                epsilon=self.epsilon, exponential_avg_factor=1.0,
                                                data_format="NHWC", is_training=False)[0]
                return y if x.shape.rank == 4 else tf.reshape(y, x.shape)
            m, v = _cast(compute, mean, var)
            inv = tf.math.rsqrt(v + self.epsilon) * s  # folded: two passes over X
            return tf.cast(xc * inv + (b - m * inv), x.dtype)
        wants_statistics = self.node_output_count is not None and self.node_output_count > 1
        fused = None if wants_statistics else self._fused(x, scale, bias, mean, var)
        if fused is not None:
            y, batch_mean, batch_var = fused
        else:
            batch_mean, batch_var = tf.nn.moments(xc, axes=list(range(x.shape.rank - 1)))
            y = tf.cast((xc - batch_mean) * (tf.math.rsqrt(batch_var + self.epsilon) * s) + b, x.dtype)
        new_mean = self.momentum * mean + (1.0 - self.momentum) * tf.cast(batch_mean, mean.dtype)
        new_var = self.momentum * var + (1.0 - self.momentum) * tf.cast(batch_var, var.dtype)
        for state, value in ((mean, new_mean), (var, new_var)):
            if isinstance(state, tf.Variable):
                state.assign(tf.stop_gradient(value))
        if wants_statistics:
            return y, new_mean, new_var
        return y

    def _fused(self, x, scale, bias, mean, var):
        """Batch statistics by TensorFlow's fused kernel (``FusedBatchNormV3``: one pass over X forward and one
        backward, instead of a dozen elementwise and reduction kernels), for float32 inputs and more than one
        value per channel: ``(Y, batch mean, population variance)``, or None where it does not apply. The kernel
        normalizes Y by the population variance, as ONNX, and returns the Bessel-corrected one, ``var * M / (M -
        1)``: scaled back here for the running statistics. Its gradient is Y's through X, scale and B, with the
        batch statistics -- the expression's (the statistics are outputs of no node here)."""
        if not _fusable(x, scale, bias, mean, var):
            return None
        count = int(np.prod(x.shape.as_list()[:-1], dtype=np.int64))
        if count < 2:
            return None
        empty = tf.constant([], tf.float32)
        y, batch_mean, corrected, *_ = tf.raw_ops.FusedBatchNormV3(
            x=_as_4d(x), scale=scale, offset=bias, mean=empty, variance=empty, epsilon=self.epsilon,
            exponential_avg_factor=1.0, data_format="NHWC", is_training=True)
        if x.shape.rank != 4:
            y = tf.reshape(y, x.shape)
        return y, batch_mean, corrected * ((count - 1) / count)


def _fusable(x, *statistics) -> bool:
    """Whether TensorFlow's fused batch-norm kernel computes BatchNormalization of channels-last ``x`` with these
    per-channel inputs: all float32 (the kernel's statistics are float32, as the reference's), X's shape known."""
    return (all(t.dtype == tf.float32 for t in (x, *statistics)) and x.shape.rank is not None
            and x.shape.rank >= 2 and None not in x.shape.as_list())


def _as_4d(x):
    """Channels-last X as the (N, H, W, C) the fused kernel takes: the statistics are over every axis but C, so
    (N, spatial..., C) is (N, prod(spatial), 1, C)."""
    shape = x.shape.as_list()
    if len(shape) == 4:
        return x
    return tf.reshape(x, [shape[0], int(np.prod(shape[1:-1], dtype=np.int64)), 1, shape[-1]])


@register("InstanceNormalization")
class InstanceNormalization(_ChannelsLastNormalization):
    """``Y = scale * (X - mean) / sqrt(var + epsilon) + B`` with statistics per image and channel of (N, C, ...)."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("InstanceNormalization", attributes))

    def _check(self, shape, scale, bias) -> None:
        check_instance_norm(shape, tuple(scale.shape.as_list()), tuple(bias.shape.as_list()))

    def channels_last(self, x, scale, bias):
        self._checked(x, scale, bias)
        compute = _compute_dtype(x, scale, bias)
        xc, s, b = _cast(compute, x, scale, bias)
        mean, var = tf.nn.moments(xc, axes=list(range(1, x.shape.rank - 1)), keepdims=True)
        return tf.cast((xc - mean) * (tf.math.rsqrt(var + self.epsilon) * s) + b, x.dtype)


@register("LayerNormalization")
class LayerNormalization(TFOp):
    """Normalize over axes ``axis..rank-1``; returns ``(Y, Mean, InvStdDev)`` when the node names more than one
    output (the statistics keep the normalized axes as size 1, in the ``stash_type`` dtype), else Y. Statistics
    are computed in float32 (float64 for a float64 input or ``stash_type=11``), as the reference's."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("LayerNormalization", attributes))

    def __call__(self, x, scale, bias=None):
        rank = x.shape.rank
        axes = list(range(normalized_axis("LayerNormalization", self.axis, rank), rank))
        for value, what in ((scale, "Scale"), (bias, "B")):
            if value is not None:
                check_broadcastable("LayerNormalization", what, tuple(value.shape.as_list()), x.shape.as_list())
        compute = tf.float64 if self.stash_type == STASH_FLOAT64 else _compute_dtype(x, scale, bias)
        xc, s, b = _cast(compute, x, scale, bias)
        mean = tf.reduce_mean(xc, axis=axes, keepdims=True)
        centered = xc - mean
        inv_std = tf.math.rsqrt(tf.reduce_mean(centered * centered, axis=axes, keepdims=True) + self.epsilon)
        y = centered * inv_std * s
        if b is not None:
            y = y + b
        y = tf.cast(y, x.dtype)
        if self.node_output_count is not None and self.node_output_count > 1:
            stash = tf.float64 if compute == tf.float64 else _STASH_DTYPES[self.stash_type]
            return y, tf.cast(mean, stash), tf.cast(inv_std, stash)
        return y


@register("GroupNormalization", since=21)
class GroupNormalization(_ChannelsLastNormalization):
    """Statistics per instance and group of ``C / num_groups`` consecutive channels; scale and bias per channel
    (C,) or, as opset 18, per group (told apart by their shape, as the reference)."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("GroupNormalization", attributes))

    def _check(self, shape, scale, bias) -> None:
        check_group_norm(shape, self.num_groups, tuple(scale.shape.as_list()), tuple(bias.shape.as_list()))

    def channels_last(self, x, scale, bias):
        self._checked(x, scale, bias)
        shape = x.shape.as_list()
        channels = shape[-1]
        compute = tf.float64 if self.stash_type == STASH_FLOAT64 else _compute_dtype(x, scale, bias)
        xc, s, b = _cast(compute, x, scale, bias)
        if s.shape[0] != channels:  # per group: each group's value for its channels
            repeat = channels // self.num_groups
            s, b = tf.repeat(s, repeat), tf.repeat(b, repeat)
        # (N, spatial..., C) -> (N, S, groups, C / groups): the statistics over S and each group's channels
        grouped = tf.reshape(xc, [-1, int(np.prod(shape[1:-1], dtype=np.int64)), self.num_groups,
                                  channels // self.num_groups])
        mean, var = tf.nn.moments(grouped, axes=[1, 3], keepdims=True)
        normalized = tf.reshape((grouped - mean) * tf.math.rsqrt(var + self.epsilon),
                                tf.shape(xc) if None in shape else shape)
        return tf.cast(normalized * s + b, x.dtype)


@register("GroupNormalization", since=18)
class GroupNormalization18(GroupNormalization):
    """GroupNormalization of opsets 18-20: ``scale`` and ``bias`` per group, shape (num_groups,); per-channel
    (C,) parameters are refused, as the reference, onnxruntime and ONNX's reference do."""

    def _check(self, shape, scale, bias) -> None:
        check_group_norm18(self.num_groups, tuple(scale.shape.as_list()), tuple(bias.shape.as_list()))
        super()._check(shape, scale, bias)


@register("RMSNormalization")
class RMSNormalization(TFOp):
    """``Y = X / sqrt(mean(X^2) + epsilon) * scale`` with the mean over the axes ``axis..rank-1``, computed in
    float32 (float64 for a float64 input or ``stash_type=11``) and cast back to X's dtype."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("RMSNormalization", attributes))

    def __call__(self, x, scale):
        if x is None or scale is None:
            raise ShapeError("RMSNormalization: expected inputs (X, scale)")
        rank = x.shape.rank
        axes = list(range(normalized_axis("RMSNormalization", self.axis, rank), rank))
        check_broadcastable("RMSNormalization", "scale", tuple(scale.shape.as_list()), x.shape.as_list())
        compute = tf.float64 if self.stash_type == STASH_FLOAT64 else _compute_dtype(x, scale)
        xc, s = _cast(compute, x, scale)
        inv_rms = tf.math.rsqrt(tf.reduce_mean(xc * xc, axis=axes, keepdims=True) + self.epsilon)
        return tf.cast(xc * inv_rms * s, x.dtype)


@register("LpNormalization")
class LpNormalization(TFOp):
    """``X / ||X||_p`` along ``axis`` (p is 1 or 2); an all-zero slice stays 0 (not 0/0), its gradient passing
    straight through, as the reference's."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("LpNormalization", attributes))

    def __call__(self, x):
        axis = normalize_axis("LpNormalization", self.axis, x.shape.rank)
        if self.p == 1:
            norm = tf.reduce_sum(tf.abs(x), axis=axis, keepdims=True)  # abs' gradient at 0 is 0
            return x / tf.where(norm == 0, tf.ones_like(norm), norm)
        squares = tf.reduce_sum(x * x, axis=axis, keepdims=True)
        # sqrt's gradient at 0 is infinite: the root is taken of 1 there, so no NaN reaches X's gradient.
        return x / tf.sqrt(tf.where(squares == 0, tf.ones_like(squares), squares))


@register("LRN")
class LRN(TFOp):
    """Local response normalization across channels of (N, C, D1, ...): ``Y[c] = X[c] / (bias + alpha / size *
    sum(X[c']^2))^beta`` over ``c'`` in ``[c - (size - 1) / 2, c + (size - 1) / 2]`` clipped to the channels.
    ``size`` must be odd, as the reference requires (an even window has no portable centre)."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("LRN", attributes))

    def __call__(self, x):
        require_channels("LRN", tuple(x.shape))
        compute = _compute_dtype(x)
        xc = tf.cast(x, compute)
        channels = x.shape[1]
        half = lrn_half_window(self.size, channels)
        squares = xc * xc
        padded = tf.pad(squares, [[0, 0], [half, half]] + [[0, 0]] * (x.shape.rank - 2))
        sums = tf.add_n([padded[:, shift:shift + channels] for shift in range(2 * half + 1)])
        denominator = self.bias + (self.alpha / self.size) * sums
        return tf.cast(xc * tf.pow(denominator, tf.constant(-self.beta, compute)), x.dtype)


@register("MeanVarianceNormalization")
class MeanVarianceNormalization(TFOp):
    """``Y = (X - mean) / (std + 1e-9)`` with the mean and biased standard deviation over ``axes`` (default
    ``[0, 2, 3]``), ONNX's function body: a constant slice normalizes to 0."""

    EPSILON = 1e-9

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("MeanVarianceNormalization", attributes))

    def __call__(self, x):
        axes = list(mvn_axes(self.axes, tuple(x.shape)))
        xc = tf.cast(x, _compute_dtype(x))
        centered = xc - tf.reduce_mean(xc, axis=axes, keepdims=True)
        variance = tf.reduce_mean(centered * centered, axis=axes, keepdims=True)
        # sqrt's gradient at 0 is infinite: a variance below 1e-30 (whose root is far below the 1e-9 epsilon)
        # is clamped, so a constant slice gets the reference's finite gradient instead of NaN.
        std = tf.sqrt(tf.maximum(variance, 1e-30))
        return tf.cast(centered / (std + self.EPSILON), x.dtype)
