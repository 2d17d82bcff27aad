"""Recipes on several MPI ranks: ``d5 launch -n N RECIPE --scheme ...`` and plain ``mpiexec -n N python RECIPE``,
the result rank 0 writes (world size, per-rank bytes, throughput, speedup), and bad input refused on every rank
with one ``d5: error:`` line each -- never a hang (every job runs under a timeout that kills its process group).

The recipe is tests/recipes/tiny_mlp_recipe.py (an MLP on 256 Gaussian points: one epoch in well under a second);
tests/recipes/rank_dependent_recipe.py is the same recipe misbehaving on rank 1.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from mpi_jobs import REPO, mpiexec, run_mpi

from d5.errors import D5Error, RecipeError
from d5.recipe_args import OVERRIDES_BY_NAME, parse_overrides
from d5.recipe_distributed import (SchemeOptimizer, find_mpiexec, launch_outcome, launcher_place,
                                   speedup_and_efficiency)
from d5.recipe_record import baseline_throughput, plan_replay

pytest.importorskip("mpi4py")

TINY = REPO / "tests" / "recipes" / "tiny_mlp_recipe.py"
RANK_DEPENDENT = REPO / "tests" / "recipes" / "rank_dependent_recipe.py"
TIMEOUT = 60  # far above what any of these jobs takes (~1-2 s); reached only by a hang


def run(command, cwd, env=None, timeout=TIMEOUT):
    """Run ``command`` in its own session; on a timeout kill the whole group (mpiexec and its ranks) and fail."""
    environment = {**os.environ, "OMP_NUM_THREADS": "1",
                   "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]), **(env or {})}
    process = subprocess.Popen([str(item) for item in command], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, cwd=cwd, env=environment, start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        pytest.fail(f"{' '.join(map(str, command))} hung past {timeout} s\n{stdout}\n{stderr}")
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def d5_launch(*arguments, cwd, env=None):
    return run([sys.executable, "-m", "d5.cli", "launch", *arguments], cwd, env)


def error_lines(text):
    return [line for line in text.splitlines() if line.startswith("d5: error:")]


def statuses(directory, n):
    return {rank: json.loads((Path(directory) / f"rank{rank}.json").read_text()) for rank in range(n)
            if (Path(directory) / f"rank{rank}.json").exists()}


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    """``d5 launch -n 2 tiny_mlp_recipe.py --scheme allreduce --epochs 1 --json out.json``, once for the module."""
    directory = tmp_path_factory.mktemp("launch")
    done = d5_launch("-n", 2, TINY, "--scheme", "allreduce", "--epochs", 1, "--json", "out.json", cwd=directory)
    return directory, done


def test_d5_launch_writes_one_result_with_the_world_size_and_every_rank_s_bytes(two_ranks):
    directory, done = two_ranks
    assert done.returncode in (0, 1), done.stdout + done.stderr  # 1: one epoch may miss the recipe's 80 %
    assert sorted(path.name for path in directory.iterdir()) == ["out.json"]  # rank 0 alone writes
    extra = json.loads((directory / "out.json").read_text())["extra"]
    record = extra["distributed"]
    assert record["world_size"] == 2 and record["workers"] == 2 and record["scheme"] == "allreduce"
    assert record["compression"] is None and record["batch_size_per_rank"] == 32 and record["global_batch_size"] == 64
    assert [entry["rank"] for entry in record["per_rank"]] == [0, 1]
    for entry in record["per_rank"]:
        assert entry["bytes_sent"] > 0 and entry["bytes_received"] > 0 and entry["samples"] == 64
    assert record["bytes_sent"] == sum(entry["bytes_sent"] for entry in record["per_rank"])
    # equation 1: the samples of every rank over the slowest rank's training time
    slowest = max(entry["train_seconds"] for entry in record["per_rank"])
    assert record["samples"] == 128 and record["throughput"] == pytest.approx(128 / slowest)
    assert record["speedup"] is None and record["efficiency"] is None  # no baseline given: unknown, not guessed
    assert extra["argv"] == ["--epochs", "1", "--scheme", "allreduce"]
    # rank 0 reports once; rank 1 prints nothing of its own (no table, no verdict)
    assert done.stdout.count("| metric") == 1 and done.stdout.count("recipe MODIFIED by") == 1
    assert done.stdout.count("distributed: 2 ranks, --scheme allreduce") == 1
    assert not error_lines(done.stderr)


def test_a_result_of_several_ranks_is_not_replayed_in_one_process(two_ranks):
    directory, _ = two_ranks
    document = json.loads((directory / "out.json").read_text())
    with pytest.raises(RecipeError, match=r"on 2 MPI ranks; rerun it with `d5 launch -n 2 "):
        plan_replay(document, directory / "out.json")
    with pytest.raises(RecipeError, match="the baseline of a speedup is the recipe on ONE rank"):
        baseline_throughput(directory / "out.json")


def test_plain_mpiexec_runs_a_recipe_with_a_parameter_server(tmp_path):
    done = run_mpi(TINY, 2, args=["--scheme", "ps", "--epochs", "1", "--json", "ps.json"], workdir=tmp_path,
                   timeout=TIMEOUT)
    assert (tmp_path / "ps.json").exists(), done.stdout + done.stderr
    record = json.loads((tmp_path / "ps.json").read_text())["extra"]["distributed"]
    assert record["world_size"] == 2 and record["scheme"] == "ps"
    assert record["scheme_class"].endswith("ConsistentParameterServer")
    assert all(entry["bytes_sent"] > 0 for entry in record["per_rank"])


def test_speedup_and_efficiency_against_a_one_rank_baseline(tmp_path):
    one = run([sys.executable, TINY, "--scheme", "allreduce", "--epochs", "1", "--json", "one.json"], tmp_path)
    assert one.returncode in (0, 1), one.stdout + one.stderr
    alone = json.loads((tmp_path / "one.json").read_text())["extra"]["distributed"]
    assert alone["world_size"] == 1 and alone["speedup"] == pytest.approx(1.0)  # its own baseline
    done = run_mpi(TINY, 2, args=["--scheme", "allreduce", "--epochs", "1", "--baseline", "one.json", "--json",
                                  "two.json"], workdir=tmp_path, timeout=TIMEOUT)
    record = json.loads((tmp_path / "two.json").read_text())["extra"]["distributed"]
    assert record["baseline"]["throughput"] == pytest.approx(alone["throughput"]), done.stderr
    assert record["speedup"] == pytest.approx(record["throughput"] / alone["throughput"])
    assert record["efficiency"] == pytest.approx(record["speedup"] / 2)
    assert "speedup" in done.stdout and "efficiency" in done.stdout


BAD_INPUT = {
    "unknown scheme": (["--scheme", "bogus"], "--scheme must be one of allreduce, ps, "),
    "compression out of range": (["--scheme", "allreduce", "--compression", "topk:2"],
                                 "--compression 'topk:2': TopK ratio must be a number in (0, 1]"),
    "compression without a scheme": (["--compression", "fp16"], "--compression fp16 needs --scheme"),
    "compression the scheme cannot do": (["--scheme", "ps", "--compression", "fp16"],
                                         "the scheme 'ps' does not compress what it sends"),
    "several ranks without a scheme": ([], "runs on 2 MPI ranks but was given no --scheme"),
}


@pytest.mark.parametrize("case", list(BAD_INPUT))
def test_bad_input_is_one_d5_error_on_every_rank_and_no_hang(tmp_path, case):
    arguments, message = BAD_INPUT[case]
    done = run_mpi(TINY, 2, args=[*arguments, "--epochs", "1"], workdir=tmp_path, timeout=TIMEOUT,
                   env={"D5_RANK_STATUS_DIR": str(tmp_path / "status")})
    lines = error_lines(done.stderr)
    assert sorted(line.split(":")[2].strip() for line in lines) == ["rank 0/2", "rank 1/2"], done.stderr
    assert all(message in line for line in lines), done.stderr
    assert "Traceback" not in done.stderr and done.returncode != 0
    assert {rank: status["status"] for rank, status in statuses(tmp_path / "status", 2).items()} == {0: 2, 1: 2}


def test_a_parameter_server_on_one_rank_is_refused(tmp_path):
    done = run([sys.executable, TINY, "--scheme", "ps", "--epochs", "1"], tmp_path)
    assert done.returncode == 2
    assert error_lines(done.stderr) == [done.stderr.strip()]
    assert "--scheme ps needs at least 2 ranks (a server and a worker), but the run has 1" in done.stderr


def test_ranks_with_different_overrides_are_refused_naming_them(tmp_path):
    python = sys.executable
    done = run([mpiexec(), "-n", 1, python, TINY, "--scheme", "allreduce", "--epochs", 1, ":",
                "-n", 1, python, TINY, "--scheme", "allreduce", "--epochs", 2], tmp_path)
    lines = error_lines(done.stderr)
    assert len(lines) == 2 and done.returncode != 0, done.stderr
    for line in lines:
        assert "the ranks do not run the same recipe" in line and "rank 1: component epochs, overrides" in line
        assert "'--epochs 1 --scheme allreduce', rank 1 '--epochs 2 --scheme allreduce'" in line


def test_a_recipe_that_depends_on_the_rank_is_refused(tmp_path):
    done = run_mpi(RANK_DEPENDENT, 2, args=["--scheme", "allreduce", "--epochs", "1"], workdir=tmp_path,
                   timeout=TIMEOUT, env={"D5_TEST_RANK_MODE": "batch"})
    lines = error_lines(done.stderr)
    assert len(lines) == 2 and all("rank 1: component batch_size" in line for line in lines), done.stderr


def test_a_rank_failing_during_training_ends_the_job_and_d5_launch_names_it(tmp_path):
    done = d5_launch("-n", 2, RANK_DEPENDENT, "--scheme", "allreduce", "--epochs", 2, cwd=tmp_path,
                     env={"D5_TEST_RANK_MODE": "fail"})
    assert done.returncode == 2, done.stdout + done.stderr
    assert "d5: error: rank 1/2: rank 1 fails on purpose after step 1" in done.stderr
    assert "d5 launch: 1 of 2 ranks failed: rank 1 (status 2): rank 1/2: rank 1 fails on purpose" in done.stderr
    assert "ended without reporting a status" in done.stderr  # rank 0, ended by rank 1's abort


def test_d5_launch_reports_which_ranks_refused_the_run(tmp_path):
    done = d5_launch("-n", 2, TINY, "--scheme", "bogus", cwd=tmp_path)
    assert done.returncode == 2
    assert len(error_lines(done.stderr)) == 2
    assert "d5 launch: 2 of 2 ranks failed: rank 0 (status 2): rank 0/2: --scheme must be one of" in done.stderr


def test_d5_launch_without_mpiexec_is_a_d5_error(tmp_path):
    done = d5_launch("--mpiexec", tmp_path / "no" / "mpiexec", "-n", 2, TINY, "--scheme", "allreduce", cwd=tmp_path)
    assert done.returncode == 2
    assert error_lines(done.stderr) == [done.stderr.strip()] and "no such executable file" in done.stderr
    # no mpiexec next to Python nor on PATH
    (tmp_path / "bin").mkdir()
    with pytest.raises(D5Error, match=r"d5 launch needs mpiexec, but there is none next to this Python .* pip "
                                      r"install 'd5\[mpi\]'"):
        find_mpiexec(python=str(tmp_path / "bin" / "python"), path=str(tmp_path / "bin"))
    assert find_mpiexec() == mpiexec()  # the venv's, next to this Python


def test_mpi4py_that_cannot_load_an_mpi_library_is_a_d5_error_on_every_rank(tmp_path):
    fake = tmp_path / "fake" / "mpi4py"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "MPI.py").write_text("raise ImportError('libmpi.so.12: cannot open shared object file')\n")
    env = {"PYTHONPATH": os.pathsep.join([str(fake.parent), str(REPO)])}
    alone = run([sys.executable, TINY, "--scheme", "allreduce"], tmp_path, env=env)
    assert alone.returncode == 2 and error_lines(alone.stderr) == [alone.stderr.strip()]
    assert "mpi4py could not load an MPI library (libmpi.so.12" in alone.stderr and "d5[mpi]" in alone.stderr
    done = run([mpiexec(), "-n", 2, sys.executable, TINY, "--scheme", "allreduce"], tmp_path, env=env)
    assert len(error_lines(done.stderr)) == 2 and "mpi4py could not load" in done.stderr


# ------------------------------------------------------------------------------------------- in one process

def test_the_distributed_flags_are_checked_together():
    assert parse_overrides(["--scheme", "allreduce", "--compression", "TopK:0.1"]).compression == "topk:0.1"
    for argv, message in ((["--baseline-throughput", "10"], "--baseline-throughput 10.0 needs --scheme"),
                          (["--scheme", "allreduce", "--baseline-throughput", "0"], "must be a positive finite"),
                          (["--scheme", "allreduce", "--baseline-throughput", "5", "--baseline", "x.json"],
                           "pass one"),
                          (["--scheme", "allreduce", "--checkpoint", "ckpt"], "--checkpoint with --scheme"),
                          (["--scheme", "allreduce", "--compression", "qsgd:1"], "QSGD bits must be")):
        with pytest.raises(RecipeError, match=message.replace("(", r"\(").replace("[", r"\[")):
            parse_overrides(argv)
    # not swept: a sweep's runs are single processes
    assert not OVERRIDES_BY_NAME["scheme"].sweepable and not OVERRIDES_BY_NAME["compression"].sweepable


def test_launch_outcome_trusts_the_status_files():
    assert launch_outcome({0: {"status": 0}, 1: {"status": 0}}, 2, 143) == (0, [])
    assert launch_outcome({0: {"status": 1}, 1: {"status": 1}}, 2, 0) == (1, [])
    status, lines = launch_outcome({0: {"status": 0}}, 2, 0)
    assert status == 1 and "rank 1 ended without reporting a status" in lines[0]
    assert launcher_place({"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "3"}) == (2, 3)
    assert speedup_and_efficiency(None, 100.0, 2) == (None, None)


def test_the_trainer_sets_the_base_optimizer_s_learning_rate_through_a_scheme():
    class Base:
        lr = 0.1

    class Scheme:
        def __init__(self):
            self.base_optimizer, self.steps = Base(), 0

        def step(self, inputs):
            return {}

    wrapped = SchemeOptimizer(Scheme())
    wrapped.lr = 0.05       # a LearningRateSchedule's setattr
    wrapped.steps = 3
    assert wrapped.scheme.base_optimizer.lr == 0.05 and wrapped.lr == 0.05 and wrapped.scheme.steps == 3


def test_d5_launch_refuses_a_missing_hostfile_and_a_missing_recipe(tmp_path):
    from d5.recipe_distributed import launch

    with pytest.raises(D5Error, match="--hostfile .*: no such file"):
        launch(2, str(TINY), ["--scheme", "allreduce"], hostfile=str(tmp_path / "hosts"))
    with pytest.raises(D5Error, match="no recipe"):
        launch(2, str(tmp_path / "missing.py"), ["--scheme", "allreduce"])
    with pytest.raises(D5Error, match="-n 0: the number of ranks must be an integer >= 1"):
        launch(0, str(TINY), [])


def test_async_ps_reports_staleness_and_counts_only_the_workers(tmp_path):
    # Two epochs: from the second on, the Trainer of the server (rank 0, whose steps return only the loss) knows
    # the prediction output from the first validation and must not look for it in a server's step.
    done = d5_launch("-n", 3, TINY, "--scheme", "async-ps", "--epochs", 2, "--json", "async.json", cwd=tmp_path)
    assert (tmp_path / "async.json").exists(), done.stdout + done.stderr
    record = json.loads((tmp_path / "async.json").read_text())["extra"]["distributed"]
    assert record["world_size"] == 3 and record["workers"] == 2
    assert [entry["trains"] for entry in record["per_rank"]] == [False, True, True]
    assert record["samples"] == 256  # the workers' shards, twice; the server's batches are not trained on
    assert record["staleness"]["updates"] == 8 and "histogram" in record["staleness"]


def test_a_native_optimizer_trains_under_allreduce_as_the_reference_scheme_does(tmp_path):
    """``--framework pytorch --scheme allreduce``: torch's native optimizer inside DataParallel, averaged per step
    as ConsistentDecentralized averages the reference's -- the same losses and accuracies, epoch by epoch."""
    pytest.importorskip("torch")
    arguments = ["--scheme", "allreduce", "--epochs", "2"]
    run_mpi(TINY, 2, args=[*arguments, "--json", "reference.json"], workdir=tmp_path, timeout=TIMEOUT)
    done = run_mpi(TINY, 2, args=[*arguments, "--framework", "pytorch", "--json", "torch.json"], workdir=tmp_path,
                   timeout=TIMEOUT)
    assert (tmp_path / "torch.json").exists(), done.stdout + done.stderr
    reference, native = (json.loads((tmp_path / name).read_text())["extra"] for name in ("reference.json",
                                                                                          "torch.json"))
    assert native["distributed"]["scheme_class"] == "d5.distributed.data_parallel.DataParallel"
    assert reference["distributed"]["scheme_class"].endswith("ConsistentDecentralized")
    assert all(entry["bytes_sent"] > 0 for entry in native["distributed"]["per_rank"])
    for key in ("train_loss", "test_loss"):
        assert native["training"][key] == pytest.approx(reference["training"][key], rel=1e-5)
    assert native["training"]["test_accuracy"] == reference["training"]["test_accuracy"]


def test_a_native_optimizer_under_another_scheme_is_refused_saying_what_takes_it(tmp_path):
    pytest.importorskip("torch")
    done = run_mpi(TINY, 2, args=["--scheme", "ps", "--framework", "pytorch", "--epochs", "1"], workdir=tmp_path,
                   timeout=TIMEOUT)
    lines = error_lines(done.stderr)
    assert len(lines) == 2 and done.returncode != 0, done.stderr
    assert all("that framework's native optimizer (--framework pytorch chose it); --scheme allreduce takes it" in line
               for line in lines)


def test_d5_report_shows_the_scaling_of_distributed_runs_against_the_one_rank_run(two_ranks, tmp_path):
    """A 1-rank and a 2-rank ``--scheme allreduce`` run of the same batch per rank: the report's scaling table
    completes speedup and efficiency from the 1-rank run (neither was given --baseline) and plots them."""
    from d5.bench.report import write_report

    directory, _ = two_ranks
    one = run([sys.executable, TINY, "--scheme", "allreduce", "--epochs", "1", "--json", "one.json"], tmp_path)
    assert (tmp_path / "one.json").exists(), one.stdout + one.stderr
    written = write_report([tmp_path / "one.json", directory / "out.json"], tmp_path / "report")
    markdown = (tmp_path / "report" / "report.md").read_text()
    assert "### Scaling" in markdown and (tmp_path / "report" / "tiny_mlp_recipe-scaling.png") in written
    assert (tmp_path / "report" / "tiny_mlp_recipe-scaling.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = [line for line in markdown[markdown.index("### Scaling"):].splitlines() if line.startswith("| allreduce")]
    assert len(rows) == 2, markdown
    cells = [[cell.strip() for cell in row.strip("|").split("|")] for row in rows]
    throughput = {int(row[2]): float(row[7]) for row in cells}
    speedup = {int(row[2]): float(row[8]) for row in cells}
    efficiency = {int(row[2]): float(row[9]) for row in cells}
    assert speedup[1] == pytest.approx(1.0)
    assert speedup[2] == pytest.approx(throughput[2] / throughput[1], rel=2e-3)  # the table rounds to 4 digits
    assert efficiency[2] == pytest.approx(100 * speedup[2] / 2, rel=2e-3)
