"""MPICommunicationNetwork under real mpiexec jobs (1, 2 and 4 ranks, oversubscribed on 2 cores), its fault
handling (an exception, a killed rank, a stalled rank end the job quickly and say where), and the pieces that
need no MPI (the watchdog's logic, CommunicationVolume, the interface's portable defaults) in-process.

Every collective is checked against NumPy computed here from the ranks' known data (``collectives_job.data``)
and against mpi4py's own collectives run in the same job. Results come from each rank's JSON report, never from
mpiexec's exit code.
"""
from __future__ import annotations

import pathlib
import re
import subprocess
import sys
import time

import numpy as np
import pytest

from d5.distributed.communication import CommunicationNetwork, CompletedRequest
from d5.errors import D5Error, DistributedError
from mpi_jobs import rank_results, run_mpi  # tests/distributed/conftest.py puts this directory on sys.path

JOB = pathlib.Path(__file__).with_name("collectives_job.py")
SIZES = [1, 2, 4]


def data(rank: int, dtype=np.float64) -> np.ndarray:
    return (np.arange(12).reshape(3, 4) * (rank + 1) + rank).astype(dtype)


@pytest.fixture(scope="module", params=SIZES, ids=[f"P{size}" for size in SIZES])
def job(request, tmp_path_factory):
    """The collectives job on P ranks, run once per P for all the tests below."""
    size = request.param
    workdir = tmp_path_factory.mktemp(f"collectives{size}")
    done = run_mpi(JOB, size, workdir=workdir, timeout=60)
    return size, rank_results(workdir, size, done), done


# ------------------------------------------------------------------------------------------- collectives

@pytest.mark.mpi
def test_collectives_agree_with_numpy_and_mpi4py(job):
    size, results, _ = job
    every = np.stack([data(rank) for rank in range(size)])
    expected = {"sum": every.sum(0), "max": every.max(0), "min": every.min(0), "mean": every.sum(0) / size,
                "prod": every.prod(0)}
    for rank, result in enumerate(results):
        assert result["rank"] == rank and result["size"] == size
        for op, want in expected.items():
            np.testing.assert_array_equal(result[f"allreduce_{op}"], want, err_msg=f"rank {rank} {op}")
        np.testing.assert_array_equal(result["mpi4py_allreduce_sum"], expected["sum"])
        np.testing.assert_array_equal(result["allreduce_in_place"], expected["sum"])
        assert result["allreduce_in_place_is_same_object"] and result["allreduce_out_is_out"]
        assert result["allreduce_input_untouched"]
        for dtype in ("float32", "int32", "float16", "complex128"):
            got_dtype, values = result[f"allreduce_sum_{dtype}"]
            assert got_dtype == dtype
            np.testing.assert_array_equal(values, expected["sum"])
        assert result["allreduce_scalar"] == size * (size + 1) / 2

        np.testing.assert_array_equal(result["broadcast_root0"], data(0))
        np.testing.assert_array_equal(result["broadcast_root_last_in_place"], data(size - 1))
        np.testing.assert_array_equal(result["mpi4py_broadcast_root_last"], data(size - 1))

        assert (result["gather_root0"] is None) == (rank != 0)
        assert (result["gather_root_last"] is None) == (rank != size - 1)
        if rank == 0:
            np.testing.assert_array_equal(result["gather_root0"], every)
        if rank == size - 1:
            np.testing.assert_array_equal(result["gather_root_last"], every)
        np.testing.assert_array_equal(result["allgather"], every)
        np.testing.assert_array_equal(result["mpi4py_allgather"], every)

        np.testing.assert_array_equal(result["iallreduce_mean_test"], expected["mean"])
        np.testing.assert_array_equal(result["iallreduce_sum_wait"], expected["sum"])
        np.testing.assert_array_equal(result["iallreduce_waitall"], [expected["sum"] * k for k in range(3)])
        assert result["watchdog_running"]
        assert [entry[0] for entry in result["ranks_table"]] == list(range(size))


@pytest.mark.mpi
def test_reduce_from_neighbors_is_own_plus_left_plus_right_on_the_ring(job):
    """Always three terms: P=1 gives 3x (the rank is its own neighbour), P=2 gives own + 2 * other (the one
    neighbour is both left and right), so ``/ 3`` (the seeds' ConsistentNeighbors) is a weighted average."""
    size, results, _ = job
    for rank, result in enumerate(results):
        want = data(rank) + data((rank - 1) % size) + data((rank + 1) % size)
        np.testing.assert_array_equal(result["reduce_from_neighbors"], want, err_msg=f"rank {rank}")
        np.testing.assert_array_equal(result["reduce_from_neighbors_int64_in_place"], want.astype(np.int64))
    if size == 1:
        np.testing.assert_array_equal(results[0]["reduce_from_neighbors"], 3 * data(0))
    if size == 2:
        np.testing.assert_array_equal(results[0]["reduce_from_neighbors"], data(0) + 2 * data(1))
    # the ring average preserves the mean over ranks (the mixing matrix is doubly stochastic)
    mixed = np.mean([np.array(result["reduce_from_neighbors"]) / 3 for result in results], axis=0)
    np.testing.assert_allclose(mixed, np.mean([data(rank) for rank in range(size)], axis=0))


@pytest.mark.mpi
def test_point_to_point_and_probe(job):
    size, results, _ = job
    if size == 1:
        pytest.skip("point to point needs two ranks")
    for rank, result in enumerate(results):
        np.testing.assert_array_equal(result["recv_from_left"], data((rank - 1) % size))
        np.testing.assert_array_equal(result["irecv_from_right"], 10 * data((rank + 1) % size))
        assert result["irecv_is_buffer"] and result["isend_wait"] is None
    assert results[1]["probe"] == [0, 3, 20]  # source, tag, bytes (5 int32)
    assert "recv got 32 bytes from rank 0 into an array of 48 bytes" in results[1]["short_message"]
    assert "Message truncated" in results[1]["truncated_message"]
    assert "rank 1/" in results[1]["truncated_message"]


@pytest.mark.mpi
def test_counters_count_this_ranks_logical_payload(job):
    """After reset_stats(): allreduce, broadcast(root 0), gather(root 0), allgather, reduce_from_neighbors,
    iallreduce and one send 0 -> 1 of a 96-byte array; nothing is counted with one rank."""
    size, results, _ = job
    n = 96
    for rank, result in enumerate(results):
        stats, ops = result["stats"], result["stats"]["ops"]
        assert stats["rank"] == rank and stats["size"] == size
        others = size - 1
        neighbours = min(size - 1, 2)
        want = {"allreduce": (n, n), "iallreduce": (n, n),
                "broadcast": (n, 0) if rank == 0 else (0, n),
                "gather": (0, n * others) if rank == 0 else (n, 0),
                "allgather": (n, n * others),
                "reduce_from_neighbors": (n * neighbours, n * neighbours)}
        if size == 1:
            want = {op: (0, 0) for op in want}
        if size > 1 and rank == 0:
            want["send"] = (n, 0)
        if size > 1 and rank == 1:
            want["recv"] = (0, n)
        assert set(ops) == set(want), (rank, ops)
        for op, (sent, received) in want.items():
            assert (ops[op]["calls"], ops[op]["bytes_sent"], ops[op]["bytes_received"]) == (1, sent, received), op
            assert ops[op]["seconds"] >= 0
        assert stats["calls"] == len(want)
        assert stats["bytes_sent"] == sum(sent for sent, _ in want.values())
        assert stats["bytes_received"] == sum(received for _, received in want.values())
        assert stats["seconds"] == pytest.approx(sum(op["seconds"] for op in ops.values()))
        assert result["communication_time"] == pytest.approx(stats["seconds"])
        if size > 1:
            assert stats["seconds"] > 0 and stats["checks"] == 6  # within the first 64 collectives: all checked


# ------------------------------------------------------------------------------------------- bad input

@pytest.mark.mpi
def test_bad_buffers_are_refused_on_every_rank_without_a_hang(job):
    size, results, _ = job
    for rank, result in enumerate(results):
        where = f"rank {rank}/{size}"
        for key, fragment in [("refused_non_contiguous", "needs a C-contiguous array"),
                              ("refused_non_contiguous_broadcast", "needs a C-contiguous array"),
                              ("refused_non_contiguous_send", "needs a C-contiguous array"),
                              ("refused_object", "numeric arrays only"), ("refused_bool_sum", "bool"),
                              ("refused_int_mean", "op='mean'"), ("refused_op", "op must be one of"),
                              ("refused_read_only_out", "read-only"), ("refused_out_shape", "expected (3,)"),
                              ("refused_root", "is not a rank")]:
            assert result[key] is not None and fragment in result[key] and where in result[key], (key, result[key])
        assert result["after_refusals"] == [size, size]


@pytest.mark.mpi
def test_ranks_submitting_different_tensors_are_named_not_deadlocked(job):
    size, results, _ = job
    if size == 1:
        assert all(results[0][f"mismatch_{what}"] is None for what in ("shape", "dtype", "name", "op", "kind"))
        return
    for rank, result in enumerate(results):
        shape = result["mismatch_shape"]
        assert shape.startswith(f"rank {rank}/{size}: the ranks called collective #1 with different arguments")
        assert "rank 1: allreduce(sum) of float64[4] 'fc.weight'" in shape
        assert f"rank{'s' if size > 2 else ''} 0{', 2, 3' if size == 4 else ''}: allreduce(sum) of float64[3]" in shape
        assert "rank 1: allreduce(sum) of float32[3]" in result["mismatch_dtype"]
        assert "'grad0'" in result["mismatch_name"] and "'grad1'" in result["mismatch_name"]
        assert "allreduce(max)" in result["mismatch_op"]
        assert "rank 1: broadcast of float64[3] root 0" in result["mismatch_kind"]
        assert "root 1" in result["mismatch_root"]
        assert "allgather of float64[2, 3]" in result["mismatch_default_mode"]
        assert result["after_mismatches"] == [size, size]  # still in step: every rank raised at the same call
        assert result["mismatch_checks"] == 7


@pytest.mark.mpi
def test_communication_volume_of_a_trainer_run(job):
    """A Trainer run with an allreduce-averaging optimizer: 8 steps x one 3x3 float64 gradient (72 bytes)."""
    size, results, _ = job
    for rank, result in enumerate(results):
        volume = result["volume"]
        steps = result["training_steps"]
        assert steps == 8
        per_step = 72 if size > 1 else 0
        assert (volume["bytes_sent"], volume["bytes_received"], volume["calls"]) == (per_step * steps,
                                                                                     per_step * steps, steps)
        assert volume["value"] == 2 * per_step * steps and volume["unit"] == "B" and volume["rank"] == rank
        assert [epoch["bytes_sent"] for epoch in volume["per_epoch"]] == [per_step * 4] * 2
        assert [entry["rank"] for entry in volume["per_rank"]] == list(range(size))
        assert all(entry["bytes_sent"] == per_step * steps for entry in volume["per_rank"])
        assert result["breakdown_phases"][-1] == "communication"
        np.testing.assert_allclose(result["final_W"], results[0]["final_W"], rtol=0, atol=0)  # one model


# ------------------------------------------------------------------------------------------- faults

FAULTS_PRELUDE = """
import os, signal, sys, time
import numpy as np
from d5.distributed import MPICommunicationNetwork
from mpi_jobs import report
comm = MPICommunicationNetwork()
comm.allreduce(np.ones(8), name="warm-up")
report(comm.rank, {"pid": os.getpid()})
"""


@pytest.mark.mpi
@pytest.mark.parametrize("size", [2, 4])
def test_an_exception_on_one_rank_ends_the_job_naming_the_rank(tmp_path, size):
    script = FAULTS_PRELUDE + """
if comm.rank == 1:
    raise ValueError("rank one fails on purpose")
comm.allreduce(np.ones(8), name="grad")  # the other ranks wait here: under plain python, forever
report(comm.rank, {"finished": True})
"""
    done = run_mpi(script, size, workdir=tmp_path, timeout=45)
    assert done.elapsed < 30, done.stderr
    assert re.search(rf"d5 rank 1/{size} \(\S+, pid \d+\): ValueError: rank one fails on purpose", done.stderr), \
        done.stderr
    assert "Traceback" in done.stderr and f"d5: {size} MPI ranks (rank pid host)" in done.stderr
    assert all("finished" not in result for result in rank_results(tmp_path, size, done))


@pytest.mark.mpi
def test_a_killed_rank_takes_the_job_down(tmp_path):
    script = FAULTS_PRELUDE + """
if comm.rank == 2:
    os.kill(os.getpid(), signal.SIGKILL)
comm.allreduce(np.ones(8), name="grad")
report(comm.rank, {"finished": True})
"""
    done = run_mpi(script, 4, workdir=tmp_path, timeout=45, mpiexec_args=["-print-all-exitcodes"])
    assert done.elapsed < 30, done.stderr
    results = rank_results(tmp_path, 4, done)
    assert all("finished" not in result for result in results)
    # hydra prints every rank's exit code in rank order: the killed rank is the one with 9 (SIGKILL)
    codes = re.search(r"Exit codes: \[\S+\] ([\d,]+)", done.stdout + done.stderr)
    assert codes is not None and codes.group(1).split(",")[2] == "9", done.stdout + done.stderr


@pytest.mark.mpi
def test_a_stalled_rank_makes_the_watchdog_abort_naming_the_waiting_call(tmp_path):
    script = FAULTS_PRELUDE + """
if comm.rank == 3:
    time.sleep(120)  # alive but stuck: hydra never notices
else:
    comm.allreduce(np.ones(8), name="grad")
report(comm.rank, {"finished": True})
"""
    started = time.perf_counter()
    done = run_mpi(script, 4, workdir=tmp_path, timeout=45, env={"D5_COMM_TIMEOUT": "3"})
    assert 3 <= time.perf_counter() - started and done.elapsed < 30, done.stderr
    line = re.search(r"d5 rank ([012])/4 \(\S+, pid \d+\): (.*)", done.stderr)
    assert line is not None, done.stderr
    assert line.group(2).startswith("allreduce(sum) of float64[8] 'grad' has waited"), line.group(0)
    assert "longer than D5_COMM_TIMEOUT=3 s" in line.group(2)
    assert all("finished" not in result for result in rank_results(tmp_path, 4, done))


# ------------------------------------------------------------------------------------------- without MPI

class _FakeComm:
    """What the watchdog reads of a communicator."""

    def Get_rank(self):
        return 0

    def Get_size(self):
        return 2


def test_the_watchdog_reports_a_call_past_its_deadline_and_only_then():
    from d5.distributed.faults import Watchdog

    fired = []
    watchdog = Watchdog(_FakeComm(), 0.3, on_timeout=fired.append)
    try:
        watchdog.state = (time.perf_counter(), ("recv", (4,), "float64", None, 1, 7))
        time.sleep(0.1)
        watchdog.state = None  # finished in time
        time.sleep(0.4)
        assert fired == []
        watchdog.state = (time.perf_counter(), ("allreduce(sum)", (8,), "float64", "grad", None, None))
        deadline = time.perf_counter() + 5
        while not fired and time.perf_counter() < deadline:
            time.sleep(0.02)
    finally:
        watchdog.stop()
    assert len(fired) == 1
    assert re.match(r"d5 rank 0/2 \(\S+, pid \d+\): allreduce\(sum\) of float64\[8\] 'grad' has waited 0\.\d s, "
                    r"longer than D5_COMM_TIMEOUT=0.3 s", fired[0]), fired[0]


def test_timeouts_and_check_settings_from_the_environment():
    from d5.distributed.faults import describe_call, timeout_from_env

    assert timeout_from_env({"D5_COMM_TIMEOUT": "2.5"}) == 2.5 and timeout_from_env({}) == 60.0
    assert timeout_from_env({"D5_COMM_TIMEOUT": "inf"}) is None
    with pytest.raises(DistributedError, match="D5_COMM_TIMEOUT='soon'"):
        timeout_from_env({"D5_COMM_TIMEOUT": "soon"})
    assert describe_call(("recv", (2, 3), "int32", None, "any", 4)) == "recv of int32[2, 3] from rank any, tag 4"
    assert describe_call(("broadcast", (1,), "float64", None, 2, None)) == "broadcast of float64[1], root 2"


def test_importing_d5_distributed_does_not_import_mpi4py():
    code = ("import sys, d5.distributed, d5.distributed.faults; d5.distributed.CommunicationNetwork; "
            "sys.exit(1 if 'mpi4py' in sys.modules else 0)")
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0


class _OneRank(CommunicationNetwork):
    """A one-rank network that counts like an implementation, for the interface's defaults and the metric."""

    rank, size = 0, 1

    def allreduce(self, array, op="sum", out=None, *, name=None):
        self.counters.record("allreduce", array.nbytes, array.nbytes, 0.001)
        result = np.array(array, copy=True) if out is None else out
        if out is not None and out is not array:
            out[...] = array
        return result

    def broadcast(self, array, root=0, out=None, *, name=None):
        self._check_root(root)
        return np.array(array, copy=True) if out is None else out

    def reduce_from_neighbors(self, array, out=None, *, name=None):
        return 3 * array

    def send(self, array, dest, tag=0):
        raise AssertionError("one rank sends nothing")

    recv = send


def test_the_interface_defaults_on_one_rank():
    comm = _OneRank()
    x = np.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(comm.gather(x), x[None])
    np.testing.assert_array_equal(comm.allgather(x), x[None])
    request = comm.iallreduce(x)
    assert isinstance(request, CompletedRequest) and request.test() and comm.testall([request])
    np.testing.assert_array_equal(comm.waitall([request])[0], x)
    comm.barrier()
    stats = comm.stats()
    assert stats["ops"]["allreduce"]["calls"] == 2 and stats["calls"] == 2 and stats["bytes_sent"] == 48 + 1
    assert comm.communication_time == pytest.approx(0.002)
    comm.reset_stats()
    assert comm.stats()["calls"] == 0 and comm.communication_time == 0
    for method in (comm.probe, lambda: comm.isend(x, 0), lambda: comm.irecv(x, 0)):
        with pytest.raises(DistributedError, match="does not implement"):
            method()
    with pytest.raises(DistributedError, match="root=1 is not a rank"):
        comm.gather(x, root=1)


def test_communication_volume_as_a_trainer_event_and_a_test_metric(tmp_path):
    from d5.distributed import CommunicationVolume
    from d5.training.optimizers import GradientDescent
    from d5.training.sampler import ShuffleSampler
    from d5.training.trainer import Trainer
    from softmax_regression import SoftmaxRegression, three_blobs  # tests/support

    class Averaging(GradientDescent):
        def __init__(self, executor, communication):
            super().__init__(executor, lr=0.5)
            self.communication = communication

        def update_rule(self, grad, old_param, param_name):
            return super().update_rule(self.communication.allreduce(grad), old_param, param_name)

    comm = _OneRank()
    comm.allreduce(np.ones(100))  # before the run: not counted
    volume = CommunicationVolume()
    executor = SoftmaxRegression()
    Trainer(ShuffleSampler(three_blobs(100, seed=1), 25, seed=0), None, executor, Averaging(executor, comm),
            events=[volume], progress=False).run(2)
    assert volume.result() == 2 * 8 * 72 and volume.totals[2] == 8
    assert volume.as_dict()["per_rank"] == [{"rank": 0, "bytes_sent": 576, "bytes_received": 576, "calls": 8,
                                             "seconds": pytest.approx(0.008)}]
    assert not volume.is_met(1000) and volume.is_met(2000)
    restored = CommunicationVolume(comm)
    restored.load_state_dict(volume.state_dict())
    assert restored.value == volume.value and restored.epochs.keys() == volume.epochs.keys()

    with pytest.raises(D5Error, match="needs a communication network"):
        Trainer(ShuffleSampler(three_blobs(50, seed=1), 25, seed=0), None, executor,
                GradientDescent(executor, lr=0.5), events=[CommunicationVolume()], progress=False).run(1)

    as_test = CommunicationVolume(comm, reruns=3)
    for _ in range(as_test.reruns):
        as_test.end(comm.allreduce(as_test.begin(np.ones(4))))
    assert as_test.measure(None, None) == 64.0 and as_test.mean_bytes == 64.0
