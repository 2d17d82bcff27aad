"""The long fuzz run (``make fuzz``): every generator, many examples, a table, a JSON result and a
standalone reproducer per finding.

    .venv/bin/python tests/fuzz/run_fuzz.py --examples 5000 --json results/fuzz.json

prints the outcome counts per generator and the findings grouped by root cause, writes the result (with
its environment, as every d5 result does) to ``--json``, and for each finding a reproducer script and
the pickled case to ``--repro-dir`` (default: ``fuzz_repro/`` beside the JSON file). Exit status 1 when
there is any crash, hang, raw exception or wrong result. ``--replay CASE.pkl`` runs one saved case in
this process, so that its traceback (or its crash) is there to see.
"""
from __future__ import annotations

import argparse
import os
import pickle
import re
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from fuzz_suite import GENERATORS

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], prog="run_fuzz.py")
    parser.add_argument("--examples", type=int, default=1000, help="generated cases per generator (default 1000)")
    parser.add_argument("--generators", nargs="+", choices=sorted(GENERATORS), default=sorted(GENERATORS),
                        help="which generators to run (default: all)")
    parser.add_argument("--seed", type=int, default=0, help="hypothesis seed (default 0); the same seed gives the same cases")
    parser.add_argument("--no-fixed", action="store_true", help="skip the issue's reproducers and the seed models")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per case before it counts as a hang")
    parser.add_argument("--memory-gb", type=float, default=4.0, help="address-space limit of the worker (GiB)")
    parser.add_argument("--threads", type=int, default=2, help="OpenMP threads of the worker (default 2; results "
                        "are also checked bit for bit against one thread)")
    parser.add_argument("--json", type=Path, help="write the result document here")
    parser.add_argument("--repro-dir", type=Path, help="write a reproducer per finding here")
    parser.add_argument("--replay", type=Path, help="run one saved case (.pkl) in this process and exit")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    args = parser.parse_args(argv)
    if args.examples < 0 or args.timeout <= 0 or args.memory_gb <= 0 or args.threads < 1:
        parser.error("--examples must be >= 0, --timeout and --memory-gb > 0, --threads >= 1")
    if args.repro_dir is None and args.json is not None:
        args.repro_dir = args.json.parent / "fuzz_repro"
    return args


def replay(path: Path) -> int:
    from fuzz_execute import run_case

    with open(path, "rb") as handle:
        case = pickle.load(handle)
    print(f"replaying {case.get('id')}: {case.get('description', '')}")
    result = run_case(case, stage=lambda name: print(f"  stage: {name}", flush=True))
    for key in ("outcome", "stage", "detail", "frame", "d5_frame"):
        if result.get(key):
            print(f"{key}: {result[key]}")
    if result.get("traceback"):
        print(result["traceback"])
    return 0


def write_reproducers(tally, directory: Path) -> list[str]:
    from fuzz_repro import reproducer_script

    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for index, finding in enumerate(tally.as_dict()["findings"]):
        source = tally.findings[finding["signature"]]
        slug = re.sub(r"[^A-Za-z0-9]+", "_", finding["signature"])[:60].strip("_")
        stem = directory / f"{index:03d}_{slug}"
        stem.with_suffix(".py").write_text(reproducer_script(source["case"], source["result"]), encoding="utf-8")
        with open(stem.with_suffix(".pkl"), "wb") as handle:
            pickle.dump(source["case"], handle)
        written.append(str(stem.with_suffix(".py")))
    return written


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(HERE))  # the fuzz modules live beside this script
    args = parse_args(argv)
    if args.replay is not None:
        return replay(args.replay)
    from fuzz_engine import FuzzEngine, Tally
    from fuzz_execute import BAD_OUTCOMES
    from fuzz_suite import run_suite

    if args.json is not None:  # fail now, not after an hour of fuzzing
        args.json.parent.mkdir(parents=True, exist_ok=True)
        if not os.access(args.json.parent, os.W_OK):
            print(f"run_fuzz.py: cannot write to {args.json.parent}", file=sys.stderr)
            return 2
    tally, started, done = Tally(), time.monotonic(), 0

    def progress(case: dict, result: dict) -> None:
        nonlocal done
        done += 1
        if args.quiet:
            return
        if result["outcome"] in BAD_OUTCOMES:
            print(f"  [{result['outcome']}] {case.get('id')}: {case.get('description', '')[:120]}\n"
                  f"      -> {result.get('detail', '')[:200]}", flush=True)
        elif done % 250 == 0:
            print(f"  {done} cases, {time.monotonic() - started:.0f} s", flush=True)

    examples = {name: args.examples for name in args.generators}
    with FuzzEngine(timeout=args.timeout, memory_bytes=int(args.memory_gb * (1 << 30)), threads=args.threads) as engine:
        run_suite(engine, examples, args.seed, tally, with_fixed=not args.no_fixed, progress=progress)
        starts = engine.starts
    wall = time.monotonic() - started
    print()
    print(tally.table())
    print(f"\n{done} cases in {wall:.1f} s ({starts} worker starts); seed {args.seed}")
    print(f"not findings: d5 answered where onnxruntime refused in {sum(tally.lenient.values())} cases; "
          f"{len(tally.disputed)} disputed (the oracles disagree among themselves)")
    if tally.findings:
        print(f"\nfindings ({len(tally.findings)} signatures):\n{tally.findings_report(limit=100)}")
    reproducers = write_reproducers(tally, args.repro_dir) if args.repro_dir is not None and tally.findings else []
    if reproducers:
        print(f"\nreproducers: {args.repro_dir}/ ({len(reproducers)} scripts; replay a .pkl with --replay)")
    if args.json is not None:
        from d5.bench.environment import capture_environment
        from d5.bench.results import write_result

        document = tally.as_dict()
        figures = {"counts": document.pop("counts"), "bad_total": document.pop("bad_total"), "cases": done,
                   "seconds": round(wall, 2), "worker_starts": starts}
        extra = {**document, "reproducers": reproducers,
                 "settings": {"examples": args.examples, "generators": args.generators, "seed": args.seed,
                              "fixed": not args.no_fixed, "timeout": args.timeout, "memory_gb": args.memory_gb,
                              "threads": args.threads}}
        write_result(args.json, "fuzz", figures, environment=capture_environment(seeds={"hypothesis": args.seed}),
                     extra=extra)
        print(f"result: {args.json}")
    return 1 if tally.bad_total() else 0


if __name__ == "__main__":
    sys.exit(main())
