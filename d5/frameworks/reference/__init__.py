"""The reference framework: NumPy plus the C++ kernels of d5._C. Every other framework is checked against it.

>>> import d5
>>> from d5.frameworks import reference
>>> executor = reference.from_model(d5.models.lenet5())
>>> sorted(executor.network.outputs)
['loss', 'output']
"""
from __future__ import annotations

import importlib
from typing import Any, Callable, Mapping

import numpy as np

from d5.errors import GraphError
from d5.frameworks.base import (DEFAULT_FALLBACK, NATIVE_LOSSES, Capabilities,  # noqa: F401 (NATIVE_LOSSES: re-export)
                                from_onnx_of, native_network)
from d5.frameworks.reference.custom_op import custom_op, native_op
from d5.frameworks.reference.executor import ReferenceGraphExecutor
from d5.frameworks.reference.kernels import num_threads, set_num_threads
from d5.network.graph import Network
from d5.ops.operator import CustomOp, CustomPythonOp, Gradient

NAME = "reference"

CAPABILITIES = Capabilities(gpu=False, trainable=True, custom_ops=("python", "cpp"), zero_copy_fetch=True)


def from_model(network: Network, *, device: Any = None, fallback: Any = DEFAULT_FALLBACK) -> ReferenceGraphExecutor:
    """An executor running ``network`` (copied: ``executor.graph``; ``executor.network`` is the live state) on
    the reference framework.

    ``fallback`` (:data:`d5.frameworks.base.FALLBACKS`): ``'onnx'`` runs operators d5 does not implement on
    onnx.reference (inference only, with a warning naming them); otherwise they raise UnsupportedOperatorError.

    >>> import d5
    >>> from d5.frameworks import reference
    >>> reference.from_onnx(d5.models.lenet5().to_onnx()).graph.outputs
    ['output', 'loss']
    """
    return ReferenceGraphExecutor(network, device=device, fallback=fallback)


from_onnx = from_onnx_of(from_model)


def from_native(model: CustomOp | Callable[..., np.ndarray], loss: str | CustomOp | None = None, *,
                params: Mapping[str, np.ndarray] | None = None, input_dtype: Any = "float32",
                device: Any = None) -> ReferenceGraphExecutor:
    """An executor for a model written natively for this framework: NumPy code.

    ``model`` is a :class:`d5.ops.CustomOp` (trainable: its ``backward`` gives the gradients) or a plain
    callable (inference only); it is called with the input array followed by the ``params`` arrays in their
    order, which become the network's trainable parameters. The graph reads input ``'input'`` and writes
    ``'output'``; with a ``loss`` -- a loss operator's name (:data:`NATIVE_LOSSES`) or a CustomOp taking
    ``[output, label]`` -- it also reads ``'label'`` and writes ``'loss'``.

    >>> import numpy as np
    >>> from d5.frameworks import reference
    >>> from d5.ops import CustomPythonOp
    >>> class Affine(CustomPythonOp):
    ...     def forward(self, inputs):
    ...         x, w = inputs
    ...         return x @ w
    ...     def backward(self, grads, fwd_inputs, fwd_outputs):
    ...         x, w = fwd_inputs
    ...         return grads[0] @ w.T, x.T @ grads[0]
    >>> ex = reference.from_native(Affine(), "MeanSquaredError", params={"w": np.ones((2, 1), np.float32)})
    >>> batch = {"input": np.ones((4, 2), np.float32), "label": np.zeros((4, 1), np.float32)}
    >>> float(ex.inference_and_backprop(batch)["loss"]), ex.network.fetch_tensor("w_grad").ravel().tolist()
    (4.0, [4.0, 4.0])
    """
    op = model if isinstance(model, CustomOp) else _callable_op(model)
    network = native_network(model, op, {"input": None}, input_dtype,
                             [(name, value, True) for name, value in (params or {}).items()], loss,
                             loss if isinstance(loss, CustomOp) else None, input_dtype,
                             "a d5.ops.CustomOp taking [output, label]", params_are_inputs=True)
    return from_model(network, device=device)


def _callable_op(function: Callable[..., np.ndarray]) -> CustomOp:
    """A plain NumPy function as an inference-only operator."""
    if not callable(function):
        raise GraphError(f"from_native: model must be a d5.ops.CustomOp or a callable, got {type(function).__name__}")

    class NativeFunction(CustomPythonOp):
        gradient = Gradient.NONE
        no_gradient_reason = "a plain function has no backward; pass a d5.ops.CustomOp with backward() to train"

        def forward(self, inputs):
            return function(*inputs)

    NativeFunction.__name__ = NativeFunction.__qualname__ = getattr(function, "__name__", "NativeFunction")
    return NativeFunction()


def __getattr__(name: str):
    # The optimizers live in d5.training; importing them lazily keeps `import d5.frameworks.reference` light.
    # import_module, not `from ... import`, which would re-enter this __getattr__ for the submodule itself.
    optimizers = importlib.import_module("d5.frameworks.reference.optimizers")
    if name in optimizers.__all__:
        return getattr(optimizers, name)
    raise AttributeError(f"module 'd5.frameworks.reference' has no attribute {name!r}")


__all__ = ["CAPABILITIES", "NAME", "ReferenceGraphExecutor", "custom_op", "native_op", "from_model", "from_native", "from_onnx", "num_threads", "set_num_threads", "AdaGradOptimizer", "AdamOptimizer",
           "AdamWOptimizer", "GradientDescent", "MomentumOptimizer", "RMSPropOptimizer"]
