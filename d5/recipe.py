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

A recipe script also takes command-line overrides for smoke tests: ``--epochs``, ``--batch-size``,
``--framework``, ``--subset N`` (first N training and test examples), ``--seed``, ``--json PATH``.
A run with overrides is reported as modified.

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
import sys
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from d5.errors import RecipeError

COMPONENTS = ("model", "dataset", "train_sampler", "validation_sampler", "batch_size", "epochs", "executor",
              "optimizer", "events", "seed")
_SUFFIXES = ("_args", "_kwargs", "_kwarg")


def _canonical(key: str) -> str:
    """'model_kwarg' and 'model_kwargs' name the same component part."""
    return key + "s" if key.endswith("_kwarg") else key


def _merge(fixed: Mapping[str, Any], mutable: Mapping[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    for source, table in (("FIXED", fixed), ("MUTABLE", mutable)):
        for key, value in table.items():
            base = next((key[: -len(s)] for s in _SUFFIXES if key.endswith(s)), key)
            if base not in COMPONENTS:
                raise RecipeError(f"{source} has unknown component {key!r}; known components: {', '.join(COMPONENTS)} "
                                  f"(each also with _args and _kwargs)")
            canonical = _canonical(key)
            if canonical in spec:
                raise RecipeError(f"component {key!r} appears in both FIXED and MUTABLE (or twice); "
                                  "a recipe component is either fixed or mutable")
            spec[canonical] = value
    return spec


def _parse_overrides(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Run a d5 recipe.", add_help=True)
    parser.add_argument("--epochs", type=int)
    parser.add_argument("--batch-size", type=int)
    parser.add_argument("--framework", help="reference, pytorch, tensorflow or mxnet")
    parser.add_argument("--subset", type=int, metavar="N", help="use only the first N training and test examples")
    parser.add_argument("--seed", type=int)
    parser.add_argument("--json", metavar="PATH", help="write the results and environment as JSON")
    # parse_known_args: a recipe imported by another program (pytest, a notebook) ignores foreign flags.
    args, _ = parser.parse_known_args(list(sys.argv[1:] if argv is None else argv))
    for name in ("epochs", "batch_size", "subset"):
        value = getattr(args, name)
        if value is not None and value <= 0:
            raise RecipeError(f"--{name.replace('_', '-')} must be positive, got {value}")
    return args


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
    return _call({**spec, "model": model}, "model", None, extra=extra)


def _build_datasets(spec: dict, subset: int | None):
    import d5.datasets
    from d5.training.dataset import NumpyDataset

    dataset = spec.get("dataset")
    if dataset is None:
        raise RecipeError("a recipe needs a 'dataset' (a name in d5.datasets such as 'fashion_mnist', or a function)")
    if isinstance(dataset, str):
        train, test = d5.datasets.load(dataset, *spec.get("dataset_args", ()), **spec.get("dataset_kwargs", {}))
    else:
        train, test = _call(spec, "dataset", None)
    if subset is not None:
        def head(ds, n):
            batch = ds[np.arange(min(n, len(ds)))]
            return NumpyDataset(batch[ds.input_node], batch[ds.label_node], ds.input_node, ds.label_node)
        train, test = head(train, subset), head(test, subset)
    return train, test


def _framework_components(spec: dict, framework: str) -> None:
    """--framework NAME: use that framework's executor and its optimizer of the same class name."""
    import d5.frameworks

    module = d5.frameworks.get(framework)
    spec["executor"] = module.from_model
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
    from d5.training.metrics import TrainingMetric
    from d5.training.optimizers import GradientDescent
    from d5.training.sampler import OrderedSampler, ShuffleSampler
    from d5.training.trainer import Trainer

    spec = _merge(fixed, mutable)
    overrides = _parse_overrides(argv)
    modified = {k: v for k, v in vars(overrides).items() if v is not None and k != "json"}
    for key in ("epochs", "batch_size", "seed"):
        if modified.get(key) is not None:
            spec[key] = modified[key]
    if overrides.framework:
        _framework_components(spec, overrides.framework)
    for metric, _ in metrics:
        if not isinstance(metric, TrainingMetric):
            raise RecipeError(f"METRICS entries are (d5 TrainingMetric, threshold) pairs; got {metric!r}")

    seed = int(spec.get("seed", 0))
    epochs = int(spec.get("epochs", 1))
    batch_size = int(spec.get("batch_size", 64))
    train_set, test_set = _build_datasets(spec, overrides.subset)
    network = _build_model(spec, seed)
    executor = _call(spec, "executor", reference.from_model, network)
    optimizer = _call(spec, "optimizer", GradientDescent, executor)
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
                            "seed": seed, "epochs": epochs, "batch_size": batch_size})
    return passed


def _print_table(rows: list[dict], passed: bool, modified: dict) -> None:
    from d5.bench.report import markdown_table

    table = [{"metric": r["metric"], "value": f"{r['value']:.4g} {r['unit']}".strip(),
              "acceptable": "-" if r["threshold"] is None else f"{r['threshold']:g}",
              "met": "yes" if r["met"] else "NO", "detail": r["detail"]} for r in rows]
    if table:
        print(markdown_table(table))
    note = f" (modified by overrides {modified}: not a valid benchmark result)" if modified else ""
    print(f"recipe {'PASSED' if passed else 'FAILED'}{note}")
