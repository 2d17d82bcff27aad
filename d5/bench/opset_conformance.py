"""Old-opset conformance: ONNX's node test cases re-expressed at the older opsets (11 on) where an operator's
schema differs from its newest one, run on d5's reference framework and judged against onnxruntime.

d5 imports models at opsets 11 to the newest as they are, so every operator must follow the semantics of
the node's opset (Softmax flattened its input to 2-D before opset 13, and works along one axis from 13 on).
ONNX's own node cases are stamped with one opset each; this module takes the cases of every operator whose
schema changed after opset 11 and expresses each case at the opsets where an older schema applies:

* with ``onnx.version_converter`` when it converts the model (its adapters keep the node where the old
  schema can state it: Softmax 13 -> 12 only makes the axis explicit, so the model has the OLD semantics);
* where the converter fails (Hardmax has no adapter) or rewrites the node into other nodes, by stamping the
  same graph with the older opset, kept only when ``onnx.checker.check_model(full_check=True)`` accepts it.

A case that cannot be written at an older opset (the converter fails and the checker rejects the stamped
model: an attribute, input or type the old schema lacks) is *not expressible* there. onnxruntime (CPU)
computes the expected outputs at the older opset; combinations it does not implement are skipped.

    python -m d5.bench.opset_conformance [--operators Softmax Hardmax] [--all-opsets]
"""
from __future__ import annotations

import argparse
import collections
import dataclasses
import functools
import time
import warnings
from typing import Any, Iterable

import numpy as np

from d5.bench.conformance import load_case, value_matches, exclusion_reason

#: The oldest opset d5 imports as it is.
OLDEST_OPSET = 11

# Outcomes of one (case, opset) run.
PASS, FAIL, NOT_EXPRESSIBLE, ORT_SKIP, D5_UNSUPPORTED = "pass", "fail", "not expressible", "onnxruntime skip", \
    "d5 unsupported"


@dataclasses.dataclass
class VariantResult:
    operator: str
    opset: int
    case: str
    how: str  # original | converted | stamped | "" (not expressible)
    status: str
    reason: str = ""
    max_error: float = 0.0


def schema_versions(op_type: str, first: int = OLDEST_OPSET, last: int | None = None) -> dict[int, int]:
    """opset -> the ``since_version`` of ``op_type``'s schema at that opset (default domain), for every opset
    ``first..last`` at which it exists."""
    import onnx.defs

    last = last or onnx.defs.onnx_opset_version()
    versions = {}
    for opset in range(first, last + 1):
        try:
            versions[opset] = onnx.defs.get_schema(op_type, max_inclusive_version=opset).since_version
        except onnx.defs.SchemaError:
            continue
    return versions


@functools.lru_cache(maxsize=None)
def changed_operators() -> dict[str, tuple[int, ...]]:
    """The operators d5 implements whose schema differs between opsets 11 and the newest: op type -> the
    opsets (from 11) at which each of its schemas starts to apply, ascending (at least two)."""
    import onnx.defs

    from d5.frameworks.reference.operators import supported_operators

    supported = set(supported_operators())
    names = sorted({s.name for s in onnx.defs.get_all_schemas_with_history() if s.domain in ("", "ai.onnx")})
    changed = {}
    for name in names:
        if name not in supported:
            continue
        versions = schema_versions(name)
        starts = sorted({min(o for o, v in versions.items() if v == since) for since in set(versions.values())})
        if len(starts) >= 2:
            changed[name] = tuple(starts)
    return changed


def target_opsets(op_type: str, all_opsets: bool = False) -> list[int]:
    """The older opsets to express ``op_type``'s cases at: where each schema but the newest starts (one opset
    per schema: the others until the next change have the same schema), or every opset before the newest
    schema with ``all_opsets``."""
    starts = changed_operators()[op_type]
    if not all_opsets:
        return list(starts[:-1])
    return [o for o in schema_versions(op_type) if o < starts[-1]]


@functools.lru_cache(maxsize=1)
def _node_cases() -> tuple:
    from onnx.backend.test.loader import load_model_tests

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the case generators overflow casts on purpose
        return tuple(load_model_tests(kind="node"))


def cases_for(op_type: str) -> list:
    """ONNX's node cases whose graph runs ``op_type`` (the function-expanded ``*_expanded`` cases, which test
    the operators of the function body, and cases outside conformance's scope left out)."""
    return _cases_by_operator().get(op_type, [])


@functools.lru_cache(maxsize=1)
def _cases_by_operator() -> dict[str, list]:
    by_operator: dict[str, list] = collections.defaultdict(list)
    for case in _node_cases():
        if "_expanded" in case.name:
            continue
        model = case.model if case.model is not None else load_case(case)[0]
        if exclusion_reason(case.name, model) is not None:
            continue
        for op_type in sorted({n.op_type for n in model.graph.node if n.domain in ("", "ai.onnx")}):
            by_operator[op_type].append(case)
    return dict(by_operator)


def _default_opset(model) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)


def _valid(model) -> bool:
    import onnx

    try:
        onnx.checker.check_model(model, full_check=True)
        return True
    except Exception:  # noqa: BLE001 - any checker or shape-inference complaint means "not this way"
        return False


def express_at(model, opset: int, via: Iterable[int] = (), key: str | None = None) -> list[tuple[str, Any]]:
    """``model`` written at ``opset``: ``[(how, model), ...]`` with how = original, converted or stamped;
    empty when it is not expressible there.

    Where the converter cannot reach ``opset`` (it lacks an adapter for a change of types only, as ReduceL1
    13 -> 12), the model converted to the first of ``via`` (opsets between the two) it reaches is stamped."""
    if _default_opset(model) == opset:
        return [("original", model)]
    variants = []
    converted = _convert(model, opset, key)
    same_nodes = converted is not None and \
        [n.op_type for n in converted.graph.node] == [n.op_type for n in model.graph.node]
    if converted is not None and _valid(converted):
        variants.append(("converted", converted))
    if not same_nodes:
        # The converter failed or rewrote the node: the same graph stamped with the older opset, if legal.
        stamped = _stamp(model, opset)
        if _valid(stamped):
            variants.append(("stamped", stamped))
    if converted is None and not variants:
        older = _without_later_attributes(model, opset)
        if older is not None:
            stamped = _stamp(older, opset)
            if _valid(stamped):
                variants.append(("stamped, attributes the old schema implies dropped", stamped))
    if converted is None and not variants:
        for middle in sorted(o for o in via if opset < o < _default_opset(model)):
            halfway = _convert(model, middle, key)
            if halfway is not None:
                stamped = _stamp(halfway, opset)
                if _valid(stamped):
                    variants.append((f"converted to {middle}, stamped", stamped))
                break
    return variants


#: (case key, opset) -> the converted model or None (failed). The converter steps one opset at a time, so
#: a model it cannot bring down to an opset it cannot bring lower either, and one it brought down to an
#: opset is brought lower from there.
_CONVERSIONS: dict[tuple[str, int], Any] = {}


#: Attributes added at an opset (op type, opset) whose given value is what the older schemas, which lack
#: the attribute, always compute: a node with that value is the older node with the attribute left out.
OLD_BEHAVIOUR = {("RoiAlign", 16): {"coordinate_transformation_mode": b"output_half_pixel"}}


def _without_later_attributes(model, opset: int):
    """``model`` with the :data:`OLD_BEHAVIOUR` attributes added after ``opset`` left out, or None when it
    has none (or one with another value, which the older schema cannot state)."""
    import onnx

    older = onnx.ModelProto()
    older.CopyFrom(model)
    dropped = False
    for node in older.graph.node:
        implied = {name: value for (op_type, added), attrs in OLD_BEHAVIOUR.items()
                   if op_type == node.op_type and opset < added for name, value in attrs.items()}
        keep = []
        for attribute in node.attribute:
            if attribute.name not in implied:
                keep.append(attribute)
            elif onnx.helper.get_attribute_value(attribute) == implied[attribute.name]:
                dropped = True
            else:
                return None
        del node.attribute[:]
        node.attribute.extend(keep)
    return older if dropped else None


def _convert(model, opset: int, key: str | None = None):
    """``onnx.version_converter``'s model at ``opset``, or None where it fails (``key`` names the model for
    the cache of conversions)."""
    if key is None:
        return _convert_now(model, opset)
    if (key, opset) in _CONVERSIONS:
        return _CONVERSIONS[(key, opset)]
    source = _default_opset(model)
    if opset < source:
        done = sorted(o for k, o in _CONVERSIONS if k == key and opset < o < source)
        if any(_CONVERSIONS[(key, o)] is None for o in done):
            _CONVERSIONS[(key, opset)] = None
            return None
        if done:
            model = _CONVERSIONS[(key, done[0])]
    converted = _convert_now(model, opset)
    _CONVERSIONS[(key, opset)] = converted
    return converted


def _convert_now(model, opset: int):
    from onnx import version_converter

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            converted = version_converter.convert_version(model, opset)
    except Exception:  # noqa: BLE001 - the converter raises RuntimeError/ValidationError/asserts alike
        return None
    _lower_ir_version(converted, opset)
    return converted


def _stamp(model, opset: int):
    """The same graph declared at ``opset``."""
    import onnx

    stamped = onnx.ModelProto()
    stamped.CopyFrom(model)
    for entry in stamped.opset_import:
        if entry.domain in ("", "ai.onnx"):
            entry.version = opset
    _lower_ir_version(stamped, opset)
    return stamped


def _freeze_integer_inputs(model, inputs: list):
    """``model`` with its integer tensor inputs (but the first input) made initializers of the values fed,
    or None when it has none."""
    import onnx
    from onnx import numpy_helper

    frozen = onnx.ModelProto()
    frozen.CopyFrom(model)
    graph = frozen.graph
    keep = []
    for position, (info, value) in enumerate(zip(list(graph.input), inputs)):
        if position > 0 and isinstance(value, np.ndarray) and value.dtype.kind in "iu":
            graph.initializer.append(numpy_helper.from_array(value, info.name))
        else:
            keep.append(info)
    if len(keep) == len(graph.input):
        return None
    del graph.input[:]
    graph.input.extend(keep)
    return frozen


def _lower_ir_version(model, opset: int) -> None:
    """Give a model re-expressed at ``opset`` no newer an IR version than the one released with that opset
    (as an exporter of the time would write; onnxruntime also rejects IR versions newer than it knows)."""
    from onnx import helper

    released = [ir for _, ir, default_opset, *_ in helper.VERSION_TABLE if default_opset >= opset]
    if released:
        model.ir_version = min(model.ir_version, min(released))


def ort_outputs(model, inputs: list) -> list:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 4
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    feeds = {name: value for name, value in zip([i.name for i in model.graph.input], inputs) if name in names}
    return session.run(None, feeds)


def _d5_outputs(model, inputs: list) -> list:
    import d5
    from d5.frameworks import reference

    net = d5.load_onnx(model)
    feeds = dict(zip(list(net.inputs), inputs))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        outputs = reference.from_model(net).inference(feeds)
    return [outputs[name] for name in net.outputs]


def _max_error(want: list, got: list) -> float:
    error = 0.0
    for w, g in zip(want, got):
        try:
            w, g = np.asarray(w, dtype=np.float64), np.asarray(g, dtype=np.float64)
            if w.shape == g.shape and w.size:
                diff = np.abs(w - g)
                diff = diff[~(np.isnan(w) & np.isnan(g))]
                error = max(error, float(np.nanmax(diff)) if diff.size else 0.0)
            elif w.shape != g.shape:
                return float("inf")
        except (TypeError, ValueError):
            continue
    return error


@functools.lru_cache(maxsize=None)
def _d5_runs_original(case_name: str) -> bool:
    """Whether d5 imports and runs the case at its own opset (else old-opset import errors are no news)."""
    from d5.errors import OnnxImportError, UnsupportedOperatorError

    case = next(c for c in _node_cases() if c.name == case_name)
    model, data_sets = load_case(case)
    try:
        _d5_outputs(model, data_sets[0][0] if data_sets else [])
    except (UnsupportedOperatorError, OnnxImportError):
        return False
    except Exception:  # noqa: BLE001 - a run-time failure is still "implemented"
        return True
    return True


def run_case_at(op_type: str, case, opset: int) -> list[VariantResult]:
    """Run one case at ``opset`` (each way it can be written there) on onnxruntime and on d5."""
    from d5.errors import OnnxImportError, UnsupportedOperatorError

    model, data_sets = load_case(case)
    data_sets = [([_as_value(x) for x in inputs], outputs) for inputs, outputs in data_sets]
    via = changed_operators().get(op_type, ())
    variants = [(how, variant, data_sets) for how, variant in express_at(model, opset, via, case.name)]
    if not variants:
        # Inputs that an older schema takes as attributes (ReduceSum's axes, Split's split) convert only
        # when constant: the integer inputs frozen into initializers, one model per data set.
        for index, (inputs, outputs) in enumerate(data_sets):
            frozen = _freeze_integer_inputs(model, inputs)
            if frozen is not None:
                kept = [x for x, vi in zip(inputs, model.graph.input) if vi.name in {i.name for i in frozen.graph.input}]
                variants += [(f"{how}, integer inputs frozen", variant, [(kept, outputs)])
                             for how, variant in express_at(frozen, opset, via, f"{case.name} frozen {index}")]
    if not variants:
        return [VariantResult(op_type, opset, case.name, "", NOT_EXPRESSIBLE)]
    results = []
    for how, variant, data_sets in variants:
        result = VariantResult(op_type, opset, case.name, how, PASS)
        results.append(result)
        for inputs, _ in data_sets:
            try:
                expected = ort_outputs(variant, inputs)
            except Exception as err:  # noqa: BLE001 - onnxruntime lacks this (op, opset, type)
                result.status, result.reason = ORT_SKIP, _first_line(err)
                break
            try:
                actual = _d5_outputs(variant, inputs)
            except (UnsupportedOperatorError, OnnxImportError) as err:
                if not _d5_runs_original(case.name):
                    result.status, result.reason = D5_UNSUPPORTED, _first_line(err)
                else:
                    result.status, result.reason = FAIL, f"{type(err).__name__}: {_first_line(err)}"
                break
            except Exception as err:  # noqa: BLE001 - every other failure is d5's
                result.status, result.reason = FAIL, f"{type(err).__name__}: {_first_line(err)}"
                break
            problem = _mismatch(expected, actual, case)
            if problem and not _ort_agrees_with_onnx(case.name):
                result.status = ORT_SKIP
                result.reason = f"onnxruntime disagrees with ONNX's expected outputs at opset {_default_opset(model)}"
                break
            if problem:
                result.status, result.reason = FAIL, problem
                result.max_error = _max_error(expected, actual)
                break
    return results


def _mismatch(expected: list, actual: list, case) -> str | None:
    """None when d5's outputs match onnxruntime's within the case's tolerance (atol at least 1e-6: the two
    round float32 differently), else what differs."""
    if len(actual) != len(expected):
        return f"{len(actual)} outputs, expected {len(expected)}"
    for index, (want, got) in enumerate(zip(expected, actual)):
        issue = value_matches(want, got, case.rtol, max(case.atol, 1e-6))
        if issue:
            return f"output {index}: {issue}"
    return None


@functools.lru_cache(maxsize=None)
def _ort_agrees_with_onnx(case_name: str) -> bool:
    """Whether onnxruntime reproduces ONNX's expected outputs of the case at the case's own opset (where it
    does not, as for Resize's align_corners downsampling, it is no oracle for that case at older opsets)."""
    case = next(c for c in _node_cases() if c.name == case_name)
    model, data_sets = load_case(case)
    model = _stamp(model, _default_opset(model))  # a copy, its IR version one onnxruntime reads
    try:
        return all(_mismatch(expected, ort_outputs(model, [_as_value(x) for x in inputs]), case) is None
                   for inputs, expected in data_sets)
    except Exception:  # noqa: BLE001 - onnxruntime cannot run it as it is: no evidence against it
        return True


def _as_value(value: Any) -> Any:
    """A fed value as onnxruntime takes it: numpy scalars (0-d cases) as 0-d arrays."""
    return np.asarray(value) if isinstance(value, np.generic) else value


def _first_line(err: Exception) -> str:
    text = str(err).strip().splitlines()
    return (text[0] if text else type(err).__name__)[:200]


def run_pair(op_type: str, opset: int) -> list[VariantResult]:
    """Every case of ``op_type`` expressed at ``opset``."""
    return [r for case in cases_for(op_type) for r in run_case_at(op_type, case, opset)]


def all_pairs(operators: Iterable[str] | None = None, all_opsets: bool = False) -> list[tuple[str, int]]:
    """The (operator, opset) pairs to judge."""
    changed = changed_operators()
    operators = sorted(changed) if operators is None else [op for op in operators if op in changed]
    return [(op, opset) for op in operators for opset in target_opsets(op, all_opsets)]


def pair_status(results: list[VariantResult]) -> str:
    """One word for an (operator, opset) pair: fail if any case fails, pass if any passes, else the most
    frequent reason nothing ran (no case, not expressible, onnxruntime skip, d5 unsupported)."""
    statuses = collections.Counter(r.status for r in results)
    if statuses[FAIL]:
        return FAIL
    if statuses[PASS]:
        return PASS
    return statuses.most_common(1)[0][0] if statuses else "no case"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Judge d5 against onnxruntime on ONNX's node cases written at "
                                                 "the older opsets (11 on) of operators whose schema changed.")
    parser.add_argument("--operators", nargs="+", help="only these op types")
    parser.add_argument("--all-opsets", action="store_true",
                        help="every opset from 11, not one per older schema")
    parser.add_argument("--failures", action="store_true", help="list each failing case")
    args = parser.parse_args(argv)
    from d5.bench.report import markdown_table

    start = time.perf_counter()
    rows, failing = [], []
    pair_counts = collections.Counter()
    for op, opset in all_pairs(args.operators, args.all_opsets):
        results = run_pair(op, opset)
        counts = collections.Counter(r.status for r in results)
        status = pair_status(results)
        pair_counts[status] += 1
        worst = max((r.max_error for r in results if r.status == FAIL), default=0.0)
        rows.append({"operator": op, "opset": opset, "pair": status, "cases pass": counts[PASS],
                     "fail": counts[FAIL], "max err": f"{worst:.3g}" if counts[FAIL] else "",
                     "not expressible": counts[NOT_EXPRESSIBLE], "ort skip": counts[ORT_SKIP],
                     "d5 unsupported": counts[D5_UNSUPPORTED]})
        failing += [r for r in results if r.status == FAIL]
    print(markdown_table(rows))
    if args.failures and failing:
        print()
        print(markdown_table([{"operator": r.operator, "opset": r.opset, "case": r.case, "how": r.how,
                               "max err": f"{r.max_error:.3g}", "reason": r.reason} for r in failing]))
    print(f"\n{len(changed_operators())} operators d5 implements changed schema after opset {OLDEST_OPSET}; "
          f"{len(rows)} (operator, opset) pairs: " + ", ".join(f"{n} {s}" for s, n in sorted(pair_counts.items()))
          + f"; {time.perf_counter() - start:.1f} s")
    return 1 if failing else 0


if __name__ == "__main__":
    raise SystemExit(main())
