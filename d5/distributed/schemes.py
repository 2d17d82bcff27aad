"""L3: the distributed training schemes of the seeds, each a :class:`DistributedOptimizer` around any
ThreeStepOptimizer (``d5.MomentumOptimizer``, ``d5.AdamOptimizer``, a user's own), on any framework's executor.

=============================  =====================================================  ==========================
scheme                         what a step does                                       equal to one process?
=============================  =====================================================  ==========================
``ConsistentDecentralized``    allreduce of the gradients, every rank updates         yes (global batch)
``ConsistentParameterServer``  rank 0 gathers and averages the gradients, updates,      yes (global batch)
                               broadcasts the parameters
``ModelAverageDecentralized``  local steps; the parameters averaged every ``k``        with ``k=1`` and a rule
                                                                                      linear in the gradient
                                                                                      (SGD, momentum)
``ConsistentNeighbors``        the seeds' scheme: each rank updates its own model      no
                               with the gradient averaged over itself and its two
                               ring neighbours
``DPSGD``                      Lian et al. 2017 (arXiv 1705.09056, Algorithm 1): the   no
                               model averaged with the ring neighbours, then the
                               local gradient applied to it
=============================  =====================================================  ==========================

``ConsistentNeighbors`` and ``DPSGD`` differ in *what* the neighbours average: the seeds' scheme mixes gradients
and leaves every rank's model to drift on its own (ranks agree only in expectation), D-PSGD mixes the models
themselves every step (they contract towards their mean, the paper's consensus), and applies the gradient
computed at the rank's model before mixing. Each batch a rank passes to ``step`` is its own shard of the global
batch (:class:`d5.distributed.DistributedSampler`); "equal to one process" means: the same parameters as one
process training on the concatenated batches, when the loss is a mean over the batch and the shards are of one
size (batch normalization computes its statistics per rank, as in every data-parallel framework).

Every scheme starts by checking that the ranks hold the same parameters and giving them rank 0's values.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from d5.distributed.async_ps import InconsistentParameterServer
from d5.distributed.communication import CommunicationNetwork
from d5.distributed.optimizer import DistributedOptimizer
from d5.errors import DistributedError


class ConsistentDecentralized(DistributedOptimizer):
    """Synchronous data parallelism: the gradients averaged by allreduce, the same update on every rank.

    ``compression`` (a :mod:`d5.distributed.compression` piece or a spec such as ``"topk:0.01"``) sends each
    gradient compressed -- by allreduce where the payloads can be summed, by allgather where they cannot -- and
    :attr:`compressed_bytes` counts what this rank put on the wire; every rank still applies the same average."""

    def __init__(self, base_optimizer: Any, communication: CommunicationNetwork, compression: Any = None) -> None:
        super().__init__(base_optimizer, communication)
        from d5.distributed.compression import Compressor, compression_by_name

        if isinstance(compression, str):
            compression = compression_by_name(compression)
        if compression is not None and not isinstance(compression, Compressor):
            raise DistributedError(f"compression must be a d5.distributed.compression piece or a spec such as "
                                   f"'topk:0.01', got {type(compression).__name__}")
        self.compression = compression
        self.compressed_bytes = 0

    def step(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        outputs = self.local_pass(inputs)
        comm, scale = self.communication, 1.0 / self.size
        if self.compression is None:
            # A Python float keeps each gradient's dtype (float32 stays float32).
            averaged = {name: comm.allreduce(np.ascontiguousarray(grad)) * scale
                        for name, grad in self.gradients().items()}
        else:
            from d5.distributed.compression import allreduce_compressed

            averaged = {}
            for name, grad in self.gradients().items():
                total, sent = allreduce_compressed(comm, grad, name, self.compression)
                averaged[name] = total * scale
                self.compressed_bytes += sent
        self.apply_gradients(averaged)
        return outputs


class ConsistentParameterServer(DistributedOptimizer):
    """Synchronous parameter server: every rank computes the gradients of its shard; rank 0 (the server, which
    also computes) gathers and averages them, applies the base optimizer, and sends the parameters back. Only
    rank 0's optimizer state is used (the workers' stays empty)."""

    #: The fewest ranks it runs on (a server and a worker).
    min_ranks = 2

    def __init__(self, base_optimizer: Any, communication: CommunicationNetwork) -> None:
        super().__init__(base_optimizer, communication)
        if communication.size < 2:
            raise DistributedError("ConsistentParameterServer needs at least 2 ranks (a server and a worker); run it "
                                   "with mpiexec -n 2 or more, or use ConsistentDecentralized on one rank")

    def step(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        outputs = self.local_pass(inputs)
        comm = self.communication
        gradients = self.gradients()
        gathered = {name: comm.gather(np.ascontiguousarray(grad), root=0) for name, grad in gradients.items()}
        if comm.rank == 0:
            self.apply_gradients({name: (stack.sum(axis=0) / comm.size).astype(gradients[name].dtype, copy=False)
                                  for name, stack in gathered.items()})
        names = list(gradients)
        for name, value in zip(names, self.network.fetch_tensors(names)):
            self.network.feed_tensor(name, comm.broadcast(np.ascontiguousarray(value), root=0))
        return outputs


class ModelAverageDecentralized(DistributedOptimizer):
    """Local SGD: every rank steps on its own shard with the base optimizer; every ``k`` steps the parameters are
    averaged by allreduce (McMahan et al.'s federated averaging, Lin et al.'s local SGD). ``k=1`` with a rule
    linear in the gradient (SGD, momentum) equals one process on the global batch."""

    def __init__(self, base_optimizer: Any, communication: CommunicationNetwork, k: int = 1) -> None:
        super().__init__(base_optimizer, communication)
        if not isinstance(k, (int, np.integer)) or k < 1:
            raise DistributedError(f"ModelAverageDecentralized: k (steps between averages) must be an integer >= 1, "
                                   f"got {k!r}")
        self.k = int(k)

    def step(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        outputs = self.local_pass(inputs)
        self.apply_gradients(self.gradients())
        if self.steps % self.k == 0:
            self.average_parameters()
        return outputs

    def average_parameters(self) -> None:
        """Every trainable parameter replaced by its mean over the ranks."""
        comm, scale = self.communication, 1.0 / self.size
        names = self.network.get_params()
        for name, value in zip(names, self.network.fetch_tensors(names)):
            mean = comm.allreduce(np.ascontiguousarray(value)) * scale
            self.network.feed_tensor(name, mean.astype(np.asarray(value).dtype, copy=False))


class ConsistentNeighbors(DistributedOptimizer):
    """The seeds' scheme (``004_*``, "follows communication scheme from arXiv 1705.09056"): each rank's gradient
    averaged with its two ring neighbours', applied to the rank's own model. Written exactly as the seed writes it
    (``examples/consistent_neighbors.py`` is the user's copy)."""

    def step(self, inputs):
        if self.steps == 0:
            self.synchronize_start()
        self.steps += 1
        self.base_optimizer.new_input()
        for param in self.network.get_params():
            self.base_optimizer.prepare_param(param)
        output = self.executor.inference_and_backprop(inputs, self.base_optimizer.loss)
        gradients = self.network.gradient(self.base_optimizer.loss)
        for param_name, grad_name in gradients:
            param, grad = self.network.fetch_tensors([param_name, grad_name])
            grad = self.communication.reduce_from_neighbors(grad) / 3
            param = self.base_optimizer.update_rule(grad, param, param_name)
            self.network.feed_tensor(param_name, param)
        return output


class DPSGD(DistributedOptimizer):
    """Decentralized parallel SGD (Lian et al. 2017, arXiv 1705.09056, Algorithm 1, a ring with weights 1/3):
    the gradient is taken at the rank's model ``x``, then ``x <- update_rule(g, mean of x over the rank and its two
    ring neighbours)``. The models contract towards their average every step; see the module docstring for how
    this differs from the seeds' ConsistentNeighbors."""

    def step(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        outputs = self.local_pass(inputs)
        gradients = self.gradients()
        names = list(gradients)
        for name, value in zip(names, self.network.fetch_tensors(names)):
            mixed = self.communication.reduce_from_neighbors(np.ascontiguousarray(value)) / 3
            self.network.feed_tensor(name, mixed.astype(np.asarray(value).dtype, copy=False))
        self.apply_gradients(gradients)
        return outputs


#: The schemes by the names recipes take (``--scheme``); the asynchronous parameter server lives in its own module.
SCHEMES = {"allreduce": ConsistentDecentralized, "ps": ConsistentParameterServer,
           "async-ps": InconsistentParameterServer, "model-averaging": ModelAverageDecentralized,
           "neighbors": ConsistentNeighbors, "dpsgd": DPSGD}


def scheme_by_name(name: str) -> type[DistributedOptimizer]:
    """The scheme class for a recipe's ``--scheme`` value.

    >>> scheme_by_name("allreduce").__name__
    'ConsistentDecentralized'
    """
    try:
        return SCHEMES[name]
    except KeyError:
        raise DistributedError(f"unknown scheme {name!r}; choose one of {sorted(SCHEMES)}") from None
