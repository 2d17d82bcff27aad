"""L2: the training loop — epochs over a sampler, one optimizer step per batch, validation, events.

>>> # trainer = Trainer(d5.ShuffleSampler(train_set, 64, seed=0), d5.OrderedSampler(test_set, 256),
>>> #                   executor, d5.MomentumOptimizer(executor, lr=0.1, momentum=0.9))
>>> # stats = trainer.run(epochs=5)
>>> # stats.test_accuracy[-1]
>>> TrainingStats().epochs
0

The loop adds two clock reads, a loss read-back and an argmax per step, and calls only the event hooks
that some event overrides, so its overhead is negligible next to a forward/backward pass.
"""
from __future__ import annotations

import dataclasses
import math
import time
from typing import Any, Iterable, Mapping

import numpy as np

from d5.errors import D5Error
from d5.training.dataset import check_batch
from d5.training.events import HOOKS, EpochSummary, ProgressBar, TrainerEvent, overridden_hooks


@dataclasses.dataclass
class EvaluationStats:
    """Loss (batch-size-weighted mean) and accuracy (percent) over a test/validation sampler.

    ``accuracy`` is None when the network has no classification output to take an argmax over.

    >>> EvaluationStats(loss=0.5, accuracy=90.0, samples=10, time=0.1).accuracy
    90.0
    """

    loss: float | None
    accuracy: float | None
    samples: int
    time: float

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class EpochStats:
    """What one epoch did. ``train_time`` excludes validation; ``epoch_time`` includes it;
    ``samples_per_second`` = ``samples / train_time``. Values not measured are None.

    >>> EpochStats(epoch=0, steps=2, samples=64).as_dict()['samples']
    64
    """

    epoch: int
    steps: int
    samples: int
    train_loss: float | None = None
    train_accuracy: float | None = None
    test_loss: float | None = None
    test_accuracy: float | None = None
    train_time: float = 0.0
    epoch_time: float = 0.0
    samples_per_second: float = 0.0
    lr: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class TrainingStats:
    """Per-epoch lists (one entry per recorded epoch) and totals of a training run.

    Accuracies are percentages; an entry is None where it was not measured (no validation sampler,
    no classification output). ``timing`` holds total seconds spent in ``data`` (fetching batches),
    ``step`` (optimizer steps) and ``validation``.

    >>> stats = TrainingStats(train_loss=[0.9, 0.4], steps=20)
    >>> stats.epochs, stats.as_dict()['steps']
    (2, 20)
    """

    train_loss: list[float | None] = dataclasses.field(default_factory=list)
    train_accuracy: list[float | None] = dataclasses.field(default_factory=list)
    test_loss: list[float | None] = dataclasses.field(default_factory=list)
    test_accuracy: list[float | None] = dataclasses.field(default_factory=list)
    epoch_time: list[float] = dataclasses.field(default_factory=list)
    samples_per_second: list[float] = dataclasses.field(default_factory=list)
    total_time: float = 0.0
    steps: int = 0
    samples: int = 0
    stopped_early: bool = False  # an event asked the trainer to stop
    timing: dict[str, float] = dataclasses.field(default_factory=dict)

    @property
    def epochs(self) -> int:
        """Number of epochs recorded."""
        return len(self.train_loss)

    def add_epoch(self, epoch_stats: EpochStats) -> None:
        """Append one epoch's values to the per-epoch lists."""
        self.train_loss.append(epoch_stats.train_loss)
        self.train_accuracy.append(epoch_stats.train_accuracy)
        self.test_loss.append(epoch_stats.test_loss)
        self.test_accuracy.append(epoch_stats.test_accuracy)
        self.epoch_time.append(epoch_stats.epoch_time)
        self.samples_per_second.append(epoch_stats.samples_per_second)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (lists copied), including ``epochs``."""
        data = dataclasses.asdict(self)
        data["epochs"] = self.epochs
        return data


def count_correct(prediction: np.ndarray, labels: np.ndarray) -> tuple[int, int] | None:
    """``(correct, total)`` for an argmax over axis 1 of ``prediction`` against ``labels``.

    ``labels`` may be class indices (shape ``(N,)``, ``(N, 1)``, or ``(N, ...)`` for per-position
    predictions of shape ``(N, C, ...)``) or one-hot / probabilities shaped like ``prediction``.
    Returns None when accuracy is undefined (fewer than two classes, or incompatible labels).

    >>> count_correct(np.array([[0.1, 0.9], [0.8, 0.2], [0.3, 0.7]]), np.array([1, 0, 0]))
    (2, 3)
    """
    prediction = np.asarray(prediction)
    if prediction.ndim < 2 or prediction.shape[1] < 2:
        return None
    predicted = prediction.argmax(axis=1)
    labels = np.asarray(labels)
    if labels.shape == prediction.shape:
        labels = labels.argmax(axis=1)
    elif labels.shape != predicted.shape:
        if labels.size != predicted.size:
            return None
        labels = labels.reshape(predicted.shape)
    return int(np.count_nonzero(predicted == labels)), int(predicted.size)


def _label_node(sampler: Any) -> str:
    return getattr(getattr(sampler, "dataset", None), "label_node", "label")


def _batch_size(batch: Mapping[str, Any], label_node: str) -> int:
    value = batch.get(label_node)
    if value is None:
        value = next(iter(batch.values()))
    return len(value)


class _Hooks:
    """Bound methods of the events that override each hook, resolved once per run (see events.py)."""

    def __init__(self, events: list[TrainerEvent]) -> None:
        for hook in HOOKS:
            setattr(self, hook, overridden_hooks(events, hook))

    @staticmethod
    def fire(methods: list, *args: Any) -> bool:
        """Call every method; True if any returned exactly False (a stop request)."""
        stop = False
        for method in methods:
            if method(*args) is False:
                stop = True
        return stop


class Trainer:
    """Trains ``executor`` with ``optimizer`` over ``train_sampler``, validating on ``validation_sampler``
    (or None) after every epoch, and calls ``events`` (see :mod:`d5.training.events`) along the way.

    ``progress=True`` adds a :class:`ProgressBar` and an :class:`EpochSummary`; ``progress=False`` keeps
    the trainer silent. While running, events can read ``trainer.steps`` (steps taken), ``trainer.epoch``,
    ``trainer.epochs`` (requested), ``trainer.running_loss`` (this epoch's mean so far), ``trainer.stats``
    and ``trainer.timer`` (a :class:`d5.bench.timing.Timer` with ``data``/``step``/``validation``).

    >>> # executor = d5.frameworks.reference.from_model(d5.models.lenet5())
    >>> # optimizer = d5.MomentumOptimizer(executor, lr=0.01, momentum=0.9)
    >>> # stats = Trainer(train_sampler, test_sampler, executor, optimizer, events=[StopAfter(steps=100)]).run(3)
    >>> # stats.test_accuracy[-1], trainer.test(test_sampler)
    """

    def __init__(self, train_sampler: Iterable, validation_sampler: Iterable | None, executor: Any,
                 optimizer: Any, events: Iterable[TrainerEvent] | None = None, progress: bool = True) -> None:
        if not hasattr(train_sampler, "__iter__"):
            raise D5Error(f"train_sampler must be iterable over batch dicts (e.g. d5.ShuffleSampler), "
                          f"got {type(train_sampler).__name__}")
        if validation_sampler is not None and not hasattr(validation_sampler, "__iter__"):
            raise D5Error(f"validation_sampler must be None or iterable over batch dicts, "
                          f"got {type(validation_sampler).__name__}")
        if not hasattr(executor, "inference"):
            raise D5Error(f"executor must be a d5.GraphExecutor (with inference()), got {type(executor).__name__}")
        if not callable(getattr(optimizer, "step", None)):
            raise D5Error(f"optimizer must be a d5 Optimizer (with step(inputs)), got {type(optimizer).__name__}")
        events = [] if events is None else list(events)
        for event in events:
            if not isinstance(event, TrainerEvent):
                raise D5Error(f"events must be TrainerEvent instances, got {type(event).__name__}; "
                              f"derive it from d5.training.events.TrainerEvent")
        self.train_sampler = train_sampler
        self.validation_sampler = validation_sampler
        self.executor = executor
        self.optimizer = optimizer
        self.loss = getattr(optimizer, "loss", "loss")
        self.events = ([ProgressBar(), EpochSummary()] if progress else []) + events
        self.steps = 0
        self.epoch = 0
        self.epochs = 0
        self.stats = TrainingStats()
        self.timer = None
        self._prediction_output: str | None = None
        self._epoch_loss_sum = 0.0
        self._epoch_loss_samples = 0

    @property
    def running_loss(self) -> float:
        """Mean training loss of the current epoch so far (NaN before its first step)."""
        if not self._epoch_loss_samples:
            return math.nan
        return self._epoch_loss_sum / self._epoch_loss_samples

    def run(self, epochs: int, events: Iterable[TrainerEvent] | None = None) -> TrainingStats:
        """Train for ``epochs`` epochs (fewer if an event stops early); extra ``events`` join this run only.

        Returns the run's :class:`TrainingStats` (also at ``trainer.stats``).
        """
        from d5.bench.timing import Timer  # local: keeps `import d5.training.trainer` free of bench

        if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 0:
            raise D5Error(f"Trainer.run(epochs={epochs!r}): epochs must be an int >= 0")
        extra = [] if events is None else list(events)
        for event in extra:
            if not isinstance(event, TrainerEvent):
                raise D5Error(f"events must be TrainerEvent instances, got {type(event).__name__}")
        hooks = _Hooks(self.events + extra)
        self.epochs = epochs
        self.steps = 0
        self.stats = TrainingStats()
        self.timer = Timer()
        start = time.perf_counter()
        stop = _Hooks.fire(hooks.before_training, self)
        for epoch in range(epochs):
            if stop:
                break
            self.epoch = epoch
            stop = self._run_epoch(epoch, hooks)
        self.stats.stopped_early = stop
        self.stats.total_time = time.perf_counter() - start
        self.stats.steps = self.steps
        self.stats.timing = self.timer.totals()
        _Hooks.fire(hooks.after_training, self, self.stats)
        return self.stats

    def _run_epoch(self, epoch: int, hooks: _Hooks) -> bool:
        """One epoch: steps, validation, after_epoch. Returns True if an event asked to stop."""
        sampler = self.train_sampler
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(epoch)  # explicit, so a resumed or repeated run reshuffles identically
        self._epoch_loss_sum, self._epoch_loss_samples = 0.0, 0
        if _Hooks.fire(hooks.before_epoch, self, epoch):
            return True
        before_step, after_step = hooks.before_step, hooks.after_step
        optimizer, loss_name, label_node = self.optimizer, self.loss, _label_node(sampler)
        timer, clock = self.timer, time.perf_counter
        stop = False
        steps = samples = correct = counted = 0
        data_time = step_time = 0.0
        epoch_start = clock()
        batches = iter(sampler)
        while True:
            fetch_start = clock()
            batch = next(batches, None)
            if batch is None:
                break
            data_time += clock() - fetch_start
            step = self.steps
            check_batch(batch, f"train_sampler {type(sampler).__name__}, epoch {epoch}, step {step}")
            if before_step and _Hooks.fire(before_step, self, step, batch):
                stop = True
                break
            step_start = clock()
            outputs = optimizer.step(batch)
            step_end = clock()
            step_time += step_end - step_start
            batch_size = _batch_size(batch, label_node)
            loss = outputs.get(loss_name)
            if loss is not None:
                self._epoch_loss_sum += float(np.mean(loss)) * batch_size
                self._epoch_loss_samples += batch_size
            result = self._correct(outputs, batch, label_node)
            if result is not None:
                correct += result[0]
                counted += result[1]
            steps += 1
            samples += batch_size
            self.steps = step + 1
            if after_step and _Hooks.fire(after_step, self, step, outputs):
                stop = True
                break
        train_time = clock() - epoch_start
        timer.add("data", data_time)
        timer.add("step", step_time)
        if steps == 0 and stop:
            return True  # nothing ran in this epoch: nothing to validate or record
        epoch_stats = EpochStats(
            epoch=epoch, steps=steps, samples=samples,
            train_loss=self.running_loss if self._epoch_loss_samples else None,
            train_accuracy=100.0 * correct / counted if counted else None,
            train_time=train_time,
            samples_per_second=samples / train_time if train_time > 0 else 0.0,
            lr=getattr(optimizer, "lr", None))
        if self.validation_sampler is not None:
            stop = _Hooks.fire(hooks.before_test_set, self) or stop
            evaluation = self.evaluate(self.validation_sampler)
            timer.add("validation", evaluation.time)
            epoch_stats.test_loss, epoch_stats.test_accuracy = evaluation.loss, evaluation.accuracy
            stop = _Hooks.fire(hooks.after_test_set, self, evaluation) or stop
        epoch_stats.epoch_time = clock() - epoch_start
        self.stats.add_epoch(epoch_stats)
        self.stats.samples += samples
        self.stats.steps = self.steps
        return _Hooks.fire(hooks.after_epoch, self, epoch, epoch_stats) or stop

    def _correct(self, outputs: Mapping[str, Any], batch: Mapping[str, Any], label_node: str):
        name = self._prediction_output
        if name is None:
            name = self._prediction_output = self._find_prediction_output(outputs) or ""
        if not name or label_node not in batch:
            return None
        return count_correct(outputs[name], batch[label_node])

    def _find_prediction_output(self, outputs: Mapping[str, Any]) -> str | None:
        """The network's first output that is not the loss (falls back to the outputs' order)."""
        network = getattr(self.executor, "network", None)
        names = list(getattr(network, "outputs", None) or []) or list(outputs)
        for name in names:
            if name != self.loss and name in outputs:
                return name
        return None

    def evaluate(self, sampler: Iterable) -> EvaluationStats:
        """Loss, accuracy, sample count and time of ``executor.inference`` over ``sampler``."""
        if sampler is None or not hasattr(sampler, "__iter__"):
            raise D5Error(f"evaluate()/test() needs a sampler of batch dicts, got {sampler!r}")
        label_node = _label_node(sampler)
        start = time.perf_counter()
        loss_sum = 0.0
        loss_samples = samples = correct = counted = 0
        for index, batch in enumerate(sampler):
            check_batch(batch, f"evaluation sampler {type(sampler).__name__}, batch {index}")
            outputs = self.executor.inference(batch)
            batch_size = _batch_size(batch, label_node)
            samples += batch_size
            loss = outputs.get(self.loss)
            if loss is not None:
                loss_sum += float(np.mean(loss)) * batch_size
                loss_samples += batch_size
            result = self._correct(outputs, batch, label_node)
            if result is not None:
                correct += result[0]
                counted += result[1]
        if samples == 0:
            raise D5Error("the test/validation sampler produced no batches; check its dataset and batch_size "
                          "(drop_last=True with fewer examples than batch_size yields nothing)")
        return EvaluationStats(loss=loss_sum / loss_samples if loss_samples else None,
                               accuracy=100.0 * correct / counted if counted else None,
                               samples=samples, time=time.perf_counter() - start)

    def test(self, sampler: Iterable) -> tuple[float | None, float | None]:
        """Evaluate ``sampler`` with ``executor.inference``: ``(mean loss, accuracy in percent)``.

        The loss is averaged weighted by batch size; accuracy is the argmax over axis 1 of the network's
        first non-loss output against the batch's label node. Either is None if it cannot be computed.
        """
        evaluation = self.evaluate(sampler)
        return evaluation.loss, evaluation.accuracy


__all__ = ["Trainer", "TrainingStats", "EpochStats", "EvaluationStats", "count_correct"]
