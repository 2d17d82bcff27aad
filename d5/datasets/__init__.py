"""Ready-made datasets: ``d5.datasets.load('fashion_mnist') -> (train, test)``; also ``'mnist'``,
``'cifar10'`` and ``'cifar100'`` (``load('cifar100', label='coarse')`` for the 20 superclasses), ``'ptb'``
(Penn Treebank word windows for a language model, :mod:`d5.datasets.ptb`), ``'digits'`` (scikit-learn's 8x8
digits, offline), ``'synthetic'`` (a learnable synthetic task of any shape: ``load('synthetic', shape=(3, 32,
32), num_classes=10)``), ``'image_folder'`` (``load('image_folder', root)``: ``root/train/<class>/*.png`` and
``root/test/...``) and ``'file_list'`` (``load('file_list', 'train.txt', 'test.txt')``: ``path label`` lines).

Files are looked up in ``$D5_DATA_DIR/<name>``, ``~/.cache/d5/<name>``, well-known install locations,
and otherwise downloaded with a verified checksum (see :mod:`d5.datasets.storage`). Importing this
package reads and downloads nothing.

>>> import d5.datasets
>>> sorted(d5.datasets.DATASETS)
['cifar10', 'cifar100', 'digits', 'fashion_mnist', 'file_list', 'image_folder', 'mnist', 'ptb', 'synthetic']
"""
from __future__ import annotations

from typing import Callable, Dict, Tuple

from d5.datasets.cifar import (CIFAR10_CLASSES, CIFAR100_COARSE_CLASSES, CIFAR100_FINE_CLASSES,
                               load_cifar10, load_cifar100)
from d5.datasets.digits import load_digits
from d5.datasets.folder import FileListDataset, ImageFolderDataset, load_file_list, load_image_folder
from d5.datasets.mnist import FASHION_MNIST_CLASSES, load_fashion_mnist, load_mnist
from d5.datasets.ptb import PTBCorpus, load_ptb, load_ptb_corpus
from d5.datasets.synthetic import load_synthetic
from d5.errors import DatasetError
from d5.training.dataset import Dataset

# name -> loader returning (train, test); other dataset modules register themselves here.
DATASETS: Dict[str, Callable[..., Tuple[Dataset, Dataset]]] = {
    "fashion_mnist": load_fashion_mnist,
    "mnist": load_mnist,
    "cifar10": load_cifar10,
    "cifar100": load_cifar100,
    "ptb": load_ptb,
    "digits": load_digits,
    "synthetic": load_synthetic,
    "image_folder": load_image_folder,
    "file_list": load_file_list,
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
           "load_cifar100", "CIFAR10_CLASSES", "CIFAR100_FINE_CLASSES", "CIFAR100_COARSE_CLASSES", "load_ptb",
           "load_ptb_corpus", "PTBCorpus", "load_digits", "load_synthetic", "load_image_folder", "load_file_list",
           "ImageFolderDataset", "FileListDataset"]
