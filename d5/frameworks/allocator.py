"""Host memory for steady-state training: keep freed memory in the process instead of returning it to the OS.

A training step allocates and frees the same tensor sizes every step. With glibc's defaults, tensors above
the mmap threshold are mapped and unmapped each time, and freeing memory at the top of the heap trims it
back to the OS once more than the trim threshold is free -- so the next step page-faults it all in again.
Which frees trigger this depends on the order tensors die in: measured on ResNet-44 inference at batch 64,
the same torch model ran 124 ms per batch as eager code and 150 ms as a torch.fx GraphModule (which frees each
intermediate right after its last use), and both ran in 97-100 ms with the thresholds below. PyTorch has no
host-memory pool (TensorFlow and MXNet do); its tuning guide recommends jemalloc or tcmalloc for the same
reason. d5's native executors call :func:`keep_freed_memory` once per process, which every other loop in
the process (a hand-written baseline included) then enjoys too. ``D5_MALLOC_TUNING=0`` turns it off.

>>> keep_freed_memory() in (True, False)
True
"""
from __future__ import annotations

import ctypes
import logging
import os
import sys

#: glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
#: The largest mmap threshold glibc accepts on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX); bigger blocks are mapped.
_MMAP_THRESHOLD = 32 << 20
#: Keep up to this much free memory at the top of the heap (a step's peak is reused by the next step).
_TRIM_THRESHOLD = 1 << 30

_tuned: bool | None = None


def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds once per process (see the module docstring); True if they are.
    Nothing happens where the C library is not glibc or ``D5_MALLOC_TUNING=0``."""
    global _tuned
    if _tuned is None:
        _tuned = False
        if os.environ.get("D5_MALLOC_TUNING", "1") != "0" and sys.platform.startswith("linux"):
            try:
                mallopt = ctypes.CDLL("libc.so.6").mallopt
            except (OSError, AttributeError):  # musl or another C library: leave it alone
                return False
            _tuned = bool(mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD,
                                                                                         _TRIM_THRESHOLD))
            logging.getLogger("d5").info("d5: glibc malloc keeps freed memory (mmap threshold %d MiB, trim "
                                         "threshold %d MiB; D5_MALLOC_TUNING=0 turns this off)",
                                         _MMAP_THRESHOLD >> 20, _TRIM_THRESHOLD >> 20)
    return _tuned
