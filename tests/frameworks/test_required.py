"""``D5_REQUIRE_FRAMEWORKS=name,...`` turns a framework that is missing or fails to import into a test failure
instead of an absence from the contract suite (whose tests run over ``d5.frameworks.available()``). ``make test``
sets it to every framework d5 implements (each package under d5/frameworks/ with an ``__init__.py``)."""
from __future__ import annotations

import importlib
import os
import pathlib

import pytest

import d5.frameworks

REQUIRED = [name.strip() for name in os.environ.get("D5_REQUIRE_FRAMEWORKS", "").split(",") if name.strip()]


def implemented() -> list[str]:
    """The frameworks d5 has a package for (what `make test` requires)."""
    root = pathlib.Path(d5.frameworks.__file__).parent
    return sorted(path.parent.name for path in root.glob("*/__init__.py"))


@pytest.mark.parametrize("name", REQUIRED or [pytest.param(None, marks=pytest.mark.skip(
    reason="D5_REQUIRE_FRAMEWORKS is not set: frameworks that are not installed are left out"))])
def test_a_required_framework_is_known_installed_and_imports(name):
    assert name in d5.frameworks.FRAMEWORKS, (f"D5_REQUIRE_FRAMEWORKS names {name!r}, which d5 does not know; it "
                                              f"knows {sorted(d5.frameworks.FRAMEWORKS)}")
    assert name in d5.frameworks.available(), (
        f"framework {name!r} is required (D5_REQUIRE_FRAMEWORKS) but not available here: install it with "
        f"`{d5.frameworks.install_hint(name)}`")
    package = importlib.import_module(f"d5.frameworks.{name}")  # an import error fails here, with its traceback
    assert package.NAME == name


def test_make_test_requires_every_framework_d5_implements():
    makefile = (pathlib.Path(__file__).resolve().parents[2] / "Makefile").read_text()
    assert "D5_REQUIRE_FRAMEWORKS" in makefile
    if REQUIRED:  # run under `make test`: the list is every implemented framework
        assert sorted(REQUIRED) == implemented()
