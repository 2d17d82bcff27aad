"""The TensorFlow GraphExecutor: a d5.Network as one traced ``tf.function`` per set of fed inputs and input
signature, over ``tf.Variable`` parameters.

Each ONNX node becomes a call of its converter (``operators/``) inside the traced function; what the shared layer
(:mod:`d5.frameworks.native_executor`) does not run natively goes through the custom-op bridge (``custom_op.py``).
The training function runs the forward pass under a ``tf.GradientTape`` and returns the outputs and the gradients of
the trainable variables; the optimizer's update is a separate traced function (``optimizers.py``).

**Layout.** TensorFlow's CPU convolution and pooling kernels take channels-last data only, and a transpose around
every convolution is the known performance failure of ONNX-to-TensorFlow converters. While tracing, the executor
carries each value with its layout: a converter that can compute channels-last (:class:`~.operators.TFOp`'s
protocol) gets its spatial inputs channels-last -- transposed once where they arrive in ONNX layout, at the graph
boundary -- and leaves its outputs so; an elementwise converter follows its operands; any other converter, and every
graph output, gets ONNX layout back. So LeNet-5 pays one transpose in (the input) and one out (before Flatten), and
ResNet-44 the same, whatever its depth. The parameters stay in ONNX layout (what ``fetch_tensors`` returns); a
convolution transposes its (small) weight to TensorFlow's filter layout inside the function.

**Calls.** A pass converts its feeds and calls the plan's ConcreteFunction for their dtypes and shapes directly
(:meth:`TensorFlowGraphExecutor._run`), not through ``tf.function``'s matching of each call against its traces:
on LeNet-5, whose step is a few milliseconds, that matching cost more than all of d5's own work around the step.

**Live state** (:class:`TFLiveNetwork`): floating parameters are ``tf.Variable`` s (trainable or not), captured by the
traced functions, so an optimizer's assignment is read by the next pass; other parameters (integer shapes, axes)
stay NumPy and are constants of the traced function -- feeding one retraces.
"""
from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import tensorflow as tf

from d5.errors import D5Error, UnsupportedOperatorError
from d5.frameworks.base import NativeModelOp, loss_mismatch
from d5.frameworks.native_executor import FallbackWarning, NativeExecutor, NativeLiveNetwork, Reach, single_output
from d5.frameworks.tensorflow.custom_op import CustomOpCall, custom_op
from d5.frameworks.tensorflow.operators import TFOp, create_operator
from d5.frameworks.tensorflow.operators._helpers import ValueNeededWhileTracing
from d5.frameworks.tensorflow.tensors import (as_numpy_value, as_tf_value, broadcast_to_channels_last,
                                              from_channels_last, holds, tf_device, to_channels_last, to_numpy)
from d5.network.graph import Network, Node, like_param
from d5.ops.operator import CustomOp


class _NativeCall:
    """Calls a user's model (``training=`` where it takes it, as Keras models do) or loss on the node's inputs."""

    def __init__(self, marker: NativeModelOp) -> None:
        self.module, self.loss_of = marker.module, marker.loss_of
        self.keras_loss = _is_keras_loss(self.module)
        self.training = False
        self.node_output_count: int | None = None

    def __call__(self, *inputs: Any) -> Any:
        if self.loss_of is not None:
            output, label = inputs[:2]
            try:  # a Keras loss takes (y_true, y_pred); a function of ours (output, label)
                return self.module(label, output) if self.keras_loss else self.module(output, label)
            except Exception as err:  # TensorFlow's message names neither the model nor the loss
                raise loss_mismatch(self.loss_of, self.module, *map(_describe_value, inputs[:2]), err) from err
        try:
            return self.module(*inputs, training=self.training)
        except TypeError as err:
            if "training" not in str(err):
                raise
            return self.module(*inputs)  # a plain function: no training flag


def _is_keras_loss(loss: Any) -> bool:
    try:
        import keras
    except ImportError:
        return False
    return isinstance(loss, keras.losses.Loss) or getattr(loss, "__module__", "").startswith("keras.")


def _describe_value(value: Any) -> str:
    if isinstance(value, (tf.Tensor, tf.Variable)):
        return f"shape {tuple(value.shape)}, {value.dtype.name}"
    return type(value).__name__


class TFLiveNetwork(NativeLiveNetwork):
    """The TensorFlow framework's live state: floating parameters as ``tf.Variable`` s on the executor's device,
    the others as NumPy arrays (constants of the traced functions; ``constants_version`` counts their changes).
    ``fetch_tensors`` copies out (``.numpy()`` always copies); ``feed_tensor`` assigns in place, so optimizers and
    traced functions holding a variable keep seeing it."""

    def __init__(self, graph: Network, device: str, native: dict[str, tf.Variable] | None = None) -> None:
        super().__init__(graph)
        self.device = device
        self.constants_version = 0
        native = native or {}
        self.param_values: dict[str, Any] = {
            name: native[name] if name in native else self._hold(value, graph.is_trainable(name))
            for name, value in graph.params.items()}
        self._trainable: tuple[int, list[str], list[tf.Variable]] | None = None

    def _hold(self, value: Any, trainable: bool) -> Any:
        array = np.asarray(value)
        if array.dtype.kind in "fc" and holds(array.dtype):
            with tf.device(self.device):
                return tf.Variable(as_tf_value(array), trainable=trainable)
        return array

    def trainable(self) -> tuple[list[str], list[tf.Variable]]:
        """The gradient names and the variables of the trainable parameters, in ``get_params()`` order."""
        if self._trainable is None or self._trainable[0] != self.graph.version:
            names = self.get_params()
            self._trainable = (self.graph.version, [f"{name}_grad" for name in names],
                               [self.param_values[name] for name in names])
        return self._trainable[1], self._trainable[2]

    def as_numpy(self, value: Any) -> Any:
        if isinstance(value, tf.Tensor) and tf.is_symbolic_tensor(value):  # an error while tracing: its description
            return _shape_of(value)
        return as_numpy_value(value)

    def feed_tensor(self, name: str, value: Any, is_param: bool = False) -> None:
        constant = isinstance(self.param_values.get(name), np.ndarray)
        super().feed_tensor(name, value, is_param)
        if constant or is_param:
            self.constants_version += 1  # a constant of the traced functions changed: they retrace

    def assign(self, name: str, current: tf.Variable, value: Any) -> None:
        if isinstance(value, (tf.Tensor, tf.Variable)):
            if tuple(value.shape) != tuple(current.shape):
                like_param(name, np.empty(tuple(value.shape)), np.empty(tuple(current.shape)))  # the ShapeError
            current.assign(tf.cast(value, current.dtype))
        else:
            current.assign(like_param(name, value, to_numpy(current)))

    def new_param(self, value: Any) -> Any:
        return self._hold(value, True)

    def to_native(self, value: Any) -> Any:
        return as_tf_value(value)


class TensorFlowGraphExecutor(NativeExecutor):
    """Runs a copy of ``network`` (``executor.graph``) with native TensorFlow operators in traced functions; see
    the module docstring."""

    framework = "tensorflow"
    holds = staticmethod(holds)

    def __init__(self, network: Network, *, device: Any = None, fallback: Any = "reference",
                 native_variables: dict[str, tf.Variable] | None = None) -> None:
        self.check_device(device)
        self._device = tf_device(device)
        self._native_variables = native_variables
        self._output_info: dict[str, Any] | None = None
        super().__init__(network, device=device, fallback=fallback)
        self._plan_version: tuple[int, int] | None = None
        #: (a plan's traced function, its inputs' dtypes and shapes) -> its ConcreteFunction's call (see _run).
        self._concrete: dict[tuple, Any] = {}
        #: Values TensorFlow cannot hold (strings, sequences, int4) or control flow on reference executors: such a
        #: graph runs its plans eagerly, node by node, where NumPy values pass between the nodes as they are.
        self.eager = bool(self._nodes_on_reference()) or any(
            hasattr(getattr(step.op, "op", step.op), "prepare_subgraphs") for step in self.steps)
        for step in self.steps:
            if isinstance(step.op, CustomOpCall) and step.op.output_info is None:
                step.op.output_info = self.output_info(step.node.outputs)

    def make_live_network(self, graph: Network) -> TFLiveNetwork:
        return TFLiveNetwork(graph, self._device, self._native_variables)

    def native_operator(self, node: Node) -> TFOp:
        return create_operator(node.op_type, node.attrs, self.graph.opset)

    def bridge(self, op: CustomOp) -> Any:
        return custom_op(op)

    def custom_operator(self, node: Node) -> Any:
        if isinstance(node.custom_op, NativeModelOp):
            return _NativeCall(node.custom_op)
        return self.bridge(node.custom_op)

    def output_info(self, names: list[str]) -> list[Any]:
        """ONNX shape inference's dtype and shape of tensors ``names`` (None where unknown): what the custom-op
        bridge needs to declare its outputs inside a traced function."""
        if self._output_info is None:
            try:
                self._output_info = self.graph.infer_shapes()
            except Exception:  # noqa: BLE001 -- inference is a hint; the bridge then guesses from its inputs
                self._output_info = {}
        return [self._output_info.get(name) for name in names]

    # ------------------------------------------------------------------ the traced functions
    def build_plan(self, reach: Reach, y: str | None) -> tuple[Any, list[str], list[str]]:
        """The traced function computing the graph outputs the fed inputs reach (and ``y``, then with the
        gradients of the trainable variables), with the names of its inputs and outputs."""
        inputs = [name for name in self.graph.inputs if name not in reach.missing]
        outputs = reach.outputs + ([y] if y is not None and y not in reach.outputs else [])
        training = y is not None
        forward = self._forward_function(reach, inputs, outputs, training)
        trace = (lambda function: function) if self.eager else (lambda function: tf.function(function,
                                                                                             autograph=False))
        if not training:
            return trace(forward), inputs, outputs
        _, variables = self.network.trainable()
        position = outputs.index(y)

        def train(*feeds):
            with tf.GradientTape(watch_accessed_variables=False) as tape:
                tape.watch(variables)
                values = forward(*feeds)
                loss = values[position]
                # ONNX backward starts from ones: the gradient of the sum of a non-scalar y
                target = loss if loss.shape.rank == 0 else tf.reduce_sum(loss)
            grads = tape.gradient(target, variables, unconnected_gradients=tf.UnconnectedGradients.ZERO)
            # A gather from a variable (an embedding) has a sparse gradient: dense, as every framework gives it
            return values, [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in grads]

        return trace(train), inputs, outputs

    def _forward_function(self, reach: Reach, inputs: list[str], outputs: list[str], training: bool) -> Any:
        steps = reach.steps
        opset = self.graph.opset
        live = self.network

        def forward(*feeds):
            env: dict[str, tuple[Any, bool]] = {name: (value, False) for name, value in live.param_values.items()}
            env.update((name, (value, False)) for name, value in zip(inputs, feeds))
            env[""] = (None, False)
            for step in steps:
                node, op = step.node, step.op
                op.training = training
                op.differentiated = training
                results, channels_last = self._call(op, [env[name] for name in step.inputs])
                if len(node.outputs) == 1 and (not isinstance(results, (tuple, list))
                                               or (isinstance(op, TFOp) and single_output(node, opset))):
                    results = [results]
                for position, name in enumerate(node.outputs):
                    if name:
                        env[name] = (results[position], position in channels_last)
            return [_onnx_layout(*env[name]) for name in outputs]

        return forward

    @staticmethod
    def _call(op: Any, args: list[tuple[Any, bool]]) -> tuple[Any, set[int]]:
        """Run ``op`` on ``args`` ((value, channels-last?) pairs) in the layout it takes (module docstring): its
        results and the positions of those that are channels-last."""
        values = [value for value, _ in args]
        ranks = [_rank(value) for value in values]
        held = [cl for _, cl in args]
        if isinstance(op, TFOp) and any(held):
            if op.elementwise:
                rank = max(r for r, cl in zip(ranks, held) if cl)
                if all(r is None or r <= rank for r in ranks):
                    converted = [v if cl or r is None else broadcast_to_channels_last(v, rank)
                                 for v, cl, r in zip(values, held, ranks)]
                    results = op(*converted)
                    count = len(results) if isinstance(results, (tuple, list)) else 1
                    return results, set(range(count))
        if isinstance(op, TFOp) and op.channels_last_inputs and op.takes_channels_last(ranks):
            wanted = range(len(values)) if op.channels_last_inputs == "all" else op.channels_last_inputs
            wanted = {i for i in wanted if i < len(values) and values[i] is not None}
            converted = [(v if cl else to_channels_last(v)) if i in wanted else _onnx_layout(v, cl)
                         for i, (v, cl) in enumerate(zip(values, held))]
            return op.channels_last(*converted), set(op.channels_last_outputs)
        return op(*[_onnx_layout(v, cl) for v, cl in zip(values, held)]), set()

    def train_and_update(self, inputs: dict[str, Any], y: str, update: Any, key: Any,
                         arguments: tuple[Any, ...] = ()) -> dict[str, np.ndarray]:
        """A training pass and an optimizer's update in ONE traced function (a native optimizer's step when nothing
        runs between the two): ``update(gradients, *arguments)``, a Python function of TensorFlow operations, is
        traced after the gradients (in ``trainable()`` order) and runs only when ``y`` is finite -- a NaN loss
        changes no parameter, and the optimizer raises its DivergenceError. ``key`` identifies the update's
        structure (a new key traces anew); ``arguments`` are tensors it reads (the step number). Returns what
        ``inference_and_backprop`` returns and leaves the same pass tensors (the gradients included)."""
        y = self.check_loss_name(y)
        feeds = self.check_inputs(inputs)
        self._current_plans()
        plan_key = (frozenset(feeds), y, "update", key)
        plan = self._plans.get(plan_key)
        if plan is None:
            reach = self.reach(frozenset(feeds), y)
            names = [name for name in self.graph.inputs if name not in reach.missing]
            outputs = reach.outputs + ([y] if y not in reach.outputs else [])
            forward = self._forward_function(reach, names, outputs, training=True)
            _, variables = self.network.trainable()
            position = outputs.index(y)
            count = len(names)

            def step(*flat):
                feeds_, extra = flat[:count], flat[count:]
                with tf.GradientTape(watch_accessed_variables=False) as tape:
                    tape.watch(variables)
                    values = forward(*feeds_)
                    loss = values[position]
                    target = loss if loss.shape.rank == 0 else tf.reduce_sum(loss)
                grads = tape.gradient(target, variables, unconnected_gradients=tf.UnconnectedGradients.ZERO)
                grads = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in grads]
                finite = tf.reduce_all(tf.math.is_finite(tf.cast(loss, tf.float64)))

                def apply():
                    update(grads, *extra)
                    return tf.constant(True)

                tf.cond(finite, apply, lambda: tf.constant(False))
                return values, grads

            function = step if self.eager else tf.function(step, autograph=False)
            plan = self._plans[plan_key] = (function, names, outputs)
        function, names, outputs = plan
        try:
            values, grads = self._run(function, feeds, names, arguments)
        except Exception as err:
            if self._go_eager(err):
                return self.train_and_update(inputs, y, update, key, arguments)
            raise self._failure(err, feeds, y) from err
        return self._pass_result(outputs, values, grads)

    def _pass_result(self, outputs: list[str], values: list[Any], grads: list[Any] | None = None
                     ) -> dict[str, np.ndarray]:
        """The graph outputs of a pass as NumPy, its tensors (and the gradients, under their names) kept as the
        pass tensors: gradients stay tensors until fetched (or read by a native optimizer)."""
        tensors = dict(zip(outputs, values))
        result = {name: as_numpy_value(tensors[name]) for name in self.graph.outputs if name in tensors}
        if grads is not None:
            tensors.update(zip(self.network.trainable()[0], grads))
        self.network.set_pass_tensors(tensors)
        return result

    def _current_plans(self) -> None:
        """Forget the traced functions when the graph or a constant parameter changed (they captured them)."""
        version = (self.graph.version, self.network.constants_version)
        if version != self._plan_version:
            self._plans.clear()
            self._concrete.clear()
            self._plan_version = version

    def _feeds(self, feeds: dict[str, Any], inputs: list[str]) -> list[Any]:
        with tf.device(self._device):
            return [as_tf_value(feeds[name]) for name in inputs]

    def _run(self, function: Any, feeds: dict[str, Any], inputs: list[str], extra: tuple[Any, ...] = ()) -> Any:
        """``function`` of the fed ``inputs`` (then the tensors ``extra``) on the executor's device. A traced plan
        runs its ConcreteFunction for the feeds' dtypes and shapes (traced by its first call as ``function`` would
        trace it, then kept per signature) on the flat list of tensors: that skips ``tf.function``'s matching of
        each call's arguments against its traces and signature, a tenth of a LeNet-5 step."""
        with tf.device(self._device):
            args = [as_tf_value(feeds[name]) for name in inputs]
            args.extend(extra)
            if self.eager:
                return function(*args)
            key = _signature(function, [feeds[name] for name in inputs], extra)
            if key is None:  # a value that is no array: tf.function's own matching
                return function(*args)
            call = self._concrete.get(key)
            if call is None:
                call = self._concrete[key] = _flat_call(function.get_concrete_function(*args))
            return call(args)

    # ------------------------------------------------------------------ passes
    def _failure(self, err: BaseException, feeds: dict[str, Any], y: str | None) -> BaseException:
        """The d5 error for ``err``, raised by a traced function: a failure while tracing names its node from the
        traceback; one while running (TensorFlow's kernels check data, e.g. a label out of range, and name no node)
        is found by running the pass again eagerly, node by node, where the converters see the values and raise
        the d5 error the reference would."""
        if isinstance(err, D5Error) or self.eager or not isinstance(err, tf.errors.OpError):
            return self.node_failure(err)
        reach = self.reach(frozenset(feeds), y)
        inputs = [name for name in self.graph.inputs if name not in reach.missing]
        outputs = reach.outputs + ([y] if y is not None and y not in reach.outputs else [])
        forward = self._forward_function(reach, inputs, outputs, training=y is not None)
        try:
            with tf.device(self._device):
                forward(*self._feeds(feeds, inputs))
        except Exception as eager:  # noqa: BLE001 -- the eager run's own failure names the node
            return self.node_failure(eager)
        return self.node_failure(err)

    def _go_eager(self, err: BaseException) -> bool:
        """Whether ``err`` asks for eager execution -- a converter needed, while tracing, the value of an input
        computed from the data (a shape or axes fed as a graph input) -- and, if so, switch this executor to it
        (with a warning: eager steps are slower) so the call can be retried."""
        needs_value = isinstance(err, ValueNeededWhileTracing) or (
            isinstance(err, UnsupportedOperatorError) and "as a value known while tracing" in str(err))
        if self.eager or not needs_value:
            return False
        warnings.warn(f"d5 tensorflow framework: {err}; this network runs eagerly, node by node (slower than one "
                      "traced function)", FallbackWarning, stacklevel=4)
        self.eager = True
        self._plans.clear()
        self._concrete.clear()
        return True

    def run_inference(self, feeds: dict[str, Any]) -> dict[str, np.ndarray]:
        self._current_plans()
        function, inputs, outputs = self.plan(frozenset(feeds), None)
        try:
            values = self._run(function, feeds, inputs)
        except Exception as err:
            if self._go_eager(err):
                return self.run_inference(feeds)
            raise self._failure(err, feeds, None) from err
        return {name: as_numpy_value(value) for name, value in zip(outputs, values)}

    def run_training(self, feeds: dict[str, Any], y: str) -> dict[str, np.ndarray]:
        self._current_plans()
        function, inputs, outputs = self.plan(frozenset(feeds), y)
        try:
            values, grads = self._run(function, feeds, inputs)
        except Exception as err:
            if self._go_eager(err):
                return self.run_training(feeds, y)
            raise self._failure(err, feeds, y) from err
        return self._pass_result(outputs, values, grads)


def _signature(function: Any, values: list[Any], extra: tuple[Any, ...]) -> tuple | None:
    """What selects ``function``'s trace for these fed values and extra tensors: their dtypes and shapes (NumPy's,
    read without converting); None where a value is neither an array nor a tensor."""
    key: list[Any] = [function]
    for value in (*values, *extra):
        if type(value) is np.ndarray:
            key.append((value.dtype, value.shape))
        elif isinstance(value, tf.Tensor):
            key.append((value.dtype, tuple(value.shape)))
        else:
            return None
    return tuple(key)


def _flat_call(concrete: Any) -> Any:
    """A call of ConcreteFunction ``concrete`` on the list of its tensor arguments, in their order: its
    ``_call_flat`` (what ``concrete(*args)`` calls after binding the arguments to its signature, which the caller's
    key has matched already), or the public call where a TensorFlow has no such method."""
    flat = getattr(concrete, "_call_flat", None)
    if flat is None:
        return lambda args: concrete(*args)
    return lambda args: flat(args, concrete.captured_inputs)


def _rank(value: Any) -> int | None:
    shape = getattr(value, "shape", None)
    if shape is None:
        return None
    return shape.rank if isinstance(shape, tf.TensorShape) else len(shape)


def _onnx_layout(value: Any, channels_last: bool) -> Any:
    return from_channels_last(value) if channels_last else value


def _shape_of(value: tf.Tensor) -> np.ndarray:
    """A zero-stride NumPy stand-in with a traced tensor's static shape and dtype (no memory): what an error message
    describes of a value that only exists while tracing."""
    shape = [d if d is not None else 0 for d in (value.shape.as_list() if value.shape.rank is not None else [0])]
    return np.lib.stride_tricks.as_strided(np.zeros(1, value.dtype.as_numpy_dtype), shape=shape,
                                           strides=(0,) * len(shape))
