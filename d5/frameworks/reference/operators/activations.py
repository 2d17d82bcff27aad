"""Reference activations: Relu, Sigmoid, Tanh, LeakyRelu, Elu, Softmax, LogSoftmax, Dropout (ONNX semantics).

Outputs keep the input's float dtype. Softmax and LogSoftmax use opset-13 semantics (normalize along one
``axis``, default -1) and subtract the maximum first so large inputs cannot overflow.

>>> import numpy as np
>>> from d5.frameworks.reference.operators import create_operator
>>> create_operator("Softmax", {"axis": -1}).forward([np.array([[0.0, np.log(3.0)]])]).round(3)
array([[0.25, 0.75]])
"""
from __future__ import annotations

import numpy as np
import scipy.special

from d5.errors import ShapeError
from d5.frameworks.reference.operators.elementwise import ensure_array
from d5.frameworks.reference.operators.registry import ReferenceOp, register


def normalize_axis(op_name: str, axis: int, ndim: int) -> int:
    """``axis`` in ``[-ndim, ndim)`` as a non-negative index, or a ShapeError naming the operator."""
    if not -ndim <= axis < ndim:
        raise ShapeError(f"{op_name}: axis {axis} is out of range for a {ndim}-D input; use an axis in [{-ndim}, {ndim})")
    return axis % ndim


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
    if dtype is None or not (dtype.kind == "f" or dtype.name == "bfloat16"):
        found = dtype if dtype is not None else type(x).__name__
        raise ShapeError(f"{op_name} takes a floating-point tensor (float16, float32, float64 or bfloat16), got "
                         f"{found}; Cast it first")
    return x


def _like(array: np.ndarray, value: float) -> np.ndarray:
    # A Python float next to a 0-d float32 array promotes the result to float64 (numpy 1.x value-based
    # casting treats 0-d arrays as scalars); a 0-d array of the same dtype does not.
    return np.asarray(value, dtype=array.dtype)


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

    def __init__(self, alpha: float = 0.01) -> None:
        super().__init__()
        self.alpha = float(alpha)

    def forward(self, inputs):
        x = inputs[0]
        return np.where(x >= 0, x, x * _like(x, self.alpha))

    def backward(self, grads, fwd_inputs, fwd_outputs):
        g = grads[0]
        return np.where(fwd_inputs[0] >= 0, g, g * _like(g, self.alpha))


@register("Elu")
class Elu(ReferenceOp):
    """``X`` where ``X >= 0``, ``alpha * (exp(X) - 1)`` elsewhere."""

    def __init__(self, alpha: float = 1.0) -> None:
        super().__init__()
        self.alpha = float(alpha)

    def forward(self, inputs):
        x = inputs[0]
        # expm1 of min(x, 0): accurate near 0 and no overflow for large positive x.
        negative = ensure_array(np.expm1(np.minimum(x, x.dtype.type(0))))
        negative *= self.alpha
        return np.where(x >= 0, x, negative)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        g = grads[0]
        # For x < 0, d/dx alpha * (exp(x) - 1) = alpha * exp(x) = output + alpha.
        return np.where(fwd_inputs[0] >= 0, g, g * (fwd_outputs[0] + _like(g, self.alpha)))


@register("Softmax")
class Softmax(ReferenceOp):
    """``exp(X) / sum(exp(X))`` along ``axis`` (opset 13; default the last axis)."""

    def __init__(self, axis: int = -1) -> None:
        super().__init__()
        self.axis = int(axis)

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


@register("LogSoftmax")
class LogSoftmax(ReferenceOp):
    """``X - log(sum(exp(X)))`` along ``axis`` (opset 13; default the last axis)."""

    def __init__(self, axis: int = -1) -> None:
        super().__init__()
        self.axis = int(axis)

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

    def __init__(self, seed: int | None = None, ratio: float | None = None) -> None:
        super().__init__()
        self.seed = seed
        # Before opset 12 the ratio was an attribute; an input (opset 12+) takes precedence.
        self.default_ratio = 0.5 if ratio is None else float(ratio)
        if seed is None:
            # Spawning is how SeedSequence hands out independent child streams; no global RNG is touched.
            self._seed_sequence = Dropout._default_seeds.spawn(1)[0]
        else:
            # ONNX seeds are any int64; SeedSequence takes non-negative ones, so -1 uses its two's complement.
            self._seed_sequence = np.random.SeedSequence(int(seed) % 2 ** 64)
        self.reset_rng()

    def reset_rng(self) -> None:
        """Restart the random stream: the next forward draws the same mask as the first one did."""
        self._rng = np.random.default_rng(self._seed_sequence)

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
        ratio = self.default_ratio if len(inputs) < 2 or inputs[1] is None else _scalar("ratio", inputs[1])
        if not 0.0 <= ratio <= 1.0:
            raise ShapeError(f"Dropout: ratio must be in [0, 1], got {ratio}; pass the drop probability")
        training_mode = len(inputs) >= 3 and inputs[2] is not None and bool(_scalar("training_mode", inputs[2]))
        return ratio, (self.training or training_mode) and ratio > 0.0


def _scalar(name: str, value) -> float:
    value = np.asarray(value)
    if value.size != 1:
        raise ShapeError(f"Dropout: input {name!r} must be a scalar, got shape {value.shape}")
    return float(value.reshape(()))
