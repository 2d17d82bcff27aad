"""L3: :class:`DistributedSampler` -- each rank's distinct, epoch-seeded shard of a dataset.

Framework-neutral and MPI-free: it needs only this process's ``rank`` and the number of ranks ``size``
(integers, or any ``comm`` object with ``.rank`` and ``.size`` attributes: a d5
:class:`~d5.distributed.CommunicationNetwork`, or mpi4py's ``MPI.COMM_WORLD``). It communicates nothing;
every rank computes the same epoch order from (``seed``, epoch) and keeps its own share of it.

**Sharding.** Epoch ``e`` orders all ``N = len(dataset)`` examples once -- with ``shuffle=True`` by
``numpy.random.default_rng((seed, e)).permutation(N)``, exactly :class:`~d5.training.sampler.ShuffleSampler`'s
permutation, otherwise ``0 .. N-1`` -- the same order on every rank. Rank ``r`` takes the positions
``r, r + size, r + 2*size, ...`` of that order (strided, as PyTorch's ``DistributedSampler``), in batches of
``batch_size`` (the **per-rank** batch; the global batch of one synchronous step is ``batch_size * size``).
Strided shards have a useful property: the batches of step ``k`` on all ranks together are the positions
``[k*size*batch_size, (k+1)*size*batch_size)`` of the epoch order -- the very examples of batch ``k`` of a
``ShuffleSampler(dataset, batch_size * size, seed)`` (interleaved rather than in order), so a data-parallel run
sees the global batches of the equivalent single-process run. With ``size=1`` a DistributedSampler yields
exactly the batches of ``ShuffleSampler`` (``shuffle=False``: ``OrderedSampler``), transforms included.

**The uneven tail** (``N`` not divisible by ``size * batch_size``). A synchronous scheme (allreduce, a
consistent parameter server) needs every rank to take the **same number of steps** per epoch: a rank with one
step fewer leaves the others waiting in a collective forever. Hence three modes, the first the default:

* ``even_batches=True, drop_last=False`` (default) -- **pad**: the epoch order is extended by repeating its first
  ``pad = ceil(N / size) * size - N`` examples (``pad < size``) so that every rank gets ``ceil(N / size)``
  examples, in the same number of batches of the same sizes (only the last batch of every rank may be short,
  equally on all ranks). Every example is visited at least once per epoch; ``pad`` of them (the first of the
  epoch's order, so different ones each epoch when shuffling) twice. Exactly once when ``size`` divides ``N``.
* ``even_batches=True, drop_last=True`` -- **drop**: every rank takes ``N // (size * batch_size)`` full batches;
  the last ``N mod (size * batch_size)`` examples of the epoch's order (different ones each epoch when shuffling)
  are skipped this epoch. Every example at most once per epoch, every batch full, no duplicates.
* ``even_batches=False`` -- **exact**: rank ``r`` takes the positions ``r, r + size, ... < N`` and nothing else,
  so (with ``drop_last=False``) every example is visited **exactly once** per epoch across the ranks. The price:
  ranks ``r < N mod size`` hold one example more and may take one batch more
  (:attr:`DistributedSampler.equal_steps` says whether they do), which hangs a synchronous scheme -- use it for
  asynchronous schemes, evaluation, or where every rank's batch count is checked. ``drop_last=True`` here drops
  each rank's own short last batch.

:attr:`DistributedSampler.padding` and :attr:`DistributedSampler.dropped` count the repeated and the skipped
examples of an epoch (over all ranks); :attr:`DistributedSampler.batches_per_rank` lists every rank's
``len()``. The configuration is checked identically on every rank (never against this rank's shard alone), so a
bad one raises on all ranks at once instead of letting some ranks run into a collective the others never reach.

Everything else is the sampler protocol of :mod:`d5.training.sampler`: ``len()`` (batches per epoch on this rank),
``set_epoch`` (every rank must run the same epoch -- the Trainer calls it at the start of each), the
``transform``/``transforms`` arguments (batch ``b`` of epoch ``e`` draws its augmentation from
``default_rng((seed, e, TRANSFORM_STREAM, b, size, rank))``, independent across ranks), and ``state_dict`` /
``load_state_dict``, which resume bitwise mid-epoch and refuse a state of another rank, world size or mode.
Give every rank the same ``seed`` (e.g. broadcast it): a different seed gives a different epoch order, and the
shards then overlap.
"""
from __future__ import annotations

import math
import numbers
from typing import Any, Dict, Optional, Sequence, Tuple

import numpy as np

from d5.errors import DatasetError, DistributedError
from d5.training.dataset import Dataset
from d5.training.sampler import TRANSFORM_STREAM, InputTransform, Sampler, Transform, _check_non_negative_int


def _check_rank_and_size(rank, size, comm) -> Tuple[int, int]:
    """(rank, size) as ints from the arguments, or a DistributedError saying what to pass."""
    if comm is not None:
        if rank is not None or size is not None:
            raise DistributedError("DistributedSampler takes either comm= or rank= and size=, not both; pass comm= "
                                   "alone (its .rank and .size are used).")
        if not (hasattr(comm, "rank") and hasattr(comm, "size")):
            raise DistributedError(f"DistributedSampler comm= must have .rank and .size attributes (a "
                                   f"d5.distributed.CommunicationNetwork or mpi4py's MPI.COMM_WORLD); got "
                                   f"{type(comm).__name__}.")
        rank, size, source = comm.rank, comm.size, f"comm ({type(comm).__name__}) "
    else:
        if rank is None or size is None:
            raise DistributedError("DistributedSampler needs this process's place among the ranks: pass rank= and "
                                   "size= (e.g. rank=comm.rank, size=comm.size) or comm= (an object with .rank and "
                                   ".size).")
        source = ""
    for what, value in (("size", size), ("rank", rank)):
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
            raise DistributedError(f"DistributedSampler: {source}{what} must be an integer; got {value!r}.")
    size, rank = int(size), int(rank)
    if size < 1:
        raise DistributedError(f"DistributedSampler: {source}size={size}, but there is at least one rank; pass the "
                               "number of processes (mpiexec -n N gives size=N).")
    if not 0 <= rank < size:
        raise DistributedError(f"DistributedSampler: {source}rank={rank} is not in [0, {size}); ranks are numbered "
                               f"0 .. size-1 (pass this process's rank, e.g. comm.rank).")
    return rank, size


class DistributedSampler(Sampler):
    """Rank ``rank``'s shard of ``dataset`` out of ``size``: distinct from the other ranks' shards, a new
    (``seed``, epoch)-seeded order every epoch, batches of ``batch_size`` per rank. See the module docstring for
    the sharding and the three tail modes (``even_batches``, ``drop_last``).

    Construct it on every rank with the same arguments except ``rank``; ``comm`` may stand for ``rank`` and
    ``size``. Raises :class:`~d5.errors.DistributedError` for a bad rank, size or comm and
    :class:`~d5.errors.DatasetError` when the dataset has fewer examples than ranks or ``batch_size`` is larger
    than a rank's shard (``batch_size`` is per rank).

    >>> import numpy as np
    >>> from d5.training.dataset import NumpyDataset
    >>> ds = NumpyDataset(np.zeros((10, 1)), np.arange(10))
    >>> ranks = [DistributedSampler(ds, 2, rank=r, size=3, shuffle=False) for r in range(3)]
    >>> [[b['label'].tolist() for b in s] for s in ranks]   # 10 over 3 ranks: 0 and 1 repeated (padding 2)
    [[[0, 3], [6, 9]], [[1, 4], [7, 0]], [[2, 5], [8, 1]]]
    >>> exact = [DistributedSampler(ds, 2, rank=r, size=3, shuffle=False, even_batches=False) for r in range(3)]
    >>> [[b['label'].tolist() for b in s] for s in exact], [s.equal_steps for s in exact]
    ([[[0, 3], [6, 9]], [[1, 4], [7]], [[2, 5], [8]]], [True, True, True])
    >>> dropping = DistributedSampler(ds, 2, rank=0, size=3, drop_last=True)
    >>> len(dropping), dropping.dropped, dropping.batches_per_rank
    (1, 4, (1, 1, 1))
    """

    def __init__(self, dataset: Dataset, batch_size: int, *, rank: Optional[int] = None, size: Optional[int] = None,
                 comm: Any = None, seed: int = 0, shuffle: bool = True, drop_last: bool = False,
                 even_batches: bool = True, transforms: Optional[Sequence[Transform]] = None,
                 transform: Optional[InputTransform] = None):
        self.rank, self.size = _check_rank_and_size(rank, size, comm)
        for what, value in (("shuffle", shuffle), ("even_batches", even_batches), ("drop_last", drop_last)):
            if not isinstance(value, (bool, np.bool_)):
                raise DatasetError(f"DistributedSampler {what} must be True or False; got {value!r}.")
        self.shuffle, self.even_batches = bool(shuffle), bool(even_batches)
        if not hasattr(dataset, "__getitem__") or not hasattr(dataset, "__len__"):
            raise DatasetError(f"A sampler needs a Dataset (with __len__ and __getitem__); got "
                               f"{type(dataset).__name__}.")
        examples = len(dataset)
        if examples == 0:
            raise DatasetError("DistributedSampler: the dataset is empty, so an epoch would have no batches.")
        if examples < self.size:
            raise DatasetError(f"DistributedSampler: the dataset has {examples} examples, fewer than the {self.size} "
                               "ranks, so some rank would have none; use fewer ranks or a larger dataset.")
        # The same check on every rank (the smallest shard, not this rank's), so all ranks fail together.
        batch = _check_non_negative_int(batch_size, "batch_size", minimum=1)
        smallest = min(self._shard_sizes(examples, bool(drop_last)))
        if batch > smallest:
            raise DatasetError(
                f"DistributedSampler: batch_size={batch} is per rank, but {examples} examples over {self.size} ranks "
                f"leave a rank only {smallest} per epoch; pass batch_size <= {smallest} (the global batch is "
                f"batch_size * size), use fewer ranks, or a larger dataset.")
        super().__init__(dataset, batch, drop_last=drop_last, transforms=transforms, transform=transform, seed=seed)

    # -- the shards ------------------------------------------------------------------------------------------
    def _shard_sizes(self, examples: int, drop_last: bool) -> Tuple[int, ...]:
        """Examples per epoch of every rank (before a drop_last of short batches)."""
        size = self.size
        if not self.even_batches:
            return tuple(len(range(r, examples, size)) for r in range(size))
        return (examples // size if drop_last else math.ceil(examples / size),) * size

    @property
    def samples_per_epoch(self) -> int:
        """Examples in this rank's shard per epoch (``len(epoch_indices(e))``)."""
        return self._shard_sizes(len(self.dataset), self.drop_last)[self.rank]

    @property
    def batches_per_rank(self) -> Tuple[int, ...]:
        """``len()`` of every rank's sampler (all equal unless ``even_batches=False``)."""
        batch = self.batch_size
        shards = self._shard_sizes(len(self.dataset), self.drop_last)
        return tuple(n // batch if self.drop_last else math.ceil(n / batch) for n in shards)

    @property
    def equal_steps(self) -> bool:
        """True when every rank takes the same number of batches per epoch -- what a synchronous scheme needs."""
        return len(set(self.batches_per_rank)) == 1

    @property
    def padding(self) -> int:
        """Examples visited twice per epoch over all ranks (the default mode's padding; else 0)."""
        if not self.even_batches or self.drop_last:
            return 0
        return math.ceil(len(self.dataset) / self.size) * self.size - len(self.dataset)

    @property
    def dropped(self) -> int:
        """Examples not visited in an epoch over all ranks (those ``drop_last`` skips; else 0)."""
        if not self.drop_last:
            return 0
        return len(self.dataset) - self.batch_size * sum(self.batches_per_rank)

    def global_indices(self, epoch: int) -> np.ndarray:
        """The epoch's order over all ranks -- rank ``r`` takes its positions ``r, r + size, ...`` -- padded
        (default mode) or cut to a multiple of ``size`` (``drop_last=True`` with ``even_batches=True``)."""
        epoch = _check_non_negative_int(epoch, "epoch")
        examples = len(self.dataset)
        if self.shuffle:  # ShuffleSampler's stream: a 1-rank DistributedSampler is a ShuffleSampler
            order = np.random.default_rng((self.seed, epoch)).permutation(examples).astype(np.int64, copy=False)
        else:
            order = np.arange(examples, dtype=np.int64)
        if self.even_batches and self.drop_last:
            return order[:examples // self.size * self.size]
        pad = self.padding
        return np.concatenate([order, order[:pad]]) if pad else order

    def epoch_indices(self, epoch: int) -> np.ndarray:
        """This rank's shard of ``epoch``, in the order its batches take it."""
        return self.global_indices(epoch)[self.rank::self.size]

    def transform_rng(self, epoch: int, batch: int) -> np.random.Generator:
        if self.size == 1:
            return super().transform_rng(epoch, batch)
        return np.random.default_rng((self.seed, epoch, TRANSFORM_STREAM, batch, self.size, self.rank))

    def _state_config(self) -> Dict[str, Any]:
        return {**super()._state_config(), "rank": self.rank, "size": self.size, "shuffle": self.shuffle,
                "even_batches": self.even_batches}

    def __repr__(self) -> str:
        return (super().__repr__()[:-1] + f", rank={self.rank}, size={self.size}, seed={self.seed}, "
                f"shuffle={self.shuffle}, even_batches={self.even_batches})")


__all__ = ["DistributedSampler"]
