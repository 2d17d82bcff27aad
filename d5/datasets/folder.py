"""Image datasets from files: a folder with one subdirectory per class (torchvision's ``ImageFolder`` layout)
and a file list (a text file of ``path label`` lines).

Images (PNG, JPEG; anything Pillow reads with a listed extension) are decoded lazily, when a batch asks
for them, to float32 ``(C, H, W)`` scaled to [0, 1]: ``channels=3`` converts to RGB, ``channels=1`` to
grayscale. A batch stacks its images, so they must share a size; pass ``size=(height, width)`` to resize
each (bilinear) when they do not. Labels are int64. An unreadable image, an empty folder, a class folder
without images, or a bad list line raises :class:`~d5.errors.DatasetError` naming the file (and line).
"""
from __future__ import annotations

import numbers
import os
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from d5.errors import DatasetError
from d5.training.dataset import Dataset, Index, batch_indices

#: File name endings read as images (case-insensitive).
IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg")


def _check_size(size) -> Optional[Tuple[int, int]]:
    if size is None:
        return None
    pair = (size, size) if isinstance(size, numbers.Integral) and not isinstance(size, bool) else size
    if (not isinstance(pair, (tuple, list)) or len(pair) != 2
            or any(isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1 for v in pair)):
        raise DatasetError(f"size must be None, an int or (height, width) of positive ints; got {size!r}.")
    return int(pair[0]), int(pair[1])


def _check_channels(channels) -> int:
    if isinstance(channels, bool) or channels not in (1, 3):
        raise DatasetError(f"channels must be 1 (grayscale) or 3 (RGB); got {channels!r}.")
    return int(channels)


def decode_image(path: str | os.PathLike, channels: int = 3, size: Optional[Tuple[int, int]] = None) -> np.ndarray:
    """One image file as float32 ``(channels, H, W)`` in [0, 1], resized to ``size`` = (H, W) if given.

    >>> import tempfile, pathlib
    >>> from PIL import Image
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "red.png"
    >>> Image.new("RGB", (3, 2), (255, 0, 0)).save(path)
    >>> image = decode_image(path)
    >>> image.shape, image[:, 0, 0].tolist()
    ((3, 2, 3), [1.0, 0.0, 0.0])
    """
    from PIL import Image, UnidentifiedImageError  # Pillow comes with matplotlib; imported when images are read

    channels = _check_channels(channels)
    try:
        with Image.open(path) as image:
            image = image.convert("RGB" if channels == 3 else "L")
            if size is not None and image.size != (size[1], size[0]):
                image = image.resize((size[1], size[0]), Image.BILINEAR)
            pixels = np.asarray(image, dtype=np.float32)
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as err:  # Pillow raises all of these
        raise DatasetError(f"Cannot read image {os.fspath(path)!r}: {err}. The file is damaged or not an image; "
                           "replace or remove it.") from None
    pixels /= np.float32(255.0)
    return pixels[np.newaxis] if channels == 1 else pixels.transpose(2, 0, 1)


class ImageFilesDataset(Dataset):
    """Images at ``paths`` with integer ``labels``, decoded when indexed (the base of the two datasets below).

    >>> import tempfile, pathlib
    >>> from PIL import Image
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> for name, shade in (("a.png", 0), ("b.png", 255)):
    ...     Image.new("L", (4, 4), shade).save(root / name)
    >>> ds = ImageFilesDataset([root / "a.png", root / "b.png"], [0, 1], channels=1)
    >>> batch = ds[np.array([1, 0])]
    >>> batch["input"].shape, batch["input"][:, 0, 0, 0].tolist(), batch["label"].tolist()
    ((2, 1, 4, 4), [1.0, 0.0], [1, 0])
    """

    def __init__(self, paths: Sequence[str | os.PathLike], labels: Sequence[int], channels: int = 3,
                 size=None, input_node: str = "input", label_node: str = "label"):
        labels = np.asarray(labels)
        integers = np.issubdtype(labels.dtype, np.integer) or labels.size == 0
        if labels.ndim != 1 or len(paths) != labels.size or not integers:
            raise DatasetError(f"ImageFilesDataset needs one integer label per path; got {len(paths)} paths and "
                               f"labels {labels.dtype} of shape {labels.shape}.")
        self.paths = [Path(p) for p in paths]
        self.labels = labels.astype(np.int64)
        self.labels.flags.writeable = False
        self.channels = _check_channels(channels)
        self.size = _check_size(size)
        self.input_node, self.label_node = input_node, label_node

    def __len__(self) -> int:
        return len(self.paths)

    def _read(self, number: int) -> np.ndarray:
        return decode_image(self.paths[number], self.channels, self.size)

    def __getitem__(self, index: Index) -> Dict[str, np.ndarray]:
        if isinstance(index, numbers.Integral) and not isinstance(index, bool):
            if not -len(self) <= index < len(self):
                raise DatasetError(f"{type(self).__name__} index {index} out of range for {len(self)} images.")
            return {self.input_node: self._read(int(index)), self.label_node: np.array(self.labels[index])}
        index = batch_indices(index, len(self), type(self).__name__)
        images = [self._read(int(i)) for i in index]
        shapes = {image.shape for image in images}
        if len(shapes) > 1:
            sizes = sorted({shape[1:] for shape in shapes})
            raise DatasetError(f"{type(self).__name__}: a batch mixes image sizes {sizes[:4]}; pass size=(height, "
                               "width) to resize every image to one size.")
        data = np.stack(images) if images else np.zeros((0, self.channels) + (self.size or (0, 0)), np.float32)
        return {self.input_node: data, self.label_node: self.labels[index]}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({len(self)} images, channels={self.channels}, size={self.size})"


def _is_image(path: Path, extensions: Tuple[str, ...]) -> bool:
    return path.is_file() and path.name.lower().endswith(extensions)


class ImageFolderDataset(ImageFilesDataset):
    """``root/<class>/<image>``: the classes are the subdirectories in sorted order (label = position), the
    images every file with one of ``extensions`` in them, sorted by path (torchvision's ``ImageFolder``).
    ``classes`` fixes the class list (a test folder uses the train folder's, so labels agree); then a class
    may lack a folder, but every folder must be a listed class.

    >>> import tempfile, pathlib
    >>> from PIL import Image
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> for cls in ("cat", "dog"):
    ...     (root / cls).mkdir()
    ...     Image.new("RGB", (5, 4)).save(root / cls / "0.png")
    >>> ds = ImageFolderDataset(root)
    >>> ds.classes, ds.labels.tolist(), ds[1]["input"].shape
    (['cat', 'dog'], [0, 1], (3, 4, 5))
    """

    def __init__(self, root: str | os.PathLike, channels: int = 3, size=None,
                 extensions: Sequence[str] = IMAGE_EXTENSIONS, classes: Optional[Sequence[str]] = None,
                 input_node: str = "input", label_node: str = "label"):
        _check_channels(channels), _check_size(size)  # before scanning the folder: fail fast
        root = Path(root).expanduser()
        extensions = tuple(e.lower() for e in extensions)
        if not root.is_dir():
            raise DatasetError(f"Image folder {os.fspath(root)!r} does not exist or is not a directory; it should "
                               "hold one subdirectory of images per class.")
        found = sorted(entry.name for entry in root.iterdir() if entry.is_dir())
        given = classes is not None
        if classes is None:
            classes = found
            if not classes:
                raise DatasetError(f"Image folder {os.fspath(root)!r} is empty: it has no class subdirectories. "
                                   "Put each class's images in a subdirectory named after the class.")
        classes = list(classes)
        unknown = [name for name in found if name not in classes]
        if unknown:
            raise DatasetError(f"Image folder {os.fspath(root)!r} has class folders {unknown} that are not among "
                               f"the classes {classes}; remove them or pass a class list that includes them.")
        paths: List[Path] = []
        labels: List[int] = []
        for label, name in enumerate(classes):
            folder = root / name
            if given and not folder.exists():
                continue  # a given class list may name classes this split has no folder for
            images = sorted(p for p in folder.rglob("*") if _is_image(p, extensions)) if folder.is_dir() else []
            if not images:
                raise DatasetError(f"Class folder {os.fspath(folder)!r} has no images (files ending in "
                                   f"{', '.join(extensions)}); add some or remove the class.")
            paths.extend(images)
            labels.extend([label] * len(images))
        if not paths:
            raise DatasetError(f"Image folder {os.fspath(root)!r} is empty: none of the classes {classes} has a "
                               "folder of images in it.")
        super().__init__(paths, labels, channels, size, input_node, label_node)
        self.root = root
        self.classes = classes
        self.class_to_index = {name: index for index, name in enumerate(classes)}


class FileListDataset(ImageFilesDataset):
    """Images listed in a text file, one ``path label`` per line (``label`` a class index >= 0; a path may
    contain spaces; blank lines and lines starting with ``#`` are skipped). Relative paths are relative to
    ``root`` (default: the list file's directory). ``num_classes``, if given, bounds the labels.

    >>> import tempfile, pathlib
    >>> from PIL import Image
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> Image.new("RGB", (2, 2)).save(root / "x.jpg")
    >>> _ = (root / "train.txt").write_text("# path label\\nx.jpg 7\\n")
    >>> ds = FileListDataset(root / "train.txt")
    >>> len(ds), ds.labels.tolist()
    (1, [7])
    """

    def __init__(self, list_file: str | os.PathLike, root: str | os.PathLike | None = None, channels: int = 3,
                 size=None, num_classes: Optional[int] = None, input_node: str = "input", label_node: str = "label"):
        _check_channels(channels), _check_size(size)  # before reading the list: fail fast
        list_file = Path(list_file).expanduser()
        try:
            text = list_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise DatasetError(f"Cannot read the image list {os.fspath(list_file)!r}: {err}.") from None
        base = Path(root).expanduser() if root is not None else list_file.parent
        paths: List[Path] = []
        labels: List[int] = []
        for number, line in enumerate(text.splitlines(), start=1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            where = f"{os.fspath(list_file)!r} line {number}"
            parts = line.rsplit(None, 1)
            if len(parts) != 2:
                raise DatasetError(f"{where}: expected 'path label', got {line!r}.")
            name, label_text = parts
            try:
                label = int(label_text)
            except ValueError:
                raise DatasetError(f"{where}: the label {label_text!r} is not an integer class index.") from None
            if label < 0 or (num_classes is not None and label >= num_classes):
                bound = f" and < {num_classes}" if num_classes is not None else ""
                raise DatasetError(f"{where}: label {label} is out of range; labels are class indices >= 0{bound}.")
            path = Path(name).expanduser()
            path = path if path.is_absolute() else base / path
            if not path.is_file():
                raise DatasetError(f"{where}: image {os.fspath(path)!r} does not exist.")
            paths.append(path)
            labels.append(label)
        if not paths:
            raise DatasetError(f"The image list {os.fspath(list_file)!r} lists no images; add 'path label' lines.")
        super().__init__(paths, labels, channels, size, input_node, label_node)
        self.list_file = list_file


def load_image_folder(root: str | os.PathLike, train: str = "train", test: str = "test", channels: int = 3,
                      size=None, extensions: Sequence[str] = IMAGE_EXTENSIONS
                      ) -> Tuple[ImageFolderDataset, ImageFolderDataset]:
    """``root/<train>/<class>/...`` and ``root/<test>/<class>/...`` as (train, test); the test split uses the
    train split's classes, so a label means the same class in both.

    >>> train, test = load_image_folder("~/images", test="val", size=(32, 32))   # doctest: +SKIP
    """
    root = Path(root).expanduser()
    train_set = ImageFolderDataset(root / train, channels, size, extensions)
    return train_set, ImageFolderDataset(root / test, channels, size, extensions, classes=train_set.classes)


def load_file_list(train_list: str | os.PathLike, test_list: str | os.PathLike, root: str | os.PathLike | None = None,
                   channels: int = 3, size=None, num_classes: Optional[int] = None
                   ) -> Tuple[FileListDataset, FileListDataset]:
    """Two image lists (see :class:`FileListDataset`) as (train, test).

    >>> train, test = load_file_list("train.txt", "test.txt", root="~/images")   # doctest: +SKIP
    """
    return (FileListDataset(train_list, root, channels, size, num_classes),
            FileListDataset(test_list, root, channels, size, num_classes))


__all__ = ["ImageFilesDataset", "ImageFolderDataset", "FileListDataset", "load_image_folder", "load_file_list",
           "decode_image", "IMAGE_EXTENSIONS"]
