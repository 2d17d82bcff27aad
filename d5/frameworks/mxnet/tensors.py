"""Values between NumPy and MXNet, in one place (the executor, the custom-op bridge and native_op share them):
which dtypes MXNet holds, NumPy arrays as NDArrays and back, and the context of a d5 device.

``NDArray.asnumpy()`` always copies (``np.empty`` then ``MXNDArraySyncCopyToCPU``), so a fetch is one copy out;
a fed array is copied in (``mx.nd.from_numpy(zero_copy=True)`` would mark the caller's array read-only).

>>> import numpy as np
>>> value = as_mx_value(np.arange(3, dtype=np.float32))
>>> as_numpy_value(value).tolist(), holds(np.dtype(object)), holds(np.dtype(np.uint16))
([0.0, 1.0, 2.0], False, False)
"""
from __future__ import annotations

import ctypes
from typing import Any

import mxnet as mx
import numpy as np
from mxnet.ndarray.ndarray import _new_alloc_handle

from d5.frameworks.mxnet.operators._helpers import HELD_DTYPES


def mx_context(device: Any) -> mx.Context:
    """The MXNet context for a d5 device (None: the CPU); the executor has checked that it exists."""
    if device is None or not getattr(device, "is_gpu", False):
        return mx.cpu()
    return mx.gpu(device.index)


#: How MXNet's NumPy interface spells bfloat16 (a uint16 record); ml_dtypes' bfloat16 crosses by its bits.
MX_BFLOAT16 = np.dtype([("bfloat16", np.uint16)])


def mx_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype MXNet takes for NumPy ``dtype`` (ml_dtypes' bfloat16 as MXNet's bfloat16 record)."""
    return MX_BFLOAT16 if dtype.name == "bfloat16" else dtype


def holds(dtype: np.dtype) -> bool:
    """Whether MXNet holds and computes with tensors of NumPy ``dtype`` (float16/32/64, int8/32/64, uint8, bool);
    values of other types (uint16, strings, complex) stay NumPy, on the reference.

    >>> holds(np.dtype(np.float32)), holds(np.dtype(np.int64)), holds(np.dtype("U3"))
    (True, True, False)
    """
    return dtype in HELD_DTYPES or dtype.name == "bfloat16"


def as_mx_value(value: Any, context: mx.Context | None = None) -> Any:
    """A value as MXNet code takes it: an NDArray (a copy of a NumPy array, its dtype kept), or, for what MXNet
    cannot hold (sequences, strings, other dtypes), the value itself, which only reference operators read."""
    if isinstance(value, mx.nd.NDArray):
        return value
    if value is None or isinstance(value, list):
        return value
    array = np.asarray(value)
    if not holds(array.dtype):
        return array
    return to_ndarray(array, context)


def to_ndarray(array: np.ndarray, context: mx.Context | None = None) -> mx.nd.NDArray:
    """A NumPy array (0-d included) as a new NDArray of its dtype, one copy: into a freshly allocated CPU NDArray,
    by ``memmove`` into its buffer (nothing can be reading or writing a new array). Not ``NDArray._sync_copyfrom``:
    it waits for MXNet's engine thread to wake up, milliseconds on a busy machine; nor ``mx.nd.array``, which asks
    SciPy whether the value is a sparse matrix through a deprecated namespace (a DeprecationWarning every call)."""
    array = np.array(array, order="C", copy=False)  # a 0-d array stays 0-d (np.ascontiguousarray would not)
    if array.dtype.name == "bfloat16":
        array = array.view(np.uint16).view(MX_BFLOAT16)
    with mx.util.np_shape(True):
        if context is None or context.device_type == "cpu":
            handle = _new_alloc_handle(array.shape, context or mx.cpu(), False, array.dtype)
            result = mx.nd.NDArray(handle)
            if array.nbytes:
                data = ctypes.c_void_p()
                mx.base.check_call(mx.base._LIB.MXNDArrayGetData(handle, ctypes.byref(data)))
                ctypes.memmove(data, array.ctypes.data, array.nbytes)
            return result
        result = mx.nd.empty(array.shape, ctx=context, dtype=array.dtype)
        result._sync_copyfrom(array)
    return result


def as_numpy_value(value: Any) -> Any:
    """An MXNet value as NumPy: NDArrays as arrays (one copy: ``asnumpy()`` always copies), sequences element by
    element."""
    if isinstance(value, mx.nd.NDArray):
        return to_numpy(value)
    if isinstance(value, (list, tuple)):
        return [as_numpy_value(v) for v in value]
    return value


def to_numpy(value: mx.nd.NDArray) -> np.ndarray:
    """An NDArray as a NumPy array (0-d NDArrays, which exist under NumPy shape semantics, included)."""
    with mx.util.np_shape(True):
        array = np.asarray(value.asnumpy())
    if array.dtype == MX_BFLOAT16:
        import ml_dtypes

        return array.view(np.uint16).view(ml_dtypes.bfloat16)
    return array


__all__ = ["MX_BFLOAT16", "mx_dtype", "as_mx_value", "as_numpy_value", "holds", "mx_context", "to_ndarray", "to_numpy"]
