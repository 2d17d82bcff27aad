"""A recipe's command-line overrides: one table (:data:`OVERRIDES`) that the recipe parser, the result record,
``d5 run --replay`` and the grid of ``d5 sweep`` all read, so a new override is one entry here.

Each :class:`Override` says how its text becomes a value, which values are meaningful, and whether using it
*modifies* the benchmark (a modified run is reported as "not a valid benchmark result"): the device and the
thread count choose where and how fast a run goes, not what it computes, so they do not.

>>> args = parse_overrides(["--epochs", "2", "--lr", "0.05", "--threads", "1"])
>>> args.epochs, args.lr, args.threads
(2, 0.05, 1)
>>> overrides_to_argv(args)
['--epochs', '2', '--lr', '0.05', '--threads', '1']
>>> modifications(args)
{'epochs': 2, 'lr': 0.05}
"""
from __future__ import annotations

import argparse
import dataclasses
import difflib
import math
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

from d5.errors import RecipeError
from d5.io_utils import check_writable


@dataclasses.dataclass(frozen=True)
class Override:
    """One ``--name VALUE`` override of a recipe.

    ``convert`` turns the command-line text into the value (raising ``ValueError`` for text of the wrong
    kind); ``check`` returns what is wrong with a converted value, or None. ``to_text`` is the inverse of
    ``convert`` (the argv recorded in a result and passed to a sweep's runs). ``modifies``: whether a run
    with this override is no longer the recipe's benchmark. ``sweepable``: whether ``d5 sweep --grid`` may
    vary it.

    >>> [o.flag for o in OVERRIDES][:3]
    ['--epochs', '--batch-size', '--framework']
    >>> OVERRIDES_BY_NAME["threads"].check(0)
    'must be positive, got 0'
    """

    name: str
    convert: Callable[[str], Any]
    help: str
    metavar: str
    check: Callable[[Any], str | None] = lambda value: None
    to_text: Callable[[Any], str] = str
    modifies: bool = True
    sweepable: bool = True
    kind: str = "an integer"  # what the text must be, for error messages

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


def _at_least(minimum: int) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        if value < minimum:
            return f"must be {'positive' if minimum == 1 else f'>= {minimum}'}, got {value}"
        return None
    return check


def _positive_finite(value: float) -> str | None:
    return None if math.isfinite(value) and value > 0 else f"must be a positive finite number, got {value!r}"


def _framework_check(value: str) -> str | None:
    from d5.frameworks import FRAMEWORKS

    return None if value in FRAMEWORKS else f"must be one of {', '.join(FRAMEWORKS)}; got {value!r}"


def _scheme_check(value: str) -> str | None:
    from d5.distributed.schemes import SCHEMES

    return None if value in SCHEMES else f"must be one of {', '.join(SCHEMES)}; got {value!r}"


def _compression_check(value: str) -> str | None:
    from d5.distributed.compression import compression_by_name
    from d5.errors import DistributedError

    try:
        compression_by_name(value)
    except DistributedError as err:  # "compression 'topk:2': ..." -> "--compression 'topk:2': ..."
        message = str(err)
        return message[len("compression "):] if message.startswith("compression ") else message
    return None


def scheme_takes_compression(scheme: str) -> bool:
    """Whether the scheme ``--scheme`` names can compress what it sends (its class takes ``compression=``).

    >>> scheme_takes_compression("ps")
    False
    """
    import inspect

    from d5.distributed.schemes import SCHEMES

    try:
        return "compression" in inspect.signature(SCHEMES[scheme]).parameters
    except (KeyError, TypeError, ValueError):
        return False


def parse_device(text: str):
    """'cpu' -> CPUDevice(), 'gpu' / 'gpu:N' (also 'cuda', 'cuda:N') -> GPUDevice(N), 'best' -> 'best'.

    >>> parse_device('gpu:1'), parse_device('CPU'), parse_device('best')
    (GPUDevice(1), CPUDevice(), 'best')
    """
    from d5.devices import CPUDevice, GPUDevice

    value = str(text).strip().lower()
    kind, _, index = value.partition(":")
    if value in ("cpu", "best"):
        return CPUDevice() if value == "cpu" else "best"
    if kind in ("gpu", "cuda") and (not index or index.isdigit()):
        return GPUDevice(int(index or 0))
    raise RecipeError(f"--device must be cpu, gpu, gpu:N (N = 0, 1, ...) or best; got {text!r}")


def device_text(device: Any) -> str:
    """The ``--device`` text of a parsed device (the inverse of :func:`parse_device`).

    >>> device_text(parse_device('cuda:2')), device_text('best')
    ('gpu:2', 'best')
    """
    if device == "best":
        return "best"
    return f"gpu:{device.index}" if getattr(device, "is_gpu", False) else "cpu"


def _device_argument(text: str):
    # argparse reports a type function's ValueError as "invalid value"; ArgumentTypeError keeps our message.
    try:
        return parse_device(text)
    except RecipeError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


#: Every override, in the order the recorded argv lists them. To add one (``--checkpoint`` ...), add an entry.
OVERRIDES: tuple[Override, ...] = (
    Override("epochs", int, "number of epochs", "N", _at_least(1)),
    Override("batch_size", int, "training and validation batch size", "N", _at_least(1)),
    Override("framework", str, "reference, pytorch, tensorflow or mxnet (its from_model and optimizer)", "NAME",
             _framework_check, kind="a framework name"),
    Override("subset", int, "use only the first N training and test examples", "N", _at_least(1)),
    Override("seed", int, "the seed of model initialization, shuffling and augmentation", "N", _at_least(0),
             sweepable=False),  # a sweep varies the seed with --seeds
    Override("device", _device_argument, "the executor's device (best: a GPU if the framework can use one)",
             "{cpu,gpu,gpu:N,best}", to_text=device_text, modifies=False, kind="a device"),
    Override("lr", float, "the optimizer's learning rate (a LearningRateSchedule keeps its shape, scaled)", "LR",
             _positive_finite, to_text=repr, kind="a number"),
    Override("threads", int, "threads of the BLAS/OpenMP pools and of the framework (torch.set_num_threads)",
             "N", _at_least(1), modifies=False),
    # Distributed training (d5.recipe_distributed). Not sweepable: a sweep's runs are single processes, while a
    # scaling experiment runs `d5 launch -n N` per world size.
    Override("scheme", str, "train on every MPI rank with this distributed scheme (allreduce, ps, async-ps, "
             "model-averaging, neighbors, dpsgd); --batch-size is then per rank", "NAME", _scheme_check,
             kind="a scheme name", sweepable=False),
    Override("compression", lambda text: text.strip().lower(), "compress what the --scheme sends: none, fp16, "
             "topk:RATIO, randomk:RATIO, qsgd:BITS, terngrad or onebit", "SPEC", _compression_check,
             kind="a compression", sweepable=False),
)
OVERRIDES_BY_NAME = {override.name: override for override in OVERRIDES}


def build_parser() -> argparse.ArgumentParser:
    """The recipe's argument parser: every :data:`OVERRIDES` entry, then the outputs (``--json``).

    >>> build_parser().parse_args(["--batch-size", "8"]).batch_size
    8
    """
    # exit_on_error=False: a bad value (--epochs two) becomes a RecipeError, not a SystemExit mid-program.
    parser = argparse.ArgumentParser(description="Run a d5 recipe.", add_help=True, exit_on_error=False)
    for override in OVERRIDES:
        parser.add_argument(override.flag, dest=override.name, type=override.convert, metavar=override.metavar,
                            help=override.help)
    parser.add_argument("--json", metavar="PATH", help="write the result, its environment and configuration as JSON")
    # Where the run's state goes, not what it computes: not overrides (a resumed run computes what an
    # uninterrupted one does), so neither recorded in the argv nor swept.
    parser.add_argument("--checkpoint", metavar="DIR", help="save checkpoints of the run into DIR")
    parser.add_argument("--checkpoint-every", dest="checkpoint_every", type=int, metavar="N",
                        help="checkpoint every N optimizer steps (default: at the end of every epoch)")
    parser.add_argument("--resume", action="store_true",
                        help="continue from the newest checkpoint in --checkpoint DIR (a fresh start when none)")
    # What a distributed run's speedup is relative to (equation 2 of the seeds): reporting, not configuration.
    parser.add_argument("--baseline-throughput", dest="baseline_throughput", type=float, metavar="SAMPLES_PER_S",
                        help="the 1-rank throughput a --scheme run's speedup and efficiency are relative to")
    parser.add_argument("--baseline", metavar="RESULT.json",
                        help="read the 1-rank baseline throughput from a previous run's result")
    return parser


def parse_overrides(argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse a recipe's overrides (``sys.argv[1:]`` when ``argv`` is None); a RecipeError for a bad one.

    A flag the parser does not know is refused, with the known ones: a misspelt override silently ignored
    would run the unchanged benchmark. (``run_recipe`` passes no command line when a program other than a
    recipe script calls it, so a test runner's or a notebook's own flags never reach this parser.) A
    ``--json`` path that cannot be written is refused now, not after training.

    >>> parse_overrides(["--seed", "-1"])
    Traceback (most recent call last):
    ...
    d5.errors.RecipeError: --seed must be >= 0, got -1
    """
    parser = build_parser()
    try:
        args, unknown = parser.parse_known_args(list(sys.argv[1:] if argv is None else argv))
    except argparse.ArgumentError as err:
        raise RecipeError(f"{err}; see --help") from None
    if unknown:
        raise _unknown_argument(unknown, parser)
    for override in OVERRIDES:
        value = getattr(args, override.name)
        problem = None if value is None else override.check(value)
        if problem:
            raise RecipeError(f"{override.flag} {problem}")
    if args.json is not None:
        check_writable(args.json, "--json path")  # now, not after training: a bad path must not lose the results
    if args.checkpoint is None and (args.resume or args.checkpoint_every is not None):
        raise RecipeError(f"{'--resume' if args.resume else '--checkpoint-every'} needs --checkpoint DIR (where the "
                          "checkpoints are)")
    if args.checkpoint_every is not None and args.checkpoint_every < 1:
        raise RecipeError(f"--checkpoint-every must be >= 1 (steps), got {args.checkpoint_every}")
    if args.checkpoint is not None:
        check_writable(Path(args.checkpoint) / "step-000000000.d5ckpt", "--checkpoint directory")
    _check_distributed(args)
    return args


def _check_distributed(args: argparse.Namespace) -> None:
    """The combinations of the distributed flags that cannot work, refused before anything runs.

    >>> parse_overrides(["--compression", "fp16"])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    d5.errors.RecipeError: --compression fp16 needs --scheme: ...
    """
    if args.scheme is None:
        for flag, value in (("--compression", args.compression), ("--baseline-throughput", args.baseline_throughput),
                            ("--baseline", args.baseline)):
            if value is not None:
                what = ("compresses what a distributed scheme sends" if flag == "--compression" else
                        "is the reference of a distributed run's speedup")
                raise RecipeError(f"{flag} {value} needs --scheme: it {what}; add --scheme allreduce (and run on "
                                  "several ranks with `d5 launch -n N RECIPE ...` or `mpiexec -n N python RECIPE ...`)")
        return
    if args.compression is not None and args.compression != "none" and not scheme_takes_compression(args.scheme):
        from d5.distributed.schemes import SCHEMES

        able = [name for name in SCHEMES if scheme_takes_compression(name)]
        raise RecipeError(f"--compression {args.compression}: the scheme {args.scheme!r} does not compress what it "
                          "sends; " + (f"use --scheme {' or '.join(able)}, or drop --compression" if able else
                                       "no scheme of this d5 compresses yet; drop --compression"))
    if args.baseline_throughput is not None and args.baseline is not None:
        raise RecipeError("--baseline-throughput and --baseline both give the 1-rank baseline; pass one")
    if args.baseline_throughput is not None and _positive_finite(args.baseline_throughput):
        raise RecipeError(f"--baseline-throughput {_positive_finite(args.baseline_throughput)} (samples per second "
                          "of the same recipe on one rank)")
    if args.checkpoint is not None:
        raise RecipeError("--checkpoint with --scheme is not supported yet (every rank would write the same "
                          "directory); drop --checkpoint for a distributed run")


def _unknown_argument(unknown: Sequence[str], parser: argparse.ArgumentParser) -> RecipeError:
    """The error for the first argument ``parser`` left over: a flag it does not know (with the closest known
    one, if any) or a stray value, and the flags a recipe takes.

    >>> print(_unknown_argument(["--batch_size", "8"], build_parser()))  # doctest: +ELLIPSIS
    unknown flag --batch_size (did you mean --batch-size?); a recipe takes --epochs, --batch-size, ...
    """
    # Every long flag of the parser (overrides, outputs): the list stays right as flags are added.
    flags = [flag for action in parser._actions for flag in action.option_strings
             if flag.startswith("--") and flag != "--help"]
    first = str(unknown[0])
    if first.startswith("-"):
        name = first.partition("=")[0]
        close = difflib.get_close_matches(name, flags, n=1)
        problem = f"unknown flag {name}" + (f" (did you mean {close[0]}?)" if close else "")
    else:
        problem = f"unexpected argument {first!r}, which follows no flag that takes a value"
    return RecipeError(f"{problem}; a recipe takes {', '.join(flags)} (see --help)")


def overrides_to_argv(args: argparse.Namespace) -> list[str]:
    """The overrides of ``args`` as canonical command-line text (table order, no outputs): what a result
    records and what ``d5 run --replay`` passes again.

    >>> overrides_to_argv(parse_overrides(["--device", "cuda:1", "--lr", "1e-3", "--json", "out.json"]))
    ['--device', 'gpu:1', '--lr', '0.001']
    """
    argv: list[str] = []
    for override in OVERRIDES:
        value = getattr(args, override.name, None)
        if value is not None:
            argv += [override.flag, override.to_text(value)]
    return argv


def modifications(args: argparse.Namespace) -> dict[str, Any]:
    """The overrides that change what the benchmark computes (a run with any is not a valid result).

    >>> modifications(parse_overrides(["--subset", "100", "--device", "cpu", "--threads", "2"]))
    {'subset': 100}
    """
    return {o.name: getattr(args, o.name) for o in OVERRIDES if o.modifies and getattr(args, o.name) is not None}


__all__ = ["Override", "OVERRIDES", "OVERRIDES_BY_NAME", "build_parser", "parse_overrides", "overrides_to_argv",
           "modifications", "parse_device", "device_text", "scheme_takes_compression"]
