"""Quantization operators as native TensorFlow operations: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear,
MatMulInteger, QLinearMatMul, ConvInteger and QLinearConv.

Integer types uint8/int8/uint16/int16 (and int32 where ONNX allows it) are supported; TensorFlow has no int4/uint4/
int2/uint2 or float8/float4 tensors, so those targets raise UnsupportedOperatorError. Scales and zero points are
per tensor, per axis or blocked, laid out by :func:`d5.ops.onnx_semantics.quantization_axis`. Rounding is half to
even and results saturate, as the reference. Integer products run as float64 matmuls / convolutions: exact for
these types (every partial sum is an integer below 2**53), available on every device (TensorFlow's CPU Conv2D has
no integer kernels, and float32 on GPUs may round through TF32). Integer convolutions compute channels-last (the
layout of TensorFlow's CPU convolution kernels); their ONNX-layout ``__call__`` converts around it.
"""
from __future__ import annotations

import tensorflow as tf

from d5.errors import ShapeError, UnsupportedOperatorError
from d5.frameworks.tensorflow.operators import TFOp, register
from d5.frameworks.tensorflow.operators._helpers import pad_sides, resolve_pads, static_shape, tf_dtype
from d5.frameworks.tensorflow.operators.image import exact_divide
from d5.frameworks.tensorflow.tensors import from_channels_last, to_channels_last
from d5.ops.onnx_attributes import adopt, operator_attributes
from d5.ops.onnx_semantics import quantization_axis
from d5.ops.window_checks import (QUANTIZED_RANGES, a_zero_point_rows, check_b_zero_point, check_conv_weights,
                                  check_matmul_integer, check_requantize_broadcast, check_zero_point_broadcast,
                                  matmul_plan, qlinear_matmul_shapes)

# Saturation ranges of the integer types quantization targets that TensorFlow has.
_RANGES = {getattr(tf, name): QUANTIZED_RANGES[name] for name in ("uint8", "int8", "uint16", "int16", "int32")}
# TensorFlow does not promote types; torch's rules for two floating types (float16 with bfloat16 gives float32).
_FLOAT_RANK = {tf.float16: 1, tf.bfloat16: 1, tf.float32: 2, tf.float64: 3}


def _integer_range(op_name: str, dtype) -> tuple[int, int]:
    try:
        return _RANGES[dtype]
    except (KeyError, TypeError):
        raise UnsupportedOperatorError(
            f"{op_name}: quantization to {dtype} is not supported by the TensorFlow framework; supported: uint8, "
            "int8, uint16, int16, int32 (TensorFlow has no int4/uint4/int2/uint2 or float8/float4 tensors)") from None


def _onnx_type(op_name: str, number: int) -> tf.DType:
    """The TensorFlow dtype of an ``output_dtype`` attribute; a type TensorFlow lacks (int4, float8...) is
    unsupported."""
    try:
        return tf_dtype(number)
    except ShapeError:
        raise UnsupportedOperatorError(f"{op_name}: output_dtype {number} (TensorProto.DataType) has no TensorFlow "
                                       "dtype; the TensorFlow framework supports uint8, int8, uint16, int16 and the "
                                       "float types") from None


def _promoted(a: tf.DType, b: tf.DType) -> tf.DType:
    """The floating type torch computes ``a op b`` in (an integer operand takes the other's type)."""
    if not a.is_floating:
        return b
    if not b.is_floating or a == b:
        return a
    rank = max(_FLOAT_RANK[a], _FLOAT_RANK[b])
    return tf.float32 if rank == 1 else {2: tf.float32, 3: tf.float64}[rank]


def _saturate(values: tf.Tensor, dtype: tf.DType, op_name: str) -> tf.Tensor:
    """Rounded ``values`` (any type) clipped to the range of integer ``dtype`` and cast to it."""
    low, high = _integer_range(op_name, dtype)
    if values.dtype.is_floating:  # float64 holds every bound exactly (float32 rounds 2**31 - 1 up)
        values = tf.cast(values, tf.float64)
    return tf.cast(tf.clip_by_value(values, tf.cast(low, values.dtype), tf.cast(high, values.dtype)), dtype)


def _broadcastable(value, shape, axis: int, block_size: int, what: str) -> tf.Tensor:
    """A scale or zero point reshaped/repeated so that it broadcasts against a tensor of ``shape``."""
    axis = quantization_axis(what, tuple(value.shape), tuple(shape), axis, block_size)
    if axis is None:
        return tf.reshape(value, ())
    if not block_size:
        dims = [1] * len(shape)
        dims[axis] = -1
        return tf.reshape(value, dims)
    repeated = tf.repeat(value, int(block_size), axis=axis)
    index = [slice(None)] * len(shape)
    index[axis] = slice(0, shape[axis])  # the last block may be partial
    return repeated[tuple(index)]


def _as_float64(value):
    return 0.0 if value is None else tf.cast(value, tf.float64)


def _dtype(value) -> tf.DType | None:
    """A tensor's dtype; None for what TensorFlow cannot hold (int4 arrives as NumPy)."""
    return value.dtype if isinstance(value.dtype, tf.DType) else None


@register("QuantizeLinear")
class QuantizeLinear(TFOp):
    """``Y = saturate(round(X / scale) + zero_point)``; Y takes the zero point's dtype, else ``output_dtype``,
    else uint8."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("QuantizeLinear", attributes))

    def __call__(self, x, y_scale, y_zero_point=None):
        if y_zero_point is not None:
            dtype = _dtype(y_zero_point) or y_zero_point.dtype
        elif self.output_dtype:
            dtype = _onnx_type("QuantizeLinear", self.output_dtype)
        else:
            dtype = tf.uint8
        _integer_range("QuantizeLinear", dtype)
        shape = static_shape(x)
        scale = _broadcastable(y_scale, shape, self.axis, self.block_size, "QuantizeLinear scale")
        compute = tf_dtype(self.precision) if self.precision else _promoted(x.dtype, scale.dtype)
        scaled = exact_divide(tf.cast(x, compute), tf.cast(scale, compute))
        # Clamped before the integer cast so that huge quotients saturate rather than wrap.
        values = tf.cast(tf.clip_by_value(tf.cast(tf.round(scaled), tf.float64), -2.0 ** 62, 2.0 ** 62), tf.int64)
        if y_zero_point is not None:
            values = values + _broadcastable(tf.cast(y_zero_point, tf.int64), shape, self.axis, self.block_size,
                                             "QuantizeLinear zero_point")
        return _saturate(values, dtype, "QuantizeLinear")


@register("DequantizeLinear")
class DequantizeLinear(TFOp):
    """``Y = (X - zero_point) * scale`` in the scale's dtype (or ``output_dtype``)."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("DequantizeLinear", attributes))

    def __call__(self, x, x_scale, x_zero_point=None):
        _integer_range("DequantizeLinear", _dtype(x) or x.dtype)
        shape = static_shape(x)
        values = tf.cast(x, tf.float32)
        if x_zero_point is not None:
            values = values - tf.cast(_broadcastable(x_zero_point, shape, self.axis, self.block_size,
                                                     "DequantizeLinear zero_point"), tf.float32)
        scale = _broadcastable(x_scale, shape, self.axis, self.block_size, "DequantizeLinear scale")
        compute = _promoted(tf.float32, scale.dtype)
        y = tf.cast(values, compute) * tf.cast(scale, compute)
        dtype = _onnx_type("DequantizeLinear", self.output_dtype) if self.output_dtype else x_scale.dtype
        return tf.cast(y, dtype)


@register("DynamicQuantizeLinear")
class DynamicQuantizeLinear(TFOp):
    """uint8 quantization with the scale and zero point chosen from X's range (always including 0); an
    all-zero X gets scale 1, as onnxruntime."""

    def __call__(self, x):
        x = tf.cast(x, tf.float32)
        zero = tf.constant(0.0, tf.float32)
        empty = x.shape.num_elements() == 0
        low = zero if empty else tf.minimum(zero, tf.reduce_min(x))
        high = zero if empty else tf.maximum(zero, tf.reduce_max(x))
        scale = exact_divide(high - low, tf.constant(255.0, tf.float32))
        scale = tf.where(scale == 0, tf.ones_like(scale), scale)
        zero_point = _saturate(tf.round(exact_divide(-low, scale)), tf.uint8, "DynamicQuantizeLinear")
        y = tf.round(exact_divide(x, scale)) + tf.cast(zero_point, tf.float32)
        y = _saturate(y, tf.uint8, "DynamicQuantizeLinear")
        return y, scale, zero_point


def _product(op_name: str, left: tf.Tensor, right: tf.Tensor, shapes: str) -> tf.Tensor:
    """NumPy's matmul on static shapes (a 1-D operand gains an axis that the result loses, batch axes broadcast);
    a ShapeError naming ``shapes`` where they do not multiply."""
    *_, drop_row, drop_column = matmul_plan(op_name, left.shape.as_list(), right.shape.as_list(), shapes)
    squeeze = ([-2] if drop_row else []) + ([-1] if drop_column else [])
    left = left[None, :] if drop_row else left
    right = right[:, None] if drop_column else right
    product = tf.linalg.matmul(left, right)  # broadcasts the batch axes
    return tf.squeeze(product, squeeze) if squeeze else product


@register("MatMulInteger")
class MatMulInteger(TFOp):
    """``(A - a_zero_point) @ (B - b_zero_point)`` in int32 (per-row A and per-column B zero points)."""

    def __call__(self, a, b, a_zero_point=None, b_zero_point=None):
        check_matmul_integer(tuple(a.shape), tuple(b.shape))
        left = tf.cast(a, tf.float64)
        if a_zero_point is not None:
            a_zero_point_rows(tuple(a.shape), tuple(a_zero_point.shape))
            zero = tf.cast(a_zero_point, tf.float64)
            left = left - (zero[..., None] if a_zero_point.shape.num_elements() > 1 else tf.reshape(zero, ()))
        check_b_zero_point(tuple(b.shape), None if b_zero_point is None else tuple(b_zero_point.shape))
        right = tf.cast(b, tf.float64) - _as_float64(b_zero_point)
        product = _product("MatMulInteger", left, right, f"shapes {tuple(a.shape)} and {tuple(b.shape)}")
        # Through int64, so that int32 wraps around as the reference's.
        return tf.cast(tf.cast(tf.round(product), tf.int64), tf.int32)


def _shifted(op_name: str, value, zero, shapes: str) -> tf.Tensor:
    """``value - zero`` in float64 with NumPy broadcasting; a ShapeError where the shapes do not broadcast."""
    if zero is None:
        return tf.cast(value, tf.float64)
    check_zero_point_broadcast(op_name, tuple(value.shape), tuple(zero.shape), shapes)
    return tf.cast(value, tf.float64) - tf.cast(zero, tf.float64)


@register("QLinearMatMul")
class QLinearMatMul(TFOp):
    """Quantized matmul: the integer product of the zero-point-shifted inputs times ``a_scale * b_scale /
    y_scale`` (computed in the scales' dtype, as onnx.reference), plus y_zero_point, saturated."""

    def __call__(self, a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point=None):
        shapes = qlinear_matmul_shapes(tuple(a.shape), tuple(b.shape), getattr(a_zero_point, "shape", None),
                                       getattr(b_zero_point, "shape", None))
        left = _shifted("QLinearMatMul", a, a_zero_point, shapes)
        right = _shifted("QLinearMatMul", b, b_zero_point, shapes)
        product = _product("QLinearMatMul", left, right, shapes)
        terms = [a_scale, b_scale, y_scale] + ([] if y_zero_point is None else [y_zero_point])
        check_requantize_broadcast(tuple(product.shape), (tuple(t.shape) for t in terms))
        common = _promoted(_promoted(a_scale.dtype, b_scale.dtype), y_scale.dtype)
        multiplier = exact_divide(tf.cast(a_scale, common) * tf.cast(b_scale, common), tf.cast(y_scale, common))
        real = product * tf.cast(multiplier, tf.float64) + _as_float64(y_zero_point)
        dtype = y_zero_point.dtype if y_zero_point is not None else a.dtype
        return _saturate(tf.round(real), dtype, "QLinearMatMul")


# ------------------------------------------------------------------------------------ integer convolutions

class _IntegerConv(TFOp):
    """The exact integer convolution of ConvInteger and QLinearConv, channels-last, in float64 (padding adds the
    real zero: the zero points are subtracted first, as the reference)."""

    op_name = "ConvInteger"
    channels_last_inputs = (0,)
    channels_last_ranks = (3, 4, 5)

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes(self.op_name, attributes))  # Conv's attributes, checked under this name

    def _plan(self, shape, w_shape):
        """The channels-last ``shape``'s pads (per axis, begin and end), strides and dilations for W's shape."""
        kernel = check_conv_weights(self.op_name, shape, w_shape, shape[-1], self.kernel_shape, self.group,
                                    " (X channels-last)")
        _, strides, dilations, sides = resolve_pads(self.op_name, shape[1:-1], kernel, self.strides, self.dilations,
                                                    self.pads, self.auto_pad, clamp_same_pads=True)
        return tuple(strides), tuple(dilations), sides

    def _accumulate(self, x, w, x_zero_point, w_zero_point) -> tf.Tensor:
        """The float64 convolution of channels-last ``x`` and ONNX-layout ``w`` (M, C/group, kernel...), shifted."""
        shape, w_shape = static_shape(x), static_shape(w)
        strides, dilations, sides = self.planned((shape, w_shape), self._plan, shape, w_shape)
        shifted_x = tf.cast(x, tf.float64) - _as_float64(x_zero_point)
        shifted_w = tf.cast(w, tf.float64)
        if w_zero_point is not None:
            zero = tf.cast(w_zero_point, tf.float64)
            per_channel = w_zero_point.shape.num_elements() > 1
            shifted_w = shifted_w - (tf.reshape(zero, (-1,) + (1,) * (len(w_shape) - 1)) if per_channel
                                     else tf.reshape(zero, ()))
        kernel = tf.transpose(shifted_w, list(range(2, len(w_shape))) + [1, 0])  # (kernel..., C/group, M)
        padded = pad_sides(shifted_x, sides, first_spatial=1)
        # tf.nn.convolution refuses strides together with dilations: convolve densely, then subsample.
        both = any(s > 1 for s in strides) and any(d > 1 for d in dilations)
        y = tf.nn.convolution(padded, kernel, strides=1 if both else list(strides), padding="VALID",
                              dilations=list(dilations))
        if both:
            y = y[(slice(None),) + tuple(slice(None, None, s) for s in strides)]
        return y


def _per_channel(value: tf.Tensor) -> tf.Tensor:
    """A scalar, or a per-output-channel vector (broadcasting against channels-last outputs as it is)."""
    return tf.reshape(value, ()) if value.shape.num_elements() == 1 else tf.reshape(value, (-1,))


@register("ConvInteger")
class ConvInteger(_IntegerConv):
    """``conv(X - x_zero_point, W - w_zero_point)`` in int32 (w_zero_point may be per output channel)."""

    def __call__(self, x, w, x_zero_point=None, w_zero_point=None):
        return from_channels_last(self.channels_last(to_channels_last(x), w, x_zero_point, w_zero_point))

    def channels_last(self, x, w, x_zero_point=None, w_zero_point=None):
        accumulated = self._accumulate(x, w, x_zero_point, w_zero_point)
        return tf.cast(tf.cast(tf.round(accumulated), tf.int64), tf.int32)


@register("QLinearConv")
class QLinearConv(_IntegerConv):
    """Quantized Conv: the integer conv of the shifted inputs plus int32 bias B, requantized to
    ``y_scale``/``y_zero_point`` (``w_scale``/``w_zero_point`` may be per output channel)."""

    op_name = "QLinearConv"

    def __call__(self, x, *rest):
        return from_channels_last(self.channels_last(to_channels_last(x), *rest))

    def channels_last(self, x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point=None,
                      bias=None):
        accumulated = self._accumulate(x, w, x_zero_point, w_zero_point)
        if bias is not None:
            accumulated = accumulated + _per_channel(tf.cast(bias, tf.float64))
        scales = tf.reshape(tf.cast(x_scale, tf.float64), ()) * _per_channel(tf.cast(w_scale, tf.float64))
        multiplier = exact_divide(scales, tf.reshape(tf.cast(y_scale, tf.float64), ()))
        real = tf.round(accumulated * multiplier) + _as_float64(y_zero_point)
        dtype = y_zero_point.dtype if y_zero_point is not None else x.dtype
        return _saturate(real, dtype, "QLinearConv")
