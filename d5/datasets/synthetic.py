"""A deterministic synthetic classification dataset of any input shape, class count, size and dtype.

How it is made, and why a model can learn it: each class ``c`` has a prototype ``mu_c`` of the input shape,
drawn once from N(0, 1) per element; an example of class ``c`` is ``mu_c + noise * e`` with ``e`` standard
normal noise. The Bayes-optimal rule is the nearest prototype (a linear classifier), and it confuses two
classes with probability ``Phi(-|mu_a - mu_b| / (2 * noise))``, where ``|mu_a - mu_b|`` is about ``sqrt(2 * D)``
for ``D`` input elements: about ``Phi(-sqrt(D / 2) / noise)``. For ``noise=1`` that is below 1% from ``D = 11``
and negligible for image shapes (a linear model reaches ~100% accuracy); ``noise`` well above ``sqrt(D / 2)``
makes the classes overlap.
Labels are balanced (``num_examples / num_classes`` each, the remainder to the first classes) in a
random order.

Determinism: the prototypes come from ``numpy.random.default_rng((seed, 0))`` and the train and test
examples from ``default_rng((seed, 1))`` and ``default_rng((seed, 2))``, so the same arguments give the
same arrays on every machine, and train and test share the prototypes (the test split is learnable from
the train split).

``dtype``: a floating dtype keeps the values; an integer dtype quantizes them as image pixels are: unsigned
types map ``x`` to ``round(mid + x * mid / 4)`` clipped to the type's range (``mid = (max + 1) / 2``, 128 for
uint8: the +-4 standard deviations of a prototype fit), signed types to ``round(x * (max + 1) / 8)``.
"""
from __future__ import annotations

import numbers
from typing import Sequence, Tuple

import numpy as np

from d5.errors import DatasetError
from d5.training.dataset import NumpyDataset

_PROTOTYPE_STREAM, _SPLIT_STREAMS = 0, {"train": 1, "test": 2}


def _positive_int(value, what: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise DatasetError(f"synthetic dataset: {what} must be an integer >= {minimum}; got {value!r}.")
    return int(value)


def _check_shape(shape) -> Tuple[int, ...]:
    if isinstance(shape, numbers.Integral) and not isinstance(shape, bool):
        shape = (shape,)
    if not isinstance(shape, (tuple, list)) or not shape:
        raise DatasetError(f"synthetic dataset: shape is the shape of one example, a tuple such as (3, 32, 32); "
                           f"got {shape!r}.")
    return tuple(_positive_int(size, "every dimension of shape") for size in shape)


def _check_dtype(dtype) -> np.dtype:
    try:
        dtype = np.dtype(dtype)
    except TypeError:
        raise DatasetError(f"synthetic dataset: dtype {dtype!r} is not a numpy dtype; use e.g. 'float32' or "
                           "'uint8'.") from None
    if dtype.kind not in "fiu":
        raise DatasetError(f"synthetic dataset: dtype must be a floating or integer type (float32, float16, uint8, "
                           f"int8, ...); got {dtype}.")
    return dtype


def _quantize(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    if dtype.kind == "f":
        return values.astype(dtype, copy=False)
    info = np.iinfo(dtype)
    if dtype.kind == "u":
        middle = (float(info.max) + 1.0) / 2.0
        scaled = middle + values.astype(np.float64) * (middle / 4.0)
    else:
        scaled = values.astype(np.float64) * ((float(info.max) + 1.0) / 8.0)
    return np.clip(np.rint(scaled), info.min, info.max).astype(dtype)


def synthetic_arrays(num_examples: int, shape: Sequence[int] = (3, 32, 32), num_classes: int = 10,
                     dtype="float32", noise: float = 1.0, seed: int = 0,
                     split: str = "train") -> Tuple[np.ndarray, np.ndarray]:
    """``(data, labels)`` of one split: ``data`` of shape ``(num_examples, *shape)`` and ``dtype``, ``labels``
    int64 in ``[0, num_classes)``. See the module docstring for how they are made.

    >>> x, y = synthetic_arrays(6, shape=(2,), num_classes=3, seed=1)
    >>> x.shape, x.dtype, sorted(y.tolist())
    ((6, 2), dtype('float32'), [0, 0, 1, 1, 2, 2])
    >>> np.array_equal(x, synthetic_arrays(6, shape=(2,), num_classes=3, seed=1)[0])
    True
    """
    num_examples = _positive_int(num_examples, "num_examples")
    shape = _check_shape(shape)
    num_classes = _positive_int(num_classes, "num_classes")
    dtype = _check_dtype(dtype)
    seed = _positive_int(seed, "seed", minimum=0)
    if isinstance(noise, bool) or not isinstance(noise, numbers.Real) or not 0 <= noise < float("inf"):
        raise DatasetError(f"synthetic dataset: noise is a standard deviation, a finite number >= 0; got {noise!r}.")
    if split not in _SPLIT_STREAMS:
        raise DatasetError(f"synthetic dataset: split must be one of {sorted(_SPLIT_STREAMS)}; got {split!r}.")
    prototypes = np.random.default_rng((seed, _PROTOTYPE_STREAM)).standard_normal((num_classes,) + shape,
                                                                                   dtype=np.float32)
    rng = np.random.default_rng((seed, _SPLIT_STREAMS[split]))
    labels = rng.permutation(np.arange(num_examples, dtype=np.int64) % num_classes)
    data = rng.standard_normal((num_examples,) + shape, dtype=np.float32)  # the noise, then the means in place
    if noise != 1.0:
        data *= np.float32(noise)
    data += prototypes[labels]
    return _quantize(data, dtype), labels


def load_synthetic(shape: Sequence[int] = (3, 32, 32), num_classes: int = 10, train_size: int = 1000,
                   test_size: int = 200, dtype="float32", noise: float = 1.0,
                   seed: int = 0) -> Tuple[NumpyDataset, NumpyDataset]:
    """A learnable synthetic classification task as (train, test) :class:`NumpyDataset` s (read-only arrays).

    >>> train, test = load_synthetic(shape=(1, 8, 8), num_classes=4, train_size=100, test_size=20, seed=3)
    >>> len(train), len(test), train.data.shape[1:], int(train.labels.max())
    (100, 20, (1, 8, 8), 3)
    """
    datasets = []
    for split, size in (("train", train_size), ("test", test_size)):
        data, labels = synthetic_arrays(size, shape, num_classes, dtype, noise, seed, split)
        data.flags.writeable = False
        labels.flags.writeable = False
        datasets.append(NumpyDataset(data, labels))
    return datasets[0], datasets[1]


__all__ = ["load_synthetic", "synthetic_arrays"]
