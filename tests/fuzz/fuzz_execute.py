"""Running one fuzz case and classifying what happened (inside the worker process, or in-process for
``run_fuzz.py --replay``).

A case is a plain dict (it crosses a pipe as a pickle); its ``kind`` picks the runner:

``onnx``
    ``model`` (serialized ModelProto bytes) and ``feeds`` (usually a dict of arrays, but API-misuse cases
    feed anything): import with ``d5.Network.from_onnx`` (or, given ``network``, build the graph through
    the Python API, see fuzz_network_spec), build ``reference.from_model``, run ``inference``
    ``runs`` times, then (``train``) ``inference_and_backprop`` on the first floating output. Oracles: the
    repeated runs must agree bit for bit and leave the feeds untouched, when onnxruntime runs the same
    model on the same feeds its outputs must match, and a training pass at one thread must give the same
    bits (outputs and gradients) as at the worker's thread count. ``expect_error`` marks a model d5 must refuse,
    ``valid`` one it must run (a d5 error is then a wrong result).
``kernel``
    ``function`` of ``d5._C`` called with ``args``/``kwargs`` at ``threads`` OpenMP threads, twice (the
    same bits both times), again at one thread (the same bits at any thread count), then against the NumPy
    oracle in fuzz_oracles unless ``oracle`` is False (the generator clears it for calls too big for it).
    ``valid`` marks a call that must succeed.

``selftest``
    misbehaves on purpose (``action``: segfault, abort, hang, raise, d5_error, allocate) to test the engine.

The result is a dict: ``outcome`` (one of OUTCOMES), ``stage``, ``detail``, and for exceptions ``error``
(type name), ``frame`` (innermost frame) and ``d5_frame`` (innermost frame inside d5).
"""
from __future__ import annotations

import copy
import os
import traceback
from typing import Any, Callable

import numpy as np

#: Every outcome class, worst first. The first four are findings; the rest are acceptable answers.
OUTCOMES = ("crash", "hang", "raw_exception", "wrong_result", "memory_error", "d5_error", "rejected", "ok")
BAD_OUTCOMES = frozenset(OUTCOMES[:4])

# A direct call of the private binding d5._C may refuse misuse with pybind11's own translations of
# std::invalid_argument / std::length_error (ValueError), argument conversion (TypeError) and integers
# too large for int64 (OverflowError): that is the binding's documented contract ("these only fire on
# direct misuse of d5._C"). Through d5's public API the same refusals must be d5 errors.
KERNEL_REJECTIONS = (ValueError, TypeError, OverflowError)

Stage = Callable[[str], None]


def classify_exception(err: BaseException, rejections: tuple[type, ...] = ()) -> dict:
    from d5.errors import D5Error

    if isinstance(err, D5Error):  # d5's InsufficientMemoryError (a MemoryError) is a d5 error
        outcome = "d5_error"
    elif isinstance(err, MemoryError):
        outcome = "memory_error"
    elif rejections and isinstance(err, rejections):
        outcome = "rejected"
    else:
        outcome = "raw_exception"
    frames = traceback.extract_tb(err.__traceback__)
    d5_root = os.path.dirname(os.path.dirname(os.path.abspath(__import__("d5").__file__)))
    d5_frames = [f for f in frames if os.path.abspath(f.filename).startswith(os.path.join(d5_root, "d5") + os.sep)]
    return {
        "outcome": outcome,
        "error": type(err).__name__,
        "detail": f"{type(err).__name__}: {str(err)[:600]}",
        "frame": _frame(frames[-1]) if frames else None,
        "d5_frame": _frame(d5_frames[-1]) if d5_frames else None,
        "traceback": "".join(traceback.format_exception(type(err), err, err.__traceback__, limit=-12))[-4000:],
    }


def _frame(frame: traceback.FrameSummary) -> str:
    path = frame.filename
    marker = os.sep + "d5" + os.sep
    if marker in path:
        path = "d5" + os.sep + path.rsplit(marker, 1)[1]
    else:
        path = os.path.basename(path)
    return f"{path}:{frame.lineno} in {frame.name}"


def run_case(case: dict, stage: Stage = lambda name: None) -> dict:
    """Run one case; never raises (except for BaseExceptions that are not Exceptions)."""
    runner = {"onnx": run_onnx_case, "kernel": run_kernel_case, "selftest": run_selftest_case}[case["kind"]]
    try:
        return runner(case, stage)
    except Exception as err:  # a bug in the harness itself: report it as such, not as a d5 finding
        result = classify_exception(err)
        result.update(outcome="raw_exception", stage="harness")
        return result


# ------------------------------------------------------------------------------------------------ ONNX
def run_onnx_case(case: dict, stage: Stage) -> dict:
    import d5
    from d5.frameworks import reference

    feeds = case.get("feeds")
    pristine = copy.deepcopy(feeds)
    current = "import"
    try:
        if case.get("network") is not None:  # the graph built through the Python API (fuzz_network_spec)
            from fuzz_network_spec import build_network

            current = "api"
            stage(current)
            network = build_network(case["network"])
        else:
            stage(current)
            network = d5.Network.from_onnx(case["model"])
        current = "build"
        stage(current)
        executor = reference.from_model(network)
        results = []
        current = "inference"
        for _ in range(case.get("runs", 3)):
            stage(current)
            results.append(executor.inference(feeds))
    except Exception as err:
        result = classify_exception(err)
        result["stage"] = current
        return _refused_valid(case, result)
    if case.get("expect_error"):
        return {"outcome": "wrong_result", "stage": "inference",
                "detail": "accepted and ran a model it must refuse (see the case description)"}
    problem = _self_consistency(results, feeds, pristine)
    if problem:
        return {"outcome": "wrong_result", "stage": "inference", "detail": problem}
    report: dict[str, Any] = {}
    if case.get("oracle", True) and isinstance(feeds, dict):
        stage("oracle")
        problem = _onnxruntime_oracle(case["model"], feeds, results[-1], report)
        if problem:
            return {"outcome": "wrong_result", "stage": "oracle", "detail": problem, **report}
    if case.get("train", True):
        y = _loss_candidate(results[-1])
        if y is not None:
            stage("train")
            try:
                trained = _train(executor, feeds, y)
            except Exception as err:
                result = classify_exception(err)
                result["stage"] = "train"
                return _refused_valid(case, {**report, **result})
            stage("threads")
            problem = _same_bits_at_one_thread(network, feeds, y, trained)
            if problem:
                return {"outcome": "wrong_result", "stage": "threads", "detail": problem, **report}
    return {"outcome": "ok", "stage": "done", "detail": "", **report}


def _train(executor, feeds, y: str) -> dict:
    """One training pass; its outputs and every parameter gradient."""
    from d5.network.graph import gradient_name

    outputs = executor.inference_and_backprop(feeds, y=y)
    names = [gradient_name(p) for p in executor.network.get_params()]
    return {**outputs, **dict(zip(names, executor.network.fetch_tensors(names)))}


def _same_bits_at_one_thread(network, feeds, y: str, trained: dict) -> str | None:
    """Issue 7 asks for the same bits at any thread count: train a fresh executor at one thread and compare
    outputs and gradients bit for bit with the pass at the worker's thread count."""
    from d5.frameworks import reference
    from d5.frameworks.reference.kernels import load_native
    from fuzz_oracles import same_bits

    native = load_native()
    threads = native.max_threads()
    if threads == 1:
        return None
    native.set_num_threads(1)
    try:
        single = _train(reference.from_model(network), feeds, y)
    except Exception as err:  # it trained at `threads` threads
        return f"training failed at 1 thread after succeeding at {threads}: {type(err).__name__}: {err}"[:600]
    finally:
        native.set_num_threads(threads)
    for name, value in trained.items():
        if isinstance(value, np.ndarray) and isinstance(single.get(name), np.ndarray):
            problem = same_bits(f"{name!r} at {threads} threads vs 1 thread", value, single[name])
            if problem:
                return problem.replace("between identical calls", "")
    return None


def _refused_valid(case: dict, result: dict) -> dict:
    """A d5 error is the right answer to bad input, and the wrong one to a case marked ``valid``."""
    if case.get("valid") and result["outcome"] in ("d5_error", "memory_error", "rejected"):
        result = dict(result, outcome="wrong_result", detail=f"refused a valid case: {result['detail']}")
    return result


def _self_consistency(results: list, feeds, pristine) -> str | None:
    from fuzz_oracles import same_bits

    for later in results[1:]:
        if set(later) != set(results[0]):
            return f"repeated inference returned outputs {sorted(later)} after {sorted(results[0])}"
        for name, value in later.items():
            if isinstance(value, np.ndarray):
                problem = same_bits(f"output {name!r} (repeated inference)", results[0][name], value)
                if problem:
                    return problem
    if isinstance(feeds, dict) and isinstance(pristine, dict):
        for name, value in feeds.items():
            if isinstance(value, np.ndarray) and isinstance(pristine.get(name), np.ndarray):
                if same_bits("feed", pristine[name], value):
                    return f"inference modified the caller's input array {name!r} in place"
    return None


def _loss_candidate(outputs: dict) -> str | None:
    floating = [name for name, value in outputs.items()
                if isinstance(value, np.ndarray) and value.dtype.kind == "f"]
    if "loss" in floating:
        return "loss"
    return floating[0] if floating else None


def _native_order(value):
    # onnxruntime reads a big-endian or strided array's buffer as if it were native and contiguous.
    if isinstance(value, np.ndarray):
        return np.ascontiguousarray(value, dtype=value.dtype.newbyteorder("="))
    return value


def _onnxruntime_oracle(model: bytes, feeds: dict, outputs: dict, report: dict) -> str | None:
    """Compare with onnxruntime. A model or feed onnxruntime refuses (where d5 answered) is noted in
    ``report['lenient']``, not judged: d5 may legitimately accept more than onnxruntime does."""
    from fuzz_oracles import compare

    try:
        import onnxruntime as ort
    except ImportError:
        return None
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 4
    try:
        session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
        names = [i.name for i in session.get_inputs()]
        reference = session.run(None, {name: _native_order(feeds[name]) for name in names if name in feeds})
    except Exception as err:  # onnxruntime's refusal: InvalidGraph, Fail, NotImplemented, ...
        report["lenient"] = f"onnxruntime refused: {type(err).__name__}: {str(err)[:300]}"
        return None
    for info, expected in zip(session.get_outputs(), reference):
        if info.name in outputs and isinstance(outputs[info.name], np.ndarray):
            problem = compare(f"output {info.name!r} vs onnxruntime", outputs[info.name], expected, check_dtype=True)
            if problem:
                return _second_opinion(model, feeds, info.name, outputs[info.name], problem, report)
    return None


def _second_opinion(model: bytes, feeds: dict, name: str, actual, problem: str, report: dict) -> str | None:
    """onnxruntime is not always right: when it disagrees with d5, ONNX's own reference implementation is
    asked. Agreement with it clears d5 (the disagreement is noted in ``report['lenient']``); otherwise the
    disagreement is a finding, except for pooling with auto_pad SAME_*, where onnxruntime is known to
    depart from the ONNX formulas (it ignores dilations and ceil_mode changes the output size,
    microsoft/onnxruntime#10083, #1224) and onnx.reference mixes up axes: that is noted as disputed."""
    from fuzz_oracles import compare

    try:
        from onnx.reference import ReferenceEvaluator

        evaluator = ReferenceEvaluator(model)
        expected = evaluator.run([name], {k: _native_order(v) for k, v in feeds.items()
                                          if k in evaluator.input_names})[0]
        second = compare(f"output {name!r} vs onnx.reference", actual, np.asarray(expected), check_dtype=True)
        if second is None:
            report["lenient"] = f"onnxruntime disagrees ({problem}), onnx.reference agrees with d5"
            return None
        problem = f"{problem}; and {second}"
    except Exception as err:
        problem = f"{problem} (onnx.reference gave no verdict: {type(err).__name__})"
    if _pooling_with_same_padding(model):
        report["lenient"] = f"disputed (pooling with auto_pad SAME): {problem}"
        return None
    return problem


def _pooling_with_same_padding(model: bytes) -> bool:
    import onnx

    for node in onnx.ModelProto.FromString(model).graph.node:
        if node.op_type in ("MaxPool", "AveragePool", "LpPool"):
            if any(a.name == "auto_pad" and a.s.startswith(b"SAME") for a in node.attribute):
                return True
    return False


# ---------------------------------------------------------------------------------------------- kernels
def run_kernel_case(case: dict, stage: Stage) -> dict:
    from d5.frameworks.reference.kernels import load_native
    from fuzz_oracles import KERNEL_ORACLES, as_tuple, compare_results, same_bits

    native = load_native()
    function = getattr(native, case["function"])
    args, kwargs = case.get("args", ()), case.get("kwargs", {})
    pristine = copy.deepcopy(args)
    threads, default_threads = case.get("threads", 2), native.max_threads()
    native.set_num_threads(threads)
    try:
        stage("call")
        first = function(*args, **kwargs)
        stage("repeat")
        second = function(*args, **kwargs)
        single = None
        if threads != 1:
            stage("one thread")
            native.set_num_threads(1)
            single = function(*args, **kwargs)
    except Exception as err:
        result = classify_exception(err, KERNEL_REJECTIONS)
        result["stage"] = "call"
        return _refused_valid(case, result)
    finally:
        native.set_num_threads(default_threads)
    for label, other in ((f"a repeated call at {threads} threads", second), ("the same call at 1 thread", single)):
        if other is None:
            continue
        for index, (a, b) in enumerate(zip(as_tuple(first), as_tuple(other))):
            if (a is None) != (b is None):
                return {"outcome": "wrong_result", "stage": "determinism", "detail": f"result {index}: None only once"}
            problem = None if a is None else same_bits(f"result {index} vs {label}", a, b)
            if problem:
                return {"outcome": "wrong_result", "stage": "determinism", "detail": problem}
    for index, (before, after) in enumerate(zip(pristine, args)):
        if isinstance(before, np.ndarray) and same_bits("argument", before, after):
            return {"outcome": "wrong_result", "stage": "call", "detail": f"the call modified argument {index} in place"}
    oracle = KERNEL_ORACLES.get(case["function"])
    if oracle is not None and case.get("oracle", True):
        stage("oracle")
        with np.errstate(all="ignore"):
            expected = oracle(*args, **kwargs)
        problem = compare_results(case["function"], first, expected)
        if problem:
            return {"outcome": "wrong_result", "stage": "oracle", "detail": problem}
    return {"outcome": "ok", "stage": "done", "detail": ""}


# -------------------------------------------------------------------------------------------- self-test
def run_selftest_case(case: dict, stage: Stage) -> dict:
    """Misbehaviour on demand, so that test_fuzz can show the engine records it instead of dying."""
    action = case["action"]
    stage(action)
    try:
        if action == "segfault":
            import ctypes

            ctypes.string_at(0)
        elif action == "abort":
            os.abort()
        elif action == "hang":
            import time

            time.sleep(3600)
        elif action == "raise":
            [][1]
        elif action == "d5_error":
            from d5.errors import ShapeError

            raise ShapeError("a deliberate d5 error")
        elif action == "allocate":
            bytearray(1 << 40)  # beyond the worker's address-space limit
    except Exception as err:
        return {**classify_exception(err), "stage": action}
    return {"outcome": "ok", "stage": action, "detail": ""}
