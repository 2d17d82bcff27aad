"""L3: :class:`MPICommunicationNetwork` — the communication interface over MPI (mpi4py).

Launch with ``mpiexec -n 4 python train.py``; then ``comm = MPICommunicationNetwork()`` on every rank.

* **Buffers only**: every call is a buffer-based mpi4py call (``Allreduce``, ``Bcast``, ``Send`` ...) on a
  C-contiguous NumPy array of a numeric or bool dtype; a non-contiguous, object, structured or byte-swapped array
  is refused with :class:`~d5.errors.DistributedError` before any communication (no silent copy, no pickle).
  Receive buffers (``recv``'s array, ``out=``) must be writable arrays of the expected shape and dtype.
* **Its own communicators**: a ``Dup`` of ``comm`` (default ``COMM_WORLD``) for the calls, and a second ``Dup``
  for internal traffic (argument checks, the neighbour exchange), so nothing of d5's can match a user's message.
* **Argument checks** (``checked``): before a checked collective every rank allgathers a 13-integer description
  of its call (collective, op, root, dtype kind and size, shape, a CRC of ``name``); ranks that disagree all
  raise the same :class:`DistributedError` naming each rank's call, instead of hanging or — as MPICH does with
  mismatched counts — aborting with an internal error or silently returning a wrong sum. Cost: one small
  allgather (~5 us on 2 ranks here). Default: the first 64 collectives (step 0 of a training loop, whose call
  sequence then repeats); ``checked=True`` (or ``D5_COMM_CHECK=all``) checks every one, ``False``
  (``D5_COMM_CHECK=off``) none, an int N (``D5_COMM_CHECK=N``) the first N. The count is of collective calls in
  order, so it stays aligned across ranks (a "first use of each name" rule would not: ranks that disagree about
  names would disagree about when to check). Point-to-point calls are checked by size on receipt.
* **Counters**: see :meth:`~d5.distributed.communication.CommunicationNetwork.stats`. Bytes are the logical
  payload of this rank (nothing with one rank): ``allreduce``/``iallreduce`` sends and receives ``n``;
  ``broadcast``: root sends ``n``, the others receive ``n``; ``gather``: non-roots send ``n``, root receives
  ``n * (P - 1)``; ``allgather``: sends ``n``, receives ``n * (P - 1)``; ``reduce_from_neighbors``: ``n`` per
  distinct neighbour each way (1 with P = 2, 2 with P >= 3); ``send``/``recv``: the message.
* **Faults** (``fault_handlers=True``): :func:`d5.distributed.faults.install_fault_handlers` — an uncaught
  exception aborts the job naming its rank, rank 0 prints the rank/pid/host table, and every blocking call
  runs under the ``D5_COMM_TIMEOUT`` deadline (``timeout=``; default 60 s).

One thread drives a network (the watchdog thread only reads its deadline slot).
"""
from __future__ import annotations

import os
import zlib
from time import perf_counter
from typing import Any, Iterable, Sequence

import numpy as np
from mpi4py import MPI

from d5.distributed.communication import (ANY_SOURCE, ANY_TAG, REDUCE_OPS, CommunicationCounters,
                                          CommunicationNetwork, CommunicationRequest)
from d5.distributed.faults import FaultHandlers, _NoWatchdog, describe_call, install_fault_handlers
from d5.distributed.timeline import from_env as timeline_from_env
from d5.errors import DistributedError

#: The dtypes MPI can carry (bool only where nothing is reduced), in native byte order.
_REDUCIBLE = frozenset(np.dtype(char) for char in "bBhHiIlLqQefdgFDG")
_CARRIABLE = _REDUCIBLE | {np.dtype("?")}
_MPI_OPS = {"sum": MPI.SUM, "prod": MPI.PROD, "max": MPI.MAX, "min": MPI.MIN, "mean": MPI.SUM}
_OP_INDEX = {op: index for index, op in enumerate(REDUCE_OPS)}
#: Collective kinds in the argument check (blocking and non-blocking collectives never match each other in MPI).
_KINDS = ("allreduce", "broadcast", "gather", "allgather", "reduce_from_neighbors", "iallreduce", "barrier")
_KIND = {kind: index + 1 for index, kind in enumerate(_KINDS)}
_LABELS = {op: f"allreduce({op})" for op in REDUCE_OPS}
_ILABELS = {op: f"iallreduce({op})" for op in REDUCE_OPS}
_DESCRIPTION = 13  # int64s per rank in the argument check
_TO_RIGHT, _TO_LEFT = 1, 2  # the neighbour exchange's tags, on the internal communicator
DEFAULT_CHECKED = 64


def checked_from_env(environ: Any = None) -> bool | int:
    """``D5_COMM_CHECK``: ``all`` (every collective), ``off``/``none``/``0`` (none), or N (the first N);
    default 64.

    >>> checked_from_env({}), checked_from_env({"D5_COMM_CHECK": "all"}), checked_from_env({"D5_COMM_CHECK": "5"})
    (64, True, 5)
    """
    environ = os.environ if environ is None else environ
    text = environ.get("D5_COMM_CHECK", "").strip().lower()
    if not text:
        return DEFAULT_CHECKED
    if text in ("all", "true", "yes"):
        return True
    if text in ("off", "none", "false", "no", "0"):
        return False
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise DistributedError(f"D5_COMM_CHECK={text!r}: use 'all', 'off' or a number of collectives to check")
    return value


def _dims(shape: tuple) -> str:
    return ", ".join(str(dim) for dim in shape)


class MPIRequest(CommunicationRequest):
    """A non-blocking call of :class:`MPICommunicationNetwork` in flight. Holds its buffers until completion
    (so they cannot be freed under MPI). ``test()`` and ``wait()`` count their time for the operation."""

    __slots__ = ("_network", "_request", "_op", "_what", "_result", "_buffers", "_mean", "_expected", "_status",
                 "_issued", "done")

    def __init__(self, network: MPICommunicationNetwork, request: Any, op: str, what: tuple, result: Any,
                 buffers: tuple, mean: bool = False, expected: int = -1, issued: float = 0.0) -> None:
        self._network, self._request, self._op, self._what = network, request, op, what
        self._result, self._buffers, self._mean, self._expected = result, buffers, mean, expected
        self._issued = issued  # perf_counter at the issue (D5_TIMELINE's request events)
        self._status = MPI.Status() if expected >= 0 else None
        self.done = False

    def _finish(self) -> None:
        self.done = True
        buffers, self._buffers = self._buffers, ()
        network = self._network
        if self._mean:
            self._result /= network._size
        if self._expected >= 0:  # a receive: count what arrived, and refuse a short message
            received = self._status.Get_count(MPI.BYTE)
            network._counters.record(self._op, 0, received, 0.0, calls=0)
            if network._timeline is not None:
                network._timeline.request(self._op, self._what, self._issued, received)
            if received != self._expected:
                raise network._short_message("irecv", received, self._expected, self._status.Get_source())
        elif network._timeline is not None:
            network._timeline.request(self._op, self._what, self._issued, buffers[0].nbytes if buffers else 0)

    def test(self) -> bool:
        if self.done:
            return True
        started = perf_counter()
        try:
            flag = self._request.Test(self._status)
        except MPI.Exception as error:
            raise self._network._mpi_error(f"test of {self._op}", error) from None
        self._network._counters.record(self._op, 0, 0, perf_counter() - started, calls=0)
        if flag:
            self._finish()
        return flag

    def wait(self) -> np.ndarray | None:
        if not self.done:
            network = self._network
            watchdog = network._watchdog
            started = perf_counter()
            watchdog.state = (started, self._what)
            try:
                self._request.Wait(self._status)
            except MPI.Exception as error:
                raise network._mpi_error(f"wait for {self._op}", error) from None
            finally:
                watchdog.state = None
            network._counters.record(self._op, 0, 0, perf_counter() - started, calls=0)
            if network._timeline is not None:
                what = self._what
                network._timeline.call(f"wait {self._op}", what[3], started, 0, what[2], what[1],
                                       None if what[4] is None else "peer", what[4])
            self._finish()
        return self._result


class MPICommunicationNetwork(CommunicationNetwork):
    """:class:`~d5.distributed.communication.CommunicationNetwork` over MPI (see the module docstring).

    ``comm``: the communicator to duplicate (default ``COMM_WORLD``). ``fault_handlers``: install the excepthook,
    rank table and watchdog. ``timeout``: the watchdog's deadline in seconds (default ``D5_COMM_TIMEOUT``, else
    60; None: no watchdog). ``checked``: which collectives have their arguments checked across ranks (default
    ``D5_COMM_CHECK``, else the first 64). Collective: every rank constructs it. ``close()`` frees the
    communicators (collective too); the network is also a context manager.
    """

    def __init__(self, comm: Any = None, *, fault_handlers: bool = True, timeout: float | None | str = "env",
                 checked: bool | int | None = None) -> None:
        base = MPI.COMM_WORLD if comm is None else comm
        if not isinstance(base, MPI.Intracomm):
            raise DistributedError(f"MPICommunicationNetwork(comm={comm!r}): expected an mpi4py intracommunicator "
                                   "such as MPI.COMM_WORLD")
        self.comm = base.Dup()
        self._internal = base.Dup()
        self._rank, self._size = self.comm.Get_rank(), self.comm.Get_size()
        self._counters = CommunicationCounters()
        checked = checked_from_env() if checked is None else checked
        if isinstance(checked, bool):
            self._check_all, self._check_left = checked, 0
        elif isinstance(checked, int) and checked >= 0:
            self._check_all, self._check_left = False, checked
        else:
            raise DistributedError(f"checked={checked!r}: True (every collective), False (none) or an int N >= 0 "
                                   "(the first N)")
        self._collectives = 0
        self._description = np.zeros(_DESCRIPTION, np.int64)
        self._table = np.empty((self._size, _DESCRIPTION), np.int64)
        self._scratch: dict[tuple, np.ndarray] = {}
        self.fault_handlers: FaultHandlers | None = None
        if fault_handlers:
            self.fault_handlers = install_fault_handlers(self.comm, timeout)
            self._watchdog = self.fault_handlers.watchdog
        else:
            self._watchdog = _NoWatchdog()  # the same slot, nothing watches it
        self._closed = False
        # D5_TIMELINE: the rank's Chrome-trace recorder (d5.distributed.timeline), None when unset
        self._timeline = timeline_from_env(MPI.COMM_WORLD.Get_rank())

    # ------------------------------------------------------------------------------------------ identity
    @property
    def rank(self) -> int:
        return self._rank

    @property
    def size(self) -> int:
        return self._size

    def __repr__(self) -> str:
        return f"MPICommunicationNetwork(rank={self._rank}, size={self._size})"

    # ------------------------------------------------------------------------------------------ errors
    def _where(self) -> str:
        return f"rank {self._rank}/{self._size}"

    def _mpi_error(self, what: str, error: Exception) -> DistributedError:
        try:
            error_class = error.Get_error_class()
            reason = MPI.Get_error_string(error_class)
        except Exception:  # noqa: BLE001 - not an MPI.Exception after all: its text will do
            error_class, reason = None, str(error).splitlines()[0]
        hint = ("; the receive buffer is smaller than the message: it must have the sender's shape and dtype"
                if error_class == MPI.ERR_TRUNCATE else "")
        return DistributedError(f"{self._where()}: MPI error in {what}: {reason.rstrip(', ')}{hint}")

    def _short_message(self, what: str, received: int, expected: int, source: int) -> DistributedError:
        return DistributedError(f"{self._where()}: {what} got {received} bytes from rank {source} into an array of "
                                f"{expected} bytes; the receive buffer must have the sender's shape and dtype")

    def _refuse(self, what: str, array: Any, reduce: bool) -> DistributedError:
        where = f"{self._where()}: {what}"
        if not isinstance(array, np.ndarray):
            return DistributedError(f"{where} needs a NumPy array, got {type(array).__name__}")
        if not array.flags.c_contiguous:
            return DistributedError(f"{where} needs a C-contiguous array; got shape {array.shape} with strides "
                                    f"{array.strides} (a slice or a transpose?). Pass np.ascontiguousarray(x): d5 "
                                    "does not copy on the communication path")
        dtype = array.dtype
        if reduce and dtype == np.bool_:
            return DistributedError(f"{where}: MPI does not add or compare bool arrays; reduce x.astype(np.uint8)")
        if dtype.hasobject or dtype.fields is not None or dtype.kind not in "biufc":
            return DistributedError(f"{where}: MPI carries numeric arrays only, not dtype {dtype} (no pickling on "
                                    "the communication path)")
        return DistributedError(f"{where}: dtype {dtype} is not in native byte order or not supported by MPI; "
                                "convert with x.astype(x.dtype.newbyteorder('='))")

    def _sendable(self, array: Any, what: str, reduce: bool = False) -> np.ndarray:
        """``array`` if MPI can send it as it is (converting a non-array, e.g. a float, with np.asarray)."""
        if not isinstance(array, np.ndarray):
            array = np.asarray(array)
        if array.dtype not in (_REDUCIBLE if reduce else _CARRIABLE) or not array.flags.c_contiguous:
            raise self._refuse(what, array, reduce)
        return array

    def _receivable(self, array: Any, what: str, shape: tuple | None = None, dtype: Any = None) -> np.ndarray:
        """``array`` if MPI can receive into it (writable, contiguous; ``shape``/``dtype`` when given)."""
        if (not isinstance(array, np.ndarray) or array.dtype not in _CARRIABLE
                or not array.flags.c_contiguous):
            raise self._refuse(what, array, False)
        if not array.flags.writeable:
            raise DistributedError(f"{self._where()}: {what} receives into a read-only array; pass a writable one")
        if shape is not None and (array.shape != shape or array.dtype != dtype):
            raise DistributedError(f"{self._where()}: {what} has shape {array.shape} and dtype {array.dtype}; "
                                   f"expected {shape} and {dtype}")
        return array

    def _rank_arg(self, value: Any, what: str, any_allowed: bool = False) -> int:
        if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
            if 0 <= value < self._size:
                return int(value)
            if any_allowed and value == ANY_SOURCE:
                return MPI.ANY_SOURCE
        allowed = f"[0, {self._size})" + (" or ANY_SOURCE (-1)" if any_allowed else "")
        raise DistributedError(f"{self._where()}: {what}={value!r} is not a rank; it must be an int in {allowed}")

    def _tag_arg(self, tag: Any, any_allowed: bool = False) -> int:
        if isinstance(tag, (int, np.integer)) and not isinstance(tag, bool):
            if 0 <= tag <= 32767:
                return int(tag)
            if any_allowed and tag == ANY_TAG:
                return MPI.ANY_TAG
        raise DistributedError(f"{self._where()}: tag={tag!r}; a tag is an int in [0, 32767]"
                               + (" or ANY_TAG (-1)" if any_allowed else ""))

    # ------------------------------------------------------------------------------------------ argument checks
    def _verify(self, kind: str, array: np.ndarray | None, op: str | None, root: int, name: str | None) -> None:
        """Every rank describes its call; all raise the same error if the descriptions differ."""
        self._counters.checks += 1
        description = self._description
        description[:] = 0
        description[0] = _KIND[kind]
        description[1] = -1 if op is None else _OP_INDEX[op]
        description[2] = root
        if array is not None:
            description[3], description[4] = ord(array.dtype.kind), array.dtype.itemsize
            description[5], description[6] = array.ndim, array.size
            shape = array.shape
            description[7:7 + min(4, len(shape))] = shape[:4]
            description[11] = zlib.crc32(repr(shape[4:]).encode()) if len(shape) > 4 else 0
        description[12] = zlib.crc32(name.encode()) if name else 0
        watchdog = self._watchdog
        # named as the call itself: a rank that never arrives stalls the others here, in the first 64 collectives
        label = kind if op is None else f"{kind}({op})"
        watchdog.state = (perf_counter(), (label, None if array is None else array.shape,
                                           None if array is None else array.dtype, name,
                                           root if kind in ("broadcast", "gather") else None, None))
        try:
            self._internal.Allgather(description, self._table)
        except MPI.Exception as error:
            raise self._mpi_error(f"the argument check before {kind}", error) from None
        finally:
            watchdog.state = None
        if not (self._table == self._table[0]).all():
            self._mismatch(kind, array, op, root, name)

    def _describe(self, kind: str, array: np.ndarray | None, op: str | None, root: int, name: str | None) -> str:
        text = kind if op is None else f"{kind}({op})"
        if array is not None:
            text += f" of {array.dtype}[{_dims(array.shape)}]"
        if name:
            text += f" '{name}'"
        if kind in ("broadcast", "gather"):
            text += f" root {root}"
        return text

    def _mismatch(self, kind: str, array: np.ndarray | None, op: str | None, root: int, name: str | None) -> None:
        mine = self._describe(kind, array, op, root, name)
        descriptions = self._internal.allgather(mine)  # the error path: pickling is fine here
        groups: dict[str, list[int]] = {}
        for rank, description in enumerate(descriptions):
            groups.setdefault(description, []).append(rank)
        calls = "; ".join(f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}: {description}"
                          for description, ranks in groups.items())
        raise DistributedError(f"{self._where()}: the ranks called collective #{self._collectives} with different "
                               f"arguments -- {calls}. Every rank must call the same collectives in the same order "
                               "with the same shapes, dtypes, ops and roots")

    def _collective(self, kind: str, array: np.ndarray | None, op: str | None = None, root: int = 0,
                    name: str | None = None) -> None:
        """Count the collective; check its arguments if it is among the checked ones."""
        self._collectives += 1
        if self._check_left:
            self._check_left -= 1
            self._verify(kind, array, op, root, name)
        elif self._check_all:
            self._verify(kind, array, op, root, name)

    # ------------------------------------------------------------------------------------------ collectives
    def _reduce_args(self, array: Any, op: str, out: Any, what: str) -> tuple[np.ndarray, np.ndarray]:
        array = self._sendable(array, what, reduce=True)
        if op not in _MPI_OPS:
            raise DistributedError(f"{self._where()}: {what}(op={op!r}); op must be one of {', '.join(REDUCE_OPS)}")
        if op == "mean" and array.dtype.kind not in "fc":
            raise DistributedError(f"{self._where()}: {what}(op='mean') of a {array.dtype} array would not fit its "
                                   "dtype; reduce with op='sum' and divide, or pass a float array")
        if out is None:
            out = np.empty_like(array)
        elif out is not array:
            self._receivable(out, f"{what}(out=...)", array.shape, array.dtype)
        return array, out

    def allreduce(self, array: np.ndarray, op: str = "sum", out: np.ndarray | None = None, *,
                  name: str | None = None) -> np.ndarray:
        array, out = self._reduce_args(array, op, out, "allreduce")
        if self._size == 1:
            if out is not array:
                np.copyto(out, array)
            self._counters.record("allreduce", 0, 0, 0.0)
            return out
        started = perf_counter()
        self._collective("allreduce", array, op, 0, name)
        watchdog = self._watchdog
        watchdog.state = (started, (_LABELS[op], array.shape, array.dtype, name, None, None))
        try:
            self.comm.Allreduce(MPI.IN_PLACE if out is array else array, out, _MPI_OPS[op])
        except MPI.Exception as error:
            raise self._mpi_error(_LABELS[op], error) from None
        finally:
            watchdog.state = None
        if op == "mean":
            out /= self._size
        nbytes = array.nbytes
        self._counters.record("allreduce", nbytes, nbytes, perf_counter() - started)
        if self._timeline is not None:
            self._timeline.call("allreduce", name, started, nbytes, array.dtype, array.shape, "op", op)
        return out

    def iallreduce(self, array: np.ndarray, op: str = "sum", out: np.ndarray | None = None, *,
                   name: str | None = None) -> MPIRequest:
        array, out = self._reduce_args(array, op, out, "iallreduce")
        label = _ILABELS[op]
        what = (f"wait for {label}", array.shape, array.dtype, name, None, None)
        if self._size == 1:
            if out is not array:
                np.copyto(out, array)
            self._counters.record("iallreduce", 0, 0, 0.0)
            request = MPIRequest(self, None, "iallreduce", what, out, ())
            request.done = True
            return request
        started = perf_counter()
        self._collective("iallreduce", array, op, 0, name)
        try:
            handle = self.comm.Iallreduce(MPI.IN_PLACE if out is array else array, out, _MPI_OPS[op])
        except MPI.Exception as error:
            raise self._mpi_error(label, error) from None
        nbytes = array.nbytes
        self._counters.record("iallreduce", nbytes, nbytes, perf_counter() - started)
        if self._timeline is not None:
            self._timeline.call("iallreduce", name, started, nbytes, array.dtype, array.shape, "op", op)
        return MPIRequest(self, handle, "iallreduce", what, out, (array, out), mean=op == "mean", issued=started)

    def broadcast(self, array: np.ndarray, root: int = 0, out: np.ndarray | None = None, *,
                  name: str | None = None) -> np.ndarray:
        array = self._sendable(array, "broadcast")
        root = self._rank_arg(root, "root")
        if out is None:
            out = array.copy() if self._rank == root else np.empty_like(array)
        elif out is not array:
            self._receivable(out, "broadcast(out=...)", array.shape, array.dtype)
            if self._rank == root:
                np.copyto(out, array)
        else:
            self._receivable(out, "broadcast(out=array)")
        if self._size == 1:
            self._counters.record("broadcast", 0, 0, 0.0)
            return out
        started = perf_counter()
        self._collective("broadcast", array, None, root, name)
        watchdog = self._watchdog
        watchdog.state = (started, ("broadcast", array.shape, array.dtype, name, root, None))
        try:
            self.comm.Bcast(out, root)
        except MPI.Exception as error:
            raise self._mpi_error("broadcast", error) from None
        finally:
            watchdog.state = None
        nbytes = out.nbytes
        is_root = self._rank == root
        self._counters.record("broadcast", nbytes if is_root else 0, 0 if is_root else nbytes,
                              perf_counter() - started)
        if self._timeline is not None:
            self._timeline.call("broadcast", name, started, nbytes, out.dtype, out.shape, "root", root)
        return out

    def gather(self, array: np.ndarray, root: int = 0, out: np.ndarray | None = None, *,
               name: str | None = None) -> np.ndarray | None:
        array = self._sendable(array, "gather")
        root = self._rank_arg(root, "root")
        is_root = self._rank == root
        if is_root:
            shape = (self._size,) + array.shape
            out = np.empty(shape, array.dtype) if out is None else self._receivable(out, "gather(out=...)", shape,
                                                                                     array.dtype)
        if self._size == 1:
            out[0] = array
            self._counters.record("gather", 0, 0, 0.0)
            return out
        started = perf_counter()
        self._collective("gather", array, None, root, name)
        watchdog = self._watchdog
        watchdog.state = (started, ("gather", array.shape, array.dtype, name, root, None))
        try:
            self.comm.Gather(array, out if is_root else None, root)
        except MPI.Exception as error:
            raise self._mpi_error("gather", error) from None
        finally:
            watchdog.state = None
        nbytes = array.nbytes
        self._counters.record("gather", 0 if is_root else nbytes, nbytes * (self._size - 1) if is_root else 0,
                              perf_counter() - started)
        if self._timeline is not None:
            self._timeline.call("gather", name, started, nbytes, array.dtype, array.shape, "root", root)
        return out if is_root else None

    def allgather(self, array: np.ndarray, out: np.ndarray | None = None, *,
                  name: str | None = None) -> np.ndarray:
        array = self._sendable(array, "allgather")
        shape = (self._size,) + array.shape
        out = np.empty(shape, array.dtype) if out is None else self._receivable(out, "allgather(out=...)", shape,
                                                                                 array.dtype)
        if self._size == 1:
            out[0] = array
            self._counters.record("allgather", 0, 0, 0.0)
            return out
        started = perf_counter()
        self._collective("allgather", array, None, 0, name)
        watchdog = self._watchdog
        watchdog.state = (started, ("allgather", array.shape, array.dtype, name, None, None))
        try:
            self.comm.Allgather(array, out)
        except MPI.Exception as error:
            raise self._mpi_error("allgather", error) from None
        finally:
            watchdog.state = None
        nbytes = array.nbytes
        self._counters.record("allgather", nbytes, nbytes * (self._size - 1), perf_counter() - started)
        if self._timeline is not None:
            self._timeline.call("allgather", name, started, nbytes, array.dtype, array.shape)
        return out

    def _scratch_like(self, array: np.ndarray, slot: int) -> np.ndarray:
        """A reusable receive buffer of ``array``'s shape and dtype (no allocation per step on the hot path)."""
        key = (array.shape, array.dtype, slot)
        buffer = self._scratch.get(key)
        if buffer is None:
            if len(self._scratch) >= 256:  # many distinct shapes: start over rather than grow without bound
                self._scratch.clear()
            buffer = self._scratch[key] = np.empty_like(array)
        return buffer

    def reduce_from_neighbors(self, array: np.ndarray, out: np.ndarray | None = None, *,
                              name: str | None = None) -> np.ndarray:
        """``x[r] + x[(r-1) % P] + x[(r+1) % P]`` (P = 2: ``x[r] + 2 x[other]``; P = 1: ``3 x[r]``)."""
        array = self._sendable(array, "reduce_from_neighbors", reduce=True)
        if out is None:
            out = np.empty_like(array)
        elif out is not array:
            self._receivable(out, "reduce_from_neighbors(out=...)", array.shape, array.dtype)
        size = self._size
        if size == 1:
            np.multiply(array, 3, out=out)
            self._counters.record("reduce_from_neighbors", 0, 0, 0.0)
            return out
        started = perf_counter()
        self._collective("reduce_from_neighbors", array, None, 0, name)
        left, right = (self._rank - 1) % size, (self._rank + 1) % size
        watchdog = self._watchdog
        watchdog.state = (started, ("reduce_from_neighbors", array.shape, array.dtype, name, None, None))
        internal = self._internal
        try:
            if size == 2:  # one neighbour, on both sides: exchange once, count it twice
                other = self._scratch_like(array, 0)
                internal.Sendrecv(array, right, _TO_RIGHT, other, left, _TO_RIGHT)
            else:
                from_left, from_right = self._scratch_like(array, 0), self._scratch_like(array, 1)
                MPI.Request.Waitall([internal.Irecv(from_left, left, _TO_RIGHT),
                                     internal.Irecv(from_right, right, _TO_LEFT),
                                     internal.Isend(array, right, _TO_RIGHT),
                                     internal.Isend(array, left, _TO_LEFT)])
        except MPI.Exception as error:
            raise self._mpi_error("reduce_from_neighbors", error) from None
        finally:
            watchdog.state = None
        if size == 2:
            np.add(array, other, out=out)
            out += other
            traffic = array.nbytes
        else:
            np.add(array, from_left, out=out)
            out += from_right
            traffic = 2 * array.nbytes
        self._counters.record("reduce_from_neighbors", traffic, traffic, perf_counter() - started)
        if self._timeline is not None:
            self._timeline.call("reduce_from_neighbors", name, started, array.nbytes, array.dtype, array.shape)
        return out

    def barrier(self) -> None:
        if self._size == 1:
            self._counters.record("barrier", 0, 0, 0.0)
            return
        started = perf_counter()
        self._collective("barrier", None)
        watchdog = self._watchdog
        watchdog.state = (started, ("barrier", None, None, None, None, None))
        try:
            self.comm.Barrier()
        except MPI.Exception as error:
            raise self._mpi_error("barrier", error) from None
        finally:
            watchdog.state = None
        self._counters.record("barrier", 0, 0, perf_counter() - started)
        if self._timeline is not None:
            self._timeline.call("barrier", None, started, 0)

    # ------------------------------------------------------------------------------------------ point to point
    def send(self, array: np.ndarray, dest: int, tag: int = 0) -> None:
        array = self._sendable(array, "send")
        dest, tag = self._rank_arg(dest, "dest"), self._tag_arg(tag)
        started = perf_counter()
        watchdog = self._watchdog
        watchdog.state = (started, ("send", array.shape, array.dtype, None, dest, tag))
        try:
            self.comm.Send(array, dest, tag)
        except MPI.Exception as error:
            raise self._mpi_error("send", error) from None
        finally:
            watchdog.state = None
        self._counters.record("send", array.nbytes, 0, perf_counter() - started)
        if self._timeline is not None:
            self._timeline.call("send", None, started, array.nbytes, array.dtype, array.shape, "peer", dest)

    def recv(self, array: np.ndarray, source: int, tag: int = 0) -> np.ndarray:
        self._receivable(array, "recv")
        source, tag = self._rank_arg(source, "source", any_allowed=True), self._tag_arg(tag, any_allowed=True)
        status = MPI.Status()
        started = perf_counter()
        watchdog = self._watchdog
        watchdog.state = (started, ("recv", array.shape, array.dtype, None,
                                    "any" if source == MPI.ANY_SOURCE else source, tag))
        try:
            self.comm.Recv(array, source, tag, status)
        except MPI.Exception as error:
            raise self._mpi_error("recv", error) from None
        finally:
            watchdog.state = None
        received = status.Get_count(MPI.BYTE)
        self._counters.record("recv", 0, received, perf_counter() - started)
        if self._timeline is not None:
            self._timeline.call("recv", None, started, received, array.dtype, array.shape, "peer",
                                status.Get_source())
        if received != array.nbytes:
            raise self._short_message("recv", received, array.nbytes, status.Get_source())
        return array

    def probe(self, source: int = ANY_SOURCE, tag: int = ANY_TAG) -> tuple[int, int, int] | None:
        source, tag = self._rank_arg(source, "source", any_allowed=True), self._tag_arg(tag, any_allowed=True)
        status = MPI.Status()
        started = perf_counter()
        try:
            found = self.comm.Iprobe(source, tag, status)
        except MPI.Exception as error:
            raise self._mpi_error("probe", error) from None
        self._counters.record("probe", 0, 0, perf_counter() - started)
        return (status.Get_source(), status.Get_tag(), status.Get_count(MPI.BYTE)) if found else None

    def isend(self, array: np.ndarray, dest: int, tag: int = 0) -> MPIRequest:
        array = self._sendable(array, "isend")
        dest, tag = self._rank_arg(dest, "dest"), self._tag_arg(tag)
        started = perf_counter()
        try:
            handle = self.comm.Isend(array, dest, tag)
        except MPI.Exception as error:
            raise self._mpi_error("isend", error) from None
        self._counters.record("isend", array.nbytes, 0, perf_counter() - started)
        if self._timeline is not None:
            self._timeline.call("isend", None, started, array.nbytes, array.dtype, array.shape, "peer", dest)
        return MPIRequest(self, handle, "isend", ("wait for isend", array.shape, array.dtype, None, dest, tag),
                          None, (array,), issued=started)

    def irecv(self, array: np.ndarray, source: int, tag: int = 0) -> MPIRequest:
        self._receivable(array, "irecv")
        source, tag = self._rank_arg(source, "source", any_allowed=True), self._tag_arg(tag, any_allowed=True)
        started = perf_counter()
        try:
            handle = self.comm.Irecv(array, source, tag)
        except MPI.Exception as error:
            raise self._mpi_error("irecv", error) from None
        self._counters.record("irecv", 0, 0, perf_counter() - started)
        peer = "any" if source == MPI.ANY_SOURCE else source
        if self._timeline is not None:
            self._timeline.call("irecv", None, started, 0, array.dtype, array.shape, "peer", peer)
        return MPIRequest(self, handle, "irecv", ("wait for irecv", array.shape, array.dtype, None, peer, tag),
                          array, (array,), expected=array.nbytes, issued=started)

    def testall(self, requests: Sequence[CommunicationRequest]) -> bool:
        return all([request.test() for request in requests])

    def waitall(self, requests: Iterable[CommunicationRequest]) -> list[np.ndarray | None]:
        requests = list(requests)
        pending = [request for request in requests if isinstance(request, MPIRequest) and not request.done]
        if len(pending) > 1:  # one MPI call for all of them; each then finishes (and counts) as usual
            watchdog = self._watchdog
            started = perf_counter()
            first = describe_call(pending[0]._what)
            watchdog.state = (started, f"waitall of {len(pending)} requests (the first: {first})")
            statuses = [MPI.Status() if request._status is None else request._status for request in pending]
            try:
                MPI.Request.Waitall([request._request for request in pending], statuses)
            except MPI.Exception as error:
                raise self._mpi_error("waitall", error) from None
            finally:
                watchdog.state = None
            share = (perf_counter() - started) / len(pending)
            if self._timeline is not None:
                self._timeline.call("waitall", None, started, 0, key="requests", value=len(pending))
            for request in pending:
                self._counters.record(request._op, 0, 0, share, calls=0)
                request._finish()
        return [request.wait() for request in requests]

    # ------------------------------------------------------------------------------------------ lifetime
    def close(self) -> None:
        """Stop the watchdog and free the communicators (collective: every rank calls it). Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._watchdog.stop()
        if self.fault_handlers is not None:
            self.fault_handlers.watchdog.stop()
        if not MPI.Is_finalized():
            self.comm.Free()
            self._internal.Free()
        if self._timeline is not None:  # D5_TIMELINE: this rank's file (again at exit, if more came)
            self._timeline.write()

    def __enter__(self) -> MPICommunicationNetwork:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


__all__ = ["MPICommunicationNetwork", "MPIRequest", "checked_from_env", "DEFAULT_CHECKED"]
