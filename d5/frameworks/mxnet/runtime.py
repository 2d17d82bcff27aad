"""What d5's framework-neutral code needs of MXNet at run time: the same functions as every framework's
``runtime.py`` (see ``d5/frameworks/reference/runtime.py``; reached through ``d5.frameworks.runtime("mxnet")``).

MXNet computes each operator with OpenMP threads on its engine's worker thread, which fixes its OpenMP count when
it starts (at import): ``OMP_NUM_THREADS`` if set, else one core fewer than the machine has (measured: one thread
on a 2-core machine). :func:`set_num_threads` (``MXSetNumOMPThreads``) caps MXNet's own kernels but cannot raise
oneDNN's count afterwards: set ``OMP_NUM_THREADS`` before importing MXNet for more. MXNet has no call that reads
the count back; :func:`thread_counts` reports that rule.

>>> import mxnet as mx, numpy as np
>>> dtype_name(np.float32), dtype_name("int64")
('float32', 'int64')
"""
from __future__ import annotations

import ctypes
import os
from typing import Any, Callable, Sequence

import mxnet as mx
import numpy as np

from d5.frameworks.mxnet.tensors import as_mx_value, to_numpy

#: What :func:`matmul_runner` and :func:`copy_runner` call, as the operator benchmark's report names them.
KERNEL_NAMES = {"matmul": "mx.nd.dot", "copy": "mx.nd.NDArray.copyto"}

_THREADS: list[int] = []


def gpu_count() -> int:
    """GPUs MXNet can use here (0 with the CPU build)."""
    try:
        return int(mx.context.num_gpus())
    except mx.base.MXNetError:
        return 0


def _default_threads() -> int:
    """The OpenMP threads MXNet's engine worker computes with: OMP_NUM_THREADS, else the cores less the one MXNet
    keeps back for its engine."""
    env = os.environ.get("OMP_NUM_THREADS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, cores - 1)


def set_num_threads(threads: int) -> int:
    """Set MXNet's OpenMP thread count for its operators; returns the previous count."""
    previous = _THREADS[-1] if _THREADS else _default_threads()
    mx.base.check_call(mx.base._LIB.MXSetNumOMPThreads(ctypes.c_int(int(threads))))
    _THREADS[:] = [int(threads)]
    return previous


def thread_counts() -> Any:
    """The threads the framework computes with now, for run records: MXNet's OpenMP threads per operator and its
    engine's CPU worker threads."""
    return {"num_threads": _THREADS[-1] if _THREADS else _default_threads(),
            "num_interop_threads": int(os.environ.get("MXNET_CPU_WORKER_NTHREADS", "1"))}


def matmul_runner(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> Callable[[], Any]:
    """A call computing ``a @ b`` into ``out`` with ``mx.nd.dot``. MXNet cannot compute into NumPy memory: each call
    copies the operands in and the product out -- the cost of MXNet behind a NumPy interface, measured."""
    return lambda: np.copyto(out, to_numpy(mx.nd.dot(as_mx_value(a), as_mx_value(b))))


def copy_runner(source: np.ndarray, target: np.ndarray) -> Callable[[], Any]:
    """A call copying ``source`` into ``target`` through MXNet (an NDArray of the array, copied out)."""
    return lambda: np.copyto(target, to_numpy(as_mx_value(source)))


def dtype_name(dtype: Any) -> str:
    """The NumPy name of an MXNet dtype (MXNet's dtypes are NumPy's: ``np.float32`` -> ``'float32'``)."""
    return np.dtype(dtype).name


def bind_native(op_type: str, attributes: dict[str, Any], constants: Sequence[Any] = ()):
    """A :data:`d5.bench.ops_problems.Binder` for MXNet's converter of ONNX operator ``op_type``, timed in MXNet
    itself: forward and backward each one CachedOp call on NDArrays, waited for."""
    from d5.frameworks.mxnet.operators import create_operator

    return _bind_callable(lambda: create_operator(op_type, attributes), [np.asarray(c) for c in constants])


def bind_custom_op(op):
    """A :data:`d5.bench.ops_problems.Binder` for a d5 CustomOp through :func:`d5.frameworks.mxnet.custom_op`."""
    from d5.frameworks.mxnet.custom_op import custom_op

    return _bind_callable(lambda: custom_op(op), [])


def _bind_callable(make: Callable[[], Callable[..., Any]], constants: list[Any]):
    from d5.bench.ops_problems import BoundPasses
    from d5.frameworks.mxnet.executor import evaluate

    def bind(inputs: list[np.ndarray], output_grad: np.ndarray) -> BoundPasses:
        function = make()
        tensors = [as_mx_value(np.array(x, copy=True)) for x in inputs]
        grad = as_mx_value(np.array(output_grad, copy=True))
        for tensor in tensors:
            tensor.attach_grad()

        def forward():
            with mx.util.np_shape(True):
                output = evaluate(function, [*tensors, *constants], 21)[0]
                output.wait_to_read()
            return output

        def backward():
            with mx.util.np_shape(True):
                with mx.autograd.record():
                    output = evaluate(function, [*tensors, *constants], 21)[0]
                output.backward(grad)
                mx.nd.waitall()
            return [tensor.grad for tensor in tensors]

        return BoundPasses(forward, backward, to_numpy(forward()).copy(), [to_numpy(g).copy() for g in backward()])
    return bind


__all__ = ["KERNEL_NAMES", "bind_custom_op", "bind_native", "copy_runner", "dtype_name", "gpu_count", "matmul_runner",
           "set_num_threads", "thread_counts"]
