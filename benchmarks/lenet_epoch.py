"""One epoch of LeNet-5 training on Fashion-MNIST (60k images, batch 64): d5's reference framework versus a
hand-written native PyTorch loop, measured in the same run.

Epochs of the two alternate (torch, reference, torch, reference, ...) so drift on a noisy machine hits
both alike. Each epoch runs in a fresh worker process (after a 20-step warm-up), so one framework's
thread pools cannot slow the other down. The figure is the ratio of median epoch times, with a bootstrap
CI; the per-step times give a second, many-sample view of the same ratio.

    python benchmarks/lenet_epoch.py --repeats 3 --output results/lenet_epoch.json
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

import numpy as np

import d5
from d5.bench.results import write_result
from d5.bench.stats import compare, summarize

BATCH = 64
LR, MOMENTUM = 0.01, 0.9


def reference_epoch(train, seed: int) -> tuple[float, list[float], float]:
    """One epoch on the reference framework through d5's own sampler and optimizer (the full d5 path)."""
    executor = d5.frameworks.reference.from_model(d5.models.lenet5(seed=seed))
    optimizer = d5.MomentumOptimizer(executor, LR, MOMENTUM)
    sampler = d5.ShuffleSampler(train, BATCH, seed=seed)
    steps = []
    start = time.perf_counter()
    for batch in sampler:
        t0 = time.perf_counter()
        out = optimizer.step(batch)
        steps.append(time.perf_counter() - t0)
    return time.perf_counter() - start, steps, float(out["loss"])


def torch_epoch(images: np.ndarray, labels: np.ndarray, seed: int) -> tuple[float, list[float], float]:
    """The same epoch as a PyTorch user writes it: nn.Sequential, CrossEntropyLoss, optim.SGD."""
    import torch
    from torch import nn

    torch.manual_seed(seed)
    model = nn.Sequential(
        nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(400, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    loss_fn = nn.CrossEntropyLoss()
    x_all, y_all = torch.from_numpy(images), torch.from_numpy(labels)
    order = torch.from_numpy(np.random.default_rng(seed).permutation(len(labels)))
    steps = []
    start = time.perf_counter()
    for i in range(0, len(labels), BATCH):
        t0 = time.perf_counter()
        index = order[i:i + BATCH]
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(x_all[index]), y_all[index])
        loss.backward()
        optimizer.step()
        steps.append(time.perf_counter() - t0)
    return time.perf_counter() - start, steps, float(loss.detach())


def load_training_set(subset: int | None):
    train, _ = d5.datasets.load_fashion_mnist()
    everything = train[np.arange(subset or len(train))]
    return np.ascontiguousarray(everything["input"]), everything["label"]


def worker(framework: str, seed: int, subset: int | None) -> None:
    """Time one epoch of ``framework`` in this process and print the result as one JSON line."""
    images, labels = load_training_set(subset)
    warm_images, warm_labels = images[:BATCH * 20], labels[:BATCH * 20]
    if framework == "pytorch":
        torch_epoch(warm_images, warm_labels, seed)  # imports, allocator, thread pool
        seconds, steps, loss = torch_epoch(images, labels, seed)
    else:
        reference_epoch(d5.NumpyDataset(warm_images, warm_labels), seed)
        seconds, steps, loss = reference_epoch(d5.NumpyDataset(images, labels), seed)
    print(json.dumps({"seconds": seconds, "steps": steps, "loss": loss}))


def run_worker(framework: str, seed: int, subset: int | None) -> dict:
    command = [sys.executable, __file__, "--worker", framework, "--seed", str(seed)]
    if subset:
        command += ["--subset", str(subset)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{framework} worker failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="epochs per framework (alternating)")
    parser.add_argument("--subset", type=int, default=None, help="use only N training images (quick check)")
    parser.add_argument("--output", default="results/lenet_epoch.json")
    parser.add_argument("--worker", choices=("pytorch", "reference"), help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.seed, args.subset)
        return

    epochs = {"pytorch": [], "reference": []}
    steps = {"pytorch": [], "reference": []}
    for repeat in range(args.repeats):
        for name in ("pytorch", "reference"):
            result = run_worker(name, repeat, args.subset)
            epochs[name].append(result["seconds"])
            steps[name].extend(result["steps"])
            print(f"repeat {repeat + 1}/{args.repeats} {name:9s}: {result['seconds']:6.2f} s/epoch "
                  f"(last loss {result['loss']:.3f})", flush=True)

    epoch_ratio = compare(epochs["reference"], epochs["pytorch"])
    step_ratio = compare(steps["reference"], steps["pytorch"])
    figures = {
        "images_per_epoch": args.subset or 60000,
        "batch_size": BATCH,
        "pytorch_epoch_seconds": summarize(epochs["pytorch"]),
        "reference_epoch_seconds": summarize(epochs["reference"]),
        "epoch_time_ratio_reference_over_pytorch": epoch_ratio,
        "step_time_ratio_reference_over_pytorch": step_ratio,
        "target_ratio_at_most": 3.0,
        "met": bool(epoch_ratio.ratio <= 3.0),
    }
    path = write_result(args.output, "lenet_epoch", figures, extra={"repeats": args.repeats, "subset": args.subset})
    print(f"epoch time ratio reference/pytorch: {epoch_ratio}")
    print(f"step time ratio reference/pytorch:  {step_ratio}")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
