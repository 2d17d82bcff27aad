"""A recipe killed with SIGKILL mid-epoch and resumed with --resume ends where an uninterrupted run ends: bitwise on
the reference framework, within tolerance on every native framework installed (``d5.frameworks.available()``); it
loses only the steps since the last checkpoint."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import d5.frameworks
from d5.training.checkpoint import checkpoints_in, load_checkpoint

RECIPE = Path(__file__).parent / "killable_recipe.py"
# 256 examples, batch 32: 4 steps per epoch; 3 epochs = 12 steps, a checkpoint every 3 (the last at step 12).
ARGS = ["--epochs", "3", "--checkpoint-every", "3"]


def run(directory: Path, *extra: str, kill_at: int | None = None, framework: str = "reference"):
    env = {k: v for k, v in os.environ.items() if k != "D5_TEST_KILL_AT_STEP"}
    if kill_at is not None:
        env["D5_TEST_KILL_AT_STEP"] = str(kill_at)
    return subprocess.run([sys.executable, str(RECIPE), *ARGS, "--framework", framework, "--checkpoint",
                           str(directory), *extra], capture_output=True, text=True, env=env, timeout=300)


def final_state(directory: Path) -> dict:
    last = checkpoints_in(directory)[-1]
    assert last.name == "step-000000012.d5ckpt", [p.name for p in checkpoints_in(directory)]
    return load_checkpoint(last).state


@pytest.mark.parametrize("framework", d5.frameworks.available())
def test_a_killed_run_resumes_to_the_uninterrupted_result(tmp_path, framework):
    straight = run(tmp_path / "straight", framework=framework)
    assert straight.returncode == 0, straight.stderr[-2000:]

    killed = run(tmp_path / "killed", kill_at=7, framework=framework)  # mid-epoch 2; last checkpoint at step 6
    assert killed.returncode == -signal.SIGKILL
    assert [p.name for p in checkpoints_in(tmp_path / "killed")][-1] == "step-000000006.d5ckpt"
    resumed = run(tmp_path / "killed", "--resume", framework=framework)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resuming from the checkpoint at step 6" in resumed.stdout

    want, got = final_state(tmp_path / "straight"), final_state(tmp_path / "killed")
    assert sorted(want["network"]) == sorted(got["network"])
    for name, value in want["network"].items():
        if framework == "reference":
            np.testing.assert_array_equal(got["network"][name], value, err_msg=name)
        else:  # native kernels (torch, TensorFlow) are deterministic here too, but the contract promises a tolerance
            np.testing.assert_allclose(got["network"][name], value, rtol=1e-5, atol=1e-6, err_msg=name)


def test_resume_without_a_checkpoint_starts_afresh_and_flags_are_checked(tmp_path):
    fresh = run(tmp_path / "empty", "--resume")
    assert fresh.returncode == 0 and "starting afresh" in fresh.stdout
    bad = subprocess.run([sys.executable, str(RECIPE), "--resume"], capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "--resume needs --checkpoint DIR" in bad.stderr


def test_a_checkpoint_of_another_recipe_is_refused(tmp_path):
    done = run(tmp_path / "ckpt")
    assert done.returncode == 0, done.stderr[-2000:]
    other = subprocess.run([sys.executable, str(Path(__file__).parent.parent.parent / "recipes" / "digits_mlp.py"),
                            "--epochs", "1", "--checkpoint", str(tmp_path / "ckpt"), "--resume"],
                           capture_output=True, text=True, timeout=300)
    if "No such file" in other.stderr:
        pytest.skip("recipes/digits_mlp.py not present")
    assert other.returncode != 0 and "checkpoint is of another network" in other.stderr
