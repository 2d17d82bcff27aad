"""Reference control-flow operators: If, Loop, Scan and SequenceMap (ONNX semantics, inference only).

Each body (a graph attribute) is a nested :class:`d5.Network` (``network.is_subgraph``) run by an executor of
its own. A body may read tensors of the enclosing graphs by name (``Network.captures``); the executor appends
their values to the node's inputs, in the order of :func:`d5.network.graph.node_captures`, and these operators
pass each body the ones it reads.

The operators build no executor themselves: the enclosing executor calls
:meth:`_ControlFlowOp.prepare_subgraphs` with a factory ``make_executor(network)`` when it builds the node's
operator (so an unsupported operator inside a body is reported at once, and the enclosing executor's choices,
such as ``fallback``, apply inside too). What the factory returns needs ``run_subgraph(feeds) -> list`` and
``fallback_operators`` (the op types it runs on the onnx.reference fallback). None of these operators has a
gradient (``Gradient.NONE``): gradients through control flow are not implemented.
"""
from __future__ import annotations

from typing import Any, Callable, Protocol, Sequence

import numpy as np

from d5.errors import GraphError, ShapeError
from d5.frameworks.reference.operators import ReferenceOp, register
from d5.frameworks.reference.operators._checks import scalar_input
from d5.network.graph import Network
from d5.ops.onnx_semantics import normalize_axis
from d5.ops.operator import Gradient


class SubgraphExecutor(Protocol):
    """What ``make_executor(network)`` returns for a body: an executor that runs it as a subgraph."""

    fallback_operators: list[str]

    def run_subgraph(self, feeds: dict[str, Any]) -> list[Any]:
        """The body's outputs, in order, for ``feeds`` (its inputs and captured outer values by name)."""


class _Body:
    """One subgraph and the executor that runs it."""

    def __init__(self, network: Network, make_executor: Callable[[Network], SubgraphExecutor]) -> None:
        self.executor = make_executor(network)
        self.name = network.name
        self.inputs = list(network.inputs)
        self.captures = network.captures
        self.outputs = network.outputs
        self.declared_types = dict(network.declared_types)

    def run(self, args: Sequence[Any], outer: dict[str, Any]) -> list[Any]:
        if len(args) != len(self.inputs):
            raise GraphError(f"subgraph {self.name!r} declares {len(self.inputs)} inputs {self.inputs} but is given "
                             f"{len(args)} values; fix the body's inputs to match the operator's specification")
        feeds = {name: outer[name] for name in self.captures}
        feeds.update(zip(self.inputs, args))
        return self.executor.run_subgraph(feeds)


class _ControlFlowOp(ReferenceOp):
    """Base of the operators with subgraphs. ``_graphs`` names the graph attributes."""

    gradient = Gradient.NONE
    no_gradient_reason = ("gradients through control flow (If, Loop, Scan, SequenceMap) are not implemented; train "
                          "without it (unroll the loop, fold the branch) or keep trainable parameters out of its bodies")
    _graphs: tuple[str, ...] = ()

    def __init__(self, **attrs: Any) -> None:
        super().__init__()
        order = [id(value) for value in attrs.values() if isinstance(value, Network)]
        self.graphs: dict[str, Network] = {}
        for key in self._graphs:
            body = attrs.pop(key, None)
            if not isinstance(body, Network):
                raise GraphError(f"{type(self).__name__} needs the subgraph attribute {key!r} (a d5.Network), got "
                                 f"{type(body).__name__}")
            self.graphs[key] = body
        self.attrs = attrs
        # The order in which the executor appends captured values: graph.node_captures's, which walks the subgraph
        # attributes in the node's order (ONNX files sort them: else_branch before then_branch), not _graphs'.
        self.captures: list[str] = []
        for body in sorted(self.graphs.values(), key=lambda body: order.index(id(body))):
            self.captures.extend(name for name in body.captures if name not in self.captures)
        self.bodies: dict[str, _Body] = {}

    def prepare_subgraphs(self, make_executor: Callable[[Network], SubgraphExecutor]) -> list[str]:
        """Build the bodies' executors with ``make_executor(body)``; returns the op types they run on the
        onnx.reference fallback."""
        self.bodies = {key: _Body(body, make_executor) for key, body in self.graphs.items()}
        return [op for body in self.bodies.values() for op in body.executor.fallback_operators]

    def _split(self, inputs: Sequence[Any]) -> tuple[list[Any], dict[str, Any]]:
        """The node's own inputs and a dict of the captured outer-scope values (appended by the executor)."""
        if not self.bodies:
            raise GraphError(f"{type(self).__name__}: its subgraphs have no executors; the executor running the node "
                             "must call prepare_subgraphs(make_executor) first")
        count = len(inputs) - len(self.captures)
        return list(inputs[:count]), dict(zip(self.captures, inputs[count:]))


def _stack_scan_output(op: str, name: str, values: list) -> np.ndarray:
    """The per-iteration values of a scan output stacked along a new first axis; ONNX requires them to
    have one shape (numpy's own error would not say which output or iteration)."""
    arrays = [np.asarray(v) for v in values]
    for iteration, array in enumerate(arrays):
        if array.shape != arrays[0].shape:
            raise ShapeError(f"{op}: the body's scan output {name!r} has shape {arrays[0].shape} in iteration 0 but "
                             f"{array.shape} in iteration {iteration}; a scan output must keep one shape")
    return np.stack(arrays)


def _empty_scan_output(info) -> np.ndarray:
    """A scan output of zero iterations: shape (0, *element shape) when the body declares it."""
    if info is None:
        return np.zeros((0,), np.float32)
    shape = info.shape if info.shape is not None and all(isinstance(d, int) for d in info.shape) else ()
    return np.zeros((0, *shape), info.dtype)


@register("If")
class If(_ControlFlowOp):
    """Runs ``then_branch`` or ``else_branch`` on a boolean scalar; the node's outputs are the branch's."""

    _graphs = ("then_branch", "else_branch")

    def forward(self, inputs):
        own, outer = self._split(inputs)
        if not own or own[0] is None:
            raise ShapeError("If: the condition input is missing")
        branch = "then_branch" if scalar_input("If", own[0], "the condition", bool) else "else_branch"
        return tuple(self.bodies[branch].run([], outer))


@register("Loop")
class Loop(_ControlFlowOp):
    """``for i in range(M) while cond``: the body maps ``(i, cond, v...)`` to ``(cond, v..., scan...)``; the
    outputs are the final loop-carried values, then each scan output stacked along a new first axis."""

    _graphs = ("body",)

    def forward(self, inputs):
        own, outer = self._split(inputs)
        body = self.bodies["body"]
        carried_count = len(body.inputs) - 2
        if carried_count < 0:
            raise GraphError("Loop: the body must take (iteration number, condition, loop-carried values...)")
        own += [None] * (2 + carried_count - len(own))
        trip = None if own[0] is None else scalar_input("Loop", own[0], "the trip count M", int)
        cond = True if own[1] is None else scalar_input("Loop", own[1], "the condition", bool)
        if trip is None and own[1] is None:
            raise ShapeError("Loop: neither a trip count M nor a condition is given, so the loop would never end; "
                             "pass one of them")
        carried = own[2:2 + carried_count]
        scans: list[list[Any]] = [[] for _ in range(len(body.outputs) - 1 - carried_count)]
        iteration = 0
        while cond and (trip is None or iteration < trip):
            results = body.run([np.array(iteration, np.int64), np.array(cond, np.bool_), *carried], outer)
            cond = scalar_input("Loop", results[0], "the body's condition output", bool)
            carried = results[1:1 + carried_count]
            for values, value in zip(scans, results[1 + carried_count:]):
                values.append(value)
            iteration += 1
        stacked = []
        for index, values in enumerate(scans):
            name = body.outputs[1 + carried_count + index]
            stacked.append(_stack_scan_output("Loop", name, values) if values else
                           _empty_scan_output(body.declared_types.get(name)))
        return (*carried, *stacked)


@register("Scan")
class Scan(_ControlFlowOp):
    """Iterates the body over slices of the scan inputs (opset >= 9 semantics): the body maps
    ``(state..., slice...)`` to ``(state..., scan output slice...)``; each direction and axis is an attribute."""

    _graphs = ("body",)

    def forward(self, inputs):
        own, outer = self._split(inputs)
        body = self.bodies["body"]
        count = self.attrs.get("num_scan_inputs")
        if count is None or not 0 < count <= len(own):
            raise GraphError(f"Scan: num_scan_inputs={count} does not fit the node's {len(own)} inputs")
        states, scan_inputs = own[:len(own) - count], [np.asarray(x) for x in own[len(own) - count:]]
        in_axes = self._ints("scan_input_axes", count)
        in_dirs = self._ints("scan_input_directions", count)
        scan_inputs = [np.moveaxis(x, normalize_axis("Scan", a, x.ndim), 0) for x, a in zip(scan_inputs, in_axes)]
        lengths = {x.shape[0] for x in scan_inputs}
        if len(lengths) != 1:
            raise ShapeError(f"Scan: the scan inputs have different lengths {sorted(lengths)} along their scan axes")
        length = lengths.pop()
        output_count = len(body.outputs) - len(states)
        scans: list[list[Any]] = [[] for _ in range(output_count)]
        for t in range(length):
            slices = [x[length - 1 - t] if d else x[t] for x, d in zip(scan_inputs, in_dirs)]
            results = body.run([*states, *slices], outer)
            states = results[:len(states)]
            for values, value in zip(scans, results[len(states):]):
                values.append(np.asarray(value))
        out_axes = self._ints("scan_output_axes", output_count)
        out_dirs = self._ints("scan_output_directions", output_count)
        stacked = []
        for index, values in enumerate(scans):
            if not values:
                name = body.outputs[len(states) + index]
                stacked.append(_empty_scan_output(body.declared_types.get(name)))
                continue
            name = body.outputs[len(states) + index]
            array = _stack_scan_output("Scan", name, values[::-1] if out_dirs[index] else values)
            stacked.append(np.moveaxis(array, 0, normalize_axis("Scan", out_axes[index], array.ndim)))
        return (*states, *stacked)

    def _ints(self, key: str, count: int) -> list[int]:
        values = self.attrs.get(key)
        values = [0] * count if values is None else [int(v) for v in values]
        if len(values) != count:
            raise GraphError(f"Scan: attribute {key!r} has {len(values)} entries for {count} scan inputs/outputs")
        return values


@register("SequenceMap")
class SequenceMap(_ControlFlowOp):
    """Applies the body to each element of the input sequence (and the matching element of each further
    sequence input, or the whole of each further tensor input); each body output becomes a sequence."""

    _graphs = ("body",)

    def forward(self, inputs):
        own, outer = self._split(inputs)
        body = self.bodies["body"]
        if not own or not isinstance(own[0], (list, tuple)):
            raise ShapeError("SequenceMap: input 0 must be a sequence (a list of arrays)")
        length = len(own[0])
        for index, extra in enumerate(own[1:], start=1):
            if isinstance(extra, (list, tuple)) and len(extra) != length:
                raise ShapeError(f"SequenceMap: sequence input {index} has {len(extra)} elements, input 0 has {length}")
        outputs: list[list[Any]] = [[] for _ in body.outputs]
        for i in range(length):
            args = [x[i] if isinstance(x, (list, tuple)) else x for x in own]
            for values, value in zip(outputs, body.run(args, outer)):
                values.append(value)
        return tuple(outputs)

