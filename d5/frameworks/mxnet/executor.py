"""The MXNet GraphExecutor: a d5.Network as one MXNet symbol per set of fed inputs and input signature, run by a
``CachedOp`` with static allocation (what ``HybridBlock.hybridize(static_alloc=True, static_shape=True)`` runs),
differentiated by ``mx.autograd``.

**Composition.** The executor composes the graph node by node: each converter (``operators/``) is called on
placeholder variables carrying its inputs' shapes and dtypes, MXNet infers the shapes of what it returns on that
small graph, and the result is composed onto the symbols of its inputs (``symbol(**{placeholder: input})``), so
every converter sees static shapes, as a TensorFlow converter does while tracing, at the cost of one small shape
inference per node and signature. A node whose inputs are all known before the graph runs -- constants, integer
parameters, shapes (Shape returns NumPy) -- is folded on the reference operator, so the shape arithmetic of
exported transformers (Shape -> Gather -> Concat -> Reshape) costs nothing when the graph runs.

**Runs.** The symbol's inputs are the fed tensors, the parameters (NDArrays, gradients attached to the trainable
ones; BatchNormalization's running statistics are its auxiliary states, which MXNet updates in place) and the
constants the converters made. A training pass records the CachedOp call under ``autograd.record()`` and
backpropagates from ``y`` (ones: the gradient of the sum of a non-scalar ``y``) into the parameters' gradient
buffers. MXNet's engine is asynchronous; a pass ends when its outputs are copied to NumPy.

**Node by node.** Values MXNet cannot hold (strings, sequences), control flow, a user's Gluon block and shapes or
axes fed as inputs run the plan node by node (``eager``): each converter's graph runs alone on NDArrays, integer
NDArrays reach the converters as NumPy values, and autograd records across the nodes.

**Live state** (:class:`MXLiveNetwork`): parameters MXNet holds are NDArrays on the executor's context; others
(strings, uint16) stay NumPy.
"""
from __future__ import annotations

import contextlib
import dataclasses
import warnings
from typing import Any

import mxnet as mx
import numpy as np

from d5.errors import D5Error, UnsupportedOperatorError
from d5.frameworks.base import NativeModelOp, loss_mismatch
from d5.frameworks.mxnet.custom_op import CustomOpCall, custom_op
from d5.frameworks.mxnet.operators import MXOp, create_operator
from d5.frameworks.mxnet.operators._helpers import GraphConstants, Symbol, ValueNeededWhileTracing, building
from d5.frameworks.mxnet.tensors import (as_mx_value, as_numpy_value, holds, mx_context, mx_dtype, to_ndarray,
                                         to_numpy)
from d5.frameworks.native_executor import FallbackWarning, NativeExecutor, NativeLiveNetwork, Reach, single_output
from d5.network.graph import Network, Node, like_param
from d5.ops.operator import CustomOp

#: CachedOp flags: what a hybridized Gluon block with static allocation and static shapes runs.
CACHED_OP_FLAGS = (("static_alloc", True), ("static_shape", True))


@dataclasses.dataclass
class Tensor:
    """A value of the graph under composition: its symbol, static shape and dtype."""

    symbol: Symbol
    shape: tuple[int, ...]
    dtype: np.dtype

    def placeholder(self, name: str) -> Symbol:
        return mx.sym.var(name, shape=self.shape, dtype=self.dtype)


def node_graph(op: Any, args: list[Any], opset: int, node: Node | None = None
               ) -> tuple[list[Any], GraphConstants, list[tuple[int, Tensor]]]:
    """Call converter (or bridge) ``op`` on ``args`` -- None, NumPy values, or :class:`Tensor` s -- through
    placeholders ``_d5in<i>``: its results (NumPy values, or Tensors whose symbols read the placeholders and the
    constants), the constants it made, and the (position, Tensor) of the symbolic arguments."""
    constants = GraphConstants()
    symbolic = [(i, a) for i, a in enumerate(args) if isinstance(a, Tensor)]
    local = [a.placeholder(f"_d5in{i}") if isinstance(a, Tensor) else a for i, a in enumerate(args)]
    with building(constants):
        results = op(*local)
        single = not isinstance(results, (tuple, list)) or (
            node is not None and isinstance(op, MXOp) and single_output(node, opset))
        results = [results] if single else list(results)
        results = [_unwrapped(r, args, constants) for r in results]
        symbols = [r for r in results if isinstance(r, Symbol)]
        if symbols:
            group = mx.sym.Group(symbols) if len(symbols) > 1 else symbols[0]
            _, shapes, _ = group.infer_shape_partial()
            _, types, _ = group.infer_type()
            found = iter(zip(symbols, shapes, types))
            results = [Tensor(*next(found)) if isinstance(r, Symbol) else r for r in results]
            for tensor in results:
                if isinstance(tensor, Tensor):
                    if tensor.shape is None or any(d < 0 for d in tensor.shape):
                        raise ValueNeededWhileTracing("the MXNet framework cannot tell the shape of an output before "
                                                      "the graph runs")
                    tensor.shape, tensor.dtype = tuple(tensor.shape), np.dtype(tensor.dtype)
    return results, constants, symbolic


def _unwrapped(result: Any, args: list[Any], constants: GraphConstants) -> Any:
    """A converter's result that is a bare variable -- an input passed through (Identity, a Reshape to the same
    shape) or a constant it made -- as that input or that constant's value: a variable cannot be composed."""
    if not isinstance(result, Symbol) or result.get_children() is not None:
        return result
    name = result.name
    if name.startswith("_d5in"):
        return args[int(name[5:])]
    if name in constants.values:
        return constants.values.pop(name)
    return result


class _NativeCall:
    """Calls a user's Gluon block or loss on NDArrays (node by node: the block is the user's own, hybridized or
    not)."""

    def __init__(self, marker: NativeModelOp) -> None:
        self.module, self.loss_of = marker.module, marker.loss_of
        self.training = False
        self.node_output_count: int | None = None

    def __call__(self, *inputs: Any) -> Any:
        if self.loss_of is not None:
            output, label = inputs[:2]
            try:
                return self.module(output, label)
            except Exception as err:  # MXNet's message names neither the model nor the loss
                raise loss_mismatch(self.loss_of, self.module, *map(_describe_value, inputs[:2]), err) from err
        return self.module(*inputs)


def _describe_value(value: Any) -> str:
    if isinstance(value, mx.nd.NDArray):
        return f"shape {tuple(value.shape)}, {np.dtype(value.dtype).name}"
    return type(value).__name__


class MXLiveNetwork(NativeLiveNetwork):
    """The MXNet framework's live state: parameters MXNet holds as NDArrays on the executor's context (gradient
    buffers attached to the floating trainable ones), the others as NumPy arrays (constants of the composed graphs;
    ``constants_version`` counts their changes). ``fetch_tensors`` copies out (``asnumpy()`` always copies);
    ``feed_tensor`` writes in place, so optimizers and composed graphs holding an NDArray keep seeing it."""

    def __init__(self, graph: Network, context: mx.Context, native: dict[str, mx.nd.NDArray] | None = None) -> None:
        super().__init__(graph)
        self.context = context
        self.constants_version = 0
        native = native or {}
        self.param_values: dict[str, Any] = {
            name: native[name] if name in native else self._hold(value, graph.is_trainable(name))
            for name, value in graph.params.items()}
        self._trainable: tuple[int, list[str], list[mx.nd.NDArray]] | None = None

    def _hold(self, value: Any, trainable: bool) -> Any:
        array = np.asarray(value)
        if array.dtype.kind == "f" and holds(array.dtype):
            held = as_mx_value(array, self.context)
            if trainable:
                with mx.util.np_shape(True):  # a 0-d parameter too
                    held.attach_grad()
            return held
        return array

    def trainable(self) -> tuple[list[str], list[mx.nd.NDArray]]:
        """The gradient names and the NDArrays of the trainable parameters, in ``get_params()`` order."""
        if self._trainable is None or self._trainable[0] != self.graph.version:
            names = self.get_params()
            self._trainable = (self.graph.version, [f"{name}_grad" for name in names],
                               [self.param_values[name] for name in names])
        return self._trainable[1], self._trainable[2]

    def gradient_buffers(self) -> list[mx.nd.NDArray | None]:
        """The gradient buffers autograd writes, in ``trainable()`` order (read once: each ``NDArray.grad`` makes a
        new handle, a tenth of a LeNet-5 step's Python for ten parameters)."""
        cached = self.__dict__.get("_grads")
        if cached is None or cached[0] != self.graph.version:
            _, arrays = self.trainable()
            cached = self._grads = (self.graph.version, [getattr(a, "grad", None) for a in arrays])
        return cached[1]

    def as_numpy(self, value: Any) -> Any:
        if isinstance(value, Tensor):  # an error while composing: its description
            return np.lib.stride_tricks.as_strided(np.zeros(1, value.dtype), shape=value.shape,
                                                   strides=(0,) * len(value.shape))
        return as_numpy_value(value)

    def feed_tensor(self, name: str, value: Any, is_param: bool = False) -> None:
        constant = isinstance(self.param_values.get(name), np.ndarray)
        with mx.util.np_shape(True):  # 0-d parameters are 0-d
            super().feed_tensor(name, value, is_param)
        if constant or is_param:
            self.constants_version += 1  # a constant of the composed graphs changed: they are composed anew

    def assign(self, name: str, current: mx.nd.NDArray, value: Any) -> None:
        if isinstance(value, mx.nd.NDArray):
            if tuple(value.shape) != tuple(current.shape):
                like_param(name, np.empty(tuple(value.shape)), np.empty(tuple(current.shape)))  # the ShapeError
            value.astype(current.dtype, copy=False).copyto(current)
        else:
            current._sync_copyfrom(np.ascontiguousarray(like_param(name, value, to_numpy(current))))

    def new_param(self, value: Any) -> Any:
        return self._hold(value, True)

    def to_native(self, value: Any) -> Any:
        return as_mx_value(value, self.context)


@dataclasses.dataclass
class Compiled:
    """One composed graph: its CachedOp (None when every output is known before running), the names of its inputs in
    call order (fed names, parameters, constants), the constants' NDArrays, the outputs it computes, in the
    CachedOp's order, and those known before it runs (NumPy)."""

    op: Any
    inputs: list[str]
    constants: dict[str, mx.nd.NDArray]
    computed: list[str]
    known: dict[str, Any]
    #: (converter, input position, fed input, the node's input shapes): values checked before each run.
    checks: list[tuple[Any, int, str, list[Any]]] = dataclasses.field(default_factory=list)


class MXNetGraphExecutor(NativeExecutor):
    """Runs a copy of ``network`` (``executor.graph``) with native MXNet operators in one composed symbol per input
    signature; see the module docstring."""

    framework = "mxnet"
    holds = staticmethod(holds)

    def __init__(self, network: Network, *, device: Any = None, fallback: Any = "reference",
                 native_params: dict[str, mx.nd.NDArray] | None = None) -> None:
        self.check_device(device)
        self._context = mx_context(device)
        self._native_params = native_params
        super().__init__(network, device=device, fallback=fallback)
        self._plan_version: tuple[int, int] | None = None
        #: (plan key, feed signature) -> Compiled
        self._compiled: dict[tuple, Compiled] = {}
        self.eager = bool(self._nodes_on_reference()) or any(
            hasattr(getattr(step.op, "op", step.op), "prepare_subgraphs") or isinstance(step.op, _NativeCall)
            for step in self.steps)

    def make_live_network(self, graph: Network) -> MXLiveNetwork:
        return MXLiveNetwork(graph, self._context, self._native_params)

    def native_operator(self, node: Node) -> MXOp:
        return create_operator(node.op_type, node.attrs, self.graph.opset)

    def bridge(self, op: CustomOp) -> Any:
        return custom_op(op)

    def custom_operator(self, node: Node) -> Any:
        if isinstance(node.custom_op, NativeModelOp):
            return _NativeCall(node.custom_op)
        return self.bridge(node.custom_op)

    # ------------------------------------------------------------------ composing
    def build_plan(self, reach: Reach, y: str | None) -> tuple[Reach, list[str], list[str]]:
        """The steps, fed inputs and outputs of a pass; the graphs themselves are composed per signature."""
        inputs = [name for name in self.graph.inputs if name not in reach.missing]
        outputs = reach.outputs + ([y] if y is not None and y not in reach.outputs else [])
        return reach, inputs, outputs

    def _compose(self, reach: Reach, inputs: list[str], feeds: dict[str, Any], outputs: list[str],
                 training: bool) -> Compiled:
        live = self.network
        env: dict[str, Any] = {"": None}
        for name, value in live.param_values.items():
            env[name] = Tensor(mx.sym.var(name, shape=value.shape, dtype=value.dtype), tuple(value.shape),
                               np.dtype(value.dtype)) if isinstance(value, mx.nd.NDArray) else value
        for name in inputs:
            value = feeds[name]
            dtype = mx_dtype(np.dtype(value.dtype))
            env[name] = Tensor(mx.sym.var(name, shape=value.shape, dtype=dtype), tuple(value.shape), dtype)
        constants: dict[str, mx.nd.NDArray] = {}
        checks = []
        with mx.util.np_shape(True):
            for step in reach.steps:
                args = [env[name] for name in step.inputs]
                for index in getattr(step.op, "checked_inputs", ()):
                    if index < len(args) and step.inputs[index] in inputs:
                        checks.append((step.op, index, step.inputs[index],
                                       [None if a is None else tuple(np.shape(a)) if not isinstance(a, Tensor)
                                        else a.shape for a in args]))
                results = self._step_results(step, args, training, constants)
                for position, name in enumerate(step.node.outputs):
                    if name:
                        env[name] = results[position]
            symbols = [env[name].symbol for name in outputs if isinstance(env[name], Tensor)]
            op, names = None, []
            if symbols:  # else every output is known before running (Shape, Constant): nothing to run
                group = mx.sym.Group(symbols)
                names = group.list_inputs()
                # as Gluon's hybridized block tells it: which inputs are data (fed each call) and which are
                # parameters (the same arrays every call, which static allocation keeps bound)
                fed = set(inputs)
                flags = [("data_indices", [i for i, name in enumerate(names) if name in fed]),
                         ("param_indices", [i for i, name in enumerate(names) if name not in fed])]
                op = mx.nd.CachedOp(group, flags + list(CACHED_OP_FLAGS))
        computed = [name for name in outputs if isinstance(env[name], Tensor)]
        known = {name: env[name] for name in outputs if not isinstance(env[name], Tensor)}
        return Compiled(op, names, {k: v for k, v in constants.items() if k in names}, computed, known,
                        checks)

    def _step_results(self, step: Any, args: list[Any], training: bool, constants: dict[str, mx.nd.NDArray]
                      ) -> list[Any]:
        """The node's outputs in the graph under composition (Tensors composed onto ``args``, or NumPy values)."""
        op, node = step.op, step.node
        op.training = training
        if self._foldable(op, args):
            return self._folded(step, args)
        if isinstance(op, CustomOpCall):
            op.state_inputs = [i for i, name in enumerate(step.inputs) if self._is_state(name)] if training else []
            op.node, op.opset = node, self.graph.opset
        results, made, symbolic = node_graph(op, args, self.graph.opset, node)
        passed = {id(a) for a in args}
        new = [isinstance(r, Tensor) and id(r) not in passed for r in results]
        symbols = [r.symbol for r, fresh in zip(results, new) if fresh]
        if symbols:
            group = mx.sym.Group(symbols) if len(symbols) > 1 else symbols[0]
            reads = set(group.list_inputs())
            wanted = {f"_d5in{i}": tensor.symbol for i, tensor in symbolic if f"_d5in{i}" in reads}
            composed = group(**wanted) if wanted else group
            found = iter(range(len(symbols)))
            for position, result in enumerate(results):
                if new[position]:
                    index = next(found)
                    results[position] = Tensor(composed[index] if len(symbols) > 1 else composed, result.shape,
                                               result.dtype)
        for name, value in made.values.items():
            constants[name] = as_mx_value(value, self._context)
        return results

    def _is_state(self, name: str) -> bool:
        value = self.network.param_values.get(name)
        return isinstance(value, mx.nd.NDArray) and not self.graph.is_trainable(name)

    @staticmethod
    def _foldable(op: Any, args: list[Any]) -> bool:
        return isinstance(op, MXOp) and op.deterministic and not any(isinstance(a, (Tensor, mx.nd.NDArray))
                                                                      for a in args)

    def _folded(self, step: Any, args: list[Any]) -> list[Any]:
        """A node whose inputs are all known before the graph runs, computed now on the reference operator."""
        from d5.frameworks.reference.operators import create_operator as reference_operator
        from d5.ops.operator import as_tuple

        node = step.node
        reference = self.__dict__.setdefault("_reference_ops", {}).get(node.name)
        if reference is None:
            reference = self._reference_ops[node.name] = reference_operator(node.op_type, node.attrs, self.graph.opset)
            reference.node_output_count = len(node.outputs)
        reference.training = step.op.training
        return [None if r is None else r if isinstance(r, list) else np.asarray(r)
                for r in as_tuple(reference.forward(list(args)))]

    # ------------------------------------------------------------------ running
    def _current_plans(self) -> None:
        """Forget the composed graphs when the graph or a constant parameter changed (they hold them)."""
        version = (self.graph.version, self.network.constants_version)
        if version != self._plan_version:
            self._plans.clear()
            self._compiled.clear()
            self._plan_version = version

    def _graph(self, feeds: dict[str, Any], y: str | None) -> Compiled:
        reach, inputs, outputs = self.plan(frozenset(feeds), y)
        key = (frozenset(feeds), y, tuple(_signature(feeds[name]) for name in inputs))
        compiled = self._compiled.get(key)
        if compiled is None:
            compiled = self._compiled[key] = self._compose(reach, inputs, feeds, outputs, y is not None)
        return compiled

    def _arguments(self, compiled: Compiled, feeds: dict[str, Any]) -> list[mx.nd.NDArray]:
        params = self.network.param_values
        args = []
        for name in compiled.inputs:
            value = compiled.constants.get(name)
            if value is None:
                value = params.get(name) if name not in feeds else as_mx_value(feeds[name], self._context)
            args.append(value)
        return args

    def _run(self, feeds: dict[str, Any], y: str | None) -> tuple[dict[str, Any], list[Any] | None]:
        """One pass: the outputs (NDArrays, or NumPy values known before running) and, in training, the
        gradients of the trainable parameters (NDArrays, in ``trainable()`` order)."""
        if self.eager:
            return self._run_eagerly(feeds, y)
        compiled = self._graph(feeds, y)
        for op, index, name, shapes in compiled.checks:
            op.check_value(index, feeds[name], shapes)
        args = self._arguments(compiled, feeds)
        with mx.util.np_shape(True):
            if compiled.op is None:
                results = []
            elif y is None:
                results = compiled.op(*args)
            else:
                with mx.autograd.record(train_mode=True):
                    results = compiled.op(*args)
            results = [results] if isinstance(results, mx.nd.NDArray) else list(results)
            values = dict(zip(compiled.computed, results))
            values.update(compiled.known)
            if y is None:
                return values, None
            mx.autograd.backward([values[y]])
        return values, self._gradients(set(compiled.inputs))

    def _gradients(self, reached: set[str]) -> list[Any]:
        grads = self.network.gradient_buffers()
        return [grad if name in reached else None for name, grad in zip(self.graph.get_params(), grads)]

    def _run_eagerly(self, feeds: dict[str, Any], y: str | None) -> tuple[dict[str, Any], list[Any] | None]:
        reach, inputs, outputs = self.plan(frozenset(feeds), y)
        training = y is not None
        env: dict[str, Any] = {"": None}
        env.update(self.network.param_values)
        env.update((name, as_mx_value(feeds[name], self._context)) for name in inputs)
        with mx.util.np_shape(True), mx.autograd.record(train_mode=True) if training else contextlib.nullcontext():
            for step in reach.steps:
                results = self._eager_step(step, [env[name] for name in step.inputs], training)
                for position, name in enumerate(step.node.outputs):
                    if name:
                        env[name] = results[position] if position < len(results) else None
            values = {name: env[name] for name in outputs}
        if not training:
            return values, None
        with mx.util.np_shape(True):
            loss = values[y]
            if not isinstance(loss, mx.nd.NDArray):
                raise D5Error(f"cannot differentiate {y!r}: it does not depend on the parameters")
            mx.autograd.backward([loss])
        return values, self._gradients(set(self.network.param_values))

    def _eager_step(self, step: Any, args: list[Any], training: bool) -> list[Any]:
        op, node = step.op, step.node
        op.training = training
        if isinstance(op, _NativeCall):  # a user's Gluon block or loss, on NDArrays
            results = op(*args)
            return list(results) if isinstance(results, (tuple, list)) else [results]
        if isinstance(op, CustomOpCall):  # the bridge: fallbacks, control flow, values MXNet cannot hold
            op.state_inputs = [i for i, name in enumerate(step.inputs) if self._is_state(name)] if training else []
            return op.eager(args)
        # integer tensors (and those the converter reads by value) reach converters as values, floating ones as
        # graph inputs
        values = [to_numpy(a) if isinstance(a, mx.nd.NDArray) and (np.dtype(a.dtype).kind != "f"
                                                                   or i in op.value_inputs) else a
                  for i, a in enumerate(args)]
        if self._foldable(op, values):
            return self._folded(step, values)
        try:
            return evaluate(op, values, self.graph.opset, node)
        except ValueNeededWhileTracing:
            # an output whose shape depends on floating data (NonZero of a float tensor): the reference operator,
            # run at once through the bridge
            return self._reference_bridge(step).eager(args)

    def _reference_bridge(self, step: Any) -> CustomOpCall:
        bridges = self.__dict__.setdefault("_bridges", {})
        bridge = bridges.get(step.node.name)
        if bridge is None:
            from d5.frameworks.reference.operators import create_operator as reference_operator

            node = step.node
            op = reference_operator(node.op_type, node.attrs, self.graph.opset)
            op.node_output_count = len(node.outputs)
            bridge = bridges[node.name] = self.bridge(op)
        bridge.training = step.op.training
        return bridge

    # ------------------------------------------------------------------ passes
    def _failure(self, err: BaseException, feeds: dict[str, Any], y: str | None) -> BaseException:
        """The d5 error for ``err``. MXNet's kernels check data (a label out of range) when the graph runs and
        name no node: the pass runs again node by node, waiting on each, so the failing node is named."""
        if isinstance(err, D5Error) or self.eager or not isinstance(err, mx.base.MXNetError):
            return self.node_failure(err)
        self.eager, saved = True, self.eager
        try:
            self._run_eagerly(feeds, y)
        except Exception as eager:  # noqa: BLE001 -- the node-by-node run's own failure names the node
            return self.node_failure(eager)
        finally:
            self.eager = saved
        return self.node_failure(err)

    def _go_eager(self, err: BaseException) -> bool:
        """Whether ``err`` asks for node-by-node execution (a converter needed the value of an input computed from
        the data) and, if so, switch this executor to it, with a warning."""
        needs_value = isinstance(err, ValueNeededWhileTracing) or (
            isinstance(err, UnsupportedOperatorError) and "as a value known while tracing" in str(err))
        if self.eager or not needs_value:
            return False
        warnings.warn(f"d5 mxnet framework: {err}; this network runs node by node (slower than one composed graph)",
                      FallbackWarning, stacklevel=4)
        self.eager = True
        self._compiled.clear()
        return True

    def _pass(self, feeds: dict[str, Any], y: str | None) -> tuple[dict[str, Any], dict[str, Any], list[Any] | None]:
        """One pass (inference when ``y`` is None): the graph outputs as NumPy, all outputs as computed, the
        gradients. NumPy's shape semantics throughout (0-d tensors, zero-size axes), as MXNet's numpy interface."""
        self._current_plans()
        try:
            with mx.util.np_shape(True):
                values, grads = self._run(feeds, y)
                result = {name: as_numpy_value(values[name]) for name in self.graph.outputs if name in values}
        except Exception as err:
            if self._go_eager(err):
                return self._pass(feeds, y)
            raise self._failure(err, feeds, y) from err
        return result, values, grads

    def run_inference(self, feeds: dict[str, Any]) -> dict[str, np.ndarray]:
        result, _, _ = self._pass(feeds, None)
        return result

    def run_training(self, feeds: dict[str, Any], y: str) -> dict[str, np.ndarray]:
        result, values, grads = self._pass(feeds, y)
        tensors = dict(values)
        with mx.util.np_shape(True):
            zeros = self.gradients_with_zeros(dict(zip(self.graph.get_params(), grads)), _zeros_like)
        tensors.update(zeros)
        self.network.set_pass_tensors(tensors)
        return result


def _zeros_like(param: Any) -> Any:
    """A zero gradient for a parameter ``y`` does not depend on (NumPy for a parameter MXNet does not hold)."""
    if isinstance(param, mx.nd.NDArray):
        return mx.nd.zeros(param.shape, ctx=param.context, dtype=param.dtype)
    return np.zeros_like(param)


def _signature(value: Any) -> tuple:
    """What selects a fed value's composed graph: its shape and dtype (read without converting it)."""
    if type(value) is np.ndarray:
        return value.shape, value.dtype
    return np.shape(value), np.asarray(value).dtype


def evaluate(op: Any, values: list[Any], opset: int, node: Node | None = None) -> list[Any]:
    """Run converter ``op`` alone on ``values`` (NDArrays, NumPy values, None): its graph as a CachedOp on the
    NDArrays (recorded by autograd when recording). Returns NDArrays (and NumPy values it computed from shapes)."""
    args = [Tensor(None, tuple(v.shape), np.dtype(v.dtype)) if isinstance(v, mx.nd.NDArray) else v for v in values]
    results, made, symbolic = node_graph(op, args, opset, node)
    passed = {id(a): values[i] for i, a in enumerate(args) if isinstance(a, Tensor)}
    results = [passed[id(r)] if id(r) in passed else r for r in results]
    symbols = [r.symbol for r in results if isinstance(r, Tensor)]
    if not symbols:
        return results
    with mx.util.np_shape(True):
        group = mx.sym.Group(symbols)
        feeds = {f"_d5in{i}": values[i] for i, _ in symbolic}
        feeds.update((name, to_ndarray(value)) for name, value in made.values.items())
        names = group.list_inputs()
        outputs = mx.nd.CachedOp(group)(*[feeds[name] for name in names])
    outputs = iter([outputs] if isinstance(outputs, mx.nd.NDArray) else list(outputs))
    return [next(outputs) if isinstance(r, Tensor) else r for r in results]
