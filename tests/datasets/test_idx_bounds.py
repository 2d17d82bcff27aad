"""IDX files from an untrusted source: the header is checked before the data is inflated, so a gzip bomb
or a header declaring a huge array is a DatasetError naming the file, never a MemoryError."""
from __future__ import annotations

import gzip
import struct
import tracemalloc
from types import SimpleNamespace

import numpy as np
import pytest

from d5.datasets.idx import read_idx
from d5.errors import DatasetError

MIB = 1 << 20


def _header(*shape: int) -> bytes:
    return struct.pack(">HBB", 0, 0x08, len(shape)) + struct.pack(f">{len(shape)}I", *shape)


def _bomb(header: bytes, payload: bytes = b"", gib: int = 1) -> bytes:
    """A gzip file of about 1 MiB per GiB that inflates to header + payload + ``gib`` GiB of zeros: gzip
    members concatenate, so one compressed MiB of zeros repeated 1024 times is a GiB."""
    zeros = gzip.compress(bytes(MIB), mtime=0)
    return gzip.compress(header + payload, mtime=0) + zeros * (1024 * gib)


def _read_with_peak(path) -> tuple[BaseException | None, int]:
    tracemalloc.start()
    try:
        read_idx(path)
        error = None
    except BaseException as err:  # noqa: BLE001 - the test asserts which one
        error = err
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return error, peak


def test_a_gzip_bomb_behind_a_small_header_is_refused_without_inflating_it(tmp_path):
    path = tmp_path / "labels-idx1-ubyte.gz"
    path.write_bytes(_bomb(_header(16), bytes(range(16))))
    assert path.stat().st_size < 2 * MIB
    error, peak = _read_with_peak(path)
    assert isinstance(error, DatasetError), error
    assert "needs 16 data bytes but the file has more" in str(error) and path.name in str(error)
    assert peak < 32 * MIB  # the GiB behind the declared 16 bytes was never inflated


def test_a_header_declaring_more_than_the_gzip_file_can_hold_is_refused_before_inflating(tmp_path):
    path = tmp_path / "images-idx3-ubyte.gz"
    path.write_bytes(gzip.compress(_header(2**32 - 1, 2**32 - 1, 2**32 - 1) + bytes(100), mtime=0))
    error, peak = _read_with_peak(path)
    assert isinstance(error, DatasetError), error
    message = str(error)
    assert "needs 79228162458924105385300197375 data bytes" in message
    assert "more than a gzip file of" in message and "decompression bomb" in message and path.name in message
    assert peak < MIB


def test_a_declared_size_beyond_available_memory_is_a_dataset_error(tmp_path, monkeypatch):
    # A real 1 GiB bomb whose header declares exactly the GiB it holds: possible for its size, so only the
    # memory check stands between it and a MemoryError (or the OOM killer) on a small machine.
    import psutil

    path = tmp_path / "images-idx3-ubyte.gz"
    path.write_bytes(_bomb(_header(1024, 1024, 1024)))
    monkeypatch.setattr(psutil, "virtual_memory", lambda: SimpleNamespace(available=512 * MIB))
    error, peak = _read_with_peak(path)
    assert isinstance(error, DatasetError) and not isinstance(error, MemoryError), error
    assert "(1.0 GiB), more than the 0.5 GiB of memory available" in str(error) and path.name in str(error)
    assert peak < 32 * MIB


def test_a_plain_file_must_be_exactly_header_plus_declared_payload(tmp_path):
    path = tmp_path / "images-idx3-ubyte"
    path.write_bytes(_header(60000, 28, 28) + bytes(100))  # declares 47 MB, holds 100 bytes
    error, peak = _read_with_peak(path)
    assert isinstance(error, DatasetError), error
    assert "needs 47040000 data bytes but the file has 100" in str(error)
    assert peak < MIB  # checked against the file size before a buffer is allocated


def test_multi_member_gzip_files_that_hold_exactly_the_declared_array_still_load(tmp_path):
    array = np.arange(3 * 1000, dtype=np.uint8).reshape(3, 1000) % 7
    raw = _header(3, 1000) + array.tobytes()
    path = tmp_path / "split-idx2-ubyte.gz"
    path.write_bytes(gzip.compress(raw[:700], mtime=0) + gzip.compress(raw[700:], mtime=0))  # gzip -c a b > c
    np.testing.assert_array_equal(read_idx(path), array)
