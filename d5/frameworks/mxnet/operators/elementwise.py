"""Elementwise operators as native MXNet operations: arithmetic with ONNX (NumPy) broadcasting, Mod, unary math
(trigonometric and hyperbolic included), comparisons and logic (bool outputs), IsNaN/IsInf, bit operations
(BitShift, BitwiseAnd/Or/Xor/Not), Where, Cast/CastLike, Clip, and the variadic Min/Max/Sum/Mean.

Arithmetic runs on MXNet's broadcasting kernels (``broadcast_add``...), comparisons, logic, bits, rounding and
selection on its NumPy-style ones (``mx.sym.np.equal``, ``where``, ``bitwise_and``, ``round``...), whose outputs
are bool where NumPy's are. Where MXNet's kernels differ from the reference, the converters compose exact
equivalents:

- integer Div: ``broadcast_div`` truncates as C does, but a divisor of 0 traps the CPU and ``INT_MIN / -1`` is
  undefined: both divisors are replaced by 1 before the kernel runs, and the results are NumPy's (0, and ``-a``
  wrapping). Integer Mod is ``a - trunc(a / b) * b`` (exact; MXNet's own integer mod goes through double), with
  the divisor's sign for ``fmod=0``; float Mod is MXNet's ``mod`` (an exact double ``fmod``), and ``fmod=1`` the
  same on magnitudes with the dividend's sign put back, so the gradient is the reference's (1 and
  ``-floor(A / B)`` / ``-trunc(A / B)``); a float remainder by 0 is NaN (MXNet's is 0).
- Round (half to even): ``np.round``, which has no float16 kernel (float16 rounds in float32, exactly).
- BitShift (MXNet has no shift kernels): multiplication or floor division by ``2 ** k`` (a table lookup, in
  int64, wrapping as the hardware does), with shifts outside ``[0, width)`` giving 0 (-1 for a right shift of a
  negative value).
- Gradients follow the reference where MXNet's differ: Pow where ``Y == 0`` or ``X == 0 <= Y`` (MXNet gives NaN),
  and Max/Min ties (shared equally; MXNet gives each tied input the whole gradient).

MXNet holds no uint16/uint32/uint64/int16 tensors, strings or bfloat16: converters given such values (and Cast to
them) raise UnsupportedOperatorError; executors place the nodes that touch them on the reference. MXNet has no
kernel reinterpreting bits: BitCast converts only between its 8-bit types (a cast keeps the byte) and refuses
other targets when built, so executors run those on the reference.

>>> import numpy as np
>>> from d5.frameworks.mxnet.custom_op import native_op
>>> native_op("Div").forward([np.array([7, -7, 5], np.int32), np.array([2, 2, 0], np.int32)]).tolist()
[3, -3, 0]
>>> native_op("Mod", fmod=1).forward([np.array([-7.5, 7.5], np.float32), np.array([2.0, -2.0], np.float32)]).tolist()
[-1.5, 1.5]
"""
from __future__ import annotations

import functools

import mxnet as mx
import numpy as np

from d5.errors import ShapeError, UnsupportedOperatorError
from d5.frameworks.mxnet.operators import MXOp, register
from d5.frameworks.mxnet.operators._helpers import HELD_DTYPES, as_symbol, dtype_of, np_dtype, reshape, shape_of
from d5.frameworks.reference.operators._checks import onnx_dtype
from d5.ops import onnx_semantics
from d5.ops.onnx_attributes import adopt, operator_attributes

Symbol = mx.sym.Symbol


# ------------------------------------------------------------------------------------------------ support

def broadcast_shape(*inputs, op_type: str = "broadcast") -> tuple[int, ...]:
    """The shape the (non-None) ``inputs`` broadcast to, or the reference's ShapeError naming ``op_type``."""
    return tuple(onnx_semantics.broadcast_shape(op_type, *(shape_of(x) for x in inputs if x is not None)))


def _held(op_type: str, *inputs) -> None:
    for x in inputs:
        if x is not None and dtype_of(x) not in HELD_DTYPES:
            raise UnsupportedOperatorError(f"{op_type}: MXNet holds no {dtype_of(x)} tensors (the reference "
                                           "framework computes this node)")


def _common_dtype(op_type: str, inputs) -> np.dtype:
    """The dtype the operands compute in: the symbols' (constants take it), NumPy's promotion where they differ
    (ONNX gives such operators one type; the reference promotes)."""
    candidates = [x for x in inputs if isinstance(x, Symbol)] or list(inputs)
    dtypes = {dtype_of(x) for x in candidates}
    if len(dtypes) == 1:
        return dtypes.pop()
    dtype = np.result_type(*(np.zeros(() if shape_of(x) == () else (0,), dtype_of(x)) for x in candidates))
    if dtype not in HELD_DTYPES:
        raise UnsupportedOperatorError(f"{op_type}: {sorted(map(str, dtypes))} promote to {dtype}, which MXNet "
                                       "does not hold (the reference framework computes this node)")
    return dtype


def operands(a, b, op_type: str = "broadcast"):
    """Both operands as symbols of one dtype (a constant takes the other operand's), once their shapes are known
    to broadcast."""
    return tuple(_all_operands(op_type, (a, b)))


def _all_operands(op_type: str, inputs) -> list:
    broadcast_shape(*inputs, op_type=op_type)
    _held(op_type, *inputs)
    dtype = _common_dtype(op_type, inputs)
    return [as_symbol(x, dtype) for x in inputs]


def _np(x) -> Symbol:
    return as_symbol(x).as_np_ndarray()


def _numpy(name: str):
    """MXNet's NumPy-style operator ``name`` on legacy symbols (broadcasting, NumPy's output dtypes)."""
    function = getattr(mx.sym.np, name)
    return lambda *xs: function(*(_np(x) for x in xs)).as_nd_ndarray()


_equal, _not_equal = _numpy("equal"), _numpy("not_equal")
_less, _less_equal = _numpy("less"), _numpy("less_equal")
_greater, _greater_equal = _numpy("greater"), _numpy("greater_equal")
_where = _numpy("where")
_bitwise_and, _bitwise_or, _bitwise_xor = _numpy("bitwise_and"), _numpy("bitwise_or"), _numpy("bitwise_xor")


def _and(a, b) -> Symbol:
    """``a & b``; bools by selection (MXNet's broadcasting bitwise kernels take no bools)."""
    if dtype_of(a) == np.bool_:
        return _where(a, b, _scalar(False, np.bool_))
    return _bitwise_and(a, b)


def _or(a, b) -> Symbol:
    if dtype_of(a) == np.bool_:
        return _where(a, _scalar(True, np.bool_), b)
    return _bitwise_or(a, b)


def _xor(a, b) -> Symbol:
    if dtype_of(a) == np.bool_:
        return _not_equal(a, b)
    return _bitwise_xor(a, b)


def _scalar(value, dtype) -> Symbol:
    """A 0-d constant of ``dtype``."""
    return as_symbol(np.asarray(value, dtype=dtype))


def _static_zeros(x, dtype=np.bool_) -> np.ndarray:
    # A value that depends on the shape alone: known before the graph runs.
    return np.zeros(shape_of(x), dtype)


def _is_float(dtype: np.dtype) -> bool:
    return dtype.kind == "f"


class _Converter(MXOp):
    """A converter with no attributes: ``__call__`` applies ``compute`` (set by :func:`_converter`)."""

    compute = None

    def __call__(self, *inputs):
        return type(self).compute(*inputs)


def _converter(op_type: str, compute, doc: str) -> type:
    cls = type(op_type, (_Converter,), {"compute": staticmethod(compute), "__doc__": doc, "__module__": __name__})
    return register(op_type)(cls)


# ------------------------------------------------------------------------------------------------ arithmetic

def _binary(op_type: str, kernel, same_shape_kernel=None):
    """``kernel`` (a broadcasting operator) on both operands; where their shapes are equal, ``same_shape_kernel``
    (the ``elemwise_*`` operator: oneDNN computes it on its own blocked layouts, where a broadcasting operator makes
    MXNet reorder a convolution's output back to NCHW first -- a ResNet's residual additions cost 40% of its
    inference that way)."""
    def compute(a, b):
        same = same_shape_kernel is not None and shape_of(a) == shape_of(b)
        a, b = operands(a, b, op_type)
        return (same_shape_kernel if same else kernel)(a, b)
    return compute


def _integer_divisor(b: Symbol, dtype: np.dtype):
    """(zero, minus_one, safe): where ``b`` is 0, where it is -1 (None for unsigned types), and ``b`` with both
    replaced by 1 -- the divisors MXNet's integer kernels must not see (0 traps; INT_MIN / -1 is undefined)."""
    zero = _equal(b, _scalar(0, dtype))
    if dtype.kind == "u":
        return zero, None, _where(zero, _scalar(1, dtype), b)
    minus_one = _equal(b, _scalar(-1, dtype))
    return zero, minus_one, _where(_or(zero, minus_one), _scalar(1, dtype), b)


def _plain_divisor(b) -> bool:
    """Whether ``b`` is a constant with no 0 or -1 (the integer kernels take it as it is)."""
    return not isinstance(b, Symbol) and not np.any((np.asarray(b) == 0) | (np.asarray(b) == -1))


def _truncating_divide(a: Symbol, b: Symbol, dtype: np.dtype) -> Symbol:
    """Integer ``a / b`` rounded toward zero, NumPy's 0 where ``b`` is 0 and ``-a`` (wrapping) where it is -1."""
    zero, minus_one, safe = _integer_divisor(b, dtype)
    quotient = mx.sym.broadcast_div(a, safe)  # C division: truncates
    if minus_one is not None:
        quotient = _where(minus_one, mx.sym.negative(a), quotient)
    return _where(zero, _scalar(0, dtype), quotient)


def _div(a, b):
    plain = _plain_divisor(b)
    a, b = operands(a, b, "Div")
    dtype = dtype_of(a)
    if _is_float(dtype) or plain:  # C division truncates integers
        return mx.sym.broadcast_div(a, b)
    return _truncating_divide(a, b, dtype)


def _pow(x, y):
    broadcast_shape(x, y, op_type="Pow")
    _held("Pow", x, y)
    dtype = dtype_of(x)  # ONNX Pow keeps the base's type: Y is converted to it
    x = as_symbol(x)
    if not _is_float(dtype):
        return _numpy("power")(x, as_symbol(y, dtype))
    if not isinstance(y, Symbol):  # a constant exponent: no gradient of its own
        y = np.asarray(y).astype(dtype)
        if y.size == 1 and y.ndim <= len(shape_of(x)):  # a scalar: the output has X's shape
            value = float(y.reshape(-1)[0])
            if value == 0:
                return mx.sym.ones_like(x)  # 1 everywhere (0 ** 0 and NaN ** 0 included), gradient 0
            return mx.sym.np.power(x.as_np_ndarray(), value).as_nd_ndarray()
        if not np.any(y == 0):
            return _numpy("power")(x, y)
        # where Y == 0: 1, with no gradient for X (MXNet's Y * X ** (Y - 1) is NaN at X == 0)
        return _numpy("power")(_where(y == 0, _scalar(1, dtype), x), y)
    return _float_pow(x, as_symbol(y, dtype), dtype)


def _float_pow(x: Symbol, y: Symbol, dtype: np.dtype) -> Symbol:
    """``x ** y`` with the reference's (PyTorch's) gradient: none for X where Y == 0, none for Y where X == 0 and
    Y >= 0 (MXNet's kernels give NaN there, and 0 * NaN is NaN, so those elements take safe operands)."""
    one, zero = _scalar(1, dtype), _scalar(0, dtype)
    power = _numpy("power")
    at_zero = _and(_equal(x, zero), _greater_equal(y, zero))  # X == 0 <= Y: the value is 0 ** Y
    # elsewhere: MXNet's power and its gradients, which are the reference's there
    general = power(_where(at_zero, one, x), y)
    # at X == 0 <= Y: 0 ** Y (1 at Y == 0) with X's gradient Y * 0 ** (Y - 1) (0 at Y == 0) and none for Y
    nonzero_y = _not_equal(y, zero)
    at_base = power(_where(_and(at_zero, nonzero_y), x, one), mx.sym.BlockGrad(y))
    return _where(at_zero, at_base, general)


def _neg(x):
    _held("Neg", x)
    return mx.sym.negative(as_symbol(x))


def _abs(x):
    _held("Abs", x)
    x = as_symbol(x)
    return mx.sym.identity(x) if dtype_of(x).kind in "ub" else mx.sym.abs(x)


def _sign(x):
    _held("Sign", x)
    return mx.sym.sign(as_symbol(x))


def _float_unary(op_type: str, kernel):
    def compute(x):
        _held(op_type, x)
        return kernel(as_symbol(x))
    return compute


def _rounding(op_type: str, kernel):
    # Integers are already whole (NumPy's floor of an int, cast back to it, is the same value).
    def compute(x):
        _held(op_type, x)
        x = as_symbol(x)
        return kernel(x) if _is_float(dtype_of(x)) else mx.sym.identity(x)
    return compute


def _round_half_to_even(x: Symbol) -> Symbol:
    if dtype_of(x) == np.float16:  # np.round has no float16 kernel; float32 holds every float16 exactly
        return mx.sym.cast(_numpy("round")(mx.sym.cast(x, "float32")), "float16")
    return _numpy("round")(x)


Add = _converter("Add", _binary("Add", mx.sym.broadcast_add, mx.sym.elemwise_add), "``A + B``.")
Sub = _converter("Sub", _binary("Sub", mx.sym.broadcast_sub, mx.sym.elemwise_sub), "``A - B``.")
Mul = _converter("Mul", _binary("Mul", mx.sym.broadcast_mul, mx.sym.elemwise_mul), "``A * B``.")
Div = _converter("Div", _div, "``A / B`` (integer division truncates; by 0 gives 0).")
Pow = _converter("Pow", _pow, "``X ** Y`` in X's type.")
Neg = _converter("Neg", _neg, "``-X``.")
Abs = _converter("Abs", _abs, "``|X|``.")
Sign = _converter("Sign", _sign, "-1, 0 or 1.")
Exp = _converter("Exp", _float_unary("Exp", mx.sym.exp), "``e ** X``.")
Log = _converter("Log", _float_unary("Log", mx.sym.log), "Natural logarithm.")
Sqrt = _converter("Sqrt", _float_unary("Sqrt", mx.sym.sqrt), "Square root.")
Reciprocal = _converter("Reciprocal", _float_unary("Reciprocal", mx.sym.reciprocal), "``1 / X``.")
Erf = _converter("Erf", _float_unary("Erf", mx.sym.erf), "The error function.")
Sin = _converter("Sin", _float_unary("Sin", mx.sym.sin), "Sine.")
Cos = _converter("Cos", _float_unary("Cos", mx.sym.cos), "Cosine.")
Tan = _converter("Tan", _float_unary("Tan", mx.sym.tan), "Tangent.")
Asin = _converter("Asin", _float_unary("Asin", mx.sym.arcsin), "Arcsine (NaN outside [-1, 1]).")
Acos = _converter("Acos", _float_unary("Acos", mx.sym.arccos), "Arccosine (NaN outside [-1, 1]).")
Atan = _converter("Atan", _float_unary("Atan", mx.sym.arctan), "Arctangent.")
Sinh = _converter("Sinh", _float_unary("Sinh", mx.sym.sinh), "Hyperbolic sine.")
Cosh = _converter("Cosh", _float_unary("Cosh", mx.sym.cosh), "Hyperbolic cosine.")
Asinh = _converter("Asinh", _float_unary("Asinh", mx.sym.arcsinh), "Inverse hyperbolic sine.")
Acosh = _converter("Acosh", _float_unary("Acosh", mx.sym.arccosh), "Inverse hyperbolic cosine (NaN below 1).")
Atanh = _converter("Atanh", _float_unary("Atanh", mx.sym.arctanh),
                   "Inverse hyperbolic tangent (NaN outside [-1, 1]).")
Floor = _converter("Floor", _rounding("Floor", mx.sym.floor), "Round down.")
Ceil = _converter("Ceil", _rounding("Ceil", mx.sym.ceil), "Round up.")
Round = _converter("Round", _rounding("Round", _round_half_to_even), "Round half to even.")


# ------------------------------------------------------------------------------------------ comparisons, logic

def _logical(op_type: str, kernel):
    def compute(*inputs):
        dtypes = [dtype_of(x) for x in inputs]
        if any(dtype != np.bool_ for dtype in dtypes):
            raise ShapeError(f"logical operators take bool tensors, got {[str(d) for d in dtypes]}; Cast first")
        if len(inputs) == 1:
            return kernel(as_symbol(inputs[0]))
        return kernel(*operands(*inputs, op_type))
    return compute


def _isnan(x):
    _held("IsNaN", x)
    return _numpy("isnan")(x) if _is_float(dtype_of(x)) else _static_zeros(x)


Equal = _converter("Equal", _binary("Equal", _equal), "``A == B`` (bool).")
Less = _converter("Less", _binary("Less", _less), "``A < B`` (bool).")
LessOrEqual = _converter("LessOrEqual", _binary("LessOrEqual", _less_equal), "``A <= B`` (bool).")
Greater = _converter("Greater", _binary("Greater", _greater), "``A > B`` (bool).")
GreaterOrEqual = _converter("GreaterOrEqual", _binary("GreaterOrEqual", _greater_equal), "``A >= B`` (bool).")
IsNaN = _converter("IsNaN", _isnan, "NaN test (bool).")
Not = _converter("Not", _logical("Not", _numpy("logical_not")), "Logical not of a bool tensor.")
And = _converter("And", _logical("And", _and), "Logical and of bool tensors.")
Or = _converter("Or", _logical("Or", _or), "Logical or of bool tensors.")
Xor = _converter("Xor", _logical("Xor", _xor), "Logical exclusive or of bool tensors.")


@register("IsInf")
class IsInf(MXOp):
    """True where the input is +inf (if ``detect_positive``) or -inf (if ``detect_negative``)."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("IsInf", attributes))

    def __call__(self, x):
        _held("IsInf", x)
        if not _is_float(dtype_of(x)) or not (self.detect_negative or self.detect_positive):
            return _static_zeros(x)  # integers are never infinite
        if self.detect_negative and self.detect_positive:
            return _numpy("isinf")(x)
        return _numpy("isposinf" if self.detect_positive else "isneginf")(x)


@register("Where")
class Where(MXOp):
    """``X`` where the condition holds, else ``Y`` (all three broadcast together)."""

    def __call__(self, condition, x, y):
        shapes = [shape_of(v) for v in (condition, x, y)]
        try:
            np.broadcast_shapes(*shapes)
        except ValueError:
            raise ShapeError(f"Where: shapes {shapes[0]}, {shapes[1]}, {shapes[2]} do not broadcast together") \
                from None
        _held("Where", condition, x, y)
        x, y = operands(x, y, "Where")
        return _where(condition, x, y)


# ------------------------------------------------------------------------------------------------ variadic

def _fold(combine, inputs):
    return functools.reduce(combine, inputs)


def _extremum(op_type: str, combine, boolean):
    def compute(*inputs):
        inputs = _all_operands(op_type, inputs)
        dtype = dtype_of(inputs[0])
        if dtype == np.bool_:  # NumPy's maximum of bools is "or" (MXNet has no bool kernels for it)
            return _fold(boolean, inputs)
        if not _is_float(dtype):
            return _fold(combine, inputs)
        return _shared_ties(_fold(combine, inputs), inputs, dtype)
    return compute


def _shared_ties(extremum: Symbol, inputs: list, dtype: np.dtype) -> Symbol:
    """``extremum`` with the reference's gradient: each input equal to it gets an equal share (MXNet's
    maximum/minimum give every tied input the whole gradient). The value is the sum of the tied inputs over
    their number: exact for one or two (one, a power of two: the common cases), within rounding otherwise."""
    out = mx.sym.BlockGrad(extremum)
    zero = _scalar(0, dtype)
    hits = [_equal(x, out) for x in inputs]
    total = _fold(mx.sym.broadcast_add, [_where(hit, x, zero) for hit, x in zip(hits, inputs)])
    count = _fold(mx.sym.broadcast_add, [mx.sym.cast(hit, dtype.name) for hit in hits])
    return mx.sym.broadcast_div(total, mx.sym.BlockGrad(count))


def _variadic(op_type: str, compute) -> type:
    def checked(*inputs):
        inputs = [x for x in inputs if x is not None]
        if not inputs:
            raise ShapeError(f"{op_type}: needs at least one input")
        if len(inputs) == 1 and op_type != "Mean":
            _held(op_type, inputs[0])
            return mx.sym.identity(as_symbol(inputs[0]))  # a tensor of its own, as the reference's copy
        return compute(*inputs)
    return _converter(op_type, checked, f"ONNX {op_type} of one or more broadcasting inputs.")


def _sum(*inputs):
    return _fold(mx.sym.broadcast_add, _all_operands("Sum", inputs))


def _mean(*inputs):
    inputs = _all_operands("Mean", inputs)
    total = _fold(mx.sym.broadcast_add, inputs)
    # Integers: the reference divides and casts back to the integer type, a truncation (C's division)
    return mx.sym.broadcast_div(total, _scalar(len(inputs), dtype_of(total)))


Max = _variadic("Max", _extremum("Max", mx.sym.broadcast_maximum, _or))
Min = _variadic("Min", _extremum("Min", mx.sym.broadcast_minimum, _and))
Sum = _variadic("Sum", _sum)
Mean = _variadic("Mean", _mean)


# ------------------------------------------------------------------------------------------------ Mod

@register("Mod")
class Mod(MXOp):
    """Remainder with the sign of the divisor (``fmod=0``, Python's ``%``) or of the dividend (``fmod=1``, C's
    fmod), for floats and integers alike; an integer remainder by 0 is 0. The gradient is the reference's:
    1 for A, ``-floor(A / B)`` (``-trunc(A / B)`` with fmod) for B."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("Mod", attributes))

    def __call__(self, a, b):
        plain = _plain_divisor(b)
        a, b = operands(a, b, "Mod")
        dtype = dtype_of(a)
        if _is_float(dtype):
            remainder = self._float(a, b, dtype)
            if plain:
                return remainder
            # A float remainder by 0 is NaN (MXNet's mod gives 0): added, so A's gradient stays 1 there
            nan = mx.sym.BlockGrad(_where(_equal(b, _scalar(0, dtype)), _scalar(np.nan, dtype), _scalar(0, dtype)))
            return mx.sym.broadcast_add(remainder, nan)
        zero, minus_one, safe = (None, None, b) if plain else _integer_divisor(b, dtype)
        # exact: |trunc(a / b) * b| <= |a| for b not 0 or -1; this is C's fmod (the dividend's sign)
        remainder = mx.sym.broadcast_sub(a, mx.sym.broadcast_mul(mx.sym.broadcast_div(a, safe), safe))
        if not self.fmod and dtype.kind != "u":  # the divisor's sign: add it where the signs differ
            zero_value = _scalar(0, dtype)
            differ = _and(_not_equal(remainder, zero_value),
                          _not_equal(_less(remainder, zero_value), _less(safe, zero_value)))
            remainder = _where(differ, mx.sym.broadcast_add(remainder, safe), remainder)
        if zero is None:
            return remainder
        special = zero if minus_one is None else _or(zero, minus_one)
        return _where(special, _scalar(0, dtype), remainder)  # x mod -1 = 0; x mod 0 = 0 (NumPy)

    def _float(self, a: Symbol, b: Symbol, dtype: np.dtype) -> Symbol:
        mod = _numpy("mod")  # exact (a double fmod); gradients 1 and -floor(a / b)
        if not self.fmod:
            return mod(a, b)
        # C's fmod: the remainder of the magnitudes, with the dividend's sign. The signs are constants of the
        # gradient, so A's is 1 and B's -sign(a) sign(b) floor(|a| / |b|) = -trunc(a / b).
        zero, one, minus_one = _scalar(0, dtype), _scalar(1, dtype), _scalar(-1, dtype)
        sign_a = mx.sym.BlockGrad(_where(_less(a, zero), minus_one, one))
        sign_b = mx.sym.BlockGrad(_where(_less(b, zero), minus_one, one))
        return mx.sym.broadcast_mul(sign_a, mod(mx.sym.broadcast_mul(sign_a, a), mx.sym.broadcast_mul(sign_b, b)))


# ------------------------------------------------------------------------------------------------ bits

def _require_integer(op_type: str, *inputs) -> None:
    for x in inputs:
        if dtype_of(x).kind not in "iu":
            raise ShapeError(f"{op_type} takes integer tensors, got {dtype_of(x)}; Cast to an integer type first")


#: 2 ** k as int64 for k in [0, 64): 2 ** 63 wraps to INT64_MIN, as a left shift by 63 does.
_POWERS_OF_TWO = np.array([1 << k for k in range(64)], dtype=np.uint64).view(np.int64)


@register("BitShift")
class BitShift(MXOp):
    """``X << Y`` (``LEFT``) or ``X >> Y`` (``RIGHT``) with broadcasting, as the reference: shifts outside
    ``[0, bit width)`` give 0 (-1 for a right shift of a negative signed value), left shifts wrap. MXNet has no
    shift kernels: a left shift multiplies by ``2 ** k`` and a right shift floor-divides by it, in int64 (a
    product's low bits are the wrapped shift's), the result cast back. No gradient."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("BitShift", attributes))
        self.left = self.direction == "LEFT"

    def __call__(self, x, shift):
        _require_integer("BitShift", x, shift)
        broadcast_shape(x, shift, op_type="BitShift")
        _held("BitShift", x, shift)
        dtype = dtype_of(x)
        width, signed = dtype.itemsize * 8, dtype.kind == "i"
        x, shift = as_symbol(x), as_symbol(shift)
        wide = x if dtype == np.int64 else mx.sym.cast(x, "int64")
        amount = shift if dtype_of(shift) == np.int64 else mx.sym.cast(shift, "int64")
        zero = _scalar(0, np.int64)
        # floor division needs 2 ** k > 0: k < 63 (a signed right shift by 63 is the overflow value anyway)
        limit = width if self.left or width < 64 else 63
        valid = _and(_greater_equal(amount, zero), _less(amount, _scalar(limit, np.int64)))
        power = mx.sym.take(as_symbol(_POWERS_OF_TWO), _where(valid, amount, zero))
        if self.left:
            shifted = mx.sym.broadcast_mul(wide, power)
            overflow = zero
        else:
            quotient = mx.sym.broadcast_div(wide, power)  # truncates toward zero
            if signed:  # floor: one less where a negative value was not a multiple
                remainder = mx.sym.broadcast_sub(wide, mx.sym.broadcast_mul(quotient, power))
                quotient = _where(_less(remainder, zero), mx.sym.broadcast_sub(quotient, _scalar(1, np.int64)),
                                  quotient)
            shifted = quotient
            overflow = _where(_less(wide, zero), _scalar(-1, np.int64), zero) if signed else zero
        out = _where(valid, shifted, overflow)
        return out if dtype == np.int64 else mx.sym.cast(out, dtype.name)


def _bitwise(op_type: str, kernel):
    def compute(*inputs):
        _require_integer(op_type, *inputs)
        if len(inputs) == 1:
            _held(op_type, inputs[0])
            return kernel(as_symbol(inputs[0]))
        return kernel(*operands(*inputs, op_type))
    return compute


BitwiseAnd = _converter("BitwiseAnd", _bitwise("BitwiseAnd", _and), "``A & B`` on integer tensors, with broadcasting.")
BitwiseOr = _converter("BitwiseOr", _bitwise("BitwiseOr", _or), "``A | B`` on integer tensors, with broadcasting.")
BitwiseXor = _converter("BitwiseXor", _bitwise("BitwiseXor", _xor), "``A ^ B`` on integer tensors, with broadcasting.")
BitwiseNot = _converter("BitwiseNot", _bitwise("BitwiseNot", _numpy("bitwise_not")), "``~X`` on integer tensors.")


_ONNX_STRING = 8
_BYTES = (np.dtype(np.bool_), np.dtype(np.int8), np.dtype(np.uint8))


@register("BitCast")
class BitCast(MXOp):
    """Reinterpret the bits of ``X`` as the ONNX type ``to`` (same width; no value conversion, no gradient).
    MXNet has no kernel reinterpreting bits: between its 8-bit types (bool, int8, uint8) a cast keeps the byte
    (modular conversion; a nonzero byte reads as True); other targets are refused when the converter is built,
    so executors run the node on the reference."""

    def __init__(self, **attributes) -> None:
        to = operator_attributes("BitCast", attributes).to
        if to == _ONNX_STRING:
            raise UnsupportedOperatorError("BitCast: strings have no fixed bit width; use Cast instead")
        self.dtype = onnx_dtype(to)
        if self.dtype not in _BYTES:
            raise UnsupportedOperatorError(f"BitCast: MXNet has no kernel reinterpreting bits as {self.dtype} (only "
                                           "between its 8-bit types)")

    def __call__(self, x):
        dtype = dtype_of(x)
        if dtype.itemsize != self.dtype.itemsize:
            raise ShapeError(f"BitCast: {dtype} ({dtype.itemsize * 8} bits) and {self.dtype} "
                             f"({self.dtype.itemsize * 8} bits) differ in width; BitCast needs equal widths")
        _held("BitCast", x)
        x = mx.sym.BlockGrad(as_symbol(x))
        if dtype == self.dtype:
            return mx.sym.identity(x)
        if self.dtype == np.bool_:
            return _not_equal(x, _scalar(0, dtype))
        return mx.sym.cast(x, self.dtype.name)


# ---------------------------------------------------------------------------------------- selection, types

def _bound(name: str, value, x: Symbol, dtype: np.dtype) -> Symbol:
    """A Clip bound as a 0-d symbol of X's dtype, with no gradient (the reference gives it none)."""
    if np.prod(shape_of(value), dtype=np.int64) != 1:
        raise ShapeError(f"Clip: {name} must be a scalar, got shape {shape_of(value)}")
    if not isinstance(value, Symbol):
        return _scalar(np.asarray(value).reshape(()).astype(dtype), dtype)
    _held("Clip", value)
    return mx.sym.BlockGrad(as_symbol(reshape(value, ()), dtype))


@register("Clip")
class Clip(MXOp):
    """``min(max(X, min), max)``; min/max are optional scalar inputs (attributes before opset 11). The gradient
    passes where ``min <= X <= max`` (MXNet's maximum/minimum give X the gradient at a tie)."""

    def __init__(self, **attributes) -> None:
        self.low, self.high = operator_attributes("Clip", attributes)  # min, max

    def __call__(self, x, low=None, high=None):
        low = self.low if low is None else low
        high = self.high if high is None else high
        _held("Clip", x)
        dtype = dtype_of(x)
        bounds = [(name, _bound(name, value, x, dtype)) for name, value in (("min", low), ("max", high))
                  if value is not None]
        out = as_symbol(x)
        for name, bound in bounds:
            out = (mx.sym.broadcast_maximum if name == "min" else mx.sym.broadcast_minimum)(out, bound)
        return out if bounds else mx.sym.identity(out)


def _mx_dtype(op_type: str, to) -> np.dtype:
    """The NumPy dtype of ONNX type ``to`` if MXNet holds it; UnsupportedOperatorError for a type it does not
    (the reference converts), the reference's ShapeError for a number that is no ONNX type."""
    dtype = onnx_dtype(to) if isinstance(to, (int, np.integer)) else None
    try:
        return np_dtype(to)
    except ShapeError:
        raise UnsupportedOperatorError(f"{op_type}: MXNet holds no {dtype if dtype is not None else to} tensors "
                                       "(the reference framework converts to it)") from None


def _cast(x, dtype: np.dtype, op_type: str) -> Symbol:
    _held(op_type, x)
    x = as_symbol(x)
    return mx.sym.identity(x) if dtype_of(x) == dtype else mx.sym.cast(x, dtype.name)


@register("Cast")
class Cast(MXOp):
    """Convert to the ONNX data type ``to`` (C conversions, as NumPy's ``astype``: floats to integers truncate);
    the gradient flows between floating types."""

    def __init__(self, **attributes) -> None:
        self.dtype = _mx_dtype("Cast", operator_attributes("Cast", attributes).to)

    def __call__(self, x):
        return _cast(x, self.dtype, "Cast")


@register("CastLike")
class CastLike(MXOp):
    """Convert the first input to the dtype of the second."""

    def __init__(self, **attributes) -> None:
        operator_attributes("CastLike", attributes)  # saturate and round_mode, which change no conversion here

    def __call__(self, x, like):
        _held("CastLike", like)
        return _cast(x, dtype_of(like), "CastLike")
