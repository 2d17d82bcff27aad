"""The fuzz worker: a long-lived subprocess that imports d5 once and runs the cases it is sent.

Started by :class:`fuzz_engine.Worker` as ``python fuzz_worker.py`` (this directory is then first on
sys.path); not meant to be run by hand. Protocol, on its stdin/stdout: length-prefixed pickles.
Parent -> worker: a case dict, or None to stop. Worker -> parent: ``("ready", pid)`` once, then per case
any number of ``("stage", name)`` (so that a crash can be placed) and one ``("done", result)``.

Before importing d5 the worker limits its address space (``D5_FUZZ_MEMORY_BYTES``) so that a runaway
allocation fails fast (MemoryError, or a C++ std::bad_alloc) instead of eating the machine, and turns
core dumps off. Its own stdout is moved to stderr, so that stray prints, Python's or C's, cannot corrupt
the protocol; faulthandler prints the Python stack of a crash to stderr, which the parent keeps.
"""
from __future__ import annotations

import os
import pickle
import struct
import sys
from typing import Any, BinaryIO

HEADER = struct.Struct("<Q")
MEMORY_VARIABLE = "D5_FUZZ_MEMORY_BYTES"


def pack(message: Any) -> bytes:
    payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return HEADER.pack(len(payload)) + payload


def _read_exactly(stream: BinaryIO, size: int) -> bytes | None:
    chunks, remaining = [], size
    while remaining:
        chunk = stream.read(remaining)
        if not chunk:
            return None
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def _receive(stream: BinaryIO) -> Any:
    header = _read_exactly(stream, HEADER.size)
    if header is None:
        return None
    payload = _read_exactly(stream, HEADER.unpack(header)[0])
    return None if payload is None else pickle.loads(payload)


def limit_resources(memory_bytes: int) -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if memory_bytes > 0:
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        limit = memory_bytes if hard == resource.RLIM_INFINITY else min(memory_bytes, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def main() -> int:
    limit_resources(int(os.environ.get(MEMORY_VARIABLE, "0")))
    protocol = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    import faulthandler

    faulthandler.enable()

    def send(message: Any) -> None:
        protocol.write(pack(message))

    # Import everything a case may need now, so that no case pays (or times out on) the imports.
    import fuzz_execute
    import d5  # noqa: F401
    from d5.frameworks import reference  # noqa: F401
    from d5.frameworks.reference.kernels import load_native

    load_native()
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        pass
    send(("ready", os.getpid()))
    while True:
        case = _receive(sys.stdin.buffer)
        if case is None:
            return 0
        send(("done", fuzz_execute.run_case(case, stage=lambda name: send(("stage", name)))))


if __name__ == "__main__":
    sys.exit(main())
