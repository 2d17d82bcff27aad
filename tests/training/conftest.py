"""Puts ``tests/support`` (shared test helpers such as ``cifar_archives``) on sys.path: pytest runs with
``--import-mode=importlib``, which does not, so do it here, before the test modules are collected."""
import os
import sys

SUPPORT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "support")
if SUPPORT not in sys.path:
    sys.path.insert(0, SUPPORT)
