"""L2: resource metrics — CPU utilization and memory of a training run, sampled in the background.

A :class:`ResourceMonitor` samples this process's CPU times (user, system, I/O wait; children that ended
included) and resident memory (RSS) with psutil every ``interval`` seconds in a daemon thread, stopped cleanly
(an Event, then join) at the end of the run -- also when the run fails. Three metrics use it:

* :class:`CPUUtilization` -- user and system CPU in percent of the cores this process may run on (100% = all
  of them busy, as sysstat reports it), averaged over the run, with the median and CI over the intervals.
* :class:`PeakMemory` -- the RSS high-water mark of the run in MiB (the kernel's mark, VmHWM, when the process
  reached its lifetime peak during the run; otherwise the highest sample), and the average RSS.
* :class:`ResourceTable` -- seed 002's resource table: one row per run with training and testing time,
  accuracy, CPU % (user, system, iowait, total, averaged) and memory (average and maximum, MiB).

A run resumed from a checkpoint (another process) continues the sums: CPU seconds and wall time add up, the
peak is the larger of the two parts.

>>> with ResourceMonitor(interval=0.05) as monitor:
...     _ = sum(range(100_000))
>>> usage = monitor.usage()
>>> usage["wall"] > 0 and usage["peak_rss"] > 0
True
"""
from __future__ import annotations

import os
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Mapping

import numpy as np

from d5.errors import D5Error
from d5.training.events import check_state, float_array, new_state
from d5.training.metrics import TrainingMetric, summary_dict

if TYPE_CHECKING:
    from d5.training.trainer import Trainer, TrainingStats

MIB = 2.0 ** 20


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _max_rss_bytes() -> int:
    """The process's lifetime RSS high-water mark: VmHWM of /proc/self/status on Linux, else getrusage.

    VmHWM first: getrusage's ru_maxrss carries over the parent's resident size at fork/exec, so a process
    started from a large one would never see its own mark rise.
    """
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024  # kB
    except (OSError, ValueError):
        pass
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)  # bytes on macOS, KiB elsewhere


class ResourceMonitor:
    """Samples CPU times and RSS of this process every ``interval`` seconds in a background thread.

    ``start()``/``stop()`` (or ``with``); ``usage()`` summarizes the samples so far (also while running):
    seconds of ``wall`` time and of ``user``/``system``/``iowait`` CPU, the time integral of RSS
    (``rss_seconds``, byte-seconds), ``peak_rss`` (bytes) and whether it is ``peak_exact``, the per-interval
    total CPU percents and the RSS samples.

    >>> monitor = ResourceMonitor(interval=0.05).start()
    >>> monitor.stop().running
    False
    """

    def __init__(self, interval: float = 0.2) -> None:
        if isinstance(interval, bool) or not isinstance(interval, (int, float)) or not 0.001 <= interval <= 60:
            raise D5Error(f"ResourceMonitor(interval={interval!r}): the interval is in seconds, between 0.001 and 60")
        self.interval = float(interval)
        self.cores = _usable_cores()
        self._samples: list[tuple[float, float, float, float, int]] = []
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._process = None
        self._max_rss_at_start = 0
        self._max_rss_at_stop: int | None = None
        self._lock = threading.Lock()  # usage() samples from the caller's thread too

    @property
    def running(self) -> bool:
        return self._thread is not None

    def _sample(self) -> None:
        process = self._process
        with self._lock, process.oneshot():  # oneshot: one read of /proc/self/stat for all the numbers
            times = process.cpu_times()
            rss = process.memory_info().rss
            self._samples.append((time.perf_counter(), times.user + times.children_user,
                                  times.system + times.children_system, getattr(times, "iowait", 0.0), rss))

    def _loop(self) -> None:
        while not self._stopping.wait(self.interval):
            self._sample()

    def start(self) -> ResourceMonitor:
        """Take the first sample and start the sampling thread."""
        import psutil

        if self._thread is not None:
            raise D5Error("ResourceMonitor.start(): it is running already; stop() it first")
        self._process = psutil.Process()
        self._samples = []
        self._stopping.clear()
        self._max_rss_at_start, self._max_rss_at_stop = _max_rss_bytes(), None
        self._sample()
        self._thread = threading.Thread(target=self._loop, name="d5-resource-monitor", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> ResourceMonitor:
        """Stop the thread (waiting for it) and take the last sample; a monitor not running is left as it is."""
        if self._thread is None:
            return self
        self._stopping.set()
        self._thread.join()
        self._thread = None
        self._sample()
        self._max_rss_at_stop = _max_rss_bytes()
        return self

    def __enter__(self) -> ResourceMonitor:
        return self.start()

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()

    def usage(self) -> dict[str, Any]:
        """The samples so far, summarized (see the class docstring)."""
        samples = list(self._samples)
        if self._thread is not None and self._process is not None:
            self._sample()  # while running: include "now"
            samples = list(self._samples)
        if not samples:
            raise D5Error("ResourceMonitor.usage(): nothing sampled; start() the monitor first")
        data = np.array([sample[:4] for sample in samples], dtype=np.float64)
        rss = np.array([sample[4] for sample in samples], dtype=np.float64)
        elapsed = data[:, 0] - data[0, 0]
        steps = np.diff(elapsed)
        busy = np.diff(data[:, 1] + data[:, 2])
        kept = steps > 0
        max_rss_now = self._max_rss_at_stop if self._max_rss_at_stop is not None else _max_rss_bytes()
        # If the lifetime high-water mark rose while we watched, the run set it: that is the exact peak. If
        # not, the process peaked higher before; the best we know is the highest sample.
        exact = max_rss_now > self._max_rss_at_start
        return {"wall": float(elapsed[-1]), "user": float(data[-1, 1] - data[0, 1]),
                "system": float(data[-1, 2] - data[0, 2]), "iowait": float(data[-1, 3] - data[0, 3]),
                "rss_seconds": float(np.sum((rss[1:] + rss[:-1]) / 2.0 * steps)) if len(rss) > 1 else 0.0,
                "peak_rss": float(max_rss_now if exact else rss.max()), "peak_exact": bool(exact),
                "interval_percents": busy[kept] / steps[kept] / self.cores * 100.0, "rss_samples": rss,
                "cores": self.cores}


_TOTAL_KEYS = ("wall", "user", "system", "iowait", "rss_seconds")


def _empty_totals() -> dict[str, Any]:
    return {**{key: 0.0 for key in _TOTAL_KEYS}, "peak_rss": 0.0, "peak_exact": True,
            "interval_percents": np.zeros(0), "rss_samples": np.zeros(0), "cores": _usable_cores()}


def _combine(first: Mapping[str, Any], second: Mapping[str, Any]) -> dict[str, Any]:
    """Usage of two consecutive parts of a run (before and after a resume)."""
    combined = {key: first[key] + second[key] for key in _TOTAL_KEYS}
    peaks = [part for part in (first, second) if part["peak_rss"] > 0]
    top = max(peaks, key=lambda part: part["peak_rss"]) if peaks else first
    combined.update(peak_rss=top["peak_rss"], peak_exact=top["peak_exact"], cores=second["cores"],
                    interval_percents=np.concatenate([first["interval_percents"], second["interval_percents"]]),
                    rss_samples=np.concatenate([first["rss_samples"], second["rss_samples"]]))
    return combined


class _MonitoredMetric(TrainingMetric):
    """A metric fed by a ResourceMonitor running from before_training to after_training (or on_error)."""

    def __init__(self, interval: float = 0.2, confidence: float = 0.95) -> None:
        self.monitor = ResourceMonitor(interval)
        self.confidence = confidence
        self.value = None
        self.totals = _empty_totals()      # the parts of the run before a resume
        self.usage: dict[str, Any] | None = None  # the whole run, after it ended

    def before_training(self, trainer: Trainer) -> None:
        if not trainer.resumed:
            self.totals, self.value, self.usage = _empty_totals(), None, None
        self.monitor.stop()
        self.monitor.start()

    def _current(self) -> dict[str, Any]:
        return _combine(self.totals, self.monitor.usage()) if self.monitor._samples else dict(self.totals)

    def after_training(self, trainer: Trainer, stats: TrainingStats) -> None:
        self.monitor.stop()
        self.usage = self._current()
        self._finish(trainer, stats, self.usage)

    def on_error(self, trainer: Trainer, error: BaseException) -> None:
        self.monitor.stop()

    def _finish(self, trainer: Trainer, stats: TrainingStats, usage: Mapping[str, Any]) -> None:
        raise NotImplementedError

    def cpu_percent(self, usage: Mapping[str, Any] | None = None) -> dict[str, float | None]:
        """Average user, system, iowait and total (user + system) CPU in percent of the usable cores."""
        usage = self.usage if usage is None else usage
        if not usage or usage["wall"] <= 0:
            return {"user": None, "system": None, "iowait": None, "total": None}
        scale = 100.0 / (usage["wall"] * usage["cores"])
        user, system, iowait = (usage[key] * scale for key in ("user", "system", "iowait"))
        return {"user": user, "system": system, "iowait": iowait, "total": user + system}

    @staticmethod
    def memory_mib(usage: Mapping[str, Any]) -> dict[str, float | None]:
        """Average (time-weighted) and maximum RSS in MiB."""
        if usage["wall"] > 0:
            average = usage["rss_seconds"] / usage["wall"] / MIB
        else:
            average = float(np.mean(usage["rss_samples"])) / MIB if len(usage["rss_samples"]) else None
        return {"average": average, "max": usage["peak_rss"] / MIB if usage["peak_rss"] else None}

    def state_dict(self) -> dict[str, Any]:
        usage = self._current() if self.usage is None else self.usage
        return new_state(type(self).__name__, value=self.value, totals={
            **{key: float(usage[key]) for key in (*_TOTAL_KEYS, "peak_rss")}, "peak_exact": bool(usage["peak_exact"]),
            "cores": int(usage["cores"]), "interval_percents": float_array(usage["interval_percents"]),
            "rss_samples": float_array(usage["rss_samples"])}, **self._extra_state())

    def _extra_state(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        kind = type(self).__name__
        check_state(state, kind, kind, ["value", "totals"])
        totals = state["totals"]
        self.totals = {**{key: float(totals[key]) for key in (*_TOTAL_KEYS, "peak_rss")},
                       "peak_exact": bool(totals["peak_exact"]), "cores": int(totals["cores"]),
                       "interval_percents": np.asarray(totals["interval_percents"], dtype=np.float64),
                       "rss_samples": np.asarray(totals["rss_samples"], dtype=np.float64)}
        self.value, self.usage = state["value"], None


class CPUUtilization(_MonitoredMetric):
    """CPU time of this process during the run, in percent of the cores it may use (``cores``; 100% = all
    busy): the value is user + system averaged over the run; ``percent`` has ``user``, ``system``, ``iowait`` and
    ``total``; ``summary`` is the median and CI of the per-interval totals (one per ``interval`` seconds).

    >>> CPUUtilization(interval=0.1).unit
    '%'
    """

    name, unit, higher_is_better = "CPUUtilization", "%", True

    def __init__(self, interval: float = 0.2, confidence: float = 0.95) -> None:
        super().__init__(interval, confidence)
        self.percent: dict[str, float | None] = {}

    def _finish(self, trainer: Trainer, stats: TrainingStats, usage: Mapping[str, Any]) -> None:
        self.percent = self.cpu_percent(usage)
        self.value = self.percent["total"]

    def describe(self, threshold: float | None = None) -> str:
        line = super().describe(threshold)
        if self.percent.get("total") is not None:
            line += (f"; user {self.percent['user']:.1f}%, system {self.percent['system']:.1f}% of "
                     f"{self.usage['cores']} cores")
            intervals = self.usage["interval_percents"]
            if len(intervals):
                from d5.bench.stats import summarize

                line += f"; per {self.monitor.interval:g} s interval {summarize(intervals).format('%')}"
        return line

    def details(self) -> dict[str, Any]:
        if self.usage is None:
            return {}
        return {**{f"{key}_percent": value for key, value in self.percent.items()}, "cores": self.usage["cores"],
                "interval_seconds": self.monitor.interval,
                "per_interval": summary_dict(self.usage["interval_percents"], self.confidence)}


class PeakMemory(_MonitoredMetric):
    """The resident memory (RSS) high-water mark of the run in MiB; lower is better. ``exact`` says whether
    it is the kernel's own mark (VmHWM; the process reached its lifetime peak during the run) or the highest
    sample (it had peaked higher before; a spike shorter than ``interval`` may then be missed). ``average`` is the
    time-weighted mean RSS; ``summary`` the median and CI of the samples.

    >>> PeakMemory().unit
    'MiB'
    """

    name, unit, higher_is_better = "PeakMemory", "MiB", False

    def __init__(self, interval: float = 0.2, confidence: float = 0.95) -> None:
        super().__init__(interval, confidence)
        self.average: float | None = None
        self.exact: bool | None = None

    def _finish(self, trainer: Trainer, stats: TrainingStats, usage: Mapping[str, Any]) -> None:
        memory = self.memory_mib(usage)
        self.value, self.average, self.exact = memory["max"], memory["average"], usage["peak_exact"]

    def describe(self, threshold: float | None = None) -> str:
        line = super().describe(threshold)
        if self.value is not None:
            how = "the kernel's high-water mark" if self.exact else f"highest {self.monitor.interval:g} s sample"
            line += f" ({how}); average {self.average:.1f} MiB"
            if self.usage is not None and len(self.usage["rss_samples"]):
                from d5.bench.stats import summarize

                line += f"; samples {summarize(self.usage['rss_samples'] / MIB).format('MiB')}"
        return line

    def details(self) -> dict[str, Any]:
        if self.usage is None:
            return {}
        return {"average_mib": self.average, "exact": self.exact, "interval_seconds": self.monitor.interval,
                "samples_mib": summary_dict(self.usage["rss_samples"] / MIB, self.confidence)}


#: The columns of seed 002's resource table (Tables X-XII), in order.
RESOURCE_COLUMNS = ("run", "training time (s)", "testing time (s)", "accuracy (%)", "cpu user (%)",
                    "cpu system (%)", "cpu iowait (%)", "cpu total (%)", "memory avg (MiB)", "memory max (MiB)")


class ResourceTable(_MonitoredMetric):
    """Seed 002's resource table: one row per run this metric observed (a run = one ``Trainer.run``, resumed
    parts together) with training and testing time, the final accuracy (test, else training), average CPU %
    (user, system, iowait, total = all three, as sysstat reports it, in percent of the usable cores) and
    memory (average and maximum RSS, MiB). ``label`` names the next row (a string, or a callable ``trainer ->
    str``; default ``'run N'``). The value is the last run's maximum memory (MiB, lower is better);
    ``markdown()`` renders the table.

    >>> table = ResourceTable(label="reference, batch 64")
    >>> table.rows, RESOURCE_COLUMNS[-1]
    ([], 'memory max (MiB)')
    """

    name, unit, higher_is_better = "ResourceTable", "MiB", False

    def __init__(self, label: str | Callable[[Any], str] | None = None, interval: float = 0.2) -> None:
        super().__init__(interval)
        self.label = label
        self.rows: list[dict[str, Any]] = []
        self._last_row_is_this_run = False  # restored from a state saved after the run ended (then resumed)

    def before_training(self, trainer: Trainer) -> None:
        if not trainer.resumed:
            self._last_row_is_this_run = False
        super().before_training(trainer)

    def _finish(self, trainer: Trainer, stats: TrainingStats, usage: Mapping[str, Any]) -> None:
        label = self.label(trainer) if callable(self.label) else self.label
        testing = stats.timing.get("validation", 0.0)
        accuracies = [a for a in (stats.test_accuracy or []) if a is not None] or \
                     [a for a in (stats.train_accuracy or []) if a is not None]
        cpu, memory = self.cpu_percent(usage), self.memory_mib(usage)
        total = None if cpu["total"] is None else cpu["total"] + cpu["iowait"]
        row = dict(zip(RESOURCE_COLUMNS, (label or f"run {len(self.rows) + 1}", stats.total_time - testing, testing,
                                          accuracies[-1] if accuracies else None, cpu["user"], cpu["system"],
                                          cpu["iowait"], total, memory["average"], memory["max"])))
        if trainer.resumed and self._last_row_is_this_run:
            self.rows[-1] = row  # the run's row before the resume, now complete
        else:
            self.rows.append(row)
        self._last_row_is_this_run = False
        self.value = memory["max"]

    def markdown(self) -> str:
        """The rows as a Markdown table."""
        from d5.bench.report import markdown_table

        if not self.rows:
            raise D5Error("ResourceTable.markdown(): no rows yet; pass the table as a Trainer event and run")
        return markdown_table(self.rows, RESOURCE_COLUMNS)

    def details(self) -> dict[str, Any]:
        return {"rows": [dict(row) for row in self.rows]}

    def _extra_state(self) -> dict[str, Any]:
        return {"rows": [dict(row) for row in self.rows], "run_ended": self.usage is not None}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self.rows = [dict(row) for row in state.get("rows", [])]
        self._last_row_is_this_run = bool(state.get("run_ended")) and bool(self.rows)


__all__ = ["ResourceMonitor", "CPUUtilization", "PeakMemory", "ResourceTable", "RESOURCE_COLUMNS", "MIB"]
