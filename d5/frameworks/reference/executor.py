"""The reference GraphExecutor: runs a d5.Network node by node with the NumPy/C++ reference operators.

It is the oracle every other framework is checked against, so it favours plain, auditable code; it is
still fast enough to train LeNet-5 on Fashion-MNIST (the heavy operators call C++ kernels and BLAS). What every
framework's executor does alike (operators per node, the fallback policy, plans per fed inputs) is
:class:`d5.frameworks.native_executor.NativeExecutor`'s.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping

import numpy as np

from d5.errors import D5Error, GraphError, UnsupportedOperatorError
from d5.frameworks.native_executor import (FallbackWarning, NativeExecutor, NativeLiveNetwork, Reach,  # noqa: F401
                                           Step as _Step)
from d5.frameworks.reference.operators import create_operator
from d5.frameworks.reference.kernels import serial_numpy_blas
from d5.network.operator_errors import operator_failure
from d5.network.graph import Network, Node
from d5.network.memory import check_working_set, tensor_nbytes
from d5.network.onnx_export import infer_shapes
from d5.ops.operator import CustomOp, Gradient, as_tuple


@dataclasses.dataclass
class _Plan:
    """What one kind of call runs: the forward steps, and for backprop the steps on a path from a
    trainable parameter to ``y`` (in reverse order) and the tensors that need gradients."""

    forward: list[_Step]
    outputs: list[str]
    backward: list[_Step] = dataclasses.field(default_factory=list)
    requires_grad: frozenset[str] = frozenset()
    # Backprop plans: False until the first training pass has narrowed ``backward`` and ``requires_grad`` to
    # the tensors whose values can carry a gradient (see _narrow_to_gradient_dtypes).
    dtypes_checked: bool = False
    # Inference only: per forward step, the intermediate tensors no later step reads. Dropping them at
    # once lets the allocator hand their (cache-warm) memory to the next operator's output instead of
    # growing the heap by every activation of the network (ResNet-44, batch 64: ~0.5 GB per call).
    release: list[tuple[str, ...]] | None = None


class ReferenceLiveNetwork(NativeLiveNetwork):
    """The reference framework's live state: NumPy arrays. ``fetch_tensors`` returns the stored arrays
    themselves; ``feed_tensor`` stores what it is given without a copy when the dtype already matches."""

    def __init__(self, graph: Network) -> None:
        super().__init__(graph)
        self.param_values = graph.params


class ReferenceGraphExecutor(NativeExecutor):
    """Executes a copy of ``network`` (``executor.graph``) on the CPU; ``executor.network`` is its live state.
    ``fallback`` is :data:`d5.frameworks.native_executor.FALLBACKS`' (``'onnx'`` runs operators d5 does not
    implement on onnx.reference, inference only)."""

    framework = "reference"

    def __init__(self, network: Network, *, device: Any = None, fallback: Any = "reference") -> None:
        super().__init__(network, device=device, fallback=fallback)
        self._memory = _MemoryCheck(self.graph)

    def make_live_network(self, graph: Network) -> ReferenceLiveNetwork:
        return ReferenceLiveNetwork(graph)

    def native_operator(self, node: Node) -> CustomOp:
        return create_operator(node.op_type, node.attrs, self.graph.opset)  # the node's opset picks the version

    # ------------------------------------------------------------------ public API
    def run_inference(self, feeds: dict[str, Any]) -> dict[str, np.ndarray]:
        plan = self.plan(frozenset(feeds), None)
        self._memory.check(plan, feeds, training=False)
        with serial_numpy_blas():
            values, _ = self._forward(plan, feeds, training=False)
        return {name: values[name] for name in plan.outputs}

    def run_training(self, feeds: dict[str, Any], y: str) -> dict[str, np.ndarray]:
        plan = self.plan(frozenset(feeds), y)
        self._memory.check(plan, feeds, training=True)
        # The thread policy (kernels.set_num_threads): d5's threads do the work, BLAS runs single-threaded.
        with serial_numpy_blas():
            values, results_by_node = self._forward(plan, feeds, training=True)
            _narrow_to_gradient_dtypes(plan, values, self.graph.get_params(), y)
            _refuse_missing_gradients(plan)
            grads = self._backward(plan, values, results_by_node, y)
        params = self.network.param_values
        live = {name: value for name, value in values.items() if name not in params}
        live.update(self.gradients_with_zeros(grads, np.zeros_like))
        self.network.set_pass_tensors(live)
        return {name: values[name] for name in plan.outputs}

    def run_subgraph(self, feeds: dict[str, Any]) -> list[Any]:
        """Run this executor's network as a control-flow body: ``feeds`` holds values (arrays, lists, None)
        of its inputs and of the outer-scope tensors it captures, unchecked; returns the graph outputs in order."""
        plan = self.plan(frozenset(feeds), None)
        if len(plan.outputs) != len(self.graph.outputs):
            missing = [name for name in self.graph.outputs if name not in plan.outputs]
            raise GraphError(f"subgraph {self.graph.name!r} cannot compute its outputs {missing} from {sorted(feeds)}")
        values, _ = self._forward(plan, feeds, training=False)
        return [values[name] for name in plan.outputs]

    # ------------------------------------------------------------------ planning
    def build_plan(self, reach: Reach, y: str | None) -> _Plan:
        if y is None:
            return _Plan(reach.steps, reach.outputs, release=_release_schedule(reach.steps, reach.outputs))
        # Until the first training pass shows the tensors' dtypes, plan as if every tensor could carry a gradient.
        backward, requires_grad = _gradient_flow(reach.steps, self.graph.get_params(), y, lambda name: True)
        return _Plan(reach.steps, reach.outputs, backward, requires_grad)

    # ------------------------------------------------------------------ passes
    def _forward(self, plan: _Plan, feeds: dict[str, np.ndarray], training: bool):
        """Run the forward steps. Returns the named tensors and, per node, everything its operator returned
        (operators may return more outputs than the node names, e.g. a loss's log-probabilities, and their
        backward expects all of them)."""
        values: dict[str, Any] = {**self.network.param_values, **feeds}
        results_by_node: dict[str, tuple] = {}
        for index, step in enumerate(plan.forward):
            op, node = step.op, step.node
            if op.training != training:
                op.training = training
            args = [values[t] if t else None for t in step.inputs]
            try:
                results = as_tuple(op.forward(args))
            except Exception as err:  # the backstop: whatever escapes an operator names its node
                raise operator_failure(err, node, args, self.graph.opset) from err
            if len(results) < sum(1 for o in node.outputs if o):
                raise GraphError(f"node {node.name!r} ({node.op_type}) names {len(node.outputs)} outputs but its "
                                 f"operator returned {len(results)}")
            results_by_node[node.name] = results
            for name, value in zip(node.outputs, results):
                if name:
                    values[name] = value
            if plan.release is not None:
                del results_by_node[node.name]
                for name in plan.release[index]:
                    del values[name]
            if training:
                for index, value in op.state_updates().items():
                    self.network.feed_tensor(node.inputs[index], value)
        return values, results_by_node

    def _backward(self, plan: _Plan, values: dict[str, Any], results_by_node: dict[str, tuple],
                  y: str) -> dict[str, np.ndarray]:
        grads: dict[str, np.ndarray] = {y: np.ones_like(values[y])}
        for step in plan.backward:
            node = step.node
            results = results_by_node[node.name]
            named = [grads.get(o) if o else None for o in node.outputs]
            if all(g is None for g in named):
                continue
            named += [None] * (len(results) - len(named))
            # Outputs nobody consumed (or the node did not name) get zero gradients, as backward expects one each.
            out_grads = [np.zeros_like(r) if g is None else g for g, r in zip(named, results)]
            fwd_inputs = [values[t] if t else None for t in step.inputs]
            try:
                in_grads = as_tuple(step.op.backward(out_grads, fwd_inputs, list(results)))
            except Exception as err:  # the backstop, as in _forward
                raise operator_failure(err, node, fwd_inputs, self.graph.opset, "backward") from err
            for tensor, grad in zip(step.inputs, in_grads):
                if grad is None or tensor not in plan.requires_grad:
                    continue
                previous = grads.get(tensor)
                # A new array, never in place: operators may pass gradients through without copying.
                grads[tensor] = grad if previous is None else previous + grad
        return grads


def _gradient_flow(forward: list[_Step], params: list[str], y: str,
                   carries_gradient: Callable[[str], bool]) -> tuple[list[_Step], frozenset[str]]:
    """The backward steps (in reverse order) and the tensors that need a gradient to differentiate ``y``.

    A tensor requires a gradient when ``carries_gradient(tensor)`` (its values are floating point) and it is a
    trainable parameter or an output of an operator with an input that requires one. So backpropagation stops
    at integer and boolean tensors, where no gradient can flow: shapes, indices, masks, a Cast to int64. A
    Swin attention mask built as Shape(activation) -> ConstantOfShape -> ScatterND is a constant (Shape's
    output is int64), and ScatterND's or Gather's indices are never asked for a gradient.

    It also stops at operators declaring ``Gradient.ZERO`` (Hardmax, EyeLike: locally constant outputs). It
    does not stop at operators declaring ``Gradient.NONE``: most of them (Attention, TopK, GridSample, control
    flow, ...) lack a gradient in d5 although one exists, and treating their float outputs as constants would
    silently give wrong (zero) gradients; planned through, they are refused by name
    (:func:`_refuse_missing_gradients`). A step runs backward when one of its outputs requires a gradient and reaches ``y``
    through tensors that require one.
    """
    requires_grad = {name for name in params if carries_gradient(name)}
    for step in forward:
        if step.op.gradient is not Gradient.ZERO and any(t in requires_grad for t in step.inputs):
            requires_grad.update(o for o in step.node.outputs if o and carries_gradient(o))
    reaches_y = {y} & requires_grad
    backward = []
    for step in reversed(forward):
        if any(o in reaches_y for o in step.node.outputs):
            backward.append(step)
            reaches_y.update(t for t in step.inputs if t in requires_grad)
            # A hint operators may use to skip gradients nobody needs (e.g. the first Conv's input, indices).
            step.op.input_grad_required = tuple(t in requires_grad for t in step.inputs)
    return backward, frozenset(requires_grad)


def _narrow_to_gradient_dtypes(plan: _Plan, values: Mapping[str, Any], params: list[str], y: str) -> None:
    """Once per plan, after its first training forward pass: keep in the backward plan only tensors whose
    values can carry a gradient. The actual values decide, not a type inference that custom operators would
    escape; they are the same on every call, since inputs are cast to their declared dtypes and an ONNX
    operator's output types follow from its input types."""
    if not plan.dtypes_checked:
        plan.backward, plan.requires_grad = _gradient_flow(
            plan.forward, params, y, lambda name: _carries_gradient(values.get(name)))
        plan.dtypes_checked = True


def _refuse_missing_gradients(plan: _Plan) -> None:
    """Raise UnsupportedOperatorError, before the backward pass, naming the first backward step whose operator
    declares ``Gradient.NONE`` (see :class:`d5.ops.Gradient`)."""
    for step in plan.backward:
        op = step.op
        if op.gradient is Gradient.NONE:
            raise UnsupportedOperatorError(
                f"node {step.node.name!r} ({step.node.op_type}): {type(op).__name__} has no gradient in d5, but the loss "
                f"depends on its output through floating-point tensors; {op.no_gradient_reason}")


def _carries_gradient(value: Any) -> bool:
    """True for floating-point (or complex) arrays, bfloat16 and float8 included (ml_dtypes' kind 'V' types),
    and Python floats (user-written operators may return them); False for integers, booleans, strings,
    sequences and empty optionals."""
    if isinstance(value, (float, complex)):
        return True
    if not isinstance(value, (np.ndarray, np.generic)):
        return False
    return value.dtype.kind in "fc" or (value.dtype.kind == "V" and "float" in value.dtype.name)


class _MemoryCheck:
    """Refuses a pass whose intermediate tensors cannot fit in the available memory, before it starts
    (see :mod:`d5.network.memory`). Checked once per plan and input shapes, so steps pay a dict lookup."""

    def __init__(self, network: Network) -> None:
        self._network = network
        self._shapes: dict | None = None  # ONNX shape inference, on the first check
        self._checked: set[tuple] = set()

    def check(self, plan: _Plan, feeds: Mapping[str, Any], training: bool) -> None:
        signature = (id(plan), training, tuple((name, np.shape(value)) for name, value in feeds.items()
                                               if isinstance(value, np.ndarray)))
        if signature in self._checked:
            return
        if self._shapes is None:
            try:
                self._shapes = infer_shapes(self._network, validated=True)  # validated when the executor was built
            except D5Error:  # graphs ONNX cannot infer (custom operators): nothing is known in advance
                self._shapes = {}
        bindings, batch_symbol = _bindings(self._network, feeds)
        estimate = (lambda b: _training_peak(plan, self._shapes, b)) if training else (
            lambda b: _inference_peak(plan, self._shapes, b))
        check_working_set(estimate, bindings, batch_symbol, "a training step" if training else "inference",
                          shapes=self._shapes)
        self._checked.add(signature)


def _bindings(network: Network, feeds: Mapping[str, Any]) -> tuple[dict[str, int], str | None]:
    """Values of the symbolic dimensions given by the fed inputs, and the batch symbol (the symbolic first
    dimension of the first input that has one)."""
    bindings: dict[str, int] = {}
    batch_symbol = None
    for name, info in network.inputs.items():
        value = feeds.get(name)
        if info.shape is None or not isinstance(value, np.ndarray) or value.ndim != len(info.shape):
            continue
        for axis, dim in enumerate(info.shape):
            if isinstance(dim, str):
                bindings.setdefault(dim, value.shape[axis])
                if axis == 0 and batch_symbol is None:
                    batch_symbol = dim
    return bindings, batch_symbol


def _sizes(steps: list[_Step], shapes: Mapping, bindings: Mapping[str, int]) -> dict[str, int]:
    sizes = {}
    for step in steps:
        for name in step.node.outputs:
            nbytes = tensor_nbytes(shapes.get(name), bindings) if name else None
            if nbytes:
                sizes[name] = nbytes
    return sizes


def _inference_peak(plan: _Plan, shapes: Mapping, bindings: Mapping[str, int]) -> dict[str, int]:
    """The tensors alive together at the largest point of an inference pass (intermediates are freed after
    their last reader, see _release_schedule)."""
    sizes = _sizes(plan.forward, shapes, bindings)
    live: dict[str, int] = {}
    peak: dict[str, int] = {}
    for index, step in enumerate(plan.forward):
        live.update((name, sizes[name]) for name in step.node.outputs if name in sizes)
        if sum(live.values()) > sum(peak.values()):
            peak = dict(live)
        for name in plan.release[index] if plan.release else ():
            live.pop(name, None)
    return peak


def _training_peak(plan: _Plan, shapes: Mapping, bindings: Mapping[str, int]) -> dict[str, int]:
    """A training pass keeps every forward tensor for backward and adds a gradient for each tensor that
    requires one (parameters' included)."""
    sizes = _sizes(plan.forward, shapes, bindings)
    grads = {f"{name} (gradient)": nbytes for name, nbytes in sizes.items() if name in plan.requires_grad}
    return {**sizes, **grads}


def _release_schedule(forward: list[_Step], outputs: list[str]) -> list[tuple[str, ...]]:
    """For each step, the tensors produced by the steps that are read for the last time there (or, if
    never read, produced there), except the requested outputs."""
    last_use: dict[str, int] = {}
    for index, step in enumerate(forward):
        for name in step.node.outputs:
            if name:
                last_use[name] = index
        for name in step.inputs:
            if name in last_use:
                last_use[name] = index
    release: list[list[str]] = [[] for _ in forward]
    for name, index in last_use.items():
        if name not in outputs:
            release[index].append(name)
    return [tuple(names) for names in release]
