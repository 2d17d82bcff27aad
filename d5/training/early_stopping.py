"""L2: early stopping — end a run when it reached its target, stopped improving, ran out of time or diverged.

>>> stop = EarlyStopping("test_accuracy", target=99.0, patience=5, min_delta=0.1, time_budget=3600)
>>> stop.mode
'max'
"""
from __future__ import annotations

import math
import numbers
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from d5.errors import D5Error
from d5.training.events import RunClock, TrainerEvent, check_state, new_state

if TYPE_CHECKING:
    from d5.training.trainer import EpochStats, Trainer, TrainingStats

#: What EarlyStopping can watch (fields of EpochStats) and which direction is better.
MONITORS = {"test_accuracy": "max", "train_accuracy": "max", "test_loss": "min", "train_loss": "min"}


def _number(value: Any, what: str, minimum: float = 0.0, allow_none: bool = True) -> float | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or value < minimum:
        raise D5Error(f"EarlyStopping({what}={value!r}): {what} must be a finite number >= {minimum:g}")
    return float(value)


class EarlyStopping(TrainerEvent):
    """Stops training when any of its conditions holds; ``reason`` (and ``trainer.stop_reason``, then
    ``TrainingStats.stop_reason``) says which.

    * ``target``: after the first epoch whose ``monitor`` value reaches it (``>=`` for accuracies, ``<=`` for
      losses).
    * ``patience``: after ``patience`` epochs in a row that did not improve the best value by more than
      ``min_delta`` (an improvement is ``value > best + min_delta`` for accuracies, ``value < best - min_delta``
      for losses; a NaN never improves). ``best`` and ``best_epoch`` keep the best so far.
    * ``time_budget``: seconds of training (validation included; the time before a resume counts), checked
      after every step and every epoch: the run stops at the first check past the budget.
    * ``stop_on_divergence`` (default True): a NaN or infinite training loss **stops** the run -- ``reason``
      starts with ``'diverged'`` and ``TrainingStats.diverged`` is True -- **instead of raising**
      :class:`~d5.errors.DivergenceError`. The optimizer (``check_divergence=True``, the default) refuses that
      step's update, so the parameters stay at their last finite values and the epoch is validated on them. With
      ``check_divergence=False`` EarlyStopping sees the loss after the update and stops there (the parameters
      are then not finite). ``stop_on_divergence=False`` lets DivergenceError propagate as without it.

    ``monitor`` is one of ``'test_accuracy'`` (default; needs a validation sampler), ``'test_loss'``,
    ``'train_accuracy'``, ``'train_loss'``.

    >>> EarlyStopping("test_loss", patience=3).mode
    'min'
    """

    def __init__(self, monitor: str = "test_accuracy", target: float | None = None, patience: int | None = None,
                 min_delta: float = 0.0, time_budget: float | None = None, stop_on_divergence: bool = True) -> None:
        if monitor not in MONITORS:
            raise D5Error(f"EarlyStopping(monitor={monitor!r}): monitor must be one of {sorted(MONITORS)}")
        if patience is not None and (isinstance(patience, bool) or not isinstance(patience, int) or patience < 1):
            raise D5Error(f"EarlyStopping(patience={patience!r}): patience must be an int >= 1 (epochs), or None")
        self.monitor, self.mode = monitor, MONITORS[monitor]
        self.target = _number(target, "target", minimum=-math.inf)
        self.patience = patience
        self.min_delta = _number(min_delta, "min_delta", allow_none=False)
        self.time_budget = _number(time_budget, "time_budget")
        self.stop_on_divergence = bool(stop_on_divergence)
        if self.target is None and patience is None and self.time_budget is None and not self.stop_on_divergence:
            raise D5Error("EarlyStopping needs a condition: target=..., patience=..., time_budget=... or "
                          "stop_on_divergence=True")
        self.clock = RunClock()
        self._reset()

    def _reset(self) -> None:
        self.best: float | None = None
        self.best_epoch: int | None = None
        self.bad_epochs = 0
        self.reason: str | None = None
        self.stopped_epoch: int | None = None
        self._last_epoch = -1
        self._before_last: list | None = None  # (best, best_epoch, bad_epochs) before the last epoch was seen

    def before_training(self, trainer: Trainer) -> None:
        if self.monitor.startswith("test") and trainer.validation_sampler is None:
            raise D5Error(f"EarlyStopping(monitor={self.monitor!r}) needs a validation sampler; give the Trainer one "
                          f"or monitor '{self.monitor.replace('test', 'train')}'")
        if not trainer.resumed:
            self._reset()
        self.reason = self.stopped_epoch = None
        self.clock.start(trainer.resumed)
        # Per-step checks only where needed: a time budget, or a loss the optimizer does not check itself.
        checks_loss = self.stop_on_divergence and not getattr(trainer.optimizer, "check_divergence", False)
        self.skip_hooks = frozenset() if self.time_budget is not None or checks_loss else frozenset({"after_step"})
        self._checks_loss = checks_loss

    def _stop(self, trainer: Trainer, reason: str) -> bool:
        if self.reason is None:
            self.reason, self.stopped_epoch = reason, trainer.epoch
            trainer.stop_reason = f"EarlyStopping: {reason}"
        return False

    def on_divergence(self, trainer: Trainer, step: int, error: Exception) -> bool | None:
        if self.stop_on_divergence:
            return self._stop(trainer, f"diverged at step {step} (loss {getattr(error, 'loss', 'not finite')}); "
                                       "the parameters are the last finite ones")
        return None

    def after_step(self, trainer: Trainer, step: int, outputs: dict) -> bool | None:
        if self._checks_loss:
            loss = outputs.get(trainer.loss)
            if loss is not None and not math.isfinite(float(_mean(loss))):
                return self._stop(trainer, f"diverged at step {step} (loss {float(_mean(loss))}); the optimizer "
                                           "does not check divergence, so this step's update was applied")
        if self.time_budget is not None and self.clock.elapsed() >= self.time_budget:
            return self._stop(trainer, f"time budget of {self.time_budget:g} s used up")
        return None

    def after_epoch(self, trainer: Trainer, epoch: int, stats: EpochStats) -> bool | None:
        if epoch == self._last_epoch and self._before_last is not None:
            # a resumed epoch reported again: its complete record replaces the partial one
            self.best, self.best_epoch, self.bad_epochs = self._before_last
        self._before_last, self._last_epoch = [self.best, self.best_epoch, self.bad_epochs], epoch
        value = getattr(stats, self.monitor)
        if value is not None:
            self._update(epoch, float(value))
        if self.target is not None and value is not None and self._reached(float(value)):
            return self._stop(trainer, f"{self.monitor} {value:.6g} reached the target {self.target:g}")
        if self.patience is not None and self.bad_epochs >= self.patience:
            best = "n/a" if self.best is None else f"{self.best:.6g} (epoch {self.best_epoch})"
            return self._stop(trainer, f"{self.monitor} did not improve on {best} by more than {self.min_delta:g} "
                                       f"for {self.bad_epochs} epochs")
        if self.time_budget is not None and self.clock.elapsed() >= self.time_budget:
            return self._stop(trainer, f"time budget of {self.time_budget:g} s used up")
        return None

    def _reached(self, value: float) -> bool:
        return value >= self.target if self.mode == "max" else value <= self.target

    def _update(self, epoch: int, value: float) -> None:
        if self.best is None and not math.isnan(value):
            improved = True
        elif self.mode == "max":
            improved = value > self.best + self.min_delta if self.best is not None else False
        else:
            improved = value < self.best - self.min_delta if self.best is not None else False
        if improved:
            self.best, self.best_epoch, self.bad_epochs = value, epoch, 0
        else:
            self.bad_epochs += 1

    def after_training(self, trainer: Trainer, stats: TrainingStats) -> None:
        self.clock.stop()

    def on_error(self, trainer: Trainer, error: BaseException) -> None:
        self.clock.stop()

    def state_dict(self) -> dict[str, Any]:
        """Best value and epoch, epochs without improvement, and the seconds trained."""
        return new_state("EarlyStopping", config={"monitor": self.monitor}, best=self.best, best_epoch=self.best_epoch,
                         bad_epochs=self.bad_epochs, last_epoch=self._last_epoch, before_last=self._before_last,
                         **self.clock.state_dict())

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        check_state(state, "EarlyStopping", "EarlyStopping",
                    ["best", "best_epoch", "bad_epochs", "last_epoch", "before_last", "elapsed"],
                    {"monitor": self.monitor})
        self.best = None if state["best"] is None else float(state["best"])
        self.best_epoch = state["best_epoch"]
        self.bad_epochs = int(state["bad_epochs"])
        self._last_epoch = int(state["last_epoch"])
        self._before_last = None if state["before_last"] is None else list(state["before_last"])
        self.clock.load_state_dict(state)


def _mean(value: Any) -> float:
    return float(np.mean(value))


__all__ = ["EarlyStopping", "MONITORS"]
