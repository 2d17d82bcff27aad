"""Simple reports: Markdown tables and plots of measured samples.

matplotlib is imported inside :func:`plot_samples` and used through :class:`matplotlib.figure.Figure`
directly (no pyplot), so plotting neither selects a global backend nor keeps figures alive for others.

>>> print(markdown_table([{"framework": "torch", "img/s": 181.2}, {"framework": "numpy", "img/s": 12.0}]))
| framework | img/s |
|:----------|------:|
| torch     | 181.2 |
| numpy     |    12 |
"""
from __future__ import annotations

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


__all__ = ["markdown_table", "plot_samples"]
