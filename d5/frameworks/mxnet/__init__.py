"""The MXNet framework (MXNet 1.9 Gluon's machinery: a symbol run by a ``CachedOp`` with static allocation, as a
hybridized block runs, ``mx.autograd``): d5 networks as one composed MXNet graph per set of fed inputs and input
signature (see :mod:`d5.frameworks.mxnet.executor`).

Importing this package imports MXNet (with the ``numpy.bool`` alias MXNet 1.9.1 needs under NumPy >= 1.24);
``import d5`` does not.

>>> import numpy as np, d5
>>> from d5.frameworks import mxnet as d5mx
>>> executor = d5mx.from_model(d5.models.lenet5())
>>> batch = {"input": np.zeros((2, 1, 28, 28), np.float32), "label": np.array([1, 2])}
>>> sorted(executor.inference_and_backprop(batch))
['loss', 'output']
>>> executor.network.fetch_tensor("conv1.weight_grad").shape
(6, 1, 5, 5)
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from d5.frameworks import require_installed

require_installed("mxnet")  # a d5 error naming the extra, not a bare ModuleNotFoundError

import mxnet as mx  # noqa: E402

from d5.errors import GraphError  # noqa: E402
from d5.frameworks.base import (DEFAULT_FALLBACK, NATIVE_LOSSES, Capabilities, NativeModelOp,  # noqa: E402, F401
                                from_onnx_of, native_network)
from d5.frameworks.mxnet.custom_op import custom_op, native_op  # noqa: E402
from d5.frameworks.mxnet.executor import MXNetGraphExecutor  # noqa: E402
from d5.frameworks.mxnet.optimizers import (AdaGradOptimizer, AdamOptimizer, AdamWOptimizer,  # noqa: E402
                                            GradientDescent, MomentumOptimizer, RMSPropOptimizer)
from d5.network.graph import Network  # noqa: E402

NAME = "mxnet"

CAPABILITIES = Capabilities(gpu=True, trainable=True, custom_ops=("python", "cpp"), zero_copy_fetch=False)


def from_model(network: Network, *, device: Any = None, fallback: Any = DEFAULT_FALLBACK) -> MXNetGraphExecutor:
    """An executor running ``network`` (copied: ``executor.graph``) with native MXNet operators.

    ``fallback`` (:data:`d5.frameworks.base.FALLBACKS`): by default operators without an MXNet mapping run the
    reference implementation through the custom-op bridge, with a warning naming them; ``'none'`` refuses them
    with UnsupportedOperatorError, ``'onnx'`` also runs operators d5 does not implement on onnx.reference."""
    return MXNetGraphExecutor(network, device=device, fallback=fallback)


from_onnx = from_onnx_of(from_model)


def block_parameters(block: Any) -> list[tuple[str, Any, bool]]:
    """(name, NDArray, trainable) of a Gluon block's initialized parameters (``collect_params()``)."""
    params = getattr(block, "collect_params", None)
    if params is None:
        raise GraphError(f"from_native: {type(block).__name__} is not a Gluon block; pass an mx.gluon.Block (or "
                         "HybridBlock) whose parameters are initialized")
    found = []
    for name, param in params().items():
        try:
            data = param.data()
        except Exception as err:  # an uninitialized or deferred parameter: MXNet's message names neither
            raise GraphError(f"from_native: parameter {name!r} of {type(block).__name__} has no value yet ({err}); "
                             "call block.initialize() and run it once on a batch first") from None
        found.append((name, data, param.grad_req != "null"))
    if not found:
        raise GraphError(f"from_native: {type(block).__name__} has no parameters to train")
    return found


def from_native(model: Any, loss: Any = None, inputs: Mapping[str, Sequence | None] | None = None, *,
                input_dtype: Any = "float32", label_dtype: Any = "int64", device: Any = None) -> Any:
    """An executor for a user's Gluon block: its parameters are the live state (trained in place, through their
    own gradient buffers); d5's optimizers, metrics and recipes work on it unchanged.

    ``inputs`` names the block's inputs with their shapes (default ``{'input': None}``, unknown shape); its output
    is ``'output'``. ``loss`` -- a Gluon loss (``mx.gluon.loss.SoftmaxCrossEntropyLoss()``, averaged over the batch),
    a function of ``(output, label)`` returning the loss, or a loss operator's name (``NATIVE_LOSSES``) -- adds input
    ``'label'`` and output ``'loss'``.

    >>> import numpy as np, mxnet as mx
    >>> from d5.frameworks import mxnet as d5mx
    >>> net = mx.gluon.nn.Dense(3, in_units=4, prefix="dense_")
    >>> net.initialize()
    >>> executor = d5mx.from_native(net, mx.gluon.loss.SoftmaxCrossEntropyLoss(), {"input": ("N", 4)})
    >>> out = executor.inference_and_backprop({"input": np.ones((5, 4), np.float32), "label": np.zeros(5, np.int64)})
    >>> executor.network.get_params(), executor.network.fetch_tensor("dense_weight_grad").shape
    (['dense_weight', 'dense_bias'], (3, 4))
    """
    if not callable(model):
        raise GraphError(f"from_native wraps a Gluon block, got {type(model).__name__}; for a d5.Network use "
                         "from_model")
    MXNetGraphExecutor.check_device(device)
    found = block_parameters(model)
    params = [(name, data.asnumpy(), trainable) for name, data, trainable in found]
    native_loss = NativeModelOp(_mean_loss(loss), "mxnet", loss_of=model) if callable(loss) and \
        not isinstance(loss, str) else None
    network = native_network(model, NativeModelOp(model, "mxnet"), dict(inputs or {"input": None}), input_dtype,
                             params, loss, native_loss, label_dtype, "a Gluon loss or a function of (output, label)",
                             params_are_inputs=False)
    return MXNetGraphExecutor(network, device=device, native_params={name: data for name, data, _ in found})


def _mean_loss(loss: Any) -> Any:
    """A Gluon loss gives one value per sample: d5's loss is their mean (what ``Trainer.step(batch_size)`` does)."""
    if not isinstance(loss, mx.gluon.loss.Loss):
        return loss

    def mean(output, label):
        return loss(output, label).mean().reshape(())  # 0-d, as every d5 loss (legacy mean gives shape (1,))

    mean.__name__ = type(loss).__name__
    return mean


__all__ = ["CAPABILITIES", "NAME", "NATIVE_LOSSES", "MXNetGraphExecutor", "custom_op", "native_op", "from_model",
           "from_native", "from_onnx", "AdaGradOptimizer", "AdamOptimizer", "AdamWOptimizer", "GradientDescent",
           "MomentumOptimizer", "RMSPropOptimizer"]
