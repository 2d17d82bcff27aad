"""The training loop's own overhead: LeNet-5 on the reference framework (MomentumOptimizer, batch 64) trained
through the full d5 loop -- Trainer with a ShuffleSampler, ProgressBar, EpochSummary, CSV and JSON loggers and
metrics (TrainingAccuracy, WallclockTime, Throughput, CPUUtilization, PeakMemory) -- versus a bare loop calling
``optimizer.step(batch)`` over the same batches, built beforehand. Target: at most 1.02x.

Data is synthetic, Fashion-MNIST-shaped (1x28x28 float32 images, 10 classes); an "epoch" is ``--steps``
batches (938 = one Fashion-MNIST epoch of 60,000 images). Both loops train the same executor and optimizer, in
the same process; each round runs one of each, alternating which goes first, after an untimed warm-up round, so
drift on a busy machine hits both alike. The figure is the ratio of median epoch times with a bootstrap CI
(d5.bench.stats.compare), and the median of the per-round ratios with its non-parametric CI.

    python benchmarks/training_overhead.py                 # the measurement (about 2 minutes)
    python benchmarks/training_overhead.py --quick         # a smoke test (seconds)
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np

import d5
from d5.bench.results import write_result
from d5.bench.stats import compare, summarize

BATCH = 64
TARGET = 1.02


def build(steps: int, seed: int = 0):
    """The executor, optimizer and a sampler over exactly ``steps`` batches of synthetic Fashion-MNIST."""
    rng = np.random.default_rng(seed)
    examples = steps * BATCH
    images = rng.standard_normal((examples, 1, 28, 28), dtype=np.float32)
    labels = rng.integers(0, 10, examples).astype(np.int64)
    executor = d5.frameworks.reference.from_model(d5.models.lenet5(seed=seed))
    optimizer = d5.MomentumOptimizer(executor, 0.01, 0.9)
    sampler = d5.ShuffleSampler(d5.NumpyDataset(images, labels), BATCH, seed=seed)
    return executor, optimizer, sampler


def full_loop_events(directory: str, sink):
    """What a user's run has: progress output, per-epoch logs and metrics."""
    from d5.training.events import CSVLogger, EpochSummary, JSONLogger, ProgressBar
    from d5.training.metrics import Throughput, TrainingAccuracy, WallclockTime
    from d5.training.resources import CPUUtilization, PeakMemory

    return [ProgressBar(file=sink), EpochSummary(file=sink), CSVLogger(os.path.join(directory, "log.csv")),
            JSONLogger(os.path.join(directory, "log.json")), TrainingAccuracy(), WallclockTime(), Throughput(),
            CPUUtilization(), PeakMemory()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=None, help="batches per epoch (default 938; --quick: 60)")
    parser.add_argument("--rounds", type=int, default=None, help="timed rounds, each one epoch of each loop "
                                                                 "(default 7; --quick: 3)")
    parser.add_argument("--quick", action="store_true", help="a few short rounds: a smoke test, not a measurement")
    parser.add_argument("--output", default=None,
                        help="result JSON (default results/training_overhead.json; --quick: ...-quick.json)")
    args = parser.parse_args()
    steps = args.steps or (60 if args.quick else 938)
    rounds = args.rounds or (3 if args.quick else 7)
    output = args.output or ("results/training_overhead-quick.json" if args.quick else "results/training_overhead.json")
    if steps < 1 or rounds < 2:
        parser.error("--steps must be >= 1 and --rounds >= 2")

    from d5.training.trainer import Trainer

    executor, optimizer, sampler = build(steps)
    sampler.set_epoch(0)
    batches = list(sampler)  # exactly the batches the trainer's epoch 0 takes from the sampler
    work = tempfile.mkdtemp(prefix="d5-overhead-")
    sink = open(os.devnull, "w")

    def bare() -> float:
        start = time.perf_counter()
        for batch in batches:
            optimizer.step(batch)
        return time.perf_counter() - start

    def full() -> float:
        trainer = Trainer(sampler, None, executor, optimizer, events=full_loop_events(work, sink), progress=False)
        start = time.perf_counter()
        trainer.run(1)
        return time.perf_counter() - start

    bare(), full()  # warm-up: imports, allocator, caches, psutil
    times: dict[str, list[float]] = {"bare": [], "full": []}
    for index in range(rounds):
        order = (("bare", bare), ("full", full)) if index % 2 == 0 else (("full", full), ("bare", bare))
        for name, loop in order:
            times[name].append(loop())
        print(f"round {index + 1}/{rounds}: bare {times['bare'][-1]:.3f} s, full {times['full'][-1]:.3f} s, "
              f"ratio {times['full'][-1] / times['bare'][-1]:.4f}", flush=True)

    ratio = compare(times["full"], times["bare"])
    paired = summarize([f / b for f, b in zip(times["full"], times["bare"])])
    overhead_per_step = (ratio.median_a - ratio.median_b) / steps
    figures = {
        "steps_per_epoch": steps, "batch_size": BATCH, "rounds": rounds,
        "bare_epoch_seconds": summarize(times["bare"]), "full_epoch_seconds": summarize(times["full"]),
        "epoch_time_ratio_full_over_bare": ratio, "per_round_ratio": paired,
        "overhead_per_step_seconds": overhead_per_step,
        "target_ratio_at_most": TARGET, "met": bool(ratio.ratio <= TARGET),
    }
    path = write_result(output, "training_overhead", figures, extra={
        "quick": args.quick, "framework": "reference", "model": "lenet5", "optimizer": "MomentumOptimizer(0.01, 0.9)",
        "full_loop": [type(event).__name__ for event in full_loop_events(work, sink)] + ["ShuffleSampler"]})
    print(f"full/bare epoch time: {ratio}")
    print(f"per-round ratio:      {paired}")
    print(f"overhead per step:    {overhead_per_step * 1e6:.1f} us  (target ratio <= {TARGET}: "
          f"{'met' if figures['met'] else 'NOT met'}{', quick run: not a measurement' if args.quick else ''})")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
