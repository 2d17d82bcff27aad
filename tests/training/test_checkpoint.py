"""Checkpoints: exact round trip of any state, random streams, refusal of foreign or damaged files, atomicity."""
from __future__ import annotations

import os
import random
import subprocess
import sys
import textwrap
import zipfile

import numpy as np
import pytest

import d5
from d5.errors import CheckpointError
from d5.frameworks import reference
from d5.training.checkpoint import (Checkpoint, checkpoint_path, checkpoints_in, latest_checkpoint, load_checkpoint,
                                    restore_checkpoint, save_checkpoint)


class Stateful:
    """A component with the state protocol, holding awkward values."""

    def __init__(self, state=None):
        self.state = state

    def state_dict(self):
        return self.state

    def load_state_dict(self, state):
        self.state = state


def mlp():
    return d5.models.mlp((4,), hidden=(3,), num_classes=2, seed=0)


def test_a_state_round_trips_exactly(tmp_path):
    awkward = {"tuple": (1, 2.5, "x"), "ints": {3: np.arange(3), 7: None}, "scalar": np.float32(1.25),
               "big": 2 ** 100, "bytes": b"\x00\xff", "floats": [float("nan"), float("inf"), -0.0, 0.1],
               "array": np.random.default_rng(0).standard_normal((2, 3)).astype(np.float16),
               "nested": [{"a": (np.int64(4),)}], "__reserved": 1}
    executor = reference.from_model(mlp())
    path = save_checkpoint(tmp_path / "c.d5ckpt", executor, step=3, extra=Stateful(awkward))
    back = load_checkpoint(path).state["extra"]
    assert back["tuple"] == (1, 2.5, "x") and isinstance(back["tuple"], tuple)
    assert set(back["ints"]) == {3, 7} and back["ints"][3].tolist() == [0, 1, 2]
    assert type(back["scalar"]) is np.float32 and back["scalar"] == np.float32(1.25)
    assert back["big"] == 2 ** 100 and back["bytes"] == b"\x00\xff"
    assert np.isnan(back["floats"][0]) and back["floats"][1:3] == [float("inf"), -0.0] and back["floats"][3] == 0.1
    assert np.copysign(1.0, back["floats"][2]) == -1.0
    assert back["array"].dtype == np.float16 and np.array_equal(back["array"], awkward["array"])
    assert type(back["nested"][0]["a"][0]) is np.int64 and back["__reserved"] == 1


def test_parameters_and_running_statistics_are_restored(tmp_path):
    executor = reference.from_model(d5.models.resnet(8, seed=0))
    batch = {"input": np.random.default_rng(0).standard_normal((2, 3, 32, 32)).astype(np.float32),
             "label": np.array([1, 2])}
    optimizer = d5.MomentumOptimizer(executor, lr=0.1)
    optimizer.step(batch)
    names = list(executor.graph.params)
    saved = [v.copy() for v in executor.network.fetch_tensors(names)]
    path = save_checkpoint(tmp_path / "c.d5ckpt", executor, step=1)
    optimizer.step(batch)  # moves weights and BatchNorm's running statistics
    fresh = reference.from_model(d5.models.resnet(8, seed=1))
    restore_checkpoint(load_checkpoint(path), fresh)
    for name, value in zip(names, fresh.network.fetch_tensors(names)):
        np.testing.assert_array_equal(value, saved[names.index(name)], err_msg=name)


def dropout_net():
    net = d5.Network("dropout")
    net.add_input("x", ("N", 8), "float32")
    net.add_node("Dropout", ["x", "ratio"], ["y"])
    net.add_param("ratio", np.array(0.5, np.float32), trainable=False)
    net.add_output("y")
    return net


@pytest.mark.parametrize("framework", ["reference", "pytorch"])
def test_random_streams_continue_where_they_were(tmp_path, framework):
    if framework == "pytorch":
        pytest.importorskip("torch")
    module = __import__(f"d5.frameworks.{framework}", fromlist=["from_model"])
    executor = module.from_model(dropout_net())
    x = {"x": np.ones((4, 8), np.float32)}
    executor.inference_and_backprop(x, "y")
    path = save_checkpoint(tmp_path / "c.d5ckpt", executor, step=1)
    expected = ([executor.inference_and_backprop(x, "y")["y"] for _ in range(2)], random.random(),
                np.random.random())
    for _ in range(3):  # move every stream on
        executor.inference_and_backprop(x, "y"), random.random(), np.random.random()
    restore_checkpoint(load_checkpoint(path), executor)
    again = ([executor.inference_and_backprop(x, "y")["y"] for _ in range(2)], random.random(), np.random.random())
    for want, got in zip(expected[0], again[0]):
        np.testing.assert_array_equal(want, got)
    assert expected[1:] == again[1:]


def test_a_checkpoint_of_another_network_is_refused_naming_the_difference(tmp_path):
    path = save_checkpoint(tmp_path / "c.d5ckpt", reference.from_model(mlp()), step=1)
    other = reference.from_model(d5.models.mlp((4,), hidden=(5,), num_classes=2))
    before = other.network.fetch_tensor("fc2.weight").copy()
    with pytest.raises(CheckpointError, match=r"another network.*'fc2.weight' is \(3, 4\) float32 there, \(5, 4\)"):
        restore_checkpoint(load_checkpoint(path), other)
    np.testing.assert_array_equal(other.network.fetch_tensor("fc2.weight"), before)  # nothing changed


def test_damaged_files_are_refused(tmp_path):
    path = save_checkpoint(tmp_path / "c.d5ckpt", reference.from_model(mlp()), step=1)
    data = path.read_bytes()
    (tmp_path / "truncated.d5ckpt").write_bytes(data[:len(data) // 2])
    with pytest.raises(CheckpointError, match="corrupt or truncated"):
        load_checkpoint(tmp_path / "truncated.d5ckpt")
    with zipfile.ZipFile(path) as archive:  # flip one byte inside an array member: its CRC no longer matches
        info = archive.getinfo("arrays/a0.npy")
    flipped = bytearray(data)
    flipped[info.header_offset + 30 + len(info.filename) + 100] ^= 0xFF
    (tmp_path / "flipped.d5ckpt").write_bytes(bytes(flipped))
    with pytest.raises(CheckpointError, match="corrupt"):
        load_checkpoint(tmp_path / "flipped.d5ckpt")
    (tmp_path / "text.d5ckpt").write_text("not a checkpoint")
    with pytest.raises(CheckpointError, match="corrupt"):
        load_checkpoint(tmp_path / "text.d5ckpt")
    with pytest.raises(CheckpointError, match="no checkpoint"):
        load_checkpoint(tmp_path / "missing.d5ckpt")


def test_a_newer_format_is_refused(tmp_path, monkeypatch):
    import d5.training.checkpoint as module

    monkeypatch.setattr(module, "FORMAT_VERSION", 99)
    path = save_checkpoint(tmp_path / "c.d5ckpt", reference.from_model(mlp()), step=1)
    monkeypatch.setattr(module, "FORMAT_VERSION", 1)
    with pytest.raises(CheckpointError, match="format 99.*newer"):
        load_checkpoint(path)


def test_a_write_that_fails_leaves_the_previous_checkpoint_intact(tmp_path):
    """A file-size limit makes the second save fail half-way (as a full disk would): no partial file appears,
    and the first checkpoint still loads."""
    first = checkpoint_path(tmp_path, 1)
    save_checkpoint(first, reference.from_model(mlp()), step=1)
    script = textwrap.dedent(f"""
        import resource, d5
        from d5.frameworks import reference
        from d5.training.checkpoint import save_checkpoint, checkpoint_path
        executor = reference.from_model(d5.models.lenet5())      # ~250 kB of parameters
        resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))
        save_checkpoint(checkpoint_path({str(tmp_path)!r}, 2), executor, step=2)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "File too large" in done.stderr
    assert checkpoints_in(tmp_path) == [first] and sorted(os.listdir(tmp_path)) == [first.name]
    assert load_checkpoint(latest_checkpoint(tmp_path)).step == 1


def test_the_event_keeps_the_newest_checkpoints(tmp_path):
    executor = reference.from_model(mlp())

    class FakeTrainer:
        def __init__(self):
            self.executor, self.steps = executor, 0

        def state_dict(self):
            return {"steps": self.steps}

    trainer, event = FakeTrainer(), Checkpoint(tmp_path, every_steps=2, keep_last=2)
    for step in range(1, 8):
        trainer.steps = step
        event.after_step(trainer, step - 1, {})
    assert [p.name for p in checkpoints_in(tmp_path)] == ["step-000000004.d5ckpt", "step-000000006.d5ckpt"]
    assert load_checkpoint(latest_checkpoint(tmp_path)).state["trainer"] == {"steps": 6}
    with pytest.raises(d5.errors.D5Error, match="every_steps"):
        Checkpoint(tmp_path, every_steps=0)
