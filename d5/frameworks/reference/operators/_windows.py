"""Sliding-window kernels in NumPy for any number of spatial axes, used by the reference framework for 3-D
windows (5-D inputs N, C, D, H, W); 1-D and 2-D windows keep running in d5._C's C++ kernels.

Every kernel pads the input once and then loops over the kernel taps (27 for a 3x3x3 kernel), touching each
tap of every window at once through one strided slice of the padded array: the Python loop is over taps,
never over output positions, so the work is a handful of vectorized NumPy calls per tap. Backward passes
scatter-add per tap into a padded gradient: within one tap the slice's elements are distinct, so a plain
``+=`` on the view is exact.

``im2col``/``col2im`` take the arguments, and give the layouts, of d5._C's 2-D ones (rows channel-major, one
row per channel and tap), so Conv and ConvTranspose run the same GEMM code for every rank.

>>> x = np.arange(8.0).reshape(1, 1, 2, 2, 2)
>>> window = resolve_window("MaxPool", x.shape[2:], (2, 2, 2), strides=None, dilations=None, pads=None)
>>> y, indices = max_pool_forward(x, window)
>>> y.ravel().tolist(), indices.ravel().tolist()
([7.0], [7])
>>> avg_pool_forward(x, window, count_include_pad=False).ravel().tolist()
[3.5]
"""
from __future__ import annotations

import dataclasses
import itertools
import math
from types import SimpleNamespace
from typing import Iterable, Iterator, Sequence

import numpy as np

from d5.errors import ShapeError, UnsupportedOperatorError
from d5.frameworks.reference.kernels import Window2D, load_native, resolve_window_2d, window_geometry


#: Spatial ranks that run through this module (1-D and 2-D run in d5._C).
NUMPY_SPATIAL_RANKS = (3,)


@dataclasses.dataclass(frozen=True)
class WindowND:
    """A sliding window resolved for the NumPy kernels: the counterpart of :class:`Window2D` for 3-D.

    ``pads`` (never negative) and ``crops`` (the input elements no window reaches, see :func:`crop_input`)
    are in ONNX order (all begins, then all ends), as Window2D's ``(top, left, bottom, right)``.
    """

    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    pads: tuple[int, ...]
    out: tuple[int, ...]
    spatial_rank: int
    crops: tuple[int, ...] = ()

    @property
    def pads_begin(self) -> tuple[int, ...]:
        return self.pads[:self.spatial_rank]

    @property
    def pads_end(self) -> tuple[int, ...]:
        return self.pads[self.spatial_rank:]


def resolve_window(op_name: str, spatial: Sequence[int], kernel_shape: Sequence[int], *,
                   strides: Sequence[int] | None, dilations: Sequence[int] | None, pads: Sequence[int] | None,
                   auto_pad: str = "NOTSET", ceil_mode: bool = False,
                   clamp_same_pads: bool = False) -> Window2D | WindowND:
    """ONNX window attributes (``None`` = ONNX default) -> a :class:`Window2D` for 1-D/2-D inputs (run by
    d5._C) or a :class:`WindowND` for 3-D inputs (run by this module). ``clamp_same_pads`` (Conv): see
    :func:`d5.ops.onnx_semantics.window_geometry`. The operator runs its kernels on
    ``crop_input(x, window.crops)``, never on ``x`` itself.

    >>> resolve_window("Conv", (4, 4, 4), (3, 3, 3), strides=(2, 1, 1), dilations=None, pads=(1,) * 6).out
    (2, 4, 4)
    """
    rank = len(spatial)
    if rank not in NUMPY_SPATIAL_RANKS:
        if rank not in (1, 2):
            raise UnsupportedOperatorError(
                f"{op_name}: the reference framework implements 1-D, 2-D and 3-D windows (3-D to 5-D inputs), got "
                f"an input with {rank} spatial axes; run this model on another framework (e.g. PyTorch)")
        return resolve_window_2d(op_name, spatial, kernel_shape, strides=strides, dilations=dilations, pads=pads,
                                 auto_pad=auto_pad, ceil_mode=ceil_mode, clamp_same_pads=clamp_same_pads)
    strides = tuple(int(s) for s in strides) if strides is not None else (1,) * rank
    dilations = tuple(int(d) for d in dilations) if dilations is not None else (1,) * rank
    pads = tuple(int(p) for p in pads) if pads is not None else (0,) * (2 * rank)
    kernel = tuple(int(k) for k in kernel_shape)
    geometry = window_geometry(spatial, kernel, strides=strides, dilations=dilations, pads=pads,
                               auto_pad=auto_pad, ceil_mode=ceil_mode, clamp_same_pads=clamp_same_pads,
                               op_name=op_name)
    return WindowND(kernel, strides, dilations, geometry.applied_pads, geometry.out, rank, geometry.crops)


# -- negative SAME pads: crop the input once, before any kernel ---------------------------------------------------
# A negative pad (auto_pad SAME_* with a stride larger than the dilated kernel) means the windows skip the
# input's first -pad elements, or never reach its last -pad ones. Kernels (d5._C rejects negative pads) run on
# the cropped input with the non-negative pads; gradients and MaxPool's indices are mapped back to the input.
# ``crops`` counts, in ONNX order (all begins, then all ends), the elements cropped from the input's trailing
# spatial axes (Window2D.crops, WindowND.crops, WindowGeometry.crops).

def _crop_slices(crops: Sequence[int], shape: Sequence[int]) -> tuple[slice, ...]:
    rank = len(crops) // 2
    leading = (slice(None),) * (len(shape) - rank)
    return leading + tuple(slice(begin, size - end) for begin, end, size in
                           zip(crops[:rank], crops[rank:], shape[len(shape) - rank:]))


def crop_input(x: np.ndarray, crops: Sequence[int]) -> np.ndarray:
    """``x`` without the elements no window reaches: ``x`` itself when nothing is cropped, else a
    C-contiguous copy (the kernels need one).

    >>> crop_input(np.arange(5.0).reshape(1, 1, 5), (1, 0)).tolist()
    [[[1.0, 2.0, 3.0, 4.0]]]
    """
    if not any(crops):
        return x
    return np.ascontiguousarray(x[_crop_slices(crops, x.shape)])


def uncrop_gradient(dx: np.ndarray, crops: Sequence[int]) -> np.ndarray:
    """The adjoint of :func:`crop_input`: the gradient of the cropped input padded back with zeros (the
    cropped elements do not affect the output).

    >>> uncrop_gradient(np.ones((1, 1, 4)), (1, 0)).tolist()
    [[[0.0, 1.0, 1.0, 1.0, 1.0]]]
    """
    if not any(crops):
        return dx
    rank = len(crops) // 2
    return np.pad(dx, [(0, 0)] * (dx.ndim - rank) + list(zip(crops[:rank], crops[rank:])))


def uncrop_indices(indices: np.ndarray, cropped_shape: Sequence[int], crops: Sequence[int]) -> np.ndarray:
    """Row-major flat indices into the cropped input -> the same elements' flat indices into the input;
    -1 (a window that sees only padding) stays -1.

    >>> uncrop_indices(np.array([0, 3, -1]), (1, 1, 4), (1, 0)).tolist()
    [1, 4, -1]
    """
    if not any(crops):
        return indices
    rank = len(crops) // 2
    unchanged = (0,) * (len(cropped_shape) - rank)  # the N and C axes
    begins, ends = unchanged + tuple(crops[:rank]), unchanged + tuple(crops[rank:])
    full_shape = tuple(size + begin + end for size, begin, end in zip(cropped_shape, begins, ends))
    inside = indices >= 0
    coords = np.unravel_index(np.where(inside, indices, 0), tuple(cropped_shape))
    moved = np.ravel_multi_index(tuple(c + begin for c, begin in zip(coords, begins)), full_shape)
    return np.where(inside, moved, -1).astype(indices.dtype, copy=False)


def window_kernels(spatial_rank: int):
    """The provider of ``im2col``/``col2im`` for this many spatial axes (as the window object counts them):
    d5._C for 1-D and 2-D, this module's NumPy versions (same arguments and layouts) otherwise."""
    return load_native() if spatial_rank in (1, 2) else NUMPY_KERNELS


# -- padding and taps ------------------------------------------------------------------------------------------

def _extent(kernel: int, dilation: int) -> int:
    return (kernel - 1) * dilation + 1


def _padded_shape(spatial: Sequence[int], kernel: Sequence[int], strides: Sequence[int],
                  pads_begin: Sequence[int], dilations: Sequence[int], out: Sequence[int]) -> tuple[int, ...]:
    # Large enough for the array plus its leading pad and for every tap of every window: a ceil_mode
    # overhang, or a ConvTranspose output_shape, may reach past the declared trailing pad.
    return tuple(max(size + begin, (o - 1) * s + _extent(k, d))
                 for size, k, s, begin, d, o in zip(spatial, kernel, strides, pads_begin, dilations, out))


def _interior(spatial: Sequence[int], pads_begin: Sequence[int]) -> tuple[slice, ...]:
    """The slices of the padded array that hold the unpadded one (N and C axes included)."""
    return (slice(None), slice(None), *(slice(b, b + size) for b, size in zip(pads_begin, spatial)))


def _pad(x: np.ndarray, padded_spatial: tuple[int, ...], pads_begin: Sequence[int], fill) -> np.ndarray:
    padded = np.full(x.shape[:2] + padded_spatial, fill, dtype=x.dtype)
    padded[_interior(x.shape[2:], pads_begin)] = x
    return padded


def _tap_slices(kernel: Sequence[int], strides: Sequence[int], dilations: Sequence[int],
                out: Sequence[int]) -> Iterator[tuple[slice, ...]]:
    """For each kernel tap (row-major order), the slices of the padded array that select this tap of every
    window: output position o reads padded coordinate ``o * stride + tap * dilation`` on each axis."""
    for tap in itertools.product(*(range(k) for k in kernel)):
        yield (slice(None), slice(None), *(slice(t * d, t * d + (o - 1) * s + 1, s)
                                           for t, d, s, o in zip(tap, dilations, strides, out)))


def _gather_taps(x: np.ndarray, kernel, strides, pads_begin, dilations, out, fill) -> Iterator[np.ndarray]:
    """Views (N, C, *out) of the padded ``x``, one per kernel tap."""
    padded = _pad(x, _padded_shape(x.shape[2:], kernel, strides, pads_begin, dilations, out), pads_begin, fill)
    return (padded[taps] for taps in _tap_slices(kernel, strides, dilations, out))


def _scatter_taps(values: Iterable[np.ndarray], shape: Sequence[int], dtype: np.dtype, kernel, strides,
                  pads_begin, dilations, out) -> np.ndarray:
    """The adjoint of :func:`_gather_taps`: sums each tap's (N, C, *out) values into an array of ``shape``;
    what lands in the padding is dropped."""
    padded_spatial = _padded_shape(shape[2:], kernel, strides, pads_begin, dilations, out)
    padded = np.zeros(tuple(shape[:2]) + padded_spatial, dtype=dtype)
    for taps, value in zip(_tap_slices(kernel, strides, dilations, out), values):
        padded[taps] += value
    return np.ascontiguousarray(padded[_interior(shape[2:], pads_begin)])


# -- im2col / col2im (Conv, ConvTranspose) -----------------------------------------------------------------------

def im2col(x: np.ndarray, kernel, strides, pads_begin, dilations, out) -> np.ndarray:
    """Columns (N, C * taps, prod(out)) of ``x`` (N, C, *spatial); row ``c * taps + tap``, as d5._C.im2col.

    >>> im2col(np.ones((1, 2, 3, 3, 3)), (2, 2, 2), (1, 1, 1), (0, 0, 0), (1, 1, 1), (2, 2, 2)).shape
    (1, 16, 8)
    """
    n, c = x.shape[:2]
    taps = math.prod(kernel)
    columns = np.empty((n, c, taps, *out), dtype=x.dtype)
    for index, view in enumerate(_gather_taps(x, kernel, strides, pads_begin, dilations, out, 0)):
        columns[:, :, index] = view
    return columns.reshape(n, c * taps, math.prod(out))


def col2im(columns: np.ndarray, image_shape: Sequence[int], kernel, strides, pads_begin, dilations,
           out) -> np.ndarray:
    """The adjoint of :func:`im2col`: sums columns (N, C * taps, prod(out)) back into an image of
    ``image_shape`` (N, C, *spatial), as d5._C.col2im."""
    n, c = image_shape[:2]
    taps = math.prod(kernel)
    if columns.shape != (n, c * taps, math.prod(out)):
        raise ShapeError(f"col2im: columns of shape {columns.shape} do not match image {tuple(image_shape)}, kernel "
                         f"{tuple(kernel)} and output {tuple(out)}; expected {(n, c * taps, math.prod(out))}")
    per_tap = columns.reshape(n, c, taps, *out)
    return _scatter_taps((per_tap[:, :, index] for index in range(taps)), image_shape, columns.dtype, kernel,
                         strides, pads_begin, dilations, out)


NUMPY_KERNELS = SimpleNamespace(im2col=im2col, col2im=col2im)


# -- pooling -----------------------------------------------------------------------------------------------------

def max_pool_forward(x: np.ndarray, window: WindowND) -> tuple[np.ndarray, np.ndarray]:
    """Max pooling with the C++ kernel's semantics: ``(Y, row-major flat indices into X)``. The first maximum
    wins, NaN propagates (the first NaN wins), and a window that sees only padding gives -inf and index -1."""
    args = (window.kernel, window.strides, window.pads_begin, window.dilations, window.out)
    best = np.full(x.shape[:2] + window.out, -np.inf, dtype=x.dtype)
    best_index = np.full(best.shape, -1, dtype=np.int64)
    positions = np.arange(x.size, dtype=np.int64).reshape(x.shape)
    check_nan = bool(np.isnan(x).any())  # the NaN test costs as much as the comparison; skip it when possible
    for value, index in zip(_gather_taps(x, *args, -np.inf), _gather_taps(positions, *args, -1)):
        # '>' keeps the first maximum; the first tap inside X is taken even when it is -inf (as d5._C).
        take = (value > best) | ((best_index < 0) & (index >= 0))
        if check_nan:
            take |= np.isnan(value) & ~np.isnan(best)
        np.copyto(best, value, where=take)
        np.copyto(best_index, index, where=take)
    return best, best_index


def max_pool_backward(dy: np.ndarray, indices: np.ndarray, x_shape: Sequence[int]) -> np.ndarray:
    """Routes each output gradient to the input its window's maximum came from (row-major ``indices``)."""
    inside = indices >= 0
    dx = np.bincount(indices[inside], weights=dy[inside], minlength=math.prod(x_shape))
    return dx.astype(dy.dtype, copy=False).reshape(x_shape)


def _axis_counts(size: int, kernel: int, stride: int, begin: int, end: int, dilation: int, out: int,
                 count_include_pad: bool) -> np.ndarray:
    # Taps of each output's window on one axis that count toward the average: those inside X, plus, with
    # count_include_pad, those in the declared pads (never those of a ceil_mode overhang, as PyTorch).
    low, high = (-begin, size + end) if count_include_pad else (0, size)
    coords = np.arange(out)[:, None] * stride - begin + np.arange(kernel)[None, :] * dilation
    return ((coords >= low) & (coords < high)).sum(axis=1)


def _window_counts(spatial: Sequence[int], window: WindowND, count_include_pad: bool) -> np.ndarray:
    """The divisor of every output position, shape ``window.out``: the product of the per-axis counts."""
    counts = np.ones((), dtype=np.int64)
    for axis, size in enumerate(spatial):
        per_axis = _axis_counts(size, window.kernel[axis], window.strides[axis], window.pads_begin[axis],
                                window.pads_end[axis], window.dilations[axis], window.out[axis], count_include_pad)
        counts = np.multiply.outer(counts, per_axis)
    return counts


def _divide_by_counts(values: np.ndarray, spatial: Sequence[int], window: WindowND,
                      count_include_pad: bool) -> np.ndarray:
    """``values`` (N, C, *out) divided by each window's count; an empty window (possible only with a
    ceil_mode overhang) gives 0, not NaN. A division, not a reciprocal product, to round as d5._C does."""
    counts = _window_counts(spatial, window, count_include_pad)
    return np.divide(values, counts.astype(values.dtype), out=np.zeros_like(values),
                     where=np.broadcast_to(counts > 0, values.shape))


def avg_pool_forward(x: np.ndarray, window: WindowND, count_include_pad: bool) -> np.ndarray:
    """Average pooling (ONNX ``count_include_pad`` semantics, as the C++ kernel)."""
    total = np.zeros(x.shape[:2] + window.out, dtype=x.dtype)
    for view in _gather_taps(x, window.kernel, window.strides, window.pads_begin, window.dilations, window.out, 0):
        total += view
    return _divide_by_counts(total, x.shape[2:], window, count_include_pad)


def avg_pool_backward(dy: np.ndarray, x_shape: Sequence[int], window: WindowND, count_include_pad: bool) -> np.ndarray:
    """The adjoint of :func:`avg_pool_forward`: each window spreads its share of dY over its taps."""
    share = _divide_by_counts(dy, x_shape[2:], window, count_include_pad)
    return _scatter_taps(itertools.repeat(share, math.prod(window.kernel)), x_shape, dy.dtype, window.kernel,
                         window.strides, window.pads_begin, window.dilations, window.out)


__all__ = ["NUMPY_KERNELS", "NUMPY_SPATIAL_RANKS", "WindowND", "avg_pool_backward", "avg_pool_forward", "col2im",
           "crop_input", "im2col", "max_pool_backward", "max_pool_forward", "resolve_window", "uncrop_gradient",
           "uncrop_indices", "window_kernels"]
