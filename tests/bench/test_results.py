"""Tests of d5.bench.results (JSON result files) and d5.bench.report (Markdown tables, plots).

Oracles: the json module, the PNG file signature and header, and hand-written expected tables.
"""
from __future__ import annotations

import dataclasses
import json
import math
import struct

import numpy as np
import pytest

from d5.bench.report import markdown_table, plot_samples
from d5.bench.results import SCHEMA_VERSION, read_result, to_jsonable, write_result
from d5.bench.stats import compare, summarize
from d5.errors import D5Error

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def test_round_trip_converts_numpy_and_dataclasses(tmp_path):
    @dataclasses.dataclass
    class Config:
        batch_size: int
        lr: float

    summary = summarize([1.0, 1.2, 0.9, 1.1, 1.05, 0.95])
    ratio = compare([2.0, 2.1, 1.9], [1.0, 1.1, 0.9])
    figures = {"time": summary, "speedup": ratio, "gflops": np.float32(150.5), "count": np.int64(7),
               "curve": np.arange(3.0), "config": Config(64, 0.1), "loss": float("nan")}
    path = write_result(tmp_path / "sub" / "run.json", "resnet44", figures,
                        environment={"hostname": "h"}, extra={"note": "smoke"})
    assert path == tmp_path / "sub" / "run.json"
    document = read_result(path)
    assert document["schema_version"] == SCHEMA_VERSION
    assert document["name"] == "resnet44"
    assert document["environment"] == {"hostname": "h"} and document["extra"] == {"note": "smoke"}
    got = document["figures"]
    assert got["time"] == summary.as_dict()
    assert got["speedup"] == ratio.as_dict()
    assert got["gflops"] == 150.5 and got["count"] == 7 and got["curve"] == [0.0, 1.0, 2.0]
    assert got["config"] == {"batch_size": 64, "lr": 0.1}
    assert math.isnan(got["loss"])
    assert json.loads(path.read_text())["figures"]["count"] == 7  # plain JSON on disk
    assert sorted(p.name for p in path.parent.iterdir()) == ["run.json"]


def test_environment_is_captured_when_not_given(tmp_path):
    document = read_result(write_result(tmp_path / "r.json", "demo", {"x": 1}))
    assert {"versions", "cpu", "git", "timestamp_utc"} <= set(document["environment"])


def test_unserializable_figure_raises_and_leaves_the_old_file_intact(tmp_path):
    path = write_result(tmp_path / "r.json", "first", {"x": 1}, environment={})
    before = path.read_bytes()
    with pytest.raises(D5Error, match=r"figures\['bad'\]\[1\].*cannot be written"):
        write_result(path, "second", {"bad": [1, object()]}, environment={})
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]  # no temporary files left


def test_a_failure_while_writing_leaves_no_temp_file(tmp_path, monkeypatch):
    import contextlib

    import d5.bench.results as results

    path = write_result(tmp_path / "r.json", "first", {"x": 1}, environment={})
    before = path.read_bytes()
    real_atomic_write = results.atomic_write

    class HalfWritingHandle:
        """Writes half of what it is given, then fails like a full disk."""

        def __init__(self, handle):
            self.handle = handle

        def write(self, text):
            self.handle.write(text[: len(text) // 2])
            raise OSError("No space left on device")

    @contextlib.contextmanager
    def failing_atomic_write(target, mode="w", **kwargs):
        with real_atomic_write(target, mode, **kwargs) as handle:
            yield HalfWritingHandle(handle)

    monkeypatch.setattr(results, "atomic_write", failing_atomic_write)
    with pytest.raises(OSError, match="No space"):
        write_result(path, "second", {"x": 2}, environment={})
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


@pytest.mark.parametrize("content, message", [
    ("{not json", "corrupt"),
    ('["a list"]', "not a d5 result"),
    ('{"name": "x"}', "missing schema_version, figures"),
    ('{"schema_version": 99, "name": "x", "figures": {}}', "schema_version 99"),
])
def test_reading_a_bad_file_names_it_and_says_what_to_do(tmp_path, content, message):
    path = tmp_path / "broken.json"
    path.write_text(content)
    with pytest.raises(D5Error, match=message) as info:
        read_result(path)
    assert str(path) in str(info.value)
    assert "regenerate" in str(info.value) or "upgrade" in str(info.value)


def test_reading_a_missing_file(tmp_path):
    with pytest.raises(D5Error, match="no result file"):
        read_result(tmp_path / "absent.json")


@pytest.mark.parametrize("kwargs, message", [
    (dict(name="", figures={}), "name"),
    (dict(name="x", figures=[1, 2]), "figures must be a dict"),
    (dict(name="x", figures={}, extra=[1]), "extra"),
    (dict(name="x", figures={}, environment="here"), "environment"),
    (dict(name="x", figures={(1, 2): 3}), "JSON key"),
])
def test_write_result_rejects_bad_arguments(tmp_path, kwargs, message):
    with pytest.raises(D5Error, match=message):
        write_result(tmp_path / "r.json", **kwargs)
    assert not (tmp_path / "r.json").exists()


def test_to_jsonable_plain_values():
    import enum
    import pathlib

    class Color(enum.Enum):
        RED = "red"

    value = {"a": (1, np.bool_(True)), 2: {3}, "p": pathlib.PurePosixPath("/x/y"), "c": Color.RED}
    assert to_jsonable(value) == {"a": [1, True], "2": [3], "p": "/x/y", "c": "red"}
    assert to_jsonable(object(), strict=False).startswith("<object")


def test_markdown_table_layout():
    rows = [{"framework": "torch", "img/s": 181.234, "note": "a|b"},
            {"framework": "numpy", "img/s": 12, "threads": 2}]
    expected = "\n".join([
        "| framework | img/s | note | threads |",
        "|:----------|------:|:-----|--------:|",
        "| torch     | 181.2 | a\\|b |         |",
        "| numpy     |    12 |      |       2 |",
    ])
    assert markdown_table(rows) == expected
    assert markdown_table(rows, columns=["img/s"]).splitlines()[2] == "| 181.2 |"
    summary = summarize([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    assert str(summary) in markdown_table([{"time": summary}])


@pytest.mark.parametrize("rows, columns, message", [
    ({"a": 1}, None, "list of dicts"),
    ([1, 2], None, "row 0"),
    ([], None, "no columns"),
])
def test_markdown_table_rejects_bad_rows(rows, columns, message):
    with pytest.raises(D5Error, match=message):
        markdown_table(rows, columns)


def test_plot_samples_writes_a_valid_png(tmp_path):
    rng = np.random.default_rng(3)
    named = {"torch": list(rng.lognormal(0, 0.1, 20)), "numpy": list(2 * rng.lognormal(0, 0.1, 20)),
             "tiny": [1.0, 1.5]}
    path = plot_samples(named, tmp_path / "plots" / "times.png", "step time", "s")
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    assert width > 100 and height > 100
    assert data[-8:-4] == b"IEND"
    assert [p.name for p in path.parent.iterdir()] == ["times.png"]


def test_plot_samples_rejects_bad_input_without_writing(tmp_path):
    with pytest.raises(D5Error, match="non-empty dict"):
        plot_samples({}, tmp_path / "a.png", "t", "s")
    with pytest.raises(D5Error, match="nan"):
        plot_samples({"x": [1.0, float("nan")]}, tmp_path / "a.png", "t", "s")
    assert list(tmp_path.iterdir()) == []


def test_plot_samples_leaves_pyplot_state_alone(tmp_path):
    import matplotlib

    backend = matplotlib.get_backend()
    plot_samples({"a": [1.0, 2.0, 3.0]}, tmp_path / "a.png", "t", "s")
    assert matplotlib.get_backend() == backend
