"""Values between NumPy and torch, in one place (the executor, the custom-op bridge and native_op share them):
which dtypes torch holds, NumPy arrays as torch tensors (zero-copy on the CPU) and back.

>>> import numpy as np
>>> tensor = as_module_value(np.arange(3, dtype=np.float32), torch_device(None))
>>> as_numpy_value(tensor).tolist(), holds(np.dtype(object))
([0.0, 1.0, 2.0], False)
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch


def torch_device(device: Any) -> torch.device:
    """The torch device for a d5 device (None: the CPU); the executor has checked that it exists."""
    if device is None or not getattr(device, "is_gpu", False):
        return torch.device("cpu")
    return torch.device("cuda", device.index)


def holds(dtype: np.dtype) -> bool:
    """Whether torch holds and computes with tensors of NumPy ``dtype``; values of other types (strings, 4-bit
    integers, float8) stay NumPy, on the reference. (uint16..uint64, which torch stores but has few kernels
    for, are held: the converters compute them in a wider type.)

    >>> holds(np.dtype(np.float32)), holds(np.dtype(np.uint32)), holds(np.dtype(object))
    (True, True, False)
    """
    return dtype.kind in "biufc" or dtype.name == "bfloat16"


def as_module_value(value: Any, device: torch.device) -> Any:
    """A value as torch code takes it: a torch tensor, or, for what torch cannot hold (sequences, strings, int4,
    ...), the value itself, which only reference operators read."""
    if type(value) is np.ndarray and device.type == "cpu" and value.dtype.kind in "fiub" and value.flags.c_contiguous:
        return torch.from_numpy(value)  # the common case, first (uint16..64 included: torch holds them)
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if value is None or isinstance(value, list):
        return value
    array = np.asarray(value)
    if not holds(array.dtype):
        return array
    if array.dtype.name == "bfloat16":  # ml_dtypes' bfloat16: same bits as torch's
        return torch.from_numpy(_contiguous(array).view(np.int16)).view(torch.bfloat16).to(device)
    return torch.from_numpy(_contiguous(array)).to(device)


def as_numpy_value(value: Any) -> Any:
    """A torch value as NumPy: tensors as arrays (zero-copy on the CPU), sequences element by element."""
    if isinstance(value, torch.Tensor):
        if value.is_cpu and value.dtype is not torch.bfloat16:  # the common case, first
            return value.detach().numpy()
        return to_numpy(value)
    if isinstance(value, (list, tuple)):
        return [as_numpy_value(v) for v in value]
    return value


def to_numpy(value: torch.Tensor) -> np.ndarray:
    """A tensor (any device, bfloat16 included) as a NumPy array."""
    value = value.detach()
    if value.device.type != "cpu":
        value = value.cpu()
    if value.dtype == torch.bfloat16:
        import ml_dtypes

        return value.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return value.numpy()


def owned(value: Any) -> Any:
    """A CPU tensor in memory of torch's own (a copy of one viewing a NumPy array): torch aligns its blocks for
    its vector kernels, NumPy only to 16 bytes, and a step with misaligned weights was measurably slower."""
    if isinstance(value, torch.Tensor) and value.device.type == "cpu":
        return value.clone()
    return value


def _contiguous(array: np.ndarray) -> np.ndarray:
    # Not np.ascontiguousarray: with NumPy 1.x it turns a 0-d array into a 1-d one.
    return array if array.flags.c_contiguous else np.array(array, order="C")
