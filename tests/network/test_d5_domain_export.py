"""d5's own operators (domain ``ai.d5``) export as ONNX model-local functions: the exported model passes
``onnx.checker`` with shape inference, runs in onnxruntime with the reference executor's results, and
imports back as the same d5 node. Every operator of d5's registry is covered, with every attribute value."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import d5
from d5.errors import OnnxImportError, SchemaError, UnsupportedOperatorError
from d5.frameworks import reference
from d5.network.onnx_functions import FUNCTIONS
from d5.network.op_types import D5_DOMAIN, D5_OPERATORS

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402 - after the importorskip

README = Path(__file__).resolve().parents[2] / "README.md"


def variants():
    """(op type, attributes) of every d5 operator: as added without attributes, then with each value of each
    attribute it accepts (the defaults written out included)."""
    for op_type in sorted(D5_OPERATORS):
        yield op_type, {}
        spec = FUNCTIONS.get(op_type)  # None fails test_every_d5_operator_has_an_onnx_function
        for name, allowed in (spec.attributes.items() if spec else ()):
            for value in allowed:
                yield op_type, {name: value}


def single_node_network(op_type, attrs, dtypes=None, shapes=None, opset=None):
    """A network of one d5 node over float32 ('N', 3) inputs (or the given dtypes and shapes)."""
    spec = FUNCTIONS[op_type]
    net = d5.Network(f"single_{op_type}", opset=opset)
    for index, name in enumerate(spec.inputs):
        net.add_input(name, shapes[index] if shapes else ("N", 3), dtypes[index] if dtypes else "float32")
    net.add_node(op_type, list(spec.inputs), [f"out_{o}" for o in spec.outputs], name="node", **attrs)
    for name in spec.outputs:
        net.add_output(f"out_{name}")
    return net


def feeds_for(net, batch=4, seed=0):
    rng = np.random.default_rng(seed)
    feeds = {}
    for name, info in net.inputs.items():
        shape = tuple(batch if isinstance(d, str) else d for d in info.shape)
        feeds[name] = (rng.standard_normal(shape) * 3).astype(info.dtype)
    return feeds


def run_onnxruntime(model, feeds):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))


def check_exported(net, feeds, model=None, rtol=1e-5):
    """The export of ``net`` passes the full checker, declares typed outputs, and runs in onnxruntime with
    the reference executor's results."""
    model = net.to_onnx() if model is None else model
    onnx.checker.check_model(model, full_check=True)
    for out in model.graph.output:
        assert out.type.tensor_type.elem_type != TensorProto.UNDEFINED, out.name
        assert out.type.tensor_type.HasField("shape"), out.name
    got = run_onnxruntime(model, feeds)
    want = reference.from_model(net).inference(feeds)
    assert set(got) == set(want)
    for name, value in want.items():
        assert got[name].dtype == np.asarray(value).dtype, name
        np.testing.assert_allclose(got[name], value, rtol=rtol, atol=1e-6, err_msg=name)
    return model


def d5_nodes(net):
    return [node for node in net.nodes if node.domain == D5_DOMAIN]


# ---------------------------------------------------------------------------------------------- every operator
def test_every_d5_operator_has_an_onnx_function():
    assert set(FUNCTIONS) == set(D5_OPERATORS)


@pytest.mark.parametrize("op_type, attrs", list(variants()), ids=lambda v: str(v) if isinstance(v, str) else
                         ",".join(f"{k}={val}" for k, val in v.items()) or "no-attributes")
def test_d5_operator_exports_checks_runs_in_onnxruntime_and_imports_back(op_type, attrs):
    net = single_node_network(op_type, attrs)
    model = check_exported(net, feeds_for(net))
    (call,) = model.graph.node
    assert (call.domain, call.op_type) == (D5_DOMAIN, op_type)  # the op type stays visible, not inlined
    assert {(f.domain, f.name, f.overload) for f in model.functions} == {(D5_DOMAIN, op_type, call.overload)}
    (back,) = d5.Network.from_onnx(model).nodes
    assert (back.op_type, back.domain, back.attrs) == (op_type, D5_DOMAIN, attrs)


@pytest.mark.parametrize("op_type", sorted(D5_OPERATORS))
def test_nodes_with_different_attributes_call_different_functions_in_one_model(op_type, tmp_path):
    spec = FUNCTIONS[op_type]
    net = d5.Network("many")
    for name in spec.inputs:
        net.add_input(name, ("N", 3))
    calls = [{}] + [{name: value} for name, allowed in spec.attributes.items() for value in allowed]
    for index, attrs in enumerate(calls):
        net.add_node(op_type, list(spec.inputs), [f"out{index}_{o}" for o in spec.outputs], name=f"n{index}", **attrs)
        for name in spec.outputs:
            net.add_output(f"out{index}_{name}")
    path = tmp_path / "many.onnx"
    d5.save_onnx(net, path)
    model = onnx.load(path)
    check_exported(net, feeds_for(net), model)
    # Writing a default out calls the same function as leaving it out.
    assert len(model.functions) == 1 + sum(len(allowed) - 1 for allowed in spec.attributes.values())
    back = d5.Network.from_onnx(path)
    assert [(n.name, n.op_type, n.attrs) for n in back.nodes] == [(f"n{i}", op_type, a) for i, a in enumerate(calls)]


# ---------------------------------------------------------------------------------------------- README
def readme_network_example() -> str:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)
    (block,) = [b for b in blocks if "MeanSquaredError" in b and "to_onnx" in b]
    return block


def test_the_readme_example_saves_checks_and_runs_in_onnxruntime(tmp_path):
    scope = {}
    exec(compile(readme_network_example(), str(README), "exec"), scope)  # noqa: S102 - our own README
    net, onnx_model = scope["net"], scope["onnx_model"]
    feeds = {"x": np.ones((8, 4), np.float32), "t": np.full((8, 2), 0.5, np.float32)}
    check_exported(net, feeds, onnx_model)
    path = tmp_path / "affine.onnx"
    d5.save_onnx(net, path)
    check_exported(net, feeds, onnx.load(path))
    assert [(n.op_type, n.domain) for n in d5_nodes(d5.load_onnx(path))] == [("MeanSquaredError", D5_DOMAIN)]


# ---------------------------------------------------------------------------------------------- MeanSquaredError
@pytest.mark.parametrize("reduction", FUNCTIONS["MeanSquaredError"].attributes["reduction"])
@pytest.mark.parametrize("dtypes, shapes", [
    (("float64", "float64"), (("N", 3), ("N", 3))),
    (("float32", "float64"), (("N", 3), ("N", 3))),  # the loss stays in the prediction's type
    (("float32", "int64"), (("N", 3), ("N", 3))),
    (("float32", "float32"), (("N", 3), (3,))),       # the target broadcasts
    (("float32", "float32"), ((3,), ("N", 3))),       # ... and so may the prediction
], ids=["float64", "float64-target", "int64-target", "broadcast-target", "broadcast-prediction"])
def test_mean_squared_error_types_and_broadcasting_match_the_reference(reduction, dtypes, shapes):
    net = single_node_network("MeanSquaredError", {"reduction": reduction}, dtypes, shapes)
    check_exported(net, feeds_for(net))


@pytest.mark.parametrize("opset", [11, 13, 15, 18, 21])
def test_mean_squared_error_exports_at_every_opset(opset):
    # The function's body imports the model's opset: ReduceSum's axes became an input in 13, ReduceMean's in 18,
    # and CastLike exists from 15.
    for reduction in ("mean", "sum", "none"):
        net = single_node_network("MeanSquaredError", {"reduction": reduction}, opset=opset)
        model = check_exported(net, feeds_for(net))
        assert {f.opset_import[0].version for f in model.functions} == {opset}


def test_a_d5_node_inside_a_control_flow_body_exports_and_runs():
    vi = helper.make_tensor_value_info
    summed = helper.make_node("MeanSquaredError", ["x", "t"], ["l"], domain=D5_DOMAIN, name="summed", reduction="sum")
    then_branch = helper.make_graph([summed], "then", [], [vi("l", TensorProto.FLOAT, [])])
    averaged = helper.make_node("MeanSquaredError", ["t", "x"], ["m"], domain=D5_DOMAIN, name="averaged")
    else_branch = helper.make_graph([averaged], "else", [], [vi("m", TensorProto.FLOAT, [])])
    graph = helper.make_graph([helper.make_node("If", ["c"], ["y"], then_branch=then_branch, else_branch=else_branch)],
                              "cf", [vi("c", TensorProto.BOOL, []), vi("x", TensorProto.FLOAT, [2, 3]),
                                     vi("t", TensorProto.FLOAT, [2, 3])], [vi("y", TensorProto.FLOAT, [])])
    # Written without functions, as another tool (or an older d5) would: the import supplies d5's.
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(D5_DOMAIN, 1)])
    model.ir_version = 8
    net = d5.Network.from_onnx(model)
    bodies = [net.nodes[0].attrs[key] for key in ("then_branch", "else_branch")]
    assert [[(n.op_type, n.domain, n.attrs) for n in body.nodes] for body in bodies] == [
        [("MeanSquaredError", D5_DOMAIN, {"reduction": "sum"})], [("MeanSquaredError", D5_DOMAIN, {})]]
    for condition in (True, False):
        feeds = feeds_for(net) | {"c": np.array(condition)}
        exported = check_exported(net, feeds)
    assert {(f.name, f.overload) for f in exported.functions} == {("MeanSquaredError", "reduction=sum"),
                                                                  ("MeanSquaredError", "")}


def test_a_model_without_d5_functions_imports_with_typed_outputs():
    model = single_node_network("MeanSquaredError", {"reduction": "none"}).to_onnx()
    del model.functions[:]
    model.graph.node[0].overload = ""
    model.graph.output[0].ClearField("type")
    (node,) = d5.Network.from_onnx(model).nodes
    assert (node.op_type, node.attrs) == ("MeanSquaredError", {"reduction": "none"})


# ---------------------------------------------------------------------------------------------- refusals
def test_an_integer_prediction_is_refused_naming_the_node():
    net = single_node_network("MeanSquaredError", {}, dtypes=("int64", "int64"))
    with pytest.raises(UnsupportedOperatorError, match=r"node 'node' \(ai.d5 MeanSquaredError\).*int64.*Cast the "
                                                       "prediction"):
        net.to_onnx()


def test_mixed_types_below_opset_15_are_refused_naming_the_node_and_the_fix():
    net = single_node_network("MeanSquaredError", {}, dtypes=("float32", "float64"), opset=13)
    with pytest.raises(UnsupportedOperatorError, match=r"node 'node' \(ai.d5 MeanSquaredError\).*CastLike.*Cast the "
                                                       "target to float32 or raise the network's opset"):
        net.to_onnx()


@pytest.mark.parametrize("attrs, message", [
    ({"reduction": "average"}, r"attribute reduction='average' is not one of \('mean', 'sum', 'none'\)"),
    ({"weight": 2.0}, r"unknown attribute 'weight'.*accepts \['reduction'\]"),
])
def test_bad_attributes_are_refused_naming_the_node_and_leave_no_file(attrs, message, tmp_path):
    net = single_node_network("MeanSquaredError", attrs)
    with pytest.raises(SchemaError, match=r"node 'node' \(ai.d5 MeanSquaredError\): " + message):
        d5.save_onnx(net, tmp_path / "bad.onnx")
    assert list(tmp_path.iterdir()) == []


def test_a_bad_attribute_in_a_file_is_refused_on_import():
    model = single_node_network("MeanSquaredError", {}).to_onnx()
    del model.functions[:]
    model.graph.node[0].attribute.append(helper.make_attribute("reduction", "average"))
    with pytest.raises(OnnxImportError, match=r"node 'node' \(MeanSquaredError\): attribute reduction='average'"):
        d5.Network.from_onnx(model)


def test_save_onnx_refuses_a_user_operator_naming_the_node(tmp_path):
    class Square(d5.CustomPythonOp):
        def forward(self, inputs):
            return inputs[0] ** 2

        def backward(self, grads, fwd_inputs, fwd_outputs):
            return 2 * fwd_inputs[0] * grads[0]

    net = d5.Network("custom")
    net.add_input("x", ("N", 3))
    net.add_custom_node(Square(), ["x"], ["y"], name="square")
    net.add_output("y")
    with pytest.raises(UnsupportedOperatorError, match=r"node 'square' \(ai.d5.custom Square\).*replace it by "
                                                       "standard ONNX operators"):
        d5.save_onnx(net, tmp_path / "custom.onnx")
    assert list(tmp_path.iterdir()) == []
