"""L3: :class:`InconsistentParameterServer` -- the asynchronous parameter server (stale gradients, optional
bounded staleness, a clean stop).

**Roles.** Rank 0 is a dedicated *server*: it holds the authoritative parameters and the base optimizer's state,
and computes nothing. Ranks ``1 .. P-1`` are *workers*. A worker's step::

    PULL     worker -> server   "send me the parameters"                      int64[1]: the worker's step count
    PARAMS   server -> worker   header [version, ...] + every parameter, one flat buffer
             the worker runs the base optimizer's hooks and its forward/backward pass on its own batch
    PUSH     worker -> server   header [version used, step, loss] + every gradient, one flat buffer (isend)

The server applies each PUSH when it arrives (``new_input()``, ``prepare_gradients`` when the optimizer
``uses_all_gradients``, ``update_rule`` per parameter: one step of the base optimizer, so an lr schedule follows
the number of updates), then ``version += 1``. The **staleness** of a gradient is the number of updates applied
between its worker's pull and its own application, ``version_now - version_used``: 0 with one worker, where the
scheme is exactly sequential training on that worker's batches.

**Messages** are one C-contiguous ``uint8`` buffer each: a header of four int64s (versions, counts; the loss as
float64 bits) followed by all parameters (or gradients) concatenated in one float dtype (the widest of the
parameters'), viewed in place -- no pickle, no per-tensor messages. Tags 31001-31006 (PULL, PARAMS, PUSH, STOP,
FINAL, STATS) on the network's own communicator.

**Progress without spinning.** MPICH makes no background progress and a blocking receive busy-polls a core
(``notes/distributed.md``: with 3 ranks on 2 cores a ``Recv``-blocked server made the workers' compute 40 %
slower), and one-sided RMA to a busy rank waits for that rank's next MPI call -- so no RMA and no blocking waits
of unknown length: the server loops on ``probe`` and sleeps when idle, a worker waits for its reply the same way
(its PUSH is an ``isend`` advanced by those probes). The sleep backs off from 0 to ``poll_interval`` (1 ms): a
burst of messages is served at once, an idle rank costs a wake-up per millisecond.

**Bounded staleness** (``max_staleness=s``, stale synchronous parallel in spirit): enforced at **pull** time --
the server delays its answer to a PULL until it is certain that no gradient outstanding (pulled, not yet pushed),
the new one included, can be applied with staleness above ``s``. With ``O`` the workers holding parameters and
``u_w`` the version each pulled, a pull is answered when ``(version - min u_w) + |O| <= s`` (always when ``O``
is empty). Worst case, every outstanding worker pushes before the oldest, so this bounds every staleness by
``s``, and a PUSH never breaks it (it adds one update and removes one outstanding worker). Delayed pulls are
answered first come, first served as pushes arrive; the outstanding workers are computing, so one always can
push: no deadlock. ``s = 0`` serializes the workers (one holds the parameters at a time: sequential SGD over
their batches); ``s >= P - 2`` lets all ``P - 1`` workers compute at once while they keep pace. The alternative
-- refusing a stale gradient and making its worker recompute -- would waste the compute and still let a slow
worker starve; SSP's own rule bounds the workers' clock difference, which bounds staleness only indirectly.

**Driving it** (the same code on every rank)::

    opt = InconsistentParameterServer(d5.MomentumOptimizer(executor, lr=0.1), comm, max_staleness=None)
    for batch in batches:       # a Trainer does the same
        opt.step(batch)         # worker: pull, compute, push; server: serve P-1 updates (one "round")
    opt.finish()                # the stop protocol; afterwards every rank holds the server's final parameters
    stats = opt.staleness()     # histogram, mean, max (rank 0; on the workers after finish())

or ``opt.run(batches)`` (the loop and ``finish()``; the server ignores its batches and serves until every worker
stopped). On the server ``step`` ignores its batch and returns ``{"loss": mean loss of the updates it applied}``
so a Trainer on rank 0 shows the workers' training loss; it returns early once every worker has stopped, so
workers with more or fewer batches than the server cannot hang it (``finish()`` serves whatever is left).
:attr:`worker_index` and :attr:`workers` shard data over the workers only
(``DistributedSampler(data, batch, rank=opt.worker_index or 0, size=opt.workers)``); rank 0's batches are never
used.

**Stop protocol.** ``finish()`` on a worker sends STOP (after its last PUSH, which MPI keeps in order), then
waits for FINAL (the final parameters and version) and STATS (the staleness statistics). On the server it serves
until all ``P - 1`` workers have sent STOP, then sends both to every worker. Idempotent; ``step`` after it raises.

**Faults.** The waits have a deadline (the network's watchdog timeout, ``D5_COMM_TIMEOUT``, default 60 s): the
server's, for a message from any worker; a worker's, for the reply to its pull. Past it, the waiting rank raises
:class:`~d5.errors.DistributedError` naming what it waited for (on the server: the workers still running and
those holding parameters), which the fault handlers' excepthook turns into the end of the job; a worker that
raises ends the job the same way. A worker that has finished waits for the final parameters without a deadline
(the slowest worker may legitimately train much longer): the server's deadline covers that wait. A worker whose
step failed after its pull (a divergence its Trainer chose to skip) simply pulls again: its unused parameters
are forgotten.

**Caveats.** Only the trainable parameters travel; non-trainable state (batch-norm statistics) stays each rank's
own, as in the other schemes, and the server's is never updated. An optimizer whose ``prepare_param`` moves the
parameters (AcceleGrad's look-ahead) is refused: its state lives on the server, but the look-ahead would be taken
on a worker. Needs a network with ``probe`` and ``isend`` (:class:`~d5.distributed.MPICommunicationNetwork`).
"""
from __future__ import annotations

import collections
import time
from time import perf_counter
from typing import Any, Iterable, Mapping

import numpy as np

from d5.distributed.communication import ANY_SOURCE, ANY_TAG, CommunicationNetwork, CommunicationRequest
from d5.distributed.optimizer import DistributedOptimizer
from d5.errors import DistributedError

# Tags: high, so that a user's own point-to-point messages (small tags, in practice) never match them.
TAG_PULL, TAG_PARAMS, TAG_PUSH, TAG_STOP, TAG_FINAL, TAG_STATS = range(31001, 31007)
_TAG_NAMES = {TAG_PULL: "PULL", TAG_PARAMS: "PARAMS", TAG_PUSH: "PUSH", TAG_STOP: "STOP", TAG_FINAL: "FINAL",
              TAG_STATS: "STATS"}
HEADER = 4  # int64 slots before the payload: [version, step or update count, loss (float64 bits), spare]
SERVER = 0


class _Layout:
    """Where each trainable parameter lives in the flat buffers: name, shape, dtype, offset, size."""

    def __init__(self, names: list[str], values: list[np.ndarray]) -> None:
        self.names = names
        self.shapes = [tuple(np.shape(value)) for value in values]
        self.dtypes = [np.asarray(value).dtype for value in values]
        self.sizes = [int(np.prod(shape, dtype=np.int64)) for shape in self.shapes]
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes, dtype=np.int64)]).tolist()
        self.dtype = np.result_type(*self.dtypes) if values else np.dtype(np.float64)
        if self.dtype.kind != "f":
            raise DistributedError(f"InconsistentParameterServer needs floating-point parameters; these are "
                                   f"{sorted({str(dtype) for dtype in self.dtypes})}")

    def message(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """A new message buffer (uint8) and its two views: the int64 header and the flat payload."""
        raw = np.zeros(HEADER * 8 + self.offsets[-1] * self.dtype.itemsize, np.uint8)
        return raw, raw[:HEADER * 8].view(np.int64), raw[HEADER * 8:].view(self.dtype)

    def pack(self, values: Iterable[np.ndarray], payload: np.ndarray) -> None:
        for start, stop, value in zip(self.offsets, self.offsets[1:], values):
            np.copyto(payload[start:stop], np.asarray(value).reshape(-1), casting="same_kind")

    def unpack(self, payload: np.ndarray, copy: bool) -> dict[str, np.ndarray]:
        """Each tensor as a view of ``payload`` (``copy=False``; a copy where the dtype differs) or a new array."""
        out = {}
        for name, shape, dtype, start, stop in zip(self.names, self.shapes, self.dtypes, self.offsets,
                                                   self.offsets[1:]):
            view = payload[start:stop].reshape(shape)
            out[name] = np.array(view, dtype=dtype, copy=True) if copy or dtype != self.dtype else view
        return out


def _loss_of(outputs: Mapping[str, Any], loss: str) -> float:
    value = outputs.get(loss)
    return float("nan") if value is None else float(np.mean(np.asarray(value, dtype=np.float64)))


class InconsistentParameterServer(DistributedOptimizer):
    """The asynchronous parameter server (see the module docstring): rank 0 serves, ranks 1.. train.

    ``max_staleness``: None (no bound) or an int >= 0, the largest staleness any gradient may be applied with
    (enforced by delaying pulls). ``timeout``: seconds any wait may last ("comm": the network's watchdog timeout,
    else ``D5_COMM_TIMEOUT``, default 60; None: no deadline). ``poll_interval``: the longest sleep between probes
    of an idle rank. Collective: every rank constructs it; the first ``step``/``finish`` checks that every rank
    holds the same parameters and gives them rank 0's values (as every scheme does).
    """

    #: The fewest ranks it runs on (a server and a worker).
    min_ranks = 2

    def __init__(self, base_optimizer: Any, communication: CommunicationNetwork, max_staleness: int | None = None,
                 *, timeout: float | None | str = "comm", poll_interval: float = 0.001) -> None:
        super().__init__(base_optimizer, communication)
        if communication.size < 2:
            raise DistributedError("InconsistentParameterServer needs at least 2 ranks: rank 0 serves and computes "
                                   "nothing, the others are workers; use more ranks (mpiexec -n 2 or more, e.g. -n 5 "
                                   "for 4 workers), or ConsistentDecentralized on one rank")
        if max_staleness is not None and (isinstance(max_staleness, bool) or not isinstance(
                max_staleness, (int, np.integer)) or max_staleness < 0):
            raise DistributedError(f"InconsistentParameterServer: max_staleness must be None (no bound) or an int "
                                   f">= 0 (0: the workers take turns), got {max_staleness!r}")
        for method in ("probe", "isend"):
            if getattr(type(communication), method) is getattr(CommunicationNetwork, method):
                raise DistributedError(f"InconsistentParameterServer needs {type(communication).__name__}."
                                       f"{method}(), which it does not implement; use MPICommunicationNetwork")
        from d5.training.optimizer import ThreeStepOptimizer

        if type(base_optimizer).prepare_param is not ThreeStepOptimizer.prepare_param:
            raise DistributedError(f"InconsistentParameterServer cannot run {type(base_optimizer).__name__}: its "
                                   "prepare_param moves the parameters before the pass from optimizer state that lives "
                                   "on the server, while the pass runs on a worker; use a scheme that steps the "
                                   "optimizer on every rank (ConsistentDecentralized) or another optimizer")
        if not isinstance(poll_interval, (int, float)) or not 0 < poll_interval <= 1:
            raise DistributedError(f"poll_interval={poll_interval!r}: seconds in (0, 1]")
        self.max_staleness = None if max_staleness is None else int(max_staleness)
        self.timeout = self._comm_timeout() if isinstance(timeout, str) and timeout == "comm" else \
            self._check_timeout(timeout)
        self.poll_interval = float(poll_interval)
        self.version = 0  # updates applied (server); the version of the parameters held (worker)
        self._started = self._finished = False
        self._layout: _Layout | None = None
        self._small = np.zeros(1, np.int64)  # PULL and STOP carry one int64
        # worker
        self._push_request: CommunicationRequest | None = None
        self._stats: dict[str, Any] | None = None
        self._losses: list[float] = []
        # server
        self._outstanding: dict[int, int] = {}  # worker -> version it pulled and has not pushed yet
        self._pending: collections.deque = collections.deque()  # delayed pulls: (worker, arrival, delayed?)
        self._stopped: set[int] = set()
        self._histogram: list[int] = []
        self._per_worker = [0] * communication.size
        self._delayed_pulls = 0
        self._delayed_seconds = 0.0
        self._packed_version = -1

    @staticmethod
    def _check_timeout(timeout: Any) -> float | None:
        if timeout is not None and (isinstance(timeout, (bool, str)) or not isinstance(timeout, (int, float))
                                    or not timeout > 0):
            raise DistributedError(f"timeout={timeout!r}: seconds > 0, None (no deadline) or 'comm' (the network's)")
        return None if timeout is None else float(timeout)

    def _comm_timeout(self) -> float | None:
        """The network's watchdog deadline, else ``D5_COMM_TIMEOUT`` (default 60 s)."""
        watchdog = getattr(getattr(self.communication, "fault_handlers", None), "watchdog", None)
        if watchdog is not None and getattr(watchdog, "timeout", None):
            return float(watchdog.timeout)
        from d5.distributed.faults import timeout_from_env

        return timeout_from_env()

    # ------------------------------------------------------------------ roles
    @property
    def is_server(self) -> bool:
        """True on rank 0, the server (which computes nothing)."""
        return self.communication.rank == SERVER

    @property
    def workers(self) -> int:
        """The number of workers, ``P - 1``."""
        return self.communication.size - 1

    @property
    def worker_index(self) -> int | None:
        """This worker's index among the workers (``rank - 1``, for sharding data over them); None on the server."""
        return None if self.is_server else self.communication.rank - 1

    @property
    def finished(self) -> bool:
        """True after :meth:`finish`."""
        return self._finished

    @property
    def losses(self) -> list[float]:
        """This rank's training losses: a worker's, one per step; the server's, one per update in the order it
        applied them (each the loss its worker reported with the gradient)."""
        return list(self._losses)

    # ------------------------------------------------------------------ the start
    def synchronize_start(self) -> None:
        """Once (collective): the base class's check and rank 0's parameters on every rank; then the layout of
        the flat messages and this role's buffers."""
        if self._started:
            return
        self._started = True
        super().synchronize_start()
        names = [param for param, _ in self.network.gradient(self.loss)]
        self._layout = layout = _Layout(names, self.network.fetch_tensors(names))
        self._params_raw, self._params_header, self._params_payload = layout.message()
        self._push_raw, self._push_header, self._push_payload = layout.message()

    def _check_open(self, what: str) -> None:
        if self._finished:
            raise DistributedError(f"InconsistentParameterServer.{what}() after finish(): the stop protocol has run "
                                   "and the server has stopped; build a new optimizer to train again")

    # ------------------------------------------------------------------ the training loop's calls
    def step(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Worker: pull the parameters, run the pass on ``inputs``, push the gradients; returns the outputs.
        Server: ignore ``inputs``, serve until ``P - 1`` updates are applied (or every worker stopped); returns
        ``{"loss": mean loss of those updates}`` (``{}`` when none was)."""
        self._check_open("step")
        self.synchronize_start()
        if self.is_server:
            return self._serve_round()
        self._pull()
        outputs = self.local_pass(inputs)
        self._push(outputs)
        return outputs

    def run(self, batches: Iterable[Mapping[str, np.ndarray]]) -> list[float]:
        """Worker: ``step`` on every batch, then :meth:`finish`; returns its losses. Server: :meth:`finish` at
        once (it does not read ``batches``: it serves until every worker stopped); returns the loss of every
        update in the order applied."""
        if not self.is_server:
            for batch in batches:
                self.step(batch)
        self.finish()
        return self.losses

    def finish(self) -> None:
        """The stop protocol, on every rank: a worker sends STOP and receives the final parameters and the
        staleness statistics; the server serves until every worker has stopped, then sends them. Afterwards every
        rank holds the server's final parameters and ``version``. Idempotent."""
        if self._finished:
            return
        self.synchronize_start()
        if self.is_server:
            self._serve(lambda: len(self._stopped) == self.workers, "STOP from every worker")
            header = self._pack_params()
            header[1] = self.version
            stats = self._encode_stats()
            for worker in range(1, self.communication.size):
                self.communication.send(self._params_raw, worker, TAG_FINAL)
                self.communication.send(stats, worker, TAG_STATS)
        else:
            self._small[0] = self.steps
            self.communication.send(self._small, SERVER, TAG_STOP)
            # No deadline here: the server answers once the slowest worker has finished, which may be long after
            # this one; a stalled worker or server is caught by the server's own deadline, which ends the job.
            self._await(TAG_FINAL, "the final parameters (FINAL)", self._params_raw.nbytes, deadline=False)
            self.communication.recv(self._params_raw, SERVER, TAG_FINAL)
            self._feed_params()
            nbytes = self._await(TAG_STATS, "the staleness statistics (STATS)")
            stats = np.empty(nbytes // 8, np.int64)
            self.communication.recv(stats, SERVER, TAG_STATS)
            self._stats = self._decode_stats(stats)
            if self._push_request is not None:  # the server has received everything before the STOP
                self._push_request.wait()
                self._push_request = None
        self._finished = True

    def staleness(self) -> dict[str, Any] | None:
        """The staleness of the applied gradients: ``updates``, ``mean``, ``max``, ``histogram``
        (``{staleness: count}``), ``max_staleness`` (the bound), ``delayed_pulls`` and ``delayed_seconds`` (pulls
        the bound held back, and their total wait), ``updates_per_worker`` (``{rank: count}``). On the server at
        any time; on a worker after :meth:`finish` (the server sends them with the final parameters), else None."""
        if not self.is_server:
            return None if self._stats is None else dict(self._stats)
        return _summary(self._histogram, self.max_staleness, self._delayed_pulls, self._delayed_seconds,
                        {rank: self._per_worker[rank] for rank in range(1, self.communication.size)})

    # ------------------------------------------------------------------ worker
    def _pull(self) -> None:
        self._small[0] = self.steps
        self.communication.send(self._small, SERVER, TAG_PULL)
        self._await(TAG_PARAMS, "the parameters (PARAMS, the reply to its PULL)", self._params_raw.nbytes)
        self.communication.recv(self._params_raw, SERVER, TAG_PARAMS)
        self._feed_params()

    def _feed_params(self) -> None:
        self.version = int(self._params_header[0])
        # Copies: an executor may keep the array it is fed, and the buffer is overwritten by the next pull.
        for name, value in self._layout.unpack(self._params_payload, copy=True).items():
            self.network.feed_tensor(name, value, is_param=True)

    def _push(self, outputs: Mapping[str, np.ndarray]) -> None:
        if self._push_request is not None:  # done already: the server answered the pull that followed it
            self._push_request.wait()
            self._push_request = None
        gradients = self.gradients()
        self._layout.pack((gradients[name] for name in self._layout.names), self._push_payload)
        loss = _loss_of(outputs, self.loss)
        self._losses.append(loss)
        header = self._push_header
        header[0], header[1] = self.version, self.steps
        header[2:3].view(np.float64)[0] = loss
        self._push_request = self.communication.isend(self._push_raw, SERVER, TAG_PUSH)

    def _await(self, tag: int, what: str, nbytes: int | None = None, deadline: bool = True) -> int:
        """Poll (probe, then sleep with back-off) until the server's message with ``tag`` can be received; its
        size in bytes. Advances this worker's PUSH meanwhile (MPICH progresses it only inside MPI calls)."""
        comm, started, delay = self.communication, perf_counter(), 0.0
        while True:
            if self._push_request is not None and self._push_request.test():
                self._push_request = None
            found = comm.probe(SERVER, tag)
            if found is not None:
                if nbytes is not None and found[2] != nbytes:
                    raise DistributedError(f"rank {comm.rank} (asynchronous PS worker): {_TAG_NAMES[tag]} from the "
                                           f"server has {found[2]} bytes, expected {nbytes}; every rank must build the "
                                           "same network")
                return found[2]
            waited = perf_counter() - started
            if deadline and self.timeout is not None and waited > self.timeout:
                raise DistributedError(f"rank {comm.rank} (asynchronous PS worker) waited {waited:.1f} s for {what} "
                                       f"from the server, rank 0 (timeout {self.timeout:g} s, D5_COMM_TIMEOUT): the "
                                       "server is stalled, has died, or is not driving the optimizer (call step(), "
                                       "run() or finish() on rank 0 too)")
            delay = min(max(2 * delay, 5e-5), self.poll_interval)
            time.sleep(delay)

    # ------------------------------------------------------------------ server
    def _serve_round(self) -> dict[str, np.ndarray]:
        first, losses_before = self.version, len(self._losses)
        self._serve(lambda: self.version - first >= self.workers or len(self._stopped) == self.workers,
                    f"{self.workers} updates (one round)")
        self.steps += 1
        losses = self._losses[losses_before:]
        return {self.loss: np.asarray(float(np.mean(losses)))} if losses else {}

    def _serve(self, done: Any, what: str) -> None:
        """Handle messages until ``done()``; sleep (backing off to ``poll_interval``) while none is waiting."""
        comm, delay, idle_since = self.communication, 0.0, perf_counter()
        while not done():
            found = comm.probe(ANY_SOURCE, ANY_TAG)
            if found is not None:
                self._handle(*found)
                delay, idle_since = 0.0, perf_counter()
                continue
            idle = perf_counter() - idle_since
            if self.timeout is not None and idle > self.timeout:
                running = [rank for rank in range(1, comm.size) if rank not in self._stopped]
                raise DistributedError(
                    f"rank 0 (asynchronous PS server) waiting for {what} heard nothing for {idle:.1f} s (timeout "
                    f"{self.timeout:g} s, D5_COMM_TIMEOUT); workers not stopped: {running}, holding parameters: "
                    f"{sorted(self._outstanding)}, version {self.version}. A worker is stalled or dead, or it does "
                    "not call finish() at its end")
            delay = min(max(2 * delay, 5e-5), self.poll_interval)
            time.sleep(delay)

    def _handle(self, source: int, tag: int, nbytes: int) -> None:
        comm = self.communication
        if tag == TAG_PUSH:
            if nbytes != self._push_raw.nbytes:
                raise DistributedError(f"rank 0 (asynchronous PS server): a PUSH of {nbytes} bytes from rank {source}, "
                                       f"expected {self._push_raw.nbytes}; every rank must build the same network")
            comm.recv(self._push_raw, source, TAG_PUSH)
            used = int(self._push_header[0])
            if self._outstanding.pop(source, None) != used:
                raise DistributedError(f"rank 0 (asynchronous PS server): rank {source} pushed a gradient of version "
                                       f"{used} it did not pull from this server (protocol violated)")
            loss = float(self._push_header[2:3].view(np.float64)[0])
            self._apply(self._layout.unpack(self._push_payload, copy=False))
            staleness = self.version - used
            if staleness >= len(self._histogram):
                self._histogram.extend([0] * (staleness + 1 - len(self._histogram)))
            self._histogram[staleness] += 1
            self._per_worker[source] += 1
            self._losses.append(loss)
            self.version += 1
            self._answer_pulls()
        elif tag in (TAG_PULL, TAG_STOP):
            if nbytes != 8:
                raise DistributedError(f"rank 0 (asynchronous PS server): {_TAG_NAMES[tag]} of {nbytes} bytes from "
                                       f"rank {source}, expected 8")
            comm.recv(self._small, source, tag)
            # A worker that pulls or stops while holding parameters has given up that step (a divergence its
            # Trainer skipped): forget them, they will never be pushed.
            self._outstanding.pop(source, None)
            if tag == TAG_STOP:
                self._stopped.add(source)
                self._answer_pulls()
            else:
                self._pending.append((source, perf_counter(), not self._may_answer()))
                self._answer_pulls()
        else:
            raise DistributedError(f"rank 0 (asynchronous PS server) got a message with tag {tag} from rank {source} "
                                   f"while serving; tags {min(_TAG_NAMES)}-{max(_TAG_NAMES)} are the server's, and "
                                   "nothing else may be sent to rank 0 on this network meanwhile")

    def _may_answer(self) -> bool:
        """Whether one more worker may take the parameters now without any gradient exceeding max_staleness."""
        if self.max_staleness is None or not self._outstanding:
            return True
        oldest = min(self._outstanding.values())
        return (self.version - oldest) + len(self._outstanding) <= self.max_staleness

    def _answer_pulls(self) -> None:
        while self._pending and self._may_answer():
            worker, arrived, delayed = self._pending.popleft()
            if delayed:
                self._delayed_pulls += 1
                self._delayed_seconds += perf_counter() - arrived
            self._pack_params()
            self.communication.send(self._params_raw, worker, TAG_PARAMS)
            self._outstanding[worker] = self.version

    def _pack_params(self) -> np.ndarray:
        if self._packed_version != self.version:  # several pulls of one version: packed once
            self._layout.pack(self.network.fetch_tensors(self._layout.names), self._params_payload)
            self._packed_version = self.version
        header = self._params_header
        header[:] = 0
        header[0] = self.version
        return header

    def _apply(self, gradients: Mapping[str, np.ndarray]) -> None:
        """One step of the base optimizer with these gradients (its step counter and schedule advance)."""
        self.base_optimizer.new_input()
        self.apply_gradients(gradients)
        self.base_optimizer.steps += 1

    def _encode_stats(self) -> np.ndarray:
        bound = -1 if self.max_staleness is None else self.max_staleness
        return np.array([bound, self._delayed_pulls, round(self._delayed_seconds * 1e6), *self._per_worker[1:],
                         *self._histogram], dtype=np.int64)

    def _decode_stats(self, stats: np.ndarray) -> dict[str, Any]:
        workers = self.workers
        bound, delayed, micros = (int(value) for value in stats[:3])
        per_worker = {rank: int(count) for rank, count in enumerate(stats[3:3 + workers], start=1)}
        return _summary([int(count) for count in stats[3 + workers:]], None if bound < 0 else bound, delayed,
                        micros / 1e6, per_worker)


def _summary(histogram: list[int], bound: int | None, delayed: int, delayed_seconds: float,
             per_worker: dict[int, int]) -> dict[str, Any]:
    """The staleness statistics from the histogram (``histogram[s]``: updates applied with staleness ``s``).

    >>> _summary([3, 1], None, 0, 0.0, {1: 2, 2: 2})["mean"]
    0.25
    """
    updates = sum(histogram)
    total = sum(staleness * count for staleness, count in enumerate(histogram))
    return {"updates": updates, "mean": total / updates if updates else 0.0,
            "max": len(histogram) - 1 if histogram else 0,
            "histogram": {staleness: count for staleness, count in enumerate(histogram) if count},
            "max_staleness": bound, "delayed_pulls": delayed, "delayed_seconds": delayed_seconds,
            "updates_per_worker": per_worker}


__all__ = ["InconsistentParameterServer", "TAG_PULL", "TAG_PARAMS", "TAG_PUSH", "TAG_STOP", "TAG_FINAL", "TAG_STATS"]
