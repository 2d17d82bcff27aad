"""L3: :class:`CommunicationVolume` — how much a rank communicated, as a metric of the training level.

It reads a :class:`~d5.distributed.communication.CommunicationNetwork`'s counters (``stats()``) and works both
ways the training level measures:

* as a **training metric** (a Trainer event): ``Trainer(..., events=[CommunicationVolume()])`` takes the network
  from ``trainer.optimizer.communication`` (a :class:`~d5.distributed.DistributedOptimizer`) unless one is given,
  and records the bytes sent and received and the seconds spent communicating, per epoch and for the run. At the
  end it allgathers every rank's totals (``gather=True``; every rank of the network must then run the Trainer
  with the metric, as in data-parallel training; pass ``gather=False`` when, e.g., a parameter-server rank does
  not train). ``as_dict()`` has ``per_rank``, so a recipe's result file shows each rank's volume.
* as a **test metric** (``begin``/``end`` around an invocation, then ``measure``): the bytes per invocation.

The value is this rank's bytes sent plus received (lower is better). The gather at the end is itself counted in
the network's ``stats()`` but not in the metric.

>>> from d5.distributed.communication import CommunicationNetwork
>>> class Fake(CommunicationNetwork):   # counts an "allreduce" of 8 bytes per call, no peers
...     rank, size = 0, 1
...     def allreduce(self, array, op="sum", out=None, *, name=None):
...         self.counters.record("allreduce", array.nbytes, array.nbytes, 0.001)
...         return array.copy()
...     broadcast = reduce_from_neighbors = send = recv = None
>>> comm = Fake()
>>> volume = CommunicationVolume(comm, gather=False)
>>> for _ in range(volume.reruns):
...     _ = volume.begin(None); _ = comm.allreduce(np.ones(1)); _ = volume.end(None)
>>> volume.measure(None, None)
16.0
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from d5.errors import D5Error
from d5.training.events import check_state, new_state
from d5.training.metrics import TestMetric, TrainingMetric

if TYPE_CHECKING:
    from d5.distributed.communication import CommunicationNetwork
    from d5.training.trainer import EpochStats, Trainer, TrainingStats

#: The counters the metric follows, in the order of its per-rank arrays.
FIELDS = ("bytes_sent", "bytes_received", "calls", "seconds")


def _snapshot(comm: CommunicationNetwork) -> np.ndarray:
    stats = comm.stats()
    return np.array([stats[field] for field in FIELDS], dtype=np.float64)


def _as_dict(values: np.ndarray) -> dict[str, Any]:
    sent, received, calls, seconds = (float(value) for value in values)
    return {"bytes_sent": int(sent), "bytes_received": int(received), "calls": int(calls), "seconds": seconds}


class CommunicationVolume(TrainingMetric, TestMetric):
    """Bytes this rank sent plus received (see the module docstring); ``totals`` holds bytes sent, bytes
    received, calls and seconds for the run, ``epochs`` the same per epoch, ``per_rank`` every rank's totals
    (after a gathered run), and ``mean_bytes`` the bytes per invocation as a test metric.

    ``communication``: the network to follow (default: the Trainer's ``optimizer.communication``). ``gather``:
    allgather every rank's totals at the end of training. ``reruns``: invocations per measurement as a test
    metric.
    """

    name, unit, higher_is_better = "CommunicationVolume", "B", False
    state_fields = ("value",)

    def __init__(self, communication: CommunicationNetwork | None = None, gather: bool = True,
                 reruns: int = 1) -> None:
        if isinstance(reruns, bool) or not isinstance(reruns, int) or reruns < 1:
            raise D5Error(f"CommunicationVolume(reruns={reruns!r}): reruns must be an int >= 1")
        self.communication, self.gather, self.reruns = communication, bool(gather), reruns
        self._comm: CommunicationNetwork | None = communication
        self.value = None
        self.totals = np.zeros(len(FIELDS))
        self.epochs: dict[int, np.ndarray] = {}
        self.per_rank: list[dict[str, Any]] | None = None
        self._mark: np.ndarray | None = None
        self._pending = np.zeros(len(FIELDS))  # counted before a checkpoint, after the last completed epoch
        self._test_samples: list[np.ndarray] = []

    # --------------------------------------------------------------------------------------- the network
    def _network(self, trainer: Trainer | None = None) -> CommunicationNetwork:
        if self._comm is not None:
            return self._comm
        holder = getattr(trainer, "optimizer", None)
        comm = getattr(holder, "communication", None)
        if comm is None or not callable(getattr(comm, "stats", None)):
            raise D5Error("CommunicationVolume needs a communication network: pass CommunicationVolume(comm), or "
                          "train with a distributed optimizer (its .communication is used)")
        self._comm = comm
        return comm

    def _delta(self) -> np.ndarray:
        """The counters' growth since the last mark (plus what a checkpoint carried over); moves the mark."""
        now = _snapshot(self._comm)
        delta = now - self._mark + self._pending
        self._mark, self._pending = now, np.zeros(len(FIELDS))
        return delta

    # --------------------------------------------------------------------------------------- training metric
    def before_training(self, trainer: Trainer) -> None:
        comm = self._network(trainer)
        if not trainer.resumed:
            self.value, self.totals, self.epochs, self.per_rank = None, np.zeros(len(FIELDS)), {}, None
            self._pending = np.zeros(len(FIELDS))
        self._mark = _snapshot(comm)

    def after_epoch(self, trainer: Trainer, epoch: int, stats: EpochStats) -> None:
        delta = self._delta()
        self.totals = self.totals + delta
        # a resumed epoch adds to what it had recorded before the interruption
        self.epochs[epoch] = self.epochs.get(epoch, np.zeros(len(FIELDS))) + delta
        self.value = float(self.totals[0] + self.totals[1])

    def after_training(self, trainer: Trainer, stats: TrainingStats) -> None:
        delta = self._delta()  # what came after the last epoch (e.g. a final synchronization)
        self.totals = self.totals + delta
        self.value = float(self.totals[0] + self.totals[1])
        if self.gather and self._comm.size > 1:
            table = self._comm.allgather(np.ascontiguousarray(self.totals, dtype=np.float64),
                                         name="CommunicationVolume")
            self.per_rank = [{"rank": rank, **_as_dict(row)} for rank, row in enumerate(table)]
            self._mark = _snapshot(self._comm)  # the gather itself is not part of the run
        else:
            self.per_rank = [{"rank": self._comm.rank, **_as_dict(self.totals)}]

    def details(self) -> dict[str, Any]:
        rank = None if self._comm is None else self._comm.rank
        return {"rank": rank, **_as_dict(self.totals), "per_epoch": [
            {"epoch": epoch, **_as_dict(values)} for epoch, values in sorted(self.epochs.items())],
                "per_rank": self.per_rank}

    def state_dict(self) -> dict[str, Any]:
        # A checkpoint mid-epoch keeps what the epoch has communicated so far (added to it when it completes).
        pending = self._pending if self._mark is None or self._comm is None else (
            _snapshot(self._comm) - self._mark + self._pending)
        return new_state("CommunicationVolume", value=self.value, totals=self.totals.copy(), pending=pending,
                         epochs=[[epoch, *values.tolist()] for epoch, values in sorted(self.epochs.items())])

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        check_state(state, "CommunicationVolume", "CommunicationVolume", ["value", "totals", "pending", "epochs"])
        self.value = state["value"]
        self.totals = np.asarray(state["totals"], dtype=np.float64).copy()
        self._pending = np.asarray(state["pending"], dtype=np.float64).copy()
        self.epochs = {int(row[0]): np.asarray(row[1:], dtype=np.float64) for row in state["epochs"]}

    # --------------------------------------------------------------------------------------- test metric
    def begin(self, inputs: Any) -> Any:
        self._network()
        self._mark = _snapshot(self._comm)
        return inputs

    def end(self, outputs: Any) -> Any:
        if self._mark is not None:
            self._test_samples.append(self._delta())
            self._mark = None
        return outputs

    @property
    def mean_bytes(self) -> float | None:
        """Bytes sent plus received per timed invocation (test-metric use), or None before any."""
        if not self._test_samples:
            return None
        return float(np.mean([sample[0] + sample[1] for sample in self._test_samples]))

    def measure(self, inputs: Any, outputs: Any, reference_outputs: Any = None) -> float:
        if not self._test_samples:
            raise D5Error("CommunicationVolume.measure(): nothing was measured; call begin(inputs) and "
                          "end(outputs) around each invocation")
        self.value = self.mean_bytes
        return self.value


__all__ = ["CommunicationVolume", "FIELDS"]
