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

State (for checkpoints): ``state_dict()`` is the epoch in progress and the number of its batches already
yielded (plus the seed and the configuration a state must match); ``load_state_dict(state)`` on a sampler
built the same way makes the next ``iter()`` continue with exactly the batches -- indices and transform
randomness -- that the interrupted iteration would have yielded next. The dict holds only ints, strs, bools
and dicts of them, so it fits a JSON or ``.npz`` checkpoint.

Besides :class:`OrderedSampler` and :class:`ShuffleSampler` there are :class:`BucketSampler` (batches of
examples of similar length, for sequences) and :class:`ChoiceSampler` (a random choice with or without
replacement, ``num_samples`` per epoch), all seeded per epoch in the same way.
"""
from __future__ import annotations

import abc
import collections.abc
import hashlib
import itertools
import math
import numbers
from typing import Any, Callable, Dict, Iterator, Optional, Sequence, Union

import numpy as np

from d5.errors import CheckpointError, DatasetError
from d5.training.dataset import Dataset

Batch = Dict[str, np.ndarray]
Transform = Callable[[Batch], Batch]
#: A random transform of the input array: ``(array, numpy Generator) -> new array``.
InputTransform = Callable[[np.ndarray, np.random.Generator], np.ndarray]
#: Mixed into the transform generator's seed so its stream never coincides with ShuffleSampler's
#: permutation stream ``default_rng((seed, epoch))``. ("augm" in ASCII.)
TRANSFORM_STREAM = 0x6175676D
#: Mixed into BucketSampler's and ChoiceSampler's generators, so each draws its own stream for a (seed, epoch).
BUCKET_STREAM = 0x6275636B   # "buck"
CHOICE_STREAM = 0x63686F69   # "choi"
#: The layout of :meth:`Sampler.state_dict`; a state of another version is refused.
STATE_VERSION = 1


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
        # Progress of the newest iteration, [epoch, batches yielded]; None when none is under way.
        self._cursor: Optional[list] = None
        # (epoch, batches to skip) restored by load_state_dict and used by the next iter() of that epoch.
        self._resume: Optional[tuple] = None

    @property
    def samples_per_epoch(self) -> int:
        """How many indices :meth:`epoch_indices` returns; override together with it if that differs."""
        return len(self.dataset)

    def epoch_indices(self, epoch: int) -> np.ndarray:
        """The 1-D int64 array of dataset indices visited in ``epoch``, in order. Override to reorder."""
        return np.arange(len(self.dataset), dtype=np.int64)

    def set_epoch(self, epoch: int) -> None:
        """Make the next iteration run ``epoch`` from its first batch (e.g. when resuming training).

        A mid-epoch position restored by :meth:`load_state_dict` survives ``set_epoch`` of that same epoch
        (a Trainer calls ``set_epoch`` at the start of every epoch); any other epoch discards it.
        """
        self.epoch = _check_non_negative_int(epoch, "epoch")
        self._cursor = None
        if self._resume is not None and self._resume[0] != self.epoch:
            self._resume = None

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
        start = self._resume[1] if self._resume is not None and self._resume[0] == epoch else 0
        self._resume = None
        self.epoch = epoch + 1
        cursor = [epoch, start]
        self._cursor = cursor
        return self._batches(epoch, start, cursor)

    def transform_rng(self, epoch: int, batch: int) -> np.random.Generator:
        """The generator ``transform`` draws from for batch number ``batch`` of ``epoch``.

        One generator per batch, so a batch's augmentation depends only on (seed, epoch, batch) and a run
        resumed mid-epoch sees the same. Override to mix in more (a distributed sampler: its rank).
        """
        return np.random.default_rng((self.seed, epoch, TRANSFORM_STREAM, batch))

    def _batches(self, epoch: int, start: int = 0, cursor: Optional[list] = None) -> Iterator[Batch]:
        transform = self.transform
        input_node = getattr(self.dataset, "input_node", "input") if transform is not None else None
        # Batches before ``start`` were yielded before a checkpoint: skip their indices (cheap), keep their
        # numbers, so batch b still draws its transform from transform_rng(epoch, b).
        for number, index in itertools.islice(enumerate(self.batch_indices(epoch)), start, None):
            batch = self.dataset[index]
            if transform is not None:
                batch = self._transform_input(batch, input_node, transform, self.transform_rng(epoch, number))
            for dict_transform in self.transforms:
                batch = dict_transform(batch)
            if cursor is not None:
                cursor[1] = number + 1  # counted before the yield: the consumer holds this batch now
            yield batch
        if cursor is not None and self._cursor is cursor:
            self._cursor = None  # the epoch is complete; the state is now (epoch + 1, 0)

    # -- state protocol (checkpoint/resume) ------------------------------------------------------------
    def _state_config(self) -> Dict[str, Any]:
        """What a loaded state must match: a state of another configuration gives other batches.

        Subclasses extend it (``{**super()._state_config(), ...}``) with what shapes their batches.
        """
        return {"examples": len(self.dataset), "samples_per_epoch": int(self.samples_per_epoch),
                "batch_size": self.batch_size, "drop_last": self.drop_last, "batches_per_epoch": len(self)}

    def state_dict(self) -> Dict[str, Any]:
        """The epoch in progress, its batches already yielded (``position``), the seed and the configuration.

        Before any iteration it is ``epoch=0, position=0``; after a complete epoch ``e`` it is
        ``epoch=e+1, position=0``.

        >>> import numpy as np
        >>> from d5.training.dataset import NumpyDataset
        >>> sampler = ShuffleSampler(NumpyDataset(np.zeros((10, 1)), np.arange(10)), batch_size=3, seed=4)
        >>> batches = iter(sampler); _ = next(batches); _ = next(batches)
        >>> state = sampler.state_dict()
        >>> state["epoch"], state["position"], state["seed"]
        (0, 2, 4)
        >>> resumed = ShuffleSampler(NumpyDataset(np.zeros((10, 1)), np.arange(10)), batch_size=3, seed=4)
        >>> resumed.load_state_dict(state)
        >>> [b["label"].tolist() for b in resumed] == [b["label"].tolist() for b in batches]
        True
        """
        if self._cursor is not None:
            epoch, position = self._cursor
        elif self._resume is not None:
            epoch, position = self._resume
        else:
            epoch, position = self.epoch, 0
        return {"sampler": type(self).__name__, "version": STATE_VERSION, "epoch": int(epoch),
                "position": int(position), "seed": self.seed, "config": self._state_config()}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Continue from ``state`` (from :meth:`state_dict` of a sampler built the same way): the next
        ``iter()`` yields the rest of the saved epoch, then epochs continue as usual. The seed is part of the
        state and is restored; a state of another sampler class or configuration (dataset size, batch size,
        drop_last, ...) is refused with :class:`~d5.errors.CheckpointError` naming the difference.
        """
        who = type(self).__name__
        if not isinstance(state, collections.abc.Mapping):
            raise CheckpointError(f"{who}.load_state_dict takes the dict state_dict() returned; got "
                                  f"{type(state).__name__}.")
        missing = [key for key in ("sampler", "version", "epoch", "position", "seed", "config") if key not in state]
        if missing:
            raise CheckpointError(f"{who}.load_state_dict: the state lacks {missing}; it is not a sampler's "
                                  "state_dict() (or it is damaged).")
        if state["sampler"] != who:
            raise CheckpointError(f"{who}.load_state_dict: the state is of a {state['sampler']}, not a {who}; "
                                  f"resume with the sampler class the run was saved with.")
        if state["version"] != STATE_VERSION:
            raise CheckpointError(f"{who}.load_state_dict: state version {state['version']!r} is not this d5's "
                                  f"({STATE_VERSION}); resume with the d5 version that saved it.")
        config, saved = self._state_config(), state["config"]
        if not isinstance(saved, collections.abc.Mapping) or dict(saved) != config:
            saved = dict(saved) if isinstance(saved, collections.abc.Mapping) else {}
            differences = [f"{key}: saved {saved.get(key, '<absent>')!r}, now {config.get(key, '<absent>')!r}"
                           for key in sorted(set(config) | set(saved)) if saved.get(key) != config.get(key)]
            raise CheckpointError(f"{who}.load_state_dict: the state is of a sampler configured differently "
                                  f"({'; '.join(differences)}), so its batches would differ; build the sampler "
                                  "as the saved run did.")
        try:
            epoch = _check_non_negative_int(state["epoch"], "epoch")
            position = _check_non_negative_int(state["position"], "position")
            seed = _check_non_negative_int(state["seed"], "seed")
        except DatasetError as err:
            raise CheckpointError(f"{who}.load_state_dict: {err}") from None
        if position > len(self):
            raise CheckpointError(f"{who}.load_state_dict: position {position} is past the {len(self)} batches of "
                                  "an epoch; the state is damaged.")
        self.seed = seed
        self.epoch = epoch
        self._cursor = None
        self._resume = (epoch, position) if position else None

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


def _digest(array: np.ndarray) -> str:
    """A short fingerprint of an array's values, for a state to say which lengths/weights it was made with."""
    array = np.ascontiguousarray(array)
    return hashlib.sha256(str(array.dtype).encode() + array.tobytes()).hexdigest()[:16]


Lengths = Union[np.ndarray, Sequence[float], Callable[[Dict[str, np.ndarray]], float], None]


class BucketSampler(Sampler):
    """Batches of examples of similar length (fewer padded positions for sequences), in a random order that
    is new every epoch and reproducible from the seed.

    Each epoch ``e``: the examples are shuffled with ``numpy.random.default_rng((seed, e, BUCKET_STREAM))``, cut
    into pools of ``pool_batches * batch_size`` consecutive examples, each pool is sorted by length (ties stay in
    shuffled order) and cut into batches, and the order of all batches is shuffled (the "sorted pool" bucketing
    of torchnlp's BucketBatchSampler and AllenNLP). A larger ``pool_batches`` gives batches of more equal
    lengths and less randomness; the pool of all examples sorts the whole dataset. Only the last pool's last
    batch can be short (dropped with ``drop_last=True``); it is shuffled among the others.

    ``lengths``: one number per example (an array or a list), or a callable ``example_dict -> length`` called
    once per example at construction (``lambda ex: len(ex["input"])``), or None to use ``dataset.lengths``
    (e.g. :class:`~d5.training.dataset.SequenceDataset`).

    >>> import numpy as np
    >>> from d5.training.dataset import NumpyDataset
    >>> lengths = np.array([5, 1, 4, 2, 3, 6, 8, 7])
    >>> sampler = BucketSampler(NumpyDataset(np.zeros((8, 1)), lengths), batch_size=2, lengths=lengths,
    ...                         pool_batches=4, seed=0)
    >>> sorted(sorted(lengths[b].tolist()) for b in sampler.batch_indices(0))  # neighbours in length
    [[1, 2], [3, 4], [5, 6], [7, 8]]
    """

    def __init__(self, dataset: Dataset, batch_size: int, lengths: Lengths = None, seed: int = 0,
                 pool_batches: int = 100, drop_last: bool = False, transforms: Optional[Sequence[Transform]] = None,
                 *, transform: Optional[InputTransform] = None):
        self.pool_batches = _check_non_negative_int(pool_batches, "pool_batches", minimum=1)
        self.lengths = self._read_lengths(dataset, lengths)
        super().__init__(dataset, batch_size, drop_last=drop_last, transforms=transforms, transform=transform,
                         seed=seed)

    @staticmethod
    def _read_lengths(dataset: Dataset, lengths: Lengths) -> np.ndarray:
        if not hasattr(dataset, "__len__") or not hasattr(dataset, "__getitem__"):
            raise DatasetError(
                f"A sampler needs a Dataset (with __len__ and __getitem__); got {type(dataset).__name__}.")
        if lengths is None:
            lengths = getattr(dataset, "lengths", None)
            if lengths is None:
                raise DatasetError(f"BucketSampler needs the examples' lengths: pass lengths= (an array with one "
                                   f"length per example, or a callable example -> length); "
                                   f"{type(dataset).__name__} has no .lengths.")
        if callable(lengths):
            measure = lengths
            lengths = [measure(dataset[i]) for i in range(len(dataset))]  # once, at construction
        try:
            values = np.asarray(lengths, dtype=np.float64)
        except (TypeError, ValueError):
            raise DatasetError(f"BucketSampler lengths must be numbers, one per example; "
                               f"got {lengths!r:.80}.") from None
        if values.shape != (len(dataset),):
            raise DatasetError(f"BucketSampler needs one length per example: the dataset has {len(dataset)} "
                               f"examples, lengths has shape {values.shape}.")
        if not np.isfinite(values).all() or (values < 0).any():
            bad = int(np.flatnonzero(~np.isfinite(values) | (values < 0))[0])
            raise DatasetError(f"BucketSampler lengths must be finite and >= 0; example {bad} has length "
                               f"{values[bad]!r}.")
        values.flags.writeable = False
        return values

    def _epoch_batches(self, epoch: int) -> list:
        epoch = _check_non_negative_int(epoch, "epoch")
        rng = np.random.default_rng((self.seed, epoch, BUCKET_STREAM))
        order = rng.permutation(len(self.dataset))
        pool = self.pool_batches * self.batch_size
        pool_of = np.arange(order.size) // pool
        # lexsort is stable: within a pool, equal lengths keep their shuffled order.
        order = order[np.lexsort((self.lengths[order], pool_of))].astype(np.int64, copy=False)
        batches = [order[start:start + self.batch_size] for start in range(0, order.size, self.batch_size)]
        if self.drop_last and batches[-1].size < self.batch_size:
            batches.pop()
        return [batches[i] for i in rng.permutation(len(batches))]

    def batch_indices(self, epoch: int) -> Iterator[np.ndarray]:
        yield from self._epoch_batches(epoch)

    def epoch_indices(self, epoch: int) -> np.ndarray:
        """Every index of ``epoch`` in batch order (the short batch, if any, may sit anywhere)."""
        return np.concatenate(self._epoch_batches(epoch))

    def _state_config(self) -> Dict[str, Any]:
        return {**super()._state_config(), "pool_batches": self.pool_batches, "lengths": _digest(self.lengths)}

    def __repr__(self) -> str:
        return super().__repr__()[:-1] + f", seed={self.seed}, pool_batches={self.pool_batches})"


class ChoiceSampler(Sampler):
    """``num_samples`` examples per epoch drawn at random, with or without replacement, optionally weighted.

    Epoch ``e`` draws ``numpy.random.default_rng((seed, e, CHOICE_STREAM)).choice(len(dataset), num_samples,
    replace=replacement, p=weights)`` (weights normalized to sum to 1): new every epoch, reproducible from the
    seed. ``num_samples`` defaults to the dataset's size. Without replacement it may not exceed the number of
    examples (of non-zero weight).

    >>> import numpy as np
    >>> from d5.training.dataset import NumpyDataset
    >>> ds = NumpyDataset(np.zeros((5, 1)), np.arange(5))
    >>> sampler = ChoiceSampler(ds, batch_size=4, num_samples=12, replacement=True, seed=0)
    >>> len(sampler), sum(len(b["label"]) for b in sampler)
    (3, 12)
    >>> never_last = ChoiceSampler(ds, 2, num_samples=4, replacement=False, weights=[1, 1, 1, 1, 0])
    >>> sorted(never_last.epoch_indices(0).tolist())
    [0, 1, 2, 3]
    """

    def __init__(self, dataset: Dataset, batch_size: int, num_samples: Optional[int] = None,
                 replacement: bool = True, weights: Optional[Sequence[float]] = None, seed: int = 0,
                 drop_last: bool = False, transforms: Optional[Sequence[Transform]] = None, *,
                 transform: Optional[InputTransform] = None):
        if not hasattr(dataset, "__len__") or not hasattr(dataset, "__getitem__"):
            raise DatasetError(
                f"A sampler needs a Dataset (with __len__ and __getitem__); got {type(dataset).__name__}.")
        if not isinstance(replacement, (bool, np.bool_)):
            raise DatasetError(f"ChoiceSampler replacement must be True or False; got {replacement!r}.")
        self.replacement = bool(replacement)
        size = len(dataset)
        self.num_samples = size if num_samples is None else _check_non_negative_int(num_samples, "num_samples", 1)
        self.weights = None if weights is None else self._read_weights(weights, size)
        available = size if self.weights is None else int(np.count_nonzero(self.weights))
        if not self.replacement and self.num_samples > available:
            raise DatasetError(f"ChoiceSampler without replacement cannot draw num_samples={self.num_samples} from "
                               f"{available} examples{' of non-zero weight' if self.weights is not None else ''}; "
                               "lower num_samples or set replacement=True.")
        super().__init__(dataset, batch_size, drop_last=drop_last, transforms=transforms, transform=transform,
                         seed=seed)

    @staticmethod
    def _read_weights(weights, size: int) -> np.ndarray:
        try:
            values = np.asarray(weights, dtype=np.float64)
        except (TypeError, ValueError):
            raise DatasetError(f"ChoiceSampler weights must be numbers, one per example; "
                               f"got {weights!r:.80}.") from None
        if values.shape != (size,):
            raise DatasetError(f"ChoiceSampler needs one weight per example: the dataset has {size} examples, "
                               f"weights has shape {values.shape}.")
        if not np.isfinite(values).all() or (values < 0).any() or values.sum() <= 0:
            raise DatasetError("ChoiceSampler weights must be finite, >= 0 and not all 0 (they are normalized to "
                               "probabilities).")
        values = values / values.sum()
        values.flags.writeable = False
        return values

    @property
    def samples_per_epoch(self) -> int:
        return self.num_samples

    def epoch_indices(self, epoch: int) -> np.ndarray:
        rng = np.random.default_rng((self.seed, _check_non_negative_int(epoch, "epoch"), CHOICE_STREAM))
        size = len(self.dataset)
        if self.weights is None and self.replacement:
            return rng.integers(0, size, self.num_samples, dtype=np.int64)
        return rng.choice(size, self.num_samples, replace=self.replacement, p=self.weights).astype(np.int64)

    def _state_config(self) -> Dict[str, Any]:
        return {**super()._state_config(), "replacement": self.replacement,
                "weights": None if self.weights is None else _digest(self.weights)}

    def __repr__(self) -> str:
        return (super().__repr__()[:-1] + f", seed={self.seed}, num_samples={self.num_samples}, "
                f"replacement={self.replacement})")


__all__ = ["Sampler", "OrderedSampler", "ShuffleSampler", "BucketSampler", "ChoiceSampler"]
