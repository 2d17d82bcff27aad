"""One rank of tests/distributed/test_mpi.py's collectives job (run under mpiexec by ``run_mpi``).

Every rank holds known data (``data(rank)``), runs each call of MPICommunicationNetwork, and reports results,
mpi4py's own answers to the same questions, the counters and the errors it got to ``$D5_MPI_OUT/rank<R>.json``;
the test recomputes the expected values with NumPy from ``data``.
"""
from __future__ import annotations

import time

import numpy as np
from mpi4py import MPI

from d5.distributed import ANY_SOURCE, MPICommunicationNetwork
from d5.errors import DistributedError
from mpi_jobs import report


def data(rank: int, dtype=np.float64) -> np.ndarray:
    """Rank ``rank``'s array: integer values, so every sum is exact in any order."""
    return (np.arange(12).reshape(3, 4) * (rank + 1) + rank).astype(dtype)


def error_of(call) -> str | None:
    """The DistributedError message ``call()`` raises (None if it returns; any other exception propagates)."""
    try:
        call()
    except DistributedError as error:
        return str(error)
    return None


def collectives(comm: MPICommunicationNetwork, out: dict) -> None:
    rank, size = comm.rank, comm.size
    x = data(rank)
    world = MPI.COMM_WORLD
    for op in ("sum", "max", "min", "mean", "prod"):
        out[f"allreduce_{op}"] = comm.allreduce(x, op).tolist()
    reference = np.empty_like(x)
    world.Allreduce(x, reference, MPI.SUM)
    out["mpi4py_allreduce_sum"] = reference.tolist()
    in_place = x.copy()
    result = comm.allreduce(in_place, out=in_place)
    out["allreduce_in_place_is_same_object"] = result is in_place
    out["allreduce_in_place"] = in_place.tolist()
    target = np.empty_like(x)
    out["allreduce_out_is_out"] = comm.allreduce(x, "max", out=target) is target
    out["allreduce_input_untouched"] = bool(np.array_equal(x, data(rank)))
    for dtype in ("float32", "int32", "float16", "complex128"):
        result = comm.allreduce(data(rank, dtype))
        out[f"allreduce_sum_{dtype}"] = [str(result.dtype), np.real(result).tolist()]
    out["allreduce_scalar"] = comm.allreduce(float(rank + 1)).tolist()

    last = size - 1
    out["broadcast_root0"] = comm.broadcast(x, 0).tolist()
    received = x.copy()
    comm.broadcast(received, last, out=received)
    out["broadcast_root_last_in_place"] = received.tolist()
    out["mpi4py_broadcast_root_last"] = world.bcast(x.tolist(), root=last)

    gathered = comm.gather(x, 0)
    out["gather_root0"] = None if gathered is None else gathered.tolist()
    gathered = comm.gather(x, last)
    out["gather_root_last"] = None if gathered is None else gathered.tolist()
    out["allgather"] = comm.allgather(x).tolist()
    out["mpi4py_allgather"] = world.allgather(x.tolist())

    out["reduce_from_neighbors"] = comm.reduce_from_neighbors(x).tolist()
    ints = data(rank, np.int64)
    comm.reduce_from_neighbors(ints, out=ints)
    out["reduce_from_neighbors_int64_in_place"] = ints.tolist()

    request = comm.iallreduce(x, "mean")
    polls = 0
    while not request.test():  # drive it with test(), as hooks do; MPICH makes no progress in between
        polls += 1
    out["iallreduce_mean_test"] = request.wait().tolist()
    out["iallreduce_sum_wait"] = comm.iallreduce(x).wait().tolist()
    requests = [comm.iallreduce(data(rank) * k, name=f"bucket{k}") for k in range(3)]
    out["iallreduce_waitall"] = [result.tolist() for result in comm.waitall(requests)]
    comm.barrier()


def point_to_point(comm: MPICommunicationNetwork, out: dict) -> None:
    rank, size = comm.rank, comm.size
    x = data(rank)
    right, left = (rank + 1) % size, (rank - 1) % size
    received = np.empty_like(x)
    if rank % 2 == 0:  # even ranks send first, odd ranks receive first: no cycle of blocking sends
        comm.send(x, right, tag=7)
        comm.recv(received, left, tag=7)
    else:
        comm.recv(received, left, tag=7)
        comm.send(x, right, tag=7)
    out["recv_from_left"] = received.tolist()
    incoming = np.empty_like(x)
    receiving = comm.irecv(incoming, ANY_SOURCE, tag=9)
    sending = comm.isend(x * 10, left, tag=9)
    out["irecv_is_buffer"] = receiving.wait() is incoming
    out["isend_wait"] = sending.wait()
    out["irecv_from_right"] = incoming.tolist()
    comm.barrier()
    # probe: rank 0 sends one message to rank 1, which probes for it before receiving
    if rank == 0:
        comm.send(np.arange(5, dtype=np.int32), 1, tag=3)
    elif rank == 1:
        found = None
        deadline = time.time() + 10
        while found is None and time.time() < deadline:
            found = comm.probe()
        out["probe"] = list(found)
        comm.recv(np.empty(5, np.int32), found[0], found[1])
    comm.barrier()
    # a receive buffer of the wrong size: shorter message and truncation, both a d5 error on the receiver
    if rank == 0:
        comm.send(np.ones(4), 1, tag=4)
        comm.send(np.ones(8), 1, tag=5)
    elif rank == 1:
        out["short_message"] = error_of(lambda: comm.recv(np.empty(6), 0, tag=4))
        out["truncated_message"] = error_of(lambda: comm.recv(np.empty(6), 0, tag=5))
    comm.barrier()


def counters(comm: MPICommunicationNetwork, out: dict) -> None:
    """A known sequence of calls after reset_stats(); the test computes the expected bytes."""
    rank, size = comm.rank, comm.size
    comm.reset_stats()
    x = data(rank)  # 96 bytes
    comm.allreduce(x)
    comm.broadcast(x, 0)
    comm.gather(x, 0)
    comm.allgather(x)
    comm.reduce_from_neighbors(x)
    comm.iallreduce(x).wait()
    if size > 1:
        if rank == 0:
            comm.send(x, 1)
        elif rank == 1:
            comm.recv(np.empty_like(x), 0)
    out["stats"] = comm.stats()
    out["communication_time"] = comm.communication_time


def refusals(comm: MPICommunicationNetwork, out: dict) -> None:
    """Bad buffers are refused on every rank before anything is sent (so no rank waits for another)."""
    strided = np.ones((4, 4))[:, ::2]
    out["refused_non_contiguous"] = error_of(lambda: comm.allreduce(strided))
    out["refused_non_contiguous_broadcast"] = error_of(lambda: comm.broadcast(strided.T))
    out["refused_object"] = error_of(lambda: comm.allgather(np.array([{}, None], dtype=object)))
    out["refused_bool_sum"] = error_of(lambda: comm.allreduce(np.ones(3, bool)))
    out["refused_int_mean"] = error_of(lambda: comm.allreduce(np.ones(3, np.int32), "mean"))
    out["refused_op"] = error_of(lambda: comm.allreduce(np.ones(3), "median"))
    out["refused_read_only_out"] = error_of(lambda: comm.allreduce(np.ones(3), out=np.frombuffer(bytes(24))))
    out["refused_out_shape"] = error_of(lambda: comm.allreduce(np.ones(3), out=np.empty(4)))
    out["refused_root"] = error_of(lambda: comm.broadcast(np.ones(3), comm.size))
    out["refused_non_contiguous_send"] = error_of(lambda: comm.send(strided, 0))
    # still in step afterwards: a collective that every rank reaches
    out["after_refusals"] = comm.allreduce(np.ones(2)).tolist()


def mismatches(out: dict) -> None:
    """Ranks that submit different tensors are named, on every rank, and the network stays usable."""
    rank = MPI.COMM_WORLD.Get_rank()
    comm = MPICommunicationNetwork(checked=True, fault_handlers=False)
    out["mismatch_shape"] = error_of(lambda: comm.allreduce(np.ones(3 + (rank == 1)), name="fc.weight"))
    out["mismatch_dtype"] = error_of(lambda: comm.allreduce(np.ones(3, np.float32 if rank == 1 else np.float64)))
    out["mismatch_name"] = error_of(lambda: comm.allreduce(np.ones(3), name=f"grad{rank % 2}"))
    out["mismatch_op"] = error_of(lambda: comm.allreduce(np.ones(3), "max" if rank == 1 else "sum"))
    out["mismatch_kind"] = error_of(lambda: comm.broadcast(np.ones(3)) if rank == 1 else comm.allreduce(np.ones(3)))
    out["mismatch_root"] = error_of(lambda: comm.broadcast(np.ones(3), root=rank % 2 if comm.size > 1 else 0))
    out["after_mismatches"] = comm.allreduce(np.ones(2)).tolist()
    out["mismatch_checks"] = comm.stats()["checks"]
    comm.close()
    # the default: the first 64 collectives are checked, so a mismatch at step 0 is named too
    default = MPICommunicationNetwork(fault_handlers=False)
    out["mismatch_default_mode"] = error_of(lambda: default.allgather(np.ones((2, 2 + (rank == 1)))))
    default.close()


def training(comm: MPICommunicationNetwork, out: dict) -> None:
    """A Trainer run whose optimizer averages each gradient by allreduce, with CommunicationVolume and
    PhaseBreakdown as events (the metric finds the network as trainer.optimizer.communication)."""
    from d5.distributed.metrics import CommunicationVolume
    from d5.training.breakdown import PhaseBreakdown
    from d5.training.optimizers import GradientDescent
    from d5.training.sampler import ShuffleSampler
    from d5.training.trainer import Trainer
    from softmax_regression import SoftmaxRegression, three_blobs  # tests/support

    class AllreduceGradientDescent(GradientDescent):
        def __init__(self, executor, communication, lr):
            super().__init__(executor, lr=lr)
            self.communication = communication

        def update_rule(self, grad, old_param, param_name):
            grad = self.communication.allreduce(np.ascontiguousarray(grad), "mean", name=param_name)
            return super().update_rule(grad, old_param, param_name)

    volume, breakdown = CommunicationVolume(), PhaseBreakdown()
    executor = SoftmaxRegression()
    trainer = Trainer(ShuffleSampler(three_blobs(100, seed=1 + comm.rank), 25, seed=0), None, executor,
                      AllreduceGradientDescent(executor, comm, 0.5), events=[volume, breakdown], progress=False)
    stats = trainer.run(2)
    out["training_steps"] = stats.steps
    out["volume"] = volume.as_dict()
    out["volume_state"] = {key: (value.tolist() if isinstance(value, np.ndarray) else value)
                           for key, value in volume.state_dict().items()}
    out["breakdown_phases"] = list(breakdown.phases)
    out["final_W"] = executor.network.tensors["W"].tolist()


def main() -> None:
    comm = MPICommunicationNetwork()
    out = {"rank": comm.rank, "size": comm.size,
           "watchdog_running": comm.fault_handlers.watchdog.running,
           "ranks_table": [list(entry) for entry in comm.fault_handlers.ranks]}
    started = time.perf_counter()
    collectives(comm, out)
    if comm.size > 1:
        point_to_point(comm, out)
    counters(comm, out)
    refusals(comm, out)
    mismatches(out)
    training(comm, out)
    out["seconds"] = time.perf_counter() - started
    comm.close()
    report(out["rank"], out)


if __name__ == "__main__":
    main()
