"""The PyTorch framework: d5 networks as native torch computations (a generated ``torch.fx.GraphModule``).

Importing this package imports torch; ``import d5`` does not.

>>> import numpy as np, d5
>>> from d5.frameworks import pytorch
>>> executor = pytorch.from_model(d5.models.lenet5())
>>> batch = {"input": np.zeros((2, 1, 28, 28), np.float32), "label": np.array([1, 2])}
>>> sorted(executor.inference_and_backprop(batch))
['loss', 'output']
>>> executor.network.fetch_tensor("conv1.weight_grad").shape
(6, 1, 5, 5)
"""
from __future__ import annotations

import os
from typing import Any, Mapping, Sequence

import numpy as np

from d5.frameworks import require_installed

require_installed("pytorch")  # a d5 error naming the extra, not a bare ModuleNotFoundError

import torch  # noqa: E402

from d5.errors import GraphError  # noqa: E402
from d5.frameworks.base import NATIVE_LOSSES, Capabilities, add_native_loss  # noqa: E402, F401 (NATIVE_LOSSES: re-export)
from d5.frameworks.pytorch.custom_op import custom_op, native_op  # noqa: E402
from d5.frameworks.pytorch.executor import NativeModuleOp, PyTorchGraphExecutor, torch_device  # noqa: E402
from d5.frameworks.pytorch.optimizers import (AdaGradOptimizer, AdamOptimizer, AdamWOptimizer, GradientDescent,  # noqa: E402
                                              MomentumOptimizer, RMSPropOptimizer)
from d5.network.graph import Network  # noqa: E402

NAME = "pytorch"

CAPABILITIES = Capabilities(gpu=True, native_operators=True, fallback=True, trainable=True, custom_ops=("python", "cpp"),
                            zero_copy_fetch=True)


def from_model(network: Network, device: Any = None, strict: bool = False, compile: bool = False,
               fallback: bool = True) -> PyTorchGraphExecutor:
    """An executor running ``network`` (copied: ``executor.graph``) with native torch operators.

    Operators without a torch mapping run the reference implementation through the custom-op bridge, with a
    warning naming them; ``strict=True`` (or ``fallback=False``) refuses them with UnsupportedOperatorError.
    ``compile=True`` wraps the generated module in ``torch.compile``."""
    return PyTorchGraphExecutor(network, device=device, strict=strict or not fallback, compile=compile)


def from_onnx(source: str | os.PathLike | bytes | Any, device: Any = None, strict: bool = False,
              external_data_dir: str | os.PathLike | None = None, fallback: bool = True) -> PyTorchGraphExecutor:
    """An executor for an ONNX model (a path, the file's bytes or an ``onnx.ModelProto``)."""
    from d5.network.onnx_import import load_onnx

    return from_model(load_onnx(source, external_data_dir), device=device, strict=strict, fallback=fallback)


def from_native(module: torch.nn.Module, loss: Any = None, inputs: Mapping[str, Sequence | None] | None = None, *,
                input_dtype: Any = "float32", label_dtype: Any = "int64", device: Any = None) -> PyTorchGraphExecutor:
    """An executor for a user's ``torch.nn.Module``: its parameters and buffers are the live state (trained
    in place), d5's optimizers, metrics and recipes work on it unchanged.

    ``inputs`` names the module's inputs with their shapes (default ``{'input': None}``, unknown shape); the
    module's output is ``'output'``. ``loss`` -- a torch loss (``nn.CrossEntropyLoss()`` or a function of
    ``(output, label)``) or a loss operator's name (:data:`NATIVE_LOSSES`) -- adds input ``'label'`` and output
    ``'loss'``.

    >>> import numpy as np, torch
    >>> from d5.frameworks import pytorch
    >>> model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 3))
    >>> executor = pytorch.from_native(model, torch.nn.CrossEntropyLoss(), {"input": ("N", 2, 2)})
    >>> out = executor.inference_and_backprop({"input": np.ones((5, 2, 2), np.float32), "label": np.zeros(5, np.int64)})
    >>> executor.network.get_params(), model[1].weight.grad.shape
    (['1.weight', '1.bias'], torch.Size([3, 4]))
    """
    if not isinstance(module, torch.nn.Module):
        raise GraphError(f"from_native wraps a torch.nn.Module, got {type(module).__name__}; for a d5.Network use "
                         "from_model")
    module.to(torch_device(device))  # before the live state takes its tensors
    inputs = dict(inputs or {"input": None})
    network = Network(f"native_{type(module).__name__}")
    for name, shape in inputs.items():
        network.add_input(name, shape, input_dtype)
    for name, param in module.named_parameters():
        network.add_param(name, param.detach().cpu().numpy(), trainable=param.requires_grad)
    for name, buffer in module.named_buffers():
        network.add_param(name, buffer.detach().cpu().numpy(), trainable=False)
    network.add_custom_node(NativeModuleOp(module), list(inputs), ["output"], name="model")
    network.add_output("output")
    if loss is not None:
        native_loss = NativeModuleOp(loss, loss_of=module) if callable(loss) and not isinstance(loss, str) else None
        add_native_loss(network, loss, native_loss, input_dtype, label_dtype,
                        "a torch loss such as torch.nn.CrossEntropyLoss()")
    return PyTorchGraphExecutor(network, device=device)


__all__ = ["CAPABILITIES", "NAME", "NATIVE_LOSSES", "PyTorchGraphExecutor", "custom_op", "native_op", "from_model", "from_native",
           "from_onnx", "AdaGradOptimizer", "AdamOptimizer", "AdamWOptimizer", "GradientDescent", "MomentumOptimizer",
           "RMSPropOptimizer"]
