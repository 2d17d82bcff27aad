"""Every node is checked against its ONNX schema (at the graph's opset) before anything runs: arity, attribute
types and input element types, with a SchemaError naming the node, the operator and what was wrong."""
from __future__ import annotations

import warnings

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto

import d5
import d5.network.graph as graph_module
from d5.errors import SchemaError
from d5.frameworks import reference
from d5.network import node_schema
from d5.ops import CustomPythonOp


def _net(*inputs, **params) -> d5.Network:
    """A network with float32 inputs ``('N', 3)`` (or ``(name, shape, dtype[, kind])`` tuples) and params."""
    net = d5.Network("schema")
    for spec in inputs:
        net.add_input(*((spec, ("N", 3)) if isinstance(spec, str) else spec))
    for name, value in params.items():
        net.add_param(name, value)
    return net


def _finish(net: d5.Network, output: str = "y") -> d5.Network:
    net.add_output(output)
    return net


def _relu_two_inputs():
    net = _net("x", "z")
    net.add_node("Relu", ["x", "z"], ["y"], name="relu")
    return _finish(net)


def _gemm_four_inputs():
    net = _net("x", W=np.ones((3, 3), np.float32), b=np.ones(3, np.float32))
    net.add_node("Gemm", ["x", "W", "b", "b"], ["y"], name="gemm")
    return _finish(net)


def _add_one_input():
    net = _net("x")
    net.add_node("Add", ["x"], ["y"], name="add")
    return _finish(net)


def _softmax_int64():
    net = _net(("x", ("N", 3), "int64"))
    net.add_node("Softmax", ["x"], ["y"], name="softmax")
    return _finish(net)


def _add_string_param():
    net = _net("x", s=np.array(["a", "b", "c"]))
    net.add_node("Add", ["x", "s"], ["y"], name="add")
    return _finish(net)


def _list_fed_to_relu():
    net = _net(("x", ("N", 3), "float32", "sequence"))
    net.add_node("Relu", ["x"], ["y"], name="relu")
    return _finish(net)


def _einsum_float8():
    net = _net(("x", (3, 3), ml_dtypes.float8_e4m3fn))
    net.add_node("Einsum", ["x", "x"], ["y"], name="einsum", equation="ij,jk->ik")
    return _finish(net)


def _relu_two_outputs():
    net = _net("x")
    net.add_node("Relu", ["x"], ["y", "extra"], name="relu")
    return _finish(net)


def _required_input_omitted():
    net = _net("x", W=np.ones((3, 3), np.float32))
    net.add_node("Gemm", ["", "W"], ["y"], name="gemm")
    return _finish(net)


def _float_plus_int():
    net = _net("x", k=np.arange(3))
    net.add_node("Add", ["x", "k"], ["y"], name="add")
    return _finish(net)


def _softmax_after_cast():
    # The int64 tensor is an intermediate one: its type comes from Cast's 'to', carried forward.
    net = _net("x")
    net.add_node("Cast", ["x"], ["xi"], to=TensorProto.INT64)
    net.add_node("Softmax", ["xi"], ["y"], name="softmax")
    return _finish(net)


def _softmax_of_shape():
    net = _net("x")
    net.add_node("Shape", ["x"], ["s"])
    net.add_node("Softmax", ["s"], ["y"], name="softmax")
    return _finish(net)


@pytest.mark.parametrize("build, node, expected", [
    (_relu_two_inputs, "relu", r"at most 1 input .*got 2"),
    (_gemm_four_inputs, "gemm", r"at most 3 inputs .*got 4"),
    (_add_one_input, "add", r"at least 2 inputs .*got 1"),
    (_softmax_int64, "softmax", r"input 0 .*tensor\(int64\).*Softmax accepts"),
    (_add_string_param, "add", r"input 1 .*tensor\(string\)"),
    (_list_fed_to_relu, "relu", r"seq\(tensor\(float\)\)"),
    (_einsum_float8, "einsum", r"tensor\(float8e4m3fn\)"),
    (_relu_two_outputs, "relu", r"at most 1 output .*got 2"),
    (_required_input_omitted, "gemm", r"input 0 \('A'\) is required"),
    (_float_plus_int, "add", r"same type .*tensor\(float\) and tensor\(int64\)"),
    (_softmax_after_cast, "softmax", r"tensor\(int64\)"),
    (_softmax_of_shape, "softmax", r"tensor\(int64\)"),
])
def test_invalid_nodes_fail_validate_and_executor_build(build, node, expected):
    net = build()
    with pytest.raises(SchemaError, match=rf"node '{node}' \(\w+, opset 17\): .*{expected}"):
        net.validate()
    with pytest.raises(SchemaError, match=rf"node '{node}'"):
        reference.from_model(net)


def test_attribute_types_are_checked_when_a_node_is_added_or_replaced():
    net = _net("x", W=np.ones((1, 1, 2, 2), np.float32))
    with pytest.raises(SchemaError, match=r"node 'conv' \(Conv, opset 17\): attribute 'strides' must be a list of "
                                          r"ints, got str \('ab'\)"):
        net.add_node("Conv", ["x", "W"], ["y"], name="conv", strides="ab")
    with pytest.raises(SchemaError, match="'strides' must be a list of ints, got a list of floats"):
        net.add_node("Conv", ["x", "W"], ["y"], name="conv", strides=[1.5, 1.5])
    assert not net.nodes  # a refused node is not added
    net.add_node("Conv", ["x", "W"], ["y"], name="conv", strides=[1, 1])
    with pytest.raises(SchemaError, match="'strides' must be a list of ints"):
        net.replace_node("conv", "Conv", strides="ab")
    assert net.node("conv").attrs == {"strides": [1, 1]}  # the old node stays
    with pytest.raises(SchemaError, match=r"has no attribute 'stride' .*did you mean 'strides'"):
        net.replace_node("conv", "Conv", stride=[1, 1])
    with pytest.raises(SchemaError, match="'alpha' must be a float, got str"):
        net.add_node("Gemm", ["x", "W"], ["g"], alpha="not a number")
    with pytest.raises(SchemaError, match=r"node 'cast' \(Cast, opset 17\): required attribute \['to'\] not given"):
        net.add_node("Cast", ["x"], ["c"], name="cast")


def test_valid_attribute_forms_are_accepted():
    net = _net("x", W=np.ones((3, 3), np.float32))
    net.add_node("Gemm", ["x", "W"], ["g"], alpha=1, beta=np.float32(0.5), transB=True)  # int for a float, bools
    net.add_node("LeakyRelu", ["g"], ["l"], alpha=None)  # None: not set
    net.add_node("Constant", [], ["c"], value=np.ones(3, np.float32))  # a tensor attribute
    net.add_node("ReduceSum", ["l"], ["y"], keepdims=0, noop_with_empty_axes=0)
    # Split's num_outputs is an opset-18 attribute: d5's operators accept every version's attributes.
    net.add_node("Split", ["x"], ["a", "b", "c2"], axis=1, num_outputs=3)
    net.add_output("y")
    net.validate()


def test_omitted_optional_inputs_count_correctly():
    net = _net("x", hi=np.array(1.0, np.float32))
    net.add_node("Clip", ["x", "", "hi"], ["y"], name="clip")  # min omitted, max given
    _finish(net).validate()
    out = reference.from_model(net).inference({"x": np.array([[-2.0, 0.5, 3.0]], np.float32)})["y"]
    np.testing.assert_array_equal(out, [[-2.0, 0.5, 1.0]])


def test_same_kind_widths_are_tolerated():
    # float64 copies of a network (gradient checking) meet float32 constants; NumPy promotes, as before.
    net = _net(("x", ("N", 3), "float64"), c=np.ones(3, np.float32))
    net.add_node("Mul", ["x", "c"], ["y"])
    _finish(net).validate()


def test_custom_operators_and_unknown_types_are_left_to_the_executor():
    class Anything(CustomPythonOp):
        def forward(self, inputs):
            return inputs[0]

    net = _net("x", "z")
    net.add_custom_node(Anything(), ["x", "z", "x"], ["t"])  # no schema: any arity
    net.add_node("Relu", ["t"], ["y"])
    _finish(net).validate()


def _body(source: str, op_inputs: list[str] | None = None) -> d5.Network:
    body = d5.Network("branch")
    body.is_subgraph = True
    body.add_node("Relu", op_inputs or [source], ["out"], name="inner_relu")
    body.add_output("out")
    return body


def test_control_flow_bodies_are_checked_with_the_outer_types():
    net = _net(("c", (), "bool"), "x", "z")
    net.add_node("If", ["c"], ["y"], name="choose", then_branch=_body("x"), else_branch=_body("x", ["x", "z"]))
    _finish(net)
    with pytest.raises(SchemaError, match=r"node 'choose' \(If\), subgraph 'else_branch': node 'inner_relu' "
                                          r"\(Relu, opset 17\): takes at most 1 input"):
        net.validate()
    # A captured tensor's type is known inside the body: a string captured into Relu is refused.
    strings = _net(("c", (), "bool"), s=np.array(["a"]))
    strings.add_node("If", ["c"], ["y"], name="choose", then_branch=_body("s"), else_branch=_body("s"))
    with pytest.raises(SchemaError, match=r"subgraph 'then_branch': node 'inner_relu'.*tensor\(string\)"):
        _finish(strings).validate()


def test_outputs_of_control_flow_have_unknown_types_and_pass():
    net = _net(("c", (), "bool"), ("x", ("N", 3), "int64"))
    branch = d5.Network("branch")
    branch.is_subgraph = True
    branch.add_node("Cast", ["x"], ["out"], to=TensorProto.FLOAT)
    branch.add_output("out")
    net.add_node("If", ["c"], ["f"], then_branch=branch, else_branch=branch.copy())
    net.add_node("Softmax", ["f"], ["y"])  # f's type comes from the bodies: unknown here, not refused
    _finish(net).validate()


def test_sequence_types_are_carried_through_sequence_operators():
    net = _net("x")
    net.add_node("SplitToSequence", ["x"], ["parts"], axis=1)
    net.add_node("SequenceAt", ["parts", "i"], ["first"])
    net.add_param("i", np.array(0, np.int64))
    net.add_node("Relu", ["parts"], ["y"], name="relu")  # a sequence into a tensor operator
    with pytest.raises(SchemaError, match=r"node 'relu'.*seq\(tensor\(float\)\)"):
        _finish(net).validate()
    ok = _net("x", i=np.array(0, np.int64))
    ok.add_node("SplitToSequence", ["x"], ["parts"], axis=1)
    ok.add_node("SequenceAt", ["parts", "i"], ["first"])
    ok.add_node("Relu", ["first"], ["y"])  # the element of a float sequence is a float tensor
    _finish(ok).validate()
    out = reference.from_model(ok).inference({"x": np.array([[-1.0, 2.0, 3.0]], np.float32)})["y"]
    np.testing.assert_array_equal(out, [[0.0]])


def test_fallback_operators_are_validated_too():
    counts = dict(mode="TF", min_gram_length=1, max_gram_length=1, max_skip_count=0, ngram_counts=[0],
                  ngram_indexes=[0, 1], pool_int64s=[2, 3])
    net = _net(("x", (4,), "int64"))
    net.add_node("TfIdfVectorizer", ["x"], ["y"], **counts)  # d5 lacks it: onnx.reference runs it
    _finish(net)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        executor = reference.from_model(net, fallback=True)
    assert executor.fallback_operators == ["TfIdfVectorizer"]
    np.testing.assert_array_equal(executor.inference({"x": np.array([2, 3, 3, 5])})["y"], [1.0, 2.0])
    bad = _net(("x", (4,), "float32"))
    bad.add_node("TfIdfVectorizer", ["x"], ["y"], name="tfidf", **counts)
    with pytest.raises(SchemaError, match=r"node 'tfidf'.*tensor\(float\)"):
        reference.from_model(_finish(bad), fallback=True)


def test_zoo_models_validate_without_shape_inference(monkeypatch):
    def no_inference(self):
        raise AssertionError("validation must not run ONNX shape inference (0.8 s on ResNet-50)")

    monkeypatch.setattr(d5.Network, "infer_shapes", no_inference)
    for name in ("lenet5", "lstm_lm", "resnet20", "mlp"):
        d5.models.get(name).validate()


def test_validation_runs_once_per_executor_build(monkeypatch):
    calls = []
    original = graph_module.check_network
    monkeypatch.setattr(graph_module, "check_network", lambda net: (calls.append(net.name), original(net)))
    executor = reference.from_model(d5.models.lenet5(seed=0))
    batch = {"input": np.zeros((2, 1, 28, 28), np.float32), "label": np.zeros(2, np.int64)}
    for _ in range(3):
        executor.inference(batch)
        executor.inference_and_backprop(batch, "loss")
    assert calls == ["lenet5"]


def test_type_string_and_allowed_input_types():
    assert node_schema.type_string(np.float32, "sequence") == "seq(tensor(float))"
    assert node_schema.type_string(np.dtype("V4")) is None  # no ONNX element type: the check is skipped
    assert node_schema.allowed_input_types("Relu", 17, 3) is None
    assert node_schema.allowed_input_types("NoSuchOp", 17, 0) is None


# ---------------------------------------------------------------------------------------------- attribute values
# Flags and axes are plain ints to ONNX's type system; their values are checked too (d5.network.attribute_ranges).

@pytest.mark.parametrize("op_type, attrs, bad", [
    ("ArgMax", {"keepdims": -2**63}, "keepdims"),
    ("ReduceSum", {"keepdims": 2**62}, "keepdims"),
    ("AveragePool", {"kernel_shape": [2, 2], "ceil_mode": 7}, "ceil_mode"),
    ("CumSum", {"exclusive": -1}, "exclusive"),
    ("Gemm", {"transB": 2}, "transB"),
])
def test_flags_other_than_0_and_1_are_refused_when_added(op_type, attrs, bad):
    # Each once ran, reading "nonzero" as on, and gave other shapes or values than onnxruntime.
    net = _net("x")
    with pytest.raises(SchemaError, match=rf"node 'n' \({op_type}, opset 17\): attribute '{bad}' must be 0 or 1"):
        net.add_node(op_type, ["x"], ["y"], name="n", **attrs)


def test_a_flag_set_after_adding_is_refused_by_validate_and_executor_build():
    net = _net("x", scale=np.ones(3, np.float32), bias=np.zeros(3, np.float32))
    net.add_node("BatchNormalization", ["x", "scale", "bias", "scale", "bias"], ["y"], name="bn")
    net.node("bn").attrs["training_mode"] = 2**40  # attributes are a plain dict: validation catches edits
    _finish(net)
    with pytest.raises(SchemaError, match=r"node 'bn' .*'training_mode' must be 0 or 1, got 1099511627776"):
        net.validate()
    with pytest.raises(SchemaError, match="training_mode"):
        reference.from_model(net)


@pytest.mark.parametrize("op_type, attrs, expected", [
    ("GatherND", {"batch_dims": -2**31}, r"'batch_dims' = -2147483648 must hold dimension numbers"),
    ("GatherND", {"batch_dims": 32}, r"'batch_dims' = 32 must hold dimension numbers"),
    ("Softmax", {"axis": 33}, r"'axis' = 33 is not an axis of any tensor"),
    ("ReduceSum", {"axes": [0, -2**40]}, r"'axes' = \[0, -1099511627776\] is not an axis"),
    ("Transpose", {"perm": [1, -1]}, r"'perm' = \[1, -1\] must hold dimension numbers"),
    ("Transpose", {"perm": [1, 1]}, r"'perm' = \[1, 1\] repeats a dimension"),
])
def test_axes_no_tensor_has_are_refused_whatever_the_rank(op_type, attrs, expected):
    net = _net("x")
    inputs = ["x", "x"] if op_type == "GatherND" else ["x"]
    with pytest.raises(SchemaError, match=rf"node 'n' \({op_type}, opset 17\): attribute {expected}"):
        net.add_node(op_type, inputs, ["y"], name="n", **attrs)


def _chain(op_type, attrs, *, before=None, opset=None, params=()):
    """x (N, 3) [-> before] -> op_type(**attrs) -> y, with ``params`` (arrays) as the further inputs."""
    net = d5.Network("ranks", opset=opset)
    net.add_input("x", ("N", 3))
    source = "x"
    if before is not None:
        net.add_node(before, ["x"], ["t"])
        source = "t"
    for index, value in enumerate(params):
        net.add_param(f"p{index}", value)
    net.add_node(op_type, [source] + [f"p{index}" for index in range(len(params))], ["y"], name="n", **attrs)
    return _finish(net)


@pytest.mark.parametrize("op_type, attrs, kwargs, expected", [
    ("Softmax", {"axis": 2}, {}, r"'axis' = 2 is out of range for input 0 \('x'\) of rank 2; use an axis in \[-2, 1\]"),
    ("Softmax", {"axis": -3}, {"before": "Relu"}, r"input 0 \('t'\) of rank 2"),  # the rank carried through Relu
    ("ReduceMean", {"axes": [0, 5]}, {}, r"'axes' = \[0, 5\] .*use axes in \[-2, 1\]"),
    ("Flatten", {"axis": 3}, {}, r"use an axis in \[-2, 2\]"),
    ("OneHot", {"axis": 3}, {"params": [np.array(4), np.array([0.0, 1.0], np.float32)]}, r"use an axis in \[-3, 2\]"),
    ("Unsqueeze", {"axes": [0, 4]}, {"opset": 11}, r"output rank 4\); use axes in \[-4, 3\]"),
    ("Transpose", {"perm": [0, 2]}, {"before": "Sigmoid"}, r"not a permutation of the 2 dimensions"),
    ("GatherND", {"batch_dims": 2}, {"params": [np.zeros((2, 3, 1), np.int64)]},
     r"'batch_dims' = 2 must be less than the rank of input 0 \('x', rank 2\)"),
])
def test_axes_outside_the_known_rank_of_the_input_are_refused_by_validate(op_type, attrs, kwargs, expected):
    net = _chain(op_type, attrs, **kwargs)
    with pytest.raises(SchemaError, match=rf"node 'n' \({op_type}, opset \d+\): attribute .*{expected}"):
        net.validate()
    with pytest.raises(SchemaError, match=rf"node 'n' \({op_type}"):
        reference.from_model(net)


def test_axes_in_range_and_unknown_ranks_pass():
    net = _net("x")
    net.add_node("Softmax", ["x"], ["s"], axis=-2)
    net.add_node("Flatten", ["s"], ["f"], axis=2)  # axis = rank flattens everything
    net.add_node("Transpose", ["f"], ["t"], perm=[1, 0])
    net.add_node("Unsqueeze", ["t", "axes"], ["u"])
    net.add_param("axes", np.array([0, 3], np.int64))
    net.add_node("Softmax", ["u"], ["y"], axis=31)  # u's rank comes from data: unknown, so only |axis| <= 32
    net.add_node("GatherND", ["x", "rows"], ["g"], batch_dims=1)
    net.add_param("rows", np.zeros((2, 1), np.int64))
    _finish(net).validate()
