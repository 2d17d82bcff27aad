"""L3 — distributed training: the communication interface, its MPI implementation, fault handling, the
communication-volume metric and the distributed-optimizer base class.

Framework-neutral, and nothing here imports a framework or MPI at import time: ``MPICommunicationNetwork``,
``install_fault_handlers`` and ``CommunicationVolume`` resolve on first use (``d5.distributed.mpi`` imports
mpi4py, which initializes MPI).
"""
from __future__ import annotations

import importlib
from typing import Any

from d5.distributed.communication import (ANY_SOURCE, ANY_TAG, REDUCE_OPS, CommunicationCounters,
                                          CommunicationNetwork, CommunicationRequest, CompletedRequest)
from d5.distributed.optimizer import DistributedOptimizer

_LAZY = {"MPICommunicationNetwork": "d5.distributed.mpi", "MPIRequest": "d5.distributed.mpi",
         "install_fault_handlers": "d5.distributed.faults", "FaultHandlers": "d5.distributed.faults",
         "Watchdog": "d5.distributed.faults", "CommunicationVolume": "d5.distributed.metrics",
         # the schemes and the sampler (their modules, other files): resolved the same way, on first use
         "ConsistentDecentralized": "d5.distributed.schemes", "ConsistentParameterServer": "d5.distributed.schemes",
         "ModelAverageDecentralized": "d5.distributed.schemes", "ConsistentNeighbors": "d5.distributed.schemes",
         "DPSGD": "d5.distributed.schemes", "InconsistentParameterServer": "d5.distributed.async_ps", "SCHEMES": "d5.distributed.schemes", "scheme_by_name": "d5.distributed.schemes",
         "DistributedSampler": "d5.distributed.sampler",
         **{name: "d5.distributed.compression" for name in (
             "Payload", "Compressor", "StochasticCompressor", "NoCompression", "FP16", "TopK", "RandomK",
             "ErrorFeedback", "compression_by_name", "allreduce_compressed", "CompressedSum")},
         **{name: "d5.distributed.quantization" for name in ("QSGD", "TernGrad", "OneBit")},
         **{name: "d5.distributed.data_parallel" for name in ("DataParallel", "BucketLayout", "BucketReducer")}}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'd5.distributed' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = ["CommunicationNetwork", "CommunicationRequest", "CompletedRequest", "CommunicationCounters",
           "DistributedOptimizer", "REDUCE_OPS", "ANY_SOURCE", "ANY_TAG", *_LAZY]
