"""What the operator tables leave out of TensorFlow's reduction, recurrent, signal and attention converters: every
ReduceX at the opsets where axes are an attribute and where they are an input, ArgMax/ArgMin ties and NaNs, the
float CumProd gradient (exact with zeros; the reference has none), LSTM/GRU/RNN in every direction, layout,
activation and clip and through the ``tf.scan`` loop of long sequences, and each converter traced by
``tf.function`` against its eager result (the executor runs them traced)."""
from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from _oracle import _distinct, _ints, _rand, check_against_reference  # noqa: E402
from d5.errors import ShapeError  # noqa: E402
from d5.frameworks.reference.operators import create_operator as reference_op  # noqa: E402
from d5.frameworks.tensorflow.operators import create_operator  # noqa: E402
import d5.frameworks.tensorflow.operators.recurrent as recurrent  # noqa: E402

_REDUCTIONS = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
               "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"]


def _positive(*shape):
    return _rand(*shape, low=0.2, high=1.5)


def _reduction_cases():
    cases = []
    for op in _REDUCTIONS:
        x = _positive(2, 3, 4) if op in ("ReduceLogSum", "ReduceProd") else _distinct(2, 3, 4)
        input_since = 13 if op == "ReduceSum" else 18
        cases += [
            (f"{op}_attr_axes", op, {"axes": [0, -1], "keepdims": 0}, [x], {"opset": input_since - 2}),
            (f"{op}_attr_all_keepdims", op, {}, [x], {"opset": 11}),
            (f"{op}_input_axes", op, {"keepdims": 0}, [x, _ints([1])], {"opset": input_since}),
            (f"{op}_input_empty_axes_noop", op, {"noop_with_empty_axes": 1}, [x, _ints(np.zeros(0, np.int64))],
             {"opset": input_since}),
            (f"{op}_scalar", op, {}, [lambda rng: np.array(0.75, np.float32)], {}),
        ]
    return cases


EXTRA_REDUCTIONS = [
    ("reduce_l2_zero_norm", "ReduceL2", {"keepdims": 0}, [_ints([[0.0, 0.0], [3.0, 4.0]], np.float32), _ints([1])],
     {}),
    ("reduce_max_ties", "ReduceMax", {}, [_ints([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]], np.float32), _ints([1])], {}),
    ("reduce_l1_with_zero", "ReduceL1", {}, [_ints([[0.0, -2.0, 1.5]], np.float32)], {}),
    ("reduce_mean_int_truncates", "ReduceMean", {"keepdims": 0}, [_ints([[-5, 0], [3, 4]], np.int32), _ints([1])],
     {}),
    ("reduce_sum_int8_wraps", "ReduceSum", {}, [_ints([100, 100, 100], np.int8)], {}),
    ("reduce_sum_float64", "ReduceSum", {}, [lambda rng: rng.standard_normal((3, 2)), _ints([0])], {}),
    ("reduce_prod_with_zero", "ReduceProd", {}, [_ints([[0.0, 2.0, 3.0], [0.0, 0.0, 1.0]], np.float32), _ints([1])],
     {}),
    ("reduce_log_sum_exp_inf", "ReduceLogSumExp", {}, [_ints([[-np.inf, -np.inf], [1.0, 2.0]], np.float32)], {}),
    ("reduce_min_uint32", "ReduceMin", {"keepdims": 0}, [_ints([[4000000000, 3], [7, 8]], np.uint32), _ints([0])],
     {}),
    ("argmax_ties_first", "ArgMax", {"axis": 1}, [_ints([[1, 3, 3, 0], [2, 2, 2, 2]], np.float32)], {}),
    ("argmax_ties_last", "ArgMax", {"axis": 1, "select_last_index": 1, "keepdims": 0},
     [_ints([[1, 3, 3, 0], [2, 2, 2, 2]], np.int32)], {}),
    ("argmin_axis0_last", "ArgMin", {"axis": 0, "select_last_index": 1}, [_ints([[1, 0], [1, 5], [0, 0]])], {}),
    ("argmax_nan_first", "ArgMax", {"axis": -1}, [_ints([[1.0, np.nan, 5.0, np.nan]], np.float32)], {}),
    ("argmax_bool", "ArgMax", {"keepdims": 0}, [_ints([[False, True], [False, False]], bool)], {}),
    ("argmin_uint64", "ArgMin", {"axis": 1}, [_ints([[2 ** 64 - 1, 5, 2 ** 63]], np.uint64)], {}),
    ("cumsum_axis_last_reverse", "CumSum", {"reverse": 1}, [_rand(2, 3, 4), _ints([-1])], {}),
    ("cumprod_float_exclusive", "CumProd", {"exclusive": 1}, [_rand(3, 4), _ints(1)], {}),
]


@pytest.mark.parametrize("case", _reduction_cases() + EXTRA_REDUCTIONS, ids=lambda case: case[0])
def test_reductions_match_reference(case):
    check_against_reference("tensorflow", case)


def test_argmax_of_empty_axis_raises():
    with pytest.raises(ShapeError, match="empty"):
        create_operator("ArgMax", {"axis": 1})(tf.zeros((2, 0)))


@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
@pytest.mark.parametrize("axis", [0, -1])
def test_cumprod_gradient_is_exact_with_zeros(exclusive, reverse, axis):
    x = np.random.default_rng(0).uniform(0.5, 1.5, (4, 5))
    x[1, 2] = x[2, 2] = x[3, 0] = 0.0
    g = np.random.default_rng(1).standard_normal((4, 5))
    op = create_operator("CumProd", {"exclusive": exclusive, "reverse": reverse})
    variable = tf.Variable(x)
    with tf.GradientTape() as tape:
        out = op(variable, tf.constant(axis))
    grad = tape.gradient(out, variable, output_gradients=tf.constant(g)).numpy()
    np.testing.assert_allclose(out.numpy(), reference_op("CumProd", {"exclusive": exclusive, "reverse": reverse})
                               .forward([x, np.array(axis)]))
    # d out[i] / d x[j], one element at a time: out is multilinear in x, so a unit step is exact.
    expected = np.zeros_like(x)
    base = reference_op("CumProd", {"exclusive": exclusive, "reverse": reverse})
    for j in np.ndindex(x.shape):
        bumped = x.copy()
        bumped[j] += 1.0
        expected[j] = np.sum(g * (base.forward([bumped, np.array(axis)]) - base.forward([x, np.array(axis)])))
    assert np.all(np.isfinite(grad))
    np.testing.assert_allclose(grad, expected, rtol=1e-10, atol=1e-12)


# ------------------------------------------------------------------------------------------------ recurrent

def _lstm(direction, hidden=3, features=2, seq=5, batch=2, layout=0):
    dirs = 2 if direction == "bidirectional" else 1
    x = (batch, seq, features) if layout else (seq, batch, features)
    state = (batch, dirs, hidden) if layout else (dirs, batch, hidden)
    return [_rand(*x), _rand(dirs, 4 * hidden, features), _rand(dirs, 4 * hidden, hidden), _rand(dirs, 8 * hidden),
            _ints([5, 2][:batch], np.int32), _rand(*state), _rand(*state), _rand(dirs, 3 * hidden)]


def _gru_rnn(gates, direction, hidden=3, features=2, seq=5, batch=2, layout=0, lens=(3, 5)):
    dirs = 2 if direction == "bidirectional" else 1
    x = (batch, seq, features) if layout else (seq, batch, features)
    state = (batch, dirs, hidden) if layout else (dirs, batch, hidden)
    return [_rand(*x), _rand(dirs, gates * hidden, features), _rand(dirs, gates * hidden, hidden),
            _rand(dirs, 2 * gates * hidden), _ints(list(lens), np.int64), _rand(*state)]


RECURRENT_CASES = []
for _direction in ("forward", "reverse", "bidirectional"):
    for _layout in (0, 1):
        RECURRENT_CASES += [
            (f"lstm_{_direction}_layout{_layout}", "LSTM", {"hidden_size": 3, "direction": _direction,
                                                            "layout": _layout},
             _lstm(_direction, layout=_layout), {"outputs": 3}),
            (f"gru_{_direction}_layout{_layout}", "GRU", {"hidden_size": 3, "direction": _direction, "layout": _layout,
                                                          "linear_before_reset": _layout},
             _gru_rnn(3, _direction, layout=_layout), {"outputs": 2}),
            (f"rnn_{_direction}_layout{_layout}", "RNN", {"hidden_size": 3, "direction": _direction, "layout": _layout},
             _gru_rnn(1, _direction, layout=_layout), {"outputs": 2}),
        ]
RECURRENT_CASES += [
    ("lstm_no_optional_inputs_float64", "LSTM", {"hidden_size": 2},
     [lambda rng: rng.standard_normal((3, 2, 3)), lambda rng: rng.standard_normal((1, 8, 3)),
      lambda rng: rng.standard_normal((1, 8, 2))], {"outputs": 3}),
    ("lstm_activations_clip", "LSTM", {"hidden_size": 3, "activations": ["HardSigmoid", "Elu", "Softsign"],
                                       "activation_alpha": [0.3, 0.8], "activation_beta": [0.4], "clip": 0.9},
     _lstm("forward"), {"outputs": 3}),
    ("gru_bidirectional_activations", "GRU",
     {"hidden_size": 3, "direction": "bidirectional",
      "activations": ["Sigmoid", "ScaledTanh", "Softplus", "Affine"], "activation_alpha": [1.5, 0.5],
      "activation_beta": [0.7, 0.1]}, _gru_rnn(3, "bidirectional", lens=(0, 4)), {"outputs": 2}),
    ("rnn_relu_zero_length", "RNN", {"hidden_size": 3, "activations": ["Relu"]},
     _gru_rnn(1, "forward", lens=(0, 5)), {"outputs": 2}),
    ("rnn_thresholded_relu", "RNN", {"hidden_size": 3, "activations": ["ThresholdedRelu"], "activation_alpha": [0.1]},
     _gru_rnn(1, "reverse"), {"outputs": 2}),
    ("lstm_two_outputs", "LSTM", {"hidden_size": 3}, _lstm("forward")[:4], {"outputs": 2}),
]


@pytest.mark.parametrize("case", RECURRENT_CASES, ids=lambda case: case[0])
def test_recurrent_matches_reference(case):
    check_against_reference("tensorflow", case)


@pytest.mark.parametrize("case", [c for c in RECURRENT_CASES if "bidirectional" in c[0] or "activations" in c[0]],
                         ids=lambda case: case[0])
def test_long_sequences_loop_with_tf_scan(case, monkeypatch):
    # Longer sequences than UNROLL_LIMIT run tf.scan: the same outputs and gradients.
    monkeypatch.setattr(recurrent, "UNROLL_LIMIT", 1)
    check_against_reference("tensorflow", case)


def test_recurrent_bad_shapes_raise_shape_errors():
    x, w, r = tf.zeros((3, 2, 4)), tf.zeros((1, 12, 4)), tf.zeros((1, 12, 3))
    with pytest.raises(ShapeError, match="hidden_size"):
        create_operator("LSTM", {"hidden_size": 4})(x, tf.zeros((1, 16, 4)), r)
    with pytest.raises(ShapeError, match="expected W"):
        create_operator("GRU", {})(x, w, r)
    with pytest.raises(ShapeError, match="sequence_lens"):
        create_operator("RNN", {})(x, tf.zeros((1, 3, 4)), tf.zeros((1, 3, 3)), None, tf.constant([4, 1]))
    with pytest.raises(ShapeError, match="initial_h"):
        create_operator("RNN", {})(x, tf.zeros((1, 3, 4)), tf.zeros((1, 3, 3)), None, None, tf.zeros((1, 3, 3)))


# ------------------------------------------------------------------------------------------------ tf.function

def _compare_traced(op, tensors, constants=None):
    """``op`` traced once by tf.function on the ``tensors`` (graph inputs; ``constants`` are captured, as the
    executor's initializers are) against its eager result."""
    constants = constants or {}

    def call(*args):
        inputs = list(args)
        for index in sorted(constants):
            inputs.insert(index, constants[index])
        return op(*inputs)

    eager = call(*tensors)
    traced = tf.function(call)(*tensors)
    for a, b in zip(tf.nest.flatten(eager), tf.nest.flatten(traced)):
        np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-6, atol=1e-6)


def test_converters_trace_in_tf_function():
    rng = np.random.default_rng(0)

    def rand(*shape):
        return tf.constant(rng.uniform(-1, 1, shape).astype(np.float32))

    _compare_traced(create_operator("ReduceLogSumExp", {"keepdims": 0}), [rand(2, 3, 4)], {1: tf.constant([0, 2])})
    _compare_traced(create_operator("ReduceMean", {"axes": [1]}, opset=13), [rand(2, 3, 4)])
    _compare_traced(create_operator("ArgMin", {"axis": 1, "select_last_index": 1}), [rand(3, 5)])
    _compare_traced(create_operator("CumProd", {"exclusive": 1}), [rand(3, 5)], {1: tf.constant(1)})
    _compare_traced(create_operator("CumSum", {"reverse": 1}), [rand(3, 5)], {1: tf.constant(-1)})
    # sequence_lens as a graph input (not known while tracing): the mask is computed in the graph
    _compare_traced(create_operator("LSTM", {"hidden_size": 3, "direction": "bidirectional"}),
                    [rand(4, 2, 2), rand(2, 12, 2), rand(2, 12, 3), rand(2, 24), tf.constant([4, 2], tf.int32)])
    _compare_traced(create_operator("GRU", {"hidden_size": 3, "layout": 1}),
                    [rand(2, 4, 2), rand(1, 9, 2), rand(1, 9, 3)])
    _compare_traced(create_operator("DFT", {"onesided": 1}), [rand(2, 8, 1)], {1: tf.constant(10), 2: tf.constant(1)})
    _compare_traced(create_operator("DFT", {"inverse": 1, "onesided": 1}), [rand(2, 5, 2)])
    _compare_traced(create_operator("STFT", {}), [rand(1, 16, 1)], {1: tf.constant(4), 2: rand(6)})
    _compare_traced(create_operator("HannWindow", {}), [], {0: tf.constant(8)})
    _compare_traced(create_operator("MelWeightMatrix", {}), [],
                    {0: tf.constant(4), 1: tf.constant(16), 2: tf.constant(8000), 3: tf.constant(0.0),
                     4: tf.constant(4000.0)})
    # nonpad_kv_seqlen and position_ids as graph inputs
    _compare_traced(create_operator("Attention", {"is_causal": 1}),
                    [rand(2, 3, 2, 4), rand(2, 3, 5, 4), rand(2, 3, 5, 4), tf.constant([3, 5], tf.int64)],
                    {3: None, 4: None, 5: None})
    _compare_traced(create_operator("RotaryEmbedding", {"interleaved": 1}),
                    [rand(1, 2, 3, 4), rand(6, 2), rand(6, 2), tf.constant([[0, 4, 5]], tf.int64)])


def test_recurrent_gradient_in_tf_function():
    # BPTT through the traced loop (unrolled and tf.scan) equals the eager tape's gradient.
    rng = np.random.default_rng(1)
    x, w, r = (tf.Variable(rng.uniform(-1, 1, s).astype(np.float32)) for s in ((6, 2, 3), (1, 8, 3), (1, 8, 2)))
    op = create_operator("LSTM", {"hidden_size": 2, "direction": "reverse"})

    def loss():
        with tf.GradientTape() as tape:
            y, y_h, y_c = op(x, w, r)
            total = tf.reduce_sum(y * y) + tf.reduce_sum(y_c)
        return tape.gradient(total, [x, w, r])

    eager = loss()
    for limit in (64, 1):
        recurrent.UNROLL_LIMIT = limit
        try:
            traced = tf.function(loss)()
        finally:
            recurrent.UNROLL_LIMIT = 64
        for a, b in zip(eager, traced):
            np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-5, atol=1e-6)


def test_attention_fully_masked_row_has_finite_gradient():
    rng = np.random.default_rng(2)
    q, k, v = (tf.Variable(rng.uniform(-1, 1, (1, 2, 3, 4)).astype(np.float32)) for _ in range(3))
    mask = np.ones((3, 3), bool)
    mask[0] = False
    op = create_operator("Attention", {})
    with tf.GradientTape() as tape:
        y = op(q, k, v, tf.constant(mask))[0]
    grads = tape.gradient(y, [q, k, v])
    assert np.all(y.numpy()[:, :, 0] == 0)
    assert all(np.all(np.isfinite(g.numpy())) for g in grads)


def test_attention_float16_and_bfloat16_compute_wider():
    rng = np.random.default_rng(3)
    q = rng.uniform(-1, 1, (1, 2, 3, 4)).astype(np.float32)
    expected = reference_op("Attention", {"is_causal": 1}).forward([q, q, q])[0]
    for dtype, tolerance in ((tf.float16, 2e-3), (tf.bfloat16, 3e-2)):
        t = tf.cast(tf.constant(q), dtype)
        y = create_operator("Attention", {"is_causal": 1})(t, t, t)[0]
        assert y.dtype == dtype
        np.testing.assert_allclose(tf.cast(y, tf.float32).numpy(), expected, atol=tolerance)
