"""The L2 dataset interface: an indexable collection of examples, each a dict of named arrays.

Tensors cross d5's level boundaries as ``dict[str, numpy.ndarray]``; a dataset therefore returns, for an
index or an index array, a dict such as ``{'input': x, 'label': y}`` whose keys are the names of the
network's input tensors (``dataset.input_node`` and ``dataset.label_node``).
"""
from __future__ import annotations

import abc
import collections.abc
import numbers
from typing import Any, Dict, Union

import numpy as np

from d5.errors import DatasetError, ShapeError

Index = Union[int, slice, np.ndarray]


class Dataset(abc.ABC):
    """Abstract dataset: ``len(dataset)`` examples, ``dataset[index] -> {name: array}``.

    ``index`` is an int (one example, no batch dimension) or a 1-D integer array (a batch, first
    dimension = ``len(index)``). Samplers always index with arrays, so an implementation should make
    that path fast (one vectorized read, not a Python loop) and must return arrays that do not alias
    its storage: transforms are allowed to modify a batch in place.

    >>> import numpy as np
    >>> class Squares(Dataset):
    ...     def __len__(self):
    ...         return 4
    ...     def __getitem__(self, index):
    ...         x = np.asarray(index, dtype=np.float32)
    ...         return {self.input_node: x, self.label_node: x * x}
    >>> Squares()[np.array([1, 3])]['label']
    array([1., 9.], dtype=float32)
    """

    input_node: str = "input"
    label_node: str = "label"

    @abc.abstractmethod
    def __len__(self) -> int:
        """The number of examples."""

    @abc.abstractmethod
    def __getitem__(self, index: Index) -> Dict[str, np.ndarray]:
        """The example(s) at ``index`` as a dict of named arrays."""


class NumpyDataset(Dataset):
    """A dataset held in two in-memory arrays whose first dimension indexes the examples.

    The arrays are not copied (pass read-only arrays to share them safely between datasets); every
    lookup returns fresh arrays, so callers may modify what they get without touching the dataset.

    >>> import numpy as np
    >>> ds = NumpyDataset(np.arange(12.0).reshape(6, 2), np.arange(6))
    >>> len(ds), ds[np.array([5, 0])]['input'].tolist(), int(ds[2]['label'])
    (6, [[10.0, 11.0], [0.0, 1.0]], 2)
    """

    def __init__(self, data, labels, input_node: str = "input", label_node: str = "label"):
        data = np.asarray(data)
        labels = np.asarray(labels)
        if data.ndim == 0 or labels.ndim == 0:
            raise DatasetError(
                f"NumpyDataset needs arrays whose first dimension indexes the examples; got data of "
                f"shape {data.shape} and labels of shape {labels.shape}. Pass one row per example.")
        if data.shape[0] != labels.shape[0]:
            raise DatasetError(
                f"NumpyDataset: data has {data.shape[0]} examples but labels has {labels.shape[0]}; "
                f"pass one label per example (data.shape[0] == labels.shape[0]).")
        if input_node == label_node:
            raise DatasetError(
                f"NumpyDataset: input_node and label_node are both {input_node!r}; give them distinct names.")
        self.data = data
        self.labels = labels
        self.input_node = input_node
        self.label_node = label_node

    def __len__(self) -> int:
        return int(self.data.shape[0])

    def __getitem__(self, index: Index) -> Dict[str, np.ndarray]:
        if isinstance(index, np.ndarray):
            if index.ndim != 1 or not (np.issubdtype(index.dtype, np.integer) or index.size == 0):
                raise DatasetError(
                    f"NumpyDataset index array must be 1-D with an integer dtype; got shape "
                    f"{index.shape} and dtype {index.dtype}. Convert it with index.astype(np.int64).")
            index = index.astype(np.intp, copy=False)
            # One fancy-indexing read per array: the batching fast path. It copies, so the batch never
            # aliases the dataset.
            try:
                return {self.input_node: self.data[index], self.label_node: self.labels[index]}
            except IndexError:
                raise DatasetError(self._out_of_range(index)) from None
        if isinstance(index, slice):
            return {self.input_node: self.data[index].copy(), self.label_node: self.labels[index].copy()}
        if isinstance(index, numbers.Integral) and not isinstance(index, bool):
            if not -len(self) <= index < len(self):
                raise DatasetError(self._out_of_range(np.array([index])))
            # Basic indexing gives views; copy so a caller's in-place edit cannot reach the dataset.
            return {self.input_node: np.array(self.data[index]), self.label_node: np.array(self.labels[index])}
        raise DatasetError(
            f"NumpyDataset index must be an int, a slice or a 1-D integer numpy array; got "
            f"{type(index).__name__}. Wrap lists with np.asarray(indices).")

    def _out_of_range(self, index: np.ndarray) -> str:
        bad = index[(index < -len(self)) | (index >= len(self))]
        return (f"NumpyDataset index {bad[:5].tolist()} out of range for a dataset of {len(self)} examples; "
                f"valid indices are 0..{len(self) - 1}.")

    def __repr__(self) -> str:
        return (f"NumpyDataset({len(self)} examples, {self.input_node}: {self.data.dtype}{self.data.shape[1:]}, "
                f"{self.label_node}: {self.labels.dtype}{self.labels.shape[1:]})")


def _integer_array(values, what: str, ndim: int) -> np.ndarray:
    array = np.asarray(values)
    if array.ndim != ndim or not (np.issubdtype(array.dtype, np.integer) or array.size == 0):
        raise DatasetError(f"{what} must be a {ndim}-D array of integers; got {array.dtype} of shape {array.shape}.")
    return array


def batch_indices(index: Any, length: int, what: str) -> np.ndarray:
    """A slice or a 1-D integer array as checked ``np.intp`` indices into ``length`` examples; anything else,
    or an index out of range, is a :class:`DatasetError` naming ``what`` (e.g. ``'SequenceDataset'``).

    >>> batch_indices(slice(1, None, 2), 5, "MyDataset").tolist()
    [1, 3]
    """
    if isinstance(index, slice):
        return np.arange(length)[index]
    if not isinstance(index, np.ndarray) or index.ndim != 1 or not (
            np.issubdtype(index.dtype, np.integer) or index.size == 0):
        raise DatasetError(f"{what} index must be an int, a slice or a 1-D integer numpy array; got "
                           f"{type(index).__name__}{getattr(index, 'shape', '')}. Wrap lists with np.asarray(indices).")
    index = index.astype(np.intp, copy=False)
    if index.size and (index.min() < -length or index.max() >= length):
        bad = index[(index < -length) | (index >= length)]
        raise DatasetError(f"{what} index {bad[:5].tolist()} out of range for {length} examples; valid indices are "
                           f"0..{length - 1}.")
    return index


class TokenWindowDataset(Dataset):
    """A stream of token ids cut the way Zaremba et al. batch a language model's data (TensorFlow's PTB
    ``reader.py``): the stream is cut into ``batch_size`` rows of ``len(stream) // batch_size`` tokens (the
    remainder dropped), and each row into windows of ``steps`` tokens; ``label`` is ``input`` shifted by one
    token. Example ``k`` is window ``k // batch_size`` of row ``k % batch_size``, so an
    ``OrderedSampler(dataset, batch_size)`` (:meth:`sampler`) yields exactly Zaremba's batches: batch ``i`` is
    ``rows[:, i*steps:(i+1)*steps]``, and consecutive batches continue every row. Inputs and labels are
    ``(N, steps)`` int64 -- what :func:`d5.models.lstm_lm` takes. (Shuffled windows suit a model that starts
    every window from a zero state, as ``lstm_lm`` does.)

    >>> ds = TokenWindowDataset(np.arange(22), batch_size=2, steps=3)   # rows 0..10 and 11..21
    >>> len(ds), ds.windows_per_row
    (6, 3)
    >>> first = ds[np.array([0, 1])]
    >>> first["input"].tolist(), first["label"].tolist()
    ([[0, 1, 2], [11, 12, 13]], [[1, 2, 3], [12, 13, 14]])
    >>> ds[np.array([2, 3])]["input"].tolist()     # the next batch continues each row
    [[3, 4, 5], [14, 15, 16]]
    """

    def __init__(self, stream, batch_size: int, steps: int, input_node: str = "input", label_node: str = "label"):
        stream = _integer_array(stream, "TokenWindowDataset stream", 1)
        for what, value in (("batch_size", batch_size), ("steps", steps)):
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
                raise DatasetError(f"TokenWindowDataset {what} must be an integer >= 1; got {value!r}.")
        row_length = stream.size // batch_size
        windows = (row_length - 1) // steps  # the label of a row's last window needs one token more
        if windows < 1:
            raise DatasetError(f"TokenWindowDataset: {stream.size} tokens in {batch_size} rows give rows of "
                               f"{row_length} tokens, too short for one window of {steps} steps plus its label "
                               f"(needs {steps + 1}); lower batch_size or steps.")
        if input_node == label_node:
            raise DatasetError(f"TokenWindowDataset: input_node and label_node are both {input_node!r}; give them "
                               "distinct names.")
        rows = stream[:batch_size * row_length].astype(np.int64).reshape(batch_size, row_length)
        rows.flags.writeable = False
        self.rows = rows
        self.batch_size = int(batch_size)
        self.steps = int(steps)
        self.windows_per_row = int(windows)
        self.input_node = input_node
        self.label_node = label_node
        self._offsets = np.arange(steps, dtype=np.intp)

    def __len__(self) -> int:
        return self.windows_per_row * self.batch_size

    def __getitem__(self, index: Index) -> Dict[str, np.ndarray]:
        single = isinstance(index, numbers.Integral) and not isinstance(index, bool)
        index = batch_indices(np.array([index]) if single else index, len(self), "TokenWindowDataset")
        window, row = np.divmod(index % len(self), self.batch_size)
        columns = (window * self.steps)[:, None] + self._offsets    # (N, steps); one gather per array
        rows = row[:, None]
        inputs, labels = self.rows[rows, columns], self.rows[rows, columns + 1]
        if single:
            inputs, labels = inputs[0], labels[0]
        return {self.input_node: inputs, self.label_node: labels}

    def sampler(self, **kwargs):
        """``OrderedSampler(self, self.batch_size, **kwargs)``: Zaremba's batches in Zaremba's order.

        >>> [b["input"][:, 0].tolist() for b in TokenWindowDataset(np.arange(22), 2, 3).sampler()]
        [[0, 11], [3, 14], [6, 17]]
        """
        from d5.training.sampler import OrderedSampler  # here: sampler imports this module

        return OrderedSampler(self, self.batch_size, **kwargs)

    def __repr__(self) -> str:
        return (f"TokenWindowDataset({len(self)} windows: {self.batch_size} rows x {self.windows_per_row} windows of "
                f"{self.steps} steps)")


class SequenceDataset(Dataset):
    """Variable-length sequences, each batch padded with ``pad_value`` to the length of its longest sequence.

    ``sequences`` is a list of arrays whose first dimension is the sequence length (the other dimensions
    equal); ``labels`` one label per sequence. ``lengths`` holds every sequence's length, which
    :class:`~d5.training.sampler.BucketSampler` reads to batch similar lengths together. With ``length_node``
    set, batches also carry the lengths under that name.

    >>> ds = SequenceDataset([np.array([1, 2, 3]), np.array([4]), np.array([5, 6])], [0, 1, 0])
    >>> ds.lengths.tolist(), ds[np.array([1, 2])]["input"].tolist()
    ([3, 1, 2], [[4, 0], [5, 6]])
    """

    def __init__(self, sequences, labels, pad_value=0, input_node: str = "input", label_node: str = "label",
                 length_node: str | None = None):
        sequences = [np.asarray(sequence) for sequence in sequences]
        labels = np.asarray(labels)
        if labels.ndim == 0 or labels.shape[0] != len(sequences):
            raise DatasetError(f"SequenceDataset: {len(sequences)} sequences but labels of shape {labels.shape}; pass "
                               "one label per sequence.")
        for number, sequence in enumerate(sequences):
            first = sequences[0]
            if sequence.ndim == 0 or sequence.shape[1:] != first.shape[1:] or sequence.dtype != first.dtype:
                raise DatasetError(f"SequenceDataset: sequence {number} is {sequence.dtype} of shape {sequence.shape}, "
                                   f"but sequence 0 is {sequences[0].dtype} of shape {sequences[0].shape}; every "
                                   "sequence needs a length dimension first and the same dtype and other dimensions.")
        if len({input_node, label_node, length_node} - {None}) != 2 + (length_node is not None):
            raise DatasetError("SequenceDataset: input_node, label_node and length_node need distinct names.")
        self.sequences = sequences
        self.labels = labels
        self.lengths = np.array([len(sequence) for sequence in sequences], dtype=np.int64)
        self.lengths.flags.writeable = False
        self.pad_value = pad_value
        self.input_node, self.label_node, self.length_node = input_node, label_node, length_node

    def __len__(self) -> int:
        return len(self.sequences)

    def __getitem__(self, index: Index) -> Dict[str, np.ndarray]:
        if isinstance(index, numbers.Integral) and not isinstance(index, bool):
            if not -len(self) <= index < len(self):
                raise DatasetError(f"SequenceDataset index {index} out of range for {len(self)} sequences.")
            batch = {self.input_node: self.sequences[index].copy(), self.label_node: np.array(self.labels[index])}
            if self.length_node:
                batch[self.length_node] = np.array(self.lengths[index])
            return batch
        index = batch_indices(index, len(self), "SequenceDataset")
        lengths = self.lengths[index]
        first = self.sequences[0]
        padded = np.full((index.size, int(lengths.max(initial=0))) + first.shape[1:], self.pad_value, first.dtype)
        for row, example in enumerate(index):  # one copy per sequence: their lengths differ
            padded[row, :lengths[row]] = self.sequences[example]
        batch = {self.input_node: padded, self.label_node: self.labels[index]}
        if self.length_node:
            batch[self.length_node] = lengths
        return batch

    def __repr__(self) -> str:
        return (f"SequenceDataset({len(self)} sequences, lengths "
                f"{self.lengths.min(initial=0)}..{self.lengths.max(initial=0)})")


def check_batch(batch: Any, where: str = "a training step") -> None:
    """Raise :class:`ShapeError` unless ``batch`` is a dict of named tensors with at least one sample.

    A batch of 0 samples is refused here, before an executor runs it: the mean loss over no samples
    is NaN, which would otherwise be reported as divergence. A tensor whose first dimension is 0 makes
    the batch empty (the inputs of one batch share that dimension). ``where`` names the batch's source.

    >>> check_batch({"input": np.ones((2, 3)), "label": np.zeros(2)})
    >>> try:
    ...     check_batch({"input": np.ones((0, 3))}, "OrderedSampler, epoch 0")
    ... except ShapeError as err:
    ...     print(str(err)[:54])
    OrderedSampler, epoch 0: the batch is empty (0 samples
    """
    if not isinstance(batch, collections.abc.Mapping):
        raise ShapeError(f"{where}: a batch must be a dict of named arrays such as {{'input': x, 'label': y}}, "
                         f"got {type(batch).__name__}; a sampler over a d5 Dataset yields such dicts")
    if not batch:
        raise ShapeError(f"{where}: the batch is empty (a dict with no tensors); feed the network's inputs")
    for name, value in batch.items():
        shape = getattr(value, "shape", None)  # arrays only: a list may be a sequence input, empty by design
        if shape and shape[0] == 0:
            raise ShapeError(f"{where}: the batch is empty (0 samples: {name!r} has shape {tuple(shape)}); a step "
                             "needs at least one sample. Check the sampler, dataset and transforms that built it")


__all__ = ["Dataset", "NumpyDataset", "TokenWindowDataset", "SequenceDataset", "check_batch"]
