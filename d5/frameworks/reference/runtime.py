"""What d5's framework-neutral code needs of the reference framework at run time: how many GPUs it can use, its
thread budget, the kernels the operator benchmark's roofline times, NumPy dtype names, and its operators bound
for timing. Every framework's ``runtime.py`` has these same functions (``d5.frameworks.runtime(name)``).

>>> import numpy as np
>>> a, b, out = np.eye(2, dtype=np.float32), np.full((2, 2), 3, np.float32), np.empty((2, 2), np.float32)
>>> run = matmul_runner(a, b, out)
>>> _ = run(); out.tolist()
[[3.0, 3.0], [3.0, 3.0]]
>>> gpu_count(), dtype_name(np.float64)
(0, 'float64')
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

#: What :func:`matmul_runner` and :func:`copy_runner` call, as the operator benchmark's report names them.
KERNEL_NAMES = {"matmul": "numpy.matmul", "copy": "numpy.copyto"}


def gpu_count() -> int:
    """GPUs this framework can use here: none, the reference framework runs on the CPU only."""
    return 0


def set_num_threads(threads: int) -> int:
    """Give the reference kernels' OpenMP threads and every BLAS pool in the process ``threads`` threads
    (:func:`d5.frameworks.reference.kernels.set_num_threads`); returns the previous count."""
    from d5.frameworks.reference.kernels import set_num_threads as set_reference_threads

    return set_reference_threads(threads)


def thread_counts() -> Any:
    """The threads the framework computes with now, for run records: the reference kernels' OpenMP threads."""
    from d5.frameworks.reference.kernels import num_threads

    return num_threads()


def matmul_runner(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> Callable[[], Any]:
    """A call computing ``a @ b`` into ``out`` (float32 NumPy arrays) with NumPy's BLAS, for timing."""
    return lambda: np.matmul(a, b, out=out)


def copy_runner(source: np.ndarray, target: np.ndarray) -> Callable[[], Any]:
    """A call copying ``source`` into ``target`` (NumPy arrays of one shape; NumPy copies on one thread)."""
    return lambda: np.copyto(target, source)


def dtype_name(dtype: Any) -> str:
    """The NumPy name of one of this framework's dtypes (NumPy's own): ``np.float32`` -> ``'float32'``."""
    return np.dtype(dtype).name


def bind_native(op_type: str, attributes: dict[str, Any], constants: Sequence[Any] = ()):
    """A :data:`d5.bench.ops_problems.Binder` for this framework's own ONNX operator ``op_type`` (its
    :func:`~d5.frameworks.reference.native_op`), called on the bound inputs followed by ``constants`` (inputs
    that get no gradient)."""
    from d5.bench.ops_problems import bind_custom_op as bind
    from d5.frameworks.reference.custom_op import native_op

    return bind(native_op(op_type, **attributes), constants)


def bind_custom_op(op):
    """A :data:`d5.bench.ops_problems.Binder` for a d5 CustomOp run through this framework's ``custom_op``
    (the reference framework runs it as it is, on NumPy arrays)."""
    from d5.bench.ops_problems import bind_custom_op as bind
    from d5.frameworks.reference.custom_op import custom_op

    return bind(custom_op(op))


__all__ = ["KERNEL_NAMES", "bind_custom_op", "bind_native", "copy_runner", "dtype_name", "gpu_count", "matmul_runner",
           "set_num_threads", "thread_counts"]
