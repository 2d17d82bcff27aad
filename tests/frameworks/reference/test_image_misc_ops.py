"""Image and miscellaneous reference operators (image_ops.py, misc_ops.py) against ONNX's node test cases
(outputs from onnx.reference / the ONNX spec) and finite-difference gradients."""
import numpy as np
import pytest

from d5.bench.conformance import failures, uncovered_operators, run_conformance
from d5.frameworks.reference.operators import create_operator
from d5.ops.validation import test_gradient as check_gradient

OPERATOR_CASES = (
    "test_resize_", "test_gridsample", "test_lppool", "test_spacetodepth", "test_depthtospace",
    "test_center_crop_pad", "test_col2im", "test_tril", "test_triu", "test_cumsum", "test_cumprod", "test_top_k",
    "test_onehot", "test_hardmax", "test_lpnormalization", "test_l1normalization", "test_l2normalization",
    "test_celu", "test_thresholdedrelu", "test_hardswish", "test_mish", "test_eyelike", "test_reversesequence",
    "test_compress", "test_gathernd", "test_scatter_elements", "test_scatter_with_axis", "test_scatter_without_axis",
    "test_scatternd",
)
# Every case must pass, including test_l2normalization_axis_0, whose all-zero slices must normalize to 0
# (onnx.reference's fallback gives NaN there).
KNOWN_BAD_CASES: set = set()
OWN_OPERATORS = {"Resize", "GridSample", "LpPool", "SpaceToDepth", "DepthToSpace", "CenterCropPad", "Col2Im", "Trilu",
                 "CumSum", "CumProd", "TopK", "OneHot", "Hardmax", "LpNormalization", "Celu", "ThresholdedRelu",
                 "HardSwish", "Mish", "EyeLike", "ReverseSequence", "Compress", "GatherND", "ScatterElements",
                 "Scatter", "ScatterND"}


@pytest.fixture(scope="module")
def results():
    return run_conformance(kinds=("node",), patterns=OPERATOR_CASES, progress=False)


def test_onnx_node_cases_pass_with_d5_operators(results):
    judged = [r for r in results if r.status != "excluded" and r.name not in KNOWN_BAD_CASES
              and set(r.operators) & OWN_OPERATORS]
    assert len(judged) >= 180
    failing = failures(judged)
    assert not failing, "\n".join(failing)


def test_every_operator_is_covered(results):
    missing = uncovered_operators(results, OWN_OPERATORS)
    assert not missing, missing


def _random(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


@pytest.mark.parametrize("op_type, attributes, inputs", [
    ("Trilu", {"upper": 1}, [_random((2, 3, 4)), np.array(1)]),
    ("Trilu", {"upper": 0}, [_random((3, 3)), np.array(-1)]),
    ("CumSum", {}, [_random((3, 4)), np.array(1)]),
    ("CumSum", {"exclusive": 1, "reverse": 1}, [_random((3, 4)), np.array(0)]),
    ("SpaceToDepth", {"blocksize": 2}, [_random((2, 3, 4, 6))]),
    ("SpaceToDepth", {"blocksize": 2, "mode": "CRD"}, [_random((1, 2, 4, 2))]),
    ("DepthToSpace", {"blocksize": 2}, [_random((2, 8, 2, 3))]),
    ("DepthToSpace", {"blocksize": 2, "mode": "CRD"}, [_random((1, 8, 3, 2))]),
    ("Celu", {"alpha": 2.0}, [_random((3, 5))]),
    ("Mish", {}, [_random((3, 5))]),
    ("LpNormalization", {"axis": 1, "p": 2}, [_random((3, 4))]),
    ("LpNormalization", {"axis": 0, "p": 1}, [_random((3, 4)) + 5.0]),
    ("GatherND", {}, [_random((3, 4)), np.array([[0, 1], [2, 3], [0, 1]])]),
    ("GatherND", {"batch_dims": 1}, [_random((2, 3, 4)), np.array([[1], [2]])]),
])
def test_gradients_match_finite_differences(op_type, attributes, inputs):
    result = check_gradient(create_operator(op_type, attributes), inputs)
    assert result.passed, result


def test_piecewise_gradients_away_from_kinks():
    x = np.array([[-4.0, -2.0, -0.5, 0.7, 2.5, 4.0]])
    assert check_gradient(create_operator("HardSwish", {}), [x]).passed
    assert check_gradient(create_operator("ThresholdedRelu", {"alpha": 0.5}), [x]).passed


@pytest.mark.parametrize("attributes", [
    {"mode": "linear"},
    {"mode": "cubic", "coordinate_transformation_mode": "align_corners"},
    {"mode": "linear", "antialias": 1},
    {"mode": "nearest"},
])
def test_resize_gradient_matches_finite_differences(attributes):
    x = _random((1, 2, 4, 5))
    for scales in (np.array([1.0, 1.0, 2.0, 1.5]), np.array([1.0, 1.0, 0.5, 0.6])):
        result = check_gradient(create_operator("Resize", attributes), [x, None, scales], wrt=[0])
        assert result.passed, (scales, result)


@pytest.mark.parametrize("axis, indices", [(-1, np.array([[0, 2], [3, -1]])), (0, np.array([1, 5, -4]))])
def test_one_hot_values_gradient_matches_finite_differences(axis, indices):
    # The output is off_value or on_value element by element: linear in values (index 5 is out of range: all off).
    op = create_operator("OneHot", {"axis": axis})
    inputs = [indices, np.array(4), np.array([0.25, -1.5])]
    result = check_gradient(op, inputs)
    assert result.passed, result
    assert [check.index for check in result.inputs] == [2]
    dy = _random(op.forward(inputs).shape, seed=3)
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


def test_non_differentiable_operators_refuse_backward():
    from d5.errors import UnsupportedOperatorError
    op = create_operator("TopK", {})
    assert op.differentiable is False
    with pytest.raises(UnsupportedOperatorError, match="no gradient"):
        op.backward([np.ones(2)], [np.ones(3), np.array([2])], [None, None])


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
