"""Reference convolutions (ONNX semantics, 1-D, 2-D and 3-D): Conv, ConvTranspose and Col2Im (no gradient).

Conv is im2col + GEMM in C++ (d5._C), one image at a time; 3-D convolutions take the NumPy path, with the
NumPy im2col/col2im of ``_windows``. Why this design: measured on LeNet-5 shapes (batch 64, float32, 2 cores,
conv1 + conv2 forward and backward), im2col + BLAS GEMM per image inside d5._C took ~5.3-6.7 ms (PyTorch:
~6 ms), while im2col of the whole batch in C++ followed by NumPy matmul took ~9.3-10.9 ms: a single image's
columns stay in cache between im2col and the GEMM. The GEMM is scipy's BLAS, reached through the function
pointers scipy exports (see d5.frameworks.reference.kernels); if they are unavailable, the NumPy path runs
instead.

ConvTranspose is the adjoint of Conv: its forward is Conv's input gradient and its input gradient is Conv's
forward, so both reuse d5._C's im2col/col2im (``_windows``' NumPy ones for 3-D) with NumPy matmul:
``Y = col2im(W^T X)``, ``dX = W im2col(dY)``, ``dW = X im2col(dY)^T``.

>>> import numpy as np
>>> x = np.ones((1, 1, 4, 4), np.float32)
>>> w = np.ones((2, 1, 3, 3), np.float32)
>>> y = Conv(pads=[1, 1, 1, 1]).forward([x, w])
>>> y.shape, y.dtype, float(y[0, 0, 0, 0]), float(y[0, 0, 1, 1])
((1, 2, 4, 4), dtype('float32'), 4.0, 9.0)
>>> y = ConvTranspose(strides=[2, 2]).forward([np.ones((1, 1, 2, 2), np.float32), np.ones((1, 1, 2, 2), np.float32)])
>>> y.shape, y.dtype, float(y.sum())
((1, 1, 4, 4), dtype('float32'), 16.0)
"""
from __future__ import annotations

import itertools

import numpy as np

from d5.errors import ShapeError, UnsupportedOperatorError
from d5.frameworks.reference.kernels import Window2D, as_kernel_array, compute_dtype, load_native
from d5.frameworks.reference.operators import ReferenceOp, register
from d5.frameworks.reference.operators._checks import require_rank
from d5.frameworks.reference.operators._windows import WindowND, resolve_window, window_kernels
from d5.ops.onnx_attributes import adopt, operator_attributes
from d5.ops.onnx_semantics import col2im_geometry, conv_transpose_geometry
from d5.ops.operator import Gradient
from d5.ops.window_checks import check_conv_inputs, check_conv_transpose_weights, check_kernel_attribute


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

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("Conv", attributes))

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
        check_conv_inputs(x.shape, w.shape, self.group, self.kernel_shape, None if b is None else b.shape)
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


@register("ConvTranspose")
class ConvTranspose(ReferenceOp):
    """ONNX ConvTranspose: inputs ``X`` (N, C, H, W), (N, C, L) or (N, C, D, H, W), ``W`` (C, M/group, kernel...),
    optional ``B`` (M,).

    Output size per axis: ``stride * (in - 1) + output_padding + (k - 1) * dilation + 1 - pad_begin - pad_end``,
    or ``output_shape`` when given: the pads are then ignored and derived from it, the total
    ``natural - output_shape`` split evenly with the odd unit at the end for ``auto_pad=SAME_UPPER`` and at
    the beginning otherwise (ONNX's rule, as onnxruntime applies it). float32 stays float32, float64 stays
    float64 (float16 computes in float32).

    >>> import numpy as np
    >>> x = np.arange(1.0, 3.0).reshape(1, 1, 2)
    >>> ConvTranspose().forward([x, np.ones((1, 1, 2))])
    array([[[1., 3., 2.]]])
    """

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("ConvTranspose", attributes))

    def forward(self, inputs):
        x, w, b, geo = self._prepare(inputs)
        n, c = x.shape[:2]
        g, m_per_group = self.group, w.shape[1]
        # (G, C/G, Mg*taps)^T @ (N, G, C/G, H*W) -> columns (N, G, Mg*taps, H*W), then scatter-add.
        wg = w.reshape(g, c // g, -1)
        columns = np.matmul(wg.transpose(0, 2, 1), x.reshape(n, g, c // g, -1))
        y = window_kernels(geo["rank"]).col2im(columns.reshape(n, -1, columns.shape[-1]),
                                               (n, g * m_per_group, *geo["out"]), geo["kernel"], geo["strides"],
                                               geo["pads_begin"], geo["dilations"], geo["in"])
        if b is not None:
            y += b.reshape(1, -1, *(1,) * (y.ndim - 2))
        return self._restore(y, geo, output_dtype(inputs, x.dtype))

    def backward(self, grads, fwd_inputs, fwd_outputs):
        x, w, b, geo = self._prepare(fwd_inputs)
        n, c = x.shape[:2]
        g = self.group
        dy = as_kernel_array(grads[0], x.dtype).reshape(n, -1, *geo["out"])
        columns = window_kernels(geo["rank"]).im2col(dy, geo["kernel"], geo["strides"], geo["pads_begin"],
                                                     geo["dilations"], geo["in"])
        columns = columns.reshape(n, g, columns.shape[1] // g, columns.shape[2])   # (N, G, Mg*k, H*W)
        wg = w.reshape(g, c // g, -1)
        xg = x.reshape(n, g, c // g, -1)
        dx = np.matmul(wg, columns).reshape(x.shape)
        dw = np.matmul(xg, columns.transpose(0, 1, 3, 2)).sum(axis=0).reshape(w.shape)
        grad_x = self._restore(dx, geo, np.asarray(fwd_inputs[0]).dtype)
        grad_w = dw.reshape(np.shape(fwd_inputs[1])).astype(np.asarray(fwd_inputs[1]).dtype, copy=False)
        if b is None:
            return (grad_x, grad_w) + ((None,) if len(fwd_inputs) > 2 else ())
        return grad_x, grad_w, dy.sum(axis=(0, *range(2, dy.ndim))).astype(np.asarray(fwd_inputs[2]).dtype, copy=False)

    # -- geometry ---------------------------------------------------------------------------------------

    def _geometry(self, spatial: tuple[int, ...], kernel: tuple[int, ...]) -> dict:
        check_kernel_attribute("ConvTranspose", self.kernel_shape, kernel)
        geometry = conv_transpose_geometry(spatial, kernel, strides=self.strides, dilations=self.dilations,
                                           output_padding=self.output_padding, pads=self.pads,
                                           output_shape=self.output_shape, auto_pad=self.auto_pad)
        if len(spatial) == 1:  # lifted to 2-D for the kernels
            return {"in": (1, spatial[0]), "out": (1, *geometry.out), "kernel": (1, kernel[0]),
                    "strides": (1, *geometry.strides), "dilations": (1, *geometry.dilations),
                    "pads_begin": (0, *geometry.pads_begin), "rank": 1}
        return {"in": tuple(spatial), "out": geometry.out, "kernel": tuple(kernel), "strides": geometry.strides,
                "dilations": geometry.dilations, "pads_begin": geometry.pads_begin, "rank": len(spatial)}

    def _prepare(self, inputs):
        if len(inputs) not in (2, 3):
            raise ShapeError(f"ConvTranspose: expected inputs (X, W) or (X, W, B), got {len(inputs)} inputs")
        x, w = np.asarray(inputs[0]), np.asarray(inputs[1])
        b = None if len(inputs) < 3 or inputs[2] is None else np.asarray(inputs[2])
        if x.ndim not in (3, 4, 5):
            raise UnsupportedOperatorError(
                f"ConvTranspose: the reference framework implements 1-D, 2-D and 3-D transposed convolutions (3-D to "
                f"5-D X), got X of shape {x.shape}; run this model on another framework (e.g. PyTorch)")
        check_conv_transpose_weights(x.shape, w.shape, self.group, None if b is None else b.shape)
        dtype = compute_dtype("ConvTranspose", *(a for a in (x, w, b) if a is not None))
        geo = self._geometry(tuple(x.shape[2:]), tuple(w.shape[2:]))
        if geo["rank"] == 1:
            x = x.reshape(x.shape[0], x.shape[1], 1, x.shape[2])
            w = w.reshape(w.shape[0], w.shape[1], 1, w.shape[2])
        x, w = as_kernel_array(x, dtype), as_kernel_array(w, dtype)
        return x, w, (None if b is None else as_kernel_array(b, dtype)), geo

    @staticmethod
    def _restore(array: np.ndarray, geo: dict, dtype: np.dtype) -> np.ndarray:
        if geo["rank"] == 1:
            array = array.reshape(array.shape[0], array.shape[1], array.shape[3])
        return array.astype(dtype, copy=False)


@register("Col2Im")
class Col2Im(ReferenceOp):
    """Sum the columns of ``input`` (N, C*prod(block), L) back into an image of ``image_shape`` (the inverse
    layout of im2col, overlapping blocks added)."""

    gradient = Gradient.NONE

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("Col2Im", attributes))

    def forward(self, inputs):
        columns = require_rank("Col2Im", inputs[0], "input (N, C * prod(block_shape), L)", rank=3)
        image = [int(v) for v in require_rank("Col2Im", inputs[1], "image_shape", rank=1)]
        block = [int(v) for v in require_rank("Col2Im", inputs[2], "block_shape", rank=1)]
        geometry = col2im_geometry(columns.shape, image, block, self.dilations, self.pads, self.strides)
        dims, n = len(image), columns.shape[0]
        dilations, pads, strides = geometry.dilations, geometry.pads, geometry.strides
        padded_shape, blocks, channels = list(geometry.padded), list(geometry.blocks), geometry.channels
        cols = columns.reshape([n, channels] + block + blocks)
        out = np.zeros([n, channels] + padded_shape, dtype=columns.dtype)
        for offset in itertools.product(*[range(k) for k in block]):
            index = tuple(slice(o * d, o * d + (b - 1) * s + 1, s)
                          for o, d, b, s in zip(offset, dilations, blocks, strides))
            out[(slice(None), slice(None)) + index] += cols[(slice(None), slice(None)) + offset]
        crop = tuple(slice(pads[i], pads[i] + image[i]) for i in range(dims))
        return np.ascontiguousarray(out[(slice(None), slice(None)) + crop])


__all__ = ["Col2Im", "Conv", "ConvTranspose"]
