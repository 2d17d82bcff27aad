"""L1: the framework-neutral, ONNX-compatible network graph.

A :class:`Network` holds named graph inputs (with symbolic dimensions such as a batch ``'N'``),
parameters (initializers), operator nodes and graph outputs. It is a description: an executor copies it
and keeps the live state (current parameters, gradients) in the framework's tensors, ``executor.network``
(:class:`d5.network.executor.LiveNetwork`).

>>> import numpy as np, d5
>>> net = d5.Network("affine")
>>> _ = net.add_input("x", ("N", 3))
>>> _ = net.add_param("W", np.ones((2, 3), np.float32))
>>> _ = net.add_node("Gemm", ["x", "W"], ["y"], transB=1)
>>> net.add_output("y")
>>> [node.op_type for node in net.topological_order()]
['Gemm']
>>> net.gradient("y")
[('W', 'W_grad')]
"""
from __future__ import annotations

import collections.abc
import copy
import dataclasses
import difflib
import numbers
from typing import Any, Iterable, Sequence

import numpy as np

from d5.errors import GraphError, ShapeError
from d5.network.node_schema import check_network, check_node_attributes
from d5.network.op_types import CUSTOM_DOMAIN, resolve_domain
from d5.ops.operator import CustomOp

Dim = int | str | None


#: The kinds of value a graph input or tensor can hold, as in ONNX's type system: a tensor, a sequence of
#: tensors (fed and returned as a Python list of arrays), an optional tensor or an optional sequence
#: (``None`` when empty). ``shape`` and ``dtype`` always describe the tensors inside.
VALUE_KINDS = ("tensor", "sequence", "optional", "optional_sequence")


@dataclasses.dataclass(frozen=True)
class TensorInfo:
    """Name, shape and dtype of a graph input or inferred tensor. A dimension is an int, a symbolic name
    (``'N'``) or ``None`` (unknown). ``kind`` is one of :data:`VALUE_KINDS`; for a sequence or an optional,
    shape and dtype are those of its tensors (the elements of a sequence may differ in shape where the
    shape leaves a dimension symbolic or unknown)."""

    name: str
    shape: tuple[Dim, ...] | None
    dtype: np.dtype
    kind: str = "tensor"

    @property
    def is_tensor(self) -> bool:
        return self.kind == "tensor"

    @property
    def is_sequence(self) -> bool:
        """True for a sequence or an optional sequence (when the optional holds a value, it is a list)."""
        return self.kind in ("sequence", "optional_sequence")

    @property
    def is_optional(self) -> bool:
        return self.kind.startswith("optional")

    def describe_type(self) -> str:
        """E.g. ``'tensor(float32, (N, 3))'``, ``'sequence(tensor(int64, (?,)))'``, ``'optional(tensor(...))'``."""
        text = f"tensor({self.dtype}, {self.describe_shape()})"
        if self.is_sequence:
            text = f"sequence({text})"
        return f"optional({text})" if self.is_optional else text

    def describe_shape(self) -> str:
        if self.shape is None:
            return "(unknown)"
        return "(" + ", ".join("?" if d is None else str(d) for d in self.shape) + ("," if len(self.shape) == 1 else "") + ")"


@dataclasses.dataclass
class Node:
    """One operator application: ``outputs = op_type(inputs, **attrs)``. An empty input name marks an
    omitted optional input, as in ONNX. ``custom_op`` holds the operator object of a user operator."""

    name: str
    op_type: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any] = dataclasses.field(default_factory=dict)
    domain: str = ""
    custom_op: CustomOp | None = None


class Network:
    """A framework-neutral network graph (see the module docstring for an example)."""

    #: ONNX opset the graph's operators follow (export writes it; executors follow its semantics).
    DEFAULT_OPSET = 17

    def __init__(self, name: str = "d5_network", opset: int | None = None) -> None:
        self.name = name
        self.opset = opset or self.DEFAULT_OPSET
        self._inputs: dict[str, TensorInfo] = {}
        self._params: dict[str, np.ndarray] = {}
        self._trainable: dict[str, bool] = {}
        self._nodes: dict[str, Node] = {}
        self._outputs: list[str] = []
        self._order: list[Node] | None = None  # cached topological order, reset by every edit
        self._trainable_names: list[str] | None = None  # cached get_params(), reset by every edit
        #: Counts edits (inputs, parameters, nodes, outputs, trainability): caches of what the graph declares
        #: key on it.
        self.version = 0
        #: True for a control-flow body (the graph attribute of If, Loop, Scan): it may read tensors of the
        #: enclosing graphs by name (its :attr:`captures`), which the enclosing graph's validation checks.
        self.is_subgraph = False
        #: The imported model's declared ONNX types of the graph outputs (and, for a subgraph, inputs), by name;
        #: None for one declared without a type (ONNX allows that in bodies). Export writes a body's signature
        #: back as it was (Loop and Scan shape inference needs typed body outputs and must not see invented
        #: types), and a graph output's declared type where ONNX inference finds no rank (Loop's results).
        self.declared_types: dict[str, TensorInfo | None] = {}

    # ------------------------------------------------------------------ read access
    @property
    def inputs(self) -> dict[str, TensorInfo]:
        return dict(self._inputs)

    @property
    def outputs(self) -> list[str]:
        return list(self._outputs)

    @property
    def nodes(self) -> list[Node]:
        return list(self._nodes.values())

    @property
    def params(self) -> dict[str, np.ndarray]:
        """All parameters (trainable or not), by name: their initial values (an executor has the current ones)."""
        return dict(self._params)

    def node(self, name: str) -> Node:
        require_name(name, "node name")
        try:
            return self._nodes[name]
        except KeyError:
            raise GraphError(f"no node named {name!r}{suggest(name, self._nodes)}") from None

    def get_params(self) -> list[str]:
        """Names of the trainable parameters, in insertion order."""
        if self._trainable_names is None:  # read by every training step: computed once per edit
            self._trainable_names = [name for name, trainable in self._trainable.items() if trainable]
        return list(self._trainable_names)

    def is_trainable(self, name: str) -> bool:
        return self._trainable.get(name, False)

    def set_trainable(self, name: str, trainable: bool = True) -> None:
        """Mark parameter ``name`` trainable or frozen. An imported ONNX model makes every float initializer
        trainable (ONNX does not tell weights from constants); freeze the ones that are constants, such as a
        torch module's buffers (a positional encoding), so optimizers leave them alone.

        >>> net = Network("n"); _ = net.add_param("pe", [0.5, 1.0])
        >>> net.set_trainable("pe", False); net.get_params()
        []
        """
        require_name(name, "parameter name")
        if name not in self._params:
            raise GraphError(f"set_trainable: {name!r} is not a parameter of {self.name!r}"
                             f"{suggest(name, self._params)}")
        self._trainable[name] = bool(trainable)
        self._edited()

    def gradient(self, y: str = "loss") -> list[tuple[str, str]]:
        """``[(param_name, gradient_tensor_name)]`` for every trainable parameter, as the seeds' optimizers
        expect. After ``executor.inference_and_backprop(inputs, y)`` the gradient tensors can be fetched."""
        require_name(y, "the tensor to differentiate (y)")
        if y not in self._inputs and y not in self._params and self._producer_of(y) is None:
            raise GraphError(f"cannot differentiate {y!r}: no tensor of that name{suggest(y, self.tensor_names())}")
        return [(p, gradient_name(p)) for p in self.get_params()]

    @property
    def captures(self) -> list[str]:
        """Outer-scope tensors this graph reads by name without defining them (sorted): the tensors a
        control-flow body captures from its enclosing graphs, its nested bodies' captures included. Empty
        for a valid top-level graph."""
        defined = set(self._inputs) | set(self._params) | {""}
        for node in self._nodes.values():
            defined.update(node.outputs)
        read = set(self._outputs)
        for node in self._nodes.values():
            read.update(node_reads(node))
        return sorted(read - defined)

    def tensor_names(self) -> list[str]:
        names = list(self._inputs) + list(self._params)
        for node in self._nodes.values():
            names.extend(o for o in node.outputs if o)
        return names

    # ------------------------------------------------------------------ editing
    def add_input(self, name: str, shape: Sequence[Dim] | None, dtype: Any = "float32", kind: str = "tensor") -> TensorInfo:
        """Declare a graph input. Dimensions may be ints, symbolic names (``'N'``) or None; a shape of None
        means even the rank is unknown (as ONNX allows). ``kind`` (see :data:`VALUE_KINDS`) declares a
        sequence of tensors (fed as a list of arrays) or an optional value (``None`` when empty); shape and
        dtype then describe the tensors inside.

        >>> Network().add_input("xs", ("N", 3), "float32", kind="sequence").describe_type()
        'sequence(tensor(float32, (N, 3)))'
        """
        self._check_new_tensor(name)
        if kind not in VALUE_KINDS:
            raise GraphError(f"input {name!r}: unknown kind {kind!r}; use one of {list(VALUE_KINDS)} (maps are not supported)")
        info = TensorInfo(name, _as_shape(shape, name), _as_dtype(dtype, name), kind)
        self._inputs[name] = info
        self._edited()
        return info

    def add_param(self, name: str, value: Any, trainable: bool = True) -> np.ndarray:
        """Add a parameter (an ONNX initializer). Non-trainable ones (running statistics) get no gradient."""
        self._check_new_tensor(name)
        array = _as_param_array(value, name)
        self._params[name] = array
        self._trainable[name] = bool(trainable)
        self._edited()
        return array

    def add_node(self, op_type: str, inputs: Sequence[str], outputs: Sequence[str], name: str | None = None,
                 domain: str | None = None, **attrs: Any) -> Node:
        """Add an operator node; ``attrs`` are its ONNX attributes. Raises UnsupportedOperatorError for an
        unknown ``op_type`` and GraphError for a duplicate node or output name."""
        if not isinstance(op_type, str) or not op_type:
            raise GraphError(f"add_node: op_type must be an operator name such as 'Relu' (a non-empty str), got {op_type!r}")
        if domain is not None and not isinstance(domain, str):
            raise GraphError(f"add_node({op_type!r}): domain must be a str such as 'ai.onnx' or None, got {domain!r}")
        where = f"add_node({op_type!r})"
        inputs, outputs = _tensor_names(inputs, "inputs", where), _tensor_names(outputs, "outputs", where)
        resolved = resolve_domain(op_type, domain)
        node = Node(self._node_name(name, op_type), op_type, inputs, outputs, dict(attrs), resolved)
        check_node_attributes(node, self.opset)  # attributes are final here; arity and types wait for validate()
        return self._insert(node)

    def add_custom_node(self, op: CustomOp, inputs: Sequence[str], outputs: Sequence[str], name: str | None = None) -> Node:
        """Add a node computed by a user operator (a :class:`d5.ops.CustomOp`)."""
        if not isinstance(op, CustomOp):
            raise GraphError(f"add_custom_node expects a d5.ops.CustomOp, got {type(op).__name__}")
        op_type = getattr(op, "op_type", None)
        op_type = op_type if isinstance(op_type, str) and op_type else type(op).__name__
        where = f"add_custom_node({op_type})"
        inputs, outputs = _tensor_names(inputs, "inputs", where), _tensor_names(outputs, "outputs", where)
        for what, names, expected in (("input", inputs, op.num_inputs), ("output", outputs, op.num_outputs)):
            if expected is not None and len(names) != expected:
                raise ShapeError(f"{where}: the operator takes {expected} {what}(s), but the node names "
                                 f"{len(names)}: {list(names)}")
        return self._insert(Node(self._node_name(name, op_type), op_type, inputs, outputs, {}, CUSTOM_DOMAIN, op))

    def add_edge(self, tensor: str, node_name: str, index: int | None = None) -> None:
        """Connect ``tensor`` to an input slot of node ``node_name`` (append when ``index`` is None)."""
        if not isinstance(tensor, str):
            raise GraphError(f"add_edge: tensor must be a tensor name (str), got {tensor!r}")
        if not isinstance(node_name, str):
            raise GraphError(f"add_edge: node_name must be a node's name (str), got {node_name!r}")
        if index is not None and (isinstance(index, bool) or not isinstance(index, numbers.Integral)):
            raise GraphError(f"add_edge: index must be an int input slot or None (append), got {index!r}")
        node = self.node(node_name)
        if index is None:
            node.inputs.append(tensor)
        elif 0 <= index < len(node.inputs):
            node.inputs[index] = tensor
        else:
            raise GraphError(f"node {node_name!r} has {len(node.inputs)} inputs; index {index} is out of range")
        self._edited()

    def remove_node(self, name: str) -> Node:
        """Remove a node. Consumers of its outputs become dangling until reconnected (validate() names them)."""
        node = self.node(name)
        del self._nodes[name]
        self._edited()
        return node

    def replace_node(self, name: str, op_type: str, inputs: Sequence[str] | None = None,
                     outputs: Sequence[str] | None = None, domain: str | None = None, **attrs: Any) -> Node:
        """Replace node ``name`` by a new operator; inputs and outputs default to the old node's."""
        old = self.node(name)
        new = Node(name, op_type, list(old.inputs if inputs is None else inputs),
                   list(old.outputs if outputs is None else outputs), dict(attrs), resolve_domain(op_type, domain))
        check_node_attributes(new, self.opset)
        del self._nodes[name]
        try:
            return self._insert(new)
        except GraphError:
            self._nodes[name] = old
            raise

    def add_output(self, name: str) -> None:
        """Mark tensor ``name`` as a graph output."""
        if not isinstance(name, str) or not name:
            raise GraphError(f"add_output: the output must be a tensor name (a non-empty str), got {name!r}")
        if name in self._outputs:
            raise GraphError(f"{name!r} is already a graph output")
        self._outputs.append(name)
        self._edited()

    # ------------------------------------------------------------------ structure
    def topological_order(self) -> list[Node]:
        """Nodes ordered so that every node comes after the producers of its inputs. Raises GraphError
        naming the nodes of a cycle, a dangling input or an undefined output."""
        if self._order is None:
            self._order = self._sort()
        return self._order

    def validate(self) -> None:
        """Check the graph is well formed (see :meth:`topological_order`) and that every node matches its ONNX
        schema at the graph's opset: input and output counts, attribute types, input element types (see
        :func:`d5.network.node_schema.check_network`; raises :class:`~d5.errors.SchemaError`)."""
        self.topological_order()
        if not self.is_subgraph:  # a body is checked with its enclosing graph, which knows the captured types
            check_network(self)

    def copy(self) -> "Network":
        """A deep copy: parameters are copied, user operator objects are shared."""
        clone = copy.copy(self)
        clone._inputs = dict(self._inputs)
        clone._params = {k: v.copy() for k, v in self._params.items()}
        clone._trainable = dict(self._trainable)
        clone._nodes = {k: dataclasses.replace(n, inputs=list(n.inputs), outputs=list(n.outputs), attrs=_copy_attrs(n.attrs))
                        for k, n in self._nodes.items()}
        clone.declared_types = dict(self.declared_types)
        clone._outputs = list(self._outputs)
        clone._order = clone._trainable_names = None
        return clone

    # ------------------------------------------------------------------ parameter values
    def fetch_tensors(self, names: Iterable[str]) -> list[np.ndarray]:
        """The values of parameters (the graph's initializers). An executor's live state,
        ``executor.network`` (:class:`d5.network.executor.LiveNetwork`), has the same method over the
        framework's current values, gradients and the other tensors of its last pass."""
        if isinstance(names, str):  # one name, not its characters
            names = [names]
        out = []
        for name in names:
            require_name(name, "tensor name")
            value = self._params.get(name)
            if value is None:
                raise GraphError(f"no parameter {name!r} in this graph{suggest(name, self._params)}; gradients and "
                                 "the tensors of a pass live in an executor: executor.network.fetch_tensors")
            out.append(value)
        return out

    def fetch_tensor(self, name: str) -> np.ndarray:
        return self.fetch_tensors([name])[0]

    def feed_tensor(self, name: str, value: Any, is_param: bool = False) -> None:
        """Set a parameter's value. Writing an existing parameter keeps its shape and dtype (ShapeError
        otherwise); ``is_param=True`` with a new name adds a trainable parameter (as :meth:`add_param`)."""
        require_name(name, "tensor name")
        current = self._params.get(name)
        if current is not None:
            self._params[name] = like_param(name, value, current)
        elif is_param:
            self.add_param(name, value)
        else:
            raise GraphError(f"no parameter {name!r} in this graph{suggest(name, self._params)}; pass is_param=True to "
                             "add one (a d5.Network holds parameters; an executor's network holds a pass's tensors)")

    # ------------------------------------------------------------------ ONNX
    @classmethod
    def from_onnx(cls, source: Any, external_data_dir: Any = None) -> "Network":
        """Import an ONNX model (a path, the file's bytes or an ``onnx.ModelProto``); see
        :func:`d5.network.onnx_import.load_onnx`. Bad models raise OnnxImportError or UnsupportedOperatorError.

        >>> import d5
        >>> d5.Network.from_onnx(d5.models.lenet5().to_onnx()).outputs
        ['output', 'loss']
        """
        from d5.network.onnx_import import load_onnx

        return load_onnx(source, external_data_dir)

    def to_onnx(self):
        """This graph as an ``onnx.ModelProto`` (requires the onnx package)."""
        from d5.network.onnx_export import network_to_onnx

        return network_to_onnx(self)

    def infer_shapes(self) -> dict[str, TensorInfo]:
        """Shape and dtype of every tensor ONNX shape inference can determine (symbolic dims stay symbolic)."""
        from d5.network.onnx_export import infer_shapes

        return infer_shapes(self)

    def __repr__(self) -> str:
        return (f"Network({self.name!r}: {len(self._inputs)} inputs, {len(self._params)} params, "
                f"{len(self._nodes)} nodes, outputs={self._outputs})")

    # ------------------------------------------------------------------ internals
    def _edited(self) -> None:
        self._order = self._trainable_names = None
        self.version += 1

    def _node_name(self, name: str | None, op_type: str) -> str:
        if name is not None:
            if not isinstance(name, str) or not name:
                raise GraphError(f"{op_type} node: name must be a non-empty str or None (a generated name), got {name!r}")
            return name
        index = len(self._nodes)
        while f"{op_type}_{index}" in self._nodes:
            index += 1
        return f"{op_type}_{index}"

    def _insert(self, node: Node) -> Node:
        if node.name in self._nodes:
            raise GraphError(f"duplicate node name {node.name!r}; choose another name or remove_node() the old one")
        for out in node.outputs:
            if out:
                self._check_new_tensor(out, producer=node.name)
        self._nodes[node.name] = node
        self._edited()
        return node

    def _check_new_tensor(self, name: str, producer: str | None = None) -> None:
        if not isinstance(name, str) or not name:
            raise GraphError(f"tensor names must be non-empty strings, got {name!r} ({type(name).__name__})")
        if name in self._inputs or name in self._params:
            raise GraphError(f"duplicate tensor name {name!r}: already a graph {'input' if name in self._inputs else 'parameter'}")
        owner = self._producer_of(name)
        if owner is not None:
            where = f" (adding node {producer!r})" if producer else ""
            raise GraphError(f"duplicate tensor name {name!r}{where}: already produced by node {owner!r}")

    def _producer_of(self, tensor: str) -> str | None:
        for node in self._nodes.values():
            if tensor in node.outputs:
                return node.name
        return None

    def _sort(self) -> list[Node]:
        available = set(self._inputs) | set(self._params) | {""}
        if self.is_subgraph:  # the enclosing graph checks that the captured tensors exist
            available.update(self.captures)
        producer = {}
        for node in self._nodes.values():
            for out in node.outputs:
                if out:
                    producer[out] = node
        # A node with subgraphs depends on the outer tensors its bodies capture, not only on its inputs.
        reads = {node.name: node_reads(node) for node in self._nodes.values()}
        for node in self._nodes.values():
            for tensor in reads[node.name]:
                if tensor not in available and tensor not in producer:
                    what = "reads" if tensor in node.inputs else "has a subgraph that reads"
                    raise GraphError(f"node {node.name!r} ({node.op_type}) {what} {tensor!r}, which is no graph input, "
                                     f"parameter or node output (a dangling input){suggest(tensor, self.tensor_names())}")
            for key, body in subgraphs(node):
                try:
                    body.topological_order()
                except GraphError as err:
                    raise GraphError(f"node {node.name!r} ({node.op_type}), subgraph {key!r}: {err}") from None
        for out in self._outputs:
            if out not in available and out not in producer:
                raise GraphError(f"graph output {out!r} is not produced by any node{suggest(out, self.tensor_names())}")
        # Kahn's algorithm, keeping insertion order among ready nodes so the order is deterministic.
        pending = {n.name: sum(1 for t in set(reads[n.name]) if t in producer) for n in self._nodes.values()}
        consumers: dict[str, list[Node]] = {}
        for node in self._nodes.values():
            for tensor in set(reads[node.name]):
                if tensor in producer:
                    consumers.setdefault(tensor, []).append(node)
        ready = [n for n in self._nodes.values() if pending[n.name] == 0]
        order = []
        while ready:
            node = ready.pop(0)
            order.append(node)
            for out in node.outputs:
                for consumer in consumers.get(out, ()):
                    pending[consumer.name] -= 1
                    if pending[consumer.name] == 0:
                        ready.append(consumer)
        if len(order) != len(self._nodes):
            cyclic = sorted(name for name, count in pending.items() if count > 0)
            raise GraphError(f"the graph has a cycle through nodes {cyclic}; break it by removing or rewiring one of them")
        return order


def subgraphs(node: Node) -> list[tuple[str, "Network"]]:
    """``[(attribute name, body)]`` of a control-flow node's subgraph attributes (empty for other nodes)."""
    return [(key, value) for key, value in node.attrs.items() if isinstance(value, Network)]


def node_reads(node: Node) -> list[str]:
    """Every tensor ``node`` reads: its inputs, then the outer-scope tensors its subgraphs capture (in the
    order of :attr:`Network.captures`), without repeats. Executors feed a control-flow node in this order."""
    reads = list(node.inputs)
    for _, body in subgraphs(node):
        reads.extend(name for name in body.captures if name not in reads)
    return reads


def node_captures(node: Node) -> list[str]:
    """The outer-scope tensors the subgraphs of ``node`` read, in a fixed order (see :func:`node_reads`)."""
    captured: list[str] = []
    for _, body in subgraphs(node):
        captured.extend(name for name in body.captures if name not in captured)
    return captured


def _copy_attrs(attrs: dict[str, Any]) -> dict[str, Any]:
    # Subgraphs are copied with Network.copy (its own rules: no cached order).
    return {key: value.copy() if isinstance(value, Network) else copy.deepcopy(value) for key, value in attrs.items()}


def gradient_name(param: str) -> str:
    """Name of the tensor holding the gradient of the loss with respect to ``param``."""
    return f"{param}_grad"


def _tensor_names(names: Any, what: str, where: str) -> list[str]:
    """A node's ``inputs`` or ``outputs`` as a new list of str; a single str is one name (``"x"`` is
    ``["x"]``, never the characters of it). ``''`` marks an omitted optional input or output, as in ONNX."""
    if isinstance(names, str):
        return [names]
    if not isinstance(names, collections.abc.Sequence):
        raise GraphError(f"{where}: {what} must be a list of tensor names (str), got {names!r} ({type(names).__name__})")
    names = list(names)
    for index, name in enumerate(names):
        if not isinstance(name, str):
            raise GraphError(f"{where}: {what}[{index}] is {name!r} ({type(name).__name__}), but tensor names are "
                             f"str ('' marks an omitted optional one)")
    if what == "outputs":
        repeated = sorted({name for name in names if name and names.count(name) > 1})
        if repeated:
            raise GraphError(f"{where}: outputs {repeated} appear more than once; a node produces each tensor once")
    return names


def _as_shape(shape: Any, name: str) -> tuple[Dim, ...] | None:
    """An input's shape as a tuple of dims (int >= 0, symbolic str or None), or None (unknown rank)."""
    if shape is None:
        return None
    if isinstance(shape, str) or not isinstance(shape, collections.abc.Sequence):
        raise ShapeError(f"input {name!r}: shape must be a tuple of dimensions such as ('N', 3) or None, got {shape!r}")
    dims = []
    for dim in shape:
        if isinstance(dim, numbers.Integral) and not isinstance(dim, bool) and dim >= 0:
            dims.append(int(dim))
        elif dim is None or (isinstance(dim, str) and dim):
            dims.append(dim)
        else:
            raise ShapeError(f"input {name!r}: dimension {dim!r} of shape {tuple(shape)!r} is not an int >= 0, a "
                             "symbolic name such as 'N' or None (unknown)")
    return tuple(dims)


def _as_param_array(value: Any, name: str) -> np.ndarray:
    try:
        array = np.asarray(value)
    except (ValueError, TypeError) as err:  # ragged nested lists
        raise ShapeError(f"parameter {name!r}: cannot make an array of the {type(value).__name__} ({err})") from None
    # Object arrays are how ONNX string tensors arrive (numpy_helper gives bytes objects); anything else in
    # one (None, a dict, an arbitrary object) is no tensor element. (bfloat16 and float8 are kind 'V'.)
    if array.dtype.kind == "O" and not all(isinstance(item, (str, bytes)) for item in array.flat):
        element = type(next(iter(array.flat), None)).__name__
        raise ShapeError(f"parameter {name!r}: the value (dtype {array.dtype}, elements of type {element}) is no "
                         "tensor; pass a numpy array of numbers, bools or strings")
    return array


def _as_dtype(dtype: Any, name: str) -> np.dtype:
    try:
        return np.dtype(dtype)
    except TypeError:
        raise ShapeError(f"input {name!r}: {dtype!r} is not a dtype; use e.g. 'float32' or 'int64'") from None


def like_param(name: str, value: Any, current: np.ndarray) -> np.ndarray:
    """``value`` as the new value of parameter ``name``: an array of ``current``'s dtype (no copy when it already
    has it) and shape (ShapeError otherwise)."""
    value = np.asarray(value, dtype=current.dtype)
    if value.shape != current.shape:
        raise ShapeError(f"parameter {name!r}: expected shape {current.shape}, got {value.shape}")
    return value


def require_name(name: Any, what: str) -> None:
    """Refuse a non-str where a tensor or node name is expected (a d5 error, not a TypeError from a lookup)."""
    if not isinstance(name, str):
        raise GraphError(f"{what} must be a str, got {type(name).__name__} {name!r}")


def suggest(name: str, candidates: Iterable[str]) -> str:
    if not isinstance(name, str):
        return ""
    close = difflib.get_close_matches(name, list(candidates), n=3)
    return f"; did you mean {' or '.join(map(repr, close))}?" if close else ""
