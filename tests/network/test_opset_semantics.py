"""d5 at the older opsets (11 on) of every operator whose ONNX schema changed after opset 11.

ONNX's node cases of each such operator are written at the opsets where an older schema applies (see
:mod:`d5.bench.opset_conformance`), run on onnxruntime and on d5's reference framework, and must agree:
d5 imports models at opsets 11 to the newest as they are, so each operator follows its node's opset
(Softmax before opset 13 normalizes the input flattened to 2-D). ``python -m d5.bench.opset_conformance``
prints the same judgement as a table.
"""
import collections

import numpy as np
import pytest

pytest.importorskip("onnxruntime")

from d5.bench.opset_conformance import (FAIL, PASS, all_pairs, changed_operators, express_at,  # noqa: E402
                                        pair_status, run_pair)
from d5.bench.conformance import load_case  # noqa: E402

PAIRS = all_pairs()


def test_the_operators_whose_schema_changed_after_opset_11_are_found():
    changed = changed_operators()
    assert len(changed) >= 100
    for op_type, first_opsets in {"Softmax": (11, 13), "LogSoftmax": (11, 13), "Hardmax": (11, 13),
                                  "ReduceSum": (11, 13), "Split": (11, 13, 18)}.items():
        assert changed[op_type] == first_opsets
    assert "Relu" in changed and "Gelu" not in changed  # Relu: types at 13 and 14; Gelu: added at 20, one schema
    assert len(PAIRS) == sum(len(opsets) - 1 for opsets in changed.values())


def test_softmax_at_opset_11_exercises_the_old_semantics():
    """The version converter keeps Softmax as it is (13 -> 12 only makes the axis explicit), so the opset-11
    model computes the flattened softmax: onnxruntime's answer differs from the case's opset-13 one."""
    import onnx

    from d5.bench.opset_conformance import ort_outputs, cases_for

    case = next(c for c in cases_for("Softmax") if c.name == "test_softmax_axis_1")
    model, data_sets = load_case(case)
    (how, old), = express_at(model, 11)
    assert how == "converted" and [n.op_type for n in old.graph.node] == ["Softmax"]
    onnx.checker.check_model(old, full_check=True)
    inputs, expected_13 = data_sets[0]
    assert not np.allclose(ort_outputs(old, inputs)[0], expected_13[0], atol=1e-3)


@pytest.mark.parametrize("op_type, opset", PAIRS, ids=[f"{op}-opset{opset}" for op, opset in PAIRS])
def test_operator_at_older_opset_matches_onnxruntime(op_type, opset):
    results = run_pair(op_type, opset)
    failing = [r for r in results if r.status == FAIL]
    assert not failing, "\n".join(f"{r.case} ({r.how}): {r.reason}" for r in failing)
    if pair_status(results) != PASS:
        counts = collections.Counter(r.status for r in results)
        reasons = sorted({r.reason for r in results if r.reason})[:3]
        pytest.skip(f"no case of {op_type} runs at opset {opset}: {dict(counts) or 'no case'} {reasons}")


@pytest.mark.parametrize("op_type", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_opset_11_softmax_gradients(op_type, axis):
    from d5.frameworks.reference.operators import create_operator
    from d5.ops.validation import test_gradient as check_gradient

    x = np.random.default_rng(axis + 1).standard_normal((2, 3, 4))
    op = create_operator(op_type, {"axis": axis}, opset=11)
    assert type(op).__name__ == f"{op_type}1"
    assert check_gradient(op, [x]).passed
    # The newest version is unchanged: along one axis.
    assert type(create_operator(op_type, {"axis": axis}, opset=13)).__name__ == op_type


# ------------------------------------------------------------------ hand-built models the converter cannot write

def _resize_model(opset, attributes, x_shape, roi=None, scales=None, sizes=None, omit=False):
    """A one-node Resize model at ``opset``; absent roi / scales are empty tensors (opset 11 requires both
    inputs: exporters pass them empty beside ``sizes``) or, with ``omit``, empty input names (opset 13 on)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    names, initializers = ["X"], []
    for name, value, dtype in (("roi", roi, np.float32), ("scales", scales, np.float32), ("sizes", sizes, np.int64)):
        if value is None and (omit or name == "sizes"):
            names.append("")
            continue
        initializers.append(numpy_helper.from_array(np.asarray([] if value is None else value, dtype), name))
        names.append(name)
    while names[-1] == "":
        names.pop()
    graph = helper.make_graph(
        [helper.make_node("Resize", names, ["Y"], **attributes)], "resize",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["n", "c", "h", "w"])], initializer=initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=7)
    onnx.checker.check_model(model, full_check=True)
    return model


def _resize_cases():
    """(id, opset, attributes, inputs). Left out on purpose, since onnxruntime and ONNX's own node cases
    disagree at every opset (d5 follows ONNX): align_corners / tf_crop_and_resize with a scale whose output
    length is fractional (ONNX divides by ``scale * length - 1``, onnxruntime by the integer length - 1), and
    cubic pytorch_half_pixel to length 1 (ONNX samples at -0.5, onnxruntime at 0)."""
    sizes_up, sizes_down = dict(sizes=[1, 2, 7, 9]), dict(sizes=[1, 2, 3, 2])
    cases = []
    for mode in ("nearest", "linear", "cubic"):
        for coordinates in ("half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel", "tf_half_pixel_for_nn"):
            for label, given in (("sizes-up", sizes_up), ("sizes-down", sizes_down)):
                cases.append((f"11-{mode}-{coordinates}-{label}", 11,
                              dict(mode=mode, coordinate_transformation_mode=coordinates), given))
        for label, scales in (("up", [1, 1, 2.0, 1.6]), ("down", [1, 1, 0.5, 0.6])):
            cases.append((f"11-{mode}-scales-{label}", 11, dict(mode=mode), dict(scales=scales)))
        cases.append((f"11-{mode}-align_corners-scales-up", 11,
                      dict(mode=mode, coordinate_transformation_mode="align_corners"), dict(scales=[1, 1, 2.0, 2.0])))
        for label, given in (("sizes", dict(sizes=[1, 2, 6, 7])), ("scales", dict(scales=[1, 1, 2.0, 2.0]))):
            cases.append((f"11-{mode}-tf_crop_and_resize-{label}", 11,
                          dict(mode=mode, coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=-2.0),
                          dict(given, roi=[0, 0, 0.125, -0.25, 1, 1, 0.75, 1.25])))
        for label, given in (("sizes", sizes_up), ("scales", dict(scales=[1, 1, 2.0, 0.6]))):
            cases.append((f"13-{mode}-omitted-inputs-{label}", 13, dict(mode=mode), dict(given, omit=True)))
    # onnxruntime takes exclude_outside with cubic only (or antialiased linear, opset 18 on).
    cases.append(("11-cubic-exclude_outside", 11, dict(mode="cubic", exclude_outside=1, cubic_coeff_a=-0.5), sizes_up))
    for nearest_mode in ("round_prefer_ceil", "floor", "ceil"):
        cases.append((f"11-nearest-{nearest_mode}", 11, dict(mode="nearest", nearest_mode=nearest_mode), sizes_up))
    return cases


RESIZE_CASES = _resize_cases()


@pytest.mark.parametrize("opset, attributes, given", [c[1:] for c in RESIZE_CASES], ids=[c[0] for c in RESIZE_CASES])
def test_resize_hand_built_at_older_opsets_matches_onnxruntime(opset, attributes, given):
    import d5
    from d5.bench.opset_conformance import ort_outputs
    from d5.frameworks import reference

    x = np.random.default_rng(0).standard_normal((1, 2, 4, 5)).astype(np.float32)
    model = _resize_model(opset, attributes, list(x.shape), **given)
    expected = ort_outputs(model, [x])[0]
    actual = reference.from_model(d5.load_onnx(model)).inference({"X": x})
    actual = np.asarray(actual["Y"] if isinstance(actual, dict) else actual[0])
    assert actual.shape == expected.shape
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-5)


def test_resize_tf_half_pixel_for_nn_is_opset_11_only():
    from d5.errors import ShapeError
    from d5.frameworks.reference.operators import create_operator

    attributes = {"coordinate_transformation_mode": "tf_half_pixel_for_nn"}
    x, empty, sizes = np.arange(4.0).reshape(1, 4), np.zeros(0), np.array([1, 2])
    assert type(create_operator("Resize", attributes, opset=11)).__name__ == "Resize11"
    assert create_operator("Resize", attributes, opset=11).forward([x, empty, empty, sizes]).tolist() == [[1.0, 3.0]]
    with pytest.raises(ShapeError, match="tf_half_pixel_for_nn"):  # removed at opset 13
        create_operator("Resize", attributes, opset=13).forward([x, empty, empty, sizes])


def _group_norm_model(opset, num_groups, scale, bias, x_shape):
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [helper.make_node("GroupNormalization", ["X", "scale", "bias"], ["Y"], num_groups=num_groups, epsilon=1e-3)],
        "group_norm", [helper.make_tensor_value_info("X", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, x_shape)],
        initializer=[numpy_helper.from_array(scale, "scale"), numpy_helper.from_array(bias, "bias")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


@pytest.mark.parametrize("num_groups", [1, 3, 6])
def test_group_normalization_opset_18_is_per_group(num_groups):
    """Opset 18's scale and bias are per group; onnxruntime runs that schema (through its function body),
    onnx.checker refuses it as deprecated, and so does d5's importer: the operator is checked directly."""
    import d5
    from d5.bench.opset_conformance import ort_outputs
    from d5.errors import OnnxImportError, ShapeError
    from d5.frameworks.reference.operators import create_operator
    from d5.ops.validation import test_gradient as check_gradient

    rng = np.random.default_rng(num_groups)
    x = rng.standard_normal((2, 6, 3, 2)).astype(np.float32)
    scale, bias = (rng.standard_normal(num_groups).astype(np.float32) for _ in range(2))
    model = _group_norm_model(18, num_groups, scale, bias, list(x.shape))
    expected = ort_outputs(model, [x])[0]
    op = create_operator("GroupNormalization", {"num_groups": num_groups, "epsilon": 1e-3}, opset=18)
    assert type(op).__name__ == "GroupNormalization18"
    np.testing.assert_allclose(op.forward([x, scale, bias]), expected, rtol=1e-5, atol=1e-5)
    assert check_gradient(op, [x.astype(np.float64), scale.astype(np.float64), bias.astype(np.float64)]).passed
    with pytest.raises(OnnxImportError, match="deprecated"):
        d5.load_onnx(model)
    if num_groups != 6:  # opset 21's per-channel parameters are not opset 18's
        with pytest.raises(ShapeError, match="opset 18"):
            op.forward([x, np.ones(6, np.float32), np.zeros(6, np.float32)])
        newest = create_operator("GroupNormalization", {"num_groups": num_groups, "epsilon": 1e-3}, opset=21)
        assert type(newest).__name__ == "GroupNormalization"
        channel_scale, channel_bias = (np.repeat(a, 6 // num_groups) for a in (scale, bias))
        np.testing.assert_allclose(newest.forward([x, channel_scale, channel_bias]), expected, rtol=1e-5, atol=1e-5)
