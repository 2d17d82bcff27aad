"""Reference operators that filled gaps in ONNX's node cases: ReduceLogSum, Range's stash_type, RNN's default
activations, GlobalMaxPool, AffineGrid and integer MaxPool.

Forward against independent oracles (onnxruntime on a one-node model, onnx.reference, PyTorch), backward
against finite differences (d5.ops.validation.test_gradient), and the ONNX node cases themselves.
"""
import numpy as np
import pytest

from d5.bench.conformance import failures, uncovered_operators, run_conformance
from d5.errors import ShapeError
from d5.frameworks.reference.operators import create_operator
from d5.ops import as_tuple
from d5.ops.validation import test_gradient as check_gradient

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

NODE_CASES = (
    "test_reduce_log_sum_desc_axes", "test_reduce_log_sum_asc_axes", "test_reduce_log_sum_default",
    "test_reduce_log_sum_negative_axes", "test_reduce_log_sum_empty_set",
    "test_range_float_type_positive_delta", "test_range_float16_type_positive_delta",
    "test_range_bfloat16_type_positive_delta", "test_range_int32_type_negative_delta",
    "test_simple_rnn_defaults", "test_simple_rnn_with_initial_bias", "test_rnn_seq_length",
    "test_simple_rnn_batchwise", "test_simple_rnn_reverse", "test_simple_rnn_bidirectional",
    "test_globalmaxpool", "test_affine_grid_2d", "test_affine_grid_3d", "test_maxpool_2d_uint8",
)
OWN_OPERATORS = {"ReduceLogSum", "Range", "RNN", "GlobalMaxPool", "AffineGrid", "MaxPool"}


def _random(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def _positive(shape, seed=0):
    return np.random.default_rng(seed).uniform(0.5, 2.0, shape)


def _run_onnxruntime(op_type, attributes, inputs, opset, n_outputs=1):
    """Run a one-node ONNX model of ``op_type`` with onnxruntime; ``inputs`` are arrays (None: omitted)."""
    ort = pytest.importorskip("onnxruntime")
    names = [f"in{i}" if value is not None else "" for i, value in enumerate(inputs)]
    outputs = [f"out{k}" for k in range(n_outputs)]
    node = helper.make_node(op_type, names, outputs, **attributes)
    graph_inputs = [helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(value.dtype), value.shape)
                    for name, value in zip(names, inputs) if value is not None]
    # Every output here has the first input's element type.
    elem_type = helper.np_dtype_to_tensor_dtype(inputs[0].dtype)
    graph_outputs = [helper.make_tensor_value_info(name, elem_type, None) for name in outputs]
    model = helper.make_model(helper.make_graph([node], "one_node", graph_inputs, graph_outputs),
                              opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {name: value for name, value in zip(names, inputs) if value is not None})


def _run_onnx_reference(op_type, attributes, inputs, opset):
    """Run a one-node ONNX model of ``op_type`` with onnx.reference.ReferenceEvaluator."""
    from onnx.reference import ReferenceEvaluator

    names = [f"in{i}" for i in range(len(inputs))]
    node = helper.make_node(op_type, names, ["out"], **attributes)
    graph_inputs = [helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(value.dtype), value.shape)
                    for name, value in zip(names, inputs)]
    graph = helper.make_graph([node], "one_node", graph_inputs,
                              [helper.make_tensor_value_info("out", TensorProto.UNDEFINED, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return ReferenceEvaluator(model).run(None, dict(zip(names, inputs)))


def _forward(op_type, attributes, inputs):
    return as_tuple(create_operator(op_type, attributes).forward(inputs))


# ------------------------------------------------------------------------------------------ node cases

@pytest.fixture(scope="module")
def results():
    return run_conformance(kinds=("node",), patterns=NODE_CASES, progress=False)


def test_onnx_node_cases_pass_with_d5_operators(results):
    judged = [r for r in results if r.status != "excluded" and not r.name.endswith("_expanded")]
    assert len(judged) >= 22
    failing = failures(judged)
    assert not failing, "\n".join(failing)


def test_every_operator_is_covered(results):
    missing = uncovered_operators(results, OWN_OPERATORS)
    assert not missing, missing


# ---------------------------------------------------------------------------------------- ReduceLogSum

@pytest.mark.parametrize("axes, keepdims", [([1], 1), ([0, 2], 0), ([-1], 1), (None, 0), (None, 1)])
def test_reduce_log_sum_matches_onnxruntime(axes, keepdims):
    x = _positive((3, 4, 5)).astype(np.float32)
    axes_input = None if axes is None else np.array(axes, np.int64)
    expected = _run_onnxruntime("ReduceLogSum", {"keepdims": keepdims}, [x, axes_input], opset=18)[0]
    inputs = [x] if axes_input is None else [x, axes_input]
    actual = _forward("ReduceLogSum", {"keepdims": keepdims}, inputs)[0]
    assert actual.dtype == np.float32 and actual.shape == expected.shape
    np.testing.assert_allclose(actual, expected, rtol=1e-6)


def test_reduce_log_sum_axes_attribute_matches_onnx_reference():
    # Before opset 18 the axes are an attribute.
    x = _positive((2, 3, 4))
    expected = _run_onnx_reference("ReduceLogSum", {"axes": [0, 2], "keepdims": 0}, [x], opset=13)[0]
    np.testing.assert_allclose(_forward("ReduceLogSum", {"axes": [0, 2], "keepdims": 0}, [x])[0], expected)


def test_reduce_log_sum_noop_and_empty_set():
    x = _positive((2, 3))
    assert _forward("ReduceLogSum", {"noop_with_empty_axes": 1}, [x])[0] is x
    empty = np.zeros((2, 0, 4), np.float32)
    out = _forward("ReduceLogSum", {"keepdims": 0}, [empty, np.array([1])])[0]
    assert out.shape == (2, 4) and np.all(out == -np.inf)


@pytest.mark.parametrize("attributes, inputs", [
    ({"axes": [1]}, [_positive((3, 4, 5))]),
    ({"keepdims": 0}, [_positive((3, 4, 5)), np.array([0, -1])]),
    ({}, [_positive((3, 4))]),
    ({"noop_with_empty_axes": 1}, [_positive((3, 4))]),
])
def test_reduce_log_sum_gradient(attributes, inputs):
    result = check_gradient(create_operator("ReduceLogSum", attributes), inputs)
    assert result.passed, result


# ---------------------------------------------------------------------------------------------- Range

@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("stash_type", [1, 11])
def test_range_stash_type_matches_onnx_reference(dtype, stash_type):
    import ml_dtypes

    np_dtype = np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)
    # Past 2048 (float16) / 256 (bfloat16) consecutive integers are not representable: computing in the
    # narrow type and in float32 round differently.
    start, limit, delta = (np.array(v, dtype=np_dtype) for v in (1.0, 3000.0, 1.5))
    expected = _run_onnx_reference("Range", {"stash_type": stash_type}, [start, limit, delta], opset=27)[0]
    actual = _forward("Range", {"stash_type": stash_type}, [start, limit, delta])[0]
    assert actual.dtype == np_dtype and actual.shape == expected.shape
    np.testing.assert_array_equal(actual.astype(np.float64), expected.astype(np.float64))
    exact = (1.0 + np.arange(len(actual)) * 1.5).astype(np_dtype)
    np.testing.assert_array_equal(actual.astype(np.float64), exact.astype(np.float64))


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float32, np.float64])
def test_range_stash_type_has_no_effect_on_other_types(dtype):
    start, limit, delta = np.array(10, dtype), np.array(-7, dtype), np.array(-3, dtype)
    expected = _run_onnx_reference("Range", {"stash_type": 1}, [start, limit, delta], opset=27)[0]
    actual = _forward("Range", {"stash_type": 1}, [start, limit, delta])[0]
    assert actual.dtype == expected.dtype
    np.testing.assert_array_equal(actual, expected)
    np.testing.assert_array_equal(actual, _forward("Range", {}, [start, limit, delta])[0])


def test_range_rejects_unknown_stash_type():
    with pytest.raises(ShapeError, match="stash_type must be 1"):
        create_operator("Range", {"stash_type": 10})


# ------------------------------------------------------------------------------------------------ RNN

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
        y, y_h = _run_onnxruntime("RNN", attributes, [inputs[0].transpose(1, 0, 2)] + inputs[1:], opset=14,
                                  n_outputs=2)
        expected = [y.transpose(2, 0, 1, 3), y_h.transpose(1, 0, 2)]
    else:
        expected = _run_onnxruntime("RNN", attributes, inputs, opset=14, n_outputs=2)
    actual = _forward("RNN", {**attributes, "layout": layout, "activations": ["Tanh", "Tanh"]}, inputs)
    for a, e in zip(actual, expected):
        assert a.shape == e.shape and a.dtype == e.dtype
        np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-6)


def test_rnn_uses_the_first_activation_set_of_a_one_direction_layer():
    inputs = _rnn_inputs("forward")
    attributes = {"hidden_size": 2, "activations": ["Relu", "Tanh"]}
    expected = _run_onnxruntime("RNN", {"hidden_size": 2, "activations": ["Relu"]}, inputs, opset=14, n_outputs=2)
    for a, e in zip(_forward("RNN", attributes, inputs), expected):
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


# -------------------------------------------------------------------------------------- GlobalMaxPool

@pytest.mark.parametrize("shape", [(2, 3, 7), (2, 3, 4, 5), (1, 2, 3, 4, 2)])
def test_global_max_pool_matches_onnxruntime(shape):
    x = _random(shape).astype(np.float32)
    expected = _run_onnxruntime("GlobalMaxPool", {}, [x], opset=22)[0]
    actual = _forward("GlobalMaxPool", {}, [x])[0]
    assert actual.dtype == np.float32 and actual.shape == expected.shape
    np.testing.assert_array_equal(actual, expected)


@pytest.mark.parametrize("shape", [(2, 3, 7), (2, 3, 4, 5), (1, 2, 3, 4, 2)])
def test_global_max_pool_gradient(shape):
    result = check_gradient(create_operator("GlobalMaxPool", {}), [_random(shape, seed=3)])
    assert result.passed, result


def test_global_max_pool_gradient_goes_to_the_first_tied_maximum():
    x = np.array([[[[1.0, 5.0], [5.0, 2.0]], [[7.0, 7.0], [7.0, 7.0]], [[0.0, np.nan], [3.0, np.nan]]]])
    op = create_operator("GlobalMaxPool", {})
    y = op.forward([x])
    assert y[0, :2].ravel().tolist() == [5.0, 7.0] and np.isnan(y[0, 2, 0, 0])
    dy = np.array([2.0, 3.0, 4.0]).reshape(1, 3, 1, 1)
    dx = op.backward([dy], [x], [y])
    np.testing.assert_array_equal(dx[0], [[[0.0, 2.0], [0.0, 0.0]], [[3.0, 0.0], [0.0, 0.0]],
                                          [[0.0, 4.0], [0.0, 0.0]]])


def test_global_max_pool_rejects_bad_shapes():
    with pytest.raises(ShapeError, match="spatial"):
        create_operator("GlobalMaxPool", {}).forward([np.zeros((2, 3))])


# ----------------------------------------------------------------------------------------- AffineGrid

@pytest.mark.filterwarnings("ignore:Since version 1.3.0, affine_grid behavior has changed")
@pytest.mark.parametrize("size", [(2, 3, 4, 5), (2, 1, 3, 4, 2), (1, 2, 1, 3), (1, 1, 1, 1, 4)])
@pytest.mark.parametrize("align_corners", [0, 1])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_affine_grid_matches_torch(size, align_corners, dtype):
    torch = pytest.importorskip("torch")
    ndim = len(size) - 2
    theta = _random((size[0], ndim, ndim + 1), seed=len(size)).astype(dtype)
    expected = torch.nn.functional.affine_grid(torch.from_numpy(theta), list(size),
                                               align_corners=bool(align_corners)).numpy()
    actual = _forward("AffineGrid", {"align_corners": align_corners}, [theta, np.array(size, np.int64)])[0]
    assert actual.dtype == dtype and actual.shape == expected.shape
    np.testing.assert_allclose(actual, expected, rtol=1e-6 if dtype == np.float64 else 1e-5, atol=1e-6)


@pytest.mark.parametrize("size", [(2, 3, 4, 5), (2, 1, 3, 4, 2)])
@pytest.mark.parametrize("align_corners", [0, 1])
def test_affine_grid_matches_onnxruntime(size, align_corners):
    ndim = len(size) - 2
    theta = _random((size[0], ndim, ndim + 1), seed=5).astype(np.float32)
    inputs = [theta, np.array(size, np.int64)]
    expected = _run_onnxruntime("AffineGrid", {"align_corners": align_corners}, inputs, opset=20)[0]
    np.testing.assert_allclose(_forward("AffineGrid", {"align_corners": align_corners}, inputs)[0], expected,
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("size", [(2, 3, 4, 5), (2, 1, 3, 4, 2)])
@pytest.mark.parametrize("align_corners", [0, 1])
def test_affine_grid_gradient(size, align_corners):
    ndim = len(size) - 2
    inputs = [_random((size[0], ndim, ndim + 1), seed=7), np.array(size, np.int64)]
    op = create_operator("AffineGrid", {"align_corners": align_corners})
    result = check_gradient(op, inputs)
    assert result.passed, result
    assert op.backward([np.ones((size[0],) + size[2:] + (ndim,))], inputs, None)[1] is None


def test_affine_grid_gradient_matches_torch_autograd():
    torch = pytest.importorskip("torch")
    theta = _random((2, 2, 3), seed=9)
    grad = _random((2, 4, 5, 2), seed=10)
    t = torch.from_numpy(theta).requires_grad_(True)
    torch.nn.functional.affine_grid(t, [2, 3, 4, 5], align_corners=False).backward(torch.from_numpy(grad))
    dtheta, dsize = create_operator("AffineGrid", {}).backward([grad], [theta, np.array([2, 3, 4, 5])], None)
    np.testing.assert_allclose(dtheta, t.grad.numpy(), rtol=1e-12)
    assert dsize is None


def test_affine_grid_rejects_mismatched_theta():
    with pytest.raises(ShapeError, match="theta of shape"):
        create_operator("AffineGrid", {}).forward([np.zeros((1, 3, 4)), np.array([1, 1, 4, 4])])


# -------------------------------------------------------------------------------------- integer MaxPool

@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("attributes", [
    {"kernel_shape": [2, 2]},
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
    {"kernel_shape": [2, 3], "dilations": [2, 1], "ceil_mode": 1, "strides": [2, 2]},
])
def test_integer_max_pool_matches_onnxruntime(dtype, attributes):
    info = np.iinfo(dtype)
    x = np.random.default_rng(0).integers(info.min, info.max, (2, 3, 7, 6), endpoint=True).astype(dtype)
    expected = _run_onnxruntime("MaxPool", attributes, [x], opset=22)[0]
    y, indices = _forward("MaxPool", attributes, [x])
    assert y.dtype == dtype and y.shape == expected.shape
    np.testing.assert_array_equal(y, expected)
    # The indices are those of the same values pooled as floats.
    np.testing.assert_array_equal(indices, _forward("MaxPool", attributes, [x.astype(np.float64)])[1])


def test_integer_max_pool_1d_and_padding_only_windows():
    x = np.array([[[3, 1, 4, 1, 5]]], dtype=np.int8)
    y, _ = _forward("MaxPool", {"kernel_shape": [2], "strides": [2], "pads": [0, 2]}, [x])
    assert y.dtype == np.int8 and y.tolist() == [[[3, 4, 5]]]
    y, indices = _forward("MaxPool", {"kernel_shape": [1], "strides": [1], "pads": [0, 1]}, [x])
    assert y.tolist() == [[[3, 1, 4, 1, 5, -128]]] and indices[0, 0, -1] == -1


# ------------------------------------------------------------------------------ PRelu per-channel slope

@pytest.mark.parametrize("shape", [(2, 3, 4), (2, 3, 4, 5), (1, 3, 2, 2, 2)])
def test_prelu_per_channel_slope_matches_torch_prelu(shape):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    x, slope, dy = rng.normal(size=shape), rng.uniform(0.1, 0.5, 3), rng.normal(size=shape)
    op = create_operator("PRelu", {})
    y = op.forward([x, slope])
    tx, tslope = (torch.tensor(a, requires_grad=True) for a in (x, slope))
    expected = torch.nn.functional.prelu(tx, tslope)  # PyTorch's weight of C values applies along axis 1
    expected.backward(torch.tensor(dy))
    np.testing.assert_allclose(y, expected.detach().numpy(), rtol=1e-12)
    grad_x, grad_slope = op.backward([dy], [x, slope], [y])
    np.testing.assert_allclose(grad_x, tx.grad.numpy(), rtol=1e-12)
    assert grad_slope.shape == (3,)
    np.testing.assert_allclose(grad_slope, tslope.grad.numpy(), rtol=1e-10)
