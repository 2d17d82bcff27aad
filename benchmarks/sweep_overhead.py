"""What ``d5 sweep`` adds per run beyond the run itself (issue 10: at most 1 s per point).

A tiny recipe (an MLP on 256 generated points, one epoch) is swept over ``--seeds N`` runs in fresh processes,
one at a time. Each run's result records ``recipe_seconds``: the time from ``run_recipe``'s start to its
end, measured inside the child. The overhead of a run is the sweep's wall time per run (the whole sweep
divided by its runs, so the sweep's own bookkeeping -- planning, manifest writes, the lock, the final
aggregation -- is shared among them) minus the child's ``recipe_seconds``: the interpreter's start, importing
d5 and the recipe, writing the result, and the sweep's work. Reported as the median with its non-parametric
confidence interval over the runs, against the 1 s target.

    python benchmarks/sweep_overhead.py --quick            # 6 runs, a smoke run (seconds)
    python benchmarks/sweep_overhead.py --runs 20          # the figure (about half a minute)
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from d5.bench.results import read_result, write_result
from d5.bench.stats import summarize
from d5.sweep import run_sweep

TARGET_SECONDS = 1.0

TINY_RECIPE = '''
import numpy as np
import d5
import d5.frameworks.reference as d5fw


def blobs(n=256, features=8, seed=1234):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, n).astype(np.int64)
    inputs = (rng.normal(size=(n, features)) + np.where(labels[:, None] == 1, 0.7, -0.7)).astype(np.float32)
    return d5.NumpyDataset(inputs[:128], labels[:128]), d5.NumpyDataset(inputs[128:], labels[128:])


FIXED = {"model": "mlp", "model_kwargs": dict(input_shape=(8,), hidden=(16,), num_classes=2), "dataset": blobs,
         "epochs": 1}
MUTABLE = {"batch_size": 32, "executor": d5fw.from_model, "optimizer": d5fw.MomentumOptimizer,
           "optimizer_args": (0.05, 0.9)}
METRICS = [(d5.TestAccuracy(), None)]

if __name__ == "__main__":
    d5.run_recipe(FIXED, MUTABLE, METRICS, progress=False) or exit(1)
'''


def measure(runs: int) -> tuple[list[float], list[float], float]:
    """Per-run overheads, the children's recipe seconds, and the sweep's total wall time."""
    with tempfile.TemporaryDirectory(prefix="d5-sweep-overhead-") as scratch:
        recipe = Path(scratch) / "tiny_recipe.py"
        recipe.write_text(TINY_RECIPE)
        started = time.perf_counter()
        outcome = run_sweep(recipe, [], seeds=runs, output=Path(scratch) / "sweep", jobs=1, progress=False,
                            verbose=False)
        total = time.perf_counter() - started
        if outcome.failed:
            raise SystemExit(f"{outcome.failed} of {runs} runs failed; see {Path(scratch) / 'sweep' / 'logs'}")
        manifest = read_result(outcome.manifest)
        inside = [float(run["recipe_seconds"]) for run in manifest["extra"]["runs"]]
    per_run = total / runs
    return [per_run - seconds for seconds in inside], inside, total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20, help="runs in the sweep (default 20)")
    parser.add_argument("--quick", action="store_true", help="6 runs: a smoke run, not a result")
    parser.add_argument("--output", default="results/sweep_overhead.json")
    args = parser.parse_args()
    runs = 6 if args.quick else args.runs
    overheads, inside, total = measure(runs)
    overhead = summarize(overheads)
    figures = {"overhead_seconds_per_run": overhead, "recipe_seconds": summarize(inside),
               "sweep_seconds": total, "runs": runs, "target_seconds": TARGET_SECONDS,
               "met": overhead.median <= TARGET_SECONDS}
    write_result(args.output, "sweep_overhead", figures, extra={"quick": args.quick})
    print(f"d5 sweep overhead per run: {overhead.format('s')} over {runs} runs (target <= {TARGET_SECONDS:g} s: "
          f"{'met' if figures['met'] else 'NOT met'}); the runs themselves: {summarize(inside).format('s')}")
    print(f"written to {args.output}")


if __name__ == "__main__":
    main()
