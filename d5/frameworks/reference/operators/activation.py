"""Reference activations (ONNX semantics, newest opset): Relu, Sigmoid, Tanh, LeakyRelu, Elu, Selu, Celu, Gelu,
HardSigmoid, HardSwish, Mish, Softplus, Softsign, ThresholdedRelu, Shrink, PRelu, Swish, SwiGLU, Softmax,
LogSoftmax, Hardmax and Dropout.

Dropout is filed here rather than with the normalizations: it masks activations and has no statistics.
Outputs keep the input's float dtype. Softmax and LogSoftmax use opset-13 semantics (normalize along one
``axis``, default -1) and subtract the maximum first so large inputs cannot overflow. Hardmax's one-hot output
is locally constant (``gradient = Gradient.ZERO``).

>>> import numpy as np
>>> from d5.frameworks.reference.operators import create_operator
>>> create_operator("Softmax", {"axis": -1}).forward([np.array([[0.0, np.log(3.0)]])]).round(3)
array([[0.25, 0.75]])
"""
from __future__ import annotations

import math

import numpy as np
import scipy.special

from d5.errors import ShapeError
from d5.frameworks.reference.operators import ReferenceOp, register
from d5.frameworks.reference.operators._checks import float_compute_dtype, require_rank, scalar_input
from d5.frameworks.reference.operators.elementwise import (UnaryOp, as_dtype_of, broadcast_error, ensure_array,
                                                           is_float, scalar_like, unbroadcast)
from d5.ops.onnx_attributes import adopt, operator_attributes
from d5.ops.onnx_semantics import normalize_axis, optional_input
from d5.ops.operator import Gradient
from d5.ops.window_checks import (CoercedTo2D, check_dropout_ratio, check_float_input, check_swiglu_inputs,
                                  per_channel_slope)


def require_float(op_name: str, x) -> np.ndarray:
    """``x`` if it is a floating-point tensor (bfloat16 included), else a ShapeError naming the operator:
    Softmax-like operators are defined on floats only, and NumPy's error for an integer input (a failed cast
    inside exp) says nothing useful. Validation catches this wherever the input's type is known in advance.

    >>> require_float("Softmax", np.array([1, 2]))
    Traceback (most recent call last):
    ...
    d5.errors.ShapeError: Softmax takes a floating-point tensor (float16, float32, float64 or bfloat16), got int64; Cast it first
    """
    dtype = getattr(x, "dtype", None)
    check_float_input(op_name, dtype is not None and (dtype.kind == "f" or dtype.name == "bfloat16"),
                      dtype if dtype is not None else type(x).__name__)
    return x


def log_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    """``x - logsumexp(x, axis)``, computed stably, in ``x``'s dtype (a new array).

    >>> log_softmax(np.array([1000.0, 1000.0]), 0).round(4)
    array([-0.6931, -0.6931])
    """
    if x.size == 0:  # an empty tensor normalizes to an empty tensor (max of an empty axis would raise)
        return x.copy()
    out = x - x.max(axis=axis, keepdims=True)
    # out is a fresh array, so the exp can go into a scratch buffer and the subtraction in place.
    out -= np.log(np.exp(out).sum(axis=axis, keepdims=True))
    return out


@register("Relu")
class Relu(ReferenceOp):
    """``max(X, 0)``; gradient 0 at 0."""

    def forward(self, inputs):
        x = inputs[0]
        return ensure_array(np.maximum(x, x.dtype.type(0)))

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return ensure_array(grads[0] * (fwd_outputs[0] > 0))


@register("Sigmoid")
class Sigmoid(ReferenceOp):
    """``1 / (1 + exp(-X))`` (scipy's expit: no overflow warnings for large negative inputs)."""

    def forward(self, inputs):
        return ensure_array(scipy.special.expit(inputs[0]))

    def backward(self, grads, fwd_inputs, fwd_outputs):
        out = fwd_outputs[0]
        grad = ensure_array(grads[0] * out)
        grad *= 1 - out
        return grad


@register("Tanh")
class Tanh(ReferenceOp):
    """Hyperbolic tangent."""

    def forward(self, inputs):
        return ensure_array(np.tanh(inputs[0]))

    def backward(self, grads, fwd_inputs, fwd_outputs):
        out = fwd_outputs[0]
        grad = ensure_array(out * out)
        # In place, with the 1 on the left of an out= call: for 0-d float32 arrays `1 - out` would be float64.
        np.subtract(1, grad, out=grad)
        grad *= grads[0]
        return grad


@register("LeakyRelu")
class LeakyRelu(ReferenceOp):
    """``X`` where ``X >= 0``, ``alpha * X`` elsewhere."""

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("LeakyRelu", attributes))

    def forward(self, inputs):
        x = inputs[0]
        return np.where(x >= 0, x, x * scalar_like(x, self.alpha))

    def backward(self, grads, fwd_inputs, fwd_outputs):
        g = grads[0]
        return np.where(fwd_inputs[0] >= 0, g, g * scalar_like(g, self.alpha))


@register("Elu")
class Elu(ReferenceOp):
    """``X`` where ``X >= 0``, ``alpha * (exp(X) - 1)`` elsewhere."""

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("Elu", attributes))

    def forward(self, inputs):
        x = inputs[0]
        # expm1 of min(x, 0): accurate near 0 and no overflow for large positive x.
        negative = ensure_array(np.expm1(np.minimum(x, x.dtype.type(0))))
        negative *= self.alpha
        return np.where(x >= 0, x, negative)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        g = grads[0]
        # For x < 0, d/dx alpha * (exp(x) - 1) = alpha * exp(x) = output + alpha.
        return np.where(fwd_inputs[0] >= 0, g, g * (fwd_outputs[0] + scalar_like(g, self.alpha)))


@register("Softmax", since=13)  # opsets 1-12: Softmax1
class Softmax(ReferenceOp):
    """``exp(X) / sum(exp(X))`` along ``axis`` (opset 13; default the last axis)."""

    op_name = "Softmax"

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes(self.op_name, attributes, opset=13))

    def forward(self, inputs):
        x = require_float("Softmax", inputs[0])
        axis = normalize_axis("Softmax", self.axis, x.ndim)
        if x.size == 0:  # as in log_softmax
            return x.copy()
        out = x - x.max(axis=axis, keepdims=True)
        np.exp(out, out=out)
        out /= out.sum(axis=axis, keepdims=True)
        return out

    def backward(self, grads, fwd_inputs, fwd_outputs):
        out, g = fwd_outputs[0], grads[0]
        axis = normalize_axis("Softmax", self.axis, out.ndim)
        grad = g * out
        # dx = y * (g - sum(g * y)) = g*y - y * sum(g*y): reuse the g*y buffer.
        grad -= out * grad.sum(axis=axis, keepdims=True)
        return grad


@register("LogSoftmax", since=13)  # opsets 1-12: LogSoftmax1
class LogSoftmax(ReferenceOp):
    """``X - log(sum(exp(X)))`` along ``axis`` (opset 13; default the last axis)."""

    op_name = "LogSoftmax"

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes(self.op_name, attributes, opset=13))

    def forward(self, inputs):
        x = require_float("LogSoftmax", inputs[0])
        return log_softmax(x, normalize_axis("LogSoftmax", self.axis, x.ndim))

    def backward(self, grads, fwd_inputs, fwd_outputs):
        out, g = fwd_outputs[0], grads[0]
        axis = normalize_axis("LogSoftmax", self.axis, out.ndim)
        grad = np.exp(out)
        grad *= g.sum(axis=axis, keepdims=True)
        np.subtract(g, grad, out=grad)
        return grad


@register("Dropout")
class Dropout(ReferenceOp):
    """Inverted dropout: in training, zero each element with probability ``ratio`` and scale the rest by
    ``1 / (1 - ratio)``; otherwise the identity.

    Inputs: ``data``, optional ``ratio`` (scalar, default 0.5, or the ``ratio`` attribute of opset < 12),
    optional ``training_mode`` (bool scalar).
    Outputs: ``output`` and ``mask`` (bool); both are always returned and executors bind the ones the
    node names. Dropout is active when ``self.training`` is set (by the executor) or ``training_mode``
    is true.

    Random numbers come from a generator seeded with ``seed``; without one, each Dropout instance gets
    its own stream from a fixed process-wide root (so a network built in the same order draws the same
    masks). :meth:`reset_rng` restarts the stream, which :func:`d5.ops.test_gradient` uses to make its
    repeated forwards draw the same mask.

    >>> import numpy as np
    >>> op = Dropout(seed=0)
    >>> op.training = True
    >>> out, mask = op.forward([np.ones(6, np.float32), np.array(0.5, np.float32)])
    >>> sorted(set(out.tolist()) | {0.0}) == [0.0, 2.0] and out.dtype == np.float32
    True
    """

    _default_seeds = np.random.SeedSequence(0)

    def __init__(self, **attributes) -> None:
        super().__init__()
        # seed, and ratio: an attribute before opset 12; an input (opset 12+) takes precedence.
        adopt(self, operator_attributes("Dropout", attributes))
        if self.seed is None:
            # Spawning is how SeedSequence hands out independent child streams; no global RNG is touched.
            self._seed_sequence = Dropout._default_seeds.spawn(1)[0]
        else:
            # ONNX seeds are any int64; SeedSequence takes non-negative ones, so -1 uses its two's complement.
            self._seed_sequence = np.random.SeedSequence(self.seed % 2 ** 64)
        self.reset_rng()

    def reset_rng(self) -> None:
        """Restart the random stream: the next forward draws the same mask as the first one did."""
        self._rng = np.random.default_rng(self._seed_sequence)

    def random_state(self) -> dict:
        """The mask stream's position (NumPy's bit-generator state), for checkpoints."""
        return self._rng.bit_generator.state

    def set_random_state(self, state: dict) -> None:
        self._rng.bit_generator.state = state

    def forward(self, inputs):
        data = inputs[0]
        ratio, active = self._ratio_and_active(inputs)
        if not active:
            return data, np.ones(data.shape, dtype=bool)
        # float32 uniforms are half the work of float64 and plenty to compare against a ratio.
        mask = ensure_array(self._rng.random(data.shape, dtype=np.float32) >= ratio)
        output = ensure_array(np.multiply(data, mask))
        if ratio < 1.0:
            output *= 1.0 / (1.0 - ratio)
        return output, mask

    def backward(self, grads, fwd_inputs, fwd_outputs):
        g = grads[0]
        ratio, active = self._ratio_and_active(fwd_inputs)
        if not active:
            grad = g
        else:
            grad = ensure_array(np.multiply(g, fwd_outputs[1]))
            if ratio < 1.0:
                grad *= 1.0 / (1.0 - ratio)
        return (grad,) + (None,) * (len(fwd_inputs) - 1)

    def _ratio_and_active(self, inputs) -> tuple[float, bool]:
        ratio, training_mode = optional_input(inputs, 1), optional_input(inputs, 2)
        ratio = self.ratio if ratio is None else scalar_input("Dropout", ratio, "input 'ratio'", float)
        check_dropout_ratio(ratio)
        training_mode = training_mode is not None and scalar_input("Dropout", training_mode, "input 'training_mode'", bool)
        return ratio, (self.training or training_mode) and ratio > 0.0


@register("Softplus")
class Softplus(UnaryOp):
    """``log(1 + exp(X))``, computed without overflow."""

    function = staticmethod(lambda x: np.logaddexp(scalar_like(x, 0), x))
    derivative = staticmethod(lambda x, y: scipy.special.expit(x))


@register("Softsign")
class Softsign(UnaryOp):
    """``X / (1 + |X|)``."""

    function = staticmethod(lambda x: x / (1 + np.abs(x)))
    derivative = staticmethod(lambda x, y: 1 / np.square(1 + np.abs(x)))


@register("Gelu")
class Gelu(ReferenceOp):
    """``X * Phi(X)`` (``approximate='none'``) or its tanh approximation (``approximate='tanh'``)."""

    _C = math.sqrt(2.0 / math.pi)

    def __init__(self, **attributes) -> None:
        super().__init__()
        self.tanh = operator_attributes("Gelu", attributes).approximate == "tanh"

    def forward(self, inputs):
        x = inputs[0]
        if self.tanh:
            return as_dtype_of(x, 0.5 * x * (1 + np.tanh(self._C * (x + 0.044715 * x ** 3))))
        return as_dtype_of(x, 0.5 * x * (1 + scipy.special.erf(x / math.sqrt(2.0))))

    def backward(self, grads, fwd_inputs, fwd_outputs):
        x, g = fwd_inputs[0], grads[0]
        if self.tanh:
            t = np.tanh(self._C * (x + 0.044715 * x ** 3))
            slope = 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * self._C * (1 + 3 * 0.044715 * x * x)
        else:
            slope = 0.5 * (1 + scipy.special.erf(x / math.sqrt(2.0))) + x * np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
        return as_dtype_of(x, g * slope)


@register("HardSigmoid")
class HardSigmoid(ReferenceOp):
    """``max(0, min(1, alpha * X + beta))``."""

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("HardSigmoid", attributes))

    def forward(self, inputs):
        x = inputs[0]
        return as_dtype_of(x, np.clip(x * scalar_like(x, self.alpha) + scalar_like(x, self.beta), 0, 1))

    def backward(self, grads, fwd_inputs, fwd_outputs):
        x, g = fwd_inputs[0], grads[0]
        linear = x * self.alpha + self.beta
        return as_dtype_of(x, g * self.alpha * ((linear > 0) & (linear < 1)))


@register("Selu")
class Selu(ReferenceOp):
    """``gamma * X`` for ``X > 0``, ``gamma * alpha * (exp(X) - 1)`` elsewhere."""

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("Selu", attributes))

    def forward(self, inputs):
        x = inputs[0]
        negative = self.alpha * np.expm1(np.minimum(x, 0))
        return as_dtype_of(x, self.gamma * np.where(x > 0, x, negative))

    def backward(self, grads, fwd_inputs, fwd_outputs):
        x, g = fwd_inputs[0], grads[0]
        return as_dtype_of(x, g * self.gamma * np.where(x > 0, 1.0, self.alpha * np.exp(np.minimum(x, 0))))


@register("PRelu")
class PRelu(ReferenceOp):
    """``X`` where ``X >= 0``, ``slope * X`` elsewhere; ``slope`` broadcasts to ``X`` (and is learnable).

    A 1-D slope of C values that does not broadcast (numpy aligns it with X's last axis) is taken per channel,
    along axis 1: PRelu before opset 7 and PyTorch's ``nn.PReLU(C)`` exports mean exactly that.

    >>> import numpy as np
    >>> PRelu().forward([-np.ones((1, 2, 3)), np.array([0.1, 0.2])])[0, :, 0].tolist()
    [-0.1, -0.2]
    """

    def forward(self, inputs):
        x, slope = inputs[0], _channel_slope(*inputs[:2])
        try:
            return as_dtype_of(x, np.where(x >= 0, x, x * slope))
        except ValueError:
            raise broadcast_error("PRelu", x, slope) from None

    def backward(self, grads, fwd_inputs, fwd_outputs):
        (x, given_slope), g = fwd_inputs, grads[0]
        slope = _channel_slope(x, given_slope)
        negative = x < 0
        grad_x = as_dtype_of(x, np.where(negative, g * slope, g))
        grad_slope = None
        if is_float(given_slope):
            grad = unbroadcast(ensure_array(np.where(negative, g * x, 0)), slope.shape)
            grad_slope = as_dtype_of(given_slope, grad.reshape(np.shape(given_slope)))
        return grad_x, grad_slope


def _channel_slope(x: np.ndarray, slope: np.ndarray) -> np.ndarray:
    """``slope`` as it applies to ``x``: unchanged when numpy broadcasting works, else a per-channel (C,)
    slope reshaped to (C, 1, ..., 1)."""
    x, slope = np.asarray(x), np.asarray(slope)
    return slope.reshape(-1, *(1,) * (x.ndim - 2)) if per_channel_slope(x.shape, slope.shape) else slope


@register("Celu")
class Celu(ReferenceOp):
    """``max(0, x) + min(0, alpha * (exp(x / alpha) - 1))``."""

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("Celu", attributes))

    def forward(self, inputs):
        x = inputs[0]
        return (np.maximum(0, x) + np.minimum(0, self.alpha * np.expm1(x / self.alpha))).astype(x.dtype)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        x = fwd_inputs[0]
        return (grads[0] * np.where(x > 0, 1.0, np.exp(np.minimum(x, 0) / self.alpha))).astype(grads[0].dtype)


@register("ThresholdedRelu")
class ThresholdedRelu(ReferenceOp):
    """``x`` where ``x > alpha``, else 0."""

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("ThresholdedRelu", attributes))

    def forward(self, inputs):
        x = inputs[0]
        return np.where(x > self.alpha, x, 0).astype(x.dtype)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return np.where(fwd_inputs[0] > self.alpha, grads[0], 0).astype(grads[0].dtype)


@register("HardSwish")
class HardSwish(ReferenceOp):
    """``x * clip(x / 6 + 0.5, 0, 1)``."""

    def forward(self, inputs):
        x = inputs[0]
        return (x * np.clip(x / 6 + 0.5, 0, 1)).astype(x.dtype)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        x = fwd_inputs[0]
        slope = np.where(x < -3, 0.0, np.where(x > 3, 1.0, x / 3 + 0.5))
        return (grads[0] * slope).astype(grads[0].dtype)


@register("Mish")
class Mish(ReferenceOp):
    """``x * tanh(softplus(x))``."""

    def forward(self, inputs):
        x = inputs[0]
        return (x * np.tanh(np.logaddexp(0, x))).astype(x.dtype)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        x = fwd_inputs[0]
        t = np.tanh(np.logaddexp(0, x))
        sigmoid = 0.5 * (1 + np.tanh(0.5 * x))
        return (grads[0] * (t + x * (1 - t * t) * sigmoid)).astype(grads[0].dtype)


@register("Shrink")
class Shrink(ReferenceOp):
    """``X + bias`` where ``X < -lambd``, ``X - bias`` where ``X > lambd``, 0 elsewhere; gradient 1 outside
    ``[-lambd, lambd]``.

    >>> Shrink(lambd=1.0, bias=0.5).forward([np.array([-2.0, 0.5, 2.0], np.float32)])
    array([-1.5,  0. ,  1.5], dtype=float32)
    """

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("Shrink", attributes))

    def forward(self, inputs):
        x = inputs[0]
        bias = np.asarray(self.bias).astype(x.dtype)
        zero = np.zeros((), x.dtype)
        out = np.where(x < -self.lambd, x + bias, np.where(x > self.lambd, x - bias, zero))
        return ensure_array(out).astype(x.dtype)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        x, g = fwd_inputs[0], grads[0]
        return ensure_array(g * (np.abs(x) > self.lambd).astype(g.dtype))


def _sigmoid(x: np.ndarray, alpha: float) -> np.ndarray:
    return scipy.special.expit(alpha * x)


@register("Swish")
class Swish(ReferenceOp):
    """``X * sigmoid(alpha * X)`` (SiLU for ``alpha=1``).

    >>> import numpy as np
    >>> Swish().forward([np.array([0.0, 1.0])]).round(4).tolist()
    [0.0, 0.7311]
    """

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("Swish", attributes))

    def forward(self, inputs):
        x = np.asarray(inputs[0])
        xc = x.astype(float_compute_dtype(x), copy=False)
        return (xc * _sigmoid(xc, self.alpha)).astype(x.dtype, copy=False)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        x = np.asarray(fwd_inputs[0])
        xc = x.astype(float_compute_dtype(x), copy=False)
        s = _sigmoid(xc, self.alpha)
        return (np.asarray(grads[0]) * (s + self.alpha * xc * s * (1 - s))).astype(x.dtype, copy=False)


@register("SwiGLU")
class SwiGLU(ReferenceOp):
    """``Swish_alpha(A) * B`` for A and B of one shape (no broadcasting).

    >>> import numpy as np
    >>> SwiGLU().forward([np.array([1.0]), np.array([2.0])]).round(4).tolist()
    [1.4621]
    """

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("SwiGLU", attributes))

    def _prepare(self, inputs):
        if len(inputs) != 2 or inputs[0] is None or inputs[1] is None:
            raise ShapeError(f"SwiGLU: expected inputs (A, B), got {len(inputs)}")
        a, b = np.asarray(inputs[0]), np.asarray(inputs[1])
        check_swiglu_inputs(a.shape, b.shape)
        dtype = float_compute_dtype(a, b)
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


@register("Hardmax", since=13)  # opsets 1-12: Hardmax1
class Hardmax(ReferenceOp):
    """1 at the first maximum along ``axis`` (opset 13 semantics), 0 elsewhere."""

    gradient = Gradient.ZERO  # a one-hot of the argmax: locally constant

    op_name = "Hardmax"

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes(self.op_name, attributes, opset=13))

    def forward(self, inputs):
        x = require_rank("Hardmax", require_float("Hardmax", inputs[0]), "input", at_least=1)
        axis = normalize_axis("Hardmax", self.axis, x.ndim)
        if x.size == 0:  # nothing to mark (argmax of an empty axis is undefined)
            return np.zeros_like(x)
        winner = np.expand_dims(np.argmax(x, axis=axis), axis)
        out = np.zeros_like(x)
        np.put_along_axis(out, winner, 1, axis=axis)
        return out


# ------------------------------------------------------------------ opsets 1-12 (versions by opset)
class _CoercedTo2D(CoercedTo2D):
    """Mixin for the opset 1-12 versions of Softmax, LogSoftmax and Hardmax. Before opset 13 they coerce the
    input to 2-D at ``axis`` (default 1), ``[prod(shape[:axis]), prod(shape[axis:])]``, and normalize each row;
    from 13 on they work along the one axis ``axis`` (default -1). So the old version is the newest one (the
    next class in the MRO) applied along the last axis of that 2-D view.

    >>> x = np.arange(8, dtype=np.float64).reshape(2, 2, 2)
    >>> round(float(Softmax1().forward([x]).sum()), 6), round(float(Softmax().forward([x]).sum()), 6)
    (2.0, 4.0)
    """

    def _as_2d(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x)
        return x.reshape(self.coerced_shape(x.shape))

    def forward(self, inputs):
        x = np.asarray(inputs[0])
        return super().forward([self._as_2d(x)]).reshape(x.shape)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        x, out = np.asarray(fwd_inputs[0]), np.asarray(fwd_outputs[0])
        grad = super().backward([self._as_2d(grads[0])], [self._as_2d(x)], [self._as_2d(out)])
        return np.asarray(grad).reshape(x.shape)


@register("Softmax", since=1)
class Softmax1(_CoercedTo2D, Softmax):
    """Softmax of opsets 1-12: over the input coerced to 2-D at ``axis`` (default 1)."""


@register("LogSoftmax", since=1)
class LogSoftmax1(_CoercedTo2D, LogSoftmax):
    """LogSoftmax of opsets 1-12: over the input coerced to 2-D at ``axis`` (default 1)."""


@register("Hardmax", since=1)
class Hardmax1(_CoercedTo2D, Hardmax):
    """Hardmax of opsets 1-12: 1 at the first maximum of each row of the input coerced to 2-D at ``axis``
    (default 1); no gradient (locally constant), as the newest version."""
