"""Samplers: turn a :class:`~d5.training.dataset.Dataset` into one epoch of batches at a time.

A sampler decides *which* examples form each batch (``epoch_indices``), reads each batch with a single
``dataset[index_array]`` call and runs the optional ``transforms`` on it. Subclasses change the order
by overriding :meth:`Sampler.epoch_indices` (and :attr:`Sampler.samples_per_epoch` when they return
a different number of indices, e.g. a distributed sampler that gives each rank its own shard).

Epoch rule (the same for every sampler): each ``iter(sampler)`` runs the epoch stored in
``sampler.epoch`` and then advances ``sampler.epoch`` by one, so iterating twice gives epochs 0 and 1.
``set_epoch(e)`` makes the next iteration run epoch ``e``. Batches depend only on (seed, epoch), never
on how many times the sampler was iterated before, so a resumed run calls ``set_epoch`` and gets the
same batches as the uninterrupted one.
"""
from __future__ import annotations

import abc
import math
import numbers
from typing import Callable, Dict, Iterator, Optional, Sequence

import numpy as np

from d5.errors import DatasetError
from d5.training.dataset import Dataset

Batch = Dict[str, np.ndarray]
Transform = Callable[[Batch], Batch]


def _check_non_negative_int(value, what: str, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise DatasetError(f"{what} must be an integer >= {minimum}; got {value!r}.")
    return int(value)


class Sampler(abc.ABC):  # an ABC so isinstance checks and registration work for foreign samplers
    """Iterate over one epoch of batches of ``dataset``, in the order given by :meth:`epoch_indices`.

    ``len(sampler)`` is the number of batches per epoch. With ``drop_last=True`` a final batch smaller
    than ``batch_size`` is skipped. ``transforms`` are callables ``batch_dict -> batch_dict`` applied in
    order to every batch; they receive freshly read arrays, so in-place edits never reach the dataset.
    The base class visits the examples in order; see :class:`ShuffleSampler` for random order.

    >>> import numpy as np
    >>> from d5.training.dataset import NumpyDataset
    >>> ds = NumpyDataset(np.arange(5.0), np.arange(5))
    >>> [b['label'].tolist() for b in Sampler(ds, batch_size=2)]
    [[0, 1], [2, 3], [4]]
    """

    def __init__(self, dataset: Dataset, batch_size: int, drop_last: bool = False,
                 transforms: Optional[Sequence[Transform]] = None):
        if not hasattr(dataset, "__getitem__") or not hasattr(dataset, "__len__"):
            raise DatasetError(
                f"A sampler needs a Dataset (with __len__ and __getitem__); got {type(dataset).__name__}.")
        self.dataset = dataset
        self.batch_size = _check_non_negative_int(batch_size, "batch_size", minimum=1)
        self.drop_last = bool(drop_last)
        self.transforms = tuple(transforms) if transforms is not None else ()
        for transform in self.transforms:
            if not callable(transform):
                raise DatasetError(
                    f"Every transform must be a callable taking and returning a batch dict; got "
                    f"{transform!r}.")
        if self.samples_per_epoch == 0:
            raise DatasetError(f"{type(self).__name__}: the dataset is empty, so an epoch would have no batches.")
        if len(self) == 0:
            raise DatasetError(
                f"{type(self).__name__}: batch_size={self.batch_size} with drop_last=True and only "
                f"{self.samples_per_epoch} examples per epoch drops every batch; lower batch_size or "
                f"set drop_last=False.")
        self.epoch = 0

    @property
    def samples_per_epoch(self) -> int:
        """How many indices :meth:`epoch_indices` returns; override together with it if that differs."""
        return len(self.dataset)

    def epoch_indices(self, epoch: int) -> np.ndarray:
        """The 1-D int64 array of dataset indices visited in ``epoch``, in order. Override to reorder."""
        return np.arange(len(self.dataset), dtype=np.int64)

    def set_epoch(self, epoch: int) -> None:
        """Make the next iteration run ``epoch`` (e.g. when resuming training)."""
        self.epoch = _check_non_negative_int(epoch, "epoch")

    def __len__(self) -> int:
        if self.drop_last:
            return self.samples_per_epoch // self.batch_size
        return math.ceil(self.samples_per_epoch / self.batch_size)

    def batch_indices(self, epoch: int) -> Iterator[np.ndarray]:
        """Yield the index array of each batch of ``epoch`` (without reading the dataset)."""
        indices = self.epoch_indices(epoch)
        stop = len(self) * self.batch_size
        for start in range(0, min(stop, len(indices)), self.batch_size):
            yield indices[start:start + self.batch_size]

    def __iter__(self) -> Iterator[Batch]:
        # Claim the epoch now, not on the first next(): iter() alone fixes which epoch this is.
        epoch = self.epoch
        self.epoch = epoch + 1
        return self._batches(epoch)

    def _batches(self, epoch: int) -> Iterator[Batch]:
        for index in self.batch_indices(epoch):
            batch = self.dataset[index]
            for transform in self.transforms:
                batch = transform(batch)
            yield batch

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({len(self.dataset)} examples, batch_size={self.batch_size}, "
                f"drop_last={self.drop_last}, epoch={self.epoch})")


class OrderedSampler(Sampler):
    """Batches in dataset order, the same every epoch (for evaluation and reproducible debugging).

    >>> import numpy as np
    >>> from d5.training.dataset import NumpyDataset
    >>> ds = NumpyDataset(np.zeros((5, 2)), np.arange(5))
    >>> sampler = OrderedSampler(ds, batch_size=2, drop_last=True)
    >>> len(sampler), [b['label'].tolist() for b in sampler]
    (2, [[0, 1], [2, 3]])
    """


class ShuffleSampler(Sampler):
    """Batches in a random order that is a fresh permutation every epoch and reproducible from the seed.

    The permutation of epoch ``e`` is ``numpy.random.default_rng((seed, e)).permutation(len(dataset))``:
    it depends only on ``seed`` and ``e`` (see the module docstring for how ``e`` advances).

    >>> import numpy as np
    >>> from d5.training.dataset import NumpyDataset
    >>> ds = NumpyDataset(np.zeros((6, 1)), np.arange(6))
    >>> sampler = ShuffleSampler(ds, batch_size=3, seed=1)
    >>> first = np.concatenate([b['label'] for b in sampler])   # epoch 0
    >>> second = np.concatenate([b['label'] for b in sampler])  # epoch 1
    >>> sorted(first.tolist()), first.tolist() == sampler.epoch_indices(0).tolist()
    ([0, 1, 2, 3, 4, 5], True)
    """

    def __init__(self, dataset: Dataset, batch_size: int, seed: int = 0, drop_last: bool = False,
                 transforms: Optional[Sequence[Transform]] = None):
        # numpy's SeedSequence only takes non-negative integers; check here for a readable error.
        self.seed = _check_non_negative_int(seed, "seed")
        super().__init__(dataset, batch_size, drop_last=drop_last, transforms=transforms)

    def epoch_indices(self, epoch: int) -> np.ndarray:
        rng = np.random.default_rng((self.seed, _check_non_negative_int(epoch, "epoch")))
        return rng.permutation(len(self.dataset)).astype(np.int64, copy=False)

    def __repr__(self) -> str:
        return super().__repr__()[:-1] + f", seed={self.seed})"


__all__ = ["Sampler", "OrderedSampler", "ShuffleSampler"]
