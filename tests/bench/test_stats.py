"""Tests of d5.bench.stats (median CI, comparisons) and d5.bench.timing (measure, Timer).

Oracles: exact binomial sums with math.comb (independent of scipy), brute force over rank intervals,
Le Boudec's published table, numpy's median, and simulation with known true medians.
"""
from __future__ import annotations

import json
import math
import subprocess
import sys
from fractions import Fraction

import numpy as np
import pytest

from d5.bench.stats import Ratio, Summary, compare, median_ci_ranks, summarize
from d5.bench.timing import Timer, measure
from d5.errors import D5Error


def exact_coverage(n: int, j: int, k: int) -> Fraction:
    """P(x_(j) <= median <= x_(k)) = P(j <= B <= k-1), B ~ Binomial(n, 1/2), as an exact fraction."""
    return Fraction(sum(math.comb(n, i) for i in range(j, k)), 2 ** n)


def brute_force_ranks(n: int, confidence: float):
    """Narrowest symmetric rank interval (j, n+1-j) whose exact coverage is >= confidence, or None."""
    best = None
    for j in range(1, (n + 1) // 2 + 1):
        if exact_coverage(n, j, n + 1 - j) >= Fraction(confidence).limit_denominator(10 ** 9):
            best = j  # larger j = narrower interval
    return None if best is None else (best, n + 1 - best)


@pytest.mark.parametrize("confidence", [0.9, 0.95, 0.99])
@pytest.mark.parametrize("n", [1, 2, 5, 6, 7, 8, 10, 13, 20, 30, 31, 50, 71, 100])
def test_ci_ranks_match_brute_force_and_exact_binomial_coverage(n, confidence):
    ranks = median_ci_ranks(n, confidence)
    expected = brute_force_ranks(n, confidence)
    if expected is None:
        assert ranks is None
        return
    j, k, coverage = ranks
    assert (j, k) == expected
    assert coverage == pytest.approx(float(exact_coverage(n, j, k)), abs=1e-12)
    assert coverage >= confidence
    # equal tails: each side misses with probability <= (1 - confidence) / 2
    assert float(exact_coverage(n, 0, j)) <= (1 - confidence) / 2 + 1e-12


@pytest.mark.parametrize("n, ranks", [(6, (1, 6)), (10, (2, 9)), (20, (6, 15)), (30, (10, 21)),
                                      (50, (18, 33)), (70, (27, 44))])
def test_ci_ranks_match_le_boudec_table_at_95_percent(n, ranks):
    assert median_ci_ranks(n, 0.95)[:2] == ranks


def test_summary_ci_bounds_are_the_order_statistics():
    rng = np.random.default_rng(1)
    samples = rng.lognormal(size=40)
    summary = summarize(samples)
    j, k, _ = median_ci_ranks(40, 0.95)
    ordered = np.sort(samples)
    assert summary.ci_low == ordered[j - 1] and summary.ci_high == ordered[k - 1]
    assert summary.median == np.median(samples)
    assert summary.mean == pytest.approx(samples.mean())
    assert summary.std == pytest.approx(samples.std(ddof=1))
    assert (summary.min, summary.max) == (samples.min(), samples.max())
    assert summary.samples == tuple(samples)  # original order kept
    assert summary.ci_exact and summary.n == 40 and summary.confidence == 0.95


def test_too_few_samples_give_the_full_range_flagged_inexact():
    summary = summarize([3.0, 1.0, 2.0, 5.0, 4.0])
    assert (summary.ci_low, summary.ci_high) == (1.0, 5.0)
    assert not summary.ci_exact
    assert summary.ci_coverage == pytest.approx(1 - 2 * 0.5 ** 5)
    assert "too few" in str(summary)
    single = summarize([2.5])
    assert (single.median, single.ci_low, single.ci_high, single.std) == (2.5, 2.5, 2.5, 0.0)


def test_empirical_coverage_of_median_ci_on_lognormal():
    # lognormal(mu, sigma) has median exp(mu); 2000 experiments of n=30 at 95%.
    rng = np.random.default_rng(20240101)
    true_median = math.exp(0.5)
    trials = 2000
    covered = sum(
        summary.ci_low <= true_median <= summary.ci_high
        for summary in (summarize(rng.lognormal(0.5, 0.8, size=30)) for _ in range(trials))
    )
    nominal = median_ci_ranks(30, 0.95)[2]  # 0.957, the exact coverage of ranks (10, 21)
    tolerance = 4 * math.sqrt(nominal * (1 - nominal) / trials)
    assert abs(covered / trials - nominal) < tolerance


def test_summary_str_format_and_as_dict():
    samples = [0.0121, 0.0119, 0.0125, 0.0123, 0.0128, 0.0120, 0.0122, 0.0124, 0.0126, 0.0127, 0.0130]
    summary = summarize(samples)  # n=11: CI ranks (2, 10)
    assert str(summary) == "0.0124 [0.0120, 0.0128] (95% CI, n=11)"
    assert summary.format() == "12.4 ms [12.0, 12.8]"
    assert summary.format("us", scale=1e6) == "12400 us [12000, 12800]"
    assert summarize([2e-7, 2e-7]).format() == "200 ns [200, 200]"
    data = summary.as_dict()
    assert json.loads(json.dumps(data)) == data
    assert data["samples"] == list(summary.samples) and data["median"] == summary.median
    assert Summary(**{**data, "samples": tuple(data["samples"])}) == summary


@pytest.mark.parametrize("bad, message", [
    ([], "no samples"),
    ([1.0, float("nan")], "sample 1 is nan"),
    ([1.0, float("inf")], "sample 1 is inf"),
    ([[1.0, 2.0]], "1-D"),
    (["fast"], "sequence of numbers"),
    ("123", "sequence of numbers"),
])
def test_summarize_rejects_bad_samples(bad, message):
    with pytest.raises(D5Error, match=message):
        summarize(bad)


@pytest.mark.parametrize("confidence", [0, 1, 1.5, -0.1, "95%"])
def test_summarize_rejects_bad_confidence(confidence):
    with pytest.raises(D5Error, match="confidence"):
        summarize([1.0, 2.0], confidence=confidence)


def test_compare_detects_a_twofold_difference():
    rng = np.random.default_rng(7)
    fast = rng.lognormal(np.log(0.010), 0.1, size=30)
    slow = 2.0 * rng.lognormal(np.log(0.010), 0.1, size=30)
    ratio = compare(slow, fast)
    assert isinstance(ratio, Ratio)
    assert ratio.ratio == pytest.approx(np.median(slow) / np.median(fast))
    assert ratio.ratio == pytest.approx(2.0, rel=0.1)
    assert ratio.ci_low < 2.0 < ratio.ci_high
    assert ratio.ci_high - ratio.ci_low < 0.5
    assert ratio.p_value < 1e-6 and ratio.significant
    inverse = compare(fast, slow)
    assert inverse.ratio == pytest.approx(1 / ratio.ratio)
    assert inverse.ci_low < 0.5 < inverse.ci_high
    assert compare(slow, fast) == ratio  # fixed bootstrap seed: reproducible
    data = ratio.as_dict()
    assert json.loads(json.dumps(data)) == data and data["significant"] is True
    assert "x [" in str(ratio) and "n=30/30" in str(ratio)


def test_compare_same_distribution_is_not_significant():
    rng = np.random.default_rng(11)
    a, b = rng.lognormal(0, 0.1, size=(2, 40))
    ratio = compare(a, b)
    assert ratio.ci_low < 1.0 < ratio.ci_high
    assert not ratio.significant


def test_compare_constant_samples_gives_a_degenerate_interval():
    ratio = compare([2.0] * 5, [1.0] * 5)
    assert (ratio.ratio, ratio.ci_low, ratio.ci_high) == (2.0, 2.0, 2.0)


@pytest.mark.parametrize("a, b, message", [
    ([], [1.0, 2.0], "samples_a: no samples"),
    ([1.0, 2.0], [1.0, -2.0], "samples_b: sample 1 is -2.0.*positive"),
    ([1.0, 0.0], [1.0, 2.0], "positive"),
    ([1.0], [1.0, 2.0], "at least 2"),
    ([1.0, float("nan")], [1.0, 2.0], "nan"),
])
def test_compare_rejects_bad_input(a, b, message):
    with pytest.raises(D5Error, match=message):
        compare(a, b)


def test_measure_calls_warmup_then_repeats_and_syncs_before_each_stop():
    events = []
    summary = measure(lambda: events.append("call"), warmup=2, repeats=5, sync=lambda: events.append("sync"))
    assert events == ["call"] * 2 + ["sync"] + ["call", "sync"] * 5
    assert isinstance(summary, Summary) and summary.n == 5
    assert all(sample >= 0 for sample in summary.samples)


def test_measure_records_the_time_fn_takes(monkeypatch):
    # A fake clock makes the expected samples exact, without asserting on real time.
    import d5.bench.timing as timing

    now = [0.0]
    durations = iter([10.0, 3.0, 1.0, 2.0])  # the first call is the warm-up
    monkeypatch.setattr(timing, "_clock", lambda: now[0])

    def fn():
        now[0] += next(durations)

    summary = measure(fn, warmup=1, repeats=3)
    assert summary.samples == (3.0, 1.0, 2.0) and summary.median == 2.0


def test_measure_with_progress_bar():
    summary = measure(lambda: None, warmup=1, repeats=3, progress=True, desc="noop")
    assert summary.n == 3


@pytest.mark.parametrize("kwargs, message", [
    (dict(repeats=0), "repeats"), (dict(warmup=-1), "warmup"), (dict(repeats=2.5), "repeats"),
    (dict(sync="cuda"), "sync"),
])
def test_measure_rejects_bad_arguments(kwargs, message):
    with pytest.raises(D5Error, match=message):
        measure(lambda: None, **kwargs)
    with pytest.raises(D5Error, match="fn"):
        measure(None)


def test_timer_accumulates_named_sections(monkeypatch):
    import d5.bench.timing as timing

    now = [0.0]
    monkeypatch.setattr(timing, "_clock", lambda: now[0])
    timer = Timer()
    for step in range(3):
        with timer.section("step"):
            with timer.section("data"):
                now[0] += 1.0
            with timer.section("forward+backward"):
                now[0] += 2.0 + step
    timer.add("communication", 0.5)
    assert timer.totals() == {"step": 12.0, "data": 3.0, "forward+backward": 9.0, "communication": 0.5}
    assert timer.counts() == {"step": 3, "data": 3, "forward+backward": 3, "communication": 1}
    assert timer.samples("forward+backward") == [2.0, 3.0, 4.0]
    summaries = timer.summaries()
    assert summaries["forward+backward"].median == 3.0 and summaries["communication"].n == 1
    timer.reset()
    assert timer.totals() == {} and timer.summaries() == {}


def test_timer_records_a_section_that_raised_and_rejects_nesting_the_same_name():
    timer = Timer()
    with pytest.raises(RuntimeError):
        with timer.section("update"):
            raise RuntimeError("boom")
    assert timer.counts() == {"update": 1}
    with pytest.raises(D5Error, match="entered again"):
        with timer.section("data"):
            with timer.section("data"):
                pass
    with pytest.raises(D5Error, match="no timer section"):
        timer.samples("missing")
    with pytest.raises(D5Error, match="non-empty"):
        timer.section("")
    with pytest.raises(D5Error, match="finite"):
        timer.add("data", -1.0)


def test_timer_sync_runs_on_enter_and_exit():
    calls = []
    timer = Timer(sync=lambda: calls.append("sync"))
    with timer.section("forward"):
        calls.append("body")
    assert calls == ["sync", "body", "sync"]


def test_importing_d5_bench_does_not_import_scipy_or_matplotlib():
    code = (
        "import sys\n"
        "import d5\n"
        "before = set(sys.modules)\n"
        "import d5.bench, d5.bench.stats, d5.bench.timing, d5.bench.environment, d5.bench.results, "
        "d5.bench.report\n"
        "new = set(sys.modules) - before\n"
        "heavy = sorted(m for m in new if m.split('.')[0] in ('scipy', 'matplotlib', 'torch', 'tqdm'))\n"
        "assert not heavy, heavy\n"
        "assert callable(d5.bench.summarize) and callable(d5.bench.plot_samples)\n"
    )
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert completed.returncode == 0, completed.stderr
