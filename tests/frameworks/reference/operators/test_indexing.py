"""Indexing operators (Gather*, Scatter*, TensorScatter, OneHot, Unique): op-specific checks."""
from __future__ import annotations

import numpy as np
import pytest

import d5
from d5.errors import ShapeError, UnsupportedOperatorError
from d5.frameworks.reference.operators import create_operator
from d5.ops.validation import test_gradient as check_gradient
from _helpers import assert_same, d5_outputs, onnx_reference_outputs, onnxruntime_outputs, random_normal

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402


def test_integer_inputs_get_no_gradient():
    gather = create_operator("Gather", {"axis": 0})
    x, indices = random_normal((4, 2)), np.array([1, 3], dtype=np.int64)
    grad_x, grad_indices = gather.backward([np.ones((2, 2))], [x, indices], [gather.forward([x, indices])])
    assert grad_indices is None
    np.testing.assert_array_equal(grad_x, [[0, 0], [1, 1], [0, 0], [1, 1]])
    cast = create_operator("Cast", {"to": onnx.TensorProto.INT64})
    assert cast.backward([np.ones(3)], [np.ones(3)], [np.ones(3, np.int64)]) is None


@pytest.mark.parametrize("axis, indices", [(-1, np.array([[0, 2], [3, -1]])), (0, np.array([1, 5, -4]))])
def test_one_hot_values_gradient_matches_finite_differences(axis, indices):
    # The output is off_value or on_value element by element: linear in values (index 5 is out of range: all off).
    op = create_operator("OneHot", {"axis": axis})
    inputs = [indices, np.array(4), np.array([0.25, -1.5])]
    result = check_gradient(op, inputs)
    assert result.passed, result
    assert [check.index for check in result.inputs] == [2]
    dy = random_normal(op.forward(inputs).shape, seed=3)
    grad_indices, grad_depth, grad_values = op.backward([dy], inputs, None)
    hot = op.forward([indices, np.array(4), np.array([0.0, 1.0])]).astype(bool)
    assert grad_indices is None and grad_depth is None
    np.testing.assert_allclose(grad_values, [dy[~hot].sum(), dy[hot].sum()])


def test_one_hot_with_trainable_values_trains_end_to_end():
    # Once refused: "OneHot has no gradient" for a model that learns its off/on values.
    import d5
    from d5.frameworks import reference

    net = d5.Network()
    net.add_input("labels", ("N",), "int64")
    net.add_param("depth", np.array(3, np.int64), trainable=False)
    net.add_param("values", np.array([0.1, 0.9], np.float32))
    net.add_input("target", ("N", 3))
    net.add_node("OneHot", ["labels", "depth", "values"], ["encoded"])
    net.add_node("MeanSquaredError", ["encoded", "target"], ["loss"])
    net.add_output("loss")
    executor = reference.from_model(net)
    labels, target = np.array([0, 2, 1, 2]), np.zeros((4, 3), np.float32)
    executor.inference_and_backprop({"labels": labels, "target": target})
    (grad,) = executor.network.fetch_tensors(["values_grad"])
    # d loss / d values for loss = mean((encoded - 0)^2) over 12 elements: 8 off, 4 on.
    assert grad.dtype == np.float32
    np.testing.assert_allclose(grad, [8 * 2 * 0.1 / 12, 4 * 2 * 0.9 / 12], rtol=1e-6)


def test_gathernd_of_a_full_index_is_a_scalar_like_onnxruntime():
    from onnx import helper, TensorProto
    ort = pytest.importorskip("onnxruntime")
    data, indices = np.arange(6.0, dtype=np.float32).reshape(2, 3), np.array([1, 2], np.int64)
    graph = helper.make_graph([helper.make_node("GatherND", ["d", "i"], ["y"])], "g",
                              [helper.make_tensor_value_info("d", TensorProto.FLOAT, [2, 3]),
                               helper.make_tensor_value_info("i", TensorProto.INT64, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    expected, = ort.InferenceSession(model.SerializeToString()).run(None, {"d": data, "i": indices})
    got = create_operator("GatherND", {}).forward([data, indices])
    assert got.shape == expected.shape == ()
    assert got == expected == 5.0


def test_unique_unsorted_with_axis_matches_onnx_reference():
    x = np.array([[3, 1], [0, 2], [3, 1], [0, 2], [1, 1]], np.int64)
    got = create_operator("Unique", {"axis": 0, "sorted": 0}).forward([x])
    want = onnx_reference_outputs("Unique", [x], 4, {"axis": 0, "sorted": 0})
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("attributes, cache_shape, update_shape, indices", [
    ({}, (2, 1, 4, 5), (2, 1, 1, 5), [1, 3]),
    ({"mode": "circular"}, (2, 1, 4, 5), (2, 1, 3, 5), [2, 3]),
    ({"axis": 1}, (3, 4, 5), (3, 2, 5), [0, 2, 1]),
    ({"axis": 2, "mode": "circular"}, (2, 3, 4), (2, 3, 4), [5, 1]),
    ({}, (2, 6, 3), (2, 2, 3), None),
])
def test_tensor_scatter_matches_onnx_reference(attributes, cache_shape, update_shape, indices):
    cache, update = random_normal(cache_shape).astype(np.float32), random_normal(update_shape, 1).astype(np.float32)
    inputs = [cache, update] + ([] if indices is None else [np.array(indices, np.int64)])
    assert_same(d5_outputs("TensorScatter", inputs, attributes),
                onnx_reference_outputs("TensorScatter", inputs, 1, attributes, opset=24))


@pytest.mark.parametrize("attributes, indices", [({}, [1, 2]), ({"mode": "circular"}, [3, 5])])
def test_tensor_scatter_gradient_matches_finite_differences(attributes, indices):
    inputs = [random_normal((2, 3, 4, 2)), random_normal((2, 3, 2, 2), 1), np.array(indices, np.int64)]
    result = check_gradient(create_operator("TensorScatter", attributes), inputs)
    assert result.passed, result


@pytest.mark.parametrize("attributes, shapes, indices, match", [
    ({}, ((2, 4, 3), (2, 2, 3)), [3, 0], "exceeds the cache length"),
    ({}, ((2, 4, 3), (2, 5, 3)), [0, 0], "may not be longer"),
    ({}, ((2, 4, 3), (2, 2, 2)), [0, 0], "except along axis"),
    ({"axis": 0}, ((2, 4, 3), (2, 4, 3)), [0, 0], "batch axis"),
    ({"axis": 3}, ((2, 4, 3), (2, 4, 3)), [0, 0], "out of range"),
    ({}, ((2, 4, 3), (2, 2, 3)), [0, 0, 0], r"shape \(2,\)"),
])
def test_tensor_scatter_bad_inputs_raise_shape_errors(attributes, shapes, indices, match):
    with pytest.raises(ShapeError, match=match):
        create_operator("TensorScatter", attributes).forward([np.zeros(shapes[0]), np.ones(shapes[1]),
                                                              np.array(indices, np.int64)])
    with pytest.raises(ShapeError, match="mode"):
        create_operator("TensorScatter", {"mode": "ring"})


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
    expected = onnxruntime_outputs(op_type, list(inputs), 1, attributes, opset=18)[0]
    np.testing.assert_array_equal(create_operator(op_type, attributes).forward(list(inputs)), expected)


def test_the_old_scatter_alias_writes_like_scatter_elements():
    data, indices, updates = _scatter_elements_case(np.random.default_rng(2), 1, unique=True)
    expected = onnxruntime_outputs("Scatter", [data, indices, updates], 1, {"axis": 1}, opset=10)[0]
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
