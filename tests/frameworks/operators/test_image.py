"""Every framework's image operators (native_op: Resize, GridSample, AffineGrid, CenterCropPad, RoiAlign,
NonMaxSuppression) against the reference operators: forward outputs, and gradients where the reference has them
(Resize, AffineGrid; the others are forward only in the reference, so the oracle compares their outputs only)."""
from __future__ import annotations

import numpy as np
import pytest

from _oracle import _ints, _rand, case_params, check_against_reference, check_error, framework_params
from d5.errors import ShapeError


def _f32(values):
    return _ints(values, np.float32)


def _boxes(b, n, spread=4.0):
    """Random corner boxes [y1, x1, y2, x2] (sometimes flipped), many overlapping."""
    def make(rng):
        start = rng.uniform(0, spread, (b, n, 2))
        size = rng.uniform(0.2, 2.0, (b, n, 2)) * rng.choice([-1, 1], (b, n, 2))
        return np.concatenate([start, start + size], axis=-1).astype(np.float32)
    return make


NO_ROI = _f32([])

# (id, op_type, attributes, [input makers (None: omitted)], options): see _oracle.py
RESIZE_CASES = [
    ("nearest_up_scales", "Resize", {}, [_rand(1, 2, 3, 4), None, _f32([1, 1, 2, 1.5])], {}),
    ("nearest_down_sizes", "Resize", {}, [_rand(1, 1, 5, 7), None, None, _ints([1, 1, 3, 4])], {}),
    ("nearest_floor_align_corners", "Resize", {"nearest_mode": "floor", "coordinate_transformation_mode":
                                               "align_corners"}, [_rand(1, 1, 3, 3), None, None, _ints([1, 1, 7, 8])],
     {}),
    ("nearest_ceil_half_pixel", "Resize", {"nearest_mode": "ceil"}, [_rand(2, 5), None, _f32([1.0, 1.7])], {}),
    ("nearest_prefer_ceil_asymmetric", "Resize", {"nearest_mode": "round_prefer_ceil",
                                                  "coordinate_transformation_mode": "asymmetric"},
     [_rand(1, 1, 4, 4), None, None, _ints([1, 1, 8, 6])], {}),
    ("nearest_exclude_outside", "Resize", {"exclude_outside": 1, "nearest_mode": "ceil"},
     [_rand(1, 6), None, _f32([1.0, 1.5])], {}),
    ("linear_half_pixel_fast", "Resize", {"mode": "linear"}, [_rand(2, 3, 4, 5), None, _f32([1, 1, 1.5, 0.6])], {}),
    ("linear_sizes_fast_3d", "Resize", {"mode": "linear"}, [_rand(1, 2, 3, 4, 2), None, None, _ints([1, 2, 5, 3, 3])],
     {}),
    ("linear_pytorch_half_pixel", "Resize", {"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"},
     [_rand(1, 1, 4, 4), None, None, _ints([1, 1, 3, 1])], {}),
    ("linear_align_corners", "Resize", {"mode": "linear", "coordinate_transformation_mode": "align_corners"},
     [_rand(1, 1, 4, 4), None, _f32([1, 1, 0.6, 1.5])], {}),
    ("linear_asymmetric_2d", "Resize", {"mode": "linear", "coordinate_transformation_mode": "asymmetric"},
     [_rand(3, 4), None, _f32([2.0, 1.5])], {}),
    ("linear_half_pixel_symmetric", "Resize", {"mode": "linear", "coordinate_transformation_mode":
                                               "half_pixel_symmetric"},
     [_rand(1, 1, 2, 4), None, _f32([1, 1, 2.3, 0.7])], {}),
    ("linear_antialias_down", "Resize", {"mode": "linear", "antialias": 1}, [_rand(1, 1, 8, 8), None, None,
                                                                             _ints([1, 1, 3, 5])], {}),
    ("cubic_up", "Resize", {"mode": "cubic"}, [_rand(1, 1, 4, 4), None, _f32([1, 1, 2, 1.5])], {}),
    ("cubic_exclude_outside_a", "Resize", {"mode": "cubic", "cubic_coeff_a": -0.5, "exclude_outside": 1},
     [_rand(1, 1, 4, 4), None, _f32([1, 1, 0.8, 1.7])], {}),
    ("cubic_antialias_down", "Resize", {"mode": "cubic", "antialias": 1}, [_rand(1, 1, 9, 7), None,
                                                                           _f32([1, 1, 0.5, 0.6])], {}),
    ("cubic_align_corners_asymmetric_scale", "Resize", {"mode": "cubic", "coordinate_transformation_mode":
                                                        "align_corners"}, [_rand(1, 1, 5, 4), None,
                                                                           _f32([1, 1, 0.7, 1.3])], {}),
    ("tf_crop_and_resize_extrapolation", "Resize", {"mode": "linear", "coordinate_transformation_mode":
                                                    "tf_crop_and_resize", "extrapolation_value": 9.0},
     [_rand(1, 1, 4, 4), _f32([0, 0, 0.4, 0.6, 1, 1, 1.2, 1.7]), None, _ints([1, 1, 3, 3])], {}),
    ("tf_crop_and_resize_axes", "Resize", {"mode": "linear", "coordinate_transformation_mode": "tf_crop_and_resize",
                                           "axes": [3, 2]}, [_rand(1, 1, 4, 5), _f32([0.6, 0.4, 0.8, 1.0]), None,
                                                             _ints([3, 3])], {}),
    ("axes_scales", "Resize", {"axes": [-1, 1]}, [_rand(2, 3, 4), None, _f32([2.0, 0.5])], {}),
    ("not_larger", "Resize", {"keep_aspect_ratio_policy": "not_larger", "axes": [2, 3]},
     [_rand(1, 1, 2, 3), None, None, _ints([7, 8])], {}),
    ("not_smaller", "Resize", {"keep_aspect_ratio_policy": "not_smaller", "mode": "linear", "axes": [2, 3]},
     [_rand(1, 1, 4, 5), None, None, _ints([2, 3])], {}),
    ("identity", "Resize", {"mode": "cubic"}, [_rand(2, 3), None, _f32([1.0, 1.0])], {}),
    ("uint8_linear", "Resize", {"mode": "linear"}, [_ints(np.arange(12).reshape(1, 1, 3, 4) * 21, np.uint8), None,
                                                    _f32([1, 1, 1.7, 1.3])], {}),
    ("opset11_tf_half_pixel_for_nn", "Resize", {"coordinate_transformation_mode": "tf_half_pixel_for_nn"},
     [_rand(1, 1, 4, 4), NO_ROI, _f32([]), _ints([1, 1, 3, 2])], {"opset": 11}),
    ("opset11_empty_roi_scales", "Resize", {"mode": "linear"}, [_rand(1, 2, 3), NO_ROI, _f32([1, 1, 2])],
     {"opset": 11}),
    ("opset10_x_scales", "Resize", {"mode": "linear"}, [_rand(1, 1, 3, 3), _f32([1, 1, 2, 1.5])], {"opset": 10}),
]

GRADIENT_CASES = RESIZE_CASES + [
    ("affine_grid_2d", "AffineGrid", {}, [_rand(2, 2, 3), _ints([2, 3, 4, 5])], {}),
    ("affine_grid_2d_align_corners", "AffineGrid", {"align_corners": 1}, [_rand(1, 2, 3), _ints([1, 1, 1, 3])], {}),
    ("affine_grid_3d", "AffineGrid", {}, [_rand(2, 3, 4), _ints([2, 1, 2, 3, 4])], {}),
    ("affine_grid_3d_align_corners", "AffineGrid", {"align_corners": 1}, [_rand(1, 3, 4), _ints([1, 2, 3, 2, 2])],
     {}),
]

FORWARD_CASES = [
    ("gridsample_linear_zeros", "GridSample", {}, [_rand(2, 3, 5, 6), _rand(2, 4, 3, 2, low=-1.3, high=1.3)], {}),
    ("gridsample_linear_reflection", "GridSample", {"padding_mode": "reflection"},
     [_rand(1, 2, 4, 5), _rand(1, 3, 3, 2, low=-2.5, high=2.5)], {}),
    ("gridsample_linear_border_align", "GridSample", {"padding_mode": "border", "align_corners": 1},
     [_rand(1, 2, 4, 5), _rand(1, 3, 3, 2)], {}),
    ("gridsample_nearest_zeros", "GridSample", {"mode": "nearest"}, [_rand(1, 2, 4, 5),
                                                                     _rand(1, 3, 3, 2, low=-1.2, high=1.2)], {}),
    ("gridsample_nearest_reflection_align", "GridSample", {"mode": "nearest", "padding_mode": "reflection",
                                                           "align_corners": 1},
     [_rand(1, 2, 4, 5), _rand(1, 3, 3, 2, low=-2, high=2)], {}),
    ("gridsample_cubic_zeros", "GridSample", {"mode": "cubic"}, [_rand(2, 2, 5, 4), _rand(2, 3, 4, 2, low=-1.2,
                                                                                            high=1.2)], {}),
    ("gridsample_bicubic_reflection_align", "GridSample", {"mode": "bicubic", "padding_mode": "reflection",
                                                           "align_corners": 1},
     [_rand(1, 1, 5, 4), _rand(1, 3, 4, 2, low=-2, high=2)], {}),
    ("gridsample_volumetric_linear", "GridSample", {}, [_rand(1, 2, 3, 4, 5), _rand(1, 2, 3, 2, 3, low=-1.1,
                                                                                      high=1.1)], {}),
    ("gridsample_volumetric_cubic", "GridSample", {"mode": "cubic"}, [_rand(1, 1, 4, 4, 5), _rand(1, 2, 2, 2, 3)], {}),
    ("gridsample_1d_linear_reflection", "GridSample", {"padding_mode": "reflection"},
     [_rand(2, 3, 6), _rand(2, 5, 1, low=-1.5, high=1.5)], {}),
    ("gridsample_1d_nearest", "GridSample", {"mode": "nearest"}, [_rand(1, 2, 6), _rand(1, 7, 1, low=-1.2, high=1.2)],
     {}),
    ("center_crop", "CenterCropPad", {}, [_rand(5, 6, 3), _ints([3, 3, 3])], {}),
    ("center_pad", "CenterCropPad", {}, [_rand(2, 3), _ints([5, 6])], {}),
    ("center_crop_and_pad_axes", "CenterCropPad", {"axes": [0, -1]}, [_rand(5, 2, 3), _ints([2, 6])], {}),
    ("roialign_half_pixel_avg", "RoiAlign", {"output_height": 3, "output_width": 2, "spatial_scale": 0.5},
     [_rand(2, 2, 8, 7), _f32([[0, 1, 9, 12], [3, 2.5, 7, 9], [-2, -3, 20, 18]]), _ints([0, 1, 1])], {}),
    ("roialign_max_sampling", "RoiAlign", {"mode": "max", "sampling_ratio": 2, "output_height": 2,
                                           "output_width": 3},
     [_rand(1, 3, 6, 6), _f32([[0.5, 1, 4, 5.5]]), _ints([0])], {}),
    ("roialign_opset10", "RoiAlign", {"output_height": 2, "output_width": 2, "sampling_ratio": 0},
     [_rand(1, 1, 5, 5), _f32([[1, 1, 1, 1], [0, 0, 4, 3]]), _ints([0, 0])], {"opset": 10}),
    ("nms_basic", "NonMaxSuppression", {}, [_f32([[[0, 0, 1, 1], [0, 0.1, 1, 1.1], [0, -0.1, 1, 0.9], [0, 10, 1, 11],
                                                   [0, 10.1, 1, 11.1], [0, 100, 1, 101]]]),
                                            _f32([[[0.9, 0.75, 0.6, 0.95, 0.5, 0.3]]]), _ints([3]), _f32([0.5]),
                                            _f32([0.0])], {}),
    ("nms_random_two_classes_center", "NonMaxSuppression", {"center_point_box": 1},
     [_boxes(2, 40), _rand(2, 3, 40, low=0, high=1), _ints([10]), _f32(0.3), _f32(0.2)], {}),
    ("nms_random_flipped_no_threshold", "NonMaxSuppression", {}, [_boxes(1, 60), _rand(1, 2, 60, low=0, high=1),
                                                                  _ints([100]), _f32([0.4])], {}),
    ("nms_identical_scores_and_boxes", "NonMaxSuppression", {}, [_f32(np.zeros((1, 5, 4)) + [0, 0, 1, 1]),
                                                                 _f32(np.full((1, 1, 5), 0.5)), _ints([3])], {}),
    ("nms_no_max_output", "NonMaxSuppression", {}, [_boxes(1, 5), _rand(1, 1, 5)], {}),
]


@pytest.mark.parametrize("framework, case", case_params(GRADIENT_CASES))
def test_native_op_matches_reference(framework, case):
    check_against_reference(framework, case)


@pytest.mark.parametrize("framework, case", case_params(FORWARD_CASES))
def test_forward_only_native_op_matches_reference(framework, case):
    check_against_reference(framework, case)  # the reference has no gradient for these: outputs only


@pytest.mark.parametrize("framework, op_type, attributes, arrays, match", framework_params([
    ("Resize", {}, [np.ones((2, 3), np.float32), None, None, np.array([4])], "sizes for"),
    ("Resize", {"mode": "area"}, None, "unknown mode"),
    ("GridSample", {}, [np.ones((1, 1, 3, 3), np.float32), np.ones((1, 2, 2, 3), np.float32)], "does not match X"),
    ("RoiAlign", {}, [np.ones((1, 1, 3, 3), np.float32), np.ones((1, 4), np.float32), np.array([2])],
     "batch_indices"),
    ("NonMaxSuppression", {}, [np.ones((1, 2, 4), np.float32), np.ones((1, 1, 2), np.float32), np.array([1]),
                               np.array([1.5], np.float32)], "iou_threshold"),
]))
def test_bad_inputs_raise_the_reference_errors(framework, op_type, attributes, arrays, match):
    check_error(framework, op_type, attributes, arrays, ShapeError, match)
