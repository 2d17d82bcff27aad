"""The TensorFlow shape, indexing and generator converters beyond the operator tables: Concat on channels-last
inputs, more cases against the reference (older opsets, the pad modes, repeated scatter indices, GatherND's
batch_dims, ...), and the converters inside ``tf.function`` (traced once, compared with eager; data-dependent
output shapes included)."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from _oracle import _distinct, _ints, _rand, check_against_reference
from d5.errors import ShapeError, UnsupportedOperatorError
from d5.frameworks.tensorflow.operators import create_operator
from d5.frameworks.tensorflow.tensors import from_channels_last, to_channels_last


# ------------------------------------------------------------------------------------------ channels-last Concat

@pytest.mark.parametrize("rank", [3, 4, 5])
def test_concat_channels_last_matches_onnx_concat_on_every_axis(rank):
    rng = np.random.default_rng(0)
    for axis in range(-rank, rank):
        shapes = []
        for size in (2, 3):
            shape = [2, 3, 4, 5, 3][:rank]
            shape[axis] = size
            shapes.append(shape)
        arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
        op = create_operator("Concat", {"axis": axis})
        assert op.takes_channels_last([rank, rank])
        expected = op(*[tf.constant(a) for a in arrays])
        got = op.channels_last(*[to_channels_last(tf.constant(a)) for a in arrays])
        np.testing.assert_array_equal(from_channels_last(got).numpy(), expected.numpy())
        np.testing.assert_array_equal(got.numpy(), to_channels_last(expected).numpy())


def test_concat_takes_channels_last_only_for_spatial_ranks():
    op = create_operator("Concat", {"axis": 1})
    assert not op.takes_channels_last([2, 2])
    assert not op.takes_channels_last([6, 6])
    assert op.takes_channels_last([4, None, 4])


def test_concat_reports_mismatched_shapes():
    op = create_operator("Concat", {"axis": 0})
    with pytest.raises(ShapeError, match="must have the same rank"):
        op(tf.zeros([2, 3]), tf.zeros([2, 4]))


# ------------------------------------------------------------------------------------------ more oracle cases

CASES = [
    ("reshape_attribute_opset1", "Reshape", {"shape": [3, -1]}, [_rand(2, 3, 2)], {"opset": 1}),
    ("flatten_axis0", "Flatten", {"axis": 0}, [_rand(2, 3)], {}),
    ("flatten_negative", "Flatten", {"axis": -1}, [_rand(2, 3, 4)], {}),
    ("split_attribute_opset11", "Split", {"axis": 1, "split": [1, 3]}, [_rand(2, 4)], {"opset": 11, "outputs": 2}),
    ("split_zero_length", "Split", {"axis": 0}, [_rand(3, 2), _ints([0, 3])], {"outputs": 2}),
    ("slice_steps_3d", "Slice", {}, [_rand(3, 7, 4), _ints([0, -1, 1]), _ints([3, -8, 100]), _ints([0, 1, 2]),
                                     _ints([2, -2, 2])], {}),
    ("slice_empty", "Slice", {}, [_rand(3, 4), _ints([2]), _ints([1]), _ints([1])], {}),
    ("slice_huge_bounds", "Slice", {}, [_rand(5, 3), _ints([-2**63]), _ints([2**63 - 1]), _ints([0])], {}),
    ("pad_wrap_crop", "Pad", {"mode": "wrap"}, [_rand(3, 4), _ints([2, -1, 1, 3])], {}),
    ("pad_reflect_wide", "Pad", {"mode": "reflect"}, [_rand(2, 3), _ints([0, 5, 0, 4])], {}),
    ("pad_edge_axes", "Pad", {"mode": "edge"}, [_rand(2, 3, 4), _ints([1, 2, 0, 3]), None, _ints([0, -1])], {}),
    ("pad_attributes_opset2", "Pad", {"pads": [1, 0, 0, 1], "value": 2.5}, [_rand(2, 3)], {"opset": 2}),
    ("pad_int_default_value", "Pad", {}, [_ints(np.arange(6).reshape(2, 3)), _ints([0, 1, 1, 0])], {}),
    ("squeeze_attribute_opset11", "Squeeze", {"axes": [0]}, [_rand(1, 3)], {"opset": 11}),
    ("unsqueeze_many", "Unsqueeze", {}, [_rand(2, 3), _ints([4, 0, 2])], {}),
    ("expand_smaller_target", "Expand", {}, [_rand(2, 3), _ints([3])], {}),
    ("tile_zero", "Tile", {}, [_rand(2, 3), _ints([0, 2])], {}),
    ("size", "Size", {}, [_rand(2, 3, 4)], {}),
    ("shape_negative_start", "Shape", {"start": -2}, [_rand(2, 3, 4)], {}),
    ("gather_scalar_index", "Gather", {"axis": 1}, [_rand(2, 4), _ints(-1)], {}),
    ("gather_repeated", "Gather", {}, [_rand(3, 2), _ints([[2, 2], [0, 2]], np.int32)], {}),
    ("gather_elements_axis0_smaller", "GatherElements", {"axis": 0}, [_rand(3, 4), _ints([[2, 0], [1, 1]])], {}),
    ("gather_elements_3d_axis1", "GatherElements", {"axis": 1},
     [_rand(2, 3, 2), _ints(np.array([[[0, 2], [1, 0], [2, 2], [0, 1]], [[1, 1], [0, 0], [-1, 2], [1, 0]]]))], {}),
    ("gather_nd", "GatherND", {}, [_rand(2, 3, 4), _ints([[0, 1], [1, -1], [0, 1]])], {}),
    ("gather_nd_batch", "GatherND", {"batch_dims": 1}, [_rand(2, 3, 4), _ints([[[1], [2]], [[0], [0]]])], {}),
    ("gather_nd_full_depth", "GatherND", {}, [_rand(2, 3), _ints([[1, 2], [0, 0]])], {}),
    ("scatter_elements_none_duplicates", "ScatterElements", {"axis": 1},
     [_rand(2, 5), _ints([[1, 1, 3], [4, 0, 4]]), _rand(2, 3)], {}),
    ("scatter_elements_3d_axis2", "ScatterElements", {"axis": 2},
     [_rand(2, 3, 4), _ints(np.array([[[0, 3]], [[2, 1]]])), _rand(2, 1, 2)], {}),
    ("scatternd_none_duplicates", "ScatterND", {}, [_rand(4, 3), _ints([[1], [3], [1]]), _rand(3, 3)], {}),
    ("scatternd_add_elements", "ScatterND", {"reduction": "add"},
     [_rand(2, 3), _ints([[0, 1], [0, 1], [1, -1]]), _rand(3)], {}),
    ("scatter_elements_int_max", "ScatterElements", {"axis": 0, "reduction": "max"},
     [_ints([[1, 9], [4, 4]], np.int32), _ints([[1, 0], [1, 0]]), _ints([[7, 3], [2, 11]], np.int32)], {}),
    ("tensorscatter_circular_wrap", "TensorScatter", {"mode": "circular"},
     [_rand(2, 4, 3), _rand(2, 3, 3), _ints([3, 2])], {}),
    ("onehot_int_values", "OneHot", {"axis": 1}, [_ints([[1, 0], [2, 3]]), _ints(3), _ints([0, 5], np.int32)], {}),
    ("trilu_upper_batched_k", "Trilu", {}, [_rand(2, 4, 3), _ints(1)], {}),
    ("topk_axis1_3d", "TopK", {"axis": 1}, [_distinct(2, 5, 3), _ints([3])], {}),
    ("topk_smallest_int_extremes", "TopK", {"largest": 0},
     [_ints([[np.iinfo(np.int64).min, 3, np.iinfo(np.int64).max, 3, -2]]), _ints([4])], {}),
    ("topk_uint8_largest", "TopK", {}, [_ints([[200, 3, 255, 200]], np.uint8), _ints([3])], {}),
    ("compress_none_true", "Compress", {"axis": 1}, [_rand(2, 3), _ints([False, False])], {}),
    ("compress_numeric_condition", "Compress", {"axis": 0}, [_rand(3, 2), _ints([0, 2, 1], np.int32)], {}),
    ("nonzero_bool_3d", "NonZero", {}, [_ints(np.arange(12).reshape(2, 3, 2) % 3 == 0)], {}),
    ("unique_float_sorted", "Unique", {}, [_ints([0.5, -1.0, 0.5, 3.0, -1.0], np.float32)], {}),
    ("unique_axis1_sorted", "Unique", {"axis": 1}, [_ints([[2, 1, 2, 0], [5, 3, 5, 7]])], {}),
    ("unique_empty", "Unique", {}, [_ints(np.zeros(0, np.int64))], {}),
    ("constant_floats", "Constant", {"value_floats": [1.0, 2.5]}, [], {}),
    ("constant_ints", "Constant", {"value_ints": [3, -1]}, [], {}),
    ("constant_of_shape_scalar", "ConstantOfShape", {"value": np.array([True])}, [_ints(np.zeros(0, np.int64))], {}),
    ("range_int64_long", "Range", {}, [_ints(-5), _ints(1000), _ints(7)], {}),
    ("range_float64_descending", "Range", {}, [_ints(2.0, np.float64), _ints(-1.0, np.float64),
                                               _ints(-0.25, np.float64)], {}),
    ("eyelike_int64_below", "EyeLike", {"k": -1, "dtype": 7}, [_rand(3, 3)], {}),
]


@pytest.mark.parametrize("case", CASES, ids=[case[0] for case in CASES])
def test_more_cases_match_reference(case):
    check_against_reference("tensorflow", case)


@pytest.mark.parametrize("op_type, attributes, arrays, error, match", [
    ("Reshape", {}, [np.zeros((2, 3), np.float32), np.array([4, -1])], ShapeError, "cannot be inferred"),
    ("Transpose", {"perm": [0, 0]}, [np.zeros((2, 3), np.float32)], ShapeError, "not a permutation"),
    ("Squeeze", {}, [np.zeros((2, 3), np.float32), np.array([0])], ShapeError, "not of length 1"),
    ("Tile", {}, [np.zeros((2, 3), np.float32), np.array([2])], ShapeError, "one non-negative count per axis"),
    ("Expand", {}, [np.zeros((2, 3), np.float32), np.array([4, 3, 2])], ShapeError, "cannot be broadcast"),
    ("Pad", {"mode": "edge"}, [np.zeros((0, 3), np.float32), np.array([1, 0, 0, 0])], ShapeError,
     "cannot pad an axis of length 0"),
    ("Gather", {}, [np.zeros((2, 3), np.float32), np.array([2])], ShapeError, r"indices must lie in \[-2, 1\]"),
    ("GatherND", {}, [np.zeros((2, 3), np.float32), np.array([[0, 3]])], ShapeError, "index 3 .*out of range"),
    ("ScatterND", {}, [np.zeros((2, 3), np.float32), np.array([[-3]]), np.zeros((1, 3), np.float32)], ShapeError,
     "index -3 .*out of range"),
    ("Unique", {"axis": 2}, [np.zeros((2, 3), np.float32)], ShapeError, "axis 2 out of range"),
])
def test_bad_inputs_raise(op_type, attributes, arrays, error, match):
    from _oracle import check_error

    check_error("tensorflow", op_type, attributes, arrays, error, match)


# ------------------------------------------------------------------------------------------ inside tf.function

TRACED = [
    ("Reshape", {}, [np.arange(24, dtype=np.float32).reshape(2, 3, 4), np.array([0, -1])]),
    ("Slice", {}, [np.arange(20, dtype=np.float32).reshape(4, 5), np.array([3, 0]), np.array([-10, 5]),
                   np.array([0, 1]), np.array([-1, 2])]),
    ("Pad", {"mode": "reflect"}, [np.arange(12, dtype=np.float32).reshape(3, 4), np.array([1, 2, -1, 1])]),
    ("Pad", {}, [np.ones((2, 2), np.float32), np.array([1, 1, 0, 0]), np.array(3.0, np.float32)]),
    ("Split", {"axis": 1}, [np.arange(10, dtype=np.float32).reshape(2, 5), np.array([2, 3])]),
    ("Tile", {}, [np.ones((2, 1), np.float32), np.array([1, 3])]),
    ("Expand", {}, [np.ones((3, 1), np.float32), np.array([2, 1, 4])]),
    ("Squeeze", {}, [np.ones((1, 3, 1), np.float32), np.array([0])]),
    ("Unsqueeze", {}, [np.ones((2, 3), np.float32), np.array([-1])]),
    ("Gather", {"axis": 1}, [np.arange(6, dtype=np.float32).reshape(2, 3), np.array([2, -1])]),
    ("GatherElements", {"axis": 0}, [np.arange(6, dtype=np.float32).reshape(3, 2), np.array([[2, 0], [1, 1]])]),
    ("ScatterND", {}, [np.zeros((4, 2), np.float32), np.array([[1], [1], [3]]), np.ones((3, 2), np.float32)]),
    ("ScatterElements", {"reduction": "mul"}, [np.full((2, 2), 2.0, np.float32), np.array([[1, 1]]),
                                              np.array([[3.0, 5.0]], np.float32)]),
    ("TensorScatter", {"axis": 1}, [np.zeros((2, 4), np.float32), np.ones((2, 2), np.float32), np.array([0, 2])]),
    ("OneHot", {}, [np.array([0, 2]), np.array(3), np.array([0.0, 1.0], np.float32)]),
    ("Trilu", {}, [np.ones((3, 3), np.float32), np.array(1)]),
    ("TopK", {"largest": 0}, [np.array([[3.0, 1.0, 2.0, 1.0]], np.float32), np.array([2])]),
    ("Compress", {"axis": 0}, [np.arange(6, dtype=np.float32).reshape(3, 2), np.array([True, False, True])]),
    ("NonZero", {}, [np.array([[0, 1], [2, 0]], np.int32)]),
    ("Unique", {"sorted": 1}, [np.array([3, 1, 3, 2], np.int64)]),
    ("Unique", {"axis": 0}, [np.array([[2, 1], [0, 5], [2, 1]], np.int64)]),
    ("ConstantOfShape", {}, [np.array([2, 3])]),
    ("Range", {}, [np.array(1.0, np.float32), np.array(4.0, np.float32), np.array(0.5, np.float32)]),
    ("EyeLike", {"k": 1}, [np.zeros((3, 4), np.float32)]),
    ("DepthToSpace", {"blocksize": 2}, [np.arange(16, dtype=np.float32).reshape(1, 4, 2, 2)]),
    ("SpaceToDepth", {"blocksize": 2, "mode": "CRD"}, [np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)]),
    ("ReverseSequence", {}, [np.arange(6, dtype=np.float32).reshape(3, 2), np.array([3, 1])]),
    ("Shape", {"start": 1}, [np.zeros((2, 3, 4), np.float32)]),
    ("Size", {}, [np.zeros((2, 3), np.float32)]),
    ("Constant", {"value": np.arange(3, dtype=np.int32)}, []),
]


def _outputs(result):
    return [t.numpy() for t in (result if isinstance(result, tuple) else (result,))]


@pytest.mark.parametrize("op_type, attributes, arrays", TRACED, ids=[f"{t[0]}-{i}" for i, t in enumerate(TRACED)])
def test_converter_traces_like_eager(op_type, attributes, arrays):
    op = create_operator(op_type, attributes)
    eager = _outputs(op(*[tf.constant(a) for a in arrays]))
    # The data input is a traced argument; the shape-like inputs are constants of the function, as the executor
    # makes them.
    data = [tf.constant(a) for a in arrays[:1]]
    rest = arrays[1:]

    @tf.function
    def traced(*args):
        return op(*args, *[tf.constant(a) for a in rest])

    got = _outputs(traced(*data))
    assert len(got) == len(eager)
    for g, e in zip(got, eager):
        assert g.dtype == e.dtype
        np.testing.assert_array_equal(g, e)


def test_dynamic_shapes_flow_through_shape_operators():
    """NonZero's output has an unknown count inside a traced function; the shape operators after it cope."""
    ops = {name: create_operator(name, attrs) for name, attrs in [
        ("NonZero", {}), ("Transpose", {}), ("Shape", {}), ("Flatten", {"axis": 1}), ("Size", {}),
        ("Reshape", {}), ("Unsqueeze", {}), ("Concat", {"axis": 0}), ("Gather", {"axis": 0}),
        ("Unique", {}), ("ConstantOfShape", {})]}

    @tf.function
    def traced(x):
        found = ops["NonZero"](x)                                   # (2, ?)
        pairs = ops["Transpose"](found)                             # (?, 2)
        assert pairs.shape.as_list() == [None, 2]
        shape = ops["Shape"](pairs)
        flat = ops["Flatten"](pairs)
        reshaped = ops["Reshape"](pairs, tf.constant([-1]))
        more = ops["Concat"](reshaped, ops["Unsqueeze"](ops["Size"](pairs), tf.constant([0])))
        first = ops["Gather"](pairs, tf.constant(-1))
        unique = ops["Unique"](reshaped)[0]
        filled = ops["ConstantOfShape"](shape)
        return shape, flat, more, first, unique, filled

    x = tf.constant([[0, 3, 0], [1, 0, 2]])
    shape, flat, more, first, unique, filled = traced(x)
    assert shape.numpy().tolist() == [3, 2]
    assert flat.numpy().tolist() == [[0, 1], [1, 0], [1, 2]]
    assert more.numpy().tolist() == [0, 1, 1, 0, 1, 2, 6]
    assert first.numpy().tolist() == [1, 2]
    assert unique.numpy().tolist() == [0, 1, 2]
    assert filled.numpy().shape == (3, 2)


def test_gradient_through_traced_pad_and_scatter():
    """tf.GradientTape differentiates the converters in a traced function as eagerly."""
    pad = create_operator("Pad", {"mode": "wrap"})
    scatter = create_operator("ScatterND", {})
    x = tf.Variable(np.arange(6, dtype=np.float32).reshape(2, 3))
    updates = tf.Variable(np.ones((2, 6), np.float32))

    def loss():
        padded = pad(x, tf.constant([0, 2, 0, 1]))  # columns 1, 2, 0, 1, 2, 0
        written = scatter(padded, tf.constant([[0], [0]]), updates)
        return tf.reduce_sum(written * tf.reshape(tf.range(12, dtype=tf.float32), [2, 6]))

    def gradients(function):
        with tf.GradientTape() as tape:
            value = function()
        return [g.numpy() for g in tape.gradient(value, [x, updates])]

    eager, traced = gradients(loss), gradients(tf.function(loss))
    for e, t in zip(eager, traced):
        np.testing.assert_allclose(t, e)
    # Row 0 is overwritten (the second update wins it), so x's gradient comes from row 1 only; the first update
    # gets nothing.
    np.testing.assert_allclose(eager[1], [[0, 0, 0, 0, 0, 0], [0, 1, 2, 3, 4, 5]])
    np.testing.assert_allclose(eager[0], [[0, 0, 0], [8 + 11, 6 + 9, 7 + 10]])


def test_data_dependent_depth_is_refused_while_tracing():
    op = create_operator("OneHot", {})

    @tf.function
    def traced(indices, depth):
        return op(indices, depth, tf.constant([0.0, 1.0]))

    with pytest.raises(UnsupportedOperatorError, match="depth"):
        traced(tf.constant([0, 1]), tf.constant(3))
