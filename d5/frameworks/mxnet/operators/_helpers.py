"""Support shared by the MXNet converters: ONNX data types, the static shapes and dtypes of the symbols they
receive, constants inside the graph under construction, and reading shape-like inputs.

While the executor composes a graph, every symbol a converter sees has a known shape and dtype (the executor
builds one graph per input signature): :func:`shape_of` and :func:`dtype_of` read them by MXNet's own shape and
type inference on the converter's small graph. A NumPy value a converter needs inside the graph becomes an input
of the graph (:func:`as_symbol`), fed each call from an NDArray made once -- MXNet symbols have no constants.
"""
from __future__ import annotations

import contextlib
import itertools
import threading
from typing import Any, Iterator, Sequence

import mxnet as mx
import numpy as np

from d5.errors import ShapeError, UnsupportedOperatorError
from d5.ops.onnx_semantics import as_text, window_sides

Symbol = mx.sym.Symbol

# ONNX TensorProto.DataType -> the NumPy dtype of an MXNet tensor (the types MXNet computes with).
_ONNX_DTYPES = {1: np.float32, 2: np.uint8, 3: np.int8, 6: np.int32, 7: np.int64, 9: np.bool_, 10: np.float16,
                11: np.float64}
_NAMED_DTYPES = {"float32": np.float32, "float": np.float32, "float64": np.float64, "double": np.float64,
                 "float16": np.float16, "int64": np.int64, "int32": np.int32, "int8": np.int8, "uint8": np.uint8,
                 "bool": np.bool_}

#: The NumPy dtypes MXNet's tensors hold and its operators compute with.
HELD_DTYPES = frozenset(np.dtype(t) for t in _ONNX_DTYPES.values())


def np_dtype(to: Any) -> np.dtype:
    """The NumPy dtype of an ONNX data type number (or a dtype name, or a NumPy dtype) that MXNet holds."""
    if isinstance(to, (np.dtype, type)) and np.dtype(to) in HELD_DTYPES:
        return np.dtype(to)
    if isinstance(to, (bytes, str)):
        name = as_text(to).lower()
        if name in _NAMED_DTYPES:
            return np.dtype(_NAMED_DTYPES[name])
    elif not isinstance(to, (np.dtype, type)) and int(to) in _ONNX_DTYPES:
        return np.dtype(_ONNX_DTYPES[int(to)])
    raise ShapeError(f"unsupported data type {to!r} for the MXNet framework; use one of "
                     f"{sorted(_ONNX_DTYPES)} (TensorProto.DataType)")


#: Numbers the constants of every graph: names must differ between the nodes composed into one graph.
_CONSTANT_NUMBERS = itertools.count()


class GraphConstants:
    """The NumPy values a node's graph holds as inputs (name -> value), named ``_d5c<n>`` with ``n`` unique in the
    process (the nodes' graphs are composed into one, where a name is one input)."""

    def __init__(self) -> None:
        self.values: dict[str, np.ndarray] = {}

    def add(self, value: np.ndarray) -> Symbol:
        name = f"_d5c{next(_CONSTANT_NUMBERS)}"
        self.values[name] = value
        return mx.sym.var(name, shape=value.shape, dtype=value.dtype)


_BUILDING = threading.local()


@contextlib.contextmanager
def building(constants: GraphConstants) -> Iterator[GraphConstants]:
    """Converters called inside put their constants into ``constants`` (the executor's graph under
    construction); numpy shape semantics (0-d and zero-size tensors) are on."""
    previous = getattr(_BUILDING, "constants", None)
    _BUILDING.constants = constants
    try:
        with mx.util.np_shape(True):
            yield constants
    finally:
        _BUILDING.constants = previous


def as_symbol(value: Any, dtype: Any = None) -> Symbol:
    """``value`` as a symbol of the graph under construction: a symbol as it is, a NumPy value (or number) as a
    constant input of the graph (cast to ``dtype`` if given)."""
    if isinstance(value, Symbol):
        return value if dtype is None or dtype_of(value) == np.dtype(dtype) else mx.sym.cast(value, np.dtype(dtype).name)
    array = np.asarray(value, dtype=dtype)
    constants = getattr(_BUILDING, "constants", None)
    if constants is None:
        raise RuntimeError("as_symbol() outside a graph under construction (d5.frameworks.mxnet.operators._helpers."
                           "building)")
    return constants.add(np.array(array, order="C", copy=False))  # 0-d stays 0-d (ascontiguousarray makes it 1-D)


def _inferred(x: Symbol) -> tuple[tuple[int, ...] | None, np.dtype | None]:
    with mx.util.np_shape(True):
        _, shapes, _ = x.infer_shape_partial()
        _, types, _ = x.infer_type()
    shape = tuple(shapes[0]) if shapes and shapes[0] is not None else None
    if shape is not None and any(d < 0 for d in shape):
        shape = None
    return shape, (np.dtype(types[0]) if types and types[0] is not None else None)


def shape_of(x: Any) -> tuple[int, ...]:
    """The static shape of a converter's input (a symbol or a NumPy value); a ShapeError if MXNet cannot tell."""
    if not isinstance(x, Symbol):
        return tuple(np.shape(x))
    shape = _inferred(x)[0]
    if shape is None:
        raise ShapeError("the MXNet framework cannot infer this tensor's shape before running")
    return shape


def dtype_of(x: Any) -> np.dtype:
    """The dtype of a converter's input (a symbol or a NumPy value)."""
    if not isinstance(x, Symbol):
        return np.asarray(x).dtype
    dtype = _inferred(x)[1]
    if dtype is None:
        raise ShapeError("the MXNet framework cannot infer this tensor's dtype before running")
    return dtype


def static(value: Any) -> np.ndarray | None:
    """A shape-like input's value when it is known before the graph runs (a NumPy value); None for a symbol."""
    if value is None or isinstance(value, Symbol):
        return None
    return np.asarray(value)


class ValueNeededWhileTracing(UnsupportedOperatorError):
    """A converter needs an input's value (a shape, axes) that only exists when the graph runs: the executor then
    runs that network node by node, where every value is known."""


def ints(value: Any, what: str = "input") -> list[int] | None:
    """A shape-like input (int64 tensor, sequence or scalar) as a list of Python ints; None stays None. A value
    computed from the data is refused (:class:`ValueNeededWhileTracing`)."""
    if value is None:
        return None
    known = static(value)
    if known is None:
        raise ValueNeededWhileTracing(f"the MXNet framework needs {what} as a value known while tracing, not a "
                                      "tensor computed from the data")
    return [int(v) for v in np.asarray(known).reshape(-1)]


def scalar(value: Any, kind=float):
    """A 0-d/1-element input as a Python number (it must be known while tracing)."""
    if kind is int:
        return int(ints(value)[0])
    known = static(value)
    if known is None:
        raise ValueNeededWhileTracing("the MXNet framework needs this scalar input as a value known while tracing")
    return kind(np.asarray(known).reshape(-1)[0])


def normalize_axis(axis: int, rank: int, what: str = "axis") -> int:
    if not -max(rank, 1) <= axis < max(rank, 1):
        raise ShapeError(f"{what} {axis} is out of range for a tensor of rank {rank}")
    return axis % max(rank, 1)


def reshape(x: Symbol, shape: Sequence[int]) -> Symbol:
    """``x`` reshaped to the explicit ``shape`` (no special values: 0 is a zero-size axis, as in NumPy)."""
    shape = tuple(int(d) for d in shape)
    if shape == shape_of(x):
        return x
    return mx.sym.np.reshape(x.as_np_ndarray(), shape).as_nd_ndarray() if 0 in shape or not shape else \
        mx.sym.reshape(x, shape=shape)


def resolve_pads(op_name: str, spatial: Sequence[int], kernel: Sequence[int], strides, dilations, pads,
                 auto_pad: str, ceil_mode: bool = False, clamp_same_pads: bool = False):
    """The window geometry and, per spatial axis, the (begin, end) amounts to pad (negative: crop) the input by
    so that plain windows with no padding give exactly ONNX's output (ceil_mode overhang included)."""
    def optional(values):
        return None if not values else tuple(values)

    return window_sides(op_name, tuple(spatial), tuple(kernel), optional(strides), optional(dilations),
                        optional(pads), auto_pad, bool(ceil_mode), bool(clamp_same_pads))


def pad_sides(x: Symbol, sides: Sequence[tuple[int, int]], first_spatial: int = 2, value: float = 0.0) -> Symbol:
    """Pad (or crop, for negative amounts) the spatial axes of ``x`` from axis ``first_spatial`` by ``sides``
    ((begin, end) each) with the constant ``value``."""
    if all(b == 0 and e == 0 for b, e in sides):
        return x
    shape = shape_of(x)
    rank = len(shape)
    widths = [(0, 0)] * rank
    begin, end = [None] * rank, [None] * rank
    for offset, (lo, hi) in enumerate(sides):
        axis = first_spatial + offset
        widths[axis] = (max(lo, 0), max(hi, 0))
        if lo < 0:
            begin[axis] = -lo
        if hi < 0:
            end[axis] = shape[axis] + hi
    if any(w != (0, 0) for w in widths):
        x = pad_constant(x, widths, value)
    if any(b is not None for b in begin) or any(e is not None for e in end):
        x = mx.sym.slice(x, begin=tuple(begin), end=tuple(end))
    return x


def pad_constant(x: Symbol, widths: Sequence[tuple[int, int]], value: float = 0.0) -> Symbol:
    """``x`` padded by ``widths`` ((begin, end) per axis, non-negative) with the constant ``value``: MXNet's
    ``_npi_pad``, called directly (MXNet 1.9's ``mx.sym.np.pad`` drops ``constant_values`` and pads zeros; the
    kernel misreads the widths of a 1-D input, which goes through it as a row)."""
    from mxnet.symbol.numpy import _internal as _npi

    if len(widths) == 1:
        (n,), (begin, end) = shape_of(x), tuple(widths[0])
        row = pad_constant(reshape(x, (1, n)), ((0, 0), (begin, end)), value)
        return reshape(row, (n + begin + end,))
    return _npi.pad(x.as_np_ndarray(), pad_width=tuple(tuple(int(v) for v in w) for w in widths), mode="constant",
                    constant_value=float(value)).as_nd_ndarray()
