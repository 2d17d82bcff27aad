"""L2: the training loop — epochs over a sampler, one optimizer step per batch, validation, events.

>>> # trainer = Trainer(d5.ShuffleSampler(train_set, 64, seed=0), d5.OrderedSampler(test_set, 256),
>>> #                   executor, d5.MomentumOptimizer(executor, lr=0.1, momentum=0.9))
>>> # stats = trainer.run(epochs=5)
>>> # stats.test_accuracy[-1]
>>> TrainingStats().epochs
0

The loop adds four clock reads, a loss read-back and an argmax per step, and calls only the event hooks
that some event overrides, so its overhead is negligible next to a forward/backward pass
(``benchmarks/training_overhead.py`` measures it).

**State** (checkpoint/resume): :meth:`Trainer.state_dict` is the run's position (epoch, batches taken in it,
steps), the epoch's running sums, the statistics so far, and the ``state_dict()`` of the train sampler, the
optimizer and every event that has one; :meth:`Trainer.load_state_dict` on a trainer built the same way makes
the next ``run(epochs)`` continue there -- mid-epoch included -- instead of starting over. With the network's
parameters restored too (:mod:`d5.training.checkpoint` saves them), the final parameters equal an
uninterrupted run's bitwise on the reference framework.
"""
from __future__ import annotations

import dataclasses
import math
import time
from typing import Any, Callable, Iterable, Mapping

import numpy as np

from d5.errors import CheckpointError, D5Error, DivergenceError
from d5.training.dataset import check_batch
from d5.training.events import (HOOKS, STATE_VERSION, EpochSummary, ProgressBar, TrainerEvent, check_state,
                                overridden_hooks)


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
    ``step`` (optimizer steps) and ``validation``. ``stopped_early``, ``diverged`` and ``stop_reason``
    describe how the (latest) run ended.

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
    diverged: bool = False  # a step's loss was NaN/inf and an event chose to stop (see TrainerEvent.on_divergence)
    stop_reason: str | None = None  # why an event stopped the run, when it said so

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

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrainingStats:
        """The stats :meth:`as_dict` described (``epochs`` and unknown keys ignored).

        >>> TrainingStats.from_dict(TrainingStats(train_loss=[0.5], steps=3).as_dict()).steps
        3
        """
        names = {field.name for field in dataclasses.fields(cls)}
        values = {key: value for key, value in data.items() if key in names}
        for key in ("train_loss", "train_accuracy", "test_loss", "test_accuracy", "epoch_time", "samples_per_second"):
            values[key] = list(values.get(key, []))
        values["timing"] = dict(values.get("timing", {}))
        return cls(**values)

    def drop_last_epoch(self) -> None:
        """Remove the last epoch's entries from the per-epoch lists (a resumed epoch replaces its partial record)."""
        for values in (self.train_loss, self.train_accuracy, self.test_loss, self.test_accuracy, self.epoch_time,
                       self.samples_per_second):
            values.pop()


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


#: The running sums of the epoch in progress, saved with the trainer's state (as ``_epoch_<name>`` attributes).
_EPOCH_SUMS = {"steps": 0, "samples": 0, "correct": 0, "counted": 0, "loss_sum": 0.0, "loss_samples": 0,
               "data_time": 0.0, "step_time": 0.0, "train_time": 0.0}


class Trainer:
    """Trains ``executor`` with ``optimizer`` over ``train_sampler``, validating on ``validation_sampler``
    (or None) after every epoch, and calls ``events`` (see :mod:`d5.training.events`) along the way.

    ``progress=True`` adds a :class:`ProgressBar` and an :class:`EpochSummary`; ``progress=False`` keeps
    the trainer silent. While running, events can read ``trainer.steps`` (steps taken), ``trainer.epoch``,
    ``trainer.position`` (batches taken from the sampler in this epoch), ``trainer.epochs`` (requested),
    ``trainer.running_loss`` (this epoch's mean so far), ``trainer.stats``, ``trainer.timer`` (a
    :class:`d5.bench.timing.Timer` with ``data``/``step``/``validation``), ``trainer.last_data_time`` and
    ``trainer.last_step_time`` (seconds of the latest batch fetch and optimizer step) and ``trainer.resumed``.

    **Forward+backward timing:** when an event has ``times_forward_backward = True`` (e.g.
    :class:`~d5.training.breakdown.PhaseBreakdown`), the trainer wraps ``executor.inference_and_backprop`` for
    the run (an instance attribute shadowing the method, removed when the run ends, also on an error) so that
    ``trainer.forward_backward_time`` accumulates the seconds spent in it -- without touching the optimizer.

    **Resuming:** ``trainer.load_state_dict(state)`` (a ``state_dict()`` of a trainer built the same way), then
    ``run(epochs)`` continues from the saved position; see the module docstring. Event states are restored when
    ``run`` starts, matched by class and order among the events of that class that have a ``state_dict``
    (events without a saved state start afresh; saved states without an event are ignored).

    >>> # executor = d5.frameworks.reference.from_model(d5.models.lenet5())
    >>> # optimizer = d5.MomentumOptimizer(executor, lr=0.01, momentum=0.9)
    >>> # stats = Trainer(train_sampler, test_sampler, executor, optimizer, events=[StopAfter(steps=100)]).run(3)
    >>> # stats.test_accuracy[-1], trainer.test(test_sampler)
    >>> # state = trainer.state_dict()    # ... later, in a new process, with the parameters restored:
    >>> # trainer.load_state_dict(state); trainer.run(3)
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
        _check_events(events)
        self.train_sampler = train_sampler
        self.validation_sampler = validation_sampler
        self.executor = executor
        self.optimizer = optimizer
        self.loss = getattr(optimizer, "loss", "loss")
        self.events = ([ProgressBar(), EpochSummary()] if progress else []) + events
        self.steps = 0
        self.epoch = 0
        self.epochs = 0
        self.position = 0
        self.stats = TrainingStats()
        self.timer = None
        self.resumed = False
        self.stop_reason: str | None = None
        self.last_data_time = 0.0
        self.last_step_time = 0.0
        self.forward_backward_time = 0.0
        self._prediction_output: str | None = None
        self._run_events: list[TrainerEvent] = self.events
        self._run_start: float | None = None   # perf_counter at the start of the run in progress
        self._previous_time = 0.0              # seconds trained before this run (a resumed run's earlier part)
        self._segment_start: float | None = None  # perf_counter when this epoch's steps (re)started
        self._closed = False     # the current epoch has been recorded in stats
        self._complete = False   # ... and all of its batches were taken
        self._loaded: Mapping[str, Any] | None = None  # a state to continue from at the next run()
        self._skip_batches = 0   # batches to skip by iterating when resuming with a sampler without state
        self._reset_epoch()

    def _reset_epoch(self) -> None:
        self.position = 0
        for name, zero in _EPOCH_SUMS.items():
            setattr(self, f"_epoch_{name}", zero)
        self._closed = self._complete = False

    @property
    def running_loss(self) -> float:
        """Mean training loss of the current epoch so far (NaN before its first step)."""
        if not self._epoch_loss_samples:
            return math.nan
        return self._epoch_loss_sum / self._epoch_loss_samples

    @property
    def run_events(self) -> list[TrainerEvent]:
        """The events of the run in progress (or the last one): the trainer's and run()'s, in call order."""
        return list(self._run_events)

    @property
    def samples_seen(self) -> int:
        """Training samples of all steps so far (the recorded epochs' and the current epoch's)."""
        return self.stats.samples + (0 if self._closed else self._epoch_samples)

    def run(self, epochs: int, events: Iterable[TrainerEvent] | None = None) -> TrainingStats:
        """Train until ``epochs`` epochs are done (fewer if an event stops early); extra ``events`` join this
        run only. After :meth:`load_state_dict`, continue the saved run instead of starting afresh.

        Returns the run's :class:`TrainingStats` (also at ``trainer.stats``).
        """
        from d5.bench.timing import Timer  # local: keeps `import d5.training.trainer` free of bench

        if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 0:
            raise D5Error(f"Trainer.run(epochs={epochs!r}): epochs must be an int >= 0")
        extra = [] if events is None else list(events)
        _check_events(extra)
        # sorted() is stable: list order among events of equal hook_order
        run_events = sorted(self.events + extra, key=lambda event: event.hook_order)
        loaded = self._loaded
        if loaded is not None:
            _restore_events(run_events, loaded["events"])  # may refuse a state: then the load stays pending
        self._loaded = None
        self._run_events = run_events
        self.epochs = epochs
        self.resumed = loaded is not None
        if not self.resumed:
            self.steps = self.epoch = 0
            self.stats = TrainingStats()
            self.timer = Timer()
            self._reset_epoch()
            self._previous_time = 0.0
        else:
            self._previous_time = self.stats.total_time
        self.stop_reason = None
        self.stats.stopped_early = self.stats.diverged = False
        self.stats.stop_reason = None
        self.forward_backward_time = 0.0
        restore = (self._time_forward_backward()
                   if any(getattr(event, "times_forward_backward", False) for event in run_events) else None)
        start = self._run_start = time.perf_counter()
        try:
            stop = _Hooks.fire(overridden_hooks(run_events, "before_training"), self)
            hooks = _Hooks(run_events)  # after before_training: events may adjust skip_hooks there
            epoch = self.epoch
            while not stop and epoch < epochs:
                stop = self._run_epoch(epoch, hooks)
                epoch += 1
            self.stats.stopped_early = stop
            self.stats.stop_reason = self.stop_reason if stop else None
            self.stats.total_time = self._previous_time + (time.perf_counter() - start)
            self.stats.steps = self.steps
            self.stats.timing = self.timer.totals()
            self._run_start = None
            _Hooks.fire(hooks.after_training, self, self.stats)
        except BaseException as error:
            self._run_start = self._segment_start = None
            for method in overridden_hooks(run_events, "on_error"):
                try:
                    method(self, error)
                except Exception:  # noqa: BLE001 -- cleanup must not hide the error that ended the run
                    pass
            raise
        finally:
            if restore is not None:
                restore()
        return self.stats

    def _time_forward_backward(self) -> Callable[[], None]:
        """Shadow ``executor.inference_and_backprop`` with a timed wrapper; returns the function that undoes it."""
        executor = self.executor
        own = vars(executor).get("inference_and_backprop") if hasattr(executor, "__dict__") else None
        method = getattr(executor, "inference_and_backprop", None)
        if method is None:
            raise D5Error(f"a forward+backward timing was requested, but {type(executor).__name__} has no "
                          "inference_and_backprop() to time")
        clock = time.perf_counter

        def timed(*args: Any, **kwargs: Any) -> Any:
            started = clock()
            try:
                return method(*args, **kwargs)
            finally:
                self.forward_backward_time += clock() - started

        try:
            executor.inference_and_backprop = timed
        except AttributeError:
            raise D5Error(f"cannot time forward+backward: {type(executor).__name__}.inference_and_backprop cannot "
                          "be wrapped (no instance attributes); leave PhaseBreakdown out for this executor") from None

        def restore() -> None:
            if own is not None:
                executor.inference_and_backprop = own
            else:
                vars(executor).pop("inference_and_backprop", None)
        return restore

    def _run_epoch(self, epoch: int, hooks: _Hooks) -> bool:
        """One epoch (or the rest of a resumed one): steps, validation, after_epoch. True if an event asked to stop."""
        sampler = self.train_sampler
        self.epoch = epoch
        if hasattr(sampler, "set_epoch"):
            # explicit, so a resumed or repeated run reshuffles identically (a restored sampler keeps its
            # mid-epoch position through set_epoch of the same epoch)
            sampler.set_epoch(epoch)
        resuming = self.position > 0 and not self._closed
        if not resuming:
            self._reset_epoch()
        self._closed = self._complete = False
        if _Hooks.fire(hooks.before_epoch, self, epoch):
            return True
        length = _length(sampler)
        skip, self._skip_batches = self._skip_batches, 0
        if resuming and length is not None and self.position >= length:
            batches = iter(())  # saved after the epoch's last step: only its validation and records remain
        else:
            batches = iter(sampler)
            for _ in range(skip if resuming else 0):  # a sampler without state: replay up to the position
                if next(batches, None) is None:
                    raise CheckpointError(f"cannot resume at batch {self.position} of epoch {epoch}: the train "
                                          "sampler has fewer batches; resume with the sampler the run was saved with")
        before_step, after_step, on_divergence = hooks.before_step, hooks.after_step, hooks.on_divergence
        optimizer, loss_name, label_node = self.optimizer, self.loss, _label_node(sampler)
        clock = time.perf_counter
        stop = exhausted = False
        segment_start = self._segment_start = clock()
        while True:
            fetch_start = clock()
            batch = next(batches, None)
            if batch is None:
                exhausted = True
                break
            self.last_data_time = fetched = clock() - fetch_start
            self._epoch_data_time += fetched
            self.position += 1
            step = self.steps
            check_batch(batch, f"train_sampler {type(sampler).__name__}, epoch {epoch}, step {step}")
            if before_step and _Hooks.fire(before_step, self, step, batch):
                stop = True
                break
            step_start = clock()
            try:
                outputs = optimizer.step(batch)
            except DivergenceError as error:
                if on_divergence and _Hooks.fire(on_divergence, self, step, error):
                    self.stats.diverged = stop = True
                    self.stop_reason = self.stop_reason or f"diverged at step {step}: {error}"
                    break
                raise
            self.last_step_time = step_time = clock() - step_start
            self._epoch_step_time += step_time
            batch_size = _batch_size(batch, label_node)
            loss = outputs.get(loss_name)
            if loss is not None:
                self._epoch_loss_sum += _mean(loss) * batch_size
                self._epoch_loss_samples += batch_size
            result = self._correct(outputs, batch, label_node)
            if result is not None:
                self._epoch_correct += result[0]
                self._epoch_counted += result[1]
            self._epoch_steps += 1
            self._epoch_samples += batch_size
            self.steps = step + 1
            if after_step and _Hooks.fire(after_step, self, step, outputs):
                stop = True
                break
        close_start = clock()
        self._epoch_train_time += close_start - segment_start
        self._segment_start = None
        if self._epoch_steps == 0 and stop:
            return True  # nothing ran in this epoch: nothing to validate or record
        return self._close_epoch(epoch, hooks, stop, exhausted or (length is not None and self.position >= length),
                                 close_start)

    def _close_epoch(self, epoch: int, hooks: _Hooks, stop: bool, complete: bool, close_start: float) -> bool:
        """Validate, record and report the epoch; True if an event asked to stop."""
        timer = self.timer
        timer.add("data", self._epoch_data_time)
        timer.add("step", self._epoch_step_time)
        train_time = self._epoch_train_time
        epoch_stats = EpochStats(
            epoch=epoch, steps=self._epoch_steps, samples=self._epoch_samples,
            train_loss=self.running_loss if self._epoch_loss_samples else None,
            train_accuracy=100.0 * self._epoch_correct / self._epoch_counted if self._epoch_counted else None,
            train_time=train_time,
            samples_per_second=self._epoch_samples / train_time if train_time > 0 else 0.0,
            lr=getattr(self.optimizer, "lr", None))
        if self.validation_sampler is not None:
            stop = _Hooks.fire(hooks.before_test_set, self) or stop
            evaluation = self.evaluate(self.validation_sampler, _batch_hooks=hooks.after_test_batch)
            timer.add("validation", evaluation.time)
            epoch_stats.test_loss, epoch_stats.test_accuracy = evaluation.loss, evaluation.accuracy
            stop = _Hooks.fire(hooks.after_test_set, self, evaluation) or stop
        epoch_stats.epoch_time = train_time + (time.perf_counter() - close_start)
        self.stats.add_epoch(epoch_stats)
        self.stats.samples += self._epoch_samples
        self.stats.steps = self.steps
        self._closed, self._complete = True, complete
        return _Hooks.fire(hooks.after_epoch, self, epoch, epoch_stats) or stop

    # ------------------------------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """The run's state (see the module docstring): plain numbers, strings, lists, dicts and NumPy arrays.

        Called between steps (an ``after_step`` hook), between epochs (``after_epoch``) or after ``run``
        returned; a state saved during validation resumes before that validation. Keys: ``epoch`` and
        ``position`` (where to continue: batches of ``epoch`` already taken), ``steps``, ``recorded`` (the
        epoch at ``position`` was closed early and is in ``stats``), ``epoch_sums``, ``stats``, ``timing``,
        ``sampler``, ``optimizer`` (their ``state_dict()``, or None) and ``events``.
        """
        if self._closed and self._complete:  # the epoch is done: continue with the next one
            epoch, position, recorded = self.epoch + 1, 0, False
            sums = dict(_EPOCH_SUMS)
        else:
            epoch, position, recorded = self.epoch, self.position, self._closed
            sums = {name: getattr(self, f"_epoch_{name}") for name in _EPOCH_SUMS}
            if self._segment_start is not None:
                sums["train_time"] += time.perf_counter() - self._segment_start
        stats = self.stats.as_dict()
        stats.pop("epochs")
        if self._run_start is not None:
            stats["total_time"] = self._previous_time + (time.perf_counter() - self._run_start)
        if self._loaded is not None:  # loaded, not yet run: the events get their states when run() starts
            events = dict(self._loaded["events"])
        else:
            events = {key: event.state_dict() for key, event in _stateful_events(self._run_events).items()}
        return {"kind": "Trainer", "version": STATE_VERSION, "epoch": epoch, "position": position,
                "steps": self.steps, "epochs": self.epochs, "recorded": recorded, "epoch_sums": sums,
                "stats": stats, "timing": self.timer.totals() if self.timer is not None else {},
                "sampler": _state_of(self.train_sampler), "optimizer": _state_of(self.optimizer), "events": events}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from ``state`` (a :meth:`state_dict` of a trainer with the same kind of sampler, optimizer
        and events): the next :meth:`run` resumes there. The sampler's and optimizer's states are loaded now
        (each refuses a state that is not its own); a sampler without ``load_state_dict`` is replayed to the
        saved position when the run starts. Raises :class:`~d5.errors.CheckpointError` saying what is wrong.
        """
        from d5.bench.timing import Timer

        if self._run_start is not None:
            raise D5Error("Trainer.load_state_dict cannot be called while the trainer runs; call it before run()")
        check_state(state, "Trainer", "Trainer", ["epoch", "position", "steps", "recorded", "epoch_sums", "stats",
                                                  "timing", "sampler", "optimizer", "events"])
        epoch, position, steps = (_count(state, key) for key in ("epoch", "position", "steps"))
        sampler_state, optimizer_state = state["sampler"], state["optimizer"]
        for what, component, saved in (("train sampler", self.train_sampler, sampler_state),
                                        ("optimizer", self.optimizer, optimizer_state)):
            if saved is not None and not callable(getattr(component, "load_state_dict", None)):
                raise CheckpointError(f"Trainer.load_state_dict: the saved run's {what} has a state, but this "
                                      f"{type(component).__name__} has no load_state_dict(); resume with the {what} "
                                      "the run was saved with")
        _check_sampler_position(sampler_state, epoch, position, _length(self.train_sampler))
        if not isinstance(state["events"], Mapping):
            raise CheckpointError("Trainer.load_state_dict: the state's 'events' is not a dict; the state is damaged")
        stats = TrainingStats.from_dict(state["stats"])
        sums = {name: type(zero)(state["epoch_sums"][name]) for name, zero in _EPOCH_SUMS.items()}
        if optimizer_state is not None:
            self.optimizer.load_state_dict(optimizer_state)
        if sampler_state is not None:
            self.train_sampler.load_state_dict(sampler_state)
        timing = dict(state["timing"])
        if state["recorded"] and stats.epochs:
            # the epoch was closed early and recorded; the resumed run records it again when it completes
            stats.drop_last_epoch()
            stats.samples -= sums["samples"]
            for name in ("data", "step"):
                timing[name] = max(0.0, timing.get(name, 0.0) - sums[f"{name}_time"])
        self.timer = Timer()
        for name, seconds in timing.items():
            self.timer.add(name, seconds)
        stats.timing = self.timer.totals()
        self.stats = stats
        self.steps, self.epoch, self.position = steps, epoch, position
        for name, value in sums.items():
            setattr(self, f"_epoch_{name}", value)
        self._closed = self._complete = False
        self._skip_batches = position if sampler_state is None else 0
        self._loaded = state

    def _correct(self, outputs: Mapping[str, Any], batch: Mapping[str, Any], label_node: str):
        name = self._prediction_output
        if not name:  # remembered once found: a step may return only the loss (a parameter server's rank 0)
            name = self._find_prediction_output(outputs)
            if name is None:
                return None
            self._prediction_output = name
        if label_node not in batch or name not in outputs:  # a step without the prediction (a server's step)
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

    @property
    def prediction_output(self) -> str | None:
        """The output the trainer takes accuracy from (known after the first step or evaluation)."""
        return self._prediction_output or None

    def evaluate(self, sampler: Iterable, *, _batch_hooks: list | None = None) -> EvaluationStats:
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
                loss_sum += _mean(loss) * batch_size
                loss_samples += batch_size
            result = self._correct(outputs, batch, label_node)
            if result is not None:
                correct += result[0]
                counted += result[1]
            if _batch_hooks:
                for method in _batch_hooks:
                    method(self, batch, outputs)
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


def _check_events(events: list) -> None:
    for event in events:
        if not isinstance(event, TrainerEvent):
            raise D5Error(f"events must be TrainerEvent instances, got {type(event).__name__}; "
                          f"derive it from d5.training.events.TrainerEvent")


def _mean(loss: Any) -> float:
    """The mean of a loss output as a float; a scalar loss skips np.mean (7 us a step otherwise)."""
    if getattr(loss, "size", None) == 1 or isinstance(loss, (int, float)):
        return float(loss)
    return float(np.mean(loss))


def _length(sampler: Any) -> int | None:
    try:
        return len(sampler)
    except TypeError:  # a stream without __len__
        return None


def _state_of(component: Any) -> Any:
    state_dict = getattr(component, "state_dict", None)
    return state_dict() if callable(state_dict) else None


def _count(state: Mapping[str, Any], key: str) -> int:
    value = state[key]
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise CheckpointError(f"Trainer.load_state_dict: {key}={value!r} is not a count; the state is damaged")
    return int(value)


def _stateful_events(events: Iterable[TrainerEvent]) -> dict[str, TrainerEvent]:
    """``{"ClassName#i": event}`` for the events with a state_dict, i counting within each class."""
    keyed: dict[str, TrainerEvent] = {}
    seen: dict[str, int] = {}
    for event in events:
        if callable(getattr(event, "state_dict", None)) and callable(getattr(event, "load_state_dict", None)):
            name = type(event).__name__
            keyed[f"{name}#{seen.get(name, 0)}"] = event
            seen[name] = seen.get(name, 0) + 1
    return keyed


def _restore_events(events: Iterable[TrainerEvent], states: Mapping[str, Any]) -> None:
    for key, event in _stateful_events(events).items():
        if key in states:
            event.load_state_dict(states[key])


def _check_sampler_position(sampler_state: Any, epoch: int, position: int, length: int | None) -> None:
    """Refuse a state whose sampler is elsewhere than the trainer (they are saved together, so they agree)."""
    if not isinstance(sampler_state, Mapping) or "epoch" not in sampler_state or "position" not in sampler_state:
        return
    where = (sampler_state["epoch"], sampler_state["position"])
    # At an epoch's end the two may describe the same point differently: "all batches of epoch e taken" is
    # (e, length) for whichever has not looked past the last batch yet, and (e + 1, 0) for the other.
    if where == (epoch, position) or (length is not None and (
            (position >= length and where == (epoch + 1, 0)) or (position == 0 and where == (epoch - 1, length)))):
        return
    raise CheckpointError(f"Trainer.load_state_dict: the sampler's state is at epoch {where[0]}, batch {where[1]}, "
                          f"but the trainer's at epoch {epoch}, batch {position}; the state is damaged or pieced "
                          "together from different checkpoints")


__all__ = ["Trainer", "TrainingStats", "EpochStats", "EvaluationStats", "count_correct"]
