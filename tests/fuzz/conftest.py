"""The fuzz suite's modules import each other by plain name (``import fuzz_engine``), as they do when
run_fuzz.py runs them as scripts and in the worker process; pytest (``--import-mode=importlib``) does not
put this directory on sys.path, so do it here, before any of them is collected."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)


def pytest_configure(config):
    config.addinivalue_line("markers", "fuzz: the fuzz suite's fast subset (tests/fuzz); select with -m fuzz")
