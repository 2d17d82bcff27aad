"""Shape operators as native torch operations: Identity, Flatten, Reshape, Transpose, Concat, Split, Slice,
Pad, Squeeze, Unsqueeze, Expand, Tile, Shape, Size, SpaceToDepth, DepthToSpace, ReverseSequence. Shape-like
inputs arrive as int64 tensors and are read with ``.tolist()`` (they are constants of the graph, not
differentiated)."""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from d5.errors import ShapeError
from d5.frameworks.pytorch.operators import TorchOp, register
from d5.frameworks.pytorch.operators._helpers import ints
from d5.ops.onnx_attributes import adopt, operator_attributes
from d5.ops.onnx_semantics import normalize_axis, reshape_target, slice_bounds, split_lengths
from d5.ops.tensor_checks import (depth_to_space_plan, flatten_axis, pad_widths, reverse_sequence_lengths, shape_range,
                                  slice_arguments, space_to_depth_plan, tile_shape)
# ONNX Reshape's target rule (0 copies, -1 inferred, allowzero) is framework-neutral; the reference keeps it.


@register("Identity")
class Identity(TorchOp):
    def forward(self, x):
        return x


@register("Flatten")
class Flatten(TorchOp):
    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("Flatten", attributes))

    def forward(self, x):
        axis = flatten_axis(self.axis, tuple(x.shape))
        return x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))


@register("Reshape")
class Reshape(TorchOp):
    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("Reshape", attributes))  # shape: the attribute of opsets 1-4

    def forward(self, data, shape=None):
        target = self.shape if shape is None else ints(shape)
        return data.reshape(reshape_target(tuple(data.shape), np.asarray(target, dtype=np.int64), self.allowzero))


@register("Transpose")
class Transpose(TorchOp):
    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("Transpose", attributes))

    def forward(self, x):
        perm = self.perm if self.perm is not None else list(range(x.dim() - 1, -1, -1))
        return x.permute(*perm)


@register("Concat")
class Concat(TorchOp):
    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("Concat", attributes))

    def forward(self, *inputs):
        inputs = [x for x in inputs if x is not None]
        return torch.cat(inputs, dim=normalize_axis("Concat", self.axis, inputs[0].dim()))


@register("Split")
class Split(TorchOp):
    """Pieces of the lengths in ``split`` (input from opset 13, attribute before), or ``num_outputs`` (or the
    node's output count) pieces of ceil(dim / n), the last shorter."""

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("Split", attributes))

    def forward(self, x, split=None):
        axis = normalize_axis("Split", self.axis, x.dim())
        dim = x.shape[axis]
        lengths = split_lengths("Split", dim, self.split if split is None else ints(split),
                                self.num_outputs or self.node_output_count)
        return tuple(torch.split(x, lengths, dim=axis))


@register("Slice")
class Slice(TorchOp):
    """``data[starts:ends:steps]`` along ``axes`` with ONNX's clamping (inputs from opset 10, attributes before).
    Negative steps flip the axis (torch slices take positive steps only)."""

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("Slice", attributes))

    def forward(self, x, starts=None, ends=None, axes=None, steps=None):
        starts, ends, axes, steps = slice_arguments(self, starts, ends, axes, steps, lambda value, what: ints(value))
        if starts is None or ends is None:
            raise ShapeError("Slice: starts and ends are required (inputs 1 and 2, or attributes before opset 10)")
        for axis, start, end, step in slice_bounds("Slice", tuple(x.shape), starts, ends, axes, steps):
            dim = x.shape[axis]
            if step > 0:
                x = x.narrow(axis, start, 0) if end <= start else x[(slice(None),) * axis + (slice(start, end, step),)]
            elif start <= end:
                x = x.narrow(axis, 0, 0)
            else:  # elements start, start+step, ... > end; on the flipped axis they start at dim-1-start
                x = x.flip(axis)[(slice(None),) * axis + (slice(dim - 1 - start, dim - 1 - end, -step),)]
        return x


@register("Pad")
class Pad(TorchOp):
    """Pad (negative pads crop) by ``pads = [begin..., end...]`` in mode constant, reflect, edge or wrap;
    opset 18's ``axes`` input restricts the pads to those axes; before opset 11 pads and value were attributes."""

    _TORCH_MODES = {"constant": "constant", "reflect": "reflect", "edge": "replicate", "wrap": "circular"}

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("Pad", attributes))

    def forward(self, x, pads=None, constant_value=None, axes=None):
        widths = pad_widths(x.dim(), self.pads if pads is None else ints(pads), ints(axes), distinct_axes=False)
        if self.mode == "constant":
            flat = [p for pair in reversed(widths) for p in pair]
            if constant_value is None or constant_value.numel() == 0:
                return F.pad(x, flat, mode="constant", value=self.value)
            # The value as a tensor selected over the padded region, so it gets its gradient (the reference's:
            # the sum of the output gradient over the padding). Selected, not multiplied by an indicator:
            # 0 * -inf would be NaN where the value is infinite (attention masks pad with -inf).
            region = F.pad(torch.zeros(x.shape, dtype=torch.uint8, device=x.device), flat, mode="constant", value=1)
            value = constant_value.reshape(()).to(x.dtype)
            return torch.where(region.bool(), value, F.pad(x, flat, mode="constant", value=0))
        # Crop first (negative pads), then pad the non-constant modes axis by axis (torch's reflect/replicate
        # pad only trailing spatial axes of batched inputs, so each axis is moved last in turn).
        for axis, (begin, end) in enumerate(widths):
            if begin < 0 or end < 0:
                b, e = max(-begin, 0), max(-end, 0)
                x = x.narrow(axis, b, x.shape[axis] - b - e)
        for axis, (begin, end) in enumerate(widths):
            begin, end = max(begin, 0), max(end, 0)
            if begin == 0 and end == 0:
                continue
            moved = x.movedim(axis, -1)
            shape = moved.shape
            padded = F.pad(moved.reshape(1, -1, shape[-1]), [begin, end], mode=self._TORCH_MODES[self.mode])
            x = padded.reshape(*shape[:-1], padded.shape[-1]).movedim(-1, axis)
        return x


@register("Squeeze")
class Squeeze(TorchOp):
    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("Squeeze", attributes))

    def forward(self, x, axes=None):
        axes = self.axes if axes is None else ints(axes)
        if axes is None:
            axes = [i for i, d in enumerate(x.shape) if d == 1]
        axes = [normalize_axis("Squeeze", a, x.dim()) for a in axes]
        if any(x.shape[a] != 1 for a in axes):
            raise ShapeError(f"Squeeze: axes {axes} of the input of shape {tuple(x.shape)} are not all of size 1")
        return x.reshape([d for i, d in enumerate(x.shape) if i not in axes])


@register("Unsqueeze")
class Unsqueeze(TorchOp):
    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("Unsqueeze", attributes))

    def forward(self, x, axes=None):
        axes = self.axes if axes is None else ints(axes)
        if axes is None:
            raise ShapeError("Unsqueeze: axes are required (input from opset 13, attribute before)")
        rank = x.dim() + len(axes)
        axes = sorted(normalize_axis("Unsqueeze", a, rank) for a in axes)
        shape = list(x.shape)
        for a in axes:
            shape.insert(a, 1)
        return x.reshape(shape)


@register("Expand")
class Expand(TorchOp):
    def forward(self, x, shape):
        target = torch.broadcast_shapes(tuple(x.shape), tuple(ints(shape)))
        return x.expand(target).clone()  # a tensor of its own, not a view with zero strides


@register("Tile")
class Tile(TorchOp):
    def forward(self, x, repeats, axis=None):
        repeats = ints(repeats)
        tile_shape(tuple(x.shape), repeats)  # the ShapeError for repeats that do not fit
        return x.repeat(*repeats) if repeats else x.clone()


@register("Shape")
class Shape(TorchOp):
    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("Shape", attributes))

    def forward(self, x):
        start, end = shape_range(self.start, self.end, x.dim())
        return torch.tensor(list(x.shape)[start:end], dtype=torch.int64, device=x.device)


@register("Size")
class Size(TorchOp):
    def forward(self, x):
        return torch.tensor(x.numel(), dtype=torch.int64, device=x.device)


@register("SpaceToDepth")
class SpaceToDepth(TorchOp):
    """Move ``blocksize`` x ``blocksize`` spatial blocks into channels: (N, C, H, W) -> (N, C*b*b, H/b, W/b);
    ``mode`` DCR (default) puts the block offset before the channel in the output channel index, CRD after."""

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("SpaceToDepth", attributes))

    def forward(self, x):
        plan = space_to_depth_plan(tuple(x.shape), self.blocksize, self.mode)
        return x.reshape(plan.split).permute(plan.perm).reshape(plan.shape)


@register("DepthToSpace")
class DepthToSpace(TorchOp):
    """Move channels into ``blocksize`` x ``blocksize`` spatial blocks: (N, C, H, W) -> (N, C/(b*b), H*b, W*b);
    ``mode`` DCR (default: depth, column, row) or CRD."""

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("DepthToSpace", attributes))

    def forward(self, x):
        plan = depth_to_space_plan(tuple(x.shape), self.blocksize, self.mode)
        return x.reshape(plan.split).permute(plan.perm).reshape(plan.shape)


@register("ReverseSequence")
class ReverseSequence(TorchOp):
    """Reverse the first ``sequence_lens[b]`` steps along ``time_axis`` of every batch entry ``b`` (one gather,
    so torch differentiates it; the reference has no gradient)."""

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("ReverseSequence", attributes))

    def forward(self, x, lengths):
        integer = not (lengths.is_floating_point() or lengths.dtype == torch.bool)
        batch, steps = reverse_sequence_lengths(tuple(x.shape), self.batch_axis, self.time_axis, tuple(lengths.shape),
                                                integer, lengths.dtype)
        lengths = lengths.to(torch.int64)
        if batch and bool(((lengths < 0) | (lengths > steps)).any()):
            raise ShapeError(f"ReverseSequence: sequence_lens must lie in [0, {steps}] (the time axis' length), got "
                             f"{lengths.tolist()}")
        time = torch.arange(steps, device=x.device)
        # source[b, t] = length_b - 1 - t for t < length_b, else t (time-major when time_axis is 0).
        source = torch.where(time < lengths[:, None], lengths[:, None] - 1 - time, time)
        if self.time_axis == 0:
            source = source.t()
        index = source.reshape(source.shape + (1,) * (x.dim() - 2)).expand(x.shape)
        return torch.gather(x, self.time_axis, index)
