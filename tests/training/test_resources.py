"""Resource metrics against the kernel's own accounting (getrusage, /proc/self/status and statm), a clean
background thread, seed 002's resource table, and sums carried across a resume."""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

from d5.errors import CheckpointError, D5Error
from d5.training.dataset import NumpyDataset
from d5.training.events import TrainerEvent
from d5.training.optimizers import GradientDescent
from d5.training.resources import (MIB, RESOURCE_COLUMNS, CPUUtilization, PeakMemory, ResourceMonitor,
                                   ResourceTable)
from d5.training.sampler import OrderedSampler, ShuffleSampler
from d5.training.trainer import Trainer
from softmax_regression import SoftmaxRegression, SoftmaxRegressionNetwork, three_blobs  # tests/support


Network, Executor = SoftmaxRegressionNetwork, SoftmaxRegression


def dataset(n, seed):
    return three_blobs(n, seed, noise=1.0)


def trainer_for(events, work="none", seconds=0.0, validation=True):
    executor = Executor(work, seconds)
    validation = OrderedSampler(dataset(30, 2), 15) if validation else None
    return Trainer(ShuffleSampler(dataset(40, 1), 10, seed=0), validation, executor, GradientDescent(executor, lr=0.5),
                   events=events, progress=False)


def cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def monitor_threads():
    return [thread for thread in threading.enumerate() if thread.name == "d5-resource-monitor"]


def test_cpu_utilization_agrees_with_getrusage_busy_and_idle():
    cores = len(os.sched_getaffinity(0))
    results = {}
    for work in ("spin", "sleep"):
        cpu = CPUUtilization(interval=0.02)
        wall, used = time.perf_counter(), cpu_seconds()
        trainer_for([cpu], work, seconds=0.05).run(2)  # 8 steps: 0.4 s of spinning or sleeping
        wall, used = time.perf_counter() - wall, cpu_seconds() - used
        oracle = 100.0 * used / wall / cores  # the kernel's accounting over a slightly wider window
        assert cpu.result() == pytest.approx(oracle, abs=10.0 / cores), (work, cpu.describe(), oracle)
        assert cpu.percent["total"] == pytest.approx(cpu.percent["user"] + cpu.percent["system"])
        assert len(cpu.usage["interval_percents"]) >= 5 and "interval" in cpu.describe()  # ~20 on an idle machine
        assert cpu.as_dict()["per_interval"]["n"] == len(cpu.usage["interval_percents"])
        results[work] = cpu.result()
    # one spinning thread keeps at most one core busy (less when the machine is shared); a sleeping one ~none
    assert results["sleep"] < 25.0 / cores < results["spin"] <= 120.0 / cores
    assert not monitor_threads()


def test_the_sampling_thread_stops_when_the_run_ends_or_fails():
    class Fails(TrainerEvent):
        def after_step(self, trainer, step, outputs):
            raise RuntimeError("boom")

    metrics = [CPUUtilization(interval=0.01), PeakMemory(interval=0.01), ResourceTable(interval=0.01)]
    with pytest.raises(RuntimeError, match="boom"):
        trainer_for([*metrics, Fails()]).run(1)
    assert not monitor_threads() and not any(metric.monitor.running for metric in metrics)
    trainer_for(metrics).run(1)
    assert not monitor_threads()
    with pytest.raises(D5Error, match="interval"):
        ResourceMonitor(interval=0)


def test_peak_memory_is_the_kernels_high_water_mark_when_the_run_sets_it(tmp_path):
    """In a fresh process the run's 96 MiB allocation sets the lifetime peak: PeakMemory reports exactly the
    kernel's mark (VmHWM in /proc/self/status), above the RSS seen right after the allocation."""
    script = textwrap.dedent("""
        import json, sys, numpy as np, psutil
        sys.path[:0] = [{here!r}, {support!r}]
        from test_resources import Executor, trainer_for
        from d5.training.resources import PeakMemory, MIB

        class Allocating(Executor):
            def inference_and_backprop(self, inputs, y="loss"):
                if not hasattr(self, "seen"):
                    block = np.ones(96 * 2 ** 20 // 8)        # touched: resident
                    self.seen = psutil.Process().memory_info().rss
                    del block
                return super().inference_and_backprop(inputs, y)

        peak = PeakMemory(interval=0.01)
        trainer = trainer_for([peak])
        trainer.executor = trainer.optimizer.executor = Allocating()
        trainer.optimizer.network = trainer.executor.network
        trainer.run(1)
        hwm = next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith("VmHWM"))
        print(json.dumps({{"peak": peak.value, "exact": peak.exact, "average": peak.average,
                          "seen": trainer.executor.seen / MIB, "hwm": hwm / MIB}}))
    """).format(here=os.path.dirname(__file__),
                support=os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "support"))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["exact"] is True, result
    assert result["peak"] == pytest.approx(result["hwm"], abs=0.01)
    # the kernel syncs its per-thread RSS counters lazily (every 64 page faults), so its mark may trail a
    # reading taken at the same moment by a few pages
    assert result["peak"] >= result["seen"] - 1.0 and result["peak"] > 96
    assert result["average"] < result["peak"]


def test_peak_memory_falls_back_to_the_highest_sample_when_the_process_peaked_before():
    block = np.ones(64 * 2 ** 20 // 8)  # raise this process's lifetime peak above what the run will use
    del block
    seen = []

    class Watching(TrainerEvent):
        def after_step(self, trainer, step, outputs):
            with open("/proc/self/statm") as statm:  # an independent read of the resident set
                seen.append(int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / MIB)

    peak = PeakMemory(interval=0.005)
    trainer_for([peak, Watching()], "sleep", 0.01).run(2)
    assert peak.exact is False and "highest" in peak.describe()
    assert peak.result() == pytest.approx(max(seen), rel=0.05)
    assert peak.result() == pytest.approx(peak.usage["rss_samples"].max() / MIB)
    assert min(seen) * 0.95 <= peak.average <= peak.result()


def test_resource_table_has_seed_002s_columns_per_run():
    table = ResourceTable(label=lambda trainer: f"lr {trainer.optimizer.lr}", interval=0.01)
    first = trainer_for([table], "spin", 0.01)
    stats = first.run(2)
    trainer_for([table], "sleep", 0.01).run(1)
    assert len(table.rows) == 2 and list(table.rows[0]) == list(RESOURCE_COLUMNS)
    row = table.rows[0]
    assert row["run"] == "lr 0.5" and row["accuracy (%)"] == stats.test_accuracy[-1]
    assert row["testing time (s)"] == pytest.approx(stats.timing["validation"])
    assert row["training time (s)"] + row["testing time (s)"] == pytest.approx(stats.total_time)
    assert row["cpu total (%)"] == pytest.approx(row["cpu user (%)"] + row["cpu system (%)"] + row["cpu iowait (%)"])
    assert 0 < row["memory avg (MiB)"] <= row["memory max (MiB)"]
    assert table.result() == table.rows[1]["memory max (MiB)"]
    assert table.rows[0]["cpu total (%)"] > table.rows[1]["cpu total (%)"]  # spinning vs sleeping
    markdown = table.markdown()
    assert markdown.splitlines()[0].startswith("| run ") and "memory max (MiB)" in markdown
    assert table.as_dict()["rows"] == table.rows


def test_usage_adds_up_across_a_resume():
    """A run stopped, its metric states saved, and resumed with fresh metrics: wall and CPU seconds are the sums
    of both parts, the table keeps one row for the run."""
    from d5.training.events import StopAfter

    cpu, table = CPUUtilization(interval=0.01), ResourceTable(label="run", interval=0.01)
    first = trainer_for([cpu, table], "spin", 0.02)
    first.run(2, events=[StopAfter(steps=3)])
    state, part = first.state_dict(), dict(cpu.usage)
    resumed_cpu, resumed_table = CPUUtilization(interval=0.01), ResourceTable(label="run", interval=0.01)
    second = trainer_for([resumed_cpu, resumed_table], "spin", 0.02)
    second.executor.network.tensors = {k: v.copy() for k, v in first.executor.network.tensors.items()}
    second.load_state_dict(state)
    started, used = time.perf_counter(), cpu_seconds()
    second.run(2)
    rest, used = time.perf_counter() - started, cpu_seconds() - used
    usage = resumed_cpu.usage
    assert part["wall"] < usage["wall"] <= part["wall"] + rest
    # the second part's CPU seconds (the kernel's count, in 10 ms ticks) are added to the first part's
    assert usage["user"] + usage["system"] == pytest.approx(part["user"] + part["system"] + used, abs=0.03)
    assert len(usage["interval_percents"]) > len(part["interval_percents"])
    assert len(resumed_table.rows) == 1 and resumed_table.rows[0]["run"] == "run"
    with pytest.raises(CheckpointError, match="not a PeakMemory"):
        PeakMemory().load_state_dict(cpu.state_dict())
