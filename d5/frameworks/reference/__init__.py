"""The reference framework: NumPy plus the C++ kernels of d5._C. Every other framework is checked against it.

>>> import d5
>>> from d5.frameworks import reference
>>> executor = reference.from_model(d5.models.lenet5())
>>> sorted(executor.network.outputs)
['loss', 'output']
"""
from __future__ import annotations

import importlib
from typing import Any

from d5.frameworks.reference.custom_op import custom_op
from d5.frameworks.reference.executor import ReferenceGraphExecutor
from d5.frameworks.reference.kernels import num_threads, set_num_threads
from d5.network.graph import Network

NAME = "reference"


def from_model(network: Network, device: Any = None, fallback: bool = False) -> ReferenceGraphExecutor:
    """An executor running ``network`` (copied; ``executor.network`` is the live copy) on the reference framework.

    ``fallback=True`` runs operators d5 does not implement on onnx.reference (inference only, with a warning
    naming them); otherwise they raise UnsupportedOperatorError."""
    return ReferenceGraphExecutor(network, device=device, fallback=fallback)


def __getattr__(name: str):
    # The optimizers live in d5.training; importing them lazily keeps `import d5.frameworks.reference` light.
    # import_module, not `from ... import`, which would re-enter this __getattr__ for the submodule itself.
    optimizers = importlib.import_module("d5.frameworks.reference.optimizers")
    if name in optimizers.__all__:
        return getattr(optimizers, name)
    raise AttributeError(f"module 'd5.frameworks.reference' has no attribute {name!r}")


__all__ = ["NAME", "ReferenceGraphExecutor", "custom_op", "from_model", "num_threads", "set_num_threads", "AdaGradOptimizer", "AdamOptimizer",
           "AdamWOptimizer", "GradientDescent", "MomentumOptimizer", "RMSPropOptimizer"]
