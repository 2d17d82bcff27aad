"""``D5_TIMELINE``: per-rank Chrome-trace timelines of MPICommunicationNetwork's calls under a real 2-rank mpiexec
job (each rank's file, its events' names, bytes, tids and durations, the merge), no file when unset, and the
pieces that need no MPI (the file names, the request lanes, merge) in-process."""
from __future__ import annotations

import atexit
import json
import pathlib
import textwrap

import pytest

from d5.distributed import timeline
from mpi_jobs import rank_results, run_mpi  # tests/distributed/conftest.py puts this directory on sys.path

JOB = textwrap.dedent("""
    import numpy as np
    from mpi4py import MPI
    from d5.distributed.mpi import MPICommunicationNetwork
    from mpi_jobs import report

    comm = MPICommunicationNetwork(timeout=30)
    rank, size = comm.rank, comm.size
    x = np.arange(12, dtype=np.float32).reshape(3, 4) + rank
    comm.allreduce(x, name="grad/w")
    comm.allreduce(np.ones(5), op="max")
    comm.broadcast(np.zeros(7, np.int32), root=1, name="params")
    comm.gather(np.ones(3), root=0)
    comm.allgather(np.ones(2, np.int64))
    comm.reduce_from_neighbors(np.ones(4))
    comm.barrier()
    request = comm.iallreduce(np.ones(6), name="async")
    request.wait()
    other = 1 - rank
    buffer = np.empty(10, np.float64)
    if rank == 0:
        comm.send(np.arange(10, dtype=np.float64), other, tag=3)
        comm.recv(buffer, other, tag=4)
    else:
        comm.recv(buffer, other, tag=3)
        comm.send(buffer, other, tag=4)
    requests = [comm.isend(np.ones(8), other, tag=5), comm.irecv(np.empty(8), other, tag=5)]
    comm.waitall(requests)
    comm.close()
    report(rank, {"rank": rank, "size": size, "has_timeline": comm._timeline is not None})
""")


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("timeline")
    done = run_mpi(JOB, 2, workdir=workdir, timeout=60, env={"D5_TIMELINE": str(workdir / "trace" / "timeline.json")})
    return workdir, rank_results(workdir, 2, done), done


def load(path: pathlib.Path) -> dict:
    data = json.loads(path.read_text())
    assert set(data) == {"traceEvents", "displayTimeUnit"} and data["displayTimeUnit"] == "ms"
    return data


def complete(events: list[dict], tid: int | None = None) -> list[dict]:
    return [event for event in events if event["ph"] == "X" and (tid is None or event["tid"] == tid)]


@pytest.mark.mpi
def test_each_rank_writes_a_chrome_trace(traced):
    workdir, results, done = traced
    for rank in range(2):
        assert results[rank]["has_timeline"]
        path = workdir / "trace" / f"timeline.rank{rank}.json"
        assert path.exists(), done.stderr
        events = load(path)["traceEvents"]
        names = {event["name"]: event for event in events if event["ph"] == "M"}
        assert names["process_name"]["args"]["name"].startswith(f"rank {rank} (")
        assert names["process_name"]["pid"] == rank
        for event in complete(events):
            assert event["pid"] == rank and event["tid"] in (0, 1, 2)
            assert event["dur"] >= 0 and event["ts"] > 0
            assert isinstance(event["args"]["bytes"], int)
        blocking = [event["name"] for event in complete(events, 0)]
        # the blocking calls, one event each, in the order they were made
        send_recv = ["send", "recv"] if rank == 0 else ["recv", "send"]
        assert blocking == ["allreduce grad/w", "allreduce", "broadcast params", "gather", "allgather",
                            "reduce_from_neighbors", "barrier", "iallreduce async", "wait iallreduce async",
                            *send_recv, "isend", "irecv", "waitall"]
        by_name = {event["name"]: event for event in complete(events, 0)}
        assert by_name["allreduce grad/w"]["args"] == {"bytes": 48, "dtype": "float32", "shape": [3, 4], "op": "sum"}
        assert by_name["allreduce"]["args"]["op"] == "max" and by_name["allreduce"]["args"]["bytes"] == 40
        assert by_name["broadcast params"]["args"] == {"bytes": 28, "dtype": "int32", "shape": [7], "root": 1}
        assert by_name["gather"]["args"]["root"] == 0 and by_name["gather"]["args"]["bytes"] == 24
        assert by_name["allgather"]["args"]["bytes"] == 16
        assert by_name["barrier"]["args"] == {"bytes": 0}
        assert by_name["send"]["args"] == {"bytes": 80, "dtype": "float64", "shape": [10], "peer": 1 - rank}
        assert by_name["recv"]["args"]["bytes"] == 80 and by_name["recv"]["args"]["peer"] == 1 - rank
        # the requests' lifetimes, from issue to completion, on tid 1; isend and irecv overlap (both in flight
        # until the waitall), so the irecv gets a lane of its own, tid 2
        requests = sorted((event for event in complete(events) if event["tid"] > 0), key=lambda event: event["ts"])
        assert [(event["name"], event["tid"]) for event in requests] == [("iallreduce async", 1), ("isend", 1),
                                                                         ("irecv", 2)]
        assert [event["args"]["bytes"] for event in requests] == [48, 64, 64]
        assert requests[1]["args"]["peer"] == requests[2]["args"]["peer"] == 1 - rank
        issue = by_name["iallreduce async"]
        assert requests[0]["ts"] == issue["ts"]
        assert requests[0]["ts"] + requests[0]["dur"] >= by_name["wait iallreduce async"]["ts"]


@pytest.mark.mpi
def test_merge_joins_the_ranks(traced):
    workdir, _, _ = traced
    paths = [workdir / "trace" / f"timeline.rank{rank}.json" for rank in range(2)]
    out = timeline.merge(paths, workdir / "merged.json")
    merged = load(out)["traceEvents"]
    assert len(merged) == sum(len(load(path)["traceEvents"]) for path in paths)
    assert {event["pid"] for event in merged} == {0, 1}
    processes = sorted(event["args"]["name"] for event in merged if event["name"] == "process_name")
    assert [name.split(" (")[0] for name in processes] == ["rank 0", "rank 1"]
    assert timeline.main([str(workdir / "merged2.json"), *map(str, paths)]) == 0
    assert load(workdir / "merged2.json") == load(out)


@pytest.mark.mpi
def test_unset_writes_nothing(tmp_path):
    done = run_mpi(JOB, 2, workdir=tmp_path, timeout=60, env={"D5_TIMELINE": ""})
    results = rank_results(tmp_path, 2, done)
    assert not any(result["has_timeline"] for result in results)
    assert not [path for path in tmp_path.rglob("*") if "timeline" in path.name]


# ------------------------------------------------------------------------------------------- no MPI

def test_rank_path():
    assert timeline.rank_path("out/timeline.json", 3) == pathlib.Path("out/timeline.rank3.json")
    assert timeline.rank_path("trace", 0) == pathlib.Path("trace.rank0.json")


def test_from_env_shares_one_recorder_per_rank(tmp_path):
    environ = {"D5_TIMELINE": str(tmp_path / "t.json")}
    assert timeline.from_env(0, {}) is None and timeline.from_env(0, {"D5_TIMELINE": " "}) is None
    first, other = timeline.from_env(0, environ), timeline.from_env(1, environ)
    try:
        assert timeline.from_env(0, environ) is first and other is not first
        assert first.file == tmp_path / "t.rank0.json" and other.file == tmp_path / "t.rank1.json"
    finally:  # no files from these at this process's exit
        for recorder in (first, other):
            atexit.unregister(recorder._at_exit)
            timeline._RECORDERS.pop((recorder.path, recorder.rank))


def test_overlapping_requests_get_lanes_and_write_is_atomic(tmp_path):
    recorder = timeline.Timeline(tmp_path / "t.json", 5, host="h")
    what = ("wait for iallreduce(sum)", (2,), "float64", "a", None, None)
    recorder.events += [(1, "iallreduce", "a", 1.0, 3.0, 16, "float64", (2,), None, None),
                        (1, "isend", None, 2.0, 4.0, 8, "float64", (1,), "peer", 1),
                        (1, "irecv", None, 3.5, 5.0, 8, "float64", (1,), "peer", 1)]
    recorder.request("iallreduce", what, 6.0, 16)
    recorder.call("barrier", None, 6.5, 0)
    path = recorder.write()
    assert path == tmp_path / "t.rank5.json"
    events = load(path)["traceEvents"]
    tids = {event["name"]: event["tid"] for event in complete(events)}
    assert tids == {"iallreduce a": 1, "isend": 2, "irecv": 1, "barrier": 0}  # irecv starts after "a" ended
    assert [event["args"]["name"] for event in events if event["name"] == "process_name"] == ["rank 5 (h)"]
    threads = sorted(event["tid"] for event in events if event["name"] == "thread_name")
    assert threads == [0, 1, 2]
    assert all(event["dur"] >= 0 for event in complete(events))
    assert [p.name for p in tmp_path.iterdir()] == ["t.rank5.json"]  # no temporary left behind
