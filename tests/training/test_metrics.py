"""Training and test metrics, checked against values recomputed independently from the same run."""
from __future__ import annotations

import math

import numpy as np
import pytest

from d5.errors import D5Error
from d5.training.dataset import NumpyDataset
from d5.training.events import StopAfter, TrainerEvent
from d5.training.metrics import (OutputError, RunTime, TestAccuracy, TestMetric, Throughput, TimeToAccuracy,
                                 TrainingAccuracy, TrainingMetric, WallclockTime, check_metrics)
from d5.training.optimizers import GradientDescent
from d5.training.sampler import OrderedSampler, ShuffleSampler
from d5.training.trainer import Trainer


class _Network:
    """Live state of softmax regression ``logits = x @ W`` (3 classes) with mean cross-entropy."""

    outputs = ["output", "loss"]

    def __init__(self):
        self.tensors = {"W": np.zeros((3, 3))}

    def get_params(self):
        return ["W"]

    def gradient(self, y="loss"):
        return [("W", "W_grad")]

    def fetch_tensors(self, names):
        return [self.tensors[name] for name in names]

    def feed_tensor(self, name, value, is_param=False):
        self.tensors[name] = value


class _Executor:
    def __init__(self):
        self.network = _Network()

    def inference(self, inputs):
        logits = inputs["input"] @ self.network.tensors["W"]
        log_prob = logits - logits.max(1, keepdims=True)
        log_prob -= np.log(np.exp(log_prob).sum(1, keepdims=True))
        self._log_prob = log_prob
        return {"output": logits, "loss": -log_prob[np.arange(len(log_prob)), inputs["label"]].mean()}

    def inference_and_backprop(self, inputs, y="loss"):
        outputs = self.inference(inputs)
        d_logits = np.exp(self._log_prob)
        d_logits[np.arange(len(d_logits)), inputs["label"]] -= 1.0
        self.network.tensors["W_grad"] = inputs["input"].T @ d_logits / len(d_logits)
        return outputs


def _dataset(n, seed):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 3, n)
    return NumpyDataset(3.0 * np.eye(3)[labels] + 1.2 * rng.standard_normal((n, 3)), labels)


class _EpochRecorder(TrainerEvent):
    """Independent oracle: recomputes training accuracy from each step's outputs and keeps EpochStats."""

    def __init__(self):
        self.epochs, self.correct, self.counted = [], 0, 0

    def before_epoch(self, trainer, epoch):
        self.correct = self.counted = 0

    def before_step(self, trainer, step, inputs):
        self.labels = inputs["label"].copy()

    def after_step(self, trainer, step, outputs):
        self.correct += int((outputs["output"].argmax(1) == self.labels).sum())
        self.counted += len(self.labels)

    def after_epoch(self, trainer, epoch, stats):
        self.epochs.append(stats)


def _run(metrics, epochs=3, lr=0.5, validation=True, extra_events=()):
    executor = _Executor()
    recorder = _EpochRecorder()
    trainer = Trainer(ShuffleSampler(_dataset(120, seed=1), 25, seed=0),
                      OrderedSampler(_dataset(60, seed=2), 30) if validation else None,
                      executor, GradientDescent(executor, lr=lr), events=[*metrics, recorder, *extra_events],
                      progress=False)
    return trainer.run(epochs), recorder


def test_accuracy_metrics_match_the_run():
    test_accuracy, training_accuracy = TestAccuracy(), TrainingAccuracy()
    stats, recorder = _run([test_accuracy, training_accuracy])
    assert test_accuracy.result() == stats.test_accuracy[-1] and test_accuracy.history == stats.test_accuracy
    assert training_accuracy.result() == pytest.approx(100.0 * recorder.correct / recorder.counted)
    assert training_accuracy.history == stats.train_accuracy
    value = test_accuracy.result()
    assert value > 80.0
    assert test_accuracy.is_met(value) and not test_accuracy.is_met(value + 0.1)
    assert "met" in test_accuracy.describe(value) and "NOT met" in test_accuracy.describe(value + 0.1)
    assert test_accuracy.describe().startswith("TestAccuracy = ") and "%" in test_accuracy.describe()


def test_wallclock_time_summarizes_step_times_and_totals_the_run():
    bench_stats = pytest.importorskip("d5.bench.stats")
    wallclock = WallclockTime()
    stats, _ = _run([wallclock])
    assert len(wallclock.step_times) == stats.steps == 15
    summary = wallclock.summary
    assert summary.n == 15 and summary.median == pytest.approx(np.median(wallclock.step_times))
    assert summary.ci_low <= summary.median <= summary.ci_high
    assert summary == bench_stats.summarize(wallclock.step_times)
    assert sum(wallclock.step_times) <= wallclock.result() <= stats.total_time + 1.0
    assert wallclock.result() >= sum(stats.epoch_time) * 0.999
    assert not wallclock.higher_is_better and wallclock.unit == "s"
    assert wallclock.is_met(math.inf) and not wallclock.is_met(0.0)
    assert "per step" in wallclock.describe()


def test_throughput_is_training_samples_over_training_time():
    throughput = Throughput()
    stats, recorder = _run([throughput])
    samples = sum(epoch.samples for epoch in recorder.epochs)
    seconds = sum(epoch.train_time for epoch in recorder.epochs)
    assert samples == stats.samples == 3 * 120
    assert throughput.result() == pytest.approx(samples / seconds)
    # validation is excluded: the training time is strictly less than the epochs' wall time
    assert seconds < sum(stats.epoch_time)
    assert throughput.higher_is_better and throughput.unit == "samples/s"


def test_time_to_accuracy_reached_and_never_reached():
    reached = TimeToAccuracy(50.0)
    stats, _ = _run([reached])
    assert 0.0 < reached.result() <= stats.total_time and reached.is_met(stats.total_time)
    never = TimeToAccuracy(90.0)
    _run([never], lr=0.0)  # zero weights predict class 0 everywhere: about a third correct
    assert never.result() == math.inf and not never.is_met(1e9)


def test_metrics_before_a_run_have_no_result():
    for metric in (TestAccuracy(), TrainingAccuracy(), WallclockTime(), Throughput(), TimeToAccuracy(10.0)):
        assert isinstance(metric, TrainingMetric) and isinstance(metric, TrainerEvent)
        with pytest.raises(D5Error, match="no result yet"):
            metric.result()
        assert not metric.is_met(0.0)
        assert "n/a" in metric.describe()
    with pytest.raises(D5Error, match="no steps"):
        WallclockTime().summary  # noqa: B018


def test_test_accuracy_needs_a_validation_sampler():
    with pytest.raises(D5Error, match="validation sampler"):
        _run([TestAccuracy()], validation=False)


def test_metrics_reset_between_runs_and_after_early_stop():
    accuracy = TestAccuracy()
    _run([accuracy], epochs=3)
    stats, _ = _run([accuracy], epochs=1, extra_events=[StopAfter(steps=2)])
    assert accuracy.history == stats.test_accuracy and len(accuracy.history) == 1


def test_check_metrics_as_a_recipe_uses_it():
    accuracy, wallclock = TestAccuracy(), WallclockTime()
    _run([accuracy, wallclock])
    ok, lines = check_metrics([(accuracy, 10.0), (wallclock, math.inf)])
    assert ok and len(lines) == 2 and lines[0].startswith("TestAccuracy")
    ok, _ = check_metrics([(accuracy, 10.0), (wallclock, 0.0)])
    assert not ok


def test_run_time_test_metric_reports_the_median_of_its_reruns():
    metric = RunTime(reruns=7)
    assert isinstance(metric, TestMetric)
    for _ in range(metric.reruns):
        inputs = metric.begin([np.ones(1000)])
        outputs = metric.end([np.sort(inputs[0])])
    assert len(metric.samples) == 7
    assert metric.measure(inputs, outputs) == pytest.approx(np.median(metric.samples))
    assert metric.summary.n == 7
    with pytest.raises(D5Error):
        RunTime(reruns=0)
    with pytest.raises(D5Error, match="no timed runs"):
        RunTime().measure(None, None)


def test_output_error_against_numpy_norms():
    rng = np.random.default_rng(0)
    reference = [rng.standard_normal((4, 5)), rng.standard_normal(3)]
    outputs = [reference[0] + 1e-3 * rng.standard_normal((4, 5)), reference[1] * 1.01]
    linf = max(np.max(np.abs(o - r)) for o, r in zip(outputs, reference))
    assert OutputError("linf").measure(None, outputs, reference) == pytest.approx(linf)
    relative_l2 = max(np.linalg.norm(o - r) / np.linalg.norm(r) for o, r in zip(outputs, reference))
    assert OutputError("l2", relative=True).measure(None, outputs, reference) == pytest.approx(relative_l2)
    named = OutputError().measure(None, {"b": outputs[1], "a": outputs[0]}, {"a": reference[0], "b": reference[1]})
    assert named == pytest.approx(linf)
    with pytest.raises(D5Error, match="shape"):
        OutputError().measure(None, [np.ones(3)], [np.ones(4)])
    with pytest.raises(D5Error, match="reference_outputs"):
        OutputError().measure(None, [np.ones(3)])
