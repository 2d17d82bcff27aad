"""Recurrent operators (LSTM, GRU, RNN) against PyTorch, onnxruntime and finite differences."""
from __future__ import annotations

import numpy as np
import pytest

from d5.errors import ShapeError
from d5.frameworks.reference.operators import create_operator
from d5.ops import test_gradient
from d5.ops.validation import test_gradient as check_gradient
from _helpers import d5_outputs, onnxruntime_outputs

torch = pytest.importorskip("torch")


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


def _rnn_inputs(direction, seed=0, layout=0):
    dirs, seq, batch, features, hidden = (2 if direction == "bidirectional" else 1), 4, 3, 5, 2
    rng = np.random.default_rng(seed)
    x_shape = (batch, seq, features) if layout else (seq, batch, features)
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal((dirs, hidden, features)).astype(np.float32) * 0.5
    r = rng.standard_normal((dirs, hidden, hidden)).astype(np.float32) * 0.5
    b = rng.standard_normal((dirs, 2 * hidden)).astype(np.float32) * 0.1
    return [x, w, r, b]


@pytest.mark.parametrize("direction, layout", [("forward", 0), ("reverse", 0), ("forward", 1), ("bidirectional", 0)])
def test_rnn_schema_default_activations_match_onnxruntime(direction, layout):
    # ONNX's schema default for RNN is ["Tanh", "Tanh"] whatever the direction; the importer passes it on.
    inputs = _rnn_inputs(direction, layout=layout)
    attributes = {"hidden_size": 2, "direction": direction}
    if layout:  # onnxruntime runs layout 0 only: give it X sequence-first and bring its outputs batch-first
        y, y_h = onnxruntime_outputs("RNN", [inputs[0].transpose(1, 0, 2)] + inputs[1:], 2, attributes, opset=14)
        expected = [y.transpose(2, 0, 1, 3), y_h.transpose(1, 0, 2)]
    else:
        expected = onnxruntime_outputs("RNN", inputs, 2, attributes, opset=14)
    actual = d5_outputs("RNN", inputs, {**attributes, "layout": layout, "activations": ["Tanh", "Tanh"]})
    for a, e in zip(actual, expected):
        assert a.shape == e.shape and a.dtype == e.dtype
        np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-6)


def test_rnn_uses_the_first_activation_set_of_a_one_direction_layer():
    inputs = _rnn_inputs("forward")
    attributes = {"hidden_size": 2, "activations": ["Relu", "Tanh"]}
    expected = onnxruntime_outputs("RNN", inputs, 2, {"hidden_size": 2, "activations": ["Relu"]}, opset=14)
    for a, e in zip(d5_outputs("RNN", inputs, attributes), expected):
        np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op_type, activations", [("RNN", ["Tanh"] * 3), ("GRU", ["Sigmoid"] * 3),
                                                  ("LSTM", ["Sigmoid", "Tanh"])])
def test_recurrent_activation_count_still_checked(op_type, activations):
    with pytest.raises(ShapeError, match="activations per direction"):
        create_operator(op_type, {"hidden_size": 2, "activations": activations})


def test_rnn_default_activations_gradient():
    inputs = [a.astype(np.float64) for a in _rnn_inputs("reverse", seed=1)]
    op = create_operator("RNN", {"hidden_size": 2, "direction": "reverse", "activations": ["Tanh", "Tanh"]})
    result = check_gradient(op, inputs)
    assert result.passed, result
