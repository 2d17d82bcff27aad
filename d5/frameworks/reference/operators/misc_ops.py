"""Reference miscellaneous operators (ONNX semantics, newest opset; older attribute forms accepted).

Trilu, CumSum, CumProd, TopK, OneHot, Hardmax, LpNormalization, Celu, ThresholdedRelu, HardSwish, Mish,
EyeLike, ReverseSequence, Compress, GatherND, ScatterElements (and its deprecated alias Scatter), ScatterND.

Trilu, CumSum, OneHot (for its values), LpNormalization, Celu, ThresholdedRelu, HardSwish, Mish, GatherND,
ScatterElements and ScatterND (reductions 'none' and 'add') have gradients; the others set
``differentiable = False`` (their outputs are indices, selections or constants, or the gradient is not simple
enough to be worth a reference implementation) and their ``backward`` raises.

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

from d5.errors import ShapeError, UnsupportedOperatorError
from d5.frameworks.reference.operators.activations import require_float
from d5.frameworks.reference.operators.checks import require_rank, scalar_input
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
        k = 0 if k is None else scalar_input("Trilu", k, "k (input 1)")
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
    if exclusive and x.shape[axis]:
        # Shift by one along the axis: out[i] = op(x[:i]), starting with the identity element.
        pad = np.full_like(np.take(x, [0], axis=axis), identity)
        out = np.concatenate([pad, np.take(out, np.arange(x.shape[axis] - 1), axis=axis)], axis=axis)
    return np.flip(out, axis) if reverse else out


def _scan_axis(op_name: str, inputs) -> int:
    if len(inputs) < 2 or inputs[1] is None:
        raise ShapeError(f"{op_name}: the axis input (a scalar) is required")
    return _axis(op_name, scalar_input(op_name, inputs[1], "axis (input 1)"),
                 require_rank(op_name, inputs[0], "x", at_least=1).ndim)


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
    if indices.dtype.kind not in "iu":
        raise ShapeError(f"GatherND: indices must be int64 (or int32), got {indices.dtype}; Cast them first")
    if not 0 <= batch_dims < min(indices.ndim, len(data_shape)) or indices.shape[:batch_dims] != batch_shape:
        raise ShapeError(f"GatherND: batch_dims={batch_dims} needs data and indices of higher rank sharing their "
                         f"first {batch_dims} dimensions; got data {data_shape} and indices {indices.shape}")
    depth = indices.shape[-1]
    if depth > len(data_shape) - batch_dims:
        raise ShapeError(f"GatherND: indices of depth {depth} index more than the {len(data_shape) - batch_dims} "
                         f"non-batch axes of data of shape {data_shape}")
    dims = np.asarray(data_shape[batch_dims:batch_dims + depth], dtype=np.int64)
    idx = _checked_indices("GatherND", indices, dims, tuple(range(batch_dims, batch_dims + depth)))
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


@register("OneHot")
class OneHot(ReferenceOp):
    """One-hot encode ``indices`` with ``depth`` classes along a new ``axis``; ``values`` = [off, on].

    The output is linear in ``values`` (each element is the off or the on value), so ``values`` gets a
    gradient: the sums of the output gradient where the output is off and where it is on. ``indices`` and
    ``depth`` select, and get none.

    >>> op = OneHot()
    >>> x = [np.array([0, 2]), np.array(3), np.array([0., 1.])]
    >>> op.forward(x)
    array([[1., 0., 0.],
           [0., 0., 1.]])
    >>> op.backward([np.arange(6.).reshape(2, 3)], x, None)
    (None, None, array([10.,  5.]))
    """

    def __init__(self, axis: int = -1) -> None:
        super().__init__()
        self.axis = int(axis)

    def forward(self, inputs):
        hot, values = self._hot(inputs)
        return np.where(hot, values[1], values[0]).astype(values.dtype)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        hot, values = self._hot(fwd_inputs)
        dy = np.asarray(grads[0])
        on = dy.sum(where=hot)
        off = dy.sum(where=~hot)
        return None, None, np.array([off, on]).astype(values.dtype, copy=False).reshape(values.shape)

    def _hot(self, inputs) -> tuple[np.ndarray, np.ndarray]:
        """The boolean mask of the output elements that take the on value, and ``values``."""
        if len(inputs) != 3:
            raise ShapeError(f"OneHot: expected inputs (indices, depth, values), got {len(inputs)} inputs")
        indices, depth, values = (np.asarray(x) for x in inputs)
        depth = _one_hot_depth(depth, values)
        if indices.dtype.kind not in "iuf":
            raise ShapeError(f"OneHot: indices (input 0) must be numbers, got dtype {indices.dtype}")
        indices = indices.astype(np.int64)
        indices = np.where(indices < 0, indices + depth, indices)  # -depth .. -1 count from the end
        axis = _axis("OneHot", self.axis, indices.ndim + 1)
        classes = np.arange(depth).reshape((depth,) + (1,) * (indices.ndim - axis))
        return np.expand_dims(indices, axis) == classes, values  # an index out of range is all off


def _one_hot_depth(depth: np.ndarray, values: np.ndarray) -> int:
    """OneHot's depth as a positive int, after checking that depth is one number and values two (inputs
    given in the wrong order, (indices, values, depth), fail here rather than deep in numpy)."""
    swapped = " (are depth and values swapped? The inputs are (indices, depth, values))" \
        if depth.size == 2 and values.size == 1 else ""
    if depth.size != 1 or depth.ndim > 1 or depth.dtype.kind not in "iuf":
        raise ShapeError(f"OneHot: depth (input 1) must be one number (a scalar or a 1-element tensor), got "
                         f"{depth.dtype} of shape {depth.shape}{swapped}")
    if values.size != 2 or values.ndim != 1:
        raise ShapeError(f"OneHot: values (input 2) must be a 1-D tensor of 2 elements, [off_value, on_value], got "
                         f"shape {values.shape}{swapped}")
    count = depth.reshape(-1)[0]
    if not np.isfinite(count) or int(count) < 1:
        raise ShapeError(f"OneHot: depth must be at least 1 (the number of classes), got {count}")
    return int(count)


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
        k = self.k if k is None else scalar_input("TopK", k, "k (input 1)")
        if k is None:
            raise ShapeError("TopK: k is required (the second input from opset 10, the attribute before)")
        axis = _axis("TopK", self.axis, require_rank("TopK", x, "X", at_least=1).ndim)
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


@register("Hardmax")
class Hardmax(NonDifferentiableOp):
    """1 at the first maximum along ``axis`` (opset 13 semantics), 0 elsewhere."""

    zero_gradient = True  # a one-hot of the argmax / an identity: locally constant

    def __init__(self, axis: int = -1) -> None:
        super().__init__()
        self.axis = int(axis)

    def forward(self, inputs):
        x = require_rank("Hardmax", require_float("Hardmax", inputs[0]), "input", at_least=1)
        axis = _axis("Hardmax", self.axis, x.ndim)
        if x.size == 0:  # nothing to mark (argmax of an empty axis is undefined)
            return np.zeros_like(x)
        winner = np.expand_dims(np.argmax(x, axis=axis), axis)
        out = np.zeros_like(x)
        np.put_along_axis(out, winner, 1, axis=axis)
        return out


@register("EyeLike")
class EyeLike(NonDifferentiableOp):
    """A 2-D identity-like matrix shaped like the input, ones on diagonal ``k``, of ``dtype`` (default: the
    input's)."""

    zero_gradient = True  # a one-hot of the argmax / an identity: locally constant

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
        x, lengths = require_rank("ReverseSequence", inputs[0], "input", at_least=2), np.asarray(inputs[1])
        if {self.batch_axis, self.time_axis} != {0, 1}:
            raise ShapeError(f"ReverseSequence: batch_axis and time_axis must be 0 and 1 (either way round), got "
                             f"{self.batch_axis} and {self.time_axis}")
        batch, steps = x.shape[self.batch_axis], x.shape[self.time_axis]
        if lengths.shape != (batch,) or lengths.dtype.kind not in "iu":
            raise ShapeError(f"ReverseSequence: sequence_lens must be an integer tensor of shape ({batch},) (one length "
                             f"per batch entry), got {lengths.dtype} of shape {lengths.shape}")
        if lengths.size and (lengths.min() < 0 or lengths.max() > steps):
            raise ShapeError(f"ReverseSequence: sequence_lens must lie in [0, {steps}] (the time axis' length), got "
                             f"values in [{lengths.min()}, {lengths.max()}]")
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
        x, condition = inputs[0], np.asarray(inputs[1])
        if condition.ndim != 1:
            raise ShapeError(f"Compress: condition must be a 1-D tensor, got shape {condition.shape}")
        condition = condition.astype(bool)
        axis = None if self.axis is None else _axis("Compress", self.axis, require_rank("Compress", x, "input",
                                                                                           at_least=1).ndim)
        length = x.size if axis is None else x.shape[axis]
        if condition.size > length:  # ONNX lets it be shorter (the rest is dropped), not longer
            raise ShapeError(f"Compress: condition has {condition.size} entries, more than the {length} "
                             f"{'elements of the input' if axis is None else f'slices along axis {axis}'}")
        return np.compress(condition, x, axis=axis)


_REDUCTIONS = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _reduction(op_name: str, reduction: str):
    if reduction == "none":
        return None
    try:
        return _REDUCTIONS[reduction]
    except KeyError:
        raise ShapeError(f"{op_name}: unknown reduction {reduction!r}; use one of none, {', '.join(_REDUCTIONS)}") from None


def _checked_indices(op_name: str, indices: Any, sizes: Sequence[int], axes: Sequence[int]) -> np.ndarray:
    """``indices`` as int64 with negative values wrapped once; the last axis of ``indices`` runs over ``axes``
    (data axes of sizes ``sizes``) when there are several. Raises ShapeError naming the first bad index."""
    indices = np.asarray(indices)
    if indices.dtype.kind not in "iu":
        raise ShapeError(f"{op_name}: indices must be int32 or int64, got {indices.dtype}; Cast them first")
    if indices.dtype.kind == "u" and indices.size and indices.max() > np.iinfo(np.int64).max:
        raise ShapeError(f"{op_name}: index {int(indices.max())} is out of range for any axis; use int64 indices")
    indices = indices.astype(np.int64)
    sizes = np.asarray(sizes, dtype=np.int64)
    bad = (indices < -sizes) | (indices >= sizes)
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        column = where[-1] if len(axes) > 1 else 0
        size = int(sizes[column] if sizes.ndim else sizes)
        raise ShapeError(f"{op_name}: index {int(indices[where])} (at position {list(where)} of indices) is out of "
                         f"range for axis {axes[column]} of data, of size {size}; use indices in [{-size}, {size - 1}]")
    return np.where(indices < 0, indices + sizes, indices)


class _Scatter(ReferenceOp):
    """Shared forward and backward of the write-into-tensor operators (the ONNX form of slice assignment):
    ``out = copy(data); out[index(i)] = updates[i]`` (or reduced into it), with ``_index`` giving the numpy
    index tuple and the shape of ``updates`` that the indices address.

    Gradients (data and updates; indices get None): reduction ``none`` passes ``grad`` to ``data`` with the
    written positions zeroed and gathers ``grad`` at them for ``updates``; where indices repeat (ONNX leaves
    the result undefined) only the update that was written last gets it, as in the forward pass. Reduction
    ``add`` passes ``grad`` to ``data`` and gathers it for ``updates``. ``mul``, ``max`` and ``min`` have no
    gradient in d5.
    """

    def __init__(self, reduction: Any = "none") -> None:
        super().__init__()
        self.reduction = reduction.decode() if isinstance(reduction, bytes) else str(reduction)
        _reduction(type(self).__name__, self.reduction)

    def _index(self, data: np.ndarray, indices: Any) -> tuple[tuple, tuple]:
        raise NotImplementedError

    def _prepare(self, inputs) -> tuple[np.ndarray, tuple, Any]:
        name = type(self).__name__
        if len(inputs) != 3 or any(x is None for x in inputs):
            given = ", ".join("absent" if x is None else f"shape {np.shape(x)}" for x in inputs)
            raise ShapeError(f"{name}: expected the three inputs (data, indices, updates), got ({given})")
        data = require_rank(name, inputs[0], "data", at_least=1)
        updates = np.asarray(inputs[2])
        index, updates_shape = self._index(data, inputs[1])
        if updates.shape != updates_shape:
            raise ShapeError(f"{name}: updates must have shape {updates_shape} (set by data {data.shape} and "
                             f"indices {np.shape(inputs[1])}), got {updates.shape}")
        return data, index, updates

    def forward(self, inputs):
        data, index, updates = self._prepare(inputs)
        out = data.copy()
        function = _reduction(type(self).__name__, self.reduction)
        if function is None:
            out[index] = updates
        else:
            function.at(out, index, updates)
        return out

    def backward(self, grads, fwd_inputs, fwd_outputs):
        if self.reduction not in ("none", "add"):
            raise UnsupportedOperatorError(f"{type(self).__name__} with reduction={self.reduction!r} has no gradient "
                                           "in d5 (only 'none' and 'add' do); stop backpropagation before it")
        data, index, updates = self._prepare(fwd_inputs)
        g = np.asarray(grads[0])
        wanted = self.input_grad_required or (True, False, True)
        grad_data = grad_updates = None
        if wanted[0]:
            grad_data = g.copy()
            if self.reduction == "none":
                grad_data[index] = 0
        if wanted[2]:
            grad_updates = np.array(g[index], dtype=g.dtype, copy=True).reshape(updates.shape)
            if self.reduction == "none":
                grad_updates *= self._written_last(data, index, updates.shape)
        return grad_data, None, grad_updates

    @staticmethod
    def _written_last(data: np.ndarray, index: tuple, updates_shape: tuple) -> np.ndarray:
        """Per update element (broadcastable to ``updates_shape``), whether its value is the one the forward
        pass left in the output: write each update's number with the same indexing and read back who won."""
        count = int(np.prod(updates_shape))
        owner = np.full(data.shape, -1, dtype=np.int64)
        numbers = np.arange(count, dtype=np.int64).reshape(updates_shape)
        owner[index] = numbers
        return owner[index] == numbers


@register("ScatterElements", "Scatter")
class ScatterElements(_Scatter):
    """A copy of ``data`` with ``updates`` written (or reduced) at ``indices`` along ``axis``:
    ``out[..., indices[i, j], ...] = updates[i, j]`` with the index in place of the coordinate on ``axis``.

    >>> ScatterElements(axis=1).forward([np.zeros((1, 4)), np.array([[3, -4]]), np.array([[1., 2.]])])
    array([[2., 0., 0., 1.]])
    """

    def __init__(self, axis: int = 0, reduction: Any = "none") -> None:
        super().__init__(reduction)
        self.axis = int(axis)

    def _index(self, data, indices):
        indices = np.asarray(indices)
        axis = _axis("ScatterElements", self.axis, data.ndim)
        if indices.ndim != data.ndim or any(i > d for a, (i, d) in enumerate(zip(indices.shape, data.shape))
                                            if a != axis):
            raise ShapeError(f"ScatterElements: indices must have the rank of data ({data.ndim}) and, except on "
                             f"axis {axis}, no larger dimensions; got indices {indices.shape} for data {data.shape}")
        grid = list(np.indices(indices.shape, sparse=True))
        grid[axis] = _checked_indices("ScatterElements", indices, data.shape[axis], (axis,))
        return tuple(grid), indices.shape


@register("ScatterND")
class ScatterND(_Scatter):
    """A copy of ``data`` with ``updates`` written (or reduced) at the index tuples in the last axis of
    ``indices``: ``out[tuple(indices[i])] = updates[i]`` (a tuple shorter than data's rank addresses a slice).

    >>> ScatterND().forward([np.zeros((2, 3)), np.array([[1], [-2]]), np.array([[1., 2., 3.], [4., 5., 6.]])])
    array([[4., 5., 6.],
           [1., 2., 3.]])
    """

    def _index(self, data, indices):
        indices = np.asarray(indices)
        depth = indices.shape[-1] if indices.ndim else 0
        if indices.ndim < 1 or not 1 <= depth <= data.ndim:
            raise ShapeError(f"ScatterND: indices must have at least one axis, whose last length (here {depth}) is "
                             f"from 1 to data's rank {data.ndim}; got indices {indices.shape} for data {data.shape}")
        indices = _checked_indices("ScatterND", indices, data.shape[:depth], tuple(range(depth)))
        index = tuple(indices[..., j] for j in range(depth))
        return index, indices.shape[:-1] + data.shape[depth:]
