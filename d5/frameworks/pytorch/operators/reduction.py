"""Reductions as native torch operations: ReduceSum/Mean/Max/Min/Prod/L1/L2/SumSquare/LogSum/LogSumExp and
ArgMax/ArgMin, plus CumSum. Axes come from the ``axes`` attribute (before opsets 13/18) or the second input
(after); with none, all axes are reduced unless ``noop_with_empty_axes`` (then the input passes unchanged)."""
from __future__ import annotations

import torch

from d5.frameworks.pytorch.operators import TorchOp, register
from d5.frameworks.pytorch.operators._helpers import ints, scalar
from d5.ops.onnx_semantics import normalize_axis


class _Reduction(TorchOp):
    def __init__(self, axes=None, keepdims: int = 1, noop_with_empty_axes: int = 0) -> None:
        super().__init__()
        self.axes, self.keepdims, self.noop = ints(axes), bool(keepdims), bool(noop_with_empty_axes)

    def forward(self, x, axes=None):
        axes = self.axes if axes is None else ints(axes)
        if not axes:
            if self.noop:
                return x
            axes = list(range(x.dim()))
        axes = sorted({normalize_axis(type(self).__name__, a, x.dim()) for a in axes})
        if x.dim() == 0:
            return self._reduce(x.reshape(1), [0]).reshape(())
        out = self._reduce(x, axes)  # keepdims shape
        if out.dtype != x.dtype:
            out = out.to(x.dtype)
        return out if self.keepdims else out.reshape([d for i, d in enumerate(x.shape) if i not in axes])

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
ReduceMax = _reduction("ReduceMax", lambda x, a: torch.amax(x, dim=a, keepdim=True))
ReduceMin = _reduction("ReduceMin", lambda x, a: torch.amin(x, dim=a, keepdim=True))
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

    def __init__(self, axis: int = 0, keepdims: int = 1, select_last_index: int = 0) -> None:
        super().__init__()
        self.axis, self.keepdims, self.last = int(axis), bool(keepdims), bool(select_last_index)

    def forward(self, x):
        axis = normalize_axis(type(self).__name__, self.axis, x.dim())
        values = x.detach()
        values = values if self.largest else -values if values.is_floating_point() else values.neg()
        if self.last:
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


@register("CumSum")
class CumSum(TorchOp):
    def __init__(self, exclusive: int = 0, reverse: int = 0) -> None:
        super().__init__()
        self.exclusive, self.reverse = bool(exclusive), bool(reverse)

    def forward(self, x, axis):
        axis = normalize_axis("CumSum", scalar(axis, int), x.dim())
        y = x.flip(axis) if self.reverse else x
        out = torch.cumsum(y, dim=axis)
        if self.exclusive:
            out = out - y
        return out.flip(axis) if self.reverse else out
