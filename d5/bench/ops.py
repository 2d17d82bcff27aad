"""Operator benchmarks (``d5 bench ops``, ``benchmarks/ops.py``): DeepBench-style GEMM, convolution and
element-wise problems (:mod:`d5.bench.ops_problems`), forward and backward, on every available framework (its
own kernels and the seeds' custom operators, Python ``IPowOp`` and C++ ``ipowop``), against the machine's SGEMM
peak and memory bandwidth measured in the same run. What a framework contributes -- its thread pool, the
roofline's GEMM and copy, its operators bound for timing -- comes from its ``runtime.py`` through
``d5.frameworks.runtime(name)``, so this module names no framework but the :data:`PEER` of one figure.

Every implementation's outputs (forward output and every input gradient) are checked against the reference
before it is timed -- numbers for wrong results are never reported: such a row is marked ``failed`` instead.
Times are :func:`d5.bench.timing.measure` samples summarized as a median with a 95% non-parametric confidence
interval; every framework runs on the same number of threads (recorded). Outputs: a JSON result (with the
environment), a Markdown table and a roofline plot (arithmetic intensity against GFLOP/s, under the measured
SGEMM peak and the measured bandwidth's slope).

>>> from d5.bench.ops_problems import GemmProblem
>>> gflops(GemmProblem("g", 1000, 1000, 1000).flops("forward"), 0.01)
200.0
"""
from __future__ import annotations

import warnings

import argparse
import dataclasses
import os
import time
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from d5.errors import D5Error, UnsupportedOperatorError

from .ops_problems import (ORACLE, PASSES, BoundPasses, Implementation, ImplementationCatalog, Problem, Skipped,
                           deepbench_subset, expected_results, quick_subset)

#: The framework whose native kernels the element-wise rows are compared with (``elementwise_vs_<its package>_native``).
PEER = "pytorch"
#: An implementation passes the check when every output is within this of the reference's, relative to the
#: reference output's largest magnitude (float32 sums of up to 4,608 products differ in the last bits).
CHECK_TOLERANCE = 1e-4
#: The issue's figure: the reference GEMM/conv kernels should reach this fraction of the SGEMM peak.
PEAK_FRACTION_TARGET = 0.5
SEED = 0
#: Other processes using at least this fraction of the cores while a problem is timed make its numbers suspect:
#: on 2 cores they stall a spinning thread of a parallel region by whole scheduler time slices (measured here:
#: a framework's 1M-element Relu took 8 ms instead of 0.05 ms while other tests ran).
BUSY_FRACTION = 0.1


def gflops(flops: float, seconds: float) -> float:
    """GFLOP/s of ``flops`` floating-point operations done in ``seconds``.

    >>> gflops(2 * 64 ** 3, 1e-3)
    0.524288
    """
    if not seconds > 0:
        raise D5Error(f"gflops: seconds must be positive, got {seconds!r}")
    return flops / seconds / 1e9


# -- checking against the reference ---------------------------------------------------------------------------

def relative_error(actual: np.ndarray, expected: np.ndarray) -> float:
    """Largest absolute difference relative to the expected array's largest magnitude (inf when the shapes
    differ).

    >>> relative_error(np.array([1.0, 2.5]), np.array([1.0, 2.0]))
    0.25
    """
    actual, expected = np.asarray(actual), np.asarray(expected)
    if actual.shape != expected.shape:
        return float("inf")
    scale = max(float(np.max(np.abs(expected), initial=0.0)), np.finfo(np.float32).tiny)
    return float(np.max(np.abs(actual.astype(np.float64) - expected), initial=0.0)) / scale


def check_passes(passes: BoundPasses, output: np.ndarray, input_grads: list[np.ndarray]) -> float:
    """The worst :func:`relative_error` over the forward output and every input gradient.

    >>> p = BoundPasses(None, None, np.ones(2), [np.ones(2)])
    >>> check_passes(p, np.ones(2), [np.full(2, 2.0)])
    0.5
    """
    if len(passes.input_grads) != len(input_grads):
        return float("inf")
    errors = [relative_error(passes.output, output)]
    errors += [relative_error(got, want) for got, want in zip(passes.input_grads, input_grads)]
    return max(errors)


# -- the machine's bounds -------------------------------------------------------------------------------------

def _runtimes(frameworks: Sequence[str] | None) -> dict:
    """Framework name -> its ``runtime.py``, for ``frameworks`` (None: every available one)."""
    import d5.frameworks

    names = d5.frameworks.available() if frameworks is None else frameworks
    return {name: d5.frameworks.runtime(name) for name in names}


def measure_sgemm_peak(sizes: Sequence[int], *, warmup: int, repeats: int,
                       frameworks: Sequence[str] | None = None) -> dict:
    """The best GFLOP/s of square float32 GEMMs (``sizes``) over every framework's (``frameworks``, None: every
    available one) ``runtime.matmul_runner``: the upper bound every GEMM/conv row is a fraction of. Each
    candidate's median and 95% CI are kept.

    >>> measure_sgemm_peak((64,), warmup=0, repeats=2, frameworks=("reference",))["library"]
    'numpy.matmul'
    """
    from .timing import measure

    runtimes = _runtimes(frameworks)
    rng = np.random.default_rng(SEED)
    candidates = []
    for size in sizes:
        a, b = (rng.standard_normal((size, size), dtype=np.float32) for _ in range(2))
        out = np.empty((size, size), np.float32)
        for framework, runtime in runtimes.items():
            summary = measure(runtime.matmul_runner(a, b, out), warmup=warmup, repeats=repeats)
            flops = 2 * size ** 3
            candidates.append({"library": runtime.KERNEL_NAMES["matmul"], "framework": framework, "size": size,
                               "seconds": summary, "gflops": gflops(flops, summary.median),
                               "gflops_ci": [gflops(flops, summary.ci_high), gflops(flops, summary.ci_low)]})
    best = max(candidates, key=lambda c: c["gflops"])
    return {"gflops": best["gflops"], "gflops_ci": best["gflops_ci"], "library": best["library"],
            "size": best["size"], "candidates": candidates}


def measure_memory_bandwidth(nbytes: int, *, warmup: int, repeats: int,
                             frameworks: Sequence[str] | None = None) -> dict:
    """Copy bandwidth (GB/s, read + write counted) of a large float32 array by every framework's
    (``frameworks``, None: every available one) ``runtime.copy_runner``; the best is the roofline's slope.

    >>> measure_memory_bandwidth(1 << 20, warmup=0, repeats=2, frameworks=("reference",))["gbytes_per_s"] > 0
    True
    """
    from .timing import measure

    source = np.ones(max(nbytes // 4, 1), np.float32)
    target = np.empty_like(source)
    candidates = []
    for framework, runtime in _runtimes(frameworks).items():
        summary = measure(runtime.copy_runner(source, target), warmup=warmup, repeats=repeats)
        moved = 2 * source.nbytes
        candidates.append({"library": runtime.KERNEL_NAMES["copy"], "framework": framework, "bytes": source.nbytes,
                           "seconds": summary, "gbytes_per_s": moved / summary.median / 1e9})
    best = max(candidates, key=lambda c: c["gbytes_per_s"])
    return {"gbytes_per_s": best["gbytes_per_s"], "library": best["library"], "candidates": candidates}


# -- the run ------------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class OpsSettings:
    """What one run measures. ``None`` picks the default: the mode's (full or ``quick``) repeats and warm-up,
    every core, every available framework (``d5.frameworks.available()``). ``peer``: the framework whose native
    element-wise kernels the other implementations are compared with (when it is among ``frameworks``).

    >>> OpsSettings(quick=True, frameworks=("reference",)).resolved().repeats
    3
    """

    quick: bool = False
    frameworks: tuple[str, ...] | None = None
    repeats: int | None = None
    warmup: int | None = None
    threads: int | None = None
    peer: str = PEER

    def resolved(self) -> "OpsSettings":
        for name in ("repeats", "threads"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise D5Error(f"d5 bench ops: {name} must be a positive integer, got {value!r}")
        import d5.frameworks

        available = d5.frameworks.available()
        frameworks = tuple(available) if self.frameworks is None else self.frameworks
        unknown = [f for f in frameworks if f not in d5.frameworks.FRAMEWORKS]
        if unknown or not frameworks:
            raise D5Error(f"d5 bench ops: unknown or no frameworks {unknown or list(frameworks)}; choose from "
                          f"{available} (the available ones; comma-separated, e.g. --frameworks "
                          f"{','.join(available)})")
        if self.peer not in d5.frameworks.FRAMEWORKS:
            raise D5Error(f"d5 bench ops: unknown peer framework {self.peer!r}; choose from {available}")
        for name in frameworks:
            d5.frameworks.get(name)  # FrameworkNotInstalledError naming the extra to install
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        return dataclasses.replace(self, frameworks=tuple(dict.fromkeys(frameworks)), threads=self.threads or cores,
                                   repeats=self.repeats or (3 if self.quick else 15),
                                   warmup=self.warmup if self.warmup is not None else (1 if self.quick else 2))


@dataclasses.dataclass
class OpsOutcome:
    """What :func:`run_ops_benchmark` wrote (``paths``: json, markdown, plot), its rows, its summary lines and
    how many rows failed their check.

    >>> OpsOutcome(paths={}, rows=[], summary_lines=[], failed=0).failed
    0
    """

    paths: dict[str, Path]
    rows: list[dict]
    summary_lines: list[str]
    failed: int


class OtherProcessesCPU:
    """While open, measures the CPU time the machine's *other* processes (and the hypervisor's steal) use, as
    a fraction of all cores' time (``fraction``). psutil's counters tick every 10 ms, so a block shorter than
    :data:`MIN_SECONDS` gets ``None`` (too short to tell).

    >>> with OtherProcessesCPU() as others:
    ...     _ = sum(range(10 ** 5))
    >>> others.fraction is None
    True
    """

    MIN_SECONDS = 0.25

    def __enter__(self) -> "OtherProcessesCPU":
        self._start = self._others_busy_seconds(), time.perf_counter()
        self.fraction: float | None = None
        return self

    def __exit__(self, *exc_info) -> None:
        import psutil

        busy, wall = self._others_busy_seconds() - self._start[0], time.perf_counter() - self._start[1]
        if wall >= self.MIN_SECONDS:
            self.fraction = min(1.0, max(0.0, busy / (wall * (psutil.cpu_count() or 1))))

    @staticmethod
    def _others_busy_seconds() -> float:
        import psutil

        system, own = psutil.cpu_times(), psutil.Process().cpu_times()
        busy = sum(getattr(system, field, 0.0) for field in ("user", "nice", "system", "irq", "softirq", "steal"))
        return busy - (own.user + own.system + own.children_user + own.children_system)


def _pin_threads(threads: int, runtimes: dict) -> Callable[[], None]:
    """Give every framework of ``runtimes`` (name -> ``runtime.py``) ``threads`` threads (the reference's
    budget covers every BLAS pool too); returns the undo, which restores them in reverse order."""
    previous = []
    for name, runtime in runtimes.items():
        try:
            previous.append((runtime, runtime.set_num_threads(threads)))
        except D5Error as err:  # a framework whose pools are fixed once it has run (TensorFlow): say so, go on
            warnings.warn(f"d5 bench ops: {name} keeps its own thread count ({err})", RuntimeWarning, stacklevel=2)

    def restore() -> None:
        for runtime, count in reversed(previous):
            try:
                runtime.set_num_threads(count)
            except D5Error as err:  # fixed since (TensorFlow, once it ran): it keeps the benchmark's count
                warnings.warn(f"d5 bench ops: {err}", RuntimeWarning, stacklevel=2)
    return restore


def _time_row(problem: Problem, implementation: Implementation | Skipped, expected, settings: OpsSettings,
              peak: float) -> list[dict]:
    """The two rows (forward, backward) of one implementation of one problem: checked, then timed."""
    from .timing import measure

    base = {"problem": problem.name, "kind": problem.kind, "size": problem.describe(),
            "framework": implementation.framework, "implementation": implementation.name}
    rows = [dict(base, **{"pass": p}) for p in PASSES]
    if isinstance(implementation, Skipped):
        return [dict(r, status="skipped", reason=implementation.reason) for r in rows]
    inputs, (output, output_grad, input_grads) = expected
    try:
        passes = implementation.bind(inputs, output_grad)
        error = check_passes(passes, output, input_grads)
    except UnsupportedOperatorError as err:  # a framework without this operator: nothing wrong was computed
        return [dict(r, status="skipped", reason=f"{type(err).__name__}: {err}") for r in rows]
    except Exception as err:  # one broken implementation must not lose the others' measurements
        return [dict(r, status="failed", reason=f"{type(err).__name__}: {err}") for r in rows]
    if not error <= CHECK_TOLERANCE:
        return [dict(r, status="failed", check_error=error,
                     reason=f"outputs differ from the reference by {error:.3g} (relative; tolerance "
                            f"{CHECK_TOLERANCE:g}); not timed") for r in rows]
    for row in rows:
        pass_name = row["pass"]
        summary = measure(getattr(passes, pass_name), warmup=settings.warmup, repeats=settings.repeats)
        flops, moved = problem.flops(pass_name), problem.bytes_moved(pass_name)
        row.update(status="ok", check_error=error, seconds=summary, flops=flops, bytes=moved,
                   gflops=gflops(flops, summary.median),
                   gflops_ci=[gflops(flops, summary.ci_high), gflops(flops, summary.ci_low)],
                   gbytes_per_s=moved / summary.median / 1e9, arithmetic_intensity=flops / moved)
        if problem.kind in ("gemm", "conv"):
            row["fraction_of_peak"] = row["gflops"] / peak
            row["meets_half_peak"] = bool(row["fraction_of_peak"] >= PEAK_FRACTION_TARGET)
    return rows


def run_ops_benchmark(output_dir: str | os.PathLike = "results", settings: OpsSettings | None = None, *,
                      problems: Sequence[Problem] | None = None, catalog: ImplementationCatalog | None = None,
                      progress: bool = True, report: Callable[[str], None] = print) -> OpsOutcome:
    """Measure the machine's bounds, check and time every problem's implementations, and write ``ops.json``,
    ``ops.md`` and ``ops.png`` (``ops-quick.*`` in quick mode, so a smoke run never replaces the real
    figures) into ``output_dir``. ``problems`` default to the mode's set; ``catalog`` (default: the
    frameworks' native kernels and the seeds' custom operators) says which implementations each problem has,
    so a user's own can be added. ``report`` receives the summary lines.

    >>> import tempfile
    >>> from d5.bench.ops_problems import GemmProblem
    >>> out = run_ops_benchmark(tempfile.mkdtemp(), OpsSettings(quick=True, frameworks=("reference",)),
    ...                         problems=[GemmProblem("g", 32, 16, 24)], progress=False, report=lambda s: None)
    >>> sorted(out.paths), out.failed, out.rows[0]["status"]
    (['json', 'markdown', 'plot'], 0, 'ok')
    """
    from d5.io_utils import check_writable
    from tqdm.auto import tqdm

    from .environment import thread_pools

    settings = (settings or OpsSettings()).resolved()
    problems = list(problems) if problems is not None else (quick_subset() if settings.quick else deepbench_subset())
    stem = "ops-quick" if settings.quick else "ops"
    json_path = check_writable(Path(output_dir) / f"{stem}.json", "d5 bench ops --output")
    runtimes = _runtimes(None)  # the bounds are the machine's: every available framework's GEMM and copy
    restore = _pin_threads(settings.threads, runtimes)
    try:
        with OtherProcessesCPU() as others:
            peak = measure_sgemm_peak((256,) if settings.quick else (2048, 4096), warmup=settings.warmup,
                                      repeats=min(settings.repeats, 10), frameworks=list(runtimes))
            bandwidth = measure_memory_bandwidth((8 << 20) if settings.quick else (256 << 20), warmup=settings.warmup,
                                                 repeats=settings.repeats, frameworks=list(runtimes))
        peak["other_processes_cpu"] = bandwidth["other_processes_cpu"] = others.fraction
        threads_used = thread_pools()
        catalog = catalog if catalog is not None else ImplementationCatalog(settings.frameworks)
        rng = np.random.default_rng(SEED)
        rows: list[dict] = []
        with tqdm(total=len(problems), desc="d5 bench ops", disable=not progress, leave=False) as bar:
            for problem in problems:
                bar.set_postfix_str(problem.name)
                inputs = problem.make_inputs(rng)
                expected = (inputs, expected_results(problem, inputs, rng))
                with OtherProcessesCPU() as others:
                    problem_rows = [row for implementation in catalog.for_problem(problem)
                                    for row in _time_row(problem, implementation, expected, settings, peak["gflops"])]
                rows.extend(dict(row, other_processes_cpu=others.fraction) for row in problem_rows)
                bar.update(1)
    finally:
        restore()
    figures = {"sgemm_peak": peak, "memory_bandwidth": bandwidth, "threads": settings.threads,
               "threaded_frameworks": list(runtimes), "thread_pools": threads_used, "rows": rows}
    lines = _summary_lines(figures, settings.peer)
    figures["summary"] = lines
    paths = _write_outputs(json_path, figures, problems, settings)
    for line in lines:
        report(line)
    return OpsOutcome(paths, rows, lines, sum(1 for r in rows if r["status"] == "failed"))


# -- summary, table, plot -------------------------------------------------------------------------------------

def reference_peak_fractions(rows: Sequence[dict], framework: str = ORACLE) -> list[dict]:
    """The issue's figure, per GEMM/conv row of ``framework`` (the reference's kernels): its fraction of the
    SGEMM peak and whether >= 0.5.

    >>> reference_peak_fractions([{"framework": "reference", "kind": "gemm", "status": "ok", "problem": "g",
    ...                            "pass": "forward", "fraction_of_peak": 0.8, "meets_half_peak": True}])
    [{'problem': 'g', 'pass': 'forward', 'fraction_of_peak': 0.8, 'meets_half_peak': True}]
    """
    return [{key: row[key] for key in ("problem", "pass", "fraction_of_peak", "meets_half_peak")}
            for row in rows if row["framework"] == framework and row["kind"] in ("gemm", "conv")
            and row["status"] == "ok"]


def peer_figure_name(peer: str = PEER) -> str:
    """The figures' key of :func:`ratios_to_native`: named after the peer's Python package (the framework's
    name where it needs none).

    >>> peer_figure_name("reference")
    'elementwise_vs_reference_native'
    """
    import d5.frameworks

    return f"elementwise_vs_{d5.frameworks.FRAMEWORKS.get(peer) or peer}_native"


def ratios_to_native(rows: Sequence[dict], peer: str = PEER) -> list[dict]:
    """Per element-wise problem and implementation: forward+backward median time over the ``peer`` framework's
    native one's.

    >>> rows = [{"problem": "p", "kind": "elementwise", "framework": fw, "implementation": name, "pass": p,
    ...          "status": "ok", "seconds": type("S", (), {"median": t})()}
    ...         for fw, name, t in [("fw", "native", 1.0), ("fw", "custom", 1.5)] for p in PASSES]
    >>> ratios_to_native(rows, peer="fw")
    [{'problem': 'p', 'framework': 'fw', 'implementation': 'custom', 'ratio': 1.5}]
    """
    totals: dict[tuple[str, str, str], float] = {}
    for row in rows:
        if row["kind"] == "elementwise" and row["status"] == "ok":
            key = (row["problem"], row["framework"], row["implementation"])
            totals[key] = totals.get(key, 0.0) + row["seconds"].median
    ratios = []
    for (problem, framework, name), total in totals.items():
        native = totals.get((problem, peer, "native"))
        if native and (framework, name) != (peer, "native"):
            ratios.append({"problem": problem, "framework": framework, "implementation": name,
                           "ratio": total / native})
    return ratios


def _summary_lines(figures: dict, peer: str = PEER) -> list[str]:
    """The lines printed at the end of a run (and kept in the JSON and the Markdown); also adds
    ``reference_fraction_of_peak`` and the ratios to the peer's native kernels (:func:`peer_figure_name`) to
    ``figures``."""
    peak, bandwidth = figures["sgemm_peak"], figures["memory_bandwidth"]
    lines = [f"SGEMM peak {peak['gflops']:.1f} GFLOP/s [{peak['gflops_ci'][0]:.1f}, {peak['gflops_ci'][1]:.1f}] "
             f"({peak['library']}, {peak['size']}^3 float32); memory bandwidth {bandwidth['gbytes_per_s']:.1f} GB/s "
             f"({bandwidth['library']}); {figures['threads']} threads for every framework "
             f"({', '.join(figures['threaded_frameworks'])}) and BLAS pool"]
    busy = {row["problem"]: row["other_processes_cpu"] for row in figures["rows"]
            if (row.get("other_processes_cpu") or 0.0) >= BUSY_FRACTION}
    if (peak.get("other_processes_cpu") or 0.0) >= BUSY_FRACTION:
        busy = {"SGEMM peak and bandwidth": peak["other_processes_cpu"], **busy}
    if busy:
        lines.append("WARNING: other processes used the cores while these were timed, so their multi-threaded "
                     "timings may be inflated (rerun on an idle machine): " +
                     ", ".join(f"{name} ({fraction:.0%} of the cores)" for name, fraction in busy.items()))
    fractions = figures["reference_fraction_of_peak"] = reference_peak_fractions(figures["rows"])
    for item in fractions:
        lines.append(f"reference {item['problem']} {item['pass']}: {item['fraction_of_peak']:.2f} of the SGEMM "
                     f"peak ({'>=' if item['meets_half_peak'] else 'BELOW'} {PEAK_FRACTION_TARGET})")
    if fractions:
        below = [f"{i['problem']} {i['pass']} ({i['fraction_of_peak']:.2f})" for i in fractions
                 if not i["meets_half_peak"]]
        lines.append(f"reference GEMM/conv kernels reach >= {PEAK_FRACTION_TARGET:.0%} of the SGEMM peak in "
                     f"{len(fractions) - len(below)}/{len(fractions)} rows" + (f"; below: {', '.join(below)}"
                                                                               if below else ""))
    ratios = figures[peer_figure_name(peer)] = ratios_to_native(figures["rows"], peer)
    for item in ratios:
        lines.append(f"{item['problem']} forward+backward, {item['implementation']} on {item['framework']}: "
                     f"{item['ratio']:.2f}x {peer}'s native")
    for row in figures["rows"]:
        if row["status"] != "ok" and row["pass"] == "forward":
            lines.append(f"{row['status']}: {row['problem']} {row['framework']} {row['implementation']}: "
                         f"{row['reason']}")
    return lines


def _table_rows(rows: Sequence[dict]) -> list[dict]:
    """The Markdown table's rows: times in ms with their CI, GFLOP/s, GB/s, fraction of peak, check error."""
    table = []
    for row in rows:
        cells = {"problem": row["problem"], "pass": row["pass"], "framework": row["framework"],
                 "implementation": row["implementation"]}
        if row["status"] == "ok":
            s = row["seconds"]
            cells.update({"median ms [95% CI]": f"{s.median * 1e3:.3g} [{s.ci_low * 1e3:.3g}, {s.ci_high * 1e3:.3g}]",
                          "GFLOP/s": row["gflops"], "GB/s": row["gbytes_per_s"],
                          "of peak": row.get("fraction_of_peak"), "check": row["check_error"],
                          "others' CPU": row.get("other_processes_cpu")})
            if "meets_half_peak" in row:
                cells[">= 50%"] = "yes" if row["meets_half_peak"] else "no"
        cells["status"] = row["status"] if row["status"] == "ok" else f"{row['status']}: {row['reason']}"
        table.append(cells)
    return table


def _markdown_report(figures: dict, problems: Sequence[Problem], settings: OpsSettings) -> str:
    """The Markdown page: the summary lines, the table and the problems with their DeepBench sources."""
    from .report import markdown_table

    columns = ["problem", "pass", "framework", "implementation", "median ms [95% CI]", "GFLOP/s", "GB/s",
               "of peak", ">= 50%", "check", "others' CPU", "status"]
    problem_rows = [{"problem": p.name, "kind": p.kind, "size": p.describe(), "source": p.source} for p in problems]
    return "\n".join([
        f"# Operator benchmarks{' (quick)' if settings.quick else ''}", "",
        *[f"- {line}" for line in figures["summary"]], "",
        f"float32; {settings.repeats} timed samples per pass after {settings.warmup} warm-up calls; median with a "
        "95% non-parametric CI. GFLOP/s: GEMM 2MNK, convolution 2NKCRS·HoWo, backward (all input gradients) "
        "twice the forward; GB/s: the least bytes any implementation moves (inputs read and outputs written once); "
        "`check`: largest difference from the reference's outputs and gradients, relative to their largest "
        "magnitude; `others' CPU`: the fraction of the cores other processes used while the problem was timed. "
        f"![roofline]({'ops-quick' if settings.quick else 'ops'}.png)", "",
        markdown_table(_table_rows(figures["rows"]), columns), "", "## Problems", "",
        markdown_table(problem_rows), ""])


def plot_roofline(figures: dict, path: str | os.PathLike) -> Path:
    """Roofline-style PNG (written atomically): log-log arithmetic intensity (FLOP/byte) against GFLOP/s,
    one marker per (problem, implementation, pass), under min(SGEMM peak, bandwidth x intensity).

    >>> import tempfile, pathlib
    >>> figures = {"sgemm_peak": {"gflops": 200.0}, "memory_bandwidth": {"gbytes_per_s": 30.0}, "threads": 2,
    ...            "rows": []}
    >>> plot_roofline(figures, pathlib.Path(tempfile.mkdtemp()) / "roofline.png").read_bytes()[:4]
    b'\x89PNG'
    """
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    from d5.io_utils import atomic_write

    peak, bandwidth = figures["sgemm_peak"]["gflops"], figures["memory_bandwidth"]["gbytes_per_s"]
    rows = [r for r in figures["rows"] if r["status"] == "ok"]
    figure = Figure(figsize=(10.5, 6.0), dpi=100)
    axes = figure.add_subplot()
    intensities = [r["arithmetic_intensity"] for r in rows] or [1.0]
    x = np.geomspace(min(min(intensities), peak / bandwidth) / 3, max(intensities) * 3, 200)
    axes.plot(x, np.minimum(peak, bandwidth * x), color="black", linewidth=1.5)
    axes.axhline(peak, color="black", linestyle=":", linewidth=0.8)
    axes.text(x[0], peak * 1.08, f"measured SGEMM peak {peak:.0f} GFLOP/s", fontsize=8)
    axes.text(x[0] * 1.3, bandwidth * x[0] * 1.6, f"{bandwidth:.1f} GB/s", fontsize=8, rotation=30)
    labels = list(dict.fromkeys(f"{r['framework']}: {r['implementation']}" for r in rows))
    colors = {label: f"C{i % 10}" for i, label in enumerate(labels)}
    markers = {"gemm": "s", "conv": "o", "elementwise": "^"}
    for row in rows:
        color = colors[f"{row['framework']}: {row['implementation']}"]
        axes.scatter([row["arithmetic_intensity"]], [row["gflops"]], marker=markers[row["kind"]], s=40,
                     edgecolors=color, facecolors=color if row["pass"] == "forward" else "none", zorder=3)
    handles = [Line2D([], [], color=colors[label], marker="o", linestyle="", label=label) for label in labels]
    handles += [Line2D([], [], color="gray", marker=m, linestyle="", label=k) for k, m in markers.items()]
    handles += [Line2D([], [], color="gray", marker="o", linestyle="", label="forward (filled)"),
                Line2D([], [], color="gray", marker="o", markerfacecolor="none", linestyle="",
                       label="backward (hollow)")]
    axes.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the points
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlabel("arithmetic intensity (FLOP/byte)")
    axes.set_ylabel("GFLOP/s")
    axes.set_title(f"d5 operator benchmarks, float32, {figures['threads']} threads", fontsize=10)
    axes.grid(True, which="both", alpha=0.3)
    figure.tight_layout()
    path = Path(path)
    with atomic_write(path, "wb") as handle:
        figure.savefig(handle, format="png")
    return path


def _write_outputs(json_path: Path, figures: dict, problems: Sequence[Problem], settings: OpsSettings) -> dict:
    """The JSON result (with the environment), the Markdown page and the roofline plot, each written atomically."""
    from d5.io_utils import atomic_write

    from .results import write_result

    extra = {"settings": dataclasses.asdict(settings), "check_tolerance": CHECK_TOLERANCE,
             "problems": [dict(dataclasses.asdict(p), kind=p.kind) for p in problems],
             "flop_formulas": {"gemm": "forward 2*M*N*K; backward 4*M*N*K (dA and dB)",
                               "conv": "forward 2*N*K*C*R*S*Ho*Wo; backward twice that (dX and dW)",
                               "elementwise": "x**3: 2 forward, 3 backward per element; Relu: 1 and 1"}}
    paths = {"json": write_result(json_path, "ops", figures, extra=extra)}
    paths["markdown"] = json_path.with_suffix(".md")
    with atomic_write(paths["markdown"], "w", encoding="utf-8") as handle:
        handle.write(_markdown_report(figures, problems, settings))
    paths["plot"] = plot_roofline(figures, json_path.with_suffix(".png"))
    return paths


# -- the command line (shared by `d5 bench ops` and benchmarks/ops.py) ---------------------------------------

def add_arguments(parser: argparse.ArgumentParser, default_output: str = "results") -> None:
    """The options of ``d5 bench ops`` and ``benchmarks/ops.py``.

    >>> p = argparse.ArgumentParser(); add_arguments(p)
    >>> p.parse_args(["--quick", "--frameworks", "reference"]).frameworks
    'reference'
    """
    parser.add_argument("--quick", action="store_true", help="tiny problems (seconds), results in ops-quick.*")
    parser.add_argument("--output", default=default_output, metavar="DIR",
                        help=f"directory for ops.json, ops.md, ops.png (default {default_output})")
    parser.add_argument("--frameworks", default=None, metavar="LIST",
                        help="comma-separated, from d5's available frameworks (default: every one; see `d5 info`)")
    parser.add_argument("--repeats", type=int, default=None, metavar="N", help="timed samples per pass "
                        "(default 15; 3 with --quick)")
    parser.add_argument("--threads", type=int, default=None, metavar="N",
                        help="threads for every framework and BLAS (default: all cores)")


def run_from_arguments(args: argparse.Namespace) -> int:
    """Run the benchmark as parsed by :func:`add_arguments`; 0, or 1 when an implementation failed its check.

    >>> parser = argparse.ArgumentParser(); add_arguments(parser)
    >>> run_from_arguments(parser.parse_args(["--frameworks", "caffe"]))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    d5.errors.D5Error: d5 bench ops: unknown or no frameworks ['caffe']; choose from ['reference', ...
    """
    frameworks = None if args.frameworks is None else tuple(
        name.strip() for name in args.frameworks.split(",") if name.strip())
    outcome = run_ops_benchmark(args.output, OpsSettings(quick=args.quick, frameworks=frameworks,
                                                         repeats=args.repeats, threads=args.threads))
    for path in outcome.paths.values():
        print(f"wrote {path}")
    return 1 if outcome.failed else 0


__all__ = ["BUSY_FRACTION", "CHECK_TOLERANCE", "PEAK_FRACTION_TARGET", "PEER", "OpsOutcome", "OpsSettings",
           "OtherProcessesCPU", "add_arguments", "check_passes", "gflops", "measure_memory_bandwidth",
           "measure_sgemm_peak", "peer_figure_name", "plot_roofline", "ratios_to_native", "reference_peak_fractions",
           "relative_error", "run_from_arguments", "run_ops_benchmark"]
