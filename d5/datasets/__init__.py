"""Ready-made datasets: ``d5.datasets.load('fashion_mnist') -> (train, test)``; also ``'mnist'``,
``'cifar10'`` and ``'cifar100'`` (``load('cifar100', label='coarse')`` for the 20 superclasses).

Files are looked up in ``$D5_DATA_DIR/<name>``, ``~/.cache/d5/<name>``, well-known install locations,
and otherwise downloaded with a verified checksum (see :mod:`d5.datasets.storage`). Importing this
package reads and downloads nothing.

>>> import d5.datasets
>>> sorted(d5.datasets.DATASETS)
['cifar10', 'cifar100', 'fashion_mnist', 'mnist']
"""
from __future__ import annotations

from typing import Callable, Dict, Tuple

from d5.datasets.cifar import (CIFAR10_CLASSES, CIFAR100_COARSE_CLASSES, CIFAR100_FINE_CLASSES,
                               load_cifar10, load_cifar100)
from d5.datasets.mnist import FASHION_MNIST_CLASSES, load_fashion_mnist, load_mnist
from d5.errors import DatasetError
from d5.training.dataset import NumpyDataset

# name -> loader returning (train, test); other dataset modules register themselves here.
DATASETS: Dict[str, Callable[..., Tuple[NumpyDataset, NumpyDataset]]] = {
    "fashion_mnist": load_fashion_mnist,
    "mnist": load_mnist,
    "cifar10": load_cifar10,
    "cifar100": load_cifar100,
}


def load(name: str, *args, **kwargs):
    """Load a registered dataset by name; other arguments go to its loader (``data_dir``, ``download``, ...).

    Names are case-insensitive and '-' is read as '_' ('Fashion-MNIST' works).

    >>> try:
    ...     load("imagenet-22k")
    ... except DatasetError as err:
    ...     print("known datasets" in str(err))
    True
    """
    key = str(name).strip().lower().replace("-", "_")
    if key not in DATASETS:
        raise DatasetError(f"Unknown dataset {name!r}; known datasets: {', '.join(sorted(DATASETS))}.")
    return DATASETS[key](*args, **kwargs)


__all__ = ["DATASETS", "load", "load_fashion_mnist", "load_mnist", "FASHION_MNIST_CLASSES", "load_cifar10",
           "load_cifar100", "CIFAR10_CLASSES", "CIFAR100_FINE_CLASSES", "CIFAR100_COARSE_CLASSES"]
