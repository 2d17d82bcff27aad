"""What a recipe run records so that it can be reproduced, and ``d5 run --replay``, which reproduces it.

Every component is described as JSON (:func:`describe`): plain values as themselves, classes and functions by
their importable name (``{"callable": "d5.training.sampler.ShuffleSampler"}``), other objects by their class
and public attributes (``{"object": "d5.training.transforms.RandomCrop", "attributes": {...}}``), large arrays
by shape, dtype and SHA-256. The description is for reading, comparing and reporting; it is not code.

A replay therefore reruns the recipe *script* -- found again by path or by name in ``recipes/``, and only when
its SHA-256 is the one recorded -- with the recorded overrides, and before anything is built checks that the
script resolves to the recorded components (:func:`expecting`). A result it cannot replay is refused with the
reason: not a recipe run, written by a program rather than a script, the script missing or changed, or
components that now resolve differently (a ``best_device()`` on another machine).

>>> describe({"lr": 0.1, "sizes": (1, 2), "build": describe})
{'lr': 0.1, 'sizes': [1, 2], 'build': {'callable': 'd5.recipe_record.describe'}}
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import importlib
import inspect
import json
import os
import re
import sys
from pathlib import Path
from typing import Any, Iterator, Mapping

from d5.bench.results import PAYLOAD_FORMATS
from d5.errors import D5Error, RecipeError

#: Version of the recipe part of a result file (``extra.recipe_format``). 1: components, source, argv, seeds.
RECIPE_FORMAT = PAYLOAD_FORMATS["recipe"][1]
_MAX_DEPTH = 6
_MAX_ITEMS = 256
_MAX_ARRAY_ELEMENTS = 64
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _qualified_name(value: Any) -> str:
    return f"{getattr(value, '__module__', None) or '?'}.{getattr(value, '__qualname__', type(value).__name__)}"


def _importable(value: Any) -> bool:
    """Whether ``module.qualname`` of ``value`` imports back to ``value`` itself."""
    module_name, qualname = getattr(value, "__module__", None), getattr(value, "__qualname__", "")
    if not module_name or "<" in qualname:  # <lambda>, <locals>
        return False
    found: Any = sys.modules.get(module_name)
    try:
        found = found if found is not None else importlib.import_module(module_name)
        for part in qualname.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError):
        return False
    return found is value


def _own_repr(value: Any) -> str | None:
    if type(value).__repr__ is object.__repr__:
        return None
    try:
        return _ADDRESS.sub("", repr(value))
    except Exception:  # a broken __repr__ must not break the run it describes
        return None


def describe(value: Any, depth: int = 0) -> Any:
    """A JSON description of a recipe component (see the module docstring); never raises.

    >>> import numpy as np
    >>> describe((0.1, np.float32(2), None, "cifar10"))
    [0.1, 2.0, None, 'cifar10']
    >>> describe(np.zeros(100))["array_shape"]
    [100]
    """
    import numpy as np

    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        if value.size <= _MAX_ARRAY_ELEMENTS and value.dtype.kind in "biuf":
            return {"array": value.tolist(), "dtype": str(value.dtype)}
        digest = hashlib.sha256(np.ascontiguousarray(value).view(np.uint8).tobytes()).hexdigest() \
            if value.dtype.kind in "biufc" else None
        return {"array_shape": list(value.shape), "dtype": str(value.dtype), "sha256": digest}
    if depth >= _MAX_DEPTH:
        return {"object": _qualified_name(type(value)), "repr": _own_repr(value)}
    if isinstance(value, Mapping):
        items = list(value.items())[:_MAX_ITEMS]
        return {str(key): describe(item, depth + 1) for key, item in items}
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value, key=repr) if isinstance(value, (set, frozenset)) else list(value)
        return [describe(item, depth + 1) for item in items[:_MAX_ITEMS]]
    if isinstance(value, functools.partial):
        return {"callable": describe(value.func, depth + 1)["callable"], "args": describe(value.args, depth + 1),
                "kwargs": describe(value.keywords, depth + 1)}
    if isinstance(value, type) or inspect.isroutine(value):
        described = {"callable": _qualified_name(value)}
        if not _importable(value):
            described["importable"] = False
        return described
    described = {"object": _qualified_name(type(value))}
    own = _own_repr(value)
    if own is not None:
        described["repr"] = own
    attributes = getattr(value, "__dict__", None)
    if isinstance(attributes, dict):
        described["attributes"] = {name: describe(item, depth + 1) for name, item in sorted(attributes.items())
                                   if not name.startswith("_")}
    return described


def _canonical(description: Any) -> str:
    """The description as one comparable string (sorted keys)."""
    return json.dumps(description, sort_keys=True, default=str)


def is_recipe_script(caller_globals: Mapping[str, Any]) -> bool:
    """Whether ``run_recipe`` was called by the module level of a script that is the program being run
    (``python recipe.py``, ``d5 run``, ``d5 sweep``), not by an imported module, a test or a notebook (whose
    ``__main__`` has no ``.py`` file).

    >>> is_recipe_script({"__name__": "__main__", "__file__": "recipes/mnist_lenet.py"})
    True
    >>> is_recipe_script({"__name__": "__main__"}), is_recipe_script({"__name__": "tests.test_recipe"})
    (False, False)
    """
    path = caller_globals.get("__file__")
    return caller_globals.get("__name__") == "__main__" and bool(path) and str(path).endswith(".py")


def recipe_source(caller_globals: Mapping[str, Any]) -> dict | None:
    """``{"path", "name", "sha256", "text"}`` of the recipe script whose module level called ``run_recipe``
    (see :func:`is_recipe_script`); None for a call from a program.

    >>> recipe_source({"__name__": "my_notebook", "__file__": "notebook.py"}) is None
    True
    >>> sorted(recipe_source({"__name__": "__main__", "__file__": find_recipe("mnist_lenet")}))
    ['name', 'path', 'sha256', 'text']
    """
    if not is_recipe_script(caller_globals):
        return None
    path = caller_globals["__file__"]
    try:
        data = Path(path).read_bytes()
    except OSError:
        return None
    return {"path": str(Path(path).resolve()), "name": Path(path).stem, "sha256": hashlib.sha256(data).hexdigest(),
            "text": data.decode("utf-8", errors="replace")}


# ------------------------------------------------------------------------------------------------- replay

@dataclasses.dataclass
class _Expectation:
    components: dict
    replay_of: str
    seen: bool = False


_expected: list[_Expectation] = []


@contextlib.contextmanager
def expecting(components: Mapping[str, Any], replay_of: str) -> Iterator[_Expectation]:
    """While open, :func:`check_expected` requires ``run_recipe`` to resolve to ``components`` (a replay).

    >>> with expecting({"epochs": 2}, "run.json"):  # doctest: +ELLIPSIS
    ...     check_expected({"epochs": 2})
    ...     check_expected({"epochs": 3})
    Traceback (most recent call last):
    ...
    d5.errors.RecipeError: cannot replay run.json: the recipe now resolves to other components (epochs) ... 2, now 3...
    >>> check_expected({"epochs": 3}) is None    # no replay under way: nothing to compare
    True
    """
    expectation = _Expectation(dict(components), str(replay_of))
    _expected.append(expectation)
    try:
        yield expectation
    finally:
        _expected.remove(expectation)


def check_expected(components: Mapping[str, Any]) -> str | None:
    """Raise RecipeError when a replay is under way and ``components`` differ from the recorded ones;
    return the replayed result's path (None outside a replay). See :func:`expecting` for an example."""
    if not _expected:
        return None
    expectation = _expected[-1]
    expectation.seen = True
    recorded = expectation.components
    differing = sorted(key for key in set(recorded) | set(components)
                       if _canonical(recorded.get(key)) != _canonical(components.get(key)))
    if differing:
        details = "; ".join(f"{key}: recorded {_canonical(recorded.get(key))[:160]}, now "
                            f"{_canonical(components.get(key))[:160]}" for key in differing[:4])
        raise RecipeError(f"cannot replay {expectation.replay_of}: the recipe now resolves to other components "
                          f"({', '.join(differing)}) than the recorded run's -- {details}. A component chosen "
                          "on the fly (d5.best_device(), a file's contents) or a change in d5 can do this; run "
                          "the recipe anew instead of replaying it")
    return expectation.replay_of


@dataclasses.dataclass(frozen=True)
class ReplayPlan:
    """How to rerun a recorded run: the recipe script, its argv (overrides), the components to expect, and
    notes for the user (a different git commit).

    >>> ReplayPlan(Path("recipes/mnist_lenet.py"), ["--epochs", "1"], {}, []).argv
    ['--epochs', '1']
    """

    recipe: Path
    argv: list
    components: dict
    notes: list


def _default_recipe_dirs() -> list[Path]:
    source_tree = Path(__file__).resolve().parents[1]  # d5/recipe_record.py -> the checkout's root
    return [Path.cwd() / "recipes", source_tree / "recipes"]


def find_recipe(text: str | os.PathLike) -> Path:
    """A recipe script by path, or by name in ``recipes/`` (of the working directory or of the d5 checkout):
    ``'mnist_lenet'`` -> ``.../recipes/mnist_lenet.py``. A D5Error lists the recipes there are.

    >>> find_recipe("fashion_mnist_lenet").name
    'fashion_mnist_lenet.py'
    """
    path = Path(text)
    if path.is_file():
        return path
    name = path.stem if path.suffix == ".py" else path.name
    if path.parent == Path("."):
        for directory in _default_recipe_dirs():
            if (directory / f"{name}.py").is_file():
                return directory / f"{name}.py"
    known = sorted({p.stem for directory in _default_recipe_dirs() if directory.is_dir()
                    for p in directory.glob("*.py") if not p.name.startswith("_")})
    raise D5Error(f"no recipe {str(text)!r}: give the path of a recipe script or the name of one in recipes/ "
                  f"({', '.join(known) or 'none found'})")


def baseline_throughput(path: str | os.PathLike, recipe_name: str | None = None) -> dict:
    """``--baseline RESULT.json``: the 1-rank throughput (samples/s) a distributed run's speedup is relative to,
    from a recipe result -- a ``--scheme`` run on one rank (``extra.distributed.throughput``) or a plain run (its
    Throughput metric, else its training samples over its data and step time). Returns ``{"throughput",
    "source", "notes"}``; a RecipeError for a file that gives none, or for a run on several ranks.

    >>> import tempfile, pathlib
    >>> from d5.bench.results import write_result
    >>> path = write_result(pathlib.Path(tempfile.mkdtemp()) / "one.json", "recipe", {"Throughput": {"value": 850.0}},
    ...                     environment={}, extra={"recipe_format": RECIPE_FORMAT})
    >>> baseline_throughput(path)["throughput"]
    850.0
    """
    from d5.bench.results import read_result

    try:
        document = read_result(path)
    except D5Error as err:
        raise RecipeError(f"--baseline {path}: {err}") from None
    if document.get("name") != "recipe":
        raise RecipeError(f"--baseline {path}: it is a {document.get('name')!r} result, not a recipe run's; give the "
                          "result (--json) of the same recipe run on one rank")
    extra = document.get("extra") if isinstance(document.get("extra"), Mapping) else {}
    distributed = extra.get("distributed") if isinstance(extra.get("distributed"), Mapping) else None
    throughput = None
    if distributed is not None:
        if distributed.get("world_size", 1) != 1:
            raise RecipeError(f"--baseline {path}: that run was on {distributed.get('world_size')} ranks; the baseline "
                              "of a speedup is the recipe on ONE rank (`python RECIPE --scheme allreduce --json "
                              "base.json`)")
        throughput = distributed.get("throughput")
    if throughput is None:
        row = (document.get("figures") or {}).get("Throughput")
        throughput = row.get("value") if isinstance(row, Mapping) else None
    if throughput is None:
        training = extra.get("training") if isinstance(extra.get("training"), Mapping) else {}
        timing = training.get("timing") if isinstance(training.get("timing"), Mapping) else {}
        seconds = float(timing.get("data", 0.0)) + float(timing.get("step", 0.0))
        throughput = training.get("samples", 0) / seconds if seconds > 0 else None
    if not isinstance(throughput, (int, float)) or isinstance(throughput, bool) or not throughput > 0:
        raise RecipeError(f"--baseline {path}: the result holds no training throughput; give the result of a recipe "
                          "run that trained, or --baseline-throughput SAMPLES_PER_S")
    notes = []
    source = ((extra.get("recipe") or {}).get("source") or {}).get("name")
    if recipe_name and source and source != recipe_name:
        notes.append(f"the baseline is recipe {source!r}, this run is {recipe_name!r}")
    return {"throughput": float(throughput), "source": str(path), "notes": notes,
            "batch_size": extra.get("batch_size"), "framework": extra.get("framework")}


def plan_replay(document: Mapping[str, Any], path: str | os.PathLike) -> ReplayPlan:
    """Check that the result ``document`` (read from ``path``) can be replayed and say how; RecipeError why not.

    >>> plan_replay({"name": "gemm", "figures": {}}, "gemm.json")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    d5.errors.RecipeError: cannot replay gemm.json: it is a 'gemm' result, not the result of a recipe run ...
    """
    extra = document.get("extra") if isinstance(document.get("extra"), Mapping) else {}
    if document.get("name") != "recipe":
        raise RecipeError(f"cannot replay {path}: it is a {document.get('name')!r} result, not the result of a "
                          "recipe run (`d5 run RECIPE --json PATH` writes those)")
    version = extra.get("recipe_format")
    if version != RECIPE_FORMAT:
        age = "an older" if not isinstance(version, int) or version < RECIPE_FORMAT else "a newer"
        raise RecipeError(f"cannot replay {path}: it was written by {age} d5 (recipe format {version or 0}; this "
                          f"d5 replays format {RECIPE_FORMAT}), which "
                          + ("did not record the configuration" if age == "an older" else "records it differently")
                          + "; run the recipe anew with this d5")
    recipe = extra.get("recipe") or {}
    source = recipe.get("source")
    if not source:
        raise RecipeError(f"cannot replay {path}: the run was started by a program calling run_recipe() "
                          f"({recipe.get('caller') or 'unknown'}), not by a recipe script, so there is no script "
                          "to rerun; save the recipe as a script and run it with `d5 run SCRIPT`")
    script = _find_script(source, path)
    argv = [str(item) for item in extra.get("argv") or []]
    ranks = (extra.get("distributed") or {}).get("world_size", 1) if isinstance(extra.get("distributed"), Mapping) \
        else 1
    if isinstance(ranks, int) and ranks > 1:
        raise RecipeError(f"cannot replay {path} in one process: the run was on {ranks} MPI ranks; rerun it with "
                          f"`d5 launch -n {ranks} {script} {' '.join(argv)}`")
    notes = _git_notes(document)
    return ReplayPlan(script, argv, dict(recipe.get("components") or {}), notes)


def _find_script(source: Mapping[str, Any], path: Any) -> Path:
    candidates = [Path(source["path"])] if source.get("path") else []
    candidates += [directory / f"{source.get('name')}.py" for directory in _default_recipe_dirs()]
    changed = []
    for candidate in dict.fromkeys(candidates):
        if candidate.is_file():
            digest = hashlib.sha256(candidate.read_bytes()).hexdigest()
            if digest == source.get("sha256"):
                return candidate
            changed.append(f"{candidate} (SHA-256 {digest[:12]}...)")
    if changed:
        raise RecipeError(f"cannot replay {path}: the recipe script has changed since the run (recorded SHA-256 "
                          f"{str(source.get('sha256'))[:12]}..., found {', '.join(changed)}); restore the recorded "
                          "version (its text is in the result, under extra.recipe.source.text) or run the recipe "
                          "anew")
    raise RecipeError(f"cannot replay {path}: the recipe script {source.get('path')!r} no longer exists and no "
                      f"recipes/{source.get('name')}.py was found; restore it (its text is in the result, under "
                      "extra.recipe.source.text)")


def git_diff_digest(directory: str | os.PathLike | None) -> str | None:
    """SHA-256 of ``git diff HEAD`` in ``directory`` (the uncommitted changes to tracked files), or None
    outside a repository: a replay can tell whether a dirty checkout is still dirty in the same way.

    >>> import tempfile
    >>> git_diff_digest(tempfile.mkdtemp()) is None      # not a repository
    True
    """
    import subprocess

    if directory is None:
        return None
    try:
        completed = subprocess.run(["git", "diff", "HEAD", "--no-ext-diff", "--binary"], cwd=directory,
                                   capture_output=True, timeout=10, check=False,
                                   env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"})
    except (OSError, subprocess.TimeoutExpired):
        return None
    return hashlib.sha256(completed.stdout).hexdigest() if completed.returncode == 0 else None


def _git_notes(document: Mapping[str, Any]) -> list[str]:
    from d5.bench.environment import capture_environment

    recorded = (document.get("environment") or {}).get("git") or {}
    now = capture_environment().get("git") or {}
    notes = []
    if recorded.get("commit") and now.get("commit") and recorded["commit"] != now["commit"]:
        notes.append(f"d5 is at commit {now['commit'][:12]}, the run was at {recorded['commit'][:12]}: code "
                     "changes since may change the results")
    elif recorded.get("dirty") or now.get("dirty"):
        digest = ((document.get("extra") or {}).get("git") or {}).get("diff_sha256")
        if not digest or digest != git_diff_digest(now.get("directory")):
            notes.append("the uncommitted changes of the d5 checkout differ from the run's (git diff HEAD): "
                         "they may change the results")
    return notes


def replay(result_path: str | os.PathLike, run_script: Any, json_path: str | None = None,
           report: Any = print) -> int:
    """Rerun the run recorded in ``result_path`` through ``run_script(script, argv) -> exit status`` (see
    :func:`d5.cli.run_script`), adding ``--json json_path``; its exit status. ``report`` prints the notes.

    >>> import tempfile, pathlib
    >>> from d5.bench.results import write_result
    >>> path = write_result(pathlib.Path(tempfile.mkdtemp()) / "gemm.json", "gemm", {}, environment={})
    >>> replay(path, run_script=None)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    d5.errors.RecipeError: cannot replay ... it is a 'gemm' result, not the result of a recipe run ...
    """
    from d5.bench.results import read_result

    document = read_result(result_path)
    plan = plan_replay(document, result_path)
    for note in plan.notes:
        report(f"note: {note}")
    argv = list(plan.argv) + (["--json", str(json_path)] if json_path else [])
    with expecting(plan.components, str(result_path)) as expectation:
        status = run_script(plan.recipe, argv)
    if not expectation.seen and status == 0:
        raise D5Error(f"cannot replay {result_path}: {plan.recipe} finished without calling run_recipe()")
    return status


__all__ = ["RECIPE_FORMAT", "describe", "is_recipe_script", "recipe_source", "find_recipe", "git_diff_digest",
           "expecting", "check_expected", "plan_replay", "replay", "ReplayPlan", "baseline_throughput"]
