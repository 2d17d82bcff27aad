"""Is d5's data pipeline ever the bottleneck? Samples/s of the CIFAR-10 input pipeline against the samples/s the
PyTorch ResNet-44 trainer consumes, measured in the same run (issue 10's target: the pipeline delivers >= 10x).

Pipeline: ``d5.ShuffleSampler`` over CIFAR-10-shaped data held as the CIFAR loader holds it (50,000 x 3x32x32
float32 NCHW in [0, 1], read-only; synthetic values, int64 labels), batch 64, with the standard augmentation
``Compose([RandomCrop(32, padding=4), RandomHorizontalFlip(), Normalize(CIFAR-10 mean, std), Cutout(16)])`` run
by the sampler on every batch (each batch: one gather from the dataset, then the transforms; nothing cached).
Trainer: ``d5.frameworks.pytorch.from_model(d5.models.resnet(44))`` with
``d5.frameworks.pytorch.MomentumOptimizer(executor, 0.1, 0.9)``, ``optimizer.step(batch)`` at batch 64.

Both are timed one batch (one step) at a time, in rounds that alternate the two, after a warm-up, so drift on
a shared machine hits both alike. The figure is paired: per round, median step time / median batch time (=
pipeline samples/s over trainer samples/s), reported as the median over rounds with its non-parametric CI
(``d5.bench.stats.summarize``); the unpaired ratio of all samples' medians with a bootstrap CI
(``d5.bench.stats.compare``) is reported beside it, with the sampling alone (no transforms) and each transform's
share for diagnosis.

    python benchmarks/data_pipeline.py            # the measurement: JSON in results/data_pipeline.json
    python benchmarks/data_pipeline.py --quick    # a smoke run in well under a minute
"""
from __future__ import annotations

import argparse
from typing import Callable, Iterator

import numpy as np

import d5
from d5.bench.paired import time_calls
from d5.bench.results import write_result
from d5.bench.stats import compare, summarize
from d5.training.dataset import NumpyDataset
from d5.training.sampler import ShuffleSampler
from d5.training.transforms import Compose, Cutout, Normalize, RandomCrop, RandomHorizontalFlip

BATCH = 64
EXAMPLES = 50_000
IMAGE_SHAPE = (3, 32, 32)
LR, MOMENTUM = 0.1, 0.9
TARGET_AT_LEAST = 10.0
CIFAR10_MEAN, CIFAR10_STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)
SEED = 0


def cifar_shaped_dataset(examples: int = EXAMPLES) -> NumpyDataset:
    """CIFAR-10's layout as d5's loader gives it (float32 NCHW in [0, 1], read-only, int64 labels)."""
    rng = np.random.default_rng(SEED)
    images = rng.random((examples,) + IMAGE_SHAPE, dtype=np.float32)
    labels = rng.integers(0, 10, examples).astype(np.int64)
    images.flags.writeable = False
    labels.flags.writeable = False
    return NumpyDataset(images, labels)


def cifar_augmentation() -> Compose:
    return Compose([RandomCrop(32, padding=4), RandomHorizontalFlip(), Normalize(CIFAR10_MEAN, CIFAR10_STD),
                    Cutout(16)])


def endless_batches(sampler: ShuffleSampler) -> Iterator[dict]:
    """Batches epoch after epoch (a benchmark may outlast one epoch)."""
    while True:
        yield from sampler


def pipeline_batch(dataset: NumpyDataset, transform=None) -> Callable[[], dict]:
    batches = endless_batches(ShuffleSampler(dataset, BATCH, seed=SEED, transform=transform))
    return lambda: next(batches)


def trainer_step() -> Callable[[], None]:
    import torch

    import d5.frameworks.pytorch as fw

    torch.manual_seed(SEED)
    executor = fw.from_model(d5.models.resnet(44, seed=SEED))
    optimizer = fw.MomentumOptimizer(executor, LR, MOMENTUM)
    rng = np.random.default_rng(SEED)
    batch = {"input": rng.standard_normal((BATCH,) + IMAGE_SHAPE).astype(np.float32),
             "label": rng.integers(0, 10, BATCH).astype(np.int64)}
    return lambda: optimizer.step(batch)


def transform_shares(dataset: NumpyDataset, repeats: int) -> dict:
    """Median seconds per batch of each CIFAR transform alone, on freshly gathered batches (for diagnosis)."""
    rng = np.random.default_rng(SEED)
    raw = dataset[rng.permutation(len(dataset))[:BATCH]]["input"]
    steps = {"gather": lambda: dataset[rng.integers(0, len(dataset), BATCH)]}
    for transform in cifar_augmentation().transforms:
        steps[type(transform).__name__] = (lambda t: lambda: t(raw, rng))(transform)
    return {name: summarize(time_calls(step, repeats)) for name, step in steps.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--pipeline-block", type=int, default=40, help="pipeline batches per round")
    parser.add_argument("--trainer-block", type=int, default=3, help="trainer steps per round")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="few samples: a smoke run, not a result")
    parser.add_argument("--output", default="results/data_pipeline.json")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.pipeline_block, args.trainer_block, args.warmup = 3, 10, 2, 2
    import torch

    dataset = cifar_shaped_dataset()
    pipeline = pipeline_batch(dataset, cifar_augmentation())
    sampling = pipeline_batch(dataset)
    step = trainer_step()
    for fn, count in ((pipeline, args.warmup), (sampling, args.warmup), (step, args.warmup)):
        time_calls(fn, count)  # first-call costs: page faults on the dataset, torch's allocator and thread pool

    rounds = {"pipeline": [], "sampling": [], "trainer": []}
    for number in range(args.rounds):
        order = [("pipeline", pipeline, args.pipeline_block), ("sampling", sampling, args.pipeline_block),
                 ("trainer", step, args.trainer_block)]
        if number % 2:
            order.reverse()
        for name, fn, count in order:
            rounds[name].append(time_calls(fn, count))
    flat = {name: [t for block in blocks for t in block] for name, blocks in rounds.items()}
    paired = summarize([float(np.median(t) / np.median(p)) for t, p in zip(rounds["trainer"], rounds["pipeline"])])
    unpaired = compare(flat["trainer"], flat["pipeline"])
    per_second = {name: BATCH / float(np.median(times)) for name, times in flat.items()}
    figures = {
        "pipeline_batch_s": summarize(flat["pipeline"]),
        "sampling_only_batch_s": summarize(flat["sampling"]),
        "trainer_step_s": summarize(flat["trainer"]),
        "samples_per_second": per_second,
        "ratio_pipeline_over_trainer_samples_per_s": paired,
        "unpaired_ratio_pipeline_over_trainer_samples_per_s": unpaired,
        "target_at_least": TARGET_AT_LEAST,
        "met": bool(paired.median >= TARGET_AT_LEAST),
        "transform_batch_s": transform_shares(dataset, 10 if args.quick else 200),
    }
    path = write_result(args.output, "data_pipeline", figures, environment=None,
                        extra={"batch_size": BATCH, "examples": EXAMPLES, "image_shape": list(IMAGE_SHAPE),
                               "transform": repr(cifar_augmentation()), "rounds": args.rounds,
                               "pipeline_block": args.pipeline_block, "trainer_block": args.trainer_block,
                               "warmup": args.warmup, "quick": args.quick, "seed": SEED,
                               "torch_threads": torch.get_num_threads(),
                               "samples": {name: flat[name] for name in flat}})
    print(f"pipeline {per_second['pipeline']:.0f} samples/s (sampling alone {per_second['sampling']:.0f}), "
          f"trainer {per_second['trainer']:.0f} samples/s: pipeline / trainer = {paired.median:.1f}x "
          f"[{paired.ci_low:.1f}, {paired.ci_high:.1f}] (paired over {args.rounds} rounds; unpaired {unpaired}); "
          f"target >= {TARGET_AT_LEAST:g}x: {'met' if figures['met'] else 'NOT met'}")
    for name, summary in figures["transform_batch_s"].items():
        print(f"  {name:>20}: {summary.format()}")
    print(f"wrote {path}")
    return 0 if figures["met"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
