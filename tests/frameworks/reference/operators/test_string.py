"""String operators (StringConcat, StringSplit, RegexFullMatch, StringNormalizer) against onnxruntime."""
from __future__ import annotations

import numpy as np
import pytest

from d5.errors import ShapeError
from d5.frameworks.reference.operators import create_operator
from _helpers import assert_same, d5_outputs, one_node_model, onnxruntime_outputs


def strings(*values, shape=None):
    array = np.empty(len(values), dtype=object)
    array[:] = list(values)
    return array.reshape(shape if shape is not None else (len(values),))


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
    from d5.frameworks.onnx_backend import ReferenceBackend
    x = strings("Monday", "tuesday")
    model, feeds = one_node_model("StringNormalizer", [x], 1, {"stopwords": ["monday"], "case_change_action": "UPPER"}, 10)
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
