"""Reductions as native MXNet operations: ReduceSum/Mean/Max/Min/Prod/L1/L2/SumSquare/LogSum/LogSumExp and
ArgMax/ArgMin, plus the scans CumSum and CumProd. Axes come from the ``axes`` attribute (before opsets 13/18) or
the second input (after; read while composing: :func:`~d5.frameworks.mxnet.operators._helpers.ints`); with none,
all axes are reduced unless ``noop_with_empty_axes`` (then the input passes unchanged). Reducing an empty set gives
the reduction's identity (-inf/+inf for max/min of floats, the integer extremes for integers, False/True for
bools). Outputs keep the input's dtype (integer means, norms and log-sums are computed in float64 and truncated,
as the reference does).

The sums, means, extrema and CumSum run on MXNet's reduction kernels (``sum``, ``mean``, ``max``, ``min``,
``prod`` for integers, ``np.cumsum``); where MXNet's gradient differs from the reference's, the computation is
arranged so that autograd gives the reference's: ReduceMax/ReduceMin share the gradient equally between tied
extrema (MXNet's gives each the whole), ReduceProd multiplies pairwise (MXNet's ``prod`` divides by the input, NaN
at zeros) and ReduceL2's zero norm has gradient 0. MXNet has no cumulative product: CumProd is a log-depth scan of
products of shifted copies (exact, differentiable). MXNet's reduction kernels mishandle empty tensors (an empty
result, or a zero-size last reduced axis, corrupts the output, and the error surfaces later in an unrelated
operation): empty results are reshaped inputs and sums over empty tensors run on ``np.sum``. MXNet holds no
uint16/32/64 tensors: those inputs are refused (the executor keeps such values as NumPy and folds their nodes on
the reference).

>>> import numpy as np
>>> from d5.frameworks.mxnet.custom_op import native_op
>>> native_op("ReduceSum", keepdims=0).forward([np.array([[1.0, 2.0], [3.0, 4.0]], np.float32), np.array([1])]).tolist()
[3.0, 7.0]
>>> native_op("CumSum", exclusive=1).forward([np.array([1.0, 2.0, 3.0], np.float32), np.array(0)]).tolist()
[0.0, 1.0, 3.0]
"""
from __future__ import annotations

import math

import mxnet as mx
import numpy as np

from d5.errors import UnsupportedOperatorError
from d5.frameworks.mxnet.operators import MXOp, register
from d5.frameworks.mxnet.operators._helpers import HELD_DTYPES, Symbol, as_symbol, dtype_of, ints, reshape, shape_of
from d5.ops.onnx_attributes import adopt, operator_attributes
from d5.ops.window_checks import arg_axis, empty_extremum, kept_shape, reduce_axes, reduced_shape, scan_axis


def _held(op_name: str, x) -> np.dtype:
    """``x``'s dtype, which MXNet must hold (uint16/32/64 values stay NumPy, on the reference)."""
    dtype = dtype_of(x)
    if dtype not in HELD_DTYPES:
        raise UnsupportedOperatorError(f"{op_name}: the MXNet framework holds no {dtype.name} tensors (MXNet 1.9 "
                                       "computes with float16/32/64, int8/32/64, uint8 and bool)")
    return dtype


def _cast(x: Symbol, dtype: np.dtype) -> Symbol:
    return x if dtype_of(x) == dtype else mx.sym.cast(x, np.dtype(dtype).name)


def _empty_set(x: Symbol, axes, value) -> Symbol:
    """The result of reducing an empty set: ``value`` in the keepdims shape and x's dtype. Floats compute it as
    ``0 * sum(x) + value`` (the sum of nothing is exactly 0), which keeps the result a function of x for autograd
    and needs no constant; other dtypes take a constant."""
    dtype = dtype_of(x)
    if dtype.kind == "f":
        return _sum(x, axes) * 0.0 + float(value)
    return as_symbol(np.full(kept_shape(shape_of(x), axes), value, dtype))


class _Reduction(MXOp):
    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes(type(self).__name__, attributes))

    def __call__(self, x, axes=None):
        name = type(self).__name__
        axes = self.axes if axes is None else ints(axes, f"{name}'s axes (input 1)")
        shape = shape_of(x)
        dtype = _held(name, x)
        axes = reduce_axes(name, axes, len(shape), self.noop_with_empty_axes)
        if axes is None:
            return mx.sym.identity(x) if isinstance(x, Symbol) else np.array(x, copy=True)
        x = as_symbol(x)
        if not math.prod(shape) and _count(shape, axes):
            # An empty input, a non-empty reduced set: an empty result, x reshaped (MXNet's reduction kernels
            # fail on empty outputs, asynchronously: the error surfaces in a later, unrelated operation).
            return reshape(x, kept_shape(shape, axes) if self.keepdims else reduced_shape(shape, axes))
        if not shape:
            return reshape(_cast(self._reduce(reshape(x, (1,)), [0], (1,)), dtype), ())
        out = _cast(self._reduce(x, axes, shape), dtype)  # keepdims shape
        return out if self.keepdims else reshape(out, reduced_shape(shape, axes))

    def _reduce(self, x: Symbol, axes: list[int], shape: tuple[int, ...]) -> Symbol:
        raise NotImplementedError


def _count(shape, axes) -> int:
    return math.prod(shape[a] for a in axes)


def _sum(x: Symbol, axes) -> Symbol:
    """``sum`` over ``axes`` (keepdims) in x's dtype; bools as a logical or (NumPy's ``sum(dtype=bool)``)."""
    if dtype_of(x) == np.bool_:
        return _sum(mx.sym.cast(x, "int32"), axes) != 0
    if math.prod(shape_of(x)) == 0:
        # An empty tensor: MXNet's legacy ``sum`` leaves its output unallocated when a reduced zero-size axis is
        # the last one, and its kernels on empty tensors upset later runs; the NumPy-style ``np.sum`` is sound.
        total = mx.sym.np.sum(x.as_np_ndarray(), axis=tuple(axes), keepdims=True).as_nd_ndarray()
        return _cast(total, dtype_of(x))
    return mx.sym.sum(x, axis=tuple(axes), keepdims=True)


def _as_float(x: Symbol) -> Symbol:
    """Integers and bools in float64 (the reference's NumPy computes their means, norms and logs there)."""
    return x if dtype_of(x).kind == "f" else mx.sym.cast(x, "float64")


def _square(x: Symbol) -> Symbol:
    return mx.sym.cast(x, "int32") if dtype_of(x) == np.bool_ else x * x


@register("ReduceSum")
class ReduceSum(_Reduction):
    """Sum over ``axes`` in the input's dtype (integers wrap; bools: any)."""

    def _reduce(self, x, axes, shape):
        return _sum(x, axes)


@register("ReduceMean")
class ReduceMean(_Reduction):
    """Mean over ``axes`` (NaN for an empty set); integers are averaged in float64 and truncated."""

    def _reduce(self, x, axes, shape):
        x = _as_float(x)
        if _count(shape, axes) == 0:  # MXNet's mean refuses an empty set: 0 / 0
            return _sum(x, axes) / 0.0
        return mx.sym.mean(x, axis=tuple(axes), keepdims=True)


@register("ReduceSumSquare")
class ReduceSumSquare(_Reduction):
    """Sum of squares over ``axes``, in the input's dtype."""

    def _reduce(self, x, axes, shape):
        return _sum(_square(x), axes)


@register("ReduceL1")
class ReduceL1(_Reduction):
    """Sum of absolute values over ``axes`` (MXNet's ``abs``: gradient 0 at 0, as the reference)."""

    def _reduce(self, x, axes, shape):
        kind = dtype_of(x).kind
        return _sum(x if kind in "ub" else mx.sym.abs(x), axes)


@register("ReduceL2")
class ReduceL2(_Reduction):
    """Euclidean norm over ``axes``; the gradient of a zero norm is 0 (the square root of a stand-in 1 where the
    sum of squares is 0, so neither side of the ``where`` has a non-finite gradient). Integers: the sum of squares
    in their dtype, its square root in float64, truncated."""

    def _reduce(self, x, axes, shape):
        squares = _as_float(_sum(_square(x), axes))
        zero = squares == 0
        safe = mx.sym.where(zero, mx.sym.ones_like(squares), squares)
        return mx.sym.where(zero, mx.sym.zeros_like(squares), mx.sym.sqrt(safe))


@register("ReduceLogSum")
class ReduceLogSum(_Reduction):
    """``log(sum(x))`` over ``axes`` (-inf for an empty set or a zero sum, NaN for a negative one)."""

    def _reduce(self, x, axes, shape):
        return mx.sym.log(_as_float(_sum(x, axes)))


@register("ReduceLogSumExp")
class ReduceLogSumExp(_Reduction):
    """``log(sum(exp(x)))`` over ``axes``, computed stably: the maximum (where finite; no gradient) is subtracted
    first and added back. Integers are computed in float64."""

    def _reduce(self, x, axes, shape):
        x = _as_float(x)
        axes = tuple(axes)
        if _count(shape, axes) == 0:  # an empty set: log(0) = -inf
            return mx.sym.log(_sum(mx.sym.exp(x), axes))
        shift = mx.sym.BlockGrad(mx.sym.max(x, axis=axes, keepdims=True))
        shift = mx.sym.where((shift - shift) == 0, shift, mx.sym.zeros_like(shift))  # +-inf and NaN: no shift
        total = mx.sym.sum(mx.sym.exp(mx.sym.broadcast_sub(x, shift)), axis=axes, keepdims=True)
        return shift + mx.sym.log(total)


@register("ReduceProd")
class ReduceProd(_Reduction):
    """Product over ``axes``. Floats multiply pairwise in a log-depth tree (the reduced axes moved last and
    flattened), so autograd's gradient is the product of the other elements, exact with zeros (MXNet's ``prod``
    divides its output by the input); integers use MXNet's ``prod`` (no gradient), bools are an ``all``."""

    def _reduce(self, x, axes, shape):
        dtype = dtype_of(x)
        if dtype == np.bool_:
            return mx.sym.min(x, axis=tuple(axes), keepdims=True)
        n = _count(shape, axes)
        kept = kept_shape(shape, axes)
        if n == 0:  # an empty set: 1
            return _empty_set(x, axes, 1)
        if dtype.kind != "f":
            return mx.sym.prod(x, axis=tuple(axes), keepdims=True)
        others = [i for i in range(len(shape)) if i not in axes]
        order = others + list(axes)
        y = mx.sym.transpose(x, axes=tuple(order)) if order != list(range(len(shape))) else x
        lead = [shape[i] for i in others]
        y = reshape(y, lead + [n])
        while n > 1:
            if n % 2:  # an odd count: one more factor of 1
                one = mx.sym.ones_like(mx.sym.BlockGrad(mx.sym.slice_axis(y, axis=len(lead), begin=0, end=1)))
                y = mx.sym.concat(y, one, dim=len(lead))
                n += 1
            pairs = reshape(y, lead + [n // 2, 2])
            y = reshape(mx.sym.slice_axis(pairs, axis=len(lead) + 1, begin=0, end=1)
                        * mx.sym.slice_axis(pairs, axis=len(lead) + 1, begin=1, end=2), lead + [n // 2])
            n //= 2
        return reshape(y, kept)


class _Extremum(_Reduction):
    """ReduceMax/ReduceMin on MXNet's ``max``/``min``. MXNet's gradient gives each tied extremum the whole
    cotangent; the reference shares it equally (as PyTorch's amax): the result is ``m + (extremum(x) - m) / k``
    (``m`` and the tie count ``k`` without gradient, so the value is exactly the extremum), where ``m`` is
    finite."""

    largest = True

    def _reduce(self, x, axes, shape):
        dtype = dtype_of(x)
        axes_t = tuple(axes)
        if _count(shape, axes) == 0:  # an empty set: the identity of the reduction
            return _empty_set(x, axes, empty_extremum(self.largest, dtype.kind == "f", dtype == np.bool_,
                                                      lambda: np.iinfo(dtype)))
        reduce = mx.sym.max if self.largest else mx.sym.min
        if dtype == np.bool_:
            return mx.sym.cast(reduce(mx.sym.cast(x, "int8"), axis=axes_t, keepdims=True), "bool")
        out = reduce(x, axis=axes_t, keepdims=True)
        if dtype.kind != "f":
            return out
        fixed = mx.sym.BlockGrad(out)
        hit = mx.sym.BlockGrad(mx.sym.broadcast_equal(x, fixed))
        ties = mx.sym.BlockGrad(mx.sym.maximum(mx.sym.sum(hit, axis=axes_t, keepdims=True), 1.0))
        shared = fixed + (out - fixed) / ties
        # An infinite extremum (m - m is NaN): the sum of the tied elements weighted 1/k (each is m) instead.
        weights = mx.sym.BlockGrad(mx.sym.broadcast_div(hit, ties))
        infinite = mx.sym.sum(mx.sym.where(hit, x, mx.sym.zeros_like(x)) * weights, axis=axes_t, keepdims=True)
        return mx.sym.where((fixed - fixed) == 0, shared, mx.sym.where(fixed == fixed, infinite, out))


@register("ReduceMax")
class ReduceMax(_Extremum):
    """Maximum over ``axes`` (-inf for an empty set of floats); tied maxima share the gradient equally."""

    largest = True


@register("ReduceMin")
class ReduceMin(_Extremum):
    """Minimum over ``axes`` (+inf for an empty set of floats); tied minima share the gradient equally."""

    largest = False


class _ArgExtremum(MXOp):
    """The first (or with ``select_last_index`` the last) position of the extremum along ``axis``, as int64: the
    extremum, compared, and the least (greatest) matching position (MXNet's ``argmax`` returns float32 indices and
    does not promise which of tied positions). A NaN counts as the extremum, as in NumPy."""

    largest = True

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes(type(self).__name__, attributes))

    def __call__(self, x):
        name = type(self).__name__
        shape = shape_of(x)
        dtype = _held(name, x)
        axis = arg_axis(name, self.axis, shape)
        x = mx.sym.BlockGrad(as_symbol(x))
        kept = kept_shape(shape, [axis]) if self.keepdims else reduced_shape(shape, [axis])
        if not math.prod(shape):  # an empty result: no reduction kernel (MXNet's fail on empty outputs)
            return reshape(mx.sym.cast(x, "int64"), kept)
        if dtype == np.bool_:
            x = mx.sym.cast(x, "int8")
        peak = (mx.sym.max if self.largest else mx.sym.min)(x, axis=axis, keepdims=True)
        hit = mx.sym.broadcast_equal(x, peak)
        if dtype.kind == "f":
            nan = x != x
            hit = mx.sym.where(mx.sym.broadcast_like(mx.sym.max(nan, axis=axis, keepdims=True), nan), nan, hit)
        n = shape[axis]
        positions = mx.sym.broadcast_like(reshape(mx.sym.contrib.arange_like(mx.sym.cast(x, "int64"), axis=axis),
                                                  [n if i == axis else 1 for i in range(len(shape))]), x)
        if self.select_last_index:
            index = mx.sym.max(mx.sym.where(hit, positions, mx.sym.ones_like(positions) * -1), axis=axis,
                               keepdims=True)
        else:
            index = mx.sym.min(mx.sym.where(hit, positions, mx.sym.ones_like(positions) * n), axis=axis,
                               keepdims=True)
        return index if self.keepdims else reshape(index, kept)


@register("ArgMax")
class ArgMax(_ArgExtremum):
    """Index (int64) of the maximum along ``axis``; the first one unless ``select_last_index``."""

    largest = True


@register("ArgMin")
class ArgMin(_ArgExtremum):
    """Index (int64) of the minimum along ``axis``; the first one unless ``select_last_index``."""

    largest = False


# ------------------------------------------------------------------------------------------------ scans

#: The dtypes MXNet's ``np.cumsum`` sums in; the others (uint8, bool) are summed in int32 and cast back (uint8
#: wraps as it would, bools become "any so far").
_CUMSUM_DTYPES = frozenset(np.dtype(t) for t in (np.float16, np.float32, np.float64, np.int8, np.int32, np.int64))


class _Scan(MXOp):
    """A cumulative scan along the axis given as the second input, in the input's dtype (integers wrap);
    ``exclusive`` shifts by one element starting from the identity, ``reverse`` scans from the end (``flip``)."""

    identity = 0

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes(type(self).__name__, attributes))

    def __call__(self, x, axis=None):
        name = type(self).__name__
        axis = scan_axis(name, shape_of(x), axis, lambda value: ints(value, f"{name}'s axis (input 1)"),
                         rank_first=False)
        dtype = _held(name, x)
        shape = shape_of(x)
        y = as_symbol(x)
        n = shape[axis]
        if n == 0:
            return mx.sym.identity(y)
        if self.reverse:
            y = mx.sym.flip(y, axis=axis)
        if self.exclusive:
            # The scan of all but the last element behind the identity (not ``cumsum - x``, which rounds
            # differently and turns inf into NaN).
            first = mx.sym.slice_axis(y, axis=axis, begin=0, end=1)
            head = (mx.sym.ones_like if self.identity else mx.sym.zeros_like)(mx.sym.BlockGrad(first))
            if n == 1:
                out = _connected_head(head, first)
            else:
                out = mx.sym.concat(head, self._scan(mx.sym.slice_axis(y, axis=axis, begin=0, end=n - 1), axis,
                                                     n - 1, dtype), dim=axis)
        else:
            out = self._scan(y, axis, n, dtype)
        return mx.sym.flip(out, axis=axis) if self.reverse else out

    def _scan(self, y: Symbol, axis: int, n: int, dtype: np.dtype) -> Symbol:
        raise NotImplementedError


def _connected_head(head: Symbol, y: Symbol) -> Symbol:
    """An exclusive scan of one element: the identity, tied to ``y`` for autograd (``+ 0 * y``)."""
    return head + y * 0 if dtype_of(y).kind == "f" else head


@register("CumSum")
class CumSum(_Scan):
    """Cumulative sum along the axis given as the second input: MXNet's ``np.cumsum`` in the input's dtype (uint8
    and bool through int32); ``exclusive`` / ``reverse`` as in ONNX. The gradient is the scan of the cotangent the
    other way, as the reference's."""

    identity = 0

    def _scan(self, y, axis, n, dtype):
        compute = dtype if dtype in _CUMSUM_DTYPES else np.dtype(np.int32)
        out = mx.sym.np.cumsum(_cast(y, compute).as_np_ndarray(), axis=axis, dtype=compute.name).as_nd_ndarray()
        return _cast(out, dtype)


@register("CumProd")
class CumProd(_Scan):
    """Cumulative product along the axis given as the second input; ``exclusive`` / ``reverse`` as in ONNX. MXNet
    has no cumulative product: a log-depth (Hillis-Steele) scan multiplies the running products by copies shifted
    by 1, 2, 4, ... elements (ones shifted in), so integers wrap as in a sequential product and floats are
    differentiable by autograd with a gradient exact with zeros, where the reference has none."""

    identity = 1

    def _scan(self, y, axis, n, dtype):
        if dtype == np.bool_:  # the running "all"
            y = mx.sym.cast(y, "int32")
        step = 1
        while step < n:
            ones = mx.sym.ones_like(mx.sym.BlockGrad(mx.sym.slice_axis(y, axis=axis, begin=0, end=step)))
            shifted = mx.sym.concat(ones, mx.sym.slice_axis(y, axis=axis, begin=0, end=n - step), dim=axis)
            y = y * shifted
            step *= 2
        return _cast(y, dtype)
