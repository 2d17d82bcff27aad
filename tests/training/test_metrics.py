"""Training and test metrics, checked against values recomputed independently from the same run."""
from __future__ import annotations

import math
import time

import numpy as np
import pytest

from d5.errors import CheckpointError, D5Error
from d5.training.dataset import NumpyDataset
from d5.training.events import StopAfter, TrainerEvent
from d5.training.metrics import (OutputError, RunTime, TestAccuracy, TestMetric, Throughput, TimeToAccuracy,
                                 TrainingAccuracy, TrainingMetric, WallclockTime, check_metrics)
from d5.training.optimizers import GradientDescent
from d5.training.sampler import OrderedSampler, ShuffleSampler
from d5.training.trainer import Trainer
from softmax_regression import SoftmaxRegression, SoftmaxRegressionNetwork, three_blobs  # tests/support


_Network, _Executor, _dataset = SoftmaxRegressionNetwork, SoftmaxRegression, three_blobs


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


# --- top-k, final test accuracy, latency, phase breakdown; results and states ---------------------------------

def test_top_k_correct_agrees_with_torch_topk():
    torch = pytest.importorskip("torch")
    from d5.training.metrics import top_k_correct

    rng = np.random.default_rng(0)
    scores, labels = rng.standard_normal((200, 10)), rng.integers(0, 10, 200)
    for k in (1, 3, 5):
        top = torch.topk(torch.from_numpy(scores), k, dim=1).indices.numpy()
        expected = int((top == labels[:, None]).any(axis=1).sum())
        assert top_k_correct(scores, labels, k) == (expected, 200)
        assert top_k_correct(scores, np.eye(10)[labels], k) == (expected, 200)  # one-hot labels
    per_position = rng.standard_normal((4, 6, 7))  # (N, classes, positions), e.g. a language model
    position_labels = rng.integers(0, 6, (4, 7))
    ranks = (-per_position).argsort(axis=1).argsort(axis=1)
    expected = int((np.take_along_axis(ranks, position_labels[:, None], 1) < 2).sum())
    assert top_k_correct(per_position, position_labels, 2) == (expected, 28)


class _TenClassExecutor(_Executor):
    """Softmax regression with 10 classes over 3 features: top-k for k < 10 is informative."""

    def __init__(self):
        super().__init__()
        self.network.tensors["W"] = np.random.default_rng(5).standard_normal((3, 10))


def _ten_class_run(events, epochs=2):
    rng = np.random.default_rng(3)
    def data(n):
        return NumpyDataset(rng.standard_normal((n, 3)), rng.integers(0, 10, n))
    executor = _TenClassExecutor()
    trainer = Trainer(ShuffleSampler(data(60), 20, seed=0), OrderedSampler(data(45), 20), executor,
                      GradientDescent(executor, lr=0.1), events=events, progress=False)
    return trainer, trainer.run(epochs)


def test_top_k_accuracy_on_test_and_train_match_independent_counts():
    from d5.training.metrics import TopKAccuracy

    class Oracle(TrainerEvent):
        """Top-3 from argsort, over the training batches of each epoch."""

        def __init__(self):
            self.per_epoch = []

        def before_epoch(self, trainer, epoch):
            self.correct = self.counted = 0

        def before_step(self, trainer, step, inputs):
            self.labels = inputs["label"].copy()

        def after_step(self, trainer, step, outputs):
            top = np.argsort(-outputs["output"], axis=1)[:, :3]
            self.correct += int((top == self.labels[:, None]).any(axis=1).sum())
            self.counted += len(self.labels)

        def after_epoch(self, trainer, epoch, stats):
            self.per_epoch.append(100.0 * self.correct / self.counted)

    test_top3, train_top3, top1, oracle = TopKAccuracy(3), TopKAccuracy(3, on="train"), TopKAccuracy(1), Oracle()
    trainer, stats = _ten_class_run([test_top3, train_top3, top1, oracle])
    assert train_top3.history == pytest.approx(oracle.per_epoch)
    assert top1.history == pytest.approx(stats.test_accuracy)  # top-1 is the trainer's own accuracy
    test = trainer.validation_sampler.dataset
    logits = test.data @ trainer.executor.network.tensors["W"]
    expected = 100.0 * np.mean((np.argsort(-logits, axis=1)[:, :3] == test.labels[:, None]).any(axis=1))
    assert test_top3.result() == pytest.approx(expected) and test_top3.result() >= top1.result()
    assert test_top3.name == "Top3Accuracy" and test_top3.as_dict()["history"] == test_top3.history
    with pytest.raises(D5Error, match="only 3 classes"):
        _run([TopKAccuracy(3)])
    with pytest.raises(D5Error):
        TopKAccuracy(0)


def test_final_test_accuracy_evaluates_the_final_model_on_its_own_test_set():
    from d5.training.metrics import FinalTestAccuracy

    held_out = _dataset(90, seed=7)
    on_held_out, on_validation = FinalTestAccuracy(OrderedSampler(held_out, 40)), FinalTestAccuracy()
    executor = _Executor()
    trainer = Trainer(ShuffleSampler(_dataset(120, seed=1), 25, seed=0), OrderedSampler(_dataset(60, seed=2), 30),
                      executor, GradientDescent(executor, lr=0.5),
                      events=[on_held_out, on_validation, StopAfter(steps=7)], progress=False)
    stats = trainer.run(3)
    assert on_validation.result() == stats.test_accuracy[-1]  # the last validation was of the final model
    # oracle: the final parameters on the whole held-out set at once
    logits = held_out.data @ executor.network.tensors["W"]
    assert on_held_out.result() == pytest.approx(100.0 * np.mean(logits.argmax(1) == held_out.labels))
    assert on_held_out.as_dict()["loss"] == pytest.approx(trainer.test(OrderedSampler(held_out, 90))[0])
    with pytest.raises(D5Error, match="needs a test set"):
        _run([FinalTestAccuracy()], validation=False)


def test_latency_percentiles_and_summary_match_the_timed_samples():
    from d5.bench.stats import summarize
    from d5.training.metrics import Latency, nearest_rank_percentile

    latency = Latency(batch_size=2, repeats=41, warmup=2)
    stats, _ = _run([latency])
    samples = np.sort(latency.samples)
    assert len(samples) == 41 and latency.result() == pytest.approx(np.median(samples))
    for p in (50, 90, 99):  # nearest rank: the ceil(p% * n)-th smallest, a measured value
        assert latency.percentiles[f"p{p}"] == samples[math.ceil(p / 100 * 41) - 1]
        assert nearest_rank_percentile(samples, p) == np.percentile(samples, p, method="inverted_cdf")
    assert latency.summary == summarize(latency.samples)
    assert "p99" in latency.describe() and latency.as_dict()["percentiles"]["p90"] == latency.percentiles["p90"]
    batches = []

    class Recording(_Executor):
        def inference(self, inputs):
            batches.append(len(inputs["label"]))
            return super().inference(inputs)

    standalone = Latency(repeats=5, warmup=1)
    standalone.measure(Recording(), {"input": np.ones((30, 3)), "label": np.zeros(30, np.int64)})
    assert batches == [1] * 6 and len(standalone.samples) == 5  # one example per call by default
    with pytest.raises(D5Error, match="needs batches"):
        _run([Latency()], validation=False)


def test_phase_breakdown_splits_each_step_and_adds_up():
    from d5.training.breakdown import PhaseBreakdown

    class SlowBackprop(_Executor):
        """forward+backward takes >= 2 ms, so its share is measurable."""

        def inference_and_backprop(self, inputs, y="loss"):
            time.sleep(0.002)
            return super().inference_and_backprop(inputs, y)

    class StepTimes(TrainerEvent):
        def __init__(self):
            self.data, self.step = [], []

        def after_step(self, trainer, step, outputs):
            self.data.append(trainer.last_data_time)
            self.step.append(trainer.last_step_time)

    breakdown, times = PhaseBreakdown(), StepTimes()
    executor = SlowBackprop()
    trainer = Trainer(ShuffleSampler(_dataset(120, seed=1), 25, seed=0), OrderedSampler(_dataset(60, seed=2), 30),
                      executor, GradientDescent(executor, lr=0.5), events=[breakdown, times], progress=False)
    trainer.run(2)
    assert breakdown.phases == ("data", "forward+backward", "update")
    samples = breakdown.samples
    assert samples["data"] == times.data and len(samples["update"]) == 10
    np.testing.assert_allclose(np.add(samples["forward+backward"], samples["update"]), times.step, rtol=1e-9)
    assert min(samples["forward+backward"]) >= 0.002 and sum(samples["forward+backward"]) == pytest.approx(
        trainer.forward_backward_time)
    rows = {row["phase"]: row for row in breakdown.table()}
    assert sum(row["share (%)"] for row in rows.values()) == pytest.approx(100.0)
    assert rows["forward+backward"]["share (%)"] > 50.0
    assert rows["data"]["CI low (ms)"] <= rows["data"]["per step (ms)"] <= rows["data"]["CI high (ms)"]
    assert [record["epoch"] for record in breakdown.epochs] == [0, 1]
    assert breakdown.result() == pytest.approx(np.median(np.add(times.data, times.step)), rel=1e-9)
    assert "| forward+backward" in breakdown.markdown() and "forward+backward" in breakdown.describe()


def test_phase_breakdown_takes_communication_from_an_optimizer_that_reports_it():
    from d5.training.breakdown import PhaseBreakdown

    class Communicating(GradientDescent):
        """An optimizer that 'communicates' (a timed wait) each step and reports the seconds, as a
        distributed optimizer does."""

        communication_time = 0.0

        def step(self, inputs):
            outputs = super().step(inputs)
            started = time.perf_counter()
            time.sleep(0.001)
            self.communication_time += time.perf_counter() - started
            return outputs

    breakdown = PhaseBreakdown()
    executor = _Executor()
    optimizer = Communicating(executor, lr=0.5)
    Trainer(ShuffleSampler(_dataset(120, seed=1), 25, seed=0), None, executor, optimizer, events=[breakdown],
            progress=False).run(1)
    assert breakdown.phases[-1] == "communication"
    assert sum(breakdown.samples["communication"]) == pytest.approx(optimizer.communication_time)
    assert min(breakdown.samples["communication"]) >= 0.001


def test_every_metric_goes_into_a_result_file_and_round_trips_its_state(tmp_path):
    from d5.bench.results import read_result, write_result
    from d5.training.breakdown import PhaseBreakdown
    from d5.training.metrics import FinalTestAccuracy, Latency, TopKAccuracy

    metrics = [TestAccuracy(), TrainingAccuracy(), WallclockTime(), Throughput(), TimeToAccuracy(50.0),
               FinalTestAccuracy(), Latency(repeats=8), PhaseBreakdown()]
    _run(metrics)
    path = write_result(tmp_path / "r.json", "metrics", {metric.name: metric for metric in metrics}, environment={})
    figures = read_result(path)["figures"]
    for metric in metrics:
        figure = figures[metric.name]
        assert figure["value"] == pytest.approx(metric.value) and figure["unit"] == metric.unit
    assert figures["WallclockTime"]["step_seconds"]["n"] == 15 and "ci_low" in figures["Latency"]["summary"]
    for metric in metrics + [TopKAccuracy(1)]:
        fresh = type(metric)(*([50.0] if isinstance(metric, TimeToAccuracy) else [1] if isinstance(
            metric, TopKAccuracy) else []))
        fresh.load_state_dict(metric.state_dict())
        assert fresh.value == metric.value and fresh.state_dict().keys() == metric.state_dict().keys()
    with pytest.raises(CheckpointError, match="not a TestAccuracy"):
        TestAccuracy().load_state_dict(Throughput().state_dict())
    with pytest.raises(CheckpointError, match="target"):
        TimeToAccuracy(60.0).load_state_dict(metrics[4].state_dict())
    with pytest.raises(CheckpointError, match="k: saved 1, now 5"):
        TopKAccuracy(5).load_state_dict(TopKAccuracy(1).state_dict())
