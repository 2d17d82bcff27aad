"""Puts this directory (``mpi_jobs``: run a script under mpiexec, read each rank's report) and ``tests/support``
on sys.path: pytest runs with ``--import-mode=importlib``, which does not."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
for path in (HERE, os.path.join(os.path.dirname(HERE), "support")):
    if path not in sys.path:
        sys.path.insert(0, path)
