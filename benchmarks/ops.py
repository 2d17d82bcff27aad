"""Operator benchmarks (issue 11, item 6): DeepBench-style GEMM, convolution and element-wise problems, forward
and backward, on every available framework (its own kernels and the seeds' custom operators), against the
SGEMM peak and memory bandwidth measured in the same run. The same as ``d5 bench ops``; see
docs/operator_benchmarks.md.

    python benchmarks/ops.py              # results/ops.json, results/ops.md, results/ops.png (a few minutes)
    python benchmarks/ops.py --quick      # tiny problems, results/ops-quick.* (seconds)
"""
from __future__ import annotations

import argparse
from pathlib import Path

from d5.bench.ops import add_arguments, run_from_arguments

RESULTS = Path(__file__).resolve().parent.parent / "results"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(parser, default_output=str(RESULTS))
    return run_from_arguments(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
