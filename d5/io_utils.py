"""File-writing helpers shared by datasets, results and reports: never leave a half-written file."""
from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import IO, Iterator

from d5.errors import D5Error


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w", **open_kwargs) -> Iterator[IO]:
    """Open a temporary file beside ``path``; on success rename it over ``path``, on error delete it.

    The rename is atomic on POSIX, so readers see either the old file or the complete new one.

    >>> import tempfile, pathlib
    >>> target = pathlib.Path(tempfile.mkdtemp()) / "result.json"
    >>> with atomic_write(target) as f:
    ...     _ = f.write("{}")
    >>> target.read_text()
    '{}'
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, mode, **open_kwargs) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
        raise


def check_writable(path: str | os.PathLike, what: str = "output file") -> Path:
    """Raise :class:`D5Error` unless :func:`atomic_write` could write ``path``; return it as a Path.

    Call it before long work whose result goes to ``path``, so a bad path fails in a second, not after
    the work (and the result) is lost. Nothing is left behind: missing parent directories are not
    created (atomic_write creates them), the nearest existing one must be a writable directory, and an
    existing parent is probed by creating and deleting a temporary file in it.

    >>> import tempfile, pathlib
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> check_writable(root / "new" / "result.json").name
    'result.json'
    >>> try:
    ...     check_writable(root, "--json path")
    ... except D5Error as err:
    ...     print("is a directory" in str(err))
    True
    """
    text = os.fspath(path)
    if not isinstance(text, str) or not text.strip():
        raise D5Error(f"{what}: expected a file path, got {path!r}")
    target = Path(text).expanduser()
    if target.is_dir() or text.endswith(os.sep):
        raise D5Error(f"{what} {text!r} is a directory; name a file such as {target / 'result.json'}")
    ancestor = target.parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise D5Error(f"{what} {text!r} cannot be written: {str(ancestor)!r} is a file, not a directory")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise D5Error(f"{what} {text!r} cannot be written: directory {str(ancestor)!r} is not writable; "
                      "choose a path you may write to")
    if ancestor == target.parent:  # the directory exists: try it for real (a read-only mount, a full quota)
        try:
            fd, probe = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".probe", dir=ancestor)
        except OSError as err:
            raise D5Error(f"{what} {text!r} cannot be written: {err.strerror or err}; choose another path") from None
        os.close(fd)
        os.unlink(probe)
    return target
