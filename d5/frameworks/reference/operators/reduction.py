"""Reference reductions (ONNX semantics, newest opset): ReduceMean, ReduceSum, ReduceMax, ReduceMin, ReduceProd,
ReduceL1, ReduceL2, ReduceLogSum, ReduceLogSumExp, ReduceSumSquare, ArgMax, ArgMin (no gradient: int64
indices), and the scans CumSum and CumProd (no gradient).

``axes`` is an input from opset 13 (ReduceSum) or 18 (the others) and an attribute before; either is
accepted, the input taking precedence. No axes means all axes, unless ``noop_with_empty_axes=1``, which
makes the reduction the identity. Reducing an empty set gives the reduction's identity (0 for sums, 1 for
the product, -inf/+inf for max/min of floats, -inf for the log-sums). Outputs keep the input's dtype.

>>> import numpy as np
>>> from d5.frameworks.reference.operators import create_operator
>>> x = np.arange(6, dtype=np.float32).reshape(2, 3)
>>> create_operator("ReduceSum", {"keepdims": 0}).forward([x, np.array([1])])
array([ 3., 12.], dtype=float32)
>>> create_operator("ArgMax", {"axis": 1}).forward([x]).tolist()
[[2], [2]]
>>> create_operator("CumSum", {"exclusive": 1}).forward([np.array([1., 2., 3.]), np.array(0)])
array([0., 1., 3.])
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from d5.errors import ShapeError
from d5.frameworks.reference.operators import ReferenceOp, register
from d5.frameworks.reference.operators._checks import int_list, require_rank, scalar_input
from d5.frameworks.reference.operators.elementwise import ensure_array
from d5.ops.onnx_attributes import adopt, operator_attributes
from d5.ops.onnx_semantics import normalize_axis
from d5.ops.operator import Gradient
from d5.ops.window_checks import arg_axis, empty_extremum, kept_shape, reduce_axes, reduced_shape


class _Reduction(ReferenceOp):
    """Shared axes handling. Subclasses define ``_reduce(x, axes)`` (keepdims=True) and
    ``_grad(g, x, out, axes)`` with ``g`` and ``out`` in keepdims shape."""

    op_name = "Reduce"

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes(self.op_name, attributes))

    def _axes(self, inputs) -> tuple[int, ...] | None:
        """The reduced axes (non-negative), or None for the identity (noop_with_empty_axes)."""
        x = inputs[0]
        axes = int_list(inputs[1]) if len(inputs) > 1 and inputs[1] is not None else self.axes
        axes = reduce_axes(self.op_name, axes, x.ndim, self.noop_with_empty_axes)
        return None if axes is None else tuple(axes)

    def forward(self, inputs):
        x = inputs[0]
        axes = self._axes(inputs)
        if axes is None:
            return self._identity(x)
        out = ensure_array(self._reduce(x, axes))
        out = out.astype(x.dtype, copy=False) if out.dtype != x.dtype else out
        return out if self.keepdims else out.reshape(reduced_shape(x.shape, axes))

    def _identity(self, x: np.ndarray) -> np.ndarray:
        return x

    def backward(self, grads, fwd_inputs, fwd_outputs):
        x, g, out = fwd_inputs[0], grads[0], fwd_outputs[0]
        rest = (None,) * (len(fwd_inputs) - 1)
        axes = self._axes(fwd_inputs)
        if axes is None:
            return (self._identity_grad(g, x),) + rest
        kept = kept_shape(x.shape, axes)
        grad = ensure_array(self._grad(g.reshape(kept), x, out.reshape(kept), axes))
        grad = np.broadcast_to(grad, x.shape) if grad.shape != x.shape else grad
        return (np.array(grad, dtype=x.dtype, copy=grad.dtype != x.dtype or not grad.flags.writeable),) + rest

    def _identity_grad(self, g: np.ndarray, x: np.ndarray) -> np.ndarray:
        return g

    def _reduce(self, x: np.ndarray, axes: tuple) -> np.ndarray:
        raise NotImplementedError

    def _grad(self, g: np.ndarray, x: np.ndarray, out: np.ndarray, axes: tuple) -> np.ndarray:
        raise NotImplementedError


def _count(x: np.ndarray, axes: tuple) -> int:
    return math.prod(x.shape[a] for a in axes)


@register("ReduceSum")
class ReduceSum(_Reduction):
    """Sum over ``axes``."""

    op_name = "ReduceSum"

    def _reduce(self, x, axes):
        return np.sum(x, axis=axes, keepdims=True, dtype=x.dtype)

    def _grad(self, g, x, out, axes):
        return g


@register("ReduceMean")
class ReduceMean(_Reduction):
    """Mean over ``axes`` (NaN for an empty set)."""

    op_name = "ReduceMean"

    def _reduce(self, x, axes):
        # An empty set gives NaN (0 / 0), as in ONNX; integers are averaged in float64 and truncated by forward.
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.mean(x, axis=axes, keepdims=True)

    def _grad(self, g, x, out, axes):
        return g / np.asarray(max(_count(x, axes), 1), dtype=g.dtype)


@register("ReduceSumSquare")
class ReduceSumSquare(_Reduction):
    """Sum of squares over ``axes``."""

    op_name = "ReduceSumSquare"

    def _reduce(self, x, axes):
        return np.sum(x * x, axis=axes, keepdims=True, dtype=x.dtype)

    def _grad(self, g, x, out, axes):
        return 2 * g * x


@register("ReduceL1")
class ReduceL1(_Reduction):
    """Sum of absolute values over ``axes``; the gradient at 0 is 0."""

    op_name = "ReduceL1"

    def _reduce(self, x, axes):
        return np.sum(np.abs(x), axis=axes, keepdims=True, dtype=x.dtype)

    def _grad(self, g, x, out, axes):
        return g * np.sign(x)


@register("ReduceL2")
class ReduceL2(_Reduction):
    """Euclidean norm over ``axes``; the gradient of a zero norm is 0."""

    op_name = "ReduceL2"

    def _reduce(self, x, axes):
        squares = np.sum(x * x, axis=axes, keepdims=True, dtype=x.dtype)
        return np.sqrt(squares) if np.issubdtype(x.dtype, np.floating) else np.sqrt(squares).astype(x.dtype)

    def _grad(self, g, x, out, axes):
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(out == 0, 0, g * x / out)


@register("ReduceLogSum")
class ReduceLogSum(_Reduction):
    """``log(sum(x))`` over ``axes`` (-inf for an empty set or a zero sum, NaN for a negative one, as ONNX)."""

    op_name = "ReduceLogSum"

    def _reduce(self, x, axes):
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.log(np.sum(x, axis=axes, keepdims=True, dtype=x.dtype))

    def _grad(self, g, x, out, axes):
        # d log(s) / dx = 1 / s, with s summed again rather than exp(out) (exact, and defined where out = -inf).
        with np.errstate(divide="ignore", invalid="ignore"):
            return g / np.sum(x, axis=axes, keepdims=True, dtype=x.dtype)


@register("ReduceLogSumExp")
class ReduceLogSumExp(_Reduction):
    """``log(sum(exp(x)))`` over ``axes``, computed stably (the maximum is subtracted first)."""

    op_name = "ReduceLogSumExp"

    def _reduce(self, x, axes):
        if x.size == 0 or _count(x, axes) == 0:
            with np.errstate(divide="ignore"):
                return np.log(np.sum(np.exp(x), axis=axes, keepdims=True))
        shift = np.max(x, axis=axes, keepdims=True)
        shift = np.where(np.isfinite(shift), shift, 0)
        return shift + np.log(np.sum(np.exp(x - shift), axis=axes, keepdims=True))

    def _grad(self, g, x, out, axes):
        return g * np.exp(x - out)


@register("ReduceProd")
class ReduceProd(_Reduction):
    """Product over ``axes``; the gradient is the product of the other elements (exact with zeros)."""

    op_name = "ReduceProd"

    def _reduce(self, x, axes):
        return np.prod(x, axis=axes, keepdims=True, dtype=x.dtype)

    def _grad(self, g, x, out, axes):
        # Move the reduced axes last and flatten them; the product of all *other* elements is the product of
        # an exclusive prefix and an exclusive suffix cumulative product, which needs no division by x.
        others = [i for i in range(x.ndim) if i not in axes]
        moved = np.transpose(x, others + list(axes))
        flat = moved.reshape(moved.shape[:len(others)] + (-1,))
        ones = np.ones(flat.shape[:-1] + (1,), dtype=x.dtype)
        prefix = np.concatenate([ones, np.cumprod(flat, axis=-1)[..., :-1]], axis=-1)
        suffix = np.concatenate([np.cumprod(flat[..., ::-1], axis=-1)[..., :-1][..., ::-1], ones], axis=-1)
        excluded = np.transpose((prefix * suffix).reshape(moved.shape), np.argsort(others + list(axes)))
        return g * excluded


class _Extremum(_Reduction):
    """ReduceMax/ReduceMin: the gradient is shared equally between tied extrema (as PyTorch's amax does)."""

    function: Any = None
    empty_float: float = 0.0

    def _reduce(self, x, axes):
        if _count(x, axes) == 0:
            # Empty set: the reduction's identity, -inf for max and +inf for min (the integer extremes for ints).
            initial = empty_extremum(self.empty_float < 0, np.issubdtype(x.dtype, np.floating), x.dtype == np.bool_,
                                     lambda: np.iinfo(x.dtype))
            return type(self).function(x, axis=axes, keepdims=True, initial=initial)
        return type(self).function(x, axis=axes, keepdims=True)

    def _grad(self, g, x, out, axes):
        hit = (x == out).astype(g.dtype)
        return g * hit / hit.sum(axis=axes, keepdims=True)


@register("ReduceMax")
class ReduceMax(_Extremum):
    """Maximum over ``axes`` (-inf for an empty set of floats)."""

    op_name = "ReduceMax"
    function = staticmethod(np.max)
    empty_float = -np.inf


@register("ReduceMin")
class ReduceMin(_Extremum):
    """Minimum over ``axes`` (+inf for an empty set of floats)."""

    op_name = "ReduceMin"
    function = staticmethod(np.min)
    empty_float = np.inf


class _ArgExtremum(ReferenceOp):
    gradient = Gradient.NONE
    op_name = "ArgMax"
    function: Any = None

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes(self.op_name, attributes))

    def forward(self, inputs):
        x = inputs[0]
        axis = arg_axis(self.op_name, self.axis, x.shape)
        if self.select_last_index:
            # The first extremum of the reversed axis is the last one of the original.
            index = x.shape[axis] - 1 - type(self).function(np.flip(x, axis), axis=axis)
        else:
            index = type(self).function(x, axis=axis)
        index = np.asarray(index, dtype=np.int64)
        return np.expand_dims(index, axis) if self.keepdims else index

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return None


@register("ArgMax")
class ArgMax(_ArgExtremum):
    """Index (int64) of the maximum along ``axis``; the first one unless ``select_last_index``."""

    op_name = "ArgMax"
    function = staticmethod(np.argmax)


@register("ArgMin")
class ArgMin(_ArgExtremum):
    """Index (int64) of the minimum along ``axis``; the first one unless ``select_last_index``."""

    op_name = "ArgMin"
    function = staticmethod(np.argmin)


def _cumulate(function, x: np.ndarray, axis: int, exclusive: bool, reverse: bool, identity) -> np.ndarray:
    if reverse:
        x = np.flip(x, axis)
    out = function(x, axis=axis).astype(x.dtype)
    if exclusive and x.shape[axis]:
        # Shift by one along the axis: out[i] = op(x[:i]), starting with the identity element.
        pad = np.full_like(np.take(x, [0], axis=axis), identity)
        out = np.concatenate([pad, np.take(out, np.arange(x.shape[axis] - 1), axis=axis)], axis=axis)
    return np.flip(out, axis) if reverse else out


def _scan_axis(op_name: str, inputs) -> int:
    if len(inputs) < 2 or inputs[1] is None:
        raise ShapeError(f"{op_name}: the axis input (a scalar) is required")
    return normalize_axis(op_name, scalar_input(op_name, inputs[1], "axis (input 1)"),
                 require_rank(op_name, inputs[0], "x", at_least=1).ndim)


@register("CumSum")
class CumSum(ReferenceOp):
    """Cumulative sum along the axis given as the second input; ``exclusive`` / ``reverse`` as in ONNX."""

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("CumSum", attributes))

    def forward(self, inputs):
        return _cumulate(np.cumsum, inputs[0], _scan_axis("CumSum", inputs), self.exclusive, self.reverse, 0)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        # d out[j] / d x[i] = 1 exactly where the forward sum at j includes i: the same scan, run the other way.
        axis = _scan_axis("CumSum", fwd_inputs)
        grad = _cumulate(np.cumsum, grads[0], axis, self.exclusive, not self.reverse, 0)
        return grad, None


@register("CumProd")
class CumProd(ReferenceOp):
    """Cumulative product along the axis given as the second input; ``exclusive`` / ``reverse`` as in ONNX."""

    gradient = Gradient.NONE

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("CumProd", attributes))

    def forward(self, inputs):
        return _cumulate(np.cumprod, inputs[0], _scan_axis("CumProd", inputs), self.exclusive, self.reverse, 1)
