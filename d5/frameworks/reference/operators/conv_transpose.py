"""Reference ConvTranspose (ONNX semantics, 1-D, 2-D and 3-D): the adjoint of Conv.

ConvTranspose's forward is Conv's input gradient, and its input gradient is Conv's forward, so both reuse
d5._C's im2col/col2im (``windows_nd``'s NumPy ones for 3-D) with NumPy matmul: ``Y = col2im(W^T X)``,
``dX = W im2col(dY)``, ``dW = X im2col(dY)^T``.

>>> import numpy as np
>>> y = ConvTranspose(strides=[2, 2]).forward([np.ones((1, 1, 2, 2), np.float32), np.ones((1, 1, 2, 2), np.float32)])
>>> y.shape, y.dtype, float(y.sum())
((1, 1, 4, 4), dtype('float32'), 16.0)
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from d5.errors import ShapeError, UnsupportedOperatorError
from d5.frameworks.reference.kernels import as_kernel_array, compute_dtype
from d5.frameworks.reference.operators.registry import ReferenceOp, register
from d5.frameworks.reference.operators.conv import output_dtype
from d5.frameworks.reference.operators.windows_nd import window_kernels
from d5.ops.onnx_semantics import check_window_attributes


def _ints(values) -> tuple[int, ...] | None:
    return None if values is None else tuple(int(v) for v in values)


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

    def __init__(self, auto_pad: str = "NOTSET", dilations: Sequence[int] | None = None, group: int = 1,
                 kernel_shape: Sequence[int] | None = None, output_padding: Sequence[int] | None = None,
                 output_shape: Sequence[int] | None = None, pads: Sequence[int] | None = None,
                 strides: Sequence[int] | None = None) -> None:
        super().__init__()
        self.auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else str(auto_pad)
        self.dilations = _ints(dilations)
        self.group = int(group)
        self.kernel_shape = _ints(kernel_shape)
        self.output_padding = _ints(output_padding)
        self.output_shape = _ints(output_shape)
        self.pads = _ints(pads)
        self.strides = _ints(strides)
        if self.group < 1:
            raise ShapeError(f"ConvTranspose: group must be a positive integer, got {group}")
        check_window_attributes("ConvTranspose", auto_pad=self.auto_pad, kernel_shape=self.kernel_shape,
                                strides=self.strides, dilations=self.dilations, pads=self.pads,
                                output_padding=self.output_padding)

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
        rank = len(spatial)
        strides = self.strides or (1,) * rank
        dilations = self.dilations or (1,) * rank
        output_padding = self.output_padding or (0,) * rank
        for name, values in (("strides", strides), ("dilations", dilations), ("output_padding", output_padding)):
            if len(values) != rank:
                raise ShapeError(f"ConvTranspose: {name} must have {rank} values (one per spatial axis), got "
                                 f"{list(values)}")
        if self.kernel_shape is not None and self.kernel_shape != kernel:
            raise ShapeError(f"ConvTranspose: attribute kernel_shape={list(self.kernel_shape)} disagrees with W's "
                             f"kernel {list(kernel)}; fix the attribute or the weights")
        extent = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
        natural = [s * (i - 1) + op + e for s, i, op, e in zip(strides, spatial, output_padding, extent)]
        if self.output_shape:
            # ONNX: a given output_shape overrides the pads, which are derived from it; the odd unit of the
            # total goes at the end for SAME_UPPER and at the beginning otherwise (NOTSET, SAME_LOWER).
            if len(self.output_shape) not in (rank, rank + 2):  # the spatial sizes (or, leniently, N, C too)
                raise ShapeError(f"ConvTranspose: output_shape must have {rank} values (one per spatial axis), got "
                                 f"{list(self.output_shape)}")
            out = list(self.output_shape[-rank:])
            begin = self._derived_pads_begin(natural, out)
        elif self.auto_pad in ("SAME_UPPER", "SAME_LOWER") and self.pads is None:
            # output = input * stride, the pads split as above; where that is more than the unpadded output
            # (stride > dilated kernel), the total pad is clamped at 0 and the output is the unpadded one, as
            # onnxruntime and ONNX's shape inference (which executors plan memory with) have it.
            out = [min(nat, i * s) for nat, i, s in zip(natural, spatial, strides)]
            begin = self._derived_pads_begin(natural, out)
        else:
            pads = (0,) * (2 * rank) if self.pads is None or self.auto_pad == "VALID" else self.pads
            if len(pads) != 2 * rank:
                raise ShapeError(f"ConvTranspose: pads must have {2 * rank} values (begins, then ends), got {list(pads)}")
            begin = list(pads[:rank])
            out = [nat - pb - pe for nat, pb, pe in zip(natural, pads[:rank], pads[rank:])]
        if any(p < 0 for p in begin) or any(o <= 0 for o in out):
            raise UnsupportedOperatorError(
                f"ConvTranspose: the attributes give output size {out} with leading pads {begin}; negative leading "
                "pads and empty outputs are not supported; check output_shape/pads")
        if rank == 1:
            return {"in": (1, spatial[0]), "out": (1, out[0]), "kernel": (1, kernel[0]), "strides": (1, strides[0]),
                    "dilations": (1, dilations[0]), "pads_begin": (0, begin[0]), "rank": 1}
        return {"in": tuple(spatial), "out": tuple(out), "kernel": tuple(kernel), "strides": tuple(strides),
                "dilations": tuple(dilations), "pads_begin": tuple(begin), "rank": rank}

    def _derived_pads_begin(self, natural: list[int], out: list[int]) -> list[int]:
        """The leading pads that turn the unpadded output size ``natural`` into ``out`` (ONNX's formula)."""
        total = [nat - o for nat, o in zip(natural, out)]
        if self.auto_pad == "SAME_UPPER":
            return [t // 2 for t in total]
        return [t - t // 2 for t in total]

    def _prepare(self, inputs):
        if len(inputs) not in (2, 3):
            raise ShapeError(f"ConvTranspose: expected inputs (X, W) or (X, W, B), got {len(inputs)} inputs")
        x, w = np.asarray(inputs[0]), np.asarray(inputs[1])
        b = None if len(inputs) < 3 or inputs[2] is None else np.asarray(inputs[2])
        if x.ndim not in (3, 4, 5):
            raise UnsupportedOperatorError(
                f"ConvTranspose: the reference framework implements 1-D, 2-D and 3-D transposed convolutions (3-D to "
                f"5-D X), got X of shape {x.shape}; run this model on another framework (e.g. PyTorch)")
        if w.ndim != x.ndim or w.shape[0] != x.shape[1] or x.shape[1] % self.group:
            raise ShapeError(f"ConvTranspose: W must be (C, M/group, kernel...) with C = X's channels ({x.shape[1]}, "
                             f"divisible by group={self.group}); got W {w.shape} for X {x.shape}")
        m = w.shape[1] * self.group
        if b is not None and b.shape != (m,):
            raise ShapeError(f"ConvTranspose: B must have shape ({m},) (one bias per output channel), got {b.shape}")
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


__all__ = ["ConvTranspose"]
