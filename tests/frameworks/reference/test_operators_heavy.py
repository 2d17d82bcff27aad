"""The heavier reference operators (LayerNormalization, InstanceNormalization, ConvTranspose, LSTM, GRU, RNN,
Einsum) against independent oracles: torch for the forward, ONNX's own node test cases, and float64 central
differences (d5.ops.test_gradient) for every backward."""
from __future__ import annotations

import numpy as np
import pytest

from d5.errors import ShapeError, UnsupportedOperatorError
from d5.frameworks.reference.operators import create_operator
from d5.ops import test_gradient

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
F = torch.nn.functional

HEAVY_OPS = {"LayerNormalization", "InstanceNormalization", "ConvTranspose", "LSTM", "GRU", "RNN", "Einsum"}
# ONNX node cases of these ops that the reference framework deliberately does not run, with the reason.
KNOWN_UNSUPPORTED: dict[str, str] = {}


def _blocks(array: np.ndarray, order: list[int], hidden: int) -> np.ndarray:
    """Reorder the gate blocks of a torch weight (rows) into ONNX's gate order."""
    return np.concatenate([array[k * hidden:(k + 1) * hidden] for k in order])


def _torch_rnn_as_onnx(module, order: list[int], hidden: int, directions: int):
    w, r, b = [], [], []
    for d in range(directions):
        suffix = "_reverse" if d else ""
        get = lambda name: getattr(module, name + "_l0" + suffix).detach().numpy()  # noqa: E731
        w.append(_blocks(get("weight_ih"), order, hidden))
        r.append(_blocks(get("weight_hh"), order, hidden))
        b.append(np.concatenate([_blocks(get("bias_ih"), order, hidden), _blocks(get("bias_hh"), order, hidden)]))
    return np.stack(w), np.stack(r), np.stack(b)


# ------------------------------------------------------------------------------------ forward vs torch

@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_lstm_matches_torch(bidirectional, dtype):
    seq, batch, features, hidden = 5, 3, 4, 6
    directions = 2 if bidirectional else 1
    torch.manual_seed(0)
    module = torch.nn.LSTM(features, hidden, bidirectional=bidirectional).to(torch.float64)
    rng = np.random.default_rng(1)
    x, h0, c0 = (rng.standard_normal(s) for s in ((seq, batch, features), (directions, batch, hidden),
                                                   (directions, batch, hidden)))
    expected_y, (expected_h, expected_c) = module(torch.from_numpy(x), (torch.from_numpy(h0), torch.from_numpy(c0)))
    # torch's gate order is i, f, g(c), o; ONNX's is i, o, f, c.
    w, r, b = _torch_rnn_as_onnx(module, [0, 3, 1, 2], hidden, directions)
    op = create_operator("LSTM", {"hidden_size": hidden, "direction": "bidirectional" if bidirectional else "forward"})
    y, y_h, y_c = op.forward([a.astype(dtype) for a in (x, w, r, b)][:4] + [None, h0.astype(dtype), c0.astype(dtype)])
    assert y.dtype == y_h.dtype == y_c.dtype == dtype
    assert y.shape == (seq, directions, batch, hidden)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(y.transpose(0, 2, 1, 3).reshape(seq, batch, -1), expected_y.detach().numpy(), atol=tol)
    np.testing.assert_allclose(y_h, expected_h.detach().numpy(), atol=tol)
    np.testing.assert_allclose(y_c, expected_c.detach().numpy(), atol=tol)


@pytest.mark.parametrize("bidirectional", [False, True])
def test_gru_matches_torch(bidirectional):
    seq, batch, features, hidden = 4, 2, 3, 5
    directions = 2 if bidirectional else 1
    torch.manual_seed(0)
    module = torch.nn.GRU(features, hidden, bidirectional=bidirectional).to(torch.float64)
    rng = np.random.default_rng(2)
    x, h0 = rng.standard_normal((seq, batch, features)), rng.standard_normal((directions, batch, hidden))
    expected_y, expected_h = module(torch.from_numpy(x), torch.from_numpy(h0))
    # torch's gate order is r, z, n and it applies the reset gate after the linear map (linear_before_reset=1).
    w, r, b = _torch_rnn_as_onnx(module, [1, 0, 2], hidden, directions)
    op = create_operator("GRU", {"hidden_size": hidden, "linear_before_reset": 1,
                                 "direction": "bidirectional" if bidirectional else "forward"})
    y, y_h = op.forward([x, w, r, b, None, h0])
    np.testing.assert_allclose(y.transpose(0, 2, 1, 3).reshape(seq, batch, -1), expected_y.detach().numpy(), atol=1e-12)
    np.testing.assert_allclose(y_h, expected_h.detach().numpy(), atol=1e-12)


def test_rnn_batch_first_layout_matches_torch():
    torch.manual_seed(0)
    module = torch.nn.RNN(3, 4, batch_first=True).to(torch.float64)
    x = np.random.default_rng(3).standard_normal((2, 5, 3))           # (batch, seq, input)
    expected_y, expected_h = module(torch.from_numpy(x))
    w, r, b = _torch_rnn_as_onnx(module, [0], 4, 1)
    y, y_h = create_operator("RNN", {"hidden_size": 4, "layout": 1}).forward([x, w, r, b])
    assert y.shape == (2, 5, 1, 4) and y_h.shape == (2, 1, 4)
    np.testing.assert_allclose(y[:, :, 0], expected_y.detach().numpy(), atol=1e-12)
    np.testing.assert_allclose(y_h[:, 0], expected_h.detach().numpy().transpose(1, 0, 2)[:, 0], atol=1e-12)


def test_lstm_sequence_lens_match_torch_packed_sequences():
    seq, batch, features, hidden = 5, 3, 2, 3
    torch.manual_seed(0)
    module = torch.nn.LSTM(features, hidden, bidirectional=True).to(torch.float64)
    x = np.random.default_rng(4).standard_normal((seq, batch, features))
    lens = np.array([5, 2, 4], np.int32)
    packed = torch.nn.utils.rnn.pack_padded_sequence(torch.from_numpy(x), torch.from_numpy(lens.astype(np.int64)),
                                                     enforce_sorted=False)
    out, (expected_h, expected_c) = module(packed)
    expected_y, _ = torch.nn.utils.rnn.pad_packed_sequence(out, total_length=seq)
    w, r, b = _torch_rnn_as_onnx(module, [0, 3, 1, 2], hidden, 2)
    y, y_h, y_c = create_operator("LSTM", {"hidden_size": hidden, "direction": "bidirectional"}).forward(
        [x, w, r, b, lens])
    np.testing.assert_allclose(y.transpose(0, 2, 1, 3).reshape(seq, batch, -1), expected_y.detach().numpy(), atol=1e-12)
    np.testing.assert_allclose(y_h, expected_h.detach().numpy(), atol=1e-12)
    np.testing.assert_allclose(y_c, expected_c.detach().numpy(), atol=1e-12)


@pytest.mark.parametrize("axis", [-1, 1])
def test_layer_norm_matches_torch_and_keeps_dtype(axis):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    normalized = x.shape[axis:] if axis >= 0 else x.shape[axis:]
    scale, bias = (rng.standard_normal(normalized).astype(np.float32) for _ in range(2))
    y, mean, inv_std = create_operator("LayerNormalization", {"axis": axis, "epsilon": 1e-5}).forward([x, scale, bias])
    expected = F.layer_norm(torch.from_numpy(x), normalized, torch.from_numpy(scale), torch.from_numpy(bias), 1e-5)
    assert y.dtype == np.float32 and mean.shape == x.shape[:x.ndim - len(normalized)] + (1,) * len(normalized)
    np.testing.assert_allclose(y, expected.numpy(), rtol=1e-5, atol=1e-5)


def test_instance_norm_matches_torch():
    rng = np.random.default_rng(6)
    x, scale, bias = rng.standard_normal((2, 3, 4, 5)), rng.standard_normal(3), rng.standard_normal(3)
    y = create_operator("InstanceNormalization", {"epsilon": 1e-5}).forward([x, scale, bias])
    expected = F.instance_norm(torch.from_numpy(x), weight=torch.from_numpy(scale), bias=torch.from_numpy(bias), eps=1e-5)
    np.testing.assert_allclose(y, expected.numpy(), atol=1e-12)


@pytest.mark.parametrize("strides, pads, dilations, group, output_padding", [
    ((1, 1), (0, 0, 0, 0), (1, 1), 1, (0, 0)),
    ((2, 3), (1, 0, 1, 0), (1, 2), 2, (1, 2)),
    ((2, 2), (1, 1, 1, 1), (2, 1), 1, (1, 0)),
])
def test_conv_transpose_matches_torch(strides, pads, dilations, group, output_padding):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 4, 5, 4)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 2)).astype(np.float32)
    b = rng.standard_normal(3 * group).astype(np.float32)
    op = create_operator("ConvTranspose", {"strides": strides, "pads": pads, "dilations": dilations, "group": group,
                                           "output_padding": output_padding})
    y = op.forward([x, w, b])
    expected = F.conv_transpose2d(torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b), stride=strides,
                                  padding=pads[:2], output_padding=output_padding, groups=group, dilation=dilations)
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, expected.numpy(), rtol=1e-4, atol=1e-4)


def test_einsum_matches_torch():
    rng = np.random.default_rng(8)
    a, b = rng.standard_normal((2, 3, 4)).astype(np.float32), rng.standard_normal((2, 4, 5)).astype(np.float32)
    y = create_operator("Einsum", {"equation": "bij,bjk->bik"}).forward([a, b])
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, torch.einsum("bij,bjk->bik", torch.from_numpy(a), torch.from_numpy(b)).numpy(),
                               rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------ ONNX's node test cases

def _node_cases():
    from onnx.backend.test.loader import load_model_tests

    cases = []
    for case in load_model_tests(kind="node"):
        nodes = case.model.graph.node if case.model is not None else []
        if len(nodes) == 1 and nodes[0].op_type in HEAVY_OPS:
            cases.append(case)
    return cases


def _run_node_case(case) -> str | None:
    """None when d5's operator reproduces every data set of the case, else what went wrong."""
    from onnx import helper, numpy_helper

    graph = case.model.graph
    node = graph.node[0]
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    for inputs, outputs in case.data_sets:
        feeds = dict(zip([i.name for i in graph.input], inputs))
        feeds.update({init.name: numpy_helper.to_array(init) for init in graph.initializer})
        args = [feeds[name] if name else None for name in node.input]
        while args and args[-1] is None:
            args.pop()
        results = create_operator(node.op_type, attrs).forward(args)
        results = dict(zip(node.output, results if isinstance(results, tuple) else (results,)))
        for value_info, expected in zip(graph.output, outputs):
            actual = np.asarray(results[value_info.name])
            if actual.dtype != expected.dtype or actual.shape != expected.shape:
                return f"{value_info.name}: got {actual.dtype}{actual.shape}, expected {expected.dtype}{expected.shape}"
            if not np.allclose(actual.astype(np.float64), expected.astype(np.float64), rtol=case.rtol, atol=case.atol):
                return f"{value_info.name}: values differ by up to {np.abs(actual.astype(float) - expected).max():g}"
    return None


def test_onnx_node_cases_of_heavy_ops_pass():
    cases = _node_cases()
    ops_covered = {case.model.graph.node[0].op_type for case in cases}
    assert ops_covered >= {"LayerNormalization", "ConvTranspose", "LSTM", "GRU", "RNN", "Einsum"}
    failures = {}
    for case in cases:
        if case.name in KNOWN_UNSUPPORTED:
            with pytest.raises(UnsupportedOperatorError):
                _run_node_case(case)
            continue
        problem = _run_node_case(case)
        if problem:
            failures[case.name] = problem
    assert not failures, failures
    assert len(cases) - len(KNOWN_UNSUPPORTED) >= 50


# ------------------------------------------------------------------------------------ gradients (float64)

def _recurrent_inputs(op_type, directions, lens, layout, rng, seq=4, batch=3, features=3, hidden=4):
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[op_type]
    x = rng.standard_normal((seq, batch, features))
    w = 0.5 * rng.standard_normal((directions, gates * hidden, features))
    r = 0.5 * rng.standard_normal((directions, gates * hidden, hidden))
    b = rng.standard_normal((directions, 2 * gates * hidden))
    h0, c0 = rng.standard_normal((directions, batch, hidden)), rng.standard_normal((directions, batch, hidden))
    if layout:
        x, h0, c0 = x.transpose(1, 0, 2).copy(), h0.transpose(1, 0, 2).copy(), c0.transpose(1, 0, 2).copy()
    inputs = [x, w, r, b, lens, h0]
    if op_type == "LSTM":
        inputs += [c0, rng.standard_normal((directions, 3 * hidden))]
    return inputs


@pytest.mark.parametrize("op_type, attrs", [
    ("LSTM", {}), ("GRU", {}), ("GRU", {"linear_before_reset": 1}), ("RNN", {}),
    ("LSTM", {"clip": 1.5}), ("GRU", {"activations": ["HardSigmoid", "Softsign"]}),
])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_recurrent_gradients(op_type, attrs, direction):
    rng = np.random.default_rng(9)
    directions = 2 if direction == "bidirectional" else 1
    for lens, layout in ((None, 0), (np.array([4, 2, 3], np.int32), 1)):
        op = create_operator(op_type, {**attrs, "direction": direction, "hidden_size": 4, "layout": layout})
        inputs = _recurrent_inputs(op_type, directions, lens, layout, rng)
        result = test_gradient(op, inputs)
        assert result.passed, result.summary()
        # X, W, R, B and initial_h (and initial_c, P for LSTM) all had their gradient checked.
        assert {check.index for check in result.inputs} >= {0, 1, 2, 3, 5}


def test_layer_norm_gradients_including_statistics_outputs():
    rng = np.random.default_rng(10)
    x = rng.standard_normal((2, 3, 4))
    for axis, params_shape in ((-1, (4,)), (1, (3, 4)), (0, (2, 3, 4))):
        op = create_operator("LayerNormalization", {"axis": axis})
        result = test_gradient(op, [x, rng.standard_normal(params_shape), rng.standard_normal(params_shape)])
        assert result.passed, result.summary()


def test_instance_norm_gradient():
    rng = np.random.default_rng(11)
    result = test_gradient(create_operator("InstanceNormalization", {}),
                           [rng.standard_normal((2, 3, 4, 2)), rng.standard_normal(3), rng.standard_normal(3)])
    assert result.passed, result.summary()


@pytest.mark.parametrize("attrs, x_shape, w_shape", [
    ({"strides": [2, 3], "pads": [1, 0, 1, 0], "dilations": [1, 2], "group": 2, "output_padding": [1, 2]},
     (2, 4, 3, 3), (4, 2, 3, 2)),
    ({"strides": [2, 2], "auto_pad": "SAME_UPPER"}, (1, 2, 3, 3), (2, 3, 3, 3)),
    ({"strides": [3], "output_shape": [10]}, (2, 2, 3), (2, 1, 3)),
])
def test_conv_transpose_gradient(attrs, x_shape, w_shape):
    rng = np.random.default_rng(12)
    w = rng.standard_normal(w_shape)
    inputs = [rng.standard_normal(x_shape), w, rng.standard_normal(w_shape[1] * attrs.get("group", 1))]
    result = test_gradient(create_operator("ConvTranspose", attrs), inputs)
    assert result.passed, result.summary()


# output_shape given: ONNX ignores the pads and derives them, total = natural - output_shape, the odd unit at the
# end for SAME_UPPER and at the beginning otherwise. (d5 once kept the pads: [1, 12, 23, 34] for the first case.)
CONV_TRANSPOSE_OUTPUT_SHAPE_CASES = [
    ({"output_shape": [4]}, (1, 1, 5), (1, 1, 2)),
    ({"output_shape": [4], "pads": [0, 2]}, (1, 1, 5), (1, 1, 2)),
    ({"output_shape": [4], "auto_pad": "SAME_UPPER"}, (1, 1, 5), (1, 1, 2)),
    ({"output_shape": [3], "auto_pad": "SAME_LOWER", "strides": [2]}, (1, 2, 3), (2, 1, 3)),
    ({"kernel_shape": [2], "strides": [2], "pads": [1, 1], "output_padding": [1], "output_shape": [1]}, (1, 1, 2), (1, 1, 2)),
    ({"output_shape": [7, 5], "strides": [2, 3], "dilations": [2, 1], "pads": [1, 1, 1, 1]}, (2, 2, 3, 2), (2, 3, 3, 2)),
    ({"output_shape": [6, 9], "strides": [2, 3], "auto_pad": "SAME_UPPER", "group": 2}, (1, 4, 3, 3), (4, 1, 2, 3)),
    ({"output_shape": [8], "strides": [2]}, (1, 1, 4), (1, 1, 1)),  # one more than unpadded: a zero at the end
    ({"strides": [2], "auto_pad": "SAME_LOWER"}, (1, 1, 4), (1, 1, 1)),  # input * stride > unpadded: clamped
]


def _onnxruntime_conv_transpose(attrs, x, w):
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper

    node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, a.shape)
                                            for n, a in (("x", x), ("w", w))], [helper.make_empty_tensor_value_info("y")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x, "w": w})[0]


@pytest.mark.parametrize("attrs, x_shape, w_shape", CONV_TRANSPOSE_OUTPUT_SHAPE_CASES)
def test_conv_transpose_with_output_shape_matches_onnxruntime(attrs, x_shape, w_shape):
    rng = np.random.default_rng(15)
    x, w = rng.standard_normal(x_shape).astype(np.float32), rng.standard_normal(w_shape).astype(np.float32)
    y = create_operator("ConvTranspose", attrs).forward([x, w])
    expected = _onnxruntime_conv_transpose(attrs, x, w)
    assert y.shape == expected.shape
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)


def test_conv_transpose_output_shape_ignores_pads_worked_example():
    x, w = np.arange(1.0, 6.0).reshape(1, 1, 5), np.array([[[1.0, 10.0]]])
    for pads in (None, [1, 0], [0, 3]):
        attrs = {"output_shape": [4]} if pads is None else {"output_shape": [4], "pads": pads}
        np.testing.assert_array_equal(create_operator("ConvTranspose", attrs).forward([x, w]), [[[12, 23, 34, 45]]])


@pytest.mark.parametrize("attrs, x_shape, w_shape", CONV_TRANSPOSE_OUTPUT_SHAPE_CASES[:7])
def test_conv_transpose_with_output_shape_gradient(attrs, x_shape, w_shape):
    rng = np.random.default_rng(16)
    x, w = rng.standard_normal(x_shape), rng.standard_normal(w_shape)
    bias = rng.standard_normal(w_shape[1] * attrs.get("group", 1))
    result = test_gradient(create_operator("ConvTranspose", attrs), [x, w, bias])
    assert result.passed, result.summary()


def test_conv_transpose_output_shape_of_the_wrong_length_is_refused():
    with pytest.raises(ShapeError, match="output_shape must have 2 values"):
        create_operator("ConvTranspose", {"output_shape": [4]}).forward([np.zeros((1, 1, 3, 3)), np.zeros((1, 1, 2, 2))])


@pytest.mark.parametrize("equation, shapes", [
    ("ij,jk->ik", [(2, 3), (3, 4)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ii->i", [(3, 3)]),
    ("ii", [(3, 3)]),
    ("iij->j", [(3, 3, 2)]),
    ("ij->", [(2, 3)]),
    ("ab,cd->ad", [(2, 3), (4, 5)]),
    ("...ij,...jk->...ik", [(2, 3, 4), (1, 4, 5)]),
    ("...ij,jk", [(5, 2, 3, 4), (4, 5)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]),
])
def test_einsum_gradient(equation, shapes):
    rng = np.random.default_rng(13)
    inputs = [rng.standard_normal(shape) for shape in shapes]
    result = test_gradient(create_operator("Einsum", {"equation": equation}), inputs)
    assert result.passed, result.summary()


# ------------------------------------------------------------------------------------------- bad input

def test_bad_inputs_raise_d5_errors():
    rng = np.random.default_rng(14)
    x = rng.standard_normal((3, 2, 4))
    with pytest.raises(ShapeError, match="expected W"):
        create_operator("LSTM", {"hidden_size": 5}).forward([x, np.zeros((1, 12, 4)), np.zeros((1, 20, 5))])
    with pytest.raises(UnsupportedOperatorError, match="input_forget"):
        create_operator("LSTM", {"input_forget": 1})
    with pytest.raises(UnsupportedOperatorError, match="activation"):
        create_operator("GRU", {"activations": ["Sigmoid", "Gelu"]})
    with pytest.raises(ShapeError, match="sequence_lens"):
        create_operator("RNN", {}).forward([x, np.zeros((1, 1, 4)), np.zeros((1, 1, 1)), None, np.array([9, 1])])
    with pytest.raises(UnsupportedOperatorError, match="1-D, 2-D and 3-D"):
        create_operator("ConvTranspose", {}).forward([np.zeros((1, 1, 2, 2, 2, 2)), np.zeros((1, 1, 1, 1, 1, 1))])
    with pytest.raises(ShapeError, match="W must be"):
        create_operator("ConvTranspose", {}).forward([np.zeros((1, 2, 3, 3)), np.zeros((3, 1, 2, 2))])
    with pytest.raises(ShapeError, match="operands"):
        create_operator("Einsum", {"equation": "ij,jk->ik"}).forward([np.zeros((2, 3))])
    with pytest.raises(ShapeError, match="does not fit"):
        create_operator("Einsum", {"equation": "ij,jk->ik"}).forward([np.zeros((2, 3)), np.zeros((4, 2))])
    with pytest.raises(ShapeError, match="axis"):
        create_operator("LayerNormalization", {"axis": 3}).forward([np.zeros((2, 3)), np.ones(3)])
