"""The training loop's own overhead: LeNet-5 on the reference framework (MomentumOptimizer, batch 64) trained
through the full d5 loop -- Trainer with a ShuffleSampler, ProgressBar, EpochSummary, CSV and JSON loggers and
metrics (TrainingAccuracy, WallclockTime, Throughput, CPUUtilization, PeakMemory) -- versus a bare loop calling
``optimizer.step(batch)`` over the same batches, built beforehand. Target: at most 1.02x.

Data is synthetic, Fashion-MNIST-shaped (1x28x28 float32 images, 10 classes); an "epoch" is ``--steps``
batches (938 = one Fashion-MNIST epoch of 60,000 images). Both loops train the same executor and optimizer, in
the same process; each round runs one epoch of each, alternating which goes first, after an untimed warm-up.

This 2-core machine's speed drifts by several percent within seconds, more than the effect measured, so whole
epoch times (reported too) scatter too widely to resolve 2%. The figure is therefore built from robust parts,
per round and loop: the median interval between the starts of consecutive optimizer steps (the step plus
everything the loop does between steps: sampling, hooks, metrics, progress), times the number of steps, plus the
fixed cost before the first and after the last step (trainer set-up, loggers' writes, validation bookkeeping).
The per-round ratio full/bare of those epoch estimates is summarized as a median with its non-parametric CI.

    python benchmarks/training_overhead.py                 # the measurement (about 5 minutes)
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
                                                                 "(default 20; --quick: 3)")
    parser.add_argument("--quick", action="store_true", help="a few short rounds: a smoke test, not a measurement")
    parser.add_argument("--output", default=None,
                        help="result JSON (default results/training_overhead.json; --quick: ...-quick.json)")
    args = parser.parse_args()
    steps = args.steps or (60 if args.quick else 938)
    rounds = args.rounds or (3 if args.quick else 20)
    output = args.output or ("results/training_overhead-quick.json" if args.quick else "results/training_overhead.json")
    if steps < 1 or rounds < 2:
        parser.error("--steps must be >= 1 and --rounds >= 2")

    from d5.training.trainer import Trainer

    executor, optimizer, sampler = build(steps)
    sampler.set_epoch(0)
    batches = list(sampler)  # exactly the batches the trainer's epoch 0 takes from the sampler
    work = tempfile.mkdtemp(prefix="d5-overhead-")
    sink = open(os.devnull, "w")
    starts: list[float] = []
    ends: list[float] = []
    step = optimizer.step

    def recorded_step(batch):  # the same wrapper in both loops: its cost cancels in the ratio
        starts.append(time.perf_counter())
        outputs = step(batch)
        ends.append(time.perf_counter())
        return outputs

    optimizer.step = recorded_step  # the trainer looks the method up on the instance

    def bare() -> None:
        for batch in batches:
            optimizer.step(batch)

    def full() -> None:
        Trainer(sampler, None, executor, optimizer, events=full_loop_events(work, sink), progress=False).run(1)

    def timed(loop) -> dict[str, float]:
        starts.clear(), ends.clear()
        begin = time.perf_counter()
        loop()
        finish = time.perf_counter()
        interval = float(np.median(np.diff(starts)))
        fixed = (starts[0] - begin) + (finish - ends[-1])
        return {"wall": finish - begin, "interval": interval, "fixed": fixed, "estimate": interval * len(starts) + fixed}

    timed(bare), timed(full)  # warm-up: imports, allocator, caches, psutil
    runs: dict[str, list[dict[str, float]]] = {"bare": [], "full": []}
    for index in range(rounds):
        order = (("bare", bare), ("full", full)) if index % 2 == 0 else (("full", full), ("bare", bare))
        for name, loop in order:
            runs[name].append(timed(loop))
        b, f = runs["bare"][-1], runs["full"][-1]
        print(f"round {index + 1}/{rounds}: step interval bare {b['interval'] * 1e3:.3f} ms, full "
              f"{f['interval'] * 1e3:.3f} ms; fixed {b['fixed'] * 1e3:.1f} / {f['fixed'] * 1e3:.1f} ms; epoch "
              f"estimate ratio {f['estimate'] / b['estimate']:.4f} (wall {f['wall'] / b['wall']:.4f})", flush=True)

    def column(name: str, key: str) -> list[float]:
        return [run[key] for run in runs[name]]

    paired = summarize([f["estimate"] / b["estimate"] for f, b in zip(runs["full"], runs["bare"])])
    wall = compare(column("full", "wall"), column("bare", "wall"))
    overhead_per_step = float(np.median([f["interval"] - b["interval"] for f, b in zip(runs["full"], runs["bare"])]))
    fixed_per_epoch = float(np.median([f["fixed"] - b["fixed"] for f, b in zip(runs["full"], runs["bare"])]))
    figures = {
        "steps_per_epoch": steps, "batch_size": BATCH, "rounds": rounds,
        "bare_step_interval_seconds": summarize(column("bare", "interval")),
        "full_step_interval_seconds": summarize(column("full", "interval")),
        "epoch_estimate_ratio_full_over_bare": paired, "wall_epoch_ratio_full_over_bare": wall,
        "overhead_per_step_seconds": overhead_per_step, "fixed_overhead_per_epoch_seconds": fixed_per_epoch,
        "target_ratio_at_most": TARGET, "met": bool(paired.median <= TARGET),
    }
    path = write_result(output, "training_overhead", figures, extra={
        "quick": args.quick, "framework": "reference", "model": "lenet5", "optimizer": "MomentumOptimizer(0.01, 0.9)",
        "full_loop": [type(event).__name__ for event in full_loop_events(work, sink)] + ["ShuffleSampler"],
        "runs": runs})
    print(f"full/bare epoch (robust estimate): {paired}")
    print(f"full/bare epoch wall time:         {wall}")
    print(f"overhead per step {overhead_per_step * 1e6:.1f} us, fixed per epoch {fixed_per_epoch * 1e3:.1f} ms "
          f"(target ratio <= {TARGET}: {'met' if figures['met'] else 'NOT met'}"
          f"{', quick run: not a measurement' if args.quick else ''})")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
