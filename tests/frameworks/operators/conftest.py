"""The framework-neutral operator tests share the oracle and the parametrization in ``_oracle.py``. pytest runs with
``--import-mode=importlib``, which does not put this directory on sys.path, so do it here, before the test modules
are collected."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)
