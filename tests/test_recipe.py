"""Recipes: component validation, the seeds' spellings, overrides and the exit code of a recipe script."""
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import d5
from d5.errors import RecipeError

ROOT = Path(__file__).resolve().parents[1]


def separable_data(n=512, seed=0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n).astype(np.int64)
    x = rng.normal(size=(n, 1, 28, 28)).astype(np.float32)
    x[y == 1, :, :14] += 1.0  # class 1 has a brighter top half
    return lambda: (d5.NumpyDataset(x[: n // 2], y[: n // 2]), d5.NumpyDataset(x[n // 2:], y[n // 2:]))


FIXED = {"model": "lenet5", "model_kwarg": {"num_classes": 2}, "epochs": 2}


def mutable(**extra):
    return {"dataset": separable_data(), "batch_size": 32, "optimizer": d5.MomentumOptimizer,
            "optimizer_args": (0.05, 0.9), **extra}


def test_recipe_meets_and_misses_thresholds():
    assert d5.run_recipe(FIXED, mutable(), [(d5.TestAccuracy(), 70.0)], argv=[], progress=False, verbose=False)
    assert not d5.run_recipe(FIXED, mutable(), [(d5.TestAccuracy(), 100.1)], argv=[], progress=False, verbose=False)


def test_overlapping_components_are_rejected():
    with pytest.raises(RecipeError, match="both FIXED and MUTABLE"):
        d5.run_recipe(FIXED, mutable(epochs=1), [], argv=[])
    # The seeds' spelling `_kwarg` and `_kwargs` name the same component.
    with pytest.raises(RecipeError, match="both"):
        d5.run_recipe(FIXED, mutable(model_kwargs={"num_classes": 2}), [], argv=[])


def test_unknown_component_and_bad_metric_are_rejected():
    with pytest.raises(RecipeError, match="unknown component 'optimiser'"):
        d5.run_recipe(FIXED, {"optimiser": d5.GradientDescent}, [], argv=[])
    with pytest.raises(RecipeError, match="TrainingMetric"):
        d5.run_recipe(FIXED, mutable(), [("accuracy", 90)], argv=[])
    with pytest.raises(RecipeError, match="--epochs must be positive"):
        d5.run_recipe(FIXED, mutable(), [], argv=["--epochs", "0"])


def test_overrides_change_the_run_and_are_reported(capsys, tmp_path):
    out = tmp_path / "run.json"
    metric = d5.WallclockTime()
    d5.run_recipe(FIXED, mutable(), [(metric, None)], argv=["--epochs", "1", "--subset", "64", "--json", str(out)],
                  progress=False)
    assert len(metric.step_times) == 64 // 32  # one epoch of 64 examples at batch 32
    assert "not a valid benchmark result" in capsys.readouterr().out
    result = d5.bench.results.read_result(out)
    assert result["extra"]["overrides"] == {"epochs": 1, "subset": 64}


def test_recipe_script_exit_code_smoke_run():
    pytest.importorskip("d5._C")
    try:
        d5.datasets.load_fashion_mnist(download=False)
    except d5.errors.DatasetError:
        pytest.skip("Fashion-MNIST is not installed")
    script = ROOT / "recipes" / "fashion_mnist_lenet.py"
    # A 500-image, one-epoch smoke run cannot reach 87%: the recipe must say so with exit code 1.
    result = subprocess.run([sys.executable, str(script), "--epochs", "1", "--subset", "500"],
                            capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert result.returncode == 1, result.stderr
    assert "TestAccuracy" in result.stdout and "recipe FAILED" in result.stdout
