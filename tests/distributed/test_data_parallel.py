"""d5.distributed.DataParallel: a framework's native optimizer (and the reference framework's) with its gradients
averaged over the ranks in bucketed allreduces, overlapped with the backward pass on PyTorch.

Under mpiexec (2 and 4 ranks, oversubscribed on 2 cores; one job per rank count runs every configuration of
data_parallel_worker.py): every exact configuration ends with the parameters of one process trained on the global
batch -- overlap on and off, one bucket per tensor and one bucket for all, momentum, Adam, clipping by the global
norm --; the hooks start the buckets during the backward pass only with overlap; closing or dropping the wrapper
removes the hooks; a model that differs between the ranks is refused on every rank, naming the tensor. In this
process, with fake networks (one rank; a pair whose partner sends zeros, so a mean halves): the bucket layout, that
the averages are what the update reads (fed back, as views, copied back), the wrapper's Optimizer surface, the hook
of the native optimizers, and the refusals.
"""
from __future__ import annotations

import gc
import importlib.util
import pathlib

import numpy as np
import pytest

import d5
from d5.distributed.communication import CommunicationNetwork
from d5.distributed.data_parallel import BucketLayout, DataParallel, bucket_bytes
from d5.errors import DistributedError
from d5.frameworks import base, reference

from mpi_jobs import rank_results, run_mpi  # tests/distributed/conftest.py puts this directory on sys.path

WORKER = pathlib.Path(__file__).with_name("data_parallel_worker.py")


def _worker():
    spec = importlib.util.spec_from_file_location("data_parallel_worker", WORKER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


worker = _worker()


def _single_process(framework: str, name: str, hyperparameters: dict, ranks: int) -> dict[str, np.ndarray]:
    """One process training on the concatenated shards: what DataParallel must reproduce."""
    executor = d5.frameworks.get(framework).from_model(worker.network())
    optimizer = worker.optimizer_of(framework, name, executor, hyperparameters)
    for batch in worker.global_batches(worker.STEPS, ranks):
        optimizer.step(batch)
    names = executor.network.get_params()
    return dict(zip(names, (np.array(value) for value in executor.network.fetch_tensors(names))))


# ---------------------------------------------------------------------------------------------- under mpiexec
@pytest.fixture(scope="module", params=[2, 4], ids=["2 ranks", "4 ranks"])
def job(request, tmp_path_factory):
    pytest.importorskip("torch")
    ranks = request.param
    out = tmp_path_factory.mktemp(f"data-parallel-{ranks}")
    done = run_mpi(WORKER, ranks, args=[str(out)], workdir=out, timeout=60)
    facts = rank_results(out, ranks, done)
    arrays = []
    for rank in range(ranks):
        path = out / f"rank{rank}.npz"
        assert path.exists(), f"rank {rank} wrote no parameters:\n{done.stdout}\n{done.stderr}"
        arrays.append(dict(np.load(path)))
    return ranks, facts, arrays


@pytest.mark.mpi
def test_every_exact_configuration_ends_with_the_single_process_parameters(job):
    ranks, facts, arrays = job
    for config, (framework, name, hyperparameters, _) in worker.CONFIGS.items():
        if "fp16" in config:
            continue
        expected = _single_process(framework, name, hyperparameters, ranks)
        for rank in range(ranks):
            for param, want in expected.items():
                np.testing.assert_allclose(arrays[rank][f"{config}/{param}"], want, rtol=1e-9, atol=1e-12,
                                           err_msg=f"{config}, rank {rank}, {param}")


@pytest.mark.mpi
def test_compressed_buckets_keep_the_ranks_equal_and_near_the_exact_result(job):
    ranks, facts, arrays = job
    framework, name, hyperparameters, _ = worker.CONFIGS["pytorch-fp16"]
    expected = _single_process(framework, name, hyperparameters, ranks)
    elements = sum(value.size for value in expected.values())
    for rank in range(ranks):
        for param, want in expected.items():
            np.testing.assert_array_equal(arrays[rank][f"pytorch-fp16/{param}"], arrays[0][f"pytorch-fp16/{param}"])
            np.testing.assert_allclose(arrays[rank][f"pytorch-fp16/{param}"], want, rtol=0, atol=1e-2)
        stats = facts[rank]["pytorch-fp16"]
        assert stats["bytes_sent"] == 2 * elements * worker.STEPS and not stats["overlap"]


@pytest.mark.mpi
def test_the_hooks_start_the_buckets_during_backward_only_with_overlap(job):
    ranks, facts, _ = job
    steps = worker.STEPS
    for rank in range(ranks):
        stats = facts[rank]
        # Tiny buckets: one per tensor, all started by the hooks; the serial baseline starts them in finish().
        assert stats["pytorch-momentum-overlap-tiny"]["buckets"] == 4
        assert stats["pytorch-momentum-overlap-tiny"]["early_buckets"] == 4 * steps
        assert stats["pytorch-momentum-overlap-big"]["buckets"] == 1
        assert stats["pytorch-momentum-overlap-big"]["early_buckets"] == steps
        for config in ("pytorch-momentum-serial-tiny", "pytorch-adam-serial-big", "reference-momentum-tiny"):
            assert stats[config]["early_buckets"] == 0, config
        for config, (framework, *_) in worker.CONFIGS.items():
            if framework in ("tensorflow", "mxnet"):  # no per-parameter hooks: overlap is off, whatever was asked
                assert stats[config]["early_buckets"] == 0 and not stats[config]["overlap"], config
        assert all(stats[config]["steps"] == steps for config in worker.CONFIGS)


@pytest.mark.mpi
def test_closing_or_dropping_the_wrapper_removes_its_hooks(job):
    ranks, facts, _ = job
    for rank in range(ranks):
        hooks = facts[rank]["hooks"]
        assert hooks["while_wrapped"] == [1, 1, 1, 1]
        assert hooks["after_close"] == hooks["after_drop"] == [0, 0, 0, 0]
        assert hooks["gradient_hook"] == "None" and hooks["collectives_alone"] == 0


@pytest.mark.mpi
def test_a_model_that_differs_between_the_ranks_is_refused_on_every_rank(job):
    ranks, facts, _ = job
    for rank in range(ranks):
        shape = "(5, 6)" if rank == 0 else "(7, 6)"
        for framework in worker.FRAMEWORKS:
            message = facts[rank][f"mismatch-{framework}"]
            assert message is not None and "do not hold the same parameters" in message, (rank, message)
            assert f"here on rank {rank}: 'parameter fc2.weight:{shape}:float64'" in message, message


# ---------------------------------------------------------------------------------------------- one process
class OneRank(CommunicationNetwork):
    """A one-rank network (no MPI): the interface's defaults do the non-blocking calls."""

    rank, size = 0, 1

    def allreduce(self, array, op="sum", out=None, *, name=None):
        self.counters.record("allreduce", 0, 0, 0.0)
        out = np.array(array, copy=True) if out is None else out
        if out is not array:
            out[...] = array
        return out

    def broadcast(self, array, root=0, out=None, *, name=None):
        return np.array(array, copy=True) if out is None else out

    def reduce_from_neighbors(self, array, out=None, *, name=None):
        return 3 * array

    def send(self, array, dest, tag=0):
        raise AssertionError("one rank sends nothing")

    recv = send


class LonelyPair(CommunicationNetwork):
    """Rank 0 of two, whose partner contributes zeros: a mean halves every gradient, so DataParallel around plain
    gradient descent with rate 2 lr steps like the optimizer alone with rate lr (powers of 2: exactly)."""

    rank, size = 0, 2

    def allreduce(self, array, op="sum", out=None, *, name=None):
        out = np.empty_like(array) if out is None else out
        np.multiply(array, 0.5 if op == "mean" else 1.0, out=out)
        return out

    def allgather(self, array, out=None, *, name=None):
        return np.stack([array, array])

    broadcast = OneRank.broadcast
    reduce_from_neighbors = OneRank.reduce_from_neighbors
    send = recv = OneRank.send


BATCH = {"input": np.random.default_rng(0).standard_normal((8, 6)), "label": np.arange(8) % 3}


def test_the_layout_is_reverse_order_buckets_of_at_most_bucket_mb():
    names = ["a", "b", "c", "d", "e"]
    shapes = [(1000,), (10,), (300_000,), (10,), (20,)]  # c alone is over 1 MiB as float32
    dtypes = ["float32", "float32", "float32", "float64", "float32"]
    layout = BucketLayout(names, shapes, dtypes, bucket_mb=1.0)
    assert [[names[position] for position in bucket] for bucket in layout.buckets] == [["e", "d"], ["c"], ["b", "a"]]
    assert layout.buffers[0] == [(np.dtype("float32"), 20), (np.dtype("float64"), 10)]  # one buffer per dtype
    assert layout.slots[3].buffer == 1 and layout.slots[3].offset == 0 and layout.slots[0].offset == 10
    assert len(BucketLayout(names, shapes, dtypes, bucket_mb=25)) == 1
    assert len(BucketLayout(names, shapes, dtypes, bucket_mb=1e-6)) == 5  # every tensor alone
    assert layout.signature()[0] == "gradient e:(20,):float32 in bucket 0 at 0"
    for bad in (0, -1, float("nan"), float("inf"), "25", True):
        with pytest.raises(DistributedError, match="bucket_mb"):
            bucket_bytes(bad)
    with pytest.raises(DistributedError, match="floating-point"):
        BucketLayout(["i"], [(3,)], ["int64"])


@pytest.mark.parametrize("framework", ["reference", "pytorch", "tensorflow", "mxnet"])
def test_on_one_rank_the_wrapper_steps_like_the_optimizer(framework):
    fw = reference if framework == "reference" else pytest.importorskip(f"d5.frameworks.{framework}")
    plain, wrapped = fw.from_model(worker.network()), fw.from_model(worker.network())
    alone = fw.AdamOptimizer(plain, lr=0.01)
    optimizer = DataParallel(fw.AdamOptimizer(wrapped, lr=0.01), OneRank(), bucket_mb=1e-4)
    for _ in range(3):
        alone.step(BATCH)
        optimizer.step(BATCH)
    names = plain.network.get_params()
    for name, want, got in zip(names, plain.network.fetch_tensors(names), wrapped.network.fetch_tensors(names)):
        np.testing.assert_allclose(got, want, rtol=1e-12, err_msg=name)
    assert optimizer.steps == 3 and optimizer.buckets.stats()["steps"] == 3
    optimizer.close()


@pytest.mark.parametrize("case", ["reference", "pytorch", "pytorch-copy-back", "tensorflow", "mxnet"])
def test_the_averages_are_the_gradients_the_update_reads(case, monkeypatch):
    """Through every way the averages reach the optimizer: fed back (reference; TensorFlow, as the pass's gradient
    tensors; MXNet, into the gradient buffers), param.grad as a view of its bucket (PyTorch on the CPU), copied back into param.grad (PyTorch off the
    CPU, simulated here)."""
    if case == "reference":
        fw = reference
    else:
        fw = pytest.importorskip(f"d5.frameworks.{case.removesuffix('-copy-back')}")
    if case == "pytorch-copy-back":
        from d5.frameworks.pytorch import distributed

        class CopyBack(distributed.GradientBuckets):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, **kwargs)
                self._as_view = [False] * len(self._as_view)  # as for parameters on a GPU
                self._off_host = list(range(len(self._as_view)))

        monkeypatch.setattr(distributed, "GradientBuckets", CopyBack)
    plain, wrapped = fw.from_model(worker.network()), fw.from_model(worker.network())
    alone = fw.GradientDescent(plain, lr=0.1)
    optimizer = DataParallel(fw.GradientDescent(wrapped, lr=0.2), LonelyPair(), bucket_mb=1e-4)
    for _ in range(3):
        alone.step(BATCH)
        optimizer.step(BATCH)
    names = plain.network.get_params()
    for name, want, got in zip(names, plain.network.fetch_tensors(names), wrapped.network.fetch_tensors(names)):
        np.testing.assert_array_equal(got, want, err_msg=name)
    optimizer.close()


def test_the_wrapper_is_an_optimizer_with_the_optimizers_hyperparameters():
    executor = reference.from_model(worker.network())
    inner = reference.MomentumOptimizer(executor, lr=0.1, momentum=0.9)
    optimizer = DataParallel(inner, OneRank())
    optimizer.momentum = 0.5
    optimizer.lr = 0.2
    assert inner.momentum == 0.5 and inner.lr == 0.2 and optimizer.hyperparameters() == inner.hyperparameters()
    assert optimizer.loss == "loss" and optimizer.executor is executor
    optimizer.step(BATCH)
    state = optimizer.state_dict()
    assert state["optimizer"] == "MomentumOptimizer" and state["t"] == inner.t == 1
    assert "DataParallel(MomentumOptimizer(" in repr(optimizer) and "buckets=1" in repr(optimizer)
    optimizer.close()
    with pytest.raises(DistributedError, match="after close"):
        optimizer.step(BATCH)


@pytest.mark.parametrize("framework", ["pytorch", "tensorflow", "mxnet"])
def test_the_native_hook_is_set_while_wrapped_and_refuses_a_step_around_the_wrapper(framework):
    fw = pytest.importorskip(f"d5.frameworks.{framework}")
    executor = fw.from_model(worker.network())
    native = fw.MomentumOptimizer(executor, lr=0.1)
    params = executor.network.trainable()[1] if framework == "pytorch" else []  # TF, MXNet: no hooks to count
    assert type(native).gradient_hook is None and "gradient_hook" not in vars(native)
    optimizer = DataParallel(native, OneRank())
    assert native.gradient_hook is not None
    with pytest.raises(DistributedError, match="already has a gradient_hook"):
        DataParallel(native, OneRank())
    with pytest.raises(DistributedError, match="outside a DataParallel step"):
        native.step(BATCH)  # stepping the wrapped optimizer itself would skip the averaging
    executor.inference_and_backprop(BATCH)  # a pass outside a step: the hooks are disarmed, nothing happens
    optimizer.step(BATCH)
    del optimizer
    gc.collect()
    assert "gradient_hook" not in vars(native) and all(not param._post_accumulate_grad_hooks for param in params)
    native.step(BATCH)  # alone again


def test_what_cannot_be_wrapped_is_refused():
    executor = reference.from_model(worker.network())
    with pytest.raises(DistributedError, match="native optimizer"):
        DataParallel(object(), OneRank())
    with pytest.raises(DistributedError, match="without an executor"):
        DataParallel(reference.MomentumOptimizer(None), OneRank())
    with pytest.raises(DistributedError, match="CommunicationNetwork"):
        DataParallel(reference.MomentumOptimizer(executor), "comm")
    with pytest.raises(DistributedError, match="compression"):
        DataParallel(reference.MomentumOptimizer(executor), OneRank(), compression=3)


def test_every_framework_has_a_distributed_module():
    assert "distributed.py" in base.REQUIRED_MODULES
    assert base.contract_violations(reference) == []
