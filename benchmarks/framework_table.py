"""Seed 002's framework table on today's frameworks: the reference, PyTorch, TensorFlow and MXNet running the same
d5 networks -- LeNet-5 on Fashion-MNIST-shaped and ResNet-44 on CIFAR-shaped batches of 64, training (a step of
``MomentumOptimizer``, each framework's native one) and inference -- by images/s, peak resident memory and CPU
utilization, and the test accuracy of the Fashion-MNIST recipe after the same epochs on each; one table and a
grouped bar chart.

Every (framework, workload) runs in a fresh process, so peak memory (``ru_maxrss``: the framework's import, the
model, its buffers) is that workload's alone and no framework's thread pool outlives its measurement. Each times
steps one by one after a warm-up for ``--seconds`` (at least ``--min-steps``); images/s is the batch over the median
step, CPU utilization the process's CPU time over the wall time of the timed steps (100% = one core busy; this
machine has ``cores`` of them). Every framework computes on every core (``OMP_NUM_THREADS``, see
:func:`_threads_env`). MXNet's steps are timed to
``mx.nd.waitall()`` (its engine is asynchronous). Accuracy is ``recipes/fashion_mnist_lenet.py --framework F
--epochs E`` (the same seed, data order and optimizer on each), read from its result JSON.

    python benchmarks/framework_table.py                 # results/framework_table.{json,png}, ~15 min
    python benchmarks/framework_table.py --quick         # a smoke run (few steps, 1 epoch on a subset)
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = pathlib.Path(__file__).resolve()
REPO = HERE.parent.parent
RECIPE = REPO / "recipes" / "fashion_mnist_lenet.py"
FRAMEWORKS = ("reference", "pytorch", "tensorflow", "mxnet")
WORKLOADS = {"lenet5_train": ("lenet5", True), "lenet5_infer": ("lenet5", False),
             "resnet44_train": ("resnet44", True), "resnet44_infer": ("resnet44", False)}
BATCH = 64


def measure(framework: str, workload: str, seconds: float, min_steps: int, warmup: int) -> dict:
    """One workload on one framework, in this process: images/s, peak RSS, CPU utilization."""
    import d5
    import d5.frameworks

    name, train = WORKLOADS[workload]
    module = d5.frameworks.get(framework)
    network = d5.models.lenet5(seed=0) if name == "lenet5" else d5.models.resnet(44, seed=0)
    rng = np.random.default_rng(0)
    shape = (BATCH, 1, 28, 28) if name == "lenet5" else (BATCH, 3, 32, 32)
    batch = {"input": rng.standard_normal(shape).astype(np.float32), "label": rng.integers(0, 10, BATCH)}
    executor = module.from_model(network)
    if train:
        optimizer = module.MomentumOptimizer(executor, 0.01, 0.9)
        call = lambda: optimizer.step(batch)  # noqa: E731
    else:
        feeds = {"input": batch["input"]}
        call = lambda: executor.inference(feeds)  # noqa: E731
    if framework == "mxnet":  # the engine is asynchronous: a step ends when its work has
        import mxnet as mx

        step = call
        call = lambda: (step(), mx.nd.waitall())  # noqa: E731
    for _ in range(warmup):
        call()
    times = []
    cpu_start, wall_start = time.process_time(), time.perf_counter()
    while len(times) < min_steps or time.perf_counter() - wall_start < seconds:
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    cpu, wall = time.process_time() - cpu_start, time.perf_counter() - wall_start
    return {"images_per_second": BATCH / float(np.median(times)), "steps": len(times),
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
            "cpu_percent": 100.0 * cpu / wall, "median_step_s": float(np.median(times))}


def in_fresh_process(framework: str, workload: str, args: argparse.Namespace) -> dict:
    command = [sys.executable, str(HERE), "--worker", framework, workload, "--seconds", str(args.seconds),
               "--min-steps", str(args.min_steps), "--warmup", str(args.warmup)]
    done = subprocess.run(command, capture_output=True, text=True, check=False, cwd=REPO, env=_threads_env())
    if done.returncode != 0:
        raise SystemExit(f"{framework} {workload} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _threads_env() -> dict[str, str]:
    """The workers' environment: OpenMP on every core this process may use unless OMP_NUM_THREADS says otherwise.
    torch and TensorFlow use every core by default; MXNet 1.9.1's engine worker keeps one core back from its OpenMP
    threads (1 thread on a 2-core machine) unless OMP_NUM_THREADS is set before it starts, so without this the table
    would compare MXNet on half the cores."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", str(cores))}


def accuracy(framework: str, epochs: int, subset: int | None) -> dict:
    """The Fashion-MNIST recipe on ``framework``: its test accuracy and training time."""
    with tempfile.TemporaryDirectory() as directory:
        out = pathlib.Path(directory) / "run.json"
        command = [sys.executable, str(RECIPE), "--framework", framework, "--epochs", str(epochs), "--json",
                   str(out)] + (["--subset", str(subset)] if subset else [])
        subprocess.run(command, capture_output=True, text=True, check=False, cwd=REPO, env=_threads_env())
        if not out.exists():
            raise SystemExit(f"the Fashion-MNIST recipe on {framework} wrote no result")
        record = json.loads(out.read_text())
    figures = record["figures"]
    return {"test_accuracy": float(figures["TestAccuracy"]["value"]), "epochs": epochs,
            "met_87": bool(figures["TestAccuracy"]["met"]), "train_seconds": float(figures["WallclockTime"]["value"])}


def chart(rows: dict, path: pathlib.Path) -> None:
    """Images/s per workload, one bar per framework (log scale: the frameworks differ by orders of magnitude)."""
    from matplotlib.figure import Figure

    from d5.io_utils import atomic_write

    frameworks = list(rows)
    workloads = list(WORKLOADS)
    figure = Figure(figsize=(9, 4.5), dpi=100)
    axes = figure.add_subplot()
    width = 0.8 / len(frameworks)
    for index, framework in enumerate(frameworks):
        values = [rows[framework][w]["images_per_second"] for w in workloads]
        positions = np.arange(len(workloads)) + (index - (len(frameworks) - 1) / 2) * width
        axes.bar(positions, values, width, label=framework)
    axes.set_xticks(np.arange(len(workloads)))
    axes.set_xticklabels([w.replace("_", " ") for w in workloads])
    axes.set_yscale("log")
    axes.set_ylabel("images/s (batch 64, log scale)")
    axes.set_title("d5 networks on four frameworks (seed 002's table)")
    axes.legend()
    figure.tight_layout()
    with atomic_write(path, "wb") as handle:
        figure.savefig(handle, format="png")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frameworks", nargs="+", default=None, choices=FRAMEWORKS)
    parser.add_argument("--seconds", type=float, default=8.0, help="timed seconds per workload (after warm-up)")
    parser.add_argument("--min-steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=3, help="epochs of the Fashion-MNIST recipe")
    parser.add_argument("--subset", type=int, default=None, help="train on this many samples (smoke runs)")
    parser.add_argument("--quick", action="store_true", help="a smoke run, not a result")
    parser.add_argument("--output", default="results/framework_table.json")
    parser.add_argument("--chart", default="results/framework_table.png")
    parser.add_argument("--worker", nargs=2, metavar=("FRAMEWORK", "WORKLOAD"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(measure(*args.worker, args.seconds, args.min_steps, args.warmup)))
        return 0
    import d5.frameworks
    from d5.bench.report import markdown_table
    from d5.bench.results import write_result

    if args.quick:
        args.seconds, args.min_steps, args.warmup, args.epochs, args.subset = 1.0, 2, 1, 1, args.subset or 3000
    frameworks = args.frameworks or [f for f in FRAMEWORKS if f in d5.frameworks.available()]
    rows: dict[str, dict] = {}
    for framework in frameworks:
        rows[framework] = {workload: in_fresh_process(framework, workload, args) for workload in WORKLOADS}
        rows[framework]["fashion_mnist"] = accuracy(framework, args.epochs, args.subset)
        print(f"{framework}: " + ", ".join(f"{w} {rows[framework][w]['images_per_second']:.0f} img/s"
                                           for w in WORKLOADS)
              + f", Fashion-MNIST {rows[framework]['fashion_mnist']['test_accuracy']:.2f}%", flush=True)
    table = [{"framework": framework, "workload": workload,
              "images/s": f"{rows[framework][workload]['images_per_second']:.1f}",
              "peak RSS (MB)": f"{rows[framework][workload]['peak_rss_mb']:.0f}",
              "CPU (% of a core)": f"{rows[framework][workload]['cpu_percent']:.0f}",
              "Fashion-MNIST accuracy (%)": f"{rows[framework]['fashion_mnist']['test_accuracy']:.2f}"}
             for framework in frameworks for workload in WORKLOADS]
    path = write_result(args.output, "framework_table", rows,
                        extra={"batch_size": BATCH, "cores": os.cpu_count(), "seconds": args.seconds,
                               "epochs": args.epochs, "subset": args.subset, "quick": args.quick})
    chart(rows, pathlib.Path(args.chart))
    print(markdown_table(table))
    print(f"wrote {path} and {args.chart}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
