"""``D5_TIMELINE=path``: a Chrome-trace timeline of each rank's communication (Horovod's ``HOROVOD_TIMELINE``).

Set ``D5_TIMELINE=timeline.json`` and every :class:`~d5.distributed.mpi.MPICommunicationNetwork` of a rank
records one event per communication call in memory (a tuple appended to a list: no I/O, no formatting per call).
``close()`` of the network, and the interpreter's exit, write ``timeline.rank<R>.json`` (R: the rank in
``COMM_WORLD``; relative paths are taken from the working directory when the first network was made) atomically,
in Chrome's trace-event JSON (``{"traceEvents": [...], "displayTimeUnit": "ms"}``), which chrome://tracing and
https://ui.perfetto.dev open. ``merge(paths, out)`` (or ``python -m d5.distributed.timeline OUT IN...``) joins
the ranks' files into one: each rank is a process of its own (``pid`` = rank, named ``rank R (host)``).

Events are complete events (``"ph": "X"``, ``ts`` and ``dur`` in microseconds since the Unix epoch, so ranks on
hosts with synchronised clocks line up):

* ``tid`` 0, *blocking calls*: every ``allreduce``, ``broadcast``, ``gather``, ``allgather``,
  ``reduce_from_neighbors``, ``barrier``, ``send``, ``recv``, the issue of ``iallreduce``/``isend``/``irecv``,
  each ``wait`` of a request and each ``waitall`` (the time this rank was blocked in MPI).
* ``tid`` 1 (and 2, 3 ... where requests overlap: Chrome's viewers need the events of one thread to nest), the
  *non-blocking requests*: one event per ``iallreduce``/``isend``/``irecv`` from its issue to the moment its
  completion was seen (by ``test``, ``wait`` or ``waitall``).

The name is the operation, then the tensor's ``name=`` if one was given (``"allreduce grad/w"``); ``args`` has
``bytes`` (the tensor's size; for a receive, what arrived), ``dtype``, ``shape`` and ``op``, ``root`` or
``peer`` where the call has one. ``probe`` and ``test`` (polling) and the single-rank shortcuts (no
communication) are not recorded. Unset, the cost is one ``is None`` check per call.
"""
from __future__ import annotations

import atexit
import json
import os
import socket
import sys
import time
from pathlib import Path
from time import perf_counter
from typing import Any, Iterable, Mapping

from d5.io_utils import atomic_write

ENV = "D5_TIMELINE"
BLOCKING, REQUESTS = 0, 1  # the tids

_RECORDERS: dict[tuple[Path, int], Timeline] = {}  # one per path and rank in a process, shared by its networks


def rank_path(path: str | os.PathLike, rank: int) -> Path:
    """``timeline.json`` -> ``timeline.rank<rank>.json`` (a path without a suffix gets ``.rank<rank>.json``)."""
    path = Path(path)
    if path.suffix:
        return path.with_name(f"{path.stem}.rank{rank}{path.suffix}")
    return path.with_name(f"{path.name}.rank{rank}.json")


def from_env(rank: int, environ: Mapping[str, str] | None = None) -> Timeline | None:
    """The rank's :class:`Timeline` when ``D5_TIMELINE`` names a path, else None (networks of one process that
    share the path share the recorder, so one network's file does not overwrite another's)."""
    path = (os.environ if environ is None else environ).get(ENV, "").strip()
    if not path:
        return None
    key = (Path(path).absolute(), rank)
    recorder = _RECORDERS.get(key)
    if recorder is None:
        recorder = _RECORDERS[key] = Timeline(key[0], rank)
    return recorder


class Timeline:
    """The communication events of one rank, in memory until :meth:`write` (at ``close()`` and at exit)."""

    def __init__(self, path: str | os.PathLike, rank: int, host: str | None = None) -> None:
        self.path = Path(path)
        self.file = rank_path(self.path, rank)
        self.rank = rank
        self.host = socket.gethostname() if host is None else host
        # perf_counter seconds -> microseconds since the epoch: one offset, taken once
        self._offset = time.time() - perf_counter()
        # (tid, op, tensor name, started, ended, bytes, dtype, shape, "op"/"root"/"peer"/None, its value)
        self.events: list[tuple] = []
        self._written = -1
        atexit.register(self._at_exit)

    # ----------------------------------------------------------------------------------------- recording
    def call(self, op: str, name: str | None, started: float, nbytes: int, dtype: Any = None, shape: Any = None,
             key: str | None = None, value: Any = None) -> None:
        """A blocking call that began at ``started`` (``perf_counter``) and ends now."""
        self.events.append((BLOCKING, op, name, started, perf_counter(), nbytes, dtype, shape, key, value))

    def request(self, op: str, what: tuple, issued: float, nbytes: int) -> None:
        """A non-blocking request (``what``: its watchdog description) issued at ``issued``, seen complete now."""
        self.events.append((REQUESTS, op, what[3], issued, perf_counter(), nbytes, what[2], what[1],
                            None if what[4] is None else "peer", what[4]))

    # ----------------------------------------------------------------------------------------- output
    def trace_events(self) -> list[dict[str, Any]]:
        """The Chrome trace events: the metadata (process and thread names), then the recorded events."""
        rank, offset = self.rank, self._offset
        events: list[dict[str, Any]] = [
            {"name": "process_name", "ph": "M", "pid": rank, "tid": 0, "args": {"name": f"rank {rank} ({self.host})"}},
            {"name": "process_sort_index", "ph": "M", "pid": rank, "tid": 0, "args": {"sort_index": rank}},
            {"name": "thread_name", "ph": "M", "pid": rank, "tid": BLOCKING, "args": {"name": "blocking calls"}},
        ]
        lanes: list[float] = []  # the end of the last request on tids 1, 2, ...
        for tid, op, name, started, ended, nbytes, dtype, shape, key, value in sorted(self.events,
                                                                                     key=lambda e: (e[0], e[3])):
            if tid != BLOCKING:  # the first request lane free at ``started``: events of one tid must nest
                for lane, busy_until in enumerate(lanes):
                    if busy_until <= started:
                        break
                else:
                    lane = len(lanes)
                    lanes.append(0.0)
                    events.append({"name": "thread_name", "ph": "M", "pid": rank, "tid": REQUESTS + lane,
                                   "args": {"name": "non-blocking requests" + (f" ({lane + 1})" if lane else "")}})
                lanes[lane] = ended
                tid = REQUESTS + lane
            args: dict[str, Any] = {"bytes": int(nbytes)}
            if dtype is not None:
                args["dtype"] = str(dtype)
            if shape is not None:
                args["shape"] = [int(dim) for dim in shape]
            if key is not None:
                args[key] = value
            events.append({"name": op if name is None else f"{op} {name}", "cat": "comm", "ph": "X",
                           "ts": round((started + offset) * 1e6, 3), "dur": round(max(0.0, ended - started) * 1e6, 3),
                           "pid": rank, "tid": tid, "args": args})
        return events

    def write(self) -> Path:
        """Write the rank's file (atomically; again only if events came since the last write). Returns its path."""
        if self._written != len(self.events):
            count = len(self.events)
            with atomic_write(self.file) as handle:
                json.dump({"traceEvents": self.trace_events(), "displayTimeUnit": "ms"}, handle)
            self._written = count
        return self.file

    def _at_exit(self) -> None:
        try:
            self.write()
        except Exception as error:  # an exit is no place for a traceback; say why the file is missing
            print(f"d5: {ENV}: rank {self.rank} could not write {self.file}: {error}", file=sys.stderr)


def merge(paths: Iterable[str | os.PathLike], out: str | os.PathLike) -> Path:
    """Join per-rank timeline files (their pids are already distinct) into ``out``, atomically. Returns ``out``."""
    events: list[Any] = []
    for path in paths:
        with open(path) as handle:
            events.extend(json.load(handle)["traceEvents"])
    out = Path(out)
    with atomic_write(out) as handle:
        json.dump({"traceEvents": events, "displayTimeUnit": "ms"}, handle)
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 2:
        print("usage: python -m d5.distributed.timeline OUT.json timeline.rank0.json timeline.rank1.json ...",
              file=sys.stderr)
        return 2
    print(merge(argv[1:], argv[0]))
    return 0


__all__ = ["ENV", "Timeline", "from_env", "merge", "rank_path"]

if __name__ == "__main__":
    sys.exit(main())
