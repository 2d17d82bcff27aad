"""d5 custom operators on TensorFlow, and TensorFlow's own operators as d5 custom operators (``native_op``).

``custom_op(op)`` runs any :class:`d5.ops.CustomOp` (NumPy in, NumPy out) inside TensorFlow: a
``tf.custom_gradient`` around ``tf.numpy_function`` calling the op's ``forward`` (its ``backward`` for the
gradient), with static output shapes set where they are known (``numpy_function``'s outputs have none). Inputs
reach the op as NumPy arrays aliasing the tensors where TensorFlow allows; the outputs are copied into tensors.
State an operator asks to write back (``state_updates``) is assigned to the inputs that are ``tf.Variable`` s (the
executor's live parameters).

``native_op(op_type, **attributes)`` is the other direction: TensorFlow's converter of an ONNX operator as a d5
CustomOp, for the operator table and for timing frameworks against each other.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from d5.frameworks import bridge
from d5.frameworks.bridge import bridge_backward, bridge_forward, check_custom_op
from d5.frameworks.tensorflow.operators import TFOp, create_operator
from d5.frameworks.tensorflow.tensors import as_numpy_value, as_tf_value, holds
from d5.ops.cpp_op import CppOp
from d5.ops.operator import CustomOp, as_tuple


class CustomOpCall:
    """A d5 CustomOp as a TensorFlow computation (see the module docstring): call it with tensors (None for an
    omitted input); one tensor out, or a tuple for several outputs. ``output_info`` (the executor's ONNX shape
    inference of the node's outputs, TensorInfo or None each) declares the outputs' dtypes and static shapes inside
    a traced function; without it the outputs take the dtype of the first floating input, and a compiled C++
    operator's shapes come from its ``output_shapes``."""

    def __init__(self, op: CustomOp, output_info: list[Any] | None = None) -> None:
        self.op = op
        self.output_info = output_info
        self.training = False
        self.node_output_count: int | None = None

    def __repr__(self) -> str:
        return f"custom_op({type(self.op).__name__})"

    def __call__(self, *inputs: Any) -> Any:
        if tf.executing_eagerly():
            return self._eager(inputs)
        return self._traced(inputs)

    def _eager(self, inputs: tuple[Any, ...]) -> Any:
        """Eagerly (``native_op``, a user's call, a plan of values TensorFlow cannot hold): the op runs at once on
        NumPy values; a gradient is recorded when every input and output is a tensor TensorFlow holds."""
        op = self.op
        op.training = self.training
        arrays = [as_numpy_value(x) for x in inputs]
        floating = [i for i, x in enumerate(inputs) if _is_float(x)]
        results = bridge_forward(op, arrays, [i in floating for i in range(len(inputs))])
        if op.training:
            for index, value in op.state_updates().items():
                if isinstance(inputs[index], tf.Variable):
                    inputs[index].assign(np.asarray(value, dtype=arrays[index].dtype))
        tensors_only = all(x is None or isinstance(x, (tf.Tensor, tf.Variable)) for x in inputs) and all(
            isinstance(r, np.ndarray) and holds(r.dtype) for r in results)
        if not tensors_only:  # strings, sequences, int4: passed through as NumPy values, without a gradient
            outputs = [as_tf_value(r) if isinstance(r, np.ndarray) and holds(r.dtype) else r for r in results]
            # One value alone; otherwise a tuple, so that a lone sequence output (a list) is not taken for outputs.
            return outputs[0] if len(outputs) == 1 and not isinstance(outputs[0], list) else tuple(outputs)
        present = [i for i, x in enumerate(inputs) if x is not None]

        @tf.custom_gradient
        def run(*tensors: tf.Tensor):
            def grad(*upstream: tf.Tensor) -> list[Any]:
                grads = [np.zeros_like(r) if g is None else np.asarray(g, dtype=r.dtype)
                         for g, r in zip(upstream, results)]
                found = bridge_backward(op, grads, arrays, results)
                return [None if i not in floating else
                        tf.constant(np.zeros_like(arrays[i]) if found[i] is None else np.asarray(found[i]))
                        for i in present]
            return tuple(tf.constant(r) for r in results), grad

        outputs = run(*[tf.convert_to_tensor(inputs[i]) for i in present])
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def _traced(self, inputs: tuple[Any, ...]) -> Any:
        """Inside a traced function: ``tf.numpy_function`` calls the op when the function runs."""
        op = self.op
        op.training = self.training
        present = [i for i, x in enumerate(inputs) if x is not None]
        floating = [i for i in present if _is_float(inputs[i])]
        # Running statistics the op writes back (state_updates) are non-trainable variables: the executor's live
        # state. Their new values come out of the call as extra outputs and are assigned after it.
        state = [i for i in present if isinstance(inputs[i], tf.Variable) and not inputs[i].trainable] \
            if self.training else []
        stash: dict[str, Any] = {}

        def forward(*arrays: np.ndarray) -> list[np.ndarray]:
            full: list[Any] = [None] * len(inputs)
            for index, array in zip(present, arrays):
                full[index] = array
            results = bridge_forward(op, full, [i in floating for i in range(len(inputs))])
            stash["arrays"], stash["results"] = full, results
            updates = op.state_updates() if op.training else {}
            return [np.asarray(r, dtype=d.as_numpy_dtype) for r, d in zip(results, stash["dtypes"])] + \
                [np.asarray(updates.get(i, full[i]), dtype=full[i].dtype) for i in state]

        def backward(*grads: np.ndarray) -> list[np.ndarray]:
            in_grads = bridge_backward(op, list(grads), stash["arrays"], stash["results"])
            return [np.zeros_like(stash["arrays"][i]) if in_grads[i] is None else
                    np.asarray(in_grads[i], dtype=stash["arrays"][i].dtype) for i in floating]

        tensors = [tf.convert_to_tensor(inputs[i]) for i in present]
        dtypes, shapes = self._declared(inputs, tensors)
        stash["dtypes"] = dtypes

        @tf.custom_gradient
        def run(*tensors: tf.Tensor):
            values = tf.numpy_function(forward, list(tensors), dtypes + [inputs[i].dtype for i in state],
                                       stateful=True)
            values = [values] if isinstance(values, tf.Tensor) else list(values)
            for value, shape in zip(values, shapes):
                if shape is not None:
                    value.set_shape(shape)
            outputs, updates = values[:len(dtypes)], values[len(dtypes):]

            def grad(*upstream: tf.Tensor) -> list[Any]:
                upstream = [tf.zeros_like(o) if g is None else tf.cast(g, o.dtype) for g, o in zip(upstream, outputs)]
                found = tf.numpy_function(backward, upstream, [inputs[i].dtype for i in floating],
                                          stateful=True) if floating else []
                found = [found] if isinstance(found, tf.Tensor) else list(found)
                for value, index in zip(found, floating):
                    value.set_shape(inputs[index].shape)
                by_input = dict(zip(floating, found))
                return [by_input.get(index) for index in present]

            return (*outputs, *[tf.stop_gradient(u) for u in updates]), grad

        values = list(run(*tensors))
        outputs = values[:len(dtypes)]
        for index, value in zip(state, values[len(dtypes):]):
            inputs[index].assign(value)
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def _declared(self, inputs: tuple[Any, ...], tensors: list[tf.Tensor]) -> tuple[list[tf.DType], list[Any]]:
        """The outputs' dtypes and static shapes inside a traced function: from ONNX shape inference where it knows
        them, a compiled operator's ``output_shapes``, else by running the op once on zeros of the inputs' static
        shapes (a user's operator whose shapes nothing else can tell)."""
        count = self.node_output_count or (len(self.output_info) if self.output_info else 1)
        info = (list(self.output_info or []) + [None] * count)[:count]
        known = [entry is not None and entry.is_tensor and entry.dtype is not None and entry.shape is not None
                 and all(isinstance(d, int) for d in entry.shape) for entry in info]
        if all(known):
            return [tf.as_dtype(entry.dtype) for entry in info], [list(entry.shape) for entry in info]
        if isinstance(self.op, CppOp) and tensors and all(t.shape.is_fully_defined() for t in tensors):
            dtype = tf.as_dtype(self.op.element_type([t.dtype.name for t in tensors]))
            shapes = self.op.output_shapes([t.shape.as_list() for t in tensors], dtype.name)
            return [dtype] * len(shapes), [list(shape) for shape in shapes]
        probe = self._probe(inputs)
        if probe is not None:
            return [tf.as_dtype(r.dtype) for r in probe], [list(r.shape) for r in probe]
        guess = next((t.dtype for t in tensors if t.dtype.is_floating), tensors[0].dtype if tensors else tf.float32)
        return ([tf.as_dtype(entry.dtype) if entry is not None and entry.dtype is not None else guess
                 for entry in info], [None] * count)

    def _probe(self, inputs: tuple[Any, ...]) -> list[np.ndarray] | None:
        """The op's outputs on zeros shaped as the inputs, for a user's operator (never a reference operator, whose
        output shapes may depend on the values); None when that is not possible."""
        if type(self.op).__module__.startswith("d5.frameworks.reference") or not all(
                x is None or (isinstance(x, (tf.Tensor, tf.Variable)) and x.shape.is_fully_defined()) for x in inputs):
            return None
        zeros = [None if x is None else np.zeros(x.shape.as_list(), x.dtype.as_numpy_dtype) for x in inputs]
        try:
            results = [np.asarray(r) for r in as_tuple(self.op.forward(zeros))]
        except Exception:  # noqa: BLE001 -- the probe is a hint; its failure leaves the shapes unknown
            return None
        return results if all(holds(r.dtype) for r in results) else None


def _is_float(value: Any) -> bool:
    return isinstance(value, (tf.Tensor, tf.Variable)) and value.dtype.is_floating


def custom_op(op: CustomOp, output_info: list[Any] | None = None) -> CustomOpCall:
    """``op`` as a TensorFlow computation with a gradient (see the module docstring and :class:`CustomOpCall`).

    >>> import numpy as np, tensorflow as tf
    >>> from d5.ops import CustomPythonOp
    >>> class IPowOp(CustomPythonOp):
    ...     def __init__(self, power):
    ...         super().__init__()
    ...         self.power = power
    ...     def forward(self, inputs):
    ...         return inputs[0] ** self.power
    ...     def backward(self, grads, fwd_inputs, fwd_outputs):
    ...         return grads[0] * self.power * fwd_inputs[0] ** (self.power - 1)
    >>> x = tf.Variable([1.0, 2.0])
    >>> with tf.GradientTape() as tape:
    ...     y = custom_op(IPowOp(3))(x)
    ...     total = tf.reduce_sum(y)
    >>> y.numpy(), tape.gradient(total, x).numpy()
    (array([1., 8.], dtype=float32), array([ 3., 12.], dtype=float32))
    """
    check_custom_op(op, "tensorflow")
    return CustomOpCall(op, output_info)


class NativeOp(bridge.NativeOp):
    """A TensorFlow converter of an ONNX operator (``operators/``) as a d5 CustomOp, NumPy in and out (see
    :class:`d5.frameworks.bridge.NativeOp`): forward runs TensorFlow's kernels eagerly, backward is
    ``tf.GradientTape``'s gradient of the same computation. Floating inputs enter as ``tf.Variable`` copies, so a
    converter that updates state (BatchNormalization's running statistics) assigns them and the update comes back
    through ``state_updates``."""

    def create(self, op_type: str, attributes: dict[str, Any], opset: int | None) -> TFOp:
        return create_operator(op_type, attributes, opset)

    def _call(self, inputs: list[Any], tape: tf.GradientTape | None = None) -> tuple[list[Any], tuple[Any, ...]]:
        self.module.training = self.training
        self.module.node_output_count = self.node_output_count
        values = [tf.Variable(x) if isinstance(x, np.ndarray) and x.dtype.kind == "f" and x.dtype.name != "bfloat16"
                  else as_tf_value(x) for x in inputs]
        if tape is not None:
            for value in values:
                if isinstance(value, tf.Variable):
                    tape.watch(value)
        return values, as_tuple(self.module(*values))

    def run(self, inputs: list[Any]) -> tuple[list[Any], tuple[Any, ...]]:
        values, outputs = self._call(inputs)
        return [as_numpy_value(v) for v in values], tuple(as_numpy_value(o) for o in outputs)

    def input_gradients(self, inputs: list[Any], wanted: list[bool], grads: Any) -> list[Any]:
        with tf.GradientTape(persistent=False, watch_accessed_variables=False) as tape:
            values, outputs = self._call(inputs, tape)
        sources = [v for v, w in zip(values, wanted) if w and isinstance(v, tf.Variable)]
        pairs = [(o, tf.constant(np.asarray(g), dtype=o.dtype)) for o, g in zip(outputs, grads)
                 if isinstance(o, tf.Tensor) and o.dtype.is_floating and g is not None]
        found = iter(tape.gradient([o for o, _ in pairs], sources, output_gradients=[g for _, g in pairs],
                                   unconnected_gradients=tf.UnconnectedGradients.ZERO)
                     if pairs and sources else [None] * len(sources))
        result = []
        for value, want in zip(values, wanted):
            if want and isinstance(value, tf.Variable):
                grad = next(found)
                result.append(np.zeros(value.shape, value.dtype.as_numpy_dtype) if grad is None
                              else as_numpy_value(tf.convert_to_tensor(grad)))
            else:
                result.append(None)
        return result


def native_op(op_type: str, opset: int | None = None, **attributes: Any) -> NativeOp:
    """TensorFlow's own implementation of ONNX operator ``op_type`` (with these attributes, at ``opset``) as a d5
    CustomOp, for validating and timing it against other frameworks' (see :class:`NativeOp`).

    >>> import numpy as np
    >>> op = native_op("Relu")
    >>> op.forward([np.array([-1.0, 2.0], np.float32)]).tolist()
    [0.0, 2.0]
    """
    return NativeOp(op_type, attributes, opset)
