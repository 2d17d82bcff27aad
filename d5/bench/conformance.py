"""ONNX backend conformance: runs ONNX's own backend test cases against a d5 framework and reports
pass/fail/skip per case, grouped by operator.

Each case runs first with the framework's own (native) operators only; a case that does not pass is run
again with the framework's fallback (the reference framework's ``onnx.reference``; a native framework's the
reference framework's operators through its custom-op bridge), so the report separates what the framework
implements from what it borrows.

    python -m d5.bench.conformance --output results/conformance.json --markdown results/conformance.md
    python -m d5.bench.conformance --framework pytorch --output results/conformance-pytorch.json \
        --markdown results/conformance-pytorch.md
"""
from __future__ import annotations

import argparse
import collections
import dataclasses
import glob
import os
import time
import warnings
from typing import Any, Iterable

import numpy as np

KINDS = ("node", "simple", "pytorch-converted", "pytorch-operator")

# Exclusions the issue allows, each with its reason (checked in this order).
_TRAINING_DOMAIN = "ai.onnx.preview.training"
_RANDOM_OPS = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli"}
_LOW_PRECISION_NAMES = ("FLOAT8", "FLOAT4")


@dataclasses.dataclass
class CaseResult:
    name: str
    kind: str
    operators: list[str]
    status: str  # pass | fail | excluded
    fallback_status: str | None = None  # pass | fail for cases that failed on d5's own operators
    reason: str = ""
    seconds: float = 0.0
    fallback_reason: str = ""  # why the fallback run failed too


def exclusion_reason(case_name: str, model) -> str | None:
    """Why a case is outside the scope d5 is judged on, or None."""
    from onnx import TensorProto

    ops = {n.op_type for n in model.graph.node}
    if any(n.domain == _TRAINING_DOMAIN for n in model.graph.node):
        return "training operator (ai.onnx.preview.training)"
    if ops & _RANDOM_OPS:
        return f"random outputs ({', '.join(sorted(ops & _RANDOM_OPS))})"
    if "Dropout" in ops and "training" in case_name and "zero_ratio" not in case_name:
        return "random outputs (Dropout in training mode)"
    low_precision = {v for k, v in TensorProto.DataType.items() if k.startswith(_LOW_PRECISION_NAMES)}
    types = [vi.type.tensor_type.elem_type for vi in list(model.graph.input) + list(model.graph.output)]
    types += [init.data_type for init in model.graph.initializer]
    types += [a.i for n in model.graph.node for a in n.attribute if a.name in ("to", "output_dtype", "dtype")]
    if any(t in low_precision for t in types):
        return "float8/float4 types"
    return None


def load_case(case) -> tuple[Any, list[tuple[list, list]]]:
    import onnx
    from onnx import numpy_helper

    if case.model is not None:
        # In-memory cases hold arrays, or TensorProtos where numpy has no dtype (float16 tests, bfloat16...).
        def as_arrays(values):
            return [numpy_helper.to_array(v) if isinstance(v, onnx.TensorProto) else v for v in values]
        return case.model, [(as_arrays(i), as_arrays(o)) for i, o in case.data_sets or []]
    model = onnx.load(os.path.join(case.model_dir, "model.onnx"))
    data_sets = []
    for directory in sorted(glob.glob(os.path.join(case.model_dir, "test_data_set_*"))):
        def read(prefix, value_infos):
            paths = sorted(glob.glob(os.path.join(directory, f"{prefix}_*.pb")),
                           key=lambda p: int(p.rsplit("_", 1)[1].split(".")[0]))
            types = [vi.type for vi in value_infos]
            return [_read_value(path, types[i] if i < len(types) else None) for i, path in enumerate(paths)]
        # As onnx's own runner does: input_<i>.pb holds graph input i, typed by its declared type.
        data_sets.append((read("input", model.graph.input), read("output", model.graph.output)))
    return model, data_sets


def _read_value(path: str, type_proto) -> Any:
    """A test data file as an array, a list of arrays (a sequence) or None / a value (an optional), read as
    the model's declared type says."""
    import onnx
    from onnx import numpy_helper

    with open(path, "rb") as handle:
        data = handle.read()
    kind = None if type_proto is None else type_proto.WhichOneof("value")
    if kind == "sequence_type":
        proto = onnx.SequenceProto()
        proto.ParseFromString(data)
        return numpy_helper.to_list(proto)
    if kind == "optional_type":
        proto = onnx.OptionalProto()
        proto.ParseFromString(data)
        return numpy_helper.to_optional(proto)
    proto = onnx.TensorProto()
    proto.ParseFromString(data)
    return numpy_helper.to_array(proto)


def _outputs_match(expected: list, actual: Iterable, rtol: float, atol: float) -> str | None:
    actual = list(actual)
    if len(actual) != len(expected):
        return f"{len(actual)} outputs, expected {len(expected)}"
    for index, (want, got) in enumerate(zip(expected, actual)):
        problem = value_matches(want, got, rtol, atol)
        if problem:
            return f"output {index}: {problem}"
    return None


def value_matches(want: Any, got: Any, rtol: float, atol: float) -> str | None:
    """None when ``got`` matches ``want``: arrays by dtype, shape and values; sequences (lists) element-wise;
    empty optionals (None) only by None."""
    if want is None or got is None:
        return None if want is None and got is None else \
            f"{'an empty optional' if got is None else type(got).__name__}, expected {'an empty optional' if want is None else 'a value'}"
    if isinstance(want, (list, tuple)) or isinstance(got, (list, tuple)):
        if not isinstance(want, (list, tuple)) or not isinstance(got, (list, tuple)):
            return f"{'a sequence' if isinstance(got, (list, tuple)) else 'a tensor'}, expected " \
                   f"{'a sequence' if isinstance(want, (list, tuple)) else 'a tensor'}"
        if len(got) != len(want):
            return f"a sequence of {len(got)} tensors, expected {len(want)}"
        for position, (w, g) in enumerate(zip(want, got)):
            problem = value_matches(w, g, rtol, atol)
            if problem:
                return f"element {position}: {problem}"
        return None
    want = np.asarray(want)
    got = np.asarray(got)
    if want.dtype != object and got.dtype != want.dtype:
        return f"dtype {got.dtype}, expected {want.dtype}"
    if got.shape != want.shape:
        return f"shape {got.shape}, expected {want.shape}"
    if want.dtype == object or want.dtype.kind in "USb":
        if not np.array_equal(got, want):
            return "values differ"
    elif not np.allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol, equal_nan=True):
        error = np.nanmax(np.abs(got.astype(np.float64) - want.astype(np.float64)))
        return f"values differ (max abs err {error:.3g})"
    return None


def _run(backend, model, data_sets, rtol, atol, fallback: bool) -> str | None:
    """None when every data set matches, else a one-line reason."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rep = backend.prepare(model, "CPU", fallback=fallback)
            for inputs, expected in data_sets:
                problem = _outputs_match(expected, rep.run(inputs), rtol, atol)
                if problem:
                    return problem
    except Exception as err:  # a conformance run records every failure, whatever raised it
        return f"{type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}"
    return None


def fallback_label(framework: str) -> str:
    """What a framework falls back to for operators it does not implement.

    >>> fallback_label("pytorch")
    "the reference framework's operators"
    """
    return "onnx.reference" if framework == "reference" else "the reference framework's operators"


def run_conformance(backend=None, kinds: Iterable[str] = KINDS, patterns: Iterable[str] | None = None,
                    progress: bool = True, framework: str = "reference") -> list[CaseResult]:
    """Run ONNX's backend test cases of ``kinds`` (optionally only names containing one of ``patterns``) on
    ``backend`` (default: the ``onnx.backend`` Backend of d5 framework ``framework``)."""
    from onnx.backend.test.loader import load_model_tests
    from tqdm import tqdm

    if backend is None:
        from d5.frameworks.onnx_backend import backend_for
        backend = backend_for(framework)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the case generators overflow casts on purpose
        cases = [case for kind in kinds for case in load_model_tests(kind=kind)]
    if patterns:
        patterns = tuple(patterns)
        cases = [case for case in cases if any(p in case.name for p in patterns)]
    results = []
    for case in tqdm(cases, desc=f"ONNX conformance ({framework})", disable=not progress):
        start = time.perf_counter()
        model, data_sets = load_case(case)
        operators = sorted({n.op_type for n in model.graph.node})
        reason = exclusion_reason(case.name, model)
        if reason:
            results.append(CaseResult(case.name, case.kind, operators, "excluded", reason=reason))
            continue
        problem = _run(backend, model, data_sets, case.rtol, case.atol, fallback=False)
        result = CaseResult(case.name, case.kind, operators, "pass" if problem is None else "fail", reason=problem or "")
        if problem is not None:
            result.fallback_reason = _run(backend, model, data_sets, case.rtol, case.atol, True) or ""
            result.fallback_status = "fail" if result.fallback_reason else "pass"
        result.seconds = time.perf_counter() - start
        results.append(result)
    return results


def failures(results: list[CaseResult]) -> list[str]:
    """``'case: reason'`` for every judged case that does not pass with d5's own operators.

    >>> failures([CaseResult("test_a", "node", ["Relu"], "fail", None, "wrong output", 0.0)])
    ['test_a: wrong output']
    """
    return [f"{r.name}: {r.reason}" for r in results if r.status not in ("pass", "excluded")]


def uncovered_operators(results: list[CaseResult], operators: set[str]) -> list[str]:
    """The ``operators`` that no passing case exercises (sorted).

    >>> uncovered_operators([CaseResult("test_a", "node", ["Relu"], "pass", None, "", 0.0)], {"Relu", "Tanh"})
    ['Tanh']
    """
    covered = {op for r in results if r.status == "pass" for op in r.operators}
    return sorted(set(operators) - covered)


def summarize_results(results: list[CaseResult]) -> dict:
    """Pass rates per kind: own operators, with fallback, and the excluded count."""
    summary = {}
    for kind in sorted({r.kind for r in results}):
        mine = [r for r in results if r.kind == kind]
        judged = [r for r in mine if r.status != "excluded"]
        own = sum(r.status == "pass" for r in judged)
        with_fallback = own + sum(r.fallback_status == "pass" for r in judged)
        summary[kind] = {"cases": len(mine), "excluded": len(mine) - len(judged), "judged": len(judged),
                         "pass_own": own, "pass_with_fallback": with_fallback,
                         "rate_own": own / len(judged) if judged else 0.0,
                         "rate_with_fallback": with_fallback / len(judged) if judged else 0.0}
    return summary


def markdown_report(results: list[CaseResult], framework: str = "reference") -> str:
    """Summary table, per-operator table, and the excluded cases with their reasons."""
    from d5.bench.report import markdown_table

    summary = summarize_results(results)
    lines = [f"# ONNX backend conformance of the d5 {framework} framework", "",
             f"Own operators first; a failing case is retried with {fallback_label(framework)}.", "",
             markdown_table([{"kind": k, **{key: (f"{v:.1%}" if key.startswith("rate") else v) for key, v in s.items()}}
                             for k, s in summary.items()]), ""]
    by_op: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for r in results:
        if r.kind == "node":
            for op in r.operators[:1] or ["(none)"]:
                by_op[op][r.status if r.status != "fail" or r.fallback_status != "pass" else "fallback"] += 1
    if by_op:  # only when node cases ran (--kinds may leave them out)
        lines += ["## Node cases by operator", "",
                  markdown_table([{"operator": op, "pass": c["pass"], "fallback only": c["fallback"],
                                   "fail": c["fail"], "excluded": c["excluded"]} for op, c in sorted(by_op.items())]),
                  ""]
    not_passing = [r for r in results if r.status != "pass"]
    lines += ["## Failing and excluded cases", "",
              "(none)" if not not_passing else markdown_table([{"case": r.name, "kind": r.kind, "status": r.status, "fallback": r.fallback_status or "",
                               "reason": r.reason} for r in not_passing]), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from d5.bench.results import write_result
    from d5.io_utils import atomic_write

    from d5.frameworks import FRAMEWORKS

    parser = argparse.ArgumentParser(description="Run ONNX's backend test suite against a d5 framework.")
    parser.add_argument("--framework", default="reference", choices=sorted(FRAMEWORKS))
    parser.add_argument("--kinds", nargs="+", default=list(KINDS), choices=KINDS)
    parser.add_argument("--pattern", nargs="+", help="only cases whose name contains one of these")
    parser.add_argument("--output", default="results/conformance.json")
    parser.add_argument("--markdown", default="results/conformance.md")
    args = parser.parse_args(argv)
    results = run_conformance(kinds=args.kinds, patterns=args.pattern, framework=args.framework)
    summary = summarize_results(results)
    write_result(args.output, "onnx_conformance", summary, extra={"framework": args.framework,
                                                                  "cases": [dataclasses.asdict(r) for r in results]})
    with atomic_write(args.markdown) as handle:
        handle.write(markdown_report(results, args.framework))
    for kind, s in summary.items():
        print(f"{kind}: {s['pass_own']}/{s['judged']} pass on {args.framework}'s own operators ({s['rate_own']:.1%}), "
              f"{s['pass_with_fallback']}/{s['judged']} with {fallback_label(args.framework)} "
              f"({s['rate_with_fallback']:.1%}); {s['excluded']} excluded")
    print(f"wrote {args.output} and {args.markdown}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
