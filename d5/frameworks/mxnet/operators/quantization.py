"""Quantization operators as native MXNet operations: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear,
MatMulInteger, QLinearMatMul, ConvInteger and QLinearConv.

MXNet tensors hold uint8, int8 and int32 (not uint16/int16, nor int4/uint4/int2/uint2 or float8/float4): those are
the integer outputs here; an input of another integer type known while composing (a quantized weight, a zero
point) is read through NumPy, so DequantizeLinear also takes uint16/int16/int4 values. Scales and zero points are
per tensor, per axis or blocked, laid out by :func:`d5.ops.onnx_semantics.quantization_axis`. Rounding is half to
even (computed from ``floor``: MXNet's ``rint``/``round`` round ties away from even) and results saturate, as the
reference. MXNet's ``contrib.quantize``/``quantized_conv`` follow MXNet's own symmetric int8 scheme (no zero
points, no saturation rules of ONNX), so integer products run as float64 ``matmul`` / ``Convolution``: exact for
these types (every partial sum is an integer below 2**53).
"""
from __future__ import annotations

import mxnet as mx
import numpy as np

from d5.errors import ShapeError, UnsupportedOperatorError
from d5.frameworks.mxnet.operators import MXOp, register
from d5.frameworks.mxnet.operators._helpers import HELD_DTYPES, Symbol, as_symbol
from d5.frameworks.mxnet.operators._helpers import dtype_of, np_dtype, pad_sides, reshape, resolve_pads, shape_of
from d5.ops.onnx_attributes import adopt, operator_attributes
from d5.ops.onnx_semantics import quantization_axis
from d5.ops.window_checks import (QUANTIZED_RANGES, a_zero_point_rows, check_b_zero_point, check_conv_weights,
                                  check_matmul_integer, check_requantize_broadcast, check_zero_point_broadcast,
                                  matmul_plan, qlinear_matmul_shapes)

# NumPy's promotion of two floating types (float16 with float32 gives float32).
_FLOAT_RANK = {"float16": 1, "float32": 2, "float64": 3}


def _integer_range(op_name: str, dtype) -> tuple[int, int]:
    try:
        return QUANTIZED_RANGES[np.dtype(dtype).name]
    except (KeyError, TypeError):
        raise UnsupportedOperatorError(f"{op_name}: quantization to {dtype} is not supported; supported: "
                                       f"{', '.join(QUANTIZED_RANGES)} (float8/float4 are not)") from None


def _target(op_name: str, dtype) -> np.dtype:
    """An integer type the outputs can take: one MXNet holds (uint8, int8, int32)."""
    _integer_range(op_name, dtype)
    if np.dtype(dtype) not in HELD_DTYPES:
        raise UnsupportedOperatorError(f"{op_name}: MXNet has no {np.dtype(dtype).name} tensors; the MXNet framework "
                                       "quantizes to uint8, int8 and int32")
    return np.dtype(dtype)


def _onnx_type(op_name: str, number: int) -> np.dtype:
    try:
        return np_dtype(number)
    except ShapeError:
        raise UnsupportedOperatorError(f"{op_name}: output_dtype {number} (TensorProto.DataType) has no MXNet dtype; "
                                       "the MXNet framework supports uint8, int8, int32 and the float types") from None


def _promoted(a: np.dtype, b: np.dtype) -> np.dtype:
    """The floating type NumPy computes ``a op b`` in (an integer operand takes the other's type)."""
    if a.kind != "f":
        return b
    if b.kind != "f" or a == b:
        return a
    return max(a, b, key=lambda t: _FLOAT_RANK[t.name])


def _float(value, dtype) -> Symbol:
    """``value`` (a symbol, or a NumPy value of any integer or float type) as a symbol of float ``dtype``."""
    if value is None:
        return None
    if isinstance(value, Symbol):
        return value if dtype_of(value) == np.dtype(dtype) else mx.sym.cast(value, np.dtype(dtype).name)
    return as_symbol(np.asarray(value).astype(dtype))


def _round(x):
    """``x`` rounded to the nearest integer, ties to even (NumPy's rint)."""
    low = mx.sym.floor(x)
    rest = x - low
    odd = low - mx.sym.floor(low * 0.5) * 2.0  # 1 where low is odd
    return mx.sym.where(rest > 0.5, low + 1.0, mx.sym.where(rest < 0.5, low, low + odd))


def _saturate(values, dtype: np.dtype, op_name: str):
    """Integer-valued float ``values`` clipped to the range of integer ``dtype`` and cast to it."""
    low, high = _integer_range(op_name, dtype)
    values = values if dtype_of(values) == np.float64 else mx.sym.cast(values, "float64")  # exact bounds
    return mx.sym.cast(mx.sym.clip(values, float(low), float(high)), dtype.name)


def _broadcastable(value, shape, axis: int, block_size: int, what: str):
    """A scale or zero point (symbol or NumPy) reshaped/repeated so that it broadcasts against ``shape``."""
    axis = quantization_axis(what, shape_of(value), tuple(shape), axis, block_size)
    if axis is None:
        return np.asarray(value).reshape(()) if not isinstance(value, Symbol) else reshape(value, ())
    if not block_size:
        dims = [1] * len(shape)
        dims[axis] = shape[axis]
        return np.reshape(value, dims) if not isinstance(value, Symbol) else reshape(value, dims)
    if not isinstance(value, Symbol):
        return np.repeat(value, int(block_size), axis=axis).take(np.arange(shape[axis]), axis=axis)
    repeated = mx.sym.repeat(value, repeats=int(block_size), axis=axis)
    return mx.sym.slice_axis(repeated, axis=axis, begin=0, end=shape[axis])  # the last block may be partial


@register("QuantizeLinear")
class QuantizeLinear(MXOp):
    """``Y = saturate(round(X / scale) + zero_point)``; Y takes the zero point's dtype, else ``output_dtype``,
    else uint8."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("QuantizeLinear", attributes))
        if self.output_dtype:
            _target("QuantizeLinear", _onnx_type("QuantizeLinear", self.output_dtype))

    def __call__(self, x, y_scale, y_zero_point=None):
        if y_zero_point is not None:
            dtype = _target("QuantizeLinear", dtype_of(y_zero_point))
        elif self.output_dtype:
            dtype = _onnx_type("QuantizeLinear", self.output_dtype)
        else:
            dtype = np.dtype(np.uint8)
        shape = shape_of(x)
        scale = _broadcastable(y_scale, shape, self.axis, self.block_size, "QuantizeLinear scale")
        compute = _onnx_type("QuantizeLinear", self.precision) if self.precision else \
            _promoted(dtype_of(x), dtype_of(y_scale))
        scaled = mx.sym.broadcast_div(_float(x, compute), _float(scale, compute))
        values = mx.sym.cast(_round(scaled), "float64")
        if y_zero_point is not None:
            zero = _broadcastable(y_zero_point, shape, self.axis, self.block_size, "QuantizeLinear zero_point")
            values = mx.sym.broadcast_add(values, _float(zero, np.float64))
        return _saturate(values, dtype, "QuantizeLinear")


@register("DequantizeLinear")
class DequantizeLinear(MXOp):
    """``Y = (X - zero_point) * scale`` in the scale's dtype (or ``output_dtype``)."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("DequantizeLinear", attributes))
        if self.output_dtype:
            _onnx_type("DequantizeLinear", self.output_dtype)

    def __call__(self, x, x_scale, x_zero_point=None):
        _integer_range("DequantizeLinear", dtype_of(x))
        shape = shape_of(x)
        values = _float(x, np.float32)
        if x_zero_point is not None:
            zero = _broadcastable(x_zero_point, shape, self.axis, self.block_size, "DequantizeLinear zero_point")
            values = mx.sym.broadcast_sub(values, _float(zero, np.float32))
        scale = _broadcastable(x_scale, shape, self.axis, self.block_size, "DequantizeLinear scale")
        compute = _promoted(np.dtype(np.float32), dtype_of(x_scale))
        y = mx.sym.broadcast_mul(_float(values, compute), _float(scale, compute))
        dtype = _onnx_type("DequantizeLinear", self.output_dtype) if self.output_dtype else dtype_of(x_scale)
        return y if dtype == compute else mx.sym.cast(y, dtype.name)


@register("DynamicQuantizeLinear")
class DynamicQuantizeLinear(MXOp):
    """uint8 quantization with the scale and zero point chosen from X's range (always including 0); an
    all-zero X gets scale 1, as onnxruntime. Outputs ``(Y, scale, zero_point)``, the last two 0-d."""

    def __init__(self, **attributes) -> None:
        pass

    def __call__(self, x):
        x = _float(x, np.float32)
        if 0 in shape_of(x):
            low = high = as_symbol(np.zeros((), np.float32))
        else:
            low = mx.sym.minimum(reshape(mx.sym.min(x), ()), 0.0)
            high = mx.sym.maximum(reshape(mx.sym.max(x), ()), 0.0)
        scale = (high - low) / 255.0
        scale = mx.sym.where(scale == 0.0, mx.sym.ones_like(scale), scale)
        zero_point = _saturate(_round(-low / scale), np.dtype(np.uint8), "DynamicQuantizeLinear")
        y = mx.sym.broadcast_add(mx.sym.cast(_round(mx.sym.broadcast_div(x, scale)), "float64"),
                                 mx.sym.cast(zero_point, "float64"))
        return _saturate(y, np.dtype(np.uint8), "DynamicQuantizeLinear"), scale, zero_point


def _product(op_name: str, left, right, shapes: str):
    """NumPy's matmul on static shapes (a 1-D operand gains an axis that the result loses, batch axes broadcast);
    a ShapeError naming ``shapes`` where they do not multiply."""
    a, b, batch, drop_row, drop_column = matmul_plan(op_name, shape_of(left), shape_of(right), shapes)
    if drop_row:
        left = reshape(left, a)
    if drop_column:
        right = reshape(right, b)
    product = mx.sym.np.matmul(left.as_np_ndarray(), right.as_np_ndarray()).as_nd_ndarray()
    shape = tuple(batch) + ((a[-2],) if not drop_row else ()) + ((b[-1],) if not drop_column else ())
    return reshape(product, shape) if drop_row or drop_column else product


def _shifted(op_name: str, value, zero, shapes: str):
    """``value - zero`` in float64 with NumPy broadcasting; a ShapeError where the shapes do not broadcast."""
    if zero is None:
        return _float(value, np.float64)
    check_zero_point_broadcast(op_name, shape_of(value), shape_of(zero), shapes)
    return mx.sym.broadcast_sub(_float(value, np.float64), _float(zero, np.float64))


@register("MatMulInteger")
class MatMulInteger(MXOp):
    """``(A - a_zero_point) @ (B - b_zero_point)`` in int32 (per-row A and per-column B zero points)."""

    def __init__(self, **attributes) -> None:
        pass

    def __call__(self, a, b, a_zero_point=None, b_zero_point=None):
        a_shape, b_shape = shape_of(a), shape_of(b)
        check_matmul_integer(a_shape, b_shape)
        left = _float(a, np.float64)
        if a_zero_point is not None:
            rows = a_zero_point_rows(a_shape, shape_of(a_zero_point))
            size = int(np.prod(shape_of(a_zero_point)))
            zero = _float(a_zero_point, np.float64)
            left = mx.sym.broadcast_sub(left, reshape(zero, (rows, 1) if size > 1 else ()))
        check_b_zero_point(b_shape, None if b_zero_point is None else shape_of(b_zero_point))
        right = _float(b, np.float64)
        if b_zero_point is not None:
            zero = _float(b_zero_point, np.float64)
            right = mx.sym.broadcast_sub(right, zero if int(np.prod(shape_of(b_zero_point))) > 1 else
                                         reshape(zero, ()))
        product = _product("MatMulInteger", left, right, f"shapes {a_shape} and {b_shape}")
        # Through int64, so that int32 wraps around as the reference's.
        return mx.sym.cast(mx.sym.cast(product, "int64"), "int32")


@register("QLinearMatMul")
class QLinearMatMul(MXOp):
    """Quantized matmul: the integer product of the zero-point-shifted inputs times ``a_scale * b_scale /
    y_scale`` (computed in the scales' dtype, as onnx.reference), plus y_zero_point, saturated."""

    def __init__(self, **attributes) -> None:
        pass

    def __call__(self, a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point=None):
        shapes = qlinear_matmul_shapes(shape_of(a), shape_of(b),
                                       None if a_zero_point is None else shape_of(a_zero_point),
                                       None if b_zero_point is None else shape_of(b_zero_point))
        dtype = _target("QLinearMatMul", dtype_of(y_zero_point if y_zero_point is not None else a))
        left = _shifted("QLinearMatMul", a, a_zero_point, shapes)
        right = _shifted("QLinearMatMul", b, b_zero_point, shapes)
        product = _product("QLinearMatMul", left, right, shapes)
        terms = [a_scale, b_scale, y_scale] + ([] if y_zero_point is None else [y_zero_point])
        check_requantize_broadcast(shape_of(product), (shape_of(t) for t in terms))
        common = _promoted(_promoted(dtype_of(a_scale), dtype_of(b_scale)), dtype_of(y_scale))
        multiplier = mx.sym.broadcast_div(mx.sym.broadcast_mul(_float(a_scale, common), _float(b_scale, common)),
                                          _float(y_scale, common))
        real = mx.sym.broadcast_mul(product, _float(multiplier, np.float64))
        if y_zero_point is not None:
            real = mx.sym.broadcast_add(real, _float(y_zero_point, np.float64))
        return _saturate(_round(real), dtype, "QLinearMatMul")


# ------------------------------------------------------------------------------------ integer convolutions

class _IntegerConv(MXOp):
    """The exact integer convolution of ConvInteger and QLinearConv: MXNet's ``Convolution`` in float64 (padding
    adds the real zero: the zero points are subtracted first, as the reference)."""

    op_name = "ConvInteger"

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes(self.op_name, attributes))  # Conv's attributes, checked under this name

    def _accumulate(self, x, w, x_zero_point, w_zero_point):
        """The float64 convolution (N, M, spatial...) of the shifted ``x`` and ``w`` (M, C/group, kernel...)."""
        shape, w_shape = shape_of(x), shape_of(w)
        rank = len(shape)
        kernel = check_conv_weights(self.op_name, shape, w_shape, shape[1], self.kernel_shape, self.group)
        _, strides, dilations, sides = resolve_pads(self.op_name, shape[2:], kernel, self.strides, self.dilations,
                                                    self.pads, self.auto_pad, clamp_same_pads=True)
        shifted_x = _float(x, np.float64)
        if x_zero_point is not None:
            shifted_x = mx.sym.broadcast_sub(shifted_x, reshape(_float(x_zero_point, np.float64), (1,) * rank))
        shifted_w = _float(w, np.float64)
        if w_zero_point is not None:
            per_channel = int(np.prod(shape_of(w_zero_point))) > 1
            zero = reshape(_float(w_zero_point, np.float64), (w_shape[0],) + (1,) * (rank - 1) if per_channel
                           else (1,) * rank)
            shifted_w = mx.sym.broadcast_sub(shifted_w, zero)
        symmetric = all(lo == hi and lo >= 0 for lo, hi in sides)
        pad = tuple(lo for lo, _ in sides) if symmetric else (0,) * len(kernel)
        if not symmetric:
            shifted_x = pad_sides(shifted_x, sides)
        return mx.sym.Convolution(shifted_x, shifted_w, kernel=kernel, stride=tuple(strides),
                                  dilate=tuple(dilations), pad=pad, num_filter=w_shape[0], num_group=int(self.group),
                                  no_bias=True)


def _per_channel(value, rank: int):
    """A scalar, or a per-output-channel vector shaped to broadcast against (N, M, ...) outputs (float64)."""
    size = int(np.prod(shape_of(value)))
    return reshape(_float(value, np.float64), (1,) * rank if size == 1 else (1, size) + (1,) * (rank - 2))


@register("ConvInteger")
class ConvInteger(_IntegerConv):
    """``conv(X - x_zero_point, W - w_zero_point)`` in int32 (w_zero_point may be per output channel)."""

    def __call__(self, x, w, x_zero_point=None, w_zero_point=None):
        accumulated = self._accumulate(x, w, x_zero_point, w_zero_point)
        return mx.sym.cast(mx.sym.cast(_round(accumulated), "int64"), "int32")


@register("QLinearConv")
class QLinearConv(_IntegerConv):
    """Quantized Conv: the integer conv of the shifted inputs plus int32 bias B, requantized to
    ``y_scale``/``y_zero_point`` (``w_scale``/``w_zero_point`` may be per output channel)."""

    op_name = "QLinearConv"

    def __call__(self, x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point=None, bias=None):
        dtype = _target("QLinearConv", dtype_of(y_zero_point if y_zero_point is not None else x))
        accumulated = self._accumulate(x, w, x_zero_point, w_zero_point)
        rank = len(shape_of(x))
        if bias is not None:
            accumulated = mx.sym.broadcast_add(accumulated, _per_channel(bias, rank))
        scales = mx.sym.broadcast_mul(_per_channel(x_scale, rank), _per_channel(w_scale, rank))
        multiplier = mx.sym.broadcast_div(scales, _per_channel(y_scale, rank))
        real = _round(mx.sym.broadcast_mul(accumulated, multiplier))
        if y_zero_point is not None:
            real = mx.sym.broadcast_add(real, _per_channel(y_zero_point, rank))
        return _saturate(real, dtype, "QLinearConv")


__all__ = ["ConvInteger", "DequantizeLinear", "DynamicQuantizeLinear", "MatMulInteger", "QLinearConv",
           "QLinearMatMul", "QuantizeLinear"]
