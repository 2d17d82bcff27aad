"""L3: distributed optimizers wrap a framework-neutral ThreeStepOptimizer and a CommunicationNetwork.

A scheme overrides ``step``; the seeds' ``ConsistentNeighbors`` is the model (about 15 lines, see
``examples/consistent_neighbors.py``):

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

The shipped schemes (:mod:`d5.distributed.schemes`) are built from the helpers here: :meth:`local_pass` (the
three-step hooks around this rank's forward and backward pass, the divergence check), :meth:`gradients` and
:meth:`apply_gradients` (``prepare_gradients`` when the optimizer needs every gradient at once, so clipping by
the global norm sees the averaged gradients, then ``update_rule`` per parameter), and :meth:`synchronize_start`
(rank 0's parameters on every rank, after checking every rank holds the same tensors).
"""
from __future__ import annotations

import abc
import hashlib
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
                                       "ThreeStepOptimizer such as d5.MomentumOptimizer (a framework's native "
                                       "optimizer is distributed with d5.distributed.DataParallel)")
        if getattr(base_optimizer, "executor", None) is None:
            raise DistributedError(f"{type(base_optimizer).__name__} was created without an executor; pass the "
                                   "GraphExecutor to the base optimizer")
        self.base_optimizer = base_optimizer
        self.communication = communication
        self.executor = base_optimizer.executor
        self.network = self.executor.network
        self.loss = base_optimizer.loss
        self.steps = 0
        self._pairs: list[tuple[str, str]] | None = None

    #: Whether this rank serves the others instead of training (the asynchronous parameter server's rank 0).
    is_server = False
    #: The fewest ranks the scheme runs on (recipes refuse fewer on every rank, before anything is built).
    min_ranks = 1

    def finish(self) -> None:
        """End the run on this rank (a scheme with a stop protocol overrides it); a training loop calls it on every
        rank after its last step."""

    @property
    def rank(self) -> int:
        return self.communication.rank

    @property
    def size(self) -> int:
        return self.communication.size

    @abc.abstractmethod
    def step(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """One training step of this scheme; returns the executor's outputs."""

    # ------------------------------------------------------------------ building blocks of a step
    def local_pass(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The base optimizer's hooks around this rank's forward and backward pass: ``new_input()``,
        ``prepare_param`` per parameter, the pass, and the divergence check (a NaN loss raises before any update)."""
        if self.steps == 0:
            self.synchronize_start()
        optimizer = self.base_optimizer
        optimizer.new_input()
        for param in self.network.get_params():
            optimizer.prepare_param(param)
        outputs = self.executor.inference_and_backprop(inputs, self.loss)
        optimizer.finish_step(outputs)
        self.steps += 1
        return outputs

    def gradients(self) -> dict[str, np.ndarray]:
        """This rank's gradient of every trainable parameter after :meth:`local_pass`, by parameter name."""
        if self._pairs is None:
            self._pairs = list(self.network.gradient(self.loss))
        names = [grad for _, grad in self._pairs]
        return {param: grad for (param, _), grad in zip(self._pairs, self.network.fetch_tensors(names))}

    def apply_gradients(self, gradients: Mapping[str, np.ndarray]) -> None:
        """Update every parameter from ``gradients`` (by parameter name) with the base optimizer's rule; the
        optimizer sees them all first when it needs to (``uses_all_gradients``: clipping by the global norm)."""
        optimizer, network = self.base_optimizer, self.network
        names = list(gradients)
        params = dict(zip(names, network.fetch_tensors(names)))
        if getattr(optimizer, "uses_all_gradients", False):
            optimizer.prepare_gradients(gradients, params)
        for name in names:
            network.feed_tensor(name, optimizer.update_rule(gradients[name], params[name], name), is_param=True)

    def synchronize_start(self) -> None:
        """Before the first step: check that every rank holds the same parameters (names, shapes, dtypes) and give
        every rank rank 0's values, so the ranks start from one model. A mismatch raises DistributedError on every
        rank (none is left waiting), naming the ranks and the first differing tensor."""
        names = list(self.network.graph.params)
        values = self.network.fetch_tensors(names)
        signature = [f"{name}:{tuple(np.shape(v))}:{np.asarray(v).dtype}" for name, v in zip(names, values)]
        check_same_on_every_rank(self.communication, signature, "parameters")
        for name, value in zip(names, values):
            array = np.ascontiguousarray(value)
            self.network.feed_tensor(name, self.communication.broadcast(array, root=0))


def _digest(text: str) -> np.uint64:
    return np.frombuffer(hashlib.sha256(text.encode()).digest()[:8], dtype=np.uint64)[0]


def check_same_on_every_rank(comm: CommunicationNetwork, items: list[str], what: str) -> None:
    """Raise DistributedError on every rank unless every rank passes the same ``items`` (e.g. tensor signatures
    ``name:shape:dtype``); the error names the ranks that differ from rank 0 and the first differing item."""
    total = comm.allgather(np.array([_digest("\n".join(items))], dtype=np.uint64)).reshape(-1)
    if np.all(total == total[0]):
        return
    counts = comm.allgather(np.array([len(items)], dtype=np.int64)).reshape(-1)
    width = int(counts.max())
    mine = np.zeros(width, dtype=np.uint64)
    mine[:len(items)] = [_digest(item) for item in items]
    table = comm.allgather(mine).reshape(comm.size, width)
    differ = [rank for rank in range(comm.size) if not np.array_equal(table[rank], table[0])
              or counts[rank] != counts[0]]
    first = int(np.argmax((table[differ] != table[0]).any(axis=0))) if differ else 0
    here = items[first] if first < len(items) else "(none)"
    raise DistributedError(f"the ranks do not hold the same {what}: ranks {differ} differ from rank 0 (counts "
                           f"{counts.tolist()}), first at #{first} (here on rank {comm.rank}: {here!r}); build the same "
                           "network and optimizer on every rank (the same recipe and overrides)")
