"""Events: early stopping against an independent re-implementation of its rules on real runs, schedules
reaching the optimizer (and torch), loggers that never leave a truncated file (file-size limit and SIGKILL in
a subprocess), state round trips."""
from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import d5
from d5.errors import CheckpointError, D5Error
from d5.training.dataset import NumpyDataset
from d5.training.early_stopping import EarlyStopping
from d5.training.events import (CSVLogger, HyperparameterSchedule, JSONLogger, LearningRateSchedule, StopAfter,
                                TrainerEvent, read_csv_log)
from d5.training.optimizers import GradientDescent
from d5.training.sampler import OrderedSampler, ShuffleSampler
from d5.training.trainer import EpochStats, Trainer

reference = pytest.importorskip("d5.frameworks.reference")


def blobs(n, seed, spread=2.5):
    """Three overlapping Gaussian blobs in 4-D (float32), so losses keep moving for a while."""
    centers = np.array([[2.0, 0, 0, 0], [0, 2.0, 0, 0], [0, 0, 2.0, 0]])
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 3, n)
    return NumpyDataset((centers[labels] + spread * rng.standard_normal((n, 4))).astype(np.float32), labels)


def make_trainer(events=(), lr=0.05, validation=True, optimizer_kwargs=None):
    executor = reference.from_model(d5.models.mlp((4,), hidden=(8,), num_classes=3, seed=0))
    optimizer = GradientDescent(executor, lr=lr, **(optimizer_kwargs or {}))
    train = ShuffleSampler(blobs(64, seed=1), 16, seed=0)
    test = OrderedSampler(blobs(60, seed=2), 30) if validation else None
    return Trainer(train, test, executor, optimizer, events=list(events), progress=False)


# --- early stopping -------------------------------------------------------------------------------------------

def expected_stop(values, mode, target=None, patience=None, min_delta=0.0):
    """Oracle: the 0-based epoch after which the rules stop, or None (written from the rules' statement)."""
    best, waited = None, 0
    for epoch, value in enumerate(values):
        better = best is None or (value > best + min_delta if mode == "max" else value < best - min_delta)
        if better:
            best, waited = value, 0
        else:
            waited += 1
        if target is not None and (value >= target if mode == "max" else value <= target):
            return epoch
        if patience is not None and waited >= patience:
            return epoch
    return None


def test_patience_and_min_delta_stop_where_the_rules_say():
    history = make_trainer(lr=0.3).run(25).test_loss  # an unstopped run: the oracle's input
    for patience, min_delta in ((1, 0.0), (2, 0.001), (3, 0.01), (2, 0.05)):
        stop_epoch = expected_stop(history, "min", patience=patience, min_delta=min_delta)
        stop = EarlyStopping("test_loss", patience=patience, min_delta=min_delta)
        stats = make_trainer([stop], lr=0.3).run(25)
        assert stats.test_loss == history[:stats.epochs]  # the same run, cut short
        if stop_epoch is None:
            assert stats.epochs == 25 and stop.reason is None
        else:
            assert stats.epochs == stop_epoch + 1 and stats.stopped_early, (patience, min_delta)
            assert "did not improve" in stop.reason and stats.stop_reason.startswith("EarlyStopping")
            assert stop.best == min(history[:stop_epoch + 1]) and history[stop.best_epoch] == stop.best


def test_target_stops_after_the_first_epoch_that_reaches_it():
    history = make_trainer(lr=0.3).run(20).test_accuracy
    target = sorted(history)[len(history) // 2]  # reached somewhere in the middle
    stop = EarlyStopping("test_accuracy", target=target)
    stats = make_trainer([stop], lr=0.3).run(20)
    assert stats.epochs == expected_stop(history, "max", target=target) + 1
    assert "reached the target" in stop.reason and stop.stopped_epoch == stats.epochs - 1


def test_time_budget_is_checked_after_every_step():
    stats = make_trainer([EarlyStopping("train_loss", time_budget=1e-9)]).run(5)
    assert stats.steps == 1 and "time budget" in stats.stop_reason


def test_divergence_without_the_optimizers_check_is_caught_after_the_step():
    class Poison(TrainerEvent):
        def before_step(self, trainer, step, inputs):
            if step == 2:
                inputs["input"][:] = np.inf

    stop = EarlyStopping("train_loss", patience=100)
    trainer = make_trainer([Poison(), stop], optimizer_kwargs={"check_divergence": False})
    stats = trainer.run(3)
    assert stats.steps == 3 and stats.stopped_early and "update was applied" in stop.reason
    assert stop.skip_hooks == frozenset()  # it had to watch every step


def test_early_stopping_watches_steps_only_when_it_must():
    stop = EarlyStopping("test_accuracy", patience=2)
    make_trainer([stop]).run(1)
    assert "after_step" in stop.skip_hooks  # the optimizer checks divergence itself and there is no budget


def test_a_resumed_epoch_reported_twice_counts_once():
    stop = EarlyStopping("train_loss", patience=2)
    trainer = make_trainer([stop])
    stats = [EpochStats(epoch=epoch, steps=1, samples=1, train_loss=loss) for epoch, loss in
             enumerate([1.0, 0.9, 0.95])]
    stop.before_training(trainer)
    for epoch_stats in stats:
        stop.after_epoch(trainer, epoch_stats.epoch, epoch_stats)
    assert (stop.best, stop.bad_epochs) == (0.9, 1)
    restored = EarlyStopping("train_loss", patience=2)
    restored.load_state_dict(stop.state_dict())
    # epoch 2 again (its complete record after a resume): replaces the partial one instead of adding to it
    assert restored.after_epoch(trainer, 2, EpochStats(epoch=2, steps=2, samples=2, train_loss=0.8)) is None
    assert (restored.best, restored.best_epoch, restored.bad_epochs) == (0.8, 2, 0)
    with pytest.raises(CheckpointError, match="monitor"):
        EarlyStopping("test_loss", patience=2).load_state_dict(stop.state_dict())


@pytest.mark.parametrize("make_bad", [
    lambda: EarlyStopping("accuracy"),
    lambda: EarlyStopping(patience=0),
    lambda: EarlyStopping(time_budget=-1),
    lambda: EarlyStopping(min_delta=float("nan")),
    lambda: EarlyStopping(stop_on_divergence=False),
    lambda: make_trainer([EarlyStopping("test_loss", patience=1)], validation=False).run(1),
])
def test_early_stopping_bad_arguments(make_bad):
    with pytest.raises(D5Error):
        make_bad()


# --- schedules --------------------------------------------------------------------------------------------------

class CosineSchedule:
    """A schedules.py-style callable: step -> lr, declaring itself per-step."""

    per = "step"

    def __init__(self, base, steps):
        self.base, self.steps = base, steps

    def __call__(self, step):
        return 0.5 * self.base * (1 + math.cos(math.pi * min(step, self.steps) / self.steps))


class SeenBy(TrainerEvent):
    def __init__(self, read):
        self.read, self.seen = read, []

    def after_step(self, trainer, step, outputs):
        self.seen.append(self.read(trainer))


def test_a_per_step_callable_sets_lr_before_every_step():
    cosine = CosineSchedule(0.1, 12)
    schedule, seen = LearningRateSchedule(cosine), SeenBy(lambda trainer: trainer.optimizer.lr)
    assert schedule.per == "step"
    make_trainer([schedule, seen]).run(3)  # 4 steps per epoch
    assert seen.seen == [cosine(step) for step in range(12)] == schedule.history


def test_d5_schedules_run_per_step_and_continue_after_a_resume():
    schedules = pytest.importorskip("d5.training.schedules")
    warm_cosine = schedules.WarmupSchedule(schedules.CosineSchedule(0.1, period=12), warmup_steps=3)
    straight, seen = LearningRateSchedule(warm_cosine), SeenBy(lambda trainer: trainer.optimizer.lr)
    make_trainer([straight, seen]).run(3)
    assert straight.per == "step" and seen.seen == [warm_cosine(step) for step in range(12)]
    stopped = make_trainer([LearningRateSchedule(warm_cosine)])
    stopped.run(3, events=[StopAfter(steps=5)])
    resumed, resumed_seen = LearningRateSchedule(warm_cosine), SeenBy(lambda trainer: trainer.optimizer.lr)
    trainer = make_trainer([resumed, resumed_seen])
    trainer.load_state_dict(stopped.state_dict())
    trainer.run(3)
    assert resumed_seen.seen == seen.seen[5:] and resumed.history == straight.history


def test_the_schedule_reaches_torchs_parameter_groups():
    pytorch = pytest.importorskip("d5.frameworks.pytorch")
    executor = pytorch.from_model(d5.models.mlp((4,), hidden=(8,), num_classes=3, seed=0))
    optimizer = pytorch.MomentumOptimizer(executor, lr=0.1, momentum=0.9)
    cosine = CosineSchedule(0.1, 8)
    seen = SeenBy(lambda trainer: trainer.optimizer.torch_optimizer.param_groups[0]["lr"])
    momentum = HyperparameterSchedule("momentum", lambda epoch: 0.5 + 0.2 * epoch)
    momentum_seen = SeenBy(lambda trainer: trainer.optimizer.torch_optimizer.param_groups[0]["momentum"])
    Trainer(ShuffleSampler(blobs(64, seed=1), 16, seed=0), None, executor, optimizer,
            events=[LearningRateSchedule(cosine), seen, momentum, momentum_seen], progress=False).run(2)
    assert seen.seen == pytest.approx([cosine(step) for step in range(8)], rel=0, abs=0)
    assert momentum_seen.seen == pytest.approx([0.5] * 4 + [0.7] * 4)


def test_schedule_state_round_trip_and_refusal():
    schedule = LearningRateSchedule(lambda epoch: 0.1 / (epoch + 1))
    make_trainer([schedule]).run(3)
    restored = LearningRateSchedule(lambda epoch: 0.1 / (epoch + 1))
    restored.load_state_dict(schedule.state_dict())
    assert restored.history == schedule.history == [0.1, 0.05, 0.1 / 3]
    with pytest.raises(CheckpointError, match="per"):
        LearningRateSchedule(lambda step: 0.1, per="step").load_state_dict(schedule.state_dict())
    with pytest.raises(CheckpointError, match="not a StopAfter"):
        StopAfter(steps=3).load_state_dict(schedule.state_dict())


def test_stop_after_seconds_counts_the_time_before_a_resume():
    stop = StopAfter(seconds=100.0)
    stop.load_state_dict({"kind": "StopAfter", "version": 1, "elapsed": 99.999999})
    trainer = make_trainer([stop])
    trainer.load_state_dict(trainer.state_dict())  # resume a run that has not started: the same position
    assert trainer.run(3).steps == 1


# --- loggers ----------------------------------------------------------------------------------------------------

def test_csv_rows_are_appended_and_read_back(tmp_path):
    path = tmp_path / "log.csv"

    class Inode(TrainerEvent):
        hook_order = 1

        def __init__(self):
            self.inodes = []

        def after_epoch(self, trainer, epoch, stats):
            self.inodes.append(os.stat(path).st_ino)

    inode = Inode()
    stats = make_trainer([CSVLogger(path), inode]).run(4)
    assert len(set(inode.inodes)) == 1  # the file written at the start grows by appends (no renames)
    rows = read_csv_log(path)
    assert [row["epoch"] for row in rows] == [0, 1, 2, 3]
    assert [row["train_loss"] for row in rows] == stats.train_loss  # repr of a float reads back exactly
    assert [row["test_accuracy"] for row in rows] == stats.test_accuracy
    with open(path, "a") as handle:  # a crash in the middle of a row leaves it unterminated
        handle.write("4,4,64,0.5")
    assert len(read_csv_log(path)) == 4


def _run_script(body, tmp_path, **kwargs):
    script = textwrap.dedent("""
        import resource, numpy as np, d5
        from d5.frameworks import reference
        from d5.training.dataset import NumpyDataset
        from d5.training.events import CSVLogger, JSONLogger
        from d5.training.sampler import ShuffleSampler, OrderedSampler
        from d5.training.trainer import Trainer

        def trainer(events, examples=64, validation=True):
            rng = np.random.default_rng(0)
            data = NumpyDataset(rng.standard_normal((examples, 4)).astype(np.float32), rng.integers(0, 3, examples))
            executor = reference.from_model(d5.models.mlp((4,), hidden=(8,), num_classes=3, seed=0))
            return Trainer(ShuffleSampler(data, 16, seed=0), OrderedSampler(data, 32) if validation else None,
                           executor, d5.GradientDescent(executor, lr=0.05), events=events, progress=False)
    """) + textwrap.dedent(body).format(tmp=str(tmp_path))
    return subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, **kwargs)


def test_a_file_size_limit_never_leaves_a_partial_row_or_document(tmp_path):
    """RLIMIT_FSIZE makes a write fail part-way, as a full disk does."""
    csv_run = _run_script("""
        resource.setrlimit(resource.RLIMIT_FSIZE, (900, 900))
        trainer([CSVLogger("{tmp}/log.csv")]).run(50)
    """, tmp_path)
    json_run = _run_script("""
        resource.setrlimit(resource.RLIMIT_FSIZE, (3000, 3000))
        trainer([JSONLogger("{tmp}/log.json")]).run(50)
    """, tmp_path)
    _, csv_error = csv_run.communicate(timeout=120)
    _, json_error = json_run.communicate(timeout=120)
    assert csv_run.returncode != 0 and "cut back to its last complete row" in csv_error, csv_error[-2000:]
    text = (tmp_path / "log.csv").read_text()
    assert text.endswith("\n") and len(text) <= 900
    rows = read_csv_log(tmp_path / "log.csv")
    assert len(rows) >= 2 and [row["epoch"] for row in rows] == list(range(len(rows)))  # appends happened
    assert all(len(line.split(",")) == len(rows[0]) for line in text.splitlines())
    assert json_run.returncode != 0 and "previous version of the file is intact" in json_error, json_error[-2000:]
    document = json.loads((tmp_path / "log.json").read_text())
    assert len(document["epochs"]) >= 2 and document["summary"] is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log.csv", "log.json"]  # no temporary files


def test_a_killed_run_leaves_whole_files(tmp_path):
    run = _run_script("""
        import sys
        print("started", flush=True)
        trainer([CSVLogger("{tmp}/log.csv"), JSONLogger("{tmp}/log.json")], examples=16, validation=False).run(10**6)
    """, tmp_path)
    assert run.stdout.readline().strip() == "started"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (tmp_path / "log.json").exists():
        time.sleep(0.05)
    time.sleep(0.7)  # hundreds of writes later
    run.send_signal(signal.SIGKILL)
    run.communicate(timeout=60)
    assert run.returncode == -signal.SIGKILL
    text = (tmp_path / "log.csv").read_text()
    assert text.endswith("\n")
    lines = text.splitlines()
    assert len(lines) > 2 and all(len(line.split(",")) == len(lines[0].split(",")) for line in lines)
    epochs = json.loads((tmp_path / "log.json").read_text())["epochs"]
    assert epochs and [record["epoch"] for record in epochs] == list(range(len(epochs)))
    # a new run in that directory removes what the kill may have left half-written beside the files
    make_trainer([JSONLogger(tmp_path / "log.json"), CSVLogger(tmp_path / "log.csv")]).run(1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log.csv", "log.json"]


def test_logger_states_round_trip(tmp_path):
    logger = JSONLogger(tmp_path / "a.json")
    make_trainer([logger]).run(2)
    again = JSONLogger(tmp_path / "b.json")
    again.load_state_dict(logger.state_dict())
    assert again.records == logger.records and len(again.records) == 2
    with pytest.raises(CheckpointError):
        CSVLogger(tmp_path / "c.csv").load_state_dict(logger.state_dict())
