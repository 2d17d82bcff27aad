"""Operators check the data they are given (ranks, one-value inputs, indices in range) with d5 errors, and the
executor's backstop turns anything else escaping an operator into a d5 error naming the node, cause kept."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import d5
from d5.errors import D5Error, InsufficientMemoryError, OperatorError, ShapeError
from d5.frameworks import reference
from d5.frameworks.reference.operators import create_operator
from d5.ops import CustomPythonOp


class _Emit(CustomPythonOp):
    """A user operator returning a fixed value (or raising): values whose type validation cannot know."""

    def __init__(self, value=None, error: BaseException | None = None, backward_error: BaseException | None = None):
        super().__init__()
        self.value, self.error, self.backward_error = value, error, backward_error

    def forward(self, inputs):
        if self.error is not None:
            raise self.error
        return (inputs[0] if self.value is None else self.value,)  # a tuple: a list value is one output

    def backward(self, grads, fwd_inputs, fwd_outputs):
        raise self.backward_error


def _after_custom(op_type: str, emitted, name: str = "target", **attrs) -> d5.Network:
    net = d5.Network("runtime")
    net.add_input("x", ("N", 3))
    net.add_custom_node(_Emit(emitted), ["x"], ["t"], name="emit")
    net.add_node(op_type, ["t"], ["y"], name=name, **attrs)
    net.add_output("y")
    return net


def _run(net: d5.Network):
    return reference.from_model(net).inference({"x": np.ones((2, 3), np.float32)})


def test_raw_exceptions_become_operator_errors_naming_the_node_with_the_cause_kept():
    net = d5.Network("backstop")
    net.add_input("x", ("N", 3))
    original = IndexError("list index out of range")
    net.add_custom_node(_Emit(error=original), ["x"], ["y"], name="broken")
    net.add_output("y")
    with pytest.raises(OperatorError, match=r"node 'broken' \(_Emit\): the operator failed \(IndexError: list index "
                                            r"out of range\) on inputs \[float32 \(2, 3\)\]") as info:
        _run(net)
    assert info.value.__cause__ is original


def test_d5_errors_keep_their_class_and_gain_the_node_name():
    original = ShapeError("bad shape")
    net = d5.Network("backstop")
    net.add_input("x", ("N", 3))
    net.add_custom_node(_Emit(error=original), ["x"], ["y"], name="broken")
    net.add_output("y")
    with pytest.raises(ShapeError, match=r"^node 'broken' \(_Emit\): bad shape$") as info:
        _run(net)
    assert info.value.__cause__ is original


def test_memory_errors_become_insufficient_memory_errors():
    for error in (MemoryError(), ValueError("array is too big; `arr.size * arr.dtype.itemsize` is larger than ...")):
        net = d5.Network("backstop")
        net.add_input("x", ("N", 3))
        net.add_custom_node(_Emit(error=error), ["x"], ["y"], name="greedy")
        net.add_output("y")
        with pytest.raises(InsufficientMemoryError, match=r"node 'greedy' \(_Emit\): out of memory") as info:
            _run(net)
        assert isinstance(info.value, MemoryError) and info.value.__cause__ is error


def test_keyboard_interrupt_is_not_wrapped():
    net = d5.Network("backstop")
    net.add_input("x", ("N", 3))
    net.add_custom_node(_Emit(error=KeyboardInterrupt()), ["x"], ["y"])
    net.add_output("y")
    with pytest.raises(KeyboardInterrupt):
        _run(net)


def test_backward_failures_name_the_node_and_the_pass():
    net = d5.Network("backstop")
    net.add_input("x", ("N", 3))
    net.add_param("w", np.ones(3, np.float32))
    net.add_node("Mul", ["x", "w"], ["h"])
    original = TypeError("unsupported operand")
    net.add_custom_node(_Emit(backward_error=original), ["h"], ["y"], name="no_grad")
    net.add_node("ReduceSum", ["y"], ["loss"], keepdims=0)
    net.add_output("loss")
    executor = reference.from_model(net)
    with pytest.raises(OperatorError, match=r"node 'no_grad' \(_Emit\) backward: the operator failed \(TypeError") as info:
        executor.inference_and_backprop({"x": np.ones((2, 3), np.float32)}, "loss")
    assert info.value.__cause__ is original


def test_a_list_fed_to_a_tensor_operator_is_named_as_such():
    # The list comes from a user operator, so validation cannot know it is a sequence.
    with pytest.raises(OperatorError, match=r"node 'target' \(Relu\): input 0 \('t'\) is a sequence \(a list of 2 "
                                            r"values\), but Relu takes a tensor there") as info:
        _run(_after_custom("Relu", [np.ones(3, np.float32)] * 2))
    assert info.value.__cause__ is not None


@pytest.mark.parametrize("op_type", ["Softmax", "LogSoftmax", "Hardmax"])
def test_softmax_like_operators_refuse_integers_at_run_time(op_type):
    with pytest.raises(ShapeError, match=rf"node 'target' \({op_type}\): {op_type} takes a floating-point tensor.*"
                                         r"got int64"):
        _run(_after_custom(op_type, np.ones((2, 3), np.int64)))


@pytest.mark.parametrize("op_type", ["Softmax", "LogSoftmax", "Hardmax"])
def test_softmax_like_operators_return_empty_tensors_for_empty_inputs(op_type):
    out = create_operator(op_type, {"axis": -1}).forward([np.zeros((2, 0), np.float32)])
    assert out.shape == (2, 0) and out.dtype == np.float32


def test_einsum_refuses_dtypes_onnx_does_not_define():
    x = np.ones((2, 2), np.float32)
    for dtype in (ml_dtypes.float8_e4m3fn, np.bool_, np.complex64):
        with pytest.raises(ShapeError, match=r"Einsum: operand 0 has dtype .*Cast it first"):
            create_operator("Einsum", {"equation": "ij,jk->ik"}).forward([x.astype(dtype), x.astype(dtype)])
    bf16 = create_operator("Einsum", {"equation": "ij,jk->ik"}).forward([x.astype(ml_dtypes.bfloat16)] * 2)
    assert bf16.dtype == ml_dtypes.bfloat16 and float(bf16[0, 0]) == 2.0


def test_one_hot_with_swapped_inputs_names_the_problem():
    net = d5.Network("onehot")
    net.add_input("i", ("N",), "int64")
    net.add_param("depth", np.array(5, np.int64))
    net.add_param("values", np.array([0.0, 1.0], np.float32))
    net.add_node("OneHot", ["i", "values", "depth"], ["y"], name="encode")  # depth and values swapped
    net.add_output("y")
    with pytest.raises(ShapeError, match=r"node 'encode' \(OneHot\): OneHot: depth \(input 1\) must be one number.*"
                                         r"shape \(2,\) \(are depth and values swapped"):
        reference.from_model(net).inference({"i": np.array([0, 1])})
    ok = create_operator("OneHot", {}).forward([np.array([0, 2]), np.array([3.0]), np.array([0, 1])])
    np.testing.assert_array_equal(ok, [[1, 0, 0], [0, 0, 1]])
    with pytest.raises(ShapeError, match="depth must be at least 1"):
        create_operator("OneHot", {}).forward([np.array([0]), np.array(0), np.array([0, 1])])


def test_gather_nd_indices_out_of_range_are_named():
    net = d5.Network("gather")
    net.add_input("x", ("N", 3))
    net.add_param("i", np.array([[5, 0]], np.int64))
    net.add_node("GatherND", ["x", "i"], ["y"], name="pick")
    net.add_output("y")
    with pytest.raises(ShapeError, match=r"node 'pick' \(GatherND\): GatherND: index 5 \(at position \[0, 0\] of "
                                         r"indices\) is out of range for axis 0 of data, of size 2; use indices in \[-2, 1\]"):
        _run(net)
    data = np.arange(6.0).reshape(2, 3)
    assert create_operator("GatherND", {}).forward([data, np.array([[-1, -1]])]).tolist() == [5.0]


def test_gather_elements_output_has_the_shape_of_indices():
    data = np.arange(9.0).reshape(3, 3)
    out = create_operator("GatherElements", {"axis": 1}).forward([data, np.array([[2], [0]])])
    np.testing.assert_array_equal(out, [[2.0], [3.0]])  # rows 0 and 1 only, as ONNX (numpy would broadcast)
    with pytest.raises(ShapeError, match="larger than data"):
        create_operator("GatherElements", {"axis": 1}).forward([data, np.zeros((4, 1), np.int64)])


def _ones(*shape, dtype=np.float32):
    return np.ones(shape, dtype)


@pytest.mark.parametrize("op_type, attributes, inputs, message", [
    ("TopK", {}, [_ones(3, 4), np.zeros(0, np.int64)], r"TopK: k \(input 1\) must be a single value"),
    ("TopK", {}, [np.array(1.0), np.array([1])], "TopK: X must have at least 1 dimension"),
    ("Trilu", {}, [_ones(4, 5), np.zeros(0, np.int64)], r"Trilu: k \(input 1\) must be a single value"),
    ("Trilu", {}, [_ones(5)], "Trilu: the input must have at least 2 dimensions"),
    ("CumSum", {}, [_ones(5), np.zeros(0, np.int32)], r"CumSum: axis \(input 1\) must be a single value"),
    ("ReverseSequence", {}, [_ones(3, 2), np.array([1, 4])], r"sequence_lens must lie in \[0, 3\]"),
    ("ReverseSequence", {}, [_ones(3, 2), np.array([1, 1, 1])], r"sequence_lens must be an integer tensor of shape"),
    ("Compress", {"axis": 0}, [_ones(3, 2), np.ones(5, bool)], "condition has 5 entries, more than the 3 slices"),
    ("Range", {}, [np.arange(5), np.array(9), np.array(1)], "Range: start must be a single value"),
    ("DepthToSpace", {"blocksize": 2}, [_ones(5)], "DepthToSpace: input must be a 4-D tensor"),
    ("SpaceToDepth", {"blocksize": 2}, [_ones(5)], "SpaceToDepth: input must be a 4-D tensor"),
    ("LpPool", {"kernel_shape": [2]}, [_ones(5)], r"LpPool: X \(N, C and 1 spatial axes"),
    ("Col2Im", {}, [_ones(5), np.array([2, 2]), np.array([1, 1])], r"Col2Im: input \(N, C \* prod"),
    ("GridSample", {}, [_ones(1, 1, 4, 4), np.array(0.5, np.float32)], "GridSample: grid .* must be a 4-D tensor"),
    ("CenterCropPad", {}, [_ones(4, 4), np.array([-1, 2])], "must not have negative sizes"),
    ("Resize", {}, [_ones(1, 1, 2, 2), None, None, np.array([1, 1, -4, 4])], "Resize: sizes must not be negative"),
    ("Resize", {"coordinate_transformation_mode": "tf_crop_and_resize"},
     [_ones(1, 1, 2, 2), np.array(0.5, np.float32), None, np.array([1, 1, 4, 4])], "Resize: roi must hold 2 values"),
    ("LayerNormalization", {}, [_ones(2, 4), _ones(3)], r"Scale of shape \(3,\) does not broadcast"),
    ("RMSNormalization", {}, [_ones(2, 4), _ones(3)], r"scale of shape \(3,\) does not broadcast"),
    ("RotaryEmbedding", {}, [_ones(1, 1, 2, 4), _ones(3, 2), _ones(3, 2), np.array([[0, 7]])],
     r"position_ids must lie in \[0, 3\)"),
    ("MatMulInteger", {}, [_ones(2, 3, dtype=np.uint8), _ones(3, 2, dtype=np.uint8), _ones(5, dtype=np.uint8)],
     "a_zero_point must be a scalar or 1-D of length 2"),
    ("QLinearMatMul", {}, [_ones(2, 3, dtype=np.uint8), _ones(5), np.array(0, np.uint8), _ones(3, 2, dtype=np.uint8),
                           np.array(1.0, np.float32), np.array(0, np.uint8), np.array(1.0, np.float32),
                           np.array(0, np.uint8)], "QLinearMatMul: the scales"),
    ("QuantizeLinear", {"axis": 1}, [np.array(1.0, np.float32), _ones(3), np.zeros(3, np.uint8)],
     "apply along axis 1, which a tensor of shape"),
    ("Attention", {}, [_ones(1, 2, 3, 4), _ones(1, 2, 3, 4), _ones(1, 2, 3, 4), np.array(0.0, np.float32)],
     "attn_mask must have 1 to 4 dimensions"),
])
def test_operators_check_their_inputs(op_type, attributes, inputs, message):
    with pytest.raises(ShapeError, match=message):
        create_operator(op_type, attributes).forward(inputs)


def test_edge_cases_that_are_valid_onnx_still_work():
    exclusive = create_operator("CumSum", {"exclusive": 1}).forward([np.zeros(0), np.array(0)])
    assert exclusive.shape == (0,)
    compress = create_operator("Compress", {"axis": 0}).forward([np.arange(6.0).reshape(3, 2), np.array([0, 1])])
    np.testing.assert_array_equal(compress, [[2.0, 3.0]])  # a shorter condition drops the rest, as ONNX says
    dropout = create_operator("Dropout", {"seed": -1})  # ONNX seeds are any int64
    assert dropout.forward([np.ones(3, np.float32)])[0].shape == (3,)


def test_loop_scan_outputs_that_change_shape_are_named():
    body = d5.Network("body")
    body.is_subgraph = True
    body.add_input("i", (), "int64")
    body.add_input("cond", (), "bool")
    body.add_node("Identity", ["cond"], ["cond_out"])
    body.add_node("Range", ["zero", "i", "one"], ["growing"])  # length i: a different shape every iteration
    body.add_param("zero", np.array(0, np.int64))
    body.add_param("one", np.array(1, np.int64))
    body.add_output("cond_out")
    body.add_output("growing")
    net = d5.Network("loop")
    net.add_input("n", (), "int64")
    net.add_input("c", (), "bool")
    net.add_node("Loop", ["n", "c"], ["stacked"], name="repeat", body=body)
    net.add_output("stacked")
    with pytest.raises(ShapeError, match=r"node 'repeat' \(Loop\): Loop: the body's scan output 'growing' has shape "
                                         r"\(0,\) in iteration 0 but \(1,\) in iteration 1"):
        reference.from_model(net).inference({"n": np.array(3), "c": np.array(True)})


def test_every_error_is_a_d5_error():
    assert issubclass(OperatorError, D5Error) and issubclass(InsufficientMemoryError, D5Error)
