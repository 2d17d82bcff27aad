"""Batch transforms for image data: augmentation (crop, flip, cutout) and normalization, vectorized over the batch.

A transform is a callable ``transform(images, rng) -> new_images`` on one batch of NCHW images (a 4-D
numpy array, usually float32). It never modifies ``images`` (the result is a new array) and takes all
its randomness from ``rng``, a :class:`numpy.random.Generator` (or an int seed), so a batch is
reproducible from the seed that made ``rng``. Samplers apply one to the input of every batch and seed
``rng`` from their seed, the epoch and the batch number: ``ShuffleSampler(train, 128, seed=0,
transform=...)`` (see :mod:`d5.training.sampler`).

The standard CIFAR-10 training augmentation (He et al. 2016, sec. 4.2), on images scaled to [0, 1]:

>>> import numpy as np
>>> augment = Compose([RandomCrop(32, padding=4), RandomHorizontalFlip(),
...                    Normalize((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616))])
>>> images = np.random.default_rng(0).random((8, 3, 32, 32), dtype=np.float32)
>>> out = augment(images, np.random.default_rng(1))
>>> out.shape, out.dtype, out is images
((8, 3, 32, 32), dtype('float32'), False)
>>> np.array_equal(out, augment(images, np.random.default_rng(1)))   # same seed, same batch
True

New transforms derive from :class:`Transform` and implement :meth:`Transform.apply`, which receives a
batch already checked to be a 4-D array and a Generator (None when the class sets ``random = False``).
"""
from __future__ import annotations

import abc
import numbers
from typing import Callable, Optional, Sequence, Tuple, Union

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from d5.errors import D5Error, InvalidHyperparameterError, ShapeError

RNG = Union[np.random.Generator, int, None]


def _positive_int(value, what: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise InvalidHyperparameterError(f"{what} must be an integer >= {minimum}; got {value!r}.")
    return int(value)


def _generator(rng: RNG, who: str) -> np.random.Generator:
    if isinstance(rng, np.random.Generator):
        return rng
    if isinstance(rng, numbers.Integral) and not isinstance(rng, bool) and rng >= 0:
        return np.random.default_rng(int(rng))
    raise D5Error(f"{who} draws random numbers: pass rng=numpy.random.default_rng(seed) (or a non-negative int "
                  f"seed) so the batch is reproducible; got {rng!r}.")


def _check_images(images, who: str) -> np.ndarray:
    if not isinstance(images, np.ndarray):
        raise ShapeError(f"{who} takes a numpy array of images (N, C, H, W); got {type(images).__name__}. "
                         "Convert it with numpy.asarray first.")
    if images.ndim != 4:
        raise ShapeError(f"{who} takes a batch of images in NCHW layout (4 dimensions); got shape {images.shape}. "
                         "For a single image pass image[None]; for NHWC data transpose with x.transpose(0, 3, 1, 2).")
    return images


class Transform(abc.ABC):
    """Base class: ``transform(images, rng) -> new array``. ``__call__`` checks the batch and the
    generator, then calls :meth:`apply`; subclasses implement only :meth:`apply`.

    >>> class Invert(Transform):
    ...     random = False
    ...     def apply(self, images, rng):
    ...         return 1.0 - images
    >>> Invert()(np.zeros((1, 1, 1, 2)), rng=None).tolist()
    [[[[1.0, 1.0]]]]
    """

    #: Whether :meth:`apply` draws from ``rng``. A transform that does not accepts ``rng=None``.
    random: bool = True

    def __call__(self, images: np.ndarray, rng: RNG = None) -> np.ndarray:
        who = repr(self)
        images = _check_images(images, who)
        return self.apply(images, _generator(rng, who) if self.random else None)

    @abc.abstractmethod
    def apply(self, images: np.ndarray, rng: Optional[np.random.Generator]) -> np.ndarray:
        """Return the transformed batch as a new array; never write into ``images``."""


class Compose(Transform):
    """Apply ``transforms`` in order, all drawing from the same generator.

    Elements are :class:`Transform` objects or plain callables ``(images, rng) -> images``.

    >>> flip_all = Compose([RandomHorizontalFlip(p=1.0), Normalize([0.0], [2.0])])
    >>> flip_all(np.array([[[[2.0, 4.0]]]]), rng=0).tolist()
    [[[[2.0, 1.0]]]]
    """

    def __init__(self, transforms: Sequence[Callable]):
        if isinstance(transforms, (Transform, str, bytes)) or not isinstance(transforms, Sequence):
            raise D5Error(f"Compose takes a list of transforms, e.g. Compose([RandomCrop(32, 4), "
                          f"RandomHorizontalFlip()]); got {transforms!r}.")
        for transform in transforms:
            if not callable(transform):
                raise D5Error(f"Compose: every element must be a transform (a callable (images, rng) -> images); "
                              f"got {transform!r}.")
        self.transforms = tuple(transforms)
        self.random = any(getattr(t, "random", True) for t in self.transforms)

    def apply(self, images, rng):
        for transform in self.transforms:
            images = transform(images, rng)
        return images

    def __repr__(self) -> str:
        return f"Compose([{', '.join(map(repr, self.transforms))}])"


class RandomCrop(Transform):
    """Zero-pad every image by ``padding`` pixels on each side, then cut a ``size`` window at a position
    drawn uniformly and independently for each image (torchvision's ``RandomCrop(size, padding)``).

    ``size`` is an int (square) or ``(height, width)``. The images must be at least ``size`` once padded.

    >>> image = np.arange(1.0, 10.0).reshape(1, 1, 3, 3)
    >>> RandomCrop(3, padding=1)(image, rng=0)[0, 0].tolist()   # shifted up one row, zeros below
    [[4.0, 5.0, 6.0], [7.0, 8.0, 9.0], [0.0, 0.0, 0.0]]
    """

    def __init__(self, size: Union[int, Tuple[int, int]], padding: int = 0):
        pair = (size, size) if not isinstance(size, (tuple, list)) else tuple(size)
        if len(pair) != 2:
            raise InvalidHyperparameterError(f"RandomCrop size must be an int or (height, width); got {size!r}.")
        self.size = tuple(_positive_int(v, "RandomCrop size") for v in pair)
        self.padding = _positive_int(padding, "RandomCrop padding", minimum=0)

    def apply(self, images, rng):
        n, channels, height, width = images.shape
        pad, (crop_h, crop_w) = self.padding, self.size
        if crop_h > height + 2 * pad or crop_w > width + 2 * pad:
            raise ShapeError(f"{self!r} cannot cut a {crop_h}x{crop_w} window from {height}x{width} images padded to "
                             f"{height + 2 * pad}x{width + 2 * pad}; lower size or raise padding.")
        padded = np.pad(images, ((0, 0), (0, 0), (pad, pad), (pad, pad))) if pad else images
        top = rng.integers(0, padded.shape[2] - crop_h + 1, size=n)
        left = rng.integers(0, padded.shape[3] - crop_w + 1, size=n)
        # A view of every window; one gather picks each image's own window (no Python loop over images).
        windows = sliding_window_view(padded, (crop_h, crop_w), axis=(2, 3))  # (N, C, rows, cols, h, w)
        return windows[np.arange(n), :, top, left]                            # (N, C, h, w), a new array

    def __repr__(self) -> str:
        return f"RandomCrop(size={self.size}, padding={self.padding})"


class RandomHorizontalFlip(Transform):
    """Mirror each image left-right with probability ``p``, independently per image.

    >>> RandomHorizontalFlip(p=1.0)(np.array([[[[1, 2, 3]]]]), rng=0).tolist()
    [[[[3, 2, 1]]]]
    """

    def __init__(self, p: float = 0.5):
        if isinstance(p, bool) or not isinstance(p, numbers.Real) or not 0.0 <= p <= 1.0:
            raise InvalidHyperparameterError(f"RandomHorizontalFlip p is a probability in [0, 1]; got {p!r}.")
        self.p = float(p)

    def apply(self, images, rng):
        flip = rng.random(images.shape[0]) < self.p
        out = images.copy()
        out[flip] = images[flip][..., ::-1]
        return out

    def __repr__(self) -> str:
        return f"RandomHorizontalFlip(p={self.p})"


class Normalize(Transform):
    """``(images - mean[c]) / std[c]`` for each channel ``c``; float32 stays float32.

    >>> Normalize([1.0, 0.0], [2.0, 0.5])(np.ones((1, 2, 1, 1), np.float32)).ravel().tolist()
    [0.0, 2.0]
    """

    random = False

    def __init__(self, mean: Sequence[float], std: Sequence[float]):
        self.mean = self._vector(mean, "mean")
        self.std = self._vector(std, "std")
        if self.mean.shape != self.std.shape:
            raise InvalidHyperparameterError(f"Normalize needs one mean and one std per channel; got "
                                             f"{self.mean.size} means and {self.std.size} stds.")
        if not (self.std > 0).all():
            raise InvalidHyperparameterError(f"Normalize std must be positive (it divides); got {self.std.tolist()}.")

    @staticmethod
    def _vector(values, what: str) -> np.ndarray:
        try:
            vector = np.asarray(values, dtype=np.float64).reshape(-1)
        except (TypeError, ValueError):
            raise InvalidHyperparameterError(f"Normalize {what} must be a list of numbers, one per channel; "
                                             f"got {values!r}.") from None
        if vector.size == 0 or not np.isfinite(vector).all():
            raise InvalidHyperparameterError(f"Normalize {what} must be finite numbers, one per channel; "
                                             f"got {values!r}.")
        return vector

    def apply(self, images, rng):
        if not np.issubdtype(images.dtype, np.floating):
            raise ShapeError(f"{self!r} takes floating-point images; got {images.dtype}. Scale them first, e.g. "
                             "images.astype(np.float32) / 255.")
        if images.shape[1] != self.mean.size:
            raise ShapeError(f"{self!r} has {self.mean.size} channel(s) but the images have {images.shape[1]} "
                             f"(shape {images.shape}); give one mean and std per channel.")
        shape = (1, -1, 1, 1)
        return (images - self.mean.astype(images.dtype).reshape(shape)) / self.std.astype(images.dtype).reshape(shape)

    def __repr__(self) -> str:
        return f"Normalize(mean={self.mean.tolist()}, std={self.std.tolist()})"


class Cutout(Transform):
    """Cutout (DeVries & Taylor 2017): set one ``size`` x ``size`` square of every image, all channels, to
    ``value``, at a centre drawn uniformly over the image independently per image; the square is clipped at
    the borders, so near an edge less of the image is covered (as in the paper's code).

    Rows ``cy - size // 2`` to ``cy - size // 2 + size - 1`` are covered (likewise columns): exactly the
    paper's ``[cy - size // 2, cy + size // 2)`` for the even sizes it uses (16 for CIFAR-10, 8 for
    CIFAR-100), and ``size`` rows for odd sizes too. Place it after :class:`Normalize` so that the default
    ``value=0`` is the dataset mean, as the paper does.

    >>> images = np.ones((1, 1, 4, 4), np.float32)
    >>> Cutout(2)(images, rng=0)[0, 0].astype(int).tolist()
    [[1, 1, 1, 1], [1, 1, 1, 1], [1, 0, 0, 1], [1, 0, 0, 1]]
    >>> Cutout(2)(images, rng=3)[0, 0].astype(int).tolist()   # centre in column 0: clipped at the border
    [[1, 1, 1, 1], [1, 1, 1, 1], [0, 1, 1, 1], [0, 1, 1, 1]]
    """

    def __init__(self, size: int, value: float = 0.0):
        self.size = _positive_int(size, "Cutout size")
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not np.isfinite(value):
            raise InvalidHyperparameterError(f"Cutout value must be a finite number (the fill); got {value!r}.")
        self.value = float(value)

    def apply(self, images, rng):
        n, _, height, width = images.shape
        top = rng.integers(0, height, size=n) - self.size // 2   # centre row - size // 2; may be < 0
        left = rng.integers(0, width, size=n) - self.size // 2
        rows, cols = np.arange(height), np.arange(width)
        in_rows = (rows >= top[:, None]) & (rows < top[:, None] + self.size)      # (N, H); clipping is implicit
        in_cols = (cols >= left[:, None]) & (cols < left[:, None] + self.size)    # (N, W)
        square = in_rows[:, None, :, None] & in_cols[:, None, None, :]            # (N, 1, H, W), every channel
        # One pass that writes a new array: the input is never touched.
        return np.where(square, np.asarray(self.value, dtype=images.dtype), images)

    def __repr__(self) -> str:
        return f"Cutout(size={self.size}, value={self.value})"


__all__ = ["Transform", "Compose", "RandomCrop", "RandomHorizontalFlip", "Normalize", "Cutout"]
