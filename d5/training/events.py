"""L2: trainer events — hooks the :class:`~d5.training.trainer.Trainer` calls while it trains.

An event overrides any of the no-op hooks of :class:`TrainerEvent`. The trainer calls them in this order::

    before_training
      before_epoch                      (per epoch)
        before_step / after_step        (per batch)
        before_test_set / after_test_set   (if there is a validation sampler)
      after_epoch
    after_training

**Stopping early:** a hook that returns ``False`` (exactly ``False``; ``None`` means "go on") asks the
trainer to stop. The other events still get the same hook call; then the trainer takes no further step,
closes the current epoch (validation and ``after_epoch`` run for the steps taken, so final metrics describe
the final model; an epoch in which no step ran is not recorded) and calls ``after_training``.
``before_step`` returning ``False`` also skips that step.

Step numbers passed to hooks are 0-based and global across epochs; epochs are 0-based.

>>> class PrintLoss(TrainerEvent):
...     def after_epoch(self, trainer, epoch, stats):
...         print(f"epoch {epoch}: loss {stats.train_loss:.3f}")
"""
from __future__ import annotations

import csv
import io
import json
import math
import sys
import time
from typing import TYPE_CHECKING, Any, Callable, TextIO

from d5.errors import D5Error
from d5.io_utils import atomic_write

if TYPE_CHECKING:
    from d5.training.trainer import EpochStats, EvaluationStats, Trainer, TrainingStats

#: The hook names, in the order the trainer first calls them.
HOOKS = ("before_training", "before_epoch", "before_step", "after_step", "before_test_set",
         "after_test_set", "after_epoch", "after_training")


class TrainerEvent:
    """Base class of trainer events: every hook is a no-op returning None (continue).

    The trainer only calls the hooks a subclass overrides, so unused hooks cost nothing per step.
    Returning ``False`` from any hook asks the trainer to stop early (see the module docstring).

    >>> class CountSteps(TrainerEvent):
    ...     def __init__(self):
    ...         self.count = 0
    ...     def after_step(self, trainer, step, outputs):
    ...         self.count += 1
    """

    def before_training(self, trainer: Trainer) -> bool | None:
        """Called once before the first epoch."""

    def before_epoch(self, trainer: Trainer, epoch: int) -> bool | None:
        """Called at the start of each epoch (0-based)."""

    def before_step(self, trainer: Trainer, step: int, inputs: dict) -> bool | None:
        """Called before each optimizer step with the batch; ``step`` is the global 0-based index."""

    def after_step(self, trainer: Trainer, step: int, outputs: dict) -> bool | None:
        """Called after each optimizer step with the network's outputs for the batch."""

    def after_epoch(self, trainer: Trainer, epoch: int, stats: EpochStats) -> bool | None:
        """Called after each epoch (and its validation) with that epoch's :class:`EpochStats`."""

    def before_test_set(self, trainer: Trainer) -> bool | None:
        """Called before evaluating the validation sampler."""

    def after_test_set(self, trainer: Trainer, stats: EvaluationStats) -> bool | None:
        """Called after evaluating the validation sampler with its loss and accuracy."""

    def after_training(self, trainer: Trainer, stats: TrainingStats) -> bool | None:
        """Called once at the end (also after an early stop) with the run's :class:`TrainingStats`."""


def overridden_hooks(events: list[TrainerEvent], hook: str) -> list[Callable]:
    """The bound ``hook`` methods of the events that override it (those the trainer must call).

    >>> class OnlyEpochs(TrainerEvent):
    ...     def after_epoch(self, trainer, epoch, stats): pass
    >>> len(overridden_hooks([OnlyEpochs()], 'after_step')), len(overridden_hooks([OnlyEpochs()], 'after_epoch'))
    (0, 1)
    """
    base = getattr(TrainerEvent, hook)
    return [getattr(event, hook) for event in events if getattr(type(event), hook, base) is not base]


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

        try:
            total = len(trainer.train_sampler)
        except TypeError:  # a sampler without __len__ (a stream): show a counter instead of a bar
            total = None
        self._bar = tqdm(total=total, desc=f"epoch {epoch + 1}/{trainer.epochs}", unit="step",
                         leave=self.leave, file=self.file if self.file is not None else sys.stderr,
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
    """Stops training after ``steps`` optimizer steps and/or ``seconds`` of training, whichever is first.

    >>> StopAfter(steps=100).steps
    100
    """

    def __init__(self, steps: int | None = None, seconds: float | None = None) -> None:
        if steps is None and seconds is None:
            raise D5Error("StopAfter needs steps=... or seconds=... (or both); e.g. StopAfter(steps=100)")
        if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 1):
            raise D5Error(f"StopAfter(steps={steps!r}): steps must be an int >= 1")
        if seconds is not None and not (isinstance(seconds, (int, float)) and seconds > 0):
            raise D5Error(f"StopAfter(seconds={seconds!r}): seconds must be a positive number")
        self.steps = steps
        self.seconds = seconds
        self._start = 0.0

    def before_training(self, trainer: Trainer) -> None:
        self._start = time.perf_counter()

    def after_step(self, trainer: Trainer, step: int, outputs: dict) -> bool | None:
        if self.steps is not None and step + 1 >= self.steps:
            return False
        if self.seconds is not None and time.perf_counter() - self._start >= self.seconds:
            return False
        return None


class StopWhenAccuracy(TrainerEvent):
    """Stops training after the first epoch whose accuracy (percent) reaches ``target``.

    ``on='test'`` (default) uses the validation accuracy and needs a validation sampler; ``on='train'``
    uses the epoch's training accuracy.

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
            return False
        return None


class LearningRateSchedule(TrainerEvent):
    """Sets ``optimizer.lr = fn(epoch)`` before each epoch (``per='epoch'``) or ``fn(step)`` before each
    step (``per='step'``); epochs and steps are 0-based. ``history`` keeps every value set.

    >>> schedule = LearningRateSchedule(lambda epoch: 0.1 * 0.5 ** epoch)
    >>> schedule.fn(2)
    0.025
    """

    def __init__(self, fn: Callable[[int], float], per: str = "epoch") -> None:
        if not callable(fn):
            raise D5Error(f"LearningRateSchedule needs a callable index -> learning rate, got {fn!r}")
        if per not in ("epoch", "step"):
            raise D5Error(f"LearningRateSchedule(per={per!r}): per must be 'epoch' or 'step'")
        self.fn = fn
        self.per = per
        self.history: list[float] = []

    def before_training(self, trainer: Trainer) -> None:
        if not hasattr(trainer.optimizer, "lr"):
            raise D5Error(f"{type(trainer.optimizer).__name__} has no 'lr' attribute, so a LearningRateSchedule "
                          f"cannot set it; give the optimizer an lr attribute (or property)")
        self.history = []

    def _apply(self, trainer: Trainer, index: int) -> None:
        lr = self.fn(index)
        if not (isinstance(lr, (int, float)) and math.isfinite(lr) and lr >= 0):
            raise D5Error(f"LearningRateSchedule: fn({index}) returned {lr!r}; it must return a finite number >= 0")
        trainer.optimizer.lr = lr
        self.history.append(lr)

    def before_epoch(self, trainer: Trainer, epoch: int) -> None:
        if self.per == "epoch":
            self._apply(trainer, epoch)

    def before_step(self, trainer: Trainer, step: int, inputs: dict) -> None:
        if self.per == "step":
            self._apply(trainer, step)


class JSONLogger(TrainerEvent):
    """Writes ``{"epochs": [per-epoch records], "summary": null | TrainingStats}`` to ``path`` after every
    epoch and at the end, atomically (a reader never sees a half-written file).

    >>> import tempfile, os
    >>> logger = JSONLogger(os.path.join(tempfile.mkdtemp(), 'log.json'))
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.records: list[dict[str, Any]] = []

    def before_training(self, trainer: Trainer) -> None:
        self.records = []

    def _write(self, summary: dict | None) -> None:
        with atomic_write(self.path) as handle:
            json.dump({"epochs": self.records, "summary": summary}, handle, indent=2)

    def after_epoch(self, trainer: Trainer, epoch: int, stats: EpochStats) -> None:
        self.records.append(stats.as_dict())
        self._write(None)

    def after_training(self, trainer: Trainer, stats: TrainingStats) -> None:
        self._write(stats.as_dict())


class CSVLogger(TrainerEvent):
    """Writes one CSV row per epoch (header = the fields of ``EpochStats``) to ``path``, rewritten
    atomically after every epoch; missing values are empty cells.

    >>> import tempfile, os
    >>> logger = CSVLogger(os.path.join(tempfile.mkdtemp(), 'log.csv'))
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.records: list[dict[str, Any]] = []

    def before_training(self, trainer: Trainer) -> None:
        self.records = []

    def after_epoch(self, trainer: Trainer, epoch: int, stats: EpochStats) -> None:
        self.records.append(stats.as_dict())
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=list(self.records[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows({key: "" if value is None else value for key, value in record.items()}
                         for record in self.records)
        with atomic_write(self.path, newline="") as handle:
            handle.write(buffer.getvalue())


__all__ = ["TrainerEvent", "HOOKS", "overridden_hooks", "ProgressBar", "EpochSummary", "StopAfter",
           "StopWhenAccuracy", "LearningRateSchedule", "JSONLogger", "CSVLogger"]
