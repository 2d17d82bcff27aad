"""L2: metrics — what a benchmark measures and checks against its acceptable values.

Two kinds:

* :class:`TestMetric` — measures one operator or network invocation (``begin`` / run / ``end``, repeated
  ``reruns`` times, then ``measure``), e.g. :class:`RunTime` and :class:`OutputError`.
* :class:`TrainingMetric` — a :class:`~d5.training.events.TrainerEvent` that observes a training run and
  yields one number: :class:`TestAccuracy`, :class:`TrainingAccuracy`, :class:`WallclockTime`,
  :class:`Throughput`, :class:`TimeToAccuracy`. Pass them as events to the Trainer; a recipe then checks
  ``metric.is_met(threshold)``.

>>> accuracy = TestAccuracy()
>>> # Trainer(train, test, executor, optimizer, events=[accuracy]).run(5)
>>> # accuracy.is_met(93.0), accuracy.describe(93.0)
>>> (accuracy.name, accuracy.unit, accuracy.higher_is_better)
('TestAccuracy', '%', True)
"""
from __future__ import annotations

import abc
import math
import time
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from d5.errors import D5Error
from d5.training.events import TrainerEvent

if TYPE_CHECKING:
    from d5.bench.stats import Summary
    from d5.training.trainer import EpochStats, EvaluationStats, Trainer, TrainingStats


# --------------------------------------------------------------------------------------------- test metrics

class TestMetric(abc.ABC):
    """Measures an operator/network invocation. The harness calls, ``reruns`` times::

        inputs = metric.begin(inputs); outputs = run(inputs); outputs = metric.end(outputs)

    and then ``metric.measure(inputs, outputs, reference_outputs)`` for the final value. ``begin`` and
    ``end`` return their argument (a metric may, e.g., copy or synchronize it) and must be cheap.

    >>> class OutputSum(TestMetric):
    ...     def measure(self, inputs, outputs, reference_outputs=None):
    ...         return float(sum(o.sum() for o in outputs))
    >>> OutputSum().measure([], [np.ones(3)])
    3.0
    """

    __test__ = False  # not a pytest test class despite its name
    reruns: int = 1

    def begin(self, inputs: Any) -> Any:
        """Called just before each invocation."""
        return inputs

    def end(self, outputs: Any) -> Any:
        """Called just after each invocation."""
        return outputs

    @abc.abstractmethod
    def measure(self, inputs: Any, outputs: Any, reference_outputs: Any = None) -> float:
        """The metric's value after the reruns."""


class RunTime(TestMetric):
    """Median seconds per invocation over ``reruns`` runs (the full summary is in ``.summary``).

    >>> metric = RunTime(reruns=3)
    >>> for _ in range(metric.reruns):
    ...     inputs = metric.begin([np.ones(3)])
    ...     outputs = metric.end([inputs[0] * 2])
    >>> metric.measure(inputs, outputs) >= 0, metric.summary.n
    (True, 3)
    """

    def __init__(self, reruns: int = 20) -> None:
        if isinstance(reruns, bool) or not isinstance(reruns, int) or reruns < 1:
            raise D5Error(f"RunTime(reruns={reruns!r}): reruns must be an int >= 1")
        self.reruns = reruns
        self.samples: list[float] = []
        self._start: float | None = None
        self.summary: Summary | None = None

    def begin(self, inputs: Any) -> Any:
        self._start = time.perf_counter()
        return inputs

    def end(self, outputs: Any) -> Any:
        if self._start is not None:
            self.samples.append(time.perf_counter() - self._start)
            self._start = None
        return outputs

    def measure(self, inputs: Any, outputs: Any, reference_outputs: Any = None) -> float:
        from d5.bench.stats import summarize  # local: statistics only when a result is asked for

        if not self.samples:
            raise D5Error("RunTime.measure(): no timed runs; call begin(inputs) and end(outputs) around each run")
        self.summary = summarize(self.samples)
        return self.summary.median


class OutputError(TestMetric):
    """The largest error of ``outputs`` against ``reference_outputs`` over all output tensors:
    ``norm='linf'`` (max absolute difference) or ``'l2'``; ``relative=True`` divides by the reference's norm.

    >>> OutputError('linf').measure(None, [np.array([1.0, 2.5])], [np.array([1.0, 2.0])])
    0.5
    """

    def __init__(self, norm: str = "linf", relative: bool = False) -> None:
        if norm not in ("linf", "l2"):
            raise D5Error(f"OutputError(norm={norm!r}): norm must be 'linf' or 'l2'")
        self.norm = norm
        self.relative = relative

    def _norm(self, value: np.ndarray) -> float:
        value = np.asarray(value, dtype=np.float64).ravel()
        if value.size == 0:
            return 0.0
        return float(np.max(np.abs(value)) if self.norm == "linf" else np.linalg.norm(value))

    def measure(self, inputs: Any, outputs: Any, reference_outputs: Any = None) -> float:
        if reference_outputs is None:
            raise D5Error("OutputError needs reference_outputs (the oracle's outputs) to compare against")
        if isinstance(outputs, Mapping):
            outputs = [outputs[name] for name in reference_outputs]
            reference_outputs = list(reference_outputs.values())
        outputs, reference_outputs = list(outputs), list(reference_outputs)
        if len(outputs) != len(reference_outputs):
            raise D5Error(f"OutputError: {len(outputs)} outputs but {len(reference_outputs)} reference outputs")
        worst = 0.0
        for output, reference in zip(outputs, reference_outputs):
            output, reference = np.asarray(output), np.asarray(reference)
            if output.shape != reference.shape:
                raise D5Error(f"OutputError: output shape {output.shape} != reference shape {reference.shape}")
            error = self._norm(output.astype(np.float64) - reference)
            if self.relative:
                error /= max(self._norm(reference), np.finfo(np.float64).tiny)
            worst = max(worst, error)
        return worst


# ----------------------------------------------------------------------------------------- training metrics

class TrainingMetric(TrainerEvent):
    """A trainer event that summarizes a run in one number (``result()``), in ``unit``.

    ``is_met(threshold)`` is ``result >= threshold`` when ``higher_is_better`` else ``result <= threshold``
    (False when there is no finite result).

    >>> class Steps(TrainingMetric):
    ...     name, unit, higher_is_better = 'Steps', 'steps', False
    ...     def after_training(self, trainer, stats):
    ...         self.value = stats.steps
    """

    name: str = "TrainingMetric"
    unit: str = ""
    higher_is_better: bool = True
    value: float | None = None

    def result(self) -> float:
        """The metric's value; raises :class:`D5Error` before the metric has observed a run."""
        if self.value is None:
            raise D5Error(f"{self.name} has no result yet: pass it as an event to the Trainer "
                          f"(Trainer(..., events=[metric])) and run it first")
        return float(self.value)

    def is_met(self, threshold: float) -> bool:
        """Whether the result reaches ``threshold`` in this metric's direction."""
        if self.value is None:
            return False
        value = self.result()
        if math.isnan(value):
            return False
        return value >= threshold if self.higher_is_better else value <= threshold

    def describe(self, threshold: float | None = None) -> str:
        """One line for reports, e.g. ``'TestAccuracy = 97.25 % (target >= 93: met)'``."""
        shown = "n/a" if self.value is None else f"{self.result():.4g}"
        line = f"{self.name} = {shown}{' ' + self.unit if self.unit else ''}"
        if threshold is None:
            return f"{line} ({'higher' if self.higher_is_better else 'lower'} is better)"
        comparison = ">=" if self.higher_is_better else "<="
        return f"{line} (target {comparison} {threshold:g}: {'met' if self.is_met(threshold) else 'NOT met'})"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.describe()})"


class TestAccuracy(TrainingMetric):
    """Validation accuracy (percent) after the last epoch; ``history`` holds every epoch's value.

    >>> TestAccuracy().describe()
    'TestAccuracy = n/a % (higher is better)'
    """

    __test__ = False
    name, unit, higher_is_better = "TestAccuracy", "%", True

    def __init__(self) -> None:
        self.history: list[float | None] = []
        self.value = None

    def before_training(self, trainer: Trainer) -> None:
        if trainer.validation_sampler is None:
            raise D5Error("TestAccuracy needs a validation sampler; give the Trainer one "
                          "(Trainer(train_sampler, validation_sampler, ...))")
        self.history, self.value = [], None

    def after_test_set(self, trainer: Trainer, stats: EvaluationStats) -> None:
        self.history.append(stats.accuracy)
        self.value = stats.accuracy


class TrainingAccuracy(TrainingMetric):
    """Accuracy (percent) over the last epoch's training batches (outputs of the training passes).

    >>> TrainingAccuracy().unit
    '%'
    """

    name, unit, higher_is_better = "TrainingAccuracy", "%", True

    def __init__(self) -> None:
        self.history: list[float | None] = []
        self.value = None

    def before_training(self, trainer: Trainer) -> None:
        self.history, self.value = [], None

    def after_epoch(self, trainer: Trainer, epoch: int, stats: EpochStats) -> None:
        self.history.append(stats.train_accuracy)
        self.value = stats.train_accuracy


class WallclockTime(TrainingMetric):
    """Total wall-clock seconds of the run (``before_training`` to ``after_training``, validation
    included); lower is better. ``step_times`` holds each optimizer step's seconds and ``summary`` their
    median with a non-parametric confidence interval (:func:`d5.bench.stats.summarize`).

    >>> WallclockTime().higher_is_better
    False
    """

    name, unit, higher_is_better = "WallclockTime", "s", False

    def __init__(self, confidence: float = 0.95) -> None:
        self.confidence = confidence
        self.step_times: list[float] = []
        self.value = None
        self._start = 0.0
        self._step_start = 0.0

    def before_training(self, trainer: Trainer) -> None:
        self.step_times, self.value = [], None
        self._start = time.perf_counter()

    def before_step(self, trainer: Trainer, step: int, inputs: dict) -> None:
        self._step_start = time.perf_counter()

    def after_step(self, trainer: Trainer, step: int, outputs: dict) -> None:
        self.step_times.append(time.perf_counter() - self._step_start)

    def after_training(self, trainer: Trainer, stats: TrainingStats) -> None:
        self.value = time.perf_counter() - self._start

    @property
    def summary(self) -> Summary:
        """Median and confidence interval of the per-step times (seconds)."""
        from d5.bench.stats import summarize  # local: statistics only when asked for

        if not self.step_times:
            raise D5Error("WallclockTime.summary: no steps were timed; pass the metric as a Trainer event and run")
        return summarize(self.step_times, self.confidence)

    def describe(self, threshold: float | None = None) -> str:
        line = super().describe(threshold)
        if self.step_times:
            line += f"; per step {self.summary.format('s')}"
        return line


class Throughput(TrainingMetric):
    """Training samples per second over the training steps of all epochs (validation excluded; data
    loading and event hooks included, as a user experiences them); higher is better.

    >>> Throughput().unit
    'samples/s'
    """

    name, unit, higher_is_better = "Throughput", "samples/s", True

    def __init__(self) -> None:
        self.samples = 0
        self.seconds = 0.0
        self.value = None

    def before_training(self, trainer: Trainer) -> None:
        self.samples, self.seconds, self.value = 0, 0.0, None

    def after_epoch(self, trainer: Trainer, epoch: int, stats: EpochStats) -> None:
        self.samples += stats.samples
        self.seconds += stats.train_time
        self.value = self.samples / self.seconds if self.seconds > 0 else None


class TimeToAccuracy(TrainingMetric):
    """Seconds from the start of training until validation accuracy first reaches ``target`` percent
    (validation time included); ``inf`` if it never does. Lower is better.

    >>> TimeToAccuracy(90.0).describe()
    'TimeToAccuracy(90%) = n/a s (lower is better)'
    """

    unit, higher_is_better = "s", False

    def __init__(self, target: float) -> None:
        if not isinstance(target, (int, float)) or not 0.0 <= target <= 100.0:
            raise D5Error(f"TimeToAccuracy({target!r}): the target is an accuracy in percent, in [0, 100]")
        self.target = float(target)
        self.name = f"TimeToAccuracy({self.target:g}%)"
        self.value = None
        self._start = 0.0

    def before_training(self, trainer: Trainer) -> None:
        if trainer.validation_sampler is None:
            raise D5Error("TimeToAccuracy needs a validation sampler; give the Trainer one")
        self.value = None
        self._start = time.perf_counter()

    def after_test_set(self, trainer: Trainer, stats: EvaluationStats) -> None:
        if self.value is None and stats.accuracy is not None and stats.accuracy >= self.target:
            self.value = time.perf_counter() - self._start

    def after_training(self, trainer: Trainer, stats: TrainingStats) -> None:
        if self.value is None:
            self.value = math.inf


def check_metrics(metrics: Sequence[tuple[TrainingMetric, float]]) -> tuple[bool, list[str]]:
    """``(all met, one describe() line per metric)`` for ``[(metric, threshold), ...]`` as in a recipe.

    >>> ok, lines = check_metrics([])
    >>> ok, lines
    (True, [])
    """
    lines = [metric.describe(threshold) for metric, threshold in metrics]
    return all(metric.is_met(threshold) for metric, threshold in metrics), lines


__all__ = ["TestMetric", "RunTime", "OutputError", "TrainingMetric", "TestAccuracy", "TrainingAccuracy",
           "WallclockTime", "Throughput", "TimeToAccuracy", "check_metrics"]
