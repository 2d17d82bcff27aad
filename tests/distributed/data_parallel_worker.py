"""One rank of the DataParallel jobs of tests/distributed/test_data_parallel.py (run under mpiexec):
``python data_parallel_worker.py OUT_DIR``. Every rank trains a float64 MLP on its shard of fixed global batches
with each configuration of :data:`CONFIGS` (framework, optimizer, overlap, bucket size, compression) and writes the
final parameters to ``OUT_DIR/rank<R>.npz`` (keys ``<config>/<parameter>``); then checks that closing the wrapper
removes its hooks, and that a model that differs between the ranks is refused; ``OUT_DIR/rank<R>.json`` has the
rest (the buckets' counters, the error messages)."""
from __future__ import annotations

import gc
import sys

import numpy as np

import d5
from d5.distributed.data_parallel import DataParallel
from d5.errors import DistributedError

from mpi_jobs import report
from scheme_worker import PER_RANK, global_batches, network, shard  # noqa: F401 (the same toy problem)

STEPS = 4
TINY = 1e-4  # MiB: about 13 float64 elements, so every tensor of the MLP gets a bucket of its own
MOMENTUM = {"lr": 0.1, "momentum": 0.9}
#: name -> (framework, optimizer class, its hyper-parameters, keyword arguments of DataParallel)
CONFIGS = {
    "pytorch-momentum-overlap-tiny": ("pytorch", "MomentumOptimizer", MOMENTUM, {"bucket_mb": TINY}),
    "pytorch-momentum-serial-tiny": ("pytorch", "MomentumOptimizer", MOMENTUM, {"bucket_mb": TINY, "overlap": False}),
    "pytorch-momentum-overlap-big": ("pytorch", "MomentumOptimizer", MOMENTUM, {}),
    "pytorch-adam-overlap-tiny": ("pytorch", "AdamOptimizer", {"lr": 0.01}, {"bucket_mb": TINY}),
    "pytorch-adam-serial-big": ("pytorch", "AdamOptimizer", {"lr": 0.01}, {"overlap": False}),
    "pytorch-clipped": ("pytorch", "MomentumOptimizer", {**MOMENTUM, "clip_norm": 0.05}, {"bucket_mb": TINY}),
    "reference-momentum-tiny": ("reference", "MomentumOptimizer", MOMENTUM, {"bucket_mb": TINY}),
    "reference-momentum-big": ("reference", "MomentumOptimizer", MOMENTUM, {"overlap": False}),
    "reference-clipped": ("reference", "MomentumOptimizer", {**MOMENTUM, "clip_norm": 0.05}, {"bucket_mb": TINY}),
    "pytorch-fp16": ("pytorch", "MomentumOptimizer", MOMENTUM, {"bucket_mb": TINY, "compression": "fp16"}),
    "tensorflow-momentum-tiny": ("tensorflow", "MomentumOptimizer", MOMENTUM, {"bucket_mb": TINY}),
    "tensorflow-adam-big": ("tensorflow", "AdamOptimizer", {"lr": 0.01}, {}),
    "tensorflow-clipped": ("tensorflow", "MomentumOptimizer", {**MOMENTUM, "clip_norm": 0.05}, {"bucket_mb": TINY}),
    "mxnet-momentum-tiny": ("mxnet", "MomentumOptimizer", MOMENTUM, {"bucket_mb": TINY}),
    "mxnet-adam-big": ("mxnet", "AdamOptimizer", {"lr": 0.01}, {}),
    "mxnet-clipped": ("mxnet", "MomentumOptimizer", {**MOMENTUM, "clip_norm": 0.05}, {"bucket_mb": TINY}),
}
CONFIGS = {name: config for name, config in CONFIGS.items() if config[0] in d5.frameworks.available()}
#: The frameworks the configurations train (those installed here).
FRAMEWORKS = sorted({framework for framework, *_ in CONFIGS.values()})


def optimizer_of(framework: str, name: str, executor, hyperparameters: dict) -> object:
    return getattr(d5.frameworks.get(framework), name)(executor, **hyperparameters)


def perturbed(rank: int, hidden: int = 5) -> d5.Network:
    """The ranks start from different values: DataParallel gives them rank 0's."""
    net = network(hidden)
    if rank != 0:
        for name in net.get_params():
            net.feed_tensor(name, net.params[name] + rank)
    return net


def main() -> None:
    from d5.distributed import MPICommunicationNetwork  # here: the tests import this module without MPI

    out = sys.argv[1]
    comm = MPICommunicationNetwork()
    batches = [shard(batch, comm.rank) for batch in global_batches(STEPS, comm.size)]
    arrays: dict[str, np.ndarray] = {}
    facts: dict[str, object] = {}
    for config, (framework, name, hyperparameters, options) in CONFIGS.items():
        executor = d5.frameworks.get(framework).from_model(perturbed(comm.rank))
        with DataParallel(optimizer_of(framework, name, executor, hyperparameters), comm, **options) as optimizer:
            for batch in batches:
                optimizer.step(batch)
            facts[config] = optimizer.buckets.stats()
        names = executor.network.get_params()
        values = executor.network.fetch_tensors(names)
        arrays.update({f"{config}/{param}": value for param, value in zip(names, values)})

    # After close(), and after the wrapper is dropped: no hook left, and the optimizer steps alone (no collective).
    from d5.frameworks import pytorch

    executor = pytorch.from_model(perturbed(comm.rank))
    native = pytorch.MomentumOptimizer(executor, lr=0.1)
    params = executor.network.trainable()[1]
    wrapper = DataParallel(native, comm, bucket_mb=TINY)
    wrapper.step(batches[0])
    hooked = [len(param._post_accumulate_grad_hooks or {}) for param in params]
    wrapper.close()
    closed = [len(param._post_accumulate_grad_hooks or {}) for param in params]
    wrapper = DataParallel(native, comm, bucket_mb=TINY)  # the optimizer can be wrapped again after close()
    wrapper.step(batches[1])
    del wrapper
    gc.collect()
    dropped = [len(param._post_accumulate_grad_hooks or {}) for param in params]
    calls = comm.stats()["calls"]
    native.step(batches[2])
    facts["hooks"] = {"while_wrapped": hooked, "after_close": closed, "after_drop": dropped,
                      "gradient_hook": repr(native.gradient_hook), "collectives_alone": comm.stats()["calls"] - calls}

    # A model that differs between the ranks: refused on every rank, naming the tensor.
    for framework in FRAMEWORKS:
        executor = d5.frameworks.get(framework).from_model(network(hidden=5 if comm.rank == 0 else 7))
        try:
            DataParallel(optimizer_of(framework, "MomentumOptimizer", executor, MOMENTUM), comm).step(batches[0])
            facts[f"mismatch-{framework}"] = None
        except DistributedError as error:
            facts[f"mismatch-{framework}"] = str(error)
    np.savez(f"{out}/rank{comm.rank}.npz", **arrays)
    report(comm.rank, facts)


if __name__ == "__main__":
    main()
