"""The framework-neutral graph: editing, validation, ONNX export and shape inference."""
import numpy as np
import onnx
import pytest

import d5
from d5.errors import GraphError, ShapeError, UnsupportedOperatorError


def small_network():
    net = d5.Network("small")
    net.add_input("x", ("N", 4))
    net.add_param("W", np.ones((3, 4), np.float32))
    net.add_param("b", np.zeros(3, np.float32))
    net.add_node("Gemm", ["x", "W", "b"], ["h"], name="fc", transB=1)
    net.add_node("Relu", ["h"], ["y"], name="act")
    net.add_output("y")
    return net


def test_topological_order_follows_dependencies_not_insertion():
    net = d5.Network()
    net.add_input("x", ("N", 2))
    net.add_node("Relu", ["a"], ["b"], name="second")  # consumes 'a' before it is produced
    net.add_node("Relu", ["x"], ["a"], name="first")
    net.add_output("b")
    assert [n.name for n in net.topological_order()] == ["first", "second"]


def test_unknown_operator_lists_supported_ones():
    net = small_network()
    with pytest.raises(UnsupportedOperatorError) as err:
        net.add_node("Conv2D", ["x"], ["z"])
    message = str(err.value)
    assert "'Conv2D'" in message and "Conv" in message and "Gemm" in message
    assert "add_custom_node" in message


def test_cycle_is_named():
    net = d5.Network()
    net.add_input("x", ("N", 2))
    net.add_node("Add", ["x", "c"], ["a"], name="n1")
    net.add_node("Relu", ["a"], ["b"], name="n2")
    net.add_node("Relu", ["b"], ["c"], name="n3")
    net.add_output("b")
    with pytest.raises(GraphError, match=r"cycle.*n1.*n2.*n3"):
        net.validate()


def test_dangling_input_is_named():
    net = small_network()
    net.add_node("Add", ["y", "missing_tensor"], ["z"], name="adder")
    with pytest.raises(GraphError, match=r"adder.*missing_tensor.*dangling"):
        net.validate()


@pytest.mark.parametrize("make_duplicate", [
    lambda net: net.add_input("W", ("N", 4)),
    lambda net: net.add_param("x", np.zeros(1)),
    lambda net: net.add_node("Relu", ["y"], ["h"]),
    lambda net: net.add_node("Relu", ["y"], ["z"], name="fc"),
])
def test_duplicate_names_are_rejected(make_duplicate):
    net = small_network()
    with pytest.raises(GraphError, match="duplicate"):
        make_duplicate(net)


def test_remove_and_replace_node():
    net = small_network()
    net.replace_node("act", "Sigmoid")
    assert net.node("act").op_type == "Sigmoid" and net.node("act").inputs == ["h"]
    net.remove_node("act")
    with pytest.raises(GraphError, match="not produced"):
        net.validate()
    net.add_node("Tanh", ["h"], ["y"], name="act2")
    net.validate()
    net.add_edge("x", "act2", index=0)
    assert net.node("act2").inputs == ["x"]


def test_params_gradient_names_and_parameter_values():
    net = small_network()
    net.add_param("running", np.zeros(3), trainable=False)
    assert net.get_params() == ["W", "b"]
    assert net.gradient("y") == [("W", "W_grad"), ("b", "b_grad")]
    with pytest.raises(GraphError, match="cannot differentiate"):
        net.gradient("nonexistent")
    net.feed_tensor("W", np.full((3, 4), 2.0))
    assert net.fetch_tensors(["W"])[0].dtype == np.float32 and net.fetch_tensors(["W"])[0][0, 0] == 2.0
    with pytest.raises(ShapeError, match="'W'.*\\(3, 4\\)"):
        net.feed_tensor("W", np.zeros((4, 3)))
    with pytest.raises(GraphError, match="no parameter 'W_grad'.*executor.network"):  # gradients live in executors
        net.fetch_tensors(["W_grad"])
    with pytest.raises(GraphError, match="is_param=True"):
        net.feed_tensor("act_out", np.zeros(3))


def test_copy_is_independent():
    net = small_network()
    clone = net.copy()
    clone.feed_tensor("W", np.zeros((3, 4)))
    clone.remove_node("act")
    assert net.params["W"][0, 0] == 1.0 and "act" in {n.name for n in net.nodes}


def test_onnx_export_is_valid_and_runs_in_onnxruntime():
    ort = pytest.importorskip("onnxruntime")
    net = d5.models.lenet5()
    model = net.to_onnx()
    onnx.checker.check_model(model, full_check=True)
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "N"
    x = np.random.default_rng(0).normal(size=(5, 1, 28, 28)).astype(np.float32)
    labels = np.arange(5, dtype=np.int64)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected_logits, expected_loss = session.run(["output", "loss"], {"input": x, "label": labels})
    got = d5.frameworks.reference.from_model(net).inference({"input": x, "label": labels})
    np.testing.assert_allclose(got["output"], expected_logits, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got["loss"], expected_loss, rtol=1e-4, atol=1e-5)


def test_zero_dimensional_params_export_and_import_as_scalars():
    net = d5.Network()
    net.add_input("x", ("N", 3), "float32")
    net.add_param("scale", np.array(2.5, np.float32))
    net.add_node("Mul", ["x", "scale"], ["y"])
    net.add_output("y")
    model = net.to_onnx()
    assert list(model.graph.initializer[0].dims) == []
    assert d5.Network.from_onnx(model).params["scale"].shape == ()


def test_shape_inference_keeps_batch_symbolic():
    shapes = d5.models.lenet5().infer_shapes()
    assert shapes["output"].shape == ("N", 10)
    assert shapes["conv1"].shape == ("N", 6, 28, 28)
    assert shapes["loss"].shape == ()
    assert shapes["label"].dtype == np.int64
