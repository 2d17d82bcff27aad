"""Reference Conv (ONNX semantics, 1-D, 2-D and 3-D): im2col + GEMM in C++ (d5._C), one image at a time;
3-D convolutions take the NumPy path below, with the NumPy im2col/col2im of ``windows_nd``.

Why this design: measured on LeNet-5 shapes (batch 64, float32, 2 cores, conv1 + conv2 forward and
backward), im2col + BLAS GEMM per image inside d5._C took ~5.3-6.7 ms (PyTorch: ~6 ms), while im2col of
the whole batch in C++ followed by NumPy matmul took ~9.3-10.9 ms: a single image's columns stay in
cache between im2col and the GEMM. The GEMM is scipy's BLAS, reached through the function pointers scipy
exports (see d5.frameworks.reference.kernels); if they are unavailable, the NumPy path below runs instead.

>>> import numpy as np
>>> x = np.ones((1, 1, 4, 4), np.float32)
>>> w = np.ones((2, 1, 3, 3), np.float32)
>>> y = Conv(pads=[1, 1, 1, 1]).forward([x, w])
>>> y.shape, y.dtype, float(y[0, 0, 0, 0]), float(y[0, 0, 1, 1])
((1, 2, 4, 4), dtype('float32'), 4.0, 9.0)
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from d5.errors import ShapeError
from d5.frameworks.reference.kernels import Window2D, as_kernel_array, compute_dtype, load_native
from d5.frameworks.reference.operators.windows_nd import WindowND, resolve_window, window_kernels
from d5.frameworks.reference.operators.registry import ReferenceOp, register
from d5.ops.onnx_semantics import check_window_attributes


@register("Conv")
class Conv(ReferenceOp):
    """ONNX Conv: ``Y = conv(X, W) + B`` with strides, pads, dilations, groups and auto_pad.

    Inputs ``X`` (N, C, H, W), (N, C, L) or (N, C, D, H, W), ``W`` (M, C/group, kernel...), optional ``B`` (M,).
    float32 in gives float32 out, float64 gives float64 (float16 computes in float32 and is cast back;
    mixed input dtypes give the wider one).

    >>> import numpy as np
    >>> x = np.arange(16.0).reshape(1, 1, 4, 4)
    >>> Conv(strides=[2, 2]).forward([x, np.ones((1, 1, 2, 2))])[0, 0]
    array([[10., 18.],
           [42., 50.]])
    """

    #: Use the C++ im2col + BLAS kernel when scipy's BLAS is registered; False forces the NumPy path.
    use_blas_kernel: bool = True

    def __init__(self, auto_pad: str = "NOTSET", dilations: Sequence[int] | None = None, group: int = 1,
                 kernel_shape: Sequence[int] | None = None, pads: Sequence[int] | None = None,
                 strides: Sequence[int] | None = None) -> None:
        super().__init__()
        self.auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else str(auto_pad)
        self.dilations = None if dilations is None else tuple(int(d) for d in dilations)
        self.group = int(group)
        self.kernel_shape = None if kernel_shape is None else tuple(int(k) for k in kernel_shape)
        self.pads = None if pads is None else tuple(int(p) for p in pads)
        self.strides = None if strides is None else tuple(int(s) for s in strides)
        if self.group < 1:
            raise ShapeError(f"Conv: group must be a positive integer, got {group}")
        check_window_attributes("Conv", auto_pad=self.auto_pad, kernel_shape=self.kernel_shape, strides=self.strides,
                                dilations=self.dilations, pads=self.pads)

    # -- forward / backward ---------------------------------------------------------------------------

    def forward(self, inputs):
        x, w, b, window = self._prepare(inputs)
        native = load_native()
        if self._native_gemm(window, native):
            y = native.conv2d_forward(x, w, b, window.strides, window.pads_begin, window.dilations, window.out,
                                      self.group)
        else:
            y = self._forward_numpy(x, w, b, window)
        return self._restore(y, window, output_dtype(inputs, x.dtype))

    def backward(self, grads, fwd_inputs, fwd_outputs):
        x, w, b, window = self._prepare(fwd_inputs)
        dy = as_kernel_array(grads[0], x.dtype).reshape(x.shape[0], w.shape[0], *window.out)
        native = load_native()
        if self._native_gemm(window, native):
            # The executor's hint: no gradient is wanted for the input of a network's first layer.
            with_dx = self.input_grad_required is None or self.input_grad_required[0]
            dx, dw, db = native.conv2d_backward(dy, x, w, window.strides, window.pads_begin, window.dilations,
                                                self.group, b is not None, with_dx)
        else:
            dx, dw, db = self._backward_numpy(dy, x, w, b, window)
        grad_x = None if dx is None else self._restore(dx, window, np.asarray(fwd_inputs[0]).dtype)
        grad_w = dw.reshape(np.shape(fwd_inputs[1])).astype(np.asarray(fwd_inputs[1]).dtype, copy=False)
        if b is None:
            return grad_x, grad_w
        return grad_x, grad_w, db.astype(np.asarray(fwd_inputs[2]).dtype, copy=False)

    def _native_gemm(self, window: Window2D | WindowND, native) -> bool:
        # d5._C's fused im2col + GEMM kernels are 2-D only; 3-D always runs the NumPy path.
        return window.spatial_rank in (1, 2) and self.use_blas_kernel and native.blas_ready()

    # -- NumPy path: im2col of the whole batch (C++ for 1-D/2-D, NumPy for 3-D), GEMMs with numpy.matmul -

    def _forward_numpy(self, x, w, b, window: Window2D | WindowND) -> np.ndarray:
        n, m = x.shape[0], w.shape[0]
        columns = self._columns(x, window)                                   # (N, G, Kg, L)
        y = np.matmul(self._grouped_weights(w), columns).reshape(n, m, *window.out)
        if b is not None:
            y += b.reshape(1, m, *(1,) * len(window.out))
        return y

    def _backward_numpy(self, dy, x, w, b, window: Window2D | WindowND):
        n, m, g = x.shape[0], w.shape[0], self.group
        dy = dy.reshape(n, g, m // g, -1)                                    # (N, G, Mg, L)
        columns = self._columns(x, window)
        # dW: one (Mg, L) @ (L, Kg) GEMM per image and group (transposed views, no copies), summed over N.
        dw = np.matmul(dy, columns.transpose(0, 1, 3, 2)).sum(axis=0)
        dcolumns = np.matmul(self._grouped_weights(w).transpose(0, 2, 1), dy)  # (N, G, Kg, L)
        dx = window_kernels(window.spatial_rank).col2im(dcolumns.reshape(n, -1, dcolumns.shape[-1]), x.shape,
                                                        window.kernel, window.strides, window.pads_begin,
                                                        window.dilations, window.out)
        db = None if b is None else dy.sum(axis=(0, 3)).reshape(m)
        return dx, dw, db

    def _grouped_weights(self, w: np.ndarray) -> np.ndarray:
        return w.reshape(self.group, w.shape[0] // self.group, -1)

    def _columns(self, x: np.ndarray, window: Window2D | WindowND) -> np.ndarray:
        columns = window_kernels(window.spatial_rank).im2col(x, window.kernel, window.strides, window.pads_begin,
                                                             window.dilations, window.out)
        # Rows are channel-major, so each group's rows are one contiguous block.
        return columns.reshape(x.shape[0], self.group, columns.shape[1] // self.group, columns.shape[2])

    # -- validation -------------------------------------------------------------------------------------

    def _prepare(self, inputs):
        """X, W (lifted to 2-D for 1-D convolutions) and B as contiguous arrays of one dtype, and the window."""
        if len(inputs) not in (2, 3):
            raise ShapeError(f"Conv: expected inputs (X, W) or (X, W, B), got {len(inputs)} inputs")
        x, w = np.asarray(inputs[0]), np.asarray(inputs[1])
        b = None if len(inputs) < 3 or inputs[2] is None else np.asarray(inputs[2])
        if x.ndim not in (3, 4, 5):
            raise ShapeError(f"Conv: X must be (N, C, L), (N, C, H, W) or (N, C, D, H, W), got shape {x.shape}")
        if w.ndim != x.ndim:
            raise ShapeError(f"Conv: W must have the rank of X ({x.ndim}): (M, C/group, kernel...), got shape "
                             f"{w.shape} for X of shape {x.shape}")
        channels, m = x.shape[1], w.shape[0]
        if channels % self.group or m % self.group or w.shape[1] * self.group != channels:
            raise ShapeError(f"Conv: with group={self.group}, X of shape {x.shape} needs W of shape (M, "
                             f"{channels / self.group:g}, kernel...) with C={channels} and M both divisible by "
                             f"{self.group}; got W of shape {w.shape}")
        if self.kernel_shape is not None and tuple(w.shape[2:]) != self.kernel_shape:
            raise ShapeError(f"Conv: attribute kernel_shape={list(self.kernel_shape)} disagrees with W of shape "
                             f"{w.shape}; fix the attribute or the weights")
        if b is not None and b.shape != (m,):
            raise ShapeError(f"Conv: B must have shape ({m},) (one bias per output channel), got {b.shape}")
        dtype = compute_dtype("Conv", *(a for a in (x, w, b) if a is not None))
        # SAME_* never pads Conv by a negative amount (onnx.reference's Conv clamps the total to 0, and so
        # does onnxruntime wherever the two agree; see window_geometry), so nothing is ever cropped here.
        window = resolve_window("Conv", x.shape[2:], w.shape[2:], strides=self.strides, dilations=self.dilations,
                                pads=self.pads, auto_pad=self.auto_pad, clamp_same_pads=True)
        if window.spatial_rank == 1:
            x = x.reshape(x.shape[0], x.shape[1], 1, x.shape[2])
            w = w.reshape(w.shape[0], w.shape[1], 1, w.shape[2])
        x = as_kernel_array(x, dtype)
        w = as_kernel_array(w, dtype)
        b = None if b is None else as_kernel_array(b, dtype)
        return x, w, b, window

    @staticmethod
    def _restore(array: np.ndarray, window: Window2D | WindowND, dtype: np.dtype) -> np.ndarray:
        if window.spatial_rank == 1:
            array = array.reshape(array.shape[0], array.shape[1], array.shape[3])
        return array.astype(dtype, copy=False)


def output_dtype(inputs, compute: np.dtype) -> np.dtype:
    # Keep X's dtype when all inputs agree on it (float16 stays float16); mixed inputs get the wider type.
    dtypes = {np.asarray(a).dtype for a in inputs if a is not None}
    return dtypes.pop() if len(dtypes) == 1 else compute


__all__ = ["Conv"]
