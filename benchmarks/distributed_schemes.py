"""Seed 000's experiment in miniature: LeNet-5 on Fashion-MNIST trained by the synchronous parameter server, the
asynchronous parameter server and allreduce on 1, 2 and 4 MPI ranks, at 64 and 1024 samples per rank and step --
throughput, speedup, efficiency (the seed's equations 1 and 2) and final test accuracy, as a table and a plot.

Every run is the recipe a user runs, ``d5 launch -n N recipes/fashion_mnist_lenet.py --scheme S --batch-size B``
(reference framework, 1 thread per rank, the same epochs and seed), each writing its result JSON; the table and
the plot are ``d5 report``'s scaling section over those results (:mod:`d5.bench.report_scaling`). The 1-rank run
(``--scheme allreduce`` on one process: no communication) is the baseline of every scheme at its batch size; a
parameter server needs 2 ranks, one of which serves, so its training ranks are 1 and 3. On this 2-core machine 4
ranks are oversubscribed: each gets about half a core, so efficiency at 4 ranks measures the oversubscription as
much as the scheme.

    python benchmarks/distributed_schemes.py                  # results/distributed_schemes.{json,png}, ~10 min
    python benchmarks/distributed_schemes.py --quick          # 1 epoch on a 6,000-sample subset
"""
from __future__ import annotations

import argparse
import os
import pathlib
import shutil
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve()
REPO = HERE.parent.parent
RECIPE = REPO / "recipes" / "fashion_mnist_lenet.py"


def configurations(schemes, ranks, batches):
    """(scheme, ranks, batch) to run: one 1-rank baseline per batch size, then each scheme on each rank count it
    can use (2 ranks or more; a parameter server needs a server and a worker)."""
    for batch in batches:
        if 1 in ranks:
            yield "allreduce", 1, batch
        for scheme in schemes:
            for count in ranks:
                if count > 1:
                    yield scheme, count, batch


def run_one(scheme: str, ranks: int, batch: int, args: argparse.Namespace, directory: pathlib.Path) -> pathlib.Path:
    path = directory / f"{scheme}-n{ranks}-b{batch}.json"
    command = [sys.executable, "-m", "d5.cli", "launch", "-n", str(ranks), str(RECIPE), "--scheme", scheme,
               "--batch-size", str(batch), "--epochs", str(args.epochs), "--threads", "1", "--seed", str(args.seed),
               "--json", str(path)]
    if args.subset:
        command += ["--subset", str(args.subset)]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH",
                                                                                                      "")]))
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout, env=env, cwd=REPO)
    if not path.exists():
        raise SystemExit(f"{' '.join(command)} wrote no result (exit {done.returncode}):\n{done.stdout[-3000:]}\n"
                         f"{done.stderr[-3000:]}")
    print(f"  {scheme:9s} {ranks} ranks, batch {batch:4d}: {time.perf_counter() - started:5.1f} s", flush=True)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schemes", default="ps,async-ps,allreduce")
    parser.add_argument("--ranks", default="1,2,4")
    parser.add_argument("--batches", default="64,1024", help="samples per rank and step")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--subset", type=int, default=None, help="the first N training and test samples only")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=int, default=1200, help="seconds per run")
    parser.add_argument("--quick", action="store_true", help="1 epoch on 6,000 samples")
    parser.add_argument("--reuse", action="store_true", help="tabulate the results already in --runs, run nothing")
    parser.add_argument("--runs", default="results/distributed_schemes", help="directory of the runs' results")
    parser.add_argument("--output", default="results/distributed_schemes.json")
    parser.add_argument("--chart", default="results/distributed_schemes.png")
    args = parser.parse_args()
    if args.quick:
        args.epochs, args.subset = 1, args.subset or 6000

    from d5.bench.report import load_results, markdown_table
    from d5.bench.report_scaling import scaling_plot, scaling_points, scaling_rows
    from d5.bench.results import write_result
    from d5.io_utils import atomic_write

    directory = REPO / args.runs
    grid = list(configurations(args.schemes.split(","), [int(n) for n in args.ranks.split(",")],
                               [int(b) for b in args.batches.split(",")]))
    if not args.reuse:
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True)
        print(f"{len(grid)} runs of {RECIPE.name}, {args.epochs} epoch(s)"
              f"{f', subset {args.subset}' if args.subset else ''}")
        for scheme, ranks, batch in grid:
            run_one(scheme, ranks, batch, args, directory)
    points = scaling_points(load_results([directory]).runs)
    rows = scaling_rows(points)
    print(markdown_table(rows))
    png = scaling_plot(points)
    if png is not None:
        with atomic_write(REPO / args.chart, "wb") as handle:
            handle.write(png)
    write_result(REPO / args.output, "distributed_schemes", {"points": points},
                 extra={"epochs": args.epochs, "subset": args.subset, "seed": args.seed, "grid": grid,
                        "recipe": str(RECIPE.relative_to(REPO)), "runs": str(args.runs), "quick": args.quick})
    print(f"wrote {args.output}" + (f" and {args.chart}" if png is not None else ""))


if __name__ == "__main__":
    main()
