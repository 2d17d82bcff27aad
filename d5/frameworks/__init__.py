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

import importlib
import importlib.util

from d5.errors import FrameworkNotInstalledError

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


def require_installed(name: str) -> None:
    """Raise FrameworkNotInstalledError, naming the extra to install, unless framework ``name``'s package
    imports. A framework package calls it before importing its framework."""
    package = FRAMEWORKS[name]
    try:
        importlib.import_module(package)
    except ImportError as err:
        raise FrameworkNotInstalledError(f"the d5 {name} framework needs {package!r}, which is not installed "
                                         f"({err}); install it with `{install_hint(name)}`") from None


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
