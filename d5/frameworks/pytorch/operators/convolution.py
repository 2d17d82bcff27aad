"""Convolutions as native torch operations: Conv and ConvTranspose, 1-D to 3-D, with groups, dilations and
ONNX's padding rules (explicit asymmetric pads, auto_pad) resolved by the framework-neutral
:func:`d5.ops.onnx_semantics.window_geometry`; asymmetric or negative pads become an explicit F.pad."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from d5.errors import ShapeError, UnsupportedOperatorError
from d5.frameworks.pytorch.operators import TorchOp, register
from d5.frameworks.pytorch.operators._helpers import ints, pad_spatial, resolve_pads
from d5.ops.onnx_semantics import as_text, check_window_attributes

_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
_CONV_T = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}


class _ConvAttributes(TorchOp):
    op_name = "Conv"

    def __init__(self, auto_pad="NOTSET", dilations=None, group: int = 1, kernel_shape=None, pads=None,
                 strides=None, output_padding=None) -> None:
        super().__init__()
        self.auto_pad = as_text(auto_pad)
        self.dilations, self.kernel_shape = ints(dilations), ints(kernel_shape)
        self.pads, self.strides, self.group = ints(pads), ints(strides), int(group)
        if self.group < 1:
            raise ShapeError(f"{self.op_name}: group must be a positive integer, got {group}")
        check_window_attributes(self.op_name, auto_pad=self.auto_pad, kernel_shape=self.kernel_shape,
                                strides=self.strides, dilations=self.dilations, pads=self.pads,
                                output_padding=ints(output_padding))

    def _check(self, x, w):
        if x.dim() not in (3, 4, 5) or w.dim() != x.dim():
            raise UnsupportedOperatorError(f"{self.op_name}: X and W must both be 3-D to 5-D (1 to 3 spatial axes), "
                                           f"got X {tuple(x.shape)} and W {tuple(w.shape)}")
        kernel = list(w.shape[2:])
        if self.kernel_shape is not None and self.kernel_shape != kernel:
            raise ShapeError(f"{self.op_name}: attribute kernel_shape={self.kernel_shape} disagrees with W's kernel "
                             f"{kernel}; fix the attribute or the weights")
        return kernel


@register("Conv")
class Conv(_ConvAttributes):
    """ONNX Conv: ``Y = conv(X, W) + B``; W is (M, C/group, kernel...)."""

    def forward(self, x, w, b=None):
        kernel = self._check(x, w)
        if x.shape[1] != w.shape[1] * self.group:
            raise ShapeError(f"Conv: X has {x.shape[1]} channels but W {tuple(w.shape)} with group={self.group} "
                             f"expects {w.shape[1] * self.group}")
        _, strides, dilations, sides = resolve_pads("Conv", tuple(x.shape[2:]), kernel, self.strides,
                                                    self.dilations, self.pads, self.auto_pad, clamp_same_pads=True)
        symmetric = all(begin == end >= 0 for begin, end in sides)
        padding = [begin for begin, _ in sides] if symmetric else 0
        if not symmetric:
            x = pad_spatial(x, sides)
        return _CONV[x.dim() - 2](x, w, b, stride=strides, padding=padding, dilation=dilations, groups=self.group)


@register("ConvTranspose")
class ConvTranspose(_ConvAttributes):
    """ONNX ConvTranspose: W is (C, M/group, kernel...). Output size per axis ``stride * (in - 1) +
    output_padding + (k - 1) * dilation + 1 - pad_begin - pad_end``, or ``output_shape`` (the pads then
    derived, the odd unit at the end for SAME_UPPER, at the beginning otherwise), as the reference."""

    op_name = "ConvTranspose"

    def __init__(self, auto_pad="NOTSET", dilations=None, group: int = 1, kernel_shape=None, output_padding=None,
                 output_shape=None, pads=None, strides=None) -> None:
        super().__init__(auto_pad, dilations, group, kernel_shape, pads, strides, output_padding)
        self.output_padding, self.output_shape = ints(output_padding), ints(output_shape)

    def forward(self, x, w, b=None):
        kernel = self._check(x, w)
        spatial = list(x.shape[2:])
        rank = len(spatial)
        strides = self.strides or [1] * rank
        dilations = self.dilations or [1] * rank
        output_padding = self.output_padding or [0] * rank
        extent = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
        natural = [s * (i - 1) + op + e for s, i, op, e in zip(strides, spatial, output_padding, extent)]
        if self.output_shape:
            out = list(self.output_shape[-rank:])
            begin = self._derived_pads_begin(natural, out)
        elif self.auto_pad in ("SAME_UPPER", "SAME_LOWER") and self.pads is None:
            out = [min(nat, i * s) for nat, i, s in zip(natural, spatial, strides)]
            begin = self._derived_pads_begin(natural, out)
        else:
            pads = [0] * (2 * rank) if self.pads is None or self.auto_pad == "VALID" else self.pads
            begin = list(pads[:rank])
            out = [nat - pb - pe for nat, pb, pe in zip(natural, pads[:rank], pads[rank:])]
        if any(p < 0 for p in begin) or any(o <= 0 for o in out):
            raise UnsupportedOperatorError(f"ConvTranspose: the attributes give output size {out} with leading pads "
                                           f"{begin}; negative leading pads and empty outputs are not supported")
        full = _CONV_T[rank](x, w, None, stride=strides, padding=0, dilation=dilations, groups=self.group)
        # The unpadded output grows by output_padding zeros at the end, then loses the pads on both sides.
        sides = [(-bg, (nat - f) - (nat - bg - o)) for bg, nat, f, o in zip(begin, natural, full.shape[2:], out)]
        y = pad_spatial(full, sides)
        if b is not None:
            y = y + b.reshape(1, -1, *(1,) * rank)
        return y

    def _derived_pads_begin(self, natural, out):
        total = [nat - o for nat, o in zip(natural, out)]
        if self.auto_pad == "SAME_UPPER":
            return [t // 2 for t in total]
        return [t - t // 2 for t in total]
