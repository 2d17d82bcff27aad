"""TensorFlow-specific tests: the framework-neutral oracle (tests/frameworks/operators/_oracle.py) on sys.path, and
the module skipped where TensorFlow is not installed (``make test`` requires it: tests/frameworks/test_required.py)."""
import os
import sys

import pytest

pytest.importorskip("tensorflow")

ORACLE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "operators")
if ORACLE not in sys.path:
    sys.path.insert(0, ORACLE)
