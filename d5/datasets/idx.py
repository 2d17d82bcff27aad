"""Read and write IDX files (the MNIST / Fashion-MNIST array format), plain or gzip-compressed.

Format (http://yann.lecun.com/exdb/mnist/): two zero bytes, a dtype code byte, a byte with the number
of dimensions ``ndim``, then ``ndim`` big-endian uint32 sizes, then the array in C order, big-endian.
Every structural fact is checked, so a truncated or corrupt file raises :class:`d5.errors.DatasetError`
naming the file instead of producing garbage or a low-level numpy/gzip traceback.
"""
from __future__ import annotations

import gzip
import os
import struct
import zlib
from pathlib import Path
from typing import BinaryIO

import numpy as np

from d5.errors import DatasetError
from d5.io_utils import atomic_write

# IDX dtype code -> big-endian numpy dtype.
IDX_DTYPES = {
    0x08: np.dtype(">u1"),
    0x09: np.dtype(">i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}
_GZIP_MAGIC = b"\x1f\x8b"
_REMEDY = "Delete it and download it again (or reinstall the package that provided it)."


def _corrupt(path, problem: str) -> DatasetError:
    return DatasetError(f"IDX file {os.fspath(path)!r} is truncated or corrupt: {problem}. {_REMEDY}")


# Deflate cannot expand data more than 1032-fold, so a .gz file of n bytes holds at most about 1032 * n
# bytes: a header declaring more is corrupt (or a decompression bomb) and is refused before inflating.
_MAX_DEFLATE_RATIO = 1032
_CHUNK_BYTES = 1 << 22


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """Parse an IDX file (gzip-compressed or not) into a read-only array in native byte order.

    The header is checked before the data is read: the file must hold exactly the declared array, and
    the declared size must be possible for the file (a gzip bomb is refused without inflating it) and
    fit in memory. Decompression is incremental, so no more than the declared size is ever inflated.

    >>> import tempfile, pathlib, numpy as np
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "labels-idx1-ubyte.gz"
    >>> write_idx(path, np.array([3, 1, 4], dtype=np.uint8))
    >>> read_idx(path).tolist()
    [3, 1, 4]
    """
    path = Path(path)
    compressed = False
    try:
        with open(path, "rb") as raw:
            # Decide by content, not by file name: users gunzip files or keep '.gz' on plain ones.
            compressed = raw.read(2) == _GZIP_MAGIC
            raw.seek(0)
            file_size = os.fstat(raw.fileno()).st_size
            stream = gzip.GzipFile(fileobj=raw, mode="rb") if compressed else raw
            return _parse(stream, path, file_size, compressed)
    except FileNotFoundError:
        raise DatasetError(f"IDX file {os.fspath(path)!r} does not exist.") from None
    except (EOFError, OSError, zlib.error) as err:  # gzip.BadGzipFile is an OSError
        if not compressed:
            raise DatasetError(f"Cannot read IDX file {os.fspath(path)!r}: {err}.") from None
        raise _corrupt(path, f"invalid gzip data ({err})") from None


def _parse(stream: BinaryIO, path: Path, file_size: int, compressed: bool) -> np.ndarray:
    head = stream.read(4)
    if len(head) < 4:
        raise _corrupt(path, f"only {len(head)} bytes, shorter than the 4-byte IDX header")
    zero, dtype_code, ndim = struct.unpack(">HBB", head)
    if zero != 0:
        raise _corrupt(path, f"wrong magic number 0x{head.hex()} (an IDX file starts with two zero bytes)")
    if dtype_code not in IDX_DTYPES:
        raise _corrupt(path, f"unknown IDX dtype code 0x{dtype_code:02x} (known: "
                             f"{', '.join(f'0x{code:02x}' for code in IDX_DTYPES)})")
    if ndim == 0:
        raise _corrupt(path, "the header declares 0 dimensions")
    dims = stream.read(4 * ndim)
    if len(dims) < 4 * ndim:
        raise _corrupt(path, f"the header declares {ndim} dimensions but the file ends inside it")
    shape = struct.unpack(f">{ndim}I", dims)
    dtype = IDX_DTYPES[dtype_code]
    expected = int(np.prod(shape, dtype=object)) * dtype.itemsize
    needs = f"shape {shape} of {dtype.name} needs {expected} data bytes"
    _check_declared_size(path, needs, expected, 4 + 4 * ndim, file_size, compressed)
    payload = np.empty(expected, dtype=np.uint8)
    filled = 0
    while filled < expected:  # chunk by chunk: never more than the declared size, never a second copy
        count = stream.readinto(memoryview(payload)[filled:filled + _CHUNK_BYTES])
        if not count:
            raise _corrupt(path, f"{needs} but the file has {filled}")
        filled += count
    if stream.read(1):
        raise _corrupt(path, f"{needs} but the file has more")
    array = payload.view(dtype).reshape(shape)
    if dtype.itemsize > 1:
        array = array.astype(dtype.newbyteorder("="))
    array.flags.writeable = False
    return array


def _check_declared_size(path: Path, needs: str, expected: int, header_size: int, file_size: int,
                         compressed: bool) -> None:
    """Refuse a declared data size the file cannot hold, or that would not fit in memory."""
    if not compressed and expected != file_size - header_size:
        raise _corrupt(path, f"{needs} but the file has {file_size - header_size}")
    if compressed and header_size + expected > _MAX_DEFLATE_RATIO * file_size:
        raise _corrupt(path, f"{needs}, more than a gzip file of {file_size} bytes can hold "
                             "(a corrupt header or a decompression bomb)")
    import psutil  # lazy: only a load needs it

    available = psutil.virtual_memory().available
    if expected > available:
        raise DatasetError(f"IDX file {os.fspath(path)!r}: {needs} ({expected / 2**30:.1f} GiB), more than the "
                           f"{available / 2**30:.1f} GiB of memory available. If the file is what you expect, "
                           f"free memory; otherwise it is corrupt. {_REMEDY}")


def write_idx(path: str | os.PathLike, array: np.ndarray, compress: bool | None = None) -> None:
    """Write ``array`` as an IDX file, atomically; gzip it when ``compress`` (default: name ends in .gz).

    >>> import tempfile, pathlib, numpy as np
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "images-idx3-ubyte"
    >>> write_idx(path, np.zeros((2, 28, 28), dtype=np.uint8))
    >>> path.stat().st_size == 4 + 3 * 4 + 2 * 28 * 28
    True
    """
    array = np.asarray(array)
    codes = {dtype.newbyteorder("=").str: code for code, dtype in IDX_DTYPES.items()}
    code = codes.get(array.dtype.newbyteorder("=").str)
    if code is None:
        raise DatasetError(
            f"write_idx: dtype {array.dtype} has no IDX code; use one of uint8, int8, int16, int32, "
            f"float32, float64.")
    if not 1 <= array.ndim <= 255:
        raise DatasetError(f"write_idx: an IDX array needs 1 to 255 dimensions; got {array.ndim}.")
    big_endian = array.astype(IDX_DTYPES[code], copy=False)
    content = struct.pack(">HBB", 0, code, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    content += np.ascontiguousarray(big_endian).tobytes()
    path = Path(path)
    if compress is None:
        compress = path.suffix == ".gz"
    if compress:
        # mtime=0: the same array always gives the same bytes (and the same checksum).
        content = gzip.compress(content, mtime=0)
    with atomic_write(path, "wb") as handle:
        handle.write(content)


__all__ = ["read_idx", "write_idx", "IDX_DTYPES"]
