"""Reference pooling operators (ONNX semantics, 1-D, 2-D and 3-D windows): MaxPool, AveragePool,
GlobalAveragePool, GlobalMaxPool. The window loops run in C++ (d5._C, OpenMP over batch x channels) for 1-D and 2-D
windows, and in NumPy (``windows_nd``, a loop over the kernel taps) for 3-D ones.

>>> import numpy as np
>>> x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
>>> y, indices = MaxPool(kernel_shape=[2, 2], strides=[2, 2]).forward([x])
>>> y[0, 0].tolist(), indices[0, 0].tolist()
([[5.0, 7.0], [13.0, 15.0]], [[5, 7], [13, 15]])
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from d5.errors import ShapeError
from d5.frameworks.reference.kernels import Window2D, as_kernel_array, compute_dtype, load_native
from d5.frameworks.reference.operators import windows_nd
from d5.frameworks.reference.operators.registry import ReferenceOp, register
from d5.frameworks.reference.operators.windows_nd import (WindowND, crop_input, resolve_window, uncrop_gradient,
                                                          uncrop_indices)
from d5.ops.onnx_semantics import check_window_attributes


class _WindowPool(ReferenceOp):
    """Shared attribute handling of MaxPool and AveragePool."""

    op_name = "Pool"

    def __init__(self, kernel_shape: Sequence[int] | None = None, auto_pad: str = "NOTSET", ceil_mode: int = 0,
                 dilations: Sequence[int] | None = None, pads: Sequence[int] | None = None,
                 strides: Sequence[int] | None = None) -> None:
        super().__init__()
        if kernel_shape is None:
            raise ShapeError(f"{self.op_name}: the kernel_shape attribute is required (e.g. kernel_shape=[2, 2])")
        self.kernel_shape = tuple(int(k) for k in kernel_shape)
        self.auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else str(auto_pad)
        self.ceil_mode = bool(ceil_mode)
        self.dilations = None if dilations is None else tuple(int(d) for d in dilations)
        self.pads = None if pads is None else tuple(int(p) for p in pads)
        self.strides = None if strides is None else tuple(int(s) for s in strides)
        check_window_attributes(self.op_name, auto_pad=self.auto_pad, kernel_shape=self.kernel_shape,
                                strides=self.strides, dilations=self.dilations, pads=self.pads)

    def _prepare(self, inputs) -> tuple[np.ndarray, Window2D | WindowND]:
        """X as a contiguous array of the compute dtype (1-D lifted to 2-D), and its resolved window; the
        kernels run on ``crop_input(X, window.crops)`` (negative SAME_* pads, see window_geometry)."""
        if len(inputs) != 1 or inputs[0] is None:
            raise ShapeError(f"{self.op_name}: expected exactly one input X, got {len(inputs)}")
        x = np.asarray(inputs[0])
        if x.ndim not in (3, 4, 5):
            raise ShapeError(f"{self.op_name}: X must be (N, C, L), (N, C, H, W) or (N, C, D, H, W), got shape "
                             f"{x.shape}")
        if len(self.kernel_shape) != x.ndim - 2:
            raise ShapeError(f"{self.op_name}: kernel_shape {list(self.kernel_shape)} has {len(self.kernel_shape)} "
                             f"axes but X of shape {x.shape} has {x.ndim - 2} spatial axes")
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

    def __init__(self, kernel_shape: Sequence[int] | None = None, auto_pad: str = "NOTSET", ceil_mode: int = 0,
                 dilations: Sequence[int] | None = None, pads: Sequence[int] | None = None,
                 storage_order: int = 0, strides: Sequence[int] | None = None) -> None:
        super().__init__(kernel_shape, auto_pad, ceil_mode, dilations, pads, strides)
        if int(storage_order) not in (0, 1):
            raise ShapeError(f"MaxPool: storage_order must be 0 (row-major) or 1 (column-major), got {storage_order}")
        self.storage_order = int(storage_order)
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
        if window.spatial_rank in windows_nd.NUMPY_SPATIAL_RANKS:
            dx = windows_nd.max_pool_backward(dy, indices, x.shape)
        else:
            dx = load_native().max_pool2d_backward(dy, indices, x.shape)
        original = np.asarray(fwd_inputs[0])
        return self._restore(dx, original.ndim, original.dtype)

    def _pool(self, x: np.ndarray, window: Window2D | WindowND):
        """``(Y, row-major flat indices into x)``; the indices point into ``x`` itself, not its cropped copy,
        so that backward scatters straight into X's shape."""
        cropped = crop_input(x, window.crops)
        if window.spatial_rank in windows_nd.NUMPY_SPATIAL_RANKS:
            y, indices = windows_nd.max_pool_forward(cropped, window)
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

    def __init__(self, kernel_shape: Sequence[int] | None = None, auto_pad: str = "NOTSET", ceil_mode: int = 0,
                 count_include_pad: int = 0, dilations: Sequence[int] | None = None,
                 pads: Sequence[int] | None = None, strides: Sequence[int] | None = None) -> None:
        super().__init__(kernel_shape, auto_pad, ceil_mode, dilations, pads, strides)
        self.count_include_pad = bool(count_include_pad)

    def forward(self, inputs):
        x, window = self._prepare(inputs)
        x = crop_input(x, window.crops)
        if window.spatial_rank in windows_nd.NUMPY_SPATIAL_RANKS:
            y = windows_nd.avg_pool_forward(x, window, self.count_include_pad)
        else:
            y = load_native().avg_pool2d_forward(x, window.kernel, window.strides, window.pads, window.dilations,
                                                 window.out, self.count_include_pad)
        original = np.asarray(inputs[0])
        return self._restore(y, original.ndim, original.dtype)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        x, window = self._prepare(fwd_inputs)
        cropped_shape = crop_input(x, window.crops).shape
        dy = as_kernel_array(grads[0], x.dtype).reshape(x.shape[0], x.shape[1], *window.out)
        if window.spatial_rank in windows_nd.NUMPY_SPATIAL_RANKS:
            dx = windows_nd.avg_pool_backward(dy, cropped_shape, window, self.count_include_pad)
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
    if x.ndim < 3 or 0 in x.shape[2:]:
        raise ShapeError(f"{op_name}: X must be (N, C, spatial...) with non-empty spatial axes, got shape {x.shape}")
    return x


__all__ = ["AveragePool", "GlobalAveragePool", "GlobalMaxPool", "MaxPool"]
