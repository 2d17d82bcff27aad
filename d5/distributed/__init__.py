"""L3 — distributed training: the communication interface and the distributed-optimizer base class.

Framework-neutral: nothing here imports a framework or MPI at import time.
"""
from d5.distributed.communication import CommunicationNetwork
from d5.distributed.optimizer import DistributedOptimizer

__all__ = ["CommunicationNetwork", "DistributedOptimizer"]
