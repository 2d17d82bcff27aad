"""L2: the per-phase timing breakdown of training steps — data loading, forward+backward, optimizer update and
communication — as a table and a stacked bar.

How each phase is measured, per step, without changing the optimizer:

* **data**: the trainer's clock around fetching the batch from the sampler (``trainer.last_data_time``).
* **forward+backward**: :class:`PhaseBreakdown` sets ``times_forward_backward``, so the trainer wraps
  ``executor.inference_and_backprop`` for the run (restoring it afterwards) and sums the seconds spent inside
  it; the breakdown takes the step's share of that sum.
* **communication**: only when the optimizer reports it -- a distributed optimizer exposing a cumulative
  ``communication_time`` (seconds on this rank), on itself or on its ``communication`` object.
* **update**: the rest of ``optimizer.step`` (``trainer.last_step_time``) -- parameter updates and the
  optimizer's own bookkeeping: step minus forward+backward minus communication.

>>> PhaseBreakdown().times_forward_backward
True
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from d5.errors import D5Error
from d5.training.events import check_state, float_array, new_state
from d5.training.metrics import TrainingMetric, summary_dict

if TYPE_CHECKING:
    from d5.training.trainer import EpochStats, Trainer, TrainingStats

PHASES = ("data", "forward+backward", "update", "communication")


def communication_seconds(optimizer: Any) -> float | None:
    """The cumulative seconds ``optimizer`` reports having spent communicating (None if it reports none).

    >>> class Reporting:
    ...     communication_time = 1.5
    >>> communication_seconds(Reporting()), communication_seconds(object())
    (1.5, None)
    """
    for holder in (optimizer, getattr(optimizer, "communication", None)):
        seconds = getattr(holder, "communication_time", None)
        if seconds is not None:
            return float(seconds)
    return None


class PhaseBreakdown(TrainingMetric):
    """Seconds per training step spent in each phase (see the module docstring). The value is the median
    seconds of a whole step (all phases); ``table()`` gives each phase's total, share and per-step median with
    a non-parametric CI; ``plot(path)`` draws the per-epoch stacked bar; ``epochs`` holds per-epoch totals.
    ``communication`` appears only when the optimizer reports it.

    >>> PhaseBreakdown().phases
    ('data', 'forward+backward', 'update')
    """

    name, unit, higher_is_better = "PhaseBreakdown", "s", False
    times_forward_backward = True

    def __init__(self, confidence: float = 0.95) -> None:
        self.confidence = confidence
        self.value = None
        self._reset()

    def _reset(self) -> None:
        self.samples: dict[str, list[float]] = {phase: [] for phase in PHASES}
        self.epochs: list[dict[str, Any]] = []
        self._epoch_totals = dict.fromkeys(PHASES, 0.0)
        self._communicates = False

    @property
    def phases(self) -> tuple[str, ...]:
        """The phases measured (communication only for an optimizer that reports it)."""
        return PHASES if self._communicates else PHASES[:3]

    def before_training(self, trainer: Trainer) -> None:
        if not trainer.resumed:
            self._reset()
            self.value = None
        self._last_forward_backward = trainer.forward_backward_time
        self._last_communication = communication_seconds(trainer.optimizer)
        self._communicates = self._communicates or self._last_communication is not None

    def before_epoch(self, trainer: Trainer, epoch: int) -> None:
        if trainer.position == 0:  # a resumed epoch keeps its totals
            self._epoch_totals = dict.fromkeys(PHASES, 0.0)

    def after_step(self, trainer: Trainer, step: int, outputs: dict) -> None:
        forward_backward = trainer.forward_backward_time - self._last_forward_backward
        self._last_forward_backward = trainer.forward_backward_time
        communication = 0.0
        if self._last_communication is not None:
            now = communication_seconds(trainer.optimizer)
            communication, self._last_communication = now - self._last_communication, now
        update = max(0.0, trainer.last_step_time - forward_backward - communication)
        totals, samples = self._epoch_totals, self.samples
        for phase, seconds in zip(PHASES, (trainer.last_data_time, forward_backward, update, communication)):
            samples[phase].append(seconds)
            totals[phase] += seconds

    def after_epoch(self, trainer: Trainer, epoch: int, stats: EpochStats) -> None:
        record = {"epoch": epoch, "steps": stats.steps, **self._epoch_totals}
        if self.epochs and self.epochs[-1]["epoch"] == epoch:
            self.epochs[-1] = record  # a resumed epoch's complete totals replace its partial ones
        else:
            self.epochs.append(record)

    def after_training(self, trainer: Trainer, stats: TrainingStats) -> None:
        if self.samples["data"]:
            per_step = np.sum([self.samples[phase] for phase in self.phases], axis=0)
            self.value = float(np.median(per_step))

    def table(self) -> list[dict[str, Any]]:
        """One row per phase: total seconds, share of the step time (%), per-step median and CI (seconds)."""
        from d5.bench.stats import summarize

        if not self.samples["data"]:
            raise D5Error("PhaseBreakdown: no steps were timed; pass it as a Trainer event and run")
        totals = {phase: float(np.sum(self.samples[phase])) for phase in self.phases}
        whole = sum(totals.values()) or 1.0
        rows = []
        for phase in self.phases:
            summary = summarize(self.samples[phase], self.confidence)
            rows.append({"phase": phase, "total (s)": totals[phase], "share (%)": 100.0 * totals[phase] / whole,
                         "per step (ms)": summary.median * 1e3, "CI low (ms)": summary.ci_low * 1e3,
                         "CI high (ms)": summary.ci_high * 1e3})
        return rows

    def markdown(self) -> str:
        """:meth:`table` as Markdown."""
        from d5.bench.report import markdown_table

        return markdown_table(self.table())

    def plot(self, path: str | os.PathLike, title: str = "Time per step by phase") -> Path:
        """A stacked bar per epoch of the mean seconds per step in each phase, written atomically as PNG."""
        from d5.training.plots import plot_phase_breakdown

        if not self.epochs:
            raise D5Error("PhaseBreakdown.plot: no epoch was recorded; run the Trainer with it first")
        bars = {f"epoch {record['epoch'] + 1}": {phase: record[phase] / max(record["steps"], 1)
                                                 for phase in self.phases} for record in self.epochs}
        return plot_phase_breakdown(bars, path, title=title, unit="s per step")

    def describe(self, threshold: float | None = None) -> str:
        line = super().describe(threshold)
        if self.samples["data"]:
            from d5.bench.stats import summarize

            shares = ", ".join(f"{row['phase']} {row['share (%)']:.1f}%" for row in self.table())
            per_step = np.sum([self.samples[phase] for phase in self.phases], axis=0)
            line += f"; per step {summarize(per_step, self.confidence).format('s')}; {shares}"
        return line

    def details(self) -> dict[str, Any]:
        if not self.samples["data"]:
            return {}
        totals = {phase: float(np.sum(self.samples[phase])) for phase in self.phases}
        whole = sum(totals.values()) or 1.0
        return {"phases": {phase: {"total_seconds": totals[phase], "share_percent": 100.0 * totals[phase] / whole,
                                   "per_step": summary_dict(self.samples[phase], self.confidence)}
                           for phase in self.phases},
                "epochs": [dict(record) for record in self.epochs]}

    def state_dict(self) -> dict[str, Any]:
        return new_state("PhaseBreakdown", value=self.value, communicates=self._communicates,
                         samples={phase: float_array(values) for phase, values in self.samples.items()},
                         epochs=[dict(record) for record in self.epochs], epoch_totals=dict(self._epoch_totals))

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        check_state(state, "PhaseBreakdown", "PhaseBreakdown", ["value", "communicates", "samples", "epochs",
                                                                "epoch_totals"])
        self.value, self._communicates = state["value"], bool(state["communicates"])
        self.samples = {phase: [float(v) for v in np.asarray(state["samples"][phase], dtype=np.float64)]
                        for phase in PHASES}
        self.epochs = [dict(record) for record in state["epochs"]]
        self._epoch_totals = {phase: float(state["epoch_totals"][phase]) for phase in PHASES}


__all__ = ["PhaseBreakdown", "PHASES", "communication_seconds"]
