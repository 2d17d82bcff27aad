"""d5 sweep: grid validation, the plan, MLPerf-style aggregation (checked against numpy/statistics), and real
sweeps of a tiny recipe in fresh processes -- results, manifest, thread variables in the children, resuming
an interrupted sweep without redoing finished runs, redoing damaged ones, and refusing what it must."""
from __future__ import annotations

import json
import os
import shutil
import statistics
from pathlib import Path

import numpy as np
import pytest

from d5.bench.results import read_result
from d5.cli import main
from d5.errors import D5Error, RecipeError
from d5.sweep import aggregate, grid_keys, parse_grid, plan_runs, run_sweep

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "tests" / "recipes" / "tiny_mlp_recipe.py"
VALID_KEYS = "valid keys: epochs, batch_size, framework, subset, device, lr, threads"


# --- the grid ----------------------------------------------------------------------------------------------

def test_a_grid_is_parsed_into_canonical_values_in_order():
    grid = parse_grid(["batch-size=32,64", "lr=1e-2,0.1", "threads=1", "framework=pytorch", "device=cuda:1"])
    assert grid == {"batch_size": ["32", "64"], "lr": ["0.01", "0.1"], "threads": ["1"],
                    "framework": ["pytorch"], "device": ["gpu:1"]}


@pytest.mark.parametrize("specs, expected", [
    (["batch_size="], "grid entry 'batch_size=' has an empty value"),
    (["batch_size=32,,64"], "grid entry 'batch_size=32,,64' has an empty value"),
    (["batch_size"], "grid entry 'batch_size' is not KEY=V1,V2,...; " + VALID_KEYS),
    (["=32"], "is not KEY=V1,V2"),
    (["optimiser=sgd"], "grid key 'optimiser' is not an override a sweep can vary; " + VALID_KEYS),
    (["seed=1,2"], "the seeds of a sweep come from --seeds N"),
    (["batch_size=32", "batch_size=64"], "grid key 'batch_size' is given twice"),
    (["batch_size=big"], "grid batch_size='big': an integer is needed"),
    (["batch_size=3.5"], "grid batch_size='3.5': an integer is needed"),
    (["lr=fast"], "grid lr='fast': a number is needed"),
    (["lr=-0.1"], "grid lr=-0.1: must be a positive finite number"),
    (["lr=nan"], "must be a positive finite number"),
    (["threads=0"], "grid threads=0: must be positive, got 0"),
    (["epochs=1,0"], "grid epochs=0: must be positive"),
    (["framework=caffe"], "grid framework=caffe: must be one of reference, pytorch, tensorflow, mxnet"),
    (["device=tpu"], "--device must be cpu, gpu, gpu:N"),
    (["batch_size=32,32"], "grid key 'batch_size' lists 32 more than once"),
    ("batch_size=32", "the grid must be a list of KEY=V1,V2"),
], ids=lambda value: None)
def test_an_invalid_grid_is_a_recipe_error_that_says_what_is_valid(specs, expected):
    with pytest.raises(RecipeError) as info:
        parse_grid(specs)
    assert expected in str(info.value)


def test_the_cli_reports_an_invalid_grid_before_running_anything(tmp_path, capsys):
    assert main(["sweep", str(TINY), "--grid", "batch_size=", "--output", str(tmp_path / "out")]) == 2
    assert "d5: error: grid entry 'batch_size=' has an empty value" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_the_plan_is_the_cartesian_grid_times_the_seeds():
    runs = plan_runs({"batch_size": ["32", "64"], "threads": ["1", "2"]}, seeds=3)
    assert len(runs) == 2 * 2 * 3 and len({run.name for run in runs}) == 12
    assert runs[0].name == "batch_size=32,threads=1,seed=0" and runs[-1].name == "batch_size=64,threads=2,seed=2"
    assert runs[4].argv == ["--batch-size", "32", "--threads", "2", "--seed", "1"]
    assert plan_runs({}, seeds=2)[1].name == "seed=1"  # no grid: the recipe as written, per seed
    assert plan_runs({"device": ["gpu:0"]}, 1)[0].name == "device=gpu_0,seed=0"  # no ':' in file names
    for seeds in (0, -1, 1.5, True):
        with pytest.raises(RecipeError, match="--seeds must be a positive number"):
            plan_runs({}, seeds)
    assert grid_keys() == VALID_KEYS.removeprefix("valid keys: ").split(", ")


# --- aggregation --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("values", [[97.1, 96.5, 98.0, 97.4, 95.9], [3.0, 1.0, 2.0], list(np.linspace(1, 2, 10))])
def test_mlperf_aggregation_drops_the_best_and_worst_and_means_the_rest(values):
    result = aggregate(values, higher_is_better=True)
    ordered = sorted(values)
    assert result["mean_without_extremes"] == pytest.approx(statistics.fmean(ordered[1:-1]))
    assert result["dropped"] == [max(values), min(values)]
    assert result["median"] == pytest.approx(statistics.median(values)) and result["n"] == len(values)
    assert result["ci_low"] <= result["median"] <= result["ci_high"]
    assert aggregate(values, higher_is_better=False)["dropped"] == [min(values), max(values)]


def test_aggregation_of_few_or_unreached_runs():
    two = aggregate([1.0, 3.0])
    assert two["mean_without_extremes"] == 2.0 and two["dropped"] == [] and two["ci_exact"] is False
    # A run that never reached its target (TimeToAccuracy = inf) makes the MLPerf mean infinite once it is kept.
    unreached = aggregate([10.0, 12.0, float("inf"), float("inf")], higher_is_better=False)
    assert unreached["mean_without_extremes"] == float("inf") and unreached["non_finite"] == 2
    assert unreached["median"] == 11.0
    assert aggregate([])["mean_without_extremes"] is None


# --- real sweeps of the tiny recipe -------------------------------------------------------------------------

GRID = ["batch_size=16,32", "threads=1"]


@pytest.fixture(scope="module")
def finished_sweep(tmp_path_factory):
    """2 points x 2 seeds of the tiny recipe, two runs at a time (about 3 s)."""
    output = tmp_path_factory.mktemp("sweep") / "out"
    outcome = run_sweep(TINY, GRID, seeds=2, output=output, jobs=2, progress=False, verbose=False)
    return output, outcome


def copy_of(finished_sweep, tmp_path) -> Path:
    output = tmp_path / "out"
    shutil.copytree(finished_sweep[0], output)
    return output


def test_a_sweep_writes_one_result_per_run_a_manifest_and_a_summary(finished_sweep):
    output, outcome = finished_sweep
    assert (outcome.ran, outcome.skipped, outcome.failed) == (4, 0, 0)
    names = sorted(p.name for p in (output / "runs").iterdir())
    assert names == [f"batch_size={b},threads=1,seed={s}.json" for b in (16, 32) for s in (0, 1)]
    assert sorted(p.name for p in output.iterdir()) == [".sweep.lock", "logs", "runs", "summary.md", "sweep.json"]
    manifest = read_result(output / "sweep.json")
    assert manifest["name"] == "sweep" and manifest["extra"]["complete"] and manifest["extra"]["seeds"] == 2
    assert manifest["extra"]["grid"] == {"batch_size": ["16", "32"], "threads": ["1"]}
    assert [run["status"] for run in manifest["extra"]["runs"]] == ["done"] * 4
    for run in manifest["extra"]["runs"]:
        record = read_result(output / run["file"])["extra"]
        assert record["argv"] == [f"--batch-size", run["point"]["batch_size"], "--seed", str(run["seed"]),
                                  "--threads", "1"]
        assert record["batch_size"] == int(run["point"]["batch_size"]) and record["seed"] == run["seed"]
        assert 0 < record["recipe_seconds"] < run["wall_seconds"]
        # threads=1 reached the child's environment and every thread pool it used.
        pools = record["thread_pools"]
        assert {pools["variables"][name] for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS",
                                                       "OPENBLAS_NUM_THREADS")} == {"1"}
        assert {pool["num_threads"] for pool in pools["pools"]} == {1}
        assert "exit status 0" in (output / run["log"]).read_text()
    assert "batch_size=16,threads=1" in (output / "summary.md").read_text()


def test_the_per_point_figures_are_the_aggregate_of_the_point_s_runs(finished_sweep):
    output, outcome = finished_sweep
    for point, figures in outcome.points.items():
        records = [read_result(p) for p in sorted((output / "runs").glob(f"{point},seed=*.json"))]
        accuracies = [r["figures"]["TestAccuracy"]["value"] for r in records]
        entry = figures["metrics"]["TestAccuracy"]
        assert entry["median"] == pytest.approx(np.median(accuracies))
        assert entry["mean_without_extremes"] == pytest.approx(np.mean(accuracies))  # 2 runs: nothing dropped
        assert figures["completed"] == 2 and figures["failed"] == 0
        assert figures["not_converged"] == sum(not r["extra"]["passed"] for r in records)
    assert read_result(output / "sweep.json")["figures"] == json.loads(json.dumps(outcome.points))


def test_a_rerun_skips_finished_runs_and_redoes_damaged_or_missing_ones(finished_sweep, tmp_path):
    output = copy_of(finished_sweep, tmp_path)
    runs = output / "runs"
    kept = {p.name: p.stat().st_mtime_ns for p in runs.iterdir()}
    (runs / "batch_size=16,threads=1,seed=1.json").write_text('{"schema_version": 1, "name": "rec')  # truncated
    (runs / "batch_size=32,threads=1,seed=0.json").unlink()  # killed before it wrote its result
    (runs / ".batch_size=32,threads=1,seed=0.json.abc123.tmp").write_text("half a result")  # its temporary file
    outcome = run_sweep(TINY, GRID, seeds=2, output=output, progress=False, verbose=False)
    assert (outcome.ran, outcome.skipped, outcome.failed) == (2, 2, 0)
    after = {p.name: p.stat().st_mtime_ns for p in runs.iterdir()}
    assert sorted(after) == sorted(kept)  # the temporary file is gone
    for name in ("batch_size=16,threads=1,seed=0.json", "batch_size=32,threads=1,seed=1.json"):
        assert after[name] == kept[name]  # not redone
    read_result(runs / "batch_size=16,threads=1,seed=1.json")  # redone: complete and valid now
    statuses = {run["seed"]: run["status"] for run in read_result(output / "sweep.json")["extra"]["runs"]
                if run["point"]["batch_size"] == "16"}
    assert statuses == {0: "done (earlier)", 1: "done"}
    # Everything finished: a third run does nothing but aggregate again.
    assert run_sweep(TINY, GRID, seeds=2, output=output, progress=False, verbose=False).ran == 0


def test_a_result_of_other_overrides_is_not_taken_for_a_finished_run(finished_sweep, tmp_path):
    output = copy_of(finished_sweep, tmp_path)
    source, target = output / "runs" / "batch_size=32,threads=1,seed=0.json", \
        output / "runs" / "batch_size=32,threads=1,seed=1.json"
    shutil.copyfile(source, target)  # seed 0's result under seed 1's name
    outcome = run_sweep(TINY, GRID, seeds=2, output=output, progress=False, verbose=False)
    assert outcome.ran == 1 and read_result(target)["extra"]["seed"] == 1


def test_a_sweep_directory_of_another_recipe_is_refused(finished_sweep, tmp_path):
    output = copy_of(finished_sweep, tmp_path)
    other = tmp_path / "tiny_mlp_recipe.py"
    other.write_text(TINY.read_text().replace('"epochs": 2', '"epochs": 3'))
    with pytest.raises(D5Error, match="holds a sweep of another recipe or another version of it"):
        run_sweep(other, GRID, seeds=2, output=output, progress=False, verbose=False)


def test_one_sweep_at_a_time_per_directory(tmp_path):
    from filelock import FileLock

    (tmp_path / "out").mkdir()
    with FileLock(str(tmp_path / "out" / ".sweep.lock")):
        with pytest.raises(D5Error, match="another d5 sweep is writing"):
            run_sweep(TINY, ["batch_size=16"], seeds=1, output=tmp_path / "out", progress=False, verbose=False)


def test_a_failing_run_is_counted_logged_and_retried_on_resume(tmp_path, capsys):
    # The reference framework runs on the CPU only: --device gpu is refused by the child (exit status 2).
    output = tmp_path / "out"
    assert main(["sweep", str(TINY), "--grid", "device=gpu", "--output", str(output)]) == 1
    captured = capsys.readouterr()
    assert "run device=gpu_0,seed=0 failed (exit status 2)" in captured.err
    assert "1 runs, 0 already done, 1 failed" in captured.out
    manifest = read_result(output / "sweep.json")
    assert manifest["extra"]["runs"][0]["status"] == "failed"
    assert manifest["figures"]["device=gpu:0"]["failed"] == 1
    assert "runs on the CPU only" in (output / "logs" / "device=gpu_0,seed=0.log").read_text()
    assert list((output / "runs").iterdir()) == []
    assert run_sweep(TINY, ["device=gpu"], seeds=1, output=output, progress=False, verbose=False).ran == 1


def test_output_that_is_a_file_and_bad_jobs_are_refused(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(D5Error, match="is a file; name a directory"):
        run_sweep(TINY, [], seeds=1, output=tmp_path / "file", progress=False)
    with pytest.raises(RecipeError, match="--jobs must be a positive number"):
        run_sweep(TINY, [], seeds=1, output=tmp_path / "out", jobs=0, progress=False)
    with pytest.raises(D5Error, match="no recipe 'no_such_recipe'"):
        run_sweep("no_such_recipe", [], seeds=1, output=tmp_path / "out", progress=False)


def test_the_child_gets_the_thread_variables_only_for_a_threads_point():
    from d5.sweep import SweepRun, _child_environment

    env = _child_environment(SweepRun((("threads", "3"),), 0))
    assert {env[name] for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")} == {"3"}
    plain = _child_environment(SweepRun((("batch_size", "8"),), 0))
    assert plain.get("OMP_NUM_THREADS") == os.environ.get("OMP_NUM_THREADS")
    assert plain["PYTHONPATH"].split(os.pathsep)[0] == str(ROOT)


def test_an_interrupted_sweep_resumes_without_redoing_finished_runs(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    output = tmp_path / "out"
    sweep = subprocess.Popen([sys.executable, "-m", "d5.cli", "sweep", str(TINY), "--grid", "batch_size=16",
                              "--seeds", "2", "--output", str(output)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, cwd=ROOT)
    deadline = time.monotonic() + 120
    while not list((output / "runs").glob("*.json")) and time.monotonic() < deadline and sweep.poll() is None:
        time.sleep(0.05)
    sweep.send_signal(signal.SIGINT)  # Ctrl-C: the running child is stopped, finished runs stay
    _, err = sweep.communicate(timeout=60)
    finished = {p.name: p.stat().st_mtime_ns for p in (output / "runs").glob("*.json")}
    assert finished, err
    if sweep.returncode == 130:
        assert "sweep interrupted; run the same command again to resume it" in err
        manifest = read_result(output / "sweep.json")
        assert not manifest["extra"]["complete"]
        # A run can finish between its result's rename and the sweep's bookkeeping: the files are the truth.
        assert sum(run["status"] == "done" for run in manifest["extra"]["runs"]) <= len(finished)
    outcome = run_sweep(TINY, ["batch_size=16"], seeds=2, output=output, progress=False, verbose=False)
    assert outcome.skipped == len(finished) and outcome.ran == 2 - len(finished) and outcome.failed == 0
    assert all((output / "runs" / name).stat().st_mtime_ns == mtime for name, mtime in finished.items())
    assert sorted(p.name for p in (output / "runs").iterdir()) == [f"batch_size=16,seed={s}.json" for s in range(2)]


def test_an_output_directory_that_cannot_be_created_is_a_d5_error_naming_it(tmp_path):
    from d5.errors import OutputPathError
    from d5.sweep import run_sweep

    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(OutputPathError, match="the sweep's directory cannot be created"):
        run_sweep(TINY, [], seeds=1, output=blocker / "sweep", progress=False)
