"""Activations as native MXNet operations, with the reference operators' semantics: Relu, Sigmoid, Tanh,
LeakyRelu, Elu, Selu, Celu, Gelu, HardSigmoid, HardSwish, Mish, Softplus, Softsign, ThresholdedRelu, PRelu,
Shrink, Swish, SwiGLU, Softmax/LogSoftmax/Hardmax (opset 13 and the 2-D-coercing opsets 1-12) and Dropout (with
its mask output).

MXNet's own kernels run where they have the reference's semantics: ``relu``, ``sigmoid``, ``tanh``, ``softsign``,
``Activation(softrelu)`` (Softplus, linear past 20 so it cannot overflow), ``LeakyReLU(gelu)`` (the exact, erf
form of Gelu), ``softmax``/``log_softmax`` and ``Dropout``. The piecewise activations are written with
``where`` on the reference's conditions, so the gradient at a kink is the reference's (``x >= 0`` takes the
linear branch of LeakyRelu/Elu/PRelu; HardSigmoid passes none at its corners), where MXNet's fused
``LeakyReLU``/``hard_sigmoid`` kernels pick the other side.

Integer inputs reach a converter as NumPy values (the executor folds an all-NumPy node on the reference): Relu and
Shrink take them into the graph as constants and compute in their dtype, as the reference does.

>>> import numpy as np
>>> from d5.frameworks.mxnet.custom_op import native_op
>>> native_op("LeakyRelu", alpha=0.5).forward([np.array([-2.0, 3.0], np.float32)]).tolist()
[-1.0, 3.0]
>>> native_op("Relu").forward([np.array([-3, 4], np.int8)]).tolist()
[0, 4]
"""
from __future__ import annotations

import math

import mxnet as mx
import numpy as np

from d5.errors import ShapeError
from d5.frameworks.mxnet.operators import MXOp, register
from d5.frameworks.mxnet.operators._helpers import Symbol, as_symbol, dtype_of, reshape, shape_of, static
from d5.ops.onnx_attributes import adopt, operator_attributes
from d5.ops.onnx_semantics import broadcast_shape, normalize_axis
from d5.ops.window_checks import (CoercedTo2D, check_dropout_ratio, check_float_input, check_swiglu_inputs,
                                  per_channel_slope)


def _where(condition: Symbol, a: Symbol, b: Symbol) -> Symbol:
    """``a`` where ``condition`` else ``b`` (all of one shape; the condition cast to the values' dtype, as
    MXNet's ``where`` reads it); the gradient flows into the chosen side only."""
    return mx.sym.where(condition, a, b)


class _Unary(MXOp):
    #: Whether the operator has attributes (d5's shared parsing applies their defaults and checks).
    attributed = True

    def __init__(self, **attributes) -> None:
        if self.attributed:
            adopt(self, operator_attributes(type(self).__name__, attributes))

    def __call__(self, x):
        return self._apply(as_symbol(x))

    def _apply(self, x: Symbol) -> Symbol:
        raise NotImplementedError


@register("Relu")
class Relu(_Unary):
    """``max(x, 0)`` (gradient 0 at 0, as the reference): ``Activation(act_type='relu')`` for floating tensors (what
    Gluon runs: oneDNN's kernel), MXNet's ``relu`` for signed integer ones, in the input's dtype; unsigned and bool
    tensors pass unchanged (nothing is below 0)."""

    attributed = False

    def __call__(self, x):
        dtype = dtype_of(x)
        if dtype.kind in "ub":
            if isinstance(x, Symbol):
                return mx.sym.identity(x)
            return np.array(x, copy=True)  # also the unsigned types MXNet cannot hold (uint16/32/64)
        if dtype.kind == "f":  # oneDNN's activation, on its blocked layouts (``relu`` makes MXNet reorder to NCHW)
            return mx.sym.Activation(as_symbol(x), act_type="relu")
        return mx.sym.relu(as_symbol(x))


@register("Sigmoid")
class Sigmoid(_Unary):
    """MXNet's ``sigmoid``."""

    attributed = False

    def _apply(self, x):
        return mx.sym.sigmoid(x)


@register("Tanh")
class Tanh(_Unary):
    """MXNet's ``tanh``."""

    attributed = False

    def _apply(self, x):
        return mx.sym.tanh(x)


@register("Softplus")
class Softplus(_Unary):
    """``log(1 + exp(x))``: MXNet's ``softrelu`` activation (the identity past 20, so no overflow)."""

    attributed = False

    def _apply(self, x):
        return mx.sym.Activation(x, act_type="softrelu")


@register("Softsign")
class Softsign(_Unary):
    """``x / (1 + |x|)``: MXNet's ``softsign``."""

    attributed = False

    def _apply(self, x):
        return mx.sym.softsign(x)


@register("Mish")
class Mish(_Unary):
    """``x * tanh(softplus(x))`` (MXNet 1.9's ``Activation`` has no mish)."""

    attributed = False

    def _apply(self, x):
        return x * mx.sym.tanh(mx.sym.Activation(x, act_type="softrelu"))


@register("HardSwish")
class HardSwish(_Unary):
    """``x * clip(x / 6 + 1/2, 0, 1)``, with the reference's slope ``x / 3 + 1/2`` on all of [-3, 3]."""

    attributed = False

    def _apply(self, x):
        return _where(x < -3, mx.sym.zeros_like(x), _where(x > 3, x, x * (x / 6 + 0.5)))


@register("LeakyRelu")
class LeakyRelu(_Unary):
    """``x`` where ``x >= 0``, ``alpha * x`` elsewhere."""

    def _apply(self, x):
        return _where(x >= 0, x, x * float(self.alpha))


def _expm1_negative(x: Symbol, scale: float = 1.0) -> Symbol:
    """``expm1(min(x, 0) / scale)``: accurate near 0, no overflow (nor NaN gradient) for large positive x."""
    negative = mx.sym.minimum(x, 0.0)
    return mx.sym.expm1(negative / scale if scale != 1.0 else negative)


@register("Elu")
class Elu(_Unary):
    """``x`` where ``x >= 0``, ``alpha * (exp(x) - 1)`` elsewhere."""

    def _apply(self, x):
        return _where(x >= 0, x, _expm1_negative(x) * float(self.alpha))


@register("Celu")
class Celu(_Unary):
    """``max(0, x) + min(0, alpha * (exp(x / alpha) - 1))``."""

    def _apply(self, x):
        alpha = float(self.alpha)
        return _where(x > 0, x, _expm1_negative(x, alpha) * alpha)


@register("Selu")
class Selu(_Unary):
    """``gamma * x`` for ``x > 0``, ``gamma * alpha * (exp(x) - 1)`` elsewhere."""

    def _apply(self, x):
        return _where(x > 0, x, _expm1_negative(x) * float(self.alpha)) * float(self.gamma)


@register("ThresholdedRelu")
class ThresholdedRelu(_Unary):
    """``x`` where ``x > alpha``, else 0."""

    def _apply(self, x):
        return _where(x > float(self.alpha), x, mx.sym.zeros_like(x))


_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


@register("Gelu")
class Gelu(_Unary):
    """``x * Phi(x)``: MXNet's ``LeakyReLU(act_type='gelu')`` kernel (the erf form) for ``approximate='none'``; the
    tanh approximation written out for ``approximate='tanh'`` (MXNet has no kernel for it)."""

    def _apply(self, x):
        if self.approximate == "tanh":
            inner = (x + x * x * x * 0.044715) * _SQRT_2_OVER_PI
            return x * (mx.sym.tanh(inner) + 1.0) * 0.5
        return mx.sym.LeakyReLU(x, act_type="gelu")


@register("HardSigmoid")
class HardSigmoid(_Unary):
    """``max(0, min(1, alpha * x + beta))``; nested ``where`` rather than MXNet's ``hard_sigmoid`` or ``clip``:
    no gradient at the corners, as the reference."""

    def _apply(self, x):
        linear = x * float(self.alpha) + float(self.beta)
        return _where(linear <= 0, mx.sym.zeros_like(x), _where(linear >= 1, mx.sym.ones_like(x), linear))


@register("PRelu")
class PRelu(MXOp):
    """``x`` where ``x >= 0``, ``slope * x`` elsewhere; the slope broadcasts against x (a 1-D slope of C values on
    an (N, C, ...) input applies per channel, as the reference), and is learnable."""

    def __init__(self, **attributes) -> None:
        pass

    def __call__(self, x, slope):
        x_shape, slope_shape = shape_of(x), shape_of(slope)
        dtype = dtype_of(x)
        x, slope = as_symbol(x), as_symbol(slope, dtype)
        if per_channel_slope(x_shape, slope_shape):
            slope_shape = (slope_shape[0],) + (1,) * (len(x_shape) - 2)
            slope = reshape(slope, slope_shape)
        out_shape = broadcast_shape("PRelu", x_shape, slope_shape)
        if out_shape != x_shape:  # a slope of more dimensions than x: the result has the broadcast shape
            x = mx.sym.broadcast_to(reshape(x, (1,) * (len(out_shape) - len(x_shape)) + x_shape), shape=out_shape)
        return _where(x >= 0, x, mx.sym.broadcast_mul(x, slope))


@register("Shrink")
class Shrink(_Unary):
    """``x + bias`` where ``x < -lambd``, ``x - bias`` where ``x > lambd``, 0 elsewhere, for any numeric type (the
    bias in x's type, truncated toward zero for integers as NumPy's ``astype``; integers compare with the float
    thresholds in float64, as the reference); gradient 1 outside ``[-lambd, lambd]``."""

    def __call__(self, x):
        dtype = dtype_of(x)
        x = as_symbol(x)
        if dtype.kind == "f":
            bias, compare = float(self.bias), x
        else:
            bias, compare = int(self.bias), mx.sym.cast(x, "float64")
        lambd = float(self.lambd)
        shifted_up = x + bias if bias else mx.sym.identity(x)
        shifted_down = x - bias if bias else mx.sym.identity(x)
        return _where(compare < -lambd, shifted_up, _where(compare > lambd, shifted_down, mx.sym.zeros_like(x)))


def _swish(x: Symbol, alpha: float) -> Symbol:
    return x * mx.sym.sigmoid(x * alpha if alpha != 1.0 else x)


@register("Swish")
class Swish(_Unary):
    """``x * sigmoid(alpha * x)`` (SiLU for ``alpha=1``); float16 computes in float32, as the reference."""

    def __call__(self, x):
        dtype = dtype_of(x)
        x = as_symbol(x)
        if dtype == np.float16:
            return mx.sym.cast(_swish(mx.sym.cast(x, "float32"), float(self.alpha)), "float16")
        return _swish(x, float(self.alpha))


@register("SwiGLU")
class SwiGLU(_Unary):
    """``Swish_alpha(A) * B`` for A and B of one shape (no broadcasting); computed in float64 if either is, else
    float32 (the reference's compute type), the result in A's dtype."""

    def __call__(self, a, b=None):
        check_swiglu_inputs(shape_of(a), None if b is None else shape_of(b))
        a_dtype, b_dtype = dtype_of(a), dtype_of(b)
        compute = np.dtype(np.float64) if np.float64 in (a_dtype, b_dtype) else np.dtype(np.float32)
        out = _swish(as_symbol(a, compute), float(self.alpha)) * as_symbol(b, compute)
        return out if compute == a_dtype else mx.sym.cast(out, a_dtype.name)


# ------------------------------------------------------------------------------------- Softmax and kin

def _require_float(op_name: str, x) -> None:
    dtype = dtype_of(x)
    check_float_input(op_name, dtype.kind == "f", dtype.name)


@register("Softmax", since=13)
class Softmax(MXOp):
    """``exp(x) / sum(exp(x))`` along ``axis``: MXNet's ``softmax`` (it subtracts the maximum first); float16 is
    computed step by step in float16, as ONNX's expected outputs (and the reference) round after each step."""

    op_name = "Softmax"

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes(self.op_name, attributes, opset=13))

    def __call__(self, x):
        _require_float(self.op_name, x)
        shape = shape_of(x)
        self._check_rank(shape)
        return self._apply(as_symbol(x), shape, normalize_axis(self.op_name, self.axis, len(shape)))

    def _check_rank(self, shape) -> None:
        pass

    def _apply(self, x, shape, axis):
        if math.prod(shape) == 0:  # an empty tensor normalizes to an empty tensor
            return mx.sym.identity(x)
        if dtype_of(x) == np.float16:
            e = mx.sym.exp(mx.sym.broadcast_sub(x, mx.sym.BlockGrad(mx.sym.max(x, axis=axis, keepdims=True))))
            return mx.sym.broadcast_div(e, mx.sym.sum(e, axis=axis, keepdims=True))
        return mx.sym.softmax(x, axis=axis)


@register("LogSoftmax", since=13)
class LogSoftmax(Softmax):
    """``x - log(sum(exp(x)))`` along ``axis``: MXNet's ``log_softmax``."""

    op_name = "LogSoftmax"

    def _apply(self, x, shape, axis):
        if math.prod(shape) == 0:
            return mx.sym.identity(x)
        return mx.sym.log_softmax(x, axis=axis)


@register("Hardmax", since=13)
class Hardmax(Softmax):
    """1 at the first maximum along ``axis``, 0 elsewhere: the positions equal to the maximum whose running count
    of such positions (``np.cumsum``) is 1. Locally constant (no gradient: ``BlockGrad``)."""

    op_name = "Hardmax"

    def _check_rank(self, shape) -> None:
        if len(shape) < 1:
            raise ShapeError(f"Hardmax: input must have at least 1 dimension, got shape {tuple(shape)}")

    def _apply(self, x, shape, axis):
        x = mx.sym.BlockGrad(x)
        if math.prod(shape) == 0:
            return mx.sym.zeros_like(x)
        hit = mx.sym.cast(mx.sym.broadcast_equal(x, mx.sym.max(x, axis=axis, keepdims=True)), "int32")
        count = mx.sym.np.cumsum(hit.as_np_ndarray(), axis=axis, dtype="int32").as_nd_ndarray()
        first = mx.sym.broadcast_logical_and(hit, count == 1)
        return mx.sym.BlockGrad(mx.sym.cast(first, dtype_of(x).name))


class _CoercedTo2D(CoercedTo2D):
    """Opsets 1-12: the input coerced to 2-D at ``axis`` (default 1), ``[prod(shape[:axis]),
    prod(shape[axis:])]``, each row normalized (the newest version along axis 1 of that view)."""

    def __call__(self, x):
        _require_float(self.op_name, x)
        shape = shape_of(x)
        self._check_rank(shape)
        flat_shape = self.coerced_shape(shape)
        out = self._apply(reshape(as_symbol(x), flat_shape), flat_shape, 1)
        return reshape(out, shape)


@register("Softmax", since=1)
class Softmax1(_CoercedTo2D, Softmax):
    """Softmax of opsets 1-12: over the input coerced to 2-D at ``axis`` (default 1)."""


@register("LogSoftmax", since=1)
class LogSoftmax1(_CoercedTo2D, LogSoftmax):
    """LogSoftmax of opsets 1-12: over the input coerced to 2-D at ``axis`` (default 1)."""


@register("Hardmax", since=1)
class Hardmax1(_CoercedTo2D, Hardmax):
    """Hardmax of opsets 1-12: 1 at the first maximum of each row of the input coerced to 2-D at ``axis``."""


# ------------------------------------------------------------------------------------------------ Dropout

def _known(value, kind, what: str):
    """A scalar input as a Python ``kind`` when known while composing, else None (a tensor computed in the graph);
    the reference's ShapeError for an empty or longer one."""
    known = static(value)
    if known is None:
        if shape_of(value) not in ((), (1,)):
            raise ShapeError(f"Dropout: {what} must be a single value (a scalar or a 1-element tensor), got shape "
                             f"{shape_of(value)}")
        return None
    if known.size != 1:
        raise ShapeError(f"Dropout: {what} must be a single value (a scalar or a 1-element tensor), got shape "
                         f"{known.shape}")
    return kind(known.reshape(-1)[0])


@register("Dropout")
class Dropout(MXOp):
    """Inverted dropout, active in training passes (``training``) or when the ``training_mode`` input is true,
    with ratio > 0: zero each element with probability ``ratio`` and scale the rest by ``1 / (1 - ratio)``;
    otherwise the identity. Returns ``(output, mask)`` when the node names two outputs (mask: bool), else the
    output.

    A ratio known while composing runs MXNet's ``Dropout`` kernel (``mode='always'``: the converter decides when
    it is active) on ones, giving the scaled keep mask the data is multiplied by (so the mask output is exact
    even where the data is 0); a ratio computed in the graph compares MXNet's uniform draws with it. The masks
    come from MXNet's generator (``mx.random.seed``), a stream different from the reference's NumPy one: the
    ``seed`` attribute is not applied. The deterministic cases (inactive, ratio 0) are identical. The ratio gets
    no gradient, as in the reference."""

    deterministic = False

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("Dropout", attributes))

    def __call__(self, data, ratio=None, training_mode=None):
        rate = float(self.ratio) if ratio is None else _known(ratio, float, "input 'ratio'")
        if rate is not None:
            check_dropout_ratio(rate)
        if self.training:
            mode = True
        else:
            mode = False if training_mode is None else _known(training_mode, bool, "input 'training_mode'")
        want_mask = self.node_output_count is not None and self.node_output_count > 1
        data = as_symbol(data)
        if mode is False or rate == 0.0:
            output = mx.sym.identity(data)
            if not want_mask:
                return output
            return output, mx.sym.cast(mx.sym.ones_like(data), "bool")
        keep = self._keep(data, ratio if rate is None else rate)  # the scaled keep mask, data's dtype
        output = data * keep
        mask = keep != 0
        if mode is None:  # training_mode known only when the graph runs
            active = _like(mx.sym.cast(as_symbol(training_mode), dtype_of(data).name), data)
            output = _where(active, output, data)
            mask = mx.sym.broadcast_logical_or(mask, active == 0)
        return (output, mx.sym.cast(mask, "bool")) if want_mask else output

    @staticmethod
    def _keep(data: Symbol, rate) -> Symbol:
        dtype = dtype_of(data)
        if not isinstance(rate, float):  # a ratio computed in the graph: compare uniform draws with it
            rate = _like(mx.sym.BlockGrad(mx.sym.cast(as_symbol(rate), "float32")), data)
            noise = mx.sym.random.uniform_like(mx.sym.cast(mx.sym.BlockGrad(data), "float32"))
            scale = _where(rate < 1.0, 1.0 / (1.0 - rate), mx.sym.ones_like(rate))
            return mx.sym.BlockGrad(mx.sym.cast((noise >= rate) * scale, dtype.name))
        if rate >= 1.0:  # everything dropped, nothing scaled
            return mx.sym.BlockGrad(mx.sym.zeros_like(data))
        return mx.sym.BlockGrad(mx.sym.Dropout(mx.sym.ones_like(data), p=rate, mode="always"))


def _like(scalar: Symbol, x: Symbol) -> Symbol:
    """A one-element tensor broadcast to ``x``'s shape."""
    shape = shape_of(x)
    return mx.sym.broadcast_like(reshape(scalar, (1,) * len(shape)), x) if shape else reshape(scalar, ())
