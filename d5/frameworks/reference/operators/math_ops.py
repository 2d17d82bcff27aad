"""Reference math, comparison and logic operators (ONNX semantics, newest opset).

Clip, Gelu, Erf, Reciprocal, Floor, Ceil, Round, Sign, Min, Max, Sum, Mean, Equal, Less, Greater,
LessOrEqual, GreaterOrEqual, Not, And, Or, Xor, Sin, Cos, Tan, Asin, Acos, Atan, Sinh, Cosh, Asinh, Acosh, Atanh,
HardSigmoid, Softplus, Softsign, Selu, PRelu, Mod, IsNaN, IsInf. Binary and variadic operators broadcast as numpy
does; outputs keep the input's dtype (comparisons, logic and IsNaN/IsInf give bool and set
``differentiable = False``). Piecewise-constant operators (Floor, Ceil, Round, Sign) have a zero gradient, as in
PyTorch. Inverse trigonometric functions give NaN outside their domain (no warning).

>>> import numpy as np
>>> from d5.frameworks.reference.operators import create_operator
>>> x = np.array([-2.0, 0.5, 3.0], np.float32)
>>> create_operator("Clip", {}).forward([x, np.float32(0.0), np.float32(1.0)])
array([0. , 0.5, 1. ], dtype=float32)
>>> create_operator("Max", {}).forward([x, np.array(1.0, np.float32)])
array([1., 1., 3.], dtype=float32)
"""
from __future__ import annotations

import functools
import math
from typing import Any, Callable

import numpy as np
import scipy.special

from d5.errors import ShapeError
from d5.frameworks.reference.operators.elementwise import broadcast_error, ensure_array, unbroadcast
from d5.frameworks.reference.operators.registry import ReferenceOp, register


def _like(x: np.ndarray, result: Any) -> np.ndarray:
    """``result`` as an ndarray of ``x``'s dtype: Python floats next to 0-d float32 arrays promote to float64
    under numpy 1.x's value-based casting, and ufuncs return numpy scalars for 0-d inputs."""
    result = ensure_array(result)
    return result if result.dtype == x.dtype else result.astype(x.dtype)


def _scalar(x: np.ndarray, value: float) -> np.ndarray:
    return np.asarray(value, dtype=x.dtype)


def _is_float(array: Any) -> bool:
    return isinstance(array, np.ndarray) and np.issubdtype(array.dtype, np.floating)


# -------------------------------------------------------------------------------------------- unary

class _Unary(ReferenceOp):
    """``y = f(x)`` with ``dy/dx = derivative(x, y)``; subclasses set the two static functions."""

    function: Callable = None
    derivative: Callable | None = None

    def forward(self, inputs):
        x = inputs[0]
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return _like(x, type(self).function(x))

    def backward(self, grads, fwd_inputs, fwd_outputs):
        x, g = fwd_inputs[0], grads[0]
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return _like(x, g * type(self).derivative(x, fwd_outputs[0]))


def _unary(op_type: str, function: Callable, derivative: Callable | None, doc: str) -> type:
    cls = type(op_type, (_Unary,), {"function": staticmethod(function), "__doc__": doc,
                                     "derivative": staticmethod(derivative) if derivative else None})
    if derivative is None:
        cls.backward = lambda self, grads, fwd_inputs, fwd_outputs: np.zeros_like(grads[0])
    cls.__module__ = __name__
    return register(op_type)(cls)


_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)

Erf = _unary("Erf", scipy.special.erf, lambda x, y: _TWO_OVER_SQRT_PI * np.exp(-x * x), "The error function.")
Reciprocal = _unary("Reciprocal", np.reciprocal, lambda x, y: -(y * y), "``1 / X``.")
Sin = _unary("Sin", np.sin, lambda x, y: np.cos(x), "Sine.")
Cos = _unary("Cos", np.cos, lambda x, y: -np.sin(x), "Cosine.")
Tan = _unary("Tan", np.tan, lambda x, y: 1 + y * y, "Tangent.")
Asin = _unary("Asin", np.arcsin, lambda x, y: 1 / np.sqrt(1 - x * x), "Arcsine (NaN outside [-1, 1]).")
Acos = _unary("Acos", np.arccos, lambda x, y: -1 / np.sqrt(1 - x * x), "Arccosine (NaN outside [-1, 1]).")
Atan = _unary("Atan", np.arctan, lambda x, y: 1 / (1 + x * x), "Arctangent.")
Sinh = _unary("Sinh", np.sinh, lambda x, y: np.cosh(x), "Hyperbolic sine.")
Cosh = _unary("Cosh", np.cosh, lambda x, y: np.sinh(x), "Hyperbolic cosine.")
Asinh = _unary("Asinh", np.arcsinh, lambda x, y: 1 / np.sqrt(x * x + 1), "Inverse hyperbolic sine.")
Acosh = _unary("Acosh", np.arccosh, lambda x, y: 1 / np.sqrt(x * x - 1), "Inverse hyperbolic cosine (NaN below 1).")
Atanh = _unary("Atanh", np.arctanh, lambda x, y: 1 / (1 - x * x), "Inverse hyperbolic tangent (NaN outside [-1, 1]).")
Softplus = _unary("Softplus", lambda x: np.logaddexp(_scalar(x, 0), x), lambda x, y: scipy.special.expit(x),
                  "``log(1 + exp(X))``, computed without overflow.")
Softsign = _unary("Softsign", lambda x: x / (1 + np.abs(x)), lambda x, y: 1 / np.square(1 + np.abs(x)),
                  "``X / (1 + |X|)``.")
Floor = _unary("Floor", np.floor, None, "Round down (zero gradient).")
Ceil = _unary("Ceil", np.ceil, None, "Round up (zero gradient).")
Round = _unary("Round", np.round, None, "Round half to even (zero gradient).")
Sign = _unary("Sign", np.sign, None, "-1, 0 or 1 (zero gradient).")


@register("Gelu")
class Gelu(ReferenceOp):
    """``X * Phi(X)`` (``approximate='none'``) or its tanh approximation (``approximate='tanh'``)."""

    _C = math.sqrt(2.0 / math.pi)

    def __init__(self, approximate: Any = "none") -> None:
        super().__init__()
        approximate = approximate.decode() if isinstance(approximate, bytes) else str(approximate)
        if approximate not in ("none", "tanh"):
            raise ShapeError(f"Gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
        self.tanh = approximate == "tanh"

    def forward(self, inputs):
        x = inputs[0]
        if self.tanh:
            return _like(x, 0.5 * x * (1 + np.tanh(self._C * (x + 0.044715 * x ** 3))))
        return _like(x, 0.5 * x * (1 + scipy.special.erf(x / math.sqrt(2.0))))

    def backward(self, grads, fwd_inputs, fwd_outputs):
        x, g = fwd_inputs[0], grads[0]
        if self.tanh:
            t = np.tanh(self._C * (x + 0.044715 * x ** 3))
            slope = 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * self._C * (1 + 3 * 0.044715 * x * x)
        else:
            slope = 0.5 * (1 + scipy.special.erf(x / math.sqrt(2.0))) + x * np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
        return _like(x, g * slope)


@register("Clip")
class Clip(ReferenceOp):
    """``min(max(X, min), max)``; ``min``/``max`` are optional scalar inputs (attributes before opset 11).
    If min > max every element becomes max. The gradient passes where ``min <= X <= max``."""

    def __init__(self, min: float | None = None, max: float | None = None) -> None:  # noqa: A002 (ONNX names)
        super().__init__()
        self.low, self.high = min, max

    def _bounds(self, inputs) -> tuple[Any, Any]:
        x = inputs[0]
        low = inputs[1] if len(inputs) > 1 and inputs[1] is not None else self.low
        high = inputs[2] if len(inputs) > 2 and inputs[2] is not None else self.high
        for name, bound in (("min", low), ("max", high)):
            if bound is not None and np.size(bound) != 1:
                raise ShapeError(f"Clip: {name} must be a scalar, got shape {np.shape(bound)}")
        as_x = lambda b: None if b is None else np.asarray(b).reshape(()).astype(x.dtype)  # noqa: E731
        return as_x(low), as_x(high)

    def forward(self, inputs):
        x = inputs[0]
        low, high = self._bounds(inputs)
        out = x if low is None else np.maximum(x, low)
        out = out if high is None else np.minimum(out, high)
        return ensure_array(out) if out is not x else x.copy()

    def backward(self, grads, fwd_inputs, fwd_outputs):
        x, g = fwd_inputs[0], grads[0]
        low, high = self._bounds(fwd_inputs)
        inside = np.ones(x.shape, dtype=bool)
        if low is not None:
            inside &= x >= low
        if high is not None:
            inside &= x <= high
        return (ensure_array(g * inside.astype(g.dtype)),) + (None,) * (len(fwd_inputs) - 1)


@register("HardSigmoid")
class HardSigmoid(ReferenceOp):
    """``max(0, min(1, alpha * X + beta))``."""

    def __init__(self, alpha: float = 0.2, beta: float = 0.5) -> None:
        super().__init__()
        self.alpha, self.beta = float(alpha), float(beta)

    def forward(self, inputs):
        x = inputs[0]
        return _like(x, np.clip(x * _scalar(x, self.alpha) + _scalar(x, self.beta), 0, 1))

    def backward(self, grads, fwd_inputs, fwd_outputs):
        x, g = fwd_inputs[0], grads[0]
        linear = x * self.alpha + self.beta
        return _like(x, g * self.alpha * ((linear > 0) & (linear < 1)))


@register("Selu")
class Selu(ReferenceOp):
    """``gamma * X`` for ``X > 0``, ``gamma * alpha * (exp(X) - 1)`` elsewhere."""

    def __init__(self, alpha: float = 1.67326319217681884765625, gamma: float = 1.05070102214813232421875) -> None:
        super().__init__()
        self.alpha, self.gamma = float(alpha), float(gamma)

    def forward(self, inputs):
        x = inputs[0]
        negative = self.alpha * np.expm1(np.minimum(x, 0))
        return _like(x, self.gamma * np.where(x > 0, x, negative))

    def backward(self, grads, fwd_inputs, fwd_outputs):
        x, g = fwd_inputs[0], grads[0]
        return _like(x, g * self.gamma * np.where(x > 0, 1.0, self.alpha * np.exp(np.minimum(x, 0))))


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
            return _like(x, np.where(x >= 0, x, x * slope))
        except ValueError:
            raise broadcast_error("PRelu", x, slope) from None

    def backward(self, grads, fwd_inputs, fwd_outputs):
        (x, given_slope), g = fwd_inputs, grads[0]
        slope = _channel_slope(x, given_slope)
        negative = x < 0
        grad_x = _like(x, np.where(negative, g * slope, g))
        grad_slope = None
        if _is_float(given_slope):
            grad = unbroadcast(ensure_array(np.where(negative, g * x, 0)), slope.shape)
            grad_slope = _like(given_slope, grad.reshape(np.shape(given_slope)))
        return grad_x, grad_slope


def _channel_slope(x: np.ndarray, slope: np.ndarray) -> np.ndarray:
    """``slope`` as it applies to ``x``: unchanged when numpy broadcasting works, else a per-channel (C,)
    slope reshaped to (C, 1, ..., 1)."""
    x, slope = np.asarray(x), np.asarray(slope)
    per_channel = (slope.ndim == 1 and x.ndim > 2 and x.shape[1] == slope.shape[0] != 1
                   and x.shape[-1] != slope.shape[0])
    return slope.reshape(-1, *(1,) * (x.ndim - 2)) if per_channel else slope


# ------------------------------------------------------------------------------------------ variadic

def _variadic(op_name: str, inputs, combine: Callable) -> np.ndarray:
    if not inputs:
        raise ShapeError(f"{op_name}: needs at least one input")
    try:
        return ensure_array(functools.reduce(combine, inputs))
    except ShapeError:
        raise
    except ValueError:
        raise broadcast_error(op_name, *inputs) from None


class _Extremum(ReferenceOp):
    """Elementwise Max/Min of any number of inputs; ties share the gradient equally (as PyTorch's maximum)."""

    combine: Callable = None
    op_name = ""

    def forward(self, inputs):
        out = _variadic(self.op_name, inputs, type(self).combine)
        return out if len(inputs) > 1 else out.copy()

    def backward(self, grads, fwd_inputs, fwd_outputs):
        g, out = grads[0], fwd_outputs[0]
        hits = [np.broadcast_to(x == out, out.shape) for x in fwd_inputs]
        count = np.sum(hits, axis=0)
        return tuple(_like(x, unbroadcast(ensure_array(g * hit / count), x.shape)) if _is_float(x) else None
                     for x, hit in zip(fwd_inputs, hits))


@register("Max")
class Max(_Extremum):
    """Elementwise maximum of the inputs (broadcast together)."""

    combine = staticmethod(np.maximum)
    op_name = "Max"


@register("Min")
class Min(_Extremum):
    """Elementwise minimum of the inputs (broadcast together)."""

    combine = staticmethod(np.minimum)
    op_name = "Min"


@register("Sum")
class Sum(ReferenceOp):
    """Elementwise sum of the inputs (broadcast together)."""

    def forward(self, inputs):
        out = _variadic("Sum", inputs, np.add)
        return out if len(inputs) > 1 else out.copy()

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return tuple(unbroadcast(grads[0], x.shape) for x in fwd_inputs)


@register("Mean")
class Mean(ReferenceOp):
    """Elementwise mean of the inputs (broadcast together)."""

    def forward(self, inputs):
        out = _variadic("Mean", inputs, np.add)
        return _like(inputs[0], out / _scalar(out, len(inputs)))

    def backward(self, grads, fwd_inputs, fwd_outputs):
        g = grads[0] / _scalar(grads[0], len(fwd_inputs))
        return tuple(unbroadcast(ensure_array(g), x.shape) for x in fwd_inputs)


# ------------------------------------------------------------------------------- comparisons and logic

class _Predicate(ReferenceOp):
    """An operator with a bool output: no gradient."""

    differentiable = False
    function: Callable = None
    op_name = ""

    def forward(self, inputs):
        try:
            return ensure_array(type(self).function(*inputs))
        except ShapeError:
            raise
        except ValueError:
            raise broadcast_error(self.op_name, *inputs) from None

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return (None,) * len(fwd_inputs)


def _predicate(op_type: str, function: Callable, doc: str) -> type:
    cls = type(op_type, (_Predicate,), {"function": staticmethod(function), "op_name": op_type, "__doc__": doc})
    cls.__module__ = __name__
    return register(op_type)(cls)


def _logical(function: Callable) -> Callable:
    def apply(*inputs):
        if any(x.dtype != np.bool_ for x in inputs):
            raise ShapeError(f"logical operators take bool tensors, got {[str(x.dtype) for x in inputs]}; Cast first")
        return function(*inputs)
    return apply


# `==` rather than np.equal: it also compares string (object) tensors elementwise.
Equal = _predicate("Equal", lambda a, b: np.asarray(a == b, dtype=bool), "``A == B`` (bool).")
Less = _predicate("Less", np.less, "``A < B`` (bool).")
Greater = _predicate("Greater", np.greater, "``A > B`` (bool).")
LessOrEqual = _predicate("LessOrEqual", np.less_equal, "``A <= B`` (bool).")
GreaterOrEqual = _predicate("GreaterOrEqual", np.greater_equal, "``A >= B`` (bool).")
Not = _predicate("Not", _logical(np.logical_not), "Logical not of a bool tensor.")
And = _predicate("And", _logical(np.logical_and), "Logical and of bool tensors.")
Or = _predicate("Or", _logical(np.logical_or), "Logical or of bool tensors.")
Xor = _predicate("Xor", _logical(np.logical_xor), "Logical exclusive or of bool tensors.")
IsNaN = _predicate("IsNaN", np.isnan, "True where the input is NaN.")


@register("IsInf")
class IsInf(_Predicate):
    """True where the input is +inf (if ``detect_positive``) or -inf (if ``detect_negative``)."""

    op_name = "IsInf"

    def __init__(self, detect_negative: int = 1, detect_positive: int = 1) -> None:
        super().__init__()
        self.negative, self.positive = bool(detect_negative), bool(detect_positive)

    def forward(self, inputs):
        x = inputs[0]
        return ensure_array((np.isposinf(x) & self.positive) | (np.isneginf(x) & self.negative))


@register("Mod")
class Mod(ReferenceOp):
    """Remainder: with the sign of the divisor (``fmod=0``, as Python's %) or of the dividend (``fmod=1``, as
    C's fmod). Integer division by zero gives 0."""

    def __init__(self, fmod: int = 0) -> None:
        super().__init__()
        self.fmod = bool(fmod)

    def forward(self, inputs):
        a, b = inputs[0], inputs[1]
        with np.errstate(divide="ignore", invalid="ignore"):
            try:
                return _like(a, (np.fmod if self.fmod else np.mod)(a, b))
            except ValueError:
                raise broadcast_error("Mod", a, b) from None

    def backward(self, grads, fwd_inputs, fwd_outputs):
        (a, b), g = fwd_inputs, grads[0]
        if not _is_float(a):
            return None, None
        # a = q * b + r with q = trunc(a / b) (fmod) or floor(a / b): dr/da = 1, dr/db = -q.
        quotient = np.trunc(a / b) if self.fmod else np.floor(a / b)
        return _like(a, unbroadcast(ensure_array(g), a.shape)), _like(b, unbroadcast(ensure_array(-g * quotient), b.shape))
