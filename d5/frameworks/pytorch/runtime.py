"""What d5's framework-neutral code needs of PyTorch at run time: the same functions as every framework's
``runtime.py`` (see ``d5/frameworks/reference/runtime.py``; reached through ``d5.frameworks.runtime("pytorch")``).

>>> import torch
>>> dtype_name(torch.float32), dtype_name(torch.int64)
('float32', 'int64')
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

import numpy as np
import torch

#: What :func:`matmul_runner` and :func:`copy_runner` call, as the operator benchmark's report names them.
KERNEL_NAMES = {"matmul": "torch.matmul", "copy": "torch.Tensor.copy_"}


def gpu_count() -> int:
    """CUDA GPUs torch can use here (0 without CUDA)."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def set_num_threads(threads: int) -> int:
    """Set torch's intra-op thread count; returns the previous one."""
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    return previous


def thread_counts() -> Any:
    """The threads the framework computes with now, for run records: torch's intra- and inter-op pools."""
    return {"num_threads": torch.get_num_threads(), "num_interop_threads": torch.get_num_interop_threads()}


def matmul_runner(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> Callable[[], Any]:
    """A call computing ``a @ b`` into ``out`` with ``torch.matmul`` on tensors sharing the arrays' memory."""
    ta, tb, tout = torch.from_numpy(a), torch.from_numpy(b), torch.from_numpy(out)
    return lambda: torch.matmul(ta, tb, out=tout)


def copy_runner(source: np.ndarray, target: np.ndarray) -> Callable[[], Any]:
    """A call copying ``source`` into ``target`` with ``Tensor.copy_`` (on all of torch's threads)."""
    ts, tt = torch.from_numpy(source), torch.from_numpy(target)
    return lambda: tt.copy_(ts)


def dtype_name(dtype: Any) -> str:
    """The NumPy name of a torch dtype (``torch.float32`` -> ``'float32'``); NumPy dtypes and names pass through.
    A dtype NumPy lacks keeps torch's name (``torch.bfloat16`` -> ``'bfloat16'``)."""
    if not isinstance(dtype, torch.dtype):
        return np.dtype(dtype).name
    return _torch_dtype_name(dtype)


@functools.lru_cache(maxsize=None)
def _torch_dtype_name(dtype: torch.dtype) -> str:
    # Cached: the C++ bridge asks on every call, and finding out allocates a tensor.
    try:
        return torch.empty(0, dtype=dtype).numpy().dtype.name
    except TypeError:  # no NumPy equivalent (bfloat16, the float8 types, ...)
        return str(dtype).rsplit(".", 1)[-1]


def bind_native(op_type: str, attributes: dict[str, Any], constants: Sequence[Any] = ()):
    """A :data:`d5.bench.ops_problems.Binder` for PyTorch's converter of ONNX operator ``op_type`` (the torch
    operations the executor runs for that node), timed in torch itself: see :func:`_bind_module`.

    ``constants`` follow the bound inputs and get no gradient; a 0-d one is passed as a Python number, for which
    torch's kernels have fast paths (``torch.pow(x, 3)`` multiplies; with a 0-d tensor exponent it takes the
    general ``pow``, twice as slow forward and backward)."""
    from d5.frameworks.pytorch.operators import create_operator

    extra = [np.asarray(c).item() if np.ndim(c) == 0 else torch.from_numpy(np.array(c)) for c in constants]
    return _bind_module(lambda: create_operator(op_type, attributes), extra)


def bind_custom_op(op):
    """A :data:`d5.bench.ops_problems.Binder` for a d5 CustomOp through :func:`d5.frameworks.pytorch.custom_op`,
    timed in torch itself (see :func:`_bind_module`)."""
    from d5.frameworks.pytorch.custom_op import custom_op

    return _bind_module(lambda: custom_op(op), [])


def _bind_module(make_module: Callable[[], Callable[..., torch.Tensor]], constants: list[Any]):
    """Binder for a torch callable of tensors: forward with autograd recording (as in training), backward as
    ``torch.autograd.grad`` of the graph recorded once (kept with ``retain_graph``)."""
    from d5.bench.ops_problems import BoundPasses

    def bind(inputs: list[np.ndarray], output_grad: np.ndarray) -> BoundPasses:
        module = make_module()
        tensors = [torch.from_numpy(np.array(x, copy=True)).requires_grad_(True) for x in inputs]
        output = module(*tensors, *constants)
        grad = torch.from_numpy(np.array(output_grad, copy=True))

        def backward():
            return torch.autograd.grad(output, tensors, grad, retain_graph=True)

        return BoundPasses(lambda: module(*tensors, *constants), backward, output.detach().numpy().copy(),
                           [g.numpy().copy() for g in backward()])
    return bind


__all__ = ["KERNEL_NAMES", "bind_custom_op", "bind_native", "copy_runner", "dtype_name", "gpu_count", "matmul_runner",
           "set_num_threads", "thread_counts"]
