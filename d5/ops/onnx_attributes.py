"""ONNX operator attributes, parsed once for every framework.

A framework's operator is built from an ONNX node's attributes (keyword arguments); it hands them to
:func:`operator_attributes`, which returns a small frozen record, and keeps the record's fields
(:func:`adopt`)::

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("Gemm", attributes))

The parser of each operator holds its ONNX attribute names with ONNX's defaults (the attributes of every opset
d5 implements the operator at: Dropout's ``ratio`` from before opset 12, Split's ``split`` from before 13, ...),
converts them (numbers, flags, text, index lists) and checks what can be checked without an input. Names,
defaults and checks are therefore written here once; what a framework derives from them (a dtype, a chosen
kernel) stays with it, and so do checks that need an input's shape. Parsing happens when an operator is built,
never per call. ``tests/ops/test_onnx_attributes.py`` compares every parser with onnx's operator schemas.

An unknown attribute is a TypeError (as an unknown keyword argument), which
:meth:`d5.ops.registry.OperatorRegistry.create` reports as :class:`d5.errors.UnsupportedOperatorError`; a bad
value is a :class:`d5.errors.ShapeError` naming the operator and the attribute.

>>> operator_attributes("Gemm", {"transB": 1})
GemmAttributes(alpha=1.0, beta=1.0, transA=False, transB=True)
>>> operator_attributes("Softmax", {}, opset=11).axis, operator_attributes("Softmax", {}).axis
(1, -1)
>>> operator_attributes("Conv", {"strides": [0, 1]})
Traceback (most recent call last):
  ...
d5.errors.ShapeError: Conv: attribute 'strides' must hold integers from 1 to 2147483647, got [0, 1]
"""
from __future__ import annotations

import bisect
import collections
import dataclasses
import functools
import inspect
import math
from typing import Any, Callable, Mapping

import numpy as np

from d5.errors import ShapeError, UnsupportedOperatorError
from d5.ops.onnx_semantics import as_text, check_window_attributes, int_tuple

#: Marks an attribute without a default: the node must give it.
REQUIRED = type("Required", (), {"__repr__": lambda self: "REQUIRED"})()

# op type -> ([since, ...] ascending, [parser, ...] in the same order), as OperatorRegistry keeps classes.
_PARSERS: dict[str, tuple[list[int], list[Callable[..., Any]]]] = {}


def operator_attributes(op_type: str, attributes: Mapping[str, Any], opset: int | None = None) -> Any:
    """The record of ``op_type``'s ``attributes`` at ``opset`` (None: the newest; the parser of the newest
    version not newer than ``opset``, as OperatorRegistry picks classes). A TypeError for an attribute the
    operator does not have.

    >>> operator_attributes("Gemm", {"gamma": 1})
    Traceback (most recent call last):
      ...
    TypeError: Gemm has no attribute 'gamma'; its attributes are alpha, beta, transA, transB
    """
    parser = _parser(op_type, opset)
    names = _accepted(parser)
    unknown = sorted(set(attributes) - set(names))
    if unknown:
        listed = ", ".join(names) if names else "none"
        raise TypeError(f"{op_type} has no attribute {unknown[0]!r}; its attributes are {listed}")
    return parser(**attributes)


def attribute_defaults(op_type: str, opset: int | None = None) -> dict[str, Any]:
    """The attributes ``op_type`` accepts at ``opset`` with the defaults d5 gives absent ones (as the node
    would write them; :data:`REQUIRED` where it must give them).

    >>> attribute_defaults("LeakyRelu")
    {'alpha': 0.01}
    """
    return _defaults_of(_parser(op_type, opset))


def parsed_operators() -> dict[str, list[int]]:
    """Op type -> the opsets at which its parser changes (ascending)."""
    return {op_type: list(sinces) for op_type, (sinces, _) in sorted(_PARSERS.items())}


def adopt(op: Any, record: Any) -> Any:
    """Set every field of an attribute ``record`` (a NamedTuple or a dataclass) as an attribute of ``op`` under
    the field's name, and return the record.

    >>> class Op: pass
    >>> adopt(Op(), operator_attributes("Celu", {"alpha": 2})).alpha
    2.0
    """
    fields = record._asdict() if hasattr(record, "_asdict") else {
        field.name: getattr(record, field.name) for field in dataclasses.fields(record)}
    for name, value in fields.items():
        setattr(op, name, value)
    return record


def _parser(op_type: str, opset: int | None) -> Callable[..., Any]:
    entry = _PARSERS.get(op_type)
    if entry is None:
        raise KeyError(f"d5 parses no attributes of operator {op_type!r}")
    sinces, parsers = entry
    index = bisect.bisect(sinces, opset if opset is not None else math.inf) - 1
    return parsers[max(index, 0)]


@functools.lru_cache(maxsize=None)
def _accepted(parser: Callable[..., Any]) -> tuple[str, ...]:
    return tuple(_defaults_of(parser))


def _defaults_of(parser: Callable[..., Any]) -> dict[str, Any]:
    if isinstance(parser, _Plain):
        return {name: default for name, (default, _) in parser.spec.items()}
    return {name: REQUIRED if parameter.default is inspect.Parameter.empty else parameter.default
            for name, parameter in inspect.signature(parser).parameters.items()
            if parameter.kind is inspect.Parameter.KEYWORD_ONLY}


def _register(parser: Callable[..., Any], *op_types: str, since: int = 1) -> None:
    for op_type in op_types:
        sinces, parsers = _PARSERS.setdefault(op_type, ([], []))
        index = bisect.bisect(sinces, since)
        sinces.insert(index, since)
        parsers.insert(index, parser)


def parses(*op_types: str, since: int = 1, op_name: str | None = None,
           **defaults: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: register a parser for ``op_types`` from opset ``since`` on; ``op_name``: its first argument, the
    operator its errors name; ``defaults``: attribute defaults of these versions that differ from the parser's."""
    def decorate(parser: Callable[..., Any]) -> Callable[..., Any]:
        bound = functools.partial(parser, *([] if op_name is None else [op_name]), **defaults)
        _register(bound if op_name is not None or defaults else parser, *op_types, since=since)
        return parser
    return decorate


# ------------------------------------------------------------------------------------------- plain values

def _optional(convert: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda value: None if value is None else convert(value)


def _raw(value: Any) -> Any:
    return value


#: A record type: a NamedTuple of the fields named (a space-separated string or a sequence of names).
_record = collections.namedtuple

#: ``ints`` attributes kept as lists of Python ints (an attribute given as one number is a 1-element list).
_int_list = _optional(lambda values: [int(v) for v in np.asarray(values).reshape(-1)])


class _Plain:
    """The parser of an operator whose attributes are plain values: each converted, none checked (``spec``:
    attribute -> (ONNX default or REQUIRED, conversion)); the record is a NamedTuple with the ONNX names."""

    def __init__(self, op_type: str, spec: dict[str, tuple[Any, Callable[[Any], Any]]]) -> None:
        self.op_type, self.spec = op_type, spec
        self.record = _record(f"{op_type}Attributes", list(spec))

    def __call__(self, **attributes: Any) -> Any:
        values = []
        for name, (default, convert) in self.spec.items():
            value = attributes.get(name, default)
            if value is REQUIRED:
                raise TypeError(f"{self.op_type}: the {name!r} attribute is required")
            values.append(convert(value))
        return self.record(*values)


def _plain(*op_types: str, since: int = 1, **spec: tuple[Any, Callable[[Any], Any]]) -> None:
    for op_type in op_types:
        _register(_Plain(op_type, spec), op_type, since=since)


# activation
_plain("Celu", "Elu", alpha=(1.0, float))
_plain("HardSigmoid", alpha=(0.2, float), beta=(0.5, float))
_plain("LeakyRelu", alpha=(0.01, float))
_plain("Selu", alpha=(1.67326319217681884765625, float), gamma=(1.05070102214813232421875, float))
_plain("Shrink", bias=(0.0, float), lambd=(0.5, float))
_plain("Swish", "SwiGLU", "ThresholdedRelu", alpha=(1.0, float))
_plain("Softmax", "LogSoftmax", "Hardmax", axis=(1, int))  # opsets 1-12: the axis the input is coerced to 2-D at
_plain("Softmax", "LogSoftmax", "Hardmax", since=13, axis=(-1, int))
# ratio: an attribute before opset 12, an input since (which takes precedence)
_plain("Dropout", seed=(None, _optional(int)), ratio=(0.5, float))
# elementwise
_plain("BitCast", to=(0, int))
_plain("Cast", to=(REQUIRED, _raw), saturate=(1, int), round_mode=("up", as_text))
_plain("CastLike", saturate=(1, int), round_mode=("up", as_text))
_plain("Clip", min=(None, _raw), max=(None, _raw))  # attributes before opset 11, inputs since
_plain("IsInf", detect_negative=(1, bool), detect_positive=(1, bool))
_plain("Mod", fmod=(0, bool))
# reduction (axes: an attribute before opsets 13/18, an input since)
_plain("ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax", "ReduceMean", "ReduceMin",
       "ReduceProd", "ReduceSum", "ReduceSumSquare",
       axes=(None, _int_list), keepdims=(1, bool), noop_with_empty_axes=(0, bool))
_plain("ArgMax", "ArgMin", axis=(0, int), keepdims=(1, bool), select_last_index=(0, bool))
_plain("CumSum", "CumProd", exclusive=(0, bool), reverse=(0, bool))
# normalization
_plain("InstanceNormalization", epsilon=(1e-5, float))
_plain("MeanVarianceNormalization", axes=((0, 2, 3), int_tuple))
# shape (starts, ends, axes, split, shape, pads: attributes of early opsets, inputs since)
_plain("Concat", axis=(REQUIRED, int))
_plain("Flatten", axis=(1, int))
_plain("Reshape", allowzero=(0, bool), shape=(None, _int_list))
_plain("Shape", start=(0, int), end=(None, _optional(int)))
_plain("Slice", starts=(None, _int_list), ends=(None, _int_list), axes=(None, _int_list))
_plain("Split", axis=(0, int), split=(None, _int_list), num_outputs=(None, _optional(int)))
_plain("Squeeze", "Unsqueeze", axes=(None, _int_list))
_plain("Transpose", perm=(None, _int_list))
# indexing
_plain("Compress", axis=(None, _optional(int)))
_plain("Gather", "GatherElements", axis=(0, int))
_plain("GatherND", batch_dims=(0, int))
_plain("OneHot", axis=(-1, int))
_plain("TopK", axis=(-1, int), largest=(1, bool), sorted=(1, bool), k=(None, _raw))  # k: an attribute in opset 1
_plain("Trilu", upper=(1, bool))
_plain("Unique", axis=(None, _optional(int)), sorted=(1, bool))
# image, signal, generator
_plain("AffineGrid", align_corners=(0, bool))
_plain("CenterCropPad", axes=(None, int_tuple))
_plain("BlackmanWindow", "HammingWindow", "HannWindow", periodic=(1, bool), output_datatype=(1, int))
_plain("MelWeightMatrix", output_datatype=(1, int))
# DFT's axis: an attribute in opset 17 (d5: None, the input's default -2, when absent), an input since 20
_plain("DFT", axis=(None, _raw), inverse=(0, bool), onesided=(0, bool))
_plain("STFT", onesided=(1, bool))
_plain("ConstantOfShape", value=(None, _raw))
_plain("EyeLike", dtype=(None, _raw), k=(0, int))
# linear, attention, quantization
_plain("Einsum", equation=(REQUIRED, lambda equation: as_text(equation).replace(" ", "")))
_plain("Gemm", alpha=(1.0, float), beta=(1.0, float), transA=(0, bool), transB=(0, bool))
_plain("RotaryEmbedding", interleaved=(0, bool), num_heads=(0, int), rotary_embedding_dim=(0, int))
_plain("DequantizeLinear", axis=(1, int), block_size=(0, int), output_dtype=(0, int))
_plain("QuantizeLinear", axis=(1, int), saturate=(1, int), block_size=(0, int), output_dtype=(0, int),
       precision=(0, int))


# -------------------------------------------------------------------------------- windows: conv, pooling
# Window attributes stay None where absent (each framework fills per-axis defaults for an input's rank).

ConvAttributes = _record("ConvAttributes", "auto_pad dilations group kernel_shape pads strides")
ConvTransposeAttributes = _record("ConvTransposeAttributes",
                                  ConvAttributes._fields + ("output_padding", "output_shape"))


@parses("Conv")
@parses("ConvInteger", op_name="ConvInteger")
@parses("QLinearConv", op_name="QLinearConv")
def conv_attributes(op_name: str = "Conv", *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None,
                    pads=None, strides=None) -> ConvAttributes:
    """Conv's attributes (also ConvInteger's and QLinearConv's) as int tuples, checked
    (:func:`d5.ops.onnx_semantics.check_window_attributes`).

    >>> conv_attributes(pads=[1, 1, 1, 1]).pads
    (1, 1, 1, 1)
    """
    attributes = ConvAttributes(as_text(auto_pad), int_tuple(dilations), int(group), int_tuple(kernel_shape),
                                int_tuple(pads), int_tuple(strides))
    _check_conv(op_name, attributes)
    return attributes


@parses("ConvTranspose")
def conv_transpose_attributes(*, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, output_padding=None,
                              output_shape=None, pads=None, strides=None) -> ConvTransposeAttributes:
    """ConvTranspose's attributes as int tuples, checked as Conv's (and ``output_padding``)."""
    attributes = ConvTransposeAttributes(as_text(auto_pad), int_tuple(dilations), int(group), int_tuple(kernel_shape),
                                         int_tuple(pads), int_tuple(strides), int_tuple(output_padding),
                                         int_tuple(output_shape))
    _check_conv("ConvTranspose", attributes, output_padding=attributes.output_padding)
    return attributes


def _check_conv(op_name: str, attributes: Any, **more: Any) -> None:
    if attributes.group < 1:
        raise ShapeError(f"{op_name}: group must be a positive integer, got {attributes.group}")
    check_window_attributes(op_name, auto_pad=attributes.auto_pad, kernel_shape=attributes.kernel_shape,
                            strides=attributes.strides, dilations=attributes.dilations, pads=attributes.pads, **more)


_POOL_FIELDS = ("kernel_shape", "auto_pad", "ceil_mode", "dilations", "pads", "strides")
MaxPoolAttributes = _record("MaxPoolAttributes", _POOL_FIELDS + ("storage_order",))
AveragePoolAttributes = _record("AveragePoolAttributes", _POOL_FIELDS + ("count_include_pad",))
LpPoolAttributes = _record("LpPoolAttributes", _POOL_FIELDS + ("p",))


def _pool(op_name: str, record: type, kernel_shape, auto_pad, ceil_mode, dilations, pads, strides, extra) -> Any:
    if kernel_shape is None:
        raise ShapeError(f"{op_name}: the kernel_shape attribute is required (e.g. kernel_shape=[2, 2])")
    attributes = record(int_tuple(kernel_shape), as_text(auto_pad), bool(ceil_mode), int_tuple(dilations),
                        int_tuple(pads), int_tuple(strides), extra)
    check_window_attributes(op_name, auto_pad=attributes.auto_pad, kernel_shape=attributes.kernel_shape,
                            strides=attributes.strides, dilations=attributes.dilations, pads=attributes.pads)
    return attributes


@parses("MaxPool")
def max_pool_attributes(*, kernel_shape=None, auto_pad="NOTSET", ceil_mode=0, dilations=None, pads=None,
                        storage_order=0, strides=None) -> MaxPoolAttributes:
    """MaxPool's attributes, checked; ``storage_order`` 0 (row-major indices) or 1 (column-major)."""
    if int(storage_order) not in (0, 1):
        raise ShapeError(f"MaxPool: storage_order must be 0 (row-major) or 1 (column-major), got {storage_order}")
    return _pool("MaxPool", MaxPoolAttributes, kernel_shape, auto_pad, ceil_mode, dilations, pads, strides,
                 int(storage_order))


@parses("AveragePool")
def average_pool_attributes(*, kernel_shape=None, auto_pad="NOTSET", ceil_mode=0, count_include_pad=0,
                            dilations=None, pads=None, strides=None) -> AveragePoolAttributes:
    """AveragePool's attributes, checked."""
    return _pool("AveragePool", AveragePoolAttributes, kernel_shape, auto_pad, ceil_mode, dilations, pads, strides,
                 bool(count_include_pad))


@parses("LpPool")
def lp_pool_attributes(*, kernel_shape=None, p=2, auto_pad="NOTSET", pads=None, strides=None, dilations=None,
                       ceil_mode=0) -> LpPoolAttributes:
    """LpPool's attributes, checked."""
    return _pool("LpPool", LpPoolAttributes, kernel_shape, auto_pad, ceil_mode, dilations, pads, strides, float(p))


MaxUnpoolAttributes = _record("MaxUnpoolAttributes", "kernel_shape pads strides")


@parses("MaxUnpool")
def max_unpool_attributes(*, kernel_shape=None, pads=None, strides=None) -> MaxUnpoolAttributes:
    """MaxUnpool's attributes with the default pads (0) and strides (1) filled in, checked."""
    if not kernel_shape:
        raise ShapeError("MaxUnpool: the kernel_shape attribute is required (e.g. kernel_shape=[2, 2])")
    kernel_shape = int_tuple(kernel_shape)
    rank = len(kernel_shape)
    pads = int_tuple(pads) if pads else (0,) * (2 * rank)
    strides = int_tuple(strides) if strides else (1,) * rank
    check_window_attributes("MaxUnpool", kernel_shape=kernel_shape, strides=strides, pads=pads)
    if len(pads) != 2 * rank or len(strides) != rank:
        raise ShapeError(f"MaxUnpool: kernel_shape {list(kernel_shape)} needs {2 * rank} pads and {rank} "
                         f"strides, got pads {list(pads)} and strides {list(strides)}")
    return MaxUnpoolAttributes(kernel_shape, pads, strides)


Col2ImAttributes = _record("Col2ImAttributes", "dilations pads strides")


@parses("Col2Im")
def col2im_attributes(*, dilations=None, pads=None, strides=None) -> Col2ImAttributes:
    """Col2Im's attributes as int tuples, checked."""
    attributes = Col2ImAttributes(int_tuple(dilations), int_tuple(pads), int_tuple(strides))
    check_window_attributes("Col2Im", strides=attributes.strides, dilations=attributes.dilations, pads=attributes.pads)
    return attributes


# ------------------------------------------------------------------------------------------ normalization

BatchNormalizationAttributes = _record("BatchNormalizationAttributes", "epsilon momentum training_mode")


@parses("BatchNormalization")
def batch_normalization_attributes(*, epsilon=1e-5, momentum=0.9, training_mode=0,
                                   spatial=1) -> BatchNormalizationAttributes:
    """BatchNormalization's attributes: ``epsilon`` non-negative; ``spatial=0`` (opsets before 9) unsupported."""
    attributes = BatchNormalizationAttributes(float(epsilon), float(momentum), bool(training_mode))
    if not attributes.epsilon >= 0:
        raise ShapeError(f"BatchNormalization: epsilon must be non-negative, got {epsilon}")
    if int(spatial) != 1:
        # spatial=0 (opset < 9: statistics per element, not per channel) is long deprecated.
        raise UnsupportedOperatorError("BatchNormalization: spatial=0 (per-element statistics, opset < 9) is not "
                                       "supported; re-export the model with opset >= 9")
    return attributes


#: The TensorProto float types a normalization may compute its statistics in (``stash_type``).
STASH_TYPES = (1, 10, 11, 16)


def _stash_type(op_name: str, stash_type: Any) -> int:
    if int(stash_type) not in STASH_TYPES:
        raise ShapeError(f"{op_name}: stash_type must be a float TensorProto type (1 = float32, 11 = float64, ...), "
                         f"got {stash_type}")
    return int(stash_type)


StashedNormalizationAttributes = _record("StashedNormalizationAttributes", "axis epsilon stash_type")


@parses("LayerNormalization", op_name="LayerNormalization")
@parses("RMSNormalization", op_name="RMSNormalization")
def stashed_normalization_attributes(op_name: str, *, axis=-1, epsilon=1e-5,
                                     stash_type=1) -> StashedNormalizationAttributes:
    """LayerNormalization's and RMSNormalization's attributes (``stash_type`` one of :data:`STASH_TYPES`)."""
    return StashedNormalizationAttributes(int(axis), float(epsilon), _stash_type(op_name, stash_type))


GroupNormalizationAttributes = _record("GroupNormalizationAttributes", "num_groups epsilon stash_type")


@parses("GroupNormalization", since=18)
def group_normalization_attributes(*, num_groups=None, epsilon=1e-5, stash_type=1) -> GroupNormalizationAttributes:
    """GroupNormalization's attributes: ``num_groups`` required and >= 1 (``stash_type``: opset 21's)."""
    if num_groups is None or int(num_groups) < 1:
        raise ShapeError(f"GroupNormalization: the num_groups attribute is required and must be >= 1, "
                         f"got {num_groups}")
    return GroupNormalizationAttributes(int(num_groups), float(epsilon), _stash_type("GroupNormalization", stash_type))


LpNormalizationAttributes = _record("LpNormalizationAttributes", "axis p")


@parses("LpNormalization")
def lp_normalization_attributes(*, axis=-1, p=2) -> LpNormalizationAttributes:
    """LpNormalization's attributes; ``p`` is 1 or 2."""
    if int(p) not in (1, 2):
        raise ShapeError(f"LpNormalization: p must be 1 or 2, got {p}")
    return LpNormalizationAttributes(int(axis), int(p))


LRNAttributes = _record("LRNAttributes", "size alpha beta bias")


@parses("LRN")
def lrn_attributes(*, size=None, alpha=1e-4, beta=0.75, bias=1.0) -> LRNAttributes:
    """LRN's attributes checked: ``size`` odd and >= 1, the others finite. Raises ShapeError saying what to use.

    >>> lrn_attributes(size=5)
    LRNAttributes(size=5, alpha=0.0001, beta=0.75, bias=1.0)
    """
    if size is None or int(size) < 1 or int(size) % 2 == 0:
        raise ShapeError(f"LRN: the size attribute is required and must be odd and >= 1 (e.g. size=5), got "
                         f"{size}; an even window has no centre (onnxruntime refuses it, PyTorch and ONNX's "
                         f"formula centre it differently): use size - 1 or size + 1")
    values = (float(alpha), float(beta), float(bias))
    for name, value in zip(("alpha", "beta", "bias"), values):
        if not math.isfinite(value):
            raise ShapeError(f"LRN: attribute {name!r} must be a finite number, got {value}")
    return LRNAttributes(int(size), *values)


# ------------------------------------------------------------------------------- activations, elementwise

GeluAttributes = _record("GeluAttributes", "approximate")


@parses("Gelu")
def gelu_attributes(*, approximate="none") -> GeluAttributes:
    """Gelu's ``approximate``: none (the exact erf form) or tanh."""
    if as_text(approximate) not in ("none", "tanh"):
        raise ShapeError(f"Gelu: approximate must be 'none' or 'tanh', got {as_text(approximate)!r}")
    return GeluAttributes(as_text(approximate))


BitShiftAttributes = _record("BitShiftAttributes", "direction")


@parses("BitShift")
def bit_shift_attributes(*, direction="") -> BitShiftAttributes:
    """BitShift's ``direction``, LEFT or RIGHT in either case (ONNX requires it)."""
    if as_text(direction).upper() not in ("LEFT", "RIGHT"):
        raise ShapeError(f"BitShift: direction must be 'LEFT' or 'RIGHT', got {direction!r}")
    return BitShiftAttributes(as_text(direction).upper())


# ------------------------------------------------------------------------------------------ shape, indexing

#: Pad's modes.
PAD_MODES = ("constant", "edge", "reflect", "wrap")
PadAttributes = _record("PadAttributes", "mode pads value")


@parses("Pad")
def pad_attributes(*, mode="constant", pads=None, value=0.0) -> PadAttributes:
    """Pad's attributes (``pads`` and ``value``: attributes before opset 11, inputs since)."""
    if as_text(mode) not in PAD_MODES:
        raise ShapeError(f"Pad: unknown mode {as_text(mode)!r}; use one of {list(PAD_MODES)}")
    return PadAttributes(as_text(mode), _int_list(pads), float(value))


BlockAttributes = _record("BlockAttributes", "blocksize mode")


@parses("DepthToSpace", op_name="DepthToSpace")
@parses("SpaceToDepth", op_name="SpaceToDepth")
def block_attributes(op_name: str, *, blocksize=None, mode="DCR") -> BlockAttributes:
    """DepthToSpace/SpaceToDepth's ``blocksize`` (required, positive) and ``mode`` (``DCR`` or ``CRD``).

    >>> block_attributes("DepthToSpace", blocksize=2, mode=b"CRD")
    BlockAttributes(blocksize=2, mode='CRD')
    """
    if blocksize is None:
        raise ShapeError(f"{op_name}: the blocksize attribute is required")
    if as_text(mode) not in ("DCR", "CRD"):
        raise ShapeError(f"{op_name}: unknown mode {as_text(mode)!r}; use DCR or CRD")
    if int(blocksize) < 1:
        raise ShapeError(f"{op_name}: blocksize must be positive, got {blocksize}")
    return BlockAttributes(int(blocksize), as_text(mode))


ReverseSequenceAttributes = _record("ReverseSequenceAttributes", "batch_axis time_axis")


@parses("ReverseSequence")
def reverse_sequence_attributes(*, batch_axis=1, time_axis=0) -> ReverseSequenceAttributes:
    """ReverseSequence's axes: 0 and 1, either way round."""
    attributes = ReverseSequenceAttributes(int(batch_axis), int(time_axis))
    if set(attributes) != {0, 1}:
        raise ShapeError(f"ReverseSequence: batch_axis and time_axis must be 0 and 1 (either way round), got "
                         f"{attributes.batch_axis} and {attributes.time_axis}")
    return attributes


#: ScatterElements' and ScatterND's reductions besides ``none``.
SCATTER_REDUCTIONS = ("add", "mul", "max", "min")
ScatterElementsAttributes = _record("ScatterElementsAttributes", "axis reduction")
ScatterNDAttributes = _record("ScatterNDAttributes", "reduction")


def _scatter_reduction(op_name: str, reduction: Any) -> str:
    if as_text(reduction) != "none" and as_text(reduction) not in SCATTER_REDUCTIONS:
        raise ShapeError(f"{op_name}: unknown reduction {as_text(reduction)!r}; use one of none, "
                         f"{', '.join(SCATTER_REDUCTIONS)}")
    return as_text(reduction)


@parses("ScatterElements", "Scatter")
def scatter_elements_attributes(*, axis=0, reduction="none") -> ScatterElementsAttributes:
    """ScatterElements' (and the deprecated Scatter's) attributes."""
    return ScatterElementsAttributes(int(axis), _scatter_reduction("ScatterElements", reduction))


@parses("ScatterND")
def scatter_nd_attributes(*, reduction="none") -> ScatterNDAttributes:
    """ScatterND's ``reduction``."""
    return ScatterNDAttributes(_scatter_reduction("ScatterND", reduction))


TensorScatterAttributes = _record("TensorScatterAttributes", "axis mode")


@parses("TensorScatter")
def tensor_scatter_attributes(*, axis=-2, mode="linear") -> TensorScatterAttributes:
    """TensorScatter's attributes; ``mode`` linear or circular."""
    if as_text(mode) not in ("linear", "circular"):
        raise ShapeError(f"TensorScatter: mode must be 'linear' or 'circular', got {as_text(mode)!r}")
    return TensorScatterAttributes(int(axis), as_text(mode))


# -------------------------------------------------------------------------------------------------- image

GridSampleAttributes = _record("GridSampleAttributes", "align_corners mode padding_mode")


@parses("GridSample")
def grid_sample_attributes(*, align_corners=0, mode="linear", padding_mode="zeros") -> GridSampleAttributes:
    """GridSample's attributes, ``mode`` named as in opset 20 (opset 16's bilinear/bicubic: linear/cubic).

    >>> grid_sample_attributes(mode=b"bilinear", padding_mode="border")
    GridSampleAttributes(align_corners=False, mode='linear', padding_mode='border')
    """
    text = as_text(mode)
    resolved = {"bilinear": "linear", "bicubic": "cubic"}.get(text, text)
    padding = as_text(padding_mode)
    if resolved not in ("nearest", "linear", "cubic"):
        raise ShapeError(f"GridSample: unknown mode {mode!r}; use nearest, linear or cubic")
    if padding not in ("zeros", "border", "reflection"):
        raise ShapeError(f"GridSample: unknown padding_mode {padding_mode!r}; use zeros, border or reflection")
    return GridSampleAttributes(bool(align_corners), resolved, padding)


#: Resize's attributes under the names every framework's operator keeps them by.
ResizeAttributes = _record("ResizeAttributes", "mode coordinate_mode nearest_mode cubic_a exclude_outside "
                                               "extrapolation_value antialias axes policy")


@parses("Resize")
def resize_attributes(*, mode="nearest", coordinate_transformation_mode="half_pixel",
                      nearest_mode="round_prefer_floor", cubic_coeff_a=-0.75, exclude_outside=0,
                      extrapolation_value=0.0, antialias=0, axes=None,
                      keep_aspect_ratio_policy="stretch") -> ResizeAttributes:
    """Resize's attributes (``antialias`` applies to the linear and cubic modes only).

    >>> resize_attributes(mode=b"linear", antialias=1).antialias
    True
    """
    mode = as_text(mode)
    if mode not in ("nearest", "linear", "cubic"):
        raise ShapeError(f"Resize: unknown mode {mode!r}; use nearest, linear or cubic")
    return ResizeAttributes(mode, as_text(coordinate_transformation_mode), as_text(nearest_mode), float(cubic_coeff_a),
                            bool(exclude_outside), float(extrapolation_value), bool(antialias) and mode != "nearest",
                            int_tuple(axes), as_text(keep_aspect_ratio_policy))


#: RoiAlign's attributes; ``half_pixel``: whether coordinates shift by -0.5.
RoiAlignAttributes = _record("RoiAlignAttributes", "half_pixel mode output_height output_width sampling_ratio "
                                                   "spatial_scale")


@parses("RoiAlign", since=16)
@parses("RoiAlign", coordinate_transformation_mode="output_half_pixel")  # opsets 10-15: no pixel shift
def roi_align_attributes(*, coordinate_transformation_mode="half_pixel", mode="avg", output_height=1,
                         output_width=1, sampling_ratio=0, spatial_scale=1.0) -> RoiAlignAttributes:
    """RoiAlign's attributes, checked."""
    coordinates = as_text(coordinate_transformation_mode)
    if coordinates not in ("half_pixel", "output_half_pixel"):
        raise ShapeError("RoiAlign: coordinate_transformation_mode must be 'half_pixel' or 'output_half_pixel', "
                         f"got {coordinates!r}")
    if as_text(mode).lower() not in ("avg", "max"):
        raise ShapeError(f"RoiAlign: mode must be 'avg' or 'max', got {as_text(mode)!r}")
    height, width = int(output_height), int(output_width)
    if height < 1 or width < 1:
        raise ShapeError(f"RoiAlign: output_height and output_width must be >= 1, got {height}, {width}")
    return RoiAlignAttributes(coordinates == "half_pixel", as_text(mode).lower(), height, width, int(sampling_ratio),
                              float(spatial_scale))


NonMaxSuppressionAttributes = _record("NonMaxSuppressionAttributes", "center_point_box")


@parses("NonMaxSuppression")
def non_max_suppression_attributes(*, center_point_box=0) -> NonMaxSuppressionAttributes:
    """NonMaxSuppression's box format: 0 (corners y1, x1, y2, x2) or 1 (centre, width, height)."""
    if int(center_point_box) not in (0, 1):
        raise ShapeError(f"NonMaxSuppression: center_point_box must be 0 or 1, got {center_point_box}")
    return NonMaxSuppressionAttributes(int(center_point_box))


# ---------------------------------------------------------------------------------------------- generator

#: The one value attribute a Constant node gives: its name and value.
ConstantAttributes = _record("ConstantAttributes", "name value")


@parses("Constant")
def constant_attributes(*, value=None, value_float=None, value_floats=None, value_int=None, value_ints=None,
                        value_string=None, value_strings=None, sparse_value=None) -> ConstantAttributes:
    """Constant's value attribute; exactly one must be given.

    >>> constant_attributes(value_ints=[1, 2])
    ConstantAttributes(name='value_ints', value=[1, 2])
    """
    given = {name: v for name, v in [("value", value), ("value_float", value_float), ("value_floats", value_floats),
                                      ("value_int", value_int), ("value_ints", value_ints),
                                      ("value_string", value_string), ("value_strings", value_strings),
                                      ("sparse_value", sparse_value)] if v is not None}
    if len(given) != 1:
        raise ShapeError(f"Constant: exactly one value attribute must be set, got {sorted(given) or 'none'}")
    return ConstantAttributes(*given.popitem())


RangeAttributes = _record("RangeAttributes", "stash_type")


@parses("Range")
def range_attributes(*, stash_type=None) -> RangeAttributes:
    """Range's ``stash_type`` (opset 27): None (compute in the inputs' type), 1 (FLOAT) or 11 (DOUBLE)."""
    if stash_type is not None and int(stash_type) not in (1, 11):
        raise ShapeError(f"Range: stash_type must be 1 (FLOAT) or 11 (DOUBLE), got {stash_type}")
    return RangeAttributes(None if stash_type is None else int(stash_type))


# ------------------------------------------------------------------------------------------- loss, attention

#: The losses' reductions.
LOSS_REDUCTIONS = ("mean", "sum", "none")
LossAttributes = _record("LossAttributes", "reduction ignore_index")
MeanSquaredErrorAttributes = _record("MeanSquaredErrorAttributes", "reduction")


@parses("NegativeLogLikelihoodLoss", op_name="NegativeLogLikelihoodLoss")
@parses("SoftmaxCrossEntropyLoss", op_name="SoftmaxCrossEntropyLoss")
def loss_attributes(op_name: str, *, reduction="mean", ignore_index=None) -> LossAttributes:
    """NegativeLogLikelihoodLoss' and SoftmaxCrossEntropyLoss' attributes (``reduction``: :data:`LOSS_REDUCTIONS`)."""
    if as_text(reduction) not in LOSS_REDUCTIONS:
        raise ShapeError(f"{op_name}: reduction must be one of {LOSS_REDUCTIONS}, got {as_text(reduction)!r}")
    return LossAttributes(as_text(reduction), None if ignore_index is None else int(ignore_index))


@parses("MeanSquaredError")
def mean_squared_error_attributes(*, reduction="mean") -> MeanSquaredErrorAttributes:
    """The ``reduction`` of MeanSquaredError (d5's loss operator)."""
    return MeanSquaredErrorAttributes(loss_attributes("MeanSquaredError", reduction=reduction).reduction)


AttentionAttributes = _record("AttentionAttributes", "is_causal kv_num_heads q_num_heads qk_matmul_output_mode scale "
                                                     "softcap softmax_precision left_window_size right_window_size")


@parses("Attention")
def attention_attributes(*, is_causal=0, kv_num_heads=0, q_num_heads=0, qk_matmul_output_mode=0, scale=None,
                         softcap=0.0, softmax_precision=None, left_window_size=-1,
                         right_window_size=-1) -> AttentionAttributes:
    """Attention's attributes: ``qk_matmul_output_mode`` 0 to 3, the window sizes -1 (unbounded) or >= 0;
    ``softmax_precision`` (only a request for at least the input's precision) kept as given."""
    attributes = AttentionAttributes(bool(is_causal), int(kv_num_heads), int(q_num_heads), int(qk_matmul_output_mode),
                                     None if scale is None else float(scale), float(softcap), softmax_precision,
                                     int(left_window_size), int(right_window_size))
    if attributes.qk_matmul_output_mode not in (0, 1, 2, 3):
        raise ShapeError(f"Attention: qk_matmul_output_mode must be 0, 1, 2 or 3, got {qk_matmul_output_mode}")
    if attributes.left_window_size < -1 or attributes.right_window_size < -1:
        raise ShapeError("Attention: left_window_size and right_window_size must be -1 (unbounded) or >= 0, "
                         f"got {left_window_size} and {right_window_size}")
    return attributes


# -------------------------------------------------------------------------------------- LSTM, GRU and RNN

#: The activation functions ONNX's recurrent operators name, with (uses alpha, uses beta, default alpha,
#: default beta); each framework supplies the functions themselves.
RECURRENT_ACTIVATIONS: dict[str, tuple[bool, bool, float | None, float | None]] = {
    "sigmoid": (False, False, None, None), "tanh": (False, False, None, None), "relu": (False, False, None, None),
    "leakyrelu": (True, False, 0.01, None), "thresholdedrelu": (True, False, 1.0, None),
    "hardsigmoid": (True, True, 0.2, 0.5), "affine": (True, True, 1.0, 0.0), "scaledtanh": (True, True, 1.0, 1.0),
    "elu": (True, False, 1.0, None), "softsign": (False, False, None, None), "softplus": (False, False, None, None),
}

#: Each recurrent operator's activations per direction when the node names none (ONNX's defaults).
RECURRENT_DEFAULT_ACTIVATIONS: dict[str, tuple[str, ...]] = {
    "LSTM": ("Sigmoid", "Tanh", "Tanh"), "GRU": ("Sigmoid", "Tanh"), "RNN": ("Tanh",)}


@dataclasses.dataclass(frozen=True)
class RecurrentAttributes:
    """The checked attributes of an LSTM, GRU or RNN node. ``activations`` holds ``(name, alpha, beta)`` for
    each function, ``len(RECURRENT_DEFAULT_ACTIVATIONS[op])`` per direction (lower-case names of
    RECURRENT_ACTIVATIONS). ``input_forget`` is LSTM's, ``linear_before_reset`` GRU's (False for the others)."""

    direction: str
    num_directions: int
    hidden_size: int | None
    clip: float | None
    layout: int
    activations: tuple[tuple[str, float | None, float | None], ...]
    input_forget: bool = False
    linear_before_reset: bool = False


def recurrent_attributes(op_name: str, *, activation_alpha=None, activation_beta=None, activations=None, clip=None,
                         direction="forward", hidden_size=None, layout=0, input_forget=0,
                         linear_before_reset=0) -> RecurrentAttributes:
    """Check and resolve an LSTM, GRU or RNN node's attributes (ONNX defaults where absent).

    >>> recurrent_attributes("RNN", direction="bidirectional").activations
    (('tanh', None, None), ('tanh', None, None))
    """
    direction = as_text(direction)
    if direction not in ("forward", "reverse", "bidirectional"):
        raise ShapeError(f"{op_name}: direction must be forward, reverse or bidirectional, got {direction!r}")
    directions = 2 if direction == "bidirectional" else 1
    layout = int(layout)
    if layout not in (0, 1):
        raise ShapeError(f"{op_name}: layout must be 0 (sequence first) or 1 (batch first), got {layout}")
    default_activations = RECURRENT_DEFAULT_ACTIVATIONS[op_name]
    per_direction = len(default_activations)
    names = [as_text(n) for n in (activations or [])] or list(default_activations) * directions
    if len(names) == per_direction:  # one set given for a bidirectional layer: used by both directions
        names = names * directions
    elif directions == 1 and len(names) == 2 * per_direction:
        # Two sets for a one-direction layer: RNN's schema default is ["Tanh", "Tanh"] (one per direction of a
        # bidirectional layer) whatever the direction; onnx.reference and onnxruntime use the first set.
        names = names[:per_direction]
    if len(names) != per_direction * directions:
        raise ShapeError(f"{op_name}: expected {per_direction} activations per direction ({per_direction * directions} "
                         f"in all), got {names}")
    alphas, betas = list(activation_alpha or []), list(activation_beta or [])
    resolved = []
    for name in names:
        key = name.lower()
        if key not in RECURRENT_ACTIVATIONS:
            raise UnsupportedOperatorError(f"{op_name}: activation {name!r} is not supported; use one of "
                                           f"{', '.join(sorted(RECURRENT_ACTIVATIONS))}")
        uses_alpha, uses_beta, alpha, beta = RECURRENT_ACTIVATIONS[key]
        # ONNX lists alpha/beta values in the order of the activations that take them.
        if uses_alpha and alphas:
            alpha = float(alphas.pop(0))
        if uses_beta and betas:
            beta = float(betas.pop(0))
        resolved.append((key, alpha, beta))
    return RecurrentAttributes(direction, directions, None if hidden_size is None else int(hidden_size),
                               None if clip is None else float(clip), layout, tuple(resolved), bool(input_forget),
                               bool(linear_before_reset))


def _recurrent(op_type: str, *own: str) -> None:
    """Register recurrent_attributes for ``op_type``: the shared attributes and its ``own`` ones."""
    parser = functools.partial(recurrent_attributes, op_type)
    others = {"input_forget", "linear_before_reset"} - set(own)
    parser.__signature__ = inspect.Signature(  # the attributes operator_attributes accepts
        [p for name, p in inspect.signature(parser).parameters.items() if name not in others])
    _register(parser, op_type)


_recurrent("LSTM", "input_forget")
_recurrent("GRU", "linear_before_reset")
_recurrent("RNN")
