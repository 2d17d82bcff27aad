"""What d5's framework-neutral code needs of TensorFlow at run time: the same functions as every framework's
``runtime.py`` (see ``d5/frameworks/reference/runtime.py``; reached through ``d5.frameworks.runtime("tensorflow")``).

TensorFlow fixes its thread pools when it runs its first operation; :func:`set_num_threads` after that can only
confirm the count it has (it raises a d5 error saying so otherwise).

>>> import tensorflow as tf
>>> dtype_name(tf.float32), dtype_name(tf.int64)
('float32', 'int64')
"""
from __future__ import annotations

import os
from typing import Any, Callable, Sequence

import numpy as np
import tensorflow as tf

from d5.errors import D5Error

#: What :func:`matmul_runner` and :func:`copy_runner` call, as the operator benchmark's report names them.
KERNEL_NAMES = {"matmul": "tf.linalg.matmul", "copy": "tf.identity (a device copy)"}


def gpu_count() -> int:
    """GPUs TensorFlow can use here (0 with the CPU build, tensorflow-cpu)."""
    return len(tf.config.list_physical_devices("GPU"))


def _effective(count: int) -> int:
    # 0 means "TensorFlow's choice": one thread per core this process may run on.
    return count or len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else count or os.cpu_count()


def set_num_threads(threads: int) -> int:
    """Set TensorFlow's intra-op thread count (inter-op: 1, as a d5 step's operators run one after another);
    returns the previous (effective) count. A d5 error once TensorFlow has started and has another count."""
    previous = _effective(tf.config.threading.get_intra_op_parallelism_threads())
    try:
        tf.config.threading.set_intra_op_parallelism_threads(int(threads))
        tf.config.threading.set_inter_op_parallelism_threads(1)
    except RuntimeError:
        if previous != int(threads):
            raise D5Error(f"TensorFlow already runs with {previous} threads: it fixes its thread pools at its first "
                          f"operation, so {threads} threads must be set before (pass --threads to the recipe, or set "
                          "the thread count before building the executor)") from None
    return previous


def thread_counts() -> Any:
    """The threads the framework computes with now, for run records: TensorFlow's intra- and inter-op pools."""
    return {"num_threads": _effective(tf.config.threading.get_intra_op_parallelism_threads()),
            "num_interop_threads": _effective(tf.config.threading.get_inter_op_parallelism_threads())}


def matmul_runner(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> Callable[[], Any]:
    """A call computing ``a @ b`` into ``out`` with ``tf.linalg.matmul``, reading the arrays at each call.
    TensorFlow cannot compute into NumPy memory: each call converts the operands (zero-copy where TensorFlow can wrap
    the arrays) and copies the product into ``out`` -- the cost of TensorFlow behind a NumPy interface, measured."""
    return lambda: np.copyto(out, tf.linalg.matmul(a, b).numpy())


def copy_runner(source: np.ndarray, target: np.ndarray) -> Callable[[], Any]:
    """A call copying ``source`` into ``target`` through TensorFlow (a tensor of the array, copied out)."""
    return lambda: np.copyto(target, tf.identity(source).numpy())


def dtype_name(dtype: Any) -> str:
    """The NumPy name of a TensorFlow dtype (``tf.float32`` -> ``'float32'``); NumPy dtypes and names pass
    through. ``tf.bfloat16`` -> ``'bfloat16'``."""
    if isinstance(dtype, tf.DType):
        return dtype.name
    return np.dtype(dtype).name


def bind_native(op_type: str, attributes: dict[str, Any], constants: Sequence[Any] = ()):
    """A :data:`d5.bench.ops_problems.Binder` for TensorFlow's converter of ONNX operator ``op_type``, timed in
    TensorFlow itself: forward and backward each one traced function (as the executor runs them)."""
    from d5.frameworks.tensorflow.operators import create_operator

    extra = [tf.constant(np.asarray(c)) for c in constants]
    return _bind_callable(lambda: create_operator(op_type, attributes), extra)


def bind_custom_op(op):
    """A :data:`d5.bench.ops_problems.Binder` for a d5 CustomOp through :func:`d5.frameworks.tensorflow.custom_op`."""
    from d5.frameworks.tensorflow.custom_op import custom_op

    return _bind_callable(lambda: custom_op(op), [])


def _bind_callable(make: Callable[[], Callable[..., Any]], constants: list[Any]):
    from d5.bench.ops_problems import BoundPasses

    def bind(inputs: list[np.ndarray], output_grad: np.ndarray) -> BoundPasses:
        function = make()
        tensors = [tf.constant(np.array(x, copy=True)) for x in inputs]
        grad = tf.constant(np.array(output_grad, copy=True))

        @tf.function(autograph=False)
        def forward():
            return function(*tensors, *constants)

        @tf.function(autograph=False)
        def backward():
            with tf.GradientTape() as tape:
                tape.watch(tensors)
                output = function(*tensors, *constants)
            return tape.gradient(output, tensors, output_gradients=grad)

        return BoundPasses(forward, backward, forward().numpy().copy(), [g.numpy().copy() for g in backward()])
    return bind


__all__ = ["KERNEL_NAMES", "bind_custom_op", "bind_native", "copy_runner", "dtype_name", "gpu_count", "matmul_runner",
           "set_num_threads", "thread_counts"]
