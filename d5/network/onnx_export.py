"""Conversion of a :class:`d5.Network` to an ONNX ModelProto, saving it, and shape inference through ONNX.

ONNX's own shape inference is the well-kept implementation of every operator's shape rules, so d5
infers shapes by exporting and asking ``onnx.shape_inference`` rather than duplicating those rules.
Export writes back everything import produces: numpy-array attributes as tensors, decoded strings,
empty lists typed from the operator's schema, symbolic dimensions, and the network's opset.

>>> import d5
>>> model = d5.models.lenet5().to_onnx()
>>> model.opset_import[0].version, model.graph.input[0].type.tensor_type.shape.dim[0].dim_param
(17, 'N')
"""
from __future__ import annotations

import os
from typing import Any

import numpy as np

from d5.errors import GraphError, ShapeError, UnsupportedOperatorError
from d5.network import onnx_functions
from d5.network.graph import Network, Node, TensorInfo
from d5.network.op_types import CUSTOM_DOMAIN, D5_DOMAIN


def _value_info(name: str, dtype: np.dtype, shape, kind: str = "tensor"):
    """A ValueInfoProto of a tensor, or of a sequence / optional of tensors (``kind`` as in TensorInfo)."""
    from onnx import helper

    elem_type = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    dims = None if shape is None else [d if isinstance(d, (int, str)) else None for d in shape]
    if kind == "tensor":
        return helper.make_tensor_value_info(name, elem_type, dims)
    type_proto = helper.make_tensor_type_proto(elem_type, dims)
    if kind in ("sequence", "optional_sequence"):
        type_proto = helper.make_sequence_type_proto(type_proto)
    if kind in ("optional", "optional_sequence"):
        type_proto = helper.make_optional_type_proto(type_proto)
    return helper.make_value_info(name, type_proto)


def _info_from_type(name: str, type_proto) -> TensorInfo | None:
    """The TensorInfo of an ONNX TypeProto (tensor, sequence of tensors, optional of those), or None when the
    type is unknown or of another kind (maps, sparse tensors)."""
    from onnx import helper

    kind = type_proto.WhichOneof("value")
    prefix = ""
    if kind == "optional_type":
        type_proto = type_proto.optional_type.elem_type
        kind = type_proto.WhichOneof("value")
        prefix = "optional_"
    suffix = "tensor"
    if kind == "sequence_type":
        type_proto = type_proto.sequence_type.elem_type
        kind = type_proto.WhichOneof("value")
        suffix = "sequence"
    if kind != "tensor_type" or not type_proto.tensor_type.elem_type:
        return None
    ttype = type_proto.tensor_type
    shape = None
    if ttype.HasField("shape"):
        shape = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in ttype.shape.dim)
    value_kind = "optional" if (prefix, suffix) == ("optional_", "tensor") else prefix + suffix
    return TensorInfo(name, shape, np.dtype(helper.tensor_dtype_to_np_dtype(ttype.elem_type)), value_kind)


def network_to_onnx(network: Network, infer_output_types: bool = True, shape_constants_only: bool = False):
    """Build an ``onnx.ModelProto`` of ``network`` (nodes in topological order). With
    ``shape_constants_only`` (for shape inference, not for saving) only small integer parameters carry their
    values; the others become typed graph inputs.

    >>> import d5
    >>> [node.op_type for node in network_to_onnx(d5.models.lenet5()).graph.node][:3]
    ['Conv', 'Relu', 'MaxPool']
    """
    from onnx import helper

    graph = network_to_graph(network, shape_constants_only)
    opsets = [helper.make_opsetid("", network.opset)]
    domains = {node.domain for node in _all_nodes(network)} - {""}
    opsets += [helper.make_opsetid(d, onnx_functions.D5_OPSET_VERSION) for d in sorted(domains)]
    # d5's own operators travel as model-local functions of standard operators, so that the checker, shape
    # inference and other runtimes understand them (see d5.network.onnx_functions).
    functions = onnx_functions.model_functions(_all_nodes(network), network.opset)
    model = helper.make_model(graph, opset_imports=opsets, producer_name="d5", functions=functions)
    # The oldest IR version that can carry these opsets and functions, so older runtimes (onnxruntime) accept it.
    model.ir_version = max(helper.find_min_ir_version_for(opsets, ignore_unknown=True),
                           onnx_functions.min_ir_version(functions))
    if infer_output_types:
        inferred = _infer(model)
        _check_d5_input_types(network, inferred)
        for out in model.graph.output:
            info = inferred.get(out.name)
            declared = network.declared_types.get(out.name)
            if (info is None or info.shape is None) and declared is not None and declared.shape is not None:
                # ONNX infers no rank for some outputs (Loop's carried values), and the checker wants one:
                # keep the type the imported model declared.
                info = declared
            if info is not None:
                out.CopyFrom(_value_info(out.name, info.dtype, info.shape, info.kind))
        if CUSTOM_DOMAIN not in domains:  # user operators have neither schemas nor functions: nothing to check
            _check(model, network, full_check=False)
    return model


def _check_d5_input_types(network: Network, inferred: dict[str, TensorInfo]) -> None:
    """Refuse d5 nodes whose exported function would compute in other types than d5 does. Their inputs' types
    are known only once ONNX has inferred them, and only for the main graph (inference reports no types
    inside control-flow bodies), so a d5 node in a body is not checked."""
    for node in network.nodes:
        if node.domain == D5_DOMAIN:
            dtypes = [inferred[name].dtype if name in inferred else None for name in node.inputs]
            onnx_functions.check_input_types(node, dtypes, network.opset)


#: Integer parameters up to this many elements keep their values when exporting for shape inference (they
#: may be shapes, axes or pads that ONNX's data propagation reads); bigger ones are data, not shapes.
_SHAPE_CONSTANT_LIMIT = 1024


def network_to_graph(network: Network, shape_constants_only: bool = False):
    """``network`` as an ``onnx.GraphProto``; a control-flow body (``network.is_subgraph``) gets its inputs'
    and outputs' types from ``network.declared_types`` where import recorded them. ``shape_constants_only``:
    see :func:`network_to_onnx`."""
    from onnx import helper, numpy_helper

    def declared(name: str, default: TensorInfo | None):
        info = network.declared_types.get(name, default)
        if info is None:  # declared without a type (or, for an output, not known): leave it to inference
            return helper.make_empty_tensor_value_info(name)
        return _value_info(name, info.dtype, info.shape, info.kind)

    nodes = [node_to_proto(node, network.opset) for node in network.topological_order()]
    inputs = [declared(i.name, i) for i in network.inputs.values()]
    params = {name: np.asarray(value) for name, value in network.params.items()}
    if shape_constants_only:
        as_inputs = [name for name, value in params.items()
                     if value.dtype.kind not in "iu" or value.size > _SHAPE_CONSTANT_LIMIT]
        inputs += [_value_info(name, params[name].dtype, params[name].shape) for name in as_inputs]
        for name in as_inputs:
            del params[name]
    initializers = [numpy_helper.from_array(np.asarray(v, order="C"), name) for name, v in params.items()]
    outputs = [declared(name, None) for name in network.outputs]
    return helper.make_graph(nodes, network.name, inputs, outputs, initializer=initializers)


def _all_nodes(network: Network):
    """``network``'s nodes and, depth first, those of its control-flow bodies."""
    for node in network.nodes:
        yield node
        for value in node.attrs.values():
            if isinstance(value, Network):
                yield from _all_nodes(value)


def _infer(model) -> dict[str, TensorInfo]:
    import onnx
    from onnx import helper

    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
    except onnx.shape_inference.InferenceError as err:
        raise ShapeError(f"shape inference failed: {err}") from None
    result = {}
    graph = inferred.graph
    for vi in list(graph.input) + list(graph.value_info) + list(graph.output):
        info = _info_from_type(vi.name, vi.type)
        if info is not None:
            result[vi.name] = info
    for init in graph.initializer:
        result[init.name] = TensorInfo(init.name, tuple(init.dims), np.dtype(helper.tensor_dtype_to_np_dtype(init.data_type)))
    return result


def infer_shapes(network: Network, validated: bool = False) -> dict[str, TensorInfo]:
    """Shapes and dtypes of all tensors of ``network`` that ONNX shape inference can determine.

    Only small integer parameters (the constants shapes are computed from) are written out as data; every
    other parameter is declared by type and shape alone, which is all inference needs (serializing
    ResNet-50's 100 MB of weights took 0.7 s of the 0.72 s this call used to cost). ``validated=True``
    skips the schema validation that otherwise runs first (see the comment below).
    """
    # ONNX's C++ inference trusts attribute values (GatherND batch_dims=-2**31 crashes it): validate first,
    # unless the caller just did (an executor validates when it is built).
    if not validated:
        network.validate()
    return _infer(network_to_onnx(network, infer_output_types=False, shape_constants_only=True))


def node_to_proto(node: Node, opset: int | None = None):
    """One :class:`~d5.network.graph.Node` as an ``onnx.NodeProto``. ``opset`` selects the schema that types
    attributes whose Python value is ambiguous (an empty list).

    >>> from d5.network.graph import Node
    >>> proto = node_to_proto(Node("pad", "Pad", ["x", "p"], ["y"], {"mode": "reflect"}))
    >>> proto.attribute[0].s
    b'reflect'
    """
    from onnx import helper

    attributes = [python_to_attribute(key, value, node.op_type, node.domain, opset)
                  for key, value in node.attrs.items() if value is not None]
    overload = None
    if node.domain == D5_DOMAIN:  # calls the model-local function specialised to its attribute values
        overload = onnx_functions.overload_name(node.op_type, onnx_functions.resolve_attributes(node)) or None
    proto = helper.make_node(node.op_type, node.inputs, node.outputs, name=node.name, domain=node.domain or None,
                             overload=overload)
    proto.attribute.extend(attributes)
    return proto


def python_to_attribute(key: str, value: Any, op_type: str = "", domain: str = "", opset: int | None = None):
    """An attribute value as import produces it (numbers, str/bytes, numpy arrays, lists of those, protos)
    as an ``onnx.AttributeProto``.

    >>> import numpy as np
    >>> python_to_attribute("value", np.array([1.5], np.float32)).t.dims
    [1]
    """
    from onnx import AttributeProto, helper, numpy_helper

    try:
        if isinstance(value, Network):  # a control-flow body (If's branches, Loop's and Scan's body)
            return helper.make_attribute(key, network_to_graph(value))
        if isinstance(value, np.ndarray):
            return helper.make_attribute(key, numpy_helper.from_array(value))
        if isinstance(value, np.generic):
            value = value.item()
        if isinstance(value, (list, tuple)):
            items = [numpy_helper.from_array(v) if isinstance(v, np.ndarray) else
                     v.item() if isinstance(v, np.generic) else v for v in value]
            attr_type = _schema_attribute_type(op_type, domain, opset, key)
            if not items:
                return helper.make_attribute(key, [], attr_type=attr_type or AttributeProto.INTS)
            if attr_type == AttributeProto.FLOATS:
                items = [float(v) for v in items]  # [1, 2] for a FLOATS attribute is [1.0, 2.0]
            return helper.make_attribute(key, items)
        if isinstance(value, int) and not isinstance(value, bool) and \
                _schema_attribute_type(op_type, domain, opset, key) == AttributeProto.FLOAT:
            value = float(value)
        return helper.make_attribute(key, value)
    except (TypeError, ValueError) as err:
        raise GraphError(f"attribute {key!r} of a {op_type or 'node'}: cannot write {type(value).__name__} value "
                      f"{value!r:.80} to ONNX ({err}); use a number, string, numpy array or a list of one kind") from None


def _schema_attribute_type(op_type: str, domain: str, opset: int | None, key: str):
    import onnx.defs

    if domain not in ("", "ai.onnx") or not op_type:
        return None
    try:
        schema = onnx.defs.get_schema(op_type, opset or onnx.defs.onnx_opset_version(), "")
    except onnx.defs.SchemaError:
        return None
    spec = schema.attributes.get(key)
    return None if spec is None else int(spec.type)


def save_onnx(network: Network, path: str | os.PathLike) -> None:
    """Write ``network`` to an ONNX file, atomically, after ``onnx.checker.check_model(full_check=True)``
    passes; d5's own operators are written with their model-local functions, so they check (and run in
    other runtimes) too. Raises :class:`~d5.errors.GraphError` when the model does not check, and
    :class:`~d5.errors.UnsupportedOperatorError` naming the node for a user operator (a Python object no
    file can carry).

    >>> import d5, tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "lenet.onnx")
    >>> save_onnx(d5.models.lenet5(), path)
    >>> d5.Network.from_onnx(path).nodes[0].op_type
    'Conv'
    """
    from d5.io_utils import atomic_write

    _refuse_user_operators(network)
    model = network_to_onnx(network)
    _check(model, network, full_check=True)
    data = model.SerializeToString()
    with atomic_write(path, "wb") as handle:
        handle.write(data)


def _refuse_user_operators(network: Network) -> None:
    for node in _all_nodes(network):
        if node.domain == CUSTOM_DOMAIN:
            raise UnsupportedOperatorError(
                f"network {network.name!r}: node {node.name!r} ({CUSTOM_DOMAIN} {node.op_type}) is a user operator, "
                "whose code (a d5.CustomOp) no ONNX file can carry; replace it by standard ONNX operators before "
                "saving, or keep the network in Python (to_onnx() still exports it as an opaque, unchecked node)")


def _check(model, network: Network, full_check: bool) -> None:
    import onnx

    try:
        onnx.checker.check_model(model, full_check=full_check)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as err:
        # A node's own error (e.g. an attribute of the wrong type) says more than its knock-on effects
        # (an output whose type could not be inferred), so look for it first.
        message = _first_node_error(model) or str(err)
        raise GraphError(f"network {network.name!r} does not export to valid ONNX: {message.strip()[:800]}; "
                         "fix the offending node's attributes or inputs") from None


def _first_node_error(model) -> str | None:
    import onnx

    context = onnx.checker.C.CheckerContext()
    context.ir_version = model.ir_version
    context.opset_imports = {entry.domain: entry.version for entry in model.opset_import}
    for node in model.graph.node:
        if any(a.HasField("g") or len(a.graphs) for a in node.attribute):
            continue  # checked alone, a body's outer-scope names look undefined: the model check says more
        try:
            onnx.checker.check_node(node, context)
        except onnx.checker.ValidationError as err:
            return str(err)
    return None
