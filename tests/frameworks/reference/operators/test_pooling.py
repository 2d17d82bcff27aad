"""Pooling operators (MaxPool, AveragePool, GlobalMaxPool, MaxUnpool): 3-D pooling, integer MaxPool, MaxUnpool."""
from __future__ import annotations

import numpy as np
import pytest

from d5.errors import ShapeError
from d5.frameworks.reference.operators import create_operator
from d5.ops.validation import test_gradient as check_gradient
from _helpers import assert_close, check_backward, d5_outputs, onnx_reference_outputs, onnxruntime_outputs, random_normal, torch_grads, torch_leaf, torch_padding

torch = pytest.importorskip("torch")
F = torch.nn.functional


@pytest.mark.parametrize("shape", [(2, 3, 7), (2, 3, 4, 5), (1, 2, 3, 4, 2)])
def test_global_max_pool_matches_onnxruntime(shape):
    x = random_normal(shape).astype(np.float32)
    expected = onnxruntime_outputs("GlobalMaxPool", [x], 1, {}, opset=22)[0]
    actual = d5_outputs("GlobalMaxPool", [x], {})[0]
    assert actual.dtype == np.float32 and actual.shape == expected.shape
    np.testing.assert_array_equal(actual, expected)


@pytest.mark.parametrize("shape", [(2, 3, 7), (2, 3, 4, 5), (1, 2, 3, 4, 2)])
def test_global_max_pool_gradient(shape):
    result = check_gradient(create_operator("GlobalMaxPool", {}), [random_normal(shape, seed=3)])
    assert result.passed, result


def test_global_max_pool_gradient_goes_to_the_first_tied_maximum():
    x = np.array([[[[1.0, 5.0], [5.0, 2.0]], [[7.0, 7.0], [7.0, 7.0]], [[0.0, np.nan], [3.0, np.nan]]]])
    op = create_operator("GlobalMaxPool", {})
    y = op.forward([x])
    assert y[0, :2].ravel().tolist() == [5.0, 7.0] and np.isnan(y[0, 2, 0, 0])
    dy = np.array([2.0, 3.0, 4.0]).reshape(1, 3, 1, 1)
    dx = op.backward([dy], [x], [y])
    np.testing.assert_array_equal(dx[0], [[[0.0, 2.0], [0.0, 0.0]], [[3.0, 0.0], [0.0, 0.0]],
                                          [[0.0, 4.0], [0.0, 0.0]]])


def test_global_max_pool_rejects_bad_shapes():
    with pytest.raises(ShapeError, match="spatial"):
        create_operator("GlobalMaxPool", {}).forward([np.zeros((2, 3))])


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("attributes", [
    {"kernel_shape": [2, 2]},
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
    {"kernel_shape": [2, 3], "dilations": [2, 1], "ceil_mode": 1, "strides": [2, 2]},
])
def test_integer_max_pool_matches_onnxruntime(dtype, attributes):
    info = np.iinfo(dtype)
    x = np.random.default_rng(0).integers(info.min, info.max, (2, 3, 7, 6), endpoint=True).astype(dtype)
    expected = onnxruntime_outputs("MaxPool", [x], 1, attributes, opset=22)[0]
    y, indices = d5_outputs("MaxPool", [x], attributes)
    assert y.dtype == dtype and y.shape == expected.shape
    np.testing.assert_array_equal(y, expected)
    # The indices are those of the same values pooled as floats.
    np.testing.assert_array_equal(indices, d5_outputs("MaxPool", [x.astype(np.float64)], attributes)[1])


def test_integer_max_pool_1d_and_padding_only_windows():
    x = np.array([[[3, 1, 4, 1, 5]]], dtype=np.int8)
    y, _ = d5_outputs("MaxPool", [x], {"kernel_shape": [2], "strides": [2], "pads": [0, 2]})
    assert y.dtype == np.int8 and y.tolist() == [[[3, 4, 5]]]
    y, indices = d5_outputs("MaxPool", [x], {"kernel_shape": [1], "strides": [1], "pads": [0, 1]})
    assert y.tolist() == [[[3, 1, 4, 1, 5, -128]]] and indices[0, 0, -1] == -1


def _pool_with_onnx_indices(x, kernel, stride):
    """Torch max pool of x, with its per-plane indices and ONNX's whole-tensor flat indices."""
    y, plane_indices = F.max_pool2d(torch.tensor(x), kernel, stride, return_indices=True)
    planes = np.arange(x.shape[0] * x.shape[1]).reshape(x.shape[0], x.shape[1], 1, 1)
    return y.numpy(), plane_indices, plane_indices.numpy() + planes * x.shape[2] * x.shape[3]


def test_maxunpool_matches_torch_forward_and_autograd():
    x = random_normal((2, 3, 6, 4,))
    pooled, plane_indices, indices = _pool_with_onnx_indices(x, 2, 2)
    op = create_operator("MaxUnpool", {"kernel_shape": [2, 2], "strides": [2, 2]})
    y = op.forward([pooled, indices])
    np.testing.assert_array_equal(y, F.max_unpool2d(torch.tensor(pooled), plane_indices, 2, 2).numpy())
    dy = random_normal((*y.shape,), seed=1)
    (expected,) = torch_grads(lambda t: F.max_unpool2d(t, plane_indices, 2, 2), [pooled], dy)
    grad_x, grad_i = op.backward([dy], [pooled, indices], [y])
    np.testing.assert_array_equal(grad_x, expected)
    assert grad_i is None
    assert check_gradient(op, [pooled, indices]).passed


def test_maxunpool_undoes_d5_maxpool_with_padding_and_output_shape():
    x = random_normal((1, 2, 5, 5,), dtype=np.float32)
    attributes = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}
    pooled, indices = create_operator("MaxPool", attributes).forward([x])
    inputs = [pooled, indices, np.array([1, 2, 6, 7])]
    y = d5_outputs("MaxUnpool", inputs, attributes)[0]
    np.testing.assert_array_equal(y, onnx_reference_outputs("MaxUnpool", inputs, 1, attributes, opset=22)[0])
    assert y.shape == (1, 2, 6, 7) and set(y[y != 0].tolist()) == set(pooled.ravel().tolist())


def test_maxunpool_repeated_index_last_write_wins_and_gets_the_gradient():
    op = create_operator("MaxUnpool", {"kernel_shape": [2], "strides": [2]})
    x, indices = np.array([[[1.0, 2.0]]]), np.array([[[1, 1]]])
    assert op.forward([x, indices]).tolist() == [[[0.0, 2.0, 0.0, 0.0]]]
    assert op.backward([np.array([[[1.0, 5.0, 1.0, 1.0]]])], [x, indices], None)[0].tolist() == [[[0.0, 5.0]]]


MAX_POOL_CASES = [
    # kernel, strides, pads (symmetric, as torch takes them), dilations, ceil_mode
    ((2, 2, 2), (2, 2, 2), (0, 0, 0), (1, 1, 1), False),
    ((3, 2, 3), (2, 1, 2), (1, 1, 0), (1, 2, 1), True),
    ((2, 3, 2), (3, 2, 1), (1, 0, 1), (2, 1, 1), True),
]


@pytest.mark.parametrize("storage_order", [0, 1])
@pytest.mark.parametrize("case", MAX_POOL_CASES, ids=str)
def test_max_pool3d_matches_torch(case, storage_order):
    kernel, strides, pads, dilations, ceil_mode = case
    x = random_normal((2, 3, 5, 6, 7), 0)
    op = create_operator("MaxPool", {"kernel_shape": list(kernel), "strides": list(strides), "pads": list(pads) * 2,
                                     "dilations": list(dilations), "ceil_mode": int(ceil_mode),
                                     "storage_order": storage_order})
    y, indices = op.forward([x])

    leaf = torch_leaf(x)
    expected, torch_indices = F.max_pool3d(leaf, kernel, strides, pads, dilations, ceil_mode=ceil_mode,
                                           return_indices=True)
    assert_close(y, expected)
    # torch's indices are row-major within each (n, c) plane; ONNX's run over the whole X.
    within = np.unravel_index(torch_indices.numpy(), x.shape[2:])
    planes = np.arange(6).reshape(2, 3, 1, 1, 1) * (5 * 6 * 7)
    np.testing.assert_array_equal(indices, planes + np.ravel_multi_index(within, x.shape[2:],
                                                                         order="F" if storage_order else "C"))
    check_backward(op, [x], y, expected, [leaf])


def test_max_pool3d_asymmetric_pads_match_torch():
    x, pads = random_normal((1, 2, 4, 5, 3), 0), [0, 1, 1, 1, 0, 1]
    op = create_operator("MaxPool", {"kernel_shape": [2, 3, 2], "pads": pads, "strides": [1, 2, 1]})
    y, _ = op.forward([x])
    leaf = torch_leaf(x)
    expected = F.max_pool3d(F.pad(leaf, torch_padding(pads), value=-np.inf), (2, 3, 2), (1, 2, 1))
    assert_close(y, expected)
    check_backward(op, [x], y, expected, [leaf])


def test_max_pool3d_propagates_nan_and_keeps_the_first_maximum():
    x = np.zeros((1, 1, 2, 2, 2))
    x[0, 0, 1, 0, 1] = np.nan
    y, indices = create_operator("MaxPool", {"kernel_shape": [2, 2, 2]}).forward([x])
    assert np.isnan(y).all() and indices.ravel().tolist() == [5]
    y, indices = create_operator("MaxPool", {"kernel_shape": [2, 2, 2]}).forward([np.zeros((1, 1, 2, 2, 2))])
    assert y.ravel().tolist() == [0.0] and indices.ravel().tolist() == [0]


AVG_POOL_CASES = [
    # kernel, strides, pads (symmetric), ceil_mode
    ((2, 2, 2), (2, 2, 2), (0, 0, 0), False),
    ((3, 2, 3), (2, 1, 2), (1, 1, 0), True),
    ((3, 3, 2), (2, 3, 1), (1, 0, 1), False),
    ((2, 3, 3), (3, 2, 2), (1, 1, 1), True),
]


@pytest.mark.parametrize("count_include_pad", [0, 1])
@pytest.mark.parametrize("case", AVG_POOL_CASES, ids=str)
def test_avg_pool3d_matches_torch(case, count_include_pad):
    kernel, strides, pads, ceil_mode = case
    x = random_normal((2, 3, 5, 6, 7), 0)
    op = create_operator("AveragePool", {"kernel_shape": list(kernel), "strides": list(strides),
                                         "pads": list(pads) * 2, "ceil_mode": int(ceil_mode),
                                         "count_include_pad": count_include_pad})
    y = op.forward([x])
    leaf = torch_leaf(x)
    expected = F.avg_pool3d(leaf, kernel, strides, pads, ceil_mode=ceil_mode,
                            count_include_pad=bool(count_include_pad))
    assert_close(y, expected)
    check_backward(op, [x], y, expected, [leaf])


@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_avg_pool3d_gradient_matches_finite_differences(count_include_pad):
    op = create_operator("AveragePool", {"kernel_shape": [2, 3, 2], "strides": [2, 1, 2], "pads": [1, 0, 1, 0, 1, 1],
                                         "dilations": [1, 2, 1], "ceil_mode": 1,
                                         "count_include_pad": count_include_pad})
    result = check_gradient(op, [random_normal((1, 2, 5, 5, 4), 0)])
    assert result.passed, result


def test_max_pool3d_gradient_matches_finite_differences():
    op = create_operator("MaxPool", {"kernel_shape": [2, 2, 2], "strides": [1, 2, 1], "pads": [1, 0, 0, 0, 1, 1]})
    # Distinct, well-separated values: the finite differences must not cross an argmax change.
    x = np.random.default_rng(0).permutation(2 * 4 * 4 * 3).reshape(1, 2, 4, 4, 3) * 0.1
    result = check_gradient(op, [x])
    assert result.passed, result
