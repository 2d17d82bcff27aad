"""L2: plots of training runs, written as PNG atomically: loss and accuracy per epoch, throughput over time,
timing box plots and the per-phase stacked bar; :class:`PlotWriter` draws them from a run.

matplotlib is imported on use and driven through :class:`matplotlib.figure.Figure` (no pyplot, so no global
backend or figure registry). Every file is rendered into a temporary file beside the target, fsynced and
renamed over it: a full disk, a file-size limit or a killed process leaves the previous file (or none), never
a truncated PNG, and no temporary file.

>>> import tempfile, pathlib
>>> from d5.training.trainer import TrainingStats
>>> stats = TrainingStats(train_loss=[1.0, 0.6, 0.4], test_loss=[1.1, 0.7, 0.5], train_accuracy=[60, 75, 85],
...                       test_accuracy=[58, 72, 80], epoch_time=[1, 1, 1], samples_per_second=[9, 9, 9])
>>> path = plot_training_curves(stats, pathlib.Path(tempfile.mkdtemp()) / "curves.png")
>>> path.read_bytes()[:4]
b'\\x89PNG'
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from d5.errors import D5Error
from d5.io_utils import atomic_write
from d5.training.events import RunClock, TrainerEvent, check_state, float_array, new_state, remove_leftovers

if TYPE_CHECKING:
    from d5.training.trainer import EpochStats, Trainer, TrainingStats


def save_figure(figure: Any, path: str | os.PathLike) -> Path:
    """Write a matplotlib ``Figure`` to ``path`` as PNG atomically; a failed write raises
    :class:`~d5.errors.D5Error` and leaves any previous file and no temporary one."""
    path = Path(path)
    try:
        with atomic_write(path, "wb") as handle:
            figure.savefig(handle, format="png")
    except OSError as err:
        raise D5Error(f"could not write the plot {str(path)!r}: {err.strerror or err}; any previous version is "
                      "intact. Free disk space (or raise the file-size limit) or write it elsewhere") from err
    return path


def _figure(width: float = 6.4, height: float = 4.0) -> Any:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=100)


def _series(values: Sequence[Any]) -> np.ndarray:
    return np.array([np.nan if value is None else float(value) for value in values], dtype=np.float64)


def _as_stats_dict(stats: Any) -> Mapping[str, Any]:
    """Per-epoch lists from TrainingStats, its as_dict(), or a JSONLogger document ({"epochs": [...]})."""
    if hasattr(stats, "as_dict"):
        stats = stats.as_dict()
    if not isinstance(stats, Mapping):
        raise D5Error(f"plot_training_curves needs TrainingStats (or its as_dict(), or a JSONLogger file's contents), "
                      f"got {type(stats).__name__}")
    if isinstance(stats.get("epochs"), list):  # a JSONLogger document: one record per epoch
        records = stats["epochs"]
        return {key: [record.get(key) for record in records]
                for key in ("train_loss", "test_loss", "train_accuracy", "test_accuracy")}
    return stats


def plot_training_curves(stats: Any, path: str | os.PathLike, title: str = "Training curves") -> Path:
    """Loss (left) and accuracy (right) per epoch, training and test, as a PNG at ``path``.

    ``stats`` is a :class:`~d5.training.trainer.TrainingStats`, its ``as_dict()``, or what a
    :class:`~d5.training.events.JSONLogger` wrote. Values not measured (None) are left out.
    """
    data = _as_stats_dict(stats)
    epochs = len(data.get("train_loss") or [])
    if epochs == 0:
        raise D5Error("plot_training_curves: no epoch was recorded; train first (or pass the run's stats)")
    figure = _figure(10.0, 4.0)
    loss_axes, accuracy_axes = figure.subplots(1, 2)
    x = np.arange(1, epochs + 1)
    for axes, what, unit in ((loss_axes, "loss", ""), (accuracy_axes, "accuracy", " (%)")):
        for split, style in (("train", "-o"), ("test", "--s")):
            values = _series(data.get(f"{split}_{what}") or [None] * epochs)
            if np.isfinite(values).any():
                axes.plot(x, values, style, label=f"{split}", markersize=4)
        axes.set_xlabel("epoch")
        axes.set_ylabel(f"{what}{unit}")
        axes.grid(alpha=0.3)
        if axes.get_legend_handles_labels()[0]:
            axes.legend()
    figure.suptitle(title)
    figure.tight_layout()
    return save_figure(figure, path)


def throughput_over_time(seconds: Sequence[float], samples: Sequence[float],
                         windows: int = 50) -> tuple[np.ndarray, np.ndarray]:
    """``(window midpoints in seconds, samples/s in each window)`` from cumulative counts: ``samples[i]``
    samples done at ``seconds[i]``, split into about ``windows`` windows of equally many steps.

    >>> t, rate = throughput_over_time([1, 2, 3, 4], [10, 20, 30, 40], windows=3)
    >>> rate.tolist()
    [10.0, 10.0, 10.0]
    """
    seconds, samples = np.asarray(seconds, dtype=np.float64), np.asarray(samples, dtype=np.float64)
    if seconds.shape != samples.shape or seconds.ndim != 1 or seconds.size < 2:
        raise D5Error("throughput_over_time needs two equally long 1-D series of at least 2 points "
                      f"(got shapes {seconds.shape} and {samples.shape})")
    edges = np.unique(np.linspace(0, seconds.size - 1, min(windows, seconds.size - 1) + 1).round().astype(int))
    spans = np.diff(seconds[edges])
    kept = spans > 0
    rates = np.diff(samples[edges])[kept] / spans[kept]
    middles = ((seconds[edges][:-1] + seconds[edges][1:]) / 2.0)[kept]
    return middles, rates


def plot_throughput(seconds: Sequence[float], samples_per_second: Sequence[float], path: str | os.PathLike,
                    title: str = "Throughput over time", unit: str = "samples/s") -> Path:
    """Throughput (``unit``) against elapsed training seconds, with its median as a dashed line."""
    seconds, rates = np.asarray(seconds, dtype=np.float64), np.asarray(samples_per_second, dtype=np.float64)
    if seconds.size == 0 or seconds.shape != rates.shape:
        raise D5Error("plot_throughput needs equally long, non-empty series of times and throughputs")
    figure = _figure()
    axes = figure.add_subplot()
    axes.plot(seconds, rates, "-o", markersize=3, label=unit)
    axes.axhline(float(np.median(rates)), color="tab:orange", linestyle="--", label=f"median {np.median(rates):.4g}")
    axes.set_xlabel("training time (s)")
    axes.set_ylabel(unit)
    axes.set_ylim(bottom=0)
    axes.grid(alpha=0.3)
    axes.legend()
    axes.set_title(title)
    figure.tight_layout()
    return save_figure(figure, path)


def plot_timing_boxes(named_samples: Mapping[str, Sequence[float]], path: str | os.PathLike,
                      title: str = "Step time", unit: str = "s") -> Path:
    """Box plots of several sets of timings with each median and its CI (:func:`d5.bench.report.plot_samples`)."""
    from d5.bench.report import plot_samples

    try:
        return plot_samples(named_samples, path, title, unit)
    except OSError as err:
        raise D5Error(f"could not write the plot {os.fspath(path)!r}: {err.strerror or err}; any previous version "
                      "is intact") from err


def plot_phase_breakdown(bars: Mapping[str, Mapping[str, float]], path: str | os.PathLike,
                         title: str = "Time by phase", unit: str = "s") -> Path:
    """A stacked bar per entry of ``bars`` (e.g. per epoch or per framework), stacked by phase.

    >>> import tempfile, pathlib
    >>> out = pathlib.Path(tempfile.mkdtemp()) / "phases.png"
    >>> plot_phase_breakdown({"torch": {"data": 1.0, "forward+backward": 3.0}, "reference": {"data": 1.0,
    ...                       "forward+backward": 9.0}}, out).name
    'phases.png'
    """
    if not isinstance(bars, Mapping) or not bars or not all(isinstance(v, Mapping) for v in bars.values()):
        raise D5Error("plot_phase_breakdown needs a non-empty dict: bar label -> {phase: seconds}")
    phases = list(dict.fromkeys(phase for parts in bars.values() for phase in parts))
    labels = list(bars)
    figure = _figure(max(4.0, 0.9 * len(labels) + 2.5), 4.0)
    axes = figure.add_subplot()
    bottom = np.zeros(len(labels))
    for phase in phases:
        heights = np.array([float(bars[label].get(phase, 0.0)) for label in labels])
        axes.bar(labels, heights, bottom=bottom, label=phase)
        bottom += heights
    axes.set_ylabel(unit)
    axes.set_title(title)
    axes.grid(axis="y", alpha=0.3)
    axes.legend()
    if len(labels) > 6:
        axes.tick_params(axis="x", labelrotation=45)
    figure.tight_layout()
    return save_figure(figure, path)


class PlotWriter(TrainerEvent):
    """Draws a run's plots into ``directory``: ``curves.png`` (loss and accuracy per epoch), ``throughput.png``
    (samples/s over training time) and, when a :class:`~d5.training.breakdown.PhaseBreakdown` runs too,
    ``phases.png``. By default at the end of training; ``every_epoch=True`` redraws after each epoch (rendering
    takes a few hundred milliseconds, so not on by default). ``paths`` lists what was written.

    >>> import tempfile
    >>> writer = PlotWriter(tempfile.mkdtemp())
    """

    def __init__(self, directory: str | os.PathLike, every_epoch: bool = False, windows: int = 50) -> None:
        self.directory = Path(directory)
        self.every_epoch = every_epoch
        self.windows = windows
        self.paths: list[Path] = []
        self.clock = RunClock()
        self.seconds: list[float] = []
        self.samples: list[int] = []
        if not every_epoch:
            self.skip_hooks = frozenset({"after_epoch"})

    def before_training(self, trainer: Trainer) -> None:
        for name in ("curves.png", "throughput.png", "phases.png"):
            remove_leftovers(self.directory / name)  # what a killed run left half-written
        if not trainer.resumed:
            self.seconds, self.samples = [], []
        self.clock.start(trainer.resumed)

    def after_step(self, trainer: Trainer, step: int, outputs: dict) -> None:
        self.seconds.append(self.clock.elapsed())
        self.samples.append(trainer.samples_seen)

    def after_epoch(self, trainer: Trainer, epoch: int, stats: EpochStats) -> None:
        self.write(trainer)

    def after_training(self, trainer: Trainer, stats: TrainingStats) -> None:
        self.clock.stop()
        if stats.epochs:
            self.write(trainer)

    def write(self, trainer: Trainer) -> list[Path]:
        """Draw the plots now; returns the paths written."""
        from d5.training.breakdown import PhaseBreakdown

        written = [plot_training_curves(trainer.stats, self.directory / "curves.png")]
        if len(self.seconds) >= 2:
            middles, rates = throughput_over_time([0.0] + self.seconds, [0] + self.samples, self.windows)
            if rates.size:
                written.append(plot_throughput(middles, rates, self.directory / "throughput.png"))
        for event in trainer.run_events:
            if isinstance(event, PhaseBreakdown) and event.epochs:
                written.append(event.plot(self.directory / "phases.png"))
                break
        self.paths = written
        return written

    def state_dict(self) -> dict[str, Any]:
        """The throughput series so far."""
        return new_state("PlotWriter", seconds=float_array(self.seconds),
                         samples=np.asarray(self.samples, dtype=np.int64), **self.clock.state_dict())

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        check_state(state, "PlotWriter", "PlotWriter", ["seconds", "samples", "elapsed"])
        self.seconds = [float(value) for value in np.asarray(state["seconds"], dtype=np.float64)]
        self.samples = [int(value) for value in np.asarray(state["samples"], dtype=np.int64)]
        self.clock.load_state_dict(state)


__all__ = ["PlotWriter", "plot_training_curves", "plot_throughput", "plot_timing_boxes", "plot_phase_breakdown",
           "throughput_over_time", "save_figure"]
