"""The second route into the executor: the same (mutated) graph built through d5's Python API
(``Network.add_input`` / ``add_param`` / ``add_node`` / ``add_output``) instead of ``Network.from_onnx``.

Import runs onnx.checker, which refuses many broken nodes before d5's own checks see them; a graph built
in Python meets only d5's checks (``add_node``, ``validate()``, the executor's build), which is what
issue 7 asks to harden. :func:`network_spec` turns a ModelProto into plain data in the parent (None when
an initializer cannot even be decoded: that damage is the import route's business), and
:func:`build_network` replays it in the worker.

>>> from onnx import helper, TensorProto
>>> node = helper.make_node("Relu", ["x", "x"], ["y"])
>>> graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])], [])
>>> spec = network_spec(helper.make_model(graph))
>>> spec["nodes"][0][:3], spec["inputs"]
(('Relu', ['x', 'x'], ['y']), [('x', [2], 'float32', 'tensor')])
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import AttributeProto, helper, numpy_helper


def _dtype(elem_type: int):
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)).name
    except Exception:  # no NumPy equivalent (or no such type): hand d5 the raw number, as a caller might
        return elem_type


def _value_info(value: onnx.ValueInfoProto):
    kind, type_proto = "tensor", value.type
    if type_proto.HasField("sequence_type"):
        kind, type_proto = "sequence", type_proto.sequence_type.elem_type
    elif type_proto.HasField("optional_type"):
        kind, type_proto = "optional", type_proto.optional_type.elem_type
    tensor = type_proto.tensor_type
    shape = None
    if tensor.HasField("shape"):
        shape = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tensor.shape.dim]
    return value.name, shape, _dtype(tensor.elem_type), kind


def _attribute(attribute: onnx.AttributeProto):
    if attribute.type == AttributeProto.GRAPH or attribute.type == AttributeProto.GRAPHS:
        raise LookupError  # not expressible as a plain Python value: leave the attribute out
    value = helper.get_attribute_value(attribute)
    if attribute.type == AttributeProto.TENSOR:
        return numpy_helper.to_array(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, list) and value and isinstance(value[0], bytes):
        return [v.decode("utf-8", "replace") for v in value]
    return value


def network_spec(model: onnx.ModelProto) -> dict | None:
    graph = model.graph
    try:
        params = [(t.name, numpy_helper.to_array(t)) for t in graph.initializer]
    except Exception:
        return None
    initialized = {name for name, _ in params}
    nodes = []
    for node in graph.node:
        attrs = {}
        for attribute in node.attribute:
            try:
                attrs[attribute.name] = _attribute(attribute)
            except Exception:
                continue
        nodes.append((node.op_type, list(node.input), list(node.output), node.name, node.domain, attrs))
    opset = next((entry.version for entry in model.opset_import if entry.domain in ("", "ai.onnx")), None)
    return {"name": graph.name or "fuzz", "opset": opset, "params": params, "nodes": nodes,
            "inputs": [_value_info(v) for v in graph.input if v.name not in initialized],
            "outputs": [o.name for o in graph.output]}


def build_network(spec: dict):
    import d5

    network = d5.Network(spec["name"], opset=spec["opset"])
    for name, shape, dtype, kind in spec["inputs"]:
        network.add_input(name, shape, dtype, kind=kind)
    for name, value in spec["params"]:
        network.add_param(name, value)
    for op_type, inputs, outputs, name, domain, attrs in spec["nodes"]:
        network.add_node(op_type, inputs, outputs, name=name or None, domain=domain or None, **attrs)
    for name in spec["outputs"]:
        network.add_output(name)
    return network
