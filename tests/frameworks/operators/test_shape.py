"""Every framework's shape operators (native_op) against the reference operators: SpaceToDepth and DepthToSpace (DCR
and CRD, forward and gradient), ReverseSequence (time- and batch-major), Pad's constant value, and the errors bad
inputs and attributes raise."""
from __future__ import annotations

import numpy as np
import pytest

from _oracle import _ints, _rand, case_params, check_against_reference, check_error, framework_params
from d5.errors import ShapeError

# (id, op_type, attributes, [input makers], options): see _oracle.py
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


@pytest.mark.parametrize("framework, case", case_params(CASES))
def test_native_op_matches_reference(framework, case):
    check_against_reference(framework, case)


@pytest.mark.parametrize("framework, op_type, attributes, arrays, match", framework_params([
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
    ("SpaceToDepth", {}, None, "blocksize attribute is required"),
    ("DepthToSpace", {}, None, "blocksize attribute is required"),
    ("SpaceToDepth", {"blocksize": 2, "mode": "XYZ"}, None, "unknown mode"),
    ("DepthToSpace", {"blocksize": 2, "mode": "XYZ"}, None, "unknown mode"),
]))
def test_bad_inputs_raise_the_reference_errors(framework, op_type, attributes, arrays, match):
    check_error(framework, op_type, attributes, arrays, ShapeError, match)
