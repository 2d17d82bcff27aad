"""Import of ONNX models as :class:`d5.Network` graphs.

The importer is strict about what it cannot represent and lenient about what is merely untidy: a model
that is not ONNX, is truncated, reads a tensor nobody defines, has a cycle, duplicate tensor names, an
unknown domain, a list-of-subgraphs attribute or an opset newer than the installed ``onnx`` knows raises
:class:`~d5.errors.OnnxImportError` or :class:`~d5.errors.UnsupportedOperatorError` naming the node, its
operator and what to do; a model whose nodes are merely out of order is sorted. No raw protobuf, numpy
or ``KeyError`` traceback escapes: file formats are exactly where hostile or damaged input arrives.

>>> import numpy as np, onnx
>>> from onnx import helper, TensorProto
>>> node = helper.make_node("Gemm", ["x", "W"], ["y"], transB=1)
>>> graph = helper.make_graph([node], "affine", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])],
...     [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 2])],
...     initializer=[onnx.numpy_helper.from_array(np.ones((2, 3), np.float32), "W")])
>>> net = load_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
>>> net.inputs["x"].shape, net.get_params(), net.nodes[0].attrs["alpha"]
(('N', 3), ['W'], 1.0)
"""
from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

import numpy as np

from d5.errors import D5Error, GraphError, OnnxImportError, SchemaError, UnsupportedOperatorError
from d5.network import onnx_functions
from d5.network.attribute_ranges import check_value_ranges
from d5.network.graph import Network, Node
from d5.network.op_types import CUSTOM_DOMAIN, D5_DOMAIN, D5_OPERATORS, resolve_domain
from d5.network.onnx_scopes import all_nodes, node_reads

#: The oldest default-domain opset imported as is; older models are upgraded with onnx.version_converter.
MIN_OPSET = 11
_DEFAULT_DOMAINS = ("", "ai.onnx")
# Initializer inputs that hold running statistics, not weights: (op type, input index).
_NON_TRAINABLE_SLOTS = {("BatchNormalization", 3), ("BatchNormalization", 4)}


def max_supported_opset() -> int:
    """The newest default-domain opset the installed ``onnx`` package defines (and d5 therefore imports).

    >>> max_supported_opset() >= 17
    True
    """
    import onnx.defs

    return onnx.defs.onnx_opset_version()


def load_onnx(source: Any, external_data_dir: str | os.PathLike | None = None) -> Network:
    """Import an ONNX model: a path, the file's bytes, or an ``onnx.ModelProto``.

    External data files are read from beside the model file (or from ``external_data_dir``). Symbolic
    dimensions stay symbolic (``'N'``), unknown ones become None; omitted attributes get ONNX's defaults;
    float initializers become trainable parameters, the others (and batch-norm statistics) fixed ones.

    >>> import d5, tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "lenet.onnx")
    >>> d5.save_onnx(d5.models.lenet5(), path)
    >>> net = d5.load_onnx(path)
    >>> net.inputs["input"].shape, len(net.get_params())
    (('N', 1, 28, 28), 10)
    """
    model = _read_model(source, external_data_dir)
    try:
        return _ModelImporter(model).run()
    except D5Error:
        raise
    except Exception as err:  # noqa: BLE001 - the last line of defence: damaged input must end as a d5 error
        raise OnnxImportError(f"could not import the ONNX model ({type(err).__name__}: {err}); the file is probably "
                              "damaged or uses a feature d5 does not support: check it with onnx.checker") from None


# ---------------------------------------------------------------------------------------------- reading
def _read_model(source: Any, external_data_dir: str | os.PathLike | None):
    import onnx

    base_dir = None if external_data_dir is None else str(external_data_dir)
    if isinstance(source, onnx.ModelProto):
        model = onnx.ModelProto()
        model.CopyFrom(source)  # the importer upgrades, inlines and sorts: never touch the caller's model
        what = "the ModelProto"
    elif isinstance(source, (bytes, bytearray, memoryview)):
        model = _parse(bytes(source), "the given bytes")
        what = "the given bytes"
    elif isinstance(source, (str, os.PathLike)):
        path = Path(source)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise OnnxImportError(f"no ONNX file at {str(path)!r}; check the path") from None
        except OSError as err:
            raise OnnxImportError(f"cannot read ONNX file {str(path)!r}: {err}") from None
        model = _parse(data, repr(str(path)))
        what = repr(str(path))
        base_dir = base_dir or str(path.parent)
    else:
        raise OnnxImportError(f"from_onnx expects a path, bytes or an onnx.ModelProto, got {type(source).__name__}")
    if not model.HasField("graph") or model.ir_version <= 0:
        raise OnnxImportError(f"{what} is not an ONNX model (no graph or no IR version); was the file truncated, "
                              "or is it another format? Re-export it with onnx.save_model")
    _require_utf8(model, "model", what)
    _load_external_data(model, base_dir, what)
    return model


#: Text fields nothing in d5 reads, so their encoding does not matter.
_UNREAD_TEXT_FIELDS = frozenset({"doc_string"})


def _require_utf8(message, path: str, what: str) -> None:
    """Refuse a text field of ``message`` (recursively) that is not UTF-8. Protobuf's upb parser does not
    check proto2 strings: it hands such a field over as ``bytes``, and a node name of ``b'\\xccelu'``
    then failed far from the import (a raw UnicodeDecodeError when the graph was exported for shape
    inference). Only text and message fields are read, never tensor data (raw_data may be gigabytes)."""
    texts, messages = _text_and_message_fields(message.DESCRIPTOR)
    for name, repeated in texts:
        values = getattr(message, name) if repeated else (getattr(message, name),)
        for index, value in enumerate(values):
            if isinstance(value, bytes):
                where = f"{path}.{name}" + (f"[{index}]" if repeated else "")
                raise OnnxImportError(f"{what}: the text field {where} ({value.decode('utf-8', 'backslashreplace')!r}) "
                                      "is not valid UTF-8, as ONNX requires of names, types and domains; the file is "
                                      "damaged or its exporter is faulty: fix the name or re-export the model")
    for name, repeated in messages:
        if repeated:
            for index, item in enumerate(getattr(message, name)):
                _require_utf8(item, f"{path}.{name}[{index}]", what)
        elif message.HasField(name):
            _require_utf8(getattr(message, name), f"{path}.{name}", what)


@functools.lru_cache(maxsize=None)
def _text_and_message_fields(descriptor) -> tuple[tuple[tuple[str, bool], ...], tuple[tuple[str, bool], ...]]:
    """(name, repeated) of the text fields and of the message fields of a protobuf message type."""
    from google.protobuf.descriptor import FieldDescriptor

    def repeated(field) -> bool:  # protobuf >= 5.28 has is_repeated; 7 removed label
        return field.is_repeated if hasattr(field, "is_repeated") else field.label == FieldDescriptor.LABEL_REPEATED

    texts = tuple((f.name, repeated(f)) for f in descriptor.fields
                  if f.type == FieldDescriptor.TYPE_STRING and f.name not in _UNREAD_TEXT_FIELDS)
    messages = tuple((f.name, repeated(f)) for f in descriptor.fields if f.type == FieldDescriptor.TYPE_MESSAGE)
    return texts, messages


def _parse(data: bytes, what: str):
    import onnx
    from google.protobuf.message import DecodeError

    if not data:
        raise OnnxImportError(f"{what} is empty, not an ONNX model")
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, ValueError, RuntimeError, UnicodeDecodeError) as err:
        raise OnnxImportError(f"{what} is not a valid ONNX protobuf ({err}); the file is truncated, corrupt or not an "
                              "ONNX model. Re-export or re-download it") from None
    return model


def _load_external_data(model, base_dir: str | None, what: str) -> None:
    from onnx import TensorProto, external_data_helper

    tensors = [t for t in external_data_helper._get_all_tensors(model) if external_data_helper.uses_external_data(t)]
    if not tensors:
        return
    if base_dir is None:
        raise OnnxImportError(f"{what} keeps tensors {[t.name for t in tensors][:5]} in external data files; pass "
                              "the model's path, or external_data_dir=<folder holding the data files>")
    for tensor in tensors:
        info = {entry.key: entry.value for entry in tensor.external_data}
        try:
            external_data_helper.load_external_data_for_tensor(tensor, base_dir)
            tensor.data_location = TensorProto.DEFAULT  # the data now lives in raw_data
            del tensor.external_data[:]
        except Exception as err:  # noqa: BLE001 - missing file, path outside base_dir, short read
            raise OnnxImportError(f"initializer {tensor.name!r}: cannot read its external data "
                                  f"{info.get('location')!r} from {base_dir!r} ({type(err).__name__}: {err}); "
                                  "keep the data file beside the model or pass external_data_dir") from None


# ---------------------------------------------------------------------------------------------- importing
class _ModelImporter:
    """One import: checks the model (with messages naming nodes), then builds the Network."""

    def __init__(self, model) -> None:
        self.model = model
        self.graph = model.graph

    def run(self) -> Network:
        # First: ONNX's C++ shape inference (run by the version converter and to complete output types) trusts
        # these values, and segfaults on some (GatherND batch_dims=-2**31).
        self._check_attribute_values()
        self.opset = self._check_opsets()
        self._inline_functions()
        self._check_nodes()
        self._attach_d5_functions()
        self._check_tensor_names()
        self._sort_nodes()
        self._run_checker()
        return self._build()

    # ------------------------------------------------------------------ checks
    def _check_opsets(self) -> int:
        import onnx

        if self.model.ir_version > onnx.IR_VERSION:
            raise OnnxImportError(f"the model uses ONNX IR version {self.model.ir_version}, newer than the {onnx.IR_VERSION} "
                                  "the installed onnx package supports; upgrade onnx (and d5)")
        versions = {entry.domain: entry.version for entry in self.model.opset_import}
        opset = next((versions[d] for d in _DEFAULT_DOMAINS if d in versions), None)
        if opset is None:
            return Network.DEFAULT_OPSET  # no default-domain operators at all
        newest = max_supported_opset()
        if opset > newest:
            raise OnnxImportError(f"the model uses ONNX opset {opset}; this installation supports opsets {MIN_OPSET} to "
                                  f"{newest}. Upgrade onnx and d5, or re-export the model for opset {newest}")
        if opset < MIN_OPSET:
            opset = self._upgrade(opset)
        return opset

    def _upgrade(self, opset: int) -> int:
        from onnx import helper, version_converter

        try:
            upgraded = version_converter.convert_version(self.model, MIN_OPSET)
        except Exception as err:  # noqa: BLE001 - the converter raises bare RuntimeErrors
            raise OnnxImportError(f"the model uses opset {opset}, older than the oldest d5 imports ({MIN_OPSET}), and "
                                  f"onnx.version_converter could not upgrade it ({err}); re-export it for opset "
                                  f">= {MIN_OPSET}") from None
        # The converter moves attributes into new initializers (Pad-2's pads become an input of Pad-11) but keeps
        # the IR version; IR < 4 requires every initializer to be a graph input, so raise it to what the new
        # opset needs (old-style initializer inputs stay valid).
        upgraded.ir_version = max(upgraded.ir_version, helper.find_min_ir_version_for(upgraded.opset_import))
        self.model = upgraded
        self.graph = upgraded.graph
        return MIN_OPSET

    def _inline_functions(self) -> None:
        if not len(self.model.functions):
            return
        import onnx.inliner

        # d5's own operators stay nodes (their functions only tell other runtimes what they compute), so a model
        # d5 exported comes back with the same nodes; every other function is expanded into its body.
        keep = [(D5_DOMAIN, op_type) for op_type in D5_OPERATORS]
        try:
            self.model = onnx.inliner.inline_selected_functions(self.model, keep, exclude=True)
        except Exception as err:  # noqa: BLE001
            raise OnnxImportError(f"could not inline the model's local functions ({err})") from None
        self.graph = self.model.graph
        self._check_attribute_values()  # the inlined nodes take attribute values from their callers

    def _check_attribute_values(self) -> None:
        """The flag and axis attributes of every ONNX-domain node hold values ONNX defines (see
        :func:`d5.network.attribute_ranges.check_value_ranges`)."""
        from onnx import AttributeProto

        for label, node in all_nodes(self.graph, _label):
            if node.domain not in _DEFAULT_DOMAINS:
                continue
            ints = {a.name: a.i if a.type == AttributeProto.INT else list(a.ints)
                    for a in node.attribute if a.type in (AttributeProto.INT, AttributeProto.INTS)}
            try:
                check_value_ranges(ints, label)
            except SchemaError as err:
                raise OnnxImportError(str(err)) from None

    def _check_nodes(self) -> None:
        from onnx import AttributeProto

        imported = {entry.domain for entry in self.model.opset_import}
        for label, node in all_nodes(self.graph, _label):
            graphs = [a.name for a in node.attribute if a.type == AttributeProto.GRAPHS or len(a.graphs)]
            if graphs:
                raise UnsupportedOperatorError(
                    f"{label}: attributes {graphs} hold lists of subgraphs, which no standard ONNX operator uses and d5 "
                    "does not support; use If, Loop, Scan or SequenceMap with one body per attribute")
            domain = node.domain
            if domain not in _DEFAULT_DOMAINS and domain not in (D5_DOMAIN, CUSTOM_DOMAIN):
                raise UnsupportedOperatorError(
                    f"{label}: unknown operator domain {domain!r}; d5 imports the ONNX default domain and {D5_DOMAIN!r}. "
                    "Replace the node by standard ONNX operators, or add it with Network.add_custom_node")
            if domain not in imported and not (domain in _DEFAULT_DOMAINS and imported & set(_DEFAULT_DOMAINS)):
                raise OnnxImportError(f"{label}: its domain {domain or 'ai.onnx'!r} is missing from the model's "
                                      "opset_import; add it (helper.make_opsetid)")
            if domain == CUSTOM_DOMAIN:
                raise UnsupportedOperatorError(
                    f"{label}: user operators ({CUSTOM_DOMAIN!r}) are Python objects that ONNX files cannot carry; "
                    "rebuild the node with Network.add_custom_node after import")
            try:
                resolve_domain(node.op_type, domain)
            except UnsupportedOperatorError as err:
                raise UnsupportedOperatorError(f"{label}: {err}") from None
            if domain in _DEFAULT_DOMAINS:
                self._check_schema(node, label)

    def _check_schema(self, node, label: str) -> None:
        import onnx.defs

        try:
            onnx.defs.get_schema(node.op_type, self.opset, "")
        except onnx.defs.SchemaError:
            raise UnsupportedOperatorError(f"{label}: operator {node.op_type!r} does not exist in ONNX opset "
                                           f"{self.opset} (it was added later); raise the model's opset") from None

    def _attach_d5_functions(self) -> None:
        """Give each d5 node without a model-local function d5's own (a file written by another tool, or by d5
        before it exported them): the checker and shape inference need it to type the node's outputs."""
        defined = {(f.domain, f.name, f.overload) for f in self.model.functions}
        for label, proto in all_nodes(self.graph, _label):
            if proto.domain != D5_DOMAIN or proto.op_type not in onnx_functions.FUNCTIONS or \
                    (D5_DOMAIN, proto.op_type, proto.overload) in defined:
                continue
            attrs = {a.name: attribute_to_python(a, f"{label}, attribute {a.name!r}") for a in proto.attribute}
            node = Node(proto.name, proto.op_type, list(proto.input), list(proto.output), attrs, D5_DOMAIN)
            try:
                values = onnx_functions.resolve_attributes(node, label)
            except SchemaError as err:
                raise OnnxImportError(str(err)) from None
            proto.overload = onnx_functions.overload_name(proto.op_type, values)
            if (D5_DOMAIN, proto.op_type, proto.overload) not in defined:
                self.model.functions.append(onnx_functions.function_proto(proto.op_type, values, self.opset))
                defined.add((D5_DOMAIN, proto.op_type, proto.overload))
        self.model.ir_version = max(self.model.ir_version, onnx_functions.min_ir_version(self.model.functions))

    def _check_tensor_names(self) -> None:
        graph = self.graph
        defined: dict[str, str] = {}

        def define(name: str, what: str) -> None:
            if name in defined:
                raise OnnxImportError(f"duplicate tensor name {name!r}: defined by {defined[name]} and by {what}; "
                                      "every tensor must have one producer, so rename one of them")
            defined[name] = what

        initializers = set()
        for init in graph.initializer:
            define(init.name, f"initializer {init.name!r}")
            initializers.add(init.name)
        for sparse in graph.sparse_initializer:
            define(sparse.values.name, f"sparse initializer {sparse.values.name!r}")
            initializers.add(sparse.values.name)
        seen_inputs = set()
        for vi in graph.input:
            if vi.name in seen_inputs:
                raise OnnxImportError(f"duplicate graph input {vi.name!r}; rename one of them")
            seen_inputs.add(vi.name)
            if vi.name not in initializers:  # an input with an initializer is that initializer (IR: a default value)
                define(vi.name, f"graph input {vi.name!r}")
        for index, node in enumerate(graph.node):
            for out in node.output:
                if out:
                    define(out, _label(node, index))
        for index, node in enumerate(graph.node):
            for name in node_reads(node):
                if name and name not in defined:
                    what = "reads" if name in node.input else "has a subgraph that reads"
                    raise OnnxImportError(
                        f"{_label(node, index)} {what} {name!r}, which is no graph input, initializer or node output "
                        "(a missing initializer or a dangling input); add the initializer or fix the name")
        for out in graph.output:
            if out.name not in defined:
                raise OnnxImportError(f"graph output {out.name!r} is produced by no node, input or initializer; "
                                      "remove it from graph.output or fix the name")

    def _sort_nodes(self) -> None:
        """Order the nodes topologically (the checker requires it); name the nodes of a cycle."""
        nodes = list(self.graph.node)
        producer = {out: i for i, node in enumerate(nodes) for out in node.output if out}
        # A control-flow node also depends on the producers of the outer tensors its subgraphs capture.
        reads = [node_reads(node) for node in nodes]
        waiting = [len({producer[t] for t in reads[i] if t in producer}) for i in range(len(nodes))]
        consumers: dict[int, set[int]] = {}
        for i, node in enumerate(nodes):
            for p in {producer[t] for t in reads[i] if t in producer}:
                consumers.setdefault(p, set()).add(i)
        ready = [i for i, count in enumerate(waiting) if count == 0]
        order = []
        while ready:
            i = ready.pop(0)
            order.append(i)
            for c in sorted(consumers.get(i, ())):
                waiting[c] -= 1
                if waiting[c] == 0:
                    ready.append(c)
        if len(order) != len(nodes):
            cyclic = [_label(nodes[i], i) for i, count in enumerate(waiting) if count > 0]
            raise OnnxImportError(f"the graph has a cycle through {', '.join(cyclic[:6])}; ONNX graphs must be acyclic, "
                                  "so break the cycle (iteration belongs in a Loop node's body)")
        if order != sorted(order):
            sorted_nodes = [nodes[i] for i in order]
            del self.graph.node[:]
            self.graph.node.extend(sorted_nodes)

    def _run_checker(self) -> None:
        import onnx

        self._complete_output_types()
        try:
            onnx.checker.check_model(self.model)
        except Exception as err:  # noqa: BLE001 - ValidationError, and protobuf errors on damaged fields
            message = str(err).strip().splitlines()
            raise OnnxImportError("the model is not valid ONNX (onnx.checker): " + " ".join(message)[:800] +
                                  "; fix or re-export the model") from None

    def _complete_output_types(self) -> None:
        """The checker wants every graph output typed and shaped; d5 re-infers output types anyway, so an
        output declared without them is completed from ONNX shape inference rather than refused."""
        import onnx

        incomplete = [out for out in self.graph.output
                      if out.type.WhichOneof("value") is None or
                      (out.type.HasField("tensor_type") and not out.type.tensor_type.HasField("shape"))]
        if not incomplete:
            return
        try:
            inferred = onnx.shape_inference.infer_shapes(self.model, strict_mode=False).graph
        except Exception:  # noqa: BLE001 - the checker reports the real problem next
            return
        known = {vi.name: vi for vi in list(inferred.value_info) + list(inferred.output) + list(inferred.input)}
        for out in incomplete:
            info = known.get(out.name)
            if info is None:
                continue
            kind = info.type.WhichOneof("value")
            if (kind == "tensor_type" and info.type.tensor_type.HasField("shape")) or \
                    (kind in ("sequence_type", "optional_type") and out.type.WhichOneof("value") is None):
                out.type.CopyFrom(info.type)

    # ------------------------------------------------------------------ building
    def _build(self) -> Network:
        return self._build_graph(self.graph, self.graph.name or "onnx_model", subgraph=False)

    def _build_graph(self, graph, name: str, subgraph: bool) -> Network:
        """The Network of ``graph``: the model's main graph, or (``subgraph``) a control-flow body, whose
        nodes may read tensors of the enclosing graphs (see :attr:`Network.captures`)."""
        network = Network(name, opset=self.opset)
        network.is_subgraph = subgraph
        where = f"subgraph {name!r}: " if subgraph else ""
        fixed = {node.input[i] for node in graph.node for i in range(len(node.input))
                 if (node.op_type, i) in _NON_TRAINABLE_SLOTS}
        for init in graph.initializer:
            value = _tensor_to_array(init, f"{where}initializer {init.name!r}")
            network.add_param(init.name, value, trainable=_is_float(value.dtype) and init.name not in fixed)
        for sparse in graph.sparse_initializer:
            value = _sparse_to_array(sparse, f"{where}sparse initializer {sparse.values.name!r}")
            network.add_param(sparse.values.name, value, trainable=_is_float(value.dtype) and sparse.values.name not in fixed)
        for vi in graph.input:
            if subgraph:
                network.declared_types[vi.name] = _info_or_none(vi)
            if vi.name in network.params:
                continue
            if subgraph and vi.type.WhichOneof("value") is None:
                # Bodies may leave input types to the operator (Loop's carried values take their initial
                # values' types); the reference executor feeds bodies unchecked, so float32 is a placeholder.
                network.add_input(vi.name, None, "float32")
                continue
            shape, dtype, kind = _tensor_type(vi, f"{where}graph input {vi.name!r}")
            network.add_input(vi.name, shape, dtype, kind)
        names: set[str] = set()
        for index, proto in enumerate(graph.node):
            node = self._convert_node(proto, index, names, where)
            try:
                network._insert(node)  # noqa: SLF001 - attributes may be named like add_node's own keywords
            except GraphError as err:
                raise OnnxImportError(f"{where}{_label(proto, index)}: {err}") from None
        for out in graph.output:
            if out.name in network.outputs:
                raise OnnxImportError(f"{where}graph output {out.name!r} is listed twice; remove the duplicate")
            _refuse_unsupported_type(out.type, f"{where}graph output {out.name!r}")
            network.add_output(out.name)
            network.declared_types[out.name] = _info_or_none(out)
        if not subgraph:  # a body is validated with its enclosing graph, which sees the captured tensors
            try:
                network.validate()
            except GraphError as err:
                raise OnnxImportError(f"the imported graph is malformed: {err}") from None
        return network

    def _convert_node(self, proto, index: int, taken: set[str], where: str = "") -> Node:
        label = where + _label(proto, index)
        name = proto.name or f"{proto.op_type}_{index}"
        while name in taken:  # ONNX only recommends unique node names; d5 requires them
            name = f"{name}_{index}"
        taken.add(name)
        domain = resolve_domain(proto.op_type, proto.domain)
        attrs = {}
        from onnx import AttributeProto

        for attribute in proto.attribute:
            if attribute.type == AttributeProto.GRAPH:  # a control-flow body becomes a nested Network
                attrs[attribute.name] = self._build_graph(attribute.g, attribute.g.name or f"{name}_{attribute.name}",
                                                          subgraph=True)
                continue
            attrs[attribute.name] = attribute_to_python(attribute, f"{label}, attribute {attribute.name!r}")
        if proto.op_type == "Constant" and "sparse_value" in attrs:
            # A dense value means the same and every executor handles it.
            attrs["value"] = _sparse_to_array(attrs.pop("sparse_value"), f"{label}, attribute 'sparse_value'")
        if domain == "":
            for key, value in _schema_defaults(proto.op_type, self.opset).items():
                attrs.setdefault(key, value)
        return Node(name, proto.op_type, list(proto.input), list(proto.output), attrs, domain)


# ---------------------------------------------------------------------------------------------- values
def attribute_to_python(attribute, where: str = "attribute") -> Any:
    """An ``onnx.AttributeProto``'s value as a Python value: numbers, ``str`` (UTF-8 decoded), numpy arrays for
    tensors, lists for the repeated kinds. Sparse tensors and type protos are returned as protos.

    >>> from onnx import helper
    >>> attribute_to_python(helper.make_attribute("mode", "constant")), attribute_to_python(helper.make_attribute("axes", [0, 2]))
    ('constant', [0, 2])
    """
    from onnx import AttributeProto

    kind = attribute.type
    if kind == AttributeProto.FLOAT:
        return float(attribute.f)
    if kind == AttributeProto.INT:
        return int(attribute.i)
    if kind == AttributeProto.STRING:
        return _decode(attribute.s, where)
    if kind == AttributeProto.TENSOR:
        return _tensor_to_array(attribute.t, where)
    if kind == AttributeProto.FLOATS:
        return [float(v) for v in attribute.floats]
    if kind == AttributeProto.INTS:
        return [int(v) for v in attribute.ints]
    if kind == AttributeProto.STRINGS:
        return [_decode(v, where) for v in attribute.strings]
    if kind == AttributeProto.TENSORS:
        return [_tensor_to_array(t, where) for t in attribute.tensors]
    if kind == AttributeProto.SPARSE_TENSOR:
        return _copy(attribute.sparse_tensor)
    if kind == AttributeProto.SPARSE_TENSORS:
        return [_copy(t) for t in attribute.sparse_tensors]
    if kind == AttributeProto.TYPE_PROTO:
        return _copy(attribute.tp)
    if kind == AttributeProto.TYPE_PROTOS:
        return [_copy(t) for t in attribute.type_protos]
    if kind in (AttributeProto.GRAPH, AttributeProto.GRAPHS):
        # Bodies need the importer's context (opset, enclosing scope): load_onnx converts GRAPH attributes.
        raise UnsupportedOperatorError(f"{where}: a subgraph attribute cannot be converted on its own; import the whole "
                                       "model with d5.Network.from_onnx")
    raise OnnxImportError(f"{where}: unknown attribute type {kind}; the model is damaged or newer than this onnx")


def _schema_defaults(op_type: str, opset: int) -> dict[str, Any]:
    import onnx.defs

    try:
        schema = onnx.defs.get_schema(op_type, opset, "")
    except onnx.defs.SchemaError:
        return {}
    defaults = {}
    for name, spec in schema.attributes.items():
        if spec.default_value.type:  # UNDEFINED (0) when the attribute has no default
            defaults[name] = attribute_to_python(spec.default_value, f"default of {op_type}.{name}")
    return defaults


def _tensor_to_array(tensor, where: str) -> np.ndarray:
    from onnx import numpy_helper

    try:
        array = numpy_helper.to_array(tensor)
    except Exception as err:  # noqa: BLE001 - wrong byte counts, unknown data types, ...
        raise OnnxImportError(f"{where}: cannot read the tensor data ({type(err).__name__}: {err}); the model is "
                              "damaged (raw_data size must match dims and data_type)") from None
    return np.array(array)  # own, writable memory: parameters are updated in place by optimizers


def _sparse_to_array(sparse, where: str) -> np.ndarray:
    values = _tensor_to_array(sparse.values, where)
    indices = _tensor_to_array(sparse.indices, where).astype(np.int64)
    shape = tuple(int(d) for d in sparse.dims)
    dense = np.zeros(shape, values.dtype)
    try:
        if indices.ndim == 2:  # [NNZ, rank] coordinates
            dense[tuple(indices.T)] = values
        else:  # [NNZ] positions in the flattened tensor
            dense.reshape(-1)[indices] = values
    except (IndexError, ValueError) as err:
        raise OnnxImportError(f"{where}: sparse indices do not fit shape {shape} ({err})") from None
    return dense


def _tensor_type(value_info, where: str):
    """``(shape, dtype, kind)`` of a graph input's type: a tensor, a sequence of tensors, or an optional of
    either (see :data:`d5.network.graph.VALUE_KINDS`). Maps, sparse tensors and deeper nesting are refused."""
    vtype = value_info.type
    kind = vtype.WhichOneof("value")
    prefix = ""
    if kind == "optional_type":
        prefix, vtype = "optional_", vtype.optional_type.elem_type
        kind = vtype.WhichOneof("value")
        if kind == "tensor_type":
            prefix = "optional"
    if kind == "sequence_type":
        vtype = vtype.sequence_type.elem_type
        inner = vtype.WhichOneof("value")
        if inner != "tensor_type":
            raise OnnxImportError(f"{where} is a sequence of {inner or 'unset type'}; d5 supports sequences of tensors "
                                  "only. Flatten the nested sequence or optional into a sequence of tensors")
        shape, dtype = _plain_tensor_type(vtype.tensor_type, where)
        return shape, dtype, prefix + "sequence"
    if kind == "tensor_type":
        shape, dtype = _plain_tensor_type(vtype.tensor_type, where)
        return shape, dtype, prefix or "tensor"
    what = {"map_type": "a map", "sparse_tensor_type": "a sparse tensor", "opaque_type": "an opaque value",
            None: "an unset type"}.get(kind, kind)
    raise OnnxImportError(f"{where} has {what} type{' (inside an optional)' if prefix else ''}; d5 supports tensors, "
                          "sequences of tensors and optionals of those only. Feed it as a dense tensor (or a "
                          "sequence of them) instead")


def _refuse_unsupported_type(vtype, where: str) -> None:
    """Raise OnnxImportError if a (possibly untyped) output type holds a map, sparse tensor or opaque value."""
    kind = vtype.WhichOneof("value")
    if kind in ("optional_type", "sequence_type"):
        _refuse_unsupported_type(getattr(vtype, kind).elem_type, where)
    elif kind in ("map_type", "sparse_tensor_type", "opaque_type"):
        raise OnnxImportError(f"{where} has {kind.replace('_type', '').replace('_', ' ')} type; d5 supports tensors, "
                              "sequences of tensors and optionals of those only. Return dense tensors instead")


def _plain_tensor_type(ttype, where: str):
    from onnx import helper

    try:
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(ttype.elem_type))
    except (KeyError, TypeError, ValueError):
        raise OnnxImportError(f"{where}: unknown element type {ttype.elem_type}") from None
    if not ttype.HasField("shape"):
        return None, dtype
    shape = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in ttype.shape.dim)
    return shape, dtype


def _is_float(dtype: np.dtype) -> bool:
    return dtype.kind == "f" or dtype.name == "bfloat16"


def _decode(value: bytes, where: str) -> str:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        # Every string attribute ONNX defines is text (modes, directions, names): bytes that are not UTF-8
        # mean a damaged file, not a binary attribute.
        raise OnnxImportError(f"{where}: the string {value[:40]!r} is not UTF-8 text; the model is damaged") from None


def _copy(proto):
    clone = type(proto)()
    clone.CopyFrom(proto)
    return clone


def _info_or_none(value_info):
    from d5.network.onnx_export import _info_from_type

    return _info_from_type(value_info.name, value_info.type)


def _label(node, index: int) -> str:
    name = f"{node.name!r}" if node.name else f"#{index}"
    return f"node {name} ({node.op_type or '<no op_type>'})"


__all__ = ["attribute_to_python", "load_onnx", "max_supported_opset", "MIN_OPSET"]
