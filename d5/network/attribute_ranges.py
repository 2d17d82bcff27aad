"""The values of integer attributes that are axes or 0/1 flags, checked before anything reads them.

ONNX types these attributes as plain ints, so the schema check in :mod:`d5.network.node_schema` passes
``GatherND(batch_dims=-2**31)`` or ``ReduceSum(keepdims=2**62)``. Nothing downstream range-checks them:
ONNX's C++ shape inference (which executors run to plan memory) segfaults on a negative ``batch_dims``,
and operators read a flag as "nonzero means on" where onnxruntime and ONNX's shape inference read
"== 1", so a keepdims of 2**62 ran and gave another shape than onnxruntime. The checks here:

* flags (:data:`FLAGS`, found by reading every ONNX schema's int attributes) must be 0 or 1;
* axes (``axis``, ``axes``, ``perm``, ``batch_dims``, ...) must fit a tensor d5 can hold at all
  (:data:`MAX_RANK` dimensions), whatever the graph: :func:`check_value_ranges`, run on import, when a
  node is added and on every validation;
* and, where the rank of the input they index is known (graph inputs, parameters, and the outputs of
  operators whose output rank follows from their input's: :func:`propagate_ranks`), within
  ``[-rank, rank - 1]`` as the operator defines it: :func:`check_axes_against_ranks`.

>>> from d5.network.graph import Node
>>> node = Node("argmax", "ArgMax", ["x"], ["y"], {"axis": 2, "keepdims": 1})
>>> check_value_ranges(node.attrs, "node 'argmax'")
>>> try:
...     check_axes_against_ranks(node, {"x": 2}, "node 'argmax'")
... except SchemaError as err:
...     print(err)
node 'argmax': attribute 'axis' = 2 is out of range for input 0 ('x') of rank 2; use an axis in [-2, 1]
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from d5.errors import SchemaError

if TYPE_CHECKING:
    from d5.network.graph import Node

#: The most dimensions a tensor can have: NumPy 1.x's NPY_MAXDIMS (NumPy 2 raised it to 64; d5 keeps the
#: lower limit, which every NumPy holds). No axis of any tensor d5 can hold lies outside [-32, 31].
MAX_RANK = 32

#: Integer attributes ONNX defines as 0 or 1 (every version of every ai.onnx operator that has them). Left
#: out: the legacy (opset < 7) ``is_test`` ("if nonzero", as ONNX words it) and ``broadcast``, which d5 ignores.
FLAGS = frozenset({
    "align_corners", "allowzero", "antialias", "batch_axis", "ceil_mode", "center_point_box",
    "count_include_pad", "detect_negative", "detect_positive", "exclude_outside", "exclusive", "fmod",
    "input_forget", "interleaved", "inverse", "is_case_sensitive", "is_causal", "keepdims",
    "largest", "layout", "linear_before_reset", "new_axis", "noop_with_empty_axes", "onesided", "output_sequence",
    "periodic", "reverse", "saturate", "select_last_index", "sorted", "spatial", "storage_order", "time_axis",
    "training_mode", "transA", "transB", "upper",
})
#: Lists of 0/1 values (Scan's per-input directions: 0 forward, 1 reverse).
FLAG_LISTS = frozenset({"directions", "scan_input_directions", "scan_output_directions"})
#: One axis, negative counting from the back.
AXIS = frozenset({"axis"})
#: Lists of axes, negative counting from the back.
AXIS_LISTS = frozenset({"axes", "scan_input_axes", "scan_output_axes"})
#: Counts of leading dimensions or permutations of dimensions: never negative.
DIMENSION_COUNTS = frozenset({"batch_dims"})
PERMUTATIONS = frozenset({"perm"})

# Operators whose axis does not index their first input's dimensions, so that its rank does not bound it:
# Quantize/DequantizeLinear ignore it for a per-tensor scale (and default it to 1, even for a scalar),
# ConcatFromSequence's input is a sequence, Scan's axes index its scan inputs, and the legacy (opset < 7)
# broadcast axis of the binary operators places the second input (import upgrades it away).
_AXIS_NOT_OF_INPUT_0 = frozenset({
    "QuantizeLinear", "DequantizeLinear", "ConcatFromSequence", "Scan",
    "Add", "And", "Div", "Equal", "Greater", "Less", "Mul", "Or", "Pow", "Sub", "Xor",
})


def check_value_ranges(attrs: Mapping[str, Any], where: str) -> None:
    """Raise SchemaError if a flag among a node's ``attrs`` is not 0 or 1 or an axis lies beyond what any
    tensor allows. Attributes of another type are left to the type check. Needs no graph: the importer
    runs it on the model's nodes before ONNX's shape inference first sees them."""
    for name, value in attrs.items():
        if name in FLAGS and _is_int(value) and int(value) not in (0, 1):
            raise SchemaError(f"{where}: attribute {name!r} must be 0 or 1, got {int(value)}; ONNX defines no "
                              f"other value (0 is off, 1 is on)")
        values = _int_list(value)
        if values is None:
            continue
        if name in FLAG_LISTS and any(v not in (0, 1) for v in values):
            raise SchemaError(f"{where}: attribute {name!r} must hold only 0s and 1s, got {values}")
        if name in AXIS | AXIS_LISTS:
            bad = [v for v in values if not -MAX_RANK <= v <= MAX_RANK]
            if bad:
                raise SchemaError(f"{where}: attribute {name!r} = {_show(value)} is not an axis of any tensor (at most "
                                  f"{MAX_RANK} dimensions); use an axis in [-rank, rank - 1] of the input")
        if name in DIMENSION_COUNTS | PERMUTATIONS:
            bad = [v for v in values if not 0 <= v < MAX_RANK]
            if bad:
                raise SchemaError(f"{where}: attribute {name!r} = {_show(value)} must hold dimension numbers in "
                                  f"[0, rank - 1] (a tensor has at most {MAX_RANK} dimensions)")
        if name in PERMUTATIONS and len(set(values)) != len(values):
            raise SchemaError(f"{where}: attribute {name!r} = {values} repeats a dimension; it must be a "
                              f"permutation of 0 .. rank - 1")


def check_axes_against_ranks(node: "Node", ranks: dict[str, int], where: str) -> None:
    """Raise SchemaError if an axis attribute of ``node`` lies outside what its input's rank allows, for the
    inputs whose rank ``ranks`` knows (by tensor name). Run after :func:`check_value_ranges`."""
    op = node.op_type
    for name, value in node.attrs.items():
        values = _int_list(value)
        if values is None:
            continue
        if name in PERMUTATIONS:
            _check_permutation(node, name, values, _rank(node, 0, ranks), where)
        elif name in DIMENSION_COUNTS:  # GatherND: the leading dimensions data and indices share
            known = [(index, rank) for index in (0, 1) if (rank := _rank(node, index, ranks)) is not None]
            for index, rank in known:
                if values[0] >= rank:
                    raise SchemaError(f"{where}: attribute {name!r} = {values[0]} must be less than the rank of input "
                                      f"{index} ({node.inputs[index]!r}, rank {rank}); use a smaller value")
        elif name in AXIS | AXIS_LISTS and op not in _AXIS_NOT_OF_INPUT_0:
            rank = _rank(node, 0, ranks)
            if rank is None:
                continue
            low, high = _axis_range(op, rank, len(values))
            if any(not low <= v <= high for v in values):
                what = f"input 0 ({node.inputs[0]!r}) of rank {rank}"
                if op == "Unsqueeze":
                    what += f" (output rank {high + 1})"
                raise SchemaError(f"{where}: attribute {name!r} = {_show(value)} is out of range for {what}; use "
                                  f"{'an axis' if name in AXIS else 'axes'} in [{low}, {high}]")


def _axis_range(op: str, rank: int, count: int) -> tuple[int, int]:
    """The axes operator ``op`` accepts on an input of ``rank`` (``count`` axes given), as ONNX defines them."""
    if op == "Flatten":  # axis = rank flattens everything into the first dimension
        return -rank, rank
    if op == "OneHot":  # the new one-hot axis may go anywhere in the output, which has one more dimension
        return -rank - 1, rank
    if op == "Unsqueeze":  # the axes index the output, which has one more dimension per axis
        return -(rank + count), rank + count - 1
    return -rank, rank - 1


def _check_permutation(node: "Node", name: str, values: list[int], rank: int | None, where: str) -> None:
    if rank is not None and sorted(values) != list(range(rank)):
        raise SchemaError(f"{where}: attribute {name!r} = {values} is not a permutation of the {rank} dimensions of "
                          f"input 0 ({node.inputs[0]!r}); give each of 0 .. {rank - 1} once")


# ---------------------------------------------------------------------------------------------- ranks
# Operators whose first output has the rank of their first input (elementwise, normalizations, windows
# over the spatial axes, layout changes); only those whose every version does, so that a rank carried
# forward is never wrong. An operator missing here just ends what is known.
_SAME_RANK = frozenset({
    "Abs", "Acos", "Acosh", "Asin", "Asinh", "Atan", "Atanh", "AveragePool", "BatchNormalization", "BitwiseNot",
    "Cast", "CastLike", "Ceil", "Celu", "Clip", "Conv", "ConvTranspose", "Cos", "Cosh", "CumSum", "DepthToSpace",
    "Dropout", "Elu", "Erf", "Exp", "Floor", "Gelu", "GlobalAveragePool", "GlobalLpPool", "GlobalMaxPool",
    "GroupNormalization", "HardSigmoid", "HardSwish", "Hardmax", "Identity", "InstanceNormalization", "IsInf",
    "IsNaN", "LRN", "LayerNormalization", "LeakyRelu", "Log", "LogSoftmax", "LpNormalization", "LpPool", "MaxPool",
    "MeanVarianceNormalization", "Mish", "Neg", "Not", "PRelu", "Pad", "Reciprocal", "Relu", "Resize",
    "ReverseSequence", "Round", "Selu", "Shrink", "Sigmoid", "Sign", "Sin", "Sinh", "Slice", "Softmax", "Softplus",
    "Softsign", "SpaceToDepth", "Sqrt", "Tan", "Tanh", "ThresholdedRelu", "Tile", "Transpose", "Trilu", "Upsample",
})
# Operators that broadcast their inputs (multidirectionally): the output has the largest input rank.
_BROADCASTING = frozenset({
    "Add", "And", "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "Div", "Equal", "Greater", "GreaterOrEqual",
    "Less", "LessOrEqual", "Max", "Mean", "Min", "Mod", "Mul", "Or", "Pow", "Sub", "Sum", "Where", "Xor",
})
# Reductions keep the rank when keepdims is 1 (its default).
_KEEPDIMS = frozenset({
    "ArgMax", "ArgMin", "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax", "ReduceMean",
    "ReduceMin", "ReduceProd", "ReduceSum", "ReduceSumSquare",
})


def propagate_ranks(node: "Node", ranks: dict[str, int]) -> None:
    """Record in ``ranks`` the rank of ``node``'s first output where its operator and its inputs' ranks
    determine it; forget its outputs' ranks otherwise (a body's output may shadow an outer tensor)."""
    for name in node.outputs:
        ranks.pop(name, None)
    if not node.outputs or not node.outputs[0]:
        return
    op = node.op_type
    rank = None
    if op in _SAME_RANK or (op in _KEEPDIMS and node.attrs.get("keepdims", 1) == 1):
        rank = _rank(node, 0, ranks)
    elif op in _BROADCASTING:
        known = [_rank(node, index, ranks) for index in range(len(node.inputs))]
        rank = max(known) if known and None not in known else None
    if rank is not None:
        ranks[node.outputs[0]] = rank


def _rank(node: "Node", index: int, ranks: dict[str, int]) -> int | None:
    return ranks.get(node.inputs[index]) if index < len(node.inputs) and node.inputs[index] else None


# ---------------------------------------------------------------------------------------------- values
def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer))


def _int_list(value: Any) -> list[int] | None:
    """An int attribute or a list of ints as a list of Python ints; None for anything else."""
    if _is_int(value):
        return [int(value)]
    if isinstance(value, (list, tuple)) and value and all(_is_int(v) for v in value):
        return [int(v) for v in value]
    return None


def _show(value: Any) -> str:
    return str(int(value)) if _is_int(value) else str([int(v) for v in value])


__all__ = ["FLAGS", "MAX_RANK", "check_axes_against_ranks", "check_value_ranges", "propagate_ranks"]
