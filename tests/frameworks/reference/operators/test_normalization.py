"""Normalization operators (LayerNormalization, InstanceNormalization, GroupNormalization, LRN, MVN, RMSNormalization)."""
from __future__ import annotations

import numpy as np
import pytest

from d5.errors import ShapeError
from d5.frameworks.reference.operators import create_operator
from d5.ops import test_gradient
from d5.ops.validation import test_gradient as check_gradient
from _helpers import d5_outputs, onnxruntime_outputs, random_normal, torch_grads

torch = pytest.importorskip("torch")
F = torch.nn.functional


@pytest.mark.parametrize("axis", [-1, 1])
def test_layer_norm_matches_torch_and_keeps_dtype(axis):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    normalized = x.shape[axis:] if axis >= 0 else x.shape[axis:]
    scale, bias = (rng.standard_normal(normalized).astype(np.float32) for _ in range(2))
    y, mean, inv_std = create_operator("LayerNormalization", {"axis": axis, "epsilon": 1e-5}).forward([x, scale, bias])
    expected = F.layer_norm(torch.from_numpy(x), normalized, torch.from_numpy(scale), torch.from_numpy(bias), 1e-5)
    assert y.dtype == np.float32 and mean.shape == x.shape[:x.ndim - len(normalized)] + (1,) * len(normalized)
    np.testing.assert_allclose(y, expected.numpy(), rtol=1e-5, atol=1e-5)


def test_instance_norm_matches_torch():
    rng = np.random.default_rng(6)
    x, scale, bias = rng.standard_normal((2, 3, 4, 5)), rng.standard_normal(3), rng.standard_normal(3)
    y = create_operator("InstanceNormalization", {"epsilon": 1e-5}).forward([x, scale, bias])
    expected = F.instance_norm(torch.from_numpy(x), weight=torch.from_numpy(scale), bias=torch.from_numpy(bias), eps=1e-5)
    np.testing.assert_allclose(y, expected.numpy(), atol=1e-12)


def test_layer_norm_gradients_including_statistics_outputs():
    rng = np.random.default_rng(10)
    x = rng.standard_normal((2, 3, 4))
    for axis, params_shape in ((-1, (4,)), (1, (3, 4)), (0, (2, 3, 4))):
        op = create_operator("LayerNormalization", {"axis": axis})
        result = test_gradient(op, [x, rng.standard_normal(params_shape), rng.standard_normal(params_shape)])
        assert result.passed, result.summary()


def test_instance_norm_gradient():
    rng = np.random.default_rng(11)
    result = test_gradient(create_operator("InstanceNormalization", {}),
                           [rng.standard_normal((2, 3, 4, 2)), rng.standard_normal(3), rng.standard_normal(3)])
    assert result.passed, result.summary()


@pytest.mark.parametrize("size, alpha, beta, bias", [(5, 1e-2, 0.75, 2.0), (3, 0.5, 0.6, 1.0), (1, 1.0, 1.0, 0.5)])
def test_lrn_matches_torch_forward_and_autograd(size, alpha, beta, bias):
    x, dy = random_normal((2, 6, 3, 4,)), random_normal((2, 6, 3, 4,), seed=1)
    attributes = {"size": size, "alpha": alpha, "beta": beta, "bias": bias}
    op = create_operator("LRN", attributes)
    y = op.forward([x])
    expected = F.local_response_norm(torch.tensor(x), size, alpha=alpha, beta=beta, k=bias).numpy()
    np.testing.assert_allclose(y, expected, rtol=1e-12, atol=1e-12)
    (expected_dx,) = torch_grads(lambda t: F.local_response_norm(t, size, alpha=alpha, beta=beta, k=bias), [x], dy)
    np.testing.assert_allclose(op.backward([dy], [x], [y]), expected_dx, rtol=1e-10, atol=1e-12)


def test_lrn_gradient_matches_finite_differences():
    assert check_gradient(create_operator("LRN", {"size": 3, "alpha": 0.5}), [random_normal((2, 5, 3,))]).passed


@pytest.mark.parametrize("size", [2, 4, 0, -1, -2**31])
def test_lrn_refuses_even_and_non_positive_sizes(size):
    # PyTorch centres even windows before c, ONNX's formula after c, and onnxruntime refuses them: no portable
    # answer, so d5 refuses them as onnxruntime does (and sizes below 1 mean nothing).
    with pytest.raises(ShapeError, match="odd"):
        create_operator("LRN", {"size": size})


@pytest.mark.parametrize("name", ["alpha", "beta", "bias"])
def test_lrn_refuses_non_finite_coefficients(name):
    with pytest.raises(ShapeError, match=name):
        create_operator("LRN", {"size": 3, name: float("nan")})


def test_lrn_zero_alpha_and_beta_are_the_identity():
    x = random_normal((1, 4, 3, 3,))
    np.testing.assert_array_equal(d5_outputs("LRN", [x], {"size": 3, "alpha": 0.0, "beta": 0.0})[0], x)


def test_lrn_window_wider_than_the_channels_sums_them_all_in_time_independent_of_size():
    # size 2**28 once looped 2**28 times (a hang); any window reaching past every channel is the same window.
    x, dy = random_normal((1, 4, 3, 3,)), random_normal((1, 4, 3, 3,), seed=1)
    huge = create_operator("LRN", {"size": 2**28 + 1, "alpha": 0.5 * (2**28 + 1)})
    widest = create_operator("LRN", {"size": 7, "alpha": 0.5 * 7})  # the same alpha / size, all 4 channels
    y = huge.forward([x])
    np.testing.assert_allclose(y, widest.forward([x]), rtol=1e-12)
    expected = x / (1.0 + 0.5 * (x * x).sum(axis=1, keepdims=True)) ** 0.75
    np.testing.assert_allclose(y, expected, rtol=1e-12)
    np.testing.assert_allclose(huge.backward([dy], [x], [y]), widest.backward([dy], [x], [y]), rtol=1e-10)


def test_lrn_float32_matches_onnxruntime():
    x = random_normal((2, 7, 4, 4,), dtype=np.float32)
    y = d5_outputs("LRN", [x], {"size": 3})[0]
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, onnxruntime_outputs("LRN", [x], 1, {"size": 3}, opset=13)[0], rtol=1e-5, atol=1e-6)


def test_group_norm_per_channel_matches_torch_forward_and_autograd():
    x, scale, bias, dy = random_normal((3, 6, 4, 2,)), random_normal((6,), seed=1), random_normal((6,), seed=2), random_normal((3, 6, 4, 2,), seed=3)
    op = create_operator("GroupNormalization", {"num_groups": 3, "epsilon": 1e-3})
    y = op.forward([x, scale, bias])

    def torch_group_norm(t, w, b):
        return F.group_norm(t, 3, w, b, eps=1e-3)

    expected = torch_group_norm(*(torch.tensor(a) for a in (x, scale, bias))).numpy()
    np.testing.assert_allclose(y, expected, rtol=1e-10, atol=1e-12)
    for got, want in zip(op.backward([dy], [x, scale, bias], [y]), torch_grads(torch_group_norm, [x, scale, bias], dy)):
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-11)


def test_group_norm_per_group_scale_is_opset_18():
    x, scale, bias = random_normal((2, 6, 5,), dtype=np.float32), random_normal((2,), seed=1, dtype=np.float32), random_normal((2,), seed=2, dtype=np.float32)
    attributes = {"num_groups": 2}
    y = d5_outputs("GroupNormalization", [x, scale, bias], attributes)[0]
    np.testing.assert_allclose(y, onnxruntime_outputs("GroupNormalization", [x, scale, bias], 1, attributes, opset=18)[0],
                               rtol=1e-5, atol=1e-5)
    # The same as per-channel parameters that repeat each group's value.
    per_channel = d5_outputs("GroupNormalization", [x, np.repeat(scale, 3), np.repeat(bias, 3)], attributes)[0]
    np.testing.assert_allclose(y, per_channel, rtol=1e-6)


def test_group_norm_float32_matches_onnxruntime_opset_21():
    x, scale, bias = random_normal((2, 4, 3, 3,), dtype=np.float32), random_normal((4,), seed=1, dtype=np.float32), random_normal((4,), seed=2, dtype=np.float32)
    attributes = {"num_groups": 2, "epsilon": 1e-2}
    y = d5_outputs("GroupNormalization", [x, scale, bias], attributes)[0]
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, onnxruntime_outputs("GroupNormalization", [x, scale, bias], 1, attributes, opset=21)[0],
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("params", [4, 2])
def test_group_norm_gradients_match_finite_differences(params):
    x = random_normal((2, 4, 3,))
    result = check_gradient(create_operator("GroupNormalization", {"num_groups": 2}),
                            [x, random_normal((params,), seed=1), random_normal((params,), seed=2)])
    assert result.passed, result.summary()


@pytest.mark.parametrize("attributes", [{}, {"axes": [1]}, {"axes": [-1, 0]}])
def test_mvn_matches_onnxruntime_and_finite_differences(attributes):
    x = random_normal((2, 3, 4, 2,), dtype=np.float32)
    np.testing.assert_allclose(d5_outputs("MeanVarianceNormalization", [x], attributes)[0],
                               onnxruntime_outputs("MeanVarianceNormalization", [x], 1, attributes, opset=13)[0],
                               rtol=1e-5, atol=1e-5)
    result = check_gradient(create_operator("MeanVarianceNormalization", attributes), [x.astype(np.float64)])
    assert result.passed, result.summary()


def test_mvn_constant_slice_is_zero_not_nan():
    y = d5_outputs("MeanVarianceNormalization", [np.full((1, 2, 2, 2), 3.0)])[0]
    np.testing.assert_array_equal(y, 0.0)


def test_rms_normalization_gradient():
    from d5.frameworks.reference.operators import create_operator
    from d5.ops.validation import test_gradient

    rng = np.random.default_rng(1234)
    x, scale = rng.standard_normal((2, 3, 4)), rng.standard_normal((3, 4))
    result = test_gradient(create_operator("RMSNormalization", {"axis": 1, "epsilon": 1e-3}), [x, scale])
    assert result.passed, result
    broadcast_scale = rng.standard_normal((1, 4))  # scale broadcast over the normalized block
    result = test_gradient(create_operator("RMSNormalization", {"axis": -2}), [x, broadcast_scale])
    assert result.passed, result
