"""3-D (5-D input) Conv, ConvTranspose, MaxPool and AveragePool of the reference framework (the NumPy path of
``windows_nd``), forward and every gradient, against PyTorch in float64 and against finite differences."""
from __future__ import annotations

import numpy as np
import pytest

from d5.frameworks.reference.operators import create_operator
from d5.frameworks.reference.operators.windows_nd import col2im, im2col
from d5.ops.validation import test_gradient as check_gradient

torch = pytest.importorskip("torch")
F = torch.nn.functional


def _random(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape)


def _leaf(array):
    return torch.tensor(array, dtype=torch.float64, requires_grad=True)


def _torch_padding(pads):
    """ONNX pads (begins, then ends) -> F.pad's order (last axis first)."""
    rank = len(pads) // 2
    return [p for axis in reversed(range(rank)) for p in (pads[axis], pads[axis + rank])]


def _assert_close(actual, expected):
    expected = expected.detach().numpy() if hasattr(expected, "detach") else expected
    assert actual.shape == expected.shape
    np.testing.assert_allclose(actual, expected, rtol=1e-10, atol=1e-10)


def _check_backward(op, inputs, y, expected, leaves, seed=99):
    """Backward of ``op`` against autograd of ``expected`` for the same random dY, for every leaf."""
    dy = _random(y.shape, seed)
    expected.backward(torch.tensor(dy))
    grads = op.backward([dy], inputs, [y])
    grads = grads if isinstance(grads, tuple) else (grads,)
    for grad, leaf in zip(grads, leaves):
        _assert_close(grad, leaf.grad)


# -- Conv ----------------------------------------------------------------------------------------------------------

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
    inputs = [_random(x_shape, 0), _random(w_shape, 1)] + ([_random(w_shape[0], 2)] if with_bias else [])
    op = create_operator("Conv", {"strides": list(strides), "pads": list(pads), "dilations": list(dilations),
                                  "group": group, "kernel_shape": list(w_shape[2:])})
    y = op.forward(inputs)

    leaves = [_leaf(a) for a in inputs]
    expected = F.conv3d(F.pad(leaves[0], _torch_padding(pads)), leaves[1], leaves[2] if with_bias else None,
                        stride=strides, dilation=dilations, groups=group)
    _assert_close(y, expected)
    _check_backward(op, inputs, y, expected, leaves)


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER", "VALID"])
def test_conv3d_auto_pad_matches_explicit_pads(auto_pad):
    x, w = _random((1, 2, 5, 4, 6), 0), _random((3, 2, 2, 3, 2), 1)
    strides = [2, 1, 2]
    y = create_operator("Conv", {"auto_pad": auto_pad, "strides": strides}).forward([x, w])
    # The pads ONNX implies: SAME puts the odd pad at the end (UPPER) or the beginning (LOWER).
    explicit = {"SAME_UPPER": [0, 1, 0, 1, 1, 0], "SAME_LOWER": [1, 1, 0, 0, 1, 0], "VALID": [0] * 6}[auto_pad]
    expected = create_operator("Conv", {"pads": explicit, "strides": strides}).forward([x, w])
    assert y.shape == ((1, 3, 3, 4, 3) if auto_pad != "VALID" else (1, 3, 2, 2, 3))
    np.testing.assert_array_equal(y, expected)


def test_conv3d_keeps_float32():
    x, w = _random((1, 2, 3, 3, 3), 0).astype(np.float32), _random((2, 2, 2, 2, 2), 1).astype(np.float32)
    op = create_operator("Conv", {})
    y = op.forward([x, w])
    assert y.dtype == np.float32
    grad_x, grad_w = op.backward([np.ones_like(y)], [x, w], [y])
    assert grad_x.dtype == grad_w.dtype == np.float32


def test_conv3d_gradient_matches_finite_differences():
    op = create_operator("Conv", {"strides": [2, 1, 1], "pads": [1, 0, 1, 0, 1, 0], "dilations": [1, 1, 2],
                                  "group": 2})
    result = check_gradient(op, [_random((1, 4, 4, 3, 5), 0), _random((2, 2, 2, 2, 2), 1), _random(2, 2)])
    assert result.passed, result


def test_numpy_col2im_is_the_adjoint_of_im2col():
    # <im2col(x), c> == <x, col2im(c)> for every x and c, including a window that overhangs the end.
    args = ((2, 3, 2), (2, 1, 3), (1, 0, 2), (1, 2, 1), (3, 2, 2))
    x, x_shape = _random((2, 3, 5, 4, 6), 0), (2, 3, 5, 4, 6)
    columns = im2col(x, *args)
    c = _random(columns.shape, 1)
    assert np.isclose(np.vdot(columns, c), np.vdot(x, col2im(c, x_shape, *args)))


# -- ConvTranspose -------------------------------------------------------------------------------------------------

CONV_TRANSPOSE_CASES = [
    # x shape, w shape, strides, pads, dilations, output_padding, group, bias
    ((2, 3, 3, 4, 2), (3, 2, 3, 3, 3), (1, 1, 1), (0, 0, 0, 0, 0, 0), (1, 1, 1), (0, 0, 0), 1, True),
    ((1, 4, 3, 2, 3), (4, 3, 2, 3, 2), (2, 3, 2), (1, 0, 1, 0, 2, 1), (1, 1, 2), (1, 2, 0), 2, True),
    ((2, 2, 2, 3, 3), (2, 1, 3, 2, 2), (2, 1, 3), (2, 1, 0, 1, 0, 2), (2, 1, 1), (0, 0, 1), 1, False),
]


@pytest.mark.parametrize("case", CONV_TRANSPOSE_CASES, ids=lambda case: f"x{case[0]}w{case[1]}g{case[6]}")
def test_conv_transpose3d_matches_torch(case):
    x_shape, w_shape, strides, pads, dilations, output_padding, group, with_bias = case
    inputs = [_random(x_shape, 0), _random(w_shape, 1)] + ([_random(w_shape[1] * group, 2)] if with_bias else [])
    op = create_operator("ConvTranspose", {"strides": list(strides), "pads": list(pads), "dilations": list(dilations),
                                           "output_padding": list(output_padding), "group": group})
    y = op.forward(inputs)

    leaves = [_leaf(a) for a in inputs]
    full = F.conv_transpose3d(leaves[0], leaves[1], leaves[2] if with_bias else None, stride=strides,
                              output_padding=output_padding, groups=group, dilation=dilations)
    # ONNX pads crop the full output, begins and ends separately (torch's padding is symmetric).
    expected = full[(slice(None), slice(None),
                     *(slice(pads[axis], full.shape[2 + axis] - pads[axis + 3]) for axis in range(3)))]
    _assert_close(y, expected)
    _check_backward(op, inputs, y, expected, leaves)


def test_conv_transpose3d_output_shape_matches_pads():
    x, w = _random((1, 2, 3, 2, 3), 0), _random((2, 3, 3, 3, 2), 1)
    by_pads = create_operator("ConvTranspose", {"strides": [2, 2, 1], "pads": [1, 0, 0, 1, 0, 0]}).forward([x, w])
    by_shape = create_operator("ConvTranspose", {"strides": [2, 2, 1], "pads": [1, 0, 0, 0, 0, 0],
                                                 "output_shape": list(by_pads.shape[2:])}).forward([x, w])
    np.testing.assert_array_equal(by_shape, by_pads)


# -- MaxPool -------------------------------------------------------------------------------------------------------

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
    x = _random((2, 3, 5, 6, 7), 0)
    op = create_operator("MaxPool", {"kernel_shape": list(kernel), "strides": list(strides), "pads": list(pads) * 2,
                                     "dilations": list(dilations), "ceil_mode": int(ceil_mode),
                                     "storage_order": storage_order})
    y, indices = op.forward([x])

    leaf = _leaf(x)
    expected, torch_indices = F.max_pool3d(leaf, kernel, strides, pads, dilations, ceil_mode=ceil_mode,
                                           return_indices=True)
    _assert_close(y, expected)
    # torch's indices are row-major within each (n, c) plane; ONNX's run over the whole X.
    within = np.unravel_index(torch_indices.numpy(), x.shape[2:])
    planes = np.arange(6).reshape(2, 3, 1, 1, 1) * (5 * 6 * 7)
    np.testing.assert_array_equal(indices, planes + np.ravel_multi_index(within, x.shape[2:],
                                                                         order="F" if storage_order else "C"))
    _check_backward(op, [x], y, expected, [leaf])


def test_max_pool3d_asymmetric_pads_match_torch():
    x, pads = _random((1, 2, 4, 5, 3), 0), [0, 1, 1, 1, 0, 1]
    op = create_operator("MaxPool", {"kernel_shape": [2, 3, 2], "pads": pads, "strides": [1, 2, 1]})
    y, _ = op.forward([x])
    leaf = _leaf(x)
    expected = F.max_pool3d(F.pad(leaf, _torch_padding(pads), value=-np.inf), (2, 3, 2), (1, 2, 1))
    _assert_close(y, expected)
    _check_backward(op, [x], y, expected, [leaf])


def test_max_pool3d_propagates_nan_and_keeps_the_first_maximum():
    x = np.zeros((1, 1, 2, 2, 2))
    x[0, 0, 1, 0, 1] = np.nan
    y, indices = create_operator("MaxPool", {"kernel_shape": [2, 2, 2]}).forward([x])
    assert np.isnan(y).all() and indices.ravel().tolist() == [5]
    y, indices = create_operator("MaxPool", {"kernel_shape": [2, 2, 2]}).forward([np.zeros((1, 1, 2, 2, 2))])
    assert y.ravel().tolist() == [0.0] and indices.ravel().tolist() == [0]


# -- AveragePool ---------------------------------------------------------------------------------------------------

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
    x = _random((2, 3, 5, 6, 7), 0)
    op = create_operator("AveragePool", {"kernel_shape": list(kernel), "strides": list(strides),
                                         "pads": list(pads) * 2, "ceil_mode": int(ceil_mode),
                                         "count_include_pad": count_include_pad})
    y = op.forward([x])
    leaf = _leaf(x)
    expected = F.avg_pool3d(leaf, kernel, strides, pads, ceil_mode=ceil_mode,
                            count_include_pad=bool(count_include_pad))
    _assert_close(y, expected)
    _check_backward(op, [x], y, expected, [leaf])


@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_avg_pool3d_gradient_matches_finite_differences(count_include_pad):
    op = create_operator("AveragePool", {"kernel_shape": [2, 3, 2], "strides": [2, 1, 2], "pads": [1, 0, 1, 0, 1, 1],
                                         "dilations": [1, 2, 1], "ceil_mode": 1,
                                         "count_include_pad": count_include_pad})
    result = check_gradient(op, [_random((1, 2, 5, 5, 4), 0)])
    assert result.passed, result


def test_max_pool3d_gradient_matches_finite_differences():
    op = create_operator("MaxPool", {"kernel_shape": [2, 2, 2], "strides": [1, 2, 1], "pads": [1, 0, 0, 0, 1, 1]})
    # Distinct, well-separated values: the finite differences must not cross an argmax change.
    x = np.random.default_rng(0).permutation(2 * 4 * 4 * 3).reshape(1, 2, 4, 4, 3) * 0.1
    result = check_gradient(op, [x])
    assert result.passed, result
