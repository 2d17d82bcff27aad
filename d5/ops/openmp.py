"""The OpenMP runtime setting d5's own C++ code runs with (d5._C's kernels and compiled custom operators, which
share the system's libgomp).

How long (in spin iterations) idle OpenMP threads busy-wait before sleeping: libgomp's default spins for
~0.3 M iterations after every parallel region, which on a 2-core machine starved the BLAS threads of the matmul
that followed each kernel (a LeNet-5 training step: ~20 ms -> ~12 ms with a short spin). Under the thread
policy (``d5.frameworks.reference.kernels.set_num_threads``) no BLAS pool runs during a pass any more; measured
again on MobileNet v1 at batch 1, 0 and 10,000 tie and 300,000 is slower, so the short spin stays. It also
leaves the cores sooner to torch's own OpenMP runtime (the seeds' C++ ``ipowop`` inside torch: ~0.17 -> ~0.15
ms per forward on 1M floats). Applied only when the user set neither variable, and only while a library that
loads libgomp (which reads its settings once, when loaded) is imported.

>>> import os
>>> with short_openmp_spin():
...     inside = os.environ.get("GOMP_SPINCOUNT")
>>> inside == DEFAULT_GOMP_SPINCOUNT or "GOMP_SPINCOUNT" in os.environ or "OMP_WAIT_POLICY" in os.environ
True
"""
from __future__ import annotations

import contextlib
import os
from typing import Iterator

DEFAULT_GOMP_SPINCOUNT = "10000"


@contextlib.contextmanager
def short_openmp_spin() -> Iterator[None]:
    """Import libgomp-linked code inside this block to give it d5's short spin (see the module docstring)."""
    user_choice = any(name in os.environ for name in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT"))
    if not user_choice:
        os.environ["GOMP_SPINCOUNT"] = DEFAULT_GOMP_SPINCOUNT
    try:
        yield
    finally:
        if not user_choice:
            # Restore the environment so that runtimes loaded later (torch's own libgomp) are unaffected.
            os.environ.pop("GOMP_SPINCOUNT", None)
