"""Reductions as native torch operations: ReduceSum/Mean/Max/Min/Prod/L1/L2/SumSquare/LogSum/LogSumExp and
ArgMax/ArgMin, plus the scans CumSum and CumProd. Axes come from the ``axes`` attribute (before opsets 13/18) or
the second input (after); with none, all axes are reduced unless ``noop_with_empty_axes`` (then the input passes
unchanged). Reducing an empty set gives the reduction's identity (-inf/+inf for max/min of floats, the integer
extremes for integers, False/True for bools)."""
from __future__ import annotations

import torch

from d5.frameworks.pytorch.operators import TorchOp, register
from d5.frameworks.pytorch.operators._helpers import ints
from d5.frameworks.pytorch.operators.elementwise import SIGNED_OF, as_signed, from_order_key, order_key
from d5.ops.onnx_attributes import adopt, operator_attributes
from d5.ops.onnx_semantics import normalize_axis
from d5.ops.window_checks import empty_extremum, kept_shape, reduced_shape, scan_axis


class _Reduction(TorchOp):
    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes(type(self).__name__, attributes))

    def forward(self, x, axes=None):
        axes = self.axes if axes is None else ints(axes)
        if not axes:
            if self.noop_with_empty_axes:
                return x
            axes = list(range(x.dim()))
        axes = sorted({normalize_axis(type(self).__name__, a, x.dim()) for a in axes})
        if x.dim() == 0:
            return self._reduce(x.reshape(1), [0]).reshape(())
        out = self._reduce(x, axes)  # keepdims shape
        if out.dtype != x.dtype:
            out = out.to(x.dtype)
        return out if self.keepdims else out.reshape(reduced_shape(x.shape, axes))

    def _reduce(self, x, axes):
        raise NotImplementedError


def _reduction(op_type: str, reduce) -> type:
    cls = type(op_type, (_Reduction,), {"_reduce": lambda self, x, axes: reduce(x, axes), "__module__": __name__,
                                          "__doc__": f"ONNX {op_type}."})
    register(op_type)(cls)
    return cls


def _prod(x, axes):
    for a in axes:
        x = torch.prod(x, dim=a, keepdim=True)
    return x


ReduceSum = _reduction("ReduceSum", lambda x, a: torch.sum(x, dim=a, keepdim=True))
ReduceMean = _reduction("ReduceMean", lambda x, a: torch.mean(x, dim=a, keepdim=True) if x.is_floating_point()
                        else torch.sum(x, dim=a, keepdim=True) // max(1, _count(x, a)))


def _extremum(op_type: str, reduce, largest: bool) -> type:
    def apply(x, axes):
        if x.numel() == 0 and any(x.shape[a] == 0 for a in axes):  # an empty set: the identity of the reduction
            return torch.full(kept_shape(x.shape, axes), _empty_extremum(x.dtype, largest), dtype=x.dtype,
                              device=x.device)
        if x.dtype in SIGNED_OF:  # torch has no amax/amin kernel for uint16/32/64: reduce the order keys
            return from_order_key(reduce(order_key(x), dim=axes, keepdim=True), x.dtype)
        return reduce(x, dim=axes, keepdim=True)
    return _reduction(op_type, apply)


def _empty_extremum(dtype: torch.dtype, largest: bool):
    return empty_extremum(largest, dtype.is_floating_point, dtype == torch.bool, lambda: torch.iinfo(dtype))


ReduceMax = _extremum("ReduceMax", torch.amax, largest=True)
ReduceMin = _extremum("ReduceMin", torch.amin, largest=False)
ReduceProd = _reduction("ReduceProd", _prod)
ReduceL1 = _reduction("ReduceL1", lambda x, a: torch.sum(torch.abs(x), dim=a, keepdim=True))
ReduceL2 = _reduction("ReduceL2", lambda x, a: torch.sqrt(torch.sum(x * x, dim=a, keepdim=True)))
ReduceSumSquare = _reduction("ReduceSumSquare", lambda x, a: torch.sum(x * x, dim=a, keepdim=True))
ReduceLogSum = _reduction("ReduceLogSum", lambda x, a: torch.log(torch.sum(x, dim=a, keepdim=True)))
ReduceLogSumExp = _reduction("ReduceLogSumExp", lambda x, a: torch.logsumexp(x, dim=a, keepdim=True))


def _count(x, axes) -> int:
    n = 1
    for a in axes:
        n *= x.shape[a]
    return n


class _ArgExtremum(TorchOp):
    largest = True

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes(type(self).__name__, attributes))

    def forward(self, x):
        axis = normalize_axis(type(self).__name__, self.axis, x.dim())
        values = x.detach()
        values = values if self.largest else -values if values.is_floating_point() else values.neg()
        if self.select_last_index:
            flipped = torch.argmax(values.flip(axis), dim=axis, keepdim=True)
            index = x.shape[axis] - 1 - flipped
        else:
            index = torch.argmax(values, dim=axis, keepdim=True)  # torch returns the first maximum
        return index if self.keepdims else index.squeeze(axis)


@register("ArgMax")
class ArgMax(_ArgExtremum):
    largest = True


@register("ArgMin")
class ArgMin(_ArgExtremum):
    largest = False


class _Scan(TorchOp):
    """A cumulative ``scan`` along the axis given as the second input, in the input's dtype (torch would
    widen integers to int64); ``exclusive`` shifts by one element starting from ``identity``, ``reverse`` scans
    from the end. Differentiable (torch's gradient of the scan)."""

    scan = staticmethod(torch.cumsum)
    identity = 0

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes(type(self).__name__, attributes))

    def forward(self, x, axis=None):
        axis = scan_axis(type(self).__name__, x.shape, axis, ints)
        if x.dtype in SIGNED_OF:  # uint16/32/64: the same modular sums and products on the signed view
            return self._scan(as_signed(x), axis).view(x.dtype)
        return self._scan(x, axis)

    def _scan(self, x, axis: int):
        y = x.flip(axis) if self.reverse else x
        if self.exclusive:
            # op(x[:i]) at position i: the scan of all but the last element behind the identity. Not
            # ``cumsum - x``, which rounds differently and turns inf into NaN.
            n = y.shape[axis]
            head = torch.full([1 if i == axis else d for i, d in enumerate(y.shape)], self.identity, dtype=y.dtype,
                              device=y.device)
            out = torch.cat([head, type(self).scan(y.narrow(axis, 0, max(n - 1, 0)), dim=axis, dtype=y.dtype)],
                            dim=axis) if n else y.clone()
        else:
            out = type(self).scan(y, dim=axis, dtype=y.dtype)
        return out.flip(axis) if self.reverse else out


@register("CumSum")
class CumSum(_Scan):
    """Cumulative sum along the axis given as the second input; ``exclusive`` / ``reverse`` as in ONNX."""

    scan = staticmethod(torch.cumsum)
    identity = 0


@register("CumProd")
class CumProd(_Scan):
    """Cumulative product along the axis given as the second input; ``exclusive`` / ``reverse`` as in ONNX.
    Differentiable here (torch's gradient), where the reference has no gradient."""

    scan = staticmethod(torch.cumprod)
    identity = 1
