"""Table-driven checks over the whole reference-operator registry (supported_operators()): it lists the operator
families the other tables test; every operator builds from ONNX's defaults and refuses unknown attributes;
operators needing an attribute refuse to build without it; gradient declarations (d5.ops.Gradient) match what
backward does; and every operator with a gradient has a finite-difference check somewhere."""
from __future__ import annotations

import re

import numpy as np
import pytest

from d5.errors import D5Error, UnsupportedOperatorError
from d5.frameworks.reference.operators import create_operator, supported_operators
from d5.ops import Gradient, as_tuple
from _tables import ALL_GRADIENT_CASES, CORE_OPS, HEAVY_OPS, OPERATORS


def test_registry_lists_the_operator_families_tested_here():
    missing = sorted(set(CORE_OPS + OPERATORS + HEAVY_OPS) - set(supported_operators()))
    assert not missing, f"not registered: {missing}"


#: Attributes without which an operator cannot be built (ONNX gives them no default); every other operator
#: builds from ONNX's default attributes alone.
BUILD_ATTRIBUTES = {
    "AveragePool": {"kernel_shape": [2, 2]}, "LpPool": {"kernel_shape": [2, 2]}, "MaxPool": {"kernel_shape": [2, 2]},
    "MaxUnpool": {"kernel_shape": [2, 2]}, "BitShift": {"direction": "LEFT"}, "Cast": {"to": 1}, "Concat": {"axis": 0},
    "ConcatFromSequence": {"axis": 0}, "Constant": {"value_float": 1.0}, "DepthToSpace": {"blocksize": 2},
    "SpaceToDepth": {"blocksize": 2}, "Einsum": {"equation": "ij->ji"}, "GroupNormalization": {"num_groups": 1},
    "LRN": {"size": 3}, "RegexFullMatch": {"pattern": "a"},
    "If": {"then_branch": "SUBGRAPH", "else_branch": "SUBGRAPH"}, "Loop": {"body": "SUBGRAPH"},
    "Scan": {"body": "SUBGRAPH", "num_scan_inputs": 1}, "SequenceMap": {"body": "SUBGRAPH"},
}


#: Control-flow operators pass their attributes on to the subgraph machinery and accept any (a known gap).
TAKES_ANY_ATTRIBUTE = {"If", "Loop", "Scan", "SequenceMap"}


def build(op_type: str, **extra):
    """The operator built from ONNX's defaults plus BUILD_ATTRIBUTES (a subgraph: an empty d5.Network)."""
    import d5

    attributes = {name: d5.Network("body") if value == "SUBGRAPH" else value
                  for name, value in BUILD_ATTRIBUTES.get(op_type, {}).items()}
    return create_operator(op_type, {**attributes, **extra})


@pytest.mark.parametrize("op_type", supported_operators())
def test_every_operator_builds_from_onnx_defaults_and_refuses_unknown_attributes(op_type):
    from d5.ops.operator import CustomOp

    assert isinstance(build(op_type), CustomOp)
    if op_type in TAKES_ANY_ATTRIBUTE:
        return
    with pytest.raises(UnsupportedOperatorError, match=re.escape(f"operator '{op_type}': unsupported attributes")):
        build(op_type, no_such_attribute=1)


@pytest.mark.parametrize("op_type", sorted(BUILD_ATTRIBUTES))
def test_operators_needing_an_attribute_refuse_to_build_without_it(op_type):
    with pytest.raises(D5Error):
        create_operator(op_type, {})


#: Operators without a backward in d5 that the tests name explicitly (a flip of their declaration fails here).
KNOWN_WITHOUT_GRADIENT = {
    "Shape", "Size", "Constant", "ConstantOfShape", "Range", "ArgMax", "ArgMin", "Equal", "Less", "Not", "IsNaN",
    "IsInf", "TopK", "BitwiseAnd", "QuantizeLinear", "HannWindow", "HammingWindow", "BlackmanWindow",
    "MelWeightMatrix", "STFT", "StringConcat", "StringSplit", "RegexFullMatch", "StringNormalizer", "RoiAlign", "DFT",
    "Attention",
}
#: Of those, the ones whose outputs are integers, booleans or constants: backward returns no gradient at all
#: (the executor stops backpropagation at them by dtype) instead of raising.
WITHOUT_GRADIENT_RETURNING_NONE = {
    "And", "ArgMax", "ArgMin", "Constant", "ConstantOfShape", "Equal", "Greater", "GreaterOrEqual", "IsInf", "IsNaN",
    "Less", "LessOrEqual", "Not", "Or", "Range", "Shape", "Size", "Xor",
}


def test_the_operators_known_without_gradient_say_so():
    for op_type in sorted(KNOWN_WITHOUT_GRADIENT):
        assert build(op_type).gradient is not Gradient.DEFINED, op_type


@pytest.mark.parametrize("op_type", [op for op in supported_operators() if build(op).gradient is Gradient.NONE])
def test_operators_without_gradient_refuse_backward(op_type):
    """Every operator declaring no gradient: backward raises naming the operator (or, for integer/boolean/
    constant outputs, returns no gradient)."""
    op = build(op_type)
    grads = ([np.ones(3)], [np.array(3)], [np.ones(3)])
    if op_type in WITHOUT_GRADIENT_RETURNING_NONE:
        result = op.backward(*grads)
        assert result is None or all(g is None for g in as_tuple(result)), result
    else:
        with pytest.raises(UnsupportedOperatorError, match=rf"{type(op).__name__} has no gradient"):
            op.backward(*grads)
        assert type(op).__name__ == op_type or op_type not in KNOWN_WITHOUT_GRADIENT


#: Differentiable operators whose gradient is checked by a dedicated test in their category file (inputs that need
#: care: kinks, recurrences, windows) rather than by the gradient tables of _tables.py.
GRADIENT_CHECKED_IN_CATEGORY_FILES = {
    "Acos": "elementwise", "Acosh": "elementwise", "Asin": "elementwise", "Asinh": "elementwise",
    "Atan": "elementwise", "Atanh": "elementwise", "Cosh": "elementwise", "Sinh": "elementwise", "Tan": "elementwise",
    "AffineGrid": "image", "Resize": "image", "ThresholdedRelu": "activation", "HardSwish": "activation",
    "Shrink": "activation", "Swish": "activation", "SwiGLU": "activation", "Det": "linear", "Einsum": "linear",
    "OneHot": "indexing", "ScatterElements": "indexing", "ScatterND": "indexing", "TensorScatter": "indexing",
    "GlobalMaxPool": "pooling", "MaxUnpool": "pooling", "MaxPool": "pooling", "AveragePool": "pooling",
    "GlobalAveragePool": "test_kernels", "BatchNormalization": "test_kernels", "Conv": "convolution",
    "ConvTranspose": "convolution", "LSTM": "recurrent", "GRU": "recurrent", "RNN": "recurrent",
    "LayerNormalization": "normalization", "InstanceNormalization": "normalization", "LRN": "normalization",
    "GroupNormalization": "normalization", "MeanVarianceNormalization": "normalization",
    "RMSNormalization": "normalization", "RotaryEmbedding": "attention", "NegativeLogLikelihoodLoss": "loss",
    "Dropout": "activation", "Scatter": "indexing (the alias of ScatterElements)",
}


def test_every_operator_with_a_gradient_has_a_gradient_check():
    """Every operator declaring a gradient, and every operator of OPERATORS not known to have none, is in the
    finite-difference tables (test_gradients.py) or has a dedicated check in its category file."""
    in_tables = {param.values[0] for param in ALL_GRADIENT_CASES}
    required = {op_type for op_type in supported_operators() if build(op_type).gradient is Gradient.DEFINED}
    required |= set(OPERATORS) - KNOWN_WITHOUT_GRADIENT - WITHOUT_GRADIENT_RETURNING_NONE
    missing = sorted(required - in_tables - set(GRADIENT_CHECKED_IN_CATEGORY_FILES))
    assert not missing, f"no finite-difference gradient check for {missing}"
