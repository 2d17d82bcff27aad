"""The N-D window machinery shared by Conv and the pools: the NumPy im2col/col2im, and auto_pad.

auto_pad: auto_pad SAME_UPPER / SAME_LOWER in Conv, MaxPool, AveragePool and LpPool (1-D, 2-D, 3-D), above all where
the stride exceeds the dilated kernel and the ONNX total pad ``(out - 1) * stride + extent - in`` is negative.

What the two ONNX oracles do there (onnxruntime 1.31, onnx.reference 1.23; the full account is in
``d5.ops.onnx_semantics.window_geometry``): onnxruntime pads pooling by the formula with C++ truncating
division (and refuses negative pads in MaxPool without dilations), onnx.reference's MaxPool floors, its
AveragePool and LpPool fail, and both clamp Conv's total to 0 wherever they agree. d5 keeps the formula's
negative pads for pooling (split as the spec words it: under SAME_UPPER the half nearer zero at the beginning,
the other at the end, as onnxruntime does; SAME_LOWER mirroring SAME_UPPER) and clamps Conv.

The checks: d5 against the definition (window ``o`` reads input ``o * stride - pad_begin + tap * dilation``,
anything outside the input is padding) for every case; against onnxruntime and onnx.reference wherever the
two agree (undilated); against onnx.reference's Conv everywhere; against onnxruntime's pooling wherever its
split of the total equals d5's; and gradients of the cropped cases against finite differences.
"""
from __future__ import annotations

import functools
import itertools
import math

import numpy as np
import pytest

from d5.frameworks.reference.operators import create_operator
from d5.frameworks.reference.operators._windows import col2im, im2col, resolve_window
from d5.ops.onnx_semantics import window_geometry
from d5.ops.validation import test_gradient as check_gradient
from _helpers import random_normal

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402


def test_numpy_col2im_is_the_adjoint_of_im2col():
    # <im2col(x), c> == <x, col2im(c)> for every x and c, including a window that overhangs the end.
    args = ((2, 3, 2), (2, 1, 3), (1, 0, 2), (1, 2, 1), (3, 2, 2))
    x, x_shape = random_normal((2, 3, 5, 4, 6), 0), (2, 3, 5, 4, 6)
    columns = im2col(x, *args)
    c = random_normal(columns.shape, 1)
    assert np.isclose(np.vdot(columns, c), np.vdot(x, col2im(c, x_shape, *args)))


onnx = pytest.importorskip("onnx")


ort = pytest.importorskip("onnxruntime")


MODES = ("SAME_UPPER", "SAME_LOWER")


POOLS = ("MaxPool", "AveragePool", "LpPool")


# One spatial axis each: (input size, kernel, stride, dilation); the comment gives the total pad.
AXES = [
    (5, 1, 3, 1),    # -1 (input 5, kernel 1, stride 3)
    (32, 1, 2, 1),   # -1 (input 32, kernel 1, stride 2)
    (5, 1, 5, 1),    # -4
    (4, 1, 4, 1),    # -3
    (7, 1, 4, 1),    # -2
    (8, 2, 5, 1),    # -1
    (5, 2, 5, 1),    # -3
    (4, 2, 4, 2),    # -1, dilated
    (5, 2, 5, 2),    # -2, dilated
    (5, 1, 3, 2),    # -1 (a dilation onnxruntime's MaxPool needs to accept negative pads)
    (7, 1, 4, 2),    # -2
    (5, 1, 5, 2),    # -4
    (9, 3, 2, 1),    # 2
    (7, 2, 3, 1),    # 1
    (6, 3, 2, 2),    # 3, dilated
]


# (rank, axes): each 2-D case pairs an axis with another (negative with positive totals, too).
CASES = ([(1, (axis,)) for axis in AXES]
         + [(2, (axis, AXES[(i + 4) % len(AXES)])) for i, axis in enumerate(AXES) if axis[0] < 32]
         + [(3, ((5, 1, 3, 1), (4, 2, 4, 2), (7, 2, 3, 1))), (3, ((5, 1, 5, 2), (7, 1, 4, 1), (6, 3, 2, 2))),
            (3, ((5, 2, 5, 1), (5, 1, 3, 2), (4, 1, 4, 1)))])


def _total(axis) -> int:
    size, kernel, stride, dilation = axis
    return (math.ceil(size / stride) - 1) * stride + (kernel - 1) * dilation + 1 - size


def _attributes(op, axes, mode) -> dict:
    attributes = {"auto_pad": mode, "strides": [a[2] for a in axes], "dilations": [a[3] for a in axes]}
    if op != "Conv":
        attributes["kernel_shape"] = [a[1] for a in axes]
    return attributes


def _inputs(op, axes) -> list[np.ndarray]:
    rng = np.random.default_rng(len(axes) * 100 + sum(a[0] for a in axes))
    x = rng.standard_normal((2, 3, *(a[0] for a in axes))).astype(np.float32)  # distinct values: no max ties
    if op != "Conv":
        return [x]
    return [x, rng.standard_normal((2, 3, *(a[1] for a in axes))).astype(np.float32)]


def _by_definition(op, inputs, axes, pads_begin, out) -> np.ndarray:
    """Window ``o`` reads input position ``o * stride - pad_begin + tap * dilation`` on each axis; a position
    outside the input is padding (zero for Conv and LpPool, ignored by MaxPool and AveragePool)."""
    x = inputs[0].astype(np.float64)
    y = np.zeros(x.shape[:1] + ((inputs[1].shape[0],) if op == "Conv" else x.shape[1:2]) + tuple(out))
    for o in itertools.product(*(range(n) for n in out)):
        taps, positions = [], []
        for tap in itertools.product(*(range(a[1]) for a in axes)):
            where = tuple(oi * a[2] - b + t * a[3] for oi, a, b, t in zip(o, axes, pads_begin, tap))
            if all(0 <= p < a[0] for p, a in zip(where, axes)):
                taps.append(tap)
                positions.append(where)
        values = [x[(slice(None), slice(None)) + p] for p in positions]  # each (N, C)
        at = (slice(None), slice(None)) + o
        if op == "Conv":
            w = inputs[1].astype(np.float64)
            y[at] = sum((v @ w[(slice(None), slice(None)) + t].T for v, t in zip(values, taps)), 0.0)
        elif op == "MaxPool":
            y[at] = np.max(values, axis=0) if values else -np.inf
        elif op == "AveragePool":
            y[at] = np.mean(values, axis=0)
        else:
            y[at] = np.sqrt(np.sum(np.square(values), axis=0))
    return y


def _model(op, inputs, attributes) -> bytes:
    names = ["x", "w"][:len(inputs)]
    graph = helper.make_graph(
        [helper.make_node(op, names, ["y"], **attributes)], "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, a.shape) for n, a in zip(names, inputs)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    model.ir_version = 9  # onnx may write a newer IR version than this onnxruntime reads
    return model.SerializeToString()


def _onnxruntime(model: bytes, feeds: dict):
    options = ort.SessionOptions()
    options.log_severity_level = 4
    try:
        session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
        return session.run(None, feeds)[0]
    except Exception:  # its refusals (dilated SAME Conv, negative MaxPool pads) are no verdict
        return None


def _onnx_reference(model: bytes, feeds: dict):
    try:
        return ReferenceEvaluator(onnx.ModelProto.FromString(model)).run(None, feeds)[0]
    except Exception:  # its AveragePool and LpPool fail on negative pads
        return None


def _same(a, b) -> bool:
    return a is not None and b is not None and a.shape == b.shape and np.allclose(a, b, rtol=1e-5, atol=1e-5)


@functools.lru_cache(maxsize=None)
def _outcomes(op, rank, axes, mode) -> dict:
    """d5, the definition, onnxruntime and onnx.reference on one case (computed once for every test)."""
    inputs = _inputs(op, axes)
    attributes = _attributes(op, axes, mode)
    d5 = create_operator(op, attributes).forward(inputs)
    geometry = window_geometry([a[0] for a in axes], [a[1] for a in axes], strides=attributes["strides"],
                               dilations=attributes["dilations"], pads=[0] * (2 * rank), auto_pad=mode,
                               clamp_same_pads=op == "Conv")
    model = _model(op, inputs, attributes)
    feeds = dict(zip(["x", "w"], inputs))
    return {"d5": d5[0] if isinstance(d5, tuple) else d5, "geometry": geometry,
            "definition": _by_definition(op, inputs, axes, geometry.pads_begin, geometry.out),
            "onnxruntime": _onnxruntime(model, feeds), "onnx.reference": _onnx_reference(model, feeds)}


def _cases(ops):
    return [pytest.param(op, rank, axes, mode, id=f"{op}-{rank}d-{'_'.join(map(str, axes))}-{mode}")
            for op in ops for rank, axes in CASES for mode in MODES]


@pytest.mark.parametrize("mode", MODES)
def test_window_geometry_splits_the_formula_nearer_half_first_for_same_upper(mode):
    for size, kernel, stride, dilation in itertools.product(range(1, 12), range(1, 4), range(1, 7), range(1, 3)):
        args = dict(strides=[stride], dilations=[dilation], pads=[0, 0], auto_pad=mode)
        total = _total((size, kernel, stride, dilation))
        pooling = window_geometry([size], [kernel], **args)
        assert pooling.out == (math.ceil(size / stride),)
        begin, end = pooling.pads_begin[0], pooling.pads_end[0]
        assert begin + end == total
        near = int(total / 2)  # the half nearer zero: the spec puts the other ("extra") one at the end for UPPER
        assert (begin, end) == ((near, total - near) if mode == "SAME_UPPER" else (total - near, near))
        assert pooling.crops == (max(-begin, 0), max(-end, 0))
        assert pooling.applied_pads == (max(begin, 0), max(end, 0))
        conv = window_geometry([size], [kernel], clamp_same_pads=True, **args)
        clamped = max(total, 0)
        assert conv.out == pooling.out and conv.pads_begin[0] + conv.pads_end[0] == clamped
        assert min(conv.pads_begin + conv.pads_end) >= 0


@pytest.mark.parametrize("op", POOLS)
def test_same_lower_of_the_mirrored_input_is_the_mirrored_same_upper(op):
    # SAME_LOWER is SAME_UPPER seen in a mirror, for negative totals too (input 8: totals -1, -1, -3, -2);
    # onnxruntime's split of SAME_LOWER breaks this for odd negative totals.
    x = np.random.default_rng(0).standard_normal((2, 3, 8))
    for kernel, stride in [(1, 3), (2, 5), (1, 4), (1, 5), (3, 2)]:
        attributes = {"kernel_shape": [kernel], "strides": [stride]}
        upper = create_operator(op, {**attributes, "auto_pad": "SAME_UPPER"}).forward([x])
        lower = create_operator(op, {**attributes, "auto_pad": "SAME_LOWER"}).forward([x[..., ::-1]])
        upper, lower = (y[0] if isinstance(y, tuple) else y for y in (upper, lower))
        np.testing.assert_allclose(lower[..., ::-1], upper)


def test_negative_pads_never_reach_the_kernels():
    for rank, axes in CASES:
        for mode, clamp in itertools.product(MODES, (False, True)):
            window = resolve_window("MaxPool", [a[0] for a in axes], [a[1] for a in axes],
                                    strides=[a[2] for a in axes], dilations=[a[3] for a in axes], pads=None,
                                    auto_pad=mode, clamp_same_pads=clamp)
            assert min(window.pads) >= 0 and min(window.crops) >= 0
            assert not clamp or not any(window.crops)


@pytest.mark.parametrize("op, rank, axes, mode", _cases(("Conv",) + POOLS))
def test_forward_matches_the_definition(op, rank, axes, mode):
    outcome = _outcomes(op, rank, axes, mode)
    np.testing.assert_allclose(outcome["d5"], outcome["definition"], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", ("Conv",) + POOLS)
def test_forward_matches_onnxruntime_and_onnx_reference_where_they_agree(op):
    agreeing_with_negative_pads, problems = 0, []
    for rank, axes in CASES:
        for mode in MODES:
            outcome = _outcomes(op, rank, axes, mode)
            if not _same(outcome["onnxruntime"], outcome["onnx.reference"]):
                continue
            if any(a[1] > 1 and a[3] > 1 for a in axes):
                continue  # onnxruntime pads dilated pooling as if undilated: an agreement there is a coincidence
            agreeing_with_negative_pads += min(_total(a) for a in axes) < 0
            if not _same(outcome["d5"], outcome["onnxruntime"]):
                problems.append(f"{rank}-D {axes} {mode}")
    assert not problems, f"{op}: d5 differs from onnxruntime and onnx.reference (which agree) in {problems}"
    if op in ("Conv", "MaxPool"):  # onnx.reference's AveragePool and LpPool fail on negative pads
        assert agreeing_with_negative_pads > 0


@pytest.mark.parametrize("op, rank, axes, mode", _cases(("Conv",)))
def test_conv_matches_onnx_reference_everywhere(op, rank, axes, mode):
    # onnx.reference's Conv clamps a negative total pad to 0 (and uses the dilated kernel), as d5 does.
    outcome = _outcomes(op, rank, axes, mode)
    assert _same(outcome["d5"], outcome["onnx.reference"])


@pytest.mark.parametrize("op", POOLS)
def test_pooling_matches_onnxruntime_where_truncation_and_floor_split_alike(op):
    # onnxruntime splits the total with C++ division (truncating toward zero) and ignores dilations; where
    # that split equals d5's floor split and the dilation does not matter, the two must agree.
    compared, problems = 0, []
    for rank, axes in CASES:
        for mode in MODES:
            truncated = [int(_total(a) / 2) if mode == "SAME_UPPER" else int((_total(a) + 1) / 2) for a in axes]
            outcome = _outcomes(op, rank, axes, mode)
            expected = outcome["onnxruntime"]
            if (list(outcome["geometry"].pads_begin) != truncated or any(a[1] > 1 and a[3] > 1 for a in axes)
                    or expected is None):
                continue
            compared += 1
            if not _same(outcome["d5"], expected):
                problems.append(f"{rank}-D {axes} {mode}")
    assert not problems, f"{op}: d5 differs from onnxruntime in {problems}"
    assert compared > 0


CROPPED = [((5,), (1,), (3,)), ((8,), (2,), (5,)), ((5, 32), (1, 1), (5, 2)), ((7, 6), (2, 3), (4, 2)),
           ((4, 5, 7), (1, 2, 2), (4, 5, 3))]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("spatial, kernel, strides", CROPPED)
def test_maxpool_indices_point_into_the_uncropped_input(spatial, kernel, strides, mode):
    x = np.random.default_rng(1).standard_normal((2, 3, *spatial)).astype(np.float32)
    y, indices = create_operator("MaxPool", {"kernel_shape": list(kernel), "strides": list(strides),
                                             "auto_pad": mode}).forward([x])
    np.testing.assert_array_equal(x.ravel()[indices], y)


@pytest.mark.parametrize("op", ("MaxPool", "AveragePool"))
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("spatial, kernel, strides", CROPPED)
def test_gradient_of_a_cropped_input_matches_finite_differences(op, spatial, kernel, strides, mode):
    rank = len(spatial)
    geometry = window_geometry(spatial, kernel, strides=strides, dilations=[1] * rank, pads=[0] * (2 * rank),
                               auto_pad=mode)
    assert any(geometry.crops)  # the case exercises the cropping
    x = np.random.default_rng(2).standard_normal((2, 3, *spatial))
    operator = create_operator(op, {"kernel_shape": list(kernel), "strides": list(strides), "auto_pad": mode})
    result = check_gradient(operator, [x])
    assert result.passed, result
    # The cropped elements never reach the output: their gradient is exactly zero.
    y = operator.forward([x])
    y = y[0] if isinstance(y, tuple) else y
    dx = operator.backward([np.ones_like(y)], [x], [y])
    for axis, size in enumerate(spatial):
        index = [slice(None)] * x.ndim
        index[2 + axis] = np.r_[0:geometry.crops[axis], size - geometry.crops[rank + axis]:size]
        assert not dx[tuple(index)].any()


def test_a_window_of_padding_only_gives_minus_infinity_in_maxpool():
    # Input 1, kernel 2 dilated by 3 (extent 4): SAME_UPPER pads (1, 2), so the taps at -1 and 2 both miss the
    # input. d5 answers -inf with index -1 (onnx.reference answers 0, onnxruntime an empty output).
    x = np.ones((1, 1, 1), np.float32)
    y, indices = create_operator("MaxPool", {"kernel_shape": [2], "dilations": [3], "auto_pad": "SAME_UPPER"}
                                 ).forward([x])
    assert y.tolist() == [[[-np.inf]]] and indices.tolist() == [[[-1]]]


def test_lppool_ceil_mode_drops_a_window_that_starts_in_the_trailing_pad():
    # The last window of ceil_mode would start at 4, inside the trailing pad: onnxruntime and onnx.reference
    # give two outputs, and so does LpPool now that it resolves its window with window_geometry.
    x = np.arange(1.0, 5.0, dtype=np.float32).reshape(1, 1, 4)
    y = create_operator("LpPool", {"kernel_shape": [3], "strides": [2], "pads": [0, 2], "ceil_mode": 1}).forward([x])
    np.testing.assert_allclose(y, [[[np.sqrt(14.0), 5.0]]], rtol=1e-6)
