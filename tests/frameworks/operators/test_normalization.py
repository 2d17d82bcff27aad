"""Every framework's RMSNormalization, LpNormalization, LRN and MeanVarianceNormalization (native_op) against the
reference operators, forward and gradient (BatchNormalization, Instance-, Layer- and GroupNormalization are in
test_core.py), and the errors bad inputs and attributes raise."""
from __future__ import annotations

import numpy as np
import pytest

from _oracle import _rand, case_params, check_against_reference, check_error, framework_params
from d5.errors import ShapeError


def _with_zero_row(*shape):
    # A slice of zeros along the last axis (LpNormalization keeps it 0, and its gradient finite).
    def make(rng):
        x = rng.uniform(-1, 1, shape).astype(np.float32)
        x[0, ..., :] = 0
        return x
    return make


def _constant_channel(*shape):
    # Channel 0 constant over the normalized axes: MeanVarianceNormalization gives 0 there.
    def make(rng):
        x = rng.uniform(-1, 1, shape).astype(np.float32)
        x[:, 0] = 0.5
        return x
    return make


def _float64(*shape):
    return lambda rng: rng.uniform(-1, 1, shape)


# (id, op_type, attributes, [input makers (None: omitted)], options): see _oracle.py
CASES = [
    ("rms_norm_default_axis", "RMSNormalization", {}, [_rand(2, 3, 4), _rand(4)], {"opset": 23}),
    ("rms_norm_axis0_full_scale", "RMSNormalization", {"axis": 0}, [_rand(2, 3), _rand(2, 3)], {}),
    ("rms_norm_axis1_broadcast_scale", "RMSNormalization", {"axis": 1, "epsilon": 1e-2},
     [_rand(2, 3, 4), _rand(1, 4)], {}),
    ("rms_norm_negative_axis_stash64", "RMSNormalization", {"axis": -2, "stash_type": 11},
     [_rand(2, 3, 4, 2), _rand(4, 2)], {}),
    ("rms_norm_float64", "RMSNormalization", {}, [_float64(3, 5), _float64(5)], {}),
    ("lp_norm_default", "LpNormalization", {}, [_rand(2, 3, 4)], {}),
    ("lp_norm_l1_axis0", "LpNormalization", {"p": 1, "axis": 0}, [_rand(3, 4)], {}),
    ("lp_norm_l2_axis1", "LpNormalization", {"p": 2, "axis": 1}, [_rand(2, 3, 4)], {}),
    ("lp_norm_l2_zero_slice", "LpNormalization", {}, [_with_zero_row(2, 3, 4)], {}),
    ("lp_norm_l1_zero_slice", "LpNormalization", {"p": 1, "axis": -1}, [_with_zero_row(2, 4)], {}),
    ("lrn", "LRN", {"size": 3, "alpha": 0.5, "beta": 0.7, "bias": 2.0}, [_rand(2, 5, 3, 3)], {}),
    ("lrn_default", "LRN", {"size": 5}, [_rand(1, 7, 2, 2, low=-3, high=3)], {}),
    ("lrn_size1_2d", "LRN", {"size": 1, "alpha": 1.0, "beta": 1.0, "bias": 0.5}, [_rand(3, 4)], {}),
    ("lrn_window_wider_than_channels", "LRN", {"size": 99, "alpha": 0.3}, [_rand(2, 3, 4)], {}),
    ("mvn_default_axes", "MeanVarianceNormalization", {}, [_rand(2, 3, 4, 2)], {}),
    ("mvn_custom_axes", "MeanVarianceNormalization", {"axes": [1, -1]}, [_rand(2, 3, 4)], {"opset": 9}),
    ("mvn_constant_slice", "MeanVarianceNormalization", {"axes": [0, 2]}, [_constant_channel(2, 3, 4)], {}),
]


@pytest.mark.parametrize("framework, case", case_params(CASES))
def test_native_op_matches_reference(framework, case):
    check_against_reference(framework, case)


@pytest.mark.parametrize("framework, op_type, attributes, shapes", framework_params([
    ("RMSNormalization", {"axis": 3}, [(2, 3), (3,)]),
    ("RMSNormalization", {}, [(2, 3), (2,)]),                   # scale does not broadcast to X
    ("LpNormalization", {"axis": 2}, [(2, 3)]),
    ("LRN", {"size": 3}, [(4,)]),
    ("MeanVarianceNormalization", {"axes": [0, 4]}, [(2, 3, 4)]),
]))
def test_bad_inputs_raise_shape_error(framework, op_type, attributes, shapes):
    check_error(framework, op_type, attributes, [np.ones(shape, np.float32) for shape in shapes], ShapeError)


@pytest.mark.parametrize("framework, op_type, attributes", framework_params([
    ("LRN", {"size": 4}), ("LRN", {}), ("LRN", {"size": 3, "beta": float("inf")}), ("LpNormalization", {"p": 3}),
    ("RMSNormalization", {"stash_type": 7}),
]))
def test_bad_attributes_raise_shape_error(framework, op_type, attributes):
    check_error(framework, op_type, attributes, None, ShapeError)
