"""Small CIFAR-10/100 archives in the official "python version" format, for tests.

The real archives cannot be downloaded on the test machines, so the loader tests (tests/datasets) and the
recipe tests (tests/recipes) generate archives that match the official ones byte-for-byte in layout: a
``.tar.gz`` with the batches under ``cifar-10-batches-py/`` (or ``cifar-100-python/``), each pickled with
protocol 2 as Python 2's cPickle wrote it. Test directories that use this module put ``tests/support`` on
``sys.path`` in their ``conftest.py`` (pytest runs with ``--import-mode=importlib``).

>>> members, batches = cifar10_members(n=2)
>>> sorted(members)[:3], batches["test_batch"][b"data"].shape
(['batches.meta', 'data_batch_1', 'data_batch_2'], (2, 3072))
"""
from __future__ import annotations

import dataclasses
import hashlib
import io
import pickle
import struct
import tarfile
from pathlib import Path

import numpy as np

from d5.datasets import cifar
from d5.datasets.storage import Checksum, RemoteFile

N = 20  # images per generated batch
CIFAR10_ARCHIVE = "cifar-10-python.tar.gz"
CIFAR100_ARCHIVE = "cifar-100-python.tar.gz"
TRAIN_BATCHES = [f"data_batch_{k}" for k in range(1, 6)]


class Python2Pickler(pickle._Pickler):
    """Protocol 2 as the official files were written by Python 2's cPickle: ``str`` (here: bytes) as
    BINSTRING opcodes, and numpy arrays rebuilt through ``numpy.core.multiarray._reconstruct``."""

    dispatch = dict(pickle._Pickler.dispatch)

    def save_python2_str(self, obj):
        header = pickle.SHORT_BINSTRING + bytes([len(obj)]) if len(obj) < 256 else \
            pickle.BINSTRING + struct.pack("<i", len(obj))
        self.write(header + obj)
        self.memoize(obj)

    dispatch[bytes] = save_python2_str

    def save_global(self, obj, name=None):
        if getattr(obj, "__name__", None) == "_reconstruct":
            self.write(pickle.GLOBAL + b"numpy.core.multiarray\n_reconstruct\n")
            self.memoize(obj)
        else:
            super().save_global(obj, name)


def python2_pickle(obj) -> bytes:
    buffer = io.BytesIO()
    Python2Pickler(buffer, protocol=2).dump(obj)
    return buffer.getvalue()


def write_tar_gz(path: Path, directory: str, members: dict) -> Path:
    """Write ``members`` ({name: bytes}) under ``directory/`` like `tar czf`, with the directory entry."""
    with tarfile.open(path, "w:gz") as archive:
        info = tarfile.TarInfo(directory)
        info.type, info.mode = tarfile.DIRTYPE, 0o755
        archive.addfile(info)
        for name, raw in members.items():
            info = tarfile.TarInfo(f"{directory}/{name}")
            info.size, info.mode = len(raw), 0o644
            archive.addfile(info, io.BytesIO(raw))
    return path


def overridden(members: dict, overrides: dict) -> dict:
    """``members`` with each of ``overrides`` replacing a member (or, where None, leaving it out)."""
    members = {**members, **overrides}
    return {name: raw for name, raw in members.items() if raw is not None}


def cifar10_members(seed: int = 0, n: int = N, **overrides) -> tuple:
    """Pickled members of a small CIFAR-10 archive (``n`` images per batch) and the arrays in them."""
    rng = np.random.default_rng(seed)
    batches = {}
    batch_labels = [f"training batch {k} of 5".encode() for k in range(1, 6)] + [b"testing batch 1 of 1"]
    for label, name in zip(batch_labels, TRAIN_BATCHES + ["test_batch"]):
        batches[name] = {
            b"batch_label": label,
            b"labels": [int(v) for v in rng.integers(0, 10, n)],
            b"data": rng.integers(0, 256, size=(n, 3072), dtype=np.uint8),
            b"filenames": [f"{name}_{j}.png".encode() for j in range(n)],
        }
    meta = {b"num_cases_per_batch": n, b"label_names": [c.encode() for c in cifar.CIFAR10_CLASSES],
            b"num_vis": 3072}
    # Not in the official order, and with the readme the archive also carries: order must not matter.
    members = {"batches.meta": python2_pickle(meta), "test_batch": python2_pickle(batches["test_batch"]),
               "readme.html": b"<html></html>"}
    for k in (3, 1, 5, 2, 4):
        members[f"data_batch_{k}"] = python2_pickle(batches[f"data_batch_{k}"])
    return overridden(members, overrides), batches


def cifar100_members(seed: int = 0, n: int = N, **overrides) -> tuple:
    rng = np.random.default_rng(seed)
    splits = {}
    for name in ("train", "test"):
        splits[name] = {
            b"filenames": [f"{name}_{j}.png".encode() for j in range(n)],
            b"batch_label": f"{name}ing batch 1 of 1".encode(),
            b"fine_labels": [int(v) for v in rng.integers(0, 100, n)],
            b"coarse_labels": [int(v) for v in rng.integers(0, 20, n)],
            b"data": rng.integers(0, 256, size=(n, 3072), dtype=np.uint8),
        }
    meta = {b"fine_label_names": [c.encode() for c in cifar.CIFAR100_FINE_CLASSES],
            b"coarse_label_names": [c.encode() for c in cifar.CIFAR100_COARSE_CLASSES]}
    members = {"meta": python2_pickle(meta), "test": python2_pickle(splits["test"]),
               "train": python2_pickle(splits["train"])}
    return overridden(members, overrides), splits


def trusted_source(source, archive: Path):
    """``source`` with the generated ``archive``'s SHA-256 in place of the official one."""
    digest = hashlib.sha256(Path(archive).read_bytes()).hexdigest()
    return dataclasses.replace(source, files=(RemoteFile(source.files[0].filename, Checksum("sha256", digest)),))


def cifar10_archive(directory: Path, monkeypatch=None, **overrides):
    """Write a generated CIFAR-10 archive into ``directory``; with ``monkeypatch``, make d5 trust it."""
    directory.mkdir(parents=True, exist_ok=True)
    members, batches = cifar10_members(**overrides)
    archive = write_tar_gz(directory / CIFAR10_ARCHIVE, "cifar-10-batches-py", members)
    if monkeypatch is not None:
        monkeypatch.setattr(cifar, "CIFAR10", trusted_source(cifar.CIFAR10, archive))
    return archive, batches
