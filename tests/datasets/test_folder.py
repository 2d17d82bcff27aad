"""Image folder and file-list datasets: lazy PNG/JPEG decoding to float32 CHW, and errors that name the file."""
from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

import d5.datasets
from d5.datasets.folder import FileListDataset, ImageFolderDataset, decode_image, load_image_folder
from d5.errors import DatasetError
from d5.training.sampler import ShuffleSampler


def pixels(seed: int, height: int = 5, width: int = 6) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


def make_folder(root, layout: dict, size=(5, 6)) -> dict:
    """``layout`` = {class: number of images}; PNGs of random pixels (returned by path) plus one JPEG per class."""
    written = {}
    for number, (cls, count) in enumerate(sorted(layout.items())):
        (root / cls).mkdir(parents=True)
        for index in range(count):
            array = pixels(100 * number + index, *size)
            path = root / cls / f"{index:03d}.png"
            Image.fromarray(array).save(path)
            written[path] = array
        (root / cls / "notes.txt").write_text("not an image")
    return written


def test_image_folder_labels_by_sorted_class_and_decodes_exactly(tmp_path):
    written = make_folder(tmp_path, {"dog": 2, "cat": 3})
    Image.fromarray(pixels(9)).save(tmp_path / "cat" / "photo.JPG", quality=95)
    dataset = ImageFolderDataset(tmp_path)
    assert dataset.classes == ["cat", "dog"] and dataset.class_to_index == {"cat": 0, "dog": 1}
    assert len(dataset) == 6 and dataset.labels.tolist() == [0, 0, 0, 0, 1, 1]
    batch = dataset[np.array([5, 0])]
    assert batch["input"].shape == (2, 3, 5, 6) and batch["input"].dtype == np.float32
    for image, path in zip(batch["input"], (tmp_path / "dog" / "001.png", tmp_path / "cat" / "000.png")):
        np.testing.assert_array_equal(image, written[path].transpose(2, 0, 1) / np.float32(255.0))  # PNG: lossless
    jpeg = dataset[3]["input"]  # photo.JPG sorts after the PNGs; the oracle is Pillow's own decode
    expected = np.asarray(Image.open(tmp_path / "cat" / "photo.JPG").convert("RGB"), np.float32) / 255.0
    np.testing.assert_array_equal(jpeg, expected.transpose(2, 0, 1))


def test_images_are_decoded_lazily_and_unreadable_ones_named(tmp_path):
    make_folder(tmp_path, {"a": 2, "b": 1})
    dataset = ImageFolderDataset(tmp_path)
    (tmp_path / "a" / "001.png").write_bytes(b"\x89PNG truncated")  # damaged after listing: found on access
    assert dataset[0]["input"].shape == (3, 5, 6)
    with pytest.raises(DatasetError, match=r"Cannot read image '.*a/001.png'"):
        dataset[np.array([0, 1])]


def test_grayscale_and_resizing(tmp_path):
    make_folder(tmp_path / "small", {"x": 1}, size=(4, 4))
    make_folder(tmp_path / "big", {"x": 1}, size=(8, 10))
    (tmp_path / "mixed" / "x").mkdir(parents=True)
    for name in ("small", "big"):
        (tmp_path / name / "x" / "000.png").rename(tmp_path / "mixed" / "x" / f"{name}.png")
    with pytest.raises(DatasetError, match=r"mixes image sizes.*size=\(height, width\)"):
        ImageFolderDataset(tmp_path / "mixed")[np.array([0, 1])]
    resized = ImageFolderDataset(tmp_path / "mixed", channels=1, size=(6, 7))[np.array([0, 1])]["input"]
    assert resized.shape == (2, 1, 6, 7)
    oracle = Image.open(tmp_path / "mixed" / "x" / "big.png").convert("L").resize((7, 6), Image.BILINEAR)
    np.testing.assert_array_equal(resized[0, 0], np.asarray(oracle, np.float32) / 255.0)


def test_folder_errors_name_what_is_wrong(tmp_path):
    with pytest.raises(DatasetError, match="does not exist"):
        ImageFolderDataset(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetError, match="is empty: it has no class subdirectories"):
        ImageFolderDataset(tmp_path / "empty")
    make_folder(tmp_path / "partly", {"full": 1})
    (tmp_path / "partly" / "hollow").mkdir()
    (tmp_path / "partly" / "hollow" / "readme.txt").write_text("")
    with pytest.raises(DatasetError, match=r"Class folder '.*hollow' has no images"):
        ImageFolderDataset(tmp_path / "partly")
    with pytest.raises(DatasetError, match="channels must be 1"):
        ImageFolderDataset(tmp_path / "partly", channels=4)
    with pytest.raises(DatasetError, match=r"size must be None, an int or \(height, width\)"):
        ImageFolderDataset(tmp_path / "partly", size=(0, 3))


def test_load_image_folder_gives_the_test_split_the_train_classes(tmp_path):
    make_folder(tmp_path / "train", {"ant": 2, "bee": 2, "cow": 1})
    make_folder(tmp_path / "test", {"bee": 1, "cow": 2})  # no ant in the test split
    train, test = d5.datasets.load("image_folder", tmp_path)
    assert test.classes == train.classes == ["ant", "bee", "cow"]
    assert test.labels.tolist() == [1, 2, 2]
    make_folder(tmp_path / "other", {"dog": 1})
    with pytest.raises(DatasetError, match=r"class folders \['dog'\] that are not among"):
        load_image_folder(tmp_path, test="other")
    batches = list(ShuffleSampler(train, batch_size=2, seed=0))  # samplers read it like any dataset
    assert sorted(np.concatenate([b["label"] for b in batches]).tolist()) == [0, 0, 1, 1, 2]


def test_file_list_reads_paths_with_spaces_comments_and_absolute_paths(tmp_path):
    written = make_folder(tmp_path / "imgs", {"c": 2})
    (tmp_path / "imgs" / "c" / "000.png").rename(tmp_path / "imgs" / "c" / "with space.png")
    absolute = tmp_path / "imgs" / "c" / "001.png"
    (tmp_path / "train.txt").write_text(f"# path label\n\nimgs/c/with space.png 3\n  {absolute}\t0  \n")
    dataset = FileListDataset(tmp_path / "train.txt")
    assert len(dataset) == 2 and dataset.labels.tolist() == [3, 0]
    np.testing.assert_array_equal(dataset[1]["input"], written[absolute].transpose(2, 0, 1) / np.float32(255))
    (tmp_path / "elsewhere.txt").write_text("c/001.png 1\n")
    relative_to_root = FileListDataset(tmp_path / "elsewhere.txt", root=tmp_path / "imgs")
    assert relative_to_root.paths == [absolute]
    train, test = d5.datasets.load("file_list", tmp_path / "train.txt", tmp_path / "train.txt")
    assert len(train) == len(test) == 2


@pytest.mark.parametrize("lines, message", [
    ("a.png 0\nonlyapath.png\n", "line 2: expected 'path label'"),
    ("# header\na.png zero\n", "line 2: the label 'zero' is not an integer"),
    ("a.png -1\n", "line 1: label -1 is out of range"),
    ("a.png 0\n\nmissing.png 1\n", r"line 3: image '.*missing.png' does not exist"),
    ("# nothing\n\n", "lists no images"),
])
def test_a_bad_list_line_names_the_file_and_line(tmp_path, lines, message):
    Image.fromarray(pixels(0)).save(tmp_path / "a.png")
    (tmp_path / "list.txt").write_text(lines)
    with pytest.raises(DatasetError, match=message) as info:
        FileListDataset(tmp_path / "list.txt")
    assert "list.txt" in str(info.value)


def test_file_list_bounds_labels_by_num_classes(tmp_path):
    Image.fromarray(pixels(0)).save(tmp_path / "a.png")
    (tmp_path / "list.txt").write_text("a.png 10\n")
    with pytest.raises(DatasetError, match="line 1: label 10 is out of range.*< 10"):
        FileListDataset(tmp_path / "list.txt", num_classes=10)
    with pytest.raises(DatasetError, match="Cannot read the image list"):
        FileListDataset(tmp_path / "absent.txt")


def test_decode_image_refuses_what_is_not_an_image(tmp_path):
    (tmp_path / "fake.png").write_text("hello")
    with pytest.raises(DatasetError, match=r"Cannot read image '.*fake.png'.*not an image"):
        decode_image(tmp_path / "fake.png")
