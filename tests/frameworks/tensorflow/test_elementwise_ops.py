"""TensorFlow's elementwise and activation converters beyond the operator table: the ops and dtypes the table does
not cover (against the reference), the reference's gradients at kinks and ties, Dropout's seeded generator, the
converters inside ``tf.function``, PRelu's channels-last path, and the ``elementwise`` flag."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import tensorflow as tf

from _oracle import _ints, _rand, check_against_reference
from d5.errors import ShapeError
from d5.frameworks.reference.operators import create_operator as reference_op
from d5.frameworks.tensorflow.custom_op import native_op
from d5.frameworks.tensorflow.operators import create_operator
from d5.frameworks.tensorflow.tensors import as_tf_value, from_channels_last, to_channels_last

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

_EDGES = [-2.0, -1.0, 0.0, 1.0, 2.0]

CASES = [
    # ops and paths the shared table leaves out
    ("sin", "Sin", {}, [_rand(3, 4, low=-3, high=3)], {}),
    ("cos", "Cos", {}, [_rand(3, 4, low=-3, high=3)], {}),
    ("floor", "Floor", {}, [_rand(3, 4, low=-3, high=3)], {}),
    ("ceil", "Ceil", {}, [_rand(3, 4, low=-3, high=3)], {}),
    ("round_half_even", "Round", {}, [_ints([0.5, 1.5, 2.5, -0.5, -1.5, 0.4], np.float32)], {}),
    ("floor_int32", "Floor", {}, [_ints([-3, 0, 7], np.int32)], {}),
    ("sign", "Sign", {}, [_ints([-2.0, 0.0, 3.0], np.float32)], {}),
    ("sign_int8", "Sign", {}, [_ints([-128, 0, 5], np.int8)], {}),
    ("abs_int8_at_zero", "Abs", {}, [_ints([-7, 0, 5], np.int8)], {}),
    ("neg_uint8", "Neg", {}, [_ints([0, 1, 255], np.uint8)], {}),
    ("pow_int32", "Pow", {}, [_ints([2, -3, 5], np.int32), _ints([3, 2, 0], np.int64)], {}),
    ("pow_uint16", "Pow", {}, [_ints([2, 300, 5], np.uint16), _ints([3, 2, 7], np.uint16)], {}),
    ("pow_float_int_exponent", "Pow", {}, [_rand(2, 3, low=0.5, high=2), _ints([2, 3, 0])], {}),
    ("pow_edges", "Pow", {}, [_ints([0.0, 0.0, -2.0, 2.0], np.float32), _ints([0.0, 2.0, 2.0, 0.0], np.float32)],
     {}),
    ("div_int8_by_minus_one", "Div", {}, [_ints([-128, 7, -7], np.int8), _ints([-1, -1, 2], np.int8)], {}),
    ("mod_int16_fmod", "Mod", {"fmod": 1}, [_ints([-7, 7, -32768, 5], np.int16), _ints([2, -3, -1, 0], np.int16)],
     {}),
    ("mod_uint32_fmod", "Mod", {"fmod": 1}, [_ints([7, 2 ** 32 - 1, 5], np.uint32), _ints([2, 10, 0], np.uint32)],
     {}),
    ("mod_float16_fmod", "Mod", {"fmod": 1}, [_ints([-5.5, 5.5, 3.0], np.float16), _ints([2.0, -2.0, 1.5], np.float16)],
     {}),
    ("mod_float64", "Mod", {}, [lambda rng: rng.uniform(-5, 5, (2, 3)), lambda rng: rng.uniform(0.5, 2, (2, 1))], {}),
    ("less_or_equal", "LessOrEqual", {}, [_ints([1.0, 2.0, 3.0], np.float32), _ints([2.0, 2.0, 2.0], np.float32)], {}),
    ("greater_or_equal_int8", "GreaterOrEqual", {}, [_ints([-1, 2, 3], np.int8), _ints([2], np.int8)], {}),
    ("less_bool", "Less", {}, [_ints([False, True, False], bool), _ints([True, True, False], bool)], {}),
    ("xor", "Xor", {}, [_ints([[True, False]], bool), _ints([[True], [False]], bool)], {}),
    ("isnan", "IsNaN", {}, [_ints([1.0, np.nan, np.inf], np.float32)], {}),
    ("isnan_int", "IsNaN", {}, [_ints([1, 2], np.int32)], {}),
    ("isinf_int", "IsInf", {}, [_ints([1, 2], np.int32)], {}),
    ("where_int64", "Where", {}, [_ints([True, False], bool), _ints([[1, 2], [3, 4]]), _ints([9])], {}),
    ("where_scalar_branch", "Where", {}, [_ints([[True, False, True]], bool), _rand(2, 3), _ints(0.5, np.float32)],
     {}),
    ("cast_to_bool", "Cast", {"to": 9}, [_ints([0.0, -1.5, 2.0, np.nan], np.float32)], {}),
    ("cast_int_to_float", "Cast", {"to": 1}, [_ints([3, -2, 7])], {}),
    ("cast_same_type", "Cast", {"to": 1}, [_rand(2, 2)], {}),
    ("castlike", "CastLike", {}, [_rand(2, 3), _ints([0.0], np.float64)], {}),
    ("castlike_to_int", "CastLike", {}, [_rand(2, 3, low=-5, high=5), _ints([0], np.int32)], {}),
    ("bitcast_float16_to_uint16", "BitCast", {"to": 4}, [_ints([1.0, -2.0], np.float16)], {}),
    ("bitcast_uint8_to_bool", "BitCast", {"to": 9}, [_ints([0, 1], np.uint8)], {}),
    ("bitshift_right_int64", "BitShift", {"direction": "RIGHT"}, [_ints([-9, 9, -1]), _ints([1, 64, 63])], {}),
    ("bitwise_and_uint8_broadcast", "BitwiseAnd", {}, [_ints([[255], [15]], np.uint8), _ints([1, 2, 240], np.uint8)],
     {}),
    ("clip_at_bounds", "Clip", {}, [_ints(_EDGES, np.float32), _ints(-1.0, np.float32), _ints(1.0, np.float32)], {}),
    ("clip_inverted_bounds", "Clip", {}, [_rand(2, 3), _ints(0.5, np.float32), _ints(-0.5, np.float32)], {}),
    ("clip_min_only_int32", "Clip", {}, [_ints([-5, 0, 5], np.int32), _ints(-1, np.int32)], {}),
    ("clip_float64_1d_bound", "Clip", {}, [lambda rng: rng.uniform(-1, 1, 4), _ints([-0.2]), _ints([0.2])], {}),
    ("max_ties_three", "Max", {}, [_ints([1.0, 2.0], np.float32), _ints([1.0, 2.0], np.float32),
                                   _ints([[1.0], [0.0]], np.float32)], {}),
    ("min_ties_broadcast", "Min", {}, [_ints([[1.0, 3.0], [2.0, 0.0]], np.float32), _ints([1.0, 0.0], np.float32)],
     {}),
    ("max_int8", "Max", {}, [_ints([-128, 5], np.int8), _ints([3, 127], np.int8)], {}),
    ("max_bool", "Max", {}, [_ints([True, False, False], bool), _ints([False, False, True], bool)], {}),
    ("max_single", "Max", {}, [_rand(3)], {}),
    ("mean_single", "Mean", {}, [_rand(3)], {}),
    ("mean_three", "Mean", {}, [_rand(2, 3), _rand(3), _rand(2, 1)], {}),
    ("mean_int32", "Mean", {}, [_ints([7, -7, 3], np.int32), _ints([0, 0, 1], np.int32)], {}),
    ("sum_int8_wraps", "Sum", {}, [_ints([100, -100], np.int8), _ints([100, -100], np.int8)], {}),
    # activations the table does not list
    ("celu", "Celu", {"alpha": 0.7}, [_rand(3, 4, low=-3, high=3)], {}),
    ("celu_at_zero", "Celu", {}, [_ints(_EDGES, np.float32)], {}),
    ("mish", "Mish", {}, [_rand(3, 4, low=-4, high=4)], {}),
    ("softsign", "Softsign", {}, [_rand(3, 4, low=-4, high=4)], {}),
    ("thresholded_relu", "ThresholdedRelu", {"alpha": 0.3}, [_rand(3, 4)], {}),
    ("relu_at_zero", "Relu", {}, [_ints(_EDGES, np.float32)], {}),
    ("leaky_relu_at_zero", "LeakyRelu", {"alpha": 0.2}, [_ints(_EDGES, np.float32)], {}),
    ("elu_at_zero", "Elu", {}, [_ints(_EDGES, np.float32)], {}),
    ("selu_at_zero", "Selu", {}, [_ints(_EDGES, np.float32)], {}),
    ("hard_sigmoid_corners", "HardSigmoid", {"alpha": 0.5, "beta": 0.5}, [_ints([-1.0, 0.0, 1.0, 3.0], np.float32)],
     {}),
    ("hard_swish_corners", "HardSwish", {}, [_ints([-4.0, -3.0, 0.0, 3.0, 4.0], np.float32)], {}),
    ("prelu_at_zero", "PRelu", {}, [_ints(_EDGES, np.float32), _ints([0.25], np.float32)], {}),
    ("prelu_channel_1d", "PRelu", {}, [_rand(2, 3, 4, 5), _rand(3)], {}),
    ("prelu_float64_slope", "PRelu", {}, [_rand(2, 3), lambda rng: rng.uniform(0, 1, 3)], {}),
    ("shrink_int32_hard", "Shrink", {"lambd": 2.0}, [_ints([-3, -2, 0, 2, 3], np.int32)], {}),
    ("swish_float16", "Swish", {"alpha": 1.5}, [lambda rng: rng.uniform(-3, 3, 6).astype(np.float16)], {}),
    ("swiglu_float16", "SwiGLU", {}, [lambda rng: rng.uniform(-3, 3, 6).astype(np.float16),
                                      lambda rng: rng.uniform(-3, 3, 6).astype(np.float16)], {}),
    ("gelu_float64", "Gelu", {}, [lambda rng: rng.uniform(-3, 3, (2, 3))], {}),
    ("softmax_negative_axis", "Softmax", {"axis": -2}, [_rand(2, 3, 4, low=-3, high=3)], {}),
    ("softmax_v1_axis0", "Softmax", {"axis": 0}, [_rand(2, 3)], {"opset": 1}),
    ("softmax_empty", "Softmax", {}, [lambda rng: np.zeros((2, 0), np.float32)], {}),
    ("log_softmax_v11_axis2", "LogSoftmax", {"axis": 2}, [_rand(2, 3, 4, 2)], {"opset": 11}),
    ("hardmax_ties", "Hardmax", {"axis": 0}, [_ints([[1.0, 2.0], [1.0, 5.0]], np.float32)], {}),
    ("hardmax_v1_axis2", "Hardmax", {"axis": 2}, [_rand(2, 3, 4)], {"opset": 1}),
    ("hardmax_empty", "Hardmax", {}, [lambda rng: np.zeros((0, 3), np.float32)], {}),
    ("dropout_training_mode_off", "Dropout", {"seed": 3}, [_rand(3, 4), _ints(0.5, np.float32),
                                                           _ints(False, bool)], {"outputs": 2, "training": False}),
]


@pytest.mark.parametrize("case", [pytest.param(case, id=case[0]) for case in CASES])
def test_matches_reference(case):
    check_against_reference("tensorflow", case)


@pytest.mark.parametrize("op_type, attributes, arrays, error, match", [
    ("Where", {}, [np.ones(2, bool), np.ones(3, np.float32), np.ones(2, np.float32)], ShapeError, "not broadcastable"),
    ("PRelu", {}, [np.ones((2, 3), np.float32), np.ones(2, np.float32)], ShapeError, "not broadcastable"),
    ("BitShift", {"direction": "LEFT"}, [np.ones(3, np.int8), np.ones(2, np.int8)], ShapeError, "not broadcastable"),
    ("Xor", {}, [np.ones(2, bool), np.ones(2, np.int32)], ShapeError, "take bool tensors"),
    ("Dropout", {}, [np.ones(2, np.float32), np.float32(1.5)], ShapeError, "ratio must be in"),
    ("Softmax", {}, [np.ones(2, np.int32)], ShapeError, "floating-point"),
    ("Softmax", {"axis": 2}, [np.ones((2, 2), np.float32)], ShapeError, "out of range"),
    ("Sum", {}, [], ShapeError, "at least one input"),
])
def test_bad_inputs_raise(op_type, attributes, arrays, error, match):
    with pytest.raises(error, match=match):
        native_op(op_type, **attributes).forward(arrays)


# The oracle's gradient tolerance (rtol 1e-4) is finer than float16's resolution, and it cannot compare bfloat16
# arrays: the narrow floats' forward outputs against the reference here.
@pytest.mark.parametrize("op_type, attributes, makers", [
    ("Div", {}, [lambda rng: rng.uniform(-2, 2, (2, 3)).astype(np.float16),
                 lambda rng: rng.uniform(0.5, 2, 3).astype(np.float16)]),
    ("Softmax", {}, [lambda rng: rng.uniform(-3, 3, (2, 5)).astype(np.float16)]),
    ("LogSoftmax", {}, [lambda rng: rng.uniform(-3, 3, (2, 5)).astype(np.float16)]),
    ("Cast", {"to": 16}, [lambda rng: rng.standard_normal((3, 5)).astype(np.float32)]),
    ("Cast", {"to": 1}, [lambda rng: rng.standard_normal((3, 5)).astype(ml_dtypes.bfloat16)]),
    ("Relu", {}, [lambda rng: rng.standard_normal(6).astype(ml_dtypes.bfloat16)]),
    ("Swish", {}, [lambda rng: rng.standard_normal(6).astype(ml_dtypes.bfloat16)]),
])
def test_narrow_floats_forward(op_type, attributes, makers):
    rng = np.random.default_rng(0)
    arrays = [make(rng) for make in makers]
    expected = reference_op(op_type, attributes).forward([a.copy() for a in arrays])
    got = native_op(op_type, **attributes).forward(arrays)
    assert got.dtype == expected.dtype
    np.testing.assert_allclose(got.astype(np.float32), expected.astype(np.float32), rtol=1e-3, atol=1e-3)
    if op_type == "Cast":  # round to nearest even, bit for bit
        assert got.tobytes() == expected.tobytes()


# ------------------------------------------------------------------------------------------------ Dropout

def _dropout(seed=None, outputs=2, training=True):
    op = create_operator("Dropout", {} if seed is None else {"seed": seed})
    op.training, op.node_output_count = training, outputs
    return op


def test_dropout_masks_and_scales_the_kept_elements():
    data = tf.constant(np.arange(1, 401, dtype=np.float32).reshape(20, 20))
    output, mask = _dropout(seed=7)(data, tf.constant(0.25))
    output, mask = output.numpy(), mask.numpy()
    assert mask.dtype == bool and 0.6 < mask.mean() < 0.9
    np.testing.assert_allclose(output, np.where(mask, data.numpy() / 0.75, 0.0), rtol=1e-6)


def test_dropout_seed_reproduces_and_the_state_round_trips():
    data = tf.ones((8, 8))
    first, second = _dropout(seed=11), _dropout(seed=11)
    state = first.random_state()
    mask_a = first(data, tf.constant(0.5))[1].numpy()
    assert np.array_equal(mask_a, second(data, tf.constant(0.5))[1].numpy())  # same seed, same stream
    mask_b = first(data, tf.constant(0.5))[1].numpy()
    assert not np.array_equal(mask_a, mask_b)  # the generator advanced
    first.set_random_state(state)
    assert np.array_equal(mask_a, first(data, tf.constant(0.5))[1].numpy())
    second.reset_rng()
    assert np.array_equal(mask_a, second(data, tf.constant(0.5))[1].numpy())


def test_unseeded_dropouts_draw_different_streams():
    data = tf.ones((16, 16))
    masks = [_dropout()(data, tf.constant(0.5))[1].numpy() for _ in range(2)]
    assert not np.array_equal(*masks)


def test_dropout_ratio_one_drops_everything_and_the_gradient_follows_the_mask():
    data = tf.Variable(np.ones((4, 4), np.float32))
    op = _dropout(seed=1)
    with tf.GradientTape() as tape:
        output, mask = op(data, tf.constant(1.0))
    assert not mask.numpy().any() and not output.numpy().any()
    assert not tape.gradient(output, data).numpy().any()
    with tf.GradientTape() as tape:
        output, mask = op(data, tf.constant(0.5))
    np.testing.assert_allclose(tape.gradient(output, data).numpy(), mask.numpy() * 2.0)


def test_dropout_training_mode_and_ratio_computed_in_the_graph():
    op = _dropout(seed=5, training=False)
    data = tf.ones((6, 6))

    @tf.function
    def run(ratio, mode):
        return op(data, ratio, mode)

    output, mask = run(tf.constant(0.5), tf.constant(False))
    assert mask.numpy().all() and np.array_equal(output.numpy(), data.numpy())
    output, mask = run(tf.constant(0.5), tf.constant(True))
    assert not mask.numpy().all()
    np.testing.assert_allclose(output.numpy(), mask.numpy() * 2.0)


def test_dropout_in_a_traced_function_advances_its_generator():
    op = _dropout(seed=2, outputs=1)
    run = tf.function(lambda x: op(x, tf.constant(0.5)))
    data = tf.ones((10, 10))
    assert not np.array_equal(run(data).numpy(), run(data).numpy())


# ------------------------------------------------------------------------------------------ tf.function

TRACED = [
    ("Add", {}, [_rand(2, 3, 4), _rand(4)]),
    ("Div", {}, [_ints([7, -7, 5], np.int32), _ints([2, 0, -1], np.int32)]),
    ("Mod", {"fmod": 1}, [_rand(3, 4, low=-5, high=5), _rand(4, low=0.5, high=2)]),
    ("Mod", {}, [_ints([-7, 7, 5], np.int8), _ints([3, 0, -1], np.int8)]),
    ("Pow", {}, [_rand(2, 3, low=0.5, high=2), _rand(3)]),
    ("Max", {}, [_rand(2, 3), _rand(3), _rand(2, 1)]),
    ("Mean", {}, [_rand(2, 3), _rand(3)]),
    ("Clip", {}, [_rand(3, 4), _ints(-0.5, np.float32), _ints(0.4, np.float32)]),
    ("Where", {}, [_ints([[True, False, True]], bool), _rand(2, 3), _rand(3)]),
    ("IsInf", {"detect_negative": 0}, [_ints([np.inf, -np.inf, 1.0], np.float32)]),
    ("BitShift", {"direction": "RIGHT"}, [_ints([-16, 16, 5], np.int8), _ints([2, 9, -1], np.int8)]),
    ("BitCast", {"to": 6}, [_rand(2, 3)]),
    ("Cast", {"to": 7}, [_rand(2, 3, low=-5, high=5)]),
    ("PRelu", {}, [_rand(2, 3, 4), _rand(3, 1)]),
    ("Shrink", {"bias": 1.5, "lambd": 1.0}, [_ints([-5, -1, 0, 1, 2, 5], np.int8)]),
    ("SwiGLU", {}, [_rand(2, 4), _rand(2, 4)]),
    ("Gelu", {"approximate": "tanh"}, [_rand(3, 4)]),
    ("Softmax", {}, [_rand(2, 3, 4)]),
    ("LogSoftmax", {"axis": 2}, [_rand(2, 3, 4, 2)]),
    ("Hardmax", {}, [_rand(2, 3, 4)]),
    ("Dropout", {}, [_rand(3, 4), _ints(0.5, np.float32)]),
]


@pytest.mark.parametrize("op_type, attributes, makers", [pytest.param(*row, id=f"{row[0]}-{i}")
                                                          for i, row in enumerate(TRACED)])
def test_traced_function_matches_eager(op_type, attributes, makers):
    opset = 11 if op_type == "LogSoftmax" else None
    op = create_operator(op_type, attributes, opset)
    rng = np.random.default_rng(0)
    inputs = [as_tf_value(make(rng)) for make in makers]
    eager = op(*inputs)
    traced = tf.function(lambda *xs: op(*xs))(*inputs)
    np.testing.assert_allclose(np.asarray(traced.numpy(), np.float64), np.asarray(eager.numpy(), np.float64),
                               rtol=1e-6)


def test_custom_gradients_inside_a_traced_function():
    # Max's shared ties and Pow's reference gradient are tf.custom_gradient: they must trace too.
    a, b = tf.Variable([1.0, 2.0, 3.0]), tf.Variable([1.0, 0.5, 4.0])
    base, exponent = tf.Variable([0.0, 2.0]), tf.Variable([0.0, 3.0])
    maximum, power = create_operator("Max", {}), create_operator("Pow", {})

    @tf.function
    def grads():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(maximum(a, b)) + tf.reduce_sum(power(base, exponent))
        return tape.gradient(loss, [a, b, base, exponent])

    grad_a, grad_b, grad_base, grad_exponent = (g.numpy() for g in grads())
    np.testing.assert_allclose(grad_a, [0.5, 1.0, 0.0])
    np.testing.assert_allclose(grad_b, [0.5, 0.0, 1.0])
    np.testing.assert_allclose(grad_base, [0.0, 12.0])
    np.testing.assert_allclose(grad_exponent, [0.0, 8.0 * np.log(2.0)], rtol=1e-6)


# ------------------------------------------------------------------------------------------ layouts, flags

@pytest.mark.parametrize("slope_shape", [(3,), (3, 1, 1), (5,), (1,), (2, 3, 4, 5)])
def test_prelu_channels_last_matches_the_onnx_layout(slope_shape):
    rng = np.random.default_rng(1)
    x = tf.constant(rng.uniform(-1, 1, (2, 3, 4, 5)).astype(np.float32))
    slope = tf.constant(rng.uniform(0, 1, slope_shape).astype(np.float32))
    op = create_operator("PRelu", {})
    assert op.takes_channels_last([4, len(slope_shape)])
    expected = reference_op("PRelu", {}).forward([x.numpy(), slope.numpy()])
    np.testing.assert_allclose(op(x, slope).numpy(), expected, rtol=1e-6)
    np.testing.assert_allclose(from_channels_last(op.channels_last(to_channels_last(x), slope)).numpy(), expected,
                               rtol=1e-6)


ELEMENTWISE = ["Add", "Sub", "Mul", "Div", "Pow", "Mod", "Neg", "Abs", "Exp", "Log", "Sqrt", "Reciprocal", "Erf",
               "Floor", "Ceil", "Round", "Sign", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh",
               "Acosh", "Atanh", "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "Not", "And", "Or",
               "Xor", "IsNaN", "IsInf", "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot", "BitCast",
               "Where", "Cast", "CastLike", "Clip", "Max", "Min", "Sum", "Mean", "Relu", "Sigmoid", "Tanh",
               "LeakyRelu", "Elu", "Selu", "Celu", "Gelu", "HardSigmoid", "HardSwish", "Mish", "Softplus", "Softsign",
               "ThresholdedRelu", "Shrink", "Swish", "SwiGLU", "Dropout"]
REQUIRED = {"BitShift": {"direction": "LEFT"}, "BitCast": {"to": 1}, "Cast": {"to": 1}}


@pytest.mark.parametrize("op_type", ELEMENTWISE)
def test_elementwise_flag(op_type):
    assert create_operator(op_type, REQUIRED.get(op_type, {})).elementwise


@pytest.mark.parametrize("op_type, opset", [(op, opset) for op in ("Softmax", "LogSoftmax", "Hardmax")
                                            for opset in (11, 13)] + [("PRelu", None)])
def test_not_elementwise(op_type, opset):
    assert not create_operator(op_type, {}, opset).elementwise
