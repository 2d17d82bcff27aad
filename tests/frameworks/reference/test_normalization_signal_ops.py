"""LRN, GroupNormalization, MeanVarianceNormalization, MaxUnpool (cnn_norm_ops.py) and STFT, the window
generators and MelWeightMatrix (signal_roi_ops.py) against PyTorch, onnxruntime (or onnx.reference where
onnxruntime lacks the case), ONNX's node test cases, PyTorch autograd and finite-difference gradients."""
import numpy as np
import pytest

from d5.bench.conformance import failures, uncovered_operators, run_conformance
from d5.errors import ShapeError, UnsupportedOperatorError
from d5.frameworks.reference.operators import create_operator
from d5.ops.validation import test_gradient as check_gradient

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
from onnx import helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

F = torch.nn.functional
OPERATOR_CASES = ("test_lrn", "test_group_normalization", "test_mvn", "test_maxunpool", "test_hannwindow",
                  "test_hammingwindow", "test_blackmanwindow", "test_melweightmatrix", "test_stft")
OWN_OPERATORS = {"LRN", "GroupNormalization", "MeanVarianceNormalization", "MaxUnpool", "HannWindow",
                 "HammingWindow", "BlackmanWindow", "MelWeightMatrix", "STFT"}
SIGNAL_OPERATORS = ["HannWindow", "HammingWindow", "BlackmanWindow", "MelWeightMatrix", "STFT"]


@pytest.fixture(scope="module")
def results():
    return run_conformance(kinds=("node",), patterns=OPERATOR_CASES, progress=False)


def test_onnx_node_cases_pass_with_d5_operators(results):
    judged = [r for r in results if r.status != "excluded" and set(r.operators) & OWN_OPERATORS]
    assert len(judged) >= 16
    failing = failures(judged)
    assert not failing, "\n".join(failing)


def test_every_operator_is_covered(results):
    missing = uncovered_operators(results, OWN_OPERATORS)
    assert not missing, missing


# ------------------------------------------------------------------------------------------------ oracles

def _model(op_type, inputs, attributes, opset):
    names = [f"x{i}" if x is not None else "" for i, x in enumerate(inputs)]
    node = helper.make_node(op_type, names, ["y"], **attributes)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(np.asarray(x).dtype),
                                                    np.shape(x)) for n, x in zip(names, inputs) if n],
        [helper.make_empty_tensor_value_info("y")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model, {n: np.asarray(x) for n, x in zip(names, inputs) if n}


def onnxruntime_output(op_type, inputs, attributes=None, opset=21):
    ort = pytest.importorskip("onnxruntime")
    model, feeds = _model(op_type, inputs, attributes or {}, opset)
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]


def onnx_reference_output(op_type, inputs, attributes=None, opset=21):
    model, feeds = _model(op_type, inputs, attributes or {}, opset)
    return ReferenceEvaluator(model).run(None, feeds)[0]


def d5_forward(op_type, inputs, attributes=None):
    return create_operator(op_type, attributes or {}).forward(inputs)


def normal(*shape, seed=0, dtype=np.float64):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def torch_grads(fn, inputs, grad_output):
    """Gradients of ``sum(fn(*inputs) * grad_output)`` for the float inputs, by PyTorch autograd."""
    tensors = [torch.tensor(x, requires_grad=True) for x in inputs]
    (fn(*tensors) * torch.tensor(grad_output)).sum().backward()
    return [t.grad.numpy() for t in tensors]


# ------------------------------------------------------------------------------------------------------ LRN

@pytest.mark.parametrize("size, alpha, beta, bias", [(5, 1e-2, 0.75, 2.0), (3, 0.5, 0.6, 1.0), (1, 1.0, 1.0, 0.5)])
def test_lrn_matches_torch_forward_and_autograd(size, alpha, beta, bias):
    x, dy = normal(2, 6, 3, 4), normal(2, 6, 3, 4, seed=1)
    attributes = {"size": size, "alpha": alpha, "beta": beta, "bias": bias}
    op = create_operator("LRN", attributes)
    y = op.forward([x])
    expected = F.local_response_norm(torch.tensor(x), size, alpha=alpha, beta=beta, k=bias).numpy()
    np.testing.assert_allclose(y, expected, rtol=1e-12, atol=1e-12)
    (expected_dx,) = torch_grads(lambda t: F.local_response_norm(t, size, alpha=alpha, beta=beta, k=bias), [x], dy)
    np.testing.assert_allclose(op.backward([dy], [x], [y]), expected_dx, rtol=1e-10, atol=1e-12)


def test_lrn_gradient_matches_finite_differences():
    assert check_gradient(create_operator("LRN", {"size": 3, "alpha": 0.5}), [normal(2, 5, 3)]).passed


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
    x = normal(1, 4, 3, 3)
    np.testing.assert_array_equal(d5_forward("LRN", [x], {"size": 3, "alpha": 0.0, "beta": 0.0}), x)


def test_lrn_window_wider_than_the_channels_sums_them_all_in_time_independent_of_size():
    # size 2**28 once looped 2**28 times (a hang); any window reaching past every channel is the same window.
    x, dy = normal(1, 4, 3, 3), normal(1, 4, 3, 3, seed=1)
    huge = create_operator("LRN", {"size": 2**28 + 1, "alpha": 0.5 * (2**28 + 1)})
    widest = create_operator("LRN", {"size": 7, "alpha": 0.5 * 7})  # the same alpha / size, all 4 channels
    y = huge.forward([x])
    np.testing.assert_allclose(y, widest.forward([x]), rtol=1e-12)
    expected = x / (1.0 + 0.5 * (x * x).sum(axis=1, keepdims=True)) ** 0.75
    np.testing.assert_allclose(y, expected, rtol=1e-12)
    np.testing.assert_allclose(huge.backward([dy], [x], [y]), widest.backward([dy], [x], [y]), rtol=1e-10)


def test_lrn_float32_matches_onnxruntime():
    x = normal(2, 7, 4, 4, dtype=np.float32)
    y = d5_forward("LRN", [x], {"size": 3})
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, onnxruntime_output("LRN", [x], {"size": 3}, opset=13), rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------------------------------ GroupNormalization

def test_group_norm_per_channel_matches_torch_forward_and_autograd():
    x, scale, bias, dy = normal(3, 6, 4, 2), normal(6, seed=1), normal(6, seed=2), normal(3, 6, 4, 2, seed=3)
    op = create_operator("GroupNormalization", {"num_groups": 3, "epsilon": 1e-3})
    y = op.forward([x, scale, bias])

    def torch_group_norm(t, w, b):
        return F.group_norm(t, 3, w, b, eps=1e-3)

    expected = torch_group_norm(*(torch.tensor(a) for a in (x, scale, bias))).numpy()
    np.testing.assert_allclose(y, expected, rtol=1e-10, atol=1e-12)
    for got, want in zip(op.backward([dy], [x, scale, bias], [y]), torch_grads(torch_group_norm, [x, scale, bias], dy)):
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-11)


def test_group_norm_per_group_scale_is_opset_18():
    x, scale, bias = normal(2, 6, 5, dtype=np.float32), normal(2, seed=1, dtype=np.float32), normal(2, seed=2,
                                                                                                  dtype=np.float32)
    attributes = {"num_groups": 2}
    y = d5_forward("GroupNormalization", [x, scale, bias], attributes)
    np.testing.assert_allclose(y, onnxruntime_output("GroupNormalization", [x, scale, bias], attributes, opset=18),
                               rtol=1e-5, atol=1e-5)
    # The same as per-channel parameters that repeat each group's value.
    per_channel = d5_forward("GroupNormalization", [x, np.repeat(scale, 3), np.repeat(bias, 3)], attributes)
    np.testing.assert_allclose(y, per_channel, rtol=1e-6)


def test_group_norm_float32_matches_onnxruntime_opset_21():
    x, scale, bias = normal(2, 4, 3, 3, dtype=np.float32), normal(4, seed=1, dtype=np.float32), normal(4, seed=2,
                                                                                                       dtype=np.float32)
    attributes = {"num_groups": 2, "epsilon": 1e-2}
    y = d5_forward("GroupNormalization", [x, scale, bias], attributes)
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, onnxruntime_output("GroupNormalization", [x, scale, bias], attributes),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("params", [4, 2])
def test_group_norm_gradients_match_finite_differences(params):
    x = normal(2, 4, 3)
    result = check_gradient(create_operator("GroupNormalization", {"num_groups": 2}),
                            [x, normal(params, seed=1), normal(params, seed=2)])
    assert result.passed, result.summary()


# ------------------------------------------------------------------------------- MeanVarianceNormalization

@pytest.mark.parametrize("attributes", [{}, {"axes": [1]}, {"axes": [-1, 0]}])
def test_mvn_matches_onnxruntime_and_finite_differences(attributes):
    x = normal(2, 3, 4, 2, dtype=np.float32)
    np.testing.assert_allclose(d5_forward("MeanVarianceNormalization", [x], attributes),
                               onnxruntime_output("MeanVarianceNormalization", [x], attributes, opset=13),
                               rtol=1e-5, atol=1e-5)
    result = check_gradient(create_operator("MeanVarianceNormalization", attributes), [x.astype(np.float64)])
    assert result.passed, result.summary()


def test_mvn_constant_slice_is_zero_not_nan():
    y = d5_forward("MeanVarianceNormalization", [np.full((1, 2, 2, 2), 3.0)])
    np.testing.assert_array_equal(y, 0.0)


# ------------------------------------------------------------------------------------------------ MaxUnpool

def _pool_with_onnx_indices(x, kernel, stride):
    """Torch max pool of x, with its per-plane indices and ONNX's whole-tensor flat indices."""
    y, plane_indices = F.max_pool2d(torch.tensor(x), kernel, stride, return_indices=True)
    planes = np.arange(x.shape[0] * x.shape[1]).reshape(x.shape[0], x.shape[1], 1, 1)
    return y.numpy(), plane_indices, plane_indices.numpy() + planes * x.shape[2] * x.shape[3]


def test_maxunpool_matches_torch_forward_and_autograd():
    x = normal(2, 3, 6, 4)
    pooled, plane_indices, indices = _pool_with_onnx_indices(x, 2, 2)
    op = create_operator("MaxUnpool", {"kernel_shape": [2, 2], "strides": [2, 2]})
    y = op.forward([pooled, indices])
    np.testing.assert_array_equal(y, F.max_unpool2d(torch.tensor(pooled), plane_indices, 2, 2).numpy())
    dy = normal(*y.shape, seed=1)
    (expected,) = torch_grads(lambda t: F.max_unpool2d(t, plane_indices, 2, 2), [pooled], dy)
    grad_x, grad_i = op.backward([dy], [pooled, indices], [y])
    np.testing.assert_array_equal(grad_x, expected)
    assert grad_i is None
    assert check_gradient(op, [pooled, indices]).passed


def test_maxunpool_undoes_d5_maxpool_with_padding_and_output_shape():
    x = normal(1, 2, 5, 5, dtype=np.float32)
    attributes = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}
    pooled, indices = create_operator("MaxPool", attributes).forward([x])
    inputs = [pooled, indices, np.array([1, 2, 6, 7])]
    y = d5_forward("MaxUnpool", inputs, attributes)
    np.testing.assert_array_equal(y, onnx_reference_output("MaxUnpool", inputs, attributes, opset=22))
    assert y.shape == (1, 2, 6, 7) and set(y[y != 0].tolist()) == set(pooled.ravel().tolist())


def test_maxunpool_repeated_index_last_write_wins_and_gets_the_gradient():
    op = create_operator("MaxUnpool", {"kernel_shape": [2], "strides": [2]})
    x, indices = np.array([[[1.0, 2.0]]]), np.array([[[1, 1]]])
    assert op.forward([x, indices]).tolist() == [[[0.0, 2.0, 0.0, 0.0]]]
    assert op.backward([np.array([[[1.0, 5.0, 1.0, 1.0]]])], [x, indices], None)[0].tolist() == [[[0.0, 5.0]]]


# ------------------------------------------------------------------------------------------- signal operators

@pytest.mark.parametrize("periodic", [0, 1])
@pytest.mark.parametrize("size", [1, 2, 7, 16])
def test_windows_match_torch_and_onnxruntime(periodic, size):
    attributes, inputs = {"periodic": periodic, "output_datatype": 11}, [np.array(size, np.int64)]
    hann, blackman = (d5_forward(op, inputs, attributes) for op in ("HannWindow", "BlackmanWindow"))
    assert hann.dtype == np.float64
    if size == 1:  # torch gives [1]; ONNX's formula (and onnxruntime) a periodic [0], a symmetric one 0/0: d5 gives [1]
        assert hann.tolist() == [1.0 - periodic]
        return
    np.testing.assert_allclose(hann, torch.hann_window(size, periodic=bool(periodic), dtype=torch.float64).numpy(),
                               atol=1e-12)
    np.testing.assert_allclose(blackman, torch.blackman_window(size, periodic=bool(periodic),
                                                               dtype=torch.float64).numpy(), atol=1e-12)
    if size > 1:  # ONNX's Hamming alpha is 25/46, not torch's 0.54; onnxruntime gives NaN for symmetric size 1
        hamming = d5_forward("HammingWindow", inputs, {"periodic": periodic})
        assert hamming.dtype == np.float32
        np.testing.assert_allclose(hamming, onnxruntime_output("HammingWindow", inputs, {"periodic": periodic},
                                                               opset=17), atol=1e-6)


@pytest.mark.parametrize("onesided", [0, 1])
def test_stft_matches_torch(onesided):
    signal, window = normal(2, 50), torch.hann_window(12, dtype=torch.float64)
    out = d5_forward("STFT", [signal[..., None], np.array(5), window.numpy(), np.array(12)], {"onesided": onesided})
    expected = torch.stft(torch.tensor(signal), n_fft=12, hop_length=5, window=window, center=False,
                          onesided=bool(onesided), return_complex=True).transpose(1, 2).numpy()
    assert out.shape == expected.shape + (2,)
    np.testing.assert_allclose(out[..., 0] + 1j * out[..., 1], expected, atol=1e-12)


def test_stft_complex_signal_and_defaults_match_onnxruntime():
    signal = normal(1, 32, 2, dtype=np.float32)
    inputs = [signal, np.array(4, np.int64), None, np.array(8, np.int64)]
    np.testing.assert_allclose(d5_forward("STFT", inputs, {"onesided": 0}),
                               onnxruntime_output("STFT", inputs, {"onesided": 0}, opset=17), rtol=1e-4, atol=1e-4)
    whole = d5_forward("STFT", [signal[..., :1], np.array(1)])  # no window, no frame_length: one frame
    assert whole.shape == (1, 1, 17, 2)


@pytest.mark.parametrize("bins, dft, rate, low, high", [(8, 64, 16000, 0.0, 8000.0), (5, 31, 8000, 100.0, 3000.0),
                                                       (20, 256, 22050, 50.0, 11025.0)])
def test_mel_weight_matrix_matches_onnxruntime(bins, dft, rate, low, high):
    inputs = [np.array(bins, np.int64), np.array(dft, np.int64), np.array(rate, np.int64), np.array(low, np.float32),
              np.array(high, np.float32)]
    y = d5_forward("MelWeightMatrix", inputs)
    assert y.dtype == np.float32 and y.shape == (dft // 2 + 1, bins)
    np.testing.assert_allclose(y, onnxruntime_output("MelWeightMatrix", inputs, opset=17), atol=1e-6)


@pytest.mark.parametrize("op_type", SIGNAL_OPERATORS)
def test_signal_operators_have_no_gradient(op_type):
    op = create_operator(op_type, {})
    assert op.differentiable is False
    with pytest.raises(UnsupportedOperatorError, match=op_type):
        op.backward([np.ones(3)], [np.array(3)], [np.ones(3)])


# --------------------------------------------------------------------------------------------------- errors

@pytest.mark.parametrize("op_type, attributes, inputs, message", [
    ("LRN", {"size": 3}, [np.ones(4)], "N, C"),
    ("GroupNormalization", {"num_groups": 4}, [np.ones((1, 6, 2)), np.ones(6), np.ones(6)], "divisible"),
    ("GroupNormalization", {"num_groups": 2}, [np.ones((1, 6, 2)), np.ones(3), np.ones(3)], "per group"),
    ("MeanVarianceNormalization", {"axes": [4]}, [np.ones((2, 3))], "axes"),
    ("MaxUnpool", {"kernel_shape": [2]}, [np.ones((1, 1, 2)), np.array([[[0, 9]]])], r"\[0, 3\)"),
    ("MaxUnpool", {"kernel_shape": [2], "strides": [2]},
     [np.ones((1, 1, 2)), np.array([[[0, 1]]]), np.array([1, 1, 3])], "at least"),
    ("MaxUnpool", {"kernel_shape": [2, 2]}, [np.ones((1, 1, 2)), np.array([[[0, 1]]])], "spatial"),
    ("HannWindow", {}, [np.array(-2)], "non-negative"),
    ("STFT", {}, [np.ones((1, 8, 1)), np.array(2), np.ones(4), np.array(5)], "frame_length"),
    ("STFT", {}, [np.ones((1, 8, 1)), np.array(0)], "frame_step"),
    ("MelWeightMatrix", {}, [np.array(4), np.array(32), np.array(8000), np.array(0.0), np.array(12000.0)],
     "sample_rate / 2"),
])
def test_bad_inputs_raise_shape_errors(op_type, attributes, inputs, message):
    with pytest.raises(ShapeError, match=message):
        d5_forward(op_type, inputs, attributes)


@pytest.mark.parametrize("op_type, attributes, message", [
    ("LRN", {}, "size"), ("GroupNormalization", {}, "num_groups"), ("MaxUnpool", {}, "kernel_shape"),
    ("GroupNormalization", {"num_groups": 2, "stash_type": 7}, "stash_type"),
    ("HannWindow", {"output_datatype": 999}, "output_datatype"),
])
def test_bad_attributes_raise_shape_errors(op_type, attributes, message):
    with pytest.raises(ShapeError, match=message):
        create_operator(op_type, attributes)
