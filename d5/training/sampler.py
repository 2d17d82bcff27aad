"""Samplers: turn a :class:`~d5.training.dataset.Dataset` into one epoch of batches at a time.

A sampler decides *which* examples form each batch (``epoch_indices``), reads each batch with a single
``dataset[index_array]`` call, runs the optional random ``transform`` (e.g. data augmentation from
:mod:`d5.training.transforms`) on the batch's input array and then the optional ``transforms`` on the
batch dict. Subclasses change the order by overriding :meth:`Sampler.epoch_indices` (and
:attr:`Sampler.samples_per_epoch` when they return a different number of indices, e.g. a distributed
sampler that gives each rank its own shard).

Epoch rule (the same for every sampler): each ``iter(sampler)`` runs the epoch stored in
``sampler.epoch`` and then advances ``sampler.epoch`` by one, so iterating twice gives epochs 0 and 1.
``set_epoch(e)`` makes the next iteration run epoch ``e``. Batches depend only on (seed, epoch), never
on how many times the sampler was iterated before, so a resumed run calls ``set_epoch`` and gets the
same batches as the uninterrupted one. The same holds for ``transform``: batch ``b`` of epoch ``e`` is
transformed with the generator ``numpy.random.default_rng((seed, e, TRANSFORM_STREAM, b))`` (see
:meth:`Sampler.transform_rng`), independent of the shuffling stream and of the batches before it.
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
#: A random transform of the input array: ``(array, numpy Generator) -> new array``.
InputTransform = Callable[[np.ndarray, np.random.Generator], np.ndarray]
#: Mixed into the transform generator's seed so its stream never coincides with ShuffleSampler's
#: permutation stream ``default_rng((seed, epoch))``. ("augm" in ASCII.)
TRANSFORM_STREAM = 0x6175676D


def _check_non_negative_int(value, what: str, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise DatasetError(f"{what} must be an integer >= {minimum}; got {value!r}.")
    return int(value)


class Sampler(abc.ABC):  # an ABC so isinstance checks and registration work for foreign samplers
    """Iterate over one epoch of batches of ``dataset``, in the order given by :meth:`epoch_indices`.

    ``len(sampler)`` is the number of batches per epoch. With ``drop_last=True`` a final batch smaller
    than ``batch_size`` is skipped. The base class visits the examples in order; see
    :class:`ShuffleSampler` for random order.

    ``transform`` (keyword) is a callable ``(array, rng) -> new_array`` applied to the input array
    (``batch[dataset.input_node]``) of every batch, the label untouched, with ``rng`` a numpy Generator
    seeded from (``seed``, epoch, batch number) -- e.g. ``d5.Compose([d5.RandomCrop(32, 4),
    d5.RandomHorizontalFlip()])``. ``transforms`` are callables ``batch_dict -> batch_dict`` applied in
    order afterwards; both receive freshly read arrays, so in-place edits never reach the dataset.

    >>> import numpy as np
    >>> from d5.training.dataset import NumpyDataset
    >>> ds = NumpyDataset(np.arange(5.0), np.arange(5))
    >>> [b['label'].tolist() for b in Sampler(ds, batch_size=2)]
    [[0, 1], [2, 3], [4]]
    >>> noisy = Sampler(ds, batch_size=5, seed=3, transform=lambda x, rng: x + rng.integers(0, 2, x.shape))
    >>> first = next(iter(noisy))['input']
    >>> noisy.set_epoch(0)   # the same (seed, epoch): the same random transform; the dataset is untouched
    >>> next(iter(noisy))['input'].tolist() == first.tolist(), ds.data.tolist()
    (True, [0.0, 1.0, 2.0, 3.0, 4.0])
    """

    def __init__(self, dataset: Dataset, batch_size: int, drop_last: bool = False,
                 transforms: Optional[Sequence[Transform]] = None, *, transform: Optional[InputTransform] = None,
                 seed: int = 0):
        if not hasattr(dataset, "__getitem__") or not hasattr(dataset, "__len__"):
            raise DatasetError(
                f"A sampler needs a Dataset (with __len__ and __getitem__); got {type(dataset).__name__}.")
        self.dataset = dataset
        self.batch_size = _check_non_negative_int(batch_size, "batch_size", minimum=1)
        self.drop_last = bool(drop_last)
        # numpy's SeedSequence only takes non-negative integers; check here for a readable error.
        self.seed = _check_non_negative_int(seed, "seed")
        if transform is not None and not callable(transform):
            hint = " (wrap a list in d5.Compose([...]))" if isinstance(transform, (list, tuple)) else ""
            raise DatasetError(f"transform must be a callable (input_array, rng) -> new_array such as "
                               f"d5.RandomCrop(32, padding=4){hint}; got {transform!r}.")
        self.transform = transform
        self.transforms = tuple(transforms) if transforms is not None else ()
        for dict_transform in self.transforms:
            if not callable(dict_transform):
                raise DatasetError(
                    f"Every transform must be a callable taking and returning a batch dict; got "
                    f"{dict_transform!r}.")
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

    def transform_rng(self, epoch: int, batch: int) -> np.random.Generator:
        """The generator ``transform`` draws from for batch number ``batch`` of ``epoch``.

        One generator per batch, so a batch's augmentation depends only on (seed, epoch, batch) and a run
        resumed mid-epoch sees the same. Override to mix in more (a distributed sampler: its rank).
        """
        return np.random.default_rng((self.seed, epoch, TRANSFORM_STREAM, batch))

    def _batches(self, epoch: int) -> Iterator[Batch]:
        transform = self.transform
        input_node = getattr(self.dataset, "input_node", "input") if transform is not None else None
        for number, index in enumerate(self.batch_indices(epoch)):
            batch = self.dataset[index]
            if transform is not None:
                batch = self._transform_input(batch, input_node, transform, self.transform_rng(epoch, number))
            for dict_transform in self.transforms:
                batch = dict_transform(batch)
            yield batch

    def _transform_input(self, batch: Batch, input_node: str, transform: InputTransform,
                         rng: np.random.Generator) -> Batch:
        if input_node not in batch:
            raise DatasetError(f"{type(self).__name__}: the batch has no input {input_node!r} (it has "
                               f"{sorted(batch)}) for transform {transform!r}; set the dataset's input_node.")
        array = transform(batch[input_node], rng)
        if not isinstance(array, np.ndarray):
            raise DatasetError(f"transform {transform!r} returned {type(array).__name__}, not a numpy array; a "
                               "transform must return the new array (not modify its input in place).")
        return {**batch, input_node: array}

    def __repr__(self) -> str:
        extra = f", transform={self.transform!r}" if self.transform is not None else ""
        return (f"{type(self).__name__}({len(self.dataset)} examples, batch_size={self.batch_size}, "
                f"drop_last={self.drop_last}, epoch={self.epoch}{extra})")


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
                 transforms: Optional[Sequence[Transform]] = None, *, transform: Optional[InputTransform] = None):
        super().__init__(dataset, batch_size, drop_last=drop_last, transforms=transforms, transform=transform,
                         seed=seed)

    def epoch_indices(self, epoch: int) -> np.ndarray:
        rng = np.random.default_rng((self.seed, _check_non_negative_int(epoch, "epoch")))
        return rng.permutation(len(self.dataset)).astype(np.int64, copy=False)

    def __repr__(self) -> str:
        return super().__repr__()[:-1] + f", seed={self.seed})"


__all__ = ["Sampler", "OrderedSampler", "ShuffleSampler"]
