"""Standalone reproducer scripts for fuzz findings.

A reproducer imports only numpy, onnx and d5 and repeats what the worker did for the case, in process, so
its traceback (or crash) is the finding itself. Arrays are written as literals when small or constant,
otherwise as base64 of their bytes.

>>> print(array_literal(np.zeros((2, 3), np.float32)))
np.zeros((2, 3), dtype='float32')
>>> print(array_literal(np.array([1, -1], np.int64)))
np.array([1, -1], dtype='int64')
"""
from __future__ import annotations

import base64
import textwrap

import numpy as np


def _dtype_literal(dtype: np.dtype) -> str:
    if type(dtype.type).__module__.startswith("ml_dtypes") or dtype.type.__module__.startswith("ml_dtypes"):
        return f"ml_dtypes.{dtype.name}"  # bfloat16 and float8 arrays, as onnx.numpy_helper makes them
    return repr(dtype.str if dtype.byteorder == ">" else dtype.name)


def array_literal(array: np.ndarray) -> str:
    dtype = _dtype_literal(array.dtype)
    finite = array.dtype.kind in "biu" or (array.dtype.kind == "f" and bool(np.all(np.isfinite(array))))
    if finite and array.size > 1 and np.all(array == array.flat[0]) and "ml_dtypes" not in dtype:
        value = array.flat[0].item()
        if value == 0:
            return f"np.zeros({array.shape}, dtype={dtype})"
        return f"np.full({array.shape}, {value!r}, dtype={dtype})"
    if finite and array.size <= 32 and "ml_dtypes" not in dtype:
        return f"np.array({array.tolist()!r}, dtype={dtype})"
    if array.dtype.kind in "US":
        return f"np.array({array.tolist()!r}, dtype={array.dtype.str!r})"
    if array.dtype.kind == "O":  # objects of no literal form: what matters is that they are objects
        return f"np.array([object()] * {array.size}, dtype=object).reshape({array.shape})"
    data = base64.b64encode(np.ascontiguousarray(array).tobytes()).decode()
    return f"np.frombuffer(base64.b64decode({data!r}), dtype={dtype}).reshape({array.shape})"


def value_literal(value) -> str:
    if isinstance(value, np.ndarray):
        return array_literal(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {value_literal(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(value_literal(v) for v in value) + "]"
    if isinstance(value, tuple):
        return "(" + "".join(value_literal(v) + ", " for v in value) + ")"
    if isinstance(value, np.generic):
        return f"np.{type(value).__name__}({value_literal(value.item())})"
    if isinstance(value, float) and not np.isfinite(value):
        return f"float({str(value)!r})"
    return repr(value)


def _model_text(model: bytes) -> str:
    """A short listing of the graph. Pure Python (no onnx.printer): onnx's C++ code can crash on the
    hostile models this is used for, and it runs in the fuzz parent."""
    import onnx
    from onnx import helper

    try:
        graph = onnx.ModelProto.FromString(model).graph
    except Exception as err:  # truncated or corrupted bytes
        return f"# (not parseable: {type(err).__name__})"
    lines = [f"inputs: {[v.name for v in graph.input]}; outputs: {[v.name for v in graph.output]}"]
    lines += [f"initializer {t.name}: type {t.data_type}, dims {list(t.dims)}" for t in graph.initializer]
    for node in graph.node:
        attrs = ", ".join(f"{a.name}={_short_value(helper.get_attribute_value(a))}" for a in node.attribute)
        lines.append(f"{list(node.output)} = {node.domain + '.' if node.domain else ''}{node.op_type}"
                     f"({', '.join(node.input)}) {{{attrs}}}")
    return textwrap.indent("\n".join(lines)[:3000], "# ")


def _short_value(value) -> str:
    text = repr(value) if not hasattr(value, "dims") else f"tensor(type {value.data_type}, dims {list(value.dims)})"
    return text if len(text) < 80 else text[:80] + "..."


def _api_lines(spec: dict) -> list[str]:
    """The graph built through d5's Python API, as fuzz_network_spec.build_network does (model unused)."""
    lines = [f"network = d5.Network({spec['name']!r}, opset={spec['opset']!r})"]
    lines += [f"network.add_input({name!r}, {shape!r}, {dtype!r}, kind={kind!r})" for name, shape, dtype, kind in spec["inputs"]]
    lines += [f"network.add_param({name!r}, {array_literal(value)})" for name, value in spec["params"]]
    for op_type, inputs, outputs, name, domain, attrs in spec["nodes"]:
        keywords = "".join(f", {k}={value_literal(v)}" for k, v in attrs.items())
        lines.append(f"network.add_node({op_type!r}, {inputs!r}, {outputs!r}, name={name or None!r}, "
                     f"domain={domain or None!r}{keywords})")
    lines += [f"network.add_output({name!r})" for name in spec["outputs"]]
    return lines


def reproducer_script(case: dict, result: dict | None = None) -> str:
    """Python source that reproduces ``case`` in process."""
    header = [f'"""d5 fuzz finding {case.get("id")}: {case.get("description", "")}']
    if result:
        header.append(f"outcome: {result.get('outcome')} in stage {result.get('stage')!r}: {result.get('detail', '')}")
    header.append('"""')
    lines = ["\n".join(header), "import base64", "", "import ml_dtypes  # noqa: F401 (bfloat16 / float8 arrays)",
             "import numpy as np", ""]
    if case["kind"] == "onnx":
        lines += [
            "import d5",
            "from d5.frameworks import reference",
            "",
            "# The model:",
            _model_text(case["model"]),
            f"model = base64.b64decode({base64.b64encode(case['model']).decode()!r})",
            f"feeds = {value_literal(case.get('feeds'))}",
            *(_api_lines(case["network"]) if case.get("network") else ["network = d5.Network.from_onnx(model)"]),
            "executor = reference.from_model(network)",
            f"for _ in range({case.get('runs', 3)}):",
            "    outputs = executor.inference(feeds)",
            "    print({name: getattr(value, 'shape', value) for name, value in outputs.items()})",
        ]
        if result and result.get("stage") == "oracle":
            lines += [
                "",
                "# What d5 disagrees with: onnxruntime on the same model and feeds.",
                "import onnxruntime",
                "print(onnxruntime.InferenceSession(model).run(None, feeds))",
            ]
        elif case.get("train", True):
            lines += [
                "floating = [n for n, v in outputs.items() if isinstance(v, np.ndarray) and v.dtype.kind == 'f']",
                "if floating:",
                "    executor.inference_and_backprop(feeds, y='loss' if 'loss' in floating else floating[0])",
            ]
    else:
        args = ", ".join(value_literal(a) for a in case.get("args", ()))
        kwargs = "".join(f", {k}={value_literal(v)}" for k, v in case.get("kwargs", {}).items())
        lines += [
            "from d5.frameworks.reference.kernels import load_native",
            "",
            "native = load_native()  # d5._C with BLAS registered, as the reference operators use it",
            f"native.set_num_threads({case.get('threads', 2)})",
            f"result = native.{case['function']}({args}{kwargs})",
            "print(result)",
        ]
    return "\n".join(lines) + "\n"
