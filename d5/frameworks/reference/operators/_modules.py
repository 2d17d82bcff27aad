"""Imports every module that registers reference operators (see registry._load_all)."""
from d5.frameworks.reference.operators import (  # noqa: F401
    activations,
    conv,
    conv_transpose,
    einsum,
    elementwise,
    layer_norm,
    linear,
    losses,
    math_ops,
    normalization,
    pooling,
    recurrent,
    reductions,
    shape_ops,
    tensor_ops,
)
