"""The ``d5`` command.

    d5 info [--json]                       versions, frameworks, MPI, thread settings and machine facts
    d5 operators                           operator types d5 knows, and which the reference framework implements
    d5 run RECIPE [OVERRIDES]              run a recipe (a path, or a name in recipes/); OVERRIDES: --epochs,
                                           --batch-size, --lr, --threads, --subset, --seed, --json PATH, ...
    d5 run --replay RESULT.json [--json PATH]
                                           rerun exactly the configuration a result records
    d5 recipe ...                          the same as d5 run
    d5 launch -n N [--hostfile F] [--mpiexec PATH] RECIPE [OVERRIDES]
                                           run a recipe on N MPI ranks (OVERRIDES include --scheme NAME and
                                           --compression SPEC); the exit status comes from every rank's status
    d5 sweep RECIPE --grid KEY=V1,V2 ... [--seeds N] --output DIR [--jobs N]
                                           the recipe over a grid x seeds, each run in a fresh process
    d5 report DIR_OR_FILES... --output DIR result JSONs -> report.md and report.html with tables and plots
    d5 bench ops [--quick] [--output DIR] [--frameworks reference,pytorch] [--repeats N] [--threads N]
                                           operator benchmarks (GEMM, conv, element-wise) against the SGEMM peak

Exit status: 0 success (for ``run``: every metric met), 1 a recipe that missed a metric, a sweep with
failed runs or an operator benchmark with an implementation that failed its check against the reference,
2 bad input (a d5 error, printed as ``d5: error: ...``).
"""
from __future__ import annotations

import argparse
import json
import runpy
import sys
from pathlib import Path

from d5.errors import D5Error


def _info(args: argparse.Namespace) -> int:
    import d5.frameworks
    from d5.bench.environment import capture_environment, mpi_info, thread_pools

    env = capture_environment()
    env["frameworks_available"] = d5.frameworks.available()
    env["mpi"] = mpi_info()
    env["thread_pools"] = thread_pools(import_frameworks=True)
    if args.json:
        print(json.dumps(env, indent=2, default=str))
        return 0
    for key, value in env.items():
        if isinstance(value, dict) and key in ("mpi", "thread_pools", "git", "versions"):
            print(key)
            for name, item in value.items():
                if name == "pools" and isinstance(item, list):  # one line per BLAS/OpenMP library
                    item = "; ".join(f"{p['internal_api']} {p['version'] or ''} ({p['prefix']}): "
                                     f"{p['num_threads']} threads" for p in item)
                shown = item.splitlines()[0] if isinstance(item, str) and item else item
                print(f"  {name:22s} {shown}")
        else:
            print(f"{key:24s} {value}")
    return 0


def _operators(args: argparse.Namespace) -> int:
    from d5.frameworks.reference.operators import supported_operators
    from d5.network.op_types import known_operator_types

    # The same count of known operator types as an unknown operator's error message gives.
    known, implemented = known_operator_types(), supported_operators()
    missing = sorted(set(known) - set(implemented))
    print(f"the reference framework implements {len(implemented)} of the {len(known)} operator types d5 knows "
          "(ONNX's default domain and d5's own):")
    print(", ".join(implemented))
    if missing:
        print(f"not implemented ({len(missing)}; from_model(..., fallback=True) tries them on onnx.reference, "
              f"inference only): {', '.join(missing)}")
    return 0


def run_script(path: Path, overrides: list[str]) -> int:
    """Run a recipe script as ``python PATH OVERRIDES`` would, in this process; its exit status.

    >>> import tempfile, pathlib
    >>> script = pathlib.Path(tempfile.mkdtemp()) / "gives_up.py"
    >>> _ = script.write_text("import sys; sys.exit(3 if sys.argv[1:] == ['--epochs', '1'] else 0)")
    >>> run_script(script, ["--epochs", "1"])
    3
    """
    # The recipe reads its overrides from sys.argv, exactly as when run with `python PATH ARGS`.
    saved_argv, sys.argv = sys.argv, [str(path), *overrides]
    try:
        runpy.run_path(str(path), run_name="__main__")
    except SystemExit as exit_:
        return _exit_status(exit_.code)
    finally:
        sys.argv = saved_argv
    return 0


def _run(args: argparse.Namespace) -> int:
    from d5.recipe_record import find_recipe, replay

    if args.replay is not None:
        if args.recipe is not None or args.overrides:
            raise D5Error("d5 run --replay RESULT.json reruns the recorded configuration exactly; it takes no recipe "
                          f"or overrides (got {' '.join([args.recipe or '', *args.overrides]).strip()!r}), only --json")
        return replay(args.replay, run_script, args.json, report=lambda line: print(line, file=sys.stderr))
    if args.recipe is None:
        raise D5Error("d5 run needs a recipe: a path (recipes/mnist_lenet.py) or a name in recipes/ (mnist_lenet), "
                      "or --replay RESULT.json")
    overrides = list(args.overrides) + (["--json", args.json] if args.json else [])
    return run_script(find_recipe(args.recipe), overrides)


def _launch(args: argparse.Namespace) -> int:
    from d5.recipe_distributed import launch

    return launch(args.n, args.recipe, list(args.overrides), hostfile=args.hostfile, mpiexec=args.mpiexec,
                  report=lambda line: print(line, file=sys.stderr, flush=True))


def _sweep(args: argparse.Namespace) -> int:
    from d5.sweep import run_sweep

    outcome = run_sweep(args.recipe, args.grid or [], args.seeds, args.output, jobs=args.jobs)
    print(f"{outcome.ran} runs, {outcome.skipped} already done, {outcome.failed} failed; "
          f"results in {outcome.manifest.parent}")
    return 1 if outcome.failed else 0


def _report(args: argparse.Namespace) -> int:
    from d5.bench.report import write_report

    written = write_report(args.paths, args.output)
    for path in written:
        print(path)
    return 0


def _bench_ops(args: argparse.Namespace) -> int:
    from d5.bench.ops import run_from_arguments

    return run_from_arguments(args)


def _add_bench_parser(commands) -> None:
    from d5.bench.ops import add_arguments

    bench = commands.add_parser("bench", help="benchmarks: `d5 bench ops` (operators)",
                                description="Benchmarks measured by d5 itself.")
    suites = bench.add_subparsers(dest="suite", required=True)
    ops = suites.add_parser("ops", help="GEMM, convolution and element-wise operators, forward and backward, "
                            "per framework, against the measured SGEMM peak",
                            description="DeepBench-style operator benchmarks: checked against the reference, "
                                        "timed (median, 95% CI), written as ops.json, ops.md and ops.png.")
    add_arguments(ops)
    ops.set_defaults(run=_bench_ops)


def _exit_status(code: object) -> int:
    """Python's rule for sys.exit(code): None is 0, an int is itself, anything else is printed and is 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _add_run_parser(commands, name: str, help_text: str) -> None:
    run = commands.add_parser(name, help=help_text, description=help_text + ". OVERRIDES are the recipe's: "
                              "--epochs, --batch-size, --framework, --subset, --seed, --device, --lr, --threads, "
                              "--scheme, --compression, --json (see `d5 run RECIPE --help`; `d5 launch -n N` runs "
                              "a recipe on N ranks).")
    run.add_argument("--replay", metavar="RESULT.json", help="rerun exactly the configuration of this result")
    run.add_argument("--json", metavar="PATH", help="write the result as JSON")
    run.add_argument("recipe", nargs="?", help="a recipe script, or the name of one in recipes/")
    run.add_argument("overrides", nargs=argparse.REMAINDER, help="the recipe's overrides")
    run.set_defaults(run=_run)


def build_parser() -> argparse.ArgumentParser:
    """The ``d5`` command's parser (subcommands info, operators, run, recipe, launch, sweep, report, bench).

    >>> args = build_parser().parse_args(["sweep", "mnist_lenet", "--grid", "lr=0.01,0.1", "--output", "out"])
    >>> args.grid, args.seeds, args.jobs
    (['lr=0.01,0.1'], 1, 1)
    """
    parser = argparse.ArgumentParser(prog="d5", description="d5: a deep-learning meta-framework and benchmarking library")
    commands = parser.add_subparsers(dest="command", required=True)
    info = commands.add_parser("info", help="versions, frameworks, MPI, thread settings and machine facts")
    info.add_argument("--json", action="store_true")
    info.set_defaults(run=_info)
    operators = commands.add_parser("operators", help="operator types d5 knows and those the reference framework "
                                    "implements")
    operators.set_defaults(run=_operators)
    _add_run_parser(commands, "run", "run a recipe")
    _add_run_parser(commands, "recipe", "run a recipe (the same as d5 run)")
    launch = commands.add_parser(
        "launch", help="run a recipe on N MPI ranks (mpiexec -n N python RECIPE OVERRIDES)",
        description="Run RECIPE on N MPI ranks with the mpiexec next to this Python (else the one on PATH). Give "
                    "the recipe --scheme NAME (allreduce, ps, async-ps, model-averaging, neighbors, dpsgd) and "
                    "optionally --compression SPEC; --batch-size is per rank. Rank 0 prints and writes the result; "
                    "the exit status comes from every rank's status (0 met, 1 missed or a rank failed, 2 a d5 "
                    "error), not from mpiexec's.")
    launch.add_argument("-n", "--np", dest="n", type=int, required=True, metavar="N", help="number of ranks")
    launch.add_argument("--hostfile", metavar="FILE", help="the machines to run on (mpiexec --hostfile FILE)")
    launch.add_argument("--mpiexec", metavar="PATH", help="the MPI launcher (default: next to Python, else PATH)")
    launch.add_argument("recipe", help="a recipe script, or the name of one in recipes/")
    launch.add_argument("overrides", nargs=argparse.REMAINDER, help="the recipe's overrides (--scheme, --json, ...)")
    launch.set_defaults(run=_launch)
    sweep = commands.add_parser("sweep", help="run a recipe over a grid of overrides and seeds",
                                description="Run RECIPE for every point of the grid and every seed, each in a "
                                            "fresh process; rerun to resume an interrupted sweep.")
    sweep.add_argument("recipe", help="a recipe script, or the name of one in recipes/")
    sweep.add_argument("--grid", nargs="+", action="extend", metavar="KEY=V1,V2",
                       help="overrides to vary: batch_size, lr, threads, epochs, subset, framework, device")
    sweep.add_argument("--seeds", type=int, default=1, help="runs per point, with seeds 0..N-1 (default 1)")
    sweep.add_argument("--output", required=True, metavar="DIR", help="directory of the results (created)")
    sweep.add_argument("--jobs", type=int, default=1, help="runs at a time (default 1; more disturbs timings)")
    sweep.set_defaults(run=_sweep)
    report = commands.add_parser("report", help="result JSONs -> a Markdown and an HTML report with plots")
    report.add_argument("paths", nargs="+", metavar="DIR_OR_FILE", help="result files, or directories of them")
    report.add_argument("--output", required=True, metavar="DIR", help="directory for report.md, report.html")
    report.set_defaults(run=_report)
    _add_bench_parser(commands)
    return parser


def report_error(err: D5Error) -> int:
    """Report a d5 error the one way every d5 program does -- ``d5: error: MESSAGE`` on stderr, no traceback
    (the message already says what was wrong and what to do) -- and return its exit status, 2. Used by
    :func:`main` and by a recipe script run with ``python RECIPE.py`` (:func:`d5.run_recipe`).

    >>> import contextlib, io
    >>> with contextlib.redirect_stderr(io.StringIO()) as stderr:
    ...     status = report_error(D5Error("--epochs must be positive, got 0"))
    >>> status, stderr.getvalue().splitlines()
    (2, ['d5: error: --epochs must be positive, got 0'])
    """
    # One write of the whole line: ranks of an MPI job share stderr, and print()'s separate newline interleaves.
    sys.stderr.write(f"d5: error: {err}\n")
    sys.stderr.flush()
    return 2


def main(argv: list[str] | None = None) -> int:
    """Run the ``d5`` command with ``argv`` (``sys.argv[1:]`` when None); its exit status. A d5 error is
    printed as ``d5: error: ...`` on stderr and gives status 2.

    >>> main(["run"])     # no recipe: a d5 error
    2
    """
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except D5Error as err:
        return report_error(err)
    except KeyboardInterrupt:
        if args.command != "sweep":
            raise
        # Finished runs keep their results (each written atomically); the manifest says what is left.
        print("d5: sweep interrupted; run the same command again to resume it", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
