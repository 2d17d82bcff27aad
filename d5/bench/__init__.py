"""d5.bench — the measurement core: statistics, timing, environment capture, result files, reports.

Names are loaded on first use (PEP 562 ``__getattr__``), so ``import d5.bench`` imports neither scipy nor
matplotlib; the modules that need them import them inside their functions.

>>> import d5.bench as bench
>>> s = bench.measure(lambda: None, warmup=1, repeats=6)
>>> s.n
6
"""
from __future__ import annotations

import importlib

# public name -> submodule that defines it
_EXPORTS = {
    "Summary": "stats", "Ratio": "stats", "summarize": "stats", "compare": "stats",
    "median_ci_ranks": "stats",
    "measure": "timing", "Timer": "timing",
    "capture_environment": "environment",
    "write_result": "results", "read_result": "results", "to_jsonable": "results",
    "SCHEMA_VERSION": "results",
    "markdown_table": "report", "plot_samples": "report",
    "write_report": "report", "load_results": "report", "aggregate": "report", "aggregate_point": "report",
    "check_payload": "results", "PAYLOAD_FORMATS": "results",
    "thread_pools": "environment", "mpi_info": "environment",
    "alternate": "paired", "paired_ratio": "paired", "time_calls": "paired",
    "run_ops_benchmark": "ops", "OpsSettings": "ops",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    submodule = _EXPORTS.get(name)
    if submodule is None:
        raise AttributeError(f"module 'd5.bench' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{submodule}"), name)
    globals()[name] = value  # later look-ups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
