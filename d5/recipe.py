"""Recipes: a benchmark defined as fixed components + mutable components + acceptable metrics.

``run_recipe(FIXED, MUTABLE, METRICS)`` builds the dataset, model, executor, samplers and optimizer
the components describe, trains, prints a metrics table and returns True only when every metric meets
its threshold. FIXED and MUTABLE must not overlap. Every component ``<name>`` accepts ``<name>_args``
and ``<name>_kwargs`` (also the seeds' spelling ``<name>_kwarg``).

Components (defaults in brackets): ``model`` (zoo name, builder function or Network), ``dataset`` (name
in ``d5.datasets`` or a function returning ``(train, test)`` datasets), ``train_sampler``
[ShuffleSampler], ``validation_sampler`` [OrderedSampler], ``batch_size`` [64], ``epochs`` [1],
``executor`` [d5.frameworks.reference.from_model], ``optimizer`` [GradientDescent], ``events`` [()],
``seed`` [0].

Samplers take their data augmentation as a keyword: ``'train_sampler_kwargs': dict(transform=d5.Compose(
[d5.RandomCrop(32, padding=4), d5.RandomHorizontalFlip()]))`` (see :mod:`d5.training.transforms`); the
train sampler also gets the recipe's ``seed``, which seeds its shuffling and its transform.

A recipe script also takes command-line overrides for smoke tests: ``--epochs``, ``--batch-size``,
``--framework NAME`` (that framework's ``from_model`` and its optimizer of the same class name; the
executor's other keywords, such as ``device``, are kept), ``--subset N`` (first N training and test
examples), ``--seed``, ``--json PATH``. A run with these overrides is reported as modified.

``--device cpu|gpu|gpu:N|best`` sets the executor's ``device`` keyword (replacing any ``device`` in
``executor_kwargs``); ``best`` is :func:`d5.best_device` for the executor's framework. It refuses an
executor that takes no ``device``. The device is a mutable component, so ``--device`` alone does not mark
the run as modified; the JSON result records it. When ``--framework`` switches to a CPU-only framework
(``reference``) and the recipe's device is a GPU (e.g. from ``d5.best_device()`` on a GPU machine), the run
uses the CPU and says so; an explicit ``--device gpu`` with such a framework is a RecipeError.

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

import argparse
import inspect
import numbers
import sys
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from d5.errors import RecipeError
from d5.io_utils import check_writable

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


def _parse_overrides(argv: Sequence[str] | None) -> argparse.Namespace:
    # exit_on_error=False: a bad value (--epochs two) becomes a RecipeError, not a SystemExit mid-program.
    parser = argparse.ArgumentParser(description="Run a d5 recipe.", add_help=True, exit_on_error=False)
    parser.add_argument("--epochs", type=int)
    parser.add_argument("--batch-size", type=int)
    parser.add_argument("--framework", help="reference, pytorch, tensorflow or mxnet")
    parser.add_argument("--subset", type=int, metavar="N", help="use only the first N training and test examples")
    parser.add_argument("--seed", type=int)
    parser.add_argument("--device", type=_device_argument, metavar="{cpu,gpu,gpu:N,best}",
                        help="the executor's device (best: a GPU if the executor's framework can use one)")
    parser.add_argument("--json", metavar="PATH", help="write the results and environment as JSON")
    # parse_known_args: a recipe imported by another program (pytest, a notebook) ignores foreign flags.
    try:
        args, _ = parser.parse_known_args(list(sys.argv[1:] if argv is None else argv))
    except argparse.ArgumentError as err:
        raise RecipeError(f"{err}; see --help") from None
    for name, minimum in (("epochs", 1), ("batch_size", 1), ("subset", 1), ("seed", 0)):
        value = getattr(args, name)
        if value is not None and value < minimum:
            raise RecipeError(f"--{name.replace('_', '-')} must be {'positive' if minimum else '>= 0'}, got {value}")
    if args.json is not None:
        check_writable(args.json, "--json path")  # now, not after training: a bad path must not lose the results
    return args


def _parse_device(text: str):
    """'cpu' -> CPUDevice(), 'gpu' / 'gpu:N' (also 'cuda', 'cuda:N') -> GPUDevice(N), 'best' -> 'best'.

    >>> _parse_device('gpu:1'), _parse_device('CPU'), _parse_device('best')
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


def _device_argument(text: str):
    # argparse reports a type function's ValueError as "invalid value"; ArgumentTypeError keeps our message.
    try:
        return _parse_device(text)
    except RecipeError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


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
    if optimizer is not None:
        native = getattr(module, getattr(optimizer, "__name__", ""), None)
        if native is None:
            raise RecipeError(f"framework {framework!r} has no optimizer named {optimizer.__name__!r}")
        spec["optimizer"] = native


def run_recipe(fixed: Mapping[str, Any], mutable: Mapping[str, Any], metrics: Sequence[tuple[Any, float | None]],
               argv: Sequence[str] | None = None, progress: bool = True, verbose: bool = True) -> bool:
    """Run the recipe; True when every metric meets its threshold (None thresholds are reported only)."""
    from d5.frameworks import reference
    from d5.training.optimizers import GradientDescent
    from d5.training.sampler import OrderedSampler, ShuffleSampler
    from d5.training.trainer import Trainer

    spec = _merge(fixed, mutable)
    overrides = _parse_overrides(argv)
    # The device is a mutable component: choosing one does not change what the benchmark measures.
    modified = {k: v for k, v in vars(overrides).items() if v is not None and k not in ("json", "device")}
    for key in ("epochs", "batch_size", "seed"):
        if modified.get(key) is not None:
            spec[key] = modified[key]
    if overrides.framework:
        _framework_components(spec, overrides.framework)
    _apply_device(spec, overrides.device, overrides.framework, verbose)
    _check_metrics(metrics)

    # Checked by _check_spec; int() turns numpy integers into the ints Trainer and the samplers expect.
    seed, epochs, batch_size = int(spec.get("seed", 0)), int(spec.get("epochs", 1)), int(spec.get("batch_size", 64))
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
    sampler_cls = spec.get("train_sampler", ShuffleSampler)
    sampler_extra = {"seed": seed} if _accepts(sampler_cls, "seed") else {}
    train_sampler = _call(spec, "train_sampler", ShuffleSampler, train_set, batch_size, extra=sampler_extra)
    validation_sampler = _call(spec, "validation_sampler", OrderedSampler, test_set, batch_size)
    events = list(spec.get("events", ())) + [metric for metric, _ in metrics]

    trainer = Trainer(train_sampler, validation_sampler, executor, optimizer, events=events, progress=progress)
    stats = trainer.run(epochs)

    rows = []
    for metric, threshold in metrics:
        value = metric.result()
        met = True if threshold is None else bool(metric.is_met(threshold))
        rows.append({"metric": metric.name, "value": value, "unit": metric.unit,
                     "threshold": threshold, "met": met, "detail": metric.describe()})
    passed = all(row["met"] for row in rows)
    if verbose:
        _print_table(rows, passed, modified)
    if overrides.json:
        from d5.bench.results import write_result

        write_result(overrides.json, "recipe", {row["metric"]: row for row in rows},
                     extra={"passed": passed, "overrides": modified, "training": stats.as_dict(),
                            "seed": seed, "epochs": epochs, "batch_size": batch_size,
                            "device": repr(spec.get("executor_kwargs", {}).get("device"))})
    return passed


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


def _print_table(rows: list[dict], passed: bool, modified: dict) -> None:
    from d5.bench.report import markdown_table

    table = [{"metric": r["metric"], "value": f"{r['value']:.4g} {r['unit']}".strip(),
              "acceptable": "-" if r["threshold"] is None else f"{r['threshold']:g}",
              "met": "yes" if r["met"] else "NO", "detail": r["detail"]} for r in rows]
    if table:
        print(markdown_table(table))
    note = f" (modified by overrides {modified}: not a valid benchmark result)" if modified else ""
    print(f"recipe {'PASSED' if passed else 'FAILED'}{note}")
