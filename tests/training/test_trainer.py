"""The Trainer and its events, on real models: NumPy softmax regression (executor contract implemented
with analytic gradients) and, end to end, an MLP d5.Network on the reference framework."""
from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from d5.errors import D5Error, DivergenceError, ShapeError
from d5.training.dataset import NumpyDataset
from d5.training.events import (CSVLogger, EpochSummary, JSONLogger, LearningRateSchedule, ProgressBar, StopAfter,
                                StopWhenAccuracy, TrainerEvent)
from d5.training.optimizers import GradientDescent, MomentumOptimizer
from d5.training.sampler import OrderedSampler, ShuffleSampler
from d5.training.trainer import Trainer, TrainingStats, count_correct

N_FEATURES, N_CLASSES = 4, 3


class SoftmaxRegressionNetwork:
    """Live state of ``logits = x @ W + b`` with mean softmax cross-entropy."""

    outputs = ["output", "loss"]

    def __init__(self):
        self.tensors = {"W": np.zeros((N_FEATURES, N_CLASSES)), "b": np.zeros(N_CLASSES)}

    def get_params(self):
        return ["W", "b"]

    def gradient(self, y="loss"):
        return [("W", "W_grad"), ("b", "b_grad")]

    def fetch_tensors(self, names):
        return [self.tensors[name] for name in names]

    def feed_tensor(self, name, value, is_param=False):
        self.tensors[name] = value


class SoftmaxRegressionExecutor:
    def __init__(self):
        self.network = SoftmaxRegressionNetwork()
        self.inference_calls = 0

    def _forward(self, inputs):
        t = self.network.tensors
        logits = inputs["input"] @ t["W"] + t["b"]
        shifted = logits - logits.max(axis=1, keepdims=True)
        log_prob = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
        labels = inputs["label"]
        loss = -log_prob[np.arange(len(labels)), labels].mean()
        return {"output": logits, "loss": np.asarray(loss)}, log_prob

    def inference(self, inputs):
        self.inference_calls += 1
        return self._forward(inputs)[0]

    def inference_and_backprop(self, inputs, y="loss"):
        outputs, log_prob = self._forward(inputs)
        labels = inputs["label"]
        d_logits = np.exp(log_prob)
        d_logits[np.arange(len(labels)), labels] -= 1.0
        d_logits /= len(labels)
        self.network.tensors["W_grad"] = inputs["input"].T @ d_logits
        self.network.tensors["b_grad"] = d_logits.sum(axis=0)
        return outputs


def blobs(n, seed, spread=1.0):
    """Three well-separated Gaussian blobs (a linearly separable problem)."""
    centers = np.array([[4.0, 0, 0, 0], [0, 4.0, 0, 0], [0, 0, 4.0, 0]])
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, N_CLASSES, n)
    return NumpyDataset(centers[labels] + spread * rng.standard_normal((n, N_FEATURES)), labels.astype(np.int64))


def make_trainer(events=None, validation=True, train_size=96, batch_size=32, lr=0.5, progress=False,
                 optimizer_cls=GradientDescent):
    executor = SoftmaxRegressionExecutor()
    optimizer = optimizer_cls(executor, lr=lr)
    train = ShuffleSampler(blobs(train_size, seed=1), batch_size, seed=0)
    test = OrderedSampler(blobs(50, seed=2), 16) if validation else None
    return Trainer(train, test, executor, optimizer, events=events, progress=progress)


class Recorder(TrainerEvent):
    """Records every hook call (name and the step/epoch argument)."""

    def __init__(self):
        self.calls = []

    def before_training(self, trainer):
        self.calls.append(("before_training",))

    def before_epoch(self, trainer, epoch):
        self.calls.append(("before_epoch", epoch))

    def before_step(self, trainer, step, inputs):
        assert set(inputs) == {"input", "label"}
        self.calls.append(("before_step", step))

    def after_step(self, trainer, step, outputs):
        assert set(outputs) == {"output", "loss"}
        self.calls.append(("after_step", step))

    def before_test_set(self, trainer):
        self.calls.append(("before_test_set",))

    def after_test_set(self, trainer, stats):
        self.calls.append(("after_test_set",))

    def after_epoch(self, trainer, epoch, stats):
        self.calls.append(("after_epoch", epoch))

    def after_training(self, trainer, stats):
        self.calls.append(("after_training",))


def test_events_are_called_in_order():
    recorder = Recorder()
    make_trainer(events=[recorder]).run(2)
    expected = [("before_training",)]
    step = 0
    for epoch in range(2):
        expected.append(("before_epoch", epoch))
        for _ in range(3):
            expected += [("before_step", step), ("after_step", step)]
            step += 1
        expected += [("before_test_set",), ("after_test_set",), ("after_epoch", epoch)]
    expected.append(("after_training",))
    assert recorder.calls == expected


def test_without_validation_there_are_no_test_set_events_and_no_test_values():
    recorder = Recorder()
    stats = make_trainer(events=[recorder], validation=False).run(2)
    assert not any(call[0].endswith("test_set") for call in recorder.calls)
    assert stats.test_accuracy == [None, None] and stats.test_loss == [None, None]


def test_run_returns_stats_that_agree_with_an_independent_evaluation():
    trainer = make_trainer(train_size=300, batch_size=30)
    stats = trainer.run(4)
    assert isinstance(stats, TrainingStats) and stats is trainer.stats
    assert stats.epochs == 4 and stats.steps == 40 and stats.samples == 1200
    for name in ("train_loss", "train_accuracy", "test_loss", "test_accuracy", "epoch_time", "samples_per_second"):
        assert len(getattr(stats, name)) == 4, name
    assert stats.train_loss[-1] < stats.train_loss[0]
    assert stats.test_accuracy[-1] >= 95.0 and stats.train_accuracy[-1] >= 90.0
    assert stats.total_time >= sum(stats.epoch_time) > 0
    assert set(stats.timing) == {"data", "step", "validation"}
    # Oracle: the whole validation set at once with the final parameters.
    test = blobs(50, seed=2)
    W, b = trainer.executor.network.tensors["W"], trainer.executor.network.tensors["b"]
    logits = test.data @ W + b
    log_prob = logits - logits.max(1, keepdims=True)
    log_prob -= np.log(np.exp(log_prob).sum(1, keepdims=True))
    expected_loss = -log_prob[np.arange(50), test.labels].mean()
    expected_accuracy = 100.0 * np.mean(logits.argmax(1) == test.labels)
    np.testing.assert_allclose(stats.test_loss[-1], expected_loss, rtol=1e-12)
    assert stats.test_accuracy[-1] == pytest.approx(expected_accuracy)
    assert trainer.test(OrderedSampler(test, 7)) == pytest.approx((expected_loss, expected_accuracy))
    as_dict = stats.as_dict()
    assert as_dict["epochs"] == 4 and as_dict["test_accuracy"] == stats.test_accuracy
    json.dumps(as_dict)


def test_training_loss_is_weighted_by_batch_size():
    # 70 examples in batches of 32: 32, 32, 6. With lr=0 the parameters never change, so the epoch's
    # train loss must equal the loss over all 70 examples (an unweighted mean of batch losses would not).
    executor = SoftmaxRegressionExecutor()
    executor.network.tensors["W"] = np.random.default_rng(0).standard_normal((N_FEATURES, N_CLASSES))
    data = blobs(70, seed=5)
    trainer = Trainer(OrderedSampler(data, 32), None, executor, GradientDescent(executor, lr=0.0), progress=False)
    stats = trainer.run(1)
    full = executor.inference({"input": data.data, "label": data.labels})
    np.testing.assert_allclose(stats.train_loss[0], full["loss"], rtol=1e-12)
    assert stats.train_accuracy[0] == pytest.approx(100.0 * np.mean(full["output"].argmax(1) == data.labels))


def test_stop_after_steps_stops_mid_epoch_and_still_validates():
    recorder = Recorder()
    trainer = make_trainer(events=[StopAfter(steps=5), recorder])
    stats = trainer.run(10)
    assert trainer.steps == 5 and stats.steps == 5 and stats.stopped_early
    assert stats.epochs == 2  # 3 steps + 2 steps
    assert recorder.calls[-4:] == [("before_test_set",), ("after_test_set",), ("after_epoch", 1), ("after_training",)]
    assert stats.test_accuracy[-1] is not None


def test_stop_after_seconds():
    trainer = make_trainer(events=[StopAfter(seconds=1e-12)])
    assert trainer.run(5).steps == 1


def test_before_step_returning_false_skips_the_step():
    class Refuse(TrainerEvent):
        def before_step(self, trainer, step, inputs):
            return False if step == 4 else None

    trainer = make_trainer(events=[Refuse()])
    stats = trainer.run(3)
    assert trainer.steps == 4 and trainer.optimizer.steps == 4 and stats.stopped_early
    assert stats.epochs == 2


def test_stop_when_accuracy():
    stats = make_trainer(events=[StopWhenAccuracy(90.0)], train_size=300, batch_size=30).run(50)
    assert stats.epochs < 50 and stats.test_accuracy[-1] >= 90.0
    assert all(accuracy < 90.0 for accuracy in stats.test_accuracy[:-1])
    with pytest.raises(D5Error, match="validation sampler"):
        make_trainer(events=[StopWhenAccuracy(90.0)], validation=False).run(1)


def test_learning_rate_schedule_per_epoch_and_per_step():
    class SeenLR(TrainerEvent):
        def __init__(self):
            self.seen = []

        def after_step(self, trainer, step, outputs):
            self.seen.append(trainer.optimizer.lr)

    seen = SeenLR()
    make_trainer(events=[LearningRateSchedule(lambda epoch: 0.1 / (epoch + 1)), seen]).run(2)
    assert seen.seen == [0.1] * 3 + [0.05] * 3
    seen = SeenLR()
    schedule = LearningRateSchedule(lambda step: 0.01 * step, per="step")
    make_trainer(events=[schedule, seen]).run(2)
    assert seen.seen == pytest.approx([0.01 * step for step in range(6)])
    assert schedule.history == seen.seen
    with pytest.raises(D5Error, match="finite number"):
        make_trainer(events=[LearningRateSchedule(lambda epoch: float("nan"))]).run(1)


def test_json_and_csv_loggers_write_per_epoch_records(tmp_path):
    json_path, csv_path = tmp_path / "run" / "log.json", tmp_path / "log.csv"
    stats = make_trainer(events=[JSONLogger(json_path), CSVLogger(csv_path)]).run(3)
    logged = json.loads(json_path.read_text())
    assert [record["epoch"] for record in logged["epochs"]] == [0, 1, 2]
    assert [record["test_accuracy"] for record in logged["epochs"]] == stats.test_accuracy
    assert logged["summary"]["train_loss"] == stats.train_loss
    rows = list(csv.DictReader(csv_path.open()))
    assert [float(row["train_loss"]) for row in rows] == pytest.approx(stats.train_loss)
    assert [row for row in tmp_path.rglob("*.tmp")] == []  # atomic writes leave nothing behind


def test_progress_can_be_disabled(capsys):
    make_trainer(progress=False).run(2)
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""


def test_progress_shows_a_bar_and_one_summary_line_per_epoch(capsys):
    trainer = make_trainer(progress=True)
    assert any(isinstance(event, ProgressBar) for event in trainer.events)
    assert any(isinstance(event, EpochSummary) for event in trainer.events)
    trainer.run(2)
    captured = capsys.readouterr()
    assert "epoch 1/2" in captured.err and "step" in captured.err
    lines = captured.out.strip().splitlines()
    assert len(lines) == 2 and lines[1].startswith("epoch 2/2: train loss") and "test acc" in lines[1]


def test_divergence_propagates_through_the_trainer_with_its_step():
    class PoisonStep(TrainerEvent):
        def before_step(self, trainer, step, inputs):
            if step == 4:
                inputs["input"][0, 0] = np.nan

    with pytest.raises(DivergenceError, match="step 5"):
        make_trainer(events=[PoisonStep()]).run(3)


def test_optimizer_train_convenience():
    executor = SoftmaxRegressionExecutor()
    optimizer = MomentumOptimizer(executor, lr=0.1, momentum=0.9)
    stats = optimizer.train(ShuffleSampler(blobs(96, seed=1), 32, seed=0), epochs=2,
                            validation_sampler=OrderedSampler(blobs(40, seed=3), 20), progress=False)
    assert stats.epochs == 2 and optimizer.steps == 6 and stats.test_accuracy[-1] > 80.0


@pytest.mark.parametrize("make_bad", [
    lambda: make_trainer(events=[object()]),
    lambda: make_trainer().run(-1),
    lambda: make_trainer().run(1, events=["not an event"]),
    lambda: Trainer(42, None, SoftmaxRegressionExecutor(), GradientDescent(None)),
    lambda: StopAfter(),
    lambda: StopAfter(steps=0),
    lambda: LearningRateSchedule(0.1),
    lambda: LearningRateSchedule(lambda e: 0.1, per="batch"),
])
def test_bad_arguments_raise_d5_errors(make_bad):
    with pytest.raises(D5Error):
        make_bad()


# --- empty batches: reported as empty, never as divergence (a mean over 0 samples is NaN) -------------------

def _empty_second_batch():
    calls = []

    def transform(batch):
        calls.append(1)
        return {name: value[:0] for name, value in batch.items()} if len(calls) == 2 else batch
    return transform


def test_an_empty_batch_from_the_sampler_is_reported_as_empty_not_as_divergence():
    executor = SoftmaxRegressionExecutor()
    optimizer = GradientDescent(executor, lr=0.5)
    train = OrderedSampler(blobs(96, seed=1), 32, transforms=[_empty_second_batch()])
    trainer = Trainer(train, None, executor, optimizer, progress=False)
    with pytest.raises(ShapeError) as info:
        trainer.run(1)
    message = str(info.value)
    assert "the batch is empty (0 samples: 'input' has shape (0, 4))" in message
    assert "train_sampler OrderedSampler, epoch 0, step 1" in message
    assert optimizer.steps == 1  # refused before the optimizer ran it


def test_optimizer_step_refuses_an_empty_batch_before_touching_any_state():
    reference = pytest.importorskip("d5.frameworks.reference")
    executor = reference.from_model(_mlp())
    optimizer = MomentumOptimizer(executor, lr=0.1, momentum=0.9)
    before = {name: value.copy() for name, value in executor.network.params.items()}
    empty = {"input": np.zeros((0, N_FEATURES), np.float32), "label": np.zeros(0, np.int64)}
    with pytest.raises(ShapeError, match=r"MomentumOptimizer.step: the batch is empty \(0 samples"):
        optimizer.step(empty)
    assert optimizer.steps == 0
    assert all(np.array_equal(before[name], value) for name, value in executor.network.params.items())
    with pytest.raises(ShapeError, match="a batch must be a dict of named arrays"):
        optimizer.step([empty["input"], empty["label"]])


def test_an_empty_validation_batch_is_reported_as_empty():
    trainer = make_trainer()
    validation = OrderedSampler(blobs(50, seed=2), 16, transforms=[_empty_second_batch()])
    with pytest.raises(ShapeError, match="evaluation sampler OrderedSampler, batch 1: the batch is empty"):
        trainer.evaluate(validation)


def test_a_sampler_yielding_tuples_is_told_to_yield_dicts():
    executor = SoftmaxRegressionExecutor()
    data = blobs(8, seed=1)
    trainer = Trainer([(data.data, data.labels)], None, executor, GradientDescent(executor), progress=False)
    with pytest.raises(ShapeError, match="a batch must be a dict of named arrays .* got tuple"):
        trainer.run(1)


def test_count_correct_handles_index_onehot_and_regression_outputs():
    logits = np.array([[2.0, 1.0, 0.0], [0.0, 3.0, 1.0], [1.0, 0.0, 5.0], [0.0, 1.0, 0.5]])
    assert count_correct(logits, np.array([0, 1, 1, 0])) == (2, 4)
    assert count_correct(logits, np.array([[0], [1], [1], [0]])) == (2, 4)
    assert count_correct(logits, np.eye(3)[[0, 1, 1, 0]]) == (2, 4)
    per_position = np.zeros((2, 3, 5))
    per_position[:, 2, :] = 1.0
    assert count_correct(per_position, np.full((2, 5), 2)) == (10, 10)
    assert count_correct(np.ones((4, 1)), np.ones(4)) is None  # regression: accuracy undefined


# --- end to end: an MLP d5.Network on the reference framework -----------------------------------------------

def _mlp(seed=0, hidden=16):
    import d5

    rng = np.random.default_rng(seed)
    net = d5.Network("mlp")
    net.add_input("input", ("N", N_FEATURES), "float32")
    net.add_input("label", ("N",), "int64")
    for name, fan_in, fan_out in (("fc1", N_FEATURES, hidden), ("fc2", hidden, N_CLASSES)):
        bound = 1.0 / np.sqrt(fan_in)
        net.add_param(f"{name}.weight", rng.uniform(-bound, bound, (fan_out, fan_in)).astype(np.float32))
        net.add_param(f"{name}.bias", rng.uniform(-bound, bound, fan_out).astype(np.float32))
    net.add_node("Gemm", ["input", "fc1.weight", "fc1.bias"], ["hidden"], transB=1)
    net.add_node("Relu", ["hidden"], ["hidden_relu"])
    net.add_node("Gemm", ["hidden_relu", "fc2.weight", "fc2.bias"], ["output"], transB=1)
    net.add_node("SoftmaxCrossEntropyLoss", ["output", "label"], ["loss"], reduction="mean")
    net.add_output("output")
    net.add_output("loss")
    return net


def _float32_blobs(n, seed):
    data = blobs(n, seed, spread=1.0)
    return NumpyDataset(data.data.astype(np.float32), data.labels)


def test_end_to_end_mlp_on_reference_framework_reaches_high_accuracy():
    reference = pytest.importorskip("d5.frameworks.reference")
    executor = reference.from_model(_mlp())
    optimizer = MomentumOptimizer(executor, lr=0.05, momentum=0.9)
    train = ShuffleSampler(_float32_blobs(600, seed=11), 32, seed=0)
    test = OrderedSampler(_float32_blobs(300, seed=12), 100)
    trainer = Trainer(train, test, executor, optimizer, progress=False)
    chance_loss, chance_accuracy = trainer.test(test)
    stats = trainer.run(4)
    assert stats.test_accuracy[-1] >= 97.0 > chance_accuracy
    assert stats.train_loss[-1] < 0.3 * stats.train_loss[0] and stats.test_loss[-1] < chance_loss
    # The trained parameters are the network's live state: a fresh evaluation agrees with the stats.
    assert trainer.test(test) == pytest.approx((stats.test_loss[-1], stats.test_accuracy[-1]), rel=1e-5)


# --- the state protocol: stop, save, build afresh, load, continue == never stopped (bitwise) -------------------

def _resumable(optimizer_cls=GradientDescent, events=(), sampler=None):
    """A small MLP on the reference framework over a real ShuffleSampler: 100 examples in batches of 16 make
    7 batches per epoch (the last one of 4), so stops fall mid-epoch, on the epoch's last batch and between."""
    reference = pytest.importorskip("d5.frameworks.reference")
    executor = reference.from_model(_mlp(seed=3))
    kwargs = {"momentum": 0.9} if optimizer_cls is MomentumOptimizer else {}
    optimizer = optimizer_cls(executor, lr=0.05, **kwargs)
    train = sampler if sampler is not None else ShuffleSampler(_float32_blobs(100, seed=11), 16, seed=4)
    test = OrderedSampler(_float32_blobs(30, seed=12), 10)
    return Trainer(train, test, executor, optimizer, events=list(events), progress=False)


def _parameters(trainer):
    names = list(trainer.executor.network.get_params())
    return {name: value.copy() for name, value in zip(names, trainer.executor.network.fetch_tensors(names))}


def _continue(state, parameters, epochs, **build):
    """What a resumed process does: fresh objects, the network's parameters fed back, the state loaded."""
    trainer = _resumable(**build)
    for name, value in parameters.items():
        trainer.executor.network.feed_tensor(name, value)
    trainer.load_state_dict(state)
    return trainer, trainer.run(epochs)


def _assert_plain_data(value, where="state"):
    """The state protocol: only Python scalars, str, None, lists, dicts (str keys) and NumPy arrays."""
    if isinstance(value, dict):
        for key, item in value.items():
            assert isinstance(key, str), f"{where}: key {key!r}"
            _assert_plain_data(item, f"{where}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _assert_plain_data(item, f"{where}[{index}]")
    else:
        assert value is None or isinstance(value, (bool, int, float, str, np.ndarray)), f"{where}: {type(value)}"


@pytest.mark.parametrize("optimizer_cls", [GradientDescent, MomentumOptimizer])
@pytest.mark.parametrize("stop_at", [1, 5, 7, 9, 14])
def test_a_run_stopped_and_resumed_ends_bitwise_where_an_uninterrupted_one_does(optimizer_cls, stop_at):
    if not hasattr(optimizer_cls, "state_dict"):
        pytest.skip(f"{optimizer_cls.__name__} has no state_dict yet: its momentum cannot be resumed")
    straight = _resumable(optimizer_cls)
    expected = straight.run(3)
    stopped = _resumable(optimizer_cls)
    stopped.run(3, events=[StopAfter(steps=stop_at)])
    state = stopped.state_dict()
    _assert_plain_data(state)
    assert state["steps"] == stop_at
    # 7 batches per epoch: a stop on an epoch's last batch continues with the next epoch
    assert (state["epoch"], state["position"]) == divmod(stop_at, 7)
    resumed, stats = _continue(state, _parameters(stopped), 3, optimizer_cls=optimizer_cls)
    final, want = _parameters(resumed), _parameters(straight)
    for name in want:
        np.testing.assert_array_equal(final[name], want[name], err_msg=name)
    # the statistics are those of the uninterrupted run: the partial epoch's record was replaced
    assert (stats.epochs, stats.steps, stats.samples) == (expected.epochs, expected.steps, expected.samples)
    assert (stats.epochs, stats.steps, stats.samples) == (3, 21, 300)
    assert stats.train_loss == expected.train_loss and stats.test_accuracy == expected.test_accuracy
    assert stats.train_accuracy == expected.train_accuracy and not stats.stopped_early
    assert resumed.steps == straight.steps and resumed.optimizer.steps == straight.optimizer.steps


class Snapshot(TrainerEvent):
    """Saves the trainer's state and the parameters at one step (after every other event saw the step)."""

    hook_order = 100

    def __init__(self, at_step):
        self.at_step, self.saved = at_step, None

    def after_step(self, trainer, step, outputs):
        if trainer.steps == self.at_step:
            self.saved = (trainer.state_dict(), _parameters(trainer), trainer.position)


def test_a_state_saved_inside_after_step_resumes_mid_epoch_and_events_continue():
    """The checkpoint hook point: after_step sees trainer.steps and trainer.position already counting the
    step; a state saved there resumes with the events' histories, the schedule and the loggers intact."""
    from d5.training.metrics import TestAccuracy, Throughput, TrainingAccuracy, WallclockTime

    def events(tmp):
        return [LearningRateSchedule(lambda step: 0.05 / (1 + 0.1 * step), per="step"), TestAccuracy(),
                TrainingAccuracy(), WallclockTime(), Throughput(), CSVLogger(tmp / "log.csv"),
                JSONLogger(tmp / "log.json")]

    import pathlib
    import tempfile
    straight_dir, resumed_dir = (pathlib.Path(tempfile.mkdtemp()) for _ in range(2))
    straight_events = events(straight_dir)
    straight = _resumable(events=straight_events)
    expected = straight.run(3)
    snapshot = Snapshot(at_step=10)
    interrupted_events = events(resumed_dir)
    _resumable(events=interrupted_events + [snapshot]).run(3)
    state, parameters, position = snapshot.saved
    assert (state["epoch"], state["position"], position, state["steps"]) == (1, 3, 3, 10)
    _assert_plain_data(state)
    fresh_events = events(resumed_dir)
    trainer = _resumable(events=fresh_events)
    for name, value in parameters.items():
        trainer.executor.network.feed_tensor(name, value)
    trainer.load_state_dict(state)
    stats = trainer.run(3)
    for name, value in _parameters(straight).items():
        np.testing.assert_array_equal(_parameters(trainer)[name], value, err_msg=name)
    assert stats.train_loss == expected.train_loss and stats.steps == 21
    schedule, test_accuracy, training_accuracy, wallclock, throughput = fresh_events[:5]
    assert schedule.history == straight_events[0].history and len(schedule.history) == 21
    assert test_accuracy.history == expected.test_accuracy and training_accuracy.history == expected.train_accuracy
    assert len(wallclock.step_times) == 21 and wallclock.result() > 0
    assert sorted(throughput.epochs) == [0, 1, 2] and throughput.samples == 300
    # the loggers' files hold each epoch once, as the uninterrupted run's do
    written = json.loads((resumed_dir / "log.json").read_text())
    assert [record["epoch"] for record in written["epochs"]] == [0, 1, 2]
    assert [record["train_loss"] for record in written["epochs"]] == expected.train_loss
    rows = list(csv.DictReader((resumed_dir / "log.csv").open()))
    assert [int(row["epoch"]) for row in rows] == [0, 1, 2]
    assert [float(row["train_loss"]) for row in rows] == pytest.approx(expected.train_loss, rel=1e-15)


def test_a_sampler_without_state_is_replayed_to_the_saved_position():
    class Plain:
        """A sampler without the state protocol (set_epoch and len only)."""

        def __init__(self):
            self.inner = ShuffleSampler(_float32_blobs(100, seed=11), 16, seed=4)
            self.dataset = self.inner.dataset

        def set_epoch(self, epoch):
            self.inner.set_epoch(epoch)

        def __len__(self):
            return len(self.inner)

        def __iter__(self):
            return iter(self.inner)

    straight = _resumable(sampler=Plain())
    straight.run(2)
    stopped = _resumable(sampler=Plain())
    stopped.run(2, events=[StopAfter(steps=10)])
    state = stopped.state_dict()
    assert state["sampler"] is None and state["position"] == 3
    resumed, stats = _continue(state, _parameters(stopped), 2, sampler=Plain())
    for name, value in _parameters(straight).items():
        np.testing.assert_array_equal(_parameters(resumed)[name], value, err_msg=name)
    assert stats.steps == 14


def test_a_state_round_trips_through_a_checkpoint_file(tmp_path):
    checkpoint = pytest.importorskip("d5.training.checkpoint")
    straight = _resumable()
    straight.run(2)
    stopped = _resumable()
    stopped.run(2, events=[StopAfter(steps=4)])
    path = checkpoint.save_checkpoint(tmp_path / "c.d5ckpt", stopped.executor, stopped)
    trainer = _resumable()
    checkpoint.restore_checkpoint(checkpoint.load_checkpoint(path), trainer.executor, trainer)
    trainer.run(2)
    for name, value in _parameters(straight).items():
        np.testing.assert_array_equal(_parameters(trainer)[name], value, err_msg=name)


def test_incompatible_states_are_refused_saying_why():
    from d5.errors import CheckpointError

    stopped = _resumable()
    stopped.run(1, events=[StopAfter(steps=3)])
    state = stopped.state_dict()
    with pytest.raises(CheckpointError, match="not a Trainer's"):
        _resumable().load_state_dict({**state, "kind": "ShuffleSampler"})
    with pytest.raises(CheckpointError, match="lacks"):
        _resumable().load_state_dict({key: value for key, value in state.items() if key != "epoch_sums"})
    with pytest.raises(CheckpointError, match="sampler's state is at epoch 0, batch 3, but the trainer's at epoch 0, "
                                              "batch 5"):
        _resumable().load_state_dict({**state, "position": 5})
    with pytest.raises(CheckpointError, match="OrderedSampler"):  # the sampler refuses another class's state
        _resumable(sampler=OrderedSampler(_float32_blobs(100, seed=11), 16)).load_state_dict(state)
    with pytest.raises(CheckpointError, match="has no load_state_dict"):
        _resumable(sampler=[{"input": np.zeros((2, N_FEATURES), np.float32), "label": np.zeros(2, np.int64)}]
                   ).load_state_dict(state)
    with pytest.raises(CheckpointError, match="configured differently"):  # an event's own check
        trainer = _resumable(events=[LearningRateSchedule(lambda epoch: 0.1)])
        trainer.load_state_dict({**state, "events": {"LearningRateSchedule#0": LearningRateSchedule(
            lambda step: 0.1, per="step").state_dict()}})
        trainer.run(1)

    class LoadsWhileRunning(TrainerEvent):
        def after_step(self, trainer, step, outputs):
            trainer.load_state_dict(state)

    with pytest.raises(D5Error, match="while the trainer runs"):
        _resumable(events=[LoadsWhileRunning()]).run(1)


def test_after_step_sees_the_step_counted_and_the_position_in_the_epoch():
    class Positions(TrainerEvent):
        def __init__(self):
            self.seen = []

        def after_step(self, trainer, step, outputs):
            self.seen.append((trainer.epoch, step, trainer.steps, trainer.position))

    positions = Positions()
    make_trainer(events=[positions]).run(2)  # 3 batches per epoch
    assert positions.seen == [(epoch, 3 * epoch + i, 3 * epoch + i + 1, i + 1) for epoch in range(2) for i in range(3)]


def test_hook_order_and_skip_hooks():
    calls = []

    class Named(TrainerEvent):
        def __init__(self, name, order=0, skip=()):
            self.name, self.hook_order, self.skip_hooks = name, order, frozenset(skip)

        def after_step(self, trainer, step, outputs):
            calls.append((self.name, step))

    make_trainer(events=[Named("last", 10), Named("first"), Named("skipped", skip=["after_step"]),
                         Named("second")]).run(1)
    assert calls[:4] == [("first", 0), ("second", 0), ("last", 0), ("first", 1)]
    assert not any(name == "skipped" for name, _ in calls)


def test_early_stopping_ends_a_diverging_run_at_the_last_finite_parameters():
    from d5.training.early_stopping import EarlyStopping

    class PoisonStep(TrainerEvent):
        def before_step(self, trainer, step, inputs):
            if step == 4:
                self.before = {name: value.copy() for name, value in trainer.executor.network.tensors.items()}
                inputs["input"][0, 0] = np.nan

    poison, stop = PoisonStep(), EarlyStopping(monitor="test_loss")
    trainer = make_trainer(events=[poison, stop])
    stats = trainer.run(3)
    assert stats.diverged and stats.stopped_early and trainer.steps == 4 and stats.steps == 4
    assert stop.reason.startswith("diverged at step 4") and stats.stop_reason.startswith("EarlyStopping: diverged")
    for name in ("W", "b"):  # the diverging step's update was refused
        np.testing.assert_array_equal(trainer.executor.network.tensors[name], poison.before[name])
    assert stats.epochs == 2 and stats.test_loss[-1] is not None and np.isfinite(stats.test_loss[-1])
    with pytest.raises(DivergenceError):  # stop_on_divergence=False: the error propagates as without it
        make_trainer(events=[PoisonStep(), EarlyStopping(patience=3, stop_on_divergence=False)]).run(3)


def test_forward_backward_timing_wraps_the_executor_only_for_the_run():
    from d5.training.breakdown import PhaseBreakdown

    trainer = make_trainer(events=[PhaseBreakdown()])
    method = trainer.executor.inference_and_backprop
    trainer.run(1)
    assert trainer.forward_backward_time > 0
    assert "inference_and_backprop" not in vars(trainer.executor)
    assert trainer.executor.inference_and_backprop == method

    class Fails(TrainerEvent):
        def after_step(self, trainer, step, outputs):
            raise RuntimeError("boom")

    failing = make_trainer(events=[PhaseBreakdown(), Fails()])
    with pytest.raises(RuntimeError, match="boom"):
        failing.run(1)
    assert "inference_and_backprop" not in vars(failing.executor)  # restored on the error too


def test_on_error_lets_events_clean_up_and_the_error_propagates():
    class Cleanup(TrainerEvent):
        errors = []

        def on_error(self, trainer, error):
            self.errors.append(type(error).__name__)
            raise ValueError("a failing cleanup must not hide the error")

    class Fails(TrainerEvent):
        def after_step(self, trainer, step, outputs):
            raise KeyError("original")

    with pytest.raises(KeyError, match="original"):
        make_trainer(events=[Cleanup(), Fails()], progress=True).run(1)
    assert Cleanup.errors == ["KeyError"]
