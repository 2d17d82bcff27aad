"""Quantization operators as native torch operations: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear,
MatMulInteger, QLinearMatMul, ConvInteger and QLinearConv.

Integer types uint8/int8/uint16/int16 (and int32 where ONNX allows it) are supported; torch has no int4/uint4/
int2/uint2 or float8/float4 tensors, so those targets raise UnsupportedOperatorError (the PyTorch executor cannot
take such tensors as inputs either). Scales and zero points are per tensor, per axis or blocked, laid out by
:func:`d5.ops.onnx_semantics.quantization_axis`. Rounding is half to even and results saturate, as the
reference. Integer products run as float64 matmuls / convolutions, exact for these types (every partial sum
is an integer below 2**53) and available on every device, where torch's integer matmul is CPU-only.
"""
from __future__ import annotations

import torch

from d5.errors import ShapeError, UnsupportedOperatorError
from d5.frameworks.pytorch.operators import TorchOp, register
from d5.frameworks.pytorch.operators._helpers import torch_dtype
from d5.frameworks.pytorch.operators.convolution import Conv
from d5.ops.onnx_attributes import adopt, operator_attributes
from d5.ops.onnx_semantics import quantization_axis
from d5.ops.window_checks import (QUANTIZED_RANGES, a_zero_point_rows, check_b_zero_point, check_matmul_integer,
                                  qlinear_matmul_shapes, requantize_broadcast_error, zero_point_broadcast_error)

# Saturation ranges of the integer types quantization targets that torch has.
_RANGES = {getattr(torch, name): QUANTIZED_RANGES[name] for name in ("uint8", "int8", "uint16", "int16", "int32")}


def _integer_range(op_name: str, dtype: torch.dtype) -> tuple[int, int]:
    try:
        return _RANGES[dtype]
    except KeyError:
        raise UnsupportedOperatorError(
            f"{op_name}: quantization to {dtype} is not supported by the PyTorch framework; supported: uint8, int8, "
            "uint16, int16, int32 (torch has no int4/uint4/int2/uint2 or float8/float4 tensors)") from None


def _onnx_type(op_name: str, number: int) -> torch.dtype:
    """The torch dtype of an ``output_dtype`` attribute; a type torch lacks (int4, float8...) is unsupported."""
    try:
        return torch_dtype(number)
    except ShapeError:
        raise UnsupportedOperatorError(f"{op_name}: output_dtype {number} (TensorProto.DataType) has no torch "
                                       "dtype; the PyTorch framework supports uint8, int8, uint16, int16 and the "
                                       "float types") from None


def _saturate(values: torch.Tensor, dtype: torch.dtype, op_name: str) -> torch.Tensor:
    """Rounded ``values`` (any type) clipped to the range of integer ``dtype`` and cast to it."""
    low, high = _integer_range(op_name, dtype)
    return values.clamp(low, high).to(dtype)


def _broadcastable(value: torch.Tensor, shape, axis: int, block_size: int, what: str) -> torch.Tensor:
    """A scale or zero point reshaped/repeated so that it broadcasts against a tensor of ``shape``."""
    axis = quantization_axis(what, tuple(value.shape), tuple(shape), axis, block_size)
    if axis is None:
        return value.reshape(())
    if not block_size:
        dims = [1] * len(shape)
        dims[axis] = -1
        return value.reshape(dims)
    if not value.is_floating_point():
        value = value.long()  # repeat_interleave does not take every integer type
    return torch.repeat_interleave(value, int(block_size), dim=axis).narrow(axis, 0, shape[axis])


def _as_float64(value: torch.Tensor | None):
    return 0.0 if value is None else value.to(torch.float64)


@register("QuantizeLinear")
class QuantizeLinear(TorchOp):
    """``Y = saturate(round(X / scale) + zero_point)``; Y takes the zero point's dtype, else ``output_dtype``,
    else uint8."""

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("QuantizeLinear", attributes))

    def forward(self, x, y_scale, y_zero_point=None):
        if y_zero_point is not None:
            dtype = y_zero_point.dtype
        elif self.output_dtype:
            dtype = _onnx_type("QuantizeLinear", self.output_dtype)
        else:
            dtype = torch.uint8
        _integer_range("QuantizeLinear", dtype)
        shape = tuple(x.shape)
        scale = _broadcastable(y_scale, shape, self.axis, self.block_size, "QuantizeLinear scale")
        if self.precision:
            compute = torch_dtype(self.precision)
            scaled = x.to(compute) / scale.to(compute)
        else:
            scaled = x / scale
        # Clamped before the integer cast so that huge quotients saturate rather than wrap.
        values = torch.round(scaled).to(torch.float64).clamp(-2.0 ** 62, 2.0 ** 62).to(torch.int64)
        if y_zero_point is not None:
            values = values + _broadcastable(y_zero_point.long(), shape, self.axis, self.block_size,
                                             "QuantizeLinear zero_point")
        return _saturate(values, dtype, "QuantizeLinear")


@register("DequantizeLinear")
class DequantizeLinear(TorchOp):
    """``Y = (X - zero_point) * scale`` in the scale's dtype (or ``output_dtype``)."""

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("DequantizeLinear", attributes))

    def forward(self, x, x_scale, x_zero_point=None):
        _integer_range("DequantizeLinear", x.dtype)
        shape = tuple(x.shape)
        values = x.to(torch.float32)
        if x_zero_point is not None:
            values = values - _broadcastable(x_zero_point, shape, self.axis, self.block_size,
                                             "DequantizeLinear zero_point").to(torch.float32)
        y = values * _broadcastable(x_scale, shape, self.axis, self.block_size, "DequantizeLinear scale")
        dtype = _onnx_type("DequantizeLinear", self.output_dtype) if self.output_dtype else x_scale.dtype
        return y.to(dtype)


@register("DynamicQuantizeLinear")
class DynamicQuantizeLinear(TorchOp):
    """uint8 quantization with the scale and zero point chosen from X's range (always including 0); an
    all-zero X gets scale 1, as onnxruntime."""

    def forward(self, x):
        x = x.to(torch.float32)
        zero = torch.zeros((), dtype=torch.float32, device=x.device)
        low = torch.minimum(zero, x.min()) if x.numel() else zero
        high = torch.maximum(zero, x.max()) if x.numel() else zero
        scale = (high - low) / torch.tensor(255.0, dtype=torch.float32, device=x.device)
        scale = torch.where(scale == 0, torch.ones_like(scale), scale)
        zero_point = _saturate(torch.round(-low / scale), torch.uint8, "DynamicQuantizeLinear")
        y = _saturate(torch.round(x / scale) + zero_point.to(torch.float32), torch.uint8, "DynamicQuantizeLinear")
        return y, scale, zero_point


def _product(op_name: str, left: torch.Tensor, right: torch.Tensor, shapes: str) -> torch.Tensor:
    try:
        return torch.matmul(left, right)
    except RuntimeError:
        raise ShapeError(f"{op_name}: cannot multiply {shapes}") from None


@register("MatMulInteger")
class MatMulInteger(TorchOp):
    """``(A - a_zero_point) @ (B - b_zero_point)`` in int32 (per-row A and per-column B zero points)."""

    def forward(self, a, b, a_zero_point=None, b_zero_point=None):
        check_matmul_integer(a.shape, b.shape)
        left = a.to(torch.float64)
        if a_zero_point is not None:
            a_zero_point_rows(a.shape, a_zero_point.shape)
            zero = a_zero_point.to(torch.float64)
            left = left - (zero[..., None] if zero.numel() > 1 else zero.reshape(()))
        check_b_zero_point(b.shape, None if b_zero_point is None else b_zero_point.shape)
        right = b.to(torch.float64) - _as_float64(b_zero_point)
        product = _product("MatMulInteger", left, right, f"shapes {tuple(a.shape)} and {tuple(b.shape)}")
        return torch.round(product).to(torch.int64).to(torch.int32)  # int32 wraps around, as the reference's


@register("QLinearMatMul")
class QLinearMatMul(TorchOp):
    """Quantized matmul: the integer product of the zero-point-shifted inputs times ``a_scale * b_scale /
    y_scale`` (computed in the scales' dtype, as onnx.reference), plus y_zero_point, saturated."""

    def forward(self, a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point=None):
        shapes = qlinear_matmul_shapes(a.shape, b.shape, getattr(a_zero_point, "shape", None),
                                       getattr(b_zero_point, "shape", None))
        try:
            left = a.to(torch.float64) - _as_float64(a_zero_point)
            right = b.to(torch.float64) - _as_float64(b_zero_point)
        except RuntimeError:
            raise zero_point_broadcast_error("QLinearMatMul", shapes) from None
        product = _product("QLinearMatMul", left, right, shapes)
        try:
            real = product * (a_scale * b_scale / y_scale).to(torch.float64) + _as_float64(y_zero_point)
        except RuntimeError:
            raise requantize_broadcast_error(product.shape) from None
        dtype = y_zero_point.dtype if y_zero_point is not None else a.dtype
        return _saturate(torch.round(real), dtype, "QLinearMatMul")


def _per_channel(value: torch.Tensor, rank: int) -> torch.Tensor:
    """A scalar, or a per-output-channel vector shaped to broadcast against (N, M, ...) outputs."""
    return value.reshape(()) if value.numel() == 1 else value.reshape((1, -1) + (1,) * (rank - 2))


class _IntegerConv(TorchOp):
    op_name = "ConvInteger"

    def __init__(self, **attributes) -> None:
        super().__init__()
        operator_attributes(self.op_name, attributes)  # Conv's attributes, checked under this op's name
        self.conv = Conv(**attributes)

    def _accumulate(self, x, w, x_zero_point, w_zero_point) -> torch.Tensor:
        """The exact integer convolution of the shifted inputs, in float64 (padding adds the real zero)."""
        shifted_x = x.to(torch.float64) - _as_float64(x_zero_point)
        shifted_w = w.to(torch.float64)
        if w_zero_point is not None:
            zero = w_zero_point.to(torch.float64)
            per_channel = zero.numel() > 1
            shifted_w = shifted_w - (zero.reshape((-1,) + (1,) * (w.dim() - 1)) if per_channel else zero.reshape(()))
        return self.conv(shifted_x, shifted_w)


@register("ConvInteger")
class ConvInteger(_IntegerConv):
    """``conv(X - x_zero_point, W - w_zero_point)`` in int32 (w_zero_point may be per output channel)."""

    def forward(self, x, w, x_zero_point=None, w_zero_point=None):
        return torch.round(self._accumulate(x, w, x_zero_point, w_zero_point)).to(torch.int64).to(torch.int32)


@register("QLinearConv")
class QLinearConv(_IntegerConv):
    """Quantized Conv: the integer conv of the shifted inputs plus int32 bias B, requantized to
    ``y_scale``/``y_zero_point`` (``w_scale``/``w_zero_point`` may be per output channel)."""

    op_name = "QLinearConv"

    def forward(self, x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point=None, bias=None):
        accumulated = self._accumulate(x, w, x_zero_point, w_zero_point)
        if bias is not None:
            accumulated = accumulated + _per_channel(bias.to(torch.float64), accumulated.dim())
        multiplier = (x_scale.to(torch.float64).reshape(()) * _per_channel(w_scale.to(torch.float64), accumulated.dim())
                      / y_scale.to(torch.float64).reshape(()))
        real = torch.round(accumulated * multiplier) + _as_float64(y_zero_point)
        dtype = y_zero_point.dtype if y_zero_point is not None else x.dtype
        return _saturate(real, dtype, "QLinearConv")
