"""Run a script under ``mpiexec -n N`` from a test, and read what each rank reported.

In the test (``from mpi_jobs import run_mpi, rank_results``; tests/distributed/conftest.py puts this directory
on sys.path)::

    done = run_mpi(SCRIPT_TEXT, 4, workdir=tmp_path, timeout=30)
    results = rank_results(tmp_path, 4, done)          # [rank0.json, rank1.json, ...] as dicts

In the job (this module is importable there too: the jobs get this directory and tests/support on PYTHONPATH)::

    from mpi_jobs import report
    report(comm.rank, {"allreduce": result.tolist()})  # writes $D5_MPI_OUT/rank<R>.json atomically

Trust each rank's report, not mpiexec's exit code (MPICH loses it sometimes: notes/distributed.md). A job that
outlives ``timeout`` has its whole process group killed (hydra's ranks included) and fails the test with its
output so far.
"""
from __future__ import annotations

import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any, Mapping, Sequence

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent.parent
SUPPORT = HERE.parent / "support"


class MPIJobTimeout(AssertionError):
    """The job ran past its timeout (its processes were killed); the message has its output."""


def mpiexec() -> str:
    """The ``mpiexec`` next to this Python (the venv's pip MPICH), else the one on PATH."""
    beside = pathlib.Path(sys.executable).with_name("mpiexec")
    if beside.exists():
        return str(beside)
    found = shutil.which("mpiexec")
    if found is None:
        raise FileNotFoundError("no mpiexec next to sys.executable or on PATH: install the [mpi] extra")
    return found


def _script_path(script: str | os.PathLike, workdir: pathlib.Path) -> pathlib.Path:
    if isinstance(script, os.PathLike) or ("\n" not in script and os.path.exists(script)):
        return pathlib.Path(script)
    path = workdir / "job.py"
    path.write_text(script)
    return path


def run_mpi(script: str | os.PathLike, n: int, *, args: Sequence[str] = (), timeout: float = 60,
            env: Mapping[str, str] | None = None, workdir: str | os.PathLike | None = None,
            mpiexec_args: Sequence[str] = ()) -> subprocess.CompletedProcess:
    """Run ``script`` (a path, or the text of a script, written to ``workdir/job.py``) on ``n`` ranks.

    ``workdir`` (default: a temporary directory, removed afterwards) is passed to the ranks as ``D5_MPI_OUT``;
    ``env`` adds to the environment (this directory, tests/support and the repository go on PYTHONPATH;
    ``OMP_NUM_THREADS=1`` unless set: the ranks share 2 cores). Returns the CompletedProcess (text stdout and
    stderr) with ``elapsed`` (seconds) added; raises :class:`MPIJobTimeout` after ``timeout`` seconds."""
    if workdir is None:  # nobody will read reports from it: removed after the run
        with tempfile.TemporaryDirectory(prefix="d5-mpi-") as temporary:
            return run_mpi(script, n, args=args, timeout=timeout, env=env, workdir=temporary,
                           mpiexec_args=mpiexec_args)
    workdir = pathlib.Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    path = _script_path(script, workdir)
    environment = dict(os.environ)
    environment.setdefault("OMP_NUM_THREADS", "1")
    environment["PYTHONPATH"] = os.pathsep.join(
        [str(HERE), str(SUPPORT), str(REPO)] + ([environment["PYTHONPATH"]] if environment.get("PYTHONPATH") else []))
    environment["D5_MPI_OUT"] = str(workdir)
    environment.update(env or {})
    command = [mpiexec(), *mpiexec_args, "-n", str(n), sys.executable, str(path), *map(str, args)]
    started = time.perf_counter()
    # A session of its own: on a timeout the whole group (mpiexec, hydra's proxy, the ranks) is killed.
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment,
                               cwd=str(workdir), start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        stdout, stderr = process.communicate()
        raise MPIJobTimeout(f"mpiexec -n {n} {path.name} ran past {timeout} s and was killed\n--- stdout\n{stdout}"
                            f"\n--- stderr\n{stderr}") from None
    done = subprocess.CompletedProcess(command, process.returncode, stdout, stderr)
    done.elapsed = time.perf_counter() - started
    return done


def rank_results(workdir: str | os.PathLike, n: int, done: subprocess.CompletedProcess | None = None
                 ) -> list[dict[str, Any]]:
    """Every rank's report (``rank<R>.json`` in ``workdir``); a missing one fails with the job's output."""
    results = []
    for rank in range(n):
        path = pathlib.Path(workdir) / f"rank{rank}.json"
        if not path.exists():
            output = "" if done is None else f"\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
            raise AssertionError(f"rank {rank} wrote no report ({path}){output}")
        results.append(json.loads(path.read_text()))
    return results


def report(rank: int, data: Mapping[str, Any]) -> None:
    """In a job: write ``data`` as ``$D5_MPI_OUT/rank<rank>.json`` (atomically: a killed rank leaves no half)."""
    out = pathlib.Path(os.environ.get("D5_MPI_OUT", "."))
    temporary = out / f".rank{rank}.json.tmp"
    temporary.write_text(json.dumps(data))
    os.replace(temporary, out / f"rank{rank}.json")
