"""L3: the communication interface distributed optimizers are written against.

Implementations (MPI through mpi4py, with buffer-based calls on contiguous NumPy arrays) subclass
:class:`CommunicationNetwork`; the schemes in :mod:`d5.distributed.optimizer` only use this interface.
"""
from __future__ import annotations

import abc

import numpy as np


class CommunicationNetwork(abc.ABC):
    """Collective and point-to-point communication among ``size`` ranks. Every call takes and returns NumPy
    arrays; implementations count the bytes and time each rank spends communicating."""

    @property
    @abc.abstractmethod
    def rank(self) -> int:
        """This process's rank, 0 <= rank < size."""

    @property
    @abc.abstractmethod
    def size(self) -> int:
        """The number of ranks."""

    @abc.abstractmethod
    def allreduce(self, array: np.ndarray, op: str = "sum") -> np.ndarray:
        """Element-wise reduction over all ranks; every rank gets the result."""

    @abc.abstractmethod
    def broadcast(self, array: np.ndarray, root: int = 0) -> np.ndarray:
        """``root``'s array on every rank."""

    @abc.abstractmethod
    def reduce_from_neighbors(self, array: np.ndarray) -> np.ndarray:
        """The sum of this rank's array and its ring neighbours' (rank - 1 and rank + 1)."""

    @abc.abstractmethod
    def send(self, array: np.ndarray, dest: int, tag: int = 0) -> None:
        """Send ``array`` to rank ``dest``."""

    @abc.abstractmethod
    def recv(self, array: np.ndarray, source: int, tag: int = 0) -> np.ndarray:
        """Receive into ``array`` (preallocated, the sender's shape and dtype) from rank ``source``."""
