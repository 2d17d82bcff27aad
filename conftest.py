"""Session-wide test settings (tests/ and the doctests in d5/)."""
from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session", autouse=True)
def _cpp_operator_cache(tmp_path_factory):
    """C++ operators compiled by the tests go to a cache of this run, shared by the pytest-xdist workers (the
    parent of each worker's base temp), so a run compiles each operator once and never touches ~/.cache."""
    if os.environ.get("D5_CPP_CACHE"):
        yield
        return
    os.environ["D5_CPP_CACHE"] = str(tmp_path_factory.getbasetemp().parent / "d5_cpp_ops")
    yield
    os.environ.pop("D5_CPP_CACHE", None)


def pytest_configure(config):
    """Import the installed framework packages before collection. A framework's ``custom_op.py`` shares its name
    with the ``custom_op`` function its package exports; if pytest's importlib mode collected that file's doctests
    first, it would load a second copy of the module and bind it over the function on the package. A package that
    fails to import is left to tests/frameworks/test_required.py to report (with D5_REQUIRE_FRAMEWORKS naming it,
    as `make test` does, that is a failure), not a crash of the whole run."""
    import importlib

    import d5.frameworks
    import d5.models  # likewise d5/models/resnet.py and the function d5.models.resnet

    for name in d5.frameworks.available():
        try:
            importlib.import_module(f"d5.frameworks.{name}")
        except Exception:  # noqa: BLE001 - reported by the test of required frameworks
            pass
