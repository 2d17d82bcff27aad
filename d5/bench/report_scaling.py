"""The scaling section of ``d5 report``: distributed recipe runs (``--scheme``) as seed 000's table and plot.

Every recipe run made with ``--scheme`` carries ``extra.distributed`` (see :mod:`d5.recipe_distributed`): the
world size, the training ranks, the batch per rank, throughput (equation 1), bytes per rank and, for the
asynchronous parameter server, staleness. :func:`scaling_points` groups the runs by configuration -- scheme,
compression, ranks, batch per rank, framework -- and completes speedup and efficiency (equation 2) where a run
was made without ``--baseline``: against the median throughput of the 1-rank runs of the same batch per rank and
framework among the results, so a report over a grid of runs needs no baseline flag. :func:`scaling_plot` draws
throughput, efficiency and accuracy against the number of ranks, one line per scheme, compression and batch size.

>>> runs = [RecipeRun(Path(f"{n}.json"), "lenet", {}, 0, True, {"TestAccuracy": {"value": 85.0}},
...                   {"framework": "reference", "distributed": {"scheme": "allreduce", "compression": None,
...                    "world_size": n, "workers": n, "batch_size_per_rank": 64, "throughput": t,
...                    "speedup": None, "efficiency": None, "bytes_sent": 10 * n, "bytes_received": 10 * n,
...                    "per_rank": []}}, {}) for n, t in ((1, 100.0), (2, 180.0))]
>>> [(p["ranks"], p["speedup"], p["efficiency"]) for p in scaling_points(runs)]
[(1, 1.0, 1.0), (2, 1.8, 0.9)]
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from .report import RecipeRun, _is_numeric

#: The columns of the scaling table, in order.
COLUMNS = ("scheme", "compression", "ranks", "workers", "batch per rank", "framework", "runs", "throughput (samples/s)",
           "speedup", "efficiency (%)", "TestAccuracy (%)", "sent per rank (MiB)", "received per rank (MiB)",
           "staleness mean", "baseline")


def _median(values: Sequence[float | None]) -> float | None:
    present = [float(value) for value in values if _is_numeric(value)]
    return float(np.median(present)) if present else None


def _key(run: RecipeRun) -> tuple:
    record = run.extra["distributed"]
    return (record.get("scheme"), record.get("compression") or "none", int(record.get("world_size") or 1),
            int(record.get("workers") or 1), record.get("batch_size_per_rank"), run.extra.get("framework"))


def scaling_points(runs: Sequence[RecipeRun]) -> list[dict[str, Any]]:
    """One entry per configuration of the distributed runs among ``runs`` (medians over its runs), ordered by
    scheme, compression, batch per rank and ranks; speedup and efficiency from the runs' own baseline or, failing
    that, from the 1-rank runs of the same batch per rank and framework (``baseline`` says which)."""
    groups: dict[tuple, list[RecipeRun]] = defaultdict(list)
    for run in runs:
        if isinstance(run.extra.get("distributed"), Mapping):
            groups[_key(run)].append(run)
    one_rank: dict[tuple, list[float]] = defaultdict(list)
    for (_, _, ranks, _, batch, framework), members in groups.items():
        if ranks == 1:
            one_rank[(batch, framework)] += [run.extra["distributed"].get("throughput") for run in members]
    points = []
    # scheme, compression, batch per rank, ranks, framework
    for key in sorted(groups, key=lambda k: (str(k[0]), str(k[1]), k[4] or 0, k[2], str(k[5]))):
        scheme, compression, ranks, workers, batch, framework = key
        records = [run.extra["distributed"] for run in groups[key]]
        throughput = _median([record.get("throughput") for record in records])
        speedup = _median([record.get("speedup") for record in records])
        sources = {str((record.get("baseline") or {}).get("source")) for record in records if record.get("baseline")}
        baseline = ", ".join(sorted(sources)) or "--baseline" if speedup is not None else None
        if speedup is None and throughput is not None:
            reference = _median(one_rank.get((batch, framework), []))
            if reference:
                speedup, baseline = throughput / reference, f"1-rank runs, batch {batch}"
        sent, received = (_median([record.get(name) for record in records]) for name in ("bytes_sent",
                                                                                           "bytes_received"))
        staleness = [(record.get("staleness") or {}).get("mean") for record in records]
        points.append({
            "scheme": scheme, "compression": compression, "ranks": ranks, "workers": workers,
            "batch_per_rank": batch, "framework": framework, "runs": len(records), "throughput": throughput,
            "speedup": speedup, "efficiency": None if speedup is None else speedup / max(1, workers),
            "accuracy": _median([run.value("TestAccuracy") for run in groups[key]]),
            "sent_per_rank": None if sent is None else sent / ranks,
            "received_per_rank": None if received is None else received / ranks,
            "staleness": _median(staleness), "baseline": baseline})
    return points


def scaling_rows(points: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """:func:`scaling_points` as rows of the table (:data:`COLUMNS`)."""
    def scaled(value: float | None, factor: float) -> float | None:
        return None if value is None else value * factor

    return [dict(zip(COLUMNS, (
        point["scheme"], point["compression"], point["ranks"], point["workers"], point["batch_per_rank"],
        point["framework"], point["runs"], point["throughput"], point["speedup"], scaled(point["efficiency"], 100),
        point["accuracy"], scaled(point["sent_per_rank"], 2.0 ** -20), scaled(point["received_per_rank"], 2.0 ** -20),
        point["staleness"], point["baseline"] or "none: pass --baseline, or add a 1-rank run")))
        for point in points]


def scaling_plot(points: Sequence[Mapping[str, Any]]) -> bytes | None:
    """Throughput, efficiency and final test accuracy against the number of ranks, one line per scheme, compression
    and batch per rank (PNG bytes); None unless some line has two or more rank counts. A 1-rank run -- the same single process
    whatever the scheme -- starts every line of its batch size."""
    from .report_page import _colors, _png

    lines: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    starts: dict[Any, Mapping[str, Any]] = {}
    for point in points:
        if point["ranks"] == 1:
            starts.setdefault((point["batch_per_rank"], point["framework"]), point)
    for point in points:
        if point["ranks"] > 1:
            compression = "" if point["compression"] == "none" else f" {point['compression']}"
            lines[f"{point['scheme']}{compression}, batch {point['batch_per_rank']}"].append(point)
    for label, members in lines.items():
        start = starts.get((members[0]["batch_per_rank"], members[0]["framework"]))
        if start is not None:
            members.insert(0, start)
    if not any(len(members) >= 2 for members in lines.values()):
        return None
    from matplotlib.figure import Figure

    figure = Figure(figsize=(14.0, 4.0), dpi=100)
    left, right, accuracy = figure.subplots(1, 3)
    colors = _colors(list(lines))
    markers = {batch: marker for batch, marker in zip(sorted({p["batch_per_rank"] for p in points}, key=str),
                                                      "osD^v<>")}
    for label, members in lines.items():
        ranks = [point["ranks"] for point in members]
        style = {"color": colors[label], "marker": markers.get(members[-1]["batch_per_rank"], "o"), "label": label}
        left.plot(ranks, [point["throughput"] or np.nan for point in members], **style)
        right.plot(ranks, [np.nan if point["efficiency"] is None else 100 * point["efficiency"] for point in members],
                   **style)
        accuracy.plot(ranks, [np.nan if point["accuracy"] is None else point["accuracy"] for point in members], **style)
    every = sorted({point["ranks"] for point in points})
    for axes, label in ((left, "throughput (samples/s, all training ranks)"), (right, "efficiency (%)"),
                        (accuracy, "final test accuracy (%)")):
        axes.set_xlabel("MPI ranks")
        axes.set_xticks(every)
        axes.set_ylabel(label)
        axes.grid(alpha=0.3)
    right.axhline(100, color="grey", linewidth=0.8, linestyle="--")
    left.set_title("Throughput against ranks", fontsize=10)
    right.set_title("Efficiency = speedup / training ranks", fontsize=10)
    accuracy.set_title("TestAccuracy after the run", fontsize=10)
    right.legend(fontsize=7)
    figure.tight_layout()
    return _png(figure)


__all__ = ["COLUMNS", "scaling_points", "scaling_rows", "scaling_plot"]
