"""MXNet-specific tests: the framework-neutral oracle (tests/frameworks/operators/_oracle.py) on sys.path, and
the module skipped where MXNet is not installed (``make test`` requires it: tests/frameworks/test_required.py)."""
import importlib.util
import os
import sys

import pytest

if importlib.util.find_spec("mxnet") is None:  # not importorskip("mxnet"): MXNet needs d5's numpy.bool alias first
    pytest.skip("MXNet is not installed", allow_module_level=True)

ORACLE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "operators")
if ORACLE not in sys.path:
    sys.path.insert(0, ORACLE)
