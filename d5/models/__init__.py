"""The model zoo: networks as d5.Network graphs with a symbolic batch dimension.

Every builder takes a ``seed`` and returns a fresh network with inputs ``input`` and ``label`` and outputs
``output`` and ``loss``. ``MODELS`` also names the fixed variants (``resnet44``, ``resnet50``, ``wrn28_10``)
so a recipe can say ``'model': 'resnet44'``.

>>> import d5
>>> d5.models.get("lenet5").name
'lenet5'
>>> d5.models.get("resnet20").inputs["input"].shape
('N', 3, 32, 32)
"""
from __future__ import annotations

import functools

from d5.errors import D5Error
from d5.models.lenet import lenet5
from d5.models.lstm_lm import lstm_lm
from d5.models.resnet import resnet, wide_resnet
from d5.models.simple import mlp, mobilenet_v1, simple_cnn


def _variant(builder, name: str, *args, **fixed):
    # A named fixed configuration that still takes the builder's remaining keyword arguments (seed=...).
    variant = functools.partial(builder, *args, **fixed)
    variant.__name__ = name
    return variant


#: model name -> builder function, used by recipes (``'model': 'lenet5'``).
MODELS = {
    "lenet5": lenet5, "lenet": lenet5, "mlp": mlp, "simple_cnn": simple_cnn, "resnet": resnet,
    "wide_resnet": wide_resnet, "lstm_lm": lstm_lm, "mobilenet_v1": mobilenet_v1,
    **{f"resnet{d}": _variant(resnet, f"resnet{d}", d, "cifar10") for d in (20, 32, 44, 56, 110)},
    **{f"resnet{d}": _variant(resnet, f"resnet{d}", d, "imagenet") for d in (18, 34, 50)},
    "wrn16_4": _variant(wide_resnet, "wrn16_4", 16, 4),
    "wrn28_10": _variant(wide_resnet, "wrn28_10", 28, 10),
}


def get(name: str, *args, **kwargs):
    """Build the zoo model ``name`` with the builder's arguments."""
    try:
        builder = MODELS[name]
    except KeyError:
        raise D5Error(f"unknown model {name!r}; the zoo has {sorted(MODELS)}") from None
    return builder(*args, **kwargs)


__all__ = ["MODELS", "get", "lenet5", "lstm_lm", "mlp", "mobilenet_v1", "resnet", "simple_cnn", "wide_resnet"]
