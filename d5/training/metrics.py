"""L2: metrics — what a benchmark measures and checks against its acceptable values.

Two kinds:

* :class:`TestMetric` — measures one operator or network invocation (``begin`` / run / ``end``, repeated
  ``reruns`` times, then ``measure``), e.g. :class:`RunTime` and :class:`OutputError`.
* :class:`TrainingMetric` — a :class:`~d5.training.events.TrainerEvent` that observes a training run and
  yields one number: :class:`TestAccuracy`, :class:`TrainingAccuracy`, :class:`TopKAccuracy`,
  :class:`Perplexity` (a language model's, lower is better), :class:`FinalTestAccuracy`,
  :class:`WallclockTime`, :class:`Throughput`, :class:`TimeToAccuracy`, :class:`Latency`; in other modules
  :class:`~d5.training.resources.PeakMemory`, :class:`~d5.training.resources.CPUUtilization`,
  :class:`~d5.training.resources.ResourceTable` and :class:`~d5.training.breakdown.PhaseBreakdown`. Pass them
  as events to the Trainer; a recipe then checks ``metric.is_met(threshold)``. Each has ``as_dict()``
  (JSON-ready: value, unit and, where it has samples, their median with a non-parametric confidence interval)
  for a result file, and the state protocol (``state_dict``/``load_state_dict``) for checkpoints.

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
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

import numpy as np

from d5.errors import D5Error
from d5.training.events import RunClock, TrainerEvent, check_state, float_array, new_state

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

def _copy(value: Any) -> Any:
    """A copy of plain data (lists, dicts, arrays), so a state dict never aliases a metric's live lists."""
    if isinstance(value, list):
        return [_copy(item) for item in value]
    if isinstance(value, dict):
        return {key: _copy(item) for key, item in value.items()}
    if isinstance(value, np.ndarray):
        return value.copy()
    return value


def summary_dict(samples: Sequence[float], confidence: float = 0.95) -> dict[str, Any] | None:
    """``summarize(samples).as_dict()`` without the raw samples (None for no samples): median, CI, n, ...

    >>> summary_dict([1.0, 2.0, 3.0])["median"]
    2.0
    """
    from d5.bench.stats import summarize  # local: statistics only when a result is asked for

    if len(samples) == 0:
        return None
    data = summarize(samples, confidence).as_dict()
    data.pop("samples")
    return data


class TrainingMetric(TrainerEvent):
    """A trainer event that summarizes a run in one number (``result()``), in ``unit``.

    ``is_met(threshold)`` is ``result >= threshold`` when ``higher_is_better`` else ``result <= threshold``
    (False when there is no finite result). ``as_dict()`` is the JSON-ready result (``details()`` adds what a
    metric has beyond its value). ``state_dict()`` saves the attributes named in ``state_fields``.

    >>> class Steps(TrainingMetric):
    ...     name, unit, higher_is_better = 'Steps', 'steps', False
    ...     def after_training(self, trainer, stats):
    ...         self.value = stats.steps
    >>> Steps().as_dict()
    {'name': 'Steps', 'unit': 'steps', 'higher_is_better': False, 'value': None}
    """

    name: str = "TrainingMetric"
    unit: str = ""
    higher_is_better: bool = True
    value: float | None = None
    #: Attributes saved by state_dict() (plain data: numbers, strings, lists, dicts, arrays).
    state_fields: tuple[str, ...] = ("value",)

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

    def details(self) -> dict[str, Any]:
        """What the metric measured beyond its value (JSON-ready), e.g. a per-epoch history or a summary."""
        return {}

    def as_dict(self) -> dict[str, Any]:
        """The metric's result for a result file: name, unit, direction, value and :meth:`details`."""
        value = None if self.value is None else float(self.value)
        return {"name": self.name, "unit": self.unit, "higher_is_better": self.higher_is_better, "value": value,
                **self.details()}

    def state_config(self) -> dict[str, Any]:
        """What a loaded state must have been saved with (e.g. TopKAccuracy's ``k``); {} by default."""
        return {}

    def state_dict(self) -> dict[str, Any]:
        """The metric's progress so far (its ``state_fields``)."""
        return new_state(type(self).__name__, config=self.state_config(),
                         **{name: _copy(getattr(self, name)) for name in self.state_fields})

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` saved; a state of another metric (or configuration) is refused."""
        kind = type(self).__name__
        check_state(state, kind, kind, self.state_fields, self.state_config())
        for name in self.state_fields:
            setattr(self, name, _copy(state[name]))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.describe()})"


class _EpochHistory(TrainingMetric):
    """A metric with one value per epoch in ``history``; a resumed epoch's value replaces its partial one."""

    state_fields = ("value", "history", "last_epoch")

    def __init__(self) -> None:
        self.history: list[float | None] = []
        self.value = None
        self.last_epoch = -1

    def _reset_unless_resumed(self, trainer: Trainer) -> None:
        if not trainer.resumed:
            self.history, self.value, self.last_epoch = [], None, -1

    def _record(self, epoch: int, value: float | None) -> None:
        if epoch == self.last_epoch and self.history:
            self.history[-1] = value
        else:
            self.history.append(value)
        self.last_epoch = epoch
        self.value = value

    def details(self) -> dict[str, Any]:
        return {"history": list(self.history)}


class TestAccuracy(_EpochHistory):
    """Validation accuracy (percent) after the last epoch; ``history`` holds every epoch's value.

    >>> TestAccuracy().describe()
    'TestAccuracy = n/a % (higher is better)'
    """

    __test__ = False
    name, unit, higher_is_better = "TestAccuracy", "%", True

    def before_training(self, trainer: Trainer) -> None:
        if trainer.validation_sampler is None:
            raise D5Error("TestAccuracy needs a validation sampler; give the Trainer one "
                          "(Trainer(train_sampler, validation_sampler, ...))")
        self._reset_unless_resumed(trainer)

    def after_test_set(self, trainer: Trainer, stats: EvaluationStats) -> None:
        self._record(trainer.epoch, stats.accuracy)


class TrainingAccuracy(_EpochHistory):
    """Accuracy (percent) over the last epoch's training batches (outputs of the training passes).

    >>> TrainingAccuracy().unit
    '%'
    """

    name, unit, higher_is_better = "TrainingAccuracy", "%", True

    def before_training(self, trainer: Trainer) -> None:
        self._reset_unless_resumed(trainer)

    def after_epoch(self, trainer: Trainer, epoch: int, stats: EpochStats) -> None:
        self._record(epoch, stats.train_accuracy)


def top_k_correct(prediction: np.ndarray, labels: np.ndarray, k: int) -> tuple[int, int]:
    """``(correct, total)``: how many labels are among the ``k`` highest scores of ``prediction`` (axis 1).

    A label counts when fewer than ``k`` classes score strictly higher than it (so ties never count
    against it). ``labels`` are class indices shaped like ``prediction`` without axis 1 (or with a
    trailing 1), or one-hot/probabilities shaped like ``prediction``.

    >>> scores = np.array([[0.1, 0.5, 0.4], [0.7, 0.2, 0.1]])
    >>> top_k_correct(scores, np.array([2, 2]), k=1), top_k_correct(scores, np.array([2, 2]), k=2)
    ((0, 2), (1, 2))
    """
    prediction = np.asarray(prediction)
    labels = np.asarray(labels)
    if prediction.ndim < 2:
        raise D5Error(f"top-k accuracy needs class scores (N, classes, ...), got shape {prediction.shape}")
    if labels.shape == prediction.shape:
        labels = labels.argmax(axis=1)
    expected = prediction.shape[:1] + prediction.shape[2:]
    if labels.shape != expected:
        if labels.size != int(np.prod(expected)):
            raise D5Error(f"top-k accuracy: labels of shape {labels.shape} do not fit predictions of shape "
                          f"{prediction.shape}")
        labels = labels.reshape(expected)
    label_score = np.take_along_axis(prediction, np.expand_dims(labels.astype(np.intp), 1), axis=1)
    higher = np.count_nonzero(prediction > label_score, axis=1)
    return int(np.count_nonzero(higher < k)), int(labels.size)


class TopKAccuracy(_EpochHistory):
    """Top-``k`` accuracy (percent): how often the label is among the ``k`` highest-scoring classes of the
    network's prediction output (the one the trainer takes accuracy from), on the validation set after each
    epoch (``on='test'``) or over each epoch's training batches (``on='train'``). See :func:`top_k_correct`.

    >>> TopKAccuracy(5).name
    'Top5Accuracy'
    """

    higher_is_better, unit = True, "%"
    state_fields = ("value", "history", "last_epoch", "correct", "counted")

    def __init__(self, k: int = 5, on: str = "test") -> None:
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise D5Error(f"TopKAccuracy(k={k!r}): k must be an int >= 1")
        if on not in ("test", "train"):
            raise D5Error(f"TopKAccuracy(on={on!r}): on must be 'test' or 'train'")
        super().__init__()
        self.k, self.on = k, on
        self.name = f"Top{k}Accuracy" + ("" if on == "test" else "(train)")
        self.correct = self.counted = 0
        self._labels = None
        self.skip_hooks = frozenset({"before_step", "after_step"} if on == "test" else
                                    {"before_test_set", "after_test_batch", "after_test_set"})

    def before_training(self, trainer: Trainer) -> None:
        if self.on == "test" and trainer.validation_sampler is None:
            raise D5Error(f"{self.name} (on='test') needs a validation sampler; give the Trainer one, or use "
                          f"TopKAccuracy({self.k}, on='train')")
        self._reset_unless_resumed(trainer)

    def state_config(self) -> dict[str, Any]:
        return {"k": self.k, "on": self.on}

    def _count(self, trainer: Trainer, batch: Mapping[str, Any], labels: Any, outputs: Mapping[str, Any]) -> None:
        name = trainer.prediction_output
        if name is None or labels is None or name not in outputs:
            return
        prediction = outputs[name]
        if np.shape(prediction)[1] <= self.k:
            raise D5Error(f"{self.name}: the prediction {name!r} has only {np.shape(prediction)[1]} classes, so "
                          f"top-{self.k} accuracy is always 100%; choose k below the number of classes")
        correct, counted = top_k_correct(prediction, labels, self.k)
        self.correct += correct
        self.counted += counted

    def _finish(self, epoch: int) -> None:
        self._record(epoch, 100.0 * self.correct / self.counted if self.counted else None)

    # on='test'
    def before_test_set(self, trainer: Trainer) -> None:
        self.correct = self.counted = 0

    def after_test_batch(self, trainer: Trainer, batch: dict, outputs: dict) -> None:
        self._count(trainer, batch, batch.get(_label_of(trainer.validation_sampler)), outputs)

    def after_test_set(self, trainer: Trainer, stats: EvaluationStats) -> None:
        self._finish(trainer.epoch)

    # on='train'
    def before_epoch(self, trainer: Trainer, epoch: int) -> None:
        if self.on == "train" and trainer.position == 0:  # a resumed epoch keeps its counts
            self.correct = self.counted = 0

    def before_step(self, trainer: Trainer, step: int, inputs: dict) -> None:
        self._labels = inputs.get(_label_of(trainer.train_sampler))

    def after_step(self, trainer: Trainer, step: int, outputs: dict) -> None:
        self._count(trainer, {}, self._labels, outputs)

    def after_epoch(self, trainer: Trainer, epoch: int, stats: EpochStats) -> None:
        if self.on == "train":
            self._finish(epoch)


def _label_of(sampler: Any) -> str:
    return getattr(getattr(sampler, "dataset", None), "label_node", "label")


#: exp() of a mean cross-entropy above this overflows a float64: the perplexity is then reported as inf.
_MAX_EXPONENT = math.log(np.finfo(np.float64).max)


class Perplexity(_EpochHistory):
    """A language model's perplexity on the validation set after each epoch: ``exp`` of the mean per-word
    cross-entropy (nats) over all the set's words. Lower is better; ``history`` holds every epoch's value and
    ``cross_entropy`` the last mean loss per word.

    The network's loss output (the trainer's ``loss``, e.g. :func:`d5.models.lstm_lm`'s) must be the *mean*
    cross-entropy over the words of its batch; each batch is weighted by its word count (the size of its label
    tensor, ``N * steps``), so a short last batch counts for what it holds. :meth:`add` takes one batch's
    mean loss and word count directly, without a trainer:

    >>> import math
    >>> perplexity = Perplexity()
    >>> perplexity.add(loss=math.log(100.0), words=400)   # 400 words at perplexity 100 ...
    >>> perplexity.add(loss=math.log(10.0), words=100)    # ... and 100 at perplexity 10
    >>> round(perplexity.current(), 3)                     # exp(mean loss per word) = 100 ** 0.8 * 10 ** 0.2
    63.096
    >>> Perplexity().describe(120.0)
    'Perplexity = n/a (target <= 120: NOT met)'
    """

    name, unit, higher_is_better = "Perplexity", "", False
    state_fields = ("value", "history", "last_epoch", "nll_sum", "words")

    def __init__(self) -> None:
        super().__init__()
        self.nll_sum = 0.0   # summed cross-entropy (nats) of the words counted so far in this evaluation
        self.words = 0

    def add(self, loss: Any, words: int) -> None:
        """Count one batch: its mean cross-entropy per word ``loss`` (a number or a one-element array) over
        ``words`` words."""
        if isinstance(words, bool) or not isinstance(words, (int, np.integer)) or words < 1:
            raise D5Error(f"Perplexity.add(words={words!r}): words must be an int >= 1, the number of words whose "
                          "mean cross-entropy the loss is")
        mean = np.asarray(loss, dtype=np.float64)
        if mean.size != 1:
            raise D5Error(f"Perplexity: the loss must be one number (the mean cross-entropy per word), got an array "
                          f"of shape {mean.shape}; give the network a loss with reduction='mean'")
        self.nll_sum += float(mean.reshape(())) * int(words)
        self.words += int(words)

    @property
    def cross_entropy(self) -> float | None:
        """Mean cross-entropy per word (nats) of the words counted so far; None before the first."""
        return self.nll_sum / self.words if self.words else None

    def current(self) -> float:
        """``exp(cross_entropy)`` of the words counted so far (``inf`` when that overflows)."""
        mean = self.cross_entropy
        if mean is None:
            raise D5Error("Perplexity: no words counted yet; pass the metric as an event to a Trainer with a "
                          "validation sampler, or call add(loss, words)")
        return math.exp(mean) if mean <= _MAX_EXPONENT else math.inf  # nan stays nan: a diverged model

    def before_training(self, trainer: Trainer) -> None:
        if trainer.validation_sampler is None:
            raise D5Error("Perplexity is measured on the validation set; give the Trainer a validation sampler "
                          "(Trainer(train_sampler, validation_sampler, ...))")
        self._reset_unless_resumed(trainer)

    def before_test_set(self, trainer: Trainer) -> None:
        self.nll_sum, self.words = 0.0, 0

    def after_test_batch(self, trainer: Trainer, batch: dict, outputs: dict) -> None:
        loss = outputs.get(trainer.loss)
        if loss is None:
            raise D5Error(f"Perplexity needs the network's loss output {trainer.loss!r} (its mean cross-entropy per "
                          f"word) on the validation batches, but the outputs are {sorted(outputs)}; give the network "
                          "that output (d5.models.lstm_lm has 'loss')")
        label_node = _label_of(trainer.validation_sampler)
        labels = batch.get(label_node)
        if labels is None:
            raise D5Error(f"Perplexity counts the words of each validation batch in its label {label_node!r}, which "
                          f"the batch lacks (it has {sorted(batch)})")
        self.add(loss, int(np.size(labels)))

    def after_test_set(self, trainer: Trainer, stats: EvaluationStats) -> None:
        self._record(trainer.epoch, self.current())

    def details(self) -> dict[str, Any]:
        return {"history": list(self.history), "cross_entropy": self.cross_entropy, "words": self.words}


class FinalTestAccuracy(TrainingMetric):
    """Accuracy (percent) of the final model on a test set, measured once when training ends.

    With ``sampler`` (a held-out test set) it evaluates that; without, it uses the trainer's validation
    sampler -- the last validation when it was of the final model, else a fresh evaluation. ``loss`` holds the
    test loss.

    >>> FinalTestAccuracy().name
    'FinalTestAccuracy'
    """

    __test__ = False
    name, unit, higher_is_better = "FinalTestAccuracy", "%", True
    state_fields = ("value", "loss")

    def __init__(self, sampler: Iterable | None = None) -> None:
        if sampler is not None and not hasattr(sampler, "__iter__"):
            raise D5Error(f"FinalTestAccuracy(sampler=...) needs a sampler of batch dicts, got {sampler!r}")
        self.sampler = sampler
        self.value = self.loss = None
        self._validated_at: int | None = None
        self._validation: EvaluationStats | None = None

    def before_training(self, trainer: Trainer) -> None:
        if self.sampler is None and trainer.validation_sampler is None:
            raise D5Error("FinalTestAccuracy needs a test set: FinalTestAccuracy(test_sampler), or a Trainer with a "
                          "validation sampler")
        self.value = self.loss = None
        self._validated_at = None

    def after_test_set(self, trainer: Trainer, stats: EvaluationStats) -> None:
        self._validated_at, self._validation = trainer.steps, stats

    def after_training(self, trainer: Trainer, stats: TrainingStats) -> None:
        if self.sampler is None and self._validated_at == trainer.steps:
            evaluation = self._validation  # the last validation saw the final parameters already
        else:
            evaluation = trainer.evaluate(self.sampler if self.sampler is not None else trainer.validation_sampler)
        self.value, self.loss = evaluation.accuracy, evaluation.loss

    def details(self) -> dict[str, Any]:
        return {"loss": self.loss}


class WallclockTime(TrainingMetric):
    """Total wall-clock seconds of the run (``before_training`` to ``after_training``, validation
    included, the parts before and after a resume added); lower is better. ``step_times`` holds each
    optimizer step's seconds and ``summary`` their median with a non-parametric confidence interval
    (:func:`d5.bench.stats.summarize`).

    >>> WallclockTime().higher_is_better
    False
    """

    name, unit, higher_is_better = "WallclockTime", "s", False

    def __init__(self, confidence: float = 0.95) -> None:
        self.confidence = confidence
        self.step_times: list[float] = []
        self.value = None
        self.clock = RunClock()

    def before_training(self, trainer: Trainer) -> None:
        if not trainer.resumed:
            self.step_times, self.value = [], None
        self.clock.start(trainer.resumed)

    def after_step(self, trainer: Trainer, step: int, outputs: dict) -> None:
        self.step_times.append(trainer.last_step_time)

    def after_training(self, trainer: Trainer, stats: TrainingStats) -> None:
        self.clock.stop()
        self.value = self.clock.elapsed()

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

    def details(self) -> dict[str, Any]:
        return {"step_seconds": summary_dict(self.step_times, self.confidence)}

    def state_dict(self) -> dict[str, Any]:
        return new_state("WallclockTime", value=self.value, step_times=float_array(self.step_times),
                         **self.clock.state_dict())

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        check_state(state, "WallclockTime", "WallclockTime", ["value", "step_times", "elapsed"])
        self.value = state["value"]
        self.step_times = [float(value) for value in np.asarray(state["step_times"], dtype=np.float64)]
        self.clock.load_state_dict(state)


class Throughput(TrainingMetric):
    """Training samples per second over the training steps of all epochs (validation excluded; data
    loading and event hooks included, as a user experiences them); higher is better.

    >>> Throughput().unit
    'samples/s'
    """

    name, unit, higher_is_better = "Throughput", "samples/s", True
    state_fields = ("value", "epochs")

    def __init__(self) -> None:
        self.epochs: dict[int, list] = {}  # epoch -> [samples, seconds]; a resumed epoch replaces its entry
        self.value = None

    @property
    def samples(self) -> int:
        return sum(samples for samples, _ in self.epochs.values())

    @property
    def seconds(self) -> float:
        return sum(seconds for _, seconds in self.epochs.values())

    def before_training(self, trainer: Trainer) -> None:
        if not trainer.resumed:
            self.epochs, self.value = {}, None

    def after_epoch(self, trainer: Trainer, epoch: int, stats: EpochStats) -> None:
        self.epochs[epoch] = [stats.samples, stats.train_time]
        seconds = self.seconds
        self.value = self.samples / seconds if seconds > 0 else None

    def _per_epoch(self) -> list[float]:
        return [samples / seconds for samples, seconds in self.epochs.values() if seconds > 0]

    def describe(self, threshold: float | None = None) -> str:
        line = super().describe(threshold)
        per_epoch = self._per_epoch()
        if len(per_epoch) > 1:
            from d5.bench.stats import summarize

            line += f"; per epoch {summarize(per_epoch).format(self.unit)}"
        return line

    def details(self) -> dict[str, Any]:
        return {"samples": self.samples, "seconds": self.seconds, "per_epoch": summary_dict(self._per_epoch())}

    def state_dict(self) -> dict[str, Any]:
        # JSON object keys are strings: the epochs go as a list of [epoch, samples, seconds]
        return new_state("Throughput", value=self.value,
                         epochs=[[epoch, samples, seconds] for epoch, (samples, seconds) in self.epochs.items()])

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        check_state(state, "Throughput", "Throughput", ["value", "epochs"])
        self.value = state["value"]
        self.epochs = {int(epoch): [int(samples), float(seconds)] for epoch, samples, seconds in state["epochs"]}


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
        self.clock = RunClock()

    def before_training(self, trainer: Trainer) -> None:
        if trainer.validation_sampler is None:
            raise D5Error("TimeToAccuracy needs a validation sampler; give the Trainer one")
        if not trainer.resumed or self.value == math.inf:
            self.value = None
        self.clock.start(trainer.resumed)

    def after_test_set(self, trainer: Trainer, stats: EvaluationStats) -> None:
        if self.value is None and stats.accuracy is not None and stats.accuracy >= self.target:
            self.value = self.clock.elapsed()

    def after_training(self, trainer: Trainer, stats: TrainingStats) -> None:
        self.clock.stop()
        if self.value is None:
            self.value = math.inf

    def state_dict(self) -> dict[str, Any]:
        return new_state("TimeToAccuracy", config={"target": self.target}, value=self.value, **self.clock.state_dict())

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        check_state(state, "TimeToAccuracy", "TimeToAccuracy", ["value", "elapsed"], {"target": self.target})
        self.value = state["value"]
        self.clock.load_state_dict(state)


def nearest_rank_percentile(samples: Sequence[float], percent: float) -> float:
    """The ``percent``-th percentile by the nearest-rank rule (a measured value, never interpolated): the
    smallest sample with at least ``percent``% of the samples at or below it -- how MLPerf reports latency.

    >>> nearest_rank_percentile([5.0, 1.0, 4.0, 2.0, 3.0], 90)
    5.0
    >>> nearest_rank_percentile([5.0, 1.0, 4.0, 2.0, 3.0], 50)
    3.0
    """
    if not 0 < percent <= 100:
        raise D5Error(f"a percentile must be in (0, 100], got {percent!r}")
    ordered = np.sort(np.asarray(samples, dtype=np.float64))
    if ordered.size == 0:
        raise D5Error("a percentile of no samples: measure at least once")
    return float(ordered[max(0, math.ceil(percent / 100.0 * ordered.size) - 1)])


class Latency(TrainingMetric):
    """Inference latency: seconds per ``executor.inference`` of a single batch (``batch_size`` examples,
    default 1, taken from ``sampler`` or else the validation sampler), measured when training ends: ``warmup``
    untimed calls, then ``repeats`` timed ones. The value is the median; ``percentiles`` holds p50/p90/p99
    (nearest rank) and ``summary`` the median with a non-parametric CI. Lower is better.

    ``measure(executor, batch)`` times any executor without a training run.

    >>> import numpy as np
    >>> class Doubler:
    ...     def inference(self, inputs):
    ...         return {"y": inputs["x"] * 2}
    >>> latency = Latency(repeats=20)
    >>> latency.measure(Doubler(), {"x": np.ones((1, 4))}) > 0, sorted(latency.percentiles)
    (True, ['p50', 'p90', 'p99'])
    """

    name, unit, higher_is_better = "Latency", "s", False
    state_fields = ("value", "samples")

    def __init__(self, sampler: Iterable | None = None, batch_size: int | None = 1, warmup: int = 5,
                 repeats: int = 100, confidence: float = 0.95) -> None:
        for what, value, minimum in (("warmup", warmup, 0), ("repeats", repeats, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise D5Error(f"Latency({what}={value!r}): {what} must be an int >= {minimum}")
        if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int)
                                       or batch_size < 1):
            raise D5Error(f"Latency(batch_size={batch_size!r}): batch_size must be an int >= 1, or None for the "
                          "sampler's batches as they are")
        self.sampler, self.batch_size = sampler, batch_size
        self.warmup, self.repeats, self.confidence = warmup, repeats, confidence
        self.samples: list[float] = []
        self.value = None

    @property
    def percentiles(self) -> dict[str, float]:
        """p50, p90 and p99 of the timed calls (seconds)."""
        if not self.samples:
            return {}
        return {f"p{p}": nearest_rank_percentile(self.samples, p) for p in (50, 90, 99)}

    @property
    def summary(self) -> Summary:
        """Median and non-parametric CI of the timed calls (seconds)."""
        from d5.bench.stats import summarize

        if not self.samples:
            raise D5Error("Latency.summary: nothing was timed yet; run the Trainer with it, or call measure()")
        return summarize(self.samples, self.confidence)

    def before_training(self, trainer: Trainer) -> None:
        if self.sampler is None and trainer.validation_sampler is None:
            raise D5Error("Latency needs batches to time: Latency(sampler=test_sampler), or a Trainer with a "
                          "validation sampler")

    def after_training(self, trainer: Trainer, stats: TrainingStats) -> None:
        sampler = self.sampler if self.sampler is not None else trainer.validation_sampler
        batch = next(iter(sampler), None)
        if batch is None:
            raise D5Error("Latency: the sampler produced no batch to time")
        self.measure(trainer.executor, batch)

    def measure(self, executor: Any, batch: Mapping[str, Any]) -> float:
        """Time ``executor.inference`` on (the first ``batch_size`` examples of) ``batch``; the median seconds."""
        from d5.bench.timing import measure

        if self.batch_size is not None:
            batch = {name: value[:self.batch_size] for name, value in batch.items()}
        summary = measure(lambda: executor.inference(batch), warmup=self.warmup, repeats=self.repeats,
                          confidence=self.confidence)
        self.samples = list(summary.samples)
        self.value = summary.median
        return self.value

    def describe(self, threshold: float | None = None) -> str:
        line = super().describe(threshold)
        if self.samples:
            summary = self.summary
            # the percentiles in the unit format() picks for the median (ms for most networks)
            unit = summary.format("s").split(" ")[1]
            scale = {"s": 1.0, "ms": 1e3, "us": 1e6, "ns": 1e9}[unit]
            shown = ", ".join(f"{name} {value * scale:.3g} {unit}" for name, value in self.percentiles.items())
            line += f"; {shown}; median {summary.format('s')} (n={len(self.samples)})"
        return line

    def details(self) -> dict[str, Any]:
        return {"batch_size": self.batch_size, "percentiles": self.percentiles,
                "summary": summary_dict(self.samples, self.confidence)}


def check_metrics(metrics: Sequence[tuple[TrainingMetric, float]]) -> tuple[bool, list[str]]:
    """``(all met, one describe() line per metric)`` for ``[(metric, threshold), ...]`` as in a recipe.

    >>> ok, lines = check_metrics([])
    >>> ok, lines
    (True, [])
    """
    lines = [metric.describe(threshold) for metric, threshold in metrics]
    return all(metric.is_met(threshold) for metric, threshold in metrics), lines


__all__ = ["TestMetric", "RunTime", "OutputError", "TrainingMetric", "TestAccuracy", "TrainingAccuracy",
           "TopKAccuracy", "Perplexity", "FinalTestAccuracy", "WallclockTime", "Throughput", "TimeToAccuracy",
           "Latency", "check_metrics", "top_k_correct", "nearest_rank_percentile", "summary_dict"]
