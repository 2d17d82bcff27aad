"""MNIST-family loading: IDX parsing, local lookup order, verified atomic downloads, the real Fashion-MNIST."""
from __future__ import annotations

import dataclasses
import functools
import gzip
import hashlib
import http.server
import os
import socket
import struct
import threading
from pathlib import Path

import numpy as np
import pytest

import d5.datasets
from d5.datasets import storage
from d5.datasets.idx import read_idx, write_idx
from d5.datasets.mnist import (FASHION_MNIST, TEST_IMAGES, TEST_LABELS, TRAIN_IMAGES, TRAIN_LABELS,
                               load_fashion_mnist, load_idx_classification)
from d5.datasets.storage import Checksum, DatasetSource, RemoteFile, fetch_files
from d5.errors import DatasetError

DEBIAN_DIR = Path("/usr/share/datasets/fashion-mnist")
FILENAMES = (TRAIN_IMAGES, TRAIN_LABELS, TEST_IMAGES, TEST_LABELS)


@pytest.fixture(autouse=True)
def isolated_data_dirs(tmp_path, monkeypatch):
    """Keep every test away from the user's real ~/.cache/d5 and $D5_DATA_DIR."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv(storage.DATA_DIR_ENV, raising=False)


def _write_toy_files(directory: Path, n_train: int = 50, n_test: int = 20, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    arrays = {
        TRAIN_IMAGES: rng.integers(0, 256, size=(n_train, 28, 28), dtype=np.uint8),
        TRAIN_LABELS: rng.integers(0, 10, size=n_train, dtype=np.uint8),
        TEST_IMAGES: rng.integers(0, 256, size=(n_test, 28, 28), dtype=np.uint8),
        TEST_LABELS: rng.integers(0, 10, size=n_test, dtype=np.uint8),
    }
    for name, array in arrays.items():
        write_idx(directory / name, array)
    return arrays


def _toy_source(files_dir: Path, base_url: str = "http://127.0.0.1:9/", local_dirs=()) -> DatasetSource:
    files = tuple(RemoteFile(name, Checksum("sha256", hashlib.sha256((files_dir / name).read_bytes()).hexdigest()))
                  for name in FILENAMES)
    return DatasetSource("toy_mnist", "Toy-MNIST", base_url, files, tuple(map(str, local_dirs)),
                         install_hint="apt-get install dataset-toy-mnist")


@pytest.fixture
def http_root(tmp_path):
    """Serve tmp_path/'served' over HTTP on 127.0.0.1; yields (directory, base_url)."""
    served = tmp_path / "served"
    served.mkdir()

    class QuietHandler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(served)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield served, f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _unused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# --- IDX format -------------------------------------------------------------------------------------

def test_read_idx_parses_hand_built_bytes_in_the_official_layout(tmp_path):
    images = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    raw = b"\x00\x00\x08\x03" + struct.pack(">III", 2, 3, 4) + images.tobytes()
    (tmp_path / "images-idx3-ubyte").write_bytes(raw)
    (tmp_path / "images-idx3-ubyte.gz").write_bytes(gzip.compress(raw))
    ints = np.array([-5, 70000, 2**31 - 1], dtype=np.int32)
    (tmp_path / "ints-idx1").write_bytes(b"\x00\x00\x0c\x01" + struct.pack(">I", 3) + ints.astype(">i4").tobytes())

    np.testing.assert_array_equal(read_idx(tmp_path / "images-idx3-ubyte"), images)
    np.testing.assert_array_equal(read_idx(tmp_path / "images-idx3-ubyte.gz"), images)
    parsed_ints = read_idx(tmp_path / "ints-idx1")
    np.testing.assert_array_equal(parsed_ints, ints)
    assert parsed_ints.dtype == np.int32 and parsed_ints.dtype.isnative
    # write_idx produces exactly the official bytes.
    write_idx(tmp_path / "rewritten", images)
    assert (tmp_path / "rewritten").read_bytes() == raw


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int16, np.int32, np.float32, np.float64])
@pytest.mark.parametrize("filename", ["a-idx", "a-idx.gz"])
def test_idx_round_trip(tmp_path, dtype, filename):
    array = (np.random.default_rng(1).standard_normal((3, 5, 2)) * 50).astype(dtype)
    write_idx(tmp_path / filename, array)
    assert (tmp_path / filename).read_bytes().startswith(b"\x1f\x8b") == filename.endswith(".gz")
    parsed = read_idx(tmp_path / filename)
    assert parsed.dtype == dtype and not parsed.flags.writeable
    np.testing.assert_array_equal(parsed, array)


def _valid_idx_bytes() -> bytes:
    return b"\x00\x00\x08\x02" + struct.pack(">II", 4, 5) + bytes(range(20))


@pytest.mark.parametrize("name, content, problem", [
    ("truncated-idx.gz", gzip.compress(_valid_idx_bytes()[:-3], mtime=0), "needs 20 data bytes but the file has 17"),
    ("too-long-idx", _valid_idx_bytes() + b"\x00", "needs 20 data bytes but the file has 21"),
    ("wrong-magic-idx", b"\x12\x34" + _valid_idx_bytes()[2:], "wrong magic number"),
    ("bad-dtype-idx", b"\x00\x00\x07\x02" + _valid_idx_bytes()[4:], "unknown IDX dtype code 0x07"),
    ("header-cut-idx", _valid_idx_bytes()[:6], "ends inside"),
    ("empty-idx", b"", "shorter than the 4-byte IDX header"),
    ("corrupt-idx.gz", b"\x1f\x8b\x08\x00" + b"garbage" * 10, "invalid gzip data"),
    ("cut-gzip-idx.gz", gzip.compress(_valid_idx_bytes(), mtime=0)[:15], "invalid gzip data"),
], ids=lambda value: value if isinstance(value, str) and len(value) < 40 else None)
def test_corrupt_idx_files_raise_dataset_error_naming_the_file(tmp_path, name, content, problem):
    (tmp_path / name).write_bytes(content)
    with pytest.raises(DatasetError) as info:
        read_idx(tmp_path / name)
    message = str(info.value)
    assert name in message and problem in message and "Delete it" in message


def test_write_idx_rejects_unsupported_dtype(tmp_path):
    with pytest.raises(DatasetError, match="uint8"):
        write_idx(tmp_path / "x-idx", np.zeros(3, dtype=np.uint64))
    assert not list(tmp_path.iterdir())


# --- local lookup -----------------------------------------------------------------------------------

def test_d5_data_dir_takes_precedence_over_cache_and_install_dirs(tmp_path, monkeypatch):
    installed, cache, configured = tmp_path / "usr_share", tmp_path / "home/.cache/d5/toy_mnist", tmp_path / "data"
    for directory in (installed, cache, configured / "toy_mnist"):
        directory.mkdir(parents=True)
        _write_toy_files(directory)
    source = _toy_source(installed, local_dirs=[installed])

    assert {p.parent for p in fetch_files(source, download=False).values()} == {cache}
    monkeypatch.setenv(storage.DATA_DIR_ENV, str(configured))
    assert {p.parent for p in fetch_files(source, download=False).values()} == {configured / "toy_mnist"}
    assert storage.search_dirs(source) == [configured / "toy_mnist", cache, installed]
    # An explicit data_dir is the only place searched.
    assert {p.parent for p in fetch_files(source, data_dir=installed, download=False).values()} == {installed}


@pytest.mark.skipif(not (DEBIAN_DIR / TRAIN_IMAGES).exists(), reason="Debian dataset-fashion-mnist not installed")
def test_d5_data_dir_wins_over_debian_fashion_mnist(tmp_path, monkeypatch):
    own = tmp_path / "data" / "fashion_mnist"
    own.mkdir(parents=True)
    for name in FILENAMES:
        (own / name).symlink_to(DEBIAN_DIR / name)
    assert {p.parent for p in fetch_files(FASHION_MNIST, download=False).values()} == {DEBIAN_DIR}
    monkeypatch.setenv(storage.DATA_DIR_ENV, str(tmp_path / "data"))
    assert {p.parent for p in fetch_files(FASHION_MNIST, download=False).values()} == {own}


def test_a_corrupt_local_file_is_reported_not_used(tmp_path, monkeypatch):
    monkeypatch.setenv(storage.DATA_DIR_ENV, str(tmp_path / "data"))
    directory = tmp_path / "data" / "toy_mnist"
    directory.mkdir(parents=True)
    _write_toy_files(directory)
    source = _toy_source(directory)
    (directory / TRAIN_LABELS).write_bytes(b"not the labels")
    with pytest.raises(DatasetError) as info:
        fetch_files(source, download=False)
    assert TRAIN_LABELS in str(info.value) and "Delete it" in str(info.value)


# --- download ---------------------------------------------------------------------------------------

def test_download_lands_verified_files_atomically(http_root, tmp_path, monkeypatch):
    served, base_url = http_root
    arrays = _write_toy_files(served)
    monkeypatch.setenv(storage.DATA_DIR_ENV, str(tmp_path / "data"))
    source = _toy_source(served, base_url="http://127.0.0.1:9/unreachable/")

    paths = fetch_files(source, base_url=base_url, progress=False)

    target = tmp_path / "data" / "toy_mnist"
    assert sorted(os.listdir(target)) == sorted(FILENAMES)  # no temporary files left over
    for name in FILENAMES:
        assert paths[name] == target / name
        assert (target / name).read_bytes() == (served / name).read_bytes()
    # Once downloaded, the files are found locally: the server is no longer needed.
    train, test = load_idx_classification(source, normalize=False, base_url="http://127.0.0.1:9/")
    np.testing.assert_allclose(train.data[:, 0], arrays[TRAIN_IMAGES] / 255.0, rtol=1e-6)
    np.testing.assert_array_equal(test.labels, arrays[TEST_LABELS])
    assert train.labels.dtype == np.int64 and train.data.dtype == np.float32


def test_checksum_mismatch_leaves_no_file_behind(http_root, tmp_path, monkeypatch):
    served, base_url = http_root
    _write_toy_files(served)
    monkeypatch.setenv(storage.DATA_DIR_ENV, str(tmp_path / "data"))
    good = _toy_source(served, base_url=base_url)
    wrong = RemoteFile(TRAIN_IMAGES, Checksum("sha256", "0" * 64))
    source = dataclasses.replace(good, files=(wrong,) + good.files[1:])

    with pytest.raises(DatasetError) as info:
        fetch_files(source, progress=False)

    message = str(info.value)
    assert "checksum does not match" in message and TRAIN_IMAGES in message
    target = tmp_path / "data" / "toy_mnist"
    assert not target.exists() or os.listdir(target) == []


def test_offline_fashion_mnist_explains_how_to_get_the_files(tmp_path, monkeypatch):
    monkeypatch.setenv(storage.DATA_DIR_ENV, str(tmp_path / "data"))
    offline = dataclasses.replace(FASHION_MNIST, local_dirs=())  # ignore this machine's Debian copy
    url = f"http://127.0.0.1:{_unused_port()}/"

    with pytest.raises(DatasetError) as info:
        fetch_files(offline, base_url=url, timeout=5, progress=False)

    message = str(info.value)
    for expected in ("apt-get install dataset-fashion-mnist", "$D5_DATA_DIR/fashion_mnist",
                     url + TRAIN_IMAGES, TRAIN_IMAGES, str(tmp_path / "data" / "fashion_mnist")):
        assert expected in message
    assert not (tmp_path / "data" / "fashion_mnist" / TRAIN_IMAGES).exists()


def test_download_false_does_not_touch_the_network(tmp_path):
    source = _toy_source(_make_dir(tmp_path / "elsewhere"))
    with pytest.raises(DatasetError, match="download=False"):
        fetch_files(source, download=False)


def _make_dir(directory: Path) -> Path:
    directory.mkdir(parents=True)
    _write_toy_files(directory)
    return directory


# --- loaders ----------------------------------------------------------------------------------------

def test_normalization_uses_training_statistics_for_both_splits(tmp_path):
    directory = _make_dir(tmp_path / "toy")
    source = _toy_source(directory)
    raw_train, raw_test = load_idx_classification(source, data_dir=directory, normalize=False)
    train, test = load_idx_classification(source, data_dir=directory, normalize=True)
    mean, std = raw_train.data.astype(np.float64).mean(), raw_train.data.astype(np.float64).std()
    assert abs(train.data.mean()) < 1e-5 and abs(train.data.std() - 1) < 1e-5
    np.testing.assert_allclose(test.data, (raw_test.data - mean) / std, rtol=1e-5, atol=1e-5)
    assert 0.0 <= raw_train.data.min() and raw_train.data.max() <= 1.0


def test_images_and_labels_of_different_lengths_are_rejected(tmp_path):
    directory = _make_dir(tmp_path / "toy")
    write_idx(directory / TEST_LABELS, np.zeros(7, dtype=np.uint8))
    with pytest.raises(DatasetError, match="different datasets"):
        load_idx_classification(_toy_source(directory), data_dir=directory)


@pytest.mark.parametrize("labels, problem", [
    (np.array([3, 10, 2] + [0] * 47, np.uint8), "holds label 10 at index 1, but the class range is 0..9 (10 classes)"),
    (np.array([0] * 49 + [255], np.uint8), "holds label 255 at index 49"),
    (np.array([0, 0, -1] + [0] * 47, np.int8), "holds label -1 at index 2"),
    (np.zeros(50, np.float32), "should hold integer class labels; it holds float32"),
], ids=["ten", "255", "negative", "float"])
def test_labels_outside_the_class_range_are_refused_at_load_time(tmp_path, labels, problem):
    directory = _make_dir(tmp_path / "toy")
    write_idx(directory / TRAIN_LABELS, labels)
    source = dataclasses.replace(_toy_source(directory), num_classes=10)
    with pytest.raises(DatasetError) as info:
        load_idx_classification(source, data_dir=directory)
    message = str(info.value)
    assert TRAIN_LABELS in message and problem in message


def test_the_official_sources_declare_ten_classes():
    assert d5.datasets.mnist.MNIST.num_classes == FASHION_MNIST.num_classes == 10


def test_load_by_name_and_unknown_name():
    assert {"fashion_mnist", "mnist", "cifar10", "cifar100", "ptb", "digits", "synthetic"} <= set(d5.datasets.DATASETS)
    with pytest.raises(DatasetError) as info:
        d5.datasets.load("cifar-1000")
    assert "fashion_mnist" in str(info.value) and "mnist" in str(info.value)


@pytest.mark.skipif(not (DEBIAN_DIR / TRAIN_IMAGES).exists(), reason="Debian dataset-fashion-mnist not installed")
def test_real_fashion_mnist_from_debian():
    train, test = d5.datasets.load("Fashion-MNIST", download=False, normalize=False)
    assert (len(train), len(test)) == (60000, 10000)
    assert train.data.shape == (60000, 1, 28, 28) and train.data.dtype == np.float32
    assert train.labels.dtype == np.int64
    np.testing.assert_array_equal(np.bincount(train.labels), [6000] * 10)
    np.testing.assert_array_equal(np.bincount(test.labels), [1000] * 10)
    assert train.data.min() == 0.0 and train.data.max() == 1.0
    assert abs(float(train.data.mean()) - 0.2860) < 1e-3  # the published Fashion-MNIST pixel mean

    normalized, _ = load_fashion_mnist(download=False)
    assert abs(float(normalized.data.mean())) < 1e-4 and abs(float(normalized.data.std()) - 1) < 1e-3
    again, _ = load_fashion_mnist(download=False)
    assert again.data is normalized.data  # parsed once per process
    # Shared arrays are read-only and batches are copies, so no caller can corrupt the cache.
    assert not normalized.data.flags.writeable
    batch = again[np.arange(4)]
    batch["input"][:] = 7.0
    assert normalized.data[0, 0, 0, 0] != 7.0
