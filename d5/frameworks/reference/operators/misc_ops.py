"""Reference miscellaneous operators (ONNX semantics, newest opset; older attribute forms accepted).

Trilu, CumSum, CumProd, TopK, OneHot, Hardmax, LpNormalization, Celu, ThresholdedRelu, HardSwish, Mish,
EyeLike, ReverseSequence, Compress, GatherND, ScatterElements (and its deprecated alias Scatter), ScatterND.

Trilu, CumSum, LpNormalization, Celu, ThresholdedRelu, HardSwish, Mish and GatherND have gradients; the
others set ``differentiable = False`` (their outputs are indices, selections or constants, or the gradient
is not simple enough to be worth a reference implementation) and their ``backward`` raises.

>>> import numpy as np
>>> from d5.frameworks.reference.operators import create_operator
>>> create_operator("CumSum", {"exclusive": 1}).forward([np.array([1., 2., 3.]), np.array(0)])
array([0., 1., 3.])
>>> create_operator("Trilu", {"upper": 0}).forward([np.ones((2, 2))])
array([[1., 0.],
       [1., 1.]])
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from d5.errors import ShapeError
from d5.frameworks.reference.operators.registry import NonDifferentiableOp, ReferenceOp, register


def _optional(inputs: Sequence[Any], index: int) -> Any:
    return inputs[index] if len(inputs) > index else None


def _axis(op_name: str, axis: int, ndim: int) -> int:
    if not -ndim <= axis < max(ndim, 1):
        raise ShapeError(f"{op_name}: axis {axis} is out of range for a {ndim}-D tensor; use [{-ndim}, {ndim})")
    return axis % max(ndim, 1)


# ------------------------------------------------------------------------------------- differentiable ops

@register("Trilu")
class Trilu(ReferenceOp):
    """Keep the upper (``upper=1``) or lower triangle of the last two axes, offset by the optional input ``k``.

    >>> Trilu(upper=1).forward([np.ones((2, 3)), np.array(1)])
    array([[0., 1., 1.],
           [0., 0., 1.]])
    """

    def __init__(self, upper: int = 1) -> None:
        super().__init__()
        self.upper = bool(upper)

    def _mask(self, inputs) -> np.ndarray:
        x = inputs[0]
        k = _optional(inputs, 1)
        k = 0 if k is None else int(np.asarray(k).reshape(-1)[0])
        rows, cols = x.shape[-2:]
        ones = np.ones((rows, cols), dtype=bool)
        return np.triu(ones, k) if self.upper else np.tril(ones, k)

    def forward(self, inputs):
        x = inputs[0]
        if x.ndim < 2:
            raise ShapeError(f"Trilu: the input must have at least 2 dimensions, got shape {x.shape}")
        return np.where(self._mask(inputs), x, np.zeros((), x.dtype)).astype(x.dtype)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        grad = np.where(self._mask(fwd_inputs), grads[0], 0).astype(grads[0].dtype)
        return (grad,) + (None,) * (len(fwd_inputs) - 1)


def _cumulate(function, x: np.ndarray, axis: int, exclusive: bool, reverse: bool, identity) -> np.ndarray:
    if reverse:
        x = np.flip(x, axis)
    out = function(x, axis=axis).astype(x.dtype)
    if exclusive:
        # Shift by one along the axis: out[i] = op(x[:i]), starting with the identity element.
        pad = np.full_like(np.take(x, [0], axis=axis), identity)
        out = np.concatenate([pad, np.take(out, np.arange(x.shape[axis] - 1), axis=axis)], axis=axis)
    return np.flip(out, axis) if reverse else out


def _scan_axis(op_name: str, inputs) -> int:
    if len(inputs) < 2 or inputs[1] is None:
        raise ShapeError(f"{op_name}: the axis input (a scalar) is required")
    return _axis(op_name, int(np.asarray(inputs[1]).reshape(-1)[0]), inputs[0].ndim)


@register("CumSum")
class CumSum(ReferenceOp):
    """Cumulative sum along the axis given as the second input; ``exclusive`` / ``reverse`` as in ONNX."""

    def __init__(self, exclusive: int = 0, reverse: int = 0) -> None:
        super().__init__()
        self.exclusive, self.reverse = bool(exclusive), bool(reverse)

    def forward(self, inputs):
        return _cumulate(np.cumsum, inputs[0], _scan_axis("CumSum", inputs), self.exclusive, self.reverse, 0)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        # d out[j] / d x[i] = 1 exactly where the forward sum at j includes i: the same scan, run the other way.
        axis = _scan_axis("CumSum", fwd_inputs)
        grad = _cumulate(np.cumsum, grads[0], axis, self.exclusive, not self.reverse, 0)
        return grad, None


@register("CumProd")
class CumProd(NonDifferentiableOp):
    """Cumulative product along the axis given as the second input; ``exclusive`` / ``reverse`` as in ONNX."""

    def __init__(self, exclusive: int = 0, reverse: int = 0) -> None:
        super().__init__()
        self.exclusive, self.reverse = bool(exclusive), bool(reverse)

    def forward(self, inputs):
        return _cumulate(np.cumprod, inputs[0], _scan_axis("CumProd", inputs), self.exclusive, self.reverse, 1)


@register("LpNormalization")
class LpNormalization(ReferenceOp):
    """``x / ||x||_p`` along ``axis`` (p is 1 or 2)."""

    def __init__(self, axis: int = -1, p: int = 2) -> None:
        super().__init__()
        if int(p) not in (1, 2):
            raise ShapeError(f"LpNormalization: p must be 1 or 2, got {p}")
        self.axis, self.p = int(axis), int(p)

    def _norm(self, x: np.ndarray) -> np.ndarray:
        axis = _axis("LpNormalization", self.axis, x.ndim)
        if self.p == 1:
            return np.sum(np.abs(x), axis=axis, keepdims=True)
        return np.sqrt(np.sum(x * x, axis=axis, keepdims=True))

    def forward(self, inputs):
        x = inputs[0]
        norm = self._norm(x)
        # An all-zero slice has norm 0: ONNX's expected outputs keep it 0 rather than 0/0 = NaN.
        return (x / np.where(norm == 0, 1, norm)).astype(x.dtype)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        x, g = fwd_inputs[0], grads[0]
        axis = _axis("LpNormalization", self.axis, x.ndim)
        norm = self._norm(x)
        norm = np.where(norm == 0, 1, norm)
        dot = np.sum(g * x, axis=axis, keepdims=True)
        # d||x||_p / dx is sign(x) for p=1 and x/||x|| for p=2.
        dnorm = np.sign(x) if self.p == 1 else x / norm
        return (g / norm - dot * dnorm / norm ** 2).astype(g.dtype)


@register("Celu")
class Celu(ReferenceOp):
    """``max(0, x) + min(0, alpha * (exp(x / alpha) - 1))``."""

    def __init__(self, alpha: float = 1.0) -> None:
        super().__init__()
        self.alpha = float(alpha)

    def forward(self, inputs):
        x = inputs[0]
        return (np.maximum(0, x) + np.minimum(0, self.alpha * np.expm1(x / self.alpha))).astype(x.dtype)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        x = fwd_inputs[0]
        return (grads[0] * np.where(x > 0, 1.0, np.exp(np.minimum(x, 0) / self.alpha))).astype(grads[0].dtype)


@register("ThresholdedRelu")
class ThresholdedRelu(ReferenceOp):
    """``x`` where ``x > alpha``, else 0."""

    def __init__(self, alpha: float = 1.0) -> None:
        super().__init__()
        self.alpha = float(alpha)

    def forward(self, inputs):
        x = inputs[0]
        return np.where(x > self.alpha, x, 0).astype(x.dtype)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return np.where(fwd_inputs[0] > self.alpha, grads[0], 0).astype(grads[0].dtype)


@register("HardSwish")
class HardSwish(ReferenceOp):
    """``x * clip(x / 6 + 0.5, 0, 1)``."""

    def forward(self, inputs):
        x = inputs[0]
        return (x * np.clip(x / 6 + 0.5, 0, 1)).astype(x.dtype)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        x = fwd_inputs[0]
        slope = np.where(x < -3, 0.0, np.where(x > 3, 1.0, x / 3 + 0.5))
        return (grads[0] * slope).astype(grads[0].dtype)


@register("Mish")
class Mish(ReferenceOp):
    """``x * tanh(softplus(x))``."""

    def forward(self, inputs):
        x = inputs[0]
        return (x * np.tanh(np.logaddexp(0, x))).astype(x.dtype)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        x = fwd_inputs[0]
        t = np.tanh(np.logaddexp(0, x))
        sigmoid = 0.5 * (1 + np.tanh(0.5 * x))
        return (grads[0] * (t + x * (1 - t * t) * sigmoid)).astype(grads[0].dtype)


def _gather_nd_index(data_shape: tuple, indices: np.ndarray, batch_dims: int) -> tuple:
    """Numpy advanced-index tuple equivalent to ONNX GatherND (``out = data[index]``, already batch-flattened)."""
    batch_shape = data_shape[:batch_dims]
    depth = indices.shape[-1]
    if depth > len(data_shape) - batch_dims:
        raise ShapeError(f"GatherND: indices of depth {depth} index more than the {len(data_shape) - batch_dims} "
                         f"non-batch axes of data of shape {data_shape}")
    idx = indices.astype(np.int64)
    dims = np.asarray(data_shape[batch_dims:batch_dims + depth], dtype=np.int64)
    idx = np.where(idx < 0, idx + dims, idx)
    # Batch coordinates broadcast over the index grid: shape batch + (1,)*(inner index dims).
    inner = idx.ndim - 1 - batch_dims
    batch_index = tuple(np.arange(n).reshape((1,) * i + (n,) + (1,) * (batch_dims - i - 1 + inner))
                        for i, n in enumerate(batch_shape))
    return batch_index + tuple(idx[..., j] for j in range(depth))


@register("GatherND")
class GatherND(ReferenceOp):
    """Gather slices of ``data`` at the index tuples in the last axis of ``indices`` (``batch_dims`` leading axes
    shared).

    >>> GatherND().forward([np.array([[0, 1], [2, 3]]), np.array([[1, 0]])])
    array([2])
    """

    def __init__(self, batch_dims: int = 0) -> None:
        super().__init__()
        self.batch_dims = int(batch_dims)

    def forward(self, inputs):
        data, indices = inputs[0], np.asarray(inputs[1])
        return np.asarray(data[_gather_nd_index(data.shape, indices, self.batch_dims)], order="C")

    def backward(self, grads, fwd_inputs, fwd_outputs):
        data, indices = fwd_inputs[0], np.asarray(fwd_inputs[1])
        grad = np.zeros(data.shape, dtype=grads[0].dtype)
        np.add.at(grad, _gather_nd_index(data.shape, indices, self.batch_dims), grads[0])
        return grad, None


# ---------------------------------------------------------------------------------- non-differentiable ops

@register("TopK")
class TopK(NonDifferentiableOp):
    """The ``k`` largest (or smallest) values along ``axis`` and their int64 indices; ties keep the lower index.

    ``k`` is the second input (opset 10+) or the attribute (opset 1).

    >>> values, indices = TopK().forward([np.array([1., 3., 2.]), np.array([2])])
    >>> values.tolist(), indices.tolist()
    ([3.0, 2.0], [1, 2])
    """

    def __init__(self, axis: int = -1, largest: int = 1, sorted: int = 1, k: int | None = None) -> None:
        super().__init__()
        self.axis, self.largest, self.k = int(axis), bool(largest), k

    def forward(self, inputs):
        x = inputs[0]
        k = _optional(inputs, 1)
        k = self.k if k is None else int(np.asarray(k).reshape(-1)[0])
        if k is None:
            raise ShapeError("TopK: k is required (the second input from opset 10, the attribute before)")
        axis = _axis("TopK", self.axis, x.ndim)
        if not 0 <= k <= x.shape[axis]:
            raise ShapeError(f"TopK: k={k} is out of range for axis {axis} of length {x.shape[axis]}")
        # A stable ascending sort keeps equal values in index order, as ONNX requires; for "largest" sort the
        # negated values (unsigned integers widened first so that negation cannot wrap around).
        if self.largest:
            key = -(x.astype(np.int64) if np.issubdtype(x.dtype, np.unsignedinteger) else x)
        else:
            key = x
        order = np.argsort(key, axis=axis, kind="stable")
        indices = np.take(order, np.arange(k), axis=axis).astype(np.int64)
        return np.take_along_axis(x, indices, axis=axis), indices


@register("OneHot")
class OneHot(NonDifferentiableOp):
    """One-hot encode ``indices`` with ``depth`` classes along a new ``axis``; ``values`` = [off, on].

    >>> OneHot().forward([np.array([0, 2]), np.array(3), np.array([0., 1.])])
    array([[1., 0., 0.],
           [0., 0., 1.]])
    """

    def __init__(self, axis: int = -1) -> None:
        super().__init__()
        self.axis = int(axis)

    def forward(self, inputs):
        indices, depth, values = np.asarray(inputs[0]), inputs[1], np.asarray(inputs[2])
        depth = int(np.asarray(depth).reshape(-1)[0])
        indices = indices.astype(np.int64)
        indices = np.where(indices < 0, indices + depth, indices)
        axis = _axis("OneHot", self.axis, indices.ndim + 1)
        classes = np.arange(depth).reshape((depth,) + (1,) * (indices.ndim - axis))
        hot = np.expand_dims(indices, axis) == classes
        return np.where(hot, values[1], values[0]).astype(values.dtype)


@register("Hardmax")
class Hardmax(NonDifferentiableOp):
    """1 at the first maximum along ``axis`` (opset 13 semantics), 0 elsewhere."""

    def __init__(self, axis: int = -1) -> None:
        super().__init__()
        self.axis = int(axis)

    def forward(self, inputs):
        x = inputs[0]
        axis = _axis("Hardmax", self.axis, x.ndim)
        winner = np.expand_dims(np.argmax(x, axis=axis), axis)
        out = np.zeros_like(x)
        np.put_along_axis(out, winner, 1, axis=axis)
        return out


@register("EyeLike")
class EyeLike(NonDifferentiableOp):
    """A 2-D identity-like matrix shaped like the input, ones on diagonal ``k``, of ``dtype`` (default: the
    input's)."""

    def __init__(self, dtype: int | None = None, k: int = 0) -> None:
        super().__init__()
        self.dtype, self.k = dtype, int(k)

    def forward(self, inputs):
        x = inputs[0]
        if x.ndim != 2:
            raise ShapeError(f"EyeLike: the input must be 2-D, got shape {x.shape}")
        from d5.frameworks.reference.operators.shape_ops import onnx_dtype
        dtype = x.dtype if self.dtype is None else onnx_dtype(self.dtype)
        return np.eye(x.shape[0], x.shape[1], k=self.k, dtype=dtype)


@register("ReverseSequence")
class ReverseSequence(NonDifferentiableOp):
    """Reverse the first ``sequence_lens[b]`` steps along ``time_axis`` of every batch entry ``b``."""

    def __init__(self, batch_axis: int = 1, time_axis: int = 0) -> None:
        super().__init__()
        self.batch_axis, self.time_axis = int(batch_axis), int(time_axis)

    def forward(self, inputs):
        x, lengths = inputs[0], np.asarray(inputs[1]).reshape(-1)
        out = x.copy()
        for b, length in enumerate(lengths):
            index = [slice(None)] * x.ndim
            index[self.batch_axis] = b
            index[self.time_axis] = slice(0, int(length))
            source = [slice(None)] * x.ndim
            source[self.batch_axis] = b
            source[self.time_axis] = slice(int(length) - 1, None, -1) if length > 0 else slice(0, 0)
            out[tuple(index)] = x[tuple(source)]
        return out


@register("Compress")
class Compress(NonDifferentiableOp):
    """The slices of the input along ``axis`` (flattened when absent) where ``condition`` is true."""

    def __init__(self, axis: int | None = None) -> None:
        super().__init__()
        self.axis = None if axis is None else int(axis)

    def forward(self, inputs):
        x, condition = inputs[0], np.asarray(inputs[1]).astype(bool).reshape(-1)
        axis = None if self.axis is None else _axis("Compress", self.axis, x.ndim)
        return np.compress(condition, x, axis=axis)


_REDUCTIONS = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _reduction(op_name: str, reduction: str):
    if reduction == "none":
        return None
    try:
        return _REDUCTIONS[reduction]
    except KeyError:
        raise ShapeError(f"{op_name}: unknown reduction {reduction!r}; use one of none, {', '.join(_REDUCTIONS)}") from None


@register("ScatterElements", "Scatter")
class ScatterElements(NonDifferentiableOp):
    """A copy of ``data`` with ``updates`` written (or reduced) at ``indices`` along ``axis``."""

    def __init__(self, axis: int = 0, reduction: str = "none") -> None:
        super().__init__()
        self.axis, self.reduction = int(axis), reduction.decode() if isinstance(reduction, bytes) else reduction

    def forward(self, inputs):
        data, indices, updates = inputs[0], np.asarray(inputs[1]).astype(np.int64), inputs[2]
        axis = _axis("ScatterElements", self.axis, data.ndim)
        indices = np.where(indices < 0, indices + data.shape[axis], indices)
        grid = list(np.indices(indices.shape, sparse=True))
        grid[axis] = indices
        out = data.copy()
        function = _reduction("ScatterElements", self.reduction)
        if function is None:
            out[tuple(grid)] = updates
        else:
            function.at(out, tuple(grid), updates)
        return out


@register("ScatterND")
class ScatterND(NonDifferentiableOp):
    """A copy of ``data`` with ``updates`` written (or reduced) at the index tuples of ``indices``."""

    def __init__(self, reduction: str = "none") -> None:
        super().__init__()
        self.reduction = reduction.decode() if isinstance(reduction, bytes) else reduction

    def forward(self, inputs):
        data, indices, updates = inputs[0], np.asarray(inputs[1]).astype(np.int64), inputs[2]
        out = data.copy()
        index = _gather_nd_index(data.shape, indices, 0)
        function = _reduction("ScatterND", self.reduction)
        if function is None:
            out[index] = updates
        else:
            function.at(out, index, updates)
        return out
