"""Small valid ONNX models the mutation fuzzers start from, and the helpers that build them.

A model is a :class:`Seed`: serialized ModelProto bytes plus the feeds it runs on. The seeds are a tiny CNN
and a tiny MLP from :class:`d5.models.builder.NetworkBuilder` (with their loss nodes and integer labels),
and one single-node model per operator in :func:`single_node_templates`, each of which onnxruntime runs
and d5 must run too (test_fuzz checks that every seed is accepted and matches onnxruntime).

>>> seed = single_node_seed("Relu", np.random.default_rng(0), placement=lambda name: False)
>>> seed.label, sorted(seed.feeds)
('Relu', ['x'])
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


@dataclasses.dataclass(frozen=True)
class Seed:
    label: str
    model: bytes
    feeds: dict


@dataclasses.dataclass(frozen=True)
class Operand:
    """One node input: ``value`` is its example value; ``initializer`` its default placement (integer
    operands, which carry shapes and indices, default to initializers so their values are known)."""

    name: str
    value: np.ndarray | None  # None: an omitted optional input ('')
    initializer: bool = False


def tensor_proto(name: str, array: np.ndarray, elem_type: int | None = None) -> TensorProto:
    """``array`` as an initializer, optionally converted to an ONNX element type NumPy lacks
    (bfloat16, float8, string, ...)."""
    if elem_type is None or elem_type == helper.np_dtype_to_tensor_dtype(array.dtype):
        return numpy_helper.from_array(np.asarray(array), name)
    dims = list(array.shape)
    if elem_type == TensorProto.STRING:
        return helper.make_tensor(name, elem_type, dims, [str(v).encode() for v in array.ravel()])
    if elem_type == TensorProto.BOOL:
        return helper.make_tensor(name, elem_type, dims, (np.asarray(array) != 0).ravel().tolist())
    if elem_type in (TensorProto.COMPLEX64, TensorProto.COMPLEX128):
        return helper.make_tensor(name, elem_type, dims, np.asarray(array, np.complex128).ravel().tolist())
    values = np.asarray(array, np.float64).ravel()
    if np.issubdtype(helper.tensor_dtype_to_np_dtype(elem_type), np.integer):
        values = np.nan_to_num(values).astype(np.int64) % 7  # small, in range for every integer type
    return helper.make_tensor(name, elem_type, dims, values.tolist())


def build_model(nodes: list[onnx.NodeProto], operands: list[Operand], outputs: list[str],
                placement: Callable[[str], bool], opset: int = OPSET, name: str = "fuzz") -> tuple[bytes, dict]:
    """A model of ``nodes``; each operand becomes an initializer if ``placement(name)`` says so (integer
    operands always do), else a graph input fed with its value. Output types come from shape inference."""
    inputs, initializers, feeds = [], [], {}
    for operand in operands:
        if operand.value is None:
            continue
        if operand.initializer or placement(operand.name):
            initializers.append(tensor_proto(operand.name, operand.value))
        else:
            elem = helper.np_dtype_to_tensor_dtype(operand.value.dtype)
            inputs.append(helper.make_tensor_value_info(operand.name, elem, list(operand.value.shape)))
            feeds[operand.name] = operand.value
    graph = helper.make_graph(nodes, name, inputs, [helper.make_empty_tensor_value_info(o) for o in outputs],
                              initializers)
    # IR version 8 goes with opset 17 (onnxruntime refuses IR versions newer than it knows).
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="d5-fuzz",
                              ir_version=8)
    inferred = onnx.shape_inference.infer_shapes(model)
    types = {v.name: v.type for v in [*inferred.graph.value_info, *inferred.graph.output]
             if v.type.tensor_type.elem_type}
    for output in model.graph.output:
        if output.name in types:
            output.type.CopyFrom(types[output.name])
    return model.SerializeToString(), feeds


def single_node_templates(rng: np.random.Generator) -> dict[str, tuple[list[Operand], dict, int]]:
    """op type -> (operands, attributes, number of outputs): one small valid node per operator."""
    def f(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    def i(values):
        return np.array(values, np.int64)

    def floats(values):
        return np.array(values, np.float32)

    def op(*operands, outputs=1, **attrs):
        return [Operand(*o) for o in operands], attrs, outputs

    return {
        "Conv": op(("X", f(1, 2, 5, 5)), ("W", f(3, 2, 3, 3)), ("B", f(3)),
                   kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1], dilations=[1, 1], group=1),
        "ConvTranspose": op(("X", f(1, 2, 4, 4)), ("W", f(2, 3, 3, 3)), ("B", f(3)), kernel_shape=[3, 3],
                            strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1]),
        "MaxPool": op(("X", f(1, 2, 6, 6)), kernel_shape=[2, 2], strides=[2, 2], pads=[0, 0, 0, 0]),
        "AveragePool": op(("X", f(1, 2, 6, 6)), kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                          count_include_pad=0),
        "Gemm": op(("A", f(3, 4)), ("B", f(5, 4)), ("C", f(5)), transB=1, alpha=1.0, beta=1.0),
        "MatMul": op(("A", f(2, 3, 4)), ("B", f(4, 5))),
        "Softmax": op(("X", f(2, 5)), axis=-1),
        "Gather": op(("data", f(5, 3)), ("indices", i([0, 4, 2, 1]), True), axis=0),
        "ScatterElements": op(("data", f(3, 3)), ("indices", i([[1, 0, 2], [0, 2, 1]]), True),
                              ("updates", f(2, 3)), axis=0),
        "ScatterND": op(("data", f(4, 3)), ("indices", i([[0], [2]]), True), ("updates", f(2, 3))),
        "OneHot": op(("indices", i([0, 2, 1, 3]), True), ("depth", i(4), True), ("values", floats([0, 1])), axis=-1),
        "Einsum": op(("A", f(2, 3)), ("B", f(3, 4)), equation="ij,jk->ik"),
        "Reshape": op(("data", f(2, 3, 4)), ("shape", i([4, -1]), True)),
        "Expand": op(("input", f(3, 1)), ("shape", i([2, 3, 4]), True)),
        "Tile": op(("input", f(2, 3)), ("repeats", i([2, 2]), True)),
        "Pad": op(("data", f(2, 3)), ("pads", i([1, 1, 1, 1]), True), ("constant_value", floats(0.5)), mode="constant"),
        "Resize": op(("X", f(1, 1, 2, 2)), ("", None), ("scales", floats([1, 1, 2, 2]), True), mode="nearest"),
        "Slice": op(("data", f(4, 5)), ("starts", i([1, 0]), True), ("ends", i([3, 5]), True), ("axes", i([0, 1]), True),
                    ("steps", i([1, 2]), True)),
        "Concat": op(("a", f(2, 3)), ("b", f(2, 2)), axis=1),
        "Split": op(("input", f(6, 2)), ("split", i([2, 4]), True), outputs=2, axis=0),
        "ConstantOfShape": op(("input", i([2, 3]), True), value=numpy_helper.from_array(floats([1.5]), "value")),
        "Range": op(("start", floats(0), True), ("limit", floats(5), True), ("delta", floats(1), True)),
        "Add": op(("a", f(2, 3)), ("b", f(3))),
        "Relu": op(("x", f(2, 3))),
        # Beyond the list: common operators whose attributes and inputs carry sizes or indices.
        "BatchNormalization": op(("X", f(2, 3, 4)), ("scale", f(3)), ("B", f(3)), ("mean", f(3)),
                                 ("var", np.abs(f(3)) + 0.5), epsilon=1e-5),
        "Transpose": op(("data", f(2, 3, 4)), perm=[2, 0, 1]),
        "ReduceSum": op(("data", f(2, 3, 4)), ("axes", i([1]), True), keepdims=1),
        "Flatten": op(("input", f(2, 3, 4)), axis=1),
        "Unsqueeze": op(("data", f(2, 3)), ("axes", i([0, 3]), True)),
        "Squeeze": op(("data", f(2, 1, 3)), ("axes", i([1]), True)),
        "TopK": op(("X", f(3, 5)), ("K", i([2]), True), outputs=2, axis=1),
        "CumSum": op(("x", f(2, 4)), ("axis", i(1), True)),
        "GlobalAveragePool": op(("X", f(1, 2, 3, 3))),
        "LayerNormalization": op(("X", f(2, 3, 4)), ("Scale", f(4)), ("B", f(4)), axis=-1),
        "Clip": op(("input", f(2, 3)), ("min", floats(-0.5), True), ("max", floats(0.5), True)),
        "ArgMax": op(("data", f(3, 4)), axis=1, keepdims=0),
        "GatherElements": op(("data", f(3, 3)), ("indices", i([[0, 2, 1], [2, 0, 0]]), True), axis=0),
        "GatherND": op(("data", f(3, 4)), ("indices", i([[0, 1], [2, 3]]), True)),
        "Trilu": op(("input", f(3, 4)), ("k", i(1), True), upper=1),
        "DepthToSpace": op(("input", f(1, 4, 2, 3)), blocksize=2, mode="DCR"),
        "LRN": op(("X", f(1, 4, 3, 3)), size=3),
        "InstanceNormalization": op(("input", f(2, 3, 4)), ("scale", f(3)), ("B", f(3))),
        "Div": op(("A", f(2, 3)), ("B", np.abs(f(2, 3)) + 0.5)),
    }


def single_node_seed(op_type: str, rng: np.random.Generator, placement: Callable[[str], bool]) -> Seed:
    operands, attrs, n_outputs = single_node_templates(rng)[op_type]
    outputs = ["y"] if n_outputs == 1 else [f"y{k}" for k in range(n_outputs)]
    node = helper.make_node(op_type, [o.name for o in operands], outputs, name=op_type.lower(), **attrs)
    model, feeds = build_model([node], operands, outputs, placement, name=op_type.lower())
    return Seed(op_type, model, feeds)


SINGLE_NODE_OPS = tuple(single_node_templates(np.random.default_rng(0)))


@functools.lru_cache(maxsize=None)
def builder_models() -> tuple[tuple[str, bytes], ...]:
    """The tiny CNN and MLP (with their SoftmaxCrossEntropyLoss nodes), as ONNX bytes."""
    from d5.models.builder import NetworkBuilder

    b = NetworkBuilder("tiny_cnn", input_shape=(1, 6, 6), num_classes=3, seed=0)
    x = b.max_pool(b.relu(b.conv(b.input, 2, kernel=3, pad=1)), 2)
    cnn = b.classifier(b.linear(b.flatten(x), 3))
    b = NetworkBuilder("tiny_mlp", input_shape=(4,), num_classes=2, seed=1)
    mlp = b.classifier(b.linear(b.relu(b.linear(b.input, 5)), 2))
    return tuple((net.name, net.to_onnx().SerializeToString()) for net in (cnn, mlp))


def builder_seed(name: str, rng: np.random.Generator, batch: int = 2) -> Seed:
    model = dict(builder_models())[name]
    proto = onnx.ModelProto.FromString(model)
    feeds = {}
    for value in proto.graph.input:
        dims = [d.dim_value if d.HasField("dim_value") else batch for d in value.type.tensor_type.shape.dim]
        elem = value.type.tensor_type.elem_type
        if elem == TensorProto.INT64:
            feeds[value.name] = rng.integers(0, 2, size=dims).astype(np.int64)  # labels: valid for 2 or 3 classes
        else:
            feeds[value.name] = rng.standard_normal(dims).astype(helper.tensor_dtype_to_np_dtype(elem))
    return Seed(name, model, feeds)


BUILDER_NAMES = ("tiny_cnn", "tiny_mlp")
