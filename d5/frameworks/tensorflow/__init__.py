"""The TensorFlow framework (TF 2: eager, ``tf.function``, ``tf.GradientTape``, ``tf.Variable``): d5 networks as
one traced TensorFlow function per set of fed inputs and input signature, spatial activations kept channels-last
(see :mod:`d5.frameworks.tensorflow.executor`).

Importing this package imports TensorFlow; ``import d5`` does not.

>>> import numpy as np, d5
>>> from d5.frameworks import tensorflow as d5tf
>>> executor = d5tf.from_model(d5.models.lenet5())
>>> batch = {"input": np.zeros((2, 1, 28, 28), np.float32), "label": np.array([1, 2])}
>>> sorted(executor.inference_and_backprop(batch))
['loss', 'output']
>>> executor.network.fetch_tensor("conv1.weight_grad").shape
(6, 1, 5, 5)
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from d5.frameworks import require_installed

require_installed("tensorflow")  # a d5 error naming the extra, not a bare ModuleNotFoundError

import tensorflow as tf  # noqa: E402

from d5.errors import GraphError  # noqa: E402
from d5.frameworks.base import (DEFAULT_FALLBACK, NATIVE_LOSSES, Capabilities, NativeModelOp,  # noqa: E402, F401
                                from_onnx_of, native_network)
from d5.frameworks.tensorflow.custom_op import custom_op, native_op  # noqa: E402
from d5.frameworks.tensorflow.executor import TensorFlowGraphExecutor  # noqa: E402
from d5.frameworks.tensorflow.optimizers import (AdaGradOptimizer, AdamOptimizer, AdamWOptimizer,  # noqa: E402
                                                 GradientDescent, MomentumOptimizer, RMSPropOptimizer)
from d5.network.graph import Network  # noqa: E402

NAME = "tensorflow"

CAPABILITIES = Capabilities(gpu=True, trainable=True, custom_ops=("python", "cpp"), zero_copy_fetch=False)


def from_model(network: Network, *, device: Any = None, fallback: Any = DEFAULT_FALLBACK) -> TensorFlowGraphExecutor:
    """An executor running ``network`` (copied: ``executor.graph``) with native TensorFlow operators.

    ``fallback`` (:data:`d5.frameworks.base.FALLBACKS`): by default operators without a TensorFlow mapping run the
    reference implementation through the custom-op bridge, with a warning naming them; ``'none'`` refuses them
    with UnsupportedOperatorError, ``'onnx'`` also runs operators d5 does not implement on onnx.reference."""
    return TensorFlowGraphExecutor(network, device=device, fallback=fallback)


from_onnx = from_onnx_of(from_model)


def model_variables(model: Any, variables: Sequence[Any] | None) -> list[tuple[str, tf.Variable, bool]]:
    """(name, tf.Variable, trainable) of ``model``'s variables (a Keras model's, or those given): Keras 3 variables
    by their ``path``, unwrapped to the tf.Variable they hold."""
    found = list(variables) if variables is not None else list(getattr(model, "variables", None) or [])
    if not found:
        raise GraphError(f"from_native: {type(model).__name__} has no variables to train; pass a Keras model, or the "
                         "variables of your function with variables=[...]")
    result, seen = [], set()
    for variable in found:
        inner = getattr(variable, "value", variable)
        inner = inner if isinstance(inner, tf.Variable) else variable
        if not isinstance(inner, tf.Variable):
            raise GraphError(f"from_native: variables must be tf.Variable or Keras variables, got {type(variable).__name__}")
        name = str(getattr(variable, "path", None) or inner.name.split(":")[0])
        while name in seen:
            name += "_"
        seen.add(name)
        result.append((name, inner, bool(getattr(variable, "trainable", inner.trainable))))
    return result


def from_native(model: Any, loss: Any = None, inputs: Mapping[str, Sequence | None] | None = None, *,
                variables: Sequence[Any] | None = None, input_dtype: Any = "float32", label_dtype: Any = "int64",
                device: Any = None) -> Any:
    """An executor for a user's TensorFlow model: a Keras model (its variables) or a callable with ``variables``.
    Its variables are the live state (trained in place); d5's optimizers, metrics and recipes work on it unchanged.

    ``inputs`` names the model's inputs with their shapes (default ``{'input': None}``, unknown shape); the model's
    output is ``'output'``. ``loss`` -- a Keras loss (``keras.losses.SparseCategoricalCrossentropy(from_logits=True)``),
    a function of ``(output, label)`` returning the loss, or a loss operator's name (``NATIVE_LOSSES``) -- adds input
    ``'label'`` and output ``'loss'``.

    >>> import numpy as np, keras
    >>> from d5.frameworks import tensorflow as d5tf
    >>> model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, name="dense")], name="net")
    >>> executor = d5tf.from_native(model, keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    ...                             {"input": ("N", 4)})
    >>> out = executor.inference_and_backprop({"input": np.ones((5, 4), np.float32), "label": np.zeros(5, np.int64)})
    >>> executor.network.get_params(), executor.network.fetch_tensor("net/dense/kernel_grad").shape
    (['net/dense/kernel', 'net/dense/bias'], (4, 3))
    """
    if not callable(model):
        raise GraphError(f"from_native wraps a Keras model or a callable, got {type(model).__name__}; for a d5.Network "
                         "use from_model")
    TensorFlowGraphExecutor.check_device(device)
    found = model_variables(model, variables)
    params = [(name, variable.numpy(), trainable) for name, variable, trainable in found]
    native_loss = NativeModelOp(loss, "tensorflow", loss_of=model) if callable(loss) and not isinstance(loss, str) \
        else None
    network = native_network(model, NativeModelOp(model, "tensorflow"), dict(inputs or {"input": None}), input_dtype,
                             params, loss, native_loss, label_dtype, "a Keras loss or a function of (output, label)",
                             params_are_inputs=False)
    return TensorFlowGraphExecutor(network, device=device,
                                   native_variables={name: variable for name, variable, _ in found})

__all__ = ["CAPABILITIES", "NAME", "NATIVE_LOSSES", "TensorFlowGraphExecutor", "custom_op", "native_op", "from_model",
           "from_native", "from_onnx", "AdaGradOptimizer", "AdamOptimizer", "AdamWOptimizer", "GradientDescent",
           "MomentumOptimizer", "RMSPropOptimizer"]
