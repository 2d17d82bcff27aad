"""File-writing helpers shared by datasets, results and reports: never leave a half-written file."""
from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import IO, Iterator


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
