"""MNIST and Fashion-MNIST as :class:`~d5.training.dataset.NumpyDataset` pairs (train, test).

Images come out as float32 of shape (N, 1, 28, 28) scaled to [0, 1] and, with ``normalize=True``,
standardized with the *training* set's mean and standard deviation (also applied to the test set, so no
test statistics leak into training). Labels are int64 class indices 0-9.

Parsed arrays are cached per process (keyed by the files' paths, sizes and modification times), so a
second load costs microseconds; the cached arrays are read-only, which makes sharing them between the
returned datasets safe (batches are copies and may be modified freely).
"""
from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Optional, Tuple

import numpy as np

from d5.datasets.idx import read_idx
from d5.datasets.storage import Checksum, DatasetSource, RemoteFile, fetch_files
from d5.errors import DatasetError
from d5.training.dataset import NumpyDataset

TRAIN_IMAGES = "train-images-idx3-ubyte.gz"
TRAIN_LABELS = "train-labels-idx1-ubyte.gz"
TEST_IMAGES = "t10k-images-idx3-ubyte.gz"
TEST_LABELS = "t10k-labels-idx1-ubyte.gz"

FASHION_MNIST_CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                         "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot")


def _md5(hexdigest: str) -> Checksum:
    return Checksum("md5", hexdigest)


def _sha256(hexdigest: str) -> Checksum:
    return Checksum("sha256", hexdigest)


# The official files' MD5s are the ones the dataset authors publish (README of
# zalandoresearch/fashion-mnist; torchvision uses the same). Debian's dataset-fashion-mnist recompresses
# the .gz files (gzip -n), so their bytes differ; their SHA-256s, computed from the Debian package
# 0.0~git20200523.55506a9-1, are accepted as faithful copies.
FASHION_MNIST = DatasetSource(
    name="fashion_mnist",
    title="Fashion-MNIST",
    base_url="http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",
    files=(
        RemoteFile(TRAIN_IMAGES, _md5("8d4fb7e6c68d591d4c3dfef9ec88bf0d"),
                   (_sha256("b0564c3eedabfbf835052cff8503ea422014ce006caf5b757f851416ee8300c7"),)),
        RemoteFile(TRAIN_LABELS, _md5("25c81989df183df01b3e8a0aad5dffbe"),
                   (_sha256("0ae29f65d86684f32d1b9c85147786c547b9c6aebcaf235f0400a0cce308b056"),)),
        RemoteFile(TEST_IMAGES, _md5("bef4ecab320f06d8554ea6380940ec79"),
                   (_sha256("cc1d090a38ace84dfa1aa66e3ada7c336ef481a96936906477e6dd344da56eaa"),)),
        RemoteFile(TEST_LABELS, _md5("bb300cfdad3c16e7a12a480ee83cd310"),
                   (_sha256("8d3605d196f4be44669e46906da9733c8131fef761fdbfec72c424d5222f1a05"),)),
    ),
    local_dirs=("/usr/share/datasets/fashion-mnist",),
    install_hint="apt-get install dataset-fashion-mnist",
    num_classes=len(FASHION_MNIST_CLASSES),
)

# PyTorch's mirror of Yann LeCun's MNIST files, with the MD5s torchvision publishes for them.
MNIST = DatasetSource(
    name="mnist",
    title="MNIST",
    base_url="https://ossci-datasets.s3.amazonaws.com/mnist/",
    files=(
        RemoteFile(TRAIN_IMAGES, _md5("f68b3c2dcbeaaa9fbdd348bbdeb94873")),
        RemoteFile(TRAIN_LABELS, _md5("d53e105ee54ea40749a09fcbcd1e9432")),
        RemoteFile(TEST_IMAGES, _md5("9fb629c4189551a2d022fa330f9573f3")),
        RemoteFile(TEST_LABELS, _md5("ec29112dd5afa0611ce80d1b7f02629c")),
    ),
    num_classes=10,
)


def _file_key(path: Path) -> Tuple[str, int, int]:
    stat = path.stat()
    return (str(path.resolve()), stat.st_size, stat.st_mtime_ns)


def _read_split(images_path: str, labels_path: str, num_classes: Optional[int]) -> Tuple[np.ndarray, np.ndarray]:
    images, labels = read_idx(images_path), read_idx(labels_path)
    if images.ndim != 3 or images.dtype != np.uint8:
        raise DatasetError(
            f"{images_path!r} should hold uint8 images of shape (N, rows, cols); it holds {images.dtype} "
            f"of shape {images.shape}. Is it the right file? Delete it and download it again.")
    if labels.ndim != 1 or labels.shape[0] != images.shape[0]:
        raise DatasetError(
            f"{labels_path!r} should hold {images.shape[0]} labels (one per image in {images_path!r}); it "
            f"holds shape {labels.shape}. The two files are from different datasets or versions.")
    check_labels(labels, num_classes, labels_path)
    return images, labels


def check_labels(labels: np.ndarray, num_classes: Optional[int], source: str) -> None:
    """Raise DatasetError unless ``labels`` are integer class indices in [0, num_classes) (no upper bound
    when ``num_classes`` is None). Checked at load time: a bad label would otherwise surface only as an
    error (or a silently wrong loss) in the middle of training.

    >>> check_labels(np.array([0, 9, 3], np.uint8), 10, "labels.gz")
    >>> try:
    ...     check_labels(np.array([0, 12], np.uint8), 10, "labels.gz")
    ... except DatasetError as err:
    ...     print(str(err)[:74])
    'labels.gz' holds label 12 at index 1, but the class range is 0..9 (10 cla
    """
    if labels.dtype.kind not in "iu":
        raise DatasetError(f"{source!r} should hold integer class labels; it holds {labels.dtype}. Is it the right "
                           "file? Delete it and download it again.")
    if labels.size == 0:
        return
    low, high = int(labels.min()), int(labels.max())
    bad = low if low < 0 else high if num_classes is not None and high >= num_classes else None
    if bad is not None:
        index = int(np.flatnonzero(labels == bad)[0])
        allowed = "labels must be >= 0" if num_classes is None else \
            f"the class range is 0..{num_classes - 1} ({num_classes} classes)"
        raise DatasetError(f"{source!r} holds label {bad} at index {index}, but {allowed}. The file is corrupt or "
                           "from another dataset; delete it and download it again.")


def _pixel_stats(images: np.ndarray) -> Tuple[float, float]:
    # Exact mean/std of pixels/255 from integer sums (uint8 pixels, uint64 accumulators): no float64
    # copy of the whole set and no rounding drift over 47 million pixels.
    flat = images.ravel()
    count = float(flat.size)
    total = float(flat.sum(dtype=np.uint64))
    total_sq = float(np.einsum("i,i->", flat, flat, dtype=np.uint64, casting="unsafe"))
    mean = total / count
    variance = max(total_sq / count - mean * mean, 0.0)
    return mean / 255.0, float(np.sqrt(variance)) / 255.0


def _to_float(images: np.ndarray, mean: float, std: float) -> np.ndarray:
    scaled = images.astype(np.float32)[:, np.newaxis]  # (N, 1, rows, cols): one channel, NCHW
    np.divide(scaled, np.float32(255.0), out=scaled)
    if std != 1.0 or mean != 0.0:
        scaled -= np.float32(mean)
        scaled /= np.float32(std)
    scaled.flags.writeable = False
    return scaled


@functools.lru_cache(maxsize=4)
def _load_arrays(file_keys: Tuple[Tuple[str, int, int], ...], normalize: bool, num_classes: Optional[int]):
    (train_images, _, _), (train_labels, _, _), (test_images, _, _), (test_labels, _, _) = file_keys
    train_x, train_y = _read_split(train_images, train_labels, num_classes)
    test_x, test_y = _read_split(test_images, test_labels, num_classes)
    mean, std = _pixel_stats(train_x) if normalize else (0.0, 1.0)
    if std == 0.0:
        std = 1.0  # a constant image set (only in synthetic data) has nothing to scale
    arrays = []
    for images, labels in ((train_x, train_y), (test_x, test_y)):
        labels = labels.astype(np.int64)
        labels.flags.writeable = False
        arrays.append((_to_float(images, mean, std), labels))
    return tuple(arrays)


def load_idx_classification(source: DatasetSource, data_dir: str | os.PathLike | None = None,
                            download: bool = True, normalize: bool = True, base_url: Optional[str] = None,
                            progress: bool = True) -> Tuple[NumpyDataset, NumpyDataset]:
    """Load any MNIST-layout dataset (train/t10k images + labels as IDX files) as (train, test).

    ``data_dir``, ``download`` and ``base_url`` are passed to :func:`d5.datasets.storage.fetch_files`.
    Labels outside ``[0, source.num_classes)`` raise :class:`DatasetError` naming the file and the label.

    >>> train, test = load_idx_classification(FASHION_MNIST, download=False)  # doctest: +SKIP
    >>> train[0]['input'].shape                                              # doctest: +SKIP
    (1, 28, 28)
    """
    paths = fetch_files(source, data_dir=data_dir, download=download, base_url=base_url, progress=progress)
    keys = tuple(_file_key(paths[name]) for name in (TRAIN_IMAGES, TRAIN_LABELS, TEST_IMAGES, TEST_LABELS))
    (train_x, train_y), (test_x, test_y) = _load_arrays(keys, bool(normalize), source.num_classes)
    return NumpyDataset(train_x, train_y), NumpyDataset(test_x, test_y)


def load_fashion_mnist(data_dir: str | os.PathLike | None = None, download: bool = True,
                       normalize: bool = True, base_url: Optional[str] = None,
                       progress: bool = True) -> Tuple[NumpyDataset, NumpyDataset]:
    """Fashion-MNIST (60,000 train / 10,000 test, 10 classes: :data:`FASHION_MNIST_CLASSES`).

    Looks in ``$D5_DATA_DIR/fashion_mnist``, ``~/.cache/d5/fashion_mnist``, Debian's
    ``/usr/share/datasets/fashion-mnist`` (``apt-get install dataset-fashion-mnist``), then downloads.

    >>> train, test = load_fashion_mnist(download=False)  # doctest: +SKIP
    >>> len(train), len(test), train[0]['input'].shape   # doctest: +SKIP
    (60000, 10000, (1, 28, 28))
    """
    return load_idx_classification(FASHION_MNIST, data_dir, download, normalize, base_url, progress)


def load_mnist(data_dir: str | os.PathLike | None = None, download: bool = True,
               normalize: bool = True, base_url: Optional[str] = None,
               progress: bool = True) -> Tuple[NumpyDataset, NumpyDataset]:
    """MNIST handwritten digits (60,000 train / 10,000 test), from ``$D5_DATA_DIR/mnist`` or downloaded.

    >>> train, test = load_mnist()             # doctest: +SKIP
    >>> int(train[0]['label'])                 # doctest: +SKIP
    5
    """
    return load_idx_classification(MNIST, data_dir, download, normalize, base_url, progress)


__all__ = ["load_fashion_mnist", "load_mnist", "load_idx_classification", "FASHION_MNIST", "MNIST",
           "FASHION_MNIST_CLASSES"]
