"""The fuzz engine: runs cases in a persistent worker subprocess and tallies the outcomes.

A crash (segfault, abort, "double free", std::terminate, a kill for memory) ends the worker, not the
caller: the engine records it as a ``crash`` with the signal or exit code, the stage the case had reached
and the tail of the worker's stderr; a case that does not answer within the per-case timeout is a
``hang`` (the worker is killed). Either way the next case gets a fresh worker. Outcome classes are
:data:`fuzz_execute.OUTCOMES`; crash, hang, raw_exception and wrong_result are findings.

Cases come from hypothesis strategies (:func:`for_each_example`, seeded, no example database) or from
fixed lists; :class:`Tally` counts outcomes per generator and groups findings by a signature that names
the root cause as far as the outcome tells it (exception type and innermost d5 frame, crash signal and
stage, ...), keeping the first case of each group for a reproducer.

>>> tally = Tally()
>>> tally.add({"id": "demo:0", "generator": "demo", "label": "Relu"}, {"outcome": "ok", "stage": "done"})
>>> tally.counts["demo"]["ok"], tally.bad_total()
(1, 0)
"""
from __future__ import annotations

import collections
import os
import pickle
import re
import select
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Iterable

from fuzz_execute import BAD_OUTCOMES, OUTCOMES
from fuzz_worker import HEADER, MEMORY_VARIABLE, pack

WORKER_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fuzz_worker.py")
DEFAULT_MEMORY_BYTES = 4 << 30
STARTUP_TIMEOUT = 180.0  # importing d5, onnx and onnxruntime on a loaded 2-core machine can be slow


class WorkerGone(Exception):
    """The worker closed its pipe (it died)."""


class WorkerSilent(Exception):
    """The worker did not answer in time."""


class Worker:
    """One worker subprocess and its pipes; see fuzz_worker for the protocol."""

    def __init__(self, memory_bytes: int = DEFAULT_MEMORY_BYTES, threads: int = 2) -> None:
        self.stderr = tempfile.TemporaryFile()
        self.directory = tempfile.TemporaryDirectory(prefix="d5-fuzz-")  # anything a case writes lands here
        env = dict(os.environ)
        env[MEMORY_VARIABLE] = str(memory_bytes)
        env["OMP_NUM_THREADS"] = str(threads)  # > 1, or the same-bits-at-one-thread checks check nothing
        env["PYTHONFAULTHANDLER"] = "1"
        self.process = subprocess.Popen([sys.executable, WORKER_SCRIPT], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=self.stderr, env=env,
                                        cwd=self.directory.name)
        self._buffer = b""
        try:
            kind, _ = self.receive(time.monotonic() + STARTUP_TIMEOUT)
        except (WorkerGone, WorkerSilent):
            tail = self.stderr_tail(0)
            self.close()
            raise RuntimeError(f"the fuzz worker did not start:\n{tail}") from None
        if kind != "ready":
            raise RuntimeError(f"the fuzz worker said {kind!r} instead of 'ready'")

    def send(self, message: Any) -> None:
        try:
            self.process.stdin.write(pack(message))
            self.process.stdin.flush()
        except (BrokenPipeError, OSError):
            raise WorkerGone() from None

    def receive(self, deadline: float) -> tuple[str, Any]:
        fd = self.process.stdout.fileno()
        while True:
            if len(self._buffer) >= HEADER.size:
                size = HEADER.unpack_from(self._buffer)[0]
                if len(self._buffer) >= HEADER.size + size:
                    payload = self._buffer[HEADER.size:HEADER.size + size]
                    self._buffer = self._buffer[HEADER.size + size:]
                    return pickle.loads(payload)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise WorkerSilent()
            readable, _, _ = select.select([fd], [], [], remaining)
            if readable:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    raise WorkerGone()
                self._buffer += chunk

    def stderr_size(self) -> int:
        return os.fstat(self.stderr.fileno()).st_size

    def stderr_tail(self, offset: int, limit: int = 3000) -> str:
        self.stderr.flush()
        size = self.stderr_size()
        start = max(offset, size - limit)
        self.stderr.seek(start)
        return self.stderr.read(size - start).decode("utf-8", "replace")

    def exit_description(self) -> str:
        try:
            code = self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        if code < 0:
            try:
                return f"signal {signal.Signals(-code).name}"
            except ValueError:
                return f"signal {-code}"
        return f"exit code {code}"

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                self.send(None)
                self.process.wait(timeout=5)
            except (WorkerGone, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            try:
                stream.close()
            except OSError:
                pass
        self.stderr.close()
        self.directory.cleanup()


class FuzzEngine:
    """Runs cases in a worker subprocess, restarting it after every crash or hang.

    ``timeout`` is per case (seconds; a case may set its own ``timeout``); ``memory_bytes`` limits the
    worker's address space."""

    def __init__(self, timeout: float = 30.0, memory_bytes: int = DEFAULT_MEMORY_BYTES, threads: int = 2) -> None:
        self.timeout = timeout
        self.memory_bytes = memory_bytes
        self.threads = threads
        self.worker: Worker | None = None
        self.starts = 0

    def __enter__(self) -> "FuzzEngine":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()
            self.worker = None

    def run(self, case: dict) -> dict:
        if self.worker is None:
            self.worker = Worker(self.memory_bytes, self.threads)
            self.starts += 1
        worker, stage, started = self.worker, "send", time.monotonic()
        timeout = case.get("timeout", self.timeout)  # a known hang need not cost the full timeout
        offset = worker.stderr_size()
        try:
            worker.send(case)
            while True:
                kind, payload = worker.receive(started + timeout)
                if kind == "stage":
                    stage = payload
                elif kind == "done":
                    result = dict(payload)
                    break
        except WorkerSilent:
            worker.process.kill()
            result = {"outcome": "hang", "stage": stage,
                      "detail": f"no answer within {timeout:g} s (stage {stage!r})",
                      "stderr": worker.stderr_tail(offset)}
            self.close()
        except WorkerGone:
            how = worker.exit_description()
            result = {"outcome": "crash", "stage": stage, "signal": how,
                      "detail": f"the worker died ({how}) in stage {stage!r}", "stderr": worker.stderr_tail(offset)}
            self.close()
        if result["outcome"] in ("crash", "hang") and stage == "oracle":
            # The oracle (onnxruntime, or a NumPy loop), not d5, failed after d5 had answered: not a d5 finding.
            result = {"outcome": "ok", "stage": "oracle", "detail": "",
                      "lenient": f"the oracle, not d5, {result['outcome']}ed: {result['detail']}"}
        result["seconds"] = round(time.monotonic() - started, 3)
        return result


# ------------------------------------------------------------------------------------------ generation
def for_each_example(strategy, count: int, seed: int, callback: Callable[[Any], None]) -> None:
    """Draw ``count`` examples from a hypothesis strategy, deterministically for a given ``seed`` (no
    example database, no shrinking: every example is passed to ``callback``, which must not raise)."""
    from hypothesis import HealthCheck, Phase, Verbosity, given, settings
    from hypothesis import seed as hypothesis_seed

    @hypothesis_seed(seed)
    @settings(max_examples=count, database=None, deadline=None, derandomize=False, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck), verbosity=Verbosity.quiet, report_multiple_bugs=False)
    @given(strategy)
    def draw(example):
        callback(example)

    draw()


def run_cases(engine: FuzzEngine, cases: Iterable[dict], tally: "Tally",
              progress: Callable[[dict, dict], None] | None = None) -> None:
    for case in cases:
        result = engine.run(case)
        tally.add(case, result)
        if progress is not None:
            progress(case, result)


def run_generated(engine: FuzzEngine, generator: str, strategy, count: int, seed: int, tally: "Tally",
                  progress: Callable[[dict, dict], None] | None = None) -> None:
    index = 0

    def one(case: dict) -> None:
        nonlocal index
        case = dict(case, id=f"{generator}:{seed}:{index}", generator=generator)
        index += 1
        run_cases(engine, [case], tally, progress)

    for_each_example(strategy, count, seed, one)


# ---------------------------------------------------------------------------------------------- tallies
def signature(case: dict, result: dict) -> str:
    """What groups findings with (probably) one root cause."""
    outcome, stage, label = result["outcome"], result.get("stage"), case.get("label", "?")
    if outcome == "raw_exception":
        return f"raw {result.get('error')} at {result.get('d5_frame') or result.get('frame')} [{label}, {stage}]"
    if outcome == "crash":
        return f"crash ({result.get('signal')}) in {stage} [{label}]"
    if outcome == "hang":
        return f"hang in {stage} [{label}]"
    detail = re.sub(r"-?\d+(\.\d+)?(e-?\d+)?", "#", result.get("detail", ""))[:90]
    return f"{outcome} in {stage} [{label}]: {detail}"


class Tally:
    """Outcome counts per generator, and the findings grouped by :func:`signature`."""

    def __init__(self) -> None:
        self.counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        self.findings: dict[str, dict] = {}
        # d5 answered where onnxruntime refused, or the oracles disagree among themselves (not findings).
        self.lenient: collections.Counter = collections.Counter()
        self.disputed: list[str] = []
        self.seconds = 0.0

    def add(self, case: dict, result: dict) -> None:
        generator = case.get("generator", "?")
        self.counts[generator][result["outcome"]] += 1
        self.seconds += result.get("seconds", 0.0)
        if result.get("lenient"):
            self.lenient[case.get("label", "?")] += 1
            if result["lenient"].startswith("disputed"):
                self.disputed.append(f"{case.get('id')}: {case.get('description', '')[:160]} -> {result['lenient'][:300]}")
        if result["outcome"] in BAD_OUTCOMES:
            key = signature(case, result)
            finding = self.findings.setdefault(key, {"signature": key, "outcome": result["outcome"], "count": 0,
                                                    "generators": set(), "case": case, "result": result,
                                                    "case_ids": []})
            finding["count"] += 1
            finding["generators"].add(generator)
            if len(finding["case_ids"]) < 5:
                finding["case_ids"].append(case.get("id"))

    def bad_total(self) -> int:
        return sum(n for counts in self.counts.values() for outcome, n in counts.items() if outcome in BAD_OUTCOMES)

    def table(self) -> str:
        columns = ["generator", *OUTCOMES, "total"]
        rows = [[name, *(str(self.counts[name][o]) for o in OUTCOMES), str(sum(self.counts[name].values()))]
                for name in sorted(self.counts)]
        totals = collections.Counter()
        for counts in self.counts.values():
            totals.update(counts)
        rows.append(["all", *(str(totals[o]) for o in OUTCOMES), str(sum(totals.values()))])
        widths = [max(len(column), *(len(row[i]) for row in rows)) for i, column in enumerate(columns)]
        lines = ["  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths)))
                 for row in [columns, *rows]]
        lines.insert(1, "  ".join("-" * w for w in widths))
        return "\n".join(lines)

    def findings_report(self, limit: int = 40) -> str:
        ordered = sorted(self.findings.values(), key=lambda f: (OUTCOMES.index(f["outcome"]), -f["count"]))
        lines = []
        for finding in ordered[:limit]:
            lines.append(f"{finding['count']:5d}x {finding['signature']}")
            lines.append(f"        e.g. {finding['case'].get('id')}: {finding['case'].get('description', '')[:200]}")
            lines.append(f"        -> {finding['result'].get('detail', '')[:300]}")
        if len(ordered) > limit:
            lines.append(f"... and {len(ordered) - limit} more signatures")
        return "\n".join(lines)

    def as_dict(self) -> dict:
        return {
            "counts": {name: {o: counts[o] for o in OUTCOMES} for name, counts in sorted(self.counts.items())},
            "bad_total": self.bad_total(),
            "lenient_by_label": dict(self.lenient.most_common()),
            "disputed": self.disputed[:200],
            "case_seconds": round(self.seconds, 2),
            "findings": [
                {"signature": f["signature"], "outcome": f["outcome"], "count": f["count"],
                 "generators": sorted(f["generators"]), "case_ids": f["case_ids"],
                 "description": f["case"].get("description", ""), "label": f["case"].get("label"),
                 **{k: v for k, v in f["result"].items() if k in ("stage", "detail", "error", "frame", "d5_frame",
                                                                 "signal", "stderr", "traceback")}}
                for f in sorted(self.findings.values(), key=lambda f: (OUTCOMES.index(f["outcome"]), -f["count"]))
            ],
        }
