"""The ``d5`` command.

    d5 info                  versions, frameworks and machine facts (JSON with --json)
    d5 operators             operators the reference framework implements
    d5 recipe PATH [ARGS]    run a recipe file; ARGS are its overrides (--epochs, --subset, ...)
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
    from d5.bench.environment import capture_environment

    env = capture_environment()
    env["frameworks_available"] = d5.frameworks.available()
    if args.json:
        print(json.dumps(env, indent=2, default=str))
    else:
        for key, value in env.items():
            print(f"{key:24s} {value}")
    return 0


def _operators(args: argparse.Namespace) -> int:
    from d5.frameworks.reference.operators import supported_operators

    ops = supported_operators()
    print(f"{len(ops)} reference operators:")
    print(", ".join(ops))
    return 0


def _recipe(args: argparse.Namespace) -> int:
    path = Path(args.path)
    if not path.is_file():
        raise D5Error(f"no recipe file {str(path)!r}; recipes live in recipes/, e.g. recipes/fashion_mnist_lenet.py")
    # The recipe reads its overrides from sys.argv, exactly as when run with `python PATH ARGS`.
    saved_argv, sys.argv = sys.argv, [str(path), *args.overrides]
    try:
        runpy.run_path(str(path), run_name="__main__")
    except SystemExit as exit_:
        return _exit_status(exit_.code)
    finally:
        sys.argv = saved_argv
    return 0


def _exit_status(code: object) -> int:
    """Python's rule for sys.exit(code): None is 0, an int is itself, anything else is printed and is 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="d5", description="d5: a deep-learning meta-framework and benchmarking library")
    commands = parser.add_subparsers(dest="command", required=True)
    info = commands.add_parser("info", help="versions, frameworks and machine facts")
    info.add_argument("--json", action="store_true")
    info.set_defaults(run=_info)
    commands.add_parser("operators", help="operators of the reference framework").set_defaults(run=_operators)
    recipe = commands.add_parser("recipe", help="run a recipe file")
    recipe.add_argument("path")
    recipe.add_argument("overrides", nargs=argparse.REMAINDER)
    recipe.set_defaults(run=_recipe)
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except D5Error as err:
        print(f"d5: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
