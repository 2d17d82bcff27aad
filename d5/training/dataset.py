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


__all__ = ["Dataset", "NumpyDataset", "check_batch"]
