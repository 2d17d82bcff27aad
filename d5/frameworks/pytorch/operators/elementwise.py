"""Elementwise operators as native torch operations: arithmetic with ONNX (NumPy) broadcasting, Mod, unary math
(trigonometric and hyperbolic included), comparisons and logic (bool outputs), IsNaN/IsInf, bit operations
(BitShift, BitwiseAnd/Or/Xor/Not, BitCast), Where, Cast/CastLike, Clip, and the variadic Min/Max/Sum/Mean.

Unsigned integers wider than 8 bits: torch stores uint16/uint32/uint64 but has few kernels for them (add, compare,
maximum, shifts raise NotImplementedError). Those converters first call the plain torch function, so the float
path pays nothing (a ``try`` costs nothing until it raises), and only on NotImplementedError compute the result
bit for bit as NumPy does: modular arithmetic on the same bits viewed as the signed type of the same width,
comparisons and extrema on an order-preserving signed key (the bits with the sign bit flipped), and division on
wider integers (uint64: an exact unsigned long division on int64).

Integer division and remainder by zero give 0 (NumPy's result) where torch would raise, and by -1 never reach
torch's kernel (``INT64_MIN / -1`` traps the CPU)."""
from __future__ import annotations

import torch

from d5.errors import ShapeError, UnsupportedOperatorError
from d5.frameworks.pytorch.operators import TorchOp, register
from d5.frameworks.pytorch.operators._helpers import torch_dtype
from d5.ops.onnx_attributes import adopt, operator_attributes
from d5.ops.onnx_semantics import broadcast_shape

# ----------------------------------------------------------------------------------- unsigned integers

#: The unsigned dtypes torch has few kernels for -> the signed dtype of the same width.
SIGNED_OF = {torch.uint16: torch.int16, torch.uint32: torch.int32, torch.uint64: torch.int64}
_SIGN_BIT = {torch.int16: -2 ** 15, torch.int32: -2 ** 31, torch.int64: -2 ** 63}
_WIDER = {torch.uint16: torch.int32, torch.uint32: torch.int64}


def as_signed(x: torch.Tensor) -> torch.Tensor:
    """An unsigned tensor's bits as the signed dtype of the same width (modular arithmetic is the same on both)."""
    return x.view(SIGNED_OF[x.dtype]) if x.dtype in SIGNED_OF else x


def order_key(x: torch.Tensor) -> torch.Tensor:
    """A signed tensor ordered as the unsigned ``x`` is: its bits with the sign bit flipped."""
    signed = x.view(SIGNED_OF[x.dtype])
    return signed ^ _SIGN_BIT[signed.dtype]


def from_order_key(key: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The unsigned tensor of ``dtype`` whose :func:`order_key` is ``key``."""
    return (key ^ _SIGN_BIT[key.dtype]).view(dtype)


def _is_wide_unsigned(*tensors) -> bool:
    return any(isinstance(t, torch.Tensor) and t.dtype in SIGNED_OF for t in tensors)


def _modular(fn):
    """``fn`` computed on the signed view of unsigned operands, the result viewed back: +, -, * wrap alike."""
    def apply(a, b):
        return fn(as_signed(a), as_signed(b)).view(a.dtype)
    return apply


def _ordered(fn):
    """A comparison of unsigned operands as a comparison of their order keys."""
    return lambda a, b: fn(order_key(a), order_key(b))


def _extremum(fn):
    return lambda a, b: from_order_key(fn(order_key(a), order_key(b)), a.dtype)


def _unsigned_divmod(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Unsigned floor quotient and remainder, 0 for a zero divisor (as NumPy), in the operands' dtype."""
    dtype = a.dtype
    if dtype in _WIDER:  # the values fit the wider signed type exactly
        wide_a, wide_b = a.to(_WIDER[dtype]), b.to(_WIDER[dtype])
        zero = wide_b == 0
        safe = torch.where(zero, 1, wide_b)
        quotient = torch.where(zero, 0, torch.div(wide_a, safe, rounding_mode="floor"))
        remainder = torch.where(zero, 0, wide_a - quotient * safe)
        return quotient.to(dtype), remainder.to(dtype)
    # uint64 on int64 bits: halve the dividend (a logical shift) so the signed division is exact, double the
    # quotient, and correct it by one where the remainder is still at least the divisor. A divisor >= 2**63
    # (negative as int64) goes at most once into any dividend.
    a, b = torch.broadcast_tensors(a.view(torch.int64), b.view(torch.int64))
    zero, huge = b == 0, b < 0
    safe = torch.where(zero | huge, 1, b)
    quotient = torch.div((a >> 1) & 0x7FFFFFFFFFFFFFFF, safe, rounding_mode="floor") << 1
    remainder = a - quotient * safe
    again = (remainder ^ _SIGN_BIT[torch.int64]) >= (safe ^ _SIGN_BIT[torch.int64])
    quotient = quotient + again.to(torch.int64)
    remainder = torch.where(again, remainder - safe, remainder)
    fits = (a ^ _SIGN_BIT[torch.int64]) >= (b ^ _SIGN_BIT[torch.int64])
    quotient = torch.where(huge, fits.to(torch.int64), quotient)
    remainder = torch.where(huge, torch.where(fits, a - b, a), remainder)
    quotient = torch.where(zero, 0, quotient)
    remainder = torch.where(zero, 0, remainder)
    return quotient.view(torch.uint64), remainder.view(torch.uint64)


# ---------------------------------------------------------------------------------------- converters

def _check_broadcast(op_type: str, inputs, err: RuntimeError):
    """A ShapeError for operands that do not broadcast (what the reference raises); else torch's error."""
    broadcast_shape(op_type, *(tuple(x.shape) for x in inputs if isinstance(x, torch.Tensor)))
    raise err


def _simple(op_type: str, fn, doc: str, unsigned=None) -> type:
    """Register a converter with no attributes that applies ``fn`` to its inputs; ``unsigned`` computes it
    where torch has no kernel for the wide unsigned dtypes."""

    def forward(self, *inputs):
        try:
            return fn(*inputs)
        except NotImplementedError:
            if unsigned is None or not _is_wide_unsigned(*inputs):
                raise
            return unsigned(*inputs)
        except RuntimeError as err:
            _check_broadcast(op_type, inputs, err)

    cls = type(op_type, (TorchOp,), {"forward": forward, "__doc__": doc, "__module__": __name__})
    register(op_type)(cls)
    return cls


def _integer_divisor(b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    # Divisors torch must not see: 0 (it raises; NumPy gives 0) and -1 (INT_MIN / -1 traps the CPU).
    special = ((b == 0) | (b == -1)) if b.dtype.is_signed else (b == 0)
    return special, torch.where(special, 1, b)


def _div(a, b):
    # ONNX Div on integers truncates toward zero (C semantics), as the reference's NumPy path does for ints.
    if a.is_floating_point() or b.is_floating_point():
        return a / b
    if a.dtype in SIGNED_OF:
        return _unsigned_divmod(a, b)[0]
    special, safe = _integer_divisor(b)
    quotient = torch.div(a, safe, rounding_mode="trunc")
    # x / -1 = -x (wrapping INT_MIN to itself, as NumPy); x / 0 = 0.
    return torch.where(special, torch.where(b == 0, 0, -a), quotient)


def _pow(x, y):
    out = torch.pow(x, y)
    return out.to(x.dtype) if out.dtype != x.dtype else out  # ONNX Pow keeps the base's type


def _unsigned_abs(x):
    return x.clone()


def _unsigned_sign(x):
    return (x != 0).to(x.dtype)


Add = _simple("Add", torch.add, "``A + B``.", _modular(torch.add))
Sub = _simple("Sub", torch.sub, "``A - B``.", _modular(torch.sub))
Mul = _simple("Mul", torch.mul, "``A * B``.", _modular(torch.mul))
Div = _simple("Div", _div, "``A / B`` (integer division truncates; by 0 gives 0).")
Pow = _simple("Pow", _pow, "``X ** Y`` in X's type.")
Neg = _simple("Neg", torch.neg, "``-X``.", lambda x: torch.neg(as_signed(x)).view(x.dtype))
Abs = _simple("Abs", torch.abs, "``|X|``.", _unsigned_abs)
Exp = _simple("Exp", torch.exp, "``e ** X``.")
Log = _simple("Log", torch.log, "Natural logarithm.")
Sqrt = _simple("Sqrt", torch.sqrt, "Square root.")
Reciprocal = _simple("Reciprocal", torch.reciprocal, "``1 / X``.")
Erf = _simple("Erf", torch.erf, "The error function.")
Floor = _simple("Floor", torch.floor, "Round down.")
Ceil = _simple("Ceil", torch.ceil, "Round up.")
Round = _simple("Round", torch.round, "Round half to even.")
Sign = _simple("Sign", torch.sign, "-1, 0 or 1.", _unsigned_sign)
Sin = _simple("Sin", torch.sin, "Sine.")
Cos = _simple("Cos", torch.cos, "Cosine.")
Tan = _simple("Tan", torch.tan, "Tangent.")
Asin = _simple("Asin", torch.asin, "Arcsine (NaN outside [-1, 1]).")
Acos = _simple("Acos", torch.acos, "Arccosine (NaN outside [-1, 1]).")
Atan = _simple("Atan", torch.atan, "Arctangent.")
Sinh = _simple("Sinh", torch.sinh, "Hyperbolic sine.")
Cosh = _simple("Cosh", torch.cosh, "Hyperbolic cosine.")
Asinh = _simple("Asinh", torch.asinh, "Inverse hyperbolic sine.")
Acosh = _simple("Acosh", torch.acosh, "Inverse hyperbolic cosine (NaN below 1).")
Atanh = _simple("Atanh", torch.atanh, "Inverse hyperbolic tangent (NaN outside [-1, 1]).")
Equal = _simple("Equal", torch.eq, "``A == B`` (bool).")
Less = _simple("Less", torch.lt, "``A < B`` (bool).", _ordered(torch.lt))
LessOrEqual = _simple("LessOrEqual", torch.le, "``A <= B`` (bool).", _ordered(torch.le))
Greater = _simple("Greater", torch.gt, "``A > B`` (bool).", _ordered(torch.gt))
GreaterOrEqual = _simple("GreaterOrEqual", torch.ge, "``A >= B`` (bool).", _ordered(torch.ge))
IsNaN = _simple("IsNaN", torch.isnan, "NaN test (bool).")
Where = _simple("Where", torch.where, "``X`` where the condition holds, else ``Y``.")


def _logical(op_type: str, fn, doc: str) -> type:
    def forward(self, *inputs):
        if any(x.dtype != torch.bool for x in inputs):
            raise ShapeError(f"logical operators take bool tensors, got {[str(x.dtype) for x in inputs]}; Cast first")
        try:
            return fn(*inputs)
        except RuntimeError as err:
            _check_broadcast(op_type, inputs, err)

    cls = type(op_type, (TorchOp,), {"forward": forward, "__doc__": doc, "__module__": __name__})
    register(op_type)(cls)
    return cls


Not = _logical("Not", torch.logical_not, "Logical not of a bool tensor.")
And = _logical("And", torch.logical_and, "Logical and of bool tensors.")
Or = _logical("Or", torch.logical_or, "Logical or of bool tensors.")
Xor = _logical("Xor", torch.logical_xor, "Logical exclusive or of bool tensors.")


@register("IsInf")
class IsInf(TorchOp):
    """True where the input is +inf (if ``detect_positive``) or -inf (if ``detect_negative``)."""

    def __init__(self, **attributes) -> None:
        super().__init__()
        signs = operator_attributes("IsInf", attributes)
        negative, positive = signs.detect_negative, signs.detect_positive
        # Chosen once: the test for the signs asked for.
        self.test = (torch.isinf if negative and positive else torch.isposinf if positive else
                     torch.isneginf if negative else _nowhere)

    def forward(self, x):
        return self.test(x)


def _nowhere(x):
    return torch.zeros(x.shape, dtype=torch.bool, device=x.device)


def _variadic(op_type: str, combine, finish=None, unsigned=None) -> type:
    def forward(self, *inputs):
        if not inputs:
            raise ShapeError(f"{op_type}: needs at least one input")
        out = inputs[0]
        try:
            for x in inputs[1:]:
                out = combine(out, x)
        except NotImplementedError:
            if unsigned is None or not _is_wide_unsigned(*inputs):
                raise
            out = inputs[0]
            for x in inputs[1:]:
                out = unsigned(out, x)
        except RuntimeError as err:
            _check_broadcast(op_type, inputs, err)
        if finish is not None:
            return finish(out, len(inputs))
        return out.clone() if len(inputs) == 1 else out  # a tensor of its own, as the reference's copy

    cls = type(op_type, (TorchOp,), {"forward": forward, "__module__": __name__,
                                      "__doc__": f"ONNX {op_type} of one or more broadcasting inputs."})
    register(op_type)(cls)
    return cls


Max = _variadic("Max", torch.maximum, unsigned=_extremum(torch.maximum))
Min = _variadic("Min", torch.minimum, unsigned=_extremum(torch.minimum))
Sum = _variadic("Sum", torch.add, unsigned=_modular(torch.add))
Mean = _variadic("Mean", torch.add, lambda total, n: total / n)


def maximum(a, b):
    """``torch.maximum``, also for the wide unsigned dtypes."""
    try:
        return torch.maximum(a, b)
    except NotImplementedError:
        return _extremum(torch.maximum)(a, b)


def minimum(a, b):
    """``torch.minimum``, also for the wide unsigned dtypes."""
    try:
        return torch.minimum(a, b)
    except NotImplementedError:
        return _extremum(torch.minimum)(a, b)


@register("Mod")
class Mod(TorchOp):
    """Remainder with the sign of the divisor (``fmod=0``, Python's ``%``) or of the dividend (``fmod=1``, C's
    fmod), for floats and integers alike; an integer remainder by 0 is 0. The gradient is the reference's:
    1 for A, ``-floor(A / B)`` (``-trunc(A / B)`` with fmod) for B."""

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("Mod", attributes))
        self.fn = torch.fmod if self.fmod else torch.remainder

    def forward(self, a, b):
        try:
            if a.is_floating_point():
                return self.fn(a, b)
            if a.dtype in SIGNED_OF:
                return _unsigned_divmod(a, b)[1]  # unsigned: both rules agree
            special, safe = _integer_divisor(b)
            return torch.where(special, 0, self.fn(a, safe))  # x mod -1 = 0; x mod 0 = 0 (NumPy)
        except RuntimeError as err:
            _check_broadcast("Mod", (a, b), err)


# ------------------------------------------------------------------------------------------------ bits

def _require_integer(op_type: str, *tensors) -> None:
    for x in tensors:
        if x.is_floating_point() or x.is_complex() or x.dtype == torch.bool:
            raise ShapeError(f"{op_type} takes integer tensors, got {x.dtype}; Cast to an integer type first")


def _bits(dtype: torch.dtype) -> int:
    return torch.iinfo(dtype).bits


@register("BitShift")
class BitShift(TorchOp):
    """``X << Y`` (``LEFT``) or ``X >> Y`` (``RIGHT``) with broadcasting, as the reference: shifts outside
    ``[0, bit width)`` give 0 (-1 for a right shift of a negative signed value), left shifts wrap. No gradient."""

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("BitShift", attributes))
        self.left = self.direction == "LEFT"

    def forward(self, x, shift):
        _require_integer("BitShift", x, shift)
        try:
            x, shift = torch.broadcast_tensors(x, shift)
        except RuntimeError as err:
            _check_broadcast("BitShift", (x, shift), err)
        dtype, width = x.dtype, _bits(x.dtype)
        amount = as_signed(shift).to(torch.int64)  # unsigned amounts >= 2**(w-1) read as negative: invalid too
        valid = (amount >= 0) & (amount < width)
        amount = torch.where(valid, amount, 0)
        # Shifts computed on int64 (exact for every narrower type; truncating back keeps the low bits).
        if dtype == torch.uint64:
            bits = x.view(torch.int64)
            if self.left:
                shifted = bits << amount
            else:  # a logical shift: clear the bits the arithmetic shift copied from the sign
                mask = torch.where(amount == 0, -1, (torch.ones_like(amount) << (64 - amount)) - 1)
                shifted = (bits >> amount) & mask
            return torch.where(valid, shifted, 0).view(torch.uint64)
        wide = x.to(torch.int64)
        shifted = (wide << amount) if self.left else (wide >> amount)
        overflow = 0 if self.left or not dtype.is_signed else torch.where(wide < 0, -1, 0)
        return torch.where(valid, shifted, overflow).to(dtype)


def _bitwise(op_type: str, fn, doc: str) -> type:
    def forward(self, *inputs):
        _require_integer(op_type, *inputs)
        try:
            return fn(*inputs)
        except NotImplementedError:
            return fn(*(as_signed(x) for x in inputs)).view(inputs[0].dtype)
        except RuntimeError as err:
            _check_broadcast(op_type, inputs, err)

    cls = type(op_type, (TorchOp,), {"forward": forward, "__doc__": doc, "__module__": __name__})
    register(op_type)(cls)
    return cls


BitwiseAnd = _bitwise("BitwiseAnd", torch.bitwise_and, "``A & B`` on integer tensors, with broadcasting.")
BitwiseOr = _bitwise("BitwiseOr", torch.bitwise_or, "``A | B`` on integer tensors, with broadcasting.")
BitwiseXor = _bitwise("BitwiseXor", torch.bitwise_xor, "``A ^ B`` on integer tensors, with broadcasting.")
BitwiseNot = _bitwise("BitwiseNot", torch.bitwise_not, "``~X`` on integer tensors.")

_ONNX_STRING = 8


@register("BitCast")
class BitCast(TorchOp):
    """Reinterpret the bits of ``X`` as the ONNX type ``to`` (same width; no value conversion, no gradient)."""

    def __init__(self, **attributes) -> None:
        super().__init__()
        to = operator_attributes("BitCast", attributes).to
        if to == _ONNX_STRING:
            raise UnsupportedOperatorError("BitCast: strings have no fixed bit width; use Cast instead")
        self.dtype = torch_dtype(to)

    def forward(self, x):
        if x.element_size() != self.dtype.itemsize:
            raise ShapeError(f"BitCast: {x.dtype} ({x.element_size() * 8} bits) and {self.dtype} "
                             f"({self.dtype.itemsize * 8} bits) differ in width; BitCast needs equal widths")
        return x.detach().contiguous().view(self.dtype).clone()  # its own memory, as the reference's copy


# ---------------------------------------------------------------------------------------- selection, types

@register("Clip")
class Clip(TorchOp):
    """``min(max(X, min), max)``; min/max are optional scalar inputs (attributes before opset 11)."""

    def __init__(self, **attributes) -> None:
        super().__init__()
        self.low, self.high = operator_attributes("Clip", attributes)  # min, max

    def forward(self, x, low=None, high=None):
        low = self.low if low is None else low
        high = self.high if high is None else high
        out = x
        if low is not None:
            out = maximum(out, _bound("min", low, x))
        if high is not None:
            out = minimum(out, _bound("max", high, x))
        return out if out is not x else x.clone()


@register("Cast")
class Cast(TorchOp):
    """Convert to the ONNX data type ``to``; the gradient flows between floating types. bfloat16 is torch's
    own (round to nearest even, as NumPy's ml_dtypes)."""

    def __init__(self, **attributes) -> None:
        super().__init__()
        self.dtype = torch_dtype(operator_attributes("Cast", attributes).to)

    def forward(self, x):
        return x.to(self.dtype)


@register("CastLike")
class CastLike(TorchOp):
    def __init__(self, **attributes) -> None:
        super().__init__()
        operator_attributes("CastLike", attributes)  # saturate and round_mode, which change no conversion here

    def forward(self, x, like):
        return x.to(like.dtype)


def _bound(name: str, value, x):
    # The bounds get no gradient, as in the reference (they are constants of the graph).
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ShapeError(f"Clip: {name} must be a scalar, got shape {tuple(value.shape)}")
        return value.detach().to(x.dtype).reshape(())
    return torch.tensor(value, dtype=x.dtype, device=x.device)
