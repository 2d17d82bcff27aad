"""The executor behaviours every framework shares (d5/frameworks/native_executor.py), checked on every framework:
the one ``fallback`` policy and FallbackWarning, operators refused when the executor is built, devices, errors that
name the node, values a framework cannot hold, sequences and trailing optional inputs, the same errors for a
missing loss or inputs that compute nothing, and the shared keyword-only surface of ``from_model``/``from_onnx``.
"""
from __future__ import annotations

import importlib
import inspect
import types
import warnings

import numpy as np
import pytest

import d5
from d5.errors import D5Error, GraphError, OperatorError, ShapeError, UnsupportedOperatorError
from d5.frameworks import base, reference
from d5.frameworks.base import FallbackWarning

FRAMEWORKS = d5.frameworks.available()
NATIVE = [name for name in FRAMEWORKS if name != "reference"]


@pytest.fixture(params=FRAMEWORKS)
def framework(request) -> types.ModuleType:
    return importlib.import_module(f"d5.frameworks.{request.param}")


def _network_with(op_type: str, **attrs) -> d5.Network:
    net = d5.Network("one")
    net.add_input("x", ("N", 4))
    net.add_node(op_type, ["x"], ["y"], **attrs)
    net.add_output("y")
    return net


def _quiet(make):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        return make()


# ---------------------------------------------------------------- one surface
def test_from_model_and_from_onnx_take_device_and_fallback_keyword_only_with_one_default(framework):
    for function, first in ((framework.from_model, "network"), (framework.from_onnx, "source")):
        parameters = inspect.signature(function).parameters
        assert next(iter(parameters)) == first
        for name, default in (("device", None), ("fallback", base.DEFAULT_FALLBACK)):
            assert parameters[name].kind is inspect.Parameter.KEYWORD_ONLY and parameters[name].default == default
    with pytest.raises(TypeError):
        framework.from_model(_network_with("Relu"), None)  # a positional device is refused, not misread


def test_a_signature_that_breaks_the_surface_is_named(monkeypatch):
    package = types.ModuleType("d5.frameworks.reference")
    package.__file__ = reference.__file__
    for name in base.REQUIRED_NAMES:
        setattr(package, name, getattr(reference, name))
    package.from_model = lambda network, device=None, strict=False: None
    problems = "\n".join(base.contract_violations(package))
    assert "from_model must take keyword-only device=None" in problems
    assert "keyword-only fallback='reference'" in problems


def test_a_bad_fallback_value_is_a_d5_error(framework):
    with pytest.raises(D5Error, match="fallback='sometimes'.*'none', 'reference', 'onnx'"):
        framework.from_model(_network_with("Relu"), fallback="sometimes")


def test_custom_op_takes_only_d5_custom_operators(framework):
    with pytest.raises(UnsupportedOperatorError, match="custom_op expects a d5.ops.CustomOp, got int"):
        framework.custom_op(42)


# ---------------------------------------------------------------- the fallback policy
@pytest.fixture
def hidden_softsign(monkeypatch):
    """Softsign hidden from every native framework's registry (the reference keeps it), so the fallback's case
    does not depend on which operators a framework lacks."""
    for name in NATIVE:
        registry = importlib.import_module(f"d5.frameworks.{name}.operators").REGISTRY
        registry.supported()  # loads the converters
        monkeypatch.setattr(registry, "_versions", {k: v for k, v in registry._versions.items() if k != "Softsign"})
    return "Softsign"


@pytest.mark.parametrize("name", NATIVE)
def test_unmapped_operators_run_on_the_reference_loudly_and_fallback_none_refuses_them(name, hidden_softsign):
    framework = d5.frameworks.get(name)
    net = _network_with(hidden_softsign)
    with pytest.warns(FallbackWarning, match=f"{hidden_softsign}.*reference framework through the custom-op bridge"):
        executor = framework.from_model(net)
    assert executor.fallback_operators == [hidden_softsign]
    x = np.linspace(-2, 2, 8, dtype=np.float32).reshape(2, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per executor, at build: running warns no more
        np.testing.assert_allclose(executor.inference({"x": x})["y"], reference.from_model(net).inference({"x": x})["y"])
    with pytest.raises(UnsupportedOperatorError, match=f"node 'Softsign_0'.*{name}.*{hidden_softsign}.*fallback='none'"):
        framework.from_model(net, fallback="none")


def _tfidf_network() -> d5.Network:
    net = d5.Network("tfidf")
    net.add_input("x", (4,), "int64")
    net.add_node("TfIdfVectorizer", ["x"], ["y"], name="tfidf", mode="TF", min_gram_length=1, max_gram_length=1,
                 max_skip_count=0, ngram_counts=[0], ngram_indexes=[0, 1], pool_int64s=[2, 3])
    net.add_output("y")
    return net


def test_an_operator_d5_lacks_runs_on_onnx_reference_only_when_asked(framework):
    """TfIdfVectorizer: no framework of d5 implements it. By default the executor is refused at build time naming the
    node and the way out; fallback='onnx' (or True) runs it on onnx.reference, with a warning; 'none' refuses."""
    with pytest.raises(UnsupportedOperatorError, match="node 'tfidf'.*TfIdfVectorizer.*fallback='onnx'"):
        framework.from_model(_tfidf_network())
    with pytest.raises(UnsupportedOperatorError, match="node 'tfidf'"):
        framework.from_model(_tfidf_network(), fallback="none")
    for fallback in ("onnx", True):
        with pytest.warns(FallbackWarning, match=r"\['TfIdfVectorizer'\].*onnx.reference"):
            executor = framework.from_model(_tfidf_network(), fallback=fallback)
        assert executor.fallback_operators == ["TfIdfVectorizer"]
        np.testing.assert_array_equal(executor.inference({"x": np.array([2, 3, 3, 5])})["y"], [1.0, 2.0])


def test_an_operator_nobody_implements_is_refused_when_the_executor_is_built(framework):
    net = _network_with("Relu")
    net.nodes[0].op_type = "NoSuchOp"  # what a hand-edited graph may hold; validation has no schema for it
    with pytest.raises(D5Error, match="NoSuchOp"):
        framework.from_model(net)


def test_a_gpu_the_framework_or_machine_lacks_is_a_d5_error_saying_to_use_the_cpu(framework):
    with pytest.raises(D5Error, match=r"GPUDevice\(64\).*d5.CPUDevice\(\)"):
        framework.from_model(d5.models.lenet5(), device=d5.GPUDevice(64))


# ---------------------------------------------------------------- errors, the same on every framework
def test_errors_escaping_the_framework_become_d5_errors_naming_the_node(framework):
    executor = framework.from_model(d5.models.lenet5())
    batch = {"input": np.ones((5, 1, 28, 28), np.float32), "label": np.full(5, 12)}
    with pytest.raises(ShapeError, match="node 'loss'.*label 12 is out of range"):  # the reference's error
        executor.inference_and_backprop(batch)
    net = _network_with("Relu")
    net.add_node("Gemm", ["y", "w"], ["z"])
    net.add_param("w", np.ones((3, 2), np.float32))  # (N, 4) @ (3, 2): only the running shapes disagree
    net.add_output("z")
    # The reference's own check says ShapeError, a framework's kernel error is OperatorError: both name the node.
    with pytest.raises((OperatorError, ShapeError), match=r"node 'Gemm_\d' \(Gemm\).*\(2, 4\)"):
        framework.from_model(net).inference({"x": np.ones((2, 4), np.float32)})


def test_a_loss_the_inputs_do_not_compute_and_inputs_that_compute_nothing_are_the_same_errors(framework):
    executor = framework.from_model(d5.models.mlp((4,), hidden=(3,), num_classes=2))
    batch = {"input": np.ones((2, 4), np.float32), "label": np.array([0, 1])}
    with pytest.raises(GraphError, match=r"cannot compute 'lost' from the given inputs \(missing \[\]\)"):
        executor.inference_and_backprop(batch, "lost")
    with pytest.raises(GraphError, match=r"cannot compute 'loss' from the given inputs \(missing \['label'\]\)"):
        executor.inference_and_backprop({"input": batch["input"]}, "loss")
    with pytest.raises(GraphError, match=r"no graph output can be computed without inputs \['input'\]"):
        executor.inference({"label": batch["label"]})


def test_an_intermediate_tensor_can_be_differentiated(framework):
    """``y`` need not be a graph output: every framework differentiates any tensor the inputs compute."""
    net = d5.Network("inner")
    net.add_input("x", ("N", 3))
    net.add_param("w", np.full((3, 2), 0.5, np.float32))
    net.add_node("MatMul", ["x", "w"], ["h"])
    net.add_node("ReduceSum", ["h"], ["s"], keepdims=0)
    net.add_node("Relu", ["h"], ["out"])
    net.add_output("out")
    batch = {"x": np.arange(6, dtype=np.float32).reshape(2, 3)}
    outputs = framework.from_model(net).inference_and_backprop(batch, "s")
    assert sorted(outputs) == ["out"]
    executor = framework.from_model(net)
    executor.inference_and_backprop(batch, "s")
    np.testing.assert_allclose(executor.network.fetch_tensor("w_grad"), np.tile(batch["x"].sum(0)[:, None], (1, 2)))


def test_trailing_omitted_optional_inputs_are_dropped(framework):
    net = d5.Network("clip")
    net.add_input("x", ("N",))
    net.add_param("lo", np.array(-0.5, np.float32), trainable=False)
    net.add_node("Clip", ["x", "lo", ""], ["y"])
    net.add_node("Clip", ["y", "", ""], ["z"])
    net.add_output("z")
    x = np.array([-2.0, 0.25, 3.0], np.float32)
    np.testing.assert_array_equal(framework.from_model(net).inference({"x": x})["z"], [-0.5, 0.25, 3.0])


# ---------------------------------------------------------------- values beyond plain tensors
def _string_round_trip() -> d5.Network:
    net = d5.Network("strings")
    net.add_input("x", ("N",), np.float32)
    net.add_node("Cast", ["x"], ["s"], to=8)  # to STRING
    net.add_node("Cast", ["s"], ["y"], to=1)
    net.add_node("Mul", ["y", "x"], ["z"])
    net.add_output("z")
    net.add_output("s")
    return net


def test_values_a_framework_cannot_hold_run_on_the_reference_and_fallback_none_says_which(framework):
    holds_strings = importlib.import_module(f"{framework.__name__}.tensors").holds(np.dtype(object))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        executor = framework.from_model(_string_round_trip())
    assert any(issubclass(w.category, FallbackWarning) and "Cast" in str(w.message) for w in caught) != holds_strings
    x = np.array([1.5, -2.0], np.float32)
    out = executor.inference({"x": x})
    np.testing.assert_array_equal(out["z"], x * x)
    assert out["s"].dtype == object and list(out["s"]) == list(reference.from_model(_string_round_trip())
                                                                  .inference({"x": x})["s"])
    if not holds_strings:
        with pytest.raises(UnsupportedOperatorError, match=r"cannot hold the values of 'Cast' \('s' is a tensor\(object"):
            framework.from_model(_string_round_trip(), fallback="none")


def test_sequences_pass_through(framework):
    net = d5.Network("sequence")
    net.add_input("x", (6, 2), np.float32)
    net.add_node("SplitToSequence", ["x"], ["seq"], axis=0)
    net.add_node("ConcatFromSequence", ["seq"], ["y"], axis=1)
    net.add_node("Relu", ["y"], ["z"])
    net.add_output("z")
    net.add_output("seq")
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(6, 2)
    out = _quiet(lambda: framework.from_model(net)).inference({"x": x})
    np.testing.assert_array_equal(out["z"], reference.from_model(net).inference({"x": x})["z"])
    assert isinstance(out["seq"], list) and len(out["seq"]) == 6


def test_bfloat16_tensors_cross_in_and_out_as_ml_dtypes_arrays(framework):
    import ml_dtypes

    net = d5.Network("bf16")
    net.add_input("x", ("N",), ml_dtypes.bfloat16)
    net.add_node("Relu", ["x"], ["y"])
    net.add_output("y")
    x = np.array([-1.5, 2.25, 3.0], ml_dtypes.bfloat16)
    y = framework.from_model(net, fallback="none").inference({"x": x})["y"]
    assert y.dtype == np.dtype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(y.astype(np.float32), [0.0, 2.25, 3.0])


def _if_with_tfidf_in_a_branch() -> d5.Network:
    from onnx import TensorProto, helper

    tfidf = helper.make_node("TfIdfVectorizer", ["x"], ["t"], mode="TF", min_gram_length=1, max_gram_length=1,
                             max_skip_count=0, ngram_counts=[0], ngram_indexes=[0, 1], pool_int64s=[2, 3])
    then_branch = helper.make_graph([tfidf], "then", [], [helper.make_tensor_value_info("t", TensorProto.FLOAT, [2])])
    else_branch = helper.make_graph([helper.make_node("Constant", [], ["e"], value_floats=[0.0, 0.0])], "else", [],
                                    [helper.make_tensor_value_info("e", TensorProto.FLOAT, [2])])
    graph = helper.make_graph([helper.make_node("If", ["c"], ["y"], name="choose", then_branch=then_branch,
                                                else_branch=else_branch)], "cf",
                              [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                               helper.make_tensor_value_info("x", TensorProto.INT64, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    return d5.Network.from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def test_control_flow_bodies_run_under_the_executors_fallback(framework):
    """An If whose branch holds an operator d5 lacks: refused by default naming it, run with fallback='onnx' (the
    warning names the body's operator), the same on every framework."""
    with pytest.raises(UnsupportedOperatorError, match="TfIdfVectorizer"):
        framework.from_model(_if_with_tfidf_in_a_branch())
    with pytest.warns(FallbackWarning, match="TfIdfVectorizer"):
        executor = framework.from_model(_if_with_tfidf_in_a_branch(), fallback="onnx")
    assert "TfIdfVectorizer" in executor.fallback_operators
    feeds = {"c": np.array(True), "x": np.array([2, 3, 3, 5])}
    np.testing.assert_array_equal(executor.inference(feeds)["y"], [1.0, 2.0])
