"""L2: trainer events — hooks the :class:`~d5.training.trainer.Trainer` calls while it trains.

An event overrides any of the no-op hooks of :class:`TrainerEvent`. The trainer calls them in this order::

    before_training
      before_epoch                      (per epoch)
        before_step / after_step        (per batch; on_divergence instead of after_step when a step diverges)
        before_test_set                 (if there is a validation sampler)
          after_test_batch              (per validation batch)
        after_test_set
      after_epoch
    after_training                      (on_error instead, when the run ends with an exception)

**Stopping early:** a hook that returns ``False`` (exactly ``False``; ``None`` means "go on") asks the
trainer to stop. The other events still get the same hook call; then the trainer takes no further step,
closes the current epoch (validation and ``after_epoch`` run for the steps taken, so final metrics describe
the final model; an epoch in which no step ran is not recorded) and calls ``after_training``.
``before_step`` returning ``False`` also skips that step. An event that stops may say why by setting
``trainer.stop_reason``; it ends up in ``TrainingStats.stop_reason``.

Step numbers passed to hooks are 0-based and global across epochs; epochs are 0-based. When ``after_step``
runs, ``trainer.steps`` already counts the step and ``trainer.position`` the batches taken in this epoch:
this is where a checkpoint event saves mid-epoch (``trainer.state_dict()``).

**Cost:** hooks are resolved once per run, after ``before_training``: the trainer calls only the hooks an
event's class overrides, minus the names in the event's ``skip_hooks`` (an event that overrides a hook it does
not need in its configuration lists it there, so the hook costs nothing per step). Events are called in list
order, ordered by ``hook_order`` (default 0; a checkpoint event uses a high value so that it saves after every
other event has seen the step).

**Resuming** (see :meth:`Trainer.load_state_dict <d5.training.trainer.Trainer.load_state_dict>`): an event with
``state_dict()``/``load_state_dict(state)`` is saved with the trainer and restored before the resumed run; in
that run ``trainer.resumed`` is True, so ``before_training`` must not reset what was restored. A resumed epoch
gets ``before_epoch`` again (with ``trainer.position`` > 0). A run stopped mid-epoch has reported that epoch
(validation, ``after_epoch``) already; resumed, it reports the same epoch again when it completes, and that
report supersedes the first (the events here replace their record of that epoch).

>>> class PrintLoss(TrainerEvent):
...     def after_epoch(self, trainer, epoch, stats):
...         print(f"epoch {epoch}: loss {stats.train_loss:.3f}")
"""
from __future__ import annotations

import csv
import io
import json
import math
import numbers
import os
import sys
import time
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, TextIO

import numpy as np

from d5.errors import CheckpointError, D5Error
from d5.io_utils import atomic_write

if TYPE_CHECKING:
    from d5.training.trainer import EpochStats, EvaluationStats, Trainer, TrainingStats

#: The hook names, in the order the trainer first calls them.
HOOKS = ("before_training", "before_epoch", "before_step", "on_divergence", "after_step", "before_test_set",
         "after_test_batch", "after_test_set", "after_epoch", "after_training", "on_error")
#: The layout of the state dicts of the events and metrics in d5.training; another version is refused.
STATE_VERSION = 1


class TrainerEvent:
    """Base class of trainer events: every hook is a no-op returning None (continue).

    The trainer only calls the hooks a subclass overrides (and does not list in ``skip_hooks``), so unused
    hooks cost nothing per step. Returning ``False`` from any hook asks the trainer to stop early (see the
    module docstring).

    >>> class CountSteps(TrainerEvent):
    ...     def __init__(self):
    ...         self.count = 0
    ...     def after_step(self, trainer, step, outputs):
    ...         self.count += 1
    """

    #: Hooks this event overrides but does not need (read after before_training, once per run).
    skip_hooks: frozenset = frozenset()
    #: Events are called in ascending hook_order, list order among equals.
    hook_order: int = 0

    def before_training(self, trainer: Trainer) -> bool | None:
        """Called once before the first epoch (``trainer.resumed`` tells a resumed run)."""

    def before_epoch(self, trainer: Trainer, epoch: int) -> bool | None:
        """Called at the start of each epoch (0-based); again for a resumed epoch, with ``trainer.position`` > 0."""

    def before_step(self, trainer: Trainer, step: int, inputs: dict) -> bool | None:
        """Called before each optimizer step with the batch; ``step`` is the global 0-based index."""

    def on_divergence(self, trainer: Trainer, step: int, error: Exception) -> bool | None:
        """Called when step ``step`` raised :class:`~d5.errors.DivergenceError` (a NaN/inf loss; the optimizer
        left the parameters at their last finite values). Return ``False`` to end the run as stopped early
        (``TrainingStats.diverged``); if no event does, the error propagates."""

    def after_step(self, trainer: Trainer, step: int, outputs: dict) -> bool | None:
        """Called after each optimizer step with the network's outputs for the batch (``trainer.steps`` and
        ``trainer.position`` already count it)."""

    def before_test_set(self, trainer: Trainer) -> bool | None:
        """Called before evaluating the validation sampler."""

    def after_test_batch(self, trainer: Trainer, batch: dict, outputs: dict) -> bool | None:
        """Called for each validation batch with the inference outputs (the return value is ignored)."""

    def after_test_set(self, trainer: Trainer, stats: EvaluationStats) -> bool | None:
        """Called after evaluating the validation sampler with its loss and accuracy."""

    def after_epoch(self, trainer: Trainer, epoch: int, stats: EpochStats) -> bool | None:
        """Called after each epoch (and its validation) with that epoch's :class:`EpochStats`."""

    def after_training(self, trainer: Trainer, stats: TrainingStats) -> bool | None:
        """Called once at the end (also after an early stop) with the run's :class:`TrainingStats`."""

    def on_error(self, trainer: Trainer, error: BaseException) -> None:
        """Called instead of ``after_training`` when the run ends with an exception (which then propagates):
        release what ``before_training`` acquired (threads, progress bars). Its own exceptions are ignored."""


def overridden_hooks(events: Iterable[TrainerEvent], hook: str) -> list[Callable]:
    """The bound ``hook`` methods of the events that override it and do not skip it (those the trainer calls).

    >>> class OnlyEpochs(TrainerEvent):
    ...     def after_epoch(self, trainer, epoch, stats): pass
    >>> len(overridden_hooks([OnlyEpochs()], 'after_step')), len(overridden_hooks([OnlyEpochs()], 'after_epoch'))
    (0, 1)
    """
    base = getattr(TrainerEvent, hook)
    return [getattr(event, hook) for event in events
            if getattr(type(event), hook, base) is not base and hook not in event.skip_hooks]


def check_state(state: Any, owner: str, kind: str, keys: Iterable[str] = (),
                config: Mapping[str, Any] | None = None) -> Mapping[str, Any]:
    """Check a state dict before ``owner.load_state_dict`` uses it: a dict whose ``"kind"`` is ``kind``, of
    this :data:`STATE_VERSION`, holding ``keys``, whose ``"config"`` equals ``config``. Raises
    :class:`~d5.errors.CheckpointError` saying what differs.

    >>> state = {"kind": "StopAfter", "version": 1, "elapsed": 2.0}
    >>> check_state(state, "StopAfter", "StopAfter", ["elapsed"])["elapsed"]
    2.0
    >>> try:
    ...     check_state({"kind": "Throughput", "version": 1}, "StopAfter", "StopAfter")
    ... except CheckpointError as err:
    ...     print(err)
    StopAfter.load_state_dict: the state is a Throughput's, not a StopAfter's; restore each component from its own state
    """
    if not isinstance(state, Mapping):
        raise CheckpointError(f"{owner}.load_state_dict takes the dict state_dict() returned; got "
                              f"{type(state).__name__}")
    if state.get("kind") != kind:
        raise CheckpointError(f"{owner}.load_state_dict: the state is a {state.get('kind')!s}'s, not a {kind}'s; "
                              "restore each component from its own state")
    if state.get("version") != STATE_VERSION:
        raise CheckpointError(f"{owner}.load_state_dict: state version {state.get('version')!r} is not this d5's "
                              f"({STATE_VERSION}); resume with the d5 version that saved it")
    missing = [key for key in keys if key not in state]
    if missing:
        raise CheckpointError(f"{owner}.load_state_dict: the state lacks {missing}; it is damaged or not this "
                              "component's")
    if config is not None and dict(state.get("config") or {}) != dict(config):
        saved = dict(state.get("config") or {})
        differences = "; ".join(f"{key}: saved {saved.get(key)!r}, now {config.get(key)!r}"
                                for key in sorted(set(saved) | set(config)) if saved.get(key) != config.get(key))
        raise CheckpointError(f"{owner}.load_state_dict: the state is of one configured differently ({differences}); "
                              "build it as the saved run did")
    return state


def new_state(kind: str, **values: Any) -> dict[str, Any]:
    """The common head of a state dict: ``{"kind": kind, "version": STATE_VERSION, **values}``.

    >>> new_state("StopAfter", elapsed=1.5)
    {'kind': 'StopAfter', 'version': 1, 'elapsed': 1.5}
    """
    return {"kind": kind, "version": STATE_VERSION, **values}


def float_array(values: Iterable[float]) -> np.ndarray:
    """A float64 array of ``values`` (how long float series go into a state dict: one array, not a list).

    >>> float_array([1.0, 2.5]).tolist()
    [1.0, 2.5]
    """
    return np.array(list(values), dtype=np.float64)


class RunClock:
    """Seconds a run has trained, carried across a checkpoint and resume.

    ``start(resumed)`` at ``before_training`` continues from a restored count when ``resumed`` (else from 0);
    ``stop()`` at the end freezes it.

    >>> clock = RunClock(); clock.start(resumed=False); clock.elapsed() >= 0.0
    True
    >>> clock.load_state_dict({"elapsed": 10.0}); clock.start(resumed=True); clock.elapsed() >= 10.0
    True
    """

    def __init__(self) -> None:
        self._offset = 0.0
        self._start: float | None = None

    def start(self, resumed: bool) -> None:
        if not resumed:
            self._offset = 0.0
        self._start = time.perf_counter()

    def elapsed(self) -> float:
        if self._start is None:
            return self._offset
        return self._offset + (time.perf_counter() - self._start)

    def stop(self) -> None:
        self._offset = self.elapsed()
        self._start = None

    def state_dict(self) -> dict[str, float]:
        return {"elapsed": self.elapsed()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._offset = float(state["elapsed"])
        self._start = None


def _format_optional(value: float | None, fmt: str, suffix: str = "") -> str:
    return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:{fmt}}{suffix}"


class ProgressBar(TrainerEvent):
    """A tqdm progress bar over the steps of each epoch, showing the epoch's running training loss.

    ``Trainer(..., progress=False)`` leaves it out. ``file`` defaults to ``sys.stderr`` at the time of use.

    >>> bar = ProgressBar(leave=True)
    """

    def __init__(self, file: TextIO | None = None, leave: bool = False, mininterval: float = 0.2) -> None:
        self.file = file
        self.leave = leave
        self.mininterval = mininterval
        self._bar = None

    def before_epoch(self, trainer: Trainer, epoch: int) -> None:
        from tqdm.auto import tqdm  # imported on use: tqdm is only needed when a bar is shown

        self._close(trainer)
        try:
            total = len(trainer.train_sampler)
        except TypeError:  # a sampler without __len__ (a stream): show a counter instead of a bar
            total = None
        self._bar = tqdm(total=total, initial=trainer.position, desc=f"epoch {epoch + 1}/{trainer.epochs}",
                         unit="step", leave=self.leave, file=self.file if self.file is not None else sys.stderr,
                         mininterval=self.mininterval, dynamic_ncols=True)

    def after_step(self, trainer: Trainer, step: int, outputs: dict) -> None:
        bar = self._bar
        if bar is not None and bar.update(1):
            # update() returns True only when it redrew: format the loss at most once per redraw
            bar.set_postfix_str(f"loss={trainer.running_loss:.4g}", refresh=False)

    def _close(self, trainer: Trainer) -> None:
        if self._bar is not None:
            # the final redraw shows the epoch's complete training loss
            self._bar.set_postfix_str(f"loss={trainer.running_loss:.4g}", refresh=False)
            self._bar.close()
            self._bar = None

    def before_test_set(self, trainer: Trainer) -> None:
        self._close(trainer)

    def after_epoch(self, trainer: Trainer, epoch: int, stats: EpochStats) -> None:
        self._close(trainer)

    def after_training(self, trainer: Trainer, stats: TrainingStats) -> None:
        self._close(trainer)

    def on_error(self, trainer: Trainer, error: BaseException) -> None:
        self._close(trainer)


class EpochSummary(TrainerEvent):
    """Prints one line per epoch: epoch, train loss and accuracy, test accuracy, time, samples/s.

    >>> summary = EpochSummary(file=sys.stdout)
    """

    def __init__(self, file: TextIO | None = None) -> None:
        self.file = file

    def after_epoch(self, trainer: Trainer, epoch: int, stats: EpochStats) -> None:
        line = (f"epoch {epoch + 1}/{trainer.epochs}: "
                f"train loss {_format_optional(stats.train_loss, '.4f')}, "
                f"train acc {_format_optional(stats.train_accuracy, '.2f', '%')}, "
                f"test acc {_format_optional(stats.test_accuracy, '.2f', '%')}, "
                f"{stats.epoch_time:.2f} s, {stats.samples_per_second:.1f} samples/s")
        print(line, file=self.file if self.file is not None else sys.stdout, flush=True)


class StopAfter(TrainerEvent):
    """Stops training after ``steps`` optimizer steps (global, counting those before a resume) and/or
    ``seconds`` of training, whichever is first.

    >>> StopAfter(steps=100).steps
    100
    """

    def __init__(self, steps: int | None = None, seconds: float | None = None) -> None:
        if steps is None and seconds is None:
            raise D5Error("StopAfter needs steps=... or seconds=... (or both); e.g. StopAfter(steps=100)")
        if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 1):
            raise D5Error(f"StopAfter(steps={steps!r}): steps must be an int >= 1")
        if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, numbers.Real)
                                    or not seconds > 0):
            raise D5Error(f"StopAfter(seconds={seconds!r}): seconds must be a positive number")
        self.steps = steps
        self.seconds = seconds
        self.clock = RunClock()

    def before_training(self, trainer: Trainer) -> None:
        self.clock.start(trainer.resumed)

    def after_step(self, trainer: Trainer, step: int, outputs: dict) -> bool | None:
        if self.steps is not None and step + 1 >= self.steps:
            trainer.stop_reason = f"StopAfter: {self.steps} steps"
            return False
        if self.seconds is not None and self.clock.elapsed() >= self.seconds:
            trainer.stop_reason = f"StopAfter: {self.seconds:g} s"
            return False
        return None

    def after_training(self, trainer: Trainer, stats: TrainingStats) -> None:
        self.clock.stop()

    def state_dict(self) -> dict[str, Any]:
        """The seconds trained so far (steps are the trainer's)."""
        return new_state("StopAfter", **self.clock.state_dict())

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.clock.load_state_dict(check_state(state, "StopAfter", "StopAfter", ["elapsed"]))


class StopWhenAccuracy(TrainerEvent):
    """Stops training after the first epoch whose accuracy (percent) reaches ``target``.

    ``on='test'`` (default) uses the validation accuracy and needs a validation sampler; ``on='train'``
    uses the epoch's training accuracy. (:class:`~d5.training.early_stopping.EarlyStopping` does this and more.)

    >>> StopWhenAccuracy(99.0).target
    99.0
    """

    def __init__(self, target: float, on: str = "test") -> None:
        if on not in ("test", "train"):
            raise D5Error(f"StopWhenAccuracy(on={on!r}): on must be 'test' or 'train'")
        if not isinstance(target, (int, float)) or not 0.0 <= target <= 100.0:
            raise D5Error(f"StopWhenAccuracy({target!r}): the target is an accuracy in percent, in [0, 100]")
        self.target = float(target)
        self.on = on

    def before_training(self, trainer: Trainer) -> None:
        if self.on == "test" and trainer.validation_sampler is None:
            raise D5Error("StopWhenAccuracy(on='test') needs a validation sampler; give the Trainer one, "
                          "or use StopWhenAccuracy(target, on='train')")

    def after_epoch(self, trainer: Trainer, epoch: int, stats: EpochStats) -> bool | None:
        accuracy = stats.test_accuracy if self.on == "test" else stats.train_accuracy
        if accuracy is not None and accuracy >= self.target:
            trainer.stop_reason = f"StopWhenAccuracy: {self.on} accuracy {accuracy:.4g}% >= {self.target:g}%"
            return False
        return None


class HyperparameterSchedule(TrainerEvent):
    """Sets ``optimizer.<attribute> = fn(index)`` before each epoch (``per='epoch'``, index = epoch) or before
    each step (``per='step'``, index = global step); both 0-based. ``history`` keeps every value set.

    ``fn`` is any callable ``index -> value``, e.g. the schedules of :mod:`d5.training.schedules`. ``per``
    defaults to ``fn.per`` when the callable has that attribute, ``'step'`` for a
    :class:`d5.training.schedules.Schedule` (a function of the optimizer step), else ``'epoch'``. Values must be finite
    numbers >= 0. Framework optimizers push a hyper-parameter to their native optimizer when it is set.

    >>> momentum = HyperparameterSchedule("momentum", lambda epoch: min(0.99, 0.5 + 0.1 * epoch))
    >>> momentum.per, momentum.fn(2)
    ('epoch', 0.7)
    """

    def __init__(self, attribute: str, fn: Callable[[int], float], per: str | None = None) -> None:
        kind = type(self).__name__
        if not isinstance(attribute, str) or not attribute.isidentifier():
            raise D5Error(f"{kind}: attribute must name an optimizer attribute such as 'lr', got {attribute!r}")
        if not callable(fn):
            raise D5Error(f"{kind} needs a callable index -> {attribute}, got {fn!r}")
        if per is None:
            per = getattr(fn, "per", None) or ("step" if _is_step_schedule(fn) else "epoch")
        if per not in ("epoch", "step"):
            raise D5Error(f"{kind}(per={per!r}): per must be 'epoch' or 'step'")
        self.attribute = attribute
        self.fn = fn
        self.per = per
        self.history: list[float] = []
        self.skip_hooks = frozenset({"before_step"} if per == "epoch" else {"before_epoch"})

    def before_training(self, trainer: Trainer) -> None:
        if not hasattr(trainer.optimizer, self.attribute):
            raise D5Error(f"{type(trainer.optimizer).__name__} has no {self.attribute!r} attribute, so a "
                          f"{type(self).__name__} cannot set it; give the optimizer an {self.attribute} attribute "
                          "(or property)")
        if not trainer.resumed:
            self.history = []

    def _apply(self, trainer: Trainer, index: int, record: bool = True) -> None:
        value = self.fn(index)
        if (isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value)
                or value < 0):
            raise D5Error(f"{type(self).__name__}: fn({index}) returned {value!r}; it must return a finite "
                          f"number >= 0 for {self.attribute}")
        value = float(value)
        setattr(trainer.optimizer, self.attribute, value)
        if record:
            self.history.append(value)

    def before_epoch(self, trainer: Trainer, epoch: int) -> None:
        # A resumed epoch (position > 0) sets the value again but was recorded when it first began.
        self._apply(trainer, epoch, record=trainer.position == 0)

    def before_step(self, trainer: Trainer, step: int, inputs: dict) -> None:
        self._apply(trainer, step)

    def state_dict(self) -> dict[str, Any]:
        """The values set so far."""
        return new_state(type(self).__name__, config={"attribute": self.attribute, "per": self.per},
                         history=float_array(self.history))

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        kind = type(self).__name__
        check_state(state, kind, kind, ["history"], {"attribute": self.attribute, "per": self.per})
        self.history = [float(value) for value in np.asarray(state["history"], dtype=np.float64)]


def _is_step_schedule(fn: Any) -> bool:
    try:
        from d5.training.schedules import Schedule
    except ImportError:  # pragma: no cover -- schedules ship with d5; a partial install lacks them
        return False
    return isinstance(fn, Schedule)


class LearningRateSchedule(HyperparameterSchedule):
    """Sets ``optimizer.lr = fn(epoch)`` before each epoch (``per='epoch'``) or ``fn(step)`` before each step
    (``per='step'``, the default for the schedules of :mod:`d5.training.schedules`); epochs and steps are
    0-based. ``history`` keeps every value set. See :class:`HyperparameterSchedule`.

    >>> schedule = LearningRateSchedule(lambda epoch: 0.1 * 0.5 ** epoch)
    >>> schedule.fn(2)
    0.025
    >>> LearningRateSchedule(lambda step: 0.1 * min(1.0, (step + 1) / 100), per="step").per   # warm-up
    'step'
    >>> from d5.training.schedules import CosineSchedule
    >>> LearningRateSchedule(CosineSchedule(0.1, period=1000)).per
    'step'
    """

    def __init__(self, fn: Callable[[int], float], per: str | None = None) -> None:
        super().__init__("lr", fn, per)


# ----------------------------------------------------------------------------------------------- loggers

def remove_leftovers(path: str | os.PathLike) -> list[str]:
    """Delete the temporary files a killed process left beside ``path`` while writing it atomically
    (``.<name>.*.tmp``, see :func:`d5.io_utils.atomic_write`); the names removed.

    >>> import tempfile, pathlib
    >>> target = pathlib.Path(tempfile.mkdtemp()) / "log.json"
    >>> _ = (target.parent / ".log.json.abc123.tmp").write_text("{'epo")   # a write cut short by a kill
    >>> remove_leftovers(target)
    ['.log.json.abc123.tmp']
    """
    import glob

    path = os.fspath(path)
    directory, name = os.path.split(path)
    removed = []
    for leftover in glob.glob(os.path.join(glob.escape(directory or "."), f".{glob.escape(name)}.*.tmp")):
        try:
            os.unlink(leftover)
            removed.append(os.path.basename(leftover))
        except FileNotFoundError:
            pass
    return sorted(removed)


def _write_failed(kind: str, path: Any, err: OSError, kept: str) -> D5Error:
    reason = err.strerror or str(err)
    return D5Error(f"{kind} could not write {os.fspath(path)!r}: {reason}; {kept}. Free disk space (or raise the "
                   "file-size limit) or log to another path")


class JSONLogger(TrainerEvent):
    """Writes ``{"epochs": [per-epoch records], "summary": null | TrainingStats}`` to ``path`` after every
    epoch and at the end.

    Each write replaces the whole file atomically (a temporary file beside it, flushed and fsynced, then
    renamed over it), so a reader -- or a run killed while writing, or a full disk -- never leaves a partial
    document: the file is the previous complete version or the new one (the temporary file a kill leaves is
    removed when the next run starts). A write that fails raises
    :class:`~d5.errors.D5Error` and leaves the previous version. The records are the logger's state: a
    resumed run rewrites the file from them (dropping epochs logged after the checkpoint).

    >>> import tempfile, os
    >>> logger = JSONLogger(os.path.join(tempfile.mkdtemp(), 'log.json'))
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = path
        self.records: list[dict[str, Any]] = []

    def before_training(self, trainer: Trainer) -> None:
        remove_leftovers(self.path)
        if not trainer.resumed:
            self.records = []
        self._write(None)  # a fresh log, or the one saved at the checkpoint (dropping epochs logged after it)

    def _write(self, summary: dict | None) -> None:
        text = json.dumps({"epochs": self.records, "summary": summary}, indent=2)
        try:
            with atomic_write(self.path) as handle:
                handle.write(text)
        except OSError as err:
            raise _write_failed("JSONLogger", self.path, err, "the previous version of the file is intact") from err

    def after_epoch(self, trainer: Trainer, epoch: int, stats: EpochStats) -> None:
        _put_record(self.records, stats.as_dict())
        self._write(None)

    def after_training(self, trainer: Trainer, stats: TrainingStats) -> None:
        self._write(stats.as_dict())

    def state_dict(self) -> dict[str, Any]:
        """The per-epoch records logged so far."""
        return new_state("JSONLogger", records=[dict(record) for record in self.records])

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        check_state(state, "JSONLogger", "JSONLogger", ["records"])
        self.records = [dict(record) for record in state["records"]]


def _put_record(records: list[dict[str, Any]], record: dict[str, Any]) -> bool:
    """Append ``record``, or replace the last one if it is of the same epoch (a resumed epoch's complete
    record supersedes its partial one). True if it replaced."""
    if records and records[-1].get("epoch") == record.get("epoch"):
        records[-1] = record
        return True
    records.append(record)
    return False


class CSVLogger(TrainerEvent):
    """Writes one CSV row per epoch (header = the fields of ``EpochStats``) to ``path``; missing values are
    empty cells. Read it back with :func:`read_csv_log`.

    How it stays whole: the start of a run writes the file (the header, and a resumed run's rows) atomically --
    temporary file, fsync, rename. Every epoch then **appends** its row with a single ``write()`` to the file
    opened with ``O_APPEND``, then ``fsync``. A write that fails part-way (full disk, file-size limit) is cut back to
    the last complete row and raises :class:`~d5.errors.D5Error`; a killed process cannot split one
    ``write()`` to a local file, and :func:`read_csv_log` ignores an unterminated last line (a crash of the
    machine) in any case. The rows are the logger's state: a resumed run rewrites the file from them, so rows
    logged after the checkpoint are dropped, not duplicated, and a resumed epoch's row replaces its partial one.

    >>> import tempfile, os
    >>> logger = CSVLogger(os.path.join(tempfile.mkdtemp(), 'log.csv'))
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = path
        self.records: list[dict[str, Any]] = []
        self._synced = False  # the file holds exactly self.records (so a new row may be appended)

    def before_training(self, trainer: Trainer) -> None:
        remove_leftovers(self.path)
        if not trainer.resumed:
            self.records = []
        self._rewrite()  # the header (and a resumed run's rows): rows logged after a checkpoint are dropped

    def after_epoch(self, trainer: Trainer, epoch: int, stats: EpochStats) -> None:
        replaced = _put_record(self.records, stats.as_dict())
        if self._synced and not replaced:
            self._append(self.records[-1])
        else:
            self._rewrite()

    def _format(self, records: list[dict[str, Any]], header: bool) -> bytes:
        import dataclasses

        from d5.training.trainer import EpochStats  # local: trainer imports this module

        fields = list(self.records[0]) if self.records else [field.name for field in dataclasses.fields(EpochStats)]
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=fields, lineterminator="\n")
        if header:
            writer.writeheader()
        writer.writerows({key: "" if value is None else value for key, value in record.items()}
                         for record in records)
        return buffer.getvalue().encode("utf-8")

    def _rewrite(self) -> None:
        data = self._format(self.records, header=True)
        self._synced = False
        try:
            with atomic_write(self.path, "wb") as handle:
                handle.write(data)
        except OSError as err:
            raise _write_failed("CSVLogger", self.path, err, "the previous version of the file is intact") from err
        self._synced = True

    def _append(self, record: dict[str, Any]) -> None:
        data = memoryview(self._format([record], header=False))
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        except FileNotFoundError:  # removed while we ran: write it whole again
            self._rewrite()
            return
        except OSError as err:
            raise _write_failed("CSVLogger", self.path, err, "its rows so far are intact") from err
        try:
            size = os.fstat(fd).st_size
            try:
                while data:  # one write() normally; more only when the first stops short (at a size limit)
                    data = data[os.write(fd, data):]
                os.fsync(fd)
            except OSError as err:
                self._synced = False
                os.ftruncate(fd, size)  # cut the partial row: the file ends with the last complete one
                raise _write_failed("CSVLogger", self.path, err, "it was cut back to its last complete row") from err
        finally:
            os.close(fd)

    def state_dict(self) -> dict[str, Any]:
        """The per-epoch rows logged so far."""
        return new_state("CSVLogger", records=[dict(record) for record in self.records])

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        check_state(state, "CSVLogger", "CSVLogger", ["records"])
        self.records = [dict(record) for record in state["records"]]
        self._synced = False


def read_csv_log(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The rows of a :class:`CSVLogger` file as dicts of numbers (empty cells -> None, ``True``/``False`` ->
    bool), ignoring an unterminated last line (a row whose write a crash cut short).

    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "log.csv"
    >>> _ = path.write_text("epoch,train_loss,test_loss\\n0,0.5,\\n1,0.25,0.3\\n2,0.1")
    >>> read_csv_log(path)
    [{'epoch': 0, 'train_loss': 0.5, 'test_loss': None}, {'epoch': 1, 'train_loss': 0.25, 'test_loss': 0.3}]
    """
    try:
        text = open(path, encoding="utf-8", newline="").read()
    except OSError as err:
        raise D5Error(f"cannot read the CSV log {os.fspath(path)!r}: {err.strerror or err}") from None
    complete = text[:text.rfind("\n") + 1]
    return [{key: _parse_cell(value) for key, value in row.items()}
            for row in csv.DictReader(io.StringIO(complete, newline=""))]


def _parse_cell(value: str) -> Any:
    if value == "":
        return None
    if value in ("True", "False"):
        return value == "True"
    for parse in (int, float):
        try:
            return parse(value)
        except ValueError:
            pass
    return value


__all__ = ["TrainerEvent", "HOOKS", "STATE_VERSION", "overridden_hooks", "check_state", "new_state", "float_array",
           "RunClock", "ProgressBar", "EpochSummary", "StopAfter", "StopWhenAccuracy", "HyperparameterSchedule",
           "LearningRateSchedule", "JSONLogger", "CSVLogger", "read_csv_log", "remove_leftovers"]
