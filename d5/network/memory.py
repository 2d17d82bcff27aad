"""Memory planning shared by every framework's executor: from the shapes ONNX shape inference gives every
tensor, how much memory a pass at a given batch size needs, and a clear error before the pass starts when it
cannot fit, naming the largest tensor and the batch size that would fit. Without it, Linux's overcommit lets
the allocations succeed and the kernel's OOM killer ends the process midway (no traceback, no result).

>>> import numpy as np
>>> from d5.network.graph import TensorInfo
>>> info = TensorInfo("h", ("N", 256), np.dtype(np.float32))
>>> tensor_nbytes(info, {"N": 64})
65536
>>> estimate = lambda bindings: {"h": tensor_nbytes(info, bindings)}
>>> check_working_set(estimate, {"N": 64}, "N", "inference", available=1 << 20)
>>> check_working_set(estimate, {"N": 64}, "N", "inference", available=50_000)
Traceback (most recent call last):
  ...
d5.errors.InsufficientMemoryError: inference at batch size 64 needs about 64.0 KiB of intermediate tensors (largest: 'h', 64.0 KiB), but only 48.8 KiB of memory are available; a batch size of at most 48 would fit
"""
from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from d5.errors import InsufficientMemoryError
from d5.network.graph import TensorInfo


def tensor_nbytes(info: TensorInfo | None, bindings: Mapping[str, int]) -> int | None:
    """Bytes of a tensor described by ``info`` once its symbolic dimensions take the values in ``bindings``;
    None when a dimension stays unknown (or the value is not a plain tensor)."""
    if info is None or not info.is_tensor or info.shape is None or info.dtype.kind in "OUS":
        return None
    dims = [bindings.get(d) if isinstance(d, str) else d for d in info.shape]
    if any(not isinstance(d, int) or d < 0 for d in dims):
        return None
    return math.prod(dims) * info.dtype.itemsize


def resolved_shape(info: TensorInfo, bindings: Mapping[str, int]) -> tuple:
    return tuple(bindings.get(d, d) if isinstance(d, str) else d for d in info.shape or ())


def available_memory() -> int:
    """Bytes the process can still allocate without swapping (psutil's ``available``)."""
    import psutil

    return int(psutil.virtual_memory().available)


def check_working_set(estimate: Callable[[Mapping[str, int]], Mapping[str, int]], bindings: Mapping[str, int],
                      batch_symbol: str | None, what: str, available: int | None = None,
                      shapes: Mapping[str, TensorInfo] | None = None) -> None:
    """Raise :class:`d5.errors.InsufficientMemoryError` when the tensors a pass holds at its peak do not fit.

    ``estimate(bindings)`` returns the bytes of the tensors alive together at the pass's peak, by name, for
    the given values of the symbolic dimensions. When ``batch_symbol`` names the batch dimension, the
    error says the largest batch size that would fit (the estimate is affine in the batch size).
    ``shapes`` (tensor infos by name) lets the message give the largest tensor's shape.
    """
    tensors = estimate(bindings)
    total = sum(tensors.values())
    available = available_memory() if available is None else available
    if total <= available:
        return
    largest = max(tensors, key=tensors.get)
    info = (shapes or {}).get(largest)
    shape_text = f" of shape {resolved_shape(info, bindings)}" if info is not None and info.shape is not None else ""
    advice = "; feed smaller inputs"
    batch = bindings.get(batch_symbol) if batch_symbol else None
    if batch:
        fit = largest_fitting_batch(estimate, bindings, batch_symbol, available)
        advice = (f"; a batch size of at most {fit} would fit" if fit >= 1 else
                  "; even a batch of 1 does not fit: use a smaller model or input size")
        what = f"{what} at batch size {batch}"
    raise InsufficientMemoryError(
        f"{what} needs about {_size(total)} of intermediate tensors (largest: {largest!r}{shape_text}, "
        f"{_size(tensors[largest])}), but only {_size(available)} of memory are available{advice}")


def largest_fitting_batch(estimate: Callable[[Mapping[str, int]], Mapping[str, int]], bindings: Mapping[str, int],
                          batch_symbol: str, available: int) -> int:
    """The largest batch size whose estimate fits in ``available`` bytes (0 if none), from two evaluations
    of the affine estimate: bytes = fixed + per_sample * batch."""
    one = sum(estimate({**bindings, batch_symbol: 1}).values())
    two = sum(estimate({**bindings, batch_symbol: 2}).values())
    per_sample = max(two - one, 1)
    fixed = one - per_sample
    return max(0, (available - fixed) // per_sample)


#: Allocations below this many bytes are not checked against the available memory (it cannot matter, and
#: asking the kernel costs microseconds).
ALLOCATION_CHECK_THRESHOLD = 64 * 2**20


def check_allocation(what: str, shape: Sequence[int], dtype: Any) -> None:
    """Refuse, with :class:`d5.errors.InsufficientMemoryError` naming ``what``, a tensor whose size is set
    by data or attributes (ConstantOfShape's shape, Expand, Tile, Range, a resize) when it cannot fit in the
    available memory. NumPy would refuse only allocations beyond RAM plus swap; smaller ones succeed under
    Linux's overcommit and the process is OOM-killed when the pages are written.

    >>> check_allocation("ConstantOfShape output", (1024, 1024), "float32")
    >>> check_allocation("ConstantOfShape output", (2**40, 2**20), "float32")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
      ...
    d5.errors.InsufficientMemoryError: ConstantOfShape output of shape (1099511627776, 1048576) and dtype float32 would take 4194304.0 TiB, more than the ... of memory available; check the sizes this tensor is computed from
    """
    nbytes = math.prod(int(d) for d in shape) * np.dtype(dtype).itemsize
    if nbytes < ALLOCATION_CHECK_THRESHOLD:
        return
    available = available_memory()
    if nbytes > available:
        raise InsufficientMemoryError(f"{what} of shape {tuple(int(d) for d in shape)} and dtype {np.dtype(dtype)} "
                                      f"would take {_size(nbytes)}, more than the {_size(available)} of memory "
                                      "available; check the sizes this tensor is computed from")


def _size(nbytes: int) -> str:
    """Bytes as '2.0 TiB', '3.1 GiB', '12.5 MiB' or '40.1 KiB'."""
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes / 2**10:.1f} KiB"


__all__ = ["available_memory", "check_allocation", "check_working_set", "largest_fitting_batch", "resolved_shape", "tensor_nbytes"]
