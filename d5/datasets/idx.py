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


def _read_bytes(path: Path) -> bytes:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise DatasetError(f"IDX file {os.fspath(path)!r} does not exist.") from None
    except OSError as err:
        raise DatasetError(f"Cannot read IDX file {os.fspath(path)!r}: {err}.") from None
    # Decide by content, not by file name: users gunzip files or keep '.gz' on plain ones.
    if not raw.startswith(_GZIP_MAGIC):
        return raw
    try:
        return gzip.decompress(raw)
    except (EOFError, OSError, zlib.error) as err:  # gzip.BadGzipFile is an OSError
        raise _corrupt(path, f"invalid gzip data ({err})") from None


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """Parse an IDX file (gzip-compressed or not) into a read-only array in native byte order.

    >>> import tempfile, pathlib, numpy as np
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "labels-idx1-ubyte.gz"
    >>> write_idx(path, np.array([3, 1, 4], dtype=np.uint8))
    >>> read_idx(path).tolist()
    [3, 1, 4]
    """
    path = Path(path)
    payload = _read_bytes(path)
    if len(payload) < 4:
        raise _corrupt(path, f"only {len(payload)} bytes, shorter than the 4-byte IDX header")
    zero, dtype_code, ndim = struct.unpack(">HBB", payload[:4])
    if zero != 0:
        raise _corrupt(path, f"wrong magic number 0x{payload[:4].hex()} (an IDX file starts with two zero bytes)")
    if dtype_code not in IDX_DTYPES:
        raise _corrupt(path, f"unknown IDX dtype code 0x{dtype_code:02x} (known: "
                             f"{', '.join(f'0x{code:02x}' for code in IDX_DTYPES)})")
    if ndim == 0:
        raise _corrupt(path, "the header declares 0 dimensions")
    header_size = 4 + 4 * ndim
    if len(payload) < header_size:
        raise _corrupt(path, f"the header declares {ndim} dimensions but the file ends inside it")
    shape = struct.unpack(f">{ndim}I", payload[4:header_size])
    dtype = IDX_DTYPES[dtype_code]
    expected = int(np.prod(shape, dtype=object)) * dtype.itemsize
    actual = len(payload) - header_size
    if actual != expected:
        raise _corrupt(path, f"shape {shape} of {dtype.name} needs {expected} data bytes but the file has {actual}")
    array = np.frombuffer(payload, dtype=dtype, offset=header_size).reshape(shape)
    if dtype.itemsize > 1:
        array = array.astype(dtype.newbyteorder("="))
    array.flags.writeable = False
    return array


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
