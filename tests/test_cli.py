"""The d5 command: `d5 run` (by path or name, `d5 recipe` its alias), `d5 run --replay` (bitwise the recorded
run; refused, with the reason, when it cannot be), and `d5 info` (MPI and the thread settings, checked against
mpi4py's metadata, threadpoolctl and torch)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

import d5
from d5.bench.results import read_result, write_result
from d5.cli import main
from d5.errors import RecipeError

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "tests" / "recipes" / "tiny_mlp_recipe.py"


def run_tiny(tmp_path, *overrides, name="run.json"):
    out = tmp_path / name
    assert main(["run", str(TINY), *overrides, "--json", str(out)]) == 0
    return out


@pytest.fixture
def recorded(tmp_path):
    """A run of the tiny recipe with overrides, and its result."""
    return run_tiny(tmp_path, "--epochs", "3", "--lr", "0.1", "--threads", "1", "--batch-size", "16")


# --- d5 run ---------------------------------------------------------------------------------------------------

def test_run_records_the_configuration_the_seeds_and_the_git_state(recorded):
    document = read_result(recorded)
    extra = document["extra"]
    assert extra["recipe_format"] == 1 and extra["passed"] is True
    assert extra["argv"] == ["--epochs", "3", "--batch-size", "16", "--lr", "0.1", "--threads", "1"]
    assert extra["overrides"] == {"epochs": 3, "batch_size": 16, "lr": 0.1}  # --threads is not a modification
    assert extra["seeds"] == {"recipe": 0} and document["environment"]["seeds"] == {"recipe": 0}
    assert extra["git"]["commit"] == document["environment"]["git"]["commit"]
    source = extra["recipe"]["source"]
    assert source["path"] == str(TINY) and source["text"] == TINY.read_text() and source["name"] == "tiny_mlp_recipe"
    components = extra["recipe"]["components"]
    assert components["model"] == "mlp" and components["epochs"] == 3 and components["batch_size"] == 16
    assert components["model_kwargs"] == {"input_shape": [8], "hidden": [16], "num_classes": 2}
    assert components["optimizer"] == {"callable": "d5.training.optimizers.MomentumOptimizer"}
    assert components["optimizer_args"] == [0.1, 0.9]  # --lr replaced the recipe's 0.05
    assert components["dataset"] == {"callable": "__main__.blobs"}
    assert components["validation_sampler"] == {"callable": "d5.training.sampler.OrderedSampler"}  # a default
    origin = extra["recipe"]["origin"]
    assert (origin["model"], origin["batch_size"], origin["epochs"], origin["validation_sampler"]) == \
        ("fixed", "override", "override", "default")
    assert [m["name"] for m in extra["recipe"]["metrics"]] == ["TestAccuracy", "WallclockTime", "Throughput"]
    assert extra["recipe"]["metrics"][0]["metric"]["attributes"]["value"] is None  # configuration, not results


def test_run_finds_a_recipe_by_name_and_recipe_is_an_alias(monkeypatch, tmp_path, capsys):
    (tmp_path / "recipes").mkdir()
    shutil.copy(TINY, tmp_path / "recipes" / "my_tiny.py")
    monkeypatch.chdir(tmp_path)
    assert main(["run", "my_tiny", "--json", "by_name.json"]) == 0
    assert main(["recipe", "my_tiny"]) == 0
    assert read_result(tmp_path / "by_name.json")["extra"]["recipe"]["source"]["name"] == "my_tiny"
    assert main(["run", "no_such_recipe"]) == 2
    error = capsys.readouterr().err
    assert "d5: error: no recipe 'no_such_recipe'" in error and "my_tiny" in error and "mnist_lenet" in error


def test_run_json_before_the_recipe_reaches_the_recipe(tmp_path):
    out = tmp_path / "first.json"
    assert main(["run", "--json", str(out), str(TINY), "--batch-size", "16"]) == 0
    assert read_result(out)["extra"]["batch_size"] == 16


# --- d5 run --replay --------------------------------------------------------------------------------------------

def test_replay_reruns_exactly_the_recorded_configuration(recorded, tmp_path, capsys):
    again = tmp_path / "again.json"
    assert main(["run", "--replay", str(recorded), "--json", str(again)]) == 0
    original, replayed = read_result(recorded)["extra"], read_result(again)["extra"]
    # Same components, overrides and seed: the same training, bit for bit.
    assert replayed["training"]["train_loss"] == original["training"]["train_loss"]
    assert replayed["training"]["test_accuracy"] == original["training"]["test_accuracy"]
    assert replayed["recipe"]["components"] == original["recipe"]["components"]
    assert replayed["argv"] == original["argv"] and replayed["replay_of"] == str(recorded)
    assert replayed["threads"] == 1 and replayed["lr"] == 0.1


def test_replay_of_a_replay_is_the_same_run(recorded, tmp_path):
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    assert main(["run", "--replay", str(recorded), "--json", str(first)]) == 0
    assert main(["run", "--replay", str(first), "--json", str(second)]) == 0
    losses = [read_result(path)["extra"]["training"]["train_loss"] for path in (recorded, second)]
    assert losses[0] == losses[1]


def edited(path: Path, edit) -> Path:
    document = json.loads(path.read_text())
    edit(document)
    path.write_text(json.dumps(document))
    return path


@pytest.mark.parametrize("edit, expected", [
    (lambda d: d.update(name="gemm"), "it is a 'gemm' result, not the result of a recipe run"),
    (lambda d: d["extra"].pop("recipe_format"), "written by an older d5 (recipe format 0; this d5 replays format 1)"),
    (lambda d: d["extra"].update(recipe_format=7), "written by a newer d5 (recipe format 7"),
    (lambda d: d["extra"]["recipe"].update(source=None, caller="my_notebook"),
     "started by a program calling run_recipe() (my_notebook), not by a recipe script"),
    (lambda d: d["extra"]["recipe"]["source"].update(sha256="0" * 64), "the recipe script has changed since the run"),
    (lambda d: d["extra"]["recipe"]["source"].update(path="/nowhere/gone.py", name="gone"),
     "the recipe script '/nowhere/gone.py' no longer exists and no recipes/gone.py was found"),
    (lambda d: d["extra"]["recipe"]["components"].update(batch_size=64),
     "the recipe now resolves to other components (batch_size) than the recorded run's"),
    (lambda d: d.update(schema_version=99), "has schema_version 99, but this d5 reads versions up to 1"),
], ids=["not a recipe", "older", "newer", "a program", "changed script", "missing script", "other components",
        "newer schema"])
def test_a_result_that_cannot_be_replayed_is_refused_with_the_reason(recorded, tmp_path, capsys, edit, expected):
    edited(recorded, edit)
    out = tmp_path / "never.json"
    assert main(["run", "--replay", str(recorded), "--json", str(out)]) == 2
    assert expected in capsys.readouterr().err
    assert not out.exists()


def test_replay_takes_no_recipe_or_overrides(recorded, capsys):
    assert main(["run", "--replay", str(recorded), str(TINY), "--epochs", "9"]) == 2
    assert "it takes no recipe or overrides" in capsys.readouterr().err
    assert main(["run", "--replay", str(recorded.parent / "missing.json")]) == 2
    assert "no result file at" in capsys.readouterr().err


def test_a_result_of_run_recipe_called_from_a_program_records_no_script(tmp_path):
    out = tmp_path / "program.json"
    data = lambda: (d5.NumpyDataset(*_blobs(64)), d5.NumpyDataset(*_blobs(32)))  # noqa: E731
    d5.run_recipe({"model": "mlp", "model_kwargs": {"input_shape": (8,), "hidden": (4,), "num_classes": 2},
                   "dataset": data}, {"batch_size": 16}, [], argv=["--json", str(out)], progress=False, verbose=False)
    recipe = read_result(out)["extra"]["recipe"]
    assert recipe["source"] is None and recipe["caller"] == __name__
    assert recipe["components"]["dataset"]["importable"] is False  # a lambda: described, not importable
    with pytest.raises(RecipeError, match="started by a program calling run_recipe"):
        from d5.recipe_record import plan_replay

        plan_replay(read_result(out), out)


def _blobs(n):
    import numpy as np

    rng = np.random.default_rng(n)
    y = rng.integers(0, 2, n)
    return (rng.normal(size=(n, 8)) + y[:, None]).astype(np.float32), y.astype(np.int64)


def test_a_recipe_that_resolves_differently_on_replay_is_refused_before_training(tmp_path, monkeypatch, capsys):
    # A component chosen on the fly (here from the environment, as d5.best_device() chooses a device).
    script = tmp_path / "by_environment.py"
    script.write_text(TINY.read_text().replace('"batch_size": 32', '"batch_size": int(__import__("os").environ'
                                                                    '.get("TINY_BATCH", "32"))'))
    out = tmp_path / "run.json"
    assert main(["run", str(script), "--json", str(out)]) == 0
    monkeypatch.setenv("TINY_BATCH", "8")
    assert main(["run", "--replay", str(out), "--json", str(tmp_path / "again.json")]) == 2
    error = capsys.readouterr().err
    assert "resolves to other components (batch_size)" in error and "recorded 32, now 8" in error
    assert not (tmp_path / "again.json").exists()


# --- overrides: --lr and --threads ----------------------------------------------------------------------------

def test_lr_keeps_the_shape_of_the_recipe_schedule(tmp_path):
    out = run_tiny(tmp_path, "--lr", "0.2", "--epochs", "3")
    extra = read_result(out)["extra"]
    schedule = extra["recipe"]["components"]["events"][0]["attributes"]["fn"]
    assert schedule["object"] == "d5.recipe.ScaledRate" and schedule["attributes"]["factor"] == pytest.approx(4.0)
    assert extra["lr"] == pytest.approx(0.2)  # the first epoch's rate: 4 x the recipe's 0.05


def test_threads_sets_every_pool_for_the_run_and_restores_them(tmp_path):
    from threadpoolctl import threadpool_info

    before = [pool["num_threads"] for pool in threadpool_info()]
    out = run_tiny(tmp_path, "--threads", "1")
    pools = read_result(out)["extra"]["thread_pools"]
    assert {pool["num_threads"] for pool in pools["pools"]} == {1} and pools["reference"] == 1
    assert [pool["num_threads"] for pool in threadpool_info()][:len(before)] == before


# --- d5 operators ----------------------------------------------------------------------------------------------

def test_operators_counts_the_known_operator_types_as_an_unknown_operator_s_error_does(capsys):
    from d5.errors import UnsupportedOperatorError
    from d5.frameworks.reference.operators import supported_operators
    from d5.network.op_types import known_operator_types

    known, implemented = known_operator_types(), supported_operators()
    assert set(implemented) <= set(known)  # the reference implements only operators a Network accepts
    assert main(["operators"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == (f"the reference framework implements {len(implemented)} of the {len(known)} operator types "
                        "d5 knows (ONNX's default domain and d5's own):")
    assert lines[1] == ", ".join(implemented)
    missing = sorted(set(known) - set(implemented))
    assert lines[2:] == ([f"not implemented ({len(missing)}; from_model(..., fallback=True) tries them on "
                          f"onnx.reference, inference only): {', '.join(missing)}"] if missing else [])
    network = d5.Network()
    network.add_input("x", ("N", 4))
    with pytest.raises(UnsupportedOperatorError) as info:
        network.add_node("Conv2D", ["x"], ["y"])
    assert f"d5 knows {len(known)} operator types, ONNX's default domain and d5's own" in str(info.value)


# --- d5 info ---------------------------------------------------------------------------------------------------

def test_info_adds_mpi_and_the_thread_settings(capsys):
    from threadpoolctl import threadpool_info

    assert main(["info", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    mpi = info["mpi"]
    try:
        assert mpi["mpi4py"] == metadata.version("mpi4py")
        assert mpi["library_version"] and not mpi["library_version"].startswith("unavailable")
        assert mpi["standard"].count(".") == 1
    except metadata.PackageNotFoundError:
        assert mpi["mpi4py"] == "not installed" and mpi["library_version"] == "not installed"
    pools = info["thread_pools"]
    assert [p["num_threads"] for p in pools["pools"]] == [p["num_threads"] for p in threadpool_info()]
    try:
        import torch
    except ImportError:
        assert pools["torch"] == "not installed"
    else:
        assert pools["torch"]["num_threads"] == torch.get_num_threads()
    assert main(["info"]) == 0
    text = capsys.readouterr().out
    assert "mpi\n" in text and "thread_pools\n" in text and "  library_version" in text


def test_info_says_not_installed_when_mpi4py_is_missing(tmp_path):
    # A child interpreter in which mpi4py cannot be imported or found (its metadata hidden too).
    code = ("import sys, importlib.metadata as m; real = m.version\n"
            "def version(name):\n    if name == 'mpi4py': raise m.PackageNotFoundError(name)\n    return real(name)\n"
            "m.version = version\nsys.modules['mpi4py'] = None\n"
            "from d5.bench.environment import mpi_info; import json; print(json.dumps(mpi_info()))")
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                               env={**os.environ, "PATH": ""})
    info = json.loads(completed.stdout)
    assert info["mpi4py"] == "not installed" and info["library_version"] == "not installed"


def test_info_does_not_import_a_framework_at_import_d5():
    code = "import sys, d5, d5.cli, d5.sweep, d5.recipe_record; print('torch' in sys.modules)"
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert completed.stdout.strip() == "False", completed.stderr


def test_write_result_of_another_kind_is_not_replayable(tmp_path, capsys):
    path = write_result(tmp_path / "gemm.json", "gemm", {"gflops": 1.0}, environment={})
    assert main(["run", "--replay", str(path)]) == 2
    assert "not the result of a recipe run" in capsys.readouterr().err
