"""``d5 sweep``: a recipe over a grid of overrides and seeds, each run in a fresh process, aggregated
MLPerf-style.

    d5 sweep recipes/mnist_lenet.py --grid batch_size=32,64,128 lr=0.01,0.1 threads=1,2 --seeds 5 --output DIR

Every point of the cartesian grid runs once per seed (0, 1, ..., N-1) as ``python -m d5.cli run RECIPE
OVERRIDES --seed S --json DIR/runs/POINT,seed=S.json`` in a fresh process (no state leaks from one run to the
next; ``threads`` also goes into the child's OMP_NUM_THREADS, MKL_NUM_THREADS, OPENBLAS_NUM_THREADS and
TF_NUM_INTRAOP_THREADS, so even pools created at start-up get it). Each run's output goes to
``DIR/logs/``. ``DIR/sweep.json`` (a d5 result named ``sweep``, written atomically after every run) records
the recipe, the grid, the runs and their state, and at the end the aggregate of every point, which also goes
to ``DIR/summary.md`` and is printed.

Rerun with the same arguments, an interrupted sweep skips the runs whose result is complete and valid (same
recipe SHA-256, same overrides) and redoes the others. A sweep directory of another recipe (or another
version of it) is refused; one sweep at a time may write a directory (a file lock).

Per point and metric: the mean of the runs without the best and the worst (MLPerf's rule; with fewer than 3
runs nothing is dropped), the median with its non-parametric confidence interval
(:func:`d5.bench.stats.summarize`), and how many runs did not converge (missed a threshold of the recipe's
METRICS) or failed (no result).

>>> parse_grid(["batch_size=32,64", "lr=0.1"])
{'batch_size': ['32', '64'], 'lr': ['0.1']}
>>> [run.name for run in plan_runs({'batch_size': ['32', '64']}, seeds=1)]
['batch_size=32,seed=0', 'batch_size=64,seed=0']
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import hashlib
import itertools
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from d5.bench.report import aggregate, aggregate_point
from d5.bench.results import PAYLOAD_FORMATS
from d5.errors import D5Error, OutputPathError, RecipeError

SWEEP_FORMAT = PAYLOAD_FORMATS["sweep"][1]
#: Variables a child process gets for ``threads=N``: pools created before d5 can set them also use N.
THREAD_ENVIRONMENT = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "TF_NUM_INTRAOP_THREADS")
_UNSAFE_FILE_CHARACTERS = re.compile(r"[^A-Za-z0-9._=,+-]")


def grid_keys() -> list[str]:
    """The overrides a grid may vary (see :data:`d5.recipe_args.OVERRIDES`).

    >>> grid_keys()
    ['epochs', 'batch_size', 'framework', 'subset', 'device', 'lr', 'threads']
    """
    from d5.recipe_args import OVERRIDES

    return [override.name for override in OVERRIDES if override.sweepable]


def parse_grid(specs: Sequence[str]) -> dict[str, list[str]]:
    """``['batch_size=32,64', 'lr=0.01,0.1']`` -> ``{'batch_size': ['32', '64'], 'lr': ['0.01', '0.1']}``, each
    value checked as the recipe would check it and written canonically; a RecipeError naming the valid keys
    for an entry without ``=`` or values, an unknown or repeated key, or a value of the wrong kind or range.

    >>> parse_grid(["threads=0"])
    Traceback (most recent call last):
    ...
    d5.errors.RecipeError: grid threads=0: must be positive, got 0
    """
    from d5.recipe_args import OVERRIDES_BY_NAME

    valid = ", ".join(grid_keys())
    if isinstance(specs, str) or not isinstance(specs, Sequence):
        raise RecipeError(f"the grid must be a list of KEY=V1,V2,... entries (valid keys: {valid}), got {specs!r}")
    grid: dict[str, list[str]] = {}
    for spec in specs:
        key, equals, values = str(spec).partition("=")
        key = key.strip().replace("-", "_")
        if not equals or not key:
            raise RecipeError(f"grid entry {spec!r} is not KEY=V1,V2,...; valid keys: {valid}")
        if key not in grid_keys():
            hint = " (the seeds of a sweep come from --seeds N)" if key == "seed" else ""
            raise RecipeError(f"grid key {key!r} is not an override a sweep can vary{hint}; valid keys: {valid}")
        if key in grid:
            raise RecipeError(f"grid key {key!r} is given twice; give each key once with all its values, e.g. "
                              f"{key}={','.join(grid[key] + ['...'])}")
        texts = [text.strip() for text in values.split(",")]
        if not values.strip() or any(not text for text in texts):
            raise RecipeError(f"grid entry {spec!r} has an empty value; give values separated by commas, e.g. "
                              f"{key}=V1,V2 (valid keys: {valid})")
        override = OVERRIDES_BY_NAME[key]
        canonical = []
        for text in texts:
            try:
                value = override.convert(text)
            except Exception as err:  # int()/float() raise ValueError, the device parser argparse's own error
                reason = str(err) if "must be" in str(err) else f"{override.kind} is needed"
                raise RecipeError(f"grid {key}={text!r}: {reason}") from None
            problem = override.check(value)
            if problem:
                raise RecipeError(f"grid {key}={text}: {problem}")
            canonical.append(override.to_text(value))
        duplicates = sorted({text for text in canonical if canonical.count(text) > 1})
        if duplicates:
            raise RecipeError(f"grid key {key!r} lists {', '.join(duplicates)} more than once; give each value once")
        grid[key] = canonical
    return grid


@dataclasses.dataclass(frozen=True)
class SweepRun:
    """One run of a sweep: a grid point (``((key, text), ...)`` in grid order) and a seed.

    >>> run = SweepRun((("batch_size", "32"), ("lr", "0.1")), seed=2)
    >>> run.name, run.argv
    ('batch_size=32,lr=0.1,seed=2', ['--batch-size', '32', '--lr', '0.1', '--seed', '2'])
    """

    point: tuple
    seed: int

    @property
    def point_name(self) -> str:
        return ",".join(f"{key}={text}" for key, text in self.point) or "recipe"

    @property
    def name(self) -> str:
        return _UNSAFE_FILE_CHARACTERS.sub("_", ",".join([*(f"{k}={t}" for k, t in self.point), f"seed={self.seed}"]))

    @property
    def argv(self) -> list[str]:
        from d5.recipe_args import OVERRIDES_BY_NAME

        argv = [item for key, text in self.point for item in (OVERRIDES_BY_NAME[key].flag, text)]
        return argv + ["--seed", str(self.seed)]


def plan_runs(grid: Mapping[str, Sequence[str]], seeds: int) -> list[SweepRun]:
    """Every point of the cartesian ``grid`` times seeds ``0 .. seeds-1``, points in grid order.

    >>> [run.name for run in plan_runs({"lr": ["0.1", "1.0"]}, seeds=2)]
    ['lr=0.1,seed=0', 'lr=0.1,seed=1', 'lr=1.0,seed=0', 'lr=1.0,seed=1']
    """
    if isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 1:
        raise RecipeError(f"--seeds must be a positive number of runs per point, got {seeds!r}")
    keys = list(grid)
    runs = [SweepRun(tuple(zip(keys, values)), seed)
            for values in itertools.product(*(grid[key] for key in keys)) for seed in range(seeds)]
    names = [run.name for run in runs]
    if len(set(names)) != len(names):
        raise RecipeError("two grid points map to the same result file name (values that differ only in "
                          "characters a file name cannot hold); make the values distinct")
    return runs


# ------------------------------------------------------------------------------------------- aggregation

def summary_table(points: Mapping[str, Mapping[str, Any]]) -> list[dict]:
    """Rows for :func:`d5.bench.report.markdown_table`: one per point, two columns per metric.

    >>> runs = [{"figures": {"Acc": {"value": v, "unit": "%"}}, "extra": {"passed": v > 90}} for v in (91, 89, 95)]
    >>> row = summary_table({"lr=0.1": aggregate_point(runs, planned=3)})[0]
    >>> row["not converged"], row["Acc (mean w/o best, worst)"], row["Acc median [CI] %"]
    (1, '91', '91 [89, 95] (range)')
    """
    rows = []
    for name, point in points.items():
        row: dict[str, Any] = {"point": name, "runs": point["completed"], "failed": point["failed"],
                               "not converged": point["not_converged"]}
        for metric, entry in point["metrics"].items():
            unit = f" {entry['unit']}" if entry["unit"] else ""
            row[f"{metric} (mean w/o best, worst)"] = _number(entry["mean_without_extremes"])
            row[f"{metric} median [CI]{unit}"] = (
                "" if entry["median"] is None else
                f"{_number(entry['median'])} [{_number(entry['ci_low'])}, {_number(entry['ci_high'])}]"
                + ("" if entry["ci_exact"] else " (range)"))
        rows.append(row)
    return rows


def _number(value: Any) -> str:
    return "" if value is None else f"{value:.4g}"


# ------------------------------------------------------------------------------------------------ running

@dataclasses.dataclass
class SweepOutcome:
    """What :func:`run_sweep` did: the manifest's path, the per-point aggregates, runs skipped/run/failed.

    >>> SweepOutcome(Path("out/sweep.json"), {}, skipped=3, ran=1, failed=0).ran
    1
    """

    manifest: Path
    points: dict
    skipped: int
    ran: int
    failed: int


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _finished(run: SweepRun, path: Path, recipe_sha: str) -> dict | None:
    """The run's result document if it is complete, valid and of this recipe and these overrides."""
    from d5.bench.results import read_result
    from d5.recipe_args import overrides_to_argv, parse_overrides
    from d5.recipe_record import RECIPE_FORMAT

    if not path.is_file():
        return None
    try:
        document = read_result(path)
    except D5Error:
        return None
    extra = document.get("extra") or {}
    source = ((extra.get("recipe") or {}).get("source") or {})
    if (document.get("name") != "recipe" or extra.get("recipe_format") != RECIPE_FORMAT
            or extra.get("argv") != overrides_to_argv(parse_overrides(run.argv))
            or source.get("sha256") != recipe_sha):
        return None
    return document


def _remove_stale_temporaries(directory: Path) -> None:
    """Temporary files of d5's atomic writes (``.NAME.XXXX.tmp``) that a killed sweep or run left behind."""
    if directory.is_dir():
        for leftover in directory.glob(".*.tmp"):
            leftover.unlink(missing_ok=True)


def _child_environment(run: SweepRun) -> dict[str, str]:
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[1])  # this d5, also when it is not installed
    env["PYTHONPATH"] = os.pathsep.join([root] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    threads = dict(run.point).get("threads")
    if threads is not None:
        env.update({name: threads for name in THREAD_ENVIRONMENT})
    return env


class _Children:
    """The child processes running now, so that an interrupted sweep can stop them."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.processes: set[subprocess.Popen] = set()
        self.stopping = False

    def run(self, command: list[str], env: dict[str, str]) -> tuple[int, str]:
        with self.lock:
            if self.stopping:
                return -1, "not started: the sweep was interrupted"
            process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
            self.processes.add(process)
        try:
            output, _ = process.communicate()
        finally:
            with self.lock:
                self.processes.discard(process)
        return process.returncode, output

    def stop(self) -> None:
        with self.lock:
            self.stopping = True
            processes = list(self.processes)
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()


def run_sweep(recipe: str | os.PathLike, grid: Sequence[str] | Mapping[str, Sequence[str]], seeds: int,
              output: str | os.PathLike, jobs: int = 1, progress: bool = True, verbose: bool = True) -> SweepOutcome:
    """Run (or resume) the sweep; see the module docstring. ``grid``: ``['key=v1,v2', ...]`` or parsed.

    ``recipe`` is a script's path or a name in ``recipes/``; ``jobs`` runs go at a time (more than one
    disturbs each other's timings); ``progress`` shows a tqdm bar on stderr, ``verbose`` prints the table.

    >>> outcome = run_sweep("mnist_lenet", ["batch_size=32,64"], seeds=5, output="sweeps/lenet")  # doctest: +SKIP
    >>> outcome.points["batch_size=32"]["metrics"]["TestAccuracy"]["mean_without_extremes"]      # doctest: +SKIP
    99.07
    """
    from filelock import FileLock, Timeout

    from d5.bench.environment import capture_environment
    from d5.bench.report import markdown_table
    from d5.io_utils import atomic_write
    from d5.recipe_record import find_recipe

    recipe_path = find_recipe(recipe).resolve()
    parsed = parse_grid(grid) if not isinstance(grid, Mapping) else parse_grid([f"{k}={','.join(v)}"
                                                                                  for k, v in grid.items()])
    runs = plan_runs(parsed, seeds)
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise RecipeError(f"--jobs must be a positive number of runs at a time, got {jobs!r}")
    directory = Path(output)
    if directory.exists() and not directory.is_dir():
        raise D5Error(f"--output {str(directory)!r} is a file; name a directory for the sweep's results")
    try:
        (directory / "runs").mkdir(parents=True, exist_ok=True)
        (directory / "logs").mkdir(exist_ok=True)
    except OSError as err:
        raise OutputPathError(f"--output {str(directory)!r}: the sweep's directory cannot be created "
                              f"({err.strerror or err}); choose a directory you may write to") from None
    lock = FileLock(str(directory / ".sweep.lock"))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise D5Error(f"another d5 sweep is writing {directory} (it holds {directory / '.sweep.lock'}); wait for "
                      "it or choose another --output") from None
    try:
        recipe_sha = _sha256(recipe_path)
        _check_previous_manifest(directory / "sweep.json", recipe_sha, recipe_path)
        for folder in (directory, directory / "runs", directory / "logs"):
            _remove_stale_temporaries(folder)
        environment = capture_environment()
        state = {run: {"file": f"runs/{run.name}.json", "log": f"logs/{run.name}.log", "status": "pending"}
                 for run in runs}
        documents: dict[SweepRun, dict] = {}
        for run in runs:
            document = _finished(run, directory / state[run]["file"], recipe_sha)
            if document is not None:
                documents[run] = document
                state[run]["status"] = "done (earlier)"
        pending = [run for run in runs if run not in documents]
        context = {"recipe": recipe_path, "recipe_sha": recipe_sha, "grid": parsed, "seeds": seeds,
                   "environment": environment, "state": state}
        _write_manifest(directory, context, points=None)
        children = _Children()
        failed = 0

        def execute(run: SweepRun) -> tuple[SweepRun, int, str, float]:
            target = directory / state[run]["file"]
            target.unlink(missing_ok=True)  # an invalid or foreign result: redo it from scratch
            command = [sys.executable, "-m", "d5.cli", "run", str(recipe_path), *run.argv, "--json", str(target)]
            started = time.perf_counter()
            status, output = children.run(command, _child_environment(run))
            wall = time.perf_counter() - started
            with atomic_write(directory / state[run]["log"], "w", encoding="utf-8") as handle:
                handle.write(f"$ {' '.join(command)}\n{output}\nexit status {status}\n")
            return run, status, output, wall

        from tqdm import tqdm

        bar = tqdm(total=len(runs), initial=len(runs) - len(pending), desc="sweep", unit="run",
                   disable=not progress, file=sys.stderr)
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=jobs)
        try:
            futures = [pool.submit(execute, run) for run in pending]
            for future in concurrent.futures.as_completed(futures):
                run, status, output, wall = future.result()
                document = _finished(run, directory / state[run]["file"], recipe_sha)
                state[run].update(exit_status=status, wall_seconds=wall,
                                  status="done" if document is not None else "failed")
                if document is not None:
                    documents[run] = document
                    state[run]["recipe_seconds"] = (document.get("extra") or {}).get("recipe_seconds")
                else:
                    failed += 1
                    tail = " | ".join(output.strip().splitlines()[-2:])
                    bar.write(f"run {run.name} failed (exit status {status}): {tail[:300]} -- see "
                              f"{directory / state[run]['log']}", file=sys.stderr)
                _write_manifest(directory, context, points=None)
                bar.update(1)
        except BaseException:
            children.stop()
            pool.shutdown(wait=True, cancel_futures=True)
            _write_manifest(directory, context, points=None)  # what finished stays finished
            raise
        finally:
            pool.shutdown(wait=True)
            bar.close()

        points = {}
        for point, point_runs in itertools.groupby(runs, key=lambda r: r.point):
            point_runs = list(point_runs)
            points[point_runs[0].point_name] = {
                "point": dict(point), **aggregate_point([documents[r] for r in point_runs if r in documents],
                                                        len(point_runs))}
        manifest = _write_manifest(directory, context, points=points)
        table = markdown_table(summary_table(points)) if points else "(no points)"
        text = (f"# Sweep of {recipe_path.name}\n\nGrid: {parsed}; seeds per point: {seeds}. Per metric: the mean "
                "without the best and the worst run (MLPerf), and the median with its 95% confidence interval "
                "(\"range\": too few runs for the interval).\n\n" + table + "\n")
        with atomic_write(directory / "summary.md", "w", encoding="utf-8") as handle:
            handle.write(text)
        if verbose:
            print(table)
        return SweepOutcome(manifest, points, skipped=len(runs) - len(pending), ran=len(pending), failed=failed)
    finally:
        lock.release()


def _check_previous_manifest(path: Path, recipe_sha: str, recipe_path: Path) -> None:
    from d5.bench.results import read_result

    if not path.exists():
        return
    from d5.bench.results import check_payload

    previous = read_result(path)  # a D5Error names a corrupt or newer manifest
    check_payload(previous, path)
    recorded = (previous.get("extra") or {}).get("recipe") or {}
    if previous.get("name") != "sweep" or recorded.get("sha256") not in (None, recipe_sha):
        raise D5Error(f"{path.parent} holds a sweep of another recipe or another version of it "
                      f"({recorded.get('path')}, SHA-256 {str(recorded.get('sha256'))[:12]}...; now {recipe_path}, "
                      f"{recipe_sha[:12]}...); choose another --output, or restore that recipe to resume the sweep")


def _write_manifest(directory: Path, context: Mapping[str, Any], points: Mapping[str, Any] | None) -> Path:
    from d5.bench.results import write_result

    runs = [{"point": dict(run.point), "seed": run.seed, **entry} for run, entry in context["state"].items()]
    extra = {"sweep_format": SWEEP_FORMAT, "complete": points is not None,
             "recipe": {"path": str(context["recipe"]), "sha256": context["recipe_sha"]},
             "grid": context["grid"], "seeds": context["seeds"], "runs": runs}
    return write_result(directory / "sweep.json", "sweep", dict(points or {}), environment=context["environment"],
                        extra=extra)


__all__ = ["parse_grid", "plan_runs", "grid_keys", "aggregate", "aggregate_point", "summary_table", "run_sweep",
           "SweepRun", "SweepOutcome", "THREAD_ENVIRONMENT", "SWEEP_FORMAT"]
