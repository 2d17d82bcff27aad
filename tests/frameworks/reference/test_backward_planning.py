"""Backward planning of the reference executor: backpropagation stops where no gradient can flow (integer and
boolean tensors), so graphs that build constants from activations (a Swin attention mask: Shape ->
ConstantOfShape -> ScatterND) train, and gradients still flow through everything else."""
import io
import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import d5
from d5.errors import UnsupportedOperatorError
from d5.frameworks import reference
from d5.network.gradient_check import check_network_gradient
from d5.network.graph import gradient_name
from d5.ops import CustomPythonOp


def _gradients(executor, feeds, y):
    executor.inference_and_backprop(feeds, y)
    names = executor.network.get_params()
    return dict(zip(names, executor.network.fetch_tensors([gradient_name(n) for n in names])))


def _mask_model(reduction="none"):
    """``h = x @ W.T + b; m = zeros(N, 4); m[0, :2] = 1; y = h + m`` with the mask built from h's shape, as ONNX
    (Shape -> Gather -> Unsqueeze -> Concat -> ConstantOfShape -> ScatterND) and with a dynamic batch."""
    rng = np.random.default_rng(0)
    initializers = [
        numpy_helper.from_array(rng.standard_normal((4, 3)).astype(np.float32), "W"),
        numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b"),
        numpy_helper.from_array(np.array(0, np.int64), "zero"),
        numpy_helper.from_array(np.array([0], np.int64), "axes"),
        numpy_helper.from_array(np.array([4], np.int64), "four"),
        numpy_helper.from_array(np.array([[0, 0], [0, 1]], np.int64), "where"),
    ]
    nodes = [
        helper.make_node("Gemm", ["x", "W", "b"], ["h"], transB=1),
        helper.make_node("Shape", ["h"], ["shape"]),
        helper.make_node("Gather", ["shape", "zero"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
        helper.make_node("Concat", ["n1", "four"], ["mask_shape"], axis=0),
        helper.make_node("ConstantOfShape", ["mask_shape"], ["zeros"],
                         value=helper.make_tensor("v", TensorProto.FLOAT, [1], [0.0])),
        helper.make_node("Constant", [], ["ones"], value=numpy_helper.from_array(np.ones(2, np.float32))),
        helper.make_node("ScatterND", ["zeros", "where", "ones"], ["mask"], reduction=reduction),
        helper.make_node("Add", ["h", "mask"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "masked_linear", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])], initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


# ScatterND with reduction='mul' has no gradient in d5: planning must not reach it on the mask's path.
@pytest.mark.parametrize("reduction", ["none", "mul"])
def test_a_mask_built_from_an_activations_shape_does_not_block_training(reduction):
    network = d5.Network.from_onnx(_mask_model(reduction))
    x = np.random.default_rng(1).standard_normal((5, 3)).astype(np.float32)
    executor = reference.from_model(network)
    grads = _gradients(executor, {"x": x}, "y")
    # d sum(y) / dW[i, :] = sum over the batch of x; d sum(y) / db = batch size.
    np.testing.assert_allclose(grads["W"], np.tile(x.sum(axis=0), (4, 1)), rtol=1e-5)
    np.testing.assert_allclose(grads["b"], np.full(4, 5.0))


def test_the_torch_export_of_a_slice_assigned_mask_trains_like_torch():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)

    class MaskedLinear(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(3, 4)

        def forward(self, x):
            h = self.linear(x)
            m = h.new_zeros(h.shape[0], 4)
            m[:, :2] = 1
            return h + m

    module = MaskedLinear()
    buffer = io.BytesIO()
    try:
        with warnings.catch_warnings():  # the legacy exporter warns that it is deprecated
            warnings.simplefilter("ignore")
            torch.onnx.export(module, (torch.randn(2, 3),), buffer, input_names=["x"], output_names=["y"],
                              dynamic_axes={"x": {0: "N"}, "y": {0: "N"}}, opset_version=17, dynamo=False)
    except Exception as err:  # an exporter needing packages that are not installed: the hand-built twin covers it
        pytest.skip(f"torch.onnx.export unavailable here: {type(err).__name__}: {err}")
    network = d5.Network.from_onnx(buffer.getvalue())
    assert {"Shape", "ConstantOfShape", "ScatterND"} <= {node.op_type for node in network.nodes}
    x = np.random.default_rng(2).standard_normal((6, 3)).astype(np.float32)
    grads = _gradients(reference.from_model(network), {"x": x}, "y")
    module(torch.from_numpy(x)).sum().backward()
    np.testing.assert_allclose(grads["linear.weight"], module.linear.weight.grad.numpy(), rtol=1e-5)
    np.testing.assert_allclose(grads["linear.bias"], module.linear.bias.grad.numpy(), rtol=1e-5)


def _linear_network(seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    network = d5.Network("planning")
    network.add_input("x", ("N", 3), dtype)
    network.add_param("W", rng.standard_normal((3, 4)).astype(dtype))
    network.add_node("MatMul", ["x", "W"], ["h"])
    return network


class _Floor(CustomPythonOp):
    """A user operator (no ``differentiable`` attribute) with an integer output."""

    def forward(self, inputs):
        return np.floor(inputs[0]).astype(np.int64)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        raise AssertionError("Floor's backward was called: its output is integer")


class _Halve(CustomPythonOp):
    """A user operator (no ``differentiable`` attribute) from an integer input to a float output: nothing
    upstream needs a gradient, so it must not be asked for one."""

    def forward(self, inputs):
        return inputs[0] / 2.0

    def backward(self, grads, fwd_inputs, fwd_outputs):
        raise AssertionError("Halve's backward was called, but its input is integer")


class _Square(CustomPythonOp):
    """A user operator (no ``differentiable`` attribute) with a float output: counts as differentiable."""

    def __init__(self):
        super().__init__()
        self.backward_calls = 0

    def forward(self, inputs):
        return inputs[0] ** 2

    def backward(self, grads, fwd_inputs, fwd_outputs):
        self.backward_calls += 1
        return 2 * fwd_inputs[0] * grads[0]


def test_integer_tensors_stop_backpropagation_and_user_operators_count_as_differentiable():
    network = _linear_network(dtype=np.float64)
    square = _Square()
    network.add_custom_node(_Floor(), ["h"], ["k"])
    network.add_custom_node(_Halve(), ["k"], ["half"])
    network.add_node("Cast", ["k"], ["kf"], to=TensorProto.DOUBLE)  # a differentiable operator, integer input
    network.add_node("Add", ["half", "kf"], ["scale"])
    network.add_custom_node(square, ["h"], ["h2"])
    network.add_node("Mul", ["h2", "scale"], ["y"])
    network.add_output("y")
    x = np.random.default_rng(3).standard_normal((4, 3))
    grads = _gradients(reference.from_model(network), {"x": x}, "y")
    h = x @ network.params["W"]
    np.testing.assert_allclose(grads["W"], x.T @ (2 * h * 1.5 * np.floor(h)))  # floor(h) is a constant
    assert square.backward_calls == 1


def test_operators_declaring_a_zero_gradient_stop_backpropagation():
    # Hardmax's one-hot output is locally constant in h (zero_gradient): y = h * one_hot differentiates to
    # one_hot, and Hardmax itself is never asked for a gradient.
    network = _linear_network(seed=4, dtype=np.float64)
    network.add_node("Hardmax", ["h"], ["one_hot"], axis=1)
    network.add_node("Mul", ["h", "one_hot"], ["y"])
    network.add_output("y")
    x = np.random.default_rng(4).standard_normal((2, 3))
    grads = _gradients(reference.from_model(network), {"x": x}, "y")
    one_hot = np.eye(4)[np.argmax(x @ network.params["W"], axis=1)]
    np.testing.assert_allclose(grads["W"], x.T @ one_hot)


def test_float_outputs_of_operators_without_gradient_are_refused_not_zeroed():
    # TopK (like Attention or If in d5) has no backward in d5, but its float output does depend on h: treating
    # it as a constant would silently give wrong gradients, so planning reaches it and it says so.
    network = _linear_network(seed=4, dtype=np.float64)
    network.add_param("k", np.array([2], np.int64), trainable=False)
    network.add_node("TopK", ["h", "k"], ["top", "top_indices"], axis=1)
    network.add_node("ReduceSum", ["top"], ["y"], keepdims=0)
    network.add_output("y")
    executor = reference.from_model(network)
    with pytest.raises(UnsupportedOperatorError, match="TopK.*no gradient"):
        executor.inference_and_backprop({"x": np.ones((2, 3))}, "y")


@pytest.mark.parametrize("op_type, attributes", [("ScatterND", {}), ("ScatterND", {"reduction": "add"}),
                                                 ("ScatterElements", {"axis": 1}),
                                                 ("ScatterElements", {"axis": 0, "reduction": "add"})])
def test_gradients_flow_through_scatter_data_and_updates(op_type, attributes):
    rng = np.random.default_rng(6)
    network = _linear_network(seed=7)
    network.add_input("u", (2, 3))
    network.add_param("V", rng.standard_normal((3, 4)).astype(np.float32))
    network.add_node("MatMul", ["u", "V"], ["updates"])
    if op_type == "ScatterND":
        indices = np.array([[1], [3]])  # rows 1 and 3 of h get (or add) the two update rows
    else:
        indices = np.array([[3, 0, 1, 2], [1, 1, 0, 3]]) if attributes["axis"] == 0 else np.array([[0, 3, 2, 1],
                                                                                                     [2, 0, 1, 3]])
    network.add_param("indices", indices, trainable=False)
    network.add_param("weights", rng.standard_normal((5, 4)).astype(np.float32), trainable=False)
    network.add_node(op_type, ["h", "indices", "updates"], ["scattered"], **attributes)
    network.add_node("Mul", ["scattered", "weights"], ["y"])  # uneven weights: every gradient entry differs
    network.add_output("y")
    feeds = {"x": rng.standard_normal((5, 3)), "u": rng.standard_normal((2, 3))}
    result = check_network_gradient(network, feeds, y="y", from_model=reference.from_model)
    assert result.passed, result.summary()
    grads = _gradients(reference.from_model(network), {k: v.astype(np.float32) for k, v in feeds.items()}, "y")
    assert np.any(grads["W"] != 0) and np.any(grads["V"] != 0)
