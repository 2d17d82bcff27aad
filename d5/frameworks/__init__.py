"""Framework back-ends. Each package keeps the contract of :mod:`d5.frameworks.base` (the same module names,
public names and executor duties) and is imported only when asked for, so `import d5` imports no framework.

This module is the registry: :data:`FRAMEWORKS` is the one line a new framework adds here. Code outside the
framework packages asks the registry for what it needs of a framework -- :func:`get` for the package,
:func:`runtime` for its ``runtime.py`` (GPU count, thread pool, the operator benchmark's kernels, dtype names)
-- and so names no framework itself.

>>> import d5.frameworks
>>> d5.frameworks.available()[0]
'reference'
>>> d5.frameworks.runtime("reference").gpu_count()
0
"""
from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import sys
import tempfile

from d5.errors import FrameworkImportError, FrameworkNotInstalledError

#: d5 framework name -> the Python package it needs.
FRAMEWORKS = {"reference": None, "pytorch": "torch", "tensorflow": "tensorflow", "mxnet": "mxnet"}


def available() -> list[str]:
    """Frameworks whose package is installed and that d5 implements (without importing them)."""
    names = []
    for name, package in FRAMEWORKS.items():
        has_backend = importlib.util.find_spec(f"d5.frameworks.{name}") is not None
        if has_backend and (package is None or importlib.util.find_spec(package) is not None):
            names.append(name)
    return names


def install_hint(name: str) -> str:
    """The command that installs framework ``name``'s extra.

    >>> install_hint("pytorch")
    "pip install -e '.[torch]' -c constraints.txt"
    """
    return f"pip install -e '.[{FRAMEWORKS[name]}]' -c constraints.txt"


def _numpy_bool_for_mxnet() -> None:
    """MXNet 1.9.1, its last release, reads ``numpy.bool`` at import and at run time (boolean indexing), which
    NumPy 1.24 removed and 1.26 -- what TensorFlow 2.21 needs -- does not have (apache/mxnet#21165; the fixes were
    never released). It was an alias of the builtin ``bool``: restore that alias, only when it is missing."""
    import numpy

    if "bool" not in vars(numpy):  # not hasattr: NumPy 1.2x's module __getattr__ raises for removed aliases
        numpy.bool = bool


def _quiet_tensorflow() -> None:
    """TensorFlow's C++ runtime logs informational lines (CPU features): filter its INFO level unless the user
    chose a level."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")


#: What a framework's package needs before it can import, run once just before the import (the one place for it).
_BEFORE_IMPORT = {"mxnet": _numpy_bool_for_mxnet, "tensorflow": _quiet_tensorflow}

#: Lines a framework's native libraries write to the process's stderr while importing, whatever the log level
#: (TensorFlow 2.21 logs its oneDNN notice before absl's logging is initialized): dropped; any other line the
#: import writes is passed on.
_IMPORT_NOISE = {"tensorflow": ("All log messages before absl::InitializeLog", "oneDNN custom operations are on",
                                "cpu_feature_guard", "To enable the following instructions",
                                "rebuild TensorFlow with the appropriate compiler flags")}


@contextlib.contextmanager
def _filtered_stderr(noise: tuple[str, ...]):
    """Capture file descriptor 2 (where native libraries write) for the block, then write back every line but
    those containing one of ``noise``."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):  # no real stderr to capture: leave it alone
        yield
        return
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        try:
            yield
        finally:
            try:
                sys.stderr.flush()
            except (OSError, ValueError):
                pass
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            lines = capture.read().decode(errors="replace").splitlines(keepends=True)
            kept = "".join(line for line in lines if not any(pattern in line for pattern in noise))
            if kept:
                sys.stderr.write(kept)

#: Substrings of an import error -> what to do about it.
_IMPORT_ADVICE = (
    (("numpy", "multiarray", "_ARRAY_API", "NumPy 1.x", "NumPy 2"),
     "NumPy does not match what the framework was built against: reinstall the environment in one pip resolve "
     "with `make install` (pip install -c constraints.txt keeps numpy<2, which MXNet needs)"),
    (("protobuf", "Descriptors cannot be created", "descriptor"),
     "the installed protobuf does not match the framework's: reinstall in one resolve with `make install` "
     "(pip install -c constraints.txt pins what TensorFlow and onnx agree on)"),
    (("cannot open shared object", "undefined symbol", "GLIBC"),
     "a shared library the framework needs is missing or of another version: reinstall the framework's wheel "
     "(`make install`), or install the system library the message names"),
)


def _import_advice(message: str) -> str:
    for needles, advice in _IMPORT_ADVICE:
        if any(needle.lower() in message.lower() for needle in needles):
            return advice
    return "reinstall the environment in one pip resolve with `make install` (pip install -c constraints.txt)"


def require_installed(name: str) -> None:
    """Import framework ``name``'s package (a framework package calls it before importing its framework).

    Raises FrameworkNotInstalledError, naming the extra to install, when the package is absent, and
    FrameworkImportError -- the framework's own message and what to do -- when it is installed but fails to import
    (a NumPy or protobuf clash), never the raw error. MXNet gets its ``numpy.bool`` alias first
    (:data:`_BEFORE_IMPORT`), so the four frameworks import in one process in any order."""
    package = FRAMEWORKS[name]
    prepare = _BEFORE_IMPORT.get(name)
    if prepare is not None:
        prepare()
    try:
        with _filtered_stderr(_IMPORT_NOISE[name]) if name in _IMPORT_NOISE else contextlib.nullcontext():
            importlib.import_module(package)
    except ImportError as err:
        if getattr(err, "name", None) == package or str(err).startswith(f"import of {package} halted"):
            raise FrameworkNotInstalledError(f"the d5 {name} framework needs {package!r}, which is not installed "
                                             f"({err}); install it with `{install_hint(name)}`") from None
        raise _import_failure(name, package, err) from err
    except Exception as err:  # noqa: BLE001 -- whatever a broken install raises, the user gets one d5 error
        raise _import_failure(name, package, err) from err


def _import_failure(name: str, package: str, err: BaseException) -> FrameworkImportError:
    first = (str(err).strip().splitlines() or [""])[0]
    message = f"{type(err).__name__}: {first}" if first else type(err).__name__
    return FrameworkImportError(f"the d5 {name} framework: {package!r} is installed but failed to import ({message}); "
                                f"{_import_advice(str(err))}")


def get(name: str):
    """Import and return the framework module ``d5.frameworks.<name>``."""
    if name not in FRAMEWORKS:
        raise FrameworkNotInstalledError(f"unknown framework {name!r}; d5 knows {sorted(FRAMEWORKS)}")
    if name not in available():
        raise FrameworkNotInstalledError(
            f"framework {name!r} is not available here; install it with `{install_hint(name)}`"
            if FRAMEWORKS[name] else f"framework {name!r} is not implemented yet")
    return importlib.import_module(f"d5.frameworks.{name}")


def runtime(name: str):
    """Import and return ``d5.frameworks.<name>.runtime``, the same functions in every framework (see
    ``d5/frameworks/reference/runtime.py``): FrameworkNotInstalledError, naming what to install, when framework
    ``name`` is unknown or not available here."""
    package = get(name)
    try:
        return importlib.import_module(f"{package.__name__}.runtime")
    except ModuleNotFoundError as err:
        if err.name != f"{package.__name__}.runtime":
            raise
        raise FrameworkNotInstalledError(
            f"the d5 {name} framework has no runtime.py; every framework package must provide one with the "
            f"reference's functions (d5/frameworks/reference/runtime.py)") from None


def __getattr__(name: str):
    # `d5.frameworks.pytorch` imports that back-end on first use (and only then its framework).
    if name in FRAMEWORKS:
        return get(name)
    raise AttributeError(f"module 'd5.frameworks' has no attribute {name!r}")
