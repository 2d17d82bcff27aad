"""CIFAR-10 and CIFAR-100 as :class:`~d5.training.dataset.NumpyDataset` pairs (train, test).

The loaders read the official "python version" archives (``cifar-10-python.tar.gz``,
``cifar-100-python.tar.gz``) straight from the ``.tar.gz``: nothing is extracted, so nothing is ever
left half-written beside them. Files are found and downloaded as described in
:mod:`d5.datasets.storage` (``$D5_DATA_DIR/cifar10``, ``~/.cache/d5/cifar10``, then a verified download).

Images come out as float32 NCHW ``(N, 3, 32, 32)`` scaled to [0, 1] (as MNIST's loaders do) and, with
``normalize=True``, standardized per channel with the *training* set's mean and standard deviation (for
the real CIFAR-10 these are the familiar means (0.4914, 0.4822, 0.4465) and stds (0.2470, 0.2435, 0.2616)),
also applied to the test set so no test statistics leak into training. Labels are int64 class indices.

The archives hold pickles, and unpickling runs whatever a pickle names. d5 therefore unpickles with
:class:`_CifarUnpickler`, which resolves only the three numpy names an array needs; any other reference
(``os.system``, ...) is refused with :class:`~d5.errors.DatasetError` before anything runs.

Checksums: the authors publish MD5s (c58f30108f718f92721af3b95e74349a, eb9058c3a382ffc7106e4002c42a8d85);
d5 verifies the SHA-256 of the same archives instead, as recorded by Keras' ``cifar10``/``cifar100``
loaders and torchvision's dataset prototypes (the project's convention is sha256-verified downloads).
"""
from __future__ import annotations

import dataclasses
import functools
import importlib
import os
import pickle
import tarfile
import zlib
from pathlib import Path
from typing import Dict, Optional, Tuple

import numpy as np

from d5.datasets.mnist import _file_key, _pixel_stats, check_labels
from d5.datasets.storage import Checksum, DatasetSource, RemoteFile, fetch_files, read_archive_members
from d5.errors import DatasetError
from d5.training.dataset import NumpyDataset

CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")

CIFAR100_FINE_CLASSES = (
    "apple", "aquarium_fish", "baby", "bear", "beaver", "bed", "bee", "beetle", "bicycle", "bottle",
    "bowl", "boy", "bridge", "bus", "butterfly", "camel", "can", "castle", "caterpillar", "cattle",
    "chair", "chimpanzee", "clock", "cloud", "cockroach", "couch", "crab", "crocodile", "cup", "dinosaur",
    "dolphin", "elephant", "flatfish", "forest", "fox", "girl", "hamster", "house", "kangaroo", "keyboard",
    "lamp", "lawn_mower", "leopard", "lion", "lizard", "lobster", "man", "maple_tree", "motorcycle", "mountain",
    "mouse", "mushroom", "oak_tree", "orange", "orchid", "otter", "palm_tree", "pear", "pickup_truck", "pine_tree",
    "plain", "plate", "poppy", "porcupine", "possum", "rabbit", "raccoon", "ray", "road", "rocket",
    "rose", "sea", "seal", "shark", "shrew", "skunk", "skyscraper", "snail", "snake", "spider",
    "squirrel", "streetcar", "sunflower", "sweet_pepper", "table", "tank", "telephone", "television", "tiger",
    "tractor", "train", "trout", "tulip", "turtle", "wardrobe", "whale", "willow_tree", "wolf", "woman", "worm")

CIFAR100_COARSE_CLASSES = (
    "aquatic_mammals", "fish", "flowers", "food_containers", "fruit_and_vegetables",
    "household_electrical_devices", "household_furniture", "insects", "large_carnivores",
    "large_man-made_outdoor_things", "large_natural_outdoor_scenes", "large_omnivores_and_herbivores",
    "medium_mammals", "non-insect_invertebrates", "people", "reptiles", "small_mammals", "trees",
    "vehicles_1", "vehicles_2")

IMAGE_SHAPE = (3, 32, 32)  # each row of b"data" is the R, G and B planes of a 32x32 image, row-major
_ROW_BYTES = int(np.prod(IMAGE_SHAPE))
# The largest official member (CIFAR-100's train pickle) is 155 MB; a header claiming far more is not CIFAR.
_MAX_MEMBER_BYTES = 512 << 20


@dataclasses.dataclass(frozen=True)
class LabelKind:
    """One labelling of a CIFAR archive: the batch key holding it, the meta key naming its classes."""

    labels_key: bytes               # e.g. b"fine_labels"
    names_key: bytes                # e.g. b"fine_label_names" (in the meta pickle)
    classes: Tuple[str, ...]

    @property
    def name(self) -> str:
        return self.labels_key.decode()


@dataclasses.dataclass(frozen=True)
class CifarLayout:
    """Where an official CIFAR python archive keeps its pickles and which labellings they carry."""

    directory: str                  # the archive's top-level directory
    train_members: Tuple[str, ...]  # concatenated in this order
    test_members: Tuple[str, ...]
    meta_member: str
    label_kinds: Tuple[LabelKind, ...]

    def path(self, member: str) -> str:
        return f"{self.directory}/{member}"


CIFAR10_LAYOUT = CifarLayout(
    directory="cifar-10-batches-py",
    train_members=tuple(f"data_batch_{i}" for i in range(1, 6)),
    test_members=("test_batch",),
    meta_member="batches.meta",
    label_kinds=(LabelKind(b"labels", b"label_names", CIFAR10_CLASSES),),
)

CIFAR100_LAYOUT = CifarLayout(
    directory="cifar-100-python",
    train_members=("train",),
    test_members=("test",),
    meta_member="meta",
    label_kinds=(LabelKind(b"fine_labels", b"fine_label_names", CIFAR100_FINE_CLASSES),
                 LabelKind(b"coarse_labels", b"coarse_label_names", CIFAR100_COARSE_CLASSES)),
)


def _toronto_source(name: str, title: str, filename: str, sha256: str, num_classes: int) -> DatasetSource:
    return DatasetSource(name=name, title=title, base_url="https://www.cs.toronto.edu/~kriz/",
                         files=(RemoteFile(filename, Checksum("sha256", sha256)),), num_classes=num_classes)


CIFAR10 = _toronto_source("cifar10", "CIFAR-10", "cifar-10-python.tar.gz",
                          "6d958be074577803d12ecdefd02955f39262c83c16fe9348329d7fe0b5c001ce", len(CIFAR10_CLASSES))
CIFAR100 = _toronto_source("cifar100", "CIFAR-100", "cifar-100-python.tar.gz",
                           "85cd44d02ba6437773c5bbd22e183051d648de2e7d6b014e1ef29b855ba677a7",
                           len(CIFAR100_FINE_CLASSES))


def _numpy_reconstruct():
    # numpy 2 moved numpy.core to numpy._core; the official (2009) pickles name numpy.core.multiarray.
    for module in ("numpy._core.multiarray", "numpy.core.multiarray"):
        try:
            return importlib.import_module(module)._reconstruct
        except (ImportError, AttributeError):
            continue
    raise DatasetError("This numpy has no multiarray._reconstruct; d5 cannot read pickled CIFAR arrays with it.")


class _CifarUnpickler(pickle.Unpickler):
    """Unpickles plain data plus numpy arrays; every other global a pickle names is refused."""

    _ALLOWED = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
                ("numpy", "ndarray"), ("numpy", "dtype")}

    def __init__(self, file, source: str):
        super().__init__(file, encoding="bytes")  # Python 2 str -> bytes, as the files were written
        self.source = source

    def find_class(self, module, name):
        if (module, name) not in self._ALLOWED:
            raise DatasetError(
                f"{self.source} tries to load {module}.{name}, which is not part of a CIFAR batch (only numpy "
                f"arrays, lists and strings are). d5 refused to unpickle it: the file is not the official "
                f"archive and may be malicious. Delete it and download it again.")
        return _numpy_reconstruct() if name == "_reconstruct" else getattr(np, name)


def _unpickle_dict(handle, source: str) -> dict:
    try:
        value = _CifarUnpickler(handle, source).load()
    except (DatasetError, tarfile.TarError, OSError, zlib.error):  # the archive itself is damaged
        raise
    except Exception as err:  # a damaged pickle can fail in many ways (EOFError, ValueError, KeyError, ...)
        raise DatasetError(f"{source} is not a readable pickle ({type(err).__name__}: {err}). The archive is "
                           "corrupt; delete it and download it again.") from None
    if not isinstance(value, dict):
        raise DatasetError(f"{source} should hold a dict (a CIFAR batch); it holds a {type(value).__name__}. "
                           "Delete the archive and download it again.")
    return value


def _read_members(path: Path, wanted: Dict[str, str]) -> Dict[str, dict]:
    """Unpickle the archive members ``wanted`` ({member path: short name}) in one pass over the gzip."""
    return read_archive_members(path, wanted, _unpickle_dict, _MAX_MEMBER_BYTES)


def _batch_arrays(batch: dict, layout: CifarLayout, source: str) -> Tuple[np.ndarray, Dict[str, np.ndarray]]:
    data = batch.get(b"data")
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != _ROW_BYTES:
        described = (f"{data.dtype} of shape {data.shape}" if isinstance(data, np.ndarray)
                     else type(data).__name__)
        raise DatasetError(f"{source}: b'data' should be a uint8 array of shape (N, {_ROW_BYTES}) (N images of "
                           f"{IMAGE_SHAPE}); it is {described}. Delete the archive and download it again.")
    labels = {}
    for kind in layout.label_kinds:
        values = batch.get(kind.labels_key)
        if not isinstance(values, (list, np.ndarray)):
            raise DatasetError(f"{source} has no list of labels under {kind.labels_key!r} (keys: "
                               f"{sorted(map(repr, batch))}). Delete the archive and download it again.")
        array = np.asarray(values)
        if array.shape != (data.shape[0],):
            raise DatasetError(f"{source} holds {data.shape[0]} images but labels of shape {array.shape} under "
                               f"{kind.labels_key!r}. Delete the archive and download it again.")
        check_labels(array, len(kind.classes), f"{source} {kind.labels_key!r}")
        labels[kind.name] = array.astype(np.int64)
    return data, labels


def _check_meta(meta: dict, layout: CifarLayout, source: str) -> None:
    for kind in layout.label_kinds:
        names = meta.get(kind.names_key)
        if not isinstance(names, list) or len(names) != len(kind.classes):
            raise DatasetError(f"{source} should name {len(kind.classes)} classes under {kind.names_key!r}; "
                               "it does not. Delete the archive and download it again.")


def _read_only(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


def read_cifar_archive(path: str | os.PathLike, layout: CifarLayout) -> Dict[str, np.ndarray]:
    """Parse an official CIFAR python archive into read-only uint8 images and int64 labels.

    Returns ``{"train_images", "test_images"}`` of shape (N, 3, 32, 32) plus ``"train_<key>"`` and
    ``"test_<key>"`` for each label key of ``layout`` (``labels`` for CIFAR-10; ``fine_labels`` and
    ``coarse_labels`` for CIFAR-100). The checksum is not checked here (the loaders do that); a
    malformed archive (missing members, wrong shapes, labels out of range, a pickle naming anything but
    numpy arrays) raises :class:`DatasetError`.

    >>> import io, pickle, tarfile, tempfile, pathlib
    >>> batch = {b"data": np.arange(2 * 3072).astype(np.uint8).reshape(2, 3072), b"labels": [3, 1]}
    >>> meta = {b"label_names": [name.encode() for name in CIFAR10_CLASSES]}
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "cifar-10-python.tar.gz"
    >>> with tarfile.open(path, "w:gz") as tar:
    ...     for name in CIFAR10_LAYOUT.train_members + ("test_batch", "batches.meta"):
    ...         raw = pickle.dumps(meta if name == "batches.meta" else batch, protocol=4)
    ...         info = tarfile.TarInfo(CIFAR10_LAYOUT.path(name)); info.size = len(raw)
    ...         tar.addfile(info, io.BytesIO(raw))
    >>> arrays = read_cifar_archive(path, CIFAR10_LAYOUT)
    >>> arrays["train_images"].shape, arrays["test_labels"].tolist(), int(arrays["test_images"][1, 0, 0, 1])
    ((10, 3, 32, 32), [3, 1], 1)
    """
    path = Path(path)
    wanted = {layout.path(m): m for m in layout.train_members + layout.test_members + (layout.meta_member,)}
    members = _read_members(path, wanted)
    _check_meta(members[layout.path(layout.meta_member)], layout, f"{os.fspath(path)!r} member "
                f"{layout.path(layout.meta_member)!r}")
    arrays: Dict[str, np.ndarray] = {}
    for split, names in (("train", layout.train_members), ("test", layout.test_members)):
        parts = [_batch_arrays(members[layout.path(n)], layout, f"{os.fspath(path)!r} member {layout.path(n)!r}")
                 for n in names]
        images = np.concatenate([data for data, _ in parts]).reshape((-1,) + IMAGE_SHAPE)
        arrays[f"{split}_images"] = _read_only(images)
        for kind in layout.label_kinds:
            arrays[f"{split}_{kind.name}"] = _read_only(np.concatenate([labels[kind.name] for _, labels in parts]))
    return arrays


@functools.lru_cache(maxsize=2)
def _read_cached(file_key: Tuple[str, int, int], layout: CifarLayout) -> Dict[str, np.ndarray]:
    # Keyed by path, size and mtime: a replaced archive is read again. Only the uint8 arrays are kept
    # (~185 MB for CIFAR-10); the float copies belong to the returned datasets.
    return read_cifar_archive(file_key[0], layout)


def _to_float(images: np.ndarray, mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    scaled = images.astype(np.float32)
    np.divide(scaled, np.float32(255.0), out=scaled)
    scaled -= mean.astype(np.float32).reshape(1, -1, 1, 1)
    scaled /= std.astype(np.float32).reshape(1, -1, 1, 1)
    return _read_only(scaled)


def channel_stats(images: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Per-channel mean and standard deviation of uint8 NCHW ``images`` scaled to [0, 1] (float64).

    >>> mean, std = channel_stats(np.array([[[[0, 255]], [[51, 51]]]], np.uint8))
    >>> mean.tolist(), std.tolist()
    ([0.5, 0.2], [0.5, 0.0])
    """
    stats = [_pixel_stats(images[:, c]) for c in range(images.shape[1])]
    return np.array([m for m, _ in stats]), np.array([s for _, s in stats])


def load_cifar(source: DatasetSource, layout: CifarLayout, label: Optional[str] = None,
               data_dir: str | os.PathLike | None = None, download: bool = True, normalize: bool = True,
               base_url: Optional[str] = None, progress: bool = True) -> Tuple[NumpyDataset, NumpyDataset]:
    """Load any CIFAR-layout archive (``source`` has one file, laid out as ``layout``) as (train, test).

    ``label`` picks a label key of ``layout`` by its prefix (``"fine"`` for ``fine_labels``); None takes
    the first. ``data_dir``, ``download`` and ``base_url`` go to :func:`d5.datasets.storage.fetch_files`.

    >>> train, test = load_cifar(CIFAR100, CIFAR100_LAYOUT, label="coarse")  # doctest: +SKIP
    >>> int(train.labels.max())                                               # doctest: +SKIP
    19
    """
    kinds = {kind.name.rsplit("labels", 1)[0].rstrip("_") or kind.name: kind for kind in layout.label_kinds}
    if label is None:
        kind = layout.label_kinds[0]
    elif label in kinds:
        kind = kinds[label]
    else:
        raise DatasetError(f"{source.title} has no {label!r} labels; choose one of {sorted(kinds)}.")
    (archive,) = fetch_files(source, data_dir=data_dir, download=download, base_url=base_url,
                             progress=progress).values()
    arrays = _read_cached(_file_key(archive), layout)
    if normalize:
        mean, std = channel_stats(arrays["train_images"])
        std[std == 0.0] = 1.0  # a constant channel (only in synthetic data) has nothing to scale
    else:
        mean, std = np.zeros(IMAGE_SHAPE[0]), np.ones(IMAGE_SHAPE[0])
    return tuple(NumpyDataset(_to_float(arrays[f"{split}_images"], mean, std), arrays[f"{split}_{kind.name}"])
                 for split in ("train", "test"))


def load_cifar10(data_dir: str | os.PathLike | None = None, download: bool = True, normalize: bool = True,
                 base_url: Optional[str] = None, progress: bool = True) -> Tuple[NumpyDataset, NumpyDataset]:
    """CIFAR-10 (50,000 train / 10,000 test colour images, 10 classes: :data:`CIFAR10_CLASSES`).

    Looks for ``cifar-10-python.tar.gz`` in ``$D5_DATA_DIR/cifar10`` and ``~/.cache/d5/cifar10`` (or only
    in ``data_dir``), otherwise downloads it (163 MB) from the authors' site and checks its SHA-256.

    >>> train, test = load_cifar10()                          # doctest: +SKIP
    >>> len(train), len(test), train[0]['input'].shape        # doctest: +SKIP
    (50000, 10000, (3, 32, 32))
    """
    return load_cifar(CIFAR10, CIFAR10_LAYOUT, None, data_dir, download, normalize, base_url, progress)


def load_cifar100(data_dir: str | os.PathLike | None = None, download: bool = True, normalize: bool = True,
                  label: str = "fine", base_url: Optional[str] = None,
                  progress: bool = True) -> Tuple[NumpyDataset, NumpyDataset]:
    """CIFAR-100 (50,000 train / 10,000 test): ``label="fine"`` gives the 100 classes of
    :data:`CIFAR100_FINE_CLASSES`, ``label="coarse"`` the 20 superclasses of :data:`CIFAR100_COARSE_CLASSES`.

    Looks for ``cifar-100-python.tar.gz`` in ``$D5_DATA_DIR/cifar100`` and ``~/.cache/d5/cifar100`` (or
    only in ``data_dir``), otherwise downloads it (161 MB) and checks its SHA-256.

    >>> train, test = load_cifar100(label="coarse")           # doctest: +SKIP
    >>> CIFAR100_COARSE_CLASSES[int(train[0]['label'])]       # doctest: +SKIP
    'large_omnivores_and_herbivores'
    """
    return load_cifar(CIFAR100, CIFAR100_LAYOUT, label, data_dir, download, normalize, base_url, progress)


__all__ = ["load_cifar10", "load_cifar100", "load_cifar", "read_cifar_archive", "channel_stats", "CIFAR10",
           "CIFAR100", "CIFAR10_LAYOUT", "CIFAR100_LAYOUT", "CifarLayout", "LabelKind", "CIFAR10_CLASSES",
           "CIFAR100_FINE_CLASSES", "CIFAR100_COARSE_CLASSES"]
