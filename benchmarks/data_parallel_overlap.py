"""How much of the gradient allreduce DataParallel's overlap hides on this machine: PyTorch native momentum SGD
wrapped in ``d5.distributed.DataParallel`` on 2 ranks x 1 thread, with the buckets' allreduces started from the
post-accumulate-grad hooks during the backward pass (``overlap=True``) against all of them started after it
(``overlap=False``, the hooks still copying: the same work, only the timing of the communication differs).

Per step and rank: the step time, and the *exposed wait* -- the seconds ``finish()`` spends in its ``Waitall``
(what the step waits for the communication; ``buckets.last_wait``). That wait also holds the time the other rank
arrives later (the ranks' backward passes do not end together), which no overlap can remove; so the part of it
after *both* ranks reached their ``Waitall`` (``perf_counter`` is one clock for the processes of a host) is
reported too: the communication itself left exposed. Both variants alternate in rounds (order rotating) in one
job, so the machine's drift falls on both; figures are medians with non-parametric 95% CIs (d5.bench.stats) and
same-run ratios. For scale, the job also times a blocking allreduce of all the gradients at once (nothing to
overlap it with). MPICH's asynchronous progress thread stays off (notes/distributed.md).

Measured here (2 cores, MPICH over shared memory, quiet machine, two runs of 150 steps per variant; ResNet-20,
batch 32 per rank, 59 gradients, 1.08 MB): a step takes ~69-70 ms, one blocking allreduce of all gradients
0.12-0.31 ms. With 0.25 MiB buckets (6) the overlap cuts the communication left after both ranks reach Waitall
from 0.41-0.53 ms to 0.12-0.16 ms (-70%; rank 0's whole exposed wait 0.44-0.55 -> 0.14-0.17 ms, ratio 0.31x), but
the step does not get faster (1.01x [1.00, 1.02-1.03]): the reduction runs on the same two cores, and most of a
rank's wait is the other rank arriving later (0.3-2 ms), which no overlap removes. With DDP's 25 MiB the gradients
are one bucket, which cannot start before the last gradient: nothing is removed.

    python benchmarks/data_parallel_overlap.py                          # ResNet-20, batch 32 per rank
    python benchmarks/data_parallel_overlap.py --model lenet5 --batch 64 --bucket-mb 0.05
    python benchmarks/data_parallel_overlap.py --quick                  # a smoke run
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = pathlib.Path(__file__).resolve()
MPIEXEC = pathlib.Path(sys.executable).with_name("mpiexec")
#: model -> (builder arguments for d5.models.get, input shape); mlp4096 is communication-heavy (20 M parameters)
MODELS = {"lenet5": (("lenet5",), (1, 28, 28)), "resnet20": (("resnet20",), (3, 32, 32)),
          "resnet44": (("resnet44",), (3, 32, 32)),
          "mlp4096": (("mlp", (1, 28, 28), (4096, 4096)), (1, 28, 28))}


# ---------------------------------------------------------------------- one rank
def worker(args: argparse.Namespace) -> None:
    import torch

    import d5
    from d5.distributed import MPICommunicationNetwork
    from d5.distributed.data_parallel import DataParallel
    from d5.frameworks import pytorch

    torch.set_num_threads(1)
    comm = MPICommunicationNetwork(timeout=None)
    rng = np.random.default_rng(comm.rank)
    builder, shape = MODELS[args.model]
    batch = {"input": rng.standard_normal((args.batch, *shape)).astype(np.float32),
             "label": rng.integers(0, 10, args.batch)}
    variants = {}
    for bucket_mb in args.bucket_mb:
        for overlap in (True, False):
            executor = pytorch.from_model(d5.models.get(*builder))
            optimizer = pytorch.MomentumOptimizer(executor, lr=0.01, momentum=0.9)
            variants[f"{'overlap' if overlap else 'serial'} {bucket_mb:g} MiB"] = DataParallel(
                optimizer, comm, bucket_mb=bucket_mb, overlap=overlap)
    samples = {name: {"step": [], "wait": [], "wait_start": [], "finish": []} for name in variants}

    def run(name: str, count: int, record: bool) -> None:
        wrapper = variants[name]
        for _ in range(count):
            started = time.perf_counter()
            wrapper.step(batch)
            seconds = time.perf_counter() - started
            if record:
                samples[name]["step"].append(seconds)
                samples[name]["wait"].append(wrapper.buckets.last_wait)
                samples[name]["wait_start"].append(wrapper.buckets.last_wait_start)
                samples[name]["finish"].append(wrapper.buckets.last_finish)

    for name in variants:
        run(name, args.warmup, record=False)
    order = list(variants)
    for round_index in range(args.rounds):  # the same order on every rank: the collectives must match
        shift = round_index % len(order)
        for name in order[shift:] + order[:shift]:
            run(name, args.block, record=True)

    # For scale: all the gradients in one blocking allreduce, nothing to hide it behind.
    layout = next(iter(variants.values())).buckets.layout
    flat = np.zeros(layout.nbytes // 4, np.float32)
    blocking = []
    for _ in range(args.warmup + 20):
        comm.barrier()
        started = time.perf_counter()
        comm.allreduce(flat, out=flat)
        blocking.append(time.perf_counter() - started)
    result = {"rank": comm.rank, "size": comm.size, "samples": samples, "blocking_allreduce": blocking[args.warmup:],
              "gradient_bytes": layout.nbytes, "tensors": len(layout.slots),
              "buckets": {name: len(wrapper.buckets.layout) for name, wrapper in variants.items()},
              "early_buckets": {name: wrapper.buckets.early_buckets for name, wrapper in variants.items()}}
    pathlib.Path(args.out, f"rank{comm.rank}.json").write_text(json.dumps(result))
    for wrapper in variants.values():
        wrapper.close()
    comm.close()


# ---------------------------------------------------------------------- the driver
def run_job(args: argparse.Namespace, out: str) -> list[dict]:
    command = [str(MPIEXEC), "-n", "2", sys.executable, str(HERE), "--worker", "--out", out, "--model", args.model,
               "--batch", str(args.batch), "--rounds", str(args.rounds), "--block", str(args.block),
               "--warmup", str(args.warmup), "--bucket-mb", *map(str, args.bucket_mb)]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("MPIR_CVAR_ASYNC_PROGRESS", None)  # never the progress thread: 5x slower compute on 2 cores
    done = subprocess.run(command, capture_output=True, text=True, timeout=3600, env=env)
    paths = [pathlib.Path(out, f"rank{rank}.json") for rank in range(2)]
    if not all(path.exists() for path in paths):
        raise SystemExit(f"the job wrote no result:\n{done.stdout}\n{done.stderr}")
    return [json.loads(path.read_text()) for path in paths]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--model", choices=sorted(MODELS), default="resnet20")
    parser.add_argument("--batch", type=int, default=32, help="per-rank batch")
    parser.add_argument("--bucket-mb", type=float, nargs="+", default=[25.0, 0.25],
                        help="bucket sizes in MiB (DDP's default 25; ResNet-20's 1.1 MB of gradients is then one "
                             "bucket, which cannot start before the last gradient)")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--block", type=int, default=5, help="timed steps per variant and round")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--output", default="results/data_parallel_overlap.json")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.block, args.warmup = 2, 2, 1
    if args.worker:
        worker(args)
        return

    from d5.bench.results import write_result
    from d5.bench.stats import compare, summarize

    with tempfile.TemporaryDirectory() as tmp:
        ranks = run_job(args, tmp)
    first = ranks[0]
    figures: dict = {"gradient_bytes": first["gradient_bytes"], "tensors": first["tensors"],
                     "blocking_allreduce": summarize(first["blocking_allreduce"]), "variants": {}, "ratios": {}}
    print(f"{args.model}, batch {args.batch} per rank, 2 ranks x 1 thread: {first['tensors']} gradients, "
          f"{first['gradient_bytes'] / 1e6:.2f} MB; one blocking allreduce of all of them: "
          f"{figures['blocking_allreduce'].format()}")
    for name in first["samples"]:
        entry = {"buckets": first["buckets"][name], "early_buckets": first["early_buckets"][name]}
        starts = np.array([result["samples"][name]["wait_start"] for result in ranks])  # one clock on one host
        both_ready = starts.max(axis=0)
        entry["arrival_gap"] = summarize(np.abs(starts[0] - starts[1]))
        for rank, result in enumerate(ranks):
            for metric in ("step", "wait", "finish"):
                entry[f"{metric}_rank{rank}"] = summarize(result["samples"][name][metric])
            ends = starts[rank] + np.array(result["samples"][name]["wait"])
            entry[f"after_both_rank{rank}"] = summarize(np.maximum(0.0, ends - both_ready))
        figures["variants"][name] = entry
        print(f"  {name:>18} ({entry['buckets']} buckets, {entry['early_buckets']} started in backward): step "
              f"{entry['step_rank0'].format()}; exposed wait rank 0 {entry['wait_rank0'].format()}, rank 1 "
              f"{entry['wait_rank1'].format()}; of it after both ranks reached Waitall: "
              f"{entry['after_both_rank0'].format()}, {entry['after_both_rank1'].format()}; arrival gap "
              f"{entry['arrival_gap'].format()}")
    for bucket_mb in args.bucket_mb:
        overlap, serial = f"overlap {bucket_mb:g} MiB", f"serial {bucket_mb:g} MiB"
        ratios = {}
        for metric in ("step", "wait"):
            for rank, result in enumerate(ranks):
                ratios[f"{metric}_rank{rank}"] = compare(result["samples"][overlap][metric],
                                                         result["samples"][serial][metric])
        removed = [float(np.median(result["samples"][serial]["wait"]) - np.median(result["samples"][overlap]["wait"]))
                   for result in ranks]
        ratios["wait_removed_seconds"] = removed
        variants = figures["variants"]
        ratios["after_both_removed_seconds"] = [variants[serial][f"after_both_rank{rank}"].median
                                                - variants[overlap][f"after_both_rank{rank}"].median
                                                for rank in range(2)]
        figures["ratios"][f"{bucket_mb:g} MiB"] = ratios
        print(f"  {bucket_mb:g} MiB buckets, overlap / serial: step {ratios['step_rank0']}; exposed wait rank 0 "
              f"{ratios['wait_rank0']}, rank 1 {ratios['wait_rank1']}; median wait removed "
              f"{removed[0] * 1e3:.2f} / {removed[1] * 1e3:.2f} ms (rank 0 / 1), of the wait after both ranks "
              f"reached Waitall {ratios['after_both_removed_seconds'][0] * 1e3:.2f} / "
              f"{ratios['after_both_removed_seconds'][1] * 1e3:.2f} ms")
    write_result(args.output, "data_parallel_overlap", figures,
                 extra={"model": args.model, "batch_per_rank": args.batch, "ranks": 2, "threads_per_rank": 1,
                        "bucket_mb": args.bucket_mb, "rounds": args.rounds, "block": args.block,
                        "warmup": args.warmup, "quick": args.quick, "framework": "pytorch",
                        "optimizer": "MomentumOptimizer(lr=0.01, momentum=0.9)"})
    print(f"written to {args.output}")


if __name__ == "__main__":
    main()
