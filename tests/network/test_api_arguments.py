"""The API's own arguments: executor inputs and graph edits of the wrong type end in d5 errors that say
what was expected, and integer inputs are never silently wrapped into the declared dtype."""
import numpy as np
import pytest

import d5
from d5.errors import GraphError, ShapeError
from d5.network.executor import check_inputs
from d5.network.graph import TensorInfo


def identity_executor(dtype="float32"):
    from d5.frameworks import reference

    net = d5.Network()
    net.add_input("x", ("N", 2), dtype)
    net.add_node("Identity", ["x"], ["y"])
    net.add_output("y")
    return reference.from_model(net)


# --- executor inputs ----------------------------------------------------------------------------------

@pytest.mark.parametrize("inputs, got", [
    ([np.ones((1, 2), np.float32)], "got list"),
    (None, "got None"),
    ("x", "got str"),
    (np.ones((1, 2), np.float32), "got ndarray of shape (1, 2)"),
])
@pytest.mark.parametrize("method", ["inference", "inference_and_backprop"])
def test_inputs_that_are_not_a_mapping_are_refused(inputs, got, method):
    executor = identity_executor()
    call = getattr(executor, method)
    with pytest.raises(ShapeError) as info:
        call(inputs) if method == "inference" else call(inputs, "y")
    message = str(info.value)
    assert "inputs must be a dict mapping input names to arrays" in message and got in message
    assert "{'x': array}" in message  # says what to pass instead


INT_CASES = [  # (declared dtype, fed array, the value that does not fit)
    ("int64", np.array([[2**63, 1]], np.uint64), 2**63),
    ("uint8", np.array([[-1, 3]], np.int64), -1),
    ("int8", np.array([[300, 0]], np.int32), 300),
    ("uint32", np.array([[2**32, 0]], np.int64), 2**32),
    ("int32", np.array([[-2**31 - 1, 0]], np.int64), -2**31 - 1),
]


@pytest.mark.parametrize("dtype, value, bad", INT_CASES, ids=[case[0] for case in INT_CASES])
def test_integer_values_outside_the_declared_dtype_are_refused_not_wrapped(dtype, value, bad):
    declared = {"x": TensorInfo("x", ("N", 2), np.dtype(dtype))}
    with pytest.raises(ShapeError) as info:
        check_inputs(declared, {"x": value})
    message = str(info.value)
    assert f"value {bad} ({value.dtype})" in message and f"does not fit the declared dtype {dtype}" in message
    assert "would wrap around" in message
    with pytest.raises(ShapeError, match=f"value {bad}"):  # the executors go through the same check
        identity_executor(dtype).inference({"x": value})


def test_integer_values_that_fit_are_cast_and_floats_still_narrow():
    declared = {"i": TensorInfo("i", ("N",), np.dtype("int64")), "u": TensorInfo("u", ("N",), np.dtype("uint8")),
                "f": TensorInfo("f", ("N",), np.dtype("float32"))}
    fed = {"i": np.array([2**63 - 1, 0], np.uint64), "u": np.array([0, 255], np.int64),
           "f": np.array([1e-50, 0.1], np.float64)}
    checked = check_inputs(declared, fed)
    assert checked["i"].tolist() == [2**63 - 1, 0] and checked["i"].dtype == np.int64
    assert checked["u"].tolist() == [0, 255] and checked["u"].dtype == np.uint8
    assert checked["f"].dtype == np.float32 and checked["f"][0] == 0.0  # float64 -> float32 stays allowed
    empty = check_inputs(declared, {"u": np.zeros(0, np.int64)})["u"]  # nothing to overflow
    assert empty.dtype == np.uint8 and empty.shape == (0,)


# --- graph editing ------------------------------------------------------------------------------------

def net_with_input():
    net = d5.Network()
    net.add_input("x", ("N", 2))
    return net


@pytest.mark.parametrize("edit, expected", [
    (lambda n: n.add_node(None, ["x"], ["y"]), "op_type must be an operator name"),
    (lambda n: n.add_node(3, ["x"], ["y"]), "op_type must be an operator name"),
    (lambda n: n.add_node("", ["x"], ["y"]), "op_type must be an operator name"),
    (lambda n: n.add_node("Relu", [3], ["y"]), "inputs[0] is 3 (int), but tensor names are str"),
    (lambda n: n.add_node("Relu", ["x", None], ["y"]), "inputs[1] is None (NoneType)"),
    (lambda n: n.add_node("Relu", ["x"], [b"y"]), "outputs[0] is b'y' (bytes)"),
    (lambda n: n.add_node("Relu", None, ["y"]), "inputs must be a list of tensor names"),
    (lambda n: n.add_node("Relu", ["x"], 7), "outputs must be a list of tensor names"),
    (lambda n: n.add_node("Relu", ["x"], ["y", "y"]), "outputs ['y'] appear more than once"),
    (lambda n: n.add_node("Relu", ["x"], ["y"], name=5), "name must be a non-empty str"),
    (lambda n: n.add_node("Relu", ["x"], ["y"], domain=5), "domain must be a str"),
    (lambda n: n.add_input(3, ("N",)), "tensor names must be non-empty strings, got 3 (int)"),
    (lambda n: n.add_input(None, ("N",)), "tensor names must be non-empty strings, got None"),
    (lambda n: n.add_param(("w",), np.ones(2)), "tensor names must be non-empty strings"),
    (lambda n: n.add_output(3), "the output must be a tensor name"),
    (lambda n: n.add_edge(3, "act"), "tensor must be a tensor name (str)"),
    (lambda n: n.add_edge("x", 0), "node_name must be a node's name (str)"),
    (lambda n: n.add_edge("x", "act", index="0"), "index must be an int input slot"),
], ids=lambda value: None)
def test_graph_edits_with_arguments_of_the_wrong_type_raise_graph_error(edit, expected):
    net = net_with_input()
    net.add_node("Relu", ["x"], ["h"], name="act")
    before = (net.nodes, net.inputs, net.params, net.outputs)
    with pytest.raises(GraphError) as info:
        edit(net)
    assert expected in str(info.value)
    assert (net.nodes, net.inputs, net.params, net.outputs) == before  # a refused edit changes nothing


@pytest.mark.parametrize("edit, expected", [
    (lambda n: n.add_input("q", 5), "shape must be a tuple of dimensions"),
    (lambda n: n.add_input("q", "N"), "shape must be a tuple of dimensions"),
    (lambda n: n.add_input("q", ("N", 2.5)), "dimension 2.5 of shape ('N', 2.5) is not an int >= 0"),
    (lambda n: n.add_input("q", (-1, 3)), "dimension -1"),
    (lambda n: n.add_input("q", (True, 3)), "dimension True"),
    (lambda n: n.add_param("p", object()), "is no tensor"),
    (lambda n: n.add_param("p", [[1, 2], [3]]), "cannot make an array"),
], ids=lambda value: None)
def test_malformed_shapes_and_parameter_values_raise_shape_error(edit, expected):
    net = net_with_input()
    with pytest.raises(ShapeError) as info:
        edit(net)
    assert expected in str(info.value)
    assert list(net.inputs) == ["x"] and not net.params


def test_a_single_tensor_name_is_one_input_not_its_characters():
    net = net_with_input()
    node = net.add_node("Relu", "x", "yy")  # a bare str is [str]: never ['y', 'y']
    assert node.inputs == ["x"] and node.outputs == ["yy"]
    net.add_output("yy")
    net.validate()
    assert net.add_node("Identity", ("yy",), ("z",)).inputs == ["yy"]  # tuples are fine too
    # numpy integers are dimensions like ints; '' marks an omitted optional input, as in ONNX
    assert net.add_input("q", (np.int64(3), "M", None)).shape == (3, "M", None)
    assert net.add_node("Clip", ["x", "", ""], ["c"]).inputs == ["x", "", ""]
    assert net.add_param("s", np.array([b"a", b"bc"], dtype=object)).dtype == object  # ONNX string tensors


@pytest.mark.parametrize("lookup", [
    lambda net: net.node(3), lambda net: net.node([1]), lambda net: net.remove_node(None),
    lambda net: net.gradient(3), lambda net: net.fetch_tensors([3]), lambda net: net.feed_tensor(3, 1.0),
])
def test_lookups_by_a_name_that_is_not_a_str_raise_graph_error(lookup):
    with pytest.raises(GraphError, match="must be a str"):
        lookup(d5.models.lenet5())


def test_fetch_tensors_takes_a_single_name_as_one_name():
    net = d5.models.lenet5()
    (weight,) = net.fetch_tensors("conv1.weight")
    assert weight.shape == net.params["conv1.weight"].shape


@pytest.mark.parametrize("y", [None, 3, ""])
def test_inference_and_backprop_needs_y_to_name_a_tensor(y):
    from d5.frameworks import reference

    executor = reference.from_model(d5.models.lenet5())
    batch = {"input": np.zeros((2, 1, 28, 28), np.float32), "label": np.zeros(2, np.int64)}
    with pytest.raises(GraphError, match="y must name the tensor to differentiate"):
        executor.inference_and_backprop(batch, y=y)


def test_a_batch_like_the_last_accepted_one_is_still_checked_where_it_differs():
    """check_inputs lets a batch of the same names, dtypes and shapes as the last accepted one through without
    the full check; any difference (dtype, shape, graph edit) gets the full check again."""
    executor = identity_executor()
    x = np.ones((3, 2), np.float32)
    assert executor.check_inputs({"x": x})["x"] is x
    assert executor.check_inputs({"x": x})["x"] is x  # the memo
    assert executor.check_inputs({"x": x.astype(np.float64)})["x"].dtype == np.float32  # cast, not passed through
    with pytest.raises(ShapeError, match="expected shape"):
        executor.check_inputs({"x": np.ones((3, 3), np.float32)})
    with pytest.raises(ShapeError, match="expected dtype"):
        executor.check_inputs({"x": np.ones((3, 2), np.int64)})
    assert executor.check_inputs({"x": x})["x"] is x
    version = executor.graph.version
    executor.graph.add_input("z", (4,), "float32")  # an edit: the next batch is checked in full
    assert executor.graph.version > version
    with pytest.raises(GraphError, match="unknown input 'w'"):
        executor.check_inputs({"x": x, "w": x})
