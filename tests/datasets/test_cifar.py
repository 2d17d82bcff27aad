"""CIFAR-10/100 loading from archives generated in the official layout and Python-2 pickle format."""
from __future__ import annotations

import os
import pickle
import pickletools
import socket

import numpy as np
import pytest

import d5.datasets
from d5.datasets import cifar, storage
from d5.errors import DatasetError

# The generator of official-format archives is shared with the recipe tests (conftest.py puts tests/support
# on sys.path); the short private names keep this module's tests as they were.
from cifar_archives import CIFAR10_ARCHIVE, CIFAR100_ARCHIVE, N, TRAIN_BATCHES
from cifar_archives import cifar10_archive as _cifar10_archive
from cifar_archives import cifar10_members as _cifar10_members
from cifar_archives import cifar100_members as _cifar100_members
from cifar_archives import python2_pickle as _python2_pickle
from cifar_archives import trusted_source as _trusting
from cifar_archives import write_tar_gz as _write_tar_gz

OFFICIAL_CIFAR10_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"


@pytest.fixture(autouse=True)
def isolated_data_dirs(tmp_path, monkeypatch):
    """Keep every test away from the user's real ~/.cache/d5 and $D5_DATA_DIR."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv(storage.DATA_DIR_ENV, raising=False)


def _expected(batches: dict, names) -> tuple:
    rows = np.concatenate([batches[n][b"data"] for n in names])
    labels = np.concatenate([batches[n][b"labels"] for n in names])
    return rows, labels


def test_generated_pickles_have_the_official_python2_opcodes():
    members, _ = _cifar10_members()
    ops = [(op.name, arg) for op, arg, _ in pickletools.genops(members["data_batch_1"])]
    assert ("PROTO", 2) in ops and ("GLOBAL", "numpy.core.multiarray _reconstruct") in ops
    assert ("SHORT_BINSTRING", "data") in ops and all("_codecs" not in str(arg) for _, arg in ops)
    loaded = pickle.loads(members["data_batch_1"], encoding="bytes")
    assert set(loaded) == {b"batch_label", b"labels", b"data", b"filenames"} and loaded[b"data"].dtype == np.uint8


# --- loading ----------------------------------------------------------------------------------------

def test_cifar10_from_d5_data_dir_round_trips_every_pixel_and_label(tmp_path, monkeypatch):
    _, batches = _cifar10_archive(tmp_path / "data" / "cifar10", monkeypatch)
    monkeypatch.setenv(storage.DATA_DIR_ENV, str(tmp_path / "data"))

    train, test = d5.datasets.load("CIFAR10", download=False, normalize=False)

    assert (len(train), len(test)) == (5 * N, N)
    assert train.data.shape == (5 * N, 3, 32, 32) and train.data.dtype == np.float32
    assert train.labels.dtype == np.int64
    for dataset, names in ((train, TRAIN_BATCHES), (test, ["test_batch"])):
        rows, labels = _expected(batches, names)  # batches 1..5 concatenated in order
        np.testing.assert_array_equal(dataset.labels, labels)
        np.testing.assert_array_equal(np.rint(dataset.data * 255).astype(np.uint8).reshape(len(rows), -1), rows)
    rows, _ = _expected(batches, TRAIN_BATCHES)
    for i, c, y, x in [(0, 0, 0, 0), (21, 1, 5, 30), (99, 2, 31, 31), (47, 2, 0, 17)]:
        assert train.data[i, c, y, x] == np.float32(rows[i, c * 1024 + y * 32 + x]) / np.float32(255)
    assert int(train[21]["label"]) == batches["data_batch_2"][b"labels"][1]


def test_cifar10_from_data_dir_looks_only_there(tmp_path, monkeypatch):
    _, batches = _cifar10_archive(tmp_path / "mine", monkeypatch)
    monkeypatch.setenv(storage.DATA_DIR_ENV, str(tmp_path / "elsewhere"))
    train, test = cifar.load_cifar10(data_dir=tmp_path / "mine", download=False, normalize=False)
    np.testing.assert_array_equal(test.labels, batches["test_batch"][b"labels"])
    with pytest.raises(DatasetError):
        cifar.load_cifar10(download=False)  # $D5_DATA_DIR/cifar10 is empty


def test_normalize_uses_the_training_sets_channel_statistics(tmp_path, monkeypatch):
    _, batches = _cifar10_archive(tmp_path / "data", monkeypatch)
    train, test = cifar.load_cifar10(data_dir=tmp_path / "data", download=False, normalize=True)

    raw_train = _expected(batches, TRAIN_BATCHES)[0].reshape(-1, 3, 1024) / 255.0
    mean, std = raw_train.mean(axis=(0, 2)), raw_train.std(axis=(0, 2))
    np.testing.assert_allclose(train.data.mean(axis=(0, 2, 3)), 0.0, atol=1e-5)
    np.testing.assert_allclose(train.data.std(axis=(0, 2, 3)), 1.0, atol=1e-5)
    raw_test = batches["test_batch"][b"data"].reshape(-1, 3, 32, 32) / 255.0
    np.testing.assert_allclose(test.data, (raw_test - mean[:, None, None]) / std[:, None, None], atol=1e-5)
    assert not train.data.flags.writeable  # shared, read-only arrays; batches are copies


def test_cifar100_fine_and_coarse_labels(tmp_path, monkeypatch):
    members, splits = _cifar100_members()
    archive = _write_tar_gz((tmp_path / CIFAR100_ARCHIVE), "cifar-100-python", members)
    monkeypatch.setattr(cifar, "CIFAR100", _trusting(cifar.CIFAR100, archive))

    fine_train, fine_test = cifar.load_cifar100(data_dir=tmp_path, download=False, normalize=False)
    coarse_train, coarse_test = d5.datasets.load("cifar100", data_dir=tmp_path, download=False, label="coarse")
    np.testing.assert_array_equal(fine_train.labels, splits["train"][b"fine_labels"])
    np.testing.assert_array_equal(fine_test.labels, splits["test"][b"fine_labels"])
    np.testing.assert_array_equal(coarse_train.labels, splits["train"][b"coarse_labels"])
    np.testing.assert_array_equal(coarse_test.labels, splits["test"][b"coarse_labels"])
    assert fine_train.data[3, 1, 2, 3] == np.float32(splits["train"][b"data"][3, 1024 + 2 * 32 + 3]) / np.float32(255)
    assert len(cifar.CIFAR100_FINE_CLASSES) == 100 and len(set(cifar.CIFAR100_FINE_CLASSES)) == 100
    assert len(cifar.CIFAR100_COARSE_CLASSES) == 20
    with pytest.raises(DatasetError, match="choose one of"):
        cifar.load_cifar100(data_dir=tmp_path, download=False, label="medium")


def test_a_replaced_archive_is_read_again(tmp_path, monkeypatch):
    archive, _ = _cifar10_archive(tmp_path / "data", monkeypatch)
    first = cifar.load_cifar10(data_dir=tmp_path / "data", download=False)[1].labels.copy()
    stat = archive.stat()
    archive, batches = _cifar10_archive(tmp_path / "data", monkeypatch, seed=1)
    os.utime(archive, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    second = cifar.load_cifar10(data_dir=tmp_path / "data", download=False)[1].labels
    np.testing.assert_array_equal(second, batches["test_batch"][b"labels"])
    assert not np.array_equal(first, second)


# --- download and missing files -----------------------------------------------------------------------

def test_download_from_a_file_url_lands_the_verified_archive(tmp_path, monkeypatch):
    _, batches = _cifar10_archive(tmp_path / "served", monkeypatch)
    monkeypatch.setenv(storage.DATA_DIR_ENV, str(tmp_path / "data"))

    train, _ = cifar.load_cifar10(base_url=(tmp_path / "served").as_uri() + "/", progress=False)

    assert os.listdir(tmp_path / "data" / "cifar10") == [CIFAR10_ARCHIVE]  # no temporary files left
    np.testing.assert_array_equal(train.labels, _expected(batches, TRAIN_BATCHES)[1])


def test_a_download_with_the_wrong_checksum_is_refused_and_not_saved(tmp_path, monkeypatch):
    _cifar10_archive(tmp_path / "served")  # the official SHA-256 cannot match a generated archive
    monkeypatch.setenv(storage.DATA_DIR_ENV, str(tmp_path / "data"))
    with pytest.raises(DatasetError) as info:
        cifar.load_cifar10(base_url=(tmp_path / "served").as_uri() + "/", progress=False)
    message = str(info.value)
    assert "checksum does not match" in message and cifar.CIFAR10.files[0].checksum.hexdigest in message
    target = tmp_path / "data" / "cifar10"
    assert not target.exists() or os.listdir(target) == []


def test_missing_and_offline_name_where_d5_looked_and_the_url(tmp_path, monkeypatch):
    monkeypatch.setenv(storage.DATA_DIR_ENV, str(tmp_path / "data"))
    with pytest.raises(DatasetError) as info:
        cifar.load_cifar10(download=False)
    message = str(info.value)
    assert str(tmp_path / "data" / "cifar10") in message and str(tmp_path / "home/.cache/d5/cifar10") in message
    assert OFFICIAL_CIFAR10_URL in message and "download=False" in message

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(DatasetError) as info:
        cifar.load_cifar100(base_url=f"http://127.0.0.1:{port}/", progress=False, normalize=False)
    message = str(info.value)
    assert f"http://127.0.0.1:{port}/{CIFAR100_ARCHIVE}" in message and "could not download" in message
    assert str(tmp_path / "data" / "cifar100") in message
    assert not (tmp_path / "data" / "cifar100").exists() or os.listdir(tmp_path / "data" / "cifar100") == []


# --- malformed archives ---------------------------------------------------------------------------------

def _batch(changes=None) -> bytes:
    batch = {b"batch_label": b"training batch 3 of 5", b"labels": [1] * N,
             b"data": np.zeros((N, 3072), np.uint8), b"filenames": [b"x.png"] * N}
    batch.update(changes or {})
    return _python2_pickle(batch)


@pytest.mark.parametrize("overrides, problem", [
    ({"data_batch_3": None}, "lacks cifar-10-batches-py/data_batch_3"),
    ({"data_batch_3": _batch({b"data": np.zeros((N, 3071), np.uint8)})}, "uint8 array of shape (N, 3072)"),
    ({"data_batch_3": _batch({b"data": np.zeros((N, 3072), np.int16)})}, "it is int16 of shape (20, 3072)"),
    ({"test_batch": _batch({b"labels": [0] * (N - 1) + [10]})}, "holds label 10 at index 19"),
    ({"test_batch": _batch({b"labels": [0] * (N - 1)})}, "holds 20 images but labels of shape (19,)"),
    ({"data_batch_3": _python2_pickle([b"not", b"a", b"dict"])}, "it holds a list"),
    ({"data_batch_3": _batch()[:-40]}, "not a readable pickle"),
    ({"batches.meta": _python2_pickle({b"label_names": [b"cat"]})}, "should name 10 classes"),
], ids=["missing-member", "bad-shape", "bad-dtype", "label-out-of-range", "label-count", "not-a-dict",
        "truncated-pickle", "bad-meta"])
def test_malformed_archives_are_refused_and_leave_nothing_behind(tmp_path, monkeypatch, overrides, problem):
    _cifar10_archive(tmp_path / "data", monkeypatch, **overrides)
    with pytest.raises(DatasetError) as info:
        cifar.load_cifar10(data_dir=tmp_path / "data", download=False)
    assert problem in str(info.value) and CIFAR10_ARCHIVE in str(info.value)
    assert os.listdir(tmp_path / "data") == [CIFAR10_ARCHIVE]


def test_a_pickle_that_calls_os_system_is_refused_before_it_runs(tmp_path, monkeypatch):
    marker = tmp_path / "pwned"
    evil = b"cos\nsystem\n(S'touch " + str(marker).encode() + b"'\ntR."
    _cifar10_archive(tmp_path / "data", monkeypatch, data_batch_2=evil)
    with pytest.raises(DatasetError) as info:
        cifar.load_cifar10(data_dir=tmp_path / "data", download=False)
    assert "os.system" in str(info.value) and "data_batch_2" in str(info.value)
    assert not marker.exists() and os.listdir(tmp_path / "data") == [CIFAR10_ARCHIVE]


def test_a_truncated_archive_is_refused(tmp_path, monkeypatch):
    archive, _ = _cifar10_archive(tmp_path / "data")
    archive.write_bytes(archive.read_bytes()[: archive.stat().st_size // 2])
    monkeypatch.setattr(cifar, "CIFAR10", _trusting(cifar.CIFAR10, archive))
    with pytest.raises(DatasetError, match="not a readable .tar.gz archive"):
        cifar.load_cifar10(data_dir=tmp_path / "data", download=False)
