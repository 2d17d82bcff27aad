"""The distributed level's figures, measured under real mpiexec jobs on this machine (same-run ratios):

- ``allreduce``: d5's ``MPICommunicationNetwork.allreduce(out=)`` of a 25 MB float32 buffer against a raw mpi4py
  ``Allreduce`` of the same buffer on 2 ranks, alternating in rounds (the bandwidth ratio, d5 / raw; target
  >= 0.95);
- ``scaling``: weak scaling of LeNet-5 training with ``ConsistentDecentralized`` on the reference framework, one
  thread per rank, per-rank batch 64: throughput on 1 and 2 ranks (seed 000's equations: throughput_n =
  samples * workers / time, speedup_n = throughput_n / throughput_1, efficiency = speedup_n / n; target >= 90%).

    python benchmarks/distributed.py                 # both, JSON in results/distributed.json
    python benchmarks/distributed.py --quick         # a smoke run
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile

import numpy as np

HERE = pathlib.Path(__file__).resolve()
MPIEXEC = pathlib.Path(sys.executable).with_name("mpiexec")


# ---------------------------------------------------------------------- the workers (one per rank)
def allreduce_worker(args: argparse.Namespace) -> dict | None:
    from d5.bench.paired import alternate, flat, paired_ratio
    from d5.distributed import MPICommunicationNetwork

    comm = MPICommunicationNetwork(timeout=None)
    count = int(args.megabytes * 1e6) // 4
    source = np.random.default_rng(comm.rank).standard_normal(count).astype(np.float32)
    out_d5, out_raw = np.empty_like(source), np.empty_like(source)
    raw = comm.comm  # the mpi4py communicator under d5's network: the same library, no d5 in between
    calls = {"d5": lambda: comm.allreduce(source, out=out_d5), "mpi4py": lambda: raw.Allreduce(source, out_raw)}
    samples = alternate(calls, rounds=args.rounds, block=3, warmup=3, progress=False)
    np.testing.assert_array_equal(out_d5, out_raw)  # the same sum, bit for bit
    if comm.rank != 0:
        return None
    time_ratio = paired_ratio(samples["d5"], samples["mpi4py"])
    nbytes = source.nbytes
    return {"ranks": comm.size, "megabytes": nbytes / 1e6,
            "bandwidth_ratio": 1.0 / time_ratio.median,
            "bandwidth_ratio_ci": [1.0 / time_ratio.ci_high, 1.0 / time_ratio.ci_low],
            "d5_ms_median": float(np.median(flat(samples["d5"])) * 1e3),
            "mpi4py_ms_median": float(np.median(flat(samples["mpi4py"])) * 1e3)}


def scaling_worker(args: argparse.Namespace) -> dict | None:
    import time

    import d5
    from d5.distributed import ConsistentDecentralized, MPICommunicationNetwork
    from d5.frameworks import reference

    reference.set_num_threads(1)
    comm = MPICommunicationNetwork(timeout=None)
    executor = reference.from_model(d5.models.lenet5(seed=0))
    optimizer = ConsistentDecentralized(d5.MomentumOptimizer(executor, lr=0.01, momentum=0.9), comm)
    rng = np.random.default_rng(comm.rank)
    batch = {"input": rng.standard_normal((args.batch, 1, 28, 28)).astype(np.float32),
             "label": rng.integers(0, 10, args.batch)}
    for _ in range(5):
        optimizer.step(batch)
    comm.barrier()
    start = time.perf_counter()
    for _ in range(args.steps):
        optimizer.step(batch)
    comm.barrier()
    seconds = time.perf_counter() - start
    if comm.rank != 0:
        return None
    return {"ranks": comm.size, "seconds": seconds, "throughput": args.batch * comm.size * args.steps / seconds,
            "communication_seconds": comm.stats()["seconds"]}


# ---------------------------------------------------------------------- the driver
def run_job(kind: str, ranks: int, args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "rank0.json"
        command = [str(MPIEXEC), "-n", str(ranks), sys.executable, str(HERE), "--worker", kind, "--out", str(out),
                   "--rounds", str(args.rounds), "--steps", str(args.steps), "--batch", str(args.batch),
                   "--megabytes", str(args.megabytes)]
        env = dict(os.environ, OMP_NUM_THREADS="1")
        done = subprocess.run(command, capture_output=True, text=True, timeout=900, env=env)
        if not out.exists():
            raise SystemExit(f"{kind} on {ranks} ranks wrote no result:\n{done.stdout}\n{done.stderr}")
        return json.loads(out.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", choices=("allreduce", "scaling"), help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--steps", type=int, default=40, help="timed training steps per run")
    parser.add_argument("--batch", type=int, default=64, help="per-rank batch (weak scaling)")
    parser.add_argument("--megabytes", type=float, default=25.0)
    parser.add_argument("--repeats", type=int, default=3, help="alternating 1- and 2-rank runs for the scaling")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--output", default="results/distributed.json")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.steps, args.repeats = 5, 10, 1
    if args.worker:
        result = {"allreduce": allreduce_worker, "scaling": scaling_worker}[args.worker](args)
        if result is not None:
            pathlib.Path(args.out).write_text(json.dumps(result))
        return

    from d5.bench.results import write_result
    from d5.bench.stats import summarize

    allreduce = run_job("allreduce", 2, args)
    print(f"allreduce of {allreduce['megabytes']:.0f} MB on 2 ranks: d5 / mpi4py bandwidth "
          f"{allreduce['bandwidth_ratio']:.3f}x [{allreduce['bandwidth_ratio_ci'][0]:.3f}, "
          f"{allreduce['bandwidth_ratio_ci'][1]:.3f}] (target >= 0.95); {allreduce['d5_ms_median']:.2f} ms vs "
          f"{allreduce['mpi4py_ms_median']:.2f} ms")
    runs = {1: [], 2: []}
    for _ in range(args.repeats):  # alternating, so the machine's drift falls on both
        for ranks in (1, 2):
            runs[ranks].append(run_job("scaling", ranks, args))
    efficiencies = [two["throughput"] / (2 * one["throughput"]) for one, two in zip(runs[1], runs[2])]
    efficiency = summarize(efficiencies) if len(efficiencies) > 1 else None
    print(f"LeNet-5 weak scaling (reference, 1 thread per rank, batch {args.batch} per rank): throughput "
          f"{[round(r['throughput']) for r in runs[1]]} (1 rank) vs {[round(r['throughput']) for r in runs[2]]} "
          f"(2 ranks) samples/s; efficiency {[round(e, 3) for e in efficiencies]} (target >= 0.90)")
    write_result(args.output, "distributed", {
        "allreduce": allreduce, "scaling": {"runs": {str(k): v for k, v in runs.items()}, "efficiencies": efficiencies,
                                            "efficiency_median": float(np.median(efficiencies)),
                                            "efficiency_summary": None if efficiency is None else str(efficiency)}},
        extra={"quick": args.quick, "rounds": args.rounds, "steps": args.steps, "batch": args.batch})


if __name__ == "__main__":
    main()
