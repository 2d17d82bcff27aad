"""Reference image operators (ONNX semantics, newest opset; older attribute forms accepted).

Resize (nearest / linear / cubic, every coordinate_transformation_mode, scales or sizes, antialias,
keep_aspect_ratio_policy, axes), GridSample, AffineGrid, LpPool, SpaceToDepth, DepthToSpace, CenterCropPad,
Col2Im.

Resize is separable: each resized axis is a matrix ``W`` (output length x input length) applied along that
axis, which also makes its gradient ``W.T``. Resize, AffineGrid, SpaceToDepth and DepthToSpace have gradients; the
others set ``differentiable = False`` and their ``backward`` raises.

>>> import numpy as np
>>> from d5.frameworks.reference.operators import create_operator
>>> x = np.array([[[[1., 2.], [3., 4.]]]])
>>> create_operator("Resize", {"mode": "nearest"}).forward([x, None, np.array([1., 1., 2., 2.])])[0, 0]
array([[1., 1., 2., 2.],
       [1., 1., 2., 2.],
       [3., 3., 4., 4.],
       [3., 3., 4., 4.]])
"""
from __future__ import annotations

import itertools
from typing import Any, Sequence

import numpy as np

from d5.errors import ShapeError
from d5.frameworks.reference.operators.checks import require_rank
from d5.frameworks.reference.operators.registry import NonDifferentiableOp, ReferenceOp, register
from d5.frameworks.reference.operators.windows_nd import crop_input
from d5.ops.onnx_semantics import check_window_attributes, window_geometry


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _optional_array(inputs: Sequence[Any], index: int) -> np.ndarray | None:
    """Input ``index`` as an array, or None when absent or empty (ONNX's way of skipping an optional input)."""
    value = inputs[index] if len(inputs) > index else None
    if value is None:
        return None
    value = np.asarray(value)
    return None if value.size == 0 else value


def _cast_like(values: np.ndarray, like: np.ndarray) -> np.ndarray:
    if np.issubdtype(like.dtype, np.integer):
        info = np.iinfo(like.dtype)
        return np.clip(np.rint(values), info.min, info.max).astype(like.dtype)
    return values.astype(like.dtype)


def _apply_along(matrix: np.ndarray, x: np.ndarray, axis: int) -> np.ndarray:
    """``matrix @ x`` along ``axis`` of ``x`` (the axis keeps its place)."""
    return np.moveaxis(np.tensordot(matrix, x, axes=([1], [axis])), 0, axis)


# ------------------------------------------------------------------------------------------------- Resize

def _cubic_kernel(distance: np.ndarray, a: float) -> np.ndarray:
    """Keys' cubic convolution kernel with parameter ``a`` at ``|distance|``."""
    d = np.abs(distance)
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.where(d <= 1, near, np.where(d < 2, far, 0.0))


@register("Resize")
class Resize(ReferenceOp):
    """Resize ``X`` by ``scales`` or to ``sizes`` (inputs: X, roi, scales, sizes; opset 10: X, scales).

    >>> Resize(mode="linear").forward([np.array([[0., 4.]]), None, np.array([1., 2.])])
    array([[0., 1., 3., 4.]])
    """

    def __init__(self, mode: str = "nearest", coordinate_transformation_mode: str = "half_pixel",
                 nearest_mode: str = "round_prefer_floor", cubic_coeff_a: float = -0.75, exclude_outside: int = 0,
                 extrapolation_value: float = 0.0, antialias: int = 0, axes: Sequence[int] | None = None,
                 keep_aspect_ratio_policy: str = "stretch") -> None:
        super().__init__()
        self.mode = _text(mode)
        if self.mode not in ("nearest", "linear", "cubic"):
            raise ShapeError(f"Resize: unknown mode {self.mode!r}; use nearest, linear or cubic")
        self.coordinate_mode = _text(coordinate_transformation_mode)
        self.nearest_mode = _text(nearest_mode)
        self.cubic_a = float(cubic_coeff_a)
        self.exclude_outside = bool(exclude_outside)
        self.extrapolation_value = float(extrapolation_value)
        self.antialias = bool(antialias) and self.mode != "nearest"
        self.axes = None if axes is None else [int(a) for a in axes]
        self.policy = _text(keep_aspect_ratio_policy)

    # -- geometry
    def _plan(self, inputs) -> list[tuple[int, float, int, tuple[float, float] | None]]:
        """(axis, scale, output length, roi) for every axis that changes."""
        x = require_rank("Resize", inputs[0], "X", at_least=1)
        ndim = x.ndim
        if self.axes is not None and not all(-ndim <= a < ndim for a in self.axes):
            raise ShapeError(f"Resize: axes {self.axes} out of range for X of rank {ndim}; use axes in [{-ndim}, {ndim})")
        if len(inputs) == 2:  # opset 10: (X, scales), asymmetric coordinates
            roi, scales, sizes = None, _optional_array(inputs, 1), None
        else:
            roi, scales, sizes = (_optional_array(inputs, i) for i in (1, 2, 3))
        axes = list(range(ndim)) if self.axes is None else [a % ndim for a in self.axes]
        if scales is None and sizes is None:
            raise ShapeError("Resize: give either scales or sizes")
        if sizes is not None:
            sizes = [int(s) for s in sizes.reshape(-1)]
            if len(sizes) != len(axes):
                raise ShapeError(f"Resize: {len(sizes)} sizes for {len(axes)} axes")
            if min(sizes, default=0) < 0:
                raise ShapeError(f"Resize: sizes must not be negative, got {sizes}")
            scale_of = {a: s / x.shape[a] for a, s in zip(axes, sizes)}
            if self.policy != "stretch":
                pick = min if self.policy == "not_larger" else max
                common = pick(scale_of.values())
                scale_of = dict.fromkeys(axes, common)
                length_of = {a: int(common * x.shape[a] + 0.5) for a in axes}
            else:
                length_of = dict(zip(axes, sizes))
        else:
            scales = [float(s) for s in scales.reshape(-1)]
            if len(scales) != len(axes):
                raise ShapeError(f"Resize: {len(scales)} scales for {len(axes)} axes")
            scale_of = dict(zip(axes, scales))
            length_of = {a: int(s * x.shape[a]) for a, s in scale_of.items()}
        roi_of: dict[int, tuple[float, float]] = {}
        if roi is not None and self.coordinate_mode == "tf_crop_and_resize":
            roi = roi.reshape(-1).astype(np.float64)
            count = len(axes)
            if roi.size != 2 * count:
                raise ShapeError(f"Resize: roi must hold 2 values per resized axis (starts, then ends): {2 * count} "
                                 f"for {count} axes, got {roi.size}")
            roi_of = {a: (roi[i], roi[count + i]) for i, a in enumerate(axes)}
        plan = []
        for axis in axes:
            scale, length, window = scale_of[axis], length_of[axis], roi_of.get(axis)
            identity = np.isclose(scale, 1.0) and length == x.shape[axis] and (
                window is None or (np.isclose(window[0], 0.0) and np.isclose(window[1], 1.0)))
            if not identity:
                plan.append((axis, scale, length, window))
        return plan

    def _source_coordinates(self, out_len: int, in_len: int, scale: float, window, opset10: bool):
        y = np.arange(out_len, dtype=np.float64)
        mode = "asymmetric" if opset10 else self.coordinate_mode
        # ONNX's reference computes the "resized length" as scale * input length, a float; matching it
        # matters for align_corners / half_pixel_symmetric with scales that do not divide evenly.
        resized = scale * in_len
        outside = None
        if mode == "align_corners":
            x = np.zeros(out_len) if resized == 1 else y * (in_len - 1) / (resized - 1)
        elif mode == "asymmetric":
            x = y / scale
        elif mode == "pytorch_half_pixel":
            x = np.full(out_len, -0.5) if resized == 1 else (y + 0.5) / scale - 0.5
        elif mode == "half_pixel":
            x = (y + 0.5) / scale - 0.5
        elif mode == "half_pixel_symmetric":
            offset = in_len / 2 * (1 - out_len / resized)
            x = offset + (y + 0.5) / scale - 0.5
        elif mode == "tf_crop_and_resize":
            start, end = window if window is not None else (0.0, 1.0)
            if resized == 1:
                x = np.full(out_len, (end - start) * (in_len - 1) / 2)
            else:
                x = y * (end - start) * (in_len - 1) / (resized - 1)
            x = x + start * (in_len - 1)
            outside = (x < 0) | (x > in_len - 1)
        else:
            raise ShapeError(f"Resize: unknown coordinate_transformation_mode {mode!r}")
        return x, outside

    def _taps(self, ratio: np.ndarray, exact: np.ndarray, scale: float) -> tuple[np.ndarray, int]:
        """Weights (out_len x n) of the n input points around each source coordinate, left to right."""
        if self.mode == "nearest":
            mode = self.nearest_mode
            if mode == "round_prefer_floor":
                right = ratio > 0.5
            elif mode == "round_prefer_ceil":
                right = ratio >= 0.5
            elif mode == "floor":
                right = np.zeros_like(ratio, dtype=bool)
            elif mode == "ceil":
                right = np.ones_like(ratio, dtype=bool)
            else:
                raise ShapeError(f"Resize: unknown nearest_mode {mode!r}")
            right = right | exact  # an exact source coordinate is its own nearest point (the right tap)
            return np.stack([~right, right], axis=1).astype(np.float64), 2
        # Antialiasing stretches the kernel by 1/scale when downsampling (scale < 1).
        stretch = min(scale, 1.0) if self.antialias else 1.0
        support = 1 if self.mode == "linear" else 2
        first = int(np.floor(-support / stretch) + 1) if self.antialias else 1 - support
        offsets = np.arange(first, 2 - first)  # positions of the taps relative to floor(x)
        distance = (offsets[None, :] - ratio[:, None]) * stretch
        if self.mode == "linear":
            weights = np.clip(1 - np.abs(distance), 0, 1)
        else:
            weights = _cubic_kernel(distance, self.cubic_a)
        if self.antialias:
            weights = weights / weights.sum(axis=1, keepdims=True)
        return weights, len(offsets)

    def _matrix(self, in_len: int, out_len: int, scale: float, window, opset10: bool):
        """The interpolation matrix of one axis and the mask of output positions set to extrapolation_value."""
        x, outside = self._source_coordinates(out_len, in_len, scale, window, opset10)
        base = np.floor(x)
        exact = x == base
        # At an exact integer the reference takes the window to its left with ratio 1 (same point, same value).
        ratio = np.where(exact, 1.0, x - base)
        base = np.where(exact, base - 1, base).astype(np.int64)
        weights, taps = self._taps(ratio, exact, scale)
        index = base[:, None] + np.arange(taps)[None, :] - (taps // 2 - 1)
        if self.exclude_outside:
            weights = np.where((index < 0) | (index >= in_len), 0.0, weights)
            total = weights.sum(axis=1, keepdims=True)
            weights = weights / np.where(total == 0, 1.0, total)
        matrix = np.zeros((out_len, in_len))
        rows = np.repeat(np.arange(out_len), taps)
        # Indices past the edges read the edge value (edge padding), so their weight lands on the edge.
        np.add.at(matrix, (rows, np.clip(index, 0, in_len - 1).reshape(-1)), weights.reshape(-1))
        if outside is not None:
            matrix[outside] = 0.0
        return matrix, outside

    def forward(self, inputs):
        x = inputs[0]
        opset10 = len(inputs) == 2
        result = x.astype(np.float64)
        for axis, scale, length, window in self._plan(inputs):
            matrix, outside = self._matrix(result.shape[axis], length, scale, window, opset10)
            result = _apply_along(matrix, result, axis)
            if outside is not None and outside.any():
                shape = [1] * result.ndim
                shape[axis] = length
                result = np.where(outside.reshape(shape), self.extrapolation_value, result)
        return _cast_like(result, x)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        x = fwd_inputs[0]
        opset10 = len(fwd_inputs) == 2
        lengths, matrices = list(x.shape), []
        for axis, scale, length, window in self._plan(fwd_inputs):
            matrices.append((axis, self._matrix(lengths[axis], length, scale, window, opset10)[0]))
            lengths[axis] = length
        grad = grads[0].astype(np.float64)
        for axis, matrix in reversed(matrices):
            grad = _apply_along(matrix.T, grad, axis)
        return (grad.astype(grads[0].dtype),) + (None,) * (len(fwd_inputs) - 1)


# --------------------------------------------------------------------------------------------- GridSample

def _reflect(x: np.ndarray, low: float, high: float) -> np.ndarray:
    """Fold coordinates back into ``[low, high]`` by mirroring at the borders (repeatedly)."""
    span = high - low
    if span <= 0:
        return np.full_like(x, low)
    below, above = low - x, x - high
    folds_below, folds_above = np.floor(below / span), np.floor(above / span)
    rest_below, rest_above = below - folds_below * span, above - folds_above * span
    from_below = np.where(folds_below % 2 == 0, low + rest_below, high - rest_below)
    from_above = np.where(folds_above % 2 == 0, high - rest_above, low + rest_above)
    return np.where(x < low, from_below, np.where(x > high, from_above, x))


@register("GridSample")
class GridSample(NonDifferentiableOp):
    """Sample ``X`` (N, C, *spatial) at the normalized coordinates of ``grid`` (N, *out, ndim), last axis
    in (x, y[, z]) order, with ``mode`` nearest / linear / cubic (opset 16: bilinear / bicubic)."""

    def __init__(self, align_corners: int = 0, mode: str = "linear", padding_mode: str = "zeros") -> None:
        super().__init__()
        self.align_corners = bool(align_corners)
        self.mode = {"bilinear": "linear", "bicubic": "cubic"}.get(_text(mode), _text(mode))
        self.padding_mode = _text(padding_mode)
        if self.mode not in ("nearest", "linear", "cubic"):
            raise ShapeError(f"GridSample: unknown mode {mode!r}; use nearest, linear or cubic")
        if self.padding_mode not in ("zeros", "border", "reflection"):
            raise ShapeError(f"GridSample: unknown padding_mode {padding_mode!r}; use zeros, border or reflection")

    def _taps(self, coordinate: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """(index, weight) pairs of the input points each coordinate reads."""
        if self.mode == "nearest":
            return [(coordinate.astype(np.int64), np.ones_like(coordinate))]
        base = np.floor(coordinate)
        t = coordinate - base
        base = base.astype(np.int64)
        if self.mode == "linear":
            return [(base, 1 - t), (base + 1, t)]
        return [(base + k, _cubic_kernel(t - k, -0.75)) for k in (-1, 0, 1, 2)]

    def forward(self, inputs):
        x = require_rank("GridSample", inputs[0], "X (N, C, *spatial)", at_least=3)
        grid = require_rank("GridSample", inputs[1], "grid (N, *output, spatial rank)", rank=x.ndim).astype(np.float64)
        spatial = x.shape[2:]
        if grid.shape[-1] != len(spatial) or grid.shape[0] != x.shape[0]:
            raise ShapeError(f"GridSample: grid of shape {grid.shape} does not match X of shape {x.shape}; "
                             f"expected (N, *output, {len(spatial)})")
        batch = np.arange(x.shape[0]).reshape((-1,) + (1,) * (grid.ndim - 2))
        channels_last = np.moveaxis(x, 1, -1)
        per_axis = []
        for axis, size in enumerate(spatial):
            g = grid[..., len(spatial) - 1 - axis]  # grid's last axis is (x, y, z): reversed spatial order
            if self.align_corners:
                coordinate, low, high = (g + 1) / 2 * (size - 1), 0.0, size - 1.0
            else:
                coordinate, low, high = ((g + 1) * size - 1) / 2, -0.5, size - 0.5
            if self.mode == "nearest":
                coordinate = np.rint(coordinate)
            if self.padding_mode == "border":
                coordinate = np.where((coordinate < low) | (coordinate > high),
                                      np.clip(coordinate, 0, size - 1), coordinate)
            elif self.padding_mode == "reflection":
                coordinate = _reflect(coordinate, low, high)
            taps = []
            for index, weight in self._taps(coordinate):
                valid = (index >= 0) & (index < size)
                if self.padding_mode == "reflection":
                    index = np.trunc(_reflect(index.astype(np.float64), low, high)).astype(np.int64)
                    valid = np.ones_like(valid)
                taps.append((np.clip(index, 0, size - 1), weight * valid))
            per_axis.append(taps)
        out = np.zeros(grid.shape[:-1] + (x.shape[1],))
        for combination in itertools.product(*per_axis):
            weight = np.prod([w for _, w in combination], axis=0)
            out += weight[..., None] * channels_last[(batch,) + tuple(i for i, _ in combination)]
        return _cast_like(np.moveaxis(out, -1, 1), x)


# -------------------------------------------------------------------------------------------- AffineGrid

def _normalized_positions(size: int, align_corners: bool) -> np.ndarray:
    """The normalized coordinates of ``size`` pixels along one axis: their centres in (-1, 1), or evenly from
    -1 to 1 with ``align_corners`` (a single pixel sits at 0 then, as in PyTorch)."""
    if align_corners:
        return np.linspace(-1.0, 1.0, size) if size > 1 else np.zeros(size)
    return (2.0 * np.arange(size) + 1.0) / size - 1.0


@register("AffineGrid")
class AffineGrid(ReferenceOp):
    """The GridSample grid of the affine maps ``theta``: (N, 2, 3) -> (N, H, W, 2) for ``size`` (N, C, H, W),
    (N, 3, 4) -> (N, D, H, W, 3) for (N, C, D, H, W). Each output point's normalized coordinates
    ``b = (x, y[, z], 1)`` map to ``theta[n] @ b``, so the gradient of theta is the sum of ``grad (x) b``;
    ``size`` (int64) has none.

    >>> import numpy as np
    >>> theta = np.array([[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]])
    >>> AffineGrid(align_corners=1).forward([theta, np.array([1, 1, 2, 2])])[0].tolist()
    [[[-1.0, -1.0], [1.0, -1.0]], [[-1.0, 1.0], [1.0, 1.0]]]
    """

    def __init__(self, align_corners: int = 0) -> None:
        super().__init__()
        self.align_corners = bool(align_corners)

    def _base(self, inputs) -> tuple[np.ndarray, np.ndarray, tuple[int, ...]]:
        """theta, the (points, ndim + 1) homogeneous base coordinates in row-major order, and the output size."""
        if len(inputs) != 2 or inputs[0] is None or inputs[1] is None:
            raise ShapeError(f"AffineGrid: expected the inputs theta and size, got {len(inputs)} inputs")
        theta, size = np.asarray(inputs[0]), [int(v) for v in np.asarray(inputs[1]).reshape(-1)]
        ndim = len(size) - 2
        if ndim not in (2, 3) or theta.shape != (size[0], ndim, ndim + 1) or min(size) < 0:
            raise ShapeError(f"AffineGrid: size must be (N, C, H, W) or (N, C, D, H, W) with theta of shape (N, 2, 3) "
                             f"or (N, 3, 4) respectively; got size {size} and theta of shape {theta.shape}")
        spatial = tuple(size[2:])
        mesh = np.meshgrid(*(_normalized_positions(n, self.align_corners) for n in spatial), indexing="ij")
        # The last coordinate axis is (x, y[, z]): the spatial axes in reverse order.
        columns = [axis.reshape(-1) for axis in reversed(mesh)] + [np.ones(mesh[0].size)]
        return theta, np.stack(columns, axis=1), spatial

    def forward(self, inputs):
        theta, base, spatial = self._base(inputs)
        grid = np.einsum("nij,pj->npi", theta, base)
        return grid.reshape((theta.shape[0],) + spatial + (theta.shape[1],)).astype(theta.dtype, copy=False)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        theta, base, _ = self._base(fwd_inputs)
        g = np.asarray(grads[0]).reshape(theta.shape[0], base.shape[0], theta.shape[1])
        return np.einsum("npi,pj->nij", g, base).astype(theta.dtype, copy=False), None


# -------------------------------------------------------------------------------------- block rearrangement

@register("SpaceToDepth")
class SpaceToDepth(ReferenceOp):
    """Move ``blocksize`` x ``blocksize`` spatial blocks into channels: (N, C, H, W) -> (N, C*b*b, H/b, W/b).

    ``mode`` DCR (default) puts the block offset before the channel in the output channel index, CRD after.
    """

    def __init__(self, blocksize: int | None = None, mode: str = "DCR") -> None:
        super().__init__()
        if blocksize is None:
            raise ShapeError("SpaceToDepth: the blocksize attribute is required")
        self.blocksize, self.mode = int(blocksize), _text(mode)
        if self.mode not in ("DCR", "CRD"):
            raise ShapeError(f"SpaceToDepth: unknown mode {self.mode!r}; use DCR or CRD")

    def _perm(self) -> tuple:
        # Axes of the (n, c, h/b, b, w/b, b) view in output order.
        return (0, 3, 5, 1, 2, 4) if self.mode == "DCR" else (0, 1, 3, 5, 2, 4)

    def forward(self, inputs):
        x = require_rank("SpaceToDepth", inputs[0], "input", rank=4)
        n, c, h, w = x.shape
        b = self.blocksize
        if h % b or w % b:
            raise ShapeError(f"SpaceToDepth: spatial size {h}x{w} is not divisible by blocksize {b}")
        blocks = x.reshape(n, c, h // b, b, w // b, b).transpose(self._perm())
        return np.ascontiguousarray(blocks).reshape(n, c * b * b, h // b, w // b)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        n, c, h, w = fwd_inputs[0].shape
        b = self.blocksize
        split = (n, c, h // b, b, w // b, b)
        perm = self._perm()
        g = grads[0].reshape(tuple(split[p] for p in perm)).transpose(np.argsort(perm))
        return np.ascontiguousarray(g).reshape(n, c, h, w)


@register("DepthToSpace")
class DepthToSpace(ReferenceOp):
    """Move channels into ``blocksize`` x ``blocksize`` spatial blocks (``mode`` DCR or CRD)."""

    def __init__(self, blocksize: int | None = None, mode: str = "DCR") -> None:
        super().__init__()
        if blocksize is None:
            raise ShapeError("DepthToSpace: the blocksize attribute is required")
        self.blocksize, self.mode = int(blocksize), _text(mode)
        if self.mode not in ("DCR", "CRD"):
            raise ShapeError(f"DepthToSpace: unknown mode {self.mode!r}; use DCR or CRD")

    def _layout(self, shape) -> tuple[tuple, tuple]:
        n, c, h, w = shape
        b = self.blocksize
        if c % (b * b):
            raise ShapeError(f"DepthToSpace: {c} channels are not divisible by blocksize^2 = {b * b}")
        if self.mode == "DCR":
            return (n, b, b, c // (b * b), h, w), (0, 3, 4, 1, 5, 2)
        return (n, c // (b * b), b, b, h, w), (0, 1, 4, 2, 5, 3)

    def forward(self, inputs):
        x = require_rank("DepthToSpace", inputs[0], "input", rank=4)
        n, c, h, w = x.shape
        b = self.blocksize
        split, perm = self._layout(x.shape)
        return np.ascontiguousarray(x.reshape(split).transpose(perm)).reshape(n, c // (b * b), h * b, w * b)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        shape = fwd_inputs[0].shape
        split, perm = self._layout(shape)
        permuted_shape = tuple(split[p] for p in perm)
        g = grads[0].reshape(permuted_shape).transpose(np.argsort(perm))
        return np.ascontiguousarray(g).reshape(shape)


# ----------------------------------------------------------------------------------------- LpPool, Col2Im

@register("LpPool")
class LpPool(NonDifferentiableOp):
    """``(sum |x|^p)^(1/p)`` over sliding windows (N-D; zero padding, auto_pad, dilations, ceil_mode)."""

    def __init__(self, kernel_shape: Sequence[int] | None = None, p: float = 2, auto_pad: str = "NOTSET",
                 pads: Sequence[int] | None = None, strides: Sequence[int] | None = None,
                 dilations: Sequence[int] | None = None, ceil_mode: int = 0) -> None:
        super().__init__()
        if kernel_shape is None:
            raise ShapeError("LpPool: the kernel_shape attribute is required")
        self.kernel = [int(k) for k in kernel_shape]
        self.p, self.auto_pad, self.ceil_mode = float(p), _text(auto_pad), bool(ceil_mode)
        self.pads = None if pads is None else [int(v) for v in pads]
        self.strides = None if strides is None else [int(v) for v in strides]
        self.dilations = None if dilations is None else [int(v) for v in dilations]
        check_window_attributes("LpPool", auto_pad=self.auto_pad, kernel_shape=self.kernel, strides=self.strides,
                                dilations=self.dilations, pads=self.pads)

    def forward(self, inputs):
        dims = len(self.kernel)
        x = require_rank("LpPool", inputs[0], f"X (N, C and {dims} spatial axes, from kernel_shape)", rank=dims + 2)
        strides = self.strides or [1] * dims
        dilations = self.dilations or [1] * dims
        geometry = window_geometry(x.shape[2:], self.kernel, strides=strides, dilations=dilations,
                                   pads=self.pads or [0] * (2 * dims), auto_pad=self.auto_pad,
                                   ceil_mode=self.ceil_mode, op_name="LpPool")
        # Negative SAME_* pads: the windows never reach the cropped elements.
        powered = np.abs(crop_input(x, geometry.crops).astype(np.float64)) ** self.p
        begin = geometry.applied_pads[:dims]
        # Windows that run past the padded input (ceil_mode) read zeros, which add nothing to the sum.
        end = [max(pad, (n - 1) * s + (k - 1) * d + 1 - size - b) for pad, n, s, k, d, size, b in
               zip(geometry.applied_pads[dims:], geometry.out, strides, self.kernel, dilations, powered.shape[2:],
                   begin)]
        padded = np.pad(powered, [(0, 0), (0, 0)] + list(zip(begin, end)))
        total = np.zeros(x.shape[:2] + geometry.out)
        for offset in itertools.product(*[range(k) for k in self.kernel]):
            index = tuple(slice(o * d, o * d + (n - 1) * s + 1, s)
                          for o, d, n, s in zip(offset, dilations, geometry.out, strides))
            total += padded[(slice(None), slice(None)) + index]
        return (total ** (1.0 / self.p)).astype(x.dtype)


@register("Col2Im")
class Col2Im(NonDifferentiableOp):
    """Sum the columns of ``input`` (N, C*prod(block), L) back into an image of ``image_shape`` (the inverse
    layout of im2col, overlapping blocks added)."""

    def __init__(self, dilations: Sequence[int] | None = None, pads: Sequence[int] | None = None,
                 strides: Sequence[int] | None = None) -> None:
        super().__init__()
        self.dilations = None if dilations is None else [int(v) for v in dilations]
        self.pads = None if pads is None else [int(v) for v in pads]
        self.strides = None if strides is None else [int(v) for v in strides]
        check_window_attributes("Col2Im", strides=self.strides, dilations=self.dilations, pads=self.pads)

    def forward(self, inputs):
        columns = require_rank("Col2Im", inputs[0], "input (N, C * prod(block_shape), L)", rank=3)
        image = [int(v) for v in require_rank("Col2Im", inputs[1], "image_shape", rank=1)]
        block = [int(v) for v in require_rank("Col2Im", inputs[2], "block_shape", rank=1)]
        dims = len(image)
        if len(block) != dims or min(image + block, default=1) < 1:
            raise ShapeError(f"Col2Im: image_shape {image} and block_shape {block} must have the same length and "
                             "positive entries")
        dilations = self.dilations or [1] * dims
        pads = self.pads or [0] * (2 * dims)
        strides = self.strides or [1] * dims
        n, rows, count = columns.shape
        kernel_size = int(np.prod(block))
        if rows % kernel_size:
            raise ShapeError(f"Col2Im: input dimension 1 ({rows}) is not a multiple of prod(block_shape) = {kernel_size}")
        padded_shape = [image[i] + pads[i] + pads[i + dims] for i in range(dims)]
        blocks = [(padded_shape[i] - ((block[i] - 1) * dilations[i] + 1)) // strides[i] + 1 for i in range(dims)]
        if int(np.prod(blocks)) != count:
            raise ShapeError(f"Col2Im: input has {count} blocks but image_shape {image}, block_shape {block}, pads, "
                             f"strides and dilations give {int(np.prod(blocks))}")
        channels = rows // kernel_size
        cols = columns.reshape([n, channels] + block + blocks)
        out = np.zeros([n, channels] + padded_shape, dtype=columns.dtype)
        for offset in itertools.product(*[range(k) for k in block]):
            index = tuple(slice(o * d, o * d + (b - 1) * s + 1, s)
                          for o, d, b, s in zip(offset, dilations, blocks, strides))
            out[(slice(None), slice(None)) + index] += cols[(slice(None), slice(None)) + offset]
        crop = tuple(slice(pads[i], pads[i] + image[i]) for i in range(dims))
        return np.ascontiguousarray(out[(slice(None), slice(None)) + crop])


@register("CenterCropPad")
class CenterCropPad(NonDifferentiableOp):
    """Center-crop or zero-pad ``input_data`` to ``shape`` along ``axes`` (default: all)."""

    def __init__(self, axes: Sequence[int] | None = None) -> None:
        super().__init__()
        self.axes = None if axes is None else [int(a) for a in axes]

    def forward(self, inputs):
        x = inputs[0]
        x = require_rank("CenterCropPad", x, "input_data", at_least=1)
        target = [int(v) for v in np.asarray(inputs[1]).reshape(-1)]
        axes = list(range(x.ndim)) if self.axes is None else [a % x.ndim for a in self.axes]
        if len(target) != len(axes):
            raise ShapeError(f"CenterCropPad: shape {target} has {len(target)} entries for {len(axes)} axes")
        if min(target, default=0) < 0:
            raise ShapeError(f"CenterCropPad: the target shape must not have negative sizes, got {target}")
        out_shape = list(x.shape)
        source = [slice(None)] * x.ndim
        destination = [slice(None)] * x.ndim
        for axis, size in zip(axes, target):
            have = x.shape[axis]
            out_shape[axis] = size
            if size <= have:
                start = (have - size) // 2
                source[axis] = slice(start, start + size)
            else:
                start = (size - have) // 2
                destination[axis] = slice(start, start + have)
        out = np.zeros(out_shape, dtype=x.dtype)
        out[tuple(destination)] = x[tuple(source)]
        return out
