"""TensorFlow's image and quantization converters beyond the shared operator tables: more modes, dtypes and layouts
against the reference (the oracle), their channels-last computations against the ONNX-layout ones, and each inside
``tf.function`` (shape-like inputs as constants known while tracing) against eager execution."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from _oracle import _ints, _rand, check_against_reference

from d5.errors import ShapeError, UnsupportedOperatorError
from d5.frameworks.tensorflow.operators import create_operator
from d5.frameworks.tensorflow.tensors import from_channels_last, to_channels_last


def _f32(values):
    return _ints(values, np.float32)


def _q(low, high, *shape, dtype=np.uint8):
    return lambda rng: rng.integers(low, high + 1, shape).astype(dtype)


def _boxes(b, n, spread=4.0):
    def make(rng):
        start = rng.uniform(0, spread, (b, n, 2))
        size = rng.uniform(0.2, 2.0, (b, n, 2)) * rng.choice([-1, 1], (b, n, 2))
        return np.concatenate([start, start + size], axis=-1).astype(np.float32)
    return make


CASES = [
    # Resize: modes, coordinate rules and dtypes the table does not combine
    ("nearest_floor_pytorch_half_pixel", "Resize", {"nearest_mode": "floor", "coordinate_transformation_mode":
                                                    "pytorch_half_pixel"}, [_rand(1, 2, 5, 3), None,
                                                                            _f32([1, 1, 0.6, 2.5])], {}),
    ("nearest_round_prefer_floor_half_pixel_symmetric", "Resize", {"coordinate_transformation_mode":
                                                                   "half_pixel_symmetric"},
     [_rand(2, 7), None, _f32([1, 1.4])], {}),
    ("nearest_tf_crop_and_resize", "Resize", {"coordinate_transformation_mode": "tf_crop_and_resize",
                                              "extrapolation_value": -3.0},
     [_rand(1, 1, 4, 4), _f32([0, 0, -0.2, 0.1, 1, 1, 0.9, 1.3]), None, _ints([1, 1, 5, 4])], {}),
    ("linear_antialias_up_is_plain", "Resize", {"mode": "linear", "antialias": 1}, [_rand(1, 1, 3, 3), None,
                                                                                    _f32([1, 1, 2.0, 1.5])], {}),
    ("linear_exclude_outside_float64", "Resize", {"mode": "linear", "exclude_outside": 1},
     [lambda rng: rng.uniform(-1, 1, (1, 2, 4, 3)), None, _f32([1, 1, 1.5, 2.5])], {}),
    ("cubic_pytorch_half_pixel_sizes", "Resize", {"mode": "cubic", "coordinate_transformation_mode":
                                                  "pytorch_half_pixel"}, [_rand(1, 1, 5, 6), None, None,
                                                                          _ints([1, 1, 1, 9])], {}),
    ("cubic_asymmetric_axes", "Resize", {"mode": "cubic", "coordinate_transformation_mode": "asymmetric",
                                         "axes": [1]}, [_rand(2, 5, 3), None, _f32([1.8])], {}),
    ("linear_5d_trilinear", "Resize", {"mode": "linear", "coordinate_transformation_mode": "align_corners"},
     [_rand(1, 2, 3, 2, 4), None, None, _ints([1, 2, 5, 3, 2])], {}),
    ("int8_cubic", "Resize", {"mode": "cubic"}, [_q(-128, 127, 1, 1, 3, 4, dtype=np.int8), None,
                                                 _f32([1, 1, 2.0, 1.5])], {}),
    ("uint16_nearest", "Resize", {}, [_q(0, 65535, 2, 5, dtype=np.uint16), None, _f32([1.0, 0.6])], {}),
    ("not_smaller_cubic_sizes", "Resize", {"mode": "cubic", "keep_aspect_ratio_policy": "not_smaller"},
     [_rand(1, 1, 4, 6), None, None, _ints([1, 1, 3, 5])], {}),
    ("opset11_half_pixel_sizes", "Resize", {"mode": "linear"}, [_rand(1, 1, 3, 3), _f32([]), _f32([]),
                                                               _ints([1, 1, 5, 2])], {"opset": 11}),
    ("opset10_nearest", "Resize", {}, [_rand(1, 1, 2, 3), _f32([1, 1, 2.5, 0.7])], {"opset": 10}),
    # GridSample
    ("gridsample_cubic_border", "GridSample", {"mode": "cubic", "padding_mode": "border"},
     [_rand(1, 2, 4, 5), _rand(1, 3, 2, 2, low=-1.4, high=1.4)], {}),
    ("gridsample_nearest_border_3d", "GridSample", {"mode": "nearest", "padding_mode": "border"},
     [_rand(1, 2, 3, 4, 3), _rand(1, 2, 2, 2, 3, low=-1.5, high=1.5)], {}),
    ("gridsample_linear_reflection_3d_align", "GridSample", {"padding_mode": "reflection", "align_corners": 1},
     [_rand(2, 1, 2, 3, 4), _rand(2, 3, 1, 2, 3, low=-3, high=3)], {}),
    ("gridsample_1d_cubic_zeros_float64", "GridSample", {"mode": "cubic"},
     [lambda rng: rng.uniform(-1, 1, (1, 2, 5)), lambda rng: rng.uniform(-1.3, 1.3, (1, 4, 1))], {}),
    ("gridsample_single_pixel_reflection_align", "GridSample", {"padding_mode": "reflection", "align_corners": 1},
     [_rand(1, 1, 1, 3), _rand(1, 2, 2, 2, low=-2, high=2)], {}),
    # RoiAlign
    ("roialign_max_adaptive", "RoiAlign", {"mode": "max", "output_height": 2, "output_width": 3},
     [_rand(2, 3, 9, 8), _f32([[0.5, 1, 7, 8.5], [2, 2, 3, 3], [1, 0, 8, 2]]), _ints([1, 0, 1])], {}),
    ("roialign_half_pixel_degenerate_and_flipped", "RoiAlign", {"output_height": 2, "output_width": 2},
     [_rand(1, 2, 6, 6), _f32([[2, 2, 2, 2], [5, 4, 1, 1], [0, 0, 6, 6], [-3, -3, -1, -1]]), _ints([0, 0, 0, 0])],
     {}),
    ("roialign_max_flipped_sampling", "RoiAlign", {"mode": "max", "sampling_ratio": 3, "spatial_scale": 0.25},
     [_rand(1, 2, 5, 5), _f32([[16, 12, 2, 3], [0, 0, 19, 19]]), _ints([0, 0])], {}),
    ("roialign_opset10_max", "RoiAlign", {"mode": "max", "output_height": 3, "output_width": 3},
     [_rand(1, 1, 6, 7), _f32([[1, 1, 1.2, 1.4], [0.5, 0.5, 6, 5]]), _ints([0, 0])], {"opset": 10}),
    ("roialign_no_rois", "RoiAlign", {}, [_rand(1, 2, 4, 4), _f32(np.zeros((0, 4))), _ints(np.zeros(0, np.int64))],
     {}),
    # NonMaxSuppression
    ("nms_many_boxes_max_limit", "NonMaxSuppression", {}, [_boxes(2, 300, spread=20.0),
                                                          _rand(2, 2, 300, low=0, high=1), _ints([7]),
                                                          _f32([0.3]), _f32([0.1])], {}),
    ("nms_all_below_score_threshold", "NonMaxSuppression", {}, [_boxes(1, 6), _rand(1, 2, 6, low=0, high=0.5),
                                                                _ints([4]), _f32([0.5]), _f32([0.9])], {}),
    ("nms_zero_area_boxes", "NonMaxSuppression", {}, [_f32([[[0, 0, 1, 1], [0, 0, 0, 1], [0, 0, 1, 1],
                                                             [0.5, 0.5, 0.5, 0.5], [0, 0, 0.9, 1]]]),
                                                      _f32([[[0.1, 0.9, 0.8, 0.7, 0.6]]]), _ints([10]), _f32([0.5])],
     {}),
    ("nms_iou_threshold_one_keeps_all", "NonMaxSuppression", {"center_point_box": 1},
     [_f32([[[0.5, 0.5, 1, 1], [0.5, 0.5, 1, 1], [3, 3, 2, 2]]]), _f32([[[0.5, 0.7, 0.6]]]), _ints([5]), _f32([1.0])],
     {}),
    # CenterCropPad and AffineGrid
    ("center_crop_pad_uint8", "CenterCropPad", {"axes": [1]}, [_q(0, 255, 2, 5, 3), _ints([2])], {}),
    ("center_pad_odd_int32", "CenterCropPad", {}, [_q(-5, 5, 3, 2, dtype=np.int32), _ints([4, 5])], {}),
    ("affine_grid_float64_single_pixel", "AffineGrid", {},
     [lambda rng: rng.uniform(-1, 1, (2, 2, 3)), _ints([2, 1, 1, 4])], {}),
    # quantization
    ("quantize_int32_output_float64", "QuantizeLinear", {}, [lambda rng: rng.uniform(-1e10, 1e10, (6,)),
                                                             _ints(0.5, np.float64), _ints(7, np.int32)], {}),
    ("quantize_blocked_negative_axis_uint16", "QuantizeLinear", {"axis": -2, "block_size": 3},
     [_rand(7, 2, low=0, high=900), _rand(3, 2, low=0.5, high=4), _ints(np.full((3, 2), 9), np.uint16)], {}),
    ("quantize_saturating_ties", "QuantizeLinear", {"output_dtype": 3}, [_f32([1e9, -1e9, 126.5, -128.5, -127.5]),
                                                                          _f32(1.0)], {}),
    ("dequantize_int16_per_axis_float64_scale", "DequantizeLinear", {"axis": -1},
     [_q(-32768, 32767, 3, 4, dtype=np.int16), _ints([0.5, 1.0, 2.0, 0.25], np.float64),
      _ints([1, -2, 3, 4], np.int16)], {}),
    ("dequantize_output_float16", "DequantizeLinear", {"output_dtype": 10}, [_q(-128, 127, 5, dtype=np.int8),
                                                                             _f32(0.25), _ints(3, np.int8)], {}),
    ("dynamic_quantize_negative", "DynamicQuantizeLinear", {}, [_rand(2, 3, low=-7, high=-1)], {}),
    ("matmul_integer_vector_times_vector", "MatMulInteger", {}, [_q(0, 255, 6), _q(0, 255, 6), _ints(3, np.uint8),
                                                                 _ints(250, np.uint8)], {}),
    ("matmul_integer_batched_b", "MatMulInteger", {}, [_q(-128, 127, 3, 4, dtype=np.int8),
                                                       _q(-128, 127, 2, 4, 5, dtype=np.int8)], {}),
    ("qlinear_matmul_row_zero_points", "QLinearMatMul", {},
     [_q(0, 255, 3, 4), _f32(0.02), _ints([[1], [2], [3]], np.uint8), _q(0, 255, 4, 2), _f32([0.01, 0.04]),
      _ints([100, 120], np.uint8), _f32(0.5), _ints(128, np.uint8)], {}),
    ("conv_integer_1d_stride_dilation", "ConvInteger", {"strides": [2], "dilations": [2], "pads": [1, 2]},
     [_q(0, 255, 2, 3, 11), _q(0, 255, 4, 3, 3), _ints(100, np.uint8), _ints(9, np.uint8)], {}),
    ("conv_integer_3d_same_lower", "ConvInteger", {"auto_pad": "SAME_LOWER", "strides": [1, 2, 2]},
     [_q(-128, 127, 1, 2, 3, 4, 5, dtype=np.int8), _q(-128, 127, 3, 2, 2, 2, 3, dtype=np.int8)], {}),
    ("conv_integer_asymmetric_pads_dilation", "ConvInteger", {"pads": [0, 2, 1, 0], "dilations": [2, 1]},
     [_q(0, 255, 1, 1, 5, 5), _q(0, 255, 2, 1, 2, 2)], {}),
    ("qlinear_conv_groups_per_channel_w_zero", "QLinearConv", {"group": 2, "pads": [1, 1, 1, 1]},
     [_q(0, 255, 2, 4, 4, 4), _f32(0.05), _ints(10, np.uint8), _q(0, 255, 6, 2, 3, 3), _f32([0.01] * 3 + [0.02] * 3),
      _ints([1, 2, 3, 4, 5, 6], np.uint8), _f32(0.7), _ints(5, np.uint8)], {}),
    ("qlinear_conv_int8_no_y_zero_bias", "QLinearConv", {"strides": [2, 1]},
     [_q(-128, 127, 1, 2, 5, 3, dtype=np.int8), _f32(0.1), _ints(-1, np.int8),
      _q(-128, 127, 2, 2, 1, 1, dtype=np.int8), _f32(0.2), _ints(0, np.int8), _f32(0.05)], {}),
]


@pytest.mark.parametrize("case", [pytest.param(case, id=case[0]) for case in CASES])
def test_against_reference(case):
    check_against_reference("tensorflow", case)


# ------------------------------------------------------------------------------------- errors

@pytest.mark.parametrize("op_type, attributes, arrays, error, match", [
    ("QuantizeLinear", {"output_dtype": 21}, [np.ones(2, np.float32), np.float32(1)], UnsupportedOperatorError,
     "output_dtype 21"),
    ("QuantizeLinear", {"output_dtype": 12}, [np.ones(2, np.float32), np.float32(1)], UnsupportedOperatorError,
     "uint32"),
    ("DequantizeLinear", {}, [np.ones(2, np.float32), np.float32(1)], UnsupportedOperatorError, "float32"),
    ("ConvInteger", {}, [np.ones((1, 3, 4, 4), np.uint8), np.ones((2, 2, 1, 1), np.uint8)], ShapeError, "channels"),
    ("ConvInteger", {"kernel_shape": [2, 2]}, [np.ones((1, 2, 4, 4), np.uint8), np.ones((2, 2, 1, 1), np.uint8)],
     ShapeError, "kernel_shape"),
    ("QLinearMatMul", {}, [np.ones((2, 3), np.uint8), np.float32(1), np.ones(4, np.uint8), np.ones((3, 2), np.uint8),
                           np.float32(1), np.uint8(0), np.float32(1)], ShapeError, "zero points"),
    ("CenterCropPad", {}, [np.ones((2, 3), np.float32), np.array([1])], ShapeError, "entries"),
    ("AffineGrid", {}, [np.ones((1, 2, 3), np.float32), np.array([1, 1, 2])], ShapeError, "size must be"),
    ("NonMaxSuppression", {}, [np.ones((1, 2, 4), np.float32), np.ones((1, 1, 3), np.float32)], ShapeError,
     "boxes must be"),
])
def test_bad_inputs(op_type, attributes, arrays, error, match):
    from d5.frameworks.tensorflow import native_op

    with pytest.raises(error, match=match):
        native_op(op_type, **attributes).forward(arrays)


def test_resize_needs_scales_known_while_tracing():
    op = create_operator("Resize", {})
    traced = tf.function(lambda x, scales: op(x, None, scales))
    with pytest.raises(UnsupportedOperatorError, match="scales"):
        traced(tf.ones((1, 4)), tf.constant([1.0, 2.0]))


# ------------------------------------------------------------------------------------- layouts, tf.function

def _close(a, b):
    np.testing.assert_allclose(tf.convert_to_tensor(a).numpy(), tf.convert_to_tensor(b).numpy(), rtol=1e-6,
                               atol=1e-6)


@pytest.mark.parametrize("attributes, scales, sizes", [
    ({"mode": "linear"}, [1, 1, 1.5, 0.5], None),
    ({"mode": "cubic", "coordinate_transformation_mode": "tf_crop_and_resize", "extrapolation_value": 2.0},
     None, [1, 1, 3, 7]),
    ({"axes": [1, 3]}, [2.0, 1.3], None),
])
def test_resize_channels_last_and_traced(attributes, scales, sizes):
    rng = np.random.default_rng(0)
    x = tf.constant(rng.uniform(-1, 1, (2, 3, 4, 5)).astype(np.float32))
    op = create_operator("Resize", attributes)
    roi = tf.constant([0, 0, 0.1, -0.2, 1, 1, 0.8, 1.1], tf.float32) \
        if attributes.get("coordinate_transformation_mode") == "tf_crop_and_resize" else None
    given = (roi, None if scales is None else tf.constant(scales, tf.float32),
             None if sizes is None else tf.constant(sizes, tf.int64))
    eager = op(x, *given)
    assert op.takes_channels_last([4, 1, 1])
    _close(from_channels_last(op.channels_last(to_channels_last(x), *given)), eager)
    _close(tf.function(lambda v: op(v, *given))(x), eager)
    traced_cl = tf.function(lambda v: op.channels_last(v, *given))
    _close(from_channels_last(traced_cl(to_channels_last(x))), eager)

    # The gradient of the channels-last computation is the ONNX-layout one, transposed.
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        onnx_out = op(x, *given)
        last = to_channels_last(x)
        cl_out = op.channels_last(last, *given)
    cotangent = tf.constant(rng.standard_normal(onnx_out.shape).astype(np.float32))
    _close(tape.gradient(onnx_out, x, cotangent), tape.gradient(cl_out, x, to_channels_last(cotangent)))


def test_gridsample_and_roialign_channels_last_and_traced():
    rng = np.random.default_rng(1)
    x = tf.constant(rng.uniform(-1, 1, (2, 3, 5, 6)).astype(np.float32))
    grid = tf.constant(rng.uniform(-1.2, 1.2, (2, 4, 3, 2)).astype(np.float32))
    sample = create_operator("GridSample", {"mode": "cubic", "padding_mode": "reflection"})
    eager = sample(x, grid)
    _close(from_channels_last(sample.channels_last(to_channels_last(x), grid)), eager)
    _close(tf.function(sample)(x, grid), eager)

    rois = tf.constant([[0, 1, 9, 12], [3, 2.5, 7, 9], [-2, -3, 20, 18]], tf.float32)
    indices = tf.constant([0, 1, 1], tf.int64)
    for mode in ("avg", "max"):
        pool = create_operator("RoiAlign", {"mode": mode, "output_height": 3, "output_width": 2,
                                            "spatial_scale": 0.5})
        eager = pool(x, rois, indices)
        _close(from_channels_last(pool.channels_last(to_channels_last(x), rois, indices)), eager)
        # rois and batch_indices computed in the graph: the adaptive sampling grid is a tensor there
        _close(tf.function(pool)(x, rois, indices), eager)


def test_roialign_gradient_is_finite_for_empty_regions():
    x = tf.Variable(np.random.default_rng(2).uniform(size=(1, 1, 4, 4)).astype(np.float32))
    pool = create_operator("RoiAlign", {"output_height": 2, "output_width": 2})
    with tf.GradientTape() as tape:
        out = pool(x, tf.constant([[2.0, 2.0, 2.0, 2.0], [0, 0, 3, 3]]), tf.constant([0, 0], tf.int64))
        total = tf.reduce_sum(out)
    grad = tape.gradient(total, x)
    assert np.isfinite(grad.numpy()).all() and np.all(out.numpy()[0] == 0)


def test_traced_divisions_stay_exact():
    """Grappler turns x / constant into x * (1 / constant) in graphs: the converters' divisions must not change."""
    rng = np.random.default_rng(6)
    x = tf.constant(rng.uniform(-3, 3, (1, 1, 12, 12)).astype(np.float32))
    # region sizes that are exact multiples of the bins: the adaptive grid is ceil(size / bins) exactly
    rois = tf.constant([[0, 0, 6.5, 10.5], [0.5, 0.5, 7.5, 11.0], [1, 1, 10.8, 4.3]], tf.float32)
    indices = tf.constant([0, 0, 0], tf.int64)
    pool = create_operator("RoiAlign", {"output_height": 5, "output_width": 3, "mode": "max"})
    _close(tf.function(lambda v: pool(v, rois, indices))(x), pool(x, rois, indices))
    values = tf.constant(rng.uniform(-300, 300, (1000,)).astype(np.float32))
    for op_type, attributes, args in [("QuantizeLinear", {"output_dtype": 3}, (tf.constant(0.7),)),
                                      ("DynamicQuantizeLinear", {}, ())]:
        op = create_operator(op_type, attributes)
        traced = tf.function(lambda v: op(v, *args))(values)
        for got, want in zip(traced if isinstance(traced, tuple) else [traced], op(values, *args)
                             if op_type == "DynamicQuantizeLinear" else [op(values, *args)]):
            np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_nms_traced_with_thresholds_from_the_graph():
    rng = np.random.default_rng(3)
    boxes = tf.constant(_boxes(2, 50)(rng))
    scores = tf.constant(rng.uniform(size=(2, 3, 50)).astype(np.float32))
    op = create_operator("NonMaxSuppression", {})
    args = (tf.constant([6], tf.int64), tf.constant([0.4], tf.float32), tf.constant([0.2], tf.float32))
    eager = op(boxes, scores, *args)
    traced = tf.function(op)(boxes, scores, *args)  # every input a placeholder: thresholds are tensors
    np.testing.assert_array_equal(traced.numpy(), eager.numpy())
    assert eager.dtype == tf.int64 and eager.shape[1] == 3


def test_quantization_traced():
    rng = np.random.default_rng(4)
    x = tf.constant(rng.integers(0, 256, (1, 2, 5, 5)).astype(np.uint8))
    w = tf.constant(rng.integers(0, 256, (3, 2, 2, 2)).astype(np.uint8))
    conv = create_operator("QLinearConv", {"pads": [0, 1, 1, 0]})
    args = (tf.constant(0.02), tf.constant(np.uint8(100)), w, tf.constant([0.01, 0.03, 0.02]),
            tf.constant(np.uint8(120)), tf.constant(0.2), tf.constant(np.uint8(90)),
            tf.constant([100, -200, 30], tf.int32))
    eager = conv(x, *args)
    np.testing.assert_array_equal(tf.function(conv)(x, *args).numpy(), eager.numpy())
    assert conv.takes_channels_last([4, 0, 0, 4])
    cl = from_channels_last(conv.channels_last(to_channels_last(x), *args))
    np.testing.assert_array_equal(cl.numpy(), eager.numpy())

    quantize = create_operator("QuantizeLinear", {"axis": 1, "block_size": 2})
    values = tf.constant(rng.uniform(-20, 20, (3, 5)).astype(np.float32))
    scale = tf.constant(rng.uniform(0.5, 2, (3, 3)).astype(np.float32))
    zero = tf.constant(np.full((3, 3), 3, np.int8))
    np.testing.assert_array_equal(tf.function(quantize)(values, scale, zero).numpy(),
                                  quantize(values, scale, zero).numpy())
    dynamic = create_operator("DynamicQuantizeLinear", {})
    for got, want in zip(tf.function(dynamic)(values), dynamic(values)):
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    matmul = create_operator("MatMulInteger", {})
    a, b = tf.constant(rng.integers(0, 256, (2, 3, 4)).astype(np.uint8)), tf.constant(np.uint8(7) * np.ones((4,),
                                                                                                          np.uint8))
    np.testing.assert_array_equal(tf.function(matmul)(a, b).numpy(), matmul(a, b).numpy())


def test_center_crop_pad_affine_grid_traced():
    crop = create_operator("CenterCropPad", {"axes": [0, -1]})
    x = tf.reshape(tf.range(30, dtype=tf.float32), (5, 2, 3))
    np.testing.assert_array_equal(tf.function(lambda v: crop(v, tf.constant([2, 6])))(x).numpy(),
                                  crop(x, tf.constant([2, 6])).numpy())
    grid = create_operator("AffineGrid", {"align_corners": 1})
    theta = tf.constant(np.random.default_rng(5).uniform(size=(2, 3, 4)).astype(np.float32))
    size = tf.constant([2, 1, 2, 3, 4])
    _close(tf.function(lambda t: grid(t, size))(theta), grid(theta, size))
