"""TensorFlow's convolution, pooling, normalization, linear-algebra and loss converters beyond the shared operator
tables: the paths the tables do not reach (dilations with and without strides, grouped 3-D convolutions, float64
and 3-D pooling through the taps, indices with dilations, ...) against the reference (the oracle); each spatial
converter's channels-last computation against its ONNX-layout one, forward and gradient; BatchNormalization's
running statistics assigned to tf.Variables; everything traced inside ``tf.function`` against eager execution; and
DeformConv, which the reference lacks, against ONNX's own reference implementation."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from _oracle import _distinct, _ints, _labels, _rand, check_against_reference

from d5.errors import ShapeError, UnsupportedOperatorError
from d5.frameworks.reference.operators import create_operator as reference_op
from d5.frameworks.tensorflow.operators import create_operator
from d5.frameworks.tensorflow.tensors import from_channels_last, to_channels_last


def _f64(*shape):
    return lambda rng: rng.uniform(-1, 1, shape)


def _distinct64(*shape):
    return lambda rng: _distinct(*shape)(rng).astype(np.float64)


# -- more cases against the reference --------------------------------------------------------------------------

# (id, op_type, attributes, [input makers], options): see _oracle.py
CASES = [
    ("conv_dilated_stride1_space_to_batch", "Conv", {"dilations": [2, 3], "pads": [2, 1, 1, 2]},
     [_rand(2, 3, 7, 8), _rand(4, 3, 3, 2), _rand(4)], {}),
    ("conv_dilated_strided_kernel", "Conv", {"dilations": [2, 2], "strides": [2, 3], "pads": [1, 1, 1, 1]},
     [_rand(1, 2, 9, 9), _rand(3, 2, 3, 3)], {}),
    ("conv_1d_dilated_strided", "Conv", {"dilations": [2], "strides": [2], "pads": [1, 2]},
     [_rand(2, 3, 11), _rand(4, 3, 3), _rand(4)], {}),
    ("conv_3d_grouped_dilated", "Conv", {"group": 2, "dilations": [1, 2, 1]},
     [_rand(1, 4, 3, 6, 4), _rand(6, 2, 2, 2, 2), _rand(6)], {}),
    ("conv_depthwise_multiplier_strided", "Conv", {"group": 3, "strides": [2, 1], "pads": [1, 0, 1, 2]},
     [_rand(1, 3, 6, 5), _rand(6, 1, 3, 3), _rand(6)], {}),
    ("conv_depthwise_dilated", "Conv", {"group": 2, "dilations": [2, 2], "pads": [2, 2, 2, 2]},
     [_rand(2, 2, 5, 5), _rand(2, 1, 3, 3)], {}),
    ("conv_1d_depthwise", "Conv", {"group": 2, "auto_pad": "SAME_LOWER"}, [_rand(1, 2, 6), _rand(4, 1, 2)], {}),
    ("conv_same_upper_stride3_clamped", "Conv", {"auto_pad": "SAME_UPPER", "strides": [3, 3]},
     [_rand(1, 2, 7, 5), _rand(2, 2, 1, 1)], {}),
    ("conv_1x1_stride2_even_size", "Conv", {"strides": [2, 2]}, [_rand(2, 3, 6, 6), _rand(4, 3, 1, 1)], {}),
    ("conv_valid_float64", "Conv", {"auto_pad": "VALID", "strides": [1, 2]}, [_f64(2, 2, 5, 6), _f64(3, 2, 2, 3),
                                                                               _f64(3)], {}),
    ("conv_3d_float64_grouped", "Conv", {"group": 2, "strides": [1, 2, 1]},
     [_f64(1, 2, 3, 4, 3), _f64(2, 1, 2, 2, 2)], {}),
    ("conv_transpose_dilated_grouped", "ConvTranspose", {"group": 2, "dilations": [2, 1], "strides": [1, 2],
                                                         "pads": [1, 0, 0, 1]},
     [_rand(1, 4, 3, 3), _rand(4, 3, 2, 3), _rand(6)], {}),
    ("conv_transpose_3d", "ConvTranspose", {"strides": [2, 1, 2], "output_padding": [1, 0, 0]},
     [_rand(1, 2, 2, 3, 2), _rand(2, 3, 2, 2, 2)], {}),
    ("conv_transpose_same_upper_f64", "ConvTranspose", {"auto_pad": "SAME_UPPER", "strides": [2, 2]},
     [_f64(1, 2, 3, 3), _f64(2, 2, 3, 3)], {}),
    ("maxpool_3d_float64_taps", "MaxPool",
     {"kernel_shape": [2, 2, 2], "strides": [1, 2, 1], "pads": [1, 0, 0, 0, 1, 1]},
     [_distinct64(1, 2, 3, 4, 3)], {"outputs": 2}),
    ("maxpool_2d_dilated_indices_colmajor", "MaxPool",
     {"kernel_shape": [2, 2], "dilations": [2, 2], "pads": [1, 1, 0, 0], "storage_order": 1},
     [_distinct(2, 2, 5, 5)], {"outputs": 2}),
    ("maxpool_3d_indices", "MaxPool", {"kernel_shape": [2, 1, 2], "strides": [2, 1, 2], "ceil_mode": 1},
     [_distinct(1, 2, 3, 2, 5)], {"outputs": 2}),
    ("maxpool_uint8", "MaxPool", {"kernel_shape": [3], "strides": [2], "pads": [1, 1]},
     [lambda rng: rng.integers(0, 255, (1, 2, 7)).astype(np.uint8)], {}),
    ("maxpool_negative_same_pads", "MaxPool", {"kernel_shape": [1, 2], "strides": [3, 3], "auto_pad": "SAME_UPPER"},
     [_distinct(1, 1, 5, 7)], {"outputs": 2}),
    ("maxpool_same_upper_native", "MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER"},
     [_distinct(2, 2, 6, 7)], {}),
    ("maxpool_pads_as_tf_same", "MaxPool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, [_distinct(1, 2, 5, 4)], {}),
    ("avgpool_pads_as_tf_same_include_pad", "AveragePool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1],
                                                            "count_include_pad": 1}, [_rand(1, 2, 5, 4)], {}),
    ("avgpool_1d_exclude_pad", "AveragePool", {"kernel_shape": [3], "strides": [2], "pads": [2, 1]},
     [_rand(2, 3, 8)], {}),
    ("avgpool_2d_dilated_ceil_include_pad", "AveragePool",
     {"kernel_shape": [2, 3], "dilations": [2, 1], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1,
      "count_include_pad": 1}, [_rand(1, 2, 6, 7)], {}),
    ("avgpool_3d_float64_taps", "AveragePool", {"kernel_shape": [2, 2, 2], "pads": [1, 1, 1, 0, 0, 0]},
     [_f64(1, 2, 3, 3, 3)], {}),
    ("avgpool_same_upper_float64", "AveragePool", {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER"},
     [_f64(1, 1, 5, 6)], {}),
    ("global_avgpool_1d", "GlobalAveragePool", {}, [_rand(2, 3, 5)], {}),
    ("global_maxpool_3d", "GlobalMaxPool", {}, [_distinct(1, 2, 2, 3, 2)], {}),
    ("global_maxpool_ties_first", "GlobalMaxPool", {}, [_ints([[[[1.0, 4.0], [4.0, 2.0]]]], np.float32)], {}),
    ("batchnorm_inference_3d", "BatchNormalization", {},
     [_rand(2, 3, 2, 2, 2), _rand(3), _rand(3), _rand(3), _rand(3, low=0.5, high=1.5)], {}),
    ("batchnorm_training_4d_outputs", "BatchNormalization", {"momentum": 0.7, "epsilon": 1e-3},
     [_rand(4, 3, 2, 3), _rand(3), _rand(3), _rand(3), _rand(3, low=0.5, high=1.5)], {"training": True, "outputs": 3}),
    ("batchnorm_training_2d", "BatchNormalization", {}, [_rand(6, 4), _rand(4), _rand(4), _rand(4),
                                                         _rand(4, low=0.5, high=1.5)], {"training": True}),
    ("batchnorm_float64", "BatchNormalization", {"training_mode": 1},
     [_f64(3, 2, 4), _f64(2), _f64(2), _f64(2), lambda rng: rng.uniform(0.5, 1.5, 2)], {}),
    ("instance_norm_3d", "InstanceNormalization", {}, [_rand(2, 3, 2, 3, 2), _rand(3), _rand(3)], {}),
    ("group_norm_4d_per_channel", "GroupNormalization", {"num_groups": 3, "epsilon": 1e-3},
     [_rand(2, 6, 3, 2), _rand(6), _rand(6)], {}),
    ("group_norm_stash64", "GroupNormalization", {"num_groups": 1, "stash_type": 11},
     [_rand(2, 2, 5), _rand(2), _rand(2)], {}),
    ("layer_norm_stats_float64", "LayerNormalization", {"axis": -2}, [_f64(2, 3, 4), _f64(3, 4)], {"outputs": 3}),
    ("gemm_broadcast_scalar_c", "Gemm", {"beta": 0.5, "transA": 1}, [_rand(4, 3), _rand(4, 2), _rand(1)], {}),
    ("matmul_both_vectors", "MatMul", {}, [_rand(4), _rand(4)], {}),
    ("matmul_broadcast_batches", "MatMul", {}, [_rand(2, 1, 3, 4), _rand(3, 4, 2)], {}),
    ("matmul_int32", "MatMul", {}, [_ints(np.arange(6).reshape(2, 3), np.int32),
                                    _ints(np.arange(6).reshape(3, 2), np.int32)], {}),
    ("einsum_int8_wraps", "Einsum", {"equation": "i,i->"}, [_ints([100, 3], np.int8), _ints([2, 5], np.int8)], {}),
    ("det_int", "Det", {}, [_ints([[2, 1], [1, 3]], np.int64)], {}),
    ("softmax_xent_mean_3d", "SoftmaxCrossEntropyLoss", {}, [_rand(3, 4, 2), _labels(3, 4, 2)], {}),
    ("softmax_xent_none_ignore", "SoftmaxCrossEntropyLoss", {"reduction": "none", "ignore_index": 0},
     [_rand(5, 3), _ints([0, 1, 2, 0, 1])], {}),
    ("nll_sum_ignore_3d", "NegativeLogLikelihoodLoss", {"reduction": "sum", "ignore_index": 2},
     [_rand(2, 3, 4), _labels(2, 3, 4)], {}),
    ("mse_float64_target", "MeanSquaredError", {}, [_rand(3, 2), _f64(3, 2)], {}),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_matches_reference(case):
    check_against_reference("tensorflow", case)


# -- channels-last against ONNX layout, forward and gradient -----------------------------------------------------

def _arrays(makers, seed=0):
    rng = np.random.default_rng(seed)
    return [make(rng) for make in makers]


LAYOUT_CASES = [
    ("Conv", {"pads": [1, 2, 0, 1], "strides": [2, 1]}, [_rand(2, 3, 6, 7), _rand(4, 3, 3, 2), _rand(4)]),
    ("Conv", {"dilations": [2, 1], "strides": [1, 2], "group": 2}, [_rand(1, 4, 7, 6), _rand(6, 2, 2, 3)]),
    ("Conv", {"dilations": [2, 2]}, [_rand(1, 2, 7, 6), _rand(3, 2, 2, 2), _rand(3)]),
    ("Conv", {"group": 4, "pads": [1, 1, 1, 1]}, [_rand(2, 4, 5, 5), _rand(8, 1, 3, 3)]),
    ("Conv", {"auto_pad": "SAME_UPPER", "strides": [2]}, [_rand(2, 3, 9), _rand(2, 3, 4), _rand(2)]),
    ("Conv", {"auto_pad": "SAME_LOWER", "group": 3}, [_rand(1, 3, 3, 4, 3), _rand(3, 1, 2, 2, 2)]),
    ("ConvTranspose", {"strides": [2, 2], "output_padding": [1, 0]}, [_rand(1, 2, 3, 3), _rand(2, 3, 3, 3)]),
    ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1},
     [_distinct(2, 3, 6, 7)]),
    ("MaxPool", {"kernel_shape": [2, 2], "dilations": [1, 2]}, [_distinct(1, 2, 5, 6)]),
    ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER"}, [_distinct(2, 2, 6, 7)]),
    ("AveragePool", {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER"}, [_rand(2, 2, 6, 7)]),
    ("MaxPool", {"kernel_shape": [2], "strides": [2]}, [_distinct(2, 3, 7)]),
    ("AveragePool", {"kernel_shape": [3, 2], "strides": [2, 1], "pads": [1, 0, 1, 1], "count_include_pad": 1,
                     "ceil_mode": 1}, [_rand(2, 3, 6, 5)]),
    ("AveragePool", {"kernel_shape": [2, 3], "pads": [0, 1, 1, 1]}, [_rand(1, 2, 5, 5)]),
    ("AveragePool", {"kernel_shape": [2, 2, 2], "strides": [2, 1, 2]}, [_rand(1, 2, 4, 3, 4)]),
    ("LpPool", {"kernel_shape": [2, 2], "p": 3, "pads": [1, 1, 0, 0]}, [_rand(1, 2, 4, 5)]),
    ("GlobalAveragePool", {}, [_rand(2, 3, 4, 5)]),
    ("GlobalMaxPool", {}, [_distinct(2, 3, 4, 5)]),
    ("BatchNormalization", {"epsilon": 1e-3}, [_rand(3, 4, 2, 3), _rand(4), _rand(4), _rand(4),
                                               _rand(4, low=0.5, high=1.5)]),
    ("BatchNormalization", {"momentum": 0.5, "training": True},
     [_rand(3, 4, 2, 3), _rand(4), _rand(4), _rand(4), _rand(4, low=0.5, high=1.5)]),
    ("BatchNormalization", {"training_mode": 1}, [_rand(2, 3, 2, 2, 3), _rand(3), _rand(3), _rand(3),
                                                  _rand(3, low=0.5, high=1.5)]),
    ("InstanceNormalization", {}, [_rand(2, 3, 4, 2), _rand(3), _rand(3)]),
    ("GroupNormalization", {"num_groups": 2}, [_rand(2, 4, 3, 2), _rand(4), _rand(4)]),
]


def _layout_id(case):
    op_type, attributes, _ = case
    return f"{op_type}-" + "-".join(f"{k}{v}" for k, v in attributes.items()).replace(" ", "")


@pytest.mark.parametrize("case", LAYOUT_CASES, ids=[_layout_id(c) for c in LAYOUT_CASES])
def test_channels_last_matches_onnx_layout(case):
    """``channels_last(channels-last X)`` is the channels-last transpose of ``__call__(X)``, and so are the
    gradients of X; the other inputs' gradients are equal ("training": a training pass)."""
    op_type, attributes, makers = case
    attributes = dict(attributes)
    training = attributes.pop("training", False)
    arrays = _arrays(makers)
    op = create_operator(op_type, attributes)
    op.training = training
    assert op.takes_channels_last([a.ndim for a in arrays])

    def run(channels_last: bool):
        values = [tf.constant(a) for a in arrays]
        with tf.GradientTape() as tape:
            tape.watch(values)
            if channels_last:
                y = op.channels_last(to_channels_last(values[0]), *values[1:])
                y = from_channels_last(y)
            else:
                y = op(*values)
            cotangent = tf.constant(np.random.default_rng(7).standard_normal(y.shape.as_list()), y.dtype)
            loss = tf.reduce_sum(y * cotangent)
        return y, tape.gradient(loss, values)

    y_first, grads_first = run(False)
    y_last, grads_last = run(True)
    np.testing.assert_allclose(y_last.numpy(), y_first.numpy(), rtol=1e-5, atol=1e-6)
    for index, (a, b) in enumerate(zip(grads_last, grads_first)):
        if b is None:  # BatchNormalization's running statistics in training: no gradient either way
            assert a is None, f"gradient of input {index}"
            continue
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6, err_msg=f"gradient of input {index}")


def test_maxpool_indices_channels_last():
    x = _arrays([_distinct(2, 3, 5, 6)])[0]
    op = create_operator("MaxPool", {"kernel_shape": [2, 3], "strides": [2, 2], "pads": [1, 1, 0, 1]})
    op.node_output_count = 2
    y, indices = op(tf.constant(x))
    y_last, indices_last = op.channels_last(to_channels_last(tf.constant(x)))
    np.testing.assert_array_equal(from_channels_last(y_last).numpy(), y.numpy())
    np.testing.assert_array_equal(from_channels_last(indices_last).numpy(), indices.numpy())
    np.testing.assert_array_equal(x.reshape(-1)[indices.numpy()], y.numpy())  # ONNX-layout flat indices


# -- BatchNormalization's running statistics ---------------------------------------------------------------------

@pytest.mark.parametrize("outputs", [1, 3])
@pytest.mark.parametrize("layout", ["onnx", "channels_last"])
def test_batchnorm_training_assigns_running_statistics(outputs, layout):
    """In training, the tf.Variable running statistics get the reference's update (ONNX momentum, population
    variance), eagerly and inside tf.function; the 3-output form returns the same values."""
    x, scale, bias, mean, var = _arrays([_rand(4, 3, 5, 2), _rand(3), _rand(3), _rand(3),
                                         _rand(3, low=0.5, high=1.5)])
    attributes = {"momentum": 0.8, "epsilon": 1e-4}
    reference = reference_op("BatchNormalization", attributes)
    reference.training = True
    expected_y, expected_mean, expected_var = reference.forward([x, scale, bias, mean.copy(), var.copy()])
    for traced in (False, True):
        op = create_operator("BatchNormalization", attributes)
        op.training, op.node_output_count = True, outputs
        running_mean, running_var = tf.Variable(mean), tf.Variable(var)

        def call(x_value):
            if layout == "onnx":
                return op(x_value, tf.constant(scale), tf.constant(bias), running_mean, running_var)
            result = op.channels_last(to_channels_last(x_value), tf.constant(scale), tf.constant(bias),
                                      running_mean, running_var)
            if isinstance(result, tuple):
                return (from_channels_last(result[0]), *result[1:])
            return from_channels_last(result)

        result = (tf.function(call) if traced else call)(tf.constant(x))
        y = result[0] if outputs == 3 else result
        np.testing.assert_allclose(y.numpy(), expected_y, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(running_mean.numpy(), expected_mean, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(running_var.numpy(), expected_var, rtol=1e-5, atol=1e-6)
        if outputs == 3:
            np.testing.assert_allclose(result[1].numpy(), expected_mean, rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(result[2].numpy(), expected_var, rtol=1e-5, atol=1e-6)


def test_batchnorm_inference_leaves_statistics():
    x, scale, bias, mean, var = _arrays([_rand(2, 3, 4), _rand(3), _rand(3), _rand(3), _rand(3, low=0.5, high=1.5)])
    running_mean, running_var = tf.Variable(mean), tf.Variable(var)
    create_operator("BatchNormalization", {})(tf.constant(x), tf.constant(scale), tf.constant(bias), running_mean,
                                              running_var)
    np.testing.assert_array_equal(running_mean.numpy(), mean)
    np.testing.assert_array_equal(running_var.numpy(), var)


# -- tf.function -------------------------------------------------------------------------------------------------

TRACE_CASES = [
    ("Conv", {"pads": [1, 1, 1, 1], "group": 2}, [_rand(2, 4, 5, 5), _rand(4, 2, 3, 3), _rand(4)], {}),
    ("Conv", {"dilations": [2, 2], "strides": [2, 1]}, [_rand(1, 2, 7, 7), _rand(2, 2, 2, 2)], {}),
    ("Conv", {"dilations": [2]}, [_rand(1, 2, 9), _rand(2, 2, 3)], {}),
    ("ConvTranspose", {"strides": [2], "group": 2}, [_rand(1, 4, 5), _rand(4, 1, 3)], {}),
    ("Col2Im", {}, [_rand(1, 8, 9), _ints([4, 4]), _ints([2, 2])], {}),
    ("MaxPool", {"kernel_shape": [2, 2], "pads": [1, 1, 1, 1], "strides": [2, 2]}, [_distinct(1, 2, 5, 5)],
     {"outputs": 2}),
    ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2]}, [_distinct(2, 2, 7, 7)], {}),
    ("AveragePool", {"kernel_shape": [3], "pads": [1, 1], "dilations": [2]}, [_rand(2, 3, 8)], {}),
    ("LpPool", {"kernel_shape": [2, 2]}, [_rand(1, 2, 4, 4)], {}),
    ("MaxUnpool", {"kernel_shape": [2], "strides": [2]}, [_rand(1, 1, 2), _ints([[[1, 2]]])], {}),
    ("GlobalAveragePool", {}, [_rand(2, 3, 4)], {}),
    ("GlobalMaxPool", {}, [_distinct(2, 3, 4, 4)], {}),
    ("BatchNormalization", {}, [_rand(2, 3, 4), _rand(3), _rand(3), _rand(3), _rand(3, low=0.5, high=1.5)], {}),
    ("InstanceNormalization", {}, [_rand(2, 3, 4), _rand(3), _rand(3)], {}),
    ("LayerNormalization", {}, [_rand(2, 3, 4), _rand(4), _rand(4)], {"outputs": 3}),
    ("GroupNormalization", {"num_groups": 2}, [_rand(2, 4, 3), _rand(4), _rand(4)], {}),
    ("RMSNormalization", {}, [_rand(2, 3), _rand(3)], {}),
    ("LpNormalization", {}, [_rand(2, 3)], {}),
    ("LRN", {"size": 3}, [_rand(2, 4, 3)], {}),
    ("MeanVarianceNormalization", {}, [_rand(2, 3, 4, 2)], {}),
    ("Gemm", {"transB": 1}, [_rand(3, 4), _rand(5, 4), _rand(5)], {}),
    ("MatMul", {}, [_rand(2, 3, 4), _rand(4, 2)], {}),
    ("Einsum", {"equation": "ij,jk->ik"}, [_rand(2, 3), _rand(3, 2)], {}),
    ("Det", {}, [_rand(2, 3, 3)], {}),
    ("SoftmaxCrossEntropyLoss", {}, [_rand(4, 3), _labels(4, 3)], {"outputs": 2}),
    ("SoftmaxCrossEntropyLoss", {"ignore_index": 1}, [_rand(4, 3), _labels(4, 3), _rand(3)], {}),
    ("NegativeLogLikelihoodLoss", {"reduction": "none"}, [_rand(4, 3, 2), _labels(4, 3, 2)], {}),
    ("MeanSquaredError", {}, [_rand(4, 3), _rand(3)], {}),
]


@pytest.mark.parametrize("case", TRACE_CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(TRACE_CASES)])
def test_traces_in_tf_function(case):
    """Traced once on tensors of static shapes (shape-like inputs as constants), the converter computes what it
    does eagerly; so do its gradients, and its channels-last computation where it has one."""
    op_type, attributes, makers, options = case
    arrays = _arrays(makers)
    op = create_operator(op_type, attributes)
    op.node_output_count = options.get("outputs")
    floating = [i for i, a in enumerate(arrays) if a.dtype.kind == "f"]
    shape_like = {i: tf.constant(a) for i, a in enumerate(arrays) if a.dtype.kind != "f"}

    def run(*float_values):
        values = [shape_like.get(i) for i in range(len(arrays))]
        for i, v in zip(floating, float_values):
            values[i] = v
        with tf.GradientTape() as tape:
            tape.watch(float_values)
            outputs = op(*values)
            outputs = outputs if isinstance(outputs, tuple) else (outputs,)
            loss = tf.add_n([tf.reduce_sum(o * o) for o in outputs if o.dtype.is_floating])
        return outputs, tape.gradient(loss, list(float_values))

    inputs = [tf.constant(arrays[i]) for i in floating]
    eager_outputs, eager_grads = run(*inputs)
    traced = tf.function(run)
    traced_outputs, traced_grads = traced(*inputs)
    assert len(traced.get_concrete_function(*inputs).graph.get_operations()) > 0
    for a, b in zip(traced_outputs, eager_outputs):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)
    for a, b in zip(traced_grads, eager_grads):
        if b is None:
            assert a is None
        else:
            np.testing.assert_allclose(tf.convert_to_tensor(a).numpy(), tf.convert_to_tensor(b).numpy(),
                                       rtol=1e-5, atol=1e-6)
    if op.channels_last_inputs and op.takes_channels_last([a.ndim for a in arrays]) and arrays[0].ndim >= 3:
        traced_last = tf.function(lambda x, *rest: op.channels_last(x, *rest))
        outputs = traced_last(to_channels_last(tf.constant(arrays[0])), *[tf.constant(a) for a in arrays[1:]])
        outputs = outputs if isinstance(outputs, tuple) else (outputs,)
        for index in [i for i in op.channels_last_outputs if i < len(outputs)]:
            np.testing.assert_allclose(from_channels_last(outputs[index]).numpy(), eager_outputs[index].numpy(),
                                       rtol=1e-5, atol=1e-6)


# -- errors ------------------------------------------------------------------------------------------------------

def test_conv_bad_inputs():
    x = tf.zeros([1, 4, 5, 5])
    with pytest.raises(ShapeError, match="channels"):
        create_operator("Conv", {"group": 3})(x, tf.zeros([3, 1, 2, 2]))
    with pytest.raises(ShapeError, match="kernel_shape"):
        create_operator("Conv", {"kernel_shape": [3, 3]})(x, tf.zeros([2, 4, 2, 2]))
    with pytest.raises(UnsupportedOperatorError, match="3-D to 5-D"):
        create_operator("Conv", {})(tf.zeros([1, 1, 2, 2, 2, 2]), tf.zeros([1, 1, 1, 1, 1, 1]))
    with pytest.raises(ShapeError, match="channels"):
        create_operator("ConvTranspose", {})(x, tf.zeros([3, 1, 2, 2]))


def test_pool_bad_rank_raises_shape_error():
    with pytest.raises(ShapeError, match="spatial axes"):
        create_operator("MaxPool", {"kernel_shape": [2, 2]})(tf.zeros([1, 2, 4]))
    with pytest.raises(ShapeError, match="spatial"):
        create_operator("GlobalMaxPool", {})(tf.zeros([2, 3]))


def test_loss_label_out_of_range_raises_shape_error():
    with pytest.raises(ShapeError, match="out of range"):
        create_operator("SoftmaxCrossEntropyLoss", {})(tf.zeros([2, 3]), tf.constant([0, 3], tf.int64))
    with pytest.raises(ShapeError, match="out of range"):
        create_operator("NegativeLogLikelihoodLoss", {"ignore_index": 5})(tf.zeros([2, 3]),
                                                                           tf.constant([5, -1], tf.int64))


# -- DeformConv against onnx.reference ---------------------------------------------------------------------------

def _onnx_deform_conv(attributes, arrays):
    onnx = pytest.importorskip("onnx")
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    names = ["X", "W", "offset", "B", "mask"][:len(arrays)]
    node = helper.make_node("DeformConv", [n if a is not None else "" for n, a in zip(names, arrays)], ["Y"],
                            **attributes)
    inputs = [helper.make_tensor_value_info(n, onnx.TensorProto.DOUBLE, a.shape)
              for n, a in zip(names, arrays) if a is not None]
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("Y", onnx.TensorProto.DOUBLE, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    return ReferenceEvaluator(model).run(None, {n: a for n, a in zip(names, arrays) if a is not None})[0]


def _deform_inputs(attributes, x_shape, w_shape, bias, mask, seed=0):
    rng = np.random.default_rng(seed)
    kernel = w_shape[2:]
    pads = attributes.get("pads", [0] * 4)
    strides = attributes.get("strides", [1, 1])
    dilations = attributes.get("dilations", [1, 1])
    out = [(x_shape[2 + a] + pads[a] + pads[a + 2] - (kernel[a] - 1) * dilations[a] - 1) // strides[a] + 1
           for a in range(2)]
    groups = attributes.get("offset_group", 1)
    taps = int(np.prod(kernel))
    arrays = [rng.uniform(-1, 1, x_shape), rng.uniform(-1, 1, w_shape),
              rng.uniform(-1.5, 1.5, (x_shape[0], groups * taps * 2, *out)),
              rng.uniform(-1, 1, w_shape[0]) if bias else None,
              rng.uniform(0, 1, (x_shape[0], groups * taps, *out)) if mask else None]
    while arrays[-1] is None:
        arrays.pop()
    return arrays


DEFORM_CASES = [
    ("basic", {}, (1, 2, 4, 4), (3, 2, 2, 2), False, False),
    ("pads_strides_bias_mask", {"pads": [1, 0, 1, 1], "strides": [2, 1]}, (2, 2, 4, 5), (2, 2, 3, 2), True, True),
    ("dilations_groups", {"dilations": [2, 1], "group": 2}, (1, 4, 5, 4), (4, 2, 2, 2), True, False),
    ("offset_groups", {"offset_group": 2, "pads": [1, 1, 1, 1]}, (1, 4, 3, 3), (2, 4, 3, 3), False, True),
]


@pytest.mark.parametrize("attributes, x_shape, w_shape, bias, mask", [c[1:] for c in DEFORM_CASES],
                         ids=[c[0] for c in DEFORM_CASES])
def test_deform_conv_matches_onnx_reference(attributes, x_shape, w_shape, bias, mask):
    arrays = _deform_inputs(attributes, x_shape, w_shape, bias, mask)
    expected = _onnx_deform_conv(attributes, arrays)
    op = create_operator("DeformConv", attributes)
    got = op(*[None if a is None else tf.constant(a) for a in arrays])
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-5, atol=1e-6)
    traced = tf.function(lambda *values: op(*values))(*[None if a is None else tf.constant(a) for a in arrays])
    np.testing.assert_allclose(traced.numpy(), got.numpy(), rtol=1e-10, atol=1e-12)


def test_deform_conv_gradient_matches_finite_differences():
    attributes = {"pads": [1, 1, 1, 1], "offset_group": 2}
    arrays = _deform_inputs(attributes, (1, 2, 3, 3), (2, 2, 2, 2), True, True, seed=1)
    op = create_operator("DeformConv", attributes)
    theoretical, numerical = tf.test.compute_gradient(lambda *values: op(*values),
                                                      [tf.constant(a) for a in arrays], delta=1e-6)
    for t, n in zip(theoretical, numerical):
        np.testing.assert_allclose(t, n, rtol=1e-4, atol=1e-6)


def test_col2im_gradient_matches_finite_differences():
    op = create_operator("Col2Im", {"strides": [2, 1], "pads": [1, 0, 0, 1]})
    columns = tf.constant(np.random.default_rng(0).uniform(-1, 1, (1, 12, 9)))
    image, block = tf.constant([5, 4]), tf.constant([2, 3])
    theoretical, numerical = tf.test.compute_gradient(lambda c: op(c, image, block), [columns])
    np.testing.assert_allclose(theoretical[0], numerical[0], rtol=1e-6, atol=1e-8)


def test_normalization_checks_channels_last_inputs_too():
    """The executor calls channels_last directly: its inputs are checked there, X's shape named in ONNX layout."""
    x = to_channels_last(tf.zeros([2, 3, 4, 5]))
    with pytest.raises(ShapeError, match=r"shape \(3,\).*\(2, 3, 4, 5\)"):
        create_operator("BatchNormalization", {}).channels_last(x, *[tf.zeros([4])] * 4)
    with pytest.raises(ShapeError, match="scale, B of shape"):
        create_operator("InstanceNormalization", {}).channels_last(x, tf.zeros([3]), tf.zeros([2]))
    with pytest.raises(ShapeError, match="divisible by num_groups"):
        create_operator("GroupNormalization", {"num_groups": 2}).channels_last(x, tf.zeros([3]), tf.zeros([3]))


def test_a_strided_1x1_convolution_trains_in_a_traced_step_without_onednn_s_crashing_kernel():
    """TensorFlow 2.21's oneDNN filter gradient of a strided 1x1 convolution on few channels corrupts the heap with
    2+ threads at odd batch sizes (uxlfoundation/oneDNN#6035): the converter subsamples, then convolves with stride
    1 -- the same outputs and gradients, and no Conv2D of stride 2 left in the graph."""
    import numpy as np
    import tensorflow as tf

    from d5.frameworks.tensorflow.operators import create_operator

    op = create_operator("Conv", {"strides": [2, 2]})
    x = tf.constant(np.ones((3, 16, 16, 8), np.float32))
    w = tf.Variable(np.ones((16, 8, 1, 1), np.float32))

    @tf.function(autograph=False)
    def step(images):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(op.channels_last(images, w) ** 2)
        return tape.gradient(loss, w)

    grad = step(x)
    assert np.allclose(grad.numpy(), 2 * 8 * 3 * 8 * 8)  # each output 8, 3 * 8 * 8 of them, d(y^2)/dw = 2 y x
    graph = step.get_concrete_function(x).graph
    strided = [o for o in graph.get_operations() if o.type.startswith("Conv2D") and o.get_attr("strides") != [1, 1, 1, 1]]
    assert not strided
