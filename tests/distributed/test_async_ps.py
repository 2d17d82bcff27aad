"""The asynchronous parameter server (d5.distributed.async_ps.InconsistentParameterServer) under real mpiexec jobs
on 2 and 4 ranks (oversubscribed on 2 cores): one worker is exactly sequential SGD; three workers train with stale
gradients whose statistics every rank reports; max_staleness bounds them; the stop protocol ends every rank with
the server's parameters; a failing or stalled worker ends the job. Plus the refusals and the admission rule,
in-process."""
from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest

import d5
from d5.distributed.async_ps import InconsistentParameterServer, _Layout
from d5.distributed.communication import CommunicationNetwork
from d5.errors import DistributedError

import async_ps_worker as worker  # tests/distributed/conftest.py puts this directory on sys.path
from mpi_jobs import rank_results, run_mpi

WORKER = pathlib.Path(__file__).with_name("async_ps_worker.py")
HETEROGENEOUS = "0,0.02,0.002,0.002"  # rank 1 ten times slower than ranks 2 and 3 (seconds per pass)


def _run(tmp_path, ranks: int, *args: str, timeout: float = 30, env=None) -> list[dict]:
    done = run_mpi(WORKER, ranks, args=[str(arg) for arg in args], timeout=timeout, workdir=tmp_path, env=env)
    return rank_results(tmp_path, ranks, done)


def _params(result: dict) -> dict[str, np.ndarray]:
    return {name: np.array(value) for name, value in result["params"].items()}


def _assert_same_parameters(results: list[dict]) -> None:
    server = _params(results[0])
    for result in results[1:]:
        for name, value in _params(result).items():
            np.testing.assert_array_equal(value, server[name], err_msg=f"rank {result['rank']} {name}")


@pytest.mark.mpi
@pytest.mark.parametrize("drive", ["run", "step"])
def test_one_worker_is_exactly_sequential_sgd(tmp_path, drive):
    """2 ranks: every gradient is applied before the next pull (staleness 0), so the server's momentum SGD on
    the worker's gradients is the single-process run on the worker's batches, bit for bit, on both ranks."""
    steps = 12
    results = _run(tmp_path, 2, steps, "--drive", drive)
    executor = d5.frameworks.get("reference").from_model(worker.network())
    optimizer = worker.optimizer_for(executor)
    losses = [float(optimizer.step(batch)["loss"]) for batch in worker.worker_batches(steps, 0)]
    names = executor.network.get_params()
    expected = dict(zip(names, executor.network.fetch_tensors(names)))
    for result in results:
        for name, want in expected.items():
            np.testing.assert_array_equal(_params(result)[name], want, err_msg=f"rank {result['rank']} {name}")
        assert result["version"] == steps
        assert result["staleness"]["histogram"] == {"0": steps} and result["staleness"]["max"] == 0
    assert results[1]["losses"] == losses and results[0]["losses"] == losses  # the server's: per update applied
    assert results[0]["base_steps"] == steps  # one base-optimizer step per update on the server
    if drive == "step":  # the server's step serves one update (P - 1) and returns its loss
        assert results[0]["step_losses"] == losses


@pytest.mark.mpi
def test_three_workers_converge_with_stale_gradients_and_report_them(tmp_path):
    """4 ranks, the same loop on every rank (step per batch, then finish): training converges on the learnable
    toy, gradients are stale and their statistics reach every rank, every rank ends with the server's
    parameters, and the server sleeps rather than spins while it waits."""
    steps = 40
    results = _run(tmp_path, 4, steps, "--drive", "step", "--batch", 16, "--momentum", 0.5,
                   "--delays", "0,0.004,0.002,0.001")
    initial = float(d5.frameworks.get("reference").from_model(worker.network()).inference(worker.held_out())["loss"])
    _assert_same_parameters(results)
    for result in results:
        assert result["held_out_loss"] < 0.5 * initial, (result["held_out_loss"], initial)
        assert result["version"] == 3 * steps
        assert result["staleness"] == results[0]["staleness"]  # the server's statistics, sent with FINAL
    stats = results[0]["staleness"]
    assert stats["updates"] == 3 * steps and stats["updates_per_worker"] == {"1": steps, "2": steps, "3": steps}
    assert sum(stats["histogram"].values()) == 3 * steps
    assert stats["max"] > 0 and 0 < stats["mean"] <= stats["max"]
    assert stats["max_staleness"] is None and stats["delayed_pulls"] == 0
    assert len(results[0]["step_losses"]) == steps and None not in results[0]["step_losses"]
    assert results[0]["cpu"] < 0.5 * results[0]["wall"], (results[0]["cpu"], results[0]["wall"])


@pytest.mark.mpi
@pytest.mark.parametrize("bound", [0, 2, None])
def test_max_staleness_bounds_every_gradient(tmp_path, bound):
    """One slow and two fast workers. Unbounded, the slow worker's gradients are many updates old (the case
    None: more than 2); max_staleness=s holds pulls back until no gradient can exceed s, and 0 makes the workers
    take turns."""
    steps = 30
    extra = () if bound is None else ("--max-staleness", bound)
    results = _run(tmp_path, 4, steps, "--delays", HETEROGENEOUS, *extra)
    _assert_same_parameters(results)
    stats = results[0]["staleness"]
    assert stats["updates"] == 3 * steps and stats["max_staleness"] == bound
    if bound is None:
        assert stats["max"] > 2 and stats["delayed_pulls"] == 0, stats
    else:
        assert stats["max"] <= bound and stats["delayed_pulls"] > 0, stats
        assert max(int(key) for key in stats["histogram"]) <= bound
    if bound == 0:
        assert stats["histogram"] == {"0": 3 * steps}


@pytest.mark.mpi
def test_a_failing_worker_ends_the_job(tmp_path):
    """A worker that raises mid-training aborts the whole job through the fault handlers (no rank hangs in the
    server loop or in a pull), naming its rank."""
    done = run_mpi(WORKER, 4, args=["40", "--delays", "0,0.002", "--fail-rank", "2", "--fail-step", "5"], timeout=30,
                   workdir=tmp_path)
    assert "injected failure on rank 2 at step 5" in done.stderr, done.stderr
    assert "d5 rank 2/4" in done.stderr, done.stderr
    assert not list(tmp_path.glob("rank*.json"))
    assert done.elapsed < 30


@pytest.mark.mpi
def test_a_stalled_worker_ends_the_job_at_the_servers_deadline(tmp_path):
    """A worker alive but stuck never sends again: the server's idle deadline (D5_COMM_TIMEOUT) raises on rank 0,
    naming the workers that have not stopped, and the job ends."""
    done = run_mpi(WORKER, 3, args=["20", "--stall-rank", "1", "--stall-step", "3"], timeout=30, workdir=tmp_path,
                   env={"D5_COMM_TIMEOUT": "3"})
    assert "asynchronous PS server" in done.stderr and "workers not stopped: [1" in done.stderr, done.stderr
    assert "d5 rank 0/3" in done.stderr
    assert done.elapsed < 25


@pytest.mark.mpi
def test_one_rank_is_refused(tmp_path):
    done = run_mpi(WORKER, 1, args=["2"], timeout=30, workdir=tmp_path)
    assert "DistributedError" in done.stderr and "use more ranks" in done.stderr, done.stderr
    assert not (tmp_path / "rank0.json").exists()


# ---------------------------------------------------------------------------------------------- in-process


class _FakeNetwork(CommunicationNetwork):
    """Enough of a network to construct the optimizer in one process (nothing is sent)."""

    def __init__(self, size: int = 4, rank: int = 0) -> None:
        self._size, self._rank = size, rank

    rank = property(lambda self: self._rank)
    size = property(lambda self: self._size)

    def allreduce(self, array, op="sum", out=None, *, name=None):
        return array

    def broadcast(self, array, root=0, out=None, *, name=None):
        return array

    def reduce_from_neighbors(self, array, out=None, *, name=None):
        return 3 * array

    def send(self, array, dest, tag=0):
        pass

    def recv(self, array, source, tag=0):
        return array

    def probe(self, source=-1, tag=-1):
        return None

    def isend(self, array, dest, tag=0):
        raise AssertionError("not in these tests")


def _executor():
    return d5.frameworks.get("reference").from_model(worker.network())


@pytest.mark.parametrize("bad", [-1, True, 1.5, "2"])
def test_a_bad_max_staleness_is_refused(bad):
    with pytest.raises(DistributedError, match="max_staleness must be None"):
        InconsistentParameterServer(d5.GradientDescent(_executor(), lr=0.1), _FakeNetwork(), max_staleness=bad)


def test_one_rank_and_a_lookahead_optimizer_and_a_network_without_probe_are_refused():
    with pytest.raises(DistributedError, match="use more ranks"):
        InconsistentParameterServer(d5.GradientDescent(_executor(), lr=0.1), _FakeNetwork(size=1))
    with pytest.raises(DistributedError, match="prepare_param"):
        InconsistentParameterServer(d5.training.optimizers.AcceleGradOptimizer(_executor()), _FakeNetwork())

    class NoProbe(_FakeNetwork):
        probe = CommunicationNetwork.probe

    with pytest.raises(DistributedError, match=r"probe\(\)"):
        InconsistentParameterServer(d5.GradientDescent(_executor(), lr=0.1), NoProbe())


def test_the_bound_admits_a_pull_only_when_no_gradient_can_exceed_it():
    """(version - oldest pulled version) + holders <= max_staleness, the rule the module docstring derives."""
    server = InconsistentParameterServer(d5.GradientDescent(_executor(), lr=0.1), _FakeNetwork(size=5),
                                         max_staleness=2)
    assert server._may_answer()  # nobody holds parameters
    server._outstanding, server.version = {1: 5, 2: 5}, 5
    assert server._may_answer()  # a third at version 5: the worst case is two updates before any push
    server._outstanding[3] = 5
    assert not server._may_answer()  # a fourth could let three updates precede the oldest
    server._outstanding, server.version = {1: 4}, 5
    assert server._may_answer()  # worker 1 is one update behind: 1 + 1 holder <= 2
    server._outstanding[2] = 5
    assert not server._may_answer()  # 1 + 2 holders > 2: a third holder could push worker 1 to staleness 3
    server.max_staleness = None
    assert server._may_answer()


def test_the_flat_layout_round_trips_mixed_dtypes():
    layout = _Layout(["a", "b"], [np.zeros((2, 3), np.float32), np.zeros(4, np.float64)])
    assert layout.dtype == np.float64 and layout.offsets == [0, 6, 10]
    raw, header, payload = layout.message()
    assert raw.nbytes == 8 * 4 + 10 * 8 and raw.flags.c_contiguous
    a, b = np.arange(6, dtype=np.float32).reshape(2, 3) / 3, np.arange(4.0) / 7
    layout.pack([a, b], payload)
    header[0] = 7
    out = layout.unpack(payload, copy=False)
    assert out["a"].dtype == np.float32 and np.array_equal(out["a"], a) and np.array_equal(out["b"], b)
    assert np.shares_memory(out["b"], raw) and int(raw[:8].view(np.int64)[0]) == 7
    assert not np.shares_memory(layout.unpack(payload, copy=True)["b"], raw)


def test_the_statistics_summary():
    from d5.distributed.async_ps import _summary

    stats = _summary([2, 0, 1], 3, 1, 0.5, {1: 3})
    assert stats == {"updates": 3, "mean": 2 / 3, "max": 2, "histogram": {0: 2, 2: 1}, "max_staleness": 3,
                     "delayed_pulls": 1, "delayed_seconds": 0.5, "updates_per_worker": {1: 3}}
    assert json.loads(json.dumps(stats))["histogram"] == {"0": 2, "2": 1}
