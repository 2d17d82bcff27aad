"""ONNX sequence and optional values: import, inference on the reference framework (compared with
onnxruntime and onnx.reference), export round trip, and d5 errors for values of the wrong kind."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import d5
from d5.errors import D5Error, OnnxImportError, ShapeError, UnsupportedOperatorError
from d5.frameworks import reference
from d5.network.executor import check_inputs
from d5.ops import Gradient

OPSET = 18


def _model(nodes, inputs, outputs, opset=OPSET):
    graph = helper.make_graph(nodes, "seq", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8  # onnxruntime accepts it
    onnx.checker.check_model(model, full_check=True)
    return model


def _sequence_model():
    """seqs (a sequence input) + x -> inserted, erased, concatenated, split, stacked; a sequence output too."""
    nodes = [
        helper.make_node("Constant", [], ["pos"], value=helper.make_tensor("pos", TensorProto.INT64, [], [0])),
        helper.make_node("Constant", [], ["minus_one"], value=helper.make_tensor("m", TensorProto.INT64, [], [-1])),
        helper.make_node("Constant", [], ["two"], value=helper.make_tensor("t", TensorProto.INT64, [], [2])),
        helper.make_node("SequenceInsert", ["seqs", "x", "pos"], ["s1"]),
        helper.make_node("SequenceErase", ["s1"], ["s2"]),                   # drops the last tensor
        helper.make_node("SequenceLength", ["s2"], ["length"]),
        helper.make_node("SequenceAt", ["s2", "minus_one"], ["last"]),
        helper.make_node("ConcatFromSequence", ["s2"], ["cat"], axis=0),
        helper.make_node("SplitToSequence", ["cat", "two"], ["pieces"], axis=0),
        helper.make_node("ConcatFromSequence", ["pieces"], ["stacked"], axis=-1, new_axis=1),
        helper.make_node("SequenceConstruct", ["x", "last"], ["pair"]),
    ]
    inputs = [helper.make_tensor_sequence_value_info("seqs", TensorProto.FLOAT, [2, 3]),
              helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])]
    outputs = [helper.make_tensor_value_info("length", TensorProto.INT64, []),
               helper.make_tensor_value_info("cat", TensorProto.FLOAT, ["rows", 3]),
               helper.make_tensor_value_info("stacked", TensorProto.FLOAT, [2, 3, "k"]),
               helper.make_tensor_sequence_value_info("pair", TensorProto.FLOAT, None),
               helper.make_tensor_sequence_value_info("pieces", TensorProto.FLOAT, None)]
    return _model(nodes, inputs, outputs)


def _optional_model():
    """opt (an optional tensor input): has_element, and the element (or a default) through If-free ops."""
    optional_tensor = helper.make_optional_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, [3]))
    nodes = [
        helper.make_node("OptionalHasElement", ["opt"], ["has"]),
        helper.make_node("Optional", ["x"], ["wrapped"]),
        helper.make_node("OptionalGetElement", ["wrapped"], ["unwrapped"]),
        helper.make_node("Optional", [], ["empty"], type=helper.make_tensor_type_proto(TensorProto.FLOAT, [3])),
        helper.make_node("OptionalHasElement", ["empty"], ["empty_has"]),
    ]
    inputs = [helper.make_value_info("opt", optional_tensor),
              helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])]
    outputs = [helper.make_tensor_value_info("has", TensorProto.BOOL, []),
               helper.make_tensor_value_info("unwrapped", TensorProto.FLOAT, [3]),
               helper.make_tensor_value_info("empty_has", TensorProto.BOOL, [])]
    return _model(nodes, inputs, outputs)


def _assert_same(got, want):
    if isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want)
        for g, w in zip(got, want):
            _assert_same(g, w)
    elif want is None:
        assert got is None
    else:
        got = np.asarray(got)
        assert got.dtype == np.asarray(want).dtype and got.shape == np.asarray(want).shape
        np.testing.assert_allclose(got, want, rtol=1e-6)


def _run_d5(model, feeds):
    net = d5.Network.from_onnx(model)
    out = reference.from_model(net).inference(feeds)
    return [out[o.name] for o in model.graph.output]


def test_sequence_inputs_outputs_match_onnxruntime():
    ort = pytest.importorskip("onnxruntime")
    model = _sequence_model()
    rng = np.random.default_rng(0)
    feeds = {"seqs": [rng.standard_normal((2, 3)).astype(np.float32) for _ in range(3)],
             "x": rng.standard_normal((2, 3)).astype(np.float32)}
    net = d5.Network.from_onnx(model)
    assert net.inputs["seqs"].kind == "sequence" and net.inputs["seqs"].shape == (2, 3)
    assert net.inputs["x"].kind == "tensor"
    got = _run_d5(model, feeds)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = session.run(None, feeds)
    for g, w in zip(got, want):
        _assert_same(g, w)
    assert int(got[0]) == 3 and isinstance(got[3], list) and len(got[4]) == 3
    assert len(feeds["seqs"]) == 3  # the caller's list is not modified by SequenceInsert/Erase


def test_sequence_model_matches_onnx_reference():
    from onnx.reference import ReferenceEvaluator

    model = _sequence_model()
    feeds = {"seqs": [np.full((2, 3), i, np.float32) for i in range(2)], "x": np.ones((2, 3), np.float32)}
    want = ReferenceEvaluator(model).run(None, feeds)
    for g, w in zip(_run_d5(model, feeds), want):
        _assert_same(g, w)


@pytest.mark.parametrize("opt", [np.array([1.0, 2.0, 3.0], np.float32), None])
def test_optional_values_match_onnxruntime(opt):
    # onnxruntime, not onnx.reference: onnx 1.23's reference Optional wraps its input in a list and calls
    # an empty Optional non-empty.
    ort = pytest.importorskip("onnxruntime")
    model = _optional_model()
    net = d5.Network.from_onnx(model)
    assert net.inputs["opt"].kind == "optional" and net.inputs["opt"].is_optional
    feeds = {"opt": opt, "x": np.arange(3, dtype=np.float32)}
    got = _run_d5(model, feeds)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    for g, w in zip(got, want):
        _assert_same(g, np.asarray(w))
    assert bool(got[0]) is (opt is not None) and bool(got[2]) is False


def test_optional_sequence_input():
    seq_type = helper.make_sequence_type_proto(helper.make_tensor_type_proto(TensorProto.INT64, ["n"]))
    model = _model([helper.make_node("OptionalHasElement", ["o"], ["has"]),
                    helper.make_node("OptionalGetElement", ["o"], ["seq"])],
                   [helper.make_value_info("o", helper.make_optional_type_proto(seq_type))],
                   [helper.make_tensor_value_info("has", TensorProto.BOOL, []), helper.make_value_info("seq", seq_type)])
    net = d5.Network.from_onnx(model)
    assert net.inputs["o"].kind == "optional_sequence"
    executor = reference.from_model(net)
    out = executor.inference({"o": [np.arange(3), np.arange(5)]})  # elements differ in the symbolic 'n'
    assert bool(out["has"]) and [len(t) for t in out["seq"]] == [3, 5]
    with pytest.raises(ShapeError, match="OptionalGetElement.*empty"):
        executor.inference({"o": None})


def test_round_trip_passes_full_check():
    for model in (_sequence_model(), _optional_model()):
        net = d5.Network.from_onnx(model)
        exported = net.to_onnx()
        onnx.checker.check_model(exported, full_check=True)
        assert [i.type for i in exported.graph.input] == [i.type for i in model.graph.input]
        again = d5.Network.from_onnx(exported)
        assert again.inputs == net.inputs
    exported = d5.Network.from_onnx(_sequence_model()).to_onnx()
    kinds = {o.name: o.type.WhichOneof("value") for o in exported.graph.output}
    assert kinds["pair"] == kinds["pieces"] == "sequence_type" and kinds["cat"] == "tensor_type"


def test_network_built_by_hand_exports_sequences():
    net = d5.Network("hand")
    net.add_input("xs", ("N", 4), "float32", kind="sequence")
    net.add_input("o", (4,), "int64", kind="optional")
    net.add_node("ConcatFromSequence", ["xs"], ["y"], axis=0)
    net.add_node("OptionalHasElement", ["o"], ["has"])
    net.add_output("y")
    net.add_output("has")
    net.opset = OPSET
    model = net.to_onnx()
    onnx.checker.check_model(model, full_check=True)
    assert model.graph.input[0].type.sequence_type.elem_type.tensor_type.elem_type == TensorProto.FLOAT
    assert model.graph.input[1].type.optional_type.elem_type.tensor_type.elem_type == TensorProto.INT64
    out = reference.from_model(net).inference({"xs": [np.ones((2, 4)), np.zeros((1, 4))], "o": None})
    assert out["y"].shape == (3, 4) and out["y"].dtype == np.float32 and not bool(out["has"])
    with pytest.raises(D5Error, match="kind"):
        d5.Network().add_input("m", (2,), kind="map")


def test_wrong_kind_of_value_names_the_input():
    executor = reference.from_model(d5.Network.from_onnx(_sequence_model()))
    good = {"seqs": [np.zeros((2, 3), np.float32)], "x": np.zeros((2, 3), np.float32)}
    with pytest.raises(ShapeError, match="'seqs'.*sequence.*list of arrays"):
        executor.inference({**good, "seqs": np.zeros((2, 3), np.float32)})
    with pytest.raises(ShapeError, match="'x'.*sequence"):
        executor.inference({**good, "x": [np.zeros((2, 3), np.float32)]})
    with pytest.raises(ShapeError, match="element 1 of input 'seqs'.*shape"):
        executor.inference({**good, "seqs": [np.zeros((2, 3), np.float32), np.zeros((3, 3), np.float32)]})
    with pytest.raises(ShapeError, match="element 0 of input 'seqs'.*dtype"):
        executor.inference({**good, "seqs": [np.zeros((2, 3), np.int64)]})
    with pytest.raises(ShapeError, match="'x'.*None"):
        executor.inference({**good, "x": None})
    # Nested Python lists of numbers are still a tensor.
    declared = d5.Network.from_onnx(_sequence_model()).inputs
    assert check_inputs(declared, {"x": [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]})["x"].dtype == np.float32


def test_maps_and_sparse_tensors_are_refused():
    map_type = helper.make_map_type_proto(TensorProto.INT64, helper.make_tensor_type_proto(TensorProto.FLOAT, []))
    graph = helper.make_graph([helper.make_node("Identity", ["m"], ["y"])], "g", [helper.make_value_info("m", map_type)],
                              [helper.make_value_info("y", map_type)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    with pytest.raises(OnnxImportError, match="'m'.*map"):
        d5.Network.from_onnx(model)
    sparse = helper.make_value_info("s", helper.make_sparse_tensor_type_proto(TensorProto.FLOAT, [2, 2]))
    graph = helper.make_graph([helper.make_node("Identity", ["s"], ["y"])], "g", [sparse],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])])
    with pytest.raises(OnnxImportError, match="'s'.*sparse tensor"):
        d5.Network.from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)]))


def test_sequence_operators_have_no_gradient():
    from d5.frameworks.reference.operators import create_operator

    op = create_operator("SequenceAt", {})
    with pytest.raises(UnsupportedOperatorError, match="no gradient"):
        op.backward([np.ones(2)], [[np.ones(2)], np.array(0)], [np.ones(2)])
    assert op.gradient is Gradient.NONE


@pytest.mark.parametrize("op_type, attrs, inputs, message", [
    ("SequenceAt", {}, [[np.ones(2)], np.array(1)], "position 1 is out of range"),
    ("SequenceInsert", {}, [[np.ones(2)], np.ones(2, np.int32)], "one dtype"),
    ("SequenceErase", {}, [[]], "empty"),
    ("ConcatFromSequence", {"axis": 2}, [[np.ones((2, 2))]], "axis 2 is out of range"),
    ("ConcatFromSequence", {"axis": 0}, [np.ones((2, 2))], "must be a sequence"),
    ("SplitToSequence", {}, [np.ones(4), np.array([1, 2])], "sum to the axis length 4"),
])
def test_operator_errors_are_d5_errors(op_type, attrs, inputs, message):
    from d5.frameworks.reference.operators import create_operator

    with pytest.raises(ShapeError, match=message):
        create_operator(op_type, attrs).forward(inputs)


def test_insert_and_erase_positions_follow_onnx():
    from d5.frameworks.reference.operators import create_operator

    seq = [np.array(0), np.array(1), np.array(2)]
    insert = create_operator("SequenceInsert", {})
    assert [int(t) for t in insert.forward([seq, np.array(9), np.array(3)])[0]] == [0, 1, 2, 9]   # n appends
    assert [int(t) for t in insert.forward([seq, np.array(9), np.array(-1)])[0]] == [0, 1, 9, 2]
    assert [int(t) for t in insert.forward([seq, np.array(9), np.array([-3])])[0]] == [9, 0, 1, 2]
    erase = create_operator("SequenceErase", {})
    assert [int(t) for t in erase.forward([seq, np.array(-3)])[0]] == [1, 2]
    assert [int(t) for t in seq] == [0, 1, 2]
    split = create_operator("SplitToSequence", {"axis": 1, "keepdims": 0})
    assert [p.shape for p in split.forward([np.zeros((2, 3))])[0]] == [(2,)] * 3
    split_1d = create_operator("SplitToSequence", {"axis": 0, "keepdims": 0})
    assert [p.shape for p in split_1d.forward([np.arange(3.0)])[0]] == [()] * 3


def test_backend_run_node_types_lists_and_none():
    from d5.frameworks.onnx_backend import ReferenceBackend

    (length,) = ReferenceBackend.run_node(helper.make_node("SequenceLength", ["s"], ["n"]),
                                          [[np.ones(2, np.float32), np.zeros(3, np.float32)]])
    assert int(length) == 2
    (has,) = ReferenceBackend.run_node(helper.make_node("OptionalHasElement", ["o"], ["h"]), [None])
    assert not bool(has)
    (empty,) = ReferenceBackend.run_node(helper.make_node("SequenceEmpty", [], ["s"]), [])
    assert empty == []
