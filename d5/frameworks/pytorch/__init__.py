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

from typing import Any, Mapping, Sequence

from d5.frameworks import require_installed

require_installed("pytorch")  # a d5 error naming the extra, not a bare ModuleNotFoundError

import torch  # noqa: E402

from d5.errors import GraphError  # noqa: E402
from d5.frameworks.base import (DEFAULT_FALLBACK, NATIVE_LOSSES, Capabilities, NativeModelOp,  # noqa: E402, F401
                                from_onnx_of, native_network)
from d5.frameworks.pytorch.custom_op import custom_op, native_op  # noqa: E402
from d5.frameworks.pytorch.executor import PyTorchGraphExecutor  # noqa: E402
from d5.frameworks.pytorch.optimizers import (AdaGradOptimizer, AdamOptimizer, AdamWOptimizer, GradientDescent,  # noqa: E402
                                              MomentumOptimizer, RMSPropOptimizer)
from d5.frameworks.pytorch.tensors import torch_device  # noqa: E402
from d5.network.graph import Network  # noqa: E402

NAME = "pytorch"

CAPABILITIES = Capabilities(gpu=True, trainable=True, custom_ops=("python", "cpp"), zero_copy_fetch=True)


def from_model(network: Network, *, device: Any = None, fallback: Any = DEFAULT_FALLBACK,
               compile: bool = False) -> PyTorchGraphExecutor:
    """An executor running ``network`` (copied: ``executor.graph``) with native torch operators.

    ``fallback`` (:data:`d5.frameworks.base.FALLBACKS`): by default operators without a torch mapping run the
    reference implementation through the custom-op bridge, with a warning naming them; ``'none'`` refuses them
    with UnsupportedOperatorError, ``'onnx'`` also runs operators d5 does not implement on onnx.reference.
    ``compile=True`` wraps the generated module in ``torch.compile``."""
    return PyTorchGraphExecutor(network, device=device, fallback=fallback, compile=compile)


from_onnx = from_onnx_of(from_model)


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
    PyTorchGraphExecutor.check_device(device)
    module.to(torch_device(device))  # before the live state takes its tensors
    params = [(name, param.detach().cpu().numpy(), param.requires_grad) for name, param in module.named_parameters()]
    params += [(name, buffer.detach().cpu().numpy(), False) for name, buffer in module.named_buffers()]
    native_loss = NativeModelOp(loss, NAME, loss_of=module) if callable(loss) and not isinstance(loss, str) else None
    network = native_network(module, NativeModelOp(module, NAME), dict(inputs or {"input": None}), input_dtype, params,
                             loss, native_loss, label_dtype, "a torch loss such as torch.nn.CrossEntropyLoss()",
                             params_are_inputs=False)
    return PyTorchGraphExecutor(network, device=device)


__all__ = ["CAPABILITIES", "NAME", "NATIVE_LOSSES", "PyTorchGraphExecutor", "custom_op", "native_op", "from_model", "from_native",
           "from_onnx", "AdaGradOptimizer", "AdamOptimizer", "AdamWOptimizer", "GradientDescent", "MomentumOptimizer",
           "RMSPropOptimizer"]
