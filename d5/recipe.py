"""Recipes: a benchmark defined as fixed components + mutable components + acceptable metrics.

``run_recipe(FIXED, MUTABLE, METRICS)`` builds the dataset, model, executor, samplers and optimizer
the components describe, trains, prints a metrics table and returns True only when every metric meets
its threshold. FIXED and MUTABLE must not overlap. Every component ``<name>`` accepts ``<name>_args``
and ``<name>_kwargs`` (also the seeds' spelling ``<name>_kwarg``).

Components (defaults in brackets): ``model`` (zoo name, builder function or Network), ``dataset`` (name
in ``d5.datasets`` or a function returning ``(train, test)`` datasets), ``train_sampler``
[ShuffleSampler], ``validation_sampler`` [OrderedSampler], ``batch_size`` [64], ``epochs`` [1],
``executor`` [d5.frameworks.reference.from_model], ``optimizer`` [GradientDescent; a class, or the name of
one of the executor's framework, e.g. ``'MomentumOptimizer'``], ``events`` [()], ``seed`` [0]. A name
that is not a dataset, zoo model or optimizer is refused, with the valid names, before anything is built.

Samplers take their data augmentation as a keyword: ``'train_sampler_kwargs': dict(transform=d5.Compose(
[d5.RandomCrop(32, padding=4), d5.RandomHorizontalFlip()]))`` (see :mod:`d5.training.transforms`); the
train sampler also gets the recipe's ``seed``, which seeds its shuffling and its transform.

A recipe script also takes command-line overrides (the table is :data:`d5.recipe_args.OVERRIDES`):
``--epochs``, ``--batch-size``, ``--framework NAME`` (that framework's ``from_model`` and its optimizer of the
same class name; the executor's other keywords, such as ``device``, are kept), ``--subset N`` (first N
training and test examples), ``--seed``, ``--lr`` (the optimizer's learning rate; a ``LearningRateSchedule``
of the recipe is scaled by the same factor, so it keeps its shape) and ``--json PATH``. A run with these
overrides is reported as modified. ``--threads N`` sets the thread count of every BLAS/OpenMP pool
(threadpoolctl), of the reference framework's kernels and of PyTorch (``torch.set_num_threads``) for the
training run, and restores them afterwards; like ``--device`` it is not a modification. A flag the recipe does
not know (``--epoch 2`` is fine, ``--bogus 1`` or ``--batch_size 8`` is not) is a RecipeError that lists the
flags it knows, so a misspelt override never runs the benchmark unchanged.

A recipe script ends with a verdict line and an exit status: ``recipe PASSED`` (status 0) or ``recipe FAILED``
(status 1) for the benchmark as defined; ``recipe MODIFIED by --epochs 1 --subset 500 ...`` for a run whose
overrides change what it computes (a smoke test, an experiment): not a valid benchmark result, with status 0
when it met every metric and 1 when it missed one, as a shortened run usually does. A d5 error (a bad flag,
missing data, an output path that cannot be written) is one ``d5: error: ...`` line on stderr and status 2,
as with ``d5 run``.

The JSON result (``--json``) holds, besides the metrics (with the per-step time summary), the environment,
the seeds, the overrides as canonical argv, the git state, the recipe script (path, SHA-256, text) and every
component resolved -- defaults included -- as JSON (:mod:`d5.recipe_record`), so ``d5 run --replay RESULT``
can rerun exactly that configuration.

``--device cpu|gpu|gpu:N|best`` sets the executor's ``device`` keyword (replacing any ``device`` in
``executor_kwargs``); ``best`` is :func:`d5.best_device` for the executor's framework. It refuses an
executor that takes no ``device``. The device is a mutable component, so ``--device`` alone does not mark
the run as modified; the JSON result records it. When ``--framework`` switches to a CPU-only framework
(``reference``) and the recipe's device is a GPU (e.g. from ``d5.best_device()`` on a GPU machine), the run
uses the CPU and says so; an explicit ``--device gpu`` with such a framework is a RecipeError.

``--scheme NAME`` (``allreduce``, ``ps``, ``async-ps``, ``model-averaging``, ``neighbors``, ``dpsgd``) trains on
every MPI rank -- ``d5 launch -n 4 RECIPE --scheme allreduce`` or ``mpiexec -n 4 python RECIPE --scheme allreduce``
-- with the recipe's optimizer (a framework-neutral ThreeStepOptimizer) wrapped by that scheme and its
ShuffleSampler/OrderedSampler replaced by a DistributedSampler: ``--batch-size`` is **per rank**.
``--compression SPEC`` compresses what a scheme that can (``allreduce``) sends. Every rank runs the whole Trainer
(validation and metrics included); rank 0 alone prints and writes the result, which gains ``distributed`` (world
size, per-rank bytes and communication seconds, throughput, speedup and efficiency over ``--baseline-throughput`` or
``--baseline RESULT.json``). Under ``mpiexec`` on several ranks a recipe without ``--scheme`` is refused. See
:mod:`d5.recipe_distributed` for the checks across ranks (none is left waiting on another's error).

Everything is checked before the first component is built: a component of the wrong type (``epochs='two'``,
FIXED given as a list, ``optimizer_args=0.1``), a meaningless override (``--seed -1``, ``--epochs 0``) or a
``--json`` path that cannot be written raises :class:`d5.errors.RecipeError` (or a D5Error naming the
path), so no training time is spent on a run whose result would be lost. Results are written atomically.

>>> import d5, numpy as np
>>> rng = np.random.default_rng(0)
>>> x = rng.normal(size=(256, 1, 28, 28)).astype(np.float32); y = (x.mean(axis=(1, 2, 3)) > 0).astype(np.int64)
>>> data = lambda: (d5.NumpyDataset(x, y), d5.NumpyDataset(x, y))
>>> ok = d5.run_recipe({'model': 'lenet5', 'model_kwargs': {'num_classes': 2}, 'dataset': data, 'epochs': 1},
...                    {'batch_size': 32, 'optimizer': d5.MomentumOptimizer, 'optimizer_args': (0.05, 0.9)},
...                    [(d5.TestAccuracy(), 50.0)], argv=[], progress=False, verbose=False)
>>> ok
True
"""
from __future__ import annotations

import contextlib
import inspect
import json
import numbers
import sys
import time
from types import SimpleNamespace
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np

from d5.errors import D5Error, RecipeError
from d5.recipe_args import OVERRIDES_BY_NAME, modifications, overrides_to_argv, parse_overrides

COMPONENTS = ("model", "dataset", "train_sampler", "validation_sampler", "batch_size", "epochs", "executor",
              "optimizer", "events", "seed")
_SUFFIXES = ("_args", "_kwargs", "_kwarg")
#: Components that are plain values, not builders (they take no _args/_kwargs), with their smallest value.
_INTEGER_COMPONENTS = {"batch_size": 1, "epochs": 1, "seed": 0}


def _canonical(key: str) -> str:
    """'model_kwarg' and 'model_kwargs' name the same component part."""
    return key + "s" if key.endswith("_kwarg") else key


def _merge(fixed: Mapping[str, Any], mutable: Mapping[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    for source, table in (("FIXED", fixed), ("MUTABLE", mutable)):
        if not isinstance(table, Mapping):
            raise RecipeError(f"{source} must be a dict of components such as {{'model': 'lenet5', 'epochs': 3}}, "
                              f"got {type(table).__name__}")
        for key, value in table.items():
            if not isinstance(key, str):
                raise RecipeError(f"{source} keys must be component names (str), got {key!r}")
            base = next((key[: -len(s)] for s in _SUFFIXES if key.endswith(s)), key)
            if base not in COMPONENTS:
                raise RecipeError(f"{source} has unknown component {key!r}; known components: {', '.join(COMPONENTS)} "
                                  f"(each also with _args and _kwargs)")
            canonical = _canonical(key)
            if canonical in spec:
                raise RecipeError(f"component {key!r} appears in both FIXED and MUTABLE (or twice); "
                                  "a recipe component is either fixed or mutable")
            spec[canonical] = value
    _check_spec(spec)
    return spec


def _check_spec(spec: Mapping[str, Any]) -> None:
    """Refuse components of the wrong type before anything is built (a dataset may take minutes)."""
    for name, minimum in _INTEGER_COMPONENTS.items():
        if name in spec:
            _integer(spec[name], f"component {name!r}", minimum)
        if f"{name}_args" in spec or f"{name}_kwargs" in spec:
            raise RecipeError(f"component {name!r} is a number, not a builder; it takes no _args or _kwargs")
    for key, value in spec.items():
        if key.endswith("_args") and not isinstance(value, (list, tuple)):
            raise RecipeError(f"{key!r} must be a tuple of positional arguments, e.g. (0.01, 0.9), got {value!r}")
        if key.endswith("_kwargs") and not (isinstance(value, Mapping) and all(isinstance(k, str) for k in value)):
            raise RecipeError(f"{key!r} must be a dict of keyword arguments, e.g. {{'lr': 0.01}}, got {value!r}")
    if not isinstance(spec.get("events", ()), (list, tuple)):
        raise RecipeError(f"component 'events' must be a list of d5 TrainerEvents, got {spec['events']!r}")


def _integer(value: Any, what: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise RecipeError(f"{what} must be an int >= {minimum}, got {value!r}")
    return int(value)


def _takes_keyword(fn: Callable, name: str) -> bool:
    """Whether ``fn`` accepts the keyword argument ``name`` (by name or through ``**kwargs``)."""
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return True  # a builtin without a signature: let the call itself decide
    return any(p.name == name and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) or p.kind == p.VAR_KEYWORD
               for p in parameters)


def _framework_name(factory: Any) -> str | None:
    """'pytorch' for d5.frameworks.pytorch.from_model; None for a factory outside d5.frameworks."""
    parts = str(getattr(factory, "__module__", "") or "").split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["d5", "frameworks"] else None


def _framework_runs_on_gpu(name: str | None) -> bool:
    if name is None:
        return True  # a user's own executor: its device is its business
    import d5.frameworks

    return bool(getattr(getattr(d5.frameworks.get(name), "CAPABILITIES", None), "gpu", True))


def _apply_device(spec: dict, device: Any, framework_override: str | None, verbose: bool) -> None:
    """Put ``--device`` (or a CPU fallback for a CPU-only ``--framework``) into the executor's kwargs."""
    from d5.devices import CPUDevice, best_device
    from d5.frameworks import reference

    executor = spec.get("executor", reference.from_model)
    framework = _framework_name(executor)
    kwargs = dict(spec.get("executor_kwargs", {}))
    if device is not None:
        if not _takes_keyword(executor, "device"):
            raise RecipeError(f"--device: the executor {getattr(executor, '__name__', executor)} takes no 'device' "
                              "keyword, so the device cannot be set; give the recipe an executor factory that "
                              "takes device= (e.g. d5.frameworks.pytorch.from_model) or drop --device")
        if device == "best":
            device = best_device(framework)
        if device.is_gpu and not _framework_runs_on_gpu(framework):
            raise RecipeError(f"--device {device!r}: framework {framework!r} runs on the CPU only; use --device cpu "
                              "or a framework with GPU support (--framework pytorch)")
        kwargs["device"] = device
    elif framework_override and getattr(kwargs.get("device"), "is_gpu", False) \
            and not _framework_runs_on_gpu(framework):
        if verbose:
            print(f"note: --framework {framework_override} runs on the CPU only; using CPUDevice() instead of "
                  f"the recipe's {kwargs['device']!r}")
        kwargs["device"] = CPUDevice()
    if kwargs:
        spec["executor_kwargs"] = kwargs


def _call(spec: dict, name: str, default: Any, *leading: Any, extra: Mapping[str, Any] | None = None) -> Any:
    component = spec.get(name, default)
    args = tuple(spec.get(f"{name}_args", ()))
    kwargs = {**(extra or {}), **dict(spec.get(f"{name}_kwargs", {}))}
    if not callable(component):
        raise RecipeError(f"component {name!r} must be callable (a class or function), got {component!r}")
    try:
        return component(*leading, *args, **kwargs)
    except TypeError as err:
        raise RecipeError(f"could not build component {name!r} from {getattr(component, '__name__', component)}"
                          f"(args={args}, kwargs={kwargs}): {err}") from None


def _accepts(fn: Callable, parameter: str) -> bool:
    try:
        return parameter in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def _build_model(spec: dict, seed: int):
    import d5.models
    from d5.network.graph import Network

    model = spec.get("model")
    if model is None:
        raise RecipeError("a recipe needs a 'model' (a zoo name such as 'lenet5', a builder function or a d5.Network)")
    if isinstance(model, Network):
        return model
    if isinstance(model, str):
        if model not in d5.models.MODELS:
            raise RecipeError(f"unknown model {model!r}; the zoo has {sorted(d5.models.MODELS)}")
        model = d5.models.MODELS[model]
    extra = {"seed": seed} if _accepts(model, "seed") and "seed" not in spec.get("model_kwargs", {}) else {}
    network = _call({**spec, "model": model}, "model", None, extra=extra)
    if not isinstance(network, Network):
        raise RecipeError(f"the 'model' builder {getattr(model, '__name__', model)} must return a d5.Network, got "
                          f"{type(network).__name__}")
    return network


def _build_datasets(spec: dict, subset: int | None):
    import d5.datasets
    from d5.training.dataset import NumpyDataset

    dataset = spec.get("dataset")
    if dataset is None:
        raise RecipeError("a recipe needs a 'dataset' (a name in d5.datasets such as 'fashion_mnist', or a function)")
    if isinstance(dataset, str):
        pair = d5.datasets.load(dataset, *spec.get("dataset_args", ()), **spec.get("dataset_kwargs", {}))
    else:
        pair = _call(spec, "dataset", None)
    if not (isinstance(pair, (tuple, list)) and len(pair) == 2 and all(_is_dataset(ds) for ds in pair)):
        raise RecipeError(f"the 'dataset' component must give a (train, test) pair of d5 Datasets (e.g. "
                          f"NumpyDataset), got {_describe(pair)}")
    train, test = pair
    if subset is not None:
        def head(ds, n):
            batch = ds[np.arange(min(n, len(ds)))]
            return NumpyDataset(batch[ds.input_node], batch[ds.label_node], ds.input_node, ds.label_node)
        train, test = head(train, subset), head(test, subset)
    return train, test


def _is_dataset(value: Any) -> bool:
    return hasattr(value, "__len__") and hasattr(value, "__getitem__") and not isinstance(value, (str, bytes))


def _describe(value: Any) -> str:
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {len(value)} ({', '.join(type(v).__name__ for v in value[:4])})"
    return f"{type(value).__name__} {value!r}"[:120]


def _framework_components(spec: dict, framework: str) -> None:
    """--framework NAME: use that framework's executor and its optimizer of the same class name."""
    import d5.frameworks

    module = d5.frameworks.get(framework)
    spec["executor"] = module.from_model
    # The recipe's executor keywords (device, ...) stay; refuse now, not after loading the data, any that
    # the new framework's from_model does not take.
    for key in spec.get("executor_kwargs", {}):
        if not _takes_keyword(module.from_model, key):
            raise RecipeError(f"--framework {framework}: its from_model takes no {key!r}, which the recipe's "
                              f"executor_kwargs set; choose another framework or remove {key!r} from the recipe")
    optimizer = spec.get("optimizer")
    if optimizer is not None and not isinstance(optimizer, str):  # a name is looked up by _resolve_names
        name = getattr(optimizer, "__name__", repr(optimizer))
        native = getattr(module, name, None) if name.endswith("Optimizer") or name == "GradientDescent" else None
        if native is None:
            raise RecipeError(f"framework {framework!r} has no optimizer named {name!r}; it has "
                              f"{', '.join(_optimizer_names(module))}")
        spec["optimizer"] = native


def _optimizer_names(module: Any) -> list[str]:
    """The optimizer classes a framework package exports (the reference's names, in every framework)."""
    return sorted(name for name in getattr(module, "__all__", ()) if name.endswith("Optimizer")
                  or name == "GradientDescent")


def _resolve_names(spec: dict) -> None:
    """Check the components given by name -- dataset, model, optimizer -- before anything is built (a dataset
    may take minutes to load): an unknown name is a RecipeError listing the valid ones. An optimizer name
    (``'MomentumOptimizer'``) becomes that class of the executor's framework."""
    import d5.datasets
    import d5.frameworks
    import d5.models

    dataset = spec.get("dataset")
    if isinstance(dataset, str) and dataset.strip().lower().replace("-", "_") not in d5.datasets.DATASETS:
        raise RecipeError(f"unknown dataset {dataset!r}; d5.datasets has {', '.join(sorted(d5.datasets.DATASETS))} "
                          "(or give a function that returns a (train, test) pair of datasets)")
    model = spec.get("model")
    if isinstance(model, str) and model not in d5.models.MODELS:
        raise RecipeError(f"unknown model {model!r}; the zoo has {', '.join(sorted(d5.models.MODELS))} (or give a "
                          "builder function or a d5.Network)")
    optimizer = spec.get("optimizer")
    if isinstance(optimizer, str):
        framework = _framework_name(spec.get("executor")) or "reference"
        module = d5.frameworks.get(framework)
        if optimizer not in _optimizer_names(module):
            raise RecipeError(f"unknown optimizer {optimizer!r}; framework {framework!r} has "
                              f"{', '.join(_optimizer_names(module))} (or give an optimizer class)")
        spec["optimizer"] = getattr(module, optimizer)


class ScaledRate:
    """``fn(index) * factor``: a recipe's learning-rate schedule under ``--lr`` (same shape, new base rate).

    >>> ScaledRate(lambda epoch: 0.1 * 0.5 ** epoch, 0.5)(1)
    0.025
    """

    def __init__(self, fn: Callable[[int], float], factor: float) -> None:
        self.fn, self.factor = fn, float(factor)

    def __call__(self, index: int) -> float:
        return self.fn(index) * self.factor


def _apply_lr(spec: dict, lr: float) -> None:
    """``--lr``: put ``lr`` where the optimizer takes its learning rate and scale the recipe's schedules."""
    from d5.training.events import LearningRateSchedule
    from d5.training.optimizers import GradientDescent

    optimizer = spec.get("optimizer", GradientDescent)
    name = getattr(optimizer, "__name__", repr(optimizer))
    try:
        parameters = list(inspect.signature(optimizer).parameters.values())
    except (TypeError, ValueError):
        parameters = []
    keyword = next((p.name for p in parameters if p.name in ("lr", "learning_rate")), None)
    if keyword is None:
        raise RecipeError(f"--lr: the optimizer {name} takes no 'lr' (or 'learning_rate') argument, so its learning "
                          "rate cannot be set; drop --lr or give the recipe an optimizer that takes one")
    positional = [p.name for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    # run_recipe passes the executor first, so the recipe's optimizer_args start at the second parameter.
    index = positional.index(keyword) - 1 if keyword in positional else -1
    args, kwargs = list(spec.get("optimizer_args", ())), dict(spec.get("optimizer_kwargs", {}))
    if keyword in kwargs:
        old, kwargs[keyword] = kwargs[keyword], lr
    elif 0 <= index < len(args):
        old, args[index] = args[index], lr
    else:
        default = next(p.default for p in parameters if p.name == keyword)
        old, kwargs[keyword] = (None if default is inspect.Parameter.empty else default), lr
    if callable(old) and not isinstance(old, numbers.Real):
        raise RecipeError(f"--lr: the recipe's learning rate is a schedule ({old!r}), whose base rate --lr cannot "
                          "know; change the schedule in the recipe instead, or drop --lr")
    if "optimizer_args" in spec or args:
        spec["optimizer_args"] = tuple(args)
    if kwargs:
        spec["optimizer_kwargs"] = kwargs
    events = list(spec.get("events", ()))
    for position, event in enumerate(events):
        if isinstance(event, LearningRateSchedule):
            if not (isinstance(old, numbers.Real) and not isinstance(old, bool) and old > 0):
                raise RecipeError(f"--lr: the recipe's LearningRateSchedule is relative to the optimizer's base "
                                  f"learning rate, which is {old!r} here, so it cannot be scaled; drop --lr or "
                                  "give the optimizer its learning rate in optimizer_args/optimizer_kwargs")
            # A new event (the recipe's own object stays as it is), same shape, new base rate.
            events[position] = LearningRateSchedule(ScaledRate(event.fn, lr / float(old)), per=event.per)
    if "events" in spec:
        spec["events"] = events


@contextlib.contextmanager
def thread_budget(threads: int | None, framework: str | None) -> Iterator[None]:
    """Run with ``threads`` threads in every BLAS/OpenMP pool loaded (threadpoolctl), in the reference
    framework's kernels (``framework == 'reference'``) and in PyTorch (when imported); restore them after.

    >>> from threadpoolctl import threadpool_info
    >>> with thread_budget(1, None):
    ...     {pool["num_threads"] for pool in threadpool_info()}
    {1}
    """
    if threads is None:
        yield
        return
    from threadpoolctl import threadpool_limits

    restore: list[Callable[[], Any]] = []
    limits = threadpool_limits(limits=threads)
    restore.append(limits.restore_original_limits)
    if framework == "reference":
        from d5.frameworks.reference import kernels

        if kernels.native_available():
            previous = kernels.set_num_threads(threads)
            restore.append(lambda: kernels.set_num_threads(previous))
    if "torch" in sys.modules:  # only a run that uses torch has imported it; never import it here
        torch = sys.modules["torch"]
        previous_torch = torch.get_num_threads()
        torch.set_num_threads(threads)
        restore.append(lambda: torch.set_num_threads(previous_torch))
    try:
        yield
    finally:
        for undo in reversed(restore):
            undo()


def _resolved(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The spec with run_recipe's defaults filled in: every component the run uses."""
    from d5.frameworks import reference
    from d5.training.optimizers import GradientDescent
    from d5.training.sampler import OrderedSampler, ShuffleSampler

    defaults = {"train_sampler": ShuffleSampler, "validation_sampler": OrderedSampler, "batch_size": 64,
                "epochs": 1, "executor": reference.from_model, "optimizer": GradientDescent, "events": [], "seed": 0}
    return {**defaults, **spec}


def run_recipe(fixed: Mapping[str, Any], mutable: Mapping[str, Any], metrics: Sequence[tuple[Any, float | None]],
               argv: Sequence[str] | None = None, progress: bool = True, verbose: bool = True) -> bool:
    """Run the recipe; True when every metric meets its threshold (None thresholds are reported only).

    ``argv`` holds the overrides. None means the command line (``sys.argv[1:]``) when a recipe script is the
    program being run (:func:`d5.recipe_record.is_recipe_script`), and no overrides when a test, a notebook or
    another module calls: their command line holds their own flags, which the recipe would refuse.

    Called by a recipe script, a d5 error ends the program as ``d5 run`` ends it -- one ``d5: error: ...`` line
    on stderr (``d5: error: rank R/P: ...`` on several ranks), exit status 2, no traceback
    (:func:`d5.cli.report_error`); called by a program, it is raised. On several ranks (``--scheme``, see
    :mod:`d5.recipe_distributed`) every rank returns rank 0's verdict, and a d5 error during training ends the job.
    """
    from d5.recipe_distributed import RankContext
    from d5.recipe_record import is_recipe_script

    caller = sys._getframe(1).f_globals  # the recipe script's module, when a script called us
    script = is_recipe_script(caller)
    context = RankContext()
    try:
        passed = _run_recipe(fixed, mutable, metrics, argv if script or argv is not None else [], progress, verbose,
                             caller, context)
    except D5Error as err:
        labelled = context.label(err)
        context.write_status(2, error=labelled)
        if not script:
            raise labelled if labelled is not err else err
        from d5.cli import report_error

        status = report_error(labelled)
        context.abort_if_collective(status)  # other ranks may be waiting in a collective: end the job
        sys.exit(status)
    except Exception as err:
        context.write_status(1, error=err)
        raise  # on several ranks the fault handlers' excepthook ends the job, naming the rank
    context.write_status(0 if passed else 1, passed=passed)
    return passed


def _configure(fixed: Mapping[str, Any], mutable: Mapping[str, Any], metrics: Sequence[tuple[Any, float | None]],
               argv: Sequence[str] | None, verbose: bool, caller: Mapping[str, Any], context: Any) -> SimpleNamespace:
    """Everything that needs no component built: the spec with the overrides applied, the resolved components
    and their description, the distributed checks that depend only on the configuration."""
    from d5 import recipe_record

    spec = _merge(fixed, mutable)
    origin = {**{_canonical(k): "fixed" for k in fixed}, **{_canonical(k): "mutable" for k in mutable}}
    overrides = parse_overrides(argv)
    modified = modifications(overrides)
    for key in ("epochs", "batch_size", "seed"):
        if modified.get(key) is not None:
            spec[key] = modified[key]
            origin[key] = "override"
    if overrides.framework:
        _framework_components(spec, overrides.framework)
    _apply_device(spec, overrides.device, overrides.framework, verbose)
    _resolve_names(spec)
    if overrides.lr is not None:
        _apply_lr(spec, overrides.lr)
    _check_metrics(metrics)
    resolved = _resolved(spec)
    baseline = None
    if overrides.scheme is not None:
        from d5 import recipe_distributed

        recipe_distributed.scheme_class(overrides.scheme)
        recipe_distributed.check_optimizer(resolved["optimizer"], overrides.framework, overrides.scheme)
        recipe_distributed.check_train_sampler(resolved["train_sampler"])
        if overrides.baseline_throughput is not None:
            baseline = {"throughput": overrides.baseline_throughput, "source": "--baseline-throughput", "notes": []}
        elif overrides.baseline is not None and context.reporting:  # only rank 0 reports, so only it reads it
            source = recipe_record.recipe_source(caller)
            baseline = recipe_record.baseline_throughput(overrides.baseline, source and source["name"])
            batch = int(spec.get("batch_size", 64))
            if baseline.get("batch_size") not in (None, batch):
                baseline["notes"].append(f"the baseline ran with batch size {baseline['batch_size']}, this run with "
                                         f"{batch} per rank: the speedup mixes batch sizes")
    components = {key: recipe_record.describe(value) for key, value in sorted(resolved.items())}
    replay_of = recipe_record.check_expected(components)  # a replay must resolve to the recorded components
    # Described now: after the run the metrics hold its results, which are not configuration.
    metric_configuration = [{"name": metric.name, "threshold": threshold, "metric": recipe_record.describe(metric)}
                            for metric, threshold in metrics]
    # Checked by _check_spec; int() turns numpy integers into the ints Trainer and the samplers expect.
    return SimpleNamespace(
        spec=spec, origin=origin, overrides=overrides, modified=modified, resolved=resolved, components=components,
        replay_of=replay_of, metric_configuration=metric_configuration, baseline=baseline,
        seed=int(spec.get("seed", 0)), epochs=int(spec.get("epochs", 1)), batch_size=int(spec.get("batch_size", 64)))


def _fingerprint(plan: SimpleNamespace, caller: Mapping[str, Any]) -> dict[str, str]:
    """What must be the same on every rank: the script, each resolved component, the metrics, the overrides."""
    import d5
    from d5 import recipe_record

    source = recipe_record.recipe_source(caller)
    items = {"recipe script": source["sha256"] if source else str(caller.get("__name__")),
             "overrides": " ".join(overrides_to_argv(plan.overrides)), "d5 version": d5.__version__,
             "metrics": json.dumps(plan.metric_configuration, sort_keys=True, default=str)}
    items.update({f"component {key}": json.dumps(value, sort_keys=True, default=str)
                  for key, value in plan.components.items()})
    return items


def _start_distributed(plan: SimpleNamespace | None, error: BaseException | None, caller: Mapping[str, Any],
                       context: Any, verbose: bool) -> None:
    """Open the network, meet every rank at the first gate, check that they run the same recipe and that the
    scheme can use the world size (each a d5 error on every rank)."""
    from d5 import recipe_distributed

    scheme = None if plan is None else plan.overrides.scheme
    context.open(scheme, pending=error)
    recipe_distributed.gate(context.comm, error, "configure the recipe")
    recipe_distributed.check_same_recipe(context.comm, _fingerprint(plan, caller), overrides_to_argv(plan.overrides))
    recipe_distributed.check_world_size(scheme, context.size)
    if verbose:
        compression = plan.overrides.compression or "none"
        others = "; rank 0 reports, the other ranks are quiet" if context.size > 1 else ""
        print(f"d5: distributed run on {context.size} rank{'s' if context.size > 1 else ''}: --scheme {scheme}, "
              f"--compression {compression}, --batch-size {plan.batch_size} per rank{others}", flush=True)


def _build(plan: SimpleNamespace, metrics: Sequence[tuple[Any, float | None]], progress: bool, context: Any
           ) -> SimpleNamespace:
    """The components, the (distributed) optimizer and sampler, and the Trainer."""
    from d5.frameworks import reference
    from d5.training.optimizers import GradientDescent
    from d5.training.sampler import OrderedSampler, ShuffleSampler
    from d5.training.trainer import Trainer

    spec, overrides, seed, batch_size = plan.spec, plan.overrides, plan.seed, plan.batch_size
    train_set, test_set = _build_datasets(spec, overrides.subset)
    network = _build_model(spec, seed)
    executor = _call(spec, "executor", reference.from_model, network)
    if not all(callable(getattr(executor, m, None)) for m in ("inference", "inference_and_backprop")):
        raise RecipeError(f"the 'executor' component must return a d5.GraphExecutor (e.g. "
                          f"d5.frameworks.reference.from_model(network)), got {_describe(executor)}")
    optimizer = _call(spec, "optimizer", GradientDescent, executor)
    if not callable(getattr(optimizer, "step", None)):
        raise RecipeError(f"the 'optimizer' component must build a d5 Optimizer (with step(inputs)), got "
                          f"{_describe(optimizer)}")
    initial_lr = _learning_rate(optimizer)  # before a schedule changes it
    events = list(spec.get("events", ())) + [metric for metric, _ in metrics]
    extra_events: list = []
    if overrides.scheme is not None:
        from d5 import recipe_distributed

        optimizer = recipe_distributed.wrap_optimizer(optimizer, context.comm, overrides.scheme,
                                                      overrides.compression, seed)
        train_sampler = recipe_distributed.distributed_sampler(spec, train_set, batch_size, seed, optimizer)
        extra_events = recipe_distributed.scheme_events(optimizer)
    else:
        sampler_cls = spec.get("train_sampler", ShuffleSampler)
        sampler_extra = {"seed": seed} if _accepts(sampler_cls, "seed") else {}
        train_sampler = _call(spec, "train_sampler", ShuffleSampler, train_set, batch_size, extra=sampler_extra)
    validation_sampler = _call(spec, "validation_sampler", OrderedSampler, test_set, batch_size)
    if overrides.checkpoint is not None:
        from d5.training.checkpoint import Checkpoint

        events.append(Checkpoint(overrides.checkpoint, every_steps=overrides.checkpoint_every))
    trainer = Trainer(train_sampler, validation_sampler, executor, optimizer, events=extra_events + events,
                      progress=progress)
    return SimpleNamespace(executor=executor, optimizer=optimizer, trainer=trainer, initial_lr=initial_lr,
                           train_sampler=train_sampler, throughput=extra_events[-1] if extra_events else None)


def _run_recipe(fixed: Mapping[str, Any], mutable: Mapping[str, Any], metrics: Sequence[tuple[Any, float | None]],
                argv: Sequence[str] | None, progress: bool, verbose: bool, caller: Mapping[str, Any],
                context: Any) -> bool:
    from d5 import recipe_distributed, recipe_record

    started = time.perf_counter()
    verbose, progress = verbose and context.reporting, progress and context.reporting  # other ranks are quiet
    try:
        plan, error = _configure(fixed, mutable, metrics, argv, verbose, caller, context), None
    except Exception as err:  # noqa: BLE001 -- under mpiexec every rank must hear of it (the first gate)
        if not context.launched:
            raise
        plan, error = None, err
    distributed = context.launched or plan.overrides.scheme is not None
    if distributed:
        _start_distributed(plan, error, caller, context, verbose)
    try:
        built, error = _build(plan, metrics, progress, context), None
    except Exception as err:  # noqa: BLE001 -- the second gate: a rank that could not build stops them all
        if not distributed:
            raise
        built, error = None, err
    if distributed:
        recipe_distributed.gate(context.comm, error, "build the recipe's components")
        context.collective = True  # from here a failing rank ends the job: the others may wait in a collective
    overrides, resolved, trainer = plan.overrides, plan.resolved, built.trainer
    if overrides.resume:
        _resume(overrides.checkpoint, built.executor, trainer, verbose)
    before = context.comm.stats() if distributed else None
    with thread_budget(overrides.threads, _framework_name(resolved["executor"])):
        pools = _thread_pools()  # what the run really used, measured inside the budget
        stats = trainer.run(plan.epochs)

    rows = [_metric_row(metric, threshold) for metric, threshold in metrics]
    passed = all(row["met"] for row in rows)
    scaling = None
    if distributed:
        scaling, passed = recipe_distributed.gather_figures(
            context.comm, built.optimizer, built.throughput, before, passed, built.train_sampler, overrides.scheme,
            overrides.compression, plan.baseline)
        context.close()  # the last collective: from here each rank's errors are its own
        if not context.reporting:
            return passed
    if verbose:
        if scaling is not None:
            print("\n".join(recipe_distributed.summary_lines(scaling)))
        _print_table(rows, plan.modified)
    if overrides.json:
        from d5.bench.environment import capture_environment
        from d5.bench.results import write_result

        seed, spec = plan.seed, plan.spec
        environment = capture_environment(seeds={"recipe": seed})
        record = {
            "recipe_format": recipe_record.RECIPE_FORMAT, "passed": passed, "overrides": plan.modified,
            "argv": overrides_to_argv(overrides), "training": stats.as_dict(), "seed": seed, "epochs": plan.epochs,
            "batch_size": plan.batch_size, "device": repr(spec.get("executor_kwargs", {}).get("device")),
            "framework": _framework_name(resolved["executor"]), "lr": built.initial_lr,
            "subset": overrides.subset, "threads": overrides.threads, "thread_pools": pools,
            "seeds": {"recipe": seed}, "git": _git_record(environment.get("git")), "replay_of": plan.replay_of,
            "recipe_seconds": time.perf_counter() - started,
            "recipe": {"source": recipe_record.recipe_source(caller), "caller": caller.get("__name__"),
                       "components": plan.components,
                       "origin": {key: plan.origin.get(key, "default") for key in resolved},
                       "metrics": plan.metric_configuration},
        }
        if scaling is not None:
            record["distributed"] = scaling
        write_result(overrides.json, "recipe", {row["metric"]: row for row in rows}, environment=environment,
                     extra=record)
    return passed


def _resume(directory: str, executor: Any, trainer: Any, verbose: bool) -> None:
    """``--resume``: the newest checkpoint in ``directory`` back into the run (a fresh start when there is none)."""
    from d5.training.checkpoint import resume

    step = resume(directory, executor, trainer)
    if verbose:
        print(f"resuming from the checkpoint at step {step} in {directory}" if step is not None else
              f"no checkpoint in {directory} yet: starting afresh", flush=True)


def _metric_row(metric: Any, threshold: float | None) -> dict:
    value = metric.result()
    row = {"metric": metric.name, "value": value, "unit": metric.unit, "threshold": threshold,
           "met": True if threshold is None else bool(metric.is_met(threshold)), "detail": metric.describe(),
           "higher_is_better": bool(metric.higher_is_better)}
    summary = getattr(type(metric), "summary", None)
    if isinstance(summary, property) and getattr(metric, "step_times", None):
        row["step_time"] = metric.summary.as_dict()  # WallclockTime: median and CI of the step times
    if callable(getattr(metric, "details", None)):
        details = metric.details()  # percentiles, medians with CIs, resource rows, per-epoch histories
        if details:
            row["result"] = details
    return row


def _learning_rate(optimizer: Any) -> float | None:
    lr = getattr(optimizer, "lr", None)
    return float(lr) if isinstance(lr, numbers.Real) and not isinstance(lr, bool) else None


def _git_record(git: Mapping[str, Any] | None) -> dict | None:
    """The environment's git state plus the digest of its uncommitted changes (what a commit cannot say)."""
    from d5.recipe_record import git_diff_digest

    if not git:
        return None
    return {**git, "diff_sha256": git_diff_digest(git.get("directory")) if git.get("dirty") else None}


def _thread_pools() -> dict | None:
    from d5.bench.environment import thread_pools

    return thread_pools()


def _check_metrics(metrics: Any) -> None:
    from d5.training.metrics import TrainingMetric

    if not isinstance(metrics, (list, tuple)):
        raise RecipeError(f"METRICS must be a list of (d5 TrainingMetric, threshold) pairs, got {type(metrics).__name__}")
    for entry in metrics:
        if not (isinstance(entry, (tuple, list)) and len(entry) == 2 and isinstance(entry[0], TrainingMetric)):
            raise RecipeError(f"METRICS entries are (d5 TrainingMetric, threshold) pairs; got {entry!r}")
        metric, threshold = entry
        if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, numbers.Real)):
            raise RecipeError(f"the threshold of {metric.name} must be a number or None (report only), got {threshold!r}")


def _print_table(rows: list[dict], modified: dict) -> None:
    from d5.bench.report import markdown_table

    table = [{"metric": r["metric"], "value": f"{r['value']:.4g} {r['unit']}".strip(),
              "acceptable": "-" if r["threshold"] is None else f"{r['threshold']:g}",
              "met": "yes" if r["met"] else "NO", "detail": r["detail"]} for r in rows]
    if table:
        print(markdown_table(table))
    print(verdict(rows, modified))


def verdict(rows: Sequence[Mapping[str, Any]], modified: Mapping[str, Any]) -> str:
    """The line a recipe run ends with. PASSED or FAILED judge the benchmark as the recipe defines it; a run
    with overrides that change what it computes (a smoke test such as ``--epochs 1 --subset 500``, an
    experiment with ``--lr``) is MODIFIED -- not a benchmark result, so neither passed nor failed -- and the
    line says which metrics it missed, since that still sets its exit status (1; 0 when it met them all).

    >>> verdict([{"metric": "TestAccuracy", "met": False}], {})
    'recipe FAILED: missed TestAccuracy'
    >>> verdict([{"metric": "TestAccuracy", "met": False}], {"epochs": 1, "subset": 500})  # doctest: +ELLIPSIS
    'recipe MODIFIED by --epochs 1 --subset 500: ran to the end, not a valid benchmark result; ... (exit status 1)'
    """
    missed = [row["metric"] for row in rows if not row["met"]]
    outcome = f"missed {', '.join(missed)}" if missed else "every metric met"
    if not modified:
        return f"recipe FAILED: {outcome}" if missed else "recipe PASSED: every metric met"
    flags = " ".join(f"{OVERRIDES_BY_NAME[name].flag} {OVERRIDES_BY_NAME[name].to_text(value)}"
                     for name, value in modified.items())
    # Recipe scripts end in `run_recipe(...) or exit(1)`: the exit status follows the metrics alone.
    return (f"recipe MODIFIED by {flags}: ran to the end, not a valid benchmark result; {outcome} "
            f"(exit status {1 if missed else 0})")
