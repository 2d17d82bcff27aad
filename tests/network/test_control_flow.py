"""Control flow (If, Loop, Scan, SequenceMap) in the reference framework: import, inference compared with
onnxruntime, the to_onnx() round trip, and the refusal of gradients."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import d5
from d5.errors import D5Error, GraphError
from d5.frameworks.reference import from_model

ort = pytest.importorskip("onnxruntime")

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def model_of(nodes, inputs, outputs, initializers=(), opset=17):
    graph = helper.make_graph(nodes, "cf", inputs, outputs, initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10  # onnxruntime 1.31 reads IR <= 10
    onnx.checker.check_model(model, full_check=True)
    return model


def run_ort(model, feeds):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(None, feeds)))


def check(model, feeds):
    """d5 matches onnxruntime, and so does the exported model, which passes the full checker."""
    net = d5.Network.from_onnx(model)
    got = from_model(net).inference(feeds)
    want = run_ort(model, feeds)
    assert set(got) == set(want)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-6, err_msg=name)
    exported = net.to_onnx()
    exported.ir_version = 10
    onnx.checker.check_model(exported, full_check=True)
    again = run_ort(exported, feeds)
    for name in want:
        np.testing.assert_allclose(again[name], want[name], rtol=1e-6, err_msg=name)
    return net, got


def if_model():
    # Both branches read outer-scope tensors: x (a graph input) and w (computed before the If).
    then_branch = helper.make_graph([helper.make_node("Add", ["x", "w"], ["t"])], "then", [], [vi("t", F, [3])])
    else_branch = helper.make_graph([helper.make_node("Mul", ["x", "w"], ["e"])], "else", [], [vi("e", F, [3])])
    nodes = [helper.make_node("Neg", ["x"], ["w"]),
             helper.make_node("If", ["c"], ["y"], name="choose", then_branch=then_branch, else_branch=else_branch),
             helper.make_node("Relu", ["y"], ["out"])]
    return model_of(nodes, [vi("c", B, []), vi("x", F, [3])], [vi("out", F, [3])])


@pytest.mark.parametrize("cond", [True, False])
def test_if_runs_either_branch_with_outer_scope_values(cond):
    x = np.array([1.0, -2.0, 3.0], np.float32)
    net, got = check(if_model(), {"c": np.array(cond), "x": x})
    np.testing.assert_allclose(got["out"], np.maximum(x + -x if cond else x * -x, 0))
    # The Neg producing w comes before the If that captures it, and copies keep the branches.
    assert [n.op_type for n in net.topological_order()] == ["Neg", "If", "Relu"]
    assert net.copy().node("choose").attrs["then_branch"].captures == ["w", "x"]


def loop_model():
    # for i in range(M) while cond: acc += x * i; stop when acc > limit; scan out acc at every step.
    body = helper.make_graph(
        [helper.make_node("Cast", ["i"], ["fi"], to=F),
         helper.make_node("Mul", ["x", "fi"], ["step"]),
         helper.make_node("Add", ["acc_in", "step"], ["acc_out"]),
         helper.make_node("ReduceSum", ["acc_out"], ["total"], keepdims=0),
         helper.make_node("Less", ["total", "limit"], ["cond_out"]),
         helper.make_node("Identity", ["acc_out"], ["scan"])],
        "body", [vi("i", I64, []), vi("cond_in", B, []), vi("acc_in", F, [2])],
        [vi("cond_out", B, []), vi("acc_out", F, [2]), vi("scan", F, [2])])
    node = helper.make_node("Loop", ["M", "cond", "acc0"], ["acc", "scans"], name="loop", body=body)
    return model_of([node], [vi("M", I64, []), vi("cond", B, []), vi("acc0", F, [2]), vi("x", F, [2])],
                    [vi("acc", F, [2]), vi("scans", F, [None, 2])],
                    [numpy_helper.from_array(np.array(20.0, np.float32), "limit")])


@pytest.mark.parametrize("trip,cond", [(3, True), (10, True), (5, False), (0, True)])
def test_loop_trip_count_condition_carried_and_scan_outputs(trip, cond):
    feeds = {"M": np.array(trip, np.int64), "cond": np.array(cond), "acc0": np.zeros(2, np.float32),
             "x": np.array([1.0, 2.0], np.float32)}
    check(loop_model(), feeds)


def scan_model(directions, output_directions, output_axis=0):
    body = helper.make_graph(
        [helper.make_node("Add", ["sum_in", "next"], ["sum_out"]),
         helper.make_node("Mul", ["sum_out", "scale"], ["scan_out"])],
        "scan_body", [vi("sum_in", F, [2]), vi("next", F, [2])], [vi("sum_out", F, [2]), vi("scan_out", F, [2])])
    node = helper.make_node("Scan", ["initial", "xs"], ["y", "z"], name="scan", body=body, num_scan_inputs=1,
                            scan_input_directions=directions, scan_output_directions=output_directions,
                            scan_output_axes=[output_axis])
    return model_of([node], [vi("initial", F, [2]), vi("xs", F, [4, 2]), vi("scale", F, [2])],
                    [vi("y", F, [2]), vi("z", F, [None, None])])


@pytest.mark.parametrize("directions,output_directions,axis", [([0], [0], 0), ([1], [0], 0), ([0], [1], 1), ([1], [1], -1)])
def test_scan_forward_and_reverse(directions, output_directions, axis):
    feeds = {"initial": np.zeros(2, np.float32), "xs": np.arange(8, dtype=np.float32).reshape(4, 2),
             "scale": np.array([1.0, -1.0], np.float32)}
    _, got = check(scan_model(directions, output_directions, axis), feeds)
    np.testing.assert_allclose(got["y"], [12.0, 16.0])


def test_nested_loop_containing_if():
    # Each iteration adds x (captured two scopes up) when i is even, subtracts it otherwise.
    even = helper.make_graph([helper.make_node("Add", ["v_in", "x"], ["a"])], "even", [], [vi("a", F, [2])])
    odd = helper.make_graph([helper.make_node("Sub", ["v_in", "x"], ["s"])], "odd", [], [vi("s", F, [2])])
    body = helper.make_graph(
        [helper.make_node("Mod", ["i", "two"], ["r"]),
         helper.make_node("Equal", ["r", "zero"], ["is_even"]),
         helper.make_node("If", ["is_even"], ["v_out"], name="parity", then_branch=even, else_branch=odd),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body", [vi("i", I64, []), vi("cond_in", B, []), vi("v_in", F, [2])], [vi("cond_out", B, []), vi("v_out", F, [2])])
    loop = helper.make_node("Loop", ["M", "", "v0"], ["v"], name="loop", body=body)
    model = model_of([loop], [vi("M", I64, []), vi("v0", F, [2]), vi("x", F, [2])], [vi("v", F, [2])],
                     [numpy_helper.from_array(np.array(2, np.int64), "two"),
                      numpy_helper.from_array(np.array(0, np.int64), "zero")])
    feeds = {"M": np.array(5, np.int64), "v0": np.zeros(2, np.float32), "x": np.array([1.0, 3.0], np.float32)}
    net, got = check(model, feeds)
    np.testing.assert_allclose(got["v"], [1.0, 3.0])
    # The body captures the outer initializers too, and x through its nested If.
    assert net.node("loop").attrs["body"].captures == ["two", "x", "zero"]


def test_sequence_map_applies_the_body_to_each_element():
    body = helper.make_graph([helper.make_node("Mul", ["e", "k"], ["o"])], "map", [vi("e", F, None), vi("k", F, [])],
                             [vi("o", F, None)])
    nodes = [helper.make_node("SplitToSequence", ["x"], ["seq"], axis=0),
             helper.make_node("SequenceMap", ["seq", "k"], ["mapped"], body=body),
             helper.make_node("ConcatFromSequence", ["mapped"], ["y"], axis=0)]
    model = model_of(nodes, [vi("x", F, [3, 2]), vi("k", F, [])], [vi("y", F, [None, None])])
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    got = from_model(d5.Network.from_onnx(model)).inference({"x": x, "k": np.array(2.0, np.float32)})
    np.testing.assert_allclose(got["y"], x * 2)


def test_release_schedule_keeps_captured_tensors_alive():
    # w is read only by the If's branches: freeing it after its producer would break the If.
    x = np.array([1.0, 2.0, 3.0], np.float32)
    executor = from_model(d5.Network.from_onnx(if_model()))
    for _ in range(2):  # the cached plan too
        np.testing.assert_allclose(executor.inference({"c": np.array(True), "x": x})["out"], 0.0)


def test_gradients_through_control_flow_are_refused():
    # A trainable parameter read inside a branch: backprop would have to go through the If.
    branch = helper.make_graph([helper.make_node("Mul", ["x", "W"], ["t"])], "then", [], [vi("t", F, [3])])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["e"])], "else", [], [vi("e", F, [3])])
    nodes = [helper.make_node("If", ["c"], ["y"], name="choose", then_branch=branch, else_branch=other),
             helper.make_node("ReduceSum", ["y"], ["loss"], keepdims=0)]
    model = model_of(nodes, [vi("c", B, []), vi("x", F, [3])], [vi("loss", F, [])],
                     [numpy_helper.from_array(np.ones(3, np.float32), "W")])
    executor = from_model(d5.Network.from_onnx(model))
    feeds = {"c": np.array(True), "x": np.ones(3, np.float32)}
    with pytest.raises(D5Error, match=r"node 'choose' \(If\).*no gradient.*control flow"):
        executor.inference_and_backprop(feeds, "loss")
    np.testing.assert_allclose(executor.inference(feeds)["loss"], 3.0)


def test_dangling_capture_in_a_built_network_is_a_graph_error():
    body = d5.Network("branch")
    body.is_subgraph = True
    body.add_node("Identity", ["missing"], ["r"])
    body.add_output("r")
    net = d5.Network("outer")
    net.add_input("c", (), "bool")
    net.add_node("If", ["c"], ["y"], name="choose", then_branch=body, else_branch=body.copy())
    net.add_output("y")
    with pytest.raises(GraphError, match=r"node 'choose' \(If\) has a subgraph that reads 'missing'"):
        net.validate()


def test_branches_reading_different_outer_tensors_get_their_own():
    """ONNX files sort a node's attributes (else_branch first): the executor appends the captured tensors in the
    node's order, and the operator must split them the same way, or a branch reads another tensor's values."""
    then_branch = helper.make_graph([helper.make_node("Sub", ["x", "t"], ["d"]),
                                     helper.make_node("ReduceSum", ["d"], ["s"], keepdims=0)],
                                    "then", [], [vi("s", F, [])])
    else_branch = helper.make_graph([helper.make_node("ReduceMax", ["x"], ["m"], keepdims=0)], "else", [],
                                    [vi("m", F, [])])
    nodes = [helper.make_node("Neg", ["x"], ["t"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then_branch, else_branch=else_branch)]
    model = model_of(nodes, [vi("c", B, []), vi("x", F, [3])], [vi("y", F, [])])
    x = np.array([1.0, 5.0, -2.0], np.float32)
    for c in (False, True):
        check(model, {"c": np.array(c), "x": x})
