"""Models users bring (issue 9 item 6): every public architecture of ``tests/frameworks/pytorch/public_models.py``
exported from torch to ONNX, imported with d5's pytorch framework, given a cross-entropy loss and trained; checks
(a) forward, (b) gradients, (c) training trajectory and (d) batch-size change against torch, as
``tests/frameworks/pytorch/public_models_check.py`` defines them (tolerances there). Writes a JSON result and
the Markdown table of docs/public_models.md; exits 1 when a model fails a check.

    python benchmarks/public_models.py --output results/public_models.json --markdown results/public_models.md
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "frameworks" / "pytorch"))

from public_models import MODELS  # noqa: E402
from public_models_check import (GRAD_ATOL, LOSS_RTOL, NOISE_FACTOR, OUTPUT_ATOL, RTOL,  # noqa: E402
                                 check_default_export, check_model, default_export_table, failure_summary,
                                 markdown_table, summary)

from d5.bench.environment import capture_environment  # noqa: E402
from d5.bench.results import write_result  # noqa: E402
from d5.io_utils import atomic_write  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default="results/public_models.json")
    parser.add_argument("--markdown", default="results/public_models.md", help="where to write the table")
    parser.add_argument("--models", nargs="*", help="names of the models to check (default: all)")
    parser.add_argument("--steps", type=int, default=5, help="training steps compared")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch intra-op threads (the models are tiny; 1 avoids spin-waiting on a shared machine)")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)

    chosen = [m for m in MODELS if not args.models or m.name in args.models]
    reports = []
    for model in chosen:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # exporter deprecation and tracer warnings; fallbacks are in the report
            report = check_model(model, steps=args.steps)
        reports.append(report)
        print(f"{model.name}: {'pass' if report.passed else 'FAIL (' + failure_summary(report) + ')'} "
              f"in {report.seconds:.1f} s")
        for failure in report.failures[:5]:
            print(f"    {failure[:300]}")
    defaults = [check_default_export(model) for model in chosen]
    table = markdown_table(reports) + "\nThe same models exported with the exporter's defaults (eval mode, constant " \
        "folding), dynamic batch:\n\n" + default_export_table(defaults)
    print(table)
    with atomic_write(Path(args.markdown), "w", encoding="utf-8") as handle:
        handle.write(table)
    tolerances = {"rtol": RTOL, "output_atol": OUTPUT_ATOL, "gradient_atol": GRAD_ATOL, "loss_rtol": LOSS_RTOL,
                  "torch_noise_factor": NOISE_FACTOR}
    figures = {"models": summary(reports), "passed": [r.name for r in reports if r.passed],
               "failed": {r.name: r.failures for r in reports if not r.passed},
               "default_export": {r.name: dataclasses.asdict(r) for r in defaults}}
    path = write_result(args.output, "public_models", figures,
                        environment=capture_environment(seeds={"torch": 0, "numpy": 0}),
                        extra={"steps": args.steps, "batch": 4, "new_batch": 3, "threads": args.threads,
                               "tolerances": tolerances})
    print(f"wrote {path} and {args.markdown}")
    return 0 if all(r.passed for r in reports) else 1


if __name__ == "__main__":
    sys.exit(main())
