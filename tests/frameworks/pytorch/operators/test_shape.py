"""The PyTorch shape converters against the reference operators: SpaceToDepth and DepthToSpace (DCR and CRD,
forward and gradient), ReverseSequence (time- and batch-major), and the errors bad inputs raise."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from _torch_oracle import _ints, _rand, check_against_reference  # noqa: E402
from d5.errors import ShapeError  # noqa: E402
from d5.frameworks.pytorch.operators import create_operator  # noqa: E402
from d5.frameworks.reference.operators import create_operator as reference_op  # noqa: E402

# (id, op_type, attributes, [input makers], options)
CASES = [
    ("space_to_depth", "SpaceToDepth", {"blocksize": 2}, [_rand(2, 3, 4, 6)], {}),
    ("space_to_depth_crd", "SpaceToDepth", {"blocksize": 2, "mode": "CRD"}, [_rand(1, 2, 4, 6)], {}),
    ("space_to_depth_3", "SpaceToDepth", {"blocksize": 3, "mode": "DCR"}, [_rand(1, 1, 3, 6)], {}),
    ("depth_to_space", "DepthToSpace", {"blocksize": 2}, [_rand(1, 8, 2, 3)], {}),
    ("depth_to_space_crd", "DepthToSpace", {"blocksize": 2, "mode": "CRD"}, [_rand(2, 8, 2, 3)], {}),
    ("depth_to_space_int", "DepthToSpace", {"blocksize": 3}, [_ints(np.arange(36).reshape(1, 9, 2, 2))], {}),
    ("reverse_sequence_time_major", "ReverseSequence", {"batch_axis": 1, "time_axis": 0},
     [_ints(np.arange(16).reshape(4, 4), np.int32), _ints([4, 3, 2, 1])], {}),
    ("reverse_sequence_batch_major", "ReverseSequence", {"batch_axis": 0, "time_axis": 1},
     [_ints(np.arange(24).reshape(4, 3, 2)), _ints([1, 2, 3, 0], np.int32)], {}),
    # Pad's constant value gets the gradient summed over the padding; an infinite one pads without NaN
    ("pad_constant_value_gradient", "Pad", {}, [_rand(2, 3), _ints([1, 0, 0, 2]), _rand(1)], {}),
    ("pad_constant_negative_infinity", "Pad", {}, [_rand(2, 3), _ints([0, 1, 1, 0]), _ints(-np.inf, np.float32)], {}),
    ("pad_constant_crop_and_pad", "Pad", {}, [_rand(3, 4), _ints([-1, 2, 1, -2]), _ints(np.inf, np.float32)], {}),
    ("pad_constant_int", "Pad", {}, [_ints([[1, 2], [3, 4]], np.int32), _ints([1, 1, 0, 0]), _ints(7, np.int32)], {}),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_converter_matches_reference(case):
    check_against_reference(case)


@pytest.mark.parametrize("batch_axis, time_axis", [(1, 0), (0, 1)])
def test_reverse_sequence_of_floats_matches_and_is_differentiable(batch_axis, time_axis):
    # The reference has no gradient for ReverseSequence; torch's (a gather) is checked numerically instead.
    attributes = {"batch_axis": batch_axis, "time_axis": time_axis}
    x = np.random.default_rng(0).standard_normal((4, 4, 3))
    lengths = np.array([4, 0, 2, 1])
    op = create_operator("ReverseSequence", attributes)
    got = op(torch.from_numpy(x), torch.from_numpy(lengths))
    np.testing.assert_array_equal(got.numpy(), reference_op("ReverseSequence", attributes).forward([x, lengths]))
    assert torch.autograd.gradcheck(lambda t: op(t, torch.from_numpy(lengths)),
                                    (torch.from_numpy(x).requires_grad_(),))


@pytest.mark.parametrize("op_type, attributes, arrays, match", [
    ("DepthToSpace", {"blocksize": 2}, [np.ones(5, np.float32)], "DepthToSpace: input must be a 4-D tensor"),
    ("SpaceToDepth", {"blocksize": 2}, [np.ones(5, np.float32)], "SpaceToDepth: input must be a 4-D tensor"),
    ("DepthToSpace", {"blocksize": 2}, [np.ones((1, 6, 2, 2), np.float32)], "not divisible"),
    ("SpaceToDepth", {"blocksize": 2}, [np.ones((1, 1, 3, 2), np.float32)], "not divisible"),
    ("ReverseSequence", {}, [np.ones((3, 2), np.float32), np.array([1, 4])], r"sequence_lens must lie in \[0, 3\]"),
    ("ReverseSequence", {}, [np.ones((3, 2), np.float32), np.array([1, -1])], r"sequence_lens must lie in \[0, 3\]"),
    ("ReverseSequence", {}, [np.ones((3, 2), np.float32), np.array([1, 1, 1])],
     "sequence_lens must be an integer tensor of shape"),
    ("ReverseSequence", {}, [np.ones((3, 2), np.float32), np.array([1.0, 1.0])],
     "sequence_lens must be an integer tensor of shape"),
    ("ReverseSequence", {"batch_axis": 2}, [np.ones((3, 2, 2), np.float32), np.array([1, 1])],
     "batch_axis and time_axis must be 0 and 1"),
])
def test_bad_inputs_raise_the_reference_errors(op_type, attributes, arrays, match):
    with pytest.raises(ShapeError, match=match):
        reference_op(op_type, attributes).forward(arrays)
    with pytest.raises(ShapeError, match=match):
        create_operator(op_type, attributes)(*[torch.from_numpy(a) for a in arrays])


@pytest.mark.parametrize("op_type", ["SpaceToDepth", "DepthToSpace"])
def test_bad_block_attributes_raise_shape_errors(op_type):
    for make in (create_operator, reference_op):
        with pytest.raises(ShapeError, match="blocksize attribute is required"):
            make(op_type, {})
        with pytest.raises(ShapeError, match="unknown mode"):
            make(op_type, {"blocksize": 2, "mode": "XYZ"})
