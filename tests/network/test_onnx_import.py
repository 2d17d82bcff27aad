"""ONNX import and export: round trips judged by onnxruntime and onnx.reference, every dtype, external
data, symbolic dimensions, default attributes, and bad input that must end as a d5 error."""
import os
import re

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import d5
from d5.errors import OnnxImportError, UnsupportedOperatorError
from d5.frameworks import reference


def make_model(nodes, inputs, outputs, initializers=(), opset=17, **kwargs):
    graph = helper.make_graph(nodes, "test", inputs, outputs, initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], **kwargs)


def gemm_model(**gemm_attrs):
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.normal(size=(3, 4)).astype(np.float32), "W")
    bias = numpy_helper.from_array(rng.normal(size=(3,)).astype(np.float32), "b")
    node = helper.make_node("Gemm", ["x", "W", "b"], ["y"], name="fc", transB=1, **gemm_attrs)
    return make_model([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])], [weight, bias])


# ---------------------------------------------------------------------------------------------- round trips
def test_lenet_round_trip_matches_reference_and_onnxruntime(tmp_path):
    import onnxruntime

    net = d5.models.lenet5()
    path = tmp_path / "lenet.onnx"
    d5.save_onnx(net, path)
    assert [p.name for p in tmp_path.iterdir()] == ["lenet.onnx"]  # no temporary file left behind
    back = d5.Network.from_onnx(path)
    assert back.get_params() == net.get_params() and back.opset == net.opset
    assert back.inputs["input"].shape == ("N", 1, 28, 28)
    rng = np.random.default_rng(0)
    feeds = {"input": rng.normal(size=(5, 1, 28, 28)).astype(np.float32), "label": np.array([0, 1, 2, 3, 9])}
    original = reference.from_model(net).inference(feeds)
    imported = reference.from_model(back).inference(feeds)
    for name in ("output", "loss"):
        np.testing.assert_array_equal(imported[name], original[name])
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for name, value in zip(["output", "loss"], session.run(["output", "loss"], feeds)):
        np.testing.assert_allclose(original[name], value, rtol=1e-4, atol=1e-6)
    again = back.to_onnx()
    onnx.checker.check_model(again, full_check=True)
    assert [n.op_type for n in again.graph.node] == [n.op_type for n in onnx.load(path).graph.node]


def test_default_attributes_are_filled_in_and_exported():
    import onnxruntime

    net = d5.Network.from_onnx(gemm_model())
    assert net.node("fc").attrs == {"transB": 1, "alpha": 1.0, "beta": 1.0, "transA": 0}
    model = net.to_onnx()
    written = {a.name: helper.get_attribute_value(a) for a in model.graph.node[0].attribute}
    assert written == {"transB": 1, "alpha": 1.0, "beta": 1.0, "transA": 0}
    x = np.random.default_rng(1).normal(size=(2, 4)).astype(np.float32)
    ours = reference.from_model(net).inference({"x": x})["y"]
    (theirs,) = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-6)


def test_explicit_attributes_win_over_defaults():
    net = d5.Network.from_onnx(gemm_model(alpha=0.5))
    assert net.node("fc").attrs["alpha"] == 0.5


DTYPE_CASES = [
    ("f16", TensorProto.FLOAT16, np.array([1.5, -2.25, 65504], np.float16)),
    ("bf16", TensorProto.BFLOAT16, np.array([1.5, -2.0, 3.0e38], ml_dtypes.bfloat16)),
    ("f64", TensorProto.DOUBLE, np.array([1e-300, 2.5])),
    ("i8", TensorProto.INT8, np.array([-128, 0, 127], np.int8)),
    ("u8", TensorProto.UINT8, np.array([0, 255], np.uint8)),
    ("i16", TensorProto.INT16, np.array([-32768, 7], np.int16)),
    ("u16", TensorProto.UINT16, np.array([65535, 1], np.uint16)),
    ("i32", TensorProto.INT32, np.array([-(2**31), 5], np.int32)),
    ("u32", TensorProto.UINT32, np.array([2**32 - 1, 0], np.uint32)),
    ("i64", TensorProto.INT64, np.array([-(2**63), 2**63 - 1], np.int64)),
    ("u64", TensorProto.UINT64, np.array([2**64 - 1, 3], np.uint64)),
    ("bool", TensorProto.BOOL, np.array([True, False, True])),
    ("str", TensorProto.STRING, np.array(["héllo", "", "d5"], dtype=object)),
]


def dtype_model(raw: bool):
    initializers, nodes, outputs = [], [], []
    for name, elem_type, array in DTYPE_CASES:
        if elem_type == TensorProto.STRING:
            tensor = helper.make_tensor(name, elem_type, array.shape, [s.encode() for s in array])
        elif raw:
            tensor = helper.make_tensor(name, elem_type, array.shape, array.tobytes(), raw=True)
        else:
            values = array.astype(np.float32) if elem_type == TensorProto.BFLOAT16 else array
            tensor = helper.make_tensor(name, elem_type, array.shape, values.tolist())
        assert tensor.HasField("raw_data") == (raw and elem_type != TensorProto.STRING)
        initializers.append(tensor)
        nodes.append(helper.make_node("Identity", [name], [f"{name}_out"], name=f"id_{name}"))
        outputs.append(helper.make_tensor_value_info(f"{name}_out", elem_type, array.shape))
    inputs = [helper.make_tensor_value_info(f"in_{name}", elem_type, ["N", 2]) for name, elem_type, _ in DTYPE_CASES]
    return make_model(nodes, inputs, outputs, initializers)


@pytest.mark.parametrize("raw", [True, False], ids=["raw_data", "typed_fields"])
def test_every_dtype_in_initializers_and_inputs(raw):
    model = dtype_model(raw)
    net = d5.Network.from_onnx(model)
    for name, elem_type, array in DTYPE_CASES:
        value = net.params[name]
        assert value.dtype == array.dtype, name
        np.testing.assert_array_equal(value, array)
        assert net.is_trainable(name) == (name in ("f16", "bf16", "f64")), name
        assert net.inputs[f"in_{name}"].dtype == array.dtype and net.inputs[f"in_{name}"].shape == ("N", 2)
    # The export writes the same tensors back: onnx.reference (an independent evaluator) returns them.
    from onnx.reference import ReferenceEvaluator

    exported = net.to_onnx()
    for tensor in exported.graph.input:
        assert tensor.type.tensor_type.elem_type == dict((f"in_{n}", t) for n, t, _ in DTYPE_CASES)[tensor.name]
    results = ReferenceEvaluator(exported).run([f"{name}_out" for name, _, _ in DTYPE_CASES],
                                               {f"in_{name}": np.zeros((1, 2), a.dtype) for name, _, a in DTYPE_CASES})
    for (name, _, array), result in zip(DTYPE_CASES, results):
        np.testing.assert_array_equal(np.asarray(result).astype(array.dtype), array, err_msg=name)


def test_external_data_beside_the_model(tmp_path):
    model = gemm_model()
    weight = numpy_helper.to_array(model.graph.initializer[0])  # save_model moves the data out of `model`
    onnx.save_model(model, tmp_path / "gemm.onnx", save_as_external_data=True, all_tensors_to_one_file=True,
                    location="gemm.weights", size_threshold=0)
    assert (tmp_path / "gemm.weights").exists()
    net = d5.Network.from_onnx(tmp_path / "gemm.onnx")
    np.testing.assert_array_equal(net.params["W"], weight)
    (tmp_path / "gemm.weights").unlink()
    with pytest.raises(OnnxImportError, match="gemm.weights"):
        d5.Network.from_onnx(tmp_path / "gemm.onnx")


def test_symbolic_and_unknown_dims_survive_a_round_trip():
    relu = helper.make_node("Relu", ["x"], ["y"])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", None, 3])
    model = make_model([relu], [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    net = d5.Network.from_onnx(model)
    assert net.inputs["x"].shape == ("batch", None, 3)
    inferred = net.infer_shapes()["y"].shape  # ONNX names the unknown dimension of an output (unk__0)
    assert inferred[0] == "batch" and inferred[2] == 3
    dims = net.to_onnx().graph.input[0].type.tensor_type.shape.dim
    assert dims[0].dim_param == "batch" and not dims[1].HasField("dim_value") and dims[2].dim_value == 3


def test_value_info_shapes_are_available_through_infer_shapes():
    model = gemm_model()
    relu = helper.make_node("Relu", ["y"], ["z"], name="act")
    model.graph.node.append(relu)
    del model.graph.output[:]
    model.graph.output.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, ["N", 3]))
    expected = onnx.shape_inference.infer_shapes(model).graph.value_info
    shapes = d5.Network.from_onnx(model).infer_shapes()
    for vi in expected:
        dims = tuple(d.dim_value or d.dim_param for d in vi.type.tensor_type.shape.dim)
        assert shapes[vi.name].shape == dims


def test_initializers_listed_as_inputs_become_parameters():
    model = gemm_model()
    model.ir_version = 3
    model.graph.input.extend([helper.make_tensor_value_info("W", TensorProto.FLOAT, [3, 4]),
                              helper.make_tensor_value_info("b", TensorProto.FLOAT, [3])])
    net = d5.Network.from_onnx(model)
    assert list(net.inputs) == ["x"] and net.get_params() == ["W", "b"]


def test_constant_nodes_stay_nodes_with_array_attributes():
    value = np.arange(6, dtype=np.float32).reshape(2, 3)
    const = helper.make_node("Constant", [], ["c"], name="const", value=numpy_helper.from_array(value))
    add = helper.make_node("Add", ["x", "c"], ["y"], name="add")
    model = make_model([const, add], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    net = d5.Network.from_onnx(model)
    np.testing.assert_array_equal(net.node("const").attrs["value"], value)
    exported = net.to_onnx()
    np.testing.assert_array_equal(numpy_helper.to_array(exported.graph.node[0].attribute[0].t), value)


def test_old_opsets_are_upgraded_and_the_opset_is_kept():
    assert d5.Network.from_onnx(gemm_model()).opset == 17
    net = d5.Network.from_onnx(make_model([helper.make_node("Relu", ["x"], ["y"])],
                                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])], opset=9))
    assert net.opset == 11


def test_unsorted_nodes_are_sorted():
    model = gemm_model()
    model.graph.node.insert(0, helper.make_node("Relu", ["y"], ["z"], name="act"))
    net = d5.Network.from_onnx(model)
    assert [n.name for n in net.topological_order()] == ["fc", "act"]


def test_save_onnx_refuses_invalid_networks_and_leaves_no_file(tmp_path):
    net = d5.Network("bad")
    net.add_input("x", ("N", 4))
    net.add_param("W", np.ones((3, 4), np.float32))
    net.add_node("Gemm", ["x", "W"], ["y"])
    net.node("Gemm_0").attrs["alpha"] = "not a number"  # add_node itself refuses it (SchemaError)
    net.add_output("y")
    with pytest.raises(d5.errors.GraphError, match="alpha"):
        d5.save_onnx(net, tmp_path / "bad.onnx")
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------------------------- bad input
def test_missing_file_truncated_file_and_non_onnx_file(tmp_path):
    with pytest.raises(OnnxImportError, match="no ONNX file"):
        d5.Network.from_onnx(tmp_path / "absent.onnx")
    data = d5.models.lenet5().to_onnx().SerializeToString()
    (tmp_path / "cut.onnx").write_bytes(data[: len(data) // 3])
    with pytest.raises(OnnxImportError, match="truncated"):
        d5.Network.from_onnx(tmp_path / "cut.onnx")
    (tmp_path / "notes.onnx").write_text("these are not the weights you are looking for\n")
    with pytest.raises(OnnxImportError, match="not"):
        d5.Network.from_onnx(tmp_path / "notes.onnx")
    (tmp_path / "empty.onnx").write_bytes(b"")
    with pytest.raises(OnnxImportError, match="empty"):
        d5.Network.from_onnx(tmp_path / "empty.onnx")
    with pytest.raises(OnnxImportError, match="expects a path"):
        d5.Network.from_onnx(42)


def test_missing_initializer_is_named():
    model = gemm_model()
    del model.graph.initializer[1]  # the bias
    with pytest.raises(OnnxImportError, match=r"node 'fc' \(Gemm\) reads 'b'.*missing initializer"):
        d5.Network.from_onnx(model)


def test_unknown_domain_and_unknown_operator_are_named():
    model = gemm_model()
    model.graph.node.append(helper.make_node("FancyOp", ["y"], ["z"], name="fancy", domain="com.example"))
    model.opset_import.append(helper.make_opsetid("com.example", 1))
    with pytest.raises(UnsupportedOperatorError, match=r"node 'fancy' \(FancyOp\).*'com.example'"):
        d5.Network.from_onnx(model)
    model = gemm_model()
    model.graph.node.append(helper.make_node("Conv2D", ["y"], ["z"], name="conv"))
    with pytest.raises(UnsupportedOperatorError, match=r"node 'conv' \(Conv2D\).*Conv"):
        d5.Network.from_onnx(model)


def test_opset_newer_than_supported():
    from d5.network.onnx_import import max_supported_opset

    model = gemm_model()
    model.opset_import[0].version = max_supported_opset() + 1
    with pytest.raises(OnnxImportError, match=f"supports opsets 11 to {max_supported_opset()}.*[Uu]pgrade"):
        d5.Network.from_onnx(model)


def test_cycle_is_named():
    nodes = [helper.make_node("Add", ["x", "b"], ["a"], name="first"), helper.make_node("Relu", ["a"], ["b"], name="second")]
    model = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                       [helper.make_tensor_value_info("b", TensorProto.FLOAT, [2])])
    with pytest.raises(OnnxImportError, match=r"cycle through node 'first' \(Add\), node 'second' \(Relu\)"):
        d5.Network.from_onnx(model)


def test_duplicate_tensor_names():
    model = gemm_model()
    model.graph.node.append(helper.make_node("Relu", ["x"], ["y"], name="again"))
    with pytest.raises(OnnxImportError, match=r"duplicate tensor name 'y'.*node 'fc' \(Gemm\).*node 'again' \(Relu\)"):
        d5.Network.from_onnx(model)
    model = gemm_model()
    model.graph.initializer.append(numpy_helper.from_array(np.zeros(3, np.float32), "b"))
    with pytest.raises(OnnxImportError, match="duplicate tensor name 'b'"):
        d5.Network.from_onnx(model)


def test_control_flow_imports_and_malformed_subgraphs_are_refused_clearly():
    branch = helper.make_graph([helper.make_node("Identity", ["x"], ["r"])], "branch", [],
                               [helper.make_tensor_value_info("r", TensorProto.FLOAT, [2])])
    node = helper.make_node("If", ["c"], ["y"], name="choose", then_branch=branch, else_branch=branch)
    inputs = [helper.make_tensor_value_info("c", TensorProto.BOOL, []), helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])]
    net = d5.Network.from_onnx(make_model([node], inputs, outputs))
    assert net.node("choose").attrs["then_branch"].captures == ["x"]  # the branch reads x from the outer scope
    # A branch reading a tensor defined nowhere is a dangling name, reported against the If node.
    bad = helper.make_graph([helper.make_node("Identity", ["nowhere"], ["r"])], "branch", [],
                            [helper.make_tensor_value_info("r", TensorProto.FLOAT, [2])])
    node = helper.make_node("If", ["c"], ["y"], name="choose", then_branch=bad, else_branch=branch)
    with pytest.raises(OnnxImportError, match=r"node 'choose' \(If\) has a subgraph that reads 'nowhere'"):
        d5.Network.from_onnx(make_model([node], inputs, outputs))
    # An unknown operator inside a body is named with its path.
    odd = helper.make_graph([helper.make_node("NoSuchOp", ["x"], ["r"], name="inner")], "branch", [],
                            [helper.make_tensor_value_info("r", TensorProto.FLOAT, [2])])
    node = helper.make_node("If", ["c"], ["y"], name="choose", then_branch=odd, else_branch=branch)
    with pytest.raises((UnsupportedOperatorError, OnnxImportError), match=r"node 'choose' \(If\), subgraph 'then_branch'.*NoSuchOp"):
        d5.Network.from_onnx(make_model([node], inputs, outputs))


def test_wrong_attribute_type_and_wrong_tensor_size_are_d5_errors():
    model = gemm_model()
    model.graph.node[0].attribute[0].CopyFrom(helper.make_attribute("transB", "yes"))
    with pytest.raises(OnnxImportError, match="transB"):
        d5.Network.from_onnx(model)
    model = gemm_model()
    model.graph.initializer[0].raw_data = model.graph.initializer[0].raw_data[:-4]
    with pytest.raises(OnnxImportError, match="W"):
        d5.Network.from_onnx(model)


GATHER_ND_SEGFAULT = """
import numpy as np, d5
from onnx import TensorProto, helper, numpy_helper
from d5.frameworks import reference
node = helper.make_node("GatherND", ["x", "i"], ["y"], batch_dims=-2**31)
output = {output}
graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])], [output],
                          [numpy_helper.from_array(np.array([[0, 1], [2, 3]], np.int64), "i")])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
try:
    reference.from_model(d5.Network.from_onnx(model.SerializeToString())).inference({{"x": np.ones((3, 4), np.float32)}})
except d5.errors.OnnxImportError as err:
    print(err)
"""


@pytest.mark.parametrize("output", [
    'helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a"])',  # the executor's shape inference segfaulted
    'helper.make_empty_tensor_value_info("y")',  # import completes untyped outputs by shape inference: it did too
])
def test_attribute_values_onnx_shape_inference_crashes_on_are_refused_first(output):
    # Run in a subprocess: the failure this guards against kills the interpreter (SIGSEGV in onnx's C++).
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", GATHER_ND_SEGFAULT.format(output=output)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "node #0 (GatherND): attribute 'batch_dims' = -2147483648 must hold dimension numbers" in done.stdout


def test_flags_and_axes_are_checked_inside_control_flow_bodies_on_import():
    def branch(keepdims):
        return helper.make_graph([helper.make_node("ArgMax", ["x"], ["r"], name="inner", keepdims=keepdims)], "branch",
                                 [], [helper.make_tensor_value_info("r", TensorProto.INT64, [1])])

    node = helper.make_node("If", ["c"], ["y"], name="choose", then_branch=branch(3), else_branch=branch(1))
    model = make_model([node], [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                                helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                       [helper.make_tensor_value_info("y", TensorProto.INT64, [1])])
    with pytest.raises(OnnxImportError, match=r"node 'choose' \(If\), subgraph 'then_branch': node 'inner' \(ArgMax\): "
                                              r"attribute 'keepdims' must be 0 or 1, got 3"):
        d5.Network.from_onnx(model)


@pytest.mark.parametrize("text, field", [
    (b"fc", "graph.node[0].name"),                      # a node name
    (b"W", "graph.node[0].input[1]"),                   # a tensor name (the node's input comes before the initializer)
    (b"transB", "graph.node[0].attribute[0].name"),     # an attribute name
    (b"test", "graph.name"),
])
def test_text_that_is_not_utf8_is_refused_at_import_naming_the_field(text, field):
    # upb hands a proto2 string that is not UTF-8 over as bytes; it used to become a bytes node name and fail later
    # (a raw UnicodeDecodeError when the executor exported the graph for shape inference).
    data = gemm_model().SerializeToString()
    damaged = data.replace(text, b"\xcc" + text[1:])
    assert damaged != data
    with pytest.raises(OnnxImportError, match=re.escape(field) + ".*not valid UTF-8"):
        d5.Network.from_onnx(damaged)


def test_doc_strings_that_are_not_utf8_are_ignored():
    model = gemm_model()
    model.graph.node[0].doc_string = "doc"
    data = model.SerializeToString().replace(b"doc", b"\xccoc")
    assert d5.Network.from_onnx(data).node("fc").op_type == "Gemm"


def test_bytes_and_paths_are_accepted(tmp_path):
    model = gemm_model()
    assert d5.Network.from_onnx(model.SerializeToString()).get_params() == ["W", "b"]
    path = tmp_path / "gemm.onnx"
    onnx.save_model(model, path)
    assert d5.load_onnx(os.fspath(path)).node("fc").op_type == "Gemm"
