"""Pooling as native MXNet operations: MaxPool (with its Indices output, integer inputs), AveragePool
(count_include_pad), GlobalAveragePool, GlobalMaxPool, LpPool, for 1-D to 3-D windows, and MaxUnpool.

ONNX's padding (explicit pads, auto_pad SAME_* with possibly negative pads, ceil_mode overhang) is resolved by
:func:`d5.ops.onnx_semantics.window_sides` into the (begin, end) amounts to pad X by so that plain windows give
ONNX's outputs. Where those are MXNet's own symmetric padding (the common case: a ResNet's 3x3 stride-2 max pool,
LeNet's 2x2 pools) MXNet's ``Pooling`` kernel (oneDNN on the CPU, cuDNN on the GPU) pads by itself; otherwise X is
padded (cropped) first and the kernel runs "valid" windows, an average's divisor corrected per output position.

``Pooling`` has no dilations and no indices: those cases stack the kernel's taps (strided slices of the padded
input) and reduce them, a max through ``argmax`` and ``pick``, so that its gradient goes to the first maximum
of its window, as the reference's. Integer MaxPool computes in float64 (exact for the 32-bit integers the
reference takes) and is cast back.

>>> import numpy as np
>>> from d5.frameworks.mxnet.custom_op import native_op
>>> x = np.array([[[1.0, 3.0, 2.0, 5.0, 4.0]]], np.float32)
>>> native_op("MaxPool", kernel_shape=[2], strides=[2], ceil_mode=1).forward([x]).tolist()
[[[3.0, 5.0, 4.0]]]
>>> op = native_op("MaxPool", kernel_shape=[2], strides=[2])
>>> op.node_output_count = 2
>>> [value.tolist() for value in op.forward([x])]     # Y and the Indices output
[[[[3.0, 5.0]]], [[[1, 3]]]]
"""
from __future__ import annotations

import itertools
import math
from typing import Any, NamedTuple

import mxnet as mx
import numpy as np

from d5.errors import ShapeError
from d5.frameworks.mxnet.operators import MXOp, register
from d5.frameworks.mxnet.operators._helpers import (as_symbol, dtype_of, ints, pad_sides, reshape, resolve_pads,
                                                    shape_of, static)
from d5.ops.onnx_attributes import adopt, operator_attributes
from d5.ops.onnx_semantics import unpooled_shape
from d5.ops.window_checks import (check_global_pool_input, check_pool_input, check_unpool_index_range,
                                  check_unpool_inputs, pool_index_table, subsamples, unpool_output_shape,
                                  window_counts)

_KERNEL_DTYPES = (np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.float16))


class _Window(NamedTuple):
    geometry: Any
    strides: tuple
    dilations: tuple
    sides: tuple
    pad: tuple | None      # MXNet's own symmetric padding that gives these windows (None: pad X first)
    extra: Any = None      # per operator: divisors, index tables


def _kernel_pad(spatial, kernel, strides, dilations, sides, out) -> tuple | None:
    """The symmetric ``pad`` with which MXNet's "valid" windows are exactly these: every leading pad
    non-negative and smaller than the window (no window of padding alone), each trailing one no more than the
    leading one, and the same number of windows."""
    if any(d != 1 for d in dilations):
        return None
    for size, k, stride, (begin, end), n in zip(spatial, kernel, strides, sides, out):
        if begin < 0 or begin >= k or end > begin or (size + 2 * begin - k) // stride + 1 != n:
            return None
    return tuple(begin for begin, _ in sides)


def _pad(x, sides, value: float):
    """``pad_sides(x, sides)`` with the constant ``value`` (MXNet 1.9's ``np.pad`` pads zeros whatever
    ``constant_values`` says, so other values go through the legacy ``Pad``, which takes 4-D and 5-D tensors: a
    1-D window's X is viewed with a height of 1)."""
    if value == 0 or all(lo <= 0 and hi <= 0 for lo, hi in sides):
        return pad_sides(x, sides)
    x = pad_sides(x, [(min(lo, 0), min(hi, 0)) for lo, hi in sides])  # the crops
    widths = [(max(lo, 0), max(hi, 0)) for lo, hi in sides]
    shape = shape_of(x)
    if len(shape) == 3:
        x, widths = reshape(x, (shape[0], shape[1], 1, shape[2])), [(0, 0)] + widths
    padded = mx.sym.pad(x, mode="constant", pad_width=(0, 0, 0, 0) + tuple(v for pair in widths for v in pair),
                        constant_value=float(value))
    if len(shape) == 3:
        padded = reshape(padded, (shape[0], shape[1], shape[2] + widths[1][0] + widths[1][1]))
    return padded


def _taps(padded, kernel, strides, dilations, out) -> list:
    """The kernel's taps over padded (N, C, spatial...) X: for each offset in the window (row-major), the strided
    slice of the elements it sees, each (N, C, *out)."""
    shape = shape_of(padded)
    taps = []
    for offset in itertools.product(*[range(k) for k in kernel]):
        begin = (0, 0) + tuple(o * d for o, d in zip(offset, dilations))
        end = tuple(shape[:2]) + tuple(o * d + (n - 1) * s + 1 for o, d, n, s in zip(offset, dilations, out, strides))
        taps.append(mx.sym.slice(padded, begin=begin, end=end, step=(1, 1) + tuple(strides)))
    return taps


def _first_max(stacked, axis: int):
    """The maximum along ``axis`` of ``stacked`` and the position of the first one (float), the gradient going to
    that one only."""
    arg = mx.sym.BlockGrad(mx.sym.argmax(stacked, axis=axis))
    return mx.sym.pick(stacked, arg, axis=axis), arg


class _WindowPool(MXOp):
    op_name = "Pool"

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes(self.op_name, attributes))

    def _check(self, shape) -> None:
        check_pool_input(self.op_name, shape, self.kernel_shape)

    def _window(self, shape) -> _Window:
        return self.planned(tuple(shape), self._resolve, tuple(shape))

    def _resolve(self, shape) -> _Window:
        self._check(shape)
        spatial, kernel = shape[2:], tuple(self.kernel_shape)
        geometry, strides, dilations, sides = resolve_pads(self.op_name, spatial, kernel, self.strides,
                                                           self.dilations, self.pads, self.auto_pad,
                                                           bool(self.ceil_mode))
        pad = _kernel_pad(spatial, kernel, strides, dilations, sides, geometry.out)
        window = _Window(geometry, tuple(strides), tuple(dilations), tuple(sides), pad)
        return window._replace(extra=self._extra(window, shape))

    def _extra(self, window: _Window, shape) -> Any:
        return None

    def _pooled(self, x, window: _Window, kind: str, pad_value: float, **options):
        """MXNet's ``Pooling`` of ``kind`` over the windows (``window.pad``, or X padded with ``pad_value``)."""
        kernel = tuple(self.kernel_shape)
        if window.pad is not None:
            return mx.sym.Pooling(x, kernel=kernel, stride=window.strides, pad=window.pad, pool_type=kind,
                                  pooling_convention="valid", **options)
        padded = _pad(x, window.sides, pad_value)
        return mx.sym.Pooling(padded, kernel=kernel, stride=window.strides, pad=(0,) * len(kernel), pool_type=kind,
                              pooling_convention="valid", **options)

    def _tap_list(self, x, window: _Window, pad_value: float) -> list:
        padded = _pad(x, window.sides, pad_value)
        return _taps(padded, self.kernel_shape, window.strides, window.dilations, window.geometry.out)

    def _in_float(self, x):
        """``(shape, dtype, window, compute, xc)``: X's shape and dtype, its window, and X as ``xc`` in the dtype
        ``compute`` the sums are computed in (float32; float64 for float64 X)."""
        x = as_symbol(x)
        shape, dtype = shape_of(x), dtype_of(x)
        window = self._window(shape)
        compute = np.float64 if dtype == np.float64 else np.float32
        return shape, dtype, window, compute, as_symbol(x, compute)

    def _sums(self, x, window: _Window, rank: int):
        """Each window's sum of ``x`` (zero padded): MXNet's sum pooling where it applies (no dilations, 1 to 3
        spatial axes), else the taps added."""
        if all(d == 1 for d in window.dilations) and rank <= 5:
            return self._pooled(x, window, "sum", 0.0)
        return mx.sym.add_n(*self._tap_list(x, window, 0.0))


@register("MaxPool")
class MaxPool(_WindowPool):
    """ONNX MaxPool. Returns Y, or ``(Y, Indices)`` when the node names two outputs: int64 flat indices into X
    (row-major over the whole tensor, or column-major per plane with ``storage_order=1``). Windows that see only
    padding give -inf (index -1), as the reference; integer X (up to 32 bits) gives its dtype's minimum there."""

    op_name = "MaxPool"

    def __call__(self, x):
        shape, dtype = shape_of(x), dtype_of(x)
        window = self._window(shape)
        want_indices = self.node_output_count is not None and self.node_output_count > 1
        integer = dtype.kind in "iub"
        if integer and dtype.itemsize > 4:
            raise ShapeError(f"MaxPool: integer inputs up to 32 bits are supported, got dtype {dtype}; cast X to "
                             "int32 or float64")
        # Integer X computes in float64 (a value known before the graph runs is converted here, as it is).
        xc = as_symbol(np.asarray(x, np.float64) if static(x) is not None else x, np.float64) if integer else \
            as_symbol(x)
        subsample, table = window.extra
        if subsample is not None and not want_indices:
            y = mx.sym.slice(xc, **subsample)
        elif window.pad is not None and not want_indices and dtype_of(xc) in _KERNEL_DTYPES:
            y = self._pooled(xc, window, "max", -math.inf)
        else:
            stacked = mx.sym.stack(*self._tap_list(xc, window, -math.inf), axis=len(shape))
            y, arg = _first_max(stacked, len(shape))
            if want_indices:
                return self._restore(y, dtype), self._indices(arg, table, shape)
        return self._restore(y, dtype)

    @staticmethod
    def _restore(y, dtype: np.dtype):
        if dtype.kind in "iub":
            info = np.iinfo(dtype)
            return mx.sym.cast(mx.sym.clip(y, float(info.min), float(info.max)), dtype.name)
        return y

    def _extra(self, window: _Window, shape):
        spatial, out = shape[2:], window.geometry.out
        subsample = None
        if subsamples(self.kernel_shape, window.sides):
            # A 1x1 window with strides only picks every stride-th element (a CIFAR ResNet's option-A shortcut):
            # a strided slice, where the pooling kernel would read and write the whole tensor.
            subsample = dict(begin=(0,) * len(shape),
                             end=tuple(shape[:2]) + tuple((n - 1) * s + 1 for n, s in zip(out, window.strides)),
                             step=(1, 1) + window.strides)
        return subsample, self._index_table(window, spatial)

    def _index_table(self, window: _Window, spatial) -> np.ndarray:
        """(prod(out) * taps,): the in-plane flat index in X of each window position's tap, -1 in the padding
        (column-major per plane with ``storage_order=1``, as the reference)."""
        table = pool_index_table(spatial, window.geometry.out, self.kernel_shape, window.strides, window.dilations,
                                 [begin for begin, _ in window.sides], self.storage_order)
        return table.reshape(-1).astype(np.float64)

    def _indices(self, arg, table: np.ndarray, shape):
        """ONNX's indices of the taps ``arg`` (N, C, *out) picked."""
        out = shape_of(arg)[2:]
        taps = math.prod(self.kernel_shape)
        position = (np.arange(math.prod(out), dtype=np.float64) * taps).reshape(1, 1, *out)
        flat = mx.sym.broadcast_add(mx.sym.cast(arg, "float64"), as_symbol(position))
        in_plane = mx.sym.take(as_symbol(table), flat)
        plane = math.prod(shape[2:])
        offsets = (np.arange(shape[0] * shape[1], dtype=np.float64) * plane).reshape(shape[0], shape[1],
                                                                                   *(1,) * len(out))
        found = mx.sym.broadcast_add(in_plane, as_symbol(offsets))
        indices = mx.sym.where(in_plane >= 0, found, mx.sym.ones_like(found) * -1.0)
        return mx.sym.cast(mx.sym.BlockGrad(indices), "int64")


@register("AveragePool")
class AveragePool(_WindowPool):
    """ONNX AveragePool: each window's sum divided by its count of taps inside X, plus (``count_include_pad``)
    those in the declared pads, never those of a ceil_mode overhang (as the reference and PyTorch). MXNet's
    average pooling where its padding and count are ONNX's; its sum pooling, then each position's divisor,
    otherwise; the taps summed with dilations. Computed in float32 (float64 for float64 X)."""

    op_name = "AveragePool"

    def __call__(self, x):
        shape, dtype, window, compute, xc = self._in_float(x)
        inverse = window.extra  # per output position: 1 / the divisor (None: the kernel's own count is ONNX's)
        if inverse is None:
            y = self._pooled(xc, window, "avg", 0.0, count_include_pad=bool(self.count_include_pad))
        else:
            y = mx.sym.broadcast_mul(self._sums(xc, window, len(shape)), as_symbol(inverse.astype(compute)))
        return as_symbol(y, dtype)

    def _extra(self, window: _Window, shape):
        counts = self._counts(shape[2:], window)
        taps = math.prod(self.kernel_shape)
        if window.pad is not None:
            # MXNet's count: every tap with count_include_pad, the taps inside X without (its pads are ONNX's).
            native = np.full_like(counts, taps) if self.count_include_pad else self._counts(
                shape[2:], window._replace(pad=None), inside_only=True)
            if np.array_equal(native, counts):
                return None
        inverse = np.where(counts > 0, 1.0 / np.maximum(counts, 1), 0.0)
        return inverse.reshape(1, 1, *counts.shape)

    def _counts(self, spatial, window: _Window, inside_only: bool = False) -> np.ndarray:
        return window_counts(spatial, window.geometry, self.kernel_shape, window.strides, window.dilations,
                             bool(self.count_include_pad) and not inside_only)


@register("LpPool")
class LpPool(_WindowPool):
    """``(sum |x|^p)^(1/p)`` over sliding windows (1-D to 3-D; zero padding, auto_pad, dilations, ceil_mode):
    MXNet's sum pooling of ``|x|^p`` (the taps summed with dilations), computed in float32 (float64 for float64
    input) and cast back. Differentiable (the reference is not); a window of zeros gets a zero gradient, not
    NaN."""

    op_name = "LpPool"

    def _check(self, shape) -> None:
        if len(shape) != len(self.kernel_shape) + 2:
            raise ShapeError(f"LpPool: X (N, C and {len(self.kernel_shape)} spatial axes, from kernel_shape) must "
                             f"be a {len(self.kernel_shape) + 2}-D tensor, got shape {shape}")

    def __call__(self, x):
        shape, dtype, window, _, xc = self._in_float(x)
        powered = mx.sym.abs(xc) if self.p == 1 else mx.sym.abs(xc) ** float(self.p)
        # Padding (and a ceil_mode overhang) reads zeros, which add nothing to the sums.
        sums = self._sums(powered, window, len(shape))
        positive = sums > 0
        root = mx.sym.where(positive, sums, mx.sym.ones_like(sums)) ** (1.0 / float(self.p))
        return as_symbol(mx.sym.where(positive, root, mx.sym.zeros_like(root)), dtype)


class _GlobalPool(MXOp):
    op_name = "GlobalPool"

    def __init__(self, **attributes) -> None:
        if attributes:
            raise TypeError(f"{self.op_name} has no attribute {sorted(attributes)[0]!r}; it has no attributes")

    def _check(self, x):
        shape = shape_of(x)
        check_global_pool_input(self.op_name, shape, require_data=True)
        return shape


@register("GlobalAveragePool")
class GlobalAveragePool(_GlobalPool):
    """The mean over every spatial axis, kept as size-1 axes (float32 for narrower floats)."""

    op_name = "GlobalAveragePool"

    def __call__(self, x):
        shape = self._check(x)
        dtype = dtype_of(x)
        xc = as_symbol(x, np.float32) if dtype not in (np.float32, np.float64) else as_symbol(x)
        return as_symbol(mx.sym.mean(xc, axis=tuple(range(2, len(shape))), keepdims=True), dtype)


@register("GlobalMaxPool")
class GlobalMaxPool(_GlobalPool):
    """The maximum over every spatial axis, kept as size-1 axes; the gradient goes to each plane's first maximum
    (row-major), as the reference's."""

    op_name = "GlobalMaxPool"

    def __call__(self, x):
        shape = self._check(x)
        planes = reshape(as_symbol(x), (shape[0], shape[1], math.prod(shape[2:])))
        y, _ = _first_max(planes, 2)
        return reshape(y, tuple(shape[:2]) + (1,) * (len(shape) - 2))


@register("MaxUnpool")
class MaxUnpool(MXOp):
    """Scatter X (N, C, D1, ...) into zeros at the flat indices ``I`` (MaxPool's second output: positions in the
    whole unpooled tensor, whose spatial size is ``(in - 1) * stride - pad_begin - pad_end + kernel``) with
    MXNet's ``scatter_nd``. With ``output_shape`` (at least that size) the unpooled tensor sits in its leading
    corner, the rest zero, as the reference and ONNX's tests read it. When an index repeats, the last X element
    wins (indices known before the graph runs are deduplicated so; a MaxPool's repeated indices carry equal
    values)."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("MaxUnpool", attributes))

    def __call__(self, x, indices, output_shape=None):
        if x is None or indices is None:
            raise ShapeError("MaxUnpool: expected inputs (X, I) or (X, I, output_shape)")
        x_shape, i_shape = shape_of(x), shape_of(indices)
        check_unpool_inputs(x_shape, i_shape, self.kernel_shape, dtype_of(indices).kind in "iu", dtype_of(indices))
        inferred = unpooled_shape("MaxUnpool", x_shape, self.kernel_shape, self.strides, self.pads)
        shape = unpool_output_shape(inferred, None if output_shape is None else
                                    ints(output_shape, "MaxUnpool's output_shape"))
        total = math.prod(inferred)
        flat_x = reshape(as_symbol(x), (math.prod(x_shape),))
        known = static(indices)
        if known is not None:
            flat = known.reshape(-1).astype(np.int64)
            if flat.size:
                check_unpool_index_range(int(flat.min()), int(flat.max()), inferred)
            winners = flat.size - 1 - np.unique(flat[::-1], return_index=True)[1]  # the last writer of each
            values = flat_x if winners.size == flat.size and np.array_equal(winners, np.arange(flat.size)) else \
                mx.sym.take(flat_x, as_symbol(winners.astype(np.int64)))
            positions = as_symbol(flat[winners].reshape(1, -1))
        else:
            values, positions = flat_x, reshape(mx.sym.cast(indices, "int64"), (1, math.prod(x_shape)))
        unpooled = reshape(mx.sym.scatter_nd(values, positions, shape=(total,)), inferred)
        return pad_sides(unpooled, [(0, o - i) for o, i in zip(shape[2:], inferred[2:])], 2)
