"""File-writing helpers shared by datasets, results and reports: never leave a half-written file."""
from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from pathlib import Path
from typing import IO, Iterator

from d5.errors import OutputPathError


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w", **open_kwargs) -> Iterator[IO]:
    """Open a temporary file beside ``path``; on success rename it over ``path``, on error delete it.

    The rename is atomic on POSIX, so readers see either the old file or the complete new one. Missing
    parent directories are created. Where the file cannot be written -- a directory that cannot be created,
    a read-only or full file system -- :class:`d5.errors.OutputPathError` says so (an OSError raised by the
    caller's own writes passes unchanged).

    >>> import tempfile, pathlib
    >>> target = pathlib.Path(tempfile.mkdtemp()) / "result.json"
    >>> with atomic_write(target) as f:
    ...     _ = f.write("{}")
    >>> target.read_text()
    '{}'
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise _directory_error(path, err) from None
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as err:
        raise _write_error(path, err) from None
    try:
        with os.fdopen(fd, mode, **open_kwargs) as handle:
            yield handle
            _flush_to_disk(handle, path)
        try:
            os.replace(tmp_name, path)
        except OSError as err:
            raise _write_error(path, err) from None
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
        raise


def _flush_to_disk(handle: IO, path: Path) -> None:
    # Buffered data reaches the disk here, so a full disk shows here rather than in the caller's write().
    try:
        handle.flush()
        os.fsync(handle.fileno())
    except OSError as err:
        raise _write_error(path, err) from None


def _directory_error(path: Path, err: OSError) -> OutputPathError:
    """``path``'s directory (``err.filename``: the one that failed) cannot be created."""
    directory = err.filename or path.parent
    return OutputPathError(f"cannot write {str(path)!r}: directory {str(directory)!r} cannot be created "
                           f"({err.strerror or err}); choose a path under a directory you may write to, or "
                           "create the directory first")


def _write_error(path: Path, err: OSError) -> OutputPathError:
    full = err.errno in (errno.ENOSPC, errno.EDQUOT)
    advice = "free some space, or choose a path on another disk" if full else "choose a path you may write to"
    return OutputPathError(f"cannot write {str(path)!r}: {err.strerror or err}; {advice}")


def check_writable(path: str | os.PathLike, what: str = "output file") -> Path:
    """Raise :class:`d5.errors.OutputPathError` unless :func:`atomic_write` could write ``path``; return it
    as a Path.

    Call it before long work whose result goes to ``path``, so a bad path fails in a second, not after
    the work (and the result) is lost. Nothing is left behind: missing parent directories are not
    created (atomic_write creates them), the nearest existing one must be a writable directory, and it is
    probed for real -- an existing parent by creating and deleting a temporary file in it, a missing one
    by creating and deleting a temporary directory where it would go (permission bits do not tell: root
    passes them everywhere, yet cannot create a directory in /proc).

    >>> import tempfile, pathlib
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> check_writable(root / "new" / "result.json").name
    'result.json'
    >>> try:
    ...     check_writable(root, "--json path")
    ... except OutputPathError as err:
    ...     print("is a directory" in str(err))
    True
    """
    text = os.fspath(path)
    if not isinstance(text, str) or not text.strip():
        raise OutputPathError(f"{what}: expected a file path, got {path!r}")
    target = Path(text).expanduser()
    if target.is_dir() or text.endswith(os.sep):
        raise OutputPathError(f"{what} {text!r} is a directory; name a file such as {target / 'result.json'}")
    ancestor = target.parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise OutputPathError(f"{what} {text!r} cannot be written: {str(ancestor)!r} is a file, not a directory")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise OutputPathError(f"{what} {text!r} cannot be written: directory {str(ancestor)!r} is not writable; "
                              "choose a path you may write to")
    if ancestor == target.parent:  # the directory exists: a read-only mount or a full quota shows here
        try:
            fd, probe = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".probe", dir=ancestor)
        except OSError as err:
            raise OutputPathError(f"{what} {text!r} cannot be written: {err.strerror or err}; choose another "
                                  "path") from None
        os.close(fd)
        os.unlink(probe)
    else:  # directories are missing: atomic_write must be able to create the first one in `ancestor`
        try:
            os.rmdir(tempfile.mkdtemp(prefix=".d5-probe.", dir=ancestor))
        except OSError as err:
            missing = ancestor / target.relative_to(ancestor).parts[0]
            raise OutputPathError(f"{what} {text!r} cannot be written: directory {str(missing)!r} cannot be "
                                  f"created in {str(ancestor)!r} ({err.strerror or err}); choose a path under a "
                                  "directory you may write to, or create the directory first") from None
    return target
