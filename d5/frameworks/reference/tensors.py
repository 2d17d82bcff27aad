"""Values between NumPy and the reference framework's tensors, which are NumPy arrays: the same functions as
every framework's ``tensors.py``, each the identity here.

>>> import numpy as np
>>> value = np.arange(3.0)
>>> as_module_value(value, None) is value, as_numpy_value(value) is value, holds(np.dtype(object))
(True, True, True)
"""
from __future__ import annotations

from typing import Any

import numpy as np


def holds(dtype: np.dtype) -> bool:
    """The reference holds every value ONNX has (strings, sequences, 4-bit integers included)."""
    return True


def as_module_value(value: Any, device: Any) -> Any:
    """A value as the framework's operators take it: the value itself."""
    return value


def as_numpy_value(value: Any) -> Any:
    """A framework value as NumPy: the value itself."""
    return value
