"""Reference pooling operators (ONNX semantics, 1-D, 2-D and 3-D windows): MaxPool, AveragePool,
GlobalAveragePool, GlobalMaxPool, LpPool (no gradient) and MaxUnpool. The MaxPool and AveragePool window loops
run in C++ (d5._C, OpenMP over batch x channels) for 1-D and 2-D windows, and in NumPy (``_windows``, a loop
over the kernel taps) for 3-D ones.

>>> import numpy as np
>>> x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
>>> y, indices = MaxPool(kernel_shape=[2, 2], strides=[2, 2]).forward([x])
>>> y[0, 0].tolist(), indices[0, 0].tolist()
([[5.0, 7.0], [13.0, 15.0]], [[5, 7], [13, 15]])
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from d5.errors import ShapeError
from d5.frameworks.reference.kernels import Window2D, as_kernel_array, compute_dtype, load_native
from d5.frameworks.reference.operators import ReferenceOp, register
from d5.frameworks.reference.operators import _windows
from d5.frameworks.reference.operators._checks import optional_array, require_rank
from d5.frameworks.reference.operators._windows import (WindowND, crop_input, resolve_window, uncrop_gradient,
                                                        uncrop_indices)
from d5.ops.onnx_attributes import adopt, operator_attributes
from d5.ops.onnx_semantics import unpooled_shape, window_geometry
from d5.ops.operator import Gradient
from d5.ops.window_checks import (check_global_pool_input, check_pool_input, check_unpool_index_range,
                                  check_unpool_inputs, unpool_output_shape)


class _WindowPool(ReferenceOp):
    """Shared input handling of MaxPool and AveragePool."""

    op_name = "Pool"

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes(self.op_name, attributes))

    def _prepare(self, inputs) -> tuple[np.ndarray, Window2D | WindowND]:
        """X as a contiguous array of the compute dtype (1-D lifted to 2-D), and its resolved window; the
        kernels run on ``crop_input(X, window.crops)`` (negative SAME_* pads, see window_geometry)."""
        if len(inputs) != 1 or inputs[0] is None:
            raise ShapeError(f"{self.op_name}: expected exactly one input X, got {len(inputs)}")
        x = np.asarray(inputs[0])
        check_pool_input(self.op_name, x.shape, self.kernel_shape)
        window = resolve_window(self.op_name, x.shape[2:], self.kernel_shape, strides=self.strides,
                                dilations=self.dilations, pads=self.pads, auto_pad=self.auto_pad,
                                ceil_mode=self.ceil_mode)
        dtype = compute_dtype(self.op_name, x)
        if x.ndim == 3:
            x = x.reshape(x.shape[0], x.shape[1], 1, x.shape[2])
        return as_kernel_array(x, dtype), window

    @staticmethod
    def _restore(array: np.ndarray, like_ndim: int, dtype: np.dtype) -> np.ndarray:
        if like_ndim == 3:
            array = array.reshape(array.shape[0], array.shape[1], array.shape[3])
        return array.astype(dtype, copy=False)


@register("MaxPool")
class MaxPool(_WindowPool):
    """ONNX MaxPool. Returns ``(Y, Indices)``: Indices are int64 flat indices into X (row-major, or
    column-major per plane with ``storage_order=1``); executors bind the outputs the node names.

    NaN propagates; windows that see only padding yield -inf with index -1.

    >>> import numpy as np
    >>> x = np.array([[[1.0, 3.0, 2.0, 5.0, 4.0]]])
    >>> MaxPool(kernel_shape=[2], strides=[2], ceil_mode=1).forward([x])[0].tolist()
    [[[3.0, 5.0, 4.0]]]
    """

    op_name = "MaxPool"

    def __init__(self, **attributes) -> None:
        super().__init__(**attributes)
        # The argmax of the last forward, reused by backward when it receives that same input array.
        self._saved_input: np.ndarray | None = None
        self._saved_indices: np.ndarray | None = None

    def forward(self, inputs):
        if len(inputs) == 1 and inputs[0] is not None and np.issubdtype(np.asarray(inputs[0]).dtype, np.integer):
            return self._forward_integer(np.asarray(inputs[0]))
        x, window = self._prepare(inputs)
        y, indices = self._pool(x, window)
        self._saved_input, self._saved_indices = inputs[0], indices
        original = np.asarray(inputs[0])
        return self._restore(y, original.ndim, original.dtype), self._public_indices(indices, x.shape, original.ndim)

    def _forward_integer(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Forward of integer X (ONNX allows int8/uint8; no gradient): pooled in float64, which holds every
        int32 exactly, then cast back; a window that sees only padding gives the dtype's minimum."""
        if x.dtype.itemsize > 4:
            raise ShapeError(f"MaxPool: integer inputs up to 32 bits are supported, got dtype {x.dtype}; "
                             "cast X to int32 or float64")
        y, indices = self.forward([x.astype(np.float64)])
        self._saved_input = self._saved_indices = None
        info = np.iinfo(x.dtype)
        return np.clip(y, info.min, info.max).astype(x.dtype), indices

    def backward(self, grads, fwd_inputs, fwd_outputs):
        x, window = self._prepare(fwd_inputs)
        if fwd_inputs[0] is self._saved_input and self._saved_indices is not None:
            indices = self._saved_indices
        else:  # backward of a different input than the last forward: recompute the argmax
            indices = self._pool(x, window)[1]
        dy = as_kernel_array(grads[0], x.dtype).reshape(indices.shape)
        if window.spatial_rank in _windows.NUMPY_SPATIAL_RANKS:
            dx = _windows.max_pool_backward(dy, indices, x.shape)
        else:
            dx = load_native().max_pool2d_backward(dy, indices, x.shape)
        original = np.asarray(fwd_inputs[0])
        return self._restore(dx, original.ndim, original.dtype)

    def _pool(self, x: np.ndarray, window: Window2D | WindowND):
        """``(Y, row-major flat indices into x)``; the indices point into ``x`` itself, not its cropped copy,
        so that backward scatters straight into X's shape."""
        cropped = crop_input(x, window.crops)
        if window.spatial_rank in _windows.NUMPY_SPATIAL_RANKS:
            y, indices = _windows.max_pool_forward(cropped, window)
        else:
            y, indices = load_native().max_pool2d_forward(cropped, window.kernel, window.strides, window.pads,
                                                          window.dilations, window.out)
        return y, uncrop_indices(indices, cropped.shape, window.crops)

    def _public_indices(self, indices: np.ndarray, shape: tuple, ndim: int) -> np.ndarray:
        if self.storage_order == 1:
            # Column-major within each (n, c) plane, the first spatial axis varying fastest (as onnx.reference):
            # 2-D: plane * H * W + w * H + h; 3-D: plane * D * H * W + w * D * H + h * D + d.
            spatial = shape[2:]
            plane_size = math.prod(spatial)
            plane, rest = np.divmod(np.maximum(indices, 0), plane_size)
            column_major = np.ravel_multi_index(np.unravel_index(rest, spatial), spatial, order="F")
            indices = np.where(indices >= 0, plane * plane_size + column_major, -1)
        return indices.reshape(indices.shape[0], indices.shape[1], indices.shape[3]) if ndim == 3 else indices


@register("AveragePool")
class AveragePool(_WindowPool):
    """ONNX AveragePool, with ``count_include_pad`` (0: divide by the taps inside X; 1: also count the
    taps in the declared padding, never those of a ceil_mode overhang, as PyTorch).

    >>> import numpy as np
    >>> x = np.ones((1, 1, 2, 2))
    >>> op = AveragePool(kernel_shape=[2, 2], strides=[2, 2], pads=[1, 1, 1, 1], count_include_pad=1)
    >>> op.forward([x])[0, 0].tolist()
    [[0.25, 0.25], [0.25, 0.25]]
    """

    op_name = "AveragePool"

    def forward(self, inputs):
        x, window = self._prepare(inputs)
        x = crop_input(x, window.crops)
        if window.spatial_rank in _windows.NUMPY_SPATIAL_RANKS:
            y = _windows.avg_pool_forward(x, window, self.count_include_pad)
        else:
            y = load_native().avg_pool2d_forward(x, window.kernel, window.strides, window.pads, window.dilations,
                                                 window.out, self.count_include_pad)
        original = np.asarray(inputs[0])
        return self._restore(y, original.ndim, original.dtype)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        x, window = self._prepare(fwd_inputs)
        cropped_shape = crop_input(x, window.crops).shape
        dy = as_kernel_array(grads[0], x.dtype).reshape(x.shape[0], x.shape[1], *window.out)
        if window.spatial_rank in _windows.NUMPY_SPATIAL_RANKS:
            dx = _windows.avg_pool_backward(dy, cropped_shape, window, self.count_include_pad)
        else:
            dx = load_native().avg_pool2d_backward(dy, cropped_shape, window.kernel, window.strides, window.pads,
                                                   window.dilations, self.count_include_pad)
        original = np.asarray(fwd_inputs[0])
        return self._restore(uncrop_gradient(dx, window.crops), original.ndim, original.dtype)


@register("GlobalAveragePool")
class GlobalAveragePool(ReferenceOp):
    """ONNX GlobalAveragePool: the mean over every spatial axis, kept as size-1 axes.

    >>> import numpy as np
    >>> GlobalAveragePool().forward([np.arange(8.0).reshape(1, 2, 2, 2)]).ravel().tolist()
    [1.5, 5.5]
    """

    def forward(self, inputs):
        x = self._prepare(inputs)
        return load_native().global_avg_pool_forward(x).astype(np.asarray(inputs[0]).dtype, copy=False)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        x = self._prepare(fwd_inputs)
        dy = as_kernel_array(grads[0], x.dtype)
        return load_native().global_avg_pool_backward(dy, x.shape).astype(np.asarray(fwd_inputs[0]).dtype,
                                                                          copy=False)

    @staticmethod
    def _prepare(inputs) -> np.ndarray:
        x = _global_pool_input("GlobalAveragePool", inputs)
        return as_kernel_array(x, compute_dtype("GlobalAveragePool", x))


@register("GlobalMaxPool")
class GlobalMaxPool(ReferenceOp):
    """ONNX GlobalMaxPool: the maximum over every spatial axis, kept as size-1 axes; NaN propagates.

    The gradient of each (n, c) plane goes to a single element: its first maximum in row-major order when
    several tie (its first NaN when it has one), the element MaxPool's argmax picks too.

    >>> import numpy as np
    >>> x = np.array([[[[1.0, 4.0], [4.0, 2.0]]]])
    >>> GlobalMaxPool().forward([x]).ravel().tolist()
    [4.0]
    >>> GlobalMaxPool().backward([np.ones((1, 1, 1, 1))], [x], None)[0, 0].tolist()
    [[0.0, 1.0], [0.0, 0.0]]
    """

    def forward(self, inputs):
        x = self._prepare(inputs)
        return np.max(x, axis=tuple(range(2, x.ndim)), keepdims=True)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        x = self._prepare(fwd_inputs)
        planes = x.reshape(x.shape[0], x.shape[1], -1)
        first = np.argmax(planes, axis=2)[..., None]  # first maximum, or first NaN (np.argmax's rule)
        dy = np.asarray(grads[0]).reshape(first.shape)
        dx = np.zeros(planes.shape, dtype=np.result_type(dy.dtype, x.dtype))
        np.put_along_axis(dx, first, dy, axis=2)
        return dx.reshape(x.shape).astype(x.dtype, copy=False)

    @staticmethod
    def _prepare(inputs) -> np.ndarray:
        return _global_pool_input("GlobalMaxPool", inputs)


def _global_pool_input(op_name: str, inputs) -> np.ndarray:
    """The single input X of a global pooling operator, checked to be (N, C, spatial...) with data."""
    if len(inputs) != 1 or inputs[0] is None:
        raise ShapeError(f"{op_name}: expected exactly one input X, got {len(inputs)}")
    x = np.asarray(inputs[0])
    check_global_pool_input(op_name, x.shape, require_data=True)
    return x


@register("LpPool")
class LpPool(ReferenceOp):
    """``(sum |x|^p)^(1/p)`` over sliding windows (N-D; zero padding, auto_pad, dilations, ceil_mode)."""

    gradient = Gradient.NONE

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("LpPool", attributes))

    def forward(self, inputs):
        dims = len(self.kernel_shape)
        x = require_rank("LpPool", inputs[0], f"X (N, C and {dims} spatial axes, from kernel_shape)", rank=dims + 2)
        strides = self.strides or [1] * dims
        dilations = self.dilations or [1] * dims
        geometry = window_geometry(x.shape[2:], self.kernel_shape, strides=strides, dilations=dilations,
                                   pads=self.pads or [0] * (2 * dims), auto_pad=self.auto_pad,
                                   ceil_mode=self.ceil_mode, op_name="LpPool")
        # Negative SAME_* pads: the windows never reach the cropped elements.
        powered = np.abs(crop_input(x, geometry.crops).astype(np.float64)) ** self.p
        begin = geometry.applied_pads[:dims]
        # Windows that run past the padded input (ceil_mode) read zeros, which add nothing to the sum.
        end = [max(pad, (n - 1) * s + (k - 1) * d + 1 - size - b) for pad, n, s, k, d, size, b in
               zip(geometry.applied_pads[dims:], geometry.out, strides, self.kernel_shape, dilations,
                   powered.shape[2:], begin)]
        padded = np.pad(powered, [(0, 0), (0, 0)] + list(zip(begin, end)))
        total = np.zeros(x.shape[:2] + geometry.out)
        for offset in itertools.product(*[range(k) for k in self.kernel_shape]):
            index = tuple(slice(o * d, o * d + (n - 1) * s + 1, s)
                          for o, d, n, s in zip(offset, dilations, geometry.out, strides))
            total += padded[(slice(None), slice(None)) + index]
        return (total ** (1.0 / self.p)).astype(x.dtype)


@register("MaxUnpool")
class MaxUnpool(ReferenceOp):
    """Scatter X (N, C, D1, ...) into zeros at the flat indices ``I`` (int64, X's shape, as MaxPool's second
    output) of the unpooled tensor, whose spatial size is ``(in - 1) * stride - pad_begin - pad_end + kernel``.

    With the optional ``output_shape`` input (at least that size), the unpooled tensor is placed in its leading
    corner and the rest is zero: the ONNX reference and backend tests' reading, in which ``I`` indexes the
    inferred shape. (onnxruntime and PyTorch index ``output_shape`` instead; the two agree when
    ``output_shape`` equals the inferred shape.) When an index repeats, the last X element wins. ``backward``
    gathers the gradient for X from the written positions (``None`` for I and output_shape).

    >>> import numpy as np
    >>> op = MaxUnpool(kernel_shape=[2], strides=[2])
    >>> op.forward([np.array([[[5.0, 7.0]]]), np.array([[[1, 2]]])]).tolist()
    [[[0.0, 5.0, 7.0, 0.0]]]
    """

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("MaxUnpool", attributes))

    def _layout(self, inputs):
        """(X, flat indices of the last write per position, inferred shape, output shape)."""
        if len(inputs) not in (2, 3) or inputs[0] is None or inputs[1] is None:
            raise ShapeError(f"MaxUnpool: expected inputs (X, I) or (X, I, output_shape), got {len(inputs)}")
        x, indices = np.asarray(inputs[0]), np.asarray(inputs[1])
        check_unpool_inputs(x.shape, indices.shape, self.kernel_shape, np.issubdtype(indices.dtype, np.integer),
                            indices.dtype)
        inferred = unpooled_shape("MaxUnpool", x.shape, self.kernel_shape, self.strides, self.pads)
        requested = optional_array(inputs, 2)
        shape = unpool_output_shape(inferred, None if requested is None else [int(v) for v in requested.reshape(-1)])
        flat = indices.reshape(-1).astype(np.int64)
        if flat.size:
            check_unpool_index_range(int(flat.min()), int(flat.max()), inferred)
        last = flat.size - 1 - np.unique(flat[::-1], return_index=True)[1]  # the last writer of each position
        return x, last, flat[last], inferred, shape

    def forward(self, inputs):
        x, winners, positions, inferred, shape = self._layout(inputs)
        unpooled = np.zeros(int(np.prod(inferred)), dtype=x.dtype)
        unpooled[positions] = x.reshape(-1)[winners]
        out = np.zeros(shape, dtype=x.dtype)
        out[tuple(slice(0, n) for n in inferred)] = unpooled.reshape(inferred)
        return out

    def backward(self, grads, fwd_inputs, fwd_outputs):
        x, winners, positions, inferred, _ = self._layout(fwd_inputs)
        dy = np.asarray(grads[0])[tuple(slice(0, n) for n in inferred)].reshape(-1)
        dx = np.zeros(x.size, dtype=np.result_type(dy.dtype, x.dtype))
        dx[winners] = dy[positions]
        return (dx.reshape(x.shape).astype(x.dtype, copy=False), None) + (None,) * (len(fwd_inputs) - 2)


__all__ = ["AveragePool", "GlobalAveragePool", "GlobalMaxPool", "LpPool", "MaxPool", "MaxUnpool"]
