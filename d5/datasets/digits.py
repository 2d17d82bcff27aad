"""scikit-learn's bundled 8x8 handwritten digits (UCI optical digits, 1,797 images, 10 classes): real data that
needs no download, for offline recipes and tests.

Images come out as float32 ``(N, 1, 8, 8)`` scaled to [0, 1] (the pixels are counts 0..16, divided by 16) and,
with ``normalize=True``, standardized with the *training* split's mean and standard deviation (also applied
to the test split), as the MNIST loaders do. Labels are int64 digits 0-9.

The split is stratified and seeded: for each class, ``round(test_fraction * class size)`` of its images,
chosen by ``numpy.random.default_rng(seed)``, form the test split (20% by default: 359 test / 1,438 train
images), the rest the train split; both keep the original order. The same seed gives the same split.
"""
from __future__ import annotations

import functools
import numbers
from typing import Tuple

import numpy as np

from d5.errors import DatasetError
from d5.training.dataset import NumpyDataset

#: The digits' pixel values are counts of set pixels in 4x4 blocks: 0..16.
MAX_PIXEL = 16.0


@functools.lru_cache(maxsize=1)
def _digits_arrays() -> Tuple[np.ndarray, np.ndarray]:
    try:
        from sklearn.datasets import load_digits as sklearn_load_digits
    except ImportError:
        raise DatasetError("The digits dataset is scikit-learn's: install it with "
                           "`pip install scikit-learn`.") from None
    bunch = sklearn_load_digits()
    images = np.asarray(bunch.images, dtype=np.float64)
    labels = np.asarray(bunch.target, dtype=np.int64)
    images.flags.writeable = False
    labels.flags.writeable = False
    return images, labels


def stratified_split(labels: np.ndarray, test_fraction: float, seed: int) -> Tuple[np.ndarray, np.ndarray]:
    """(train indices, test indices), both sorted: per class, ``round(test_fraction * count)`` random members
    go to the test split.

    >>> train, test = stratified_split(np.array([0, 0, 0, 0, 1, 1]), 0.5, seed=0)
    >>> len(train), len(test), sorted(np.array([0, 0, 0, 0, 1, 1])[test].tolist())
    (3, 3, [0, 0, 1])
    """
    labels = np.asarray(labels)
    rng = np.random.default_rng(seed)
    shuffled = rng.permutation(labels.size)
    by_class = shuffled[np.argsort(labels[shuffled], kind="stable")]  # grouped by class, random within it
    classes, counts = np.unique(labels, return_counts=True)
    rank = np.arange(labels.size) - np.repeat(np.cumsum(counts) - counts, counts)
    in_test = rank < np.repeat(np.rint(counts * test_fraction).astype(np.int64), counts)
    return np.sort(by_class[~in_test]), np.sort(by_class[in_test])


def load_digits(test_fraction: float = 0.2, seed: int = 0, normalize: bool = True) -> Tuple[NumpyDataset, NumpyDataset]:
    """The 8x8 digits as (train, test) :class:`NumpyDataset` s (see the module docstring for split and scaling).

    >>> train, test = load_digits()
    >>> len(train), len(test), train.data.shape[1:], train.data.dtype, test.labels.dtype
    (1438, 359, (1, 8, 8), dtype('float32'), dtype('int64'))
    """
    if isinstance(test_fraction, bool) or not isinstance(test_fraction, numbers.Real) or not 0 < test_fraction < 1:
        raise DatasetError(f"load_digits test_fraction must be a number strictly between 0 and 1 (0.2 puts 20% of "
                           f"each class in the test split); got {test_fraction!r}.")
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise DatasetError(f"load_digits seed must be an integer >= 0; got {seed!r}.")
    images, labels = _digits_arrays()
    train_index, test_index = stratified_split(labels, float(test_fraction), int(seed))
    if train_index.size == 0 or test_index.size == 0:
        raise DatasetError(f"load_digits test_fraction={test_fraction} leaves a split empty; choose a fraction "
                           "further from 0 and 1.")
    scaled = images / MAX_PIXEL
    mean, std = (float(scaled[train_index].mean()), float(scaled[train_index].std())) if normalize else (0.0, 1.0)
    datasets = []
    for index in (train_index, test_index):
        data = ((scaled[index] - mean) / std).astype(np.float32)[:, np.newaxis]   # (N, 1, 8, 8), NCHW
        target = labels[index]
        data.flags.writeable = False
        target.flags.writeable = False
        datasets.append(NumpyDataset(data, target))
    return datasets[0], datasets[1]


__all__ = ["load_digits", "stratified_split"]
