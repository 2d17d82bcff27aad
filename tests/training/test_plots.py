"""Plots: real PNGs (decoded back), drawn from real runs, written atomically (a file-size limit in a subprocess
leaves no partial file), without pyplot's global state."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import d5
from d5.errors import D5Error
from d5.training.breakdown import PhaseBreakdown
from d5.training.dataset import NumpyDataset
from d5.training.optimizers import GradientDescent
from d5.training.plots import (PlotWriter, plot_phase_breakdown, plot_throughput, plot_timing_boxes,
                               plot_training_curves, throughput_over_time)
from d5.training.sampler import OrderedSampler, ShuffleSampler
from d5.training.trainer import Trainer

reference = pytest.importorskip("d5.frameworks.reference")


def decode(path):
    """The image as an array: proof that the file is a whole PNG."""
    from matplotlib.image import imread

    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    image = imread(path)
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100
    return image


def run(events, epochs=3):
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 3, 96)
    data = NumpyDataset((np.eye(4)[labels] * 3 + rng.standard_normal((96, 4))).astype(np.float32), labels)
    executor = reference.from_model(d5.models.mlp((4,), hidden=(8,), num_classes=3, seed=0))
    trainer = Trainer(ShuffleSampler(data, 16, seed=0), OrderedSampler(data, 48), executor,
                      GradientDescent(executor, lr=0.1), events=events, progress=False)
    return trainer, trainer.run(epochs)


def test_plot_writer_draws_curves_throughput_and_phases_from_a_run(tmp_path):
    writer = PlotWriter(tmp_path)
    trainer, stats = run([writer, PhaseBreakdown()])
    assert sorted(path.name for path in writer.paths) == ["curves.png", "phases.png", "throughput.png"]
    for path in writer.paths:
        decode(path)
    assert len(writer.seconds) == stats.steps == 18 and writer.samples[-1] == stats.samples == 288
    assert sorted(path.name for path in tmp_path.iterdir()) == ["curves.png", "phases.png", "throughput.png"]


def test_every_epoch_redraws_after_each_epoch(tmp_path):
    drawn = []

    class Counting(PlotWriter):
        def write(self, trainer):
            drawn.append(trainer.stats.epochs)
            return super().write(trainer)

    run([Counting(tmp_path, every_epoch=True)], epochs=2)
    assert drawn == [1, 2, 2]  # after each epoch and at the end


def test_curves_from_stats_or_a_json_log_look_the_same(tmp_path):
    import json

    from d5.training.events import JSONLogger

    _, stats = run([JSONLogger(tmp_path / "log.json")])
    from_stats = decode(plot_training_curves(stats, tmp_path / "a.png"))
    from_log = decode(plot_training_curves(json.loads((tmp_path / "log.json").read_text()), tmp_path / "b.png"))
    np.testing.assert_array_equal(from_stats, from_log)


def test_throughput_over_time_against_a_direct_computation():
    seconds = np.cumsum(np.r_[np.full(10, 0.1), np.full(10, 0.2)])  # the second half is twice as slow
    samples = np.arange(1, 21) * 32
    middles, rates = throughput_over_time(seconds, samples, windows=4)
    edges = [0, 5, 10, 14, 19]  # np.linspace(0, 19, 5).round()
    expected = np.diff(samples[edges]) / np.diff(seconds[edges])
    np.testing.assert_allclose(rates, expected)
    np.testing.assert_allclose(middles, (seconds[edges][:-1] + seconds[edges][1:]) / 2)
    assert rates[0] == pytest.approx(320.0) and rates[-1] == pytest.approx(160.0)
    with pytest.raises(D5Error):
        throughput_over_time([1.0], [1.0])


def test_the_other_plots_write_real_pngs(tmp_path):
    decode(plot_throughput([1, 2, 3], [100, 110, 105], tmp_path / "t.png"))
    decode(plot_timing_boxes({"reference": [1.0, 1.1, 0.9, 1.05], "pytorch": [0.5, 0.55, 0.45]}, tmp_path / "b.png"))
    decode(plot_phase_breakdown({"epoch 1": {"data": 0.1, "forward+backward": 0.5, "update": 0.2}}, tmp_path / "p.png"))
    for bad in (lambda: plot_phase_breakdown({}, tmp_path / "x.png"),
                lambda: plot_training_curves({"train_loss": []}, tmp_path / "x.png"),
                lambda: plot_training_curves(42, tmp_path / "x.png"),
                lambda: plot_throughput([], [], tmp_path / "x.png")):
        with pytest.raises(D5Error):
            bad()
    assert not (tmp_path / "x.png").exists()


def test_a_file_size_limit_leaves_neither_a_partial_png_nor_a_temporary_file(tmp_path):
    previous = plot_throughput([1, 2], [1, 2], tmp_path / "curves.png").read_bytes()
    script = textwrap.dedent(f"""
        import resource, sys
        from d5.training.trainer import TrainingStats
        from d5.training.plots import plot_training_curves
        stats = TrainingStats(train_loss=[1.0, 0.5], test_loss=[1.1, 0.6], train_accuracy=[50, 70],
                              test_accuracy=[45, 65], epoch_time=[1, 1], samples_per_second=[1, 1])
        resource.setrlimit(resource.RLIMIT_FSIZE, (4000, 4000))
        plot_training_curves(stats, {str(tmp_path / "curves.png")!r})
        print("pyplot imported:", "matplotlib.pyplot" in sys.modules)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "could not write the plot" in done.stderr and "File too large" in done.stderr
    assert sorted(path.name for path in tmp_path.iterdir()) == ["curves.png"]
    assert (tmp_path / "curves.png").read_bytes() == previous  # the previous plot is untouched


def test_plotting_never_imports_pyplot(tmp_path):
    script = textwrap.dedent(f"""
        import sys
        from d5.training.plots import plot_phase_breakdown
        plot_phase_breakdown({{"a": {{"data": 1.0}}}}, {str(tmp_path / "p.png")!r})
        print("matplotlib.pyplot" in sys.modules)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "False"
