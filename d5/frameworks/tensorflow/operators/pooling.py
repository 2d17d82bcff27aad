"""Pooling as native TensorFlow operations: MaxPool (with its Indices output), AveragePool (count_include_pad),
GlobalAveragePool, GlobalMaxPool, LpPool, for 1-D to 3-D windows, and MaxUnpool (any rank).

ONNX's padding (explicit pads, auto_pad SAME_* with possibly negative pads, ceil_mode overhang) is resolved by
:func:`d5.ops.onnx_semantics.window_geometry`; the input is padded (cropped) to exactly the extent the windows
cover, so the pooling runs with "VALID" windows. The windowed converters compute channels-last
(:meth:`channels_last`), where TensorFlow's CPU pooling kernels work; ``__call__`` transposes around it.

TensorFlow's kernels have no dilations, no 3-D float64/float16 pooling on CPU and no indices but in 2-D; those
cases stack the kernel's taps (strided slices of the padded input) and reduce them. A max's gradient goes to the
first maximum of its window, as the reference's.
"""
from __future__ import annotations

import itertools
import math
from typing import Any, NamedTuple

import numpy as np
import tensorflow as tf

from d5.errors import ShapeError
from d5.frameworks.tensorflow.operators import TFOp, register
from d5.frameworks.tensorflow.operators._helpers import ints, pad_sides, resolve_pads, static
from d5.frameworks.tensorflow.operators.convolution import same_sides, without_idle_crops
from d5.frameworks.tensorflow.tensors import from_channels_last, to_channels_last
from d5.ops.onnx_attributes import adopt, operator_attributes
from d5.ops.onnx_semantics import unpooled_shape
from d5.ops.window_checks import (check_global_pool_input, check_lp_pool_rank, check_pool_rank,
                                  check_unpool_index_range, check_unpool_inputs, pool_index_table, subsamples,
                                  unpool_output_shape, window_counts)

# The dtypes TensorFlow's CPU MaxPool/AvgPool kernels take, by number of spatial axes (3-D: MaxPool3D/AvgPool3D).
_NATIVE_POOL_DTYPES = {1: (tf.float16, tf.bfloat16, tf.float32, tf.float64),
                       2: (tf.float16, tf.bfloat16, tf.float32, tf.float64),
                       3: (tf.bfloat16, tf.float32)}


# TensorFlow's pooling functions by kind and number of spatial axes, with their channels-last data format. The
# format is always named: tf.nn.max_pool/avg_pool pass None, and the eager gradient of AvgPool3D then fails reading
# it back (TensorFlow 2.21, nn_grad._AvgPool3DGrad).
_POOLS = {("max", 1): (tf.nn.max_pool1d, "NWC"), ("max", 2): (tf.nn.max_pool2d, "NHWC"),
          ("max", 3): (tf.nn.max_pool3d, "NDHWC"), ("avg", 1): (tf.nn.avg_pool1d, "NWC"),
          ("avg", 2): (tf.nn.avg_pool2d, "NHWC"), ("avg", 3): (tf.nn.avg_pool3d, "NDHWC")}


def _native_pool(kind: str, x: tf.Tensor, kernel, strides, padding: str = "VALID") -> tf.Tensor:
    """TensorFlow's max or average pooling of a channels-last input ("VALID": padded already)."""
    pool, data_format = _POOLS[kind, x.shape.rank - 2]
    return pool(x, list(kernel), list(strides), padding, data_format=data_format)


def first_max(x: tf.Tensor, axis: int) -> tf.Tensor:
    """``reduce_max(x, axis, keepdims=True)`` whose gradient goes to the first maximum along ``axis`` (TensorFlow's
    own splits it between ties; the reference's MaxPool and GlobalMaxPool pick the first)."""
    x = tf.convert_to_tensor(x)

    @tf.custom_gradient
    def run(value):
        arg = tf.argmax(value, axis=axis)

        def grad(dy):
            return tf.one_hot(arg, value.shape[axis], axis=axis % value.shape.rank, dtype=dy.dtype) * dy

        return tf.reduce_max(value, axis=axis, keepdims=True), grad

    return run(x)


def _taps(padded: tf.Tensor, kernel, strides, dilations, out) -> list[tf.Tensor]:
    """The kernel's taps over a channels-last padded input: for each offset in the window (row-major), the
    strided slice of the elements it sees, each (N, *out, C)."""
    taps = []
    for offset in itertools.product(*[range(k) for k in kernel]):
        index = tuple(slice(o * d, o * d + (n - 1) * s + 1, s) for o, d, n, s in zip(offset, dilations, out, strides))
        taps.append(padded[(slice(None), *index, slice(None))])
    return taps


class _Window(NamedTuple):
    geometry: Any
    strides: tuple
    dilations: tuple
    sides: tuple
    native: bool          # TensorFlow's pooling kernel applies (no dilations, a dtype it has)
    same: bool            # the pads are TensorFlow's "SAME" ones (the kernel pads by itself, not counting them)
    extra: Any            # per operator: subsample slices, divisors, index tables


class _WindowPool(TFOp):
    op_name = "Pool"
    channels_last_inputs = (0,)
    channels_last_ranks = (3, 4, 5)

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes(self.op_name, attributes))

    def _check_rank(self, rank: int, shape) -> None:
        check_pool_rank(self.op_name, rank, shape, self.kernel_shape)

    def __call__(self, x):
        self._check_rank(x.shape.rank, x.shape)
        outputs = self.channels_last(to_channels_last(x))
        if isinstance(outputs, tuple):
            return tuple(from_channels_last(o) for o in outputs)
        return from_channels_last(outputs)

    def _window(self, x, dtype=None) -> _Window:
        """The window geometry and this operator's plan for channels-last X's shape and dtype (``dtype``: the one
        it is computed in, when another)."""
        shape, dtype = tuple(x.shape.as_list()), dtype or x.dtype
        return self.planned((shape, dtype), self._resolve, shape, dtype)

    def _resolve(self, shape, dtype) -> _Window:
        self._check_rank(len(shape), (shape[0], shape[-1], *shape[1:-1]))
        spatial = shape[1:-1]
        if None in spatial:
            raise ShapeError(f"{self.op_name}: the TensorFlow framework needs X's spatial sizes, got {shape}")
        geometry, strides, dilations, sides = resolve_pads(self.op_name, spatial, self.kernel_shape, self.strides,
                                                           self.dilations, self.pads, self.auto_pad,
                                                           ceil_mode=self.ceil_mode)
        native = all(d == 1 for d in dilations) and dtype in _NATIVE_POOL_DTYPES.get(len(spatial), ())
        extents = [(k - 1) * d + 1 for k, d in zip(self.kernel_shape, dilations)]
        sides = without_idle_crops(spatial, sides, extents, strides)
        same = native and tuple(sides) == same_sides(spatial, extents, strides)
        window = _Window(geometry, tuple(strides), tuple(dilations), sides, native, same, None)
        return window._replace(extra=self._extra(window, shape, dtype))

    def _extra(self, window: _Window, shape, dtype) -> Any:
        return None


@register("MaxPool")
class MaxPool(_WindowPool):
    """ONNX MaxPool. Returns Y, or ``(Y, Indices)`` when the node names two outputs: int64 flat indices into X in
    ONNX layout (row-major over the whole tensor, or column-major per plane with ``storage_order=1``), laid out
    channels-last by :meth:`channels_last` like Y. Windows that see only padding give -inf (index -1), as the
    reference; integer X gives its dtype's minimum there."""

    op_name = "MaxPool"
    channels_last_outputs = (0, 1)

    def channels_last(self, x):
        window = self._window(x)
        want_indices = self.node_output_count is not None and self.node_output_count > 1
        subsample, table = window.extra
        if not want_indices and subsample is not None:
            return x[subsample]
        floating = x.dtype.is_floating
        kernel = self.kernel_shape
        if not want_indices and floating and window.same:  # measured faster than a padded copy
            return _native_pool("max", x, kernel, window.strides, "SAME")
        padded = pad_sides(x, window.sides, 1, value=-math.inf if floating else x.dtype.min)
        if not want_indices and floating and window.native:
            return _native_pool("max", padded, kernel, window.strides)
        taps = tf.stack(_taps(padded, kernel, window.strides, window.dilations, window.geometry.out), axis=-1)
        y = tf.squeeze(first_max(taps, -1), -1) if floating else tf.reduce_max(taps, axis=-1)
        if not want_indices:
            return y
        return y, self._indices(tf.argmax(taps, axis=-1), table, x)

    def _extra(self, window: _Window, shape, dtype):
        spatial, out = shape[1:-1], window.geometry.out
        subsample = None
        if subsamples(self.kernel_shape, window.sides, out, spatial, window.strides):
            # A 1x1 window with strides only picks every stride-th element (a CIFAR ResNet's option-A shortcut):
            # a strided slice, where the pooling kernel would read and write the whole tensor.
            subsample = (slice(None), *(slice(None, None, s) for s in window.strides), slice(None))
        return subsample, self._index_table(window, spatial)

    def _index_table(self, window: _Window, spatial) -> np.ndarray:
        """(prod(out), taps): the in-plane flat index in X of each window position's tap, -1 in the padding
        (column-major per plane with ``storage_order=1``, as the reference)."""
        out, kernel = window.geometry.out, self.kernel_shape
        table = pool_index_table(spatial, out, kernel, window.strides, window.dilations,
                                 [begin for begin, _ in window.sides], self.storage_order)
        return table.reshape(math.prod(out), math.prod(kernel))

    @staticmethod
    def _indices(arg: tf.Tensor, table: np.ndarray, x: tf.Tensor) -> tf.Tensor:
        """ONNX's indices (channels-last layout) of the taps ``arg`` (N, *out, C) picked."""
        positions, taps = table.shape
        out = arg.shape.as_list()[1:-1]
        position = np.arange(positions, dtype=np.int64).reshape([1, *out, 1])
        in_plane = tf.gather(tf.constant(table.reshape(-1)), position * taps + arg)
        channels, plane = x.shape[-1], math.prod(x.shape.as_list()[1:-1])
        batch = tf.range(tf.shape(x, out_type=tf.int64)[0], dtype=tf.int64)
        offsets = (tf.reshape(batch, [-1] + [1] * (len(out) + 1)) * channels
                   + tf.range(channels, dtype=tf.int64)) * plane
        return tf.where(in_plane >= 0, in_plane + offsets, tf.constant(-1, tf.int64))


@register("AveragePool")
class AveragePool(_WindowPool):
    """ONNX AveragePool: each window's sum divided by its count of taps inside X, plus (``count_include_pad``)
    those in the declared pads, never those of a ceil_mode overhang (as the reference and PyTorch)."""

    op_name = "AveragePool"

    def channels_last(self, x):
        window = self._window(x)
        if window.same and not self.count_include_pad:  # "SAME" counts the taps inside X only, as ONNX here
            return _native_pool("avg", x, self.kernel_shape, window.strides, "SAME")
        padded = pad_sides(x, window.sides, 1, value=0.0)
        scale = window.extra  # per output position: what turns the kernel's result into ONNX's mean (None: 1)
        if window.native:
            y = _native_pool("avg", padded, self.kernel_shape, window.strides)  # sum / prod(kernel)
            scale = scale[0]
        else:
            y = tf.add_n(_taps(padded, self.kernel_shape, window.strides, window.dilations, window.geometry.out))
            scale = scale[1]
        return y if scale is None else y * tf.constant(scale, x.dtype)

    def _extra(self, window: _Window, shape, dtype):
        counts = self._counts(shape[1:-1], window)
        taps = math.prod(self.kernel_shape)
        safe = np.maximum(counts, 1)
        native = None if np.all(counts == taps) else np.where(counts > 0, taps / safe, 0.0)
        summed = np.where(counts > 0, 1.0 / safe, 0.0)
        expand = [1, *counts.shape, 1]
        return (None if native is None else native.reshape(expand)), summed.reshape(expand)

    def _counts(self, spatial, window: _Window) -> np.ndarray:
        return window_counts(spatial, window.geometry, self.kernel_shape, window.strides, window.dilations,
                             bool(self.count_include_pad))


@register("LpPool")
class LpPool(_WindowPool):
    """``(sum |x|^p)^(1/p)`` over sliding windows (1-D to 3-D; zero padding, auto_pad, dilations, ceil_mode),
    computed in float32 (float64 for float64 input) and cast back. Differentiable (the reference is not); a
    window of zeros gets a zero gradient, not NaN."""

    op_name = "LpPool"

    def _check_rank(self, rank: int, shape) -> None:
        # Any number of spatial axes: beyond TensorFlow's kernels, the taps are summed.
        check_lp_pool_rank(rank, shape, self.kernel_shape)

    def channels_last(self, x):
        compute = tf.float64 if x.dtype == tf.float64 else tf.float32
        window = self._window(x, compute)
        xc = tf.cast(x, compute)
        # Padding (and a ceil_mode overhang) reads zeros, which add nothing to the sums.
        powered = pad_sides(tf.pow(tf.abs(xc), tf.constant(self.p, compute)), window.sides, 1, value=0.0)
        if window.native:
            sums = _native_pool("avg", powered, self.kernel_shape, window.strides)
            sums = sums * tf.constant(float(math.prod(self.kernel_shape)), compute)
        else:
            sums = tf.add_n(_taps(powered, self.kernel_shape, window.strides, window.dilations, window.geometry.out))
        positive = sums > 0
        root = tf.pow(tf.where(positive, sums, tf.ones_like(sums)), tf.constant(1.0 / self.p, compute))
        return tf.cast(tf.where(positive, root, tf.zeros_like(root)), x.dtype)


class _GlobalPool(TFOp):
    channels_last_inputs = (0,)
    channels_last_ranks = (3, 4, 5)
    op_name = "GlobalPool"

    def __call__(self, x):
        check_global_pool_input(self.op_name, tuple(x.shape))
        return from_channels_last(self.channels_last(to_channels_last(x)))


@register("GlobalAveragePool")
class GlobalAveragePool(_GlobalPool):
    """The mean over every spatial axis, kept as size-1 axes."""

    op_name = "GlobalAveragePool"

    def channels_last(self, x):
        return tf.reduce_mean(x, axis=list(range(1, x.shape.rank - 1)), keepdims=True)


@register("GlobalMaxPool")
class GlobalMaxPool(_GlobalPool):
    """The maximum over every spatial axis, kept as size-1 axes; the gradient goes to each plane's first
    maximum (row-major), as the reference's."""

    op_name = "GlobalMaxPool"

    def channels_last(self, x):
        shape = x.shape.as_list()
        if None in shape[1:]:
            raise ShapeError(f"GlobalMaxPool: the TensorFlow framework needs X's spatial sizes, got {shape}")
        flat = tf.reshape(x, [-1, math.prod(shape[1:-1]), shape[-1]])
        return tf.reshape(first_max(flat, 1), [-1, *[1] * (len(shape) - 2), shape[-1]])


@register("MaxUnpool")
class MaxUnpool(TFOp):
    """Scatter X (N, C, D1, ...) into zeros at the flat indices ``I`` (MaxPool's second output: positions in the
    whole unpooled tensor, whose spatial size is ``(in - 1) * stride - pad_begin - pad_end + kernel``). With
    ``output_shape`` (at least that size) the unpooled tensor sits in its leading corner, the rest zero, as
    the reference and ONNX's tests read it. When an index repeats, the last X element wins."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("MaxUnpool", attributes))

    def __call__(self, x, indices, output_shape=None):
        x_shape = tuple(x.shape.as_list())
        check_unpool_inputs(x_shape, tuple(indices.shape.as_list()), self.kernel_shape, indices.dtype.is_integer,
                            indices.dtype.name)
        inferred = unpooled_shape("MaxUnpool", x_shape, self.kernel_shape, self.strides, self.pads)
        shape = unpool_output_shape(inferred, None if output_shape is None else
                                    ints(output_shape, "MaxUnpool's output_shape"))
        total = math.prod(inferred)
        known = static(indices)
        if known is not None and known.size:
            check_unpool_index_range(int(known.min()), int(known.max()), inferred)
        flat = tf.reshape(tf.cast(indices, tf.int64), [-1])
        # The last writer of each position, deterministically (a scatter of repeated indices is not).
        order = tf.range(tf.size(flat, out_type=tf.int64), dtype=tf.int64)
        last = tf.math.unsorted_segment_max(order, flat, total)  # unwritten positions: int64's minimum
        values = tf.gather(tf.reshape(x, [-1]), tf.maximum(last, 0))
        unpooled = tf.reshape(tf.where(last >= 0, values, tf.zeros_like(values)), inferred)
        return pad_sides(unpooled, [(0, o - i) for o, i in zip(shape[2:], inferred[2:])], 2)
