"""Reductions as native TensorFlow operations: ReduceSum/Mean/Max/Min/Prod/L1/L2/SumSquare/LogSum/LogSumExp and
ArgMax/ArgMin, plus the scans CumSum and CumProd. Axes come from the ``axes`` attribute (before opsets 13/18) or
the second input (after); with none, all axes are reduced unless ``noop_with_empty_axes`` (then the input passes
unchanged). Reducing an empty set gives the reduction's identity (-inf/+inf for max/min of floats, the integer
extremes for integers, False/True for bools). Outputs keep the input's dtype (integer means, norms and log-sums
are computed in float64 and truncated, as the reference does).

>>> import tensorflow as tf
>>> ReduceSum(keepdims=0)(tf.constant([[1.0, 2.0], [3.0, 4.0]]), tf.constant([1])).numpy().tolist()
[3.0, 7.0]
"""
from __future__ import annotations

import tensorflow as tf

from d5.frameworks.tensorflow.operators import TFOp, register
from d5.frameworks.tensorflow.operators._helpers import ints, static_shape
from d5.ops.onnx_attributes import adopt, operator_attributes
from d5.ops.window_checks import arg_axis, empty_extremum, kept_shape, reduce_axes, scan_axis

_UNSIGNED = (tf.uint8, tf.uint16, tf.uint32, tf.uint64)


class _Reduction(TFOp):
    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes(type(self).__name__, attributes))

    def __call__(self, x, axes=None):
        name = type(self).__name__
        axes = self.axes if axes is None else ints(axes, f"{name}'s axes (input 1)")
        rank = x.shape.rank
        axes = reduce_axes(name, axes, rank, self.noop_with_empty_axes)
        if axes is None:
            return tf.identity(x)  # a tensor, not the input variable: the tape follows it
        if rank == 0:
            return tf.reshape(self._cast(self._reduce(tf.reshape(x, [1]), [0]), x.dtype), [])
        out = self._cast(self._reduce(x, axes), x.dtype)  # keepdims shape
        return out if self.keepdims else tf.squeeze(out, axes)

    @staticmethod
    def _cast(out, dtype):
        return out if out.dtype == dtype else tf.cast(out, dtype)

    def _reduce(self, x, axes):
        raise NotImplementedError


def _in_float(reduce):
    """``reduce`` for floats; integers go through float64 (the result is truncated back to their dtype)."""
    def apply(x, axes):
        if not (x.dtype.is_floating or x.dtype.is_complex):
            x = tf.cast(x, tf.float64)
        return reduce(x, axes)
    return apply


def _reduction(op_type: str, reduce) -> type:
    cls = type(op_type, (_Reduction,), {"_reduce": lambda self, x, axes: reduce(x, axes), "__module__": __name__,
                                          "__doc__": f"ONNX {op_type}."})
    register(op_type)(cls)
    return cls


def _sum(x, axes):
    # np.sum(..., dtype=bool) is a logical or; TensorFlow has no sum kernel for bools.
    if x.dtype == tf.bool:
        return tf.reduce_any(x, axis=axes, keepdims=True)
    return tf.reduce_sum(x, axis=axes, keepdims=True)


def _prod(x, axes):
    if x.dtype == tf.bool:
        return tf.reduce_all(x, axis=axes, keepdims=True)
    return tf.reduce_prod(x, axis=axes, keepdims=True)  # TensorFlow's gradient is exact with zeros


def _abs(x):
    return x if x.dtype in _UNSIGNED or x.dtype == tf.bool else tf.abs(x)  # no abs kernel for unsigned


def _l2(x, axes):
    squares = tf.reduce_sum(x * x, axis=axes, keepdims=True)
    # The reference's gradient of a zero norm is 0 (sqrt's would be inf * 0 = NaN): the square root of a
    # stand-in 1 where the sum is 0, so neither branch of the where has a non-finite gradient.
    zero = tf.equal(squares, 0)
    safe = tf.where(zero, tf.ones_like(squares), squares)
    return tf.where(zero, tf.zeros_like(squares), tf.sqrt(safe))


ReduceSum = _reduction("ReduceSum", _sum)
ReduceMean = _reduction("ReduceMean", _in_float(lambda x, a: tf.reduce_mean(x, axis=a, keepdims=True)))
ReduceProd = _reduction("ReduceProd", _prod)
ReduceL1 = _reduction("ReduceL1", lambda x, a: _sum(_abs(x), a))
ReduceL2 = _reduction("ReduceL2", _in_float(_l2))
ReduceSumSquare = _reduction("ReduceSumSquare", lambda x, a: _sum(x * x, a))
ReduceLogSum = _reduction("ReduceLogSum", _in_float(lambda x, a: tf.math.log(_sum(x, a))))
ReduceLogSumExp = _reduction("ReduceLogSumExp",
                             _in_float(lambda x, a: tf.reduce_logsumexp(x, axis=a, keepdims=True)))


def _extremum(op_type: str, largest: bool) -> type:
    def apply(x, axes):
        shape = static_shape(x)
        if any(shape[a] == 0 for a in axes):  # an empty set: the identity of the reduction
            return tf.fill(kept_shape(shape, axes), tf.constant(_empty_extremum(x.dtype, largest), x.dtype))
        if x.dtype == tf.bool:
            return (tf.reduce_any if largest else tf.reduce_all)(x, axis=axes, keepdims=True)
        # TensorFlow's gradient shares the cotangent equally between tied extrema, as the reference does.
        return (tf.reduce_max if largest else tf.reduce_min)(x, axis=axes, keepdims=True)
    return _reduction(op_type, apply)


def _empty_extremum(dtype: tf.DType, largest: bool):
    return empty_extremum(largest, dtype.is_floating, dtype == tf.bool, lambda: dtype)


ReduceMax = _extremum("ReduceMax", largest=True)
ReduceMin = _extremum("ReduceMin", largest=False)


class _ArgExtremum(TFOp):
    """The first (or with ``select_last_index`` the last) position of the extremum along ``axis``, as int64:
    the extremum, compared, and the least (greatest) matching position, which is deterministic on every device
    (``tf.math.argmax`` does not promise which of tied positions it returns). A NaN counts as the extremum, as
    in NumPy."""

    largest = True

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes(type(self).__name__, attributes))

    def __call__(self, x):
        name = type(self).__name__
        shape = static_shape(x)
        axis = arg_axis(name, self.axis, shape)
        if x.dtype == tf.bool:
            x = tf.cast(x, tf.int8)
        x = tf.stop_gradient(x)
        peak = (tf.reduce_max if self.largest else tf.reduce_min)(x, axis=axis, keepdims=True)
        hit = tf.equal(x, peak)
        if x.dtype.is_floating:
            nan = tf.math.is_nan(x)
            hit = tf.where(tf.reduce_any(nan, axis=axis, keepdims=True), nan, hit)
        n = shape[axis]
        positions = tf.reshape(tf.range(n, dtype=tf.int64), [n if i == axis else 1 for i in range(len(shape))])
        if self.select_last_index:
            index = tf.reduce_max(tf.where(hit, positions, tf.constant(-1, tf.int64)), axis=axis, keepdims=True)
        else:
            index = tf.reduce_min(tf.where(hit, positions, tf.constant(n, tf.int64)), axis=axis, keepdims=True)
        return index if self.keepdims else tf.squeeze(index, [axis])


@register("ArgMax")
class ArgMax(_ArgExtremum):
    """Index (int64) of the maximum along ``axis``; the first one unless ``select_last_index``."""

    largest = True


@register("ArgMin")
class ArgMin(_ArgExtremum):
    """Index (int64) of the minimum along ``axis``; the first one unless ``select_last_index``."""

    largest = False


class _Scan(TFOp):
    """A cumulative scan along the axis given as the second input, in the input's dtype (integers wrap);
    ``exclusive`` shifts by one element starting from the identity, ``reverse`` scans from the end."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes(type(self).__name__, attributes))

    def __call__(self, x, axis=None):
        name = type(self).__name__
        axis = scan_axis(name, tuple(x.shape), axis, lambda value: ints(value, f"{name}'s axis (input 1)"))
        return self._scan(x, axis)


@register("CumSum")
class CumSum(_Scan):
    """Cumulative sum along the axis given as the second input; ``exclusive`` / ``reverse`` as in ONNX. The
    exclusive scan accumulates the elements before each position (not ``cumsum - x``, which rounds differently
    and turns inf into NaN); the gradient is the scan of the cotangent the other way, as the reference's."""

    def _scan(self, x, axis):
        return tf.math.cumsum(x, axis=axis, exclusive=self.exclusive, reverse=self.reverse)


@register("CumProd")
class CumProd(_Scan):
    """Cumulative product along the axis given as the second input; ``exclusive`` / ``reverse`` as in ONNX.
    Differentiable for floats with a gradient exact with zeros (TensorFlow's divides by the input), where the
    reference has none."""

    def _scan(self, x, axis):
        if not x.dtype.is_floating or x.shape[axis] == 0:
            return tf.math.cumprod(x, axis=axis, exclusive=self.exclusive, reverse=self.reverse)
        rank = x.shape.rank
        order = [axis] + [i for i in range(rank) if i != axis]  # the scanned axis first
        y = tf.transpose(x, order) if axis else tf.identity(x)  # a tensor even for a variable input
        if self.reverse:
            y = tf.reverse(y, [0])
        if self.exclusive:  # the product of the elements before each: the inclusive scan of all but the last
            y = tf.concat([tf.ones_like(y[:1]), y[:-1]], axis=0)
        out = _cumprod(y)
        if self.reverse:
            out = tf.reverse(out, [0])
        if axis:
            out = tf.transpose(out, [order.index(i) for i in range(rank)])
        return out


@tf.custom_gradient
def _cumprod(x):
    """Inclusive cumulative product along axis 0. Its gradient at x[j] is ``P[j] * S[j]``: ``P`` the exclusive
    product before j, ``S[j] = sum_{i >= j} g[i] * x[j+1] ... x[i]`` by the backward recurrence
    ``S[j] = g[j] + x[j+1] * S[j+1]`` (no division by x, so exact where x has zeros)."""
    out = tf.math.cumprod(x, axis=0)

    def grad(g):
        following = tf.concat([x[1:], tf.zeros_like(x[:1])], axis=0)  # x[j+1], 0 past the end
        suffix = tf.scan(lambda s, step: step[0] + step[1] * s, (g, following), initializer=tf.zeros_like(x[0]),
                         reverse=True)
        return tf.math.cumprod(x, axis=0, exclusive=True) * suffix

    return out, grad
