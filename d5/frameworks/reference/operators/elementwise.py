"""Reference elementwise operators (ONNX semantics, newest opset).

- arithmetic: Add, Sub, Mul, Div, Mod, Pow, Neg, Abs, Reciprocal; Clip; variadic Max, Min, Sum, Mean;
- math functions: Exp, Log, Sqrt, Erf, Sin, Cos, Tan, Asin, Acos, Atan, Sinh, Cosh, Asinh, Acosh, Atanh, and
  the piecewise-constant Floor, Ceil, Round, Sign (zero gradient, as in PyTorch);
- comparisons and logic (bool outputs, no gradient): Equal, Less, Greater, LessOrEqual, GreaterOrEqual, Not,
  And, Or, Xor, IsNaN, IsInf;
- bits (integer outputs, no gradient): BitShift, BitwiseAnd, BitwiseOr, BitwiseXor, BitwiseNot, BitCast;
- types and selection: Cast, CastLike, Where.

Binary and variadic operators broadcast as numpy does (:func:`d5.ops.onnx_semantics.unbroadcast_axes` gives the
axes their gradients sum over); outputs keep the input's dtype. Inverse trigonometric functions give NaN
outside their domain (no warning). Gradients handed back may be views of (or the same object as) the incoming
gradient: executors treat gradients as read-only and accumulate out of place.

>>> import numpy as np
>>> from d5.frameworks.reference.operators import create_operator
>>> add = create_operator("Add", {})
>>> add.forward([np.ones((2, 3), np.float32), np.arange(3, dtype=np.float32)])
array([[1., 2., 3.],
       [1., 2., 3.]], dtype=float32)
>>> grad_a, grad_b = add.backward([np.ones((2, 3), np.float32)], [np.ones((2, 3)), np.ones(3)], [None])
>>> grad_b
array([2., 2., 2.], dtype=float32)
>>> x = np.array([-2.0, 0.5, 3.0], np.float32)
>>> create_operator("Clip", {}).forward([x, np.float32(0.0), np.float32(1.0)])
array([0. , 0.5, 1. ], dtype=float32)
>>> create_operator("BitShift", {"direction": "LEFT"}).forward([np.array([1, 2], np.uint8), np.array([1, 3], np.uint8)])
array([ 2, 16], dtype=uint8)
"""
from __future__ import annotations

import functools
import math
from typing import Any, Callable

import numpy as np
import scipy.special

from d5.errors import ShapeError, UnsupportedOperatorError
from d5.frameworks.reference.operators import ReferenceOp, register
from d5.frameworks.reference.operators._checks import onnx_dtype, require_integer
from d5.ops.onnx_attributes import adopt, operator_attributes
from d5.ops.onnx_semantics import not_broadcastable, unbroadcast_axes
from d5.ops.operator import Gradient


def ensure_array(value) -> np.ndarray:
    """``value`` as an ndarray: numpy ufuncs turn 0-d array inputs into numpy scalars, which executors and
    ``.shape``-less consumers must not see. Free for arrays (the common case)."""
    return value if type(value) is np.ndarray else np.asarray(value)


def unbroadcast(grad: np.ndarray, shape: tuple) -> np.ndarray:
    """Sum ``grad`` (shaped like a broadcast result) back down to an input of ``shape``.

    Numpy broadcasting prepends axes and stretches axes of length 1; the gradient of a broadcast input
    is the sum over exactly those axes. Returns ``grad`` itself when no reduction is needed.

    >>> unbroadcast(np.ones((4, 2, 3)), (2, 1)).tolist()
    [[12.0], [12.0]]
    """
    shape = tuple(shape)
    if grad.shape == shape:
        return ensure_array(grad)
    return grad.sum(axis=unbroadcast_axes(grad.shape, shape)).reshape(shape)


def broadcast_error(op_name: str, *arrays: np.ndarray) -> ShapeError:
    """The ShapeError for inputs whose shapes do not broadcast together."""
    return not_broadcastable(op_name, *(np.shape(a) for a in arrays))


def as_dtype_of(x: np.ndarray, result: Any) -> np.ndarray:
    """``result`` as an ndarray of ``x``'s dtype: Python floats next to 0-d float32 arrays promote to float64
    under numpy 1.x's value-based casting, and ufuncs return numpy scalars for 0-d inputs."""
    result = ensure_array(result)
    return result if result.dtype == x.dtype else result.astype(x.dtype)


def scalar_like(x: np.ndarray, value: float) -> np.ndarray:
    """``value`` as a 0-d array of ``x``'s dtype. A Python float next to a 0-d float32 array promotes the result
    to float64 (numpy 1.x value-based casting treats 0-d arrays as scalars); a 0-d array of the same dtype
    does not."""
    return np.asarray(value, dtype=x.dtype)


def is_float(array: Any) -> bool:
    """Whether ``array`` is a floating-point ndarray (one that can carry a gradient)."""
    return isinstance(array, np.ndarray) and np.issubdtype(array.dtype, np.floating)


def _binary(op_name: str, function: Callable, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    try:
        return ensure_array(function(a, b))
    except ValueError:
        # Only reached on error, so the hot path pays no shape check of its own.
        raise broadcast_error(op_name, a, b) from None


@register("Add")
class Add(ReferenceOp):
    """``A + B`` with numpy broadcasting."""

    def forward(self, inputs):
        return _binary("Add", np.add, inputs[0], inputs[1])

    def backward(self, grads, fwd_inputs, fwd_outputs):
        g = grads[0]
        return unbroadcast(g, fwd_inputs[0].shape), unbroadcast(g, fwd_inputs[1].shape)


@register("Sub")
class Sub(ReferenceOp):
    """``A - B`` with numpy broadcasting."""

    def forward(self, inputs):
        return _binary("Sub", np.subtract, inputs[0], inputs[1])

    def backward(self, grads, fwd_inputs, fwd_outputs):
        g = grads[0]
        return unbroadcast(g, fwd_inputs[0].shape), np.negative(unbroadcast(g, fwd_inputs[1].shape))


@register("Mul")
class Mul(ReferenceOp):
    """``A * B`` with numpy broadcasting."""

    def forward(self, inputs):
        return _binary("Mul", np.multiply, inputs[0], inputs[1])

    def backward(self, grads, fwd_inputs, fwd_outputs):
        g, (a, b) = grads[0], fwd_inputs
        return unbroadcast(g * b, a.shape), unbroadcast(g * a, b.shape)


@register("Div")
class Div(ReferenceOp):
    """``A / B`` with numpy broadcasting (true division for floats)."""

    def forward(self, inputs):
        a, b = inputs[0], inputs[1]
        if np.issubdtype(a.dtype, np.integer) and np.issubdtype(b.dtype, np.integer):
            return _binary("Div", _truncating_divide, a, b)
        return _binary("Div", np.true_divide, a, b)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        (a, b), out = fwd_inputs, fwd_outputs[0]
        grad_a = ensure_array(grads[0] / b)
        # d(a/b)/db = -a / b**2 = -(a/b) / b, so reuse the forward output instead of squaring b.
        grad_b = ensure_array(np.multiply(grad_a, out))
        np.negative(grad_b, out=grad_b)
        return unbroadcast(grad_a, a.shape), unbroadcast(grad_b, b.shape)


def _truncating_divide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    # ONNX integer Div truncates toward zero (as C does); numpy's // floors.
    quotient = np.floor_divide(a, b)
    if np.issubdtype(quotient.dtype, np.signedinteger):
        quotient += ((np.remainder(a, b) != 0) & ((a < 0) != (b < 0))).astype(quotient.dtype)
    return quotient


@register("Neg")
class Neg(ReferenceOp):
    """``-X``."""

    def forward(self, inputs):
        return ensure_array(np.negative(inputs[0]))

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return ensure_array(np.negative(grads[0]))


@register("Abs")
class Abs(ReferenceOp):
    """``|X|``; the gradient at 0 is 0 (the subgradient PyTorch uses)."""

    def forward(self, inputs):
        return ensure_array(np.abs(inputs[0]))

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return ensure_array(grads[0] * np.sign(fwd_inputs[0]))


@register("Exp")
class Exp(ReferenceOp):
    """``exp(X)``."""

    def forward(self, inputs):
        return ensure_array(np.exp(inputs[0]))

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return ensure_array(grads[0] * fwd_outputs[0])


@register("Log")
class Log(ReferenceOp):
    """Natural logarithm (NaN for negative inputs, -inf at 0, as in ONNX)."""

    def forward(self, inputs):
        with np.errstate(divide="ignore", invalid="ignore"):
            return ensure_array(np.log(inputs[0]))

    def backward(self, grads, fwd_inputs, fwd_outputs):
        with np.errstate(divide="ignore"):
            return ensure_array(grads[0] / fwd_inputs[0])


@register("Sqrt")
class Sqrt(ReferenceOp):
    """Square root (NaN for negative inputs, as in ONNX)."""

    def forward(self, inputs):
        with np.errstate(invalid="ignore"):
            return ensure_array(np.sqrt(inputs[0]))

    def backward(self, grads, fwd_inputs, fwd_outputs):
        with np.errstate(divide="ignore"):
            grad = ensure_array(grads[0] / fwd_outputs[0])
        grad *= 0.5
        return grad


@register("Pow")
class Pow(ReferenceOp):
    """``X ** Y`` with broadcasting; the output has X's dtype (an integer Y is converted to it).

    Edge cases follow PyTorch: the gradient for X is 0 where Y == 0, the gradient for Y is 0 where
    X == 0 and Y >= 0; an integer Y gets no gradient.
    """

    def forward(self, inputs):
        x, y = inputs[0], inputs[1]
        if y.dtype != x.dtype:
            y = y.astype(x.dtype)
        with np.errstate(divide="ignore", invalid="ignore"):
            return _binary("Pow", np.power, x, y)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        (x, y), out, g = fwd_inputs, fwd_outputs[0], grads[0]
        y_float = y if y.dtype == x.dtype else y.astype(x.dtype)
        with np.errstate(divide="ignore", invalid="ignore"):
            grad_x = g * y_float * np.power(x, y_float - 1)
            grad_x = np.where(y_float == 0, 0, grad_x).astype(grad_x.dtype, copy=False)
            grad_y = None
            if np.issubdtype(y.dtype, np.floating):
                grad_y = g * out * np.log(x)
                grad_y = np.where((x == 0) & (y >= 0), 0, grad_y).astype(grad_y.dtype, copy=False)
                grad_y = unbroadcast(grad_y, y.shape)
        # Python/0-d operands above may have promoted float32 to float64: hand back the inputs' dtypes.
        grad_x = unbroadcast(grad_x, x.shape).astype(x.dtype, copy=False)
        return grad_x, None if grad_y is None else grad_y.astype(y.dtype, copy=False)


# -------------------------------------------------------------------------------------------- unary

class UnaryOp(ReferenceOp):
    """``y = f(x)`` with ``dy/dx = derivative(x, y)``; subclasses set the two static functions."""

    function: Callable = None
    derivative: Callable | None = None

    def forward(self, inputs):
        x = inputs[0]
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return as_dtype_of(x, type(self).function(x))

    def backward(self, grads, fwd_inputs, fwd_outputs):
        x, g = fwd_inputs[0], grads[0]
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return as_dtype_of(x, g * type(self).derivative(x, fwd_outputs[0]))


def _unary(op_type: str, function: Callable, derivative: Callable | None, doc: str) -> type:
    cls = type(op_type, (UnaryOp,), {"function": staticmethod(function), "__doc__": doc,
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


Floor = _unary("Floor", np.floor, None, "Round down (zero gradient).")
Ceil = _unary("Ceil", np.ceil, None, "Round up (zero gradient).")
Round = _unary("Round", np.round, None, "Round half to even (zero gradient).")
Sign = _unary("Sign", np.sign, None, "-1, 0 or 1 (zero gradient).")


@register("Clip")
class Clip(ReferenceOp):
    """``min(max(X, min), max)``; ``min``/``max`` are optional scalar inputs (attributes before opset 11).
    If min > max every element becomes max. The gradient passes where ``min <= X <= max``."""

    def __init__(self, **attributes) -> None:
        super().__init__()
        self.low, self.high = operator_attributes("Clip", attributes)  # min, max

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
        return tuple(as_dtype_of(x, unbroadcast(ensure_array(g * hit / count), x.shape)) if is_float(x) else None
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
        return as_dtype_of(inputs[0], out / scalar_like(out, len(inputs)))

    def backward(self, grads, fwd_inputs, fwd_outputs):
        g = grads[0] / scalar_like(grads[0], len(fwd_inputs))
        return tuple(unbroadcast(ensure_array(g), x.shape) for x in fwd_inputs)


# ------------------------------------------------------------------------------- comparisons and logic

class _Predicate(ReferenceOp):
    """An operator with a bool output: no gradient."""

    gradient = Gradient.NONE
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

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("IsInf", attributes))

    def forward(self, inputs):
        x = inputs[0]
        return ensure_array((np.isposinf(x) & self.detect_positive) | (np.isneginf(x) & self.detect_negative))


@register("Mod")
class Mod(ReferenceOp):
    """Remainder: with the sign of the divisor (``fmod=0``, as Python's %) or of the dividend (``fmod=1``, as
    C's fmod). Integer division by zero gives 0."""

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("Mod", attributes))

    def forward(self, inputs):
        a, b = inputs[0], inputs[1]
        with np.errstate(divide="ignore", invalid="ignore"):
            try:
                return as_dtype_of(a, (np.fmod if self.fmod else np.mod)(a, b))
            except ValueError:
                raise broadcast_error("Mod", a, b) from None

    def backward(self, grads, fwd_inputs, fwd_outputs):
        (a, b), g = fwd_inputs, grads[0]
        if not is_float(a):
            return None, None
        # a = q * b + r with q = trunc(a / b) (fmod) or floor(a / b): dr/da = 1, dr/db = -q.
        quotient = np.trunc(a / b) if self.fmod else np.floor(a / b)
        return as_dtype_of(a, unbroadcast(ensure_array(g), a.shape)), as_dtype_of(b, unbroadcast(ensure_array(-g * quotient), b.shape))


# ------------------------------------------------------------------------------------------- bitwise

@register("BitShift")
class BitShift(ReferenceOp):
    """``X << Y`` (direction ``LEFT``) or ``X >> Y`` (``RIGHT``) elementwise, with broadcasting.

    Shifts outside ``[0, bit width)`` give 0 (or -1 for a right shift of a negative signed value), and left
    shifts of signed values wrap, as two's complement hardware does (numpy's << on signed would not).

    >>> BitShift(direction="RIGHT").forward([np.array([16, -16], np.int8), np.array([2, 9], np.int8)])
    array([ 4, -1], dtype=int8)
    """

    gradient = Gradient.NONE
    no_gradient_reason = "its outputs are discrete"

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("BitShift", attributes))

    def forward(self, inputs):
        x, shift = inputs[0], inputs[1]
        require_integer("BitShift", x, shift)
        try:
            x, shift = np.broadcast_arrays(x, shift)
        except ValueError:
            raise broadcast_error("BitShift", inputs[0], inputs[1]) from None
        width = x.dtype.itemsize * 8
        valid = (shift >= 0) & (shift < width)
        safe_shift = np.where(valid, shift, 0).astype(np.uint64 if x.dtype.kind == "u" else np.int64)
        if self.direction == "RIGHT":
            shifted = np.right_shift(x, safe_shift.astype(x.dtype))
            overflow = np.where(x < 0, -1, 0).astype(x.dtype) if x.dtype.kind == "i" else np.zeros_like(x)
        else:
            unsigned = x.view(np.dtype(f"u{x.dtype.itemsize}"))
            shifted = np.left_shift(unsigned, safe_shift.astype(unsigned.dtype)).view(x.dtype)
            overflow = np.zeros_like(x)
        return ensure_array(np.where(valid, shifted, overflow).astype(x.dtype))


class _Bitwise(ReferenceOp):

    gradient = Gradient.NONE
    no_gradient_reason = "its outputs are discrete"
    function: Callable = None

    def forward(self, inputs):
        require_integer(type(self).__name__, *inputs)
        try:
            return ensure_array(type(self).function(*inputs))
        except ValueError:
            raise broadcast_error(type(self).__name__, *inputs) from None


def _bitwise(op_type: str, function: Callable, doc: str) -> type:
    cls = type(op_type, (_Bitwise,), {"function": staticmethod(function), "__doc__": doc})
    cls.__module__ = __name__
    return register(op_type)(cls)


BitwiseAnd = _bitwise("BitwiseAnd", np.bitwise_and, "``A & B`` on integer tensors, with broadcasting.")
BitwiseOr = _bitwise("BitwiseOr", np.bitwise_or, "``A | B`` on integer tensors, with broadcasting.")
BitwiseXor = _bitwise("BitwiseXor", np.bitwise_xor, "``A ^ B`` on integer tensors, with broadcasting.")
BitwiseNot = _bitwise("BitwiseNot", np.invert, "``~X`` on integer tensors.")


@register("BitCast")
class BitCast(ReferenceOp):
    """Reinterpret the bits of ``X`` as the ONNX type ``to`` (same width; no value conversion).

    >>> from onnx import TensorProto
    >>> BitCast(to=TensorProto.INT32).forward([np.array([1.0], np.float32)])
    array([1065353216], dtype=int32)
    """

    gradient = Gradient.NONE
    no_gradient_reason = "its outputs are discrete"

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("BitCast", attributes))

    def forward(self, inputs):
        from onnx import TensorProto, helper

        x = np.asarray(inputs[0])
        if self.to == TensorProto.STRING or x.dtype.kind in "OUS":
            raise UnsupportedOperatorError("BitCast: strings have no fixed bit width; use Cast instead")
        target = np.dtype(helper.tensor_dtype_to_np_dtype(self.to))
        if target.itemsize != x.dtype.itemsize:
            raise ShapeError(f"BitCast: {x.dtype} ({x.dtype.itemsize * 8} bits) and {target} "
                             f"({target.itemsize * 8} bits) differ in width; BitCast needs equal widths")
        return ensure_array(np.array(x, order="C", copy=True).view(target))


def _cast(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    if x.dtype == dtype:
        return x
    if dtype == object:  # to STRING: ONNX writes floats in their shortest round-trip form
        return np.array([_to_string(v) for v in x.reshape(-1)], dtype=object).reshape(x.shape)
    if x.dtype == object:  # from STRING: parse as a Python number first ("INF", "-NaN" included)
        return np.array([float(v) for v in x.reshape(-1)], dtype=np.float64).reshape(x.shape).astype(dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        return x.astype(dtype)


def _to_string(value: Any) -> str:
    return repr(float(value)) if isinstance(value, np.floating) else str(value)


@register("Cast")
class Cast(ReferenceOp):
    """Convert to the ONNX data type ``to`` (a ``TensorProto.DataType`` number). The gradient flows back
    (cast to the input's dtype) between floating types only."""

    def __init__(self, **attributes) -> None:
        super().__init__()
        self.dtype = onnx_dtype(operator_attributes("Cast", attributes).to)

    def forward(self, inputs):
        return _cast(inputs[0], self.dtype)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        x = fwd_inputs[0]
        return grads[0].astype(x.dtype, copy=False) if is_float(x) and is_float(fwd_outputs[0]) else None


@register("CastLike")
class CastLike(ReferenceOp):
    """Convert the first input to the dtype of the second."""

    def __init__(self, **attributes) -> None:
        super().__init__()
        operator_attributes("CastLike", attributes)  # saturate and round_mode, which change no conversion here

    def forward(self, inputs):
        return _cast(inputs[0], inputs[1].dtype)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        x = fwd_inputs[0]
        return (grads[0].astype(x.dtype, copy=False) if is_float(x) and is_float(fwd_outputs[0]) else None), None


@register("Where")
class Where(ReferenceOp):
    """``X`` where ``condition`` is true, ``Y`` elsewhere (all three broadcast together)."""

    def forward(self, inputs):
        condition, x, y = inputs[0], inputs[1], inputs[2]
        try:
            return ensure_array(np.where(condition, x, y))
        except ValueError:
            raise ShapeError(f"Where: shapes {condition.shape}, {x.shape}, {y.shape} do not broadcast together") from None

    def backward(self, grads, fwd_inputs, fwd_outputs):
        condition, x, y = fwd_inputs
        g = grads[0]
        zero = np.zeros((), dtype=g.dtype)
        grad_x = unbroadcast(ensure_array(np.where(condition, g, zero)), x.shape) if is_float(x) else None
        grad_y = unbroadcast(ensure_array(np.where(condition, zero, g)), y.shape) if is_float(y) else None
        return None, grad_x, grad_y
