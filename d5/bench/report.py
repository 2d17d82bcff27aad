"""Reports: Markdown tables, plots of measured samples, and ``d5 report`` over result files.

:func:`write_report` reads result JSONs (files, or directories searched recursively), checks that this d5
can read each (a file of a newer schema or of another recipe-result format is refused with a message
naming the file and both versions), and writes ``report.md`` and ``report.html`` (self-contained: its plots
are embedded; the PNG files also lie beside the Markdown, which links them) with a results table per
recipe and grid point, accuracy against time, speed against batch size and threads, resource use where
measured, and the environments the runs came from (:mod:`d5.bench.report_page` renders them).

matplotlib is imported inside :func:`plot_samples` and used through :class:`matplotlib.figure.Figure`
directly (no pyplot), so plotting neither selects a global backend nor keeps figures alive for others.

>>> print(markdown_table([{"framework": "torch", "img/s": 181.2}, {"framework": "numpy", "img/s": 12.0}]))
| framework | img/s |
|:----------|------:|
| torch     | 181.2 |
| numpy     |    12 |
"""
from __future__ import annotations

import dataclasses
import json
import math
import numbers
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from d5.errors import D5Error
from d5.io_utils import atomic_write

from .stats import summarize

# Jitter of the strip plot comes from a fixed seed so the same samples always give the same picture.
PLOT_SEED = 0


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, numbers.Real):
        return f"{float(value):.4g}"
    # Pipes would end the cell and newlines the row.
    return str(value).replace("|", "\\|").replace("\n", " ")


def _is_numeric(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def markdown_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None) -> str:
    """A GitHub-flavoured Markdown table; numeric columns are right-aligned.

    ``columns`` defaults to every key in the order first seen; missing values are empty cells. Floats are
    shown with 4 significant digits; other objects (a :class:`~d5.bench.stats.Summary`, ...) with ``str``.

    >>> print(markdown_table([{"a": 1, "b": "x"}], columns=["b", "a"]))
    | b | a |
    |:--|--:|
    | x | 1 |
    """
    if isinstance(rows, Mapping) or not isinstance(rows, Sequence):
        raise D5Error(f"markdown_table: rows must be a list of dicts, got {type(rows).__name__}")
    for index, row in enumerate(rows):
        if not isinstance(row, Mapping):
            raise D5Error(f"markdown_table: row {index} is a {type(row).__name__}, expected a dict")
    if columns is None:
        columns = list(dict.fromkeys(key for row in rows for key in row))
    else:
        columns = list(columns)
    if not columns:
        raise D5Error("markdown_table: no columns to show; pass rows with keys or an explicit columns list")

    header = [_cell(str(column)) for column in columns]
    body = [[_cell(row.get(column)) for column in columns] for row in rows]
    numeric = [all(_is_numeric(row.get(c)) or row.get(c) is None for row in rows)
               and any(_is_numeric(row.get(c)) for row in rows) for c in columns]
    widths = [max([len(header[i])] + [len(line[i]) for line in body]) for i in range(len(columns))]

    def render(cells: list[str]) -> str:
        padded = [cell.rjust(w) if right else cell.ljust(w) for cell, w, right in zip(cells, widths, numeric)]
        return "| " + " | ".join(padded) + " |"

    rule = "|" + "|".join(("-" * (w + 1) + ":") if right else (":" + "-" * (w + 1))
                          for w, right in zip(widths, numeric)) + "|"
    return "\n".join([render(header), rule] + [render(line) for line in body])


def plot_samples(named_samples: Mapping[str, Sequence[float]], path: str | os.PathLike, title: str,
                 unit: str, *, confidence: float = 0.95) -> Path:
    """Box and strip plot of several sample sets with each median and its CI; saved atomically as PNG.

    Each set is drawn as a box plot (quartiles), the individual samples as jittered points, and the
    median with its non-parametric confidence interval (:func:`~d5.bench.stats.summarize`) as a marker
    with an error bar (hollow where there were too few samples for the CI and the bar is the full range).
    ``unit`` labels the value axis.

    >>> import tempfile, pathlib
    >>> out = pathlib.Path(tempfile.mkdtemp()) / "times.png"
    >>> plot_samples({"torch": [1.0, 1.1, 0.9], "numpy": [2.0, 2.2, 1.9]}, out, "step time", "s").read_bytes()[:4]
    b'\\x89PNG'
    """
    if not isinstance(named_samples, Mapping) or not named_samples:
        raise D5Error("plot_samples: named_samples must be a non-empty dict of name -> list of samples")
    summaries = {str(name): summarize(samples, confidence) for name, samples in named_samples.items()}

    import numpy as np
    from matplotlib.figure import Figure

    names = list(summaries)
    figure = Figure(figsize=(max(4.0, 1.2 * len(names) + 2.0), 4.0), dpi=100)
    axes = figure.add_subplot()
    positions = np.arange(1, len(names) + 1)
    axes.boxplot([summaries[n].samples for n in names], positions=positions, widths=0.5,
                 showfliers=False, medianprops={"color": "tab:orange"})
    rng = np.random.default_rng(PLOT_SEED)
    for position, name in zip(positions, names):
        values = np.asarray(summaries[name].samples)
        axes.scatter(position + rng.uniform(-0.15, 0.15, size=values.size), values, s=10, alpha=0.5,
                     color="tab:blue", zorder=2)
        summary = summaries[name]
        axes.errorbar([position + 0.32], [summary.median],
                      yerr=[[summary.median - summary.ci_low], [summary.ci_high - summary.median]],
                      fmt="D", color="black", capsize=4, markersize=5, zorder=3,
                      # hollow marker: too few samples for the CI, the bar is only the sample range
                      markerfacecolor="black" if summary.ci_exact else "white")
    axes.set_xticks(positions)
    axes.set_xticklabels(names)
    axes.set_ylabel(unit)
    percent = f"{confidence * 100:g}%"
    legend = f"box: quartiles; diamond: median with {percent} CI"
    if not all(summary.ci_exact for summary in summaries.values()):
        legend += "; hollow: too few samples, range shown"
    axes.set_title(f"{title}\n({legend})", fontsize=10)
    axes.grid(axis="y", alpha=0.3)
    figure.tight_layout()

    path = Path(path)
    with atomic_write(path, "wb") as handle:
        figure.savefig(handle, format="png")
    return path


def aggregate(values: Sequence[float], higher_is_better: bool = True) -> dict:
    """MLPerf-style: drop the best and the worst run (when there are at least 3), mean of the rest; plus the
    median with its non-parametric confidence interval over every finite value.

    >>> a = aggregate([90.0, 91.0, 95.0, 92.0, 80.0])
    >>> a["mean_without_extremes"], a["dropped"], a["median"]
    (91.0, [95.0, 80.0], 91.0)
    """
    ordered = sorted(float(v) for v in values)
    finite = [v for v in ordered if math.isfinite(v)]
    result: dict[str, Any] = {"n": len(ordered), "mean_without_extremes": None, "dropped": [], "median": None,
                              "ci_low": None, "ci_high": None, "ci_exact": None,
                              "non_finite": len(ordered) - len(finite)}
    if not ordered:
        return result
    kept = ordered[1:-1] if len(ordered) >= 3 else ordered
    if len(ordered) >= 3:
        best, worst = (ordered[-1], ordered[0]) if higher_is_better else (ordered[0], ordered[-1])
        result["dropped"] = [best, worst]
    # A run that never reached a target has an infinite time (TimeToAccuracy): then so has the mean, as in MLPerf.
    result["mean_without_extremes"] = sum(kept) / len(kept)
    if finite:
        summary = summarize(finite)
        result.update(median=summary.median, ci_low=summary.ci_low, ci_high=summary.ci_high,
                      ci_exact=summary.ci_exact)
    return result


def aggregate_point(records: Sequence[Mapping[str, Any]], planned: int) -> dict:
    """The aggregate of one point from its runs' result documents (``read_result``) of ``planned`` runs:
    how many completed, failed (no result) and did not converge (``extra.passed`` false), and
    :func:`aggregate` of every metric in their figures.

    >>> runs = [{"figures": {"TestAccuracy": {"value": v}}, "extra": {"passed": v >= 90}} for v in (91, 89, 95)]
    >>> point = aggregate_point(runs, planned=4)
    >>> point["failed"], point["not_converged"], point["metrics"]["TestAccuracy"]["mean_without_extremes"]
    (1, 1, 91.0)
    """
    metrics: dict[str, dict] = {}
    for record in records:
        for name, row in (record.get("figures") or {}).items():
            if isinstance(row, Mapping) and _is_numeric(row.get("value")):
                entry = metrics.setdefault(name, {"values": [], "unit": row.get("unit", ""),
                                                  "higher_is_better": bool(row.get("higher_is_better", True))})
                entry["values"].append(float(row["value"]))
    return {
        "runs": planned, "completed": len(records), "failed": planned - len(records),
        "not_converged": sum(1 for record in records if not (record.get("extra") or {}).get("passed", False)),
        "metrics": {name: {"unit": entry["unit"], "higher_is_better": entry["higher_is_better"],
                           **aggregate(entry["values"], entry["higher_is_better"])}
                    for name, entry in metrics.items()},
    }


@dataclasses.dataclass
class RecipeRun:
    """One recipe run read from its result file: which recipe, which grid point (its overrides other than
    the seed, as ``{name: text}``), which seed, and the document's parts.

    >>> run = RecipeRun(Path("r.json"), "mnist_lenet", {"batch_size": "32"}, 0, True,
    ...                 {"TestAccuracy": {"value": 99.1}}, {}, {})
    >>> run.point_label, run.value("TestAccuracy"), run.value("Throughput")
    ('batch_size=32', 99.1, None)
    """

    path: Path
    recipe: str
    point: dict
    seed: int
    passed: bool
    figures: dict
    extra: dict
    environment: dict

    @property
    def point_label(self) -> str:
        return ",".join(f"{key}={value}" for key, value in self.point.items()) or "as written"

    def value(self, metric: str) -> float | None:
        """The metric's value, or None when the run did not measure it."""
        row = self.figures.get(metric)
        value = row.get("value") if isinstance(row, Mapping) else None
        return float(value) if _is_numeric(value) else None


@dataclasses.dataclass
class ReportInputs:
    """What :func:`load_results` found: recipe runs, sweep manifests and other results (as ``(path,
    document)``), and the files skipped.

    >>> ReportInputs().runs
    []
    """

    runs: list = dataclasses.field(default_factory=list)
    sweeps: list = dataclasses.field(default_factory=list)
    others: list = dataclasses.field(default_factory=list)
    skipped: list = dataclasses.field(default_factory=list)


def _result_files(paths: Sequence[str | os.PathLike]) -> list[tuple[Path, bool]]:
    """``(file, given explicitly)`` for every path; directories searched recursively for ``*.json``."""
    files: list[tuple[Path, bool]] = []
    for given in paths:
        path = Path(given)
        if path.is_dir():
            files += [(found, False) for found in sorted(path.rglob("*.json")) if not found.name.startswith(".")]
        elif path.is_file():
            files.append((path, True))
        else:
            raise D5Error(f"d5 report: {str(path)!r} is neither a result file nor a directory of them")
    return list(dict.fromkeys(files))


def _looks_like_a_result(path: Path) -> bool:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(document, dict) and "schema_version" in document


def load_results(paths: Sequence[str | os.PathLike]) -> ReportInputs:
    """Read every result under ``paths`` for a report; see :func:`write_report` for what is refused.

    A JSON file found in a directory that is not a d5 result at all (a logger's output) is skipped and
    listed; given by name, it is an error.

    >>> import tempfile, pathlib
    >>> from d5.bench.results import write_result
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> _ = write_result(folder / "gemm.json", "gemm", {"gflops": 150.5}, environment={})
    >>> [document["name"] for _, document in load_results([folder]).others]
    ['gemm']
    """
    from .results import check_payload, read_result

    found = ReportInputs()
    for path, explicit in _result_files(paths):
        try:
            document = read_result(path)
        except D5Error:
            if explicit or _looks_like_a_result(path):
                raise  # a d5 result this d5 cannot read: say so, never drop it quietly
            found.skipped.append(f"{path} (not a d5 result)")
            continue
        check_payload(document, path)
        try:
            if document["name"] == "recipe":
                found.runs.append(_recipe_run(path, document))
            elif document["name"] == "sweep":
                found.sweeps.append((path, document))
            else:
                found.others.append((path, document))
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise D5Error(f"result file {path} does not have the layout its version promises ({type(err).__name__}: "
                          f"{err}); regenerate it with this d5") from None
    return found


def _recipe_run(path: Path, document: Mapping[str, Any]) -> RecipeRun:
    extra = dict(document.get("extra") or {})
    recipe = extra.get("recipe") or {}
    source = recipe.get("source") or {}
    argv = [str(item) for item in extra.get("argv") or []]
    point = {}
    for flag, value in zip(argv[::2], argv[1::2]):
        if flag != "--seed":
            point[flag[2:].replace("-", "_")] = value
    return RecipeRun(path=path, recipe=source.get("name") or f"program {recipe.get('caller') or '?'}", point=point,
                     seed=int(extra.get("seed", 0)), passed=bool(extra.get("passed", False)),
                     figures=dict(document.get("figures") or {}), extra=extra,
                     environment=dict(document.get("environment") or {}))


def write_report(paths: Sequence[str | os.PathLike], output: str | os.PathLike) -> list[Path]:
    """``d5 report``: read the results under ``paths`` and write ``report.md``, ``report.html`` and the plots
    (PNG) into ``output``; returns the files written. Every file is written atomically, so a report killed
    half-way leaves complete files or none (and the next report removes its temporary files).

    Refused with a :class:`d5.errors.D5Error` naming the file: a d5 result of a newer schema, a recipe
    result or sweep manifest of another format version (:func:`d5.bench.results.check_payload`), a file
    given by name that is not a d5 result, and no results at all.

    >>> import tempfile, pathlib
    >>> from d5.bench.results import write_result
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> _ = write_result(folder / "results" / "gemm.json", "gemm", {"gflops": 150.5}, environment={})
    >>> [path.name for path in write_report([folder / "results"], folder / "report")]
    ['report.md', 'report.html']
    """
    from .report_page import render_report

    inputs = load_results(paths)
    if not (inputs.runs or inputs.sweeps or inputs.others):
        raise D5Error(f"d5 report: no d5 result files under {', '.join(map(str, paths))}; give result JSONs "
                      "(written by d5 run --json, d5 sweep, or a benchmark) or directories holding them")
    directory = Path(output)
    if directory.exists() and not directory.is_dir():
        raise D5Error(f"d5 report: --output {str(directory)!r} is a file; name a directory")
    directory.mkdir(parents=True, exist_ok=True)
    for leftover in directory.glob(".*.tmp"):  # of a report that was killed while writing
        leftover.unlink(missing_ok=True)
    return render_report(inputs, directory)


__all__ = ["markdown_table", "plot_samples", "aggregate", "aggregate_point", "write_report", "load_results",
           "RecipeRun", "ReportInputs"]
