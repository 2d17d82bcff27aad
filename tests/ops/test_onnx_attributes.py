"""d5.ops.onnx_attributes (every operator's attributes, parsed once for every framework) against onnx's operator
schemas, and the framework-neutral geometry both frameworks share (ConvTranspose's output, GridSample's taps).

A parser's attribute names and defaults are compared with ``onnx.defs.get_schema(op, opset).attributes`` for
every opset the parser answers for, so a wrong or missing default fails here; the few places where d5 knowingly
differs are listed with the reason. Then: both frameworks build every operator through the shared parsers
(no operator class restates attribute names and defaults), and a bad attribute gives the same d5 error, naming
the attribute, on both."""
from __future__ import annotations

import inspect
import itertools
import math

import numpy as np
import onnx.defs
import pytest
from onnx import helper

from d5.errors import ShapeError, UnsupportedOperatorError
from d5.ops import onnx_attributes as attributes_module
from d5.ops.onnx_attributes import REQUIRED, attribute_defaults, operator_attributes, parsed_operators
from d5.ops.onnx_semantics import conv_transpose_geometry, grid_sample_taps


def _schemas(op_type: str) -> list:
    """Every version of ``op_type``'s ONNX schema, oldest first (empty for d5's own operators)."""
    found, opset = [], 10_000
    while True:
        try:
            schema = onnx.defs.get_schema(op_type, opset)
        except onnx.defs.SchemaError:
            break
        found.append(schema)
        if schema.since_version <= 1:
            break
        opset = schema.since_version - 1
    return found[::-1]


#: Attributes of old schema versions d5 does not take (it never has): ``consumed_inputs`` (opsets 1-5),
#: ``is_test`` (BatchNormalization, Dropout before 7), ``output_sequence`` (recurrent before 7), ``broadcast``
#: (Gemm before 7), Pad-1's ``paddings`` (``pads`` since opset 2).
LEGACY = {"consumed_inputs", "is_test", "output_sequence", "broadcast", "paddings"}

#: (op, schema version, attribute) -> why d5's default differs from the schema's.
KNOWN_DIFFERENCES = {
    ("Clip", 6, "min"): "None (no bound) for -FLT_MAX; equal on finite inputs",
    ("Clip", 6, "max"): "None (no bound) for FLT_MAX; equal on finite inputs",
    ("GRU", 1, "direction"): "the opset-1 schema's default is the typo 'foward'",
    ("GridSample", 16, "mode"): "'linear' is opset 20's name of opset 16's 'bilinear' (the parser maps both)",
    ("Selu", 1, "alpha"): "d5 takes opset 6's exact constants; opset 1 rounded them",
    ("Selu", 1, "gamma"): "d5 takes opset 6's exact constants; opset 1 rounded them",
    ("DFT", 17, "axis"): "None: the axis input's default -2 (the same axis as ONNX's 1 for 1-D signals)",
    ("Range", 27, "stash_type"): "None: compute in the inputs' type unless stash_type is given (opset 11's rule)",
    **{("RNN", v, "activations"): "None: RECURRENT_DEFAULT_ACTIVATIONS, the schema's ['Tanh', 'Tanh'] per layer"
       for v in (1, 7, 14, 22)},
}

#: (op, attribute) -> why d5 takes an attribute no schema version of the operator has.
KNOWN_EXTRAS = {("Scatter", "reduction"): "the deprecated Scatter is ScatterElements (whose reduction d5 takes)"}

OPERATORS = [(op_type, since) for op_type, sinces in parsed_operators().items() for since in sinces]


def _normalized(value):
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, (list, tuple)):
        return tuple(_normalized(v) for v in value)
    return value


def _same(onnx_default, d5_default) -> bool:
    if isinstance(onnx_default, float) and isinstance(d5_default, (int, float)) and not isinstance(d5_default, bool):
        return math.isclose(onnx_default, d5_default, rel_tol=1e-7)
    return onnx_default == d5_default


@pytest.mark.parametrize("op_type, since", OPERATORS, ids=[f"{op}-{since}" for op, since in OPERATORS])
def test_a_parser_takes_its_schemas_attributes_with_onnx_defaults(op_type, since):
    schemas = _schemas(op_type)
    if not schemas:
        assert op_type == "MeanSquaredError", f"{op_type} has no ONNX schema"  # d5's own (domain ai.d5)
        return
    parser = attributes_module._parser(op_type, since)
    defaults = attribute_defaults(op_type, since)
    answered = [s for s in schemas if attributes_module._parser(op_type, s.since_version) is parser]
    for schema in answered:
        for name, attribute in schema.attributes.items():
            where = f"{op_type}-{schema.since_version}.{name}"
            if name in LEGACY:
                continue
            assert name in defaults, f"{where}: not taken by d5"
            if not attribute.default_value.name or (op_type, schema.since_version, name) in KNOWN_DIFFERENCES:
                continue
            expected = _normalized(helper.get_attribute_value(attribute.default_value))
            assert defaults[name] is not REQUIRED, f"{where}: ONNX defaults it to {expected!r}, d5 requires it"
            assert _same(expected, _normalized(defaults[name])), f"{where}: ONNX {expected!r}, d5 {defaults[name]!r}"
    known = {name for schema in schemas for name in schema.attributes}
    invented = sorted(name for name in defaults if name not in known and (op_type, name) not in KNOWN_EXTRAS)
    assert not invented, f"{op_type}: d5 takes attributes no ONNX version has: {invented}"


def test_the_known_differences_still_differ():
    # An entry that no longer differs (d5 or onnx changed) should be removed, not kept as a blind spot.
    for (op_type, version, name), why in KNOWN_DIFFERENCES.items():
        attribute = onnx.defs.get_schema(op_type, version).attributes[name]
        expected = _normalized(helper.get_attribute_value(attribute.default_value))
        assert not _same(expected, _normalized(attribute_defaults(op_type, version)[name])), (op_type, name, why)


def test_versioned_defaults():
    assert operator_attributes("Softmax", {}, opset=12).axis == 1
    assert operator_attributes("LogSoftmax", {}, opset=13).axis == -1
    assert operator_attributes("RoiAlign", {}, opset=10).half_pixel is False  # opset 10: output_half_pixel
    assert operator_attributes("RoiAlign", {}, opset=16).half_pixel is True
    assert operator_attributes("Hardmax", {}).axis == -1  # None: the newest


def test_records_are_immutable_and_converted():
    record = operator_attributes("Conv", {"auto_pad": b"SAME_UPPER", "strides": [2, 2], "group": 2})
    assert (record.auto_pad, record.strides, record.group, record.pads) == ("SAME_UPPER", (2, 2), 2, None)
    with pytest.raises(AttributeError):
        record.group = 3
    assert operator_attributes("ReduceSum", {"axes": np.array([1, -1])}).axes == [1, -1]
    assert operator_attributes("Gemm", {"transA": 1}).transA is True


def test_an_unknown_attribute_is_a_type_error_naming_it():
    with pytest.raises(TypeError, match="Conv has no attribute 'strides2'; its attributes are auto_pad, "):
        operator_attributes("Conv", {"strides2": [1]})
    with pytest.raises(TypeError, match="'op_name'"):  # a parser's own argument is no attribute
        operator_attributes("ConvInteger", {"op_name": "x"})
    with pytest.raises(TypeError, match="'input_forget'"):  # LSTM's, not RNN's
        operator_attributes("RNN", {"input_forget": 0})
    with pytest.raises(TypeError, match="'axis' attribute is required"):
        operator_attributes("Concat", {})


#: (op, attributes, error, pattern): a bad attribute refuses to build, the same way in every framework.
BAD_ATTRIBUTES = [
    ("Conv", {"group": 0}, ShapeError, "Conv: group must be a positive integer, got 0"),
    ("Conv", {"pads": [0, 0, 0]}, ShapeError, "attribute 'pads' must have an even number"),
    ("ConvInteger", {"dilations": [0]}, ShapeError, "ConvInteger: attribute 'dilations'"),
    ("ConvTranspose", {"output_padding": [-1]}, ShapeError, "attribute 'output_padding'"),
    ("MaxPool", {}, ShapeError, "kernel_shape attribute is required"),
    ("MaxPool", {"kernel_shape": [2], "storage_order": 2}, ShapeError, "storage_order must be 0"),
    ("AveragePool", {"kernel_shape": [2], "auto_pad": "SAME"}, ShapeError, "attribute 'auto_pad' must be one of"),
    ("LpPool", {}, ShapeError, "LpPool: the kernel_shape attribute is required"),
    ("MaxUnpool", {"kernel_shape": [2, 2], "strides": [1]}, ShapeError, "attribute 'strides' must have 2 values"),
    ("Col2Im", {"strides": [0, 1]}, ShapeError, "attribute 'strides'"),
    ("BatchNormalization", {"epsilon": -1.0}, ShapeError, "epsilon must be non-negative"),
    ("BatchNormalization", {"spatial": 0}, UnsupportedOperatorError, "spatial=0"),
    ("LayerNormalization", {"stash_type": 7}, ShapeError, "LayerNormalization: stash_type must be"),
    ("GroupNormalization", {"num_groups": 0}, ShapeError, "num_groups attribute is required"),
    ("LpNormalization", {"p": 3}, ShapeError, "p must be 1 or 2"),
    ("LRN", {"size": 4}, ShapeError, "size attribute is required and must be odd"),
    ("Gelu", {"approximate": "fast"}, ShapeError, "approximate must be 'none' or 'tanh'"),
    ("BitShift", {"direction": "UP"}, ShapeError, "direction must be 'LEFT' or 'RIGHT'"),
    ("Pad", {"mode": "mirror"}, ShapeError, "Pad: unknown mode 'mirror'"),
    ("DepthToSpace", {"blocksize": 2, "mode": "XYZ"}, ShapeError, "DepthToSpace: unknown mode 'XYZ'"),
    ("SpaceToDepth", {}, ShapeError, "SpaceToDepth: the blocksize attribute is required"),
    ("ReverseSequence", {"batch_axis": 2}, ShapeError, "batch_axis and time_axis must be 0 and 1"),
    ("ScatterND", {"reduction": "sub"}, ShapeError, "ScatterND: unknown reduction 'sub'"),
    ("TensorScatter", {"mode": "ring"}, ShapeError, "mode must be 'linear' or 'circular'"),
    ("GridSample", {"padding_mode": "wrap"}, ShapeError, "unknown padding_mode"),
    ("Resize", {"mode": "area"}, ShapeError, "Resize: unknown mode 'area'"),
    ("RoiAlign", {"output_height": 0}, ShapeError, "output_height and output_width must be >= 1"),
    ("NonMaxSuppression", {"center_point_box": 2}, ShapeError, "center_point_box must be 0 or 1"),
    ("Constant", {}, ShapeError, "exactly one value attribute must be set"),
    ("Range", {"stash_type": 10}, ShapeError, "stash_type must be 1 \\(FLOAT\\) or 11"),
    ("SoftmaxCrossEntropyLoss", {"reduction": "max"}, ShapeError, "SoftmaxCrossEntropyLoss: reduction must be"),
    ("Attention", {"qk_matmul_output_mode": 4}, ShapeError, "qk_matmul_output_mode must be 0, 1, 2 or 3"),
    ("GRU", {"direction": "up"}, ShapeError, "GRU: direction must be forward, reverse or bidirectional"),
    ("LSTM", {"activations": ["Sigmoid", "Tanh", "Gauss"]}, UnsupportedOperatorError, "activation 'Gauss'"),
]


@pytest.mark.parametrize("op_type, attributes, error, pattern", BAD_ATTRIBUTES,
                         ids=[f"{case[0]}-{k}" for k, case in enumerate(BAD_ATTRIBUTES)])
def test_a_bad_attribute_gives_the_same_d5_error_in_every_framework(op_type, attributes, error, pattern):
    from d5.frameworks.reference.operators import create_operator as reference_operator

    builders = [lambda: operator_attributes(op_type, attributes), lambda: reference_operator(op_type, attributes)]
    pytest.importorskip("torch")
    from d5.frameworks.pytorch.operators import create_operator as torch_operator

    builders.append(lambda: torch_operator(op_type, attributes))
    messages = []
    for build in builders:
        with pytest.raises(error, match=pattern) as info:
            build()
        messages.append(str(info.value))
    assert len(set(messages)) == 1, messages


def _init_parameters(cls) -> list[str]:
    init = next(k.__dict__["__init__"] for k in cls.__mro__ if "__init__" in k.__dict__)
    return [name for name, p in inspect.signature(init).parameters.items()
            if name != "self" and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]


def test_both_frameworks_take_the_shared_attributes_and_restate_none():
    """Every operator version both frameworks implement is built from the shared parser of its attributes: no
    class declares attribute parameters (names, defaults) of its own, and every one with attributes is parsed."""
    pytest.importorskip("torch")
    from d5.frameworks.pytorch.operators import REGISTRY as torch_registry
    from d5.frameworks.reference.operators import REGISTRY as reference_registry

    parsed = parsed_operators()
    common = sorted(set(reference_registry.supported()) & set(torch_registry.supported()))
    restating, unparsed = [], []
    for op_type in common:
        for since in sorted(set(reference_registry.versions(op_type)) | set(torch_registry.versions(op_type))):
            classes = [reference_registry.lookup(op_type, since), torch_registry.lookup(op_type, since)]
            if any(_init_parameters(cls) for cls in classes):
                restating.append(f"{op_type}-{since}")
            # (opset 1-6's binary operators had broadcasting attributes d5 never took)
            if any(s.attributes.keys() - LEGACY for s in _schemas(op_type) if s.since_version >= 7) \
                    and op_type not in parsed:
                unparsed.append(op_type)
    assert not restating, f"operator classes declaring their own attribute parameters: {restating}"
    assert not unparsed, f"operators with ONNX attributes and no shared parser: {sorted(set(unparsed))}"


# ------------------------------------------------------------------------------------------ ConvTranspose

def _transpose_cases():
    rng = np.random.default_rng(7)
    for _ in range(40):
        rank = int(rng.integers(1, 4))
        spatial = tuple(int(v) for v in rng.integers(1, 6, rank))
        kernel = tuple(int(v) for v in rng.integers(1, 4, rank))
        strides = tuple(int(v) for v in rng.integers(1, 4, rank))
        dilations = tuple(int(v) for v in rng.integers(1, 3, rank))
        output_padding = tuple(int(rng.integers(0, min(s, d))) for s, d in zip(strides, dilations))
        pads = tuple(int(v) for v in rng.integers(0, 2, 2 * rank))
        yield spatial, kernel, strides, dilations, output_padding, pads


@pytest.mark.parametrize("spatial, kernel, strides, dilations, output_padding, pads", list(_transpose_cases()))
def test_conv_transpose_geometry_is_torchs(spatial, kernel, strides, dilations, output_padding, pads):
    torch = pytest.importorskip("torch")
    rank = len(spatial)
    try:
        geometry = conv_transpose_geometry(spatial, kernel, strides=strides, dilations=dilations,
                                           output_padding=output_padding, pads=pads, output_shape=None)
    except UnsupportedOperatorError:
        natural = [s * (i - 1) + op + (k - 1) * d + 1
                   for s, i, op, k, d in zip(strides, spatial, output_padding, kernel, dilations)]
        assert any(n - pads[a] - pads[a + rank] <= 0 for a, n in enumerate(natural))
        return
    convolution = {1: torch.nn.functional.conv_transpose1d, 2: torch.nn.functional.conv_transpose2d,
                   3: torch.nn.functional.conv_transpose3d}[rank]
    x, w = torch.zeros((1, 1) + spatial), torch.zeros((1, 1) + kernel)
    full = convolution(x, w, stride=strides, dilation=dilations)
    assert tuple(full.shape[2:]) == geometry.full
    assert geometry.out == tuple(f + op - pads[a] - pads[a + rank]
                                 for a, (f, op) in enumerate(zip(geometry.full, output_padding)))
    assert geometry.pads_begin == pads[:rank]
    if pads[:rank] == pads[rank:]:  # torch pads symmetrically only
        padded = convolution(x, w, stride=strides, dilation=dilations, padding=pads[:rank],
                             output_padding=output_padding)
        assert tuple(padded.shape[2:]) == geometry.out
    # sides: what pads (crops) the full transposed convolution to the output
    assert tuple(f + begin + end for f, (begin, end) in zip(geometry.full, geometry.sides)) == geometry.out


def test_conv_transpose_geometry_with_output_shape_and_same_padding():
    # A 2-wide input, stride 2, kernel 3: the unpadded output has 5 positions.
    same = dict(strides=(2,), dilations=None, output_padding=None, pads=None)
    assert conv_transpose_geometry((2,), (3,), output_shape=(4,), auto_pad="SAME_UPPER", **same).pads_begin == (0,)
    assert conv_transpose_geometry((2,), (3,), output_shape=(4,), auto_pad="SAME_LOWER", **same).pads_begin == (1,)
    assert conv_transpose_geometry((2,), (3,), output_shape=None, auto_pad="SAME_UPPER", **same).out == (4,)
    # output_shape may name N and C too.
    assert conv_transpose_geometry((2,), (3,), output_shape=(1, 1, 5), **same).out == (5,)
    with pytest.raises(ShapeError, match="output_shape must have 1 values"):
        conv_transpose_geometry((2,), (3,), output_shape=(4, 4), **same)
    with pytest.raises(ShapeError, match="strides must have 2 values"):
        conv_transpose_geometry((2, 2), (3, 3), strides=(2,), dilations=None, output_padding=None, pads=None,
                                output_shape=None)
    with pytest.raises(UnsupportedOperatorError, match="negative leading pads and empty outputs"):
        conv_transpose_geometry((2,), (3,), output_shape=(9,), **same)


# --------------------------------------------------------------------------------------------- GridSample

@pytest.mark.parametrize("mode, padding_mode, align_corners",
                         list(itertools.product(("nearest", "linear", "cubic"), ("zeros", "border", "reflection"),
                                                (False, True))))
def test_grid_sample_taps_are_the_same_for_numpy_and_torch(mode, padding_mode, align_corners):
    torch = pytest.importorskip("torch")
    grid = np.random.default_rng(3).uniform(-1.6, 1.6, (2, 5, 7))
    grid[0, 0, :3] = (-1.0, 0.0, 1.0)  # the corners and the centre
    for size in (1, 2, 5):
        options = dict(align_corners=align_corners, mode=mode, padding_mode=padding_mode)
        by_numpy = grid_sample_taps(grid, size, **options)
        by_torch = grid_sample_taps(torch.from_numpy(grid), size, xp=torch, **options)
        assert len(by_numpy) == len(by_torch) == {"nearest": 1, "linear": 2, "cubic": 4}[mode]
        for (index, weight), (t_index, t_weight) in zip(by_numpy, by_torch):
            assert index.dtype == np.int64 and t_index.dtype == torch.int64
            assert 0 <= index.min() and index.max() < size
            np.testing.assert_array_equal(index, t_index.numpy())
            np.testing.assert_allclose(weight, t_weight.numpy(), rtol=1e-12, atol=1e-12)
        if mode == "linear" and padding_mode == "border":
            assert np.allclose(sum(w for _, w in by_numpy), 1.0)  # the weights of in-image samples sum to 1


def test_grid_sample_taps_read_zero_outside_with_zeros_padding():
    [(index_left, left), (index_right, right)] = grid_sample_taps(np.array([-1.0, 1.0]), 2, align_corners=False,
                                                                  mode="linear", padding_mode="zeros")
    # -1 and 1 are the outer edges: half of each sample falls outside the 2-pixel image and reads 0.
    assert left.tolist() == [0.0, 0.5] and right.tolist() == [0.5, 0.0]
    assert index_left.tolist() == [0, 1] and index_right.tolist() == [0, 1]


def test_text_attributes_are_decoded():
    assert operator_attributes("RoiAlign", {"mode": b"AVG"}).mode == "avg"
    assert operator_attributes("Einsum", {"equation": b"ij, jk -> ik"}).equation == "ij,jk->ik"
    assert operator_attributes("Resize", {"coordinate_transformation_mode": b"align_corners"}).coordinate_mode == \
        "align_corners"
