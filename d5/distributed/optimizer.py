"""L3: distributed optimizers wrap a framework-neutral ThreeStepOptimizer and a CommunicationNetwork.

A scheme overrides ``step``; the seeds' ``ConsistentNeighbors`` is the model (about 15 lines):

>>> from d5.distributed import DistributedOptimizer
>>> class ConsistentNeighbors(DistributedOptimizer):
...     def step(self, inputs):
...         self.base_optimizer.new_input()
...         for param in self.network.get_params():
...             self.base_optimizer.prepare_param(param)
...         output = self.executor.inference_and_backprop(inputs, self.base_optimizer.loss)
...         for param_name, grad_name in self.network.gradient(self.base_optimizer.loss):
...             param, grad = self.network.fetch_tensors([param_name, grad_name])
...             grad = self.communication.reduce_from_neighbors(grad) / 3
...             param = self.base_optimizer.update_rule(grad, param, param_name)
...             self.network.feed_tensor(param_name, param)
...         return output
"""
from __future__ import annotations

import abc
from typing import Any, Mapping

import numpy as np

from d5.distributed.communication import CommunicationNetwork
from d5.errors import DistributedError


class DistributedOptimizer(abc.ABC):
    """Base class of distributed training schemes: ``step(inputs)`` trains on this rank's batch."""

    def __init__(self, base_optimizer: Any, communication: CommunicationNetwork) -> None:
        for hook in ("new_input", "prepare_param", "update_rule"):
            if not callable(getattr(base_optimizer, hook, None)):
                raise DistributedError(f"{type(base_optimizer).__name__} has no {hook}(); distributed schemes need a "
                                       "ThreeStepOptimizer such as d5.MomentumOptimizer")
        self.base_optimizer = base_optimizer
        self.communication = communication
        self.executor = base_optimizer.executor
        self.network = self.executor.network

    @abc.abstractmethod
    def step(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """One training step of this scheme; returns the executor's outputs."""
