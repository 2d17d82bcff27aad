"""ScatterElements / ScatterND (forward against onnxruntime, gradients against finite differences, index checks)
and the vectorized NonMaxSuppression (against onnxruntime, both box formats, with and without thresholds)."""
import numpy as np
import pytest
from onnx import TensorProto, helper

from d5.errors import ShapeError, UnsupportedOperatorError
from d5.frameworks.reference.operators import create_operator
from d5.frameworks.reference.operators.integer_ops import NonMaxSuppression
from d5.ops.validation import test_gradient as check_gradient

ort = pytest.importorskip("onnxruntime")

_ELEMENT_TYPES = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float64): TensorProto.DOUBLE,
                  np.dtype(np.int64): TensorProto.INT64}


def _onnxruntime(op_type, attributes, inputs, output_type, opset=18):
    """Outputs of a one-node model of ``op_type`` run by onnxruntime (inputs: arrays)."""
    names = [f"in{i}" for i in range(len(inputs))]
    node = helper.make_node(op_type, names, ["out"], **attributes)
    graph = helper.make_graph([node], "one_node",
                              [helper.make_tensor_value_info(n, _ELEMENT_TYPES[a.dtype], a.shape)
                               for n, a in zip(names, inputs)],
                              [helper.make_tensor_value_info("out", output_type, None)])
    # onnx may write a newer IR version than this onnxruntime reads.
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, dict(zip(names, inputs)))[0]


# ------------------------------------------------------------------------------------------------ Scatter

def _scatter_elements_case(rng, axis, unique):
    data = rng.standard_normal((4, 5, 3)).astype(np.float32)
    shape = [3, 4, 2]
    shape[axis] = data.shape[axis] if unique else 6
    if unique:  # a permutation along the axis: no position written twice
        indices = np.argsort(rng.random(shape), axis=axis)[tuple(slice(0, n) for n in shape)]
    else:
        indices = rng.integers(0, data.shape[axis], shape)
    indices = np.where(rng.random(shape) < 0.5, indices - data.shape[axis], indices)  # negative indices wrap once
    return data, indices.astype(np.int64), rng.standard_normal(shape).astype(np.float32)


def _scatter_nd_case(rng, depth, unique):
    data = rng.standard_normal((4, 3, 5)).astype(np.float32)
    count = 3 if unique else 6
    flat = rng.permutation(int(np.prod(data.shape[:depth])))[:count] if unique else \
        rng.integers(0, int(np.prod(data.shape[:depth])), count)
    indices = np.stack(np.unravel_index(flat, data.shape[:depth]), axis=-1)
    indices = np.where(rng.random(indices.shape) < 0.5, indices - np.array(data.shape[:depth]), indices)
    updates = rng.standard_normal((count,) + data.shape[depth:]).astype(np.float32)
    return data, indices.astype(np.int64), updates


def _case(op_type, where, rng, unique):
    return (_scatter_elements_case if op_type == "ScatterElements" else _scatter_nd_case)(rng, where, unique)


def _attributes(op_type, where, reduction):
    attributes = {"axis": where} if op_type == "ScatterElements" else {}
    return {**attributes, "reduction": reduction}


_CASES = [("ScatterElements", 0), ("ScatterElements", 1), ("ScatterElements", 2), ("ScatterND", 1),
          ("ScatterND", 2), ("ScatterND", 3)]


@pytest.mark.parametrize("op_type, where", _CASES)
@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize("seed", [0, 1])
def test_scatter_forward_matches_onnxruntime(op_type, where, reduction, seed):
    # Repeated indices have no defined result without a reduction, so 'none' writes every position once.
    inputs = _case(op_type, where, np.random.default_rng(seed), unique=reduction == "none")
    attributes = _attributes(op_type, where, reduction)
    expected = _onnxruntime(op_type, attributes, list(inputs), TensorProto.FLOAT)
    np.testing.assert_array_equal(create_operator(op_type, attributes).forward(list(inputs)), expected)


def test_the_old_scatter_alias_writes_like_scatter_elements():
    data, indices, updates = _scatter_elements_case(np.random.default_rng(2), 1, unique=True)
    expected = _onnxruntime("Scatter", {"axis": 1}, [data, indices, updates], TensorProto.FLOAT, opset=10)
    np.testing.assert_array_equal(create_operator("Scatter", {"axis": 1}).forward([data, indices, updates]), expected)


@pytest.mark.parametrize("op_type, where", _CASES)
@pytest.mark.parametrize("reduction", ["none", "add"])
@pytest.mark.parametrize("unique", [True, False])
def test_scatter_gradients_match_finite_differences(op_type, where, reduction, unique):
    # With repeated indices and no reduction the last write wins: only its update gets a gradient.
    data, indices, updates = _case(op_type, where, np.random.default_rng(3), unique)
    op = create_operator(op_type, _attributes(op_type, where, reduction))
    result = check_gradient(op, [data.astype(np.float64), indices, updates.astype(np.float64)])
    assert result.passed, result.summary()
    assert [check.index for check in result.inputs] == [0, 2]


def test_scatter_gradients_honour_the_executors_hint():
    data, indices, updates = _scatter_nd_case(np.random.default_rng(4), 2, unique=True)
    op = create_operator("ScatterND", {})
    op.input_grad_required = (False, False, True)  # data is a constant (a ConstantOfShape, say)
    grad_data, grad_indices, grad_updates = op.backward([np.ones_like(data)], [data, indices, updates], [None])
    assert grad_data is None and grad_indices is None
    np.testing.assert_array_equal(grad_updates, np.ones_like(updates))


@pytest.mark.parametrize("reduction", ["mul", "max", "min"])
def test_scatter_reductions_without_gradient_say_so(reduction):
    data, indices, updates = _scatter_nd_case(np.random.default_rng(5), 1, unique=True)
    op = create_operator("ScatterND", {"reduction": reduction})
    out = op.forward([data, indices, updates])
    with pytest.raises(UnsupportedOperatorError, match=f"ScatterND with reduction='{reduction}' has no gradient"):
        op.backward([np.ones_like(out)], [data, indices, updates], [out])


@pytest.mark.parametrize("op_type, attributes, indices, updates, message", [
    ("ScatterElements", {"axis": 1}, [[0, 5]], [[1.0, 2.0]], r"ScatterElements: index 5 .* axis 1 .* size 5"),
    ("ScatterElements", {"axis": -1}, [[-6]], [[1.0]], r"ScatterElements: index -6 .* axis 1 .* \[-5, 4\]"),
    ("ScatterElements", {"axis": 0}, [[0, 1, 2, 3, 4, 0]], [[1.0] * 6], r"no larger dimensions"),
    ("ScatterElements", {"axis": 0}, [0, 1], [1.0, 2.0], r"rank of data"),
    ("ScatterElements", {"axis": 0}, [[0, 1]], [[1.0]], r"updates must have shape \(1, 2\)"),
    ("ScatterElements", {"axis": 0}, [[0.0]], [[1.0]], r"indices must be int32 or int64"),
    ("ScatterND", {}, [[1, 7]], [1.0], r"ScatterND: index 7 .* axis 1 .* size 5"),
    ("ScatterND", {}, [[-3]], [[1.0] * 5], r"ScatterND: index -3 .* axis 0 .* size 2"),
    ("ScatterND", {}, [[0, 0, 0]], [1.0], r"from 1 to data's rank 2"),
    ("ScatterND", {}, np.zeros((2, 0)), np.zeros((2, 2, 5)), r"last length \(here 0\)"),
    ("ScatterND", {}, [[0]], [1.0], r"updates must have shape \(1, 5\)"),
])
def test_bad_scatter_indices_are_shape_errors(op_type, attributes, indices, updates, message):
    data = np.zeros((2, 5), np.float32)
    indices = np.array(indices)
    indices = indices if indices.dtype.kind == "f" and indices.size else indices.astype(np.int64)
    op = create_operator(op_type, attributes)
    with pytest.raises(ShapeError, match=message):
        op.forward([data, indices, np.array(updates, np.float32)])


@pytest.mark.parametrize("op_type", ["ScatterElements", "ScatterND"])
def test_scatter_needs_data_of_rank_one_and_all_three_inputs(op_type):
    op = create_operator(op_type, {})
    with pytest.raises(ShapeError, match=f"{op_type}: data must have at least 1 dimension"):
        op.forward([np.array(1.0), np.zeros((1, 0), np.int64), np.array([2.0])])
    with pytest.raises(ShapeError, match=r"three inputs \(data, indices, updates\), got \(shape \(3,\), absent"):
        op.forward([np.zeros(3), None, np.zeros(1)])


# -------------------------------------------------------------------------------------- NonMaxSuppression

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
    expected = _onnxruntime("NonMaxSuppression", {"center_point_box": center}, inputs, TensorProto.INT64, opset=11)
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
    np.testing.assert_array_equal(expected, _onnxruntime("NonMaxSuppression", {}, inputs, TensorProto.INT64, opset=11))


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
