"""Result files: one JSON document per run or benchmark, written atomically, with its environment.

Document layout (``schema_version`` 1)::

    {"schema_version": 1, "name": "...", "figures": {...}, "environment": {...}, "extra": {...}}

Some kinds of result (``name``) give ``extra`` a layout of their own, versioned separately
(:data:`PAYLOAD_FORMATS`): a recipe run (``"recipe"``, ``extra.recipe_format``: the configuration, seeds,
overrides and script that ``d5 run --replay`` reruns) and a sweep's manifest (``"sweep"``,
``extra.sweep_format``). :func:`check_payload` refuses such a result from another d5 with a message naming
the file and both versions.

``figures`` holds the measured numbers; numpy scalars and arrays, and objects with an ``as_dict()``
method (:class:`~d5.bench.stats.Summary`, :class:`~d5.bench.stats.Ratio`) or dataclasses are converted
to plain JSON. Non-finite floats are written as JSON's common ``NaN``/``Infinity`` extension, which Python
reads back (a diverged loss is a legitimate figure).

>>> import tempfile, pathlib
>>> path = pathlib.Path(tempfile.mkdtemp()) / "gemm.json"
>>> _ = write_result(path, "gemm", {"gflops": 150.5}, environment={})
>>> read_result(path)["figures"]
{'gflops': 150.5}
"""
from __future__ import annotations

import dataclasses
import enum
import json
import os
from pathlib import Path
from typing import Any, Mapping

from d5.errors import D5Error
from d5.io_utils import atomic_write

SCHEMA_VERSION = 1
#: result name -> (the key in ``extra`` holding its layout's version, the version this d5 writes and reads)
PAYLOAD_FORMATS = {"recipe": ("recipe_format", 1), "sweep": ("sweep_format", 1)}


def to_jsonable(value: Any, where: str = "value", *, strict: bool = True) -> Any:
    """``value`` as plain JSON types (dict with str keys, list, str, int, float, bool, None).

    numpy scalars/arrays become numbers/lists; objects with ``as_dict()`` and dataclasses become dicts;
    paths and enums become strings. Anything else raises :class:`d5.errors.D5Error` naming where it was
    (``strict=True``) or is stored as its ``repr`` (``strict=False``).

    >>> import numpy as np
    >>> to_jsonable({"n": np.int64(3), "x": np.arange(2.0), "t": (1, 2)})
    {'n': 3, 'x': [0.0, 1.0], 't': [1, 2]}
    """
    import numpy as np

    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)  # plain int, also for subclasses such as IntEnum
    if isinstance(value, float):
        return float(value)  # plain float, also for subclasses
    if isinstance(value, np.generic):
        return to_jsonable(value.item(), where, strict=strict)
    if isinstance(value, np.ndarray):
        return to_jsonable(value.tolist(), where, strict=strict)
    if isinstance(value, Mapping):
        converted = {}
        for key, item in value.items():
            if isinstance(key, np.generic):
                key = key.item()
            if not isinstance(key, (str, int, float, bool)) and key is not None:
                if not strict:
                    key = repr(key)
                else:
                    raise D5Error(f"{where}: key {key!r} of type {type(key).__name__} cannot be a JSON key; "
                                  "use str, int or float keys")
            converted[str(key) if not isinstance(key, str) else key] = to_jsonable(
                item, f"{where}[{key!r}]", strict=strict)
        return converted
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value, key=repr) if isinstance(value, (set, frozenset)) else value
        return [to_jsonable(item, f"{where}[{index}]", strict=strict) for index, item in enumerate(items)]
    as_dict = getattr(value, "as_dict", None)
    if callable(as_dict) and not isinstance(value, type):
        return to_jsonable(as_dict(), where, strict=strict)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_jsonable(dataclasses.asdict(value), where, strict=strict)
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, enum.Enum):
        return to_jsonable(value.value, where, strict=strict)
    if not strict:
        return repr(value)
    raise D5Error(f"{where}: a {type(value).__module__}.{type(value).__qualname__} cannot be written to a "
                  "result file; convert it to numbers, strings, lists or dicts (or give it an as_dict() "
                  "method) first")


def write_result(path: str | os.PathLike, name: str, figures: Mapping[str, Any], *,
                 environment: Mapping[str, Any] | None = None,
                 extra: Mapping[str, Any] | None = None) -> Path:
    """Write a result document to ``path`` atomically and return the path.

    ``environment=None`` captures the current one (:func:`~d5.bench.environment.capture_environment`).
    The whole document is converted and encoded before the file is touched, so bad input raises
    :class:`d5.errors.D5Error` and leaves any existing file at ``path`` unchanged and no temporary files.

    >>> import tempfile, pathlib
    >>> from d5.bench.stats import summarize
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "op.json"
    >>> _ = write_result(path, "conv", {"time": summarize([1.0, 1.1, 0.9])}, environment={})
    >>> read_result(path)["figures"]["time"]["median"]
    1.0
    """
    if not isinstance(name, str) or not name.strip():
        raise D5Error(f"write_result: name must be a non-empty string describing the run, got {name!r}")
    if not isinstance(figures, Mapping):
        raise D5Error(f"write_result: figures must be a dict of named measurements, got "
                      f"{type(figures).__name__}")
    if extra is not None and not isinstance(extra, Mapping):
        raise D5Error(f"write_result: extra must be a dict or None, got {type(extra).__name__}")
    if environment is None:
        from .environment import capture_environment

        environment = capture_environment()
    elif not isinstance(environment, Mapping):
        raise D5Error(f"write_result: environment must be a dict (from capture_environment()) or None, "
                      f"got {type(environment).__name__}")
    document = {
        "schema_version": SCHEMA_VERSION,
        "name": name,
        "figures": to_jsonable(figures, "figures"),
        "environment": to_jsonable(environment, "environment", strict=False),
        "extra": to_jsonable(extra if extra is not None else {}, "extra"),
    }
    try:
        text = json.dumps(document, indent=2, sort_keys=False) + "\n"
    except (TypeError, ValueError) as err:  # e.g. a circular reference
        raise D5Error(f"write_result: cannot encode result {name!r} as JSON: {err}") from None
    path = Path(path)
    with atomic_write(path, "w", encoding="utf-8") as handle:
        handle.write(text)
    return path


def read_result(path: str | os.PathLike) -> dict:
    """Read a result document written by :func:`write_result`.

    Raises :class:`d5.errors.D5Error` if the file is missing, is not valid JSON or is not a d5 result
    (the message names the file and says to delete or regenerate it).

    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "r.json"
    >>> _ = write_result(path, "demo", {"x": 1}, environment={"hostname": "h"})
    >>> sorted(read_result(path))
    ['environment', 'extra', 'figures', 'name', 'schema_version']
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise D5Error(f"no result file at {path}; run the benchmark that writes it first") from None
    except (OSError, UnicodeDecodeError) as err:
        raise D5Error(f"result file {path} cannot be read ({err}); delete it and regenerate it by "
                      "re-running the benchmark") from None
    try:
        document = json.loads(text)
    except json.JSONDecodeError as err:
        raise D5Error(f"result file {path} is corrupt (invalid JSON: {err}); delete it and regenerate it by "
                      "re-running the benchmark") from None
    missing = [key for key in ("schema_version", "name", "figures") if not isinstance(document, dict)
               or key not in document]
    if missing:
        raise D5Error(f"result file {path} is not a d5 result (missing {', '.join(missing)}); delete it and "
                      "regenerate it by re-running the benchmark")
    version = document["schema_version"]
    if not isinstance(version, int) or isinstance(version, bool) or version > SCHEMA_VERSION:
        raise D5Error(f"result file {path} has schema_version {version!r}, but this d5 reads versions up to "
                      f"{SCHEMA_VERSION}; upgrade d5 or regenerate the file")
    document.setdefault("environment", {})
    document.setdefault("extra", {})
    return document


def check_payload(document: Mapping[str, Any], path: str | os.PathLike) -> None:
    """Raise :class:`d5.errors.D5Error` unless this d5 reads the layout of ``document``'s ``extra`` (for the
    kinds in :data:`PAYLOAD_FORMATS`; other results have no layout of their own). ``path`` names the file.

    >>> check_payload({"name": "recipe", "extra": {"recipe_format": 1}}, "run.json")
    >>> check_payload({"name": "recipe", "extra": {}}, "old.json")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    d5.errors.D5Error: result file old.json is a recipe result of an older d5 (recipe_format 0), but this d5 ...
    """
    kind = document.get("name")
    if kind not in PAYLOAD_FORMATS:
        return
    key, supported = PAYLOAD_FORMATS[kind]
    extra = document.get("extra")
    version = extra.get(key, 0) if isinstance(extra, Mapping) else 0
    if version == supported:
        return
    newer = isinstance(version, int) and not isinstance(version, bool) and version > supported
    advice = "upgrade d5 to read it" if newer else \
        f"rerun the {'recipe' if kind == 'recipe' else kind} with this d5 to get a result it can read"
    raise D5Error(f"result file {path} is a {kind} result of {'a newer' if newer else 'an older'} d5 ({key} "
                  f"{version!r}), but this d5 reads {key} {supported}; {advice}")


__all__ = ["write_result", "read_result", "check_payload", "to_jsonable", "SCHEMA_VERSION", "PAYLOAD_FORMATS"]
