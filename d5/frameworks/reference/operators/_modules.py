"""Imports every module that registers reference operators (see registry._load_all)."""
from d5.frameworks.reference.operators import (  # noqa: F401
    activations,
    conv,
    elementwise,
    linear,
    losses,
    normalization,
    pooling,
    tensor_ops,
)
