"""Mutations of valid ONNX models, and the hypothesis strategy that applies them (``onnx_mutation_case``).

Each mutation edits a ModelProto (and the feeds that go with it) in place and returns a one-line
description of what it did, which becomes part of the case description. They attack what an ONNX file or
a caller controls: attribute values (hostile integers such as 2**31, 2**32, 2**63 - 1 and -1, NaN and
infinite floats, odd strings) and attribute types, node input and output arity, element types and shapes
of inputs and initializers, initializer values (out-of-range indices, huge shapes that are cheap to
write down), initializer protos whose dims or type lie about their data, the opset, the operator type,
the model bytes themselves, and the feeds handed to ``executor.inference``.

>>> sorted(MUTATIONS)[:3]
['attribute_hostile', 'attribute_remove', 'attribute_unknown']
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import onnx
from hypothesis import strategies as st
from hypothesis.errors import HypothesisException
from onnx import AttributeProto, TensorProto, helper, numpy_helper

from fuzz_network_spec import network_spec
from fuzz_onnx_models import (BUILDER_NAMES, OPSET, SINGLE_NODE_OPS, Seed, builder_seed, single_node_seed,
                              tensor_proto)

HOSTILE_INTS = (0, 1, -1, 2, 3, 7, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**62, 2**63 - 1, -2**31, -2**63, 2**28)
HOSTILE_FLOATS = (0.0, -0.0, -1.0, 0.5, 2.0, 1e-45, 1e30, 3.4e38, float("inf"), float("-inf"), float("nan"))
HOSTILE_STRINGS = ("", "NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID", "bogus", "constant", "reflect", "edge",
                   "wrap", "linear", "cubic", "nearest", "DCR", "CRD", "ij,jk", "...,...->...", "ii->i",
                   "ij,jk->ikz", "i,i->", "x" * 300, "\x00", "é")
# Element types for graph inputs (fed from NumPy) and for initializers (written as TensorProto).
FEED_DTYPES = ("float16", "float32", "float64", "int8", "uint8", "int16", "int32", "int64", "uint32", "uint64",
               "bool")
INITIALIZER_TYPES = (TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.INT8, TensorProto.UINT8,
                     TensorProto.INT32, TensorProto.INT64, TensorProto.UINT64, TensorProto.BOOL, TensorProto.BFLOAT16,
                     TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E5M2, TensorProto.STRING, TensorProto.COMPLEX64)
OPSETS = (1, 6, 7, 9, 10, 11, 12, 13, 15, 16, 18, 19, 21, 22, 23, 99, 0, -1)

Draw = Callable


def _node(model: onnx.ModelProto, draw: Draw) -> onnx.NodeProto:
    return model.graph.node[draw(st.integers(0, len(model.graph.node) - 1))]


def _schema_attributes(node: onnx.NodeProto) -> dict[str, int]:
    """Attribute name -> AttributeProto type, from the node's schema (plus those it already has)."""
    try:
        schema = onnx.defs.get_schema(node.op_type, OPSET, node.domain or "")
        names = {name: int(attr.type) for name, attr in schema.attributes.items()}
    except Exception:  # an op type with no schema (after op_type_swap to an unknown name, say)
        names = {}
    names.update({a.name: a.type for a in node.attribute})
    return names


def _hostile_ints(draw: Draw, length_hint: int) -> list[int]:
    length = draw(st.sampled_from(sorted({0, 1, 3, 8, max(length_hint, 1), 2 * max(length_hint, 1)})))
    if draw(st.booleans()):  # one hostile value everywhere: pads=[2**32 - 1] * 4
        return [draw(st.sampled_from(HOSTILE_INTS))] * length
    return draw(st.lists(st.one_of(st.sampled_from(HOSTILE_INTS), st.integers(0, 3)), min_size=length, max_size=length))


def _value_of_type(draw: Draw, attr_type: int, length_hint: int):
    if attr_type == AttributeProto.INT:
        return draw(st.sampled_from(HOSTILE_INTS))
    if attr_type == AttributeProto.INTS:
        return _hostile_ints(draw, length_hint)
    if attr_type == AttributeProto.FLOAT:
        return draw(st.sampled_from(HOSTILE_FLOATS))
    if attr_type == AttributeProto.FLOATS:
        return draw(st.lists(st.sampled_from(HOSTILE_FLOATS), min_size=0, max_size=4))
    if attr_type == AttributeProto.STRING:
        return draw(st.sampled_from(HOSTILE_STRINGS))
    if attr_type == AttributeProto.STRINGS:
        return draw(st.lists(st.sampled_from(HOSTILE_STRINGS[:8]), min_size=0, max_size=3))
    if attr_type == AttributeProto.TENSOR:
        return draw(st.sampled_from([
            numpy_helper.from_array(np.array([2**62], np.int64)), numpy_helper.from_array(np.zeros((0,), np.float32)),
            numpy_helper.from_array(np.ones((2, 2), np.float64)), numpy_helper.from_array(np.array(3.0, np.float32)),
            helper.make_tensor("t", TensorProto.STRING, [1], [b"s"]), helper.make_tensor("t", TensorProto.BOOL, [1], [True]),
        ]))
    if attr_type == AttributeProto.GRAPH:
        return helper.make_graph([], "g", [], [])
    return draw(st.sampled_from(HOSTILE_INTS))


def _set_attribute(node: onnx.NodeProto, name: str, value) -> None:
    kept = [a for a in node.attribute if a.name != name]
    del node.attribute[:]
    node.attribute.extend(kept)
    if isinstance(value, list) and not value:
        node.attribute.append(helper.make_attribute(name, [], attr_type=AttributeProto.INTS))
    else:
        node.attribute.append(helper.make_attribute(name, value))


def _current_length(node: onnx.NodeProto, name: str) -> int:
    for attribute in node.attribute:
        if attribute.name == name:
            return len(attribute.ints) or len(attribute.floats) or 1
    return 2


# ----------------------------------------------------------------------------------------- attributes
def attribute_hostile(model, feeds, draw) -> str:
    node = _node(model, draw)
    attributes = _schema_attributes(node)
    if not attributes:
        return attribute_unknown(model, feeds, draw)
    name = draw(st.sampled_from(sorted(attributes)))
    value = _value_of_type(draw, attributes[name], _current_length(node, name))
    _set_attribute(node, name, value)
    return f"{node.op_type}.{name} = {_short(value)}"


def attribute_wrong_type(model, feeds, draw) -> str:
    node = _node(model, draw)
    attributes = _schema_attributes(node)
    name = draw(st.sampled_from(sorted(attributes))) if attributes else "axis"
    wrong = draw(st.sampled_from([t for t in (AttributeProto.INT, AttributeProto.INTS, AttributeProto.FLOAT,
                                              AttributeProto.FLOATS, AttributeProto.STRING, AttributeProto.STRINGS,
                                              AttributeProto.TENSOR, AttributeProto.GRAPH)
                                  if t != attributes.get(name)]))
    value = _value_of_type(draw, wrong, 2)
    _set_attribute(node, name, value)
    return f"{node.op_type}.{name} given as {AttributeProto.AttributeType.Name(wrong)} {_short(value)}"


def attribute_remove(model, feeds, draw) -> str:
    node = _node(model, draw)
    if not node.attribute:
        return attribute_unknown(model, feeds, draw)
    index = draw(st.integers(0, len(node.attribute) - 1))
    name = node.attribute[index].name
    del node.attribute[index]
    return f"{node.op_type}.{name} removed"


def attribute_unknown(model, feeds, draw) -> str:
    node = _node(model, draw)
    _set_attribute(node, "no_such_attribute", draw(st.sampled_from(HOSTILE_INTS)))
    return f"{node.op_type} got an unknown attribute"


# ------------------------------------------------------------------------------------- inputs, outputs
def input_arity(model, feeds, draw) -> str:
    node = _node(model, draw)
    names = list(node.input)
    kind = draw(st.sampled_from(["drop", "duplicate", "append", "empty", "swap", "unknown", "own_output"]))
    if kind == "drop" and names:
        del names[draw(st.integers(0, len(names) - 1))]
    elif kind == "duplicate" and names:
        names.insert(draw(st.integers(0, len(names))), draw(st.sampled_from(names)))
    elif kind == "append":
        available = [i.name for i in model.graph.input] + [i.name for i in model.graph.initializer]
        names += draw(st.lists(st.sampled_from(available or ["x"]), min_size=1, max_size=3))
    elif kind == "empty" and names:
        names[draw(st.integers(0, len(names) - 1))] = ""
    elif kind == "swap" and len(names) > 1:
        a, b = draw(st.lists(st.integers(0, len(names) - 1), min_size=2, max_size=2, unique=True))
        names[a], names[b] = names[b], names[a]
    elif kind == "unknown" and names:
        names[draw(st.integers(0, len(names) - 1))] = "nowhere"
    elif kind == "own_output" and names and node.output:
        names[draw(st.integers(0, len(names) - 1))] = node.output[0]  # a cycle
    del node.input[:]
    node.input.extend(names)
    return f"{node.op_type} inputs {kind}: {names}"


def output_arity(model, feeds, draw) -> str:
    node = _node(model, draw)
    kind = draw(st.sampled_from(["extra", "drop", "collide", "graph_extra"]))
    if kind == "extra":
        node.output.append("extra_output")
    elif kind == "drop" and len(node.output):
        node.output.pop()
    elif kind == "collide" and len(node.output) and (model.graph.input or model.graph.initializer):
        existing = [i.name for i in model.graph.input] + [i.name for i in model.graph.initializer]
        node.output[0] = draw(st.sampled_from(existing))
    else:
        model.graph.output.append(helper.make_tensor_value_info("not_produced", TensorProto.FLOAT, None))
    return f"{node.op_type} outputs {kind}: {list(node.output)}"


# ----------------------------------------------------------------------------- types, shapes, values
def _graph_input(model, name):
    return next((v for v in model.graph.input if v.name == name), None)


def feed_dtype(model, feeds, draw) -> str:
    names = [v.name for v in model.graph.input if v.name in feeds]
    if not names:
        return initializer_type(model, feeds, draw)
    name = draw(st.sampled_from(names))
    dtype = np.dtype(draw(st.sampled_from(FEED_DTYPES)))
    value = feeds[name]
    value = np.abs(np.nan_to_num(value)) if dtype.kind == "u" else np.nan_to_num(value)
    feeds[name] = (value > 0) if dtype == np.bool_ else value.astype(dtype)
    _graph_input(model, name).type.tensor_type.elem_type = helper.np_dtype_to_tensor_dtype(dtype)
    return f"input {name!r} declared and fed as {dtype.name}"


def feed_shape(model, feeds, draw) -> str:
    names = [v.name for v in model.graph.input if v.name in feeds]
    if not names:
        return initializer_shape(model, feeds, draw)
    name = draw(st.sampled_from(names))
    shape = _new_shape(draw, feeds[name].shape)
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    feeds[name] = _like(rng, feeds[name].dtype, shape)
    declared = _graph_input(model, name)
    where = draw(st.sampled_from(["declared and fed", "fed only", "declared only"]))
    if where != "fed only":
        declared.type.tensor_type.ClearField("shape")
        for size in shape:
            declared.type.tensor_type.shape.dim.add().dim_value = size
    return f"input {name!r} {where} with shape {shape}"


def _new_shape(draw, shape: tuple) -> tuple:
    shape = list(shape)
    kind = draw(st.sampled_from(["zero", "one", "drop", "add", "double", "reverse"]))
    if kind == "zero" and shape:
        shape[draw(st.integers(0, len(shape) - 1))] = 0
    elif kind == "one" and shape:
        shape[draw(st.integers(0, len(shape) - 1))] = 1
    elif kind == "drop" and shape:
        shape.pop(draw(st.integers(0, len(shape) - 1)))
    elif kind == "add":
        shape.insert(draw(st.integers(0, len(shape))), draw(st.sampled_from([0, 1, 2, 3])))
    elif kind == "double" and shape:
        index = draw(st.integers(0, len(shape) - 1))
        shape[index] = min(2 * shape[index] + 1, 64)
    else:
        shape.reverse()
    return tuple(shape)


def _like(rng: np.random.Generator, dtype: np.dtype, shape: tuple) -> np.ndarray:
    if dtype.kind in "iu":
        return rng.integers(0, 3, size=shape).astype(dtype)
    if dtype.kind == "b":
        return rng.random(shape) > 0.5
    return rng.standard_normal(shape).astype(dtype)


def _initializer(model, draw, kinds: str | None = None):
    candidates = [t for t in model.graph.initializer
                  if kinds is None or helper.tensor_dtype_to_np_dtype(t.data_type).kind in kinds]
    return draw(st.sampled_from(candidates)) if candidates else None


def initializer_type(model, feeds, draw) -> str:
    tensor = _initializer(model, draw)
    if tensor is None:
        return attribute_hostile(model, feeds, draw)
    elem = draw(st.sampled_from(INITIALIZER_TYPES))
    tensor.CopyFrom(tensor_proto(tensor.name, numpy_helper.to_array(tensor), elem))
    return f"initializer {tensor.name!r} as {TensorProto.DataType.Name(elem)}"


def initializer_shape(model, feeds, draw) -> str:
    tensor = _initializer(model, draw)
    if tensor is None:
        return attribute_hostile(model, feeds, draw)
    array = numpy_helper.to_array(tensor)
    shape = _new_shape(draw, array.shape)
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    tensor.CopyFrom(numpy_helper.from_array(_like(rng, array.dtype, shape), tensor.name))
    return f"initializer {tensor.name!r} reshaped to {shape}"


def initializer_values(model, feeds, draw) -> str:
    """Hostile values where they are cheap and dangerous: indices, shapes, repeats, depths, pads, limits."""
    tensor = _initializer(model, draw)
    if tensor is None:
        return attribute_hostile(model, feeds, draw)
    array = numpy_helper.to_array(tensor).copy()
    if array.size == 0:
        return f"initializer {tensor.name!r} is empty, left alone"
    count = draw(st.integers(1, array.size))
    positions = draw(st.lists(st.integers(0, array.size - 1), min_size=1, max_size=count, unique=True))
    flat = array.reshape(-1)
    if array.dtype.kind in "iu":
        info = np.iinfo(array.dtype)
        values = [v for v in HOSTILE_INTS + (-100, 100, 2**40) if info.min <= v <= info.max]
        for p in positions:
            flat[p] = draw(st.sampled_from(values))
    elif array.dtype.kind == "f":
        for p in positions:
            flat[p] = draw(st.sampled_from(HOSTILE_FLOATS + (1e9, -1e9)))
    else:
        return f"initializer {tensor.name!r} ({array.dtype}) left alone"
    tensor.CopyFrom(numpy_helper.from_array(array, tensor.name))
    return f"initializer {tensor.name!r} = {_short(array.tolist())}"


def initializer_lie(model, feeds, draw) -> str:
    """A TensorProto whose dims, type or byte count disagree with its data."""
    tensor = _initializer(model, draw)
    if tensor is None:
        return attribute_hostile(model, feeds, draw)
    kind = draw(st.sampled_from(["dims", "data_type", "truncate", "external"]))
    if kind == "dims":
        dims = draw(st.sampled_from([[2**31], [-1], [0], [2**62, 2**62], [2**63 - 1], list(tensor.dims) + [2],
                                     list(tensor.dims)[:-1], [3, 3, 3, 3, 3]]))
        del tensor.dims[:]
        tensor.dims.extend(dims)
        return f"initializer {tensor.name!r} claims dims {dims}"
    if kind == "data_type":
        value = draw(st.sampled_from([0, 99, 2**31 - 1, TensorProto.STRING, TensorProto.DOUBLE, TensorProto.INT8]))
        tensor.data_type = value
        return f"initializer {tensor.name!r} claims data_type {value}"
    if kind == "truncate":
        raw = numpy_helper.to_array(tensor).tobytes()
        tensor.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(tensor), tensor.name))
        tensor.raw_data = raw[: draw(st.integers(0, max(len(raw) - 1, 0)))]
        return f"initializer {tensor.name!r} raw_data truncated to {len(tensor.raw_data)} bytes"
    tensor.data_location = TensorProto.EXTERNAL
    del tensor.external_data[:]
    entry = tensor.external_data.add()
    entry.key, entry.value = "location", draw(st.sampled_from(["missing.bin", "../../etc/passwd", "/dev/zero", ""]))
    return f"initializer {tensor.name!r} points to external data {entry.value!r}"


# ------------------------------------------------------------------------------------ graph and model
def opset(model, feeds, draw) -> str:
    version = draw(st.sampled_from(OPSETS))
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx"):
            entry.version = version
    return f"opset {version}"


def op_type_swap(model, feeds, draw) -> str:
    node = _node(model, draw)
    old = node.op_type
    node.op_type = draw(st.sampled_from(SINGLE_NODE_OPS + ("NoSuchOp",)))
    return f"node {old} became {node.op_type}"


def domain(model, feeds, draw) -> str:
    node = _node(model, draw)
    node.domain = draw(st.sampled_from(["com.bogus", "ai.onnx.ml", "ai.onnx.preview.training", "com.microsoft"]))
    return f"{node.op_type} in domain {node.domain!r}"


def graph_edit(model, feeds, draw) -> str:
    kind = draw(st.sampled_from(["drop_node", "duplicate_node", "drop_initializer", "drop_graph_input"]))
    if kind == "drop_node" and len(model.graph.node) > 1:
        del model.graph.node[draw(st.integers(0, len(model.graph.node) - 1))]
    elif kind == "duplicate_node":
        model.graph.node.append(_node(model, draw))
    elif kind == "drop_initializer" and len(model.graph.initializer):
        del model.graph.initializer[draw(st.integers(0, len(model.graph.initializer) - 1))]
    elif len(model.graph.input):
        index = draw(st.integers(0, len(model.graph.input) - 1))
        feeds.pop(model.graph.input[index].name, None)
        del model.graph.input[index]
    return f"graph {kind}"


def feeds_misuse(model, feeds, draw) -> str:
    """What a caller may hand ``executor.inference`` instead of a dict of arrays (item 4 of issue 7).
    Returns the description; the replacement object is stored under the key ``"__replace__"``."""
    name = draw(st.sampled_from(sorted(feeds))) if feeds else "x"
    value = feeds.get(name, np.zeros(1, np.float32))
    kind = draw(st.sampled_from(["list", "none", "empty", "unknown", "scalar", "nested_list", "strings", "objects",
                                 "float_for_int", "zero_d", "strided", "big_endian", "float64", "string_key"]))
    replacement: object = dict(feeds)
    if kind == "list":
        replacement = list(feeds.values())
    elif kind == "none":
        replacement = None
    elif kind == "empty":
        replacement = {}
    elif kind == "unknown":
        replacement["no_such_input"] = value
    elif kind == "scalar":
        replacement[name] = 3
    elif kind == "nested_list":
        replacement[name] = [[1, 2], [3]]
    elif kind == "strings":
        replacement[name] = np.array(["a"] * max(value.size, 1)).reshape(value.shape or (1,))
    elif kind == "objects":
        replacement[name] = np.array([object()] * max(value.size, 1), dtype=object)
    elif kind == "float_for_int":
        replacement[name] = value.astype(np.float64) + 0.5
    elif kind == "zero_d":
        replacement[name] = np.float32(1.0)
    elif kind == "strided" and value.ndim:
        replacement[name] = np.repeat(value, 2, axis=-1)[..., ::2]  # same values, not contiguous
    elif kind == "big_endian":
        replacement[name] = value.astype(value.dtype.newbyteorder(">"))
    elif kind == "float64" and value.dtype.kind == "f":
        replacement[name] = value.astype(np.float64)
    elif kind == "string_key":
        replacement = {1: value}
    feeds["__replace__"] = replacement
    return f"feeds misuse: {kind} ({name!r})"


MUTATIONS: dict[str, Callable] = {
    "attribute_hostile": attribute_hostile, "attribute_wrong_type": attribute_wrong_type,
    "attribute_remove": attribute_remove, "attribute_unknown": attribute_unknown, "input_arity": input_arity,
    "output_arity": output_arity, "feed_dtype": feed_dtype, "feed_shape": feed_shape,
    "initializer_type": initializer_type, "initializer_shape": initializer_shape,
    "initializer_values": initializer_values, "initializer_lie": initializer_lie, "opset": opset,
    "op_type_swap": op_type_swap, "domain": domain, "graph_edit": graph_edit, "feeds_misuse": feeds_misuse,
}
# How often each is drawn: the ones that reach operator code most.
WEIGHTS = {"attribute_hostile": 6, "initializer_values": 5, "input_arity": 3, "feed_dtype": 3, "feed_shape": 3,
           "initializer_type": 2, "initializer_shape": 2, "attribute_wrong_type": 2, "initializer_lie": 2}


def _short(value, limit: int = 80) -> str:
    text = repr(value) if not isinstance(value, onnx.TensorProto) else f"tensor<{value.data_type}>{list(value.dims)}"
    return text if len(text) <= limit else text[:limit] + "..."


def _retype_outputs(model: onnx.ModelProto) -> list[str]:
    """Redeclare graph outputs with the element types the nodes now produce: otherwise a changed input type
    leaves an output declared float that onnxruntime refuses, and the oracle never runs.

    Pure Python on purpose: onnx's C++ shape inference segfaults on some hostile models (GatherND with
    batch_dims = -2**31, an initializer claiming dims [-1]), and this runs in the parent process. Types
    follow the schemas' type variables: an output typed ``T`` gets the type of the first input typed ``T``."""
    names = {TensorProto.DataType.Name(t).lower(): t for t in TensorProto.DataType.values()}
    types = {v.name: v.type.tensor_type.elem_type for v in model.graph.input if v.type.HasField("tensor_type")}
    types.update({t.name: t.data_type for t in model.graph.initializer})
    for node in model.graph.node:
        try:
            schema = onnx.defs.get_schema(node.op_type, OPSET, node.domain or "")
        except Exception:
            continue
        bound: dict[str, int] = {}
        for index, name in enumerate(node.input):
            if name in types and schema.inputs:
                bound.setdefault(schema.inputs[min(index, len(schema.inputs) - 1)].type_str, types[name])
        for index, name in enumerate(node.output):
            if not schema.outputs:
                continue
            type_str = schema.outputs[min(index, len(schema.outputs) - 1)].type_str
            elem = bound.get(type_str) or names.get(type_str[len("tensor("):-1] if type_str.startswith("tensor(") else "")
            if elem:
                types[name] = elem
    changed = []
    for output in model.graph.output:
        if output.type.HasField("tensor_type") and types.get(output.name, 0) not in (0, output.type.tensor_type.elem_type):
            output.type.tensor_type.elem_type = types[output.name]
            changed.append(f"output {output.name!r} redeclared")
    return changed


@st.composite
def seed_model(draw) -> Seed:
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    label = draw(st.sampled_from(SINGLE_NODE_OPS + BUILDER_NAMES))
    if label in BUILDER_NAMES:
        return builder_seed(label, rng, batch=draw(st.sampled_from([1, 2, 3])))
    as_param = draw(st.booleans())  # float operands as trainable initializers, so backprop has work to do
    return single_node_seed(label, rng, placement=lambda name: as_param and name not in ("X", "x", "A", "data", "input"))


@st.composite
def onnx_mutation_case(draw) -> dict:
    seed = draw(seed_model())
    names = sorted(MUTATIONS)
    pool = [name for name in names for _ in range(WEIGHTS.get(name, 1))]
    if seed.label in BUILDER_NAMES:
        pool += ["bytes"] * 3
    model, feeds = onnx.ModelProto.FromString(seed.model), {k: v.copy() for k, v in seed.feeds.items()}
    steps = []
    data = seed.model
    with np.errstate(all="ignore"):  # casts of hostile values to narrow types overflow on purpose
        for kind in draw(st.lists(st.sampled_from(pool), min_size=1, max_size=3)):
            if kind == "bytes":  # byte damage is applied to the serialized model below
                continue
            try:
                steps.append(MUTATIONS[kind](model, feeds, draw))
            except HypothesisException:
                raise
            except Exception as err:  # an earlier mutation left something this one cannot read
                steps.append(f"({kind} not applicable: {type(err).__name__})")
    replacement = feeds.pop("__replace__", feeds)
    if draw(st.integers(0, 3)):
        steps += _retype_outputs(model)
    try:
        data = model.SerializeToString()
    except Exception as err:  # protobuf refuses some values (it checks UTF-8 on strings only when parsing)
        steps.append(f"(not serializable: {type(err).__name__}; original model used)")
        data = seed.model
    if "bytes" in pool and draw(st.integers(0, 3)) == 0:
        buffer = bytearray(data)
        if draw(st.booleans()):
            buffer = buffer[: draw(st.integers(0, len(buffer) - 1))]
            steps.append(f"model bytes truncated to {len(buffer)}")
        else:
            for _ in range(draw(st.integers(1, 8))):
                buffer[draw(st.integers(0, len(buffer) - 1))] = draw(st.integers(0, 255))
            steps.append("model bytes corrupted")
        data = bytes(buffer)
    case = {"kind": "onnx", "model": data, "feeds": replacement, "label": seed.label, "runs": 3,
            "description": f"{seed.label}: " + "; ".join(steps)}
    if data != seed.model and draw(st.integers(0, 3)) == 0 and not steps[-1].startswith("model bytes"):
        spec = network_spec(model)
        if spec is not None:  # the same graph through add_node & co., past onnx.checker
            case.update(network=spec, label=f"{seed.label} (api)", description=case["description"] + " [Python API]")
    return case
