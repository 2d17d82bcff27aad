"""Same-run comparisons of implementations: rounds in which every variant runs a block of calls, in an order
rotating from round to round, so that the machine's drift (frequency, other processes, cache state) falls on all
variants alike; then the median over rounds of the per-round ratio, with its CI.

>>> samples = alternate({"a": lambda: None, "b": lambda: None}, rounds=4, block=3, warmup=1, progress=False)
>>> [len(samples["a"]), len(samples["a"][0])]
[4, 3]
>>> paired_ratio([[2.0, 2.0]] * 5, [[1.0, 1.0]] * 5).median
2.0
"""
from __future__ import annotations

import time
from typing import Callable

import numpy as np

from d5.bench.stats import Summary, summarize


def time_calls(call: Callable[[], object], count: int) -> list[float]:
    """Seconds taken by each of ``count`` calls of ``call``."""
    times = []
    for _ in range(count):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return times


def alternate(calls: dict[str, Callable[[], object]], rounds: int, block: int, warmup: int,
              label: str = "rounds", progress: bool = True) -> dict[str, list[list[float]]]:
    """``rounds`` rounds of ``block`` timed calls of each variant, the order rotating from round to round, after
    ``warmup`` untimed calls of each. Returns, per variant, one list of call times per round."""
    from tqdm.auto import tqdm

    for call in calls.values():
        time_calls(call, warmup)  # imports, allocators, thread pools, compilation
    samples: dict[str, list[list[float]]] = {variant: [] for variant in calls}
    order = list(calls)
    for round_index in tqdm(range(rounds), desc=label, leave=False, disable=not progress):
        shift = round_index % len(order)
        for variant in order[shift:] + order[:shift]:
            samples[variant].append(time_calls(calls[variant], block))
    return samples


def paired_ratio(rounds_a: list[list[float]], rounds_b: list[list[float]]) -> Summary:
    """Median over rounds of median(a's block) / median(b's block), with its CI (see :func:`alternate`)."""
    return summarize([float(np.median(a) / np.median(b)) for a, b in zip(rounds_a, rounds_b)])


def flat(rounds: list[list[float]]) -> list[float]:
    """All call times of a variant, rounds concatenated."""
    return [t for block in rounds for t in block]
