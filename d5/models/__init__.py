"""The model zoo: networks as d5.Network graphs with a symbolic batch dimension.

>>> import d5
>>> d5.models.get("lenet5").name
'lenet5'
"""
from __future__ import annotations

from d5.errors import D5Error
from d5.models.lenet import lenet5

#: model name -> builder function, used by recipes (``'model': 'lenet5'``).
MODELS = {"lenet5": lenet5, "lenet": lenet5}


def get(name: str, *args, **kwargs):
    """Build the zoo model ``name`` with the builder's arguments."""
    try:
        builder = MODELS[name]
    except KeyError:
        raise D5Error(f"unknown model {name!r}; the zoo has {sorted(MODELS)}") from None
    return builder(*args, **kwargs)


__all__ = ["MODELS", "get", "lenet5"]
