"""The timing harness's own overhead per sample (issue 11: < 2 us): ``d5.bench.measure`` timing an empty
function. Every sample is then nothing but the harness -- the clock reads, the call, the loop -- so its median is
what the harness adds to every operator timing. Also reported: the same for ``Timer.section`` (the trainer's
phases), and the clock's own resolution (``time.get_clock_info``).

    python benchmarks/harness_overhead.py          # JSON in results/harness_overhead.json
"""
from __future__ import annotations

import argparse
import time

from d5.bench.results import write_result
from d5.bench.stats import summarize
from d5.bench.timing import Timer, measure

TARGET_SECONDS = 2e-6


def empty() -> None:
    return None


def timer_section_samples(repeats: int) -> list[float]:
    """Seconds per ``with timer.section(...)`` around nothing, measured in blocks of 1,000 by the clock."""
    timer, samples = Timer(), []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(1000):
            with timer.section("empty"):
                pass
        samples.append((time.perf_counter() - start) / 1000)
    return samples


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=200_000, help="samples of the empty function")
    parser.add_argument("--output", default="results/harness_overhead.json")
    args = parser.parse_args(argv)
    per_sample = measure(empty, warmup=1000, repeats=args.repeats)
    section = summarize(timer_section_samples(200))
    clock = time.get_clock_info("perf_counter")
    figures = {"measure_per_sample_seconds": per_sample, "timer_section_seconds": section,
               "clock_resolution_seconds": clock.resolution, "target_at_most_seconds": TARGET_SECONDS,
               "met": bool(per_sample.median < TARGET_SECONDS)}
    path = write_result(args.output, "harness_overhead", figures, extra={"clock": clock.implementation})
    print(f"d5.bench.measure of an empty function: {per_sample.median * 1e9:.0f} ns per sample "
          f"[{per_sample.ci_low * 1e9:.0f}, {per_sample.ci_high * 1e9:.0f}] (target < 2 us: "
          f"{'met' if figures['met'] else 'NOT met'}); Timer.section {section.median * 1e9:.0f} ns; clock "
          f"resolution {clock.resolution * 1e9:.0f} ns")
    print(f"wrote {path}")
    return 0 if figures["met"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
