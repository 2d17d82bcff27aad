"""L3: make a failing MPI job end quickly and say which rank failed.

What MPICH does on these machines without help (measured; ``notes/distributed.md``): an uncaught exception on
one rank under plain ``python`` *deadlocks* the others (the exiting rank blocks in ``MPI_Finalize``, the others
in their next collective); a killed rank takes the job down in ~0.3 s but the launcher names only its pid; a
rank that is alive but stuck is never noticed. :func:`install_fault_handlers` adds three things:

1. **An excepthook**: the traceback, then ``d5 rank R/P (host, pid N): ExceptionType: message`` on stderr,
   a flush and a 0.3 s pause (without it the last line is often lost), then ``Abort(1)``: the whole job ends.
2. **A rank table**: rank 0 prints ``rank pid host`` for every rank at start (one pickled gather, once), so the
   pid in hydra's "BAD TERMINATION ... PID n" message maps to a rank.
3. **A watchdog**: one daemon thread per network, waking every ``min(1 s, timeout / 10)``. The network marks
   each blocking call by setting ``watchdog.state = (perf_counter() at start, what)`` and ``None`` after it
   (two attribute stores per call: no thread or timer per call). A call blocked longer than ``timeout``
   seconds (``D5_COMM_TIMEOUT``, default 60; 0 turns the watchdog off) makes the watchdog print which call on
   which rank waited too long, then ``Abort(3)``.

Abort from the watchdog thread needs MPI's thread level ``MULTIPLE`` (mpi4py's default); below it the
watchdog ends its own process instead (``os._exit(3)``), which the launcher turns into the end of the job.

Not covered: ``sys.exit(n)`` on one rank (not an exception: it still reaches ``MPI_Finalize``); raise instead.

>>> timeout_from_env({"D5_COMM_TIMEOUT": "3"}), timeout_from_env({}), timeout_from_env({"D5_COMM_TIMEOUT": "0"})
(3.0, 60.0, None)
"""
from __future__ import annotations

import math
import os
import socket
import sys
import threading
import time
from typing import Any, Callable, Mapping

from d5.errors import DistributedError

#: The deadline, in seconds, of a blocking communication call when ``D5_COMM_TIMEOUT`` is not set.
DEFAULT_TIMEOUT = 60.0
#: Pause between the last message and ``Abort``: hydra kills the job fast, and stderr lines were lost without it.
ABORT_PAUSE = 0.3


def timeout_from_env(environ: Mapping[str, str] | None = None) -> float | None:
    """``D5_COMM_TIMEOUT`` in seconds (default 60); None when it is 0, negative or ``inf`` (no watchdog)."""
    environ = os.environ if environ is None else environ
    text = environ.get("D5_COMM_TIMEOUT", "").strip()
    if not text:
        return DEFAULT_TIMEOUT
    try:
        value = float(text)
    except ValueError:
        raise DistributedError(f"D5_COMM_TIMEOUT={text!r} is not a number of seconds (0 turns the watchdog "
                               "off)") from None
    return value if 0 < value < math.inf else None


def _identity(comm: Any) -> tuple[int, int, str, int]:
    return comm.Get_rank(), comm.Get_size(), socket.gethostname(), os.getpid()


def describe_call(what: Any) -> str:
    """A readable name for what a watchdog slot holds: ``(label, shape, dtype, name, peer, tag)`` (any of them
    but the label None) or a string.

    >>> describe_call(("allreduce(sum)", (3, 4), "float32", "w", None, None))
    "allreduce(sum) of float32[3, 4] 'w'"
    >>> describe_call(("recv", (8,), "float64", None, 1, 0))
    'recv of float64[8] from rank 1, tag 0'
    """
    if not isinstance(what, tuple) or not what:
        return str(what)
    label, shape, dtype, name, peer, tag = (tuple(what) + (None,) * 6)[:6]
    text = str(label)
    if shape is not None:
        text += f" of {dtype}[{', '.join(str(dim) for dim in shape)}]"
    if name:
        text += f" '{name}'"
    if peer is not None:
        if "recv" in str(label):
            text += f" from rank {peer}"
        elif "send" in str(label):
            text += f" to rank {peer}"
        else:
            text += f", root {peer}"
    if tag is not None:
        text += f", tag {tag}"
    return text


def _last_words(line: str) -> None:
    """Write ``line`` to stderr, flush, and pause so it gets out before the job is torn down."""
    try:
        sys.stdout.flush()
    except Exception:  # a closed stdout must not stop the abort
        pass
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except Exception:
        pass
    time.sleep(ABORT_PAUSE)


def _abort(comm: Any, code: int, from_thread: bool) -> None:
    from mpi4py import MPI

    if from_thread and MPI.Query_thread() < MPI.THREAD_MULTIPLE:
        os._exit(code)  # Abort from a second thread is not allowed below MULTIPLE; the launcher ends the job
    comm.Abort(code)


class Watchdog:
    """Aborts the job when a blocking call has been running longer than ``timeout`` seconds.

    The network sets ``state`` to ``(time.perf_counter() at start, what)`` before a blocking call and to None
    after it; ``what`` is formatted (by :func:`describe_call`) only if the deadline passes.
    """

    def __init__(self, comm: Any, timeout: float, *, on_timeout: Callable[[str], None] | None = None) -> None:
        if not timeout > 0:
            raise DistributedError(f"Watchdog(timeout={timeout!r}): the deadline must be > 0 seconds")
        self.comm, self.timeout = comm, float(timeout)
        self.rank, self.size, self.host, self.pid = _identity(comm)
        self.state: tuple[float, Any] | None = None
        self.interval = min(1.0, max(0.02, self.timeout / 10))
        self._on_timeout = on_timeout
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"d5-comm-watchdog-rank{self.rank}", daemon=True)
        self._thread.start()

    def message(self, what: Any, waited: float) -> str:
        return (f"d5 rank {self.rank}/{self.size} ({self.host}, pid {self.pid}): {describe_call(what)} has waited "
                f"{waited:.1f} s, longer than D5_COMM_TIMEOUT={self.timeout:g} s: another rank is stalled, has died "
                f"or called a different operation; aborting the job")

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            state = self.state  # one read: the main thread replaces the tuple, never mutates it
            if state is None:
                continue
            waited = time.perf_counter() - state[0]
            if waited > self.timeout:
                line = self.message(state[1], waited)
                if self._on_timeout is not None:  # tests
                    self._on_timeout(line)
                    self.state = None
                    continue
                _last_words(line)
                _abort(self.comm, 3, from_thread=True)
                return

    def stop(self) -> None:
        """Stop watching (the thread ends within one interval)."""
        self._stop.set()

    @property
    def running(self) -> bool:
        return self._thread.is_alive() and not self._stop.is_set()


class _NoWatchdog:
    """Stands in for a :class:`Watchdog` when there is no deadline: the same ``state`` slot, no thread."""

    state = None
    timeout = None
    running = False

    def stop(self) -> None:
        pass


class FaultHandlers:
    """What :func:`install_fault_handlers` installed: ``watchdog`` (or a stand-in without a thread when there
    is no deadline), ``ranks`` (``[(rank, pid, host)]`` on every rank), and ``uninstall()``."""

    def __init__(self, watchdog: Any, ranks: list[tuple[int, int, str]], hook_installed: bool) -> None:
        self.watchdog, self.ranks, self._hook_installed = watchdog, ranks, hook_installed

    def uninstall(self) -> None:
        """Stop the watchdog; restore the excepthook if this installation set it."""
        self.watchdog.stop()
        if self._hook_installed:
            _restore_excepthook()
            self._hook_installed = False


_previous_excepthook: Callable | None = None
_rank_table_printed = False


def _restore_excepthook() -> None:
    global _previous_excepthook
    if _previous_excepthook is not None:
        sys.excepthook, _previous_excepthook = _previous_excepthook, None


def _install_excepthook(comm: Any) -> bool:
    """Install the aborting excepthook once per process; False when one is installed already."""
    global _previous_excepthook
    if _previous_excepthook is not None:
        return False
    rank, size, host, pid = _identity(comm)
    previous = sys.excepthook

    def abort_on_exception(exc_type: type, exc: BaseException, tb: Any) -> None:
        try:
            previous(exc_type, exc, tb)  # the traceback, as usual
        finally:
            _last_words(f"d5 rank {rank}/{size} ({host}, pid {pid}): {exc_type.__name__}: {exc}")
            _abort(comm, 1, from_thread=threading.current_thread() is not threading.main_thread())

    _previous_excepthook = previous
    sys.excepthook = abort_on_exception
    return True


def rank_table(ranks: list[tuple[int, int, str]]) -> str:
    """The table rank 0 prints at start.

    >>> print(rank_table([(0, 101, "a"), (1, 102, "b")]))
    d5: 2 MPI ranks (rank pid host):
      0 101 a
      1 102 b
    """
    return "\n".join([f"d5: {len(ranks)} MPI ranks (rank pid host):"] +
                     [f"  {rank} {pid} {host}" for rank, pid, host in ranks])


def install_fault_handlers(comm: Any, timeout: float | None | str = "env", *, excepthook: bool = True,
                           log_ranks: bool = True) -> FaultHandlers:
    """Install the aborting excepthook (once per process; only with more than one rank), gather and (rank 0,
    once per process) print the rank table, and start a :class:`Watchdog` with ``timeout`` seconds (``"env"``:
    ``D5_COMM_TIMEOUT``, default 60; None: no watchdog). Collective over ``comm``: every rank calls it."""
    rank, size, host, pid = _identity(comm)
    if timeout == "env":
        timeout = timeout_from_env()
    elif timeout is not None and not (isinstance(timeout, (int, float)) and timeout > 0):
        raise DistributedError(f"timeout={timeout!r}: a deadline in seconds > 0, or None for no watchdog")
    ranks = [(rank, pid, host)]
    hook_installed = False
    if size > 1:
        ranks = [tuple(entry) for entry in comm.allgather((rank, pid, host))]  # once, at setup: pickle is fine
        if excepthook:
            hook_installed = _install_excepthook(comm)
        global _rank_table_printed
        if log_ranks and rank == 0 and not _rank_table_printed:
            _rank_table_printed = True
            print(rank_table(ranks), file=sys.stderr, flush=True)
    watchdog = _NoWatchdog() if timeout is None else Watchdog(comm, timeout)
    return FaultHandlers(watchdog, ranks, hook_installed)


__all__ = ["install_fault_handlers", "FaultHandlers", "Watchdog", "timeout_from_env", "describe_call", "rank_table",
           "DEFAULT_TIMEOUT"]
