"""d5 custom operators on PyTorch: any :class:`d5.ops.CustomOp` (NumPy in, NumPy out) as a torch autograd op.

The bridge calls the op's ``forward`` on NumPy views of the input tensors (zero-copy on the CPU) and its
``backward`` from ``torch.autograd``, so a user's operator -- or a reference operator torch has no mapping
for -- trains inside a torch network. State an operator asks to write back (``state_updates``, e.g. batch
normalization's running statistics) is copied into the input tensors, which are the executor's live buffers.

>>> import numpy as np, torch
>>> from d5.ops import CustomPythonOp
>>> class IPowOp(CustomPythonOp):
...     def __init__(self, power):
...         super().__init__()
...         self.power = power
...     def forward(self, inputs):
...         return inputs[0] ** self.power
...     def backward(self, grads, fwd_inputs, fwd_outputs):
...         return grads[0] * self.power * fwd_inputs[0] ** (self.power - 1)
>>> x = torch.tensor([1.0, 2.0], requires_grad=True)
>>> y = custom_op(IPowOp(3))(x)
>>> y.sum().backward()
>>> y.detach().numpy(), x.grad.numpy()
(array([1., 8.], dtype=float32), array([ 3., 12.], dtype=float32))
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from d5.errors import ShapeError
from d5.frameworks.allocator import keep_freed_memory
from d5.frameworks import bridge
from d5.frameworks.bridge import bridge_backward, bridge_forward, check_custom_op, unreferenced
from d5.frameworks.pytorch.operators import create_operator
from d5.frameworks.pytorch.runtime import dtype_name
from d5.frameworks.pytorch.tensors import as_module_value, as_numpy_value
from d5.ops.cpp_op import BoundKernel, CppOp
from d5.ops.operator import CustomOp, as_tuple


class CustomOpModule(torch.nn.Module):
    """A d5 CustomOp as a torch module (a compiled C++ one zero-copy on the CPU, see the module docstring): one
    tensor out, or a tuple for several outputs."""

    def __init__(self, op: CustomOp) -> None:
        super().__init__()
        self.op = op

    def forward(self, *inputs: torch.Tensor | None) -> Any:
        self.op.training = self.training
        outputs = (_CppOpFunction if isinstance(self.op, CppOp) else _CustomOpFunction).apply(self.op, *inputs)
        # One tensor alone; otherwise a tuple, so that a lone sequence output (a list) is not taken for outputs.
        return outputs[0] if len(outputs) == 1 and isinstance(outputs[0], torch.Tensor) else outputs

    def extra_repr(self) -> str:
        return type(self.op).__name__



def custom_op(op: CustomOp) -> CustomOpModule:
    """``op`` as a torch module with autograd (see the module docstring)."""
    check_custom_op(op, "pytorch")
    # The bridge allocates its outputs and gradients every call: with glibc's defaults each large one is mapped
    # and faulted in anew (4 MB: ~1 ms), so it keeps freed memory as d5's executors do.
    keep_freed_memory()
    return CustomOpModule(op)


class NativeOp(bridge.NativeOp):
    """A torch converter of an ONNX operator (``operators/``) as a d5 CustomOp, NumPy in and out (see
    :class:`d5.frameworks.bridge.NativeOp`): forward runs torch's kernels, backward torch autograd's gradient."""

    def create(self, op_type: str, attributes: dict[str, Any], opset: int | None) -> torch.nn.Module:
        return create_operator(op_type, attributes, opset)

    def _call(self, inputs: list[Any], wanted: list[bool]) -> tuple[list[Any], tuple[Any, ...]]:
        self.module.train(self.training)
        self.module.node_output_count = self.node_output_count
        # Copies: from_numpy would let the converter write into the caller's arrays.
        tensors = [t.clone().requires_grad_(w and t.is_floating_point()) if isinstance(t, torch.Tensor) else t
                   for t, w in zip((as_module_value(x, torch.device("cpu")) for x in inputs), wanted)]
        with torch.set_grad_enabled(any(wanted)):
            return tensors, as_tuple(self.module(*tensors))

    def run(self, inputs: list[Any]) -> tuple[list[Any], tuple[Any, ...]]:
        tensors, outputs = self._call(inputs, [False] * len(inputs))
        return ([as_numpy_value(t) for t in tensors],
                tuple(np.array(as_numpy_value(o), copy=True) if isinstance(o, torch.Tensor) else o for o in outputs))

    def input_gradients(self, inputs: list[Any], wanted: list[bool], grads: Any) -> list[Any]:
        tensors, outputs = self._call(inputs, wanted)
        sources = [t for t in tensors if isinstance(t, torch.Tensor) and t.requires_grad]
        pairs = [(o, torch.as_tensor(np.asarray(g), dtype=o.dtype)) for o, g in zip(outputs, grads)
                 if isinstance(o, torch.Tensor) and o.requires_grad and g is not None]
        found = iter(torch.autograd.grad([o for o, _ in pairs], sources, [g for _, g in pairs], allow_unused=True)
                     if pairs and sources else [None] * len(sources))
        result = []
        for tensor in tensors:
            if isinstance(tensor, torch.Tensor) and tensor.requires_grad:
                grad = next(found)  # None: no output depends on it, a zero gradient
                result.append(torch.zeros_like(tensor).numpy() if grad is None else grad.numpy())
            else:
                result.append(None)
        return result


def native_op(op_type: str, opset: int | None = None, **attributes: Any) -> NativeOp:
    """PyTorch's own implementation of ONNX operator ``op_type`` (with these attributes, at ``opset``) as a d5
    CustomOp, for validating and timing it against other frameworks' (see :class:`NativeOp`).

    >>> import numpy as np
    >>> from d5.ops import test_gradient
    >>> op = native_op("Softmax", axis=1)
    >>> op.forward([np.zeros((1, 4), np.float32)]).tolist()
    [[0.25, 0.25, 0.25, 0.25]]
    >>> bool(test_gradient(op, [np.random.default_rng(0).standard_normal((2, 3))]))
    True
    """
    return NativeOp(op_type, attributes, opset)


class _CustomOpFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, op: CustomOp, *inputs: torch.Tensor | None):  # noqa: D401 - torch's signature
        arrays = [as_numpy_value(t) for t in inputs]
        results = bridge_forward(op, arrays, [isinstance(t, torch.Tensor) and t.requires_grad for t in inputs])
        device = next((t.device for t in inputs if isinstance(t, torch.Tensor)), torch.device("cpu"))
        if op.training:
            with torch.no_grad():
                for index, value in op.state_updates().items():
                    inputs[index].copy_(torch.from_numpy(np.array(value, order="C")).to(inputs[index].dtype))
        outputs = tuple(_as_output(results, index, device) for index in range(len(results)))
        ctx.op, ctx.arrays, ctx.results, ctx.device = op, arrays, results, device
        # Outputs handed over without a copy share memory with ctx.results, which backward reads: saved, so that
        # torch refuses an in-place change of them before backward, as it does for its own operators.
        ctx.save_for_backward(*[o if isinstance(o, torch.Tensor) else None for o in outputs])
        ctx.mark_non_differentiable(*[o for o in outputs if isinstance(o, torch.Tensor) and not o.is_floating_point()])
        return outputs

    @staticmethod
    def backward(ctx, *grads: torch.Tensor | None):
        ctx.saved_tensors  # noqa: B018 - raises if an output was modified in place since forward
        in_grads = bridge_backward(ctx.op, [as_numpy_value(g) for g in grads], ctx.arrays, ctx.results)
        return (None, *[None if in_grads[index] is None else
                        _as_tensor(in_grads, index, ctx.arrays[index].dtype).to(ctx.device)
                        for index in range(len(in_grads))])


class _CppOpFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, op: CppOp, *inputs: torch.Tensor):  # noqa: D401 - torch's signature
        if not all(isinstance(t, torch.Tensor) for t in inputs):
            raise ShapeError(f"{op.op_type} takes tensors, got {[type(t).__name__ for t in inputs]}")
        dtype = op.element_type([dtype_name(t.dtype) for t in inputs])
        device = inputs[0].device
        tensors = [_flat_cpu(t) for t in inputs]
        kernel = op.kernel(dtype, [tuple(t.shape) for t in tensors])
        outputs = [_guarded_empty(kernel, shape, tensors[0].dtype) for shape in kernel.output_shapes]
        kernel.forward([t.data_ptr() for t in tensors], [o.data_ptr() for o in outputs])
        ctx.kernel, ctx.device = kernel, device
        ctx.save_for_backward(*tensors, *outputs)
        return tuple(o.to(device) for o in outputs)

    @staticmethod
    def backward(ctx, *grads: torch.Tensor | None):
        kernel: BoundKernel = ctx.kernel
        saved = ctx.saved_tensors
        inputs, outputs = saved[:len(kernel.input_shapes)], saved[len(kernel.input_shapes):]
        grads = [torch.zeros(o.shape, dtype=o.dtype) if g is None else _flat_cpu(g.to(o.dtype))
                 for g, o in zip(grads, outputs)]
        input_grads = [_guarded_empty(kernel, t.shape, t.dtype) for t in inputs]
        kernel.backward([g.data_ptr() for g in grads], [t.data_ptr() for t in inputs],
                        [o.data_ptr() for o in outputs], [g.data_ptr() for g in input_grads])
        return (None, *(g.to(ctx.device) for g in input_grads))


def _flat_cpu(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor as C++ reads it: on the CPU, C-contiguous (no copy when it already is)."""
    return tensor.detach().to("cpu").contiguous()


def _guarded_empty(kernel: BoundKernel, shape: Any, dtype: torch.dtype) -> torch.Tensor:
    count = int(np.prod(tuple(shape), dtype=np.int64))
    return torch.empty(kernel.padded_elements(shape), dtype=dtype)[:count].view(tuple(shape))


def _as_output(results: list, index: int, device: torch.device) -> Any:
    """Result ``index`` as a torch tensor, or as itself where torch cannot hold it. The array is handed over
    without a copy when nothing else can reach its memory (:func:`unreferenced`), else copied: the op may keep
    and reuse an array it returned, or return a view of an input."""
    if isinstance(results[index], np.ndarray):
        return as_module_value(results[index] if unreferenced(results, index) else np.array(results[index]), device)
    return as_module_value(results[index], device)


def _as_tensor(values: tuple, index: int, dtype: np.dtype) -> torch.Tensor:
    """A gradient the op returned as a tensor of ``dtype``, without a copy where :func:`unreferenced` allows."""
    if unreferenced(values, index) and values[index].dtype == dtype and values[index].flags.c_contiguous:
        return torch.from_numpy(values[index])
    return torch.from_numpy(np.array(values[index], dtype=dtype, order="C"))
