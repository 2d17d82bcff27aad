"""L3: the communication interface distributed optimizers are written against.

Implementations (MPI through mpi4py: :class:`d5.distributed.mpi.MPICommunicationNetwork`) subclass
:class:`CommunicationNetwork`; the schemes in :mod:`d5.distributed` only use this interface.

Conventions every implementation keeps:

* **Buffers** are C-contiguous NumPy arrays of a plain numeric (or bool) dtype; anything else is refused with
  :class:`~d5.errors.DistributedError` before any rank communicates (never silently copied or pickled).
* **Results**: a collective returns a new array unless ``out=`` is given; ``out=array`` works in place (the hot
  path: no allocation). ``recv``/``irecv`` always receive into the array they are given.
* **Order**: every rank calls the same collectives in the same order with the same shapes and dtypes (as in MPI);
  ``name=`` labels a collective's tensor in error and time-out messages.
* **reduce_from_neighbors** on a ring of ``P`` ranks is always three terms, ``x[r] + x[(r-1) % P] + x[(r+1) % P]``:
  for ``P == 2`` the single neighbour is both left and right and counts twice (``x[r] + 2 * x[other]``); for
  ``P == 1`` the rank is its own neighbour (``3 * x[r]``). So ``reduce_from_neighbors(g) / 3``, as in the seeds'
  ``ConsistentNeighbors``, is the symmetric, doubly stochastic ring average (D-PSGD's mixing matrix
  ``(I + S + S^T) / 3``) for every ``P``: the weights sum to one and the mean over ranks is preserved.
* **Counters** (``stats()``): per rank, the calls, the *logical payload* bytes sent and received (what this rank
  contributes to and gets from other ranks, not the wire bytes of the algorithm MPI picks; nothing with one rank)
  and the seconds spent blocked in communication. See :class:`CommunicationCounters`.

>>> sorted(REDUCE_OPS)
['max', 'mean', 'min', 'prod', 'sum']
"""
from __future__ import annotations

import abc
from typing import Any, Iterable, Sequence

import numpy as np

from d5.errors import DistributedError

#: The element-wise reductions ``allreduce``/``iallreduce`` accept (``mean`` is the sum divided by ``size``).
REDUCE_OPS = ("sum", "prod", "max", "min", "mean")
#: ``recv``/``irecv``/``probe`` from any rank, with any tag.
ANY_SOURCE = -1
ANY_TAG = -1


class CommunicationRequest(abc.ABC):
    """A non-blocking operation in flight (``iallreduce``, ``isend``, ``irecv``). ``test()`` advances it and
    says whether it has completed; ``wait()`` blocks until it has and returns its result (the reduced array, the
    received array, or None for a send). Both may be called again after completion."""

    @abc.abstractmethod
    def test(self) -> bool:
        """True when the operation has completed (never blocks)."""

    @abc.abstractmethod
    def wait(self) -> np.ndarray | None:
        """Block until the operation has completed; its result."""


class CompletedRequest(CommunicationRequest):
    """A request that completed when it was made (an implementation without non-blocking calls).

    >>> CompletedRequest(np.ones(2)).wait()
    array([1., 1.])
    """

    def __init__(self, result: np.ndarray | None = None) -> None:
        self.result = result

    def test(self) -> bool:
        return True

    def wait(self) -> np.ndarray | None:
        return self.result


class CommunicationCounters:
    """Per-rank counters of one communication network, per operation: calls, bytes sent, bytes received and
    seconds. ``record`` is cheap (a dict lookup and four additions): implementations call it on the hot path.

    >>> counters = CommunicationCounters()
    >>> counters.record("allreduce", 800, 800, 0.5)
    >>> counters.record("allreduce", 0, 0, 0.25, calls=0)   # a wait() on a non-blocking call: time only
    >>> counters.totals()
    {'calls': 1, 'bytes_sent': 800, 'bytes_received': 800, 'seconds': 0.75}
    """

    __slots__ = ("ops", "checks")

    def __init__(self) -> None:
        self.ops: dict[str, list] = {}  # op -> [calls, bytes sent, bytes received, seconds]
        self.checks = 0  # consistency checks of collective arguments (not counted as calls)

    def record(self, op: str, sent: int, received: int, seconds: float, calls: int = 1) -> None:
        counts = self.ops.get(op)
        if counts is None:
            counts = self.ops[op] = [0, 0, 0, 0.0]
        counts[0] += calls
        counts[1] += sent
        counts[2] += received
        counts[3] += seconds

    def totals(self) -> dict[str, Any]:
        calls = sum(counts[0] for counts in self.ops.values())
        sent = sum(counts[1] for counts in self.ops.values())
        received = sum(counts[2] for counts in self.ops.values())
        seconds = sum(counts[3] for counts in self.ops.values())
        return {"calls": calls, "bytes_sent": sent, "bytes_received": received, "seconds": seconds}

    def per_op(self) -> dict[str, dict[str, Any]]:
        return {op: {"calls": c, "bytes_sent": s, "bytes_received": r, "seconds": t}
                for op, (c, s, r, t) in sorted(self.ops.items())}

    def reset(self) -> None:
        self.ops.clear()
        self.checks = 0


class CommunicationNetwork(abc.ABC):
    """Collective and point-to-point communication among ``size`` ranks (see the module docstring for the
    conventions). Subclasses implement the abstract methods; the others have portable defaults built on them
    (an implementation overrides them with native calls). Counting goes through ``self.counters``."""

    @property
    def counters(self) -> CommunicationCounters:
        """This rank's counters (created on first use, so subclasses need not call ``__init__``)."""
        counters = self.__dict__.get("_counters")
        if counters is None:
            counters = self.__dict__["_counters"] = CommunicationCounters()
        return counters

    # ------------------------------------------------------------------------------------------ identity
    @property
    @abc.abstractmethod
    def rank(self) -> int:
        """This process's rank, 0 <= rank < size."""

    @property
    @abc.abstractmethod
    def size(self) -> int:
        """The number of ranks."""

    # ------------------------------------------------------------------------------------------ collectives
    @abc.abstractmethod
    def allreduce(self, array: np.ndarray, op: str = "sum", out: np.ndarray | None = None, *,
                  name: str | None = None) -> np.ndarray:
        """Element-wise ``op`` (one of :data:`REDUCE_OPS`) over all ranks; every rank gets the result, in a new
        array or in ``out`` (``out=array``: in place)."""

    @abc.abstractmethod
    def broadcast(self, array: np.ndarray, root: int = 0, out: np.ndarray | None = None, *,
                  name: str | None = None) -> np.ndarray:
        """``root``'s array on every rank (every rank passes an array of root's shape and dtype; only root's
        values are read), in a new array or in ``out`` (``out=array``: received in place)."""

    def gather(self, array: np.ndarray, root: int = 0, out: np.ndarray | None = None, *,
               name: str | None = None) -> np.ndarray | None:
        """On ``root``: every rank's array stacked, shape ``(size, *array.shape)`` (row ``i`` from rank ``i``);
        None on the other ranks. Every rank passes the same shape and dtype."""
        self._check_root(root)
        if self.rank != root:
            self.send(array, root, tag=_GATHER_TAG)
            return None
        result = np.empty((self.size,) + array.shape, array.dtype) if out is None else out
        for source in range(self.size):
            if source == root:
                result[source] = array
            else:
                self.recv(result[source], source, tag=_GATHER_TAG)
        return result

    def allgather(self, array: np.ndarray, out: np.ndarray | None = None, *,
                  name: str | None = None) -> np.ndarray:
        """Every rank's array stacked on every rank, shape ``(size, *array.shape)``."""
        stacked = self.gather(array, 0, name=name)
        if stacked is None:
            stacked = np.empty((self.size,) + array.shape, array.dtype)
        return self.broadcast(stacked, 0, out, name=name)

    @abc.abstractmethod
    def reduce_from_neighbors(self, array: np.ndarray, out: np.ndarray | None = None, *,
                              name: str | None = None) -> np.ndarray:
        """``x[rank] + x[(rank - 1) % size] + x[(rank + 1) % size]``: always three terms (see the module
        docstring: with 2 ranks the other counts twice, with 1 rank the result is ``3 * x``)."""

    def barrier(self) -> None:
        """Return only when every rank has called ``barrier``."""
        self.allreduce(np.zeros(1, np.int8), "max")

    # ------------------------------------------------------------------------------------------ point to point
    @abc.abstractmethod
    def send(self, array: np.ndarray, dest: int, tag: int = 0) -> None:
        """Send ``array`` to rank ``dest``."""

    @abc.abstractmethod
    def recv(self, array: np.ndarray, source: int, tag: int = 0) -> np.ndarray:
        """Receive into ``array`` (preallocated, the sender's shape and dtype) from rank ``source`` (or
        :data:`ANY_SOURCE`); returns ``array``."""

    def probe(self, source: int = ANY_SOURCE, tag: int = ANY_TAG) -> tuple[int, int, int] | None:
        """``(source, tag, nbytes)`` of a message that ``recv`` could receive now, or None (never blocks)."""
        raise DistributedError(f"{type(self).__name__} does not implement probe(); use recv() from a known rank")

    # ------------------------------------------------------------------------------------------ non-blocking
    def iallreduce(self, array: np.ndarray, op: str = "sum", out: np.ndarray | None = None, *,
                   name: str | None = None) -> CommunicationRequest:
        """Start ``allreduce``; ``wait()`` returns the result. ``array`` and ``out`` must stay untouched until
        then. (The default runs the blocking call; real implementations overlap.)"""
        return CompletedRequest(self.allreduce(array, op, out, name=name))

    def isend(self, array: np.ndarray, dest: int, tag: int = 0) -> CommunicationRequest:
        """Start sending ``array`` to ``dest`` (leave it untouched until the request completes)."""
        raise DistributedError(f"{type(self).__name__} does not implement isend(); use send()")

    def irecv(self, array: np.ndarray, source: int, tag: int = 0) -> CommunicationRequest:
        """Start receiving into ``array``; ``wait()`` returns it."""
        raise DistributedError(f"{type(self).__name__} does not implement irecv(); use recv()")

    def testall(self, requests: Sequence[CommunicationRequest]) -> bool:
        """Advance every request; True when all have completed (never blocks)."""
        return all([request.test() for request in requests])  # a list: test every one, not up to the first False

    def waitall(self, requests: Iterable[CommunicationRequest]) -> list[np.ndarray | None]:
        """Wait for every request; their results, in order."""
        return [request.wait() for request in requests]

    # ------------------------------------------------------------------------------------------ counters
    def stats(self) -> dict[str, Any]:
        """This rank's counters since creation or the last ``reset_stats()``: ``rank``, ``size``, ``calls``,
        ``bytes_sent``, ``bytes_received``, ``seconds`` (blocked in communication; for non-blocking calls the
        time spent starting, testing and waiting), ``checks`` (consistency checks of collective arguments, not
        counted as calls) and ``ops`` (the same per operation)."""
        counters = self.counters
        return {"rank": self.rank, "size": self.size, **counters.totals(), "checks": counters.checks,
                "ops": counters.per_op()}

    def reset_stats(self) -> None:
        """Zero this rank's counters."""
        self.counters.reset()

    @property
    def communication_time(self) -> float:
        """Cumulative seconds this rank spent communicating (what :class:`d5.PhaseBreakdown` reads)."""
        return float(sum(counts[3] for counts in self.counters.ops.values()))

    def _check_root(self, root: int) -> None:
        if isinstance(root, bool) or not isinstance(root, (int, np.integer)) or not 0 <= root < self.size:
            raise DistributedError(f"root={root!r} is not a rank: it must be an int in [0, {self.size})")


_GATHER_TAG = 32001  # the default gather's point-to-point messages
