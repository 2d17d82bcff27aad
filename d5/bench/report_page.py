"""The pages of ``d5 report``: one Markdown and one HTML document built from the same sections, and their plots.

Plots use matplotlib's object API (:class:`matplotlib.figure.Figure`, no pyplot state). Each is written as a
PNG beside ``report.md`` (which links it) and embedded in ``report.html`` as base64, so the HTML page is one
self-contained file. Everything is written atomically. :func:`render_report` is called by
:func:`d5.bench.report.write_report`, which reads and checks the results first.

>>> page = Page()
>>> page.heading(1, "Runs")
>>> page.table([{"point": "batch_size=32", "runs": 5}])
>>> print(page.markdown())
# Runs
<BLANKLINE>
| point         | runs |
|:--------------|-----:|
| batch_size=32 |    5 |
<BLANKLINE>
"""
from __future__ import annotations

import base64
import html
import io
import re
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from d5.io_utils import atomic_write

from .report import RecipeRun, ReportInputs, _cell, _is_numeric, aggregate_point, markdown_table
from .report_scaling import scaling_plot, scaling_points, scaling_rows

_RESOURCE_METRIC = re.compile(r"memory|cpu|utili[sz]ation", re.IGNORECASE)
_STYLE = ("body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}"
          "table{border-collapse:collapse;margin:1em 0;font-size:0.9em}th,td{border:1px solid #ccc;"
          "padding:0.25em 0.6em}th{background:#f3f3f3}td.n{text-align:right;font-variant-numeric:tabular-nums}"
          "img{max-width:100%}figcaption{font-size:0.9em;color:#555}")


class Page:
    """Markdown and HTML built side by side from the same calls; ``images`` holds the PNGs by file name.

    >>> page = Page()
    >>> page.paragraph("3 < 4")
    >>> page.markdown().strip(), page.html("t").count("<p>3 &lt; 4</p>")
    ('3 < 4', 1)
    """

    def __init__(self) -> None:
        self._markdown: list[str] = []
        self._html: list[str] = []
        self.images: dict[str, bytes] = {}

    def heading(self, level: int, text: str) -> None:
        self._markdown.append(f"{'#' * level} {text}\n")
        self._html.append(f"<h{level}>{html.escape(text)}</h{level}>")

    def paragraph(self, text: str) -> None:
        self._markdown.append(text + "\n")
        self._html.append(f"<p>{html.escape(text)}</p>")

    def table(self, rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None) -> None:
        if not rows:
            return
        columns = list(columns or dict.fromkeys(key for row in rows for key in row))
        self._markdown.append(markdown_table(rows, columns) + "\n")
        numeric = {c for c in columns if any(_is_numeric(row.get(c)) for row in rows)}
        head = "".join(f"<th>{html.escape(str(c))}</th>" for c in columns)
        body = "".join("<tr>" + "".join(f"<td{' class=n' if c in numeric else ''}>"
                                        f"{html.escape(_cell(row.get(c)).replace(chr(92) + '|', '|'))}</td>"
                                        for c in columns) + "</tr>" for row in rows)
        self._html.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")

    def image(self, filename: str, png: bytes, caption: str) -> None:
        self.images[filename] = png
        self._markdown.append(f"![{caption}]({filename})\n")
        encoded = base64.b64encode(png).decode("ascii")
        self._html.append(f'<figure><img src="data:image/png;base64,{encoded}" alt="{html.escape(caption)}">'
                          f"<figcaption>{html.escape(caption)}</figcaption></figure>")

    def markdown(self) -> str:
        return "\n".join(self._markdown)

    def html(self, title: str) -> str:
        return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>"
                f"<style>{_STYLE}</style></head><body>\n" + "\n".join(self._html) + "\n</body></html>\n")


# ------------------------------------------------------------------------------------------------ plots

def _png(figure: Any) -> bytes:
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()


def _new_figure():
    from matplotlib.figure import Figure

    figure = Figure(figsize=(6.4, 4.0), dpi=100)
    return figure, figure.add_subplot()


def _colors(labels: Sequence[str]) -> dict[str, Any]:
    from matplotlib import colormaps

    palette = colormaps["tab10"]
    return {label: palette(index % 10) for index, label in enumerate(dict.fromkeys(labels))}


def _accuracy_vs_time(runs: Sequence[RecipeRun]) -> bytes | None:
    """Test accuracy after each epoch against the run's elapsed time, one line per run, a colour per point."""
    import numpy as np

    curves = []
    for run in runs:
        training = run.extra.get("training") or {}
        accuracy, seconds = training.get("test_accuracy") or [], training.get("epoch_time") or []
        pairs = [(t, a) for t, a in zip(np.cumsum([t or 0.0 for t in seconds]), accuracy) if _is_numeric(a)]
        if pairs:
            curves.append((run.point_label, pairs))
    if not curves:
        return None
    figure, axes = _new_figure()
    colors, labelled = _colors([label for label, _ in curves]), set()
    for label, pairs in curves:
        times, values = zip(*pairs)
        axes.plot(times, values, marker="o", markersize=3, color=colors[label], alpha=0.8,
                  label=None if label in labelled else label)
        labelled.add(label)
    axes.set_xlabel("elapsed time (s, training and validation)")
    axes.set_ylabel("test accuracy (%)")
    axes.set_title("Accuracy against time (one line per run)", fontsize=10)
    axes.grid(alpha=0.3)
    axes.legend(fontsize=7)
    return _png(figure)


def _speed_against(runs: Sequence[RecipeRun], key: str, x_of: Callable[[RecipeRun], float | None],
                  label: str) -> bytes | None:
    """Throughput (median and CI over the seeds) against ``x_of(run)``, one line per setting of the other
    overrides; None unless some line has two or more x values."""
    from d5.bench.stats import summarize

    series: dict[str, dict[float, list[float]]] = defaultdict(lambda: defaultdict(list))
    for run in runs:
        x, speed = x_of(run), run.value("Throughput")
        if x is not None and speed is not None:
            rest = ",".join(f"{k}={v}" for k, v in run.point.items() if k != key) or "as written"
            series[rest][float(x)].append(speed)
    if not any(len(points) >= 2 for points in series.values()):
        return None
    figure, axes = _new_figure()
    for name, points in series.items():
        xs = sorted(points)
        summaries = [summarize(points[x]) for x in xs]
        medians = [s.median for s in summaries]
        axes.errorbar(xs, medians, yerr=[[m - s.ci_low for m, s in zip(medians, summaries)],
                                         [s.ci_high - m for m, s in zip(medians, summaries)]],
                      marker="o", capsize=3, label=name)
    axes.set_xlabel(label)
    axes.set_ylabel("training throughput (samples/s)")
    axes.set_title(f"Speed against {label} (median and 95% CI over seeds)", fontsize=10)
    axes.grid(alpha=0.3)
    axes.legend(fontsize=7)
    return _png(figure)


def _effective_threads(run: RecipeRun) -> float | None:
    """``--threads`` when given, else the thread count the run's framework reported using."""
    if _is_numeric(run.extra.get("threads")):
        return float(run.extra["threads"])
    from d5.frameworks import FRAMEWORKS

    pools = run.extra.get("thread_pools") or {}
    framework = run.extra.get("framework")
    counts = pools.get(FRAMEWORKS.get(framework) or framework) if framework in FRAMEWORKS else None
    if isinstance(counts, Mapping):  # a framework with several pools: its compute (intra-op) threads
        counts = counts.get("num_threads")
    return float(counts) if _is_numeric(counts) else None


def _resource_use(runs: Sequence[RecipeRun]) -> list[tuple[str, bytes]]:
    """One bar chart per resource metric (memory, CPU utilization) present: the median per point."""
    import numpy as np

    names = sorted({name for run in runs for name in run.figures if _RESOURCE_METRIC.search(name)
                    and run.value(name) is not None})
    charts = []
    for name in names:
        values: dict[str, list[float]] = defaultdict(list)
        unit = ""
        for run in runs:
            if run.value(name) is not None:
                values[run.point_label].append(run.value(name))
                unit = run.figures[name].get("unit") or unit
        figure, axes = _new_figure()
        labels = list(values)
        axes.bar(range(len(labels)), [float(np.median(values[label])) for label in labels], color="tab:blue")
        axes.set_xticks(range(len(labels)))
        axes.set_xticklabels(labels, rotation=30, ha="right", fontsize=7)
        axes.set_ylabel(f"{name} ({unit})" if unit else name)
        axes.set_title(f"{name}: median per point", fontsize=10)
        charts.append((name, _png(figure)))
    return charts


# ----------------------------------------------------------------------------------------------- tables

def _point_rows(runs: Sequence[RecipeRun]) -> tuple[list[dict], list[str]]:
    """One row per grid point -- runs, seeds, runs that did not converge, and per metric the median [CI] and
    (from 3 runs on) the MLPerf mean -- and the columns in order (each metric's mean beside its median)."""
    by_point: dict[str, list[RecipeRun]] = defaultdict(list)
    for run in runs:
        by_point[run.point_label].append(run)
    rows, columns = [], ["point", "runs", "seeds", "not converged"]
    for label, point_runs in by_point.items():
        documents = [{"figures": run.figures, "extra": run.extra} for run in point_runs]
        point = aggregate_point(documents, len(point_runs))
        row: dict[str, Any] = {"point": label, "runs": point["completed"], "seeds": _seeds(point_runs),
                               "not converged": point["not_converged"]}
        for metric, entry in point["metrics"].items():
            unit = f" {entry['unit']}" if entry["unit"] else ""
            median = f"{metric}{unit} median [CI]"
            row[median] = "" if entry["median"] is None else (
                f"{entry['median']:.4g} [{entry['ci_low']:.4g}, {entry['ci_high']:.4g}]"
                + ("" if entry["ci_exact"] else " (range)"))
            if median not in columns:
                columns.append(median)
            if entry["dropped"]:
                mean = f"{metric} mean w/o best, worst"
                row[mean] = entry["mean_without_extremes"]
                if mean not in columns:
                    columns.insert(columns.index(median) + 1, mean)
        rows.append(row)
    return rows, columns


def _seeds(runs: Sequence[RecipeRun]) -> str:
    return ",".join(str(s) for s in sorted({run.seed for run in runs}))


def _run_rows(runs: Sequence[RecipeRun], base: Path) -> list[dict]:
    metrics = list(dict.fromkeys(name for run in runs for name in run.figures))
    rows = []
    for run in runs:
        row: dict[str, Any] = {"file": _relative(run.path, base), "point": run.point_label, "seed": run.seed,
                               "passed": "yes" if run.passed else "NO"}
        row.update({name: run.value(name) for name in metrics})
        rows.append(row)
    return rows


def _relative(path: Path, base: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(base.resolve()))
    except ValueError:
        return str(path)


ENVIRONMENT_FIELDS: tuple[tuple[str, Callable[[Mapping[str, Any]], Any]], ...] = (
    ("host", lambda env: env.get("hostname")),
    ("CPU", lambda env: (env.get("cpu") or {}).get("model")),
    ("cores (physical/logical/usable)", lambda env: "/".join(str((env.get("cpu") or {}).get(key)) for key in
                                                             ("physical_cores", "logical_cores", "affinity"))),
    ("memory (GiB)", lambda env: round(((env.get("memory") or {}).get("total_bytes") or 0) / 2 ** 30, 1) or None),
    ("platform", lambda env: (env.get("platform") or {}).get("description")),
    ("Python", lambda env: (env.get("python") or {}).get("version")),
    ("packages", lambda env: ", ".join(f"{k} {v}" for k, v in sorted((env.get("versions") or {}).items()))),
    ("BLAS", lambda env: " ".join(str(((env.get("blas") or {}).get("blas") or {}).get(k) or "")
                                  for k in ("name", "version")).strip() or None),
    ("git", lambda env: None if not env.get("git") else
        f"{str(env['git'].get('commit'))[:12]}{' (uncommitted changes)' if env['git'].get('dirty') else ''}"),
)


def _thread_variables(env: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted((env.get("threads") or {}).items()) if v is not None) or "none set"


def _environment_rows(environments: Sequence[Mapping[str, Any]]) -> list[dict]:
    """The distinct machines and software (one column each, with how many results came from it); the thread
    variables, which a sweep over threads varies on purpose, are listed per machine rather than split it."""
    distinct: dict[tuple, list] = {}
    for env in environments:
        key = tuple(str(read(env)) for _, read in ENVIRONMENT_FIELDS)
        distinct.setdefault(key, []).append(_thread_variables(env))
    columns = [f"environment {i + 1} ({len(found)} results)" for i, found in enumerate(distinct.values())]
    rows = [{"": name, **{column: key[row] for column, key in zip(columns, distinct)}}
            for row, (name, _) in enumerate(ENVIRONMENT_FIELDS)]
    rows.append({"": "thread variables", **{column: " | ".join(dict.fromkeys(found))
                                            for column, found in zip(columns, distinct.values())}})
    return rows


# ----------------------------------------------------------------------------------------------- the page

def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "recipe"


def _recipe_section(page: Page, recipe: str, runs: list[RecipeRun], directory: Path) -> None:
    page.heading(2, f"Recipe {recipe}")
    thresholds = {name: row.get("threshold") for run in runs for name, row in run.figures.items()
                  if isinstance(row, Mapping) and row.get("threshold") is not None}
    criteria = ", ".join(f"{name} {'>=' if runs[0].figures[name].get('higher_is_better', True) else '<='} {t:g}"
                         for name, t in thresholds.items()) or "none"
    page.paragraph(f"{len(runs)} runs. Acceptable metrics: {criteria}. A run that misses one did not converge. "
                   "Per point: the median with its 95% confidence interval over the seeds (\"range\": too few runs "
                   "for the interval) and, from 3 runs on, the mean without the best and the worst run (MLPerf).")
    page.table(*_point_rows(runs))
    slug = _slug(recipe)
    plots = [("accuracy-vs-time", "Test accuracy against time", _accuracy_vs_time(runs)),
             ("speed-vs-batch-size", "Speed against batch size",
              _speed_against(runs, "batch_size", lambda run: run.extra.get("batch_size"), "batch size")),
             ("speed-vs-threads", "Speed against threads",
              _speed_against(runs, "threads", _effective_threads, "threads"))]
    missing = []
    for name, caption, png in plots:
        if png is None:
            missing.append(caption.lower())
        else:
            page.image(f"{slug}-{name}.png", png, f"{recipe}: {caption}")
    resources = _resource_use(runs)
    for metric, png in resources:
        page.image(f"{slug}-{_slug(metric)}.png", png, f"{recipe}: {metric}")
    if not resources:
        missing.append("resource use (no memory or CPU-utilization metric was measured)")
    if missing:
        page.paragraph("Not plotted, for want of data (two or more batch sizes or thread counts, or per-epoch "
                       "accuracies): " + "; ".join(missing) + ".")
    _scaling_section(page, recipe, runs, slug)
    page.heading(3, "All runs")
    page.table(_run_rows(runs, directory))


def _scaling_section(page: Page, recipe: str, runs: list[RecipeRun], slug: str) -> None:
    """Distributed runs (``--scheme``): seed 000's table -- throughput, speedup, efficiency, accuracy, bytes per
    rank, staleness -- and throughput, efficiency and accuracy against the ranks."""
    points = scaling_points(runs)
    if not points:
        return
    page.heading(3, "Scaling")
    page.paragraph("Runs with --scheme, grouped by scheme, compression, ranks and batch per rank (medians over "
                   "their runs). Throughput: every training rank's samples over the slowest rank's training time; "
                   "speedup: throughput over the 1-rank throughput (the run's --baseline, else the 1-rank runs of the "
                   "same batch per rank in this report); efficiency: speedup over the training ranks (a dedicated "
                   "parameter server does not train).")
    page.table(scaling_rows(points))
    png = scaling_plot(points)
    if png is not None:
        page.image(f"{slug}-scaling.png", png, f"{recipe}: throughput, efficiency and accuracy against ranks")


def _flat_figures(figures: Mapping[str, Any], limit: int = 6) -> str:
    shown = []
    for name, value in figures.items():
        if isinstance(value, Mapping):
            value = value.get("median", value.get("value"))
        if _is_numeric(value):
            shown.append(f"{name}={value:.4g}")
    return ", ".join(shown[:limit]) + (", ..." if len(shown) > limit else "")


def _sweep_row(path: Path, extra: Mapping[str, Any], directory: Path) -> dict:
    statuses = [str(run.get("status")) for run in extra.get("runs") or []]
    return {"manifest": _relative(path, directory), "recipe": Path(str((extra.get("recipe") or {}).get("path"))).name,
            "grid": " ".join(f"{k}={','.join(v)}" for k, v in (extra.get("grid") or {}).items()),
            "seeds": extra.get("seeds"), "runs done": sum(s.startswith("done") for s in statuses),
            "runs failed": statuses.count("failed"), "complete": "yes" if extra.get("complete") else "no"}


def render_report(inputs: ReportInputs, directory: Path) -> list[Path]:
    """Write ``report.md``, ``report.html`` and the PNG plots of ``inputs`` into ``directory``; the files.

    >>> import tempfile, pathlib
    >>> inputs = ReportInputs(others=[(pathlib.Path("gemm.json"), {"name": "gemm", "figures": {"gflops": 150.5},
    ...                                                           "environment": {}})])
    >>> [path.name for path in render_report(inputs, pathlib.Path(tempfile.mkdtemp()))]
    ['report.md', 'report.html']
    """
    page = Page()
    page.heading(1, "d5 report")
    recipes: dict[str, list[RecipeRun]] = defaultdict(list)
    for run in inputs.runs:
        recipes[run.recipe].append(run)
    page.paragraph(f"{len(inputs.runs)} recipe runs of {len(recipes)} recipes, {len(inputs.sweeps)} sweeps, "
                   f"{len(inputs.others)} other results.")
    for recipe, runs in recipes.items():
        _recipe_section(page, recipe, sorted(runs, key=lambda r: (r.point_label, r.seed)), directory)
    if inputs.sweeps:
        page.heading(2, "Sweeps")
        page.table([_sweep_row(path, doc["extra"], directory) for path, doc in inputs.sweeps])
    if inputs.others:
        page.heading(2, "Other results")
        page.table([{"result": doc["name"], "file": _relative(path, directory),
                     "figures": _flat_figures(doc["figures"])} for path, doc in inputs.others])
    environments = [run.environment for run in inputs.runs] + [doc["environment"] for _, doc in inputs.others]
    if environments:
        page.heading(2, "Environment")
        page.table(_environment_rows(environments))
    if inputs.skipped:
        page.heading(2, "Skipped files")
        page.paragraph("; ".join(inputs.skipped))

    # Everything is rendered before the first file is touched: a failure leaves the previous report as it was.
    files = [*((name, png) for name, png in page.images.items()),
             ("report.md", page.markdown().encode("utf-8")), ("report.html", page.html("d5 report").encode("utf-8"))]
    for filename, data in files:
        with atomic_write(directory / filename, "wb") as handle:
            handle.write(data)
    return [directory / filename for filename, _ in files]


__all__ = ["Page", "render_report"]
