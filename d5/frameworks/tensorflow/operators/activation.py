"""Activations as native TensorFlow operations: Relu, Sigmoid, Tanh, LeakyRelu, Elu, Selu, Celu, Gelu, HardSigmoid,
HardSwish, Mish, Softplus, Softsign, ThresholdedRelu, PRelu, Shrink, Swish, SwiGLU, Softmax/LogSoftmax/Hardmax
(opset 13 and the 2-D-coercing opsets 1-12), and Dropout (with its mask output).

The piecewise activations are written with ``tf.where`` on the reference's conditions, so the gradient at a kink
is the reference's (``x >= 0`` takes the linear branch of LeakyRelu/Elu/PRelu; HardSigmoid passes none at its
corners), where TensorFlow's fused kernels would pick the other side."""
from __future__ import annotations

import numpy as np
import tensorflow as tf

from d5.frameworks.tensorflow.operators import TFOp, register
from d5.frameworks.tensorflow.operators._helpers import static, static_shape
from d5.frameworks.tensorflow.tensors import broadcast_to_channels_last
from d5.ops.onnx_attributes import adopt, operator_attributes
from d5.ops.onnx_semantics import broadcast_shape, normalize_axis
from d5.ops.window_checks import (CoercedTo2D, check_dropout_ratio, check_float_input, check_swiglu_inputs,
                                  per_channel_slope)


class _Unary(TFOp):
    elementwise = True
    fn = staticmethod(tf.identity)

    def __call__(self, x):
        return type(self).fn(x)


class _WithAttributes(TFOp):
    elementwise = True

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes(type(self).__name__, attributes))


def _mish(x):
    return x * tf.tanh(tf.math.softplus(x))


def _hard_swish(x):
    # x * clip(x / 6 + 1/2, 0, 1) with the reference's slope x / 3 + 1/2 on all of [-3, 3].
    return tf.where(x < -3, tf.zeros((), x.dtype), tf.where(x > 3, x, x * (x / 6 + 0.5)))


@register("Relu")
class Relu(_Unary):
    fn = staticmethod(tf.nn.relu)


@register("Sigmoid")
class Sigmoid(_Unary):
    fn = staticmethod(tf.sigmoid)


@register("Tanh")
class Tanh(_Unary):
    fn = staticmethod(tf.tanh)


@register("Softplus")
class Softplus(_Unary):
    fn = staticmethod(tf.math.softplus)


@register("Softsign")
class Softsign(_Unary):
    fn = staticmethod(tf.nn.softsign)


@register("Mish")
class Mish(_Unary):
    fn = staticmethod(_mish)


@register("HardSwish")
class HardSwish(_Unary):
    fn = staticmethod(_hard_swish)


@register("LeakyRelu")
class LeakyRelu(_WithAttributes):
    def __call__(self, x):
        return tf.where(x >= 0, x, x * self.alpha)


@register("Elu")
class Elu(_WithAttributes):
    def __call__(self, x):
        # expm1 of min(x, 0): accurate near 0 and no overflow (nor NaN gradient) for large positive x.
        return tf.where(x >= 0, x, self.alpha * tf.math.expm1(tf.minimum(x, 0)))


@register("Celu")
class Celu(_WithAttributes):
    def __call__(self, x):
        return tf.where(x > 0, x, self.alpha * tf.math.expm1(tf.minimum(x, 0) / self.alpha))


@register("Selu")
class Selu(_WithAttributes):
    def __call__(self, x):
        return self.gamma * tf.where(x > 0, x, self.alpha * tf.math.expm1(tf.minimum(x, 0)))


@register("ThresholdedRelu")
class ThresholdedRelu(_WithAttributes):
    def __call__(self, x):
        return tf.where(x > self.alpha, x, tf.zeros((), x.dtype))


@register("Gelu")
class Gelu(_WithAttributes):
    def __call__(self, x):
        return tf.nn.gelu(x, approximate=self.approximate == "tanh")


@register("HardSigmoid")
class HardSigmoid(_WithAttributes):
    def __call__(self, x):
        linear = x * self.alpha + self.beta
        # Nested where, not clip_by_value: no gradient at the corners, as the reference.
        return tf.where(linear <= 0, tf.zeros((), x.dtype), tf.where(linear >= 1, tf.ones((), x.dtype), linear))


@register("PRelu")
class PRelu(TFOp):
    """``x`` where ``x >= 0``, ``slope * x`` elsewhere; the slope broadcasts against x (ONNX's unidirectional
    broadcasting; a 1-D slope of C values on an (N, C, ...) input applies per channel, as the reference).
    Channels-last inputs take the slope along their last axis (per channel) or permuted as the input was."""

    channels_last_inputs = (0,)
    channels_last_ranks = (3, 4, 5)

    def __call__(self, x, slope):
        x_shape, slope_shape = x.shape.as_list(), slope.shape.as_list()
        if per_channel_slope(x_shape, slope_shape):
            slope = tf.reshape(slope, [-1] + [1] * (len(x_shape) - 2))
        return self._apply(x, slope, x_shape, slope.shape.as_list())

    def channels_last(self, x, slope):
        x_shape, slope_shape = x.shape.as_list(), slope.shape.as_list()
        onnx_shape = [x_shape[0], x_shape[-1], *x_shape[1:-1]]
        if not per_channel_slope(onnx_shape, slope_shape):  # a per-channel (C,) slope already runs along the last axis
            broadcast_shape("PRelu", onnx_shape, slope_shape)
            slope = broadcast_to_channels_last(slope, len(x_shape))
        return self._apply(x, slope, x_shape, slope.shape.as_list())

    @staticmethod
    def _apply(x, slope, x_shape, slope_shape):
        broadcast_shape("PRelu", x_shape, slope_shape)
        if slope.dtype != x.dtype:
            slope = tf.cast(slope, x.dtype)
        return tf.where(x >= 0, x, x * slope)


@register("Shrink")
class Shrink(_WithAttributes):
    """``X + bias`` where ``X < -lambd``, ``X - bias`` where ``X > lambd``, 0 elsewhere (any numeric type; the
    bias in X's type, as the reference); gradient 1 outside ``[-lambd, lambd]``."""

    def __call__(self, x):
        if x.dtype.is_floating:
            bias, compare = tf.constant(self.bias, x.dtype), x
        else:  # NumPy's astype truncates the bias toward zero; X compares with the float thresholds in float64
            bias, compare = tf.constant(int(self.bias), x.dtype), tf.cast(x, tf.float64)
        zero = tf.zeros((), x.dtype)
        return tf.where(compare < -self.lambd, x + bias, tf.where(compare > self.lambd, x - bias, zero))


_NARROW_FLOATS = (tf.float16, tf.bfloat16)


def _swish(x, alpha: float):
    # tf.nn.silu is the fused alpha = 1 case.
    return tf.nn.silu(x) if alpha == 1.0 else x * tf.sigmoid(alpha * x)


@register("Swish")
class Swish(_WithAttributes):
    """``X * sigmoid(alpha * X)`` (SiLU for ``alpha=1``); computed in float32 for the narrow floats (as the
    reference)."""

    def __call__(self, x):
        if x.dtype in _NARROW_FLOATS:
            return tf.cast(_swish(tf.cast(x, tf.float32), self.alpha), x.dtype)
        return _swish(x, self.alpha)


@register("SwiGLU")
class SwiGLU(_WithAttributes):
    """``Swish_alpha(A) * B`` for A and B of one shape (no broadcasting)."""

    def __call__(self, a, b=None):
        check_swiglu_inputs(a.shape.as_list(), None if b is None else b.shape.as_list())
        if a.dtype != b.dtype or a.dtype in _NARROW_FLOATS:
            # The reference's compute type: float64 if either is, else float32; the result in A's type.
            compute = tf.float64 if tf.float64 in (a.dtype, b.dtype) else tf.float32
            return tf.cast(_swish(tf.cast(a, compute), self.alpha) * tf.cast(b, compute), a.dtype)
        return _swish(a, self.alpha) * b


# ------------------------------------------------------------------------------------- Softmax and kin

def _require_float(op_name: str, x) -> None:
    check_float_input(op_name, x.dtype.is_floating, x.dtype.name)


@register("Softmax", since=13)
class Softmax(TFOp):
    op_name = "Softmax"

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes(self.op_name, attributes, opset=13))

    def __call__(self, x):
        _require_float(self.op_name, x)
        return self._apply(x, normalize_axis(type(self).__name__, self.axis, x.shape.rank))

    def _apply(self, x, axis):
        if x.shape.num_elements() == 0:  # an empty tensor normalizes to an empty tensor
            return tf.identity(x)
        if x.dtype == tf.float16:
            # ONNX's expected float16 outputs round after each step (exp, sum, divide); a fused kernel
            # computing in float32 and rounding once can differ by one unit in the last place.
            e = tf.exp(x - tf.stop_gradient(tf.reduce_max(x, axis, keepdims=True)))
            return e / tf.reduce_sum(e, axis, keepdims=True)
        return tf.nn.softmax(x, axis)


@register("LogSoftmax", since=13)
class LogSoftmax(Softmax):
    op_name = "LogSoftmax"

    def _apply(self, x, axis):
        if x.shape.num_elements() == 0:
            return tf.identity(x)
        return tf.nn.log_softmax(x, axis)


@register("Hardmax", since=13)
class Hardmax(Softmax):
    """1 at the first maximum along ``axis``, 0 elsewhere; locally constant (no gradient)."""

    op_name = "Hardmax"

    def _apply(self, x, axis):
        if x.shape.num_elements() == 0:
            return tf.zeros_like(x)
        winner = tf.argmax(x, axis=axis)  # the first maximum, as numpy.argmax
        return tf.one_hot(winner, x.shape[axis], axis=axis, dtype=x.dtype)


class _CoercedTo2D(CoercedTo2D):
    """Opsets 1-12: the input coerced to 2-D at ``axis`` (default 1), each row normalized."""

    def __call__(self, x):
        _require_float(self.op_name, x)
        shape = static_shape(x)
        flat = tf.reshape(x, self.coerced_shape(shape))
        return tf.reshape(self._apply(flat, 1), shape)


@register("Softmax", since=1)
class Softmax1(_CoercedTo2D, Softmax):
    pass


@register("LogSoftmax", since=1)
class LogSoftmax1(_CoercedTo2D, LogSoftmax):
    pass


@register("Hardmax", since=1)
class Hardmax1(_CoercedTo2D, Hardmax):
    pass


# ------------------------------------------------------------------------------------------------ Dropout

#: Unseeded Dropouts draw their seeds from this fixed root, one child per instance (as the reference's), so a
#: network built in the same order draws the same masks.
_DEFAULT_SEEDS = np.random.SeedSequence(0)


def _known(value, kind):
    """A scalar input as a Python ``kind`` when known while tracing, else None (a tensor computed in the graph)."""
    known = static(value)
    return None if known is None else kind(np.asarray(known).reshape(-1)[0])


@register("Dropout")
class Dropout(TFOp):
    """Inverted dropout, active in training passes (``self.training``) or when the ``training_mode`` input is
    true, with ratio > 0; returns ``(output, mask)`` when the node names two outputs, else the output.

    The mask comes from a ``tf.random.Generator`` the op holds (a variable, so traced functions advance it):
    seeded by ``seed`` when given, else by a seed drawn from a fixed root per instance. Its stream differs from
    the reference's NumPy one; the deterministic cases (inactive, ratio 0) are identical. ``ratio`` and
    ``training_mode`` are read while tracing when they are constants, else computed in the graph."""

    elementwise = True  # the mask and output are elementwise and ratio/training_mode scalars

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("Dropout", attributes))
        seed = self.seed
        if seed is None:
            seed = int(_DEFAULT_SEEDS.spawn(1)[0].generate_state(1, np.uint64)[0])
        self._seed = seed % 2 ** 63
        with tf.init_scope():  # the generator's state variable is created eagerly, even inside a trace
            self._generator = tf.random.Generator.from_seed(self._seed)

    def reset_rng(self) -> None:
        """Restart the mask stream: the next call draws the same mask as the first one did."""
        self._generator.reset_from_seed(self._seed)

    def random_state(self) -> np.ndarray:
        """The generator's state (a small int64 array), for checkpoints."""
        return self._generator.state.numpy()

    def set_random_state(self, state) -> None:
        if state is not None:
            self._generator.state.assign(np.asarray(state, dtype=np.int64))

    def __call__(self, data, ratio=None, training_mode=None):
        rate = self.ratio if ratio is None else _known(ratio, float)
        if rate is not None:
            check_dropout_ratio(rate)
        mode = True if self.training else (False if training_mode is None else _known(training_mode, bool))
        want_mask = self.node_output_count is not None and self.node_output_count > 1
        if mode is False or rate == 0.0:
            output = tf.identity(data)
            mask = tf.ones(tf.shape(data), tf.bool) if want_mask else None
        else:
            output, mask = self._drop(data, ratio if rate is None else rate)
            if mode is None:  # training_mode only known when the graph runs
                active = tf.reshape(tf.cast(training_mode, tf.bool), [-1])[0]
                output = tf.where(active, output, data)
                mask = tf.logical_or(mask, tf.logical_not(active))
        return (output, mask) if want_mask else output

    def _drop(self, data, rate):
        noise = self._generator.uniform(tf.shape(data), dtype=tf.float32)
        if isinstance(rate, float):
            mask = noise >= rate
            output = data * tf.cast(mask, data.dtype)
            if rate < 1.0:
                output = output * tf.constant(1.0 / (1.0 - rate), data.dtype)
            return output, mask
        rate = tf.reshape(tf.cast(rate, tf.float32), [-1])[0]
        mask = noise >= rate
        scale = tf.where(rate < 1.0, 1.0 / (1.0 - rate), 1.0)
        return data * tf.cast(mask, data.dtype) * tf.cast(scale, data.dtype), mask
