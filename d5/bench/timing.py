"""Timing: repeated measurement of a callable, and a low-overhead timer for named sections.

Both use :func:`time.perf_counter` (monotonic, highest resolution) and report seconds. Asynchronous
devices (CUDA) return before the work is done, so both accept a ``sync`` callable, e.g.
``torch.cuda.synchronize``, that is run before the clock is read.

>>> s = measure(lambda: sum(range(100)), warmup=1, repeats=5)
>>> s.n
5
>>> timer = Timer()
>>> with timer.section("data"):
...     pass
>>> list(timer.totals())
['data']
"""
from __future__ import annotations

import time
from typing import Callable

from d5.errors import D5Error

from .stats import Summary, summarize

# The one clock every measurement reads (a module global, so tests can substitute a fake clock).
_clock = time.perf_counter


def _check_count(value, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise D5Error(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


def _check_callable(value, name: str, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if not callable(value):
        raise D5Error(f"{name} must be callable (a function taking no arguments), got {type(value).__name__}")


def measure(fn: Callable[[], object], *, warmup: int = 3, repeats: int = 20,
            sync: Callable[[], object] | None = None, progress: bool = False,
            desc: str | None = None, confidence: float = 0.95) -> Summary:
    """Call ``fn()`` ``warmup`` times untimed, then time ``repeats`` calls; return a :class:`Summary` in seconds.

    Warm-up calls absorb one-off costs (lazy initialization, JIT, cache and allocator warm-up) that
    would otherwise inflate the first samples. ``sync`` (optional) is run after the warm-up and after each
    timed call before the clock stops, so asynchronous work is counted in the call that launched it and
    not in the next one. ``progress=True`` shows a tqdm bar labelled ``desc``; it is updated outside the
    timed region.

    >>> calls = []
    >>> s = measure(lambda: calls.append(1), warmup=2, repeats=4)
    >>> (len(calls), s.n, s.min >= 0)
    (6, 4, True)
    """
    _check_callable(fn, "fn")
    _check_callable(sync, "sync", allow_none=True)
    warmup = _check_count(warmup, "warmup", 0)
    repeats = _check_count(repeats, "repeats", 1)

    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=warmup + repeats, desc=desc or getattr(fn, "__name__", "measure"), leave=False)
    try:
        for _ in range(warmup):
            fn()
            if bar is not None:
                bar.update(1)
        if sync is not None:
            sync()  # don't let queued warm-up work leak into the first timed sample
        clock = _clock  # local name: one fewer global lookup inside the timed loop
        samples = []
        for _ in range(repeats):
            start = clock()
            fn()
            if sync is not None:
                sync()
            samples.append(clock() - start)
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    return summarize(samples, confidence)


class _Section:
    """The context manager for one named section; created once per name and reused (no per-use allocation)."""

    __slots__ = ("name", "samples", "_sync", "_start")

    def __init__(self, name: str, sync: Callable[[], object] | None):
        self.name = name
        self.samples: list[float] = []
        self._sync = sync
        self._start: float | None = None

    def __enter__(self) -> "_Section":
        if self._start is not None:
            raise D5Error(f"timer section {self.name!r} was entered again before it ended; "
                          "sections with the same name cannot nest — use a different name for the inner one")
        if self._sync is not None:
            self._sync()
        self._start = _clock()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._sync is not None:
            self._sync()
        # Recorded even when the body raised: the time was spent.
        self.samples.append(_clock() - self._start)
        self._start = None


class Timer:
    """Accumulates time per named section, for timing breakdowns (data / forward+backward / update / ...).

    Each ``with timer.section(name):`` adds one sample (seconds). Overhead is two ``perf_counter`` calls
    and a list append per use. Different names may nest (e.g. ``'step'`` around ``'update'``); the same
    name may not. ``sync`` (e.g. ``torch.cuda.synchronize``) is run on entering and leaving every section.
    Not thread-safe: use one Timer per thread.

    >>> timer = Timer()
    >>> for _ in range(3):
    ...     with timer.section("data"):
    ...         pass
    ...     with timer.section("update"):
    ...         pass
    >>> timer.counts()
    {'data': 3, 'update': 3}
    >>> timer.summaries()["data"].n
    3
    """

    def __init__(self, sync: Callable[[], object] | None = None):
        _check_callable(sync, "sync", allow_none=True)
        self._sync = sync
        self._sections: dict[str, _Section] = {}

    def section(self, name: str) -> _Section:
        """The context manager that times one use of section ``name``.

        >>> t = Timer()
        >>> with t.section("forward+backward"):
        ...     _ = sum(range(10))
        >>> t.counts()["forward+backward"]
        1
        """
        section = self._sections.get(name)
        if section is None:
            if not isinstance(name, str) or not name:
                raise D5Error(f"timer section names must be non-empty strings, got {name!r}")
            section = self._sections[name] = _Section(name, self._sync)
        return section

    def add(self, name: str, seconds: float) -> None:
        """Record a duration measured elsewhere (e.g. communication time counted by the MPI layer).

        >>> t = Timer(); t.add("communication", 0.25); t.totals()
        {'communication': 0.25}
        """
        try:
            seconds = float(seconds)
        except (TypeError, ValueError):
            raise D5Error(f"Timer.add({name!r}, ...): seconds must be a number, got {seconds!r}") from None
        if not seconds >= 0.0 or seconds == float("inf"):
            raise D5Error(f"Timer.add({name!r}, ...): seconds must be finite and >= 0, got {seconds!r}")
        self.section(name).samples.append(seconds)

    def totals(self) -> dict[str, float]:
        """Total seconds per section, in the order sections were first used.

        >>> Timer().totals()
        {}
        """
        return {name: float(sum(s.samples)) for name, s in self._sections.items()}

    def counts(self) -> dict[str, int]:
        """Number of samples per section.

        >>> t = Timer(); t.add("data", 0.1); t.counts()
        {'data': 1}
        """
        return {name: len(s.samples) for name, s in self._sections.items()}

    def samples(self, name: str) -> list[float]:
        """A copy of the samples (seconds) of one section.

        >>> t = Timer(); t.add("data", 0.5); t.samples("data")
        [0.5]
        """
        if name not in self._sections:
            raise D5Error(f"no timer section named {name!r}; known sections: {sorted(self._sections)}")
        return list(self._sections[name].samples)

    def summaries(self, confidence: float = 0.95) -> dict[str, Summary]:
        """A :class:`Summary` per section that has at least one sample.

        >>> t = Timer(); t.add("data", 0.5); t.add("data", 0.7); t.summaries()["data"].median
        0.6
        """
        return {name: summarize(s.samples, confidence) for name, s in self._sections.items() if s.samples}

    def reset(self) -> None:
        """Forget all samples (e.g. after warm-up iterations).

        >>> t = Timer(); t.add("data", 0.5); t.reset(); t.totals()
        {}
        """
        self._sections.clear()

    def __repr__(self) -> str:
        parts = ", ".join(f"{name}={total:.4g}s" for name, total in self.totals().items())
        return f"Timer({parts})"


__all__ = ["measure", "Timer"]
