"""The C++ reference kernels (d5._C) and the Conv / pooling / BatchNormalization reference operators.

Oracles: PyTorch (forward and autograd), onnxruntime (ONNX-only attributes: auto_pad, asymmetric pads,
storage_order), float64 finite differences (d5.ops.validation.test_gradient), and the adjoint identity
<im2col(x), c> == <x, col2im(c)>.
"""
from __future__ import annotations

import importlib
import sys

import numpy as np
import pytest

from d5.errors import D5Error, ShapeError
from d5.frameworks.reference.operators.convolution import Conv
from d5.frameworks.reference.operators.normalization import BatchNormalization
from d5.frameworks.reference.operators.pooling import AveragePool, GlobalAveragePool, MaxPool

# import_module rather than `from d5.frameworks.reference import kernels`, which goes through the
# package's module-level __getattr__ (lazy optimizers) before the import system.
kernels = importlib.import_module("d5.frameworks.reference.kernels")

DTYPES = [np.float32, np.float64]


def tolerance(dtype) -> dict:
    return {"rtol": 1e-4, "atol": 1e-4} if dtype == np.float32 else {"rtol": 1e-9, "atol": 1e-10}


def random(shape, dtype, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


@pytest.fixture(params=["packed_kernel", "blas_kernel", "numpy_fallback"])
def conv_path(request, monkeypatch):
    """Run a Conv test through the C++ kernels (float32 forward: the packed AVX-512 kernel, then im2col+BLAS)
    and through the NumPy-matmul fallback."""
    native = kernels.load_native()
    if request.param == "packed_kernel" and not native.packed_conv_available():
        pytest.skip("this CPU has no AVX-512: the packed convolution kernel is not used")
    if request.param != "numpy_fallback":
        assert native.blas_ready(), "scipy's BLAS was not registered with d5._C"
    monkeypatch.setattr(Conv, "use_blas_kernel", request.param != "numpy_fallback")
    previous = native.set_packed_conv(request.param == "packed_kernel")
    yield request.param
    native.set_packed_conv(previous)


def assert_close(actual, expected, dtype):
    expected = expected.detach().numpy() if hasattr(expected, "detach") else np.asarray(expected)
    assert actual.dtype == np.dtype(dtype), f"dtype {actual.dtype}, expected {np.dtype(dtype)}"
    assert actual.shape == expected.shape
    tol = tolerance(dtype)
    # Large reductions (dW sums ~50k products) cancel; judge absolute error against the tensor's scale.
    scale = max(1.0, float(np.abs(expected).max())) if expected.size else 1.0
    np.testing.assert_allclose(actual, expected, rtol=tol["rtol"], atol=tol["atol"] * scale)


def torch_leaf(torch, array):
    return torch.tensor(array, requires_grad=True)


# --------------------------------------------------------------------------------------------------
# im2col / col2im
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("batch_major", [True, False])
@pytest.mark.parametrize("kernel,strides,pads,dilations", [
    ((3, 3), (1, 1), (1, 1), (1, 1)),
    ((2, 3), (2, 1), (0, 2), (1, 2)),
    ((5, 5), (3, 2), (2, 0), (2, 1)),
])
def test_col2im_is_the_adjoint_of_im2col(dtype, batch_major, kernel, strides, pads, dilations):
    native = kernels.load_native()
    x = random((2, 3, 9, 8), dtype)
    geometry = kernels.window_geometry((9, 8), kernel, strides=strides, dilations=dilations, pads=pads * 2)
    columns = native.im2col(x, kernel, strides, pads, dilations, geometry.out, batch_major)
    assert columns.dtype == dtype
    c = random(columns.shape, dtype, seed=1)
    back = native.col2im(c, x.shape, kernel, strides, pads, dilations, geometry.out, batch_major)
    np.testing.assert_allclose(np.vdot(columns, c), np.vdot(x, back), rtol=1e-4 if dtype == np.float32 else 1e-12)


def test_im2col_matches_torch_unfold(torch):
    x = random((2, 3, 7, 6), np.float64)
    columns = kernels.load_native().im2col(x, (3, 2), (2, 1), (1, 1), (1, 2), (4, 6))
    expected = torch.nn.functional.unfold(torch.tensor(x), (3, 2), dilation=(1, 2), padding=1, stride=(2, 1))
    np.testing.assert_array_equal(columns, expected.numpy())


# --------------------------------------------------------------------------------------------------
# Conv
# --------------------------------------------------------------------------------------------------

CONV_CASES = [
    # x shape, w shape, strides, pads (ONNX order), dilations, group, bias
    ((2, 3, 8, 8), (4, 3, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1, True),
    ((64, 1, 28, 28), (6, 1, 5, 5), (1, 1), (2, 2, 2, 2), (1, 1), 1, True),   # LeNet-5 conv1
    ((3, 6, 14, 14), (16, 6, 5, 5), (1, 1), (0, 0, 0, 0), (1, 1), 1, False),  # LeNet-5 conv2
    ((2, 4, 9, 7), (6, 2, 3, 2), (2, 1), (1, 0, 2, 1), (1, 2), 2, True),      # groups, asymmetric pads
    ((2, 4, 6, 6), (4, 1, 3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 4, True),      # depthwise
    ((2, 8, 5, 5), (3, 8, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1, True),      # pointwise fast path
    ((1, 2, 10, 11), (3, 2, 3, 3), (3, 2), (0, 0, 0, 0), (2, 2), 1, False),   # dilation + stride
]


def torch_conv(torch, x, w, b, strides, pads, dilations, group):
    rank = x.dim() - 2
    begin, end = pads[:rank], pads[rank:]
    # F.pad takes the last axis first: (left, right, top, bottom).
    padding = [p for axis in reversed(range(rank)) for p in (begin[axis], end[axis])]
    conv = torch.nn.functional.conv2d if rank == 2 else torch.nn.functional.conv1d
    return conv(torch.nn.functional.pad(x, padding), w, b, stride=strides, dilation=dilations, groups=group)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CONV_CASES, ids=lambda case: "x{}w{}g{}".format(case[0], case[1], case[5]))
def test_conv_matches_torch(torch, conv_path, dtype, case):
    x_shape, w_shape, strides, pads, dilations, group, with_bias = case
    x, w, b = random(x_shape, dtype, 0), random(w_shape, dtype, 1), random(w_shape[0], dtype, 2)
    inputs = [x, w, b] if with_bias else [x, w]
    op = Conv(strides=list(strides), pads=list(pads), dilations=list(dilations), group=group,
              kernel_shape=list(w_shape[2:]))
    y = op.forward(inputs)

    leaves = [torch_leaf(torch, a) for a in inputs]
    bias = leaves[2] if with_bias else None
    expected = torch_conv(torch, leaves[0], leaves[1], bias, strides, pads, dilations, group)
    assert_close(y, expected, dtype)

    dy = random(y.shape, dtype, 3)
    expected.backward(torch.tensor(dy))
    grads = op.backward([dy], inputs, [y])
    assert len(grads) == len(inputs)
    for grad, leaf in zip(grads, leaves):
        assert_close(grad, leaf.grad, dtype)


def test_packed_float32_conv_matches_float64_blas_conv_on_random_geometries():
    """The packed kernel's panels (chunks along output rows, zero borders, tail pixels and channels, gathers
    for strides) against the float64 im2col+BLAS kernel, on 150 random geometries."""
    native = kernels.load_native()
    if not native.packed_conv_available():
        pytest.skip("this CPU has no AVX-512: the packed convolution kernel is not used")
    rng = np.random.default_rng(7)
    checked = 0
    while checked < 150:
        groups, group_channels, group_out = (int(v) for v in (rng.choice([1, 1, 2, 3]), rng.integers(1, 6),
                                                              rng.integers(1, 20)))
        kernel, strides, dilations = (tuple(int(v) for v in rng.integers(1, hi, 2)) for hi in (5, 4, 3))
        size = tuple(int(v) for v in rng.integers(1, 40, 2))
        pads = tuple(int(v) for v in rng.integers(0, 3, 4))
        out = tuple((size[i] + pads[i] + pads[i + 2] - dilations[i] * (kernel[i] - 1) - 1) // strides[i] + 1
                    for i in range(2))
        if min(out) <= 0:
            continue
        x = rng.standard_normal((int(rng.integers(1, 4)), groups * group_channels, *size))
        w = rng.standard_normal((groups * group_out, group_channels, *kernel))
        b = rng.standard_normal(groups * group_out) if checked % 2 else None
        args = (strides, pads[:2], dilations, out, groups)
        expected = native.conv2d_forward(x, w, b, *args)
        actual = native.conv2d_forward(x.astype(np.float32), w.astype(np.float32),
                                       None if b is None else b.astype(np.float32), *args)
        np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max(),
                                   err_msg=f"x {x.shape} w {w.shape} strides {strides} pads {pads} "
                                           f"dilations {dilations} groups {groups}")
        checked += 1


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("groups", [1, 2])
def test_conv_weight_gradient_of_large_weights_matches_torch(torch, dtype, groups):
    """Weights past 512 KB take the tiled weight-gradient path (image after image, dW split across threads)."""
    native = kernels.load_native()
    x, w, dy = random((3, 48 * groups, 8, 8), dtype, 0), random((64, 48, 7, 7), dtype, 1), random((3, 64, 8, 8), dtype, 2)
    assert w.nbytes > 512 << 10
    dx, dw, dbias = native.conv2d_backward(dy, x, w, (1, 1), (3, 3), (1, 1), groups, True, True)
    leaves = [torch_leaf(torch, a) for a in (x, w)]
    y = torch.nn.functional.conv2d(leaves[0], leaves[1], padding=3, groups=groups)
    y.backward(torch.tensor(dy))
    assert_close(dw, leaves[1].grad, dtype)
    assert_close(dx, leaves[0].grad, dtype)
    assert_close(dbias, dy.sum(axis=(0, 2, 3)), dtype)


def test_float32_conv_input_gradient_by_packed_convolution_matches_float64_columns():
    """For stride 1 and dilation 1 the float32 input gradient is the packed kernel's convolution of dY with the
    flipped, transposed weights; against the float64 column (im2col + BLAS + col2im) gradient, on 100 random
    geometries, pads up to kernel - 1 and beyond (those take the column path)."""
    native = kernels.load_native()
    if not native.packed_conv_available():
        pytest.skip("this CPU has no AVX-512: the packed convolution kernel is not used")
    rng = np.random.default_rng(11)
    checked = 0
    while checked < 100:
        kernel = tuple(int(v) for v in rng.integers(1, 6, 2))
        size = tuple(int(v) for v in rng.integers(1, 30, 2))
        pads = tuple(int(v) for v in rng.integers(0, 5, 4))
        out = tuple(size[i] + pads[i] + pads[i + 2] - kernel[i] + 1 for i in range(2))
        if min(out) <= 0:
            continue
        # 16 or more input channels take the packed path; fewer, the column path.
        x = rng.standard_normal((int(rng.integers(1, 4)), int(rng.choice([3, 16, 21])), *size))
        w = rng.standard_normal((int(rng.integers(1, 20)), x.shape[1], *kernel))
        dy = rng.standard_normal((x.shape[0], w.shape[0], *out))
        args = ((1, 1), pads[:2], (1, 1), 1, False)
        dx, dw, _ = native.conv2d_backward(dy, x, w, *args)
        dx32, dw32, _ = native.conv2d_backward(*(a.astype(np.float32) for a in (dy, x, w)), *args)
        for actual, expected in ((dx32, dx), (dw32, dw)):
            np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max(),
                                       err_msg=f"x {x.shape} w {w.shape} pads {pads}")
        checked += 1


@pytest.mark.parametrize("dtype", DTYPES)
def test_conv1d_matches_torch(torch, conv_path, dtype):
    x, w, b = random((3, 4, 20), dtype, 0), random((6, 2, 3), dtype, 1), random(6, dtype, 2)
    op = Conv(strides=[2], pads=[1, 2], dilations=[2], group=2)
    y = op.forward([x, w, b])
    leaves = [torch_leaf(torch, a) for a in (x, w, b)]
    expected = torch_conv(torch, *leaves, (2,), (1, 2), (2,), 2)
    assert_close(y, expected, dtype)
    dy = random(y.shape, dtype, 3)
    expected.backward(torch.tensor(dy))
    for grad, leaf in zip(op.backward([dy], [x, w, b], [y]), leaves):
        assert_close(grad, leaf.grad, dtype)


# --------------------------------------------------------------------------------------------------
# onnxruntime as the oracle for ONNX-only attributes
# --------------------------------------------------------------------------------------------------

def run_onnxruntime(op_type, inputs, attributes, n_outputs=1):
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper

    elem = TensorProto.FLOAT if inputs[0].dtype == np.float32 else TensorProto.DOUBLE
    names = [f"in{i}" for i in range(len(inputs))]
    outs = [f"out{i}" for i in range(n_outputs)]
    node = helper.make_node(op_type, names, outs, **attributes)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(n, elem, a.shape) for n, a in zip(names, inputs)],
        [helper.make_tensor_value_info(o, TensorProto.INT64 if i else elem, None) for i, o in enumerate(outs)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    model.ir_version = 9  # onnx may write a newer IR version than this onnxruntime reads
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, dict(zip(names, inputs)))


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER", "VALID"])
@pytest.mark.parametrize("strides", [(1, 1), (2, 3)])
def test_conv_auto_pad_matches_onnxruntime(auto_pad, strides):
    x, w = random((2, 3, 9, 10), np.float32, 0), random((4, 3, 4, 3), np.float32, 1)
    attributes = {"auto_pad": auto_pad, "strides": list(strides)}
    (expected,) = run_onnxruntime("Conv", [x, w], attributes)
    assert_close(Conv(**attributes).forward([x, w]), expected, np.float32)


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER", "VALID", "NOTSET"])
def test_pools_auto_pad_and_asymmetric_pads_match_onnxruntime(auto_pad):
    x = random((2, 3, 9, 10), np.float32)  # onnxruntime's AveragePool-19 is float32 only
    attributes = {"kernel_shape": [3, 2], "strides": [2, 3], "auto_pad": auto_pad}
    if auto_pad == "NOTSET":
        attributes["pads"] = [0, 1, 2, 0]
    y, indices = MaxPool(**attributes).forward([x])
    expected_y, expected_indices = run_onnxruntime("MaxPool", [x], attributes, n_outputs=2)
    assert_close(y, expected_y, np.float32)
    np.testing.assert_array_equal(indices, expected_indices)
    for count_include_pad in (0, 1):
        attributes["count_include_pad"] = count_include_pad
        (expected,) = run_onnxruntime("AveragePool", [x], attributes)
        assert_close(AveragePool(**attributes).forward([x]), expected, np.float32)


def test_maxpool_column_major_indices_match_onnxruntime():
    x = random((2, 3, 6, 5), np.float32)
    attributes = {"kernel_shape": [2, 2], "strides": [2, 1], "storage_order": 1}
    _, indices = MaxPool(**attributes).forward([x])
    _, expected = run_onnxruntime("MaxPool", [x], attributes, n_outputs=2)
    np.testing.assert_array_equal(indices, expected)


# --------------------------------------------------------------------------------------------------
# MaxPool / AveragePool / GlobalAveragePool against torch
# --------------------------------------------------------------------------------------------------

POOL_CASES = [
    # x shape, kernel, strides, symmetric pads, dilations, ceil_mode
    ((2, 3, 8, 8), (2, 2), (2, 2), (0, 0), (1, 1), 0),
    ((2, 3, 7, 9), (3, 3), (2, 2), (1, 1), (1, 1), 1),
    ((1, 2, 10, 11), (3, 2), (3, 2), (1, 0), (1, 1), 1),
    ((64, 6, 28, 28), (2, 2), (2, 2), (0, 0), (1, 1), 0),   # LeNet-5 pool1
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", POOL_CASES + [((2, 2, 9, 9), (3, 2), (2, 1), (1, 1), (2, 3), 1)])
def test_maxpool_matches_torch(torch, dtype, case):
    x_shape, kernel, strides, pads, dilations, ceil_mode = case
    x = random(x_shape, dtype)
    op = MaxPool(kernel_shape=list(kernel), strides=list(strides), pads=list(pads) * 2, dilations=list(dilations),
                 ceil_mode=ceil_mode)
    y, indices = op.forward([x])
    leaf = torch_leaf(torch, x)
    expected, expected_indices = torch.nn.functional.max_pool2d(leaf, kernel, strides, pads, dilations,
                                                                ceil_mode=bool(ceil_mode), return_indices=True)
    assert_close(y, expected, dtype)
    # torch indexes within each (n, c) plane; ONNX over the whole tensor.
    plane_offsets = (np.arange(x_shape[0] * x_shape[1]) * x_shape[2] * x_shape[3]).reshape(x_shape[:2] + (1, 1))
    np.testing.assert_array_equal(indices, expected_indices.numpy() + plane_offsets)
    assert indices.dtype == np.int64

    dy = random(y.shape, dtype, 1)
    expected.backward(torch.tensor(dy))
    assert_close(op.backward([dy], [x], [y, indices]), leaf.grad, dtype)
    # A backward for a different input than the last forward recomputes the argmax.
    x2 = random(x_shape, dtype, 5)
    leaf2 = torch_leaf(torch, x2)
    torch.nn.functional.max_pool2d(leaf2, kernel, strides, pads, dilations, ceil_mode=bool(ceil_mode)).backward(
        torch.tensor(dy))
    assert_close(op.backward([dy], [x2], [None]), leaf2.grad, dtype)


def test_maxpool_propagates_nan():
    x = np.ones((1, 1, 4, 4), np.float32)
    x[0, 0, 1, 1] = np.nan
    y, _ = MaxPool(kernel_shape=[2, 2], strides=[2, 2]).forward([x])
    assert np.isnan(y[0, 0, 0, 0]) and np.isfinite(y[0, 0, 1]).all()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("count_include_pad", [0, 1])
@pytest.mark.parametrize("case", POOL_CASES)
def test_avgpool_matches_torch(torch, dtype, count_include_pad, case):
    x_shape, kernel, strides, pads, _, ceil_mode = case
    x = random(x_shape, dtype)
    op = AveragePool(kernel_shape=list(kernel), strides=list(strides), pads=list(pads) * 2, ceil_mode=ceil_mode,
                     count_include_pad=count_include_pad)
    y = op.forward([x])
    leaf = torch_leaf(torch, x)
    expected = torch.nn.functional.avg_pool2d(leaf, kernel, strides, pads, ceil_mode=bool(ceil_mode),
                                              count_include_pad=bool(count_include_pad))
    assert_close(y, expected, dtype)
    dy = random(y.shape, dtype, 1)
    expected.backward(torch.tensor(dy))
    assert_close(op.backward([dy], [x], [y]), leaf.grad, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_pools_1d_match_torch(torch, dtype):
    x = random((2, 3, 17), dtype)
    y, _ = MaxPool(kernel_shape=[3], strides=[2], pads=[1, 1], ceil_mode=1).forward([x])
    assert_close(y, torch.nn.functional.max_pool1d(torch.tensor(x), 3, 2, 1, ceil_mode=True), dtype)
    y = AveragePool(kernel_shape=[4], strides=[3], count_include_pad=1, pads=[2, 2]).forward([x])
    assert_close(y, torch.nn.functional.avg_pool1d(torch.tensor(x), 4, 3, 2, count_include_pad=True), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(2, 3, 5, 7), (4, 16, 8, 8), (2, 3, 10)])
def test_global_average_pool_matches_torch(torch, dtype, shape):
    x = random(shape, dtype)
    op = GlobalAveragePool()
    y = op.forward([x])
    leaf = torch_leaf(torch, x)
    pool = torch.nn.functional.adaptive_avg_pool2d if len(shape) == 4 else torch.nn.functional.adaptive_avg_pool1d
    expected = pool(leaf, 1)
    assert_close(y, expected, dtype)
    dy = random(y.shape, dtype, 1)
    expected.backward(torch.tensor(dy))
    assert_close(op.backward([dy], [x], [y]), leaf.grad, dtype)


# --------------------------------------------------------------------------------------------------
# BatchNormalization
# --------------------------------------------------------------------------------------------------

def bn_inputs(shape, dtype):
    channels = shape[1]
    rng = np.random.default_rng(7)
    x = (rng.standard_normal(shape) * 3 + 1.5).astype(dtype)
    scale = rng.uniform(0.5, 2.0, channels).astype(dtype)
    bias = rng.standard_normal(channels).astype(dtype)
    mean = rng.standard_normal(channels).astype(dtype)
    var = rng.uniform(0.5, 2.0, channels).astype(dtype)
    return [x, scale, bias, mean, var]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(8, 3, 5, 5), (4, 16, 7, 6), (10, 6), (3, 4, 9)])
@pytest.mark.parametrize("via", ["executor_flag", "training_mode"])
def test_batchnorm_training_matches_torch(torch, dtype, shape, via):
    inputs = bn_inputs(shape, dtype)
    op = BatchNormalization(epsilon=1e-3, momentum=0.8, training_mode=int(via == "training_mode"))
    op.training = via == "executor_flag"
    y, running_mean, running_var = op.forward(inputs)

    x, scale, bias = (torch_leaf(torch, a) for a in inputs[:3])
    torch_mean, torch_var = torch.tensor(inputs[3]), torch.tensor(inputs[4])
    # torch's momentum weighs the new statistic; ONNX's weighs the old one.
    expected = torch.nn.functional.batch_norm(x, torch_mean, torch_var, scale, bias, training=True, momentum=0.2,
                                              eps=1e-3)
    assert_close(y, expected, dtype)
    assert_close(running_mean, torch_mean, dtype)
    # torch keeps the unbiased variance as running statistic; ONNX the biased one.
    axes = [0] + list(range(2, len(shape)))
    batch_var = x.detach().var(dim=axes, unbiased=False)
    assert_close(running_var, 0.8 * torch.tensor(inputs[4]) + 0.2 * batch_var, dtype)
    updates = op.state_updates()
    assert sorted(updates) == [3, 4]
    np.testing.assert_array_equal(updates[3], running_mean)
    np.testing.assert_array_equal(updates[4], running_var)

    dy = random(y.shape, dtype, 1)
    expected.backward(torch.tensor(dy))
    grads = op.backward([dy], inputs, [y])
    assert len(grads) == 5 and grads[3] is None and grads[4] is None
    for grad, leaf in zip(grads[:3], (x, scale, bias)):
        assert_close(grad, leaf.grad, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(8, 3, 5, 5), (10, 6)])
def test_batchnorm_inference_matches_torch(torch, dtype, shape):
    inputs = bn_inputs(shape, dtype)
    op = BatchNormalization(epsilon=1e-4)
    y = op.forward(inputs)
    assert op.state_updates() == {}
    x, scale, bias = (torch_leaf(torch, a) for a in inputs[:3])
    expected = torch.nn.functional.batch_norm(x, torch.tensor(inputs[3]), torch.tensor(inputs[4]), scale, bias,
                                              training=False, eps=1e-4)
    assert_close(y, expected, dtype)
    dy = random(y.shape, dtype, 1)
    expected.backward(torch.tensor(dy))
    grads = op.backward([dy], inputs, [y])
    assert grads[3] is None and grads[4] is None
    for grad, leaf in zip(grads[:3], (x, scale, bias)):
        assert_close(grad, leaf.grad, dtype)


def test_batchnorm_float32_statistics_are_accurate_for_offset_data():
    # Data far from zero is where a one-pass E[x^2] - E[x]^2 variance in float32 would fail.
    rng = np.random.default_rng(0)
    x = (1000.0 + rng.standard_normal((64, 2, 16, 16))).astype(np.float32)
    ones, zeros = np.ones(2, np.float32), np.zeros(2, np.float32)
    op = BatchNormalization(momentum=0.0, training_mode=1)
    _, running_mean, running_var = op.forward([x, ones, zeros, zeros, ones])
    np.testing.assert_allclose(running_var, x.astype(np.float64).var(axis=(0, 2, 3)), rtol=1e-5)
    np.testing.assert_allclose(running_mean, x.astype(np.float64).mean(axis=(0, 2, 3)), rtol=1e-6)


# --------------------------------------------------------------------------------------------------
# Finite differences (float64) through d5.ops.validation
# --------------------------------------------------------------------------------------------------

def gradient_cases():
    rng = np.random.default_rng(3)
    # Max pooling needs inputs away from ties: a permutation of spread-out values has none.
    pool_input = rng.permutation(np.arange(2 * 2 * 7 * 7, dtype=np.float64)).reshape(2, 2, 7, 7) * 0.1
    return [
        ("Conv", lambda: Conv(strides=[2, 1], pads=[1, 0, 1, 2], dilations=[1, 2], group=2),
         [rng.standard_normal((2, 4, 7, 6)), rng.standard_normal((4, 2, 3, 2)), rng.standard_normal(4)], False),
        ("Conv-numpy-fallback", lambda: Conv(pads=[1, 1, 1, 1], strides=[2, 2]),
         [rng.standard_normal((2, 3, 6, 5)), rng.standard_normal((2, 3, 3, 3)), rng.standard_normal(2)], False),
        ("MaxPool", lambda: MaxPool(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1),
         [pool_input], False),
        ("AveragePool", lambda: AveragePool(kernel_shape=[3, 2], strides=[2, 2], pads=[1, 0, 1, 1],
                                            count_include_pad=1, ceil_mode=1), [rng.standard_normal((2, 2, 7, 7))],
         False),
        ("GlobalAveragePool", GlobalAveragePool, [rng.standard_normal((2, 3, 4, 5))], False),
        ("BatchNormalization-train", lambda: BatchNormalization(momentum=0.7), bn_inputs((4, 3, 3, 3), np.float64),
         True),
        ("BatchNormalization-eval", BatchNormalization, bn_inputs((4, 3, 3, 3), np.float64), False),
    ]


@pytest.mark.parametrize("name,make_op,inputs,training", gradient_cases(),
                         ids=lambda v: v if isinstance(v, str) else "")
def test_gradient_by_finite_differences(name, make_op, inputs, training, monkeypatch):
    if name == "Conv-numpy-fallback":
        monkeypatch.setattr(Conv, "use_blas_kernel", False)
    validation = pytest.importorskip("d5.ops.validation")
    result = validation.test_gradient(make_op(), inputs, training=training)
    assert result.passed, result.summary()


# --------------------------------------------------------------------------------------------------
# dtype, validation errors, registry, loader
# --------------------------------------------------------------------------------------------------

def test_float16_input_keeps_its_dtype(torch):
    x, w = random((1, 2, 6, 6), np.float16), random((3, 2, 3, 3), np.float16, 1)
    y = Conv().forward([x, w])
    assert y.dtype == np.float16
    expected = torch.nn.functional.conv2d(torch.tensor(x, dtype=torch.float32), torch.tensor(w, dtype=torch.float32))
    np.testing.assert_allclose(y.astype(np.float32), expected.numpy(), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("make_call,error,words", [
    (lambda: Conv().forward([np.zeros((1, 3, 5, 5)), np.zeros((2, 4, 3, 3))]), ShapeError,
     ["Conv", "(1, 3, 5, 5)", "(2, 4, 3, 3)"]),
    (lambda: Conv().forward([np.zeros((3, 5, 5)), np.zeros((2, 3, 3, 3))]), ShapeError, ["Conv", "rank"]),
    (lambda: Conv(group=2).forward([np.zeros((1, 4, 5, 5)), np.zeros((3, 2, 3, 3))]), ShapeError,
     ["group=2", "(3, 2, 3, 3)"]),
    (lambda: Conv().forward([np.zeros((1, 2, 5, 5)), np.zeros((3, 2, 3, 3)), np.zeros(2)]), ShapeError, ["B", "(3,)"]),
    (lambda: Conv(kernel_shape=[2, 2]).forward([np.zeros((1, 2, 5, 5)), np.zeros((3, 2, 3, 3))]), ShapeError,
     ["kernel_shape"]),
    (lambda: Conv().forward([np.zeros((1, 2, 2, 2)), np.zeros((3, 2, 3, 3))]), ShapeError, ["larger"]),
    (lambda: Conv().forward([np.zeros((1, 2, 4, 4, 4, 4)), np.zeros((3, 2, 3, 3, 3, 3))]), ShapeError,
     ["(N, C, D, H, W)", "(1, 2, 4, 4, 4, 4)"]),
    (lambda: Conv().forward([np.zeros((1, 2, 4, 4), np.int32), np.zeros((3, 2, 3, 3), np.int32)]), ShapeError,
     ["int32"]),
    (lambda: Conv(auto_pad="SAME").forward([np.zeros((1, 2, 4, 4)), np.zeros((3, 2, 3, 3))]), ShapeError,
     ["auto_pad", "SAME_UPPER"]),
    (lambda: MaxPool(kernel_shape=[2, 2]).forward([np.zeros((4, 4))]), ShapeError, ["MaxPool", "(4, 4)"]),
    (lambda: MaxPool(kernel_shape=[2]).forward([np.zeros((1, 1, 4, 4))]), ShapeError, ["kernel_shape"]),
    (lambda: MaxPool(), ShapeError, ["kernel_shape"]),
    (lambda: AveragePool(kernel_shape=[2, 2], strides=[0, 1]).forward([np.zeros((1, 1, 4, 4))]), ShapeError,
     ["strides"]),
    (lambda: AveragePool(kernel_shape=[2, 2], pads=[1, 1]).forward([np.zeros((1, 1, 4, 4))]), ShapeError, ["pads"]),
    (lambda: GlobalAveragePool().forward([np.zeros((2, 3))]), ShapeError, ["GlobalAveragePool", "(2, 3)"]),
    (lambda: BatchNormalization().forward([np.zeros((2, 3, 4)), np.ones(3), np.ones(2), np.ones(3), np.ones(3)]),
     ShapeError, ["'B'", "(3,)", "(2,)"]),
    (lambda: BatchNormalization().forward([np.zeros(3), np.ones(3), np.ones(3), np.ones(3), np.ones(3)]),
     ShapeError, ["BatchNormalization", "(N, C"]),
    (lambda: BatchNormalization().forward([np.zeros((2, 3))]), ShapeError, ["5 inputs"]),
])
def test_bad_input_raises_a_d5_error_that_names_the_problem(make_call, error, words):
    with pytest.raises(error) as info:
        make_call()
    for word in words:
        assert word in str(info.value), f"{word!r} missing from: {info.value}"


def test_registry_creates_the_operators():
    from d5.frameworks.reference.operators import create_operator

    for op_type, cls in [("Conv", Conv), ("MaxPool", MaxPool), ("AveragePool", AveragePool),
                         ("GlobalAveragePool", GlobalAveragePool), ("BatchNormalization", BatchNormalization)]:
        attributes = {"kernel_shape": [2, 2]} if "Pool" in op_type and "Global" not in op_type else {}
        assert isinstance(create_operator(op_type, attributes), cls)


def test_missing_extension_raises_d5_error_with_the_fix(monkeypatch):
    monkeypatch.setattr(kernels, "_native", None)
    monkeypatch.setitem(sys.modules, "d5._C", None)   # makes importing d5._C raise ImportError
    with pytest.raises(D5Error, match=r"pip install .*-e \."):
        kernels.load_native()
    assert kernels.native_available() is False


def test_set_blas_rejects_a_capsule_with_another_signature():
    from scipy.linalg import cython_blas

    capi = cython_blas.__pyx_capi__
    with pytest.raises(ValueError, match="unexpected signature"):
        kernels.load_native().set_blas(capi["sdot"], capi["dgemm"])
    assert kernels.load_native().blas_ready()  # the registered routines were left alone


def test_kernel_threads_can_be_set_and_results_do_not_depend_on_them():
    native = kernels.load_native()
    x = random((4, 3, 9, 9), np.float64)
    before = native.max_threads()
    try:
        native.set_num_threads(1)
        single = Conv(pads=[1, 1, 1, 1]).forward([x, random((2, 3, 3, 3), np.float64, 1)])
    finally:
        native.set_num_threads(before)
    multi = Conv(pads=[1, 1, 1, 1]).forward([x, random((2, 3, 3, 3), np.float64, 1)])
    np.testing.assert_array_equal(single, multi)
    with pytest.raises(ValueError):
        native.set_num_threads(0)
