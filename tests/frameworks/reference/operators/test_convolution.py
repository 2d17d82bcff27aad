"""Convolution operators (Conv in 3-D, ConvTranspose) against PyTorch, onnxruntime and finite differences."""
from __future__ import annotations

import numpy as np
import pytest

from d5.errors import ShapeError
from d5.frameworks.reference.operators import create_operator
from d5.ops import test_gradient
from d5.ops.validation import test_gradient as check_gradient
from _helpers import assert_close, check_backward, random_normal, torch_leaf, torch_padding

torch = pytest.importorskip("torch")
F = torch.nn.functional


@pytest.mark.parametrize("strides, pads, dilations, group, output_padding", [
    ((1, 1), (0, 0, 0, 0), (1, 1), 1, (0, 0)),
    ((2, 3), (1, 0, 1, 0), (1, 2), 2, (1, 2)),
    ((2, 2), (1, 1, 1, 1), (2, 1), 1, (1, 0)),
])
def test_conv_transpose_matches_torch(strides, pads, dilations, group, output_padding):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 4, 5, 4)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 2)).astype(np.float32)
    b = rng.standard_normal(3 * group).astype(np.float32)
    op = create_operator("ConvTranspose", {"strides": strides, "pads": pads, "dilations": dilations, "group": group,
                                           "output_padding": output_padding})
    y = op.forward([x, w, b])
    expected = F.conv_transpose2d(torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b), stride=strides,
                                  padding=pads[:2], output_padding=output_padding, groups=group, dilation=dilations)
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, expected.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("attrs, x_shape, w_shape", [
    ({"strides": [2, 3], "pads": [1, 0, 1, 0], "dilations": [1, 2], "group": 2, "output_padding": [1, 2]},
     (2, 4, 3, 3), (4, 2, 3, 2)),
    ({"strides": [2, 2], "auto_pad": "SAME_UPPER"}, (1, 2, 3, 3), (2, 3, 3, 3)),
    ({"strides": [3], "output_shape": [10]}, (2, 2, 3), (2, 1, 3)),
])
def test_conv_transpose_gradient(attrs, x_shape, w_shape):
    rng = np.random.default_rng(12)
    w = rng.standard_normal(w_shape)
    inputs = [rng.standard_normal(x_shape), w, rng.standard_normal(w_shape[1] * attrs.get("group", 1))]
    result = test_gradient(create_operator("ConvTranspose", attrs), inputs)
    assert result.passed, result.summary()


# output_shape given: ONNX ignores the pads and derives them, total = natural - output_shape, the odd unit at the
# end for SAME_UPPER and at the beginning otherwise. (d5 once kept the pads: [1, 12, 23, 34] for the first case.)
CONV_TRANSPOSE_OUTPUT_SHAPE_CASES = [
    ({"output_shape": [4]}, (1, 1, 5), (1, 1, 2)),
    ({"output_shape": [4], "pads": [0, 2]}, (1, 1, 5), (1, 1, 2)),
    ({"output_shape": [4], "auto_pad": "SAME_UPPER"}, (1, 1, 5), (1, 1, 2)),
    ({"output_shape": [3], "auto_pad": "SAME_LOWER", "strides": [2]}, (1, 2, 3), (2, 1, 3)),
    ({"kernel_shape": [2], "strides": [2], "pads": [1, 1], "output_padding": [1], "output_shape": [1]}, (1, 1, 2), (1, 1, 2)),
    ({"output_shape": [7, 5], "strides": [2, 3], "dilations": [2, 1], "pads": [1, 1, 1, 1]}, (2, 2, 3, 2), (2, 3, 3, 2)),
    ({"output_shape": [6, 9], "strides": [2, 3], "auto_pad": "SAME_UPPER", "group": 2}, (1, 4, 3, 3), (4, 1, 2, 3)),
    ({"output_shape": [8], "strides": [2]}, (1, 1, 4), (1, 1, 1)),  # one more than unpadded: a zero at the end
    ({"strides": [2], "auto_pad": "SAME_LOWER"}, (1, 1, 4), (1, 1, 1)),  # input * stride > unpadded: clamped
]


def _onnxruntime_conv_transpose(attrs, x, w):
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper

    node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, a.shape)
                                            for n, a in (("x", x), ("w", w))], [helper.make_empty_tensor_value_info("y")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x, "w": w})[0]


@pytest.mark.parametrize("attrs, x_shape, w_shape", CONV_TRANSPOSE_OUTPUT_SHAPE_CASES)
def test_conv_transpose_with_output_shape_matches_onnxruntime(attrs, x_shape, w_shape):
    rng = np.random.default_rng(15)
    x, w = rng.standard_normal(x_shape).astype(np.float32), rng.standard_normal(w_shape).astype(np.float32)
    y = create_operator("ConvTranspose", attrs).forward([x, w])
    expected = _onnxruntime_conv_transpose(attrs, x, w)
    assert y.shape == expected.shape
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)


def test_conv_transpose_output_shape_ignores_pads_worked_example():
    x, w = np.arange(1.0, 6.0).reshape(1, 1, 5), np.array([[[1.0, 10.0]]])
    for pads in (None, [1, 0], [0, 3]):
        attrs = {"output_shape": [4]} if pads is None else {"output_shape": [4], "pads": pads}
        np.testing.assert_array_equal(create_operator("ConvTranspose", attrs).forward([x, w]), [[[12, 23, 34, 45]]])


@pytest.mark.parametrize("attrs, x_shape, w_shape", CONV_TRANSPOSE_OUTPUT_SHAPE_CASES[:7])
def test_conv_transpose_with_output_shape_gradient(attrs, x_shape, w_shape):
    rng = np.random.default_rng(16)
    x, w = rng.standard_normal(x_shape), rng.standard_normal(w_shape)
    bias = rng.standard_normal(w_shape[1] * attrs.get("group", 1))
    result = test_gradient(create_operator("ConvTranspose", attrs), [x, w, bias])
    assert result.passed, result.summary()


def test_conv_transpose_output_shape_of_the_wrong_length_is_refused():
    with pytest.raises(ShapeError, match="output_shape must have 2 values"):
        create_operator("ConvTranspose", {"output_shape": [4]}).forward([np.zeros((1, 1, 3, 3)), np.zeros((1, 1, 2, 2))])


CONV_CASES = [
    # x shape, w shape, strides, pads (begins, ends), dilations, group, bias
    ((2, 3, 5, 6, 4), (4, 3, 3, 3, 3), (1, 1, 1), (1, 1, 1, 1, 1, 1), (1, 1, 1), 1, True),
    ((2, 4, 6, 5, 7), (6, 2, 3, 2, 3), (2, 1, 2), (1, 0, 2, 0, 1, 1), (1, 2, 1), 2, True),
    ((1, 2, 7, 7, 7), (3, 2, 2, 3, 2), (3, 2, 1), (0, 2, 1, 1, 0, 0), (2, 1, 3), 1, False),
    ((1, 4, 3, 4, 5), (4, 1, 1, 1, 1), (1, 2, 2), (0, 0, 0, 0, 0, 0), (1, 1, 1), 4, True),
]


@pytest.mark.parametrize("case", CONV_CASES, ids=lambda case: f"x{case[0]}w{case[1]}g{case[5]}")
def test_conv3d_matches_torch(case):
    x_shape, w_shape, strides, pads, dilations, group, with_bias = case
    inputs = [random_normal(x_shape, 0), random_normal(w_shape, 1)] + ([random_normal(w_shape[0], 2)] if with_bias else [])
    op = create_operator("Conv", {"strides": list(strides), "pads": list(pads), "dilations": list(dilations),
                                  "group": group, "kernel_shape": list(w_shape[2:])})
    y = op.forward(inputs)

    leaves = [torch_leaf(a) for a in inputs]
    expected = F.conv3d(F.pad(leaves[0], torch_padding(pads)), leaves[1], leaves[2] if with_bias else None,
                        stride=strides, dilation=dilations, groups=group)
    assert_close(y, expected)
    check_backward(op, inputs, y, expected, leaves)


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER", "VALID"])
def test_conv3d_auto_pad_matches_explicit_pads(auto_pad):
    x, w = random_normal((1, 2, 5, 4, 6), 0), random_normal((3, 2, 2, 3, 2), 1)
    strides = [2, 1, 2]
    y = create_operator("Conv", {"auto_pad": auto_pad, "strides": strides}).forward([x, w])
    # The pads ONNX implies: SAME puts the odd pad at the end (UPPER) or the beginning (LOWER).
    explicit = {"SAME_UPPER": [0, 1, 0, 1, 1, 0], "SAME_LOWER": [1, 1, 0, 0, 1, 0], "VALID": [0] * 6}[auto_pad]
    expected = create_operator("Conv", {"pads": explicit, "strides": strides}).forward([x, w])
    assert y.shape == ((1, 3, 3, 4, 3) if auto_pad != "VALID" else (1, 3, 2, 2, 3))
    np.testing.assert_array_equal(y, expected)


def test_conv3d_keeps_float32():
    x, w = random_normal((1, 2, 3, 3, 3), 0).astype(np.float32), random_normal((2, 2, 2, 2, 2), 1).astype(np.float32)
    op = create_operator("Conv", {})
    y = op.forward([x, w])
    assert y.dtype == np.float32
    grad_x, grad_w = op.backward([np.ones_like(y)], [x, w], [y])
    assert grad_x.dtype == grad_w.dtype == np.float32


def test_conv3d_gradient_matches_finite_differences():
    op = create_operator("Conv", {"strides": [2, 1, 1], "pads": [1, 0, 1, 0, 1, 0], "dilations": [1, 1, 2],
                                  "group": 2})
    result = check_gradient(op, [random_normal((1, 4, 4, 3, 5), 0), random_normal((2, 2, 2, 2, 2), 1), random_normal(2, 2)])
    assert result.passed, result


CONV_TRANSPOSE_CASES = [
    # x shape, w shape, strides, pads, dilations, output_padding, group, bias
    ((2, 3, 3, 4, 2), (3, 2, 3, 3, 3), (1, 1, 1), (0, 0, 0, 0, 0, 0), (1, 1, 1), (0, 0, 0), 1, True),
    ((1, 4, 3, 2, 3), (4, 3, 2, 3, 2), (2, 3, 2), (1, 0, 1, 0, 2, 1), (1, 1, 2), (1, 2, 0), 2, True),
    ((2, 2, 2, 3, 3), (2, 1, 3, 2, 2), (2, 1, 3), (2, 1, 0, 1, 0, 2), (2, 1, 1), (0, 0, 1), 1, False),
]


@pytest.mark.parametrize("case", CONV_TRANSPOSE_CASES, ids=lambda case: f"x{case[0]}w{case[1]}g{case[6]}")
def test_conv_transpose3d_matches_torch(case):
    x_shape, w_shape, strides, pads, dilations, output_padding, group, with_bias = case
    inputs = [random_normal(x_shape, 0), random_normal(w_shape, 1)] + ([random_normal(w_shape[1] * group, 2)] if with_bias else [])
    op = create_operator("ConvTranspose", {"strides": list(strides), "pads": list(pads), "dilations": list(dilations),
                                           "output_padding": list(output_padding), "group": group})
    y = op.forward(inputs)

    leaves = [torch_leaf(a) for a in inputs]
    full = F.conv_transpose3d(leaves[0], leaves[1], leaves[2] if with_bias else None, stride=strides,
                              output_padding=output_padding, groups=group, dilation=dilations)
    # ONNX pads crop the full output, begins and ends separately (torch's padding is symmetric).
    expected = full[(slice(None), slice(None),
                     *(slice(pads[axis], full.shape[2 + axis] - pads[axis + 3]) for axis in range(3)))]
    assert_close(y, expected)
    check_backward(op, inputs, y, expected, leaves)


def test_conv_transpose3d_output_shape_matches_pads():
    x, w = random_normal((1, 2, 3, 2, 3), 0), random_normal((2, 3, 3, 3, 2), 1)
    by_pads = create_operator("ConvTranspose", {"strides": [2, 2, 1], "pads": [1, 0, 0, 1, 0, 0]}).forward([x, w])
    by_shape = create_operator("ConvTranspose", {"strides": [2, 2, 1], "pads": [1, 0, 0, 0, 0, 0],
                                                 "output_shape": list(by_pads.shape[2:])}).forward([x, w])
    np.testing.assert_array_equal(by_shape, by_pads)
