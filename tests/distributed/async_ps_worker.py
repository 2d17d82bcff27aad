"""One rank of an asynchronous parameter-server run, for tests/distributed/test_async_ps.py (under mpiexec)::

    python async_ps_worker.py STEPS [--max-staleness S] [--drive run|step] [--delays D0,D1,...]
                              [--batch B] [--momentum M] [--fail-rank R --fail-step K]
                              [--stall-rank R --stall-step K]

Every worker trains a float64 MLP (the learnable toy of scheme_worker.py) on its own fixed batches; rank 0 serves.
``--delays`` adds a simulated compute time (seconds, per rank) inside each worker's forward/backward pass, so that
workers overlap and differ in speed. Each rank reports (mpi_jobs.report) its final parameters, the staleness
statistics, its losses and the loss on a held-out batch."""
from __future__ import annotations

import argparse
import time

import numpy as np

import d5
from d5.network.gradient_check import as_float64

PER_WORKER = 4


def network() -> d5.Network:
    return as_float64(d5.models.mlp((6,), hidden=(5,), num_classes=3, seed=1))


def worker_batches(steps: int, worker: int, batch: int = PER_WORKER) -> list[dict[str, np.ndarray]]:
    """Worker ``worker``'s (0-based, among the workers) batches: distinct per worker, labels learnable."""
    rng = np.random.default_rng(1000 + worker)
    inputs = [rng.standard_normal((batch, 6)) for _ in range(steps)]
    return [{"input": x, "label": np.argmax(x[:, :3], axis=1)} for x in inputs]


def held_out() -> dict[str, np.ndarray]:
    x = np.random.default_rng(99).standard_normal((256, 6))
    return {"input": x, "label": np.argmax(x[:, :3], axis=1)}


def optimizer_for(executor, momentum: float = 0.9):
    return d5.MomentumOptimizer(executor, lr=0.1, momentum=momentum)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("steps", type=int)
    parser.add_argument("--max-staleness", type=int, default=None)
    parser.add_argument("--drive", choices=("run", "step"), default="run")
    parser.add_argument("--delays", default="0")
    parser.add_argument("--batch", type=int, default=PER_WORKER)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--fail-rank", type=int, default=-1)
    parser.add_argument("--fail-step", type=int, default=-1)
    parser.add_argument("--stall-rank", type=int, default=-1)
    parser.add_argument("--stall-step", type=int, default=-1)
    args = parser.parse_args()

    from d5.distributed import MPICommunicationNetwork
    from d5.distributed.async_ps import InconsistentParameterServer
    from mpi_jobs import report

    comm = MPICommunicationNetwork()
    rank = comm.rank
    net = network()
    if rank != 0:  # the ranks start from different values: the optimizer gives them rank 0's
        for name in net.get_params():
            net.feed_tensor(name, net.params[name] + rank)
    executor = d5.frameworks.get("reference").from_model(net)
    delays = [float(value) for value in args.delays.split(",")]
    delay = delays[rank % len(delays)]
    passes = [0]
    original = executor.inference_and_backprop

    def timed_pass(inputs, y="loss"):  # a simulated compute time, and the injected failure
        passes[0] += 1
        if rank == args.fail_rank and passes[0] == args.fail_step:
            raise RuntimeError(f"injected failure on rank {rank} at step {passes[0]}")
        if rank == args.stall_rank and passes[0] == args.stall_step:
            time.sleep(600)  # alive but stuck: only the server's deadline can end the job
        if delay:
            time.sleep(delay)
        return original(inputs, y)

    executor.inference_and_backprop = timed_pass
    optimizer = InconsistentParameterServer(optimizer_for(executor, args.momentum), comm,
                                            max_staleness=args.max_staleness)
    batches = worker_batches(args.steps, optimizer.worker_index or 0, args.batch)
    started_wall, started_cpu = time.perf_counter(), time.process_time()
    step_losses = []
    if args.drive == "run":
        losses = optimizer.run(batches)
    else:  # the same loop on every rank, as a Trainer drives it
        for batch in batches:
            outputs = optimizer.step(batch)
            step_losses.append(float(outputs["loss"]) if "loss" in outputs else None)
        optimizer.finish()
        losses = optimizer.losses
    wall, cpu = time.perf_counter() - started_wall, time.process_time() - started_cpu
    names = executor.network.get_params()
    params = {name: value.tolist() for name, value in zip(names, executor.network.fetch_tensors(names))}
    report(rank, {"rank": rank, "is_server": optimizer.is_server, "params": params, "version": optimizer.version,
                  "staleness": optimizer.staleness(), "losses": losses, "step_losses": step_losses,
                  "held_out_loss": float(executor.inference(held_out())["loss"]), "wall": wall, "cpu": cpu,
                  "base_steps": optimizer.base_optimizer.steps, "stats": comm.stats()["ops"]})
    comm.close()


if __name__ == "__main__":
    main()
