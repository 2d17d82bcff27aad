"""String operators (string_ops.py), inverse/hyperbolic trigonometry (math_ops.py) and TensorScatter, RoiAlign,
DFT (signal_roi_ops.py) against onnxruntime (or onnx.reference where onnxruntime lacks the operator), ONNX's
node test cases and finite-difference gradients."""
import numpy as np
import pytest

from d5.bench.conformance import failures, uncovered_operators, run_conformance
from d5.errors import ShapeError, UnsupportedOperatorError
from d5.frameworks.reference.operators import create_operator
from d5.ops.validation import test_gradient as check_gradient

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

OPERATOR_CASES = ("test_string_concat", "test_string_split", "test_regex_full_match", "test_strnorm",
                  "test_acos", "test_asin", "test_atan", "test_tan", "test_sinh", "test_cosh",
                  "test_tensorscatter", "test_roialign", "test_dft")
OWN_OPERATORS = {"StringConcat", "StringSplit", "RegexFullMatch", "StringNormalizer", "Acos", "Asin", "Atan", "Acosh",
                 "Asinh", "Atanh", "Tan", "Sinh", "Cosh", "TensorScatter", "RoiAlign", "DFT"}
TRIG = ["Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh"]


@pytest.fixture(scope="module")
def results():
    return run_conformance(kinds=("node", "simple"), patterns=OPERATOR_CASES, progress=False)


def test_onnx_cases_pass_with_d5_operators(results):
    judged = [r for r in results if r.status != "excluded" and set(r.operators) & OWN_OPERATORS]
    assert len(judged) >= 60
    failing = failures(judged)
    assert not failing, "\n".join(failing)


def test_every_operator_is_covered(results):
    missing = uncovered_operators(results, OWN_OPERATORS)
    assert not missing, missing


# ------------------------------------------------------------------------------------------------ oracles

def _value_info(name, value):
    value = np.asarray(value)
    elem = TensorProto.STRING if value.dtype == object else helper.np_dtype_to_tensor_dtype(value.dtype)
    return helper.make_tensor_value_info(name, elem, value.shape)


def _model(op_type, inputs, n_outputs, attributes, opset):
    names = [f"x{i}" if x is not None else "" for i, x in enumerate(inputs)]
    outputs = [f"y{i}" for i in range(n_outputs)]
    node = helper.make_node(op_type, names, outputs, **attributes)
    graph = helper.make_graph([node], "g", [_value_info(n, x) for n, x in zip(names, inputs) if n],
                              [helper.make_empty_tensor_value_info(o) for o in outputs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    feeds = {n: x for n, x in zip(names, inputs) if n}
    return model, feeds


def onnxruntime_outputs(op_type, inputs, n_outputs=1, attributes=None, opset=20):
    ort = pytest.importorskip("onnxruntime")
    model, feeds = _model(op_type, inputs, n_outputs, attributes or {}, opset)
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def reference_outputs(op_type, inputs, n_outputs=1, attributes=None, opset=24):
    from onnx.reference import ReferenceEvaluator
    model, feeds = _model(op_type, inputs, n_outputs, attributes or {}, opset)
    return ReferenceEvaluator(model).run(None, feeds)


def d5_outputs(op_type, inputs, attributes=None):
    out = create_operator(op_type, attributes or {}).forward(inputs)
    return list(out) if isinstance(out, tuple) else [out]


def assert_same(got, expected, rtol=1e-5, atol=1e-6):
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        g, e = np.asarray(g), np.asarray(e)
        assert g.shape == e.shape, (g.shape, e.shape)
        if e.dtype == object or e.dtype.kind in "USb":
            assert g.tolist() == e.tolist()
        else:
            assert g.dtype == e.dtype
            np.testing.assert_allclose(g, e, rtol=rtol, atol=atol)


def strings(*values, shape=None):
    array = np.empty(len(values), dtype=object)
    array[:] = list(values)
    return array.reshape(shape if shape is not None else (len(values),))


# ------------------------------------------------------------------------------------------------ strings

@pytest.mark.parametrize("x, y", [
    (strings("a", "bc", ""), strings("!", "?", "")),
    (strings("ab", "cd", "ef", "gh", shape=(2, 2)), strings("1", "2")),
    (strings("x", shape=()), strings("é✓", shape=())),
    (strings("a", "b", shape=(2, 1)), strings("1", "2", "3")),
])
def test_string_concat_matches_onnxruntime(x, y):
    assert_same(d5_outputs("StringConcat", [x, y]), onnxruntime_outputs("StringConcat", [x, y]))


@pytest.mark.parametrize("attributes", [{}, {"delimiter": "-"}, {"delimiter": ""}, {"maxsplit": 1},
                                        {"delimiter": "-", "maxsplit": 2}, {"delimiter": "--"}, {"maxsplit": 0}])
@pytest.mark.parametrize("x", [
    strings("a-b-c", "  x  y ", "--", "", "no_delim", "a--b--c-", " ", "  a b c  "),
    strings("a b", "c-d e", "f", "g-h-i-j", shape=(2, 2)),
    strings(shape=(0,)),
])
def test_string_split_matches_onnxruntime(attributes, x):
    got = d5_outputs("StringSplit", [x], attributes)
    assert_same(got, onnxruntime_outputs("StringSplit", [x], 2, attributes))
    assert got[1].dtype == np.int64


@pytest.mark.parametrize("pattern, x", [
    (r"www\.[\w.-]+\.\bcom\b", strings("www.google.com", "www.facebook.com", "www.bbc.co.uk")),
    (r"(\W|^)[\w.\-]{0,25}@(yahoo|gmail)\.com(\W|$)", strings("account@gmail.com", "x@yahoo.org", "", "@gmail.com",
                                                             shape=(2, 2))),
    (r"a+b?", strings("aaab", "b", "aab ", "a")),
    (r"[0-9]{3}-[0-9]{4}", strings("555-1234", "5551234", shape=(2, 1))),
    (r"", strings("", "x")),
])
def test_regex_full_match_matches_onnxruntime(pattern, x):
    got = d5_outputs("RegexFullMatch", [x], {"pattern": pattern})
    assert got[0].dtype == np.bool_
    assert_same(got, onnxruntime_outputs("RegexFullMatch", [x], 1, {"pattern": pattern}))


@pytest.mark.parametrize("attributes", [
    {},
    {"stopwords": ["monday"]},
    {"stopwords": ["monday"], "is_case_sensitive": 1},
    {"stopwords": ["Monday", "ÉTÉ"], "case_change_action": "LOWER"},
    {"stopwords": ["tuesday"], "case_change_action": "UPPER", "is_case_sensitive": 1},
    {"case_change_action": "UPPER"},
    {"stopwords": ["monday", "monday tuesday", "", "été", "straße", "ǅ"]},
])
@pytest.mark.parametrize("shape", [(6,), (1, 6)])
def test_string_normalizer_matches_onnxruntime(attributes, shape):
    x = strings("Monday", "monday tuesday", "", "Été", "MONDAY", "straße ǅ", shape=shape)
    attributes = {"locale": "C.UTF-8", **attributes}  # onnxruntime needs a locale the machine has
    assert_same(d5_outputs("StringNormalizer", [x], attributes),
                onnxruntime_outputs("StringNormalizer", [x], 1, attributes, opset=10))


def test_string_normalizer_case_mapping_is_per_character():
    x = strings("straße", "ΣΑΣ", "İ")
    upper, = d5_outputs("StringNormalizer", [x], {"case_change_action": "UPPER"})
    lower, = d5_outputs("StringNormalizer", [x], {"case_change_action": "LOWER"})
    assert upper.tolist() == ["STRAßE", "ΣΑΣ", "İ"]
    assert lower.tolist() == ["straße", "σασ", "i"]


def test_string_ops_accept_bytes_and_unicode_arrays():
    concat, = d5_outputs("StringConcat", [np.array([b"a", b"b"], object), np.array(["x", "y"])])
    assert concat.dtype == object and concat.tolist() == ["ax", "by"]
    assert d5_outputs("RegexFullMatch", [np.array(["ab", "b"])], {"pattern": b"a."})[0].tolist() == [True, False]


def test_string_model_runs_through_the_d5_backend():
    from d5.frameworks.reference.onnx_backend import ReferenceBackend
    x = strings("Monday", "tuesday")
    model, feeds = _model("StringNormalizer", [x], 1, {"stopwords": ["monday"], "case_change_action": "UPPER"}, 10)
    rep = ReferenceBackend.prepare(model, "CPU", fallback=False)
    assert np.asarray(rep.run([x])[0]).tolist() == ["TUESDAY"]


@pytest.mark.parametrize("op_type, attributes, inputs, match", [
    ("StringConcat", {}, [np.array([1.0]), strings("a")], "string tensor"),
    ("StringConcat", {}, [strings("a", "b"), strings("a", "b", "c")], "broadcastable"),
    ("StringSplit", {}, [np.arange(3)], "string tensor"),
    ("RegexFullMatch", {"pattern": "a"}, [np.array([1, 2])], "string tensor"),
    ("StringNormalizer", {}, [strings("a", "b", "c", "d", shape=(2, 2))], r"\[C\] or \[1, C\]"),
    ("StringNormalizer", {}, [strings(shape=(0,))], r"C > 0"),
])
def test_bad_string_inputs_raise_d5_errors(op_type, attributes, inputs, match):
    with pytest.raises(ShapeError, match=match):
        create_operator(op_type, attributes).forward(inputs)


def test_bad_string_attributes_raise_d5_errors():
    with pytest.raises(ShapeError, match="invalid pattern"):
        create_operator("RegexFullMatch", {"pattern": "(unclosed"})
    with pytest.raises(ShapeError, match="case_change_action"):
        create_operator("StringNormalizer", {"case_change_action": "TITLE"})
    with pytest.raises(ShapeError, match="maxsplit"):
        create_operator("StringSplit", {"maxsplit": -1})


@pytest.mark.parametrize("op_type", ["StringConcat", "StringSplit", "RegexFullMatch", "StringNormalizer",
                                     "RoiAlign", "DFT"])
def test_non_differentiable_operators_refuse_backward(op_type):
    op = create_operator(op_type, {"pattern": "a"} if op_type == "RegexFullMatch" else {})
    assert op.differentiable is False
    with pytest.raises(UnsupportedOperatorError, match="no gradient"):
        op.backward([np.ones(1)], [np.ones(1)], [np.ones(1)])


# ------------------------------------------------------------------------------------------- trigonometry

def _trig_input(op_type, dtype=np.float64, seed=0):
    rng = np.random.default_rng(seed)
    if op_type in ("Asin", "Acos", "Atanh"):
        return rng.uniform(-0.9, 0.9, (3, 4)).astype(dtype)
    if op_type == "Acosh":
        return rng.uniform(1.1, 4.0, (3, 4)).astype(dtype)
    if op_type == "Tan":
        return rng.uniform(-1.3, 1.3, (3, 4)).astype(dtype)
    return rng.uniform(-3.0, 3.0, (3, 4)).astype(dtype)


@pytest.mark.parametrize("op_type", TRIG)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_trigonometry_matches_oracles(op_type, dtype):
    x = _trig_input(op_type, dtype)
    # onnxruntime implements most of these for float32 only.
    oracle = onnxruntime_outputs if dtype == np.float32 else reference_outputs
    assert_same(d5_outputs(op_type, [x]), oracle(op_type, [x], opset=13), rtol=1e-5)


@pytest.mark.parametrize("op_type", TRIG)
def test_trigonometry_gradients_match_finite_differences(op_type):
    result = check_gradient(create_operator(op_type, {}), [_trig_input(op_type, seed=1)])
    assert result.passed, result


def test_trigonometry_outside_the_domain_is_nan_without_warnings():
    with np.errstate(all="raise"):
        assert np.isnan(create_operator("Acos", {}).forward([np.array([2.0])])).all()
        assert np.isnan(create_operator("Acosh", {}).forward([np.array([0.5])])).all()
    assert create_operator("Acos", {}).forward([np.float32(0.5) * np.ones((), np.float32)]).dtype == np.float32


# -------------------------------------------------------------------------------------------- TensorScatter

def _random(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


@pytest.mark.parametrize("attributes, cache_shape, update_shape, indices", [
    ({}, (2, 1, 4, 5), (2, 1, 1, 5), [1, 3]),
    ({"mode": "circular"}, (2, 1, 4, 5), (2, 1, 3, 5), [2, 3]),
    ({"axis": 1}, (3, 4, 5), (3, 2, 5), [0, 2, 1]),
    ({"axis": 2, "mode": "circular"}, (2, 3, 4), (2, 3, 4), [5, 1]),
    ({}, (2, 6, 3), (2, 2, 3), None),
])
def test_tensor_scatter_matches_onnx_reference(attributes, cache_shape, update_shape, indices):
    cache, update = _random(cache_shape).astype(np.float32), _random(update_shape, 1).astype(np.float32)
    inputs = [cache, update] + ([] if indices is None else [np.array(indices, np.int64)])
    assert_same(d5_outputs("TensorScatter", inputs, attributes),
                reference_outputs("TensorScatter", inputs, 1, attributes, opset=24))


@pytest.mark.parametrize("attributes, indices", [({}, [1, 2]), ({"mode": "circular"}, [3, 5])])
def test_tensor_scatter_gradient_matches_finite_differences(attributes, indices):
    inputs = [_random((2, 3, 4, 2)), _random((2, 3, 2, 2), 1), np.array(indices, np.int64)]
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


# ------------------------------------------------------------------------------------------------ RoiAlign

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
    x = _random((2, 3, 10, 12)).astype(np.float32)
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


# ----------------------------------------------------------------------------------------------------- DFT

@pytest.mark.parametrize("attributes, shape, length, axis", [
    ({}, (2, 8, 1), None, 1),
    ({}, (2, 8, 2), None, -2),
    ({}, (3, 7, 5, 2), 10, 2),
    ({}, (3, 7, 5, 1), 4, 1),
    ({"onesided": 1}, (2, 9, 1), None, 1),
    ({"inverse": 1}, (2, 8, 2), None, 1),
    ({"inverse": 1}, (2, 6, 3, 2), 5, 1),
    ({"inverse": 1, "onesided": 1}, (2, 5, 2), None, 1),
    ({"inverse": 1, "onesided": 1}, (2, 5, 2), 9, 1),
])
def test_dft_matches_onnxruntime(attributes, shape, length, axis):
    x = _random(shape).astype(np.float32)
    inputs = [x, None if length is None else np.array(length, np.int64), np.array(axis, np.int64)]
    assert_same(d5_outputs("DFT", inputs, attributes), onnxruntime_outputs("DFT", inputs, 1, attributes, opset=20),
                 rtol=1e-4, atol=1e-4)


def test_dft_opset17_axis_attribute_matches_onnxruntime():
    x = _random((2, 4, 6, 1)).astype(np.float32)
    attributes = {"axis": 2}
    assert_same(d5_outputs("DFT", [x], attributes), onnxruntime_outputs("DFT", [x], 1, attributes, opset=17),
                rtol=1e-4, atol=1e-4)


def test_dft_bad_inputs_raise_shape_errors():
    op = create_operator("DFT", {})
    with pytest.raises(ShapeError, match=r"\[\.\.\., 1\] \(real\)"):
        op.forward([np.zeros((2, 8, 3))])
    with pytest.raises(ShapeError, match="signal axis"):
        op.forward([np.zeros((2, 8, 1)), None, np.array(-1)])
    with pytest.raises(ShapeError, match="dft_length"):
        op.forward([np.zeros((2, 8, 1)), np.array(0)])
