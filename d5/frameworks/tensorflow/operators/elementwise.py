"""Elementwise operators as native TensorFlow operations: arithmetic with ONNX (NumPy) broadcasting, Mod, unary
math (trigonometric and hyperbolic included), comparisons and logic (bool outputs), IsNaN/IsInf, bit operations
(BitShift, BitwiseAnd/Or/Xor/Not, BitCast), Where, Cast/CastLike, Clip, and the variadic Min/Max/Sum/Mean.

TensorFlow has CPU kernels for most integer types (uint16/32/64 included) in add, compare, extrema, floor division
and shifts; where it has none (Neg/Abs/Sign/Pow on unsigned, TruncateMod on narrow integers and half floats), the
converters compute the same bits another way: modular arithmetic on the signed view of the same width, ``a -
trunc(a / b) * b``, or float32. Integer division and remainder by 0 give 0 (NumPy's result) where TensorFlow
would raise, and by -1 never reach the kernel (``INT_MIN / -1`` is undefined behaviour in C++).

Gradients follow the reference where TensorFlow's own differ: Pow at ``Y == 0`` and ``X <= 0``, Mod's divisor
gradient, and Max/Min ties (shared equally, not all to the first operand).
"""
from __future__ import annotations

import functools

import tensorflow as tf

from d5.errors import ShapeError, UnsupportedOperatorError
from d5.frameworks.tensorflow.operators import TFOp, register
from d5.frameworks.tensorflow.operators._helpers import tf_dtype
from d5.ops.onnx_attributes import adopt, operator_attributes
from d5.ops.onnx_semantics import broadcast_shape, unbroadcast_axes

# What a TensorFlow op raises for operands that do not broadcast: eagerly InvalidArgumentError, while tracing
# ValueError (shape inference).
_BROADCAST_ERRORS = (tf.errors.InvalidArgumentError, ValueError)

#: Unsigned dtype -> the signed dtype of the same width (modular arithmetic is the same on both).
SIGNED_OF = {tf.uint8: tf.int8, tf.uint16: tf.int16, tf.uint32: tf.int32, tf.uint64: tf.int64}


def as_signed(x):
    """An unsigned tensor's bits as the signed dtype of the same width; other tensors unchanged."""
    return tf.bitcast(x, SIGNED_OF[x.dtype]) if x.dtype in SIGNED_OF else x


def zero(dtype) -> tf.Tensor:
    return tf.zeros((), dtype)


def _shape(x) -> tuple:
    return tuple(x.shape.as_list()) if x.shape.rank is not None else ()


@functools.lru_cache(maxsize=1024)
def _reduction_axes(grad_shape: tuple, shape: tuple) -> tuple:
    return unbroadcast_axes(grad_shape, shape)


def unbroadcast(grad: tf.Tensor, shape) -> tf.Tensor:
    """Sum ``grad`` (shaped like a broadcast result) down to an input of static ``shape``."""
    shape = tuple(shape)
    grad_shape = _shape(grad)
    if grad_shape == shape:
        return grad
    axes = _reduction_axes(grad_shape, shape)
    return tf.reshape(tf.reduce_sum(grad, axis=axes) if axes else grad, shape)


def _check_broadcast(op_type: str, inputs, err: Exception):
    """A ShapeError for operands that do not broadcast (what the reference raises); else TensorFlow's error."""
    shapes = [x.shape.as_list() for x in inputs if hasattr(x, "shape") and x.shape.rank is not None]
    if all(None not in shape for shape in shapes):
        broadcast_shape(op_type, *shapes)
    raise err


def _converter(op_type: str, call, doc: str, base=TFOp, elementwise: bool = True) -> type:
    """Register a converter class ``op_type`` whose ``__call__`` is ``call(self, *inputs)``, with broadcast
    failures reported as the reference's ShapeError."""

    def __call__(self, *inputs):
        try:
            return call(self, *inputs)
        except ShapeError:
            raise
        except _BROADCAST_ERRORS as err:
            _check_broadcast(op_type, inputs, err)

    cls = type(op_type, (base,), {"__call__": __call__, "__doc__": doc, "__module__": __name__,
                                  "elementwise": elementwise})
    register(op_type)(cls)
    return cls


def _simple(op_type: str, fn, doc: str) -> type:
    """A converter with no attributes applying ``fn`` to its inputs."""
    return _converter(op_type, lambda self, *inputs: fn(*inputs), doc)


# ------------------------------------------------------------------------------------------------ arithmetic

def _integer_divisor(b):
    # Divisors the kernels must not see: 0 (TensorFlow raises; NumPy gives 0) and -1 (INT_MIN / -1 traps).
    special = tf.equal(b, 0)
    if not b.dtype.is_unsigned:
        special = special | tf.equal(b, -1)
    return special, tf.where(special, tf.ones((), b.dtype), b)


def _div(a, b):
    # ONNX Div on integers truncates toward zero (C semantics), as the reference's NumPy path does for ints.
    if a.dtype.is_floating or a.dtype.is_complex:
        return a / b
    special, safe = _integer_divisor(b)
    quotient = tf.truncatediv(a, safe)
    if a.dtype.is_unsigned:
        return tf.where(special, zero(a.dtype), quotient)
    # x / -1 = -x (wrapping INT_MIN to itself, as NumPy); x / 0 = 0.
    return tf.where(special, tf.where(tf.equal(b, 0), zero(a.dtype), -a), quotient)


def _pow(x, y):
    if y.dtype != x.dtype:
        y = tf.cast(y, x.dtype)  # ONNX Pow keeps the base's type
    if x.dtype in SIGNED_OF:  # no unsigned kernels: the same bits by modular multiplication
        return tf.bitcast(tf.pow(as_signed(x), as_signed(y)), x.dtype)
    if x.dtype.is_floating:
        return _float_pow(tf.convert_to_tensor(x), tf.convert_to_tensor(y))
    return tf.pow(x, y)


@tf.custom_gradient
def _float_pow(x, y):
    # The reference's (PyTorch's) gradient: none for X where Y == 0, none for Y where X == 0 and Y >= 0, and
    # log(X) (NaN below 0) elsewhere; TensorFlow's own gives NaN at 0 ** 0 and 0 for Y at negative X.
    out = tf.pow(x, y)

    def grad(g):
        grad_x = tf.where(tf.equal(y, 0), zero(g.dtype), g * y * tf.pow(x, y - 1))
        grad_y = tf.where(tf.equal(x, 0) & (y >= 0), zero(g.dtype), g * out * tf.math.log(x))
        return unbroadcast(grad_x, _shape(x)), unbroadcast(grad_y, _shape(y))

    return out, grad


def _neg(x):
    if x.dtype in SIGNED_OF:
        return tf.bitcast(tf.negative(as_signed(x)), x.dtype)
    return tf.negative(x)


def _abs(x):
    return tf.identity(x) if x.dtype.is_unsigned else tf.abs(x)


def _sign(x):
    return tf.cast(tf.not_equal(x, 0), x.dtype) if x.dtype.is_unsigned else tf.sign(x)


def _rounding(fn):
    # Integers are already whole (NumPy's floor of an int, cast back to it, is the same value).
    return lambda x: fn(x) if x.dtype.is_floating else tf.identity(x)


Add = _simple("Add", tf.add, "``A + B``.")
Sub = _simple("Sub", tf.subtract, "``A - B``.")
Mul = _simple("Mul", tf.multiply, "``A * B``.")
Div = _simple("Div", _div, "``A / B`` (integer division truncates; by 0 gives 0).")
Pow = _simple("Pow", _pow, "``X ** Y`` in X's type.")
Neg = _simple("Neg", _neg, "``-X``.")
Abs = _simple("Abs", _abs, "``|X|``.")
Exp = _simple("Exp", tf.exp, "``e ** X``.")
Log = _simple("Log", tf.math.log, "Natural logarithm.")
Sqrt = _simple("Sqrt", tf.sqrt, "Square root.")
Reciprocal = _simple("Reciprocal", tf.math.reciprocal, "``1 / X``.")
Erf = _simple("Erf", tf.math.erf, "The error function.")
Floor = _simple("Floor", _rounding(tf.floor), "Round down.")
Ceil = _simple("Ceil", _rounding(tf.math.ceil), "Round up.")
Round = _simple("Round", _rounding(tf.round), "Round half to even.")
Sign = _simple("Sign", _sign, "-1, 0 or 1.")
Sin = _simple("Sin", tf.sin, "Sine.")
Cos = _simple("Cos", tf.cos, "Cosine.")
Tan = _simple("Tan", tf.tan, "Tangent.")
Asin = _simple("Asin", tf.asin, "Arcsine (NaN outside [-1, 1]).")
Acos = _simple("Acos", tf.acos, "Arccosine (NaN outside [-1, 1]).")
Atan = _simple("Atan", tf.atan, "Arctangent.")
Sinh = _simple("Sinh", tf.sinh, "Hyperbolic sine.")
Cosh = _simple("Cosh", tf.cosh, "Hyperbolic cosine.")
Asinh = _simple("Asinh", tf.asinh, "Inverse hyperbolic sine.")
Acosh = _simple("Acosh", tf.acosh, "Inverse hyperbolic cosine (NaN below 1).")
Atanh = _simple("Atanh", tf.atanh, "Inverse hyperbolic tangent (NaN outside [-1, 1]).")


# ------------------------------------------------------------------------------------------ comparisons, logic

def _ordered(fn):
    # TensorFlow orders no bools; NumPy does (False < True): compare them as uint8.
    def compare(a, b):
        if a.dtype == tf.bool:
            a, b = tf.cast(a, tf.uint8), tf.cast(b, tf.uint8)
        return fn(a, b)
    return compare


def _isnan(x):
    return tf.math.is_nan(x) if x.dtype.is_floating else tf.zeros(tf.shape(x), tf.bool)


Equal = _simple("Equal", tf.equal, "``A == B`` (bool).")
Less = _simple("Less", _ordered(tf.less), "``A < B`` (bool).")
LessOrEqual = _simple("LessOrEqual", _ordered(tf.less_equal), "``A <= B`` (bool).")
Greater = _simple("Greater", _ordered(tf.greater), "``A > B`` (bool).")
GreaterOrEqual = _simple("GreaterOrEqual", _ordered(tf.greater_equal), "``A >= B`` (bool).")
IsNaN = _simple("IsNaN", _isnan, "NaN test (bool).")
Where = _simple("Where", tf.where, "``X`` where the condition holds, else ``Y``.")


def _logical(op_type: str, fn, doc: str) -> type:
    def call(self, *inputs):
        if any(x.dtype != tf.bool for x in inputs):
            raise ShapeError(f"logical operators take bool tensors, got {[x.dtype.name for x in inputs]}; "
                             "Cast first")
        return fn(*inputs)
    return _converter(op_type, call, doc)


Not = _logical("Not", tf.logical_not, "Logical not of a bool tensor.")
And = _logical("And", tf.logical_and, "Logical and of bool tensors.")
Or = _logical("Or", tf.logical_or, "Logical or of bool tensors.")
Xor = _logical("Xor", tf.math.logical_xor, "Logical exclusive or of bool tensors.")


@register("IsInf")
class IsInf(TFOp):
    """True where the input is +inf (if ``detect_positive``) or -inf (if ``detect_negative``)."""

    elementwise = True

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("IsInf", attributes))

    def __call__(self, x):
        if not x.dtype.is_floating:  # integers are never infinite
            return tf.zeros(tf.shape(x), tf.bool)
        if self.detect_negative and self.detect_positive:
            return tf.math.is_inf(x)
        if self.detect_positive:
            return tf.equal(x, tf.constant(float("inf"), x.dtype))
        if self.detect_negative:
            return tf.equal(x, tf.constant(float("-inf"), x.dtype))
        return tf.zeros(tf.shape(x), tf.bool)


# ------------------------------------------------------------------------------------------------ variadic

def _fold(combine, inputs):
    out = inputs[0]
    for x in inputs[1:]:
        out = combine(out, x)
    return out


def _shared_ties(combine):
    """``combine`` folded over float inputs, with the reference's gradient: each input that equals the output
    gets an equal share of it (TensorFlow's maximum gives a tie all to the first operand)."""

    @tf.custom_gradient
    def extremum(*xs):
        out = _fold(combine, xs)

        def grad(g):
            shape = tf.shape(out)
            hits = [tf.broadcast_to(tf.cast(tf.equal(x, out), g.dtype), shape) for x in xs]
            share = g / tf.add_n(hits)
            return [unbroadcast(share * hit, _shape(x)) for x, hit in zip(xs, hits)]

        return out, grad

    return extremum


def _extremum(combine):
    shared = _shared_ties(combine)

    def apply(*inputs):
        if inputs[0].dtype.is_floating:
            return shared(*(tf.convert_to_tensor(x) for x in inputs))
        if inputs[0].dtype == tf.bool:  # no bool kernels: as uint8 (NumPy's maximum of bools is "or")
            return tf.cast(_fold(combine, [tf.cast(x, tf.uint8) for x in inputs]), tf.bool)
        return _fold(combine, inputs)
    return apply


def _mean(*inputs):
    total = _fold(tf.add, inputs)
    if total.dtype.is_floating:
        return total / tf.constant(len(inputs), total.dtype)
    # The reference divides and casts back to the integer type: truncation toward zero.
    return tf.truncatediv(total, tf.constant(len(inputs), total.dtype))


def _variadic(op_type: str, fn) -> type:
    def call(self, *inputs):
        if not inputs:
            raise ShapeError(f"{op_type}: needs at least one input")
        if len(inputs) == 1 and op_type != "Mean":
            return tf.identity(inputs[0])  # a tensor of its own, as the reference's copy
        return fn(*inputs)
    return _converter(op_type, call, f"ONNX {op_type} of one or more broadcasting inputs.")


Max = _variadic("Max", _extremum(tf.maximum))
Min = _variadic("Min", _extremum(tf.minimum))
Sum = _variadic("Sum", lambda *inputs: _fold(tf.add, inputs))
Mean = _variadic("Mean", _mean)


# ------------------------------------------------------------------------------------------------ Mod

def _trunc(z):
    return tf.where(z < 0, tf.math.ceil(z), tf.floor(z))


def _float_mod(fmod: bool):
    @tf.custom_gradient
    def mod(a, b):
        if fmod and a.dtype in (tf.float16, tf.bfloat16):  # no TruncateMod kernel: fmod is exact in float32
            out = tf.cast(tf.truncatemod(tf.cast(a, tf.float32), tf.cast(b, tf.float32)), a.dtype)
        else:
            out = tf.truncatemod(a, b) if fmod else tf.math.floormod(a, b)

        def grad(g):
            # a = q * b + r with q = trunc(a / b) (fmod) or floor(a / b): dr/da = 1, dr/db = -q.
            ratio = a / b
            quotient = _trunc(ratio) if fmod else tf.floor(ratio)
            return unbroadcast(g, _shape(a)), unbroadcast(-g * quotient, _shape(b))

        return out, grad

    return mod


_TRUNCATEMOD_INTS = (tf.int32, tf.int64)  # the integer types TensorFlow's TruncateMod has kernels for


@register("Mod")
class Mod(TFOp):
    """Remainder with the sign of the divisor (``fmod=0``, Python's ``%``) or of the dividend (``fmod=1``, C's
    fmod), for floats and integers alike; an integer remainder by 0 is 0. The gradient is the reference's:
    1 for A, ``-floor(A / B)`` (``-trunc(A / B)`` with fmod) for B."""

    elementwise = True

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("Mod", attributes))
        self.float_mod = _float_mod(bool(self.fmod))

    def __call__(self, a, b):
        try:
            if a.dtype.is_floating:
                return self.float_mod(tf.convert_to_tensor(a), tf.convert_to_tensor(b))
            special, safe = _integer_divisor(b)
            if not self.fmod or a.dtype.is_unsigned:  # unsigned: both rules agree
                remainder = tf.math.floormod(a, safe)
            elif a.dtype in _TRUNCATEMOD_INTS:
                remainder = tf.truncatemod(a, safe)
            else:  # exact: |trunc(a / b) * b| <= |a| for b not 0 or -1
                remainder = a - tf.truncatediv(a, safe) * safe
            return tf.where(special, zero(a.dtype), remainder)  # x mod -1 = 0; x mod 0 = 0 (NumPy)
        except ShapeError:
            raise
        except _BROADCAST_ERRORS as err:
            _check_broadcast("Mod", (a, b), err)


# ------------------------------------------------------------------------------------------------ bits

def _require_integer(op_type: str, *tensors) -> None:
    for x in tensors:
        if not x.dtype.is_integer:
            raise ShapeError(f"{op_type} takes integer tensors, got {x.dtype.name}; Cast to an integer type first")


@register("BitShift")
class BitShift(TFOp):
    """``X << Y`` (``LEFT``) or ``X >> Y`` (``RIGHT``) with broadcasting, as the reference: shifts outside
    ``[0, bit width)`` give 0 (-1 for a right shift of a negative signed value), left shifts wrap. No gradient."""

    elementwise = True

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("BitShift", attributes))
        self.left = self.direction == "LEFT"

    def __call__(self, x, shift):
        _require_integer("BitShift", x, shift)
        shape = broadcast_shape("BitShift", x.shape.as_list(), shift.shape.as_list())
        dtype, width = x.dtype, x.dtype.size * 8
        x = tf.broadcast_to(x, shape)
        # Unsigned amounts >= 2**(w-1) read as negative: invalid too. TensorFlow leaves shifts outside
        # [0, width) to the implementation, so only valid amounts reach its kernel (which keeps the type's
        # semantics: wrapping left shifts, arithmetic right shifts of signed values, logical of unsigned).
        amount = tf.broadcast_to(tf.cast(as_signed(shift), tf.int64), shape)
        valid = (amount >= 0) & (amount < width)
        amount = tf.cast(tf.where(valid, amount, tf.zeros((), tf.int64)), dtype)
        if self.left:
            return tf.where(valid, tf.bitwise.left_shift(x, amount), zero(dtype))
        overflow = zero(dtype) if dtype.is_unsigned else tf.where(x < 0, tf.constant(-1, dtype), zero(dtype))
        return tf.where(valid, tf.bitwise.right_shift(x, amount), overflow)


def _bitwise(op_type: str, fn, doc: str) -> type:
    def call(self, *inputs):
        _require_integer(op_type, *inputs)
        return fn(*inputs)
    return _converter(op_type, call, doc)


BitwiseAnd = _bitwise("BitwiseAnd", tf.bitwise.bitwise_and, "``A & B`` on integer tensors, with broadcasting.")
BitwiseOr = _bitwise("BitwiseOr", tf.bitwise.bitwise_or, "``A | B`` on integer tensors, with broadcasting.")
BitwiseXor = _bitwise("BitwiseXor", tf.bitwise.bitwise_xor, "``A ^ B`` on integer tensors, with broadcasting.")
BitwiseNot = _bitwise("BitwiseNot", tf.bitwise.invert, "``~X`` on integer tensors.")

_ONNX_STRING = 8


@register("BitCast")
class BitCast(TFOp):
    """Reinterpret the bits of ``X`` as the ONNX type ``to`` (same width; no value conversion, no gradient)."""

    elementwise = True

    def __init__(self, **attributes) -> None:
        to = operator_attributes("BitCast", attributes).to
        if to == _ONNX_STRING:
            raise UnsupportedOperatorError("BitCast: strings have no fixed bit width; use Cast instead")
        self.dtype = tf_dtype(to)

    def __call__(self, x):
        if x.dtype.size != self.dtype.size:
            raise ShapeError(f"BitCast: {x.dtype.name} ({x.dtype.size * 8} bits) and {self.dtype.name} "
                             f"({self.dtype.size * 8} bits) differ in width; BitCast needs equal widths")
        x = tf.stop_gradient(x)
        if x.dtype == self.dtype:
            return tf.identity(x)
        # tf.bitcast takes no bools: a bool's byte is 0 or 1, and a nonzero byte reads as True.
        if x.dtype == tf.bool:
            x = tf.cast(x, tf.uint8)
        if self.dtype == tf.bool:
            return tf.not_equal(tf.bitcast(x, tf.uint8), 0)
        return tf.bitcast(x, self.dtype)


# ---------------------------------------------------------------------------------------- selection, types

def _bound(name: str, value, x):
    # The bounds get no gradient, as in the reference (they are constants of the graph).
    if isinstance(value, (tf.Tensor, tf.Variable)):
        if value.shape.num_elements() != 1:
            raise ShapeError(f"Clip: {name} must be a scalar, got shape {tuple(value.shape.as_list())}")
        return tf.stop_gradient(tf.reshape(tf.cast(value, x.dtype), ()))
    return tf.constant(value, x.dtype)


@register("Clip")
class Clip(TFOp):
    """``min(max(X, min), max)``; min/max are optional scalar inputs (attributes before opset 11). The gradient
    passes where ``min <= X <= max`` (TensorFlow's maximum/minimum give a tie to X)."""

    elementwise = True

    def __init__(self, **attributes) -> None:
        self.low, self.high = operator_attributes("Clip", attributes)  # min, max

    def __call__(self, x, low=None, high=None):
        low = self.low if low is None else low
        high = self.high if high is None else high
        out = x
        if low is not None:
            out = tf.maximum(out, _bound("min", low, x))
        if high is not None:
            out = tf.minimum(out, _bound("max", high, x))
        return out if out is not x else tf.identity(x)


@register("Cast")
class Cast(TFOp):
    """Convert to the ONNX data type ``to``; the gradient flows between floating types. bfloat16 rounds to
    nearest even, as NumPy's ml_dtypes."""

    elementwise = True

    def __init__(self, **attributes) -> None:
        self.dtype = tf_dtype(operator_attributes("Cast", attributes).to)

    def __call__(self, x):
        # tf.cast hands back a variable itself when the type is already right: always a tensor of its own.
        return tf.identity(x) if x.dtype == self.dtype else tf.cast(x, self.dtype)


@register("CastLike")
class CastLike(TFOp):
    """Convert the first input to the dtype of the second."""

    elementwise = True

    def __init__(self, **attributes) -> None:
        operator_attributes("CastLike", attributes)  # saturate and round_mode, which change no conversion here

    def __call__(self, x, like):
        return tf.identity(x) if x.dtype == like.dtype else tf.cast(x, like.dtype)
