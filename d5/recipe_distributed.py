"""Recipes on several processes: ``--scheme``/``--compression``, the checks that keep ranks from waiting on each
other, the scaling figures a distributed run reports, and ``d5 launch``.

A recipe runs distributed when it is given ``--scheme NAME`` (on one process too: a 1-rank run with a scheme is
the baseline of a speedup) or when ``mpiexec`` started it on more than one rank -- then a scheme is required: without
one every rank would train alone on the whole dataset. Every rank then:

1. configures the recipe (components, overrides) and opens an :class:`~d5.distributed.MPICommunicationNetwork`;
2. meets the other ranks at a *gate* (:func:`gate`): if configuring failed on any rank, every rank stops with a d5
   error that names the failing ranks and their message -- none is left waiting in a collective;
3. checks that every rank runs the same recipe with the same overrides (:func:`check_same_recipe`: an allgather of
   digests of the script, the resolved components and the argv) and that the scheme can use the world size (a
   parameter server needs a server and a worker);
4. builds the components -- with the recipe's training sampler replaced by a :class:`~d5.distributed.DistributedSampler`
   over the same dataset, ``--batch-size`` (the recipe's batch size) *per rank* -- and meets at a second gate;
5. trains with the scheme wrapped around the recipe's optimizer (a framework-neutral ThreeStepOptimizer), every rank
   running the whole Trainer, validation and metrics included (a metric may be collective, e.g.
   ``CommunicationVolume(gather=True)``); rank 0's model is the one the metrics report;
6. gathers every rank's figures to rank 0 (:func:`gather_figures`), which alone prints and writes the result; the
   other ranks are quiet (no progress bar, no table) and exit with rank 0's verdict.

A d5 error after the second gate -- during training, when the other ranks may be inside a collective -- is printed
with its rank and ends the whole job (``MPI_Abort``), since the others could otherwise only wait for the watchdog.

**Scaling figures** (the seeds' equations 1 and 2): ``throughput_n = samples * epochs * workers / time_n`` -- the
samples every training rank trained on, over the slowest rank's training time (validation excluded) -- then
``speedup_n = throughput_n / throughput_1`` and ``efficiency = speedup_n / n`` with ``n`` the ranks that train (a
dedicated parameter server does not). ``throughput_1`` comes from ``--baseline-throughput X`` or ``--baseline
RESULT.json`` (a 1-rank run of the recipe); a run on one rank is its own baseline. Without one, speedup and
efficiency are reported as unknown (null).

**Status files**: with ``D5_RANK_STATUS_DIR`` set (``d5 launch`` sets it), every rank writes ``rank<R>.json``
(``rank``, ``size``, ``status`` -- 0 met, 1 missed a metric or crashed, 2 a d5 error -- ``passed`` and ``error``)
when its run ends, so the launcher need not trust ``mpiexec``'s exit code.

>>> launcher_place({"PMI_RANK": "1", "PMI_SIZE": "4"}), launcher_place({})
((1, 4), None)
>>> speedup_and_efficiency(300.0, 100.0, 4)
(3.0, 0.75)
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from d5.errors import D5Error, DistributedError, RecipeError

#: The environment variable through which ``d5 launch`` asks every rank for a status file.
STATUS_ENV = "D5_RANK_STATUS_DIR"
#: (rank, size) variables of the launchers d5 knows: MPICH/Intel MPI (hydra), Open MPI, MVAPICH.
_LAUNCHER_VARIABLES = (("PMI_RANK", "PMI_SIZE"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
                       ("MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE"))


def launcher_place(environ: Mapping[str, str] | None = None) -> tuple[int, int] | None:
    """``(rank, size)`` that ``mpiexec`` gave this process, read from its environment (no MPI call: MPI is not
    initialized for a plain run); None when no launcher started it."""
    environ = os.environ if environ is None else environ
    for rank_name, size_name in _LAUNCHER_VARIABLES:
        rank, size = environ.get(rank_name, ""), environ.get(size_name, "")
        if rank.isdigit() and size.isdigit() and int(size) >= 1:
            return int(rank), int(size)
    return None


class RankContext:
    """This process's place in a (possibly) distributed recipe run: ``rank``/``size`` (from the launcher until
    the network is open, then from it), ``comm`` (None for a plain run) and whether an error now must end the
    whole job (``collective``: after the last gate, before the last collective)."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        place = launcher_place(environ)
        self.rank, self.size = place or (0, 1)
        self.launched = self.size > 1
        self.comm: Any = None
        self.collective = False
        self.status_dir = (os.environ if environ is None else environ).get(STATUS_ENV) or None

    @property
    def reporting(self) -> bool:
        """Whether this rank prints and writes results (rank 0)."""
        return self.rank == 0

    def label(self, error: BaseException) -> D5Error:
        """``error`` as a D5Error whose message starts with this rank when there are several."""
        if self.size <= 1:
            return error if isinstance(error, D5Error) else D5Error(str(error))
        return type(error)(f"rank {self.rank}/{self.size}: {error}") if isinstance(error, D5Error) and \
            _rebuildable(error) else D5Error(f"rank {self.rank}/{self.size}: {error}")

    def open(self, scheme: str | None, pending: BaseException | None = None) -> None:
        """Open the MPI network (collective over every rank). ``pending``: this rank's configuration error, raised
        instead of an MPI error when MPI cannot start (the configuration is what the user must fix first)."""
        try:
            self.comm = open_network(scheme, self.size)
        except D5Error:
            if pending is not None:
                raise pending
            raise
        self.rank, self.size = self.comm.rank, self.comm.size

    def close(self) -> None:
        """Free the network (collective) once no collective is left; errors after it are this rank's own."""
        if self.comm is not None:
            self.comm.close()
        self.collective = False

    def write_status(self, status: int, passed: bool | None = None, error: BaseException | None = None) -> None:
        """``rank<R>.json`` in ``D5_RANK_STATUS_DIR`` (when set), written atomically; never raises."""
        if not self.status_dir:
            return
        record = {"rank": self.rank, "size": self.size, "status": int(status), "passed": passed, "pid": os.getpid(),
                  "error": None if error is None else error_text(error)}
        try:
            directory = Path(self.status_dir)
            directory.mkdir(parents=True, exist_ok=True)
            temporary = directory / f".rank{self.rank}.{os.getpid()}.tmp"
            temporary.write_text(json.dumps(record))
            os.replace(temporary, directory / f"rank{self.rank}.json")
        except OSError:
            pass  # a status that cannot be written shows as a rank that did not report

    def abort_if_collective(self, code: int) -> None:
        """End the whole job (``MPI_Abort``) when this rank fails while others may wait in a collective."""
        if not (self.collective and self.comm is not None and self.size > 1):
            return
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except Exception:  # noqa: BLE001 -- a closed stream must not stop the abort
            pass
        time.sleep(0.3)  # hydra tears the job down fast: let the error line get out first
        from mpi4py import MPI

        MPI.COMM_WORLD.Abort(code)


def error_text(error: BaseException) -> str:
    """A d5 error's message as it is (it says what to do); anything else with its type (a bug: say which)."""
    return str(error) if isinstance(error, D5Error) else f"{type(error).__name__}: {error}"


def _rebuildable(error: D5Error) -> bool:
    try:
        type(error)("probe")
    except Exception:  # noqa: BLE001 -- an error class with another constructor: wrap it instead
        return False
    return True


def open_network(scheme: str | None, launched_size: int) -> Any:
    """An :class:`~d5.distributed.MPICommunicationNetwork` over every rank, or a RecipeError saying how to get MPI."""
    why = f"--scheme {scheme}" if scheme else f"a run on {launched_size} MPI ranks"
    try:
        from d5.distributed.mpi import MPICommunicationNetwork
    except ImportError as err:
        missing = getattr(err, "name", None) == "mpi4py" or "No module named 'mpi4py'" in str(err)
        raise RecipeError(
            f"{why} needs MPI, but " + ("mpi4py is not installed" if missing else
                                        f"mpi4py could not load an MPI library ({str(err).splitlines()[0]})")
            + ": install MPI for this Python with pip install 'd5[mpi]' (mpi4py and the mpich wheel), or point "
            "mpi4py at an MPI library of this machine; or drop --scheme to train on one process") from None
    except RuntimeError as err:  # mpi4py raises RuntimeError when MPI_Init fails
        raise RecipeError(f"{why} needs MPI, but MPI could not start ({str(err).splitlines()[0]}); check the MPI "
                          "installation (`d5 info` shows what d5 finds) or drop --scheme") from None
    return MPICommunicationNetwork()


# -------------------------------------------------------------------------------------------- across ranks

def allgather_json(comm: Any, value: Any) -> list:
    """Every rank's ``value`` (JSON-able), in rank order: two buffer allgathers (lengths, then padded bytes)."""
    data = np.frombuffer(json.dumps(value, default=str).encode(), dtype=np.uint8)
    lengths = np.asarray(comm.allgather(np.array([data.size], dtype=np.int64), name="recipe/json-length")).reshape(-1)
    buffer = np.zeros(max(1, int(lengths.max())), dtype=np.uint8)
    buffer[:data.size] = data
    table = np.asarray(comm.allgather(buffer, name="recipe/json")).reshape(comm.size, -1)
    return [json.loads(table[rank, :int(lengths[rank])].tobytes().decode()) for rank in range(comm.size)]


def gate(comm: Any, error: BaseException | None, what: str) -> None:
    """Meet every rank; if ``error`` (this rank's failure, or None) or any other rank's is set, raise on every
    rank: a failing rank raises its own error, the others a RecipeError naming the failing ranks and the first
    one's message."""
    reports = allgather_json(comm, None if error is None else error_text(error))
    failed = [rank for rank, report in enumerate(reports) if report is not None]
    if not failed:
        return
    if error is not None:
        raise error
    ranks = f"rank {failed[0]}" if len(failed) == 1 else f"ranks {', '.join(map(str, failed))}"
    raise RecipeError(f"{ranks} could not {what}: {reports[failed[0]]}; every rank stops")


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def check_same_recipe(comm: Any, items: Mapping[str, str], argv: Sequence[str]) -> None:
    """Raise a RecipeError on every rank unless every rank has the same ``items`` (name -> canonical text: the
    recipe script, each resolved component, the overrides); the error names the ranks and what differs."""
    mine = {"digests": {name: _digest(text) for name, text in items.items()}, "argv": " ".join(argv)}
    reports = allgather_json(comm, mine)
    reference = reports[0]["digests"]
    differing = {}
    for rank, report in enumerate(reports[1:], start=1):
        names = sorted(name for name in set(reference) | set(report["digests"])
                       if reference.get(name) != report["digests"].get(name))
        if names:
            differing[rank] = names
    if not differing:
        return
    details = "; ".join(f"rank {rank}: {', '.join(names)}" for rank, names in list(differing.items())[:4])
    argv_note = ""
    first = next(iter(differing))
    if reports[first]["argv"] != reports[0]["argv"]:
        argv_note = (f" (rank 0 has overrides {reports[0]['argv'] or '(none)'!r}, rank {first} "
                     f"{reports[first]['argv'] or '(none)'!r})")
    raise RecipeError(f"the ranks do not run the same recipe: {len(differing)} of {comm.size} ranks differ from rank "
                      f"0 -- {details}{argv_note}; start every rank with the same recipe script and overrides (`d5 "
                      "launch -n N RECIPE [overrides]` does), and make the recipe independent of the rank")


# -------------------------------------------------------------------------------------------- the scheme

def scheme_class(name: str) -> type:
    from d5.distributed.schemes import scheme_by_name

    try:
        return scheme_by_name(name)
    except DistributedError as err:
        raise RecipeError(f"--scheme {name}: {err}") from None


def min_ranks(name: str) -> int:
    """The fewest ranks the scheme ``name`` runs on (its class's ``min_ranks``)."""
    return int(scheme_class(name).min_ranks)


def check_world_size(scheme: str | None, size: int) -> None:
    """A run on several ranks needs a scheme; a scheme needs enough ranks. RecipeError (the same on every rank)."""
    if scheme is None:
        if size > 1:
            raise RecipeError(f"this recipe runs on {size} MPI ranks but was given no --scheme, so every rank would "
                              "train alone on the whole dataset; pass --scheme allreduce (or ps, async-ps, "
                              "model-averaging, neighbors, dpsgd), or run it without mpiexec")
        return
    needed = min_ranks(scheme)
    if size < needed:
        role = " (a server and a worker)" if "ps" in scheme else ""
        raise RecipeError(f"--scheme {scheme} needs at least {needed} ranks{role}, but the run has {size}; launch it "
                          f"on more (`d5 launch -n {needed} RECIPE ...` or `mpiexec -n {needed} python RECIPE ...`), "
                          "or use --scheme allreduce, which runs on any number of ranks")


#: The schemes that also take a framework's native optimizer (through :class:`~d5.distributed.DataParallel`, which
#: averages the gradients inside its step); every other scheme needs a ThreeStepOptimizer's hooks.
NATIVE_SCHEMES = ("allreduce",)


def is_native_optimizer(optimizer: Any) -> bool:
    """Whether ``optimizer`` (a class or an instance) is a framework's native optimizer (a NativeOptimizer)."""
    from d5.training.native_optimizer import NativeOptimizer

    cls = optimizer if isinstance(optimizer, type) else type(optimizer)
    return issubclass(cls, NativeOptimizer)


def check_optimizer(optimizer: Any, framework_override: str | None = None, scheme: str | None = None) -> None:
    """Schemes wrap d5's framework-neutral three-step optimizers; a framework's native optimizer is taken by
    ``--scheme allreduce`` alone (DataParallel) and refused by the others (``framework_override``: the
    ``--framework`` that chose it)."""
    native = is_native_optimizer(optimizer)
    if native and scheme in NATIVE_SCHEMES:
        return
    if not native and all(callable(getattr(optimizer, hook, None))
                          for hook in ("new_input", "prepare_param", "update_rule")):
        return
    name = getattr(optimizer, "__name__", type(optimizer).__name__)
    module = getattr(optimizer, "__module__", "") or ""
    what = f"--scheme {scheme}" if scheme else "--scheme"
    if native:
        chosen = f" (--framework {framework_override} chose it)" if framework_override else ""
        raise RecipeError(f"{what} needs a framework-neutral ThreeStepOptimizer (new_input, prepare_param, "
                          f"update_rule) to wrap, but the recipe's optimizer {module}.{name} is that framework's native "
                          f"optimizer{chosen}; --scheme allreduce takes it (d5.distributed.DataParallel averages the "
                          f"gradients inside its step), or use d5's own d5.{name} in the recipe's 'optimizer' with "
                          + (f"the executor d5.frameworks.{framework_override}.from_model" if framework_override else
                             "the same executor") + " for the other schemes")
    raise RecipeError(f"{what} needs a d5 optimizer to wrap: a framework-neutral ThreeStepOptimizer (new_input, "
                      f"prepare_param, update_rule), or for --scheme allreduce a framework's native optimizer; the "
                      f"recipe's optimizer {module}.{name} is neither; use d5's own (e.g. d5.MomentumOptimizer, which "
                      "runs on every framework's executor) in the recipe's 'optimizer'")


def check_train_sampler(sampler: Any) -> None:
    """The training sampler must be one d5 can shard over the ranks (shuffled or ordered)."""
    from d5.training.sampler import OrderedSampler, ShuffleSampler

    if sampler not in (ShuffleSampler, OrderedSampler):
        raise RecipeError(f"--scheme shards the training data with a DistributedSampler, which replaces a "
                          f"ShuffleSampler or an OrderedSampler; the recipe's train_sampler is "
                          f"{getattr(sampler, '__name__', sampler)!r}, which it cannot stand for. Use ShuffleSampler "
                          "in the recipe, or drop --scheme")


def distributed_sampler(spec: Mapping[str, Any], train_set: Any, batch_size: int, seed: int, optimizer: Any) -> Any:
    """The DistributedSampler that replaces the recipe's ShuffleSampler/OrderedSampler: the same dataset, shuffling,
    seed, ``drop_last`` and transforms; ``batch_size`` per rank; sharded over the ranks that train (a scheme with
    ``workers``/``worker_index``, the asynchronous parameter server, shards over its workers only)."""
    import inspect

    from d5.distributed.sampler import DistributedSampler
    from d5.training.sampler import ShuffleSampler

    sampler = spec.get("train_sampler", ShuffleSampler)
    try:
        bound = inspect.signature(sampler).bind_partial(train_set, batch_size, *spec.get("train_sampler_args", ()),
                                                        **spec.get("train_sampler_kwargs", {}))
    except TypeError as err:
        raise RecipeError(f"could not build component 'train_sampler' from {sampler.__name__}: {err}") from None
    arguments = dict(bound.arguments)
    keep = {key: arguments[key] for key in ("drop_last", "transforms", "transform") if key in arguments}
    communication = optimizer.communication
    rank, size = communication.rank, communication.size
    if getattr(optimizer, "workers", None) is not None and hasattr(optimizer, "worker_index"):
        rank, size = optimizer.worker_index or 0, optimizer.workers
    return DistributedSampler(train_set, batch_size, rank=rank, size=size, seed=int(arguments.get("seed", seed)),
                              shuffle=sampler is ShuffleSampler, **keep)


class SchemeOptimizer:
    """What the Trainer steps in a distributed recipe: the scheme's ``step``, with the base optimizer's
    hyper-parameters (``lr``, ``momentum``, ...) readable and settable through it, as schedules expect."""

    def __init__(self, scheme: Any) -> None:
        object.__setattr__(self, "scheme", scheme)

    def step(self, inputs: Mapping[str, np.ndarray]) -> Any:
        return self.scheme.step(inputs)

    def __getattr__(self, name: str) -> Any:
        scheme = object.__getattribute__(self, "scheme")
        try:
            return getattr(scheme, name)
        except AttributeError:
            return getattr(scheme.base_optimizer, name)

    def __setattr__(self, name: str, value: Any) -> None:
        scheme = self.scheme
        target = scheme if name in vars(scheme) or hasattr(type(scheme), name) else scheme.base_optimizer
        setattr(target, name, value)


def wrap_optimizer(base: Any, comm: Any, scheme: str, compression: str | None, seed: int) -> SchemeOptimizer:
    """The scheme ``scheme`` around ``base`` -- a framework's native optimizer goes into a
    :class:`~d5.distributed.DataParallel` (``--scheme allreduce``) -- with ``compression=`` only when given (each
    rank its own seed, so the ranks' rounding errors average out)."""
    from d5.distributed.compression import compression_by_name
    from d5.recipe_args import scheme_takes_compression

    check_optimizer(base, scheme=scheme)
    compressor = None
    if compression is not None and scheme_takes_compression(scheme):
        compressor = compression_by_name(compression, seed=seed + comm.rank)
    if is_native_optimizer(base):
        from d5.distributed.data_parallel import DataParallel

        return SchemeOptimizer(DataParallel(base, comm, compression=compressor))
    kwargs = {} if compressor is None else {"compression": compressor}
    return SchemeOptimizer(scheme_class(scheme)(base, comm, **kwargs))


def scheme_events(optimizer: SchemeOptimizer) -> list:
    """The events a distributed run adds: a Throughput of this rank's training, and -- for a scheme with a stop
    protocol (``finish()``, the asynchronous parameter server) -- that protocol before any other event's
    ``after_training`` (a gathering metric must not meet a server still serving)."""
    from d5.training.events import TrainerEvent
    from d5.training.metrics import Throughput

    class FinishScheme(TrainerEvent):
        hook_order = -1000

        def after_training(self, trainer: Any, stats: Any) -> None:
            optimizer.scheme.finish()

    events: list = [Throughput()]
    if callable(getattr(optimizer.scheme, "finish", None)):
        events.insert(0, FinishScheme())
    return events


# -------------------------------------------------------------------------------------------- figures

def speedup_and_efficiency(throughput: float | None, baseline: float | None, workers: int
                           ) -> tuple[float | None, float | None]:
    """Equation 2 and the efficiency ``speedup / n``; (None, None) without a baseline."""
    if not throughput or not baseline or workers < 1:
        return None, None
    speedup = throughput / baseline
    return speedup, speedup / workers


def gather_figures(comm: Any, optimizer: SchemeOptimizer, throughput: Any, before: Mapping[str, Any],
                   passed: bool, sampler: Any, scheme: str, compression: str | None,
                   baseline: Mapping[str, Any] | None) -> tuple[dict, bool]:
    """Collective: every rank's bytes, communication time, samples and training time gathered (the counters'
    growth since ``before``, a ``comm.stats()`` taken before training); returns ``(the "distributed" record,
    rank 0's verdict)`` on every rank. A scheme that keeps staleness statistics (``staleness()``) adds rank 0's."""
    import socket

    after = comm.stats()
    wrapped = optimizer.scheme
    mine = {"rank": comm.rank, "host": socket.gethostname(), "pid": os.getpid(),
            "trains": not bool(getattr(wrapped, "is_server", False)),
            "bytes_sent": int(after["bytes_sent"] - before["bytes_sent"]),
            "bytes_received": int(after["bytes_received"] - before["bytes_received"]),
            "calls": int(after["calls"] - before["calls"]),
            "communication_seconds": float(after["seconds"] - before["seconds"]),
            "samples": int(throughput.samples), "train_seconds": float(throughput.seconds), "passed": bool(passed)}
    ranks = allgather_json(comm, mine)
    training = [entry for entry in ranks if entry["trains"]]
    samples = sum(entry["samples"] for entry in training)
    seconds = max((entry["train_seconds"] for entry in training), default=0.0)
    rate = samples / seconds if seconds > 0 else None
    workers = len(training)
    if baseline is None and comm.size == 1 and rate:
        baseline = {"throughput": rate, "source": "this run (one rank is its own baseline)"}
    speedup, efficiency = speedup_and_efficiency(rate, None if baseline is None else baseline["throughput"], workers)
    batch = getattr(sampler, "batch_size", None)
    record = {
        "world_size": comm.size, "workers": workers, "scheme": scheme,
        "scheme_class": f"{type(wrapped).__module__}.{type(wrapped).__qualname__}", "compression": compression,
        "batch_size_per_rank": batch, "global_batch_size": None if batch is None else batch * workers,
        "train_sampler": repr(sampler), "samples": samples, "train_seconds": seconds, "throughput": rate,
        "baseline": None if baseline is None else dict(baseline), "speedup": speedup, "efficiency": efficiency,
        "bytes_sent": sum(entry["bytes_sent"] for entry in ranks),
        "bytes_received": sum(entry["bytes_received"] for entry in ranks),
        "per_rank": [{key: value for key, value in entry.items() if key != "passed"} for entry in ranks],
    }
    staleness = wrapped.staleness() if callable(getattr(wrapped, "staleness", None)) else None
    if staleness is not None or callable(getattr(wrapped, "staleness", None)):
        record["staleness"] = staleness
    return record, bool(ranks[0]["passed"])


def _bytes(count: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(count) < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return str(count)


def summary_lines(record: Mapping[str, Any]) -> list[str]:
    """What rank 0 prints about a distributed run: a per-rank table and the scaling figures.

    >>> record = {"world_size": 2, "workers": 2, "scheme": "allreduce", "compression": None, "throughput": 2000.0,
    ...           "baseline": None, "speedup": None, "efficiency": None, "batch_size_per_rank": 32,
    ...           "global_batch_size": 64, "per_rank": [{"rank": r, "host": "h", "bytes_sent": 2048,
    ...           "bytes_received": 2048, "communication_seconds": 0.01, "samples": 128, "train_seconds": 0.1,
    ...           "trains": True} for r in range(2)]}
    >>> print(summary_lines(record)[-1])  # doctest: +ELLIPSIS
    distributed: 2 ranks, --scheme allreduce, no compression, batch 32 per rank (64 per step): throughput 2000 ...
    """
    from d5.bench.report import markdown_table

    rows = [{"rank": entry["rank"], "host": entry.get("host", ""), "sent": _bytes(entry["bytes_sent"]),
             "received": _bytes(entry["bytes_received"]), "comm s": f"{entry['communication_seconds']:.3g}",
             "samples": entry["samples"] if entry.get("trains", True) else "(server)",
             "train s": f"{entry['train_seconds']:.3g}"} for entry in record["per_rank"]]
    rate = record.get("throughput")
    figures = f"throughput {rate:.4g} samples/s" if rate else "throughput unknown (no training time)"
    if record.get("speedup") is not None:
        baseline = record["baseline"]
        workers = f"{record['workers']} training rank{'s' if record['workers'] != 1 else ''}"
        figures += (f", speedup {record['speedup']:.3g} and efficiency {100 * record['efficiency']:.3g}% over "
                    f"{workers} (baseline {baseline['throughput']:.4g} samples/s from {baseline['source']})")
    else:
        figures += (" (speedup and efficiency unknown: pass --baseline-throughput X or --baseline RESULT.json, "
                    "the recipe's 1-rank result)")
    for note in (record.get("baseline") or {}).get("notes") or ():
        figures += f"; note: {note}"
    staleness = record.get("staleness")
    if staleness:
        figures += f"; staleness mean {staleness.get('mean', 0):.3g}, max {staleness.get('max')}"
    compression = f"--compression {record['compression']}" if record.get("compression") else "no compression"
    ranks = f"{record['world_size']} rank{'s' if record['world_size'] != 1 else ''}"
    line = (f"distributed: {ranks}, --scheme {record['scheme']}, {compression}, batch "
            f"{record['batch_size_per_rank']} per rank ({record['global_batch_size']} per step): {figures}")
    return [markdown_table(rows), line]


# -------------------------------------------------------------------------------------------- d5 launch

def find_mpiexec(explicit: str | None = None, python: str | None = None, path: str | None = None) -> str:
    """The ``mpiexec`` to launch with: ``explicit`` (``--mpiexec``), else the one next to ``python`` (the venv's,
    from the ``mpich`` wheel), else the first on ``path`` (``$PATH``); a D5Error saying what to install otherwise.

    >>> find_mpiexec("/no/such/mpiexec")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    d5.errors.D5Error: d5 launch --mpiexec /no/such/mpiexec: no such executable file; ...
    """
    if explicit is not None:
        found = shutil.which(explicit) if os.sep not in explicit else (explicit if os.path.isfile(explicit) and
                                                                       os.access(explicit, os.X_OK) else None)
        if found is None:
            raise D5Error(f"d5 launch --mpiexec {explicit}: no such executable file; give the path of an MPI "
                          "launcher (e.g. .venv/bin/mpiexec), or leave --mpiexec out to use the one next to Python")
        return found
    beside = Path(python or sys.executable).with_name("mpiexec")
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("mpiexec", path=path if path is not None else os.environ.get("PATH"))
    if found is None:
        raise D5Error(f"d5 launch needs mpiexec, but there is none next to this Python ({beside.parent}) nor on PATH; "
                      "install MPI into this environment with pip install 'd5[mpi]' (mpi4py and the mpich wheel, "
                      "which brings .venv/bin/mpiexec), or pass --mpiexec PATH")
    return found


def _is_open_mpi(launcher: str) -> bool:
    try:
        completed = subprocess.run([launcher, "--version"], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "open mpi" in (completed.stdout + completed.stderr).lower() or "openrte" in completed.stdout.lower()


def read_statuses(directory: str | os.PathLike, size: int) -> dict[int, dict]:
    """The status files the ranks wrote (``rank<R>.json``), by rank; unreadable ones are left out."""
    statuses = {}
    for rank in range(size):
        try:
            statuses[rank] = json.loads((Path(directory) / f"rank{rank}.json").read_text())
        except (OSError, ValueError):
            continue
    return statuses


def launch_outcome(statuses: Mapping[int, Mapping[str, Any]], size: int, mpiexec_status: int
                   ) -> tuple[int, list[str]]:
    """``d5 launch``'s exit status and the lines it prints about failed ranks, from the ranks' status files: 0
    when every rank met the metrics, 1 when they were missed or a rank crashed or did not report, 2 for a d5 error.

    >>> launch_outcome({0: {"status": 2, "error": "rank 0/2: bad"}, 1: {"status": 2, "error": "rank 1/2: bad"}}, 2, 0)
    (2, ['d5 launch: 2 of 2 ranks failed: rank 0 (status 2): rank 0/2: bad; rank 1 (status 2): rank 1/2: bad'])
    """
    missing = [rank for rank in range(size) if rank not in statuses]
    failed = {rank: status for rank, status in sorted(statuses.items()) if status.get("status") != 0}
    lines = []
    errors = {rank: status for rank, status in failed.items() if status.get("error")}
    if errors:
        shown = "; ".join(f"rank {rank} (status {status['status']}): {status['error']}"
                          for rank, status in list(errors.items())[:8])
        lines.append(f"d5 launch: {len(errors)} of {size} ranks failed: {shown}")
    if missing:
        lines.append(f"d5 launch: rank{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))} ended without "
                     f"reporting a status (killed, aborted by another rank's failure, the recipe ended before "
                     f"run_recipe() returned, or on a machine that does not share the working directory; mpiexec "
                     f"exited with {mpiexec_status}): see the output above")
    if any(status.get("status") == 2 for status in statuses.values()):
        return 2, lines
    if missing or any(status.get("status") not in (0, 1) for status in statuses.values()):
        return 1, lines
    return int(statuses[0]["status"]) if 0 in statuses else 1, lines


def launch(n: int, recipe: str, overrides: Sequence[str], hostfile: str | None = None,
           mpiexec: str | None = None, report: Any = print) -> int:
    """``d5 launch -n N [--hostfile F] [--mpiexec PATH] RECIPE [overrides]``: run the recipe on ``n`` ranks with
    ``mpiexec -n N [--hostfile F] python RECIPE overrides``; its exit status (see :func:`launch_outcome`), read from
    the ranks' status files rather than from mpiexec's exit code. ``report`` prints the lines about failed ranks."""
    import importlib.util

    from d5.recipe_record import find_recipe

    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise D5Error(f"d5 launch -n {n}: the number of ranks must be an integer >= 1")
    script = find_recipe(recipe)
    if hostfile is not None and not Path(hostfile).is_file():
        raise D5Error(f"d5 launch --hostfile {hostfile}: no such file; give a file with one host per line (MPICH: "
                      "'host:slots', Open MPI: 'host slots=N')")
    launcher = find_mpiexec(mpiexec)
    if importlib.util.find_spec("mpi4py") is None:
        raise D5Error(f"d5 launch: mpi4py is not installed in this Python ({sys.executable}), so the ranks could not "
                      "talk to each other; install it with pip install 'd5[mpi]'")
    # On several machines the ranks must see the status directory: under the working directory (on a cluster
    # usually a shared file system) rather than this machine's /tmp. Open MPI passes the variable on only with -x.
    with tempfile.TemporaryDirectory(prefix=".d5-launch-", dir=os.getcwd() if hostfile else None) as directory:
        forward = ["-x", STATUS_ENV] if hostfile and _is_open_mpi(launcher) else []
        command = [launcher, "-n", str(n), *(["--hostfile", str(hostfile)] if hostfile else []), *forward,
                   sys.executable, str(script), *overrides]
        environment = {**os.environ, STATUS_ENV: directory}
        try:
            completed = subprocess.run(command, env=environment, check=False)
        except OSError as err:
            raise D5Error(f"d5 launch: could not start {launcher}: {err.strerror or err}") from None
        status, lines = launch_outcome(read_statuses(directory, n), n, completed.returncode)
    for line in lines:
        report(line)
    return status


__all__ = ["STATUS_ENV", "RankContext", "launcher_place", "open_network", "allgather_json", "gate",
           "check_same_recipe", "check_world_size", "check_optimizer", "is_native_optimizer", "NATIVE_SCHEMES", "check_train_sampler", "distributed_sampler",
           "SchemeOptimizer", "wrap_optimizer", "scheme_events", "speedup_and_efficiency", "gather_figures",
           "summary_lines", "find_mpiexec", "launch", "launch_outcome", "read_statuses", "min_ranks"]
