"""d5's own operators (domain ``ai.d5``) as ONNX model-local functions.

No other runtime knows ``ai.d5::MeanSquaredError``, and ONNX shape inference leaves the outputs of an
operator it has no schema for untyped, so a model holding one neither passes ``onnx.checker`` nor runs in
onnxruntime. Export therefore writes, beside each such node, a ``FunctionProto`` (``ModelProto.functions``)
that defines the operator by standard ONNX operators: every runtime and ``onnx.shape_inference`` expand the
call, while the node itself keeps its d5 op type and attributes, so importing the file gives back the same
d5 node (the importer does not inline these functions).

A function body cannot branch on a string attribute, so each combination of attribute values gets its own
function, told apart by ONNX's ``overload`` field (IR version 10): ``MeanSquaredError`` with
``reduction='sum'`` calls the overload ``'reduction=sum'``; the defaults call the function without an
overload, which older runtimes (IR 8) read too. The body imports the model's own default-domain opset, as
the checker requires, so it is built for that opset.

>>> from d5.network.graph import Node
>>> values = resolve_attributes(Node("mse", "MeanSquaredError", ["y", "t"], ["loss"], {"reduction": "sum"}))
>>> values, overload_name("MeanSquaredError", values)
({'reduction': 'sum'}, 'reduction=sum')
>>> [node.op_type for node in function_proto("MeanSquaredError", values, 17).node]
['CastLike', 'Sub', 'Mul', 'ReduceSum']
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from d5.errors import SchemaError, UnsupportedOperatorError
from d5.network.op_types import D5_DOMAIN, D5_OPERATORS
from d5.ops.onnx_semantics import as_text

if TYPE_CHECKING:
    from d5.network.graph import Node

#: The version of the ``ai.d5`` operator set that exported models import.
D5_OPSET_VERSION = 1
#: The IR versions that introduced model-local functions, and their ``overload`` field.
_FUNCTIONS_IR_VERSION = 8
_OVERLOAD_IR_VERSION = 10


@dataclasses.dataclass(frozen=True)
class FunctionSpec:
    """How one d5 operator is written as an ONNX function.

    ``attributes`` maps each attribute to the values it accepts, its default first. ``body(values, opset)``
    returns the body's NodeProtos, reading the function's ``inputs`` and writing its ``outputs``, for one
    full set of attribute values. ``type_problem(dtypes, opset)`` (the input dtypes, None where unknown)
    says why the body cannot compute what d5 computes for such inputs, and what to do, or returns None.
    """

    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attributes: Mapping[str, tuple[Any, ...]]
    body: Callable[[Mapping[str, Any], int], list]
    type_problem: Callable[[Sequence[np.dtype | None], int], str | None]

    def defaults(self) -> dict[str, Any]:
        return {name: allowed[0] for name, allowed in self.attributes.items()}


# ---------------------------------------------------------------------------------------------- MeanSquaredError
#: CastLike, which converts a tensor to another tensor's type without naming the type, arrived in opset 15.
_CAST_LIKE_OPSET = 15


def _mean_squared_error_body(values: Mapping[str, Any], opset: int) -> list:
    from onnx import helper

    reduction = values["reduction"]
    squared = "loss" if reduction == "none" else "squared"
    nodes = []
    target = "target"
    if opset >= _CAST_LIKE_OPSET:  # d5 computes in the prediction's float type whatever the target's type
        nodes.append(helper.make_node("CastLike", ["target", "prediction"], ["target_cast"]))
        target = "target_cast"
    nodes.append(helper.make_node("Sub", ["prediction", target], ["difference"]))
    nodes.append(helper.make_node("Mul", ["difference", "difference"], [squared]))
    if reduction != "none":
        # No axes: every axis is reduced, to a 0-d loss, at every opset (the axes moved to an input in 13/18).
        reduce_op = {"mean": "ReduceMean", "sum": "ReduceSum"}[reduction]
        nodes.append(helper.make_node(reduce_op, [squared], ["loss"], keepdims=0))
    return nodes


def _mean_squared_error_type_problem(dtypes: Sequence[np.dtype | None], opset: int) -> str | None:
    from d5.network.onnx_import import _is_float

    prediction, target = (list(dtypes) + [None, None])[:2]
    if prediction is not None and not _is_float(prediction):
        return (f"its prediction is {prediction}: d5 computes the loss of a non-float prediction in float64, which "
                "an ONNX function (typed like its inputs) cannot; Cast the prediction to a float type before the loss")
    if opset < _CAST_LIKE_OPSET and target is not None and prediction is not None and target != prediction:
        return (f"its target ({target}) differs from its prediction ({prediction}), and opset {opset} lacks CastLike "
                f"(opset {_CAST_LIKE_OPSET}) to convert it; Cast the target to {prediction} or raise the network's "
                f"opset to {_CAST_LIKE_OPSET} or newer")
    return None


#: Every d5 operator's ONNX function, by op type (a test checks it covers :data:`D5_OPERATORS`).
FUNCTIONS: dict[str, FunctionSpec] = {
    "MeanSquaredError": FunctionSpec(
        ("prediction", "target"), ("loss",),
        {"reduction": ("mean", "sum", "none")},
        _mean_squared_error_body, _mean_squared_error_type_problem),
}


# ---------------------------------------------------------------------------------------------- public API
def describe(node: "Node") -> str:
    """How errors name a d5 node."""
    return f"node {node.name!r} ({node.domain or 'ai.onnx'} {node.op_type})"


def spec_of(node: "Node", where: str | None = None) -> FunctionSpec:
    """The :class:`FunctionSpec` of d5 node ``node``, or :class:`~d5.errors.UnsupportedOperatorError` naming it
    (as ``where``, when given)."""
    spec = FUNCTIONS.get(node.op_type)
    if spec is None:
        raise UnsupportedOperatorError(
            f"{where or describe(node)}: d5 has no ONNX function for this operator, so it cannot be exported; replace the "
            "node by standard ONNX operators, or add its FunctionSpec to d5.network.onnx_functions.FUNCTIONS")
    return spec


def resolve_attributes(node: "Node", where: str | None = None) -> dict[str, Any]:
    """``node``'s attribute values, defaults filled in and strings decoded; raises
    :class:`~d5.errors.SchemaError` naming the node (as ``where``, when given) for an unknown attribute, a
    value the operator does not accept, or a wrong number of inputs or outputs."""
    where = where or describe(node)
    spec = spec_of(node, where)
    for what, names, expected in (("inputs", node.inputs, spec.inputs), ("outputs", node.outputs, spec.outputs)):
        if len(names) != len(expected):
            raise SchemaError(f"{where}: takes {len(expected)} {what} ({', '.join(expected)}), the node has "
                              f"{len(names)}: {list(names)}; fix the node's {what}")
    values = spec.defaults()
    for name, value in node.attrs.items():
        if value is None:
            continue  # export writes no attribute for None, so the default applies
        if name not in spec.attributes:
            raise SchemaError(f"{where}: unknown attribute {name!r}; {node.op_type} accepts "
                              f"{sorted(spec.attributes)}. Remove it")
        value = as_text(value) if isinstance(value, bytes) else value
        if not _accepts(spec.attributes[name], value):
            raise SchemaError(f"{where}: attribute {name}={value!r} is not one of "
                              f"{spec.attributes[name]}; use one of those")
        values[name] = value
    return values


def _accepts(allowed: tuple[Any, ...], value: Any) -> bool:
    # Type first: a numpy array compared with a string would answer elementwise.
    return any(isinstance(value, type(choice)) and value == choice for choice in allowed)


def overload_name(op_type: str, values: Mapping[str, Any]) -> str:
    """The ``overload`` of the function for these attribute values: empty for the defaults, else the
    non-default values as ``name=value`` pairs."""
    defaults = FUNCTIONS[op_type].defaults()
    return ",".join(f"{name}={value}" for name, value in sorted(values.items()) if value != defaults[name])


def function_proto(op_type: str, values: Mapping[str, Any], opset: int):
    """The ``onnx.FunctionProto`` of d5 operator ``op_type`` for one full set of attribute ``values``, with
    its body written for default-domain ``opset``."""
    from onnx import helper

    spec = FUNCTIONS[op_type]
    return helper.make_function(
        D5_DOMAIN, op_type, list(spec.inputs), list(spec.outputs), spec.body(values, opset),
        opset_imports=[helper.make_opsetid("", opset)],
        # Declared so that the calling node may carry them; the body is specialised to their values instead of
        # reading them (see the module docstring).
        attributes=list(spec.attributes),
        doc_string=f"d5's {op_type}: {D5_OPERATORS.get(op_type, '')}",
        overload=overload_name(op_type, values) or None)


def model_functions(nodes: Iterable["Node"], opset: int) -> list:
    """One FunctionProto per distinct (op type, attribute values) among the d5 ``nodes``, in first-use order."""
    functions = {}
    for node in nodes:
        if node.domain != D5_DOMAIN:
            continue
        values = resolve_attributes(node)
        key = (node.op_type, overload_name(node.op_type, values))
        if key not in functions:
            functions[key] = function_proto(node.op_type, values, opset)
    return list(functions.values())


def min_ir_version(functions: Sequence) -> int:
    """The oldest IR version a model holding ``functions`` (FunctionProtos) may declare; 0 for none."""
    if any(f.overload for f in functions):
        return _OVERLOAD_IR_VERSION
    return _FUNCTIONS_IR_VERSION if len(functions) else 0


def check_input_types(node: "Node", dtypes: Sequence[np.dtype | None], opset: int) -> None:
    """Refuse, naming ``node``, inputs whose types the exported function would compute differently from d5."""
    problem = spec_of(node).type_problem(dtypes, opset)
    if problem is not None:
        raise UnsupportedOperatorError(f"{describe(node)} cannot be exported to ONNX: {problem}")


__all__ = ["D5_OPSET_VERSION", "FUNCTIONS", "FunctionSpec", "check_input_types",
           "function_proto", "min_ir_version", "model_functions", "overload_name", "resolve_attributes"]
