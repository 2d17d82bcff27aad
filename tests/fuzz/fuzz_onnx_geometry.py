"""Window-geometry cases through the public path: single Conv / ConvTranspose / MaxPool / AveragePool /
LpPool nodes whose attributes (kernel_shape, strides, pads, dilations, group, auto_pad, ceil_mode,
output_padding, output_shape) are drawn from small valid values and, one attribute in seven, from hostile
ones. 1-, 2- and 3-D inputs, float16/32/64, batch 0 to 2; the weights are trainable initializers, so
backprop reaches the kernels' backward. What d5 runs is compared with onnxruntime.

>>> from hypothesis import given, settings
>>> @settings(max_examples=1, database=None, derandomize=True)
... @given(op_geometry_case())
... def first(case):
...     assert case["kind"] == "onnx" and case["label"] in GEOMETRY_OPS
>>> first()
"""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st
from onnx import AttributeProto, TensorProto, helper

from fuzz_onnx_models import OPSET, Operand, tensor_proto

GEOMETRY_OPS = ("Conv", "ConvTranspose", "MaxPool", "AveragePool", "LpPool")
HOSTILE_INTS = (0, -1, -2, 2**28, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**62, 2**63 - 1, -2**63)


@st.composite
def op_geometry_case(draw) -> dict:
    op = draw(st.sampled_from(GEOMETRY_OPS))
    rank = draw(st.sampled_from([1, 2, 2, 2, 3]))
    dtype = np.dtype(draw(st.sampled_from(["float32", "float32", "float32", "float64", "float16"])))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    n, c = draw(st.sampled_from([1, 1, 2, 0])), draw(st.integers(1, 3))
    spatial = [draw(st.integers(0, 6)) if draw(st.integers(0, 15)) == 0 else draw(st.integers(1, 6)) for _ in range(rank)]
    hostile_notes: list[str] = []

    def ints(name: str, count: int, low: int, high: int) -> list[int]:
        if draw(st.integers(0, 6)) == 0:
            length = draw(st.sampled_from([count, count, 0, 1, count + 1]))
            value = [draw(st.sampled_from(HOSTILE_INTS))] * length if draw(st.booleans()) else \
                draw(st.lists(st.sampled_from(HOSTILE_INTS + (1, 2)), min_size=length, max_size=length))
            hostile_notes.append(f"{name}={value}")
            return value
        return [draw(st.integers(low, high)) for _ in range(count)]

    kernel = ints("kernel_shape", rank, 1, 3)
    attrs: dict = {}
    for name, low, high in (("strides", 1, 3), ("dilations", 1, 2)):
        if draw(st.booleans()) and not (name == "dilations" and op in ("AveragePool", "LpPool")):  # opset 17
            attrs[name] = ints(name, rank, low, high)
    auto_pad = draw(st.sampled_from(["NOTSET"] * 6 + ["SAME_UPPER", "SAME_LOWER", "VALID"]))
    if auto_pad != "NOTSET":
        attrs["auto_pad"] = auto_pad
    elif draw(st.booleans()):
        attrs["pads"] = ints("pads", 2 * rank, 0, 2)
    operands = [Operand("X", rng.standard_normal((n, c, *spatial)).astype(dtype))]
    if op in ("Conv", "ConvTranspose"):
        group = draw(st.sampled_from([1, 1, 1, c])) if draw(st.integers(0, 9)) else draw(st.sampled_from(HOSTILE_INTS))
        if group != 1:
            attrs["group"] = group
        sizing = group if 0 < group <= 3 else 1  # a hostile group still gets small weights
        m = sizing * draw(st.integers(1, 2))
        per_group = c // sizing if c % sizing == 0 else c
        weight_kernel = [k if 0 < k <= 4 else 1 for k in kernel]
        shape = (m, per_group, *weight_kernel) if op == "Conv" else (c, m // sizing, *weight_kernel)
        operands.append(Operand("W", (rng.standard_normal(shape) * 0.5).astype(dtype)))
        if draw(st.booleans()):
            operands.append(Operand("B", rng.standard_normal(m).astype(dtype)))
        if draw(st.booleans()) or any(k != w for k, w in zip(kernel, weight_kernel)):
            attrs["kernel_shape"] = kernel
        if op == "ConvTranspose" and draw(st.integers(0, 3)) == 0:
            attrs["output_padding"] = ints("output_padding", rank, 0, 1)
        if op == "ConvTranspose" and draw(st.integers(0, 5)) == 0:
            attrs["output_shape"] = ints("output_shape", rank, 1, 9)
    else:
        attrs["kernel_shape"] = kernel
        if op in ("MaxPool", "AveragePool") and draw(st.booleans()):
            attrs["ceil_mode"] = 1
        if op == "AveragePool" and draw(st.booleans()):
            attrs["count_include_pad"] = 1
        if op == "LpPool" and draw(st.booleans()):
            attrs["p"] = draw(st.sampled_from([1, 2, 3, 0, -1, 2**31]))
    outputs = ["Y", "Indices"] if op == "MaxPool" and draw(st.integers(0, 3)) == 0 else ["Y"]
    node = helper.make_node(op, [o.name for o in operands], outputs, name=op.lower())
    node.attribute.extend(helper.make_attribute(k, v, attr_type=AttributeProto.INTS if v == [] else None)
                          for k, v in attrs.items())
    model, feeds = _model(node, operands, outputs)
    described = ", ".join(f"{k}={v}" for k, v in attrs.items())
    return {"kind": "onnx", "model": model, "feeds": feeds, "label": op, "runs": 3,
            "description": f"{op} {dtype.name} X{(n, c, *spatial)} {described}"
                           + (f" (hostile: {'; '.join(hostile_notes)})" if hostile_notes else "")}


def _model(node, operands, outputs) -> tuple[bytes, dict]:
    """The model, its outputs declared by hand: onnx's shape inference (which build_model uses for valid
    seeds) can segfault on hostile attributes, and this runs in the fuzz parent."""
    x = operands[0].value
    elem = helper.np_dtype_to_tensor_dtype(x.dtype)
    dims = [f"d{i}" for i in range(x.ndim)]
    graph = helper.make_graph(
        [node], node.name, [helper.make_tensor_value_info("X", elem, list(x.shape))],
        [helper.make_tensor_value_info(o, elem if o == "Y" else TensorProto.INT64, dims) for o in outputs],
        [tensor_proto(o.name, o.value) for o in operands[1:]])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=8)
    return model.SerializeToString(), {"X": x}
