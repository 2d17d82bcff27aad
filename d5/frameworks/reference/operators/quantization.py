"""Reference quantization operators (ONNX semantics): QuantizeLinear, DequantizeLinear,
DynamicQuantizeLinear, MatMulInteger, QLinearMatMul, ConvInteger, QLinearConv.

Integer types int8/uint8/int16/uint16 and the packed int4/uint4/int2/uint2 (numpy dtypes from ml_dtypes, as
onnx.numpy_helper gives them) are supported; float8/float4 targets are not. Scales and zero points are
per-tensor (scalars), per-axis (1-D along ``axis``) or blocked (``block_size`` along ``axis``). Rounding is
half-to-even and results saturate to the target range. None of these operators has a gradient in d5
(``Gradient.NONE``).

>>> import numpy as np
>>> from d5.frameworks.reference.operators import create_operator
>>> q = create_operator("QuantizeLinear", {}).forward([np.array([0.0, 1.0, 300.0], np.float32),
...                                                    np.float32(2.0), np.uint8(128)])
>>> q
array([128, 128, 255], dtype=uint8)
>>> create_operator("DequantizeLinear", {}).forward([q, np.float32(2.0), np.uint8(128)])
array([  0.,   0., 254.], dtype=float32)
"""
from __future__ import annotations

from typing import Any

import numpy as np

from d5.errors import ShapeError, UnsupportedOperatorError
from d5.frameworks.reference.operators import ReferenceOp, register
from d5.ops.onnx_attributes import adopt, operator_attributes
from d5.ops.onnx_semantics import quantization_axis
from d5.ops.operator import Gradient
from d5.ops.window_checks import QUANTIZED_RANGES, a_zero_point_rows, check_b_zero_point, check_matmul_integer


def _integer_range(dtype: np.dtype) -> tuple[int, int]:
    try:
        return QUANTIZED_RANGES[np.dtype(dtype).name]
    except KeyError:
        raise UnsupportedOperatorError(
            f"quantization to {np.dtype(dtype)} is not supported by the reference framework; supported: "
            f"{', '.join(QUANTIZED_RANGES)} (float8/float4 are not)") from None


def optional_input(inputs, index: int) -> np.ndarray | None:
    return inputs[index] if len(inputs) > index and inputs[index] is not None else None


def _broadcastable(value: np.ndarray, shape: tuple, axis: int, block_size: int, what: str) -> np.ndarray:
    """A scale or zero point reshaped/repeated so it broadcasts against a tensor of ``shape``."""
    value = np.asarray(value)
    axis = quantization_axis(what, value.shape, shape, axis, block_size)  # checks the layout
    if axis is None:
        return value.reshape(())
    if not block_size:
        dims = [1] * len(shape)
        dims[axis] = value.size
        return value.reshape(dims)
    repeated = np.repeat(value, int(block_size), axis=axis)
    return repeated.take(np.arange(shape[axis]), axis=axis)  # the last block may be partial


def _saturate(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    low, high = _integer_range(dtype)
    return np.clip(values, low, high).astype(dtype)


def _as_int(array: np.ndarray | None) -> np.ndarray | int:
    return 0 if array is None else np.asarray(array).astype(np.int32)


class _Quantized(ReferenceOp):

    gradient = Gradient.NONE
    no_gradient_reason = "its outputs are quantized integers; train in float and quantize afterwards"


@register("QuantizeLinear")
class QuantizeLinear(_Quantized):
    """``Y = saturate(round(X / scale) + zero_point)``; Y takes the zero point's dtype, else ``output_dtype``,
    else uint8."""

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("QuantizeLinear", attributes))

    def forward(self, inputs):
        from onnx import helper

        x, scale, zero_point = inputs[0], inputs[1], optional_input(inputs, 2)
        if zero_point is not None:
            dtype = zero_point.dtype
        elif self.output_dtype:
            dtype = np.dtype(helper.tensor_dtype_to_np_dtype(self.output_dtype))
        else:
            dtype = np.dtype(np.uint8)
        _integer_range(dtype)
        scale = _broadcastable(scale, x.shape, self.axis, self.block_size, "QuantizeLinear scale")
        if self.precision:
            compute = np.dtype(helper.tensor_dtype_to_np_dtype(self.precision))
            scaled = x.astype(compute) / scale.astype(compute)
        else:
            scaled = x / scale
        values = np.rint(scaled).astype(np.int64)
        if zero_point is not None:
            values += _as_int(_broadcastable(zero_point, x.shape, self.axis, self.block_size,
                                             "QuantizeLinear zero_point"))
        return _saturate(values, dtype)


@register("DequantizeLinear")
class DequantizeLinear(_Quantized):
    """``Y = (X - zero_point) * scale`` in the scale's dtype (or ``output_dtype``)."""

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("DequantizeLinear", attributes))

    def forward(self, inputs):
        from onnx import helper

        x, scale, zero_point = inputs[0], inputs[1], optional_input(inputs, 2)
        _integer_range(x.dtype)
        values = x.astype(np.float32)
        if zero_point is not None:
            values = values - _broadcastable(zero_point, x.shape, self.axis, self.block_size,
                                             "DequantizeLinear zero_point").astype(np.float32)
        y = values * _broadcastable(scale, x.shape, self.axis, self.block_size, "DequantizeLinear scale")
        dtype = helper.tensor_dtype_to_np_dtype(self.output_dtype) if self.output_dtype else scale.dtype
        return np.asarray(y).astype(dtype)


@register("DynamicQuantizeLinear")
class DynamicQuantizeLinear(_Quantized):
    """uint8 quantization with scale and zero point chosen from X's range (always including 0).

    >>> y, scale, zero = DynamicQuantizeLinear().forward([np.array([0.0, 2.55], np.float32)])
    >>> y.tolist(), float(scale), int(zero)
    ([0, 255], 0.009999999776482582, 0)
    """

    def forward(self, inputs):
        x = inputs[0].astype(np.float32)
        low = np.minimum(np.float32(0), x.min()) if x.size else np.float32(0)
        high = np.maximum(np.float32(0), x.max()) if x.size else np.float32(0)
        scale = np.float32((high - low) / np.float32(255))
        if scale == 0:
            # All zeros: any scale reproduces X; ONNX Runtime uses 1 rather than dividing by zero.
            scale = np.float32(1)
        zero_point = _saturate(np.rint(-low / scale), np.dtype(np.uint8))
        y = _saturate(np.rint(x / scale) + zero_point.astype(np.int64), np.dtype(np.uint8))
        return y, np.asarray(scale, np.float32), np.asarray(zero_point)


def _row_zero_point(zero_point: np.ndarray | None, a_shape: tuple) -> Any:
    """A's zero point: a scalar, or one per row (1-D of length M), which must broadcast along rows."""
    if zero_point is None:
        return 0
    zero_point = np.asarray(zero_point).astype(np.int32)
    a_zero_point_rows(a_shape, zero_point.shape)
    return zero_point[..., None] if zero_point.ndim >= 1 and zero_point.size > 1 else zero_point.reshape(())


@register("MatMulInteger")
class MatMulInteger(_Quantized):
    """``(A - a_zero_point) @ (B - b_zero_point)`` in int32 (per-row A and per-column B zero points)."""

    def forward(self, inputs):
        a, b = inputs[0], inputs[1]
        check_matmul_integer(a.shape, b.shape)
        a_zero, b_zero = optional_input(inputs, 2), optional_input(inputs, 3)
        check_b_zero_point(b.shape, None if b_zero is None else np.shape(b_zero))
        left = a.astype(np.int32) - _row_zero_point(a_zero, a.shape)
        right = b.astype(np.int32) - _as_int(b_zero)
        try:
            return np.matmul(left, right).astype(np.int32)
        except ValueError:
            raise ShapeError(f"MatMulInteger: cannot multiply shapes {a.shape} and {b.shape}") from None


@register("QLinearMatMul")
class QLinearMatMul(_Quantized):
    """Quantized matmul: dequantized ``A @ B`` requantized to ``y_scale``/``y_zero_point``."""

    def forward(self, inputs):
        a, a_scale, a_zero, b, b_scale, b_zero, y_scale, y_zero = (list(inputs) + [None] * 8)[:8]
        try:
            product = np.matmul(a.astype(np.int32) - _as_int(a_zero), b.astype(np.int32) - _as_int(b_zero))
        except ValueError:  # shapes that do not multiply, or zero points that do not broadcast
            raise ShapeError(f"QLinearMatMul: cannot multiply A {a.shape} and B {b.shape} with zero points of shapes "
                             f"{np.shape(a_zero)} and {np.shape(b_zero)} (scalars, or one per row of A / column "
                             "of B)") from None
        # Same operation order and precision as onnx.reference: the combined multiplier in the scales' dtype.
        try:
            real = product * (a_scale * b_scale / y_scale)
            if y_zero is not None:
                real = real + y_zero
        except ValueError:
            raise ShapeError(f"QLinearMatMul: the scales (shapes {np.shape(a_scale)}, {np.shape(b_scale)}, "
                             f"{np.shape(y_scale)}) and y_zero_point ({np.shape(y_zero)}) must be scalars or broadcast "
                             f"against the product of shape {product.shape}") from None
        dtype = y_zero.dtype if y_zero is not None else a.dtype
        return _saturate(np.rint(real), dtype)


def _integer_conv(conv_attributes: dict, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Exact integer convolution through the float64 Conv (products of 16-bit integers fit in 53 bits)."""
    from d5.frameworks.reference.operators.convolution import Conv

    y = Conv(**conv_attributes).forward([x.astype(np.float64), w.astype(np.float64)])
    return np.rint(y).astype(np.int64)


def _per_channel(value: np.ndarray | None, rank: int) -> Any:
    """A scalar, or a per-output-channel vector shaped to broadcast against (N, M, ...) outputs."""
    if value is None:
        return 0
    value = np.asarray(value)
    return value.reshape(()) if value.size == 1 else value.reshape((1, -1) + (1,) * (rank - 2))


class _ConvAttributes(_Quantized):
    def __init__(self, **attributes) -> None:
        super().__init__()
        operator_attributes(type(self).__name__, attributes)  # Conv's attributes, checked under this op's name
        self.conv_attributes = attributes


@register("ConvInteger")
class ConvInteger(_ConvAttributes):
    """``conv(X - x_zero_point, W - w_zero_point)`` in int32 (w_zero_point may be per output channel)."""

    def forward(self, inputs):
        x, w = inputs[0], inputs[1]
        x_zero, w_zero = optional_input(inputs, 2), optional_input(inputs, 3)
        # Padding must add the *real* zero, so subtract the zero points before convolving.
        shifted_x = x.astype(np.int32) - _as_int(x_zero)
        w_zero = 0 if w_zero is None else np.asarray(w_zero).astype(np.int32)
        shifted_w = w.astype(np.int32) - (np.reshape(w_zero, (-1,) + (1,) * (w.ndim - 1)) if np.size(w_zero) > 1
                                          else w_zero)
        return _integer_conv(self.conv_attributes, shifted_x, shifted_w).astype(np.int32)


@register("QLinearConv")
class QLinearConv(_ConvAttributes):
    """Quantized Conv: integer conv of the zero-point-shifted inputs, plus int32 bias B, requantized to
    ``y_scale``/``y_zero_point`` (``w_scale``/``w_zero_point`` may be per output channel)."""

    def forward(self, inputs):
        x, x_scale, x_zero, w, w_scale, w_zero, y_scale, y_zero, bias = (list(inputs) + [None] * 9)[:9]
        shifted_x = x.astype(np.int32) - _as_int(x_zero)
        w_zero_int = 0 if w_zero is None else np.asarray(w_zero).astype(np.int32)
        shifted_w = w.astype(np.int32) - (np.reshape(w_zero_int, (-1,) + (1,) * (w.ndim - 1))
                                          if np.size(w_zero_int) > 1 else w_zero_int)
        accumulated = _integer_conv(self.conv_attributes, shifted_x, shifted_w)
        if bias is not None:
            accumulated = accumulated + _per_channel(bias.astype(np.int64), accumulated.ndim)
        multiplier = (np.float64(np.asarray(x_scale).reshape(()))
                      * _per_channel(np.asarray(w_scale, np.float64), accumulated.ndim)
                      / np.float64(np.asarray(y_scale).reshape(())))
        real = np.rint(accumulated * multiplier) + _as_int(y_zero)
        dtype = y_zero.dtype if y_zero is not None else x.dtype
        return _saturate(real, dtype)
