"""Image operators (Resize, AffineGrid, RoiAlign, NonMaxSuppression)."""
from __future__ import annotations

import numpy as np
import pytest

from d5.errors import ShapeError
from d5.frameworks.reference.operators import create_operator
from d5.frameworks.reference.operators.image import NonMaxSuppression
from d5.ops.validation import test_gradient as check_gradient
from _helpers import assert_same, d5_outputs, onnxruntime_outputs, random_normal

torch = pytest.importorskip("torch")


@pytest.mark.filterwarnings("ignore:Since version 1.3.0, affine_grid behavior has changed")
@pytest.mark.parametrize("size", [(2, 3, 4, 5), (2, 1, 3, 4, 2), (1, 2, 1, 3), (1, 1, 1, 1, 4)])
@pytest.mark.parametrize("align_corners", [0, 1])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_affine_grid_matches_torch(size, align_corners, dtype):
    torch = pytest.importorskip("torch")
    ndim = len(size) - 2
    theta = random_normal((size[0], ndim, ndim + 1), seed=len(size)).astype(dtype)
    expected = torch.nn.functional.affine_grid(torch.from_numpy(theta), list(size),
                                               align_corners=bool(align_corners)).numpy()
    actual = d5_outputs("AffineGrid", [theta, np.array(size, np.int64)], {"align_corners": align_corners})[0]
    assert actual.dtype == dtype and actual.shape == expected.shape
    np.testing.assert_allclose(actual, expected, rtol=1e-6 if dtype == np.float64 else 1e-5, atol=1e-6)


@pytest.mark.parametrize("size", [(2, 3, 4, 5), (2, 1, 3, 4, 2)])
@pytest.mark.parametrize("align_corners", [0, 1])
def test_affine_grid_matches_onnxruntime(size, align_corners):
    ndim = len(size) - 2
    theta = random_normal((size[0], ndim, ndim + 1), seed=5).astype(np.float32)
    inputs = [theta, np.array(size, np.int64)]
    expected = onnxruntime_outputs("AffineGrid", inputs, 1, {"align_corners": align_corners}, opset=20)[0]
    np.testing.assert_allclose(d5_outputs("AffineGrid", inputs, {"align_corners": align_corners})[0], expected,
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("size", [(2, 3, 4, 5), (2, 1, 3, 4, 2)])
@pytest.mark.parametrize("align_corners", [0, 1])
def test_affine_grid_gradient(size, align_corners):
    ndim = len(size) - 2
    inputs = [random_normal((size[0], ndim, ndim + 1), seed=7), np.array(size, np.int64)]
    op = create_operator("AffineGrid", {"align_corners": align_corners})
    result = check_gradient(op, inputs)
    assert result.passed, result
    assert op.backward([np.ones((size[0],) + size[2:] + (ndim,))], inputs, None)[1] is None


def test_affine_grid_gradient_matches_torch_autograd():
    torch = pytest.importorskip("torch")
    theta = random_normal((2, 2, 3), seed=9)
    grad = random_normal((2, 4, 5, 2), seed=10)
    t = torch.from_numpy(theta).requires_grad_(True)
    torch.nn.functional.affine_grid(t, [2, 3, 4, 5], align_corners=False).backward(torch.from_numpy(grad))
    dtheta, dsize = create_operator("AffineGrid", {}).backward([grad], [theta, np.array([2, 3, 4, 5])], None)
    np.testing.assert_allclose(dtheta, t.grad.numpy(), rtol=1e-12)
    assert dsize is None


def test_affine_grid_rejects_mismatched_theta():
    with pytest.raises(ShapeError, match="theta of shape"):
        create_operator("AffineGrid", {}).forward([np.zeros((1, 3, 4)), np.array([1, 1, 4, 4])])


@pytest.mark.parametrize("attributes", [
    {"mode": "linear"},
    {"mode": "cubic", "coordinate_transformation_mode": "align_corners"},
    {"mode": "linear", "antialias": 1},
    {"mode": "nearest"},
])
def test_resize_gradient_matches_finite_differences(attributes):
    x = random_normal((1, 2, 4, 5))
    for scales in (np.array([1.0, 1.0, 2.0, 1.5]), np.array([1.0, 1.0, 0.5, 0.6])):
        result = check_gradient(create_operator("Resize", attributes), [x, None, scales], wrt=[0])
        assert result.passed, (scales, result)


ROIS = np.array([[0.0, 0.0, 9.0, 9.0], [0.0, 5.0, 4.0, 9.0], [5.0, 5.0, 9.0, 9.0], [2.2, 1.3, 7.9, 3.1],
                 [-3.0, -2.0, 12.5, 11.0], [4.0, 4.0, 4.0, 4.0]], np.float32)


@pytest.mark.parametrize("attributes", [
    {"output_height": 5, "output_width": 5, "sampling_ratio": 2},
    {"output_height": 3, "output_width": 4, "sampling_ratio": 0, "coordinate_transformation_mode": "output_half_pixel"},
    {"output_height": 2, "output_width": 3, "spatial_scale": 0.5},
    {"output_height": 4, "output_width": 2, "sampling_ratio": 3, "mode": "max",
     "coordinate_transformation_mode": "output_half_pixel"},
    {"output_height": 3, "output_width": 3, "mode": "max"},
])
def test_roi_align_matches_onnxruntime(attributes):
    x = random_normal((2, 3, 10, 12)).astype(np.float32)
    batch_indices = np.array([0, 1, 1, 0, 1, 0], np.int64)
    assert_same(d5_outputs("RoiAlign", [x, ROIS, batch_indices], attributes),
                onnxruntime_outputs("RoiAlign", [x, ROIS, batch_indices], 1, attributes, opset=16),
                rtol=1e-4, atol=1e-5)


def test_roi_align_bad_inputs_raise_shape_errors():
    op = create_operator("RoiAlign", {})
    with pytest.raises(ShapeError, match="4-D"):
        op.forward([np.zeros((3, 4, 5)), ROIS, np.zeros(len(ROIS), np.int64)])
    with pytest.raises(ShapeError, match=r"\(num_rois, 4\)"):
        op.forward([np.zeros((1, 1, 4, 5)), ROIS[:, :3], np.zeros(len(ROIS), np.int64)])
    with pytest.raises(ShapeError, match="batch_indices must lie"):
        op.forward([np.zeros((1, 1, 4, 5)), ROIS, np.ones(len(ROIS), np.int64)])
    with pytest.raises(ShapeError, match="mode"):
        create_operator("RoiAlign", {"mode": "sum"})


def _nms_inputs(rng, center, grid):
    """Random boxes and scores. ``grid`` puts corners on a small integer grid and scores on a few levels, so
    that IoUs land exactly on thresholds and scores tie (where the order of decisions matters)."""
    batches, classes, count = 2, 3, 70
    if grid:
        boxes = rng.integers(0, 8, (batches, count, 4)).astype(np.float32)
        scores = rng.integers(0, 5, (batches, classes, count)).astype(np.float32) / 4
    else:
        boxes = (rng.random((batches, count, 4)) * 10).astype(np.float32)
        scores = rng.random((batches, classes, count)).astype(np.float32)
    if center:  # [x_center, y_center, width, height]; a few zero-size boxes
        boxes[..., 2:] = np.abs(boxes[..., 2:] - boxes[..., :2]) / 2
    return boxes, scores


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("center", [0, 1])
@pytest.mark.parametrize("grid", [False, True])
@pytest.mark.parametrize("thresholds", [(), (0.0,), (0.5,), (1 / 3, 0.3), (0.7, 0.6)])
def test_nms_matches_onnxruntime(seed, center, grid, thresholds):
    rng = np.random.default_rng(seed)
    boxes, scores = _nms_inputs(rng, center, grid)
    max_boxes = np.array([rng.integers(1, 40) if seed else 1000], np.int64)
    inputs = [boxes, scores, max_boxes] + [np.array([t], np.float32) for t in thresholds]
    expected = onnxruntime_outputs("NonMaxSuppression", inputs, 1, {"center_point_box": center}, opset=11)[0]
    actual = create_operator("NonMaxSuppression", {"center_point_box": center}).forward(inputs)
    assert actual.dtype == np.int64
    np.testing.assert_array_equal(actual, expected)


@pytest.mark.parametrize("seed", [3, 4])
def test_nms_blocks_do_not_change_the_selection(seed, monkeypatch):
    # Tiny blocks and pair budgets put many block boundaries between boxes that suppress each other.
    rng = np.random.default_rng(seed)
    boxes, scores = _nms_inputs(rng, 0, grid=True)
    inputs = [boxes, scores, np.array([1000]), np.array([0.25], np.float32)]
    expected = create_operator("NonMaxSuppression", {}).forward(inputs)
    monkeypatch.setattr(NonMaxSuppression, "_BLOCK", 3)
    monkeypatch.setattr(NonMaxSuppression, "_PAIRS", 5)
    np.testing.assert_array_equal(create_operator("NonMaxSuppression", {}).forward(inputs), expected)
    np.testing.assert_array_equal(expected, onnxruntime_outputs("NonMaxSuppression", inputs, 1, {}, opset=11)[0])


def test_nms_without_max_output_selects_nothing():
    boxes, scores = _nms_inputs(np.random.default_rng(5), 0, grid=False)
    out = create_operator("NonMaxSuppression", {}).forward([boxes, scores])
    assert out.shape == (0, 3) and out.dtype == np.int64


@pytest.mark.parametrize("inputs, message", [
    ([np.zeros((1, 3, 4)), np.zeros((1, 2, 4))], r"boxes must be \(B, N, 4\) and scores \(B, C, N\)"),
    ([np.zeros((1, 3, 5)), np.zeros((1, 2, 3))], r"boxes must be \(B, N, 4\)"),
    ([np.zeros((1, 3, 4)), np.zeros((1, 2, 3)), np.array([1]), np.array([1.5])], r"iou_threshold must be in \[0, 1\]"),
    ([np.zeros((1, 3, 4)), np.zeros((1, 2, 3)), np.array([1, 2])], r"max_output_boxes_per_class .* single value"),
    ([np.zeros((1, 3, 4)).astype(str), np.zeros((1, 2, 3))], r"boxes and scores must be float tensors"),
])
def test_bad_nms_inputs_are_shape_errors(inputs, message):
    with pytest.raises(ShapeError, match=message):
        create_operator("NonMaxSuppression", {}).forward(inputs)


def test_nms_rejects_an_unknown_box_format():
    with pytest.raises(ShapeError, match="center_point_box must be 0 or 1"):
        create_operator("NonMaxSuppression", {"center_point_box": 2})
