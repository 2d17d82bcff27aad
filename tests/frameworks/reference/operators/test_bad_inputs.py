"""One table of bad inputs and bad attributes: each must raise the named d5 error (ShapeError or
UnsupportedOperatorError) with a message that says what is wrong: the operator, the offending shapes or values,
the attribute. A case without inputs fails when the operator is built; any other builds, then fails in forward."""
from __future__ import annotations

import re

import numpy as np
import pytest

from d5.errors import ShapeError, UnsupportedOperatorError
from d5.frameworks.reference.operators import create_operator
from _tables import ints


def words(*texts: str) -> tuple:
    """Patterns that find each of ``texts`` literally in the message."""
    return tuple(re.escape(text) for text in texts)


X = np.random.default_rng(14).standard_normal((3, 2, 4))  # a (sequence, batch, features) input of the RNNs

#: (op_type, attributes, inputs or None to fail at build, error class, patterns the message must contain).
BAD_CASES = [
    # Elementwise, linear, loss and shape operators: the message names the operator and the shapes.
    ("Add", {}, [np.ones((2, 3)), np.ones((4,))], ShapeError, words("Add", "(2, 3)", "(4,)")),
    ("Mul", {}, [np.ones((2, 3)), np.ones((3, 2))], ShapeError, words("Mul", "(2, 3)", "(3, 2)")),
    ("Gemm", {}, [np.ones((2, 3)), np.ones((4, 5))], ShapeError, words("Gemm", "(2, 3)", "(4, 5)")),
    ("Gemm", {"transA": 1}, [np.ones((2, 3)), np.ones((3, 5))], ShapeError, words("Gemm", "(2, 3)", "transA=1")),
    ("Gemm", {}, [np.ones((2, 3)), np.ones((3, 5)), np.ones((3, 5))], ShapeError, words("Gemm", "(3, 5)", "(2, 5)")),
    ("MatMul", {}, [np.ones((2, 3)), np.ones((4, 5))], ShapeError, words("MatMul", "(2, 3)", "(4, 5)")),
    ("SoftmaxCrossEntropyLoss", {}, [np.ones((2, 3)), np.array([0, 3])], ShapeError,
     words("SoftmaxCrossEntropyLoss", "3", "(2, 3)")),
    ("SoftmaxCrossEntropyLoss", {}, [np.ones((2, 3)), np.array([0, -1])], ShapeError, words("out of range", "-1")),
    ("SoftmaxCrossEntropyLoss", {}, [np.ones((2, 3)), np.array([0, 1, 2])], ShapeError, words("(3,)", "(2, 3)")),
    ("SoftmaxCrossEntropyLoss", {}, [np.ones((2, 3)), np.array([0.0, 1.0])], ShapeError, words("integer")),
    ("SoftmaxCrossEntropyLoss", {}, [np.ones((2, 3)), np.array([0, 1]), np.ones(2)], ShapeError,
     words("weights", "(2,)")),
    ("MeanSquaredError", {}, [np.ones((2, 3)), np.ones((2,))], ShapeError,
     words("MeanSquaredError", "(2, 3)", "(2,)")),
    ("Reshape", {}, [np.ones((2, 3)), ints(4, -1)], ShapeError, words("Reshape", "(2, 3)")),
    ("Reshape", {}, [np.ones((2, 3)), ints(-1, -1)], ShapeError, words("Reshape", "-1")),
    ("Concat", {"axis": 0}, [np.ones((2, 3)), np.ones((2, 4))], ShapeError, words("Concat", "(2, 3)", "(2, 4)")),
    ("Softmax", {"axis": 2}, [np.ones((2, 3))], ShapeError, words("Softmax", "axis 2")),
    ("Flatten", {"axis": 4}, [np.ones((2, 3))], ShapeError, words("Flatten", "axis 4")),
    ("Dropout", {}, [np.ones(3), np.array(1.5)], ShapeError, words("Dropout", "ratio")),
    # Shape, reduction and math operators.
    ("Squeeze", {}, [np.zeros((2, 3)), ints(0)], ShapeError, ("not of length 1",)),
    ("Unsqueeze", {}, [np.zeros((2, 3)), ints(5)], ShapeError, ("out of range",)),
    ("Split", {}, [np.zeros((4, 2)), ints(1, 2)], ShapeError, ("sum to the axis length",)),
    ("Split", {}, [np.zeros((4, 2))], ShapeError, ("num_outputs",)),
    ("Gather", {}, [np.zeros((4, 2)), ints(4)], ShapeError, ("indices must lie in",)),
    ("Transpose", {"perm": [0, 0]}, [np.zeros((4, 2))], ShapeError, ("not a permutation",)),
    ("Tile", {}, [np.zeros((4, 2)), ints(2)], ShapeError, ("one non-negative count per axis",)),
    ("Expand", {}, [np.zeros((4, 2)), ints(3, 2)], ShapeError, ("cannot be broadcast",)),
    ("Pad", {}, [np.zeros((4, 2)), ints(1, 1)], ShapeError, ("give a begin and an end",)),
    ("Slice", {}, [np.zeros(4), ints(0), ints(2), ints(0), ints(0)], ShapeError, ("step of 0",)),
    ("ReduceSum", {}, [np.zeros((4, 2)), ints(2)], ShapeError, ("out of range",)),
    ("Clip", {}, [np.zeros(3), np.zeros(2)], ShapeError, ("must be a scalar",)),
    ("And", {}, [np.zeros(3), np.zeros(3)], ShapeError, ("bool tensors",)),
    ("Max", {}, [np.zeros(3), np.zeros(2)], ShapeError, ("not broadcastable",)),
    # Recurrent, convolution, Einsum and LayerNormalization.
    ("LSTM", {"hidden_size": 5}, [X, np.zeros((1, 12, 4)), np.zeros((1, 20, 5))], ShapeError, ("expected W",)),
    ("LSTM", {"input_forget": 1}, None, UnsupportedOperatorError, ("input_forget",)),
    ("GRU", {"activations": ["Sigmoid", "Gelu"]}, None, UnsupportedOperatorError, ("activation",)),
    ("RNN", {}, [X, np.zeros((1, 1, 4)), np.zeros((1, 1, 1)), None, np.array([9, 1])], ShapeError,
     ("sequence_lens",)),
    ("ConvTranspose", {}, [np.zeros((1, 1, 2, 2, 2, 2)), np.zeros((1, 1, 1, 1, 1, 1))], UnsupportedOperatorError,
     ("1-D, 2-D and 3-D",)),
    ("ConvTranspose", {}, [np.zeros((1, 2, 3, 3)), np.zeros((3, 1, 2, 2))], ShapeError, ("W must be",)),
    ("Einsum", {"equation": "ij,jk->ik"}, [np.zeros((2, 3))], ShapeError, ("operands",)),
    ("Einsum", {"equation": "ij,jk->ik"}, [np.zeros((2, 3)), np.zeros((4, 2))], ShapeError, ("does not fit",)),
    ("LayerNormalization", {"axis": 3}, [np.zeros((2, 3)), np.ones(3)], ShapeError, ("axis",)),
    # Normalization, unpooling and signal operators.
    ("LRN", {"size": 3}, [np.ones(4)], ShapeError, ("N, C",)),
    ("GroupNormalization", {"num_groups": 4}, [np.ones((1, 6, 2)), np.ones(6), np.ones(6)], ShapeError,
     ("divisible",)),
    ("GroupNormalization", {"num_groups": 2}, [np.ones((1, 6, 2)), np.ones(3), np.ones(3)], ShapeError,
     ("per group",)),
    ("MeanVarianceNormalization", {"axes": [4]}, [np.ones((2, 3))], ShapeError, ("axes",)),
    ("MaxUnpool", {"kernel_shape": [2]}, [np.ones((1, 1, 2)), np.array([[[0, 9]]])], ShapeError, (r"\[0, 3\)",)),
    ("MaxUnpool", {"kernel_shape": [2], "strides": [2]},
     [np.ones((1, 1, 2)), np.array([[[0, 1]]]), np.array([1, 1, 3])], ShapeError, ("at least",)),
    ("MaxUnpool", {"kernel_shape": [2, 2]}, [np.ones((1, 1, 2)), np.array([[[0, 1]]])], ShapeError, ("spatial",)),
    ("HannWindow", {}, [np.array(-2)], ShapeError, ("non-negative",)),
    ("STFT", {}, [np.ones((1, 8, 1)), np.array(2), np.ones(4), np.array(5)], ShapeError, ("frame_length",)),
    ("STFT", {}, [np.ones((1, 8, 1)), np.array(0)], ShapeError, ("frame_step",)),
    ("MelWeightMatrix", {}, [np.array(4), np.array(32), np.array(8000), np.array(0.0), np.array(12000.0)],
     ShapeError, ("sample_rate / 2",)),
    # Attributes missing or out of range: the operator refuses to build.
    ("LRN", {}, None, ShapeError, ("size",)),
    ("GroupNormalization", {}, None, ShapeError, ("num_groups",)),
    ("MaxUnpool", {}, None, ShapeError, ("kernel_shape",)),
    ("GroupNormalization", {"num_groups": 2, "stash_type": 7}, None, ShapeError, ("stash_type",)),
    ("HannWindow", {"output_datatype": 999}, None, ShapeError, ("output_datatype",)),
]


@pytest.mark.parametrize("op_type, attributes, inputs, error, patterns", BAD_CASES,
                         ids=[f"{case[0]}-{k}" for k, case in enumerate(BAD_CASES)])
def test_bad_input_or_attribute_raises_a_d5_error_saying_why(op_type, attributes, inputs, error, patterns):
    if inputs is None:
        with pytest.raises(error) as info:
            create_operator(op_type, attributes)
    else:
        op = create_operator(op_type, attributes)
        with pytest.raises(error) as info:
            op.forward(inputs)
    for pattern in patterns:
        assert re.search(pattern, str(info.value)), (pattern, str(info.value))
