"""Find a dataset's files on disk, or download them with a verified checksum and an atomic rename.

Lookup order for each file of a :class:`DatasetSource` named ``name``:

1. ``$D5_DATA_DIR/<name>/`` (when ``D5_DATA_DIR`` is set),
2. ``~/.cache/d5/<name>/``,
3. the source's well-known local install directories (e.g. Debian's ``/usr/share/datasets/...``),
4. a download from ``base_url + filename`` into the first of 1./2., written to a temporary file beside
   the target, checked against the recorded checksum and only then renamed into place, so a failed or
   corrupt download never leaves a file behind.

An explicit ``data_dir`` replaces 1.-3.: d5 looks there only and downloads there. Every file, found or
downloaded, must match one of its recorded checksums; a local file's checksum is computed once per
process (keyed by path, size and modification time).
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import http.client
import os
import tarfile
import urllib.parse
import urllib.request
import zlib
from pathlib import Path
from typing import Any, BinaryIO, Callable, Dict, Iterable, List, Optional, Tuple

from d5.errors import DatasetError
from d5.io_utils import atomic_write

DATA_DIR_ENV = "D5_DATA_DIR"
DEFAULT_TIMEOUT_S = 30.0
_CHUNK_BYTES = 1 << 20
_SUPPORTED_ALGORITHMS = ("sha256", "md5")


@dataclasses.dataclass(frozen=True)
class Checksum:
    """A file digest with its algorithm made explicit (``'sha256'`` or ``'md5'``).

    >>> Checksum("md5", "d41d8cd98f00b204e9800998ecf8427e").matches({"md5": "d41d8cd98f00b204e9800998ecf8427e"})
    True
    """

    algorithm: str
    hexdigest: str

    def __post_init__(self):
        if self.algorithm not in _SUPPORTED_ALGORITHMS:
            raise DatasetError(f"Checksum algorithm must be one of {_SUPPORTED_ALGORITHMS}; got {self.algorithm!r}.")

    def matches(self, digests: Dict[str, str]) -> bool:
        return digests.get(self.algorithm) == self.hexdigest.lower()

    def __str__(self) -> str:
        return f"{self.algorithm}:{self.hexdigest}"


@dataclasses.dataclass(frozen=True)
class RemoteFile:
    """One file of a dataset: its name, the checksum of the official download, and accepted variants.

    ``also_accepted`` lists checksums of known faithful repackagings (Debian recompresses the
    Fashion-MNIST ``.gz`` files, so their bytes differ from the download while the arrays are equal).

    >>> RemoteFile("labels.gz", Checksum("md5", "0" * 32)).accepted[0].algorithm
    'md5'
    """

    filename: str
    checksum: Checksum
    also_accepted: Tuple[Checksum, ...] = ()

    @property
    def accepted(self) -> Tuple[Checksum, ...]:
        return (self.checksum,) + tuple(self.also_accepted)


@dataclasses.dataclass(frozen=True)
class DatasetSource:
    """Where a dataset's files come from and how a user can get them by hand.

    >>> src = DatasetSource("toy", "Toy", "http://127.0.0.1:1/", (RemoteFile("a.gz", Checksum("md5", "0" * 32)),))
    >>> src.url("a.gz")
    'http://127.0.0.1:1/a.gz'
    """

    name: str                                 # directory name under the data directories
    title: str                                # human-readable name for messages
    base_url: str                             # official download location, ends with '/'
    files: Tuple[RemoteFile, ...]
    local_dirs: Tuple[str, ...] = ()          # well-known install locations, searched after d5's own
    install_hint: Optional[str] = None        # e.g. a package-manager command
    num_classes: Optional[int] = None         # classification: labels must lie in [0, num_classes)

    def url(self, filename: str, base_url: Optional[str] = None) -> str:
        base = base_url if base_url is not None else self.base_url
        return urllib.parse.urljoin(base if base.endswith("/") else base + "/", filename)

    def file(self, filename: str) -> RemoteFile:
        for remote in self.files:
            if remote.filename == filename:
                return remote
        raise DatasetError(f"{self.title} has no file {filename!r}; known: {[f.filename for f in self.files]}.")


def data_home() -> Path:
    """d5's data root: ``$D5_DATA_DIR`` if set, else ``~/.cache/d5``.

    >>> isinstance(data_home(), Path)
    True
    """
    configured = os.environ.get(DATA_DIR_ENV)
    return Path(configured).expanduser() if configured else Path("~/.cache/d5").expanduser()


def search_dirs(source: DatasetSource, data_dir: str | os.PathLike | None = None) -> List[Path]:
    """The directories searched for ``source``'s files, in order (see the module docstring).

    >>> [p.name for p in search_dirs(DatasetSource("toy", "Toy", "http://x/", ()), data_dir="/tmp/toy")]
    ['toy']
    """
    if data_dir is not None:
        return [Path(data_dir).expanduser()]
    dirs = []
    configured = os.environ.get(DATA_DIR_ENV)
    if configured:
        dirs.append(Path(configured).expanduser() / source.name)
    dirs.append(Path("~/.cache/d5").expanduser() / source.name)
    dirs.extend(Path(d) for d in source.local_dirs)
    unique = []
    for d in dirs:  # $D5_DATA_DIR may be ~/.cache/d5 itself
        if d not in unique:
            unique.append(d)
    return unique


@functools.lru_cache(maxsize=256)
def _file_digests(resolved_path: str, size: int, mtime_ns: int, algorithms: Tuple[str, ...]) -> Dict[str, str]:
    # Size and mtime are part of the cache key so a replaced file is hashed again.
    hashers = {name: hashlib.new(name) for name in algorithms}
    with open(resolved_path, "rb") as handle:
        for chunk in iter(lambda: handle.read(_CHUNK_BYTES), b""):
            for hasher in hashers.values():
                hasher.update(chunk)
    return {name: hasher.hexdigest() for name, hasher in hashers.items()}


def _algorithms(remote: RemoteFile) -> Tuple[str, ...]:
    return tuple(sorted({c.algorithm for c in remote.accepted}))


def verify_file(path: str | os.PathLike, remote: RemoteFile) -> None:
    """Raise :class:`DatasetError` unless the file at ``path`` matches one of ``remote``'s checksums.

    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "empty"
    >>> path.write_bytes(b"")
    0
    >>> verify_file(path, RemoteFile("empty", Checksum("md5", "d41d8cd98f00b204e9800998ecf8427e")))
    """
    path = Path(path)
    try:
        stat = path.stat()
        digests = _file_digests(str(path.resolve()), stat.st_size, stat.st_mtime_ns, _algorithms(remote))
    except OSError as err:
        raise DatasetError(f"Cannot read dataset file {os.fspath(path)!r}: {err}.") from None
    if not any(c.matches(digests) for c in remote.accepted):
        raise DatasetError(
            f"Dataset file {os.fspath(path)!r} does not match its recorded checksum "
            f"({', '.join(map(str, remote.accepted))}; the file has "
            f"{', '.join(f'{k}:{v}' for k, v in sorted(digests.items()))}): it is truncated, corrupt or a "
            f"different version. Delete it and run again to download it afresh.")


def download_file(url: str, target: str | os.PathLike, remote: RemoteFile,
                  timeout: float = DEFAULT_TIMEOUT_S, progress: bool = True) -> Path:
    """Download ``url`` to ``target``: stream into a temporary file beside it, verify, then rename.

    On any failure (network error, short read, checksum mismatch) the temporary file is removed and
    :class:`DatasetError` is raised; an existing ``target`` is left untouched.

    >>> import tempfile, pathlib
    >>> bad = RemoteFile("x", Checksum("md5", "0" * 32))
    >>> try:
    ...     download_file("http://127.0.0.1:9/x", pathlib.Path(tempfile.mkdtemp()) / "x", bad, timeout=2)
    ... except DatasetError as err:
    ...     print("could not download" in str(err))
    True
    """
    from tqdm import tqdm  # imported here: only downloads need it, and `import d5` stays light

    target = Path(target)
    hashers = {name: hashlib.new(name) for name in _algorithms(remote)}
    try:
        with atomic_write(target, "wb") as handle:
            with urllib.request.urlopen(url, timeout=timeout) as response:
                length = response.headers.get("Content-Length")
                total = int(length) if length and length.isdigit() else None
                received = 0
                with tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024,
                          desc=remote.filename, disable=not progress, leave=False) as bar:
                    for chunk in iter(lambda: response.read(_CHUNK_BYTES), b""):
                        handle.write(chunk)
                        for hasher in hashers.values():
                            hasher.update(chunk)
                        received += len(chunk)
                        bar.update(len(chunk))
            if total is not None and received != total:
                raise DatasetError(
                    f"Download of {url} was cut short: received {received} of {total} bytes. Run again.")
            digests = {name: hasher.hexdigest() for name, hasher in hashers.items()}
            if not any(c.matches(digests) for c in remote.accepted):
                # Raising inside atomic_write deletes the temporary file: nothing corrupt lands.
                raise DatasetError(
                    f"Downloaded {url} but its checksum does not match: expected "
                    f"{', '.join(map(str, remote.accepted))}, got "
                    f"{', '.join(f'{k}:{v}' for k, v in sorted(digests.items()))}. The server sent a "
                    f"different or damaged file; nothing was saved. Try again later or fetch the file by hand.")
    except DatasetError:
        raise
    except (OSError, http.client.HTTPException, ValueError) as err:
        # URLError, HTTPError, timeouts and refused connections are all OSErrors.
        raise DatasetError(f"d5 could not download {url}: {err}") from None
    return target


def _missing_message(source: DatasetSource, filename: str, looked_in: List[Path], url: str,
                     reason: str, data_dir) -> str:
    where = "\n".join(f"  - {d}" for d in looked_in)
    ways = []
    if source.install_hint:
        ways.append(f"`{source.install_hint}`")
    if data_dir is not None:
        ways.append(f"put the files in {Path(data_dir).expanduser()}")
    else:
        ways.append(f"put the files in ${DATA_DIR_ENV}/{source.name} (now {data_home() / source.name})")
    ways.append(f"download {url} by hand")
    return (f"{source.title} file {filename!r} is missing. d5 looked in:\n{where}\n{reason}\n"
            f"To get it: {', or '.join(ways)}.")


def fetch_files(source: DatasetSource, data_dir: str | os.PathLike | None = None, download: bool = True,
                base_url: Optional[str] = None, timeout: float = DEFAULT_TIMEOUT_S,
                progress: bool = True) -> Dict[str, Path]:
    """Return ``{filename: verified local path}`` for every file of ``source``, downloading if needed.

    ``base_url`` overrides ``source.base_url`` (a mirror, or a local server in tests).

    >>> src = DatasetSource("toy", "Toy", "http://127.0.0.1:9/", ())
    >>> fetch_files(src, download=False)
    {}
    """
    looked_in = search_dirs(source, data_dir)
    download_dir = Path(data_dir).expanduser() if data_dir is not None else data_home() / source.name
    found: Dict[str, Path] = {}
    for remote in source.files:
        path = next((d / remote.filename for d in looked_in if (d / remote.filename).is_file()), None)
        if path is None:
            url = source.url(remote.filename, base_url)
            if not download:
                raise DatasetError(_missing_message(
                    source, remote.filename, looked_in, url,
                    f"download=False, so d5 did not try {url}.", data_dir))
            try:
                path = download_file(url, download_dir / remote.filename, remote, timeout=timeout,
                                     progress=progress)
            except DatasetError as err:
                raise DatasetError(_missing_message(
                    source, remote.filename, looked_in, url, f"Downloading it failed: {err}", data_dir)) from None
        else:
            verify_file(path, remote)  # a download was verified while streaming
        found[remote.filename] = path
    return found



def read_archive_members(path: str | os.PathLike, wanted: Iterable[str], read: Callable[[BinaryIO, str], Any],
                         max_member_bytes: int) -> Dict[str, Any]:
    """``{member: read(file, source)}`` for the ``wanted`` members of the ``.tar.gz`` at ``path``, in one
    streamed pass over the gzip (member names with or without a leading ``./``); ``source`` names the member for
    messages. A damaged archive, or a wanted member that is missing, repeated, not a regular file or larger than
    ``max_member_bytes`` (not the official archive) is a :class:`DatasetError` saying to download it again."""
    wanted = list(wanted)
    found: Dict[str, Any] = {}
    try:
        with tarfile.open(path, mode="r|gz") as archive:  # a stream: the gzip is decompressed once
            for member in archive:
                name = member.name[2:] if member.name.startswith("./") else member.name
                if name not in wanted:
                    continue
                source = f"{os.fspath(path)!r} member {name!r}"
                if name in found:
                    raise DatasetError(f"{source} appears twice; the archive is not the official one.")
                if not member.isfile() or member.size > max_member_bytes:
                    raise DatasetError(f"{source} should be a regular file of at most {max_member_bytes} bytes; "
                                       "the archive is not the official one. Delete it and download it again.")
                found[name] = read(archive.extractfile(member), source)
    except DatasetError:
        raise
    except (tarfile.TarError, OSError, EOFError, zlib.error) as err:
        raise DatasetError(f"{os.fspath(path)!r} is not a readable .tar.gz archive ({err}). Delete it and "
                           "download it again.") from None
    missing = [name for name in wanted if name not in found]
    if missing:
        raise DatasetError(f"{os.fspath(path)!r} lacks {', '.join(missing)}: it is not the official archive "
                           f"(which holds {', '.join(wanted)}). Delete it and download it again.")
    return found


__all__ = ["Checksum", "RemoteFile", "DatasetSource", "data_home", "search_dirs", "verify_file", "read_archive_members",
           "download_file", "fetch_files", "DATA_DIR_ENV"]
