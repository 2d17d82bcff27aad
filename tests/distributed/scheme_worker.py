"""One rank of a distributed training run, for tests/distributed/test_schemes.py (run under mpiexec):
``python scheme_worker.py SCHEME FRAMEWORK STEPS OUT_DIR [K]``. Every rank trains a float64 MLP on its shard of
fixed global batches and writes its final parameters and losses to ``OUT_DIR/rank<R>.npz``."""
from __future__ import annotations

import sys

import numpy as np

import d5
from d5.network.gradient_check import as_float64

PER_RANK = 4


def network(hidden: int = 5) -> d5.Network:
    """The toy every distributed test trains (also data_parallel_worker.py's): a float64 MLP, 6 inputs, 3 classes."""
    return as_float64(d5.models.mlp((6,), hidden=(hidden,), num_classes=3, seed=1))


def global_batches(steps: int, ranks: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(7)
    inputs = [rng.standard_normal((PER_RANK * ranks, 6)) for _ in range(steps)]
    return [{"input": x, "label": np.argmax(x[:, :3], axis=1)} for x in inputs]  # learnable labels


def shard(batch: dict[str, np.ndarray], rank: int) -> dict[str, np.ndarray]:
    return {name: value[rank * PER_RANK:(rank + 1) * PER_RANK] for name, value in batch.items()}


def main() -> None:
    from d5.distributed import MPICommunicationNetwork  # here: importing this module must not start MPI
    from d5.distributed.schemes import scheme_by_name

    scheme, framework, steps, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    extra = {}
    if len(sys.argv) > 5:  # model averaging's k, or the allreduce scheme's compression
        extra = {"k": int(sys.argv[5])} if sys.argv[5].isdigit() else {"compression": sys.argv[5]}
    comm = MPICommunicationNetwork()
    fw = d5.frameworks.get(framework)
    net = network()
    if comm.rank != 0:  # the ranks start from different values: the scheme gives them rank 0's
        for name in net.get_params():
            net.feed_tensor(name, net.params[name] + comm.rank)
    executor = fw.from_model(net)
    optimizer = scheme_by_name(scheme)(d5.MomentumOptimizer(executor, lr=0.1, momentum=0.9), comm, **extra)
    losses = [float(optimizer.step(shard(batch, comm.rank))["loss"])
              for batch in global_batches(steps, comm.size)]
    names = executor.network.get_params()
    np.savez(f"{out}/rank{comm.rank}.npz", losses=np.array(losses),
             compressed_bytes=np.array(getattr(optimizer, "compressed_bytes", 0)),
             **{name: value for name, value in zip(names, executor.network.fetch_tensors(names))})


if __name__ == "__main__":
    main()
