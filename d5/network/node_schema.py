"""Every node checked against its ONNX operator schema, at the opset the node follows.

A :class:`~d5.network.graph.Network` accepts any ONNX operator, and executors build one operator object
per node from its attributes; without this check a Relu given two inputs ran and ignored the second, and
an attribute of the wrong type or an input of an element type the operator does not define failed deep
inside NumPy. :func:`check_network` compares each node with ``onnx.defs.get_schema(op_type, opset)``:
the number of inputs and outputs (omitted optional inputs, given as ``''``, included), the attributes'
names and types, and the element types of the inputs against the schema's type constraints. The values
of flag and axis attributes are checked too (:mod:`d5.network.attribute_ranges`), as nothing downstream
range-checks them (ONNX's own shape inference segfaults on some).

Element types are known for graph inputs and parameters; for the tensors nodes produce they are carried
forward through the same type constraints (an output typed ``T`` has the type its inputs bound ``T`` to),
which costs a dictionary look-up per tensor instead of an ONNX shape inference (about 0.8 s on
ResNet-50). Where a type stays unknown (after control flow, for most operators with a ``dtype``
attribute), that check is skipped. Nodes of d5's own domains (user operators, ``MeanSquaredError``) have
no ONNX schema and are left to their operators.

>>> import numpy as np, d5
>>> net = d5.Network()
>>> _ = net.add_input("x", ("N", 3), "int64")
>>> _ = net.add_node("Softmax", ["x"], ["y"], name="softmax")
>>> net.add_output("y")
>>> try:
...     check_network(net)
... except d5.errors.SchemaError as err:
...     print(str(err).split(";")[0])
node 'softmax' (Softmax, opset 17): input 0 ('input', x) has type tensor(int64)
"""
from __future__ import annotations

import dataclasses
import difflib
import functools
from typing import TYPE_CHECKING, Any

import numpy as np

from d5.errors import SchemaError
from d5.network.attribute_ranges import check_axes_against_ranks, check_value_ranges, propagate_ranks

if TYPE_CHECKING:
    from d5.network.graph import Network, Node

#: The domains whose operators have ONNX schemas (others: d5's own and user operators).
_ONNX_DOMAINS = ("", "ai.onnx")


# ---------------------------------------------------------------------------------------------- public API
def check_network(network: "Network", outer_types: dict[str, str] | None = None,
                  outer_ranks: dict[str, int] | None = None) -> None:
    """Check every node of ``network`` (and of its control-flow bodies, at their own opsets) against its
    ONNX schema; raise :class:`~d5.errors.SchemaError` naming the first node that does not match.
    ``outer_types`` and ``outer_ranks`` hold the ONNX type strings and the known ranks of the enclosing
    graphs' tensors a body may read."""
    types = _known_types(network, outer_types)
    ranks = _known_ranks(network, outer_ranks)
    for node in network.topological_order():
        schema = _schema(node.op_type, network.opset, node.domain)
        if schema is not None:
            where = f"node {node.name!r} ({node.op_type}, opset {network.opset})"
            _check_arity(node, schema, where)
            _check_attributes(node, schema, where)
            check_axes_against_ranks(node, ranks, where)
            bound = _check_input_types(node, schema, types, where)
            _propagate(node, schema, bound, types)
        propagate_ranks(node, ranks)
        _check_bodies(node, types, ranks)


def check_node_attributes(node: "Node", opset: int) -> None:
    """Check the names and types of ``node``'s attributes against its ONNX schema at ``opset`` (the part of
    :func:`check_network` that needs no graph, run as soon as a node is added).

    >>> from d5.network.graph import Node
    >>> check_node_attributes(Node("conv", "Conv", ["x", "w"], ["y"], {"strides": [1, 1]}), 17)
    >>> try:
    ...     check_node_attributes(Node("conv", "Conv", ["x", "w"], ["y"], {"strides": "ab"}), 17)
    ... except SchemaError as err:
    ...     print(err)
    node 'conv' (Conv, opset 17): attribute 'strides' must be a list of ints, got str ('ab')
    """
    schema = _schema(node.op_type, opset, node.domain)
    if schema is not None:
        _check_attributes(node, schema, f"node {node.name!r} ({node.op_type}, opset {opset})")


def type_string(dtype: Any, kind: str = "tensor") -> str | None:
    """The ONNX type string of a value of ``dtype`` and ``kind`` (see :data:`d5.network.graph.VALUE_KINDS`),
    or None for a dtype ONNX has no element type for.

    >>> type_string(np.float32), type_string("int64", "optional_sequence"), type_string(np.str_)
    ('tensor(float)', 'optional(seq(tensor(int64)))', 'tensor(string)')
    """
    elem = _element_name(np.dtype(dtype))
    if elem is None:
        return None
    text = f"tensor({elem})"
    if kind in ("sequence", "optional_sequence"):
        text = f"seq({text})"
    return f"optional({text})" if kind.startswith("optional") else text


# ---------------------------------------------------------------------------------------------- schemas
@dataclasses.dataclass(frozen=True)
class _Formal:
    name: str
    type_str: str
    single: bool  # a required input/output (not Optional, not Variadic)
    variadic: bool
    homogeneous: bool


@dataclasses.dataclass(frozen=True)
class _Schema:
    """What the checks need of an ``onnx.defs.OpSchema``, read once per (op type, opset)."""

    inputs: tuple[_Formal, ...]
    outputs: tuple[_Formal, ...]
    min_input: int
    max_input: int
    min_output: int
    max_output: int
    constraints: dict[str, frozenset[str]]
    attributes: dict[str, tuple[int, bool]]  # name -> (AttributeProto type, required)


@functools.lru_cache(maxsize=None)
def _schema(op_type: str, opset: int, domain: str) -> _Schema | None:
    if domain not in _ONNX_DOMAINS:
        return None
    import onnx.defs  # lazy: onnx is needed only once a graph is validated

    try:
        schema = onnx.defs.get_schema(op_type, opset, "")
    except onnx.defs.SchemaError:  # no such operator at this opset: import and add_node report it
        return None
    option = onnx.defs.OpSchema.FormalParameterOption

    def formals(params) -> tuple[_Formal, ...]:
        return tuple(_Formal(p.name, p.type_str, p.option == option.Single, p.option == option.Variadic,
                             p.is_homogeneous) for p in params)

    return _Schema(formals(schema.inputs), formals(schema.outputs), schema.min_input, schema.max_input,
                   schema.min_output, schema.max_output,
                   {c.type_param_str: frozenset(c.allowed_type_strs) for c in schema.type_constraints},
                   {name: (int(a.type), bool(a.required)) for name, a in schema.attributes.items()})


def _formal(formals: tuple[_Formal, ...], index: int) -> _Formal | None:
    """The formal parameter that position ``index`` binds to (the last one repeats when it is variadic)."""
    if index < len(formals):
        return formals[index]
    return formals[-1] if formals and formals[-1].variadic else None


# ---------------------------------------------------------------------------------------------- arity
def _check_arity(node: "Node", schema: _Schema, where: str) -> None:
    given = len(node.inputs)
    present = len(_trim(node.inputs))
    if given > schema.max_input:
        raise SchemaError(f"{where}: takes at most {schema.max_input} input{_s(schema.max_input)} "
                          f"({_names(schema.inputs)}), got {given} ({node.inputs}); remove the extra inputs")
    if present < schema.min_input:
        raise SchemaError(f"{where}: needs at least {schema.min_input} input{_s(schema.min_input)} "
                          f"({_names(schema.inputs)}), got {present} ({node.inputs}); add the missing inputs")
    for index, formal in enumerate(schema.inputs[:given]):
        if formal.single and not node.inputs[index]:
            raise SchemaError(f"{where}: input {index} ({formal.name!r}) is required, but is given as '' (omitted); "
                              "connect a tensor to it")
    given = len(node.outputs)
    present = len(_trim(node.outputs))
    if given > schema.max_output:
        raise SchemaError(f"{where}: has at most {schema.max_output} output{_s(schema.max_output)} "
                          f"({_names(schema.outputs)}), got {given} ({node.outputs}); remove the extra outputs")
    if present < schema.min_output:
        raise SchemaError(f"{where}: has at least {schema.min_output} output{_s(schema.min_output)} "
                          f"({_names(schema.outputs)}), got {present} ({node.outputs}); name the missing outputs")


def _names(formals: tuple[_Formal, ...]) -> str:
    return ", ".join(f.name + ("..." if f.variadic else "" if f.single else "?") for f in formals) or "none"


def _s(count: int) -> str:
    return "" if count == 1 else "s"


def _trim(names: list[str]) -> list[str]:
    names = list(names)
    while names and not names[-1]:
        names.pop()
    return names


# ---------------------------------------------------------------------------------------------- attributes
# AttributeProto.AttributeType values (fixed by the ONNX standard), so that checking needs no onnx import.
_FLOAT, _INT, _STRING, _TENSOR, _GRAPH, _FLOATS, _INTS, _STRINGS, _TENSORS, _GRAPHS = 1, 2, 3, 4, 5, 6, 7, 8, 9, 10
_SPARSE_TENSOR, _SPARSE_TENSORS, _TYPE_PROTO, _TYPE_PROTOS = 11, 12, 13, 14
_EMPTY_LIST = -1  # an empty list fits every list type
_ATTRIBUTE_WORDS = {
    _FLOAT: "a float", _INT: "an int", _STRING: "a string", _TENSOR: "a tensor (numpy array)",
    _GRAPH: "a subgraph (d5.Network)", _FLOATS: "a list of floats", _INTS: "a list of ints",
    _STRINGS: "a list of strings", _TENSORS: "a list of tensors", _GRAPHS: "a list of subgraphs",
    _SPARSE_TENSOR: "a sparse tensor", _SPARSE_TENSORS: "a list of sparse tensors",
    _TYPE_PROTO: "a type (onnx.TypeProto)", _TYPE_PROTOS: "a list of types",
}
_LIST_OF = {_FLOAT: _FLOATS, _INT: _INTS, _STRING: _STRINGS, _TENSOR: _TENSORS, _GRAPH: _GRAPHS,
            _SPARSE_TENSOR: _SPARSE_TENSORS, _TYPE_PROTO: _TYPE_PROTOS}


def _check_attributes(node: "Node", schema: _Schema, where: str) -> None:
    for name, value in node.attrs.items():
        if value is None:  # None means "not set" (export leaves it out)
            continue
        spec = schema.attributes.get(name)
        if spec is None:
            # d5's operators follow the newest opset and accept older attribute forms too, so an attribute of
            # another version of the operator (Split's num_outputs in an opset-17 graph) is run, not refused.
            spec = _attributes_of_any_version(node.op_type).get(name)
        if spec is None:
            close = difflib.get_close_matches(name, list(schema.attributes), n=2)
            hint = f"did you mean {' or '.join(map(repr, close))}? " if close else ""
            raise SchemaError(f"{where}: has no attribute {name!r} (its attributes are "
                              f"{sorted(schema.attributes) or 'none'}); {hint}remove or rename it")
        expected = spec[0]
        found = _attribute_type(value)
        if not _attribute_fits(found, expected):
            what = "a list of mixed or unsupported items" if found is None and isinstance(value, (list, tuple)) \
                else type(value).__name__
            if found in (_INTS, _FLOATS, _STRINGS) and found != expected:
                what = _ATTRIBUTE_WORDS[found]
            raise SchemaError(f"{where}: attribute {name!r} must be {_ATTRIBUTE_WORDS.get(expected, expected)}, got "
                              f"{what} ({value!r:.60})")
    check_value_ranges(node.attrs, where)  # types are right here; flags and axes must also hold sane values
    missing = [name for name, (_, required) in schema.attributes.items() if required and node.attrs.get(name) is None]
    if missing:
        raise SchemaError(f"{where}: required attribute{_s(len(missing))} {missing} not given; set "
                          f"{'it' if len(missing) == 1 else 'them'}")


@functools.lru_cache(maxsize=None)
def _attributes_of_any_version(op_type: str) -> dict[str, tuple[int, bool]]:
    """The attributes of every version of ONNX operator ``op_type`` (the newest version's type for each)."""
    import onnx.defs

    attributes: dict[str, tuple[int, bool]] = {}
    versions = [s for s in onnx.defs.get_all_schemas_with_history() if s.name == op_type and s.domain in _ONNX_DOMAINS]
    for schema in sorted(versions, key=lambda s: s.since_version):
        attributes.update({name: (int(a.type), False) for name, a in schema.attributes.items()})
    return attributes


def _attribute_type(value: Any) -> int | None:
    """The AttributeProto type a Python attribute value (as import produces them) is, or None if none."""
    from d5.network.graph import Network

    if isinstance(value, Network):
        return _GRAPH
    if isinstance(value, (bool, int, np.integer, np.bool_)):
        return _INT
    if isinstance(value, (float, np.floating)):
        return _FLOAT
    if isinstance(value, (str, bytes)):
        return _STRING
    if isinstance(value, np.ndarray):
        return _TENSOR
    proto = type(value).__name__  # protos as import keeps them, matched by name to avoid importing onnx
    if proto in ("TensorProto", "SparseTensorProto", "TypeProto", "GraphProto"):
        return {"TensorProto": _TENSOR, "SparseTensorProto": _SPARSE_TENSOR, "TypeProto": _TYPE_PROTO,
                "GraphProto": _GRAPH}[proto]
    if isinstance(value, (list, tuple)):
        if not value:
            return _EMPTY_LIST
        items = {_attribute_type(item) for item in value}
        if items == {_INT, _FLOAT}:  # [1, 2.5] is a list of floats
            items = {_FLOAT}
        if len(items) == 1:
            return _LIST_OF.get(items.pop())
    return None


def _attribute_fits(found: int | None, expected: int) -> bool:
    if found == expected:
        return True
    if found == _EMPTY_LIST:
        return expected in _LIST_OF.values()
    # An int is a valid float (alpha=1); export writes it as 1.0.
    return (found, expected) in ((_INT, _FLOAT), (_INTS, _FLOATS))


# ---------------------------------------------------------------------------------------------- element types
def _known_types(network: "Network", outer: dict[str, str] | None) -> dict[str, str]:
    types = dict(outer or {})
    for name, info in network.inputs.items():
        # A body input that the model declared without a type holds a placeholder dtype: its type is unknown.
        declared = network.declared_types.get(name, info) if network.is_subgraph else info
        text = None if declared is None else type_string(info.dtype, info.kind)
        if text is None:
            types.pop(name, None)
        else:
            types[name] = text
    for name, value in network.params.items():
        text = type_string(np.asarray(value).dtype)
        if text is None:
            types.pop(name, None)
        else:
            types[name] = text
    return types


def _known_ranks(network: "Network", outer: dict[str, int] | None) -> dict[str, int]:
    """The ranks of the tensors ``network`` starts with: its parameters' and its declared tensor inputs'
    (the executor refuses a fed array of another rank). A body's inputs count as unknown: ONNX lets a body
    declare them loosely, and what flows in is the enclosing operator's business."""
    ranks = dict(outer or {})
    for name, info in network.inputs.items():
        ranks.pop(name, None)
        if not network.is_subgraph and info.is_tensor and info.shape is not None:
            ranks[name] = len(info.shape)
    for name, value in network.params.items():
        ranks[name] = np.ndim(value)
    return ranks


def _check_input_types(node: "Node", schema: _Schema, types: dict[str, str], where: str) -> dict[str, str]:
    """Check each input of known type against its constraint; return the type parameters they bind."""
    bound: dict[str, tuple[str, int]] = {}
    for index, name in enumerate(node.inputs):
        found = types.get(name) if name else None
        formal = _formal(schema.inputs, index)
        if found is None or formal is None:
            continue
        param = formal.type_str
        allowed = schema.constraints.get(param, frozenset((param,)))
        if found not in allowed:
            raise SchemaError(f"{where}: input {index} ({formal.name!r}, {name}) has type {found}; {node.op_type} "
                              f"accepts {_describe_types(allowed)} there. Cast it (a Cast node) or use another operator")
        if not formal.homogeneous:  # each input of a heterogeneous variadic (Loop's, Scan's) has its own type
            continue
        previous = bound.get(param)
        if previous is None:
            bound[param] = (found, index)
        elif _kind(previous[0]) != _kind(found):
            # ONNX wants one type; d5 tolerates widths of one kind (float32 with float64, as gradient checking's
            # float64 copies meet float32 constants), which NumPy promotes, but not mixed kinds (floats with
            # integers or strings), which have no single meaning.
            raise SchemaError(f"{where}: inputs {previous[1]} and {index} must have the same type (both are {param!r}), "
                              f"got {previous[0]} and {found}; cast one of them")
    return {param: text for param, (text, _) in bound.items()}


def _propagate(node: "Node", schema: _Schema, bound: dict[str, str], types: dict[str, str]) -> None:
    """Record the types of ``node``'s outputs that its schema and its inputs' types determine."""
    special = _special_output_type(node)
    for index, name in enumerate(node.outputs):
        if not name:
            continue
        formal = _formal(schema.outputs, index)
        if index == 0 and special is not None:
            text = special
        else:
            text = None if formal is None else _output_type(formal, schema, bound)
        if text is None:
            types.pop(name, None)  # a body output may shadow an outer tensor of the same name
        else:
            types[name] = text


def _output_type(formal: _Formal, schema: _Schema, bound: dict[str, str]) -> str | None:
    if not formal.homogeneous:  # Loop's, Scan's, SequenceMap's outputs: their bodies decide
        return None
    allowed = schema.constraints.get(formal.type_str)
    if allowed is None:  # a literal type such as 'tensor(int64)'
        return formal.type_str
    if formal.type_str in bound:
        return bound[formal.type_str]
    if len(allowed) == 1:
        return next(iter(allowed))
    # A container of a bound type or the element of one: SplitToSequence's and SequenceConstruct's
    # seq(T), SequenceAt's and ConcatFromSequence's element, Optional's and OptionalGetElement's value.
    candidates = set()
    for text in bound.values():
        inner = text[text.index("(") + 1:-1] if text.startswith(("seq(", "optional(")) else None
        candidates.update(c for c in (f"seq({text})", f"optional({text})", inner) if c in allowed)
    return candidates.pop() if len(candidates) == 1 else None


def allowed_input_types(op_type: str, opset: int, index: int, domain: str = "") -> frozenset[str] | None:
    """The ONNX type strings input ``index`` of ``op_type`` accepts at ``opset``, or None when unknown
    (no schema, or no such input).

    >>> sorted(allowed_input_types("SequenceAt", 17, 1))
    ['tensor(int32)', 'tensor(int64)']
    """
    schema = _schema(op_type, opset, domain)
    formal = None if schema is None else _formal(schema.inputs, index)
    if formal is None:
        return None
    return schema.constraints.get(formal.type_str, frozenset((formal.type_str,)))


def _special_output_type(node: "Node") -> str | None:
    """The output type of the common operators whose output type an attribute chooses."""
    if node.op_type == "Cast" and isinstance(node.attrs.get("to"), (int, np.integer)):
        return _tensor_proto_type(int(node.attrs["to"]))
    if node.op_type == "Constant":
        value = node.attrs.get("value")
        if isinstance(value, np.ndarray):
            return type_string(value.dtype)
        for key, text in (("value_float", "tensor(float)"), ("value_floats", "tensor(float)"),
                          ("value_int", "tensor(int64)"), ("value_ints", "tensor(int64)"),
                          ("value_string", "tensor(string)"), ("value_strings", "tensor(string)")):
            if node.attrs.get(key) is not None:
                return text
    return None


def _check_bodies(node: "Node", types: dict[str, str], ranks: dict[str, int]) -> None:
    from d5.network.graph import subgraphs

    for key, body in subgraphs(node):
        try:
            check_network(body, types, ranks)
        except SchemaError as err:
            raise SchemaError(f"node {node.name!r} ({node.op_type}), subgraph {key!r}: {err}") from None


_KIND_PREFIXES = (("float", "bfloat", "double"), ("int",), ("uint",), ("complex",))


def _kind(text: str) -> str:
    """The family of an ONNX type string: its container and the kind of its elements (float8/16/32/64 and
    bfloat16 are all 'float'; int and uint are distinct, as their promotion changes values)."""
    inner = text[text.rindex("(") + 1:text.index(")")]
    family = next((prefixes[0] for prefixes in _KIND_PREFIXES if inner.startswith(prefixes)), inner)
    return text[:text.rindex("(") + 1] + family


@functools.lru_cache(maxsize=None)
def _element_name(dtype: np.dtype) -> str | None:
    if dtype.kind in "USO":  # d5 holds ONNX strings as numpy str/bytes/object arrays
        return "string"
    from onnx import TensorProto, helper

    try:
        return TensorProto.DataType.Name(helper.np_dtype_to_tensor_dtype(dtype)).lower()
    except (KeyError, TypeError, ValueError):
        return None


def _tensor_proto_type(code: int) -> str | None:
    from onnx import TensorProto

    try:
        return f"tensor({TensorProto.DataType.Name(code).lower()})"
    except ValueError:
        return None


def _describe_types(allowed: frozenset[str]) -> str:
    return ", ".join(sorted(allowed)) if len(allowed) <= 16 else f"{len(allowed)} types ({', '.join(sorted(allowed)[:8])}, ...)"


__all__ = ["allowed_input_types", "check_network", "check_node_attributes", "type_string"]
