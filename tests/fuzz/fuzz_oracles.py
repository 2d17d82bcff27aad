"""Oracles for the fuzz suite: plain NumPy versions of d5._C's kernels, and array comparison.

The NumPy kernels are deliberately naive (loops over kernel taps, index arithmetic in Python integers, so
a stride of 2**62 is just a big number here, never an overflow): they are the definition the C++ kernels
must agree with on every call the C++ accepts. They mirror the kernels' documented semantics in
csrc/kernels/*.h: taps outside the input read zero (convolution) or are skipped (pooling), ``out`` is
given by the caller and need not match any formula, max pooling keeps the first maximum and lets the
first NaN win, and an empty pooling window gives -inf / index -1 (max) or 0 (average).

>>> x = np.arange(9.0).reshape(1, 1, 3, 3)
>>> im2col(x, (2, 2), (1, 1), (0, 0), (1, 1), (2, 2))[0, :, 0]
array([0., 1., 3., 4.])
>>> compare("y", np.float32([1, 2]), np.float32([1, 2.5])) is not None
True
"""
from __future__ import annotations

import numpy as np


def _taps(out: int, stride: int, pad: int, kernel: int, dilation: int, size: int):
    """For each kernel tap: (output positions whose coordinate lies in [0, size), those coordinates)."""
    result = []
    for k in range(kernel):
        positions = [o for o in range(out) if 0 <= o * stride - pad + k * dilation < size]
        result.append((positions, [o * stride - pad + k * dilation for o in positions]))
    return result


def _columns6(images: np.ndarray, kernel, strides, pads_begin, dilations, out) -> np.ndarray:
    """(N, C, KH, KW, OH, OW) columns in float64."""
    n, c, h, w = images.shape
    (kh, kw), (oh, ow) = kernel, out
    columns = np.zeros((n, c, kh, kw, oh, ow))
    rows = _taps(oh, strides[0], pads_begin[0], kh, dilations[0], h)
    cols = _taps(ow, strides[1], pads_begin[1], kw, dilations[1], w)
    for i, (out_rows, in_rows) in enumerate(rows):
        for j, (out_cols, in_cols) in enumerate(cols):
            if out_rows and out_cols:
                columns[:, :, i, j][np.ix_(range(n), range(c), out_rows, out_cols)] = \
                    images[np.ix_(range(n), range(c), in_rows, in_cols)]
    return columns


def im2col(images, kernel, strides, pads_begin, dilations, out, batch_major=True) -> np.ndarray:
    columns = _columns6(np.asarray(images, np.float64), kernel, strides, pads_begin, dilations, out)
    n, c, kh, kw, oh, ow = columns.shape
    if batch_major:
        return columns.reshape(n, c * kh * kw, oh * ow)
    return columns.transpose(1, 2, 3, 0, 4, 5).reshape(c * kh * kw, n * oh * ow)


def col2im(columns, image_shape, kernel, strides, pads_begin, dilations, out, batch_major=True) -> np.ndarray:
    n, c, h, w = image_shape
    (kh, kw), (oh, ow) = kernel, out
    columns = np.asarray(columns, np.float64)
    if batch_major:
        columns = columns.reshape(n, c, kh, kw, oh, ow)
    else:
        columns = columns.reshape(c, kh, kw, n, oh, ow).transpose(3, 0, 1, 2, 4, 5)
    images = np.zeros((n, c, h, w))
    rows = _taps(oh, strides[0], pads_begin[0], kh, dilations[0], h)
    cols = _taps(ow, strides[1], pads_begin[1], kw, dilations[1], w)
    for i, (out_rows, in_rows) in enumerate(rows):
        for j, (out_cols, in_cols) in enumerate(cols):
            if out_rows and out_cols:
                # Different taps may hit one pixel; within one tap each pixel appears once, so += is exact.
                images[np.ix_(range(n), range(c), in_rows, in_cols)] += \
                    columns[:, :, i, j][np.ix_(range(n), range(c), out_rows, out_cols)]
    return images


def conv2d_forward(x, w, bias, strides, pads_begin, dilations, out, groups) -> np.ndarray:
    x, w = np.asarray(x, np.float64), np.asarray(w, np.float64)
    n, m, (kh, kw) = x.shape[0], w.shape[0], w.shape[2:]
    cols = im2col(x, (kh, kw), strides, pads_begin, dilations, out)  # (N, C*KH*KW, OH*OW)
    group_rows, group_out = cols.shape[1] // groups, m // groups
    y = np.zeros((n, m, out[0] * out[1]))
    for g in range(groups):
        w_g = w[g * group_out:(g + 1) * group_out].reshape(group_out, group_rows)
        y[:, g * group_out:(g + 1) * group_out] = np.einsum("mk,nkl->nml", w_g, cols[:, g * group_rows:(g + 1) * group_rows])
    if bias is not None:
        y += np.asarray(bias, np.float64).reshape(1, m, 1)
    return y.reshape(n, m, out[0], out[1])


def conv2d_backward(dy, x, w, strides, pads_begin, dilations, groups, with_bias, with_dx=True):
    dy, x, w = (np.asarray(a, np.float64) for a in (dy, x, w))
    n, m, (kh, kw), out = x.shape[0], w.shape[0], w.shape[2:], dy.shape[2:]
    cols = im2col(x, (kh, kw), strides, pads_begin, dilations, out)
    group_rows, group_out = cols.shape[1] // groups, m // groups
    grad = dy.reshape(n, m, out[0] * out[1])  # not -1: that fails for an empty batch
    dw = np.zeros((m, group_rows))
    dcols = np.zeros_like(cols)
    for g in range(groups):
        out_slice, row_slice = slice(g * group_out, (g + 1) * group_out), slice(g * group_rows, (g + 1) * group_rows)
        dw[out_slice] = np.einsum("nml,nkl->mk", grad[:, out_slice], cols[:, row_slice])
        dcols[:, row_slice] = np.einsum("mk,nml->nkl", w[out_slice].reshape(group_out, group_rows), grad[:, out_slice])
    dx = col2im(dcols, x.shape, (kh, kw), strides, pads_begin, dilations, out) if with_dx else None
    dbias = dy.sum(axis=(0, 2, 3)) if with_bias else None
    return dx, dw.reshape(w.shape), dbias


def _pool_windows(shape, kernel, strides, pads, dilations, out):
    """Per output (oh, ow): the flat in-plane offsets of the taps inside the input, in kernel order."""
    h, w = shape
    windows = {}
    for oh in range(out[0]):
        rows = [oh * strides[0] - pads[0] + k * dilations[0] for k in range(kernel[0])]
        rows = [r for r in rows if 0 <= r < h]
        for ow in range(out[1]):
            cols = [ow * strides[1] - pads[1] + k * dilations[1] for k in range(kernel[1])]
            windows[oh, ow] = [r * w + c for r in rows for c in cols if 0 <= c < w]
    return windows


def _avg_count(shape, kernel, strides, pads, dilations, oh, ow, count_include_pad) -> int:
    h, w = shape
    if count_include_pad:
        low_h, high_h, low_w, high_w = -pads[0], h + pads[2], -pads[1], w + pads[3]
    else:
        low_h, high_h, low_w, high_w = 0, h, 0, w
    rows = sum(1 for k in range(kernel[0]) if low_h <= oh * strides[0] - pads[0] + k * dilations[0] < high_h)
    cols = sum(1 for k in range(kernel[1]) if low_w <= ow * strides[1] - pads[1] + k * dilations[1] < high_w)
    return rows * cols


def max_pool2d_forward(x, kernel, strides, pads, dilations, out):
    x = np.asarray(x, np.float64)
    n, c, h, w = x.shape
    planes = x.reshape(n * c, h * w)
    y = np.full((n * c, out[0] * out[1]), -np.inf)
    indices = np.full((n * c, out[0] * out[1]), -1, np.int64)
    for (oh, ow), offsets in _pool_windows((h, w), kernel, strides, pads, dilations, out).items():
        if offsets:
            values = planes[:, offsets]
            best = np.argmax(values, axis=1)  # first maximum; NaN counts as the maximum, first NaN wins
            y[:, oh * out[1] + ow] = values[np.arange(n * c), best]
            indices[:, oh * out[1] + ow] = np.asarray(offsets)[best] + np.arange(n * c) * h * w
    return y.reshape(n, c, *out), indices.reshape(n, c, *out)


def max_pool2d_backward(dy, indices, input_shape):
    dy, indices = np.asarray(dy, np.float64).ravel(), np.asarray(indices).ravel()
    dx = np.zeros(int(np.prod(input_shape)))
    keep = indices >= 0
    np.add.at(dx, indices[keep], dy[keep])
    return dx.reshape(input_shape)


def avg_pool2d_forward(x, kernel, strides, pads, dilations, out, count_include_pad):
    x = np.asarray(x, np.float64)
    n, c, h, w = x.shape
    planes = x.reshape(n * c, h * w)
    y = np.zeros((n * c, out[0] * out[1]))
    for (oh, ow), offsets in _pool_windows((h, w), kernel, strides, pads, dilations, out).items():
        count = _avg_count((h, w), kernel, strides, pads, dilations, oh, ow, count_include_pad)
        if count:
            y[:, oh * out[1] + ow] = planes[:, offsets].sum(axis=1) / count
    return y.reshape(n, c, *out)


def avg_pool2d_backward(dy, input_shape, kernel, strides, pads, dilations, count_include_pad):
    dy = np.asarray(dy, np.float64)
    n, c, h, w = input_shape
    out = dy.shape[2:]
    grad = dy.reshape(n * c, out[0] * out[1])
    dx = np.zeros((n * c, h * w))
    for (oh, ow), offsets in _pool_windows((h, w), kernel, strides, pads, dilations, out).items():
        count = _avg_count((h, w), kernel, strides, pads, dilations, oh, ow, count_include_pad)
        if count:
            for offset in offsets:  # taps of one window may not repeat, but be explicit about summing
                dx[:, offset] += grad[:, oh * out[1] + ow] / count
    return dx.reshape(n, c, h, w)


def global_avg_pool_forward(x):
    x = np.asarray(x, np.float64)
    return x.mean(axis=tuple(range(2, x.ndim)), keepdims=True)


def global_avg_pool_backward(dy, input_shape):
    size = int(np.prod(input_shape[2:]))
    dy = np.asarray(dy, np.float64).reshape(*input_shape[:2], *([1] * (len(input_shape) - 2)))
    return np.broadcast_to(dy / size, tuple(input_shape)).copy()


def _per_channel(v):
    return np.asarray(v, np.float64).reshape(1, -1, 1)


def batch_norm_forward_training(x, scale, bias, epsilon):
    x = np.asarray(x, np.float64)
    mean = x.mean(axis=(0, 2))
    var = ((x - mean.reshape(1, -1, 1)) ** 2).mean(axis=(0, 2))
    invstd = 1.0 / np.sqrt(var + epsilon)
    y = (x - mean.reshape(1, -1, 1)) * _per_channel(invstd * np.asarray(scale, np.float64)) + _per_channel(bias)
    return y, mean, var, invstd


def batch_norm_forward_inference(x, scale, bias, mean, var, epsilon):
    inv = 1.0 / np.sqrt(np.asarray(var, np.float64) + epsilon)
    return (np.asarray(x, np.float64) - _per_channel(mean)) * _per_channel(inv * np.asarray(scale, np.float64)) \
        + _per_channel(bias)


def _bn_sums(dy, x, mean):
    dy, x = np.asarray(dy, np.float64).reshape(np.shape(x)), np.asarray(x, np.float64)
    return dy, dy.sum(axis=(0, 2)), (dy * (x - _per_channel(mean))).sum(axis=(0, 2))


def batch_norm_backward_training(dy, x, scale, mean, invstd):
    dy, sum_dy, sum_dy_xc = _bn_sums(dy, x, mean)
    count = dy.shape[0] * dy.shape[2]
    inv, scale, mean = (np.asarray(v, np.float64) for v in (invstd, scale, mean))
    xhat = (np.asarray(x, np.float64) - _per_channel(mean)) * _per_channel(inv)
    dx = _per_channel(scale * inv) * (dy - _per_channel(sum_dy / count) - xhat * _per_channel(sum_dy_xc * inv / count))
    return dx, sum_dy_xc * inv, sum_dy


def batch_norm_backward_inference(dy, x, scale, mean, var, epsilon):
    dy, sum_dy, sum_dy_xc = _bn_sums(dy, x, mean)
    inv = 1.0 / np.sqrt(np.asarray(var, np.float64) + epsilon)
    return dy * _per_channel(np.asarray(scale, np.float64) * inv), sum_dy_xc * inv, sum_dy


#: d5._C function name -> its NumPy oracle (same signature).
KERNEL_ORACLES = {name: globals()[name] for name in (
    "im2col", "col2im", "conv2d_forward", "conv2d_backward", "max_pool2d_forward", "max_pool2d_backward",
    "avg_pool2d_forward", "avg_pool2d_backward", "global_avg_pool_forward", "global_avg_pool_backward",
    "batch_norm_forward_training", "batch_norm_forward_inference", "batch_norm_backward_training",
    "batch_norm_backward_inference")}


# ---------------------------------------------------------------------------------------------- comparison
def _tolerance(dtype: np.dtype) -> float:
    if dtype.kind != "f" or dtype == np.float64:  # integers compared as floats: exact up to rounding
        return 1e-9
    if dtype == np.float32:
        return 2e-4
    return 2e-2  # float16, bfloat16 and anything narrower


def compare(name: str, actual, expected, *, check_dtype: bool = False, tolerance: float | None = None) -> str | None:
    """None when ``actual`` matches ``expected`` (NaN where NaN, same shape, close values), else a short
    message. Floats are compared with a relative tolerance scaled by the largest expected magnitude, so a
    float32 sum of many terms is not a false alarm; integers, booleans and strings must be equal."""
    if actual is None or expected is None:
        return None if actual is None and expected is None else f"{name}: {actual!r:.60} vs {expected!r:.60}"
    actual, expected = np.asarray(actual), np.asarray(expected)
    if actual.shape != expected.shape:
        return f"{name}: shape {actual.shape}, expected {expected.shape}"
    if check_dtype and actual.dtype != expected.dtype:
        return f"{name}: dtype {actual.dtype}, expected {expected.dtype}"
    if actual.size > LARGE:
        return None  # shape and dtype agree; the values are too many to compare in the worker's memory
    if actual.dtype.kind not in "fc" or expected.dtype.kind not in "fc":
        if actual.dtype.kind in "fc" or expected.dtype.kind in "fc":
            actual, expected = actual.astype(np.float64), expected.astype(np.float64)
        elif not np.array_equal(actual, expected):
            wrong = int(np.sum(actual != expected))
            return f"{name}: {wrong} of {actual.size} elements differ"
        else:
            return None
    a, e = actual.astype(np.complex128 if actual.dtype.kind == "c" else np.float64), expected.astype(
        np.complex128 if expected.dtype.kind == "c" else np.float64)
    nan_a, nan_e = np.isnan(a), np.isnan(e)
    if not np.array_equal(nan_a, nan_e):
        return f"{name}: NaN at {int(np.sum(nan_a != nan_e))} positions where the other has a number"
    a, e = a[~nan_a], e[~nan_e]
    inf = np.isinf(e) | np.isinf(a)
    if not np.array_equal(a[inf], e[inf]):
        return f"{name}: infinities differ"
    a, e = a[~inf], e[~inf]
    if a.size == 0:
        return None
    tol = tolerance if tolerance is not None else _tolerance(actual.dtype)
    scale = max(1.0, float(np.max(np.abs(e))))
    error = float(np.max(np.abs(a - e)))
    if error > tol * scale:
        where = int(np.argmax(np.abs(a - e)))
        return f"{name}: max abs error {error:.3g} (tolerance {tol * scale:.3g}); got {a[where]!r}, expected {e[where]!r}"
    return None


#: Arrays larger than this are compared by a digest of their bytes (no temporaries of their size: the
#: worker's address space is limited, and a hostile model may well produce a 1 GB output).
LARGE = 1 << 24


def same_bits(name: str, first, second) -> str | None:
    """None when two results are bitwise identical (NaN payloads aside), else a message."""
    first, second = np.asarray(first), np.asarray(second)
    if first.shape != second.shape or first.dtype != second.dtype:
        return f"{name}: {first.dtype}{first.shape} then {second.dtype}{second.shape}"
    if first.size > LARGE and first.dtype.kind != "O":
        import hashlib

        digests = [hashlib.blake2b(memoryview(np.ascontiguousarray(a)).cast("B")).digest() for a in (first, second)]
        return None if digests[0] == digests[1] else f"{name}: the bytes differ between identical calls"
    if first.dtype.kind in "fc":
        equal = (first == second) | (np.isnan(first) & np.isnan(second))
    elif first.dtype.kind == "O":
        equal = np.array([a == b for a, b in zip(first.ravel(), second.ravel())], bool)
    else:
        equal = first == second
    if not np.all(equal):
        return f"{name}: {int(np.sum(~np.asarray(equal)))} of {first.size} elements differ between identical calls"
    return None


def as_tuple(value) -> tuple:
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


def compare_results(label: str, actual, expected) -> str | None:
    """Compare a kernel's return value (array or tuple of arrays/None) with its oracle's."""
    actual, expected = as_tuple(actual), as_tuple(expected)
    if len(actual) != len(expected):
        return f"{label}: {len(actual)} results, expected {len(expected)}"
    for index, (a, e) in enumerate(zip(actual, expected)):
        message = compare(f"{label}[{index}]", a, e)
        if message:
            return message
    return None
