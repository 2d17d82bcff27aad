"""d5 custom operators on MXNet, and MXNet's own operators as d5 custom operators (``native_op``).

``custom_op(op)`` runs any :class:`d5.ops.CustomOp` (NumPy in, NumPy out) inside MXNet as a registered
``mx.operator.CustomOp`` (``mx.sym.Custom``), in the executor's composed graph as in a hybridized block: MXNet calls
its ``forward`` and ``backward`` on its worker thread with NDArrays. Inputs reach the op as NumPy arrays read
through DLPack without a copy (``to_dlpack_for_read``; ``asnumpy()`` where that is refused); outputs are copied into
MXNet's output arrays (``CustomOp.assign``: MXNet allocates them, and has no API to adopt a NumPy buffer). Running
statistics the op writes back (``state_updates``) are declared MXNet auxiliary states, which a custom operator may
write.

MXNet's ``CustomOpProp`` must declare the output shapes from the input shapes alone; the bridge takes them from
ONNX's shape inference of the node with the known input shapes and constant inputs, from a compiled C++ operator's
``output_shapes``, or by running a user's op once on zeros. An output whose shape depends on the data (NonZero)
makes the executor run that network node by node, where the bridge calls the op at once (:meth:`CustomOpCall.eager`,
an ``mx.autograd.Function``).

``native_op(op_type, **attributes)`` is the other direction: MXNet's converter of an ONNX operator as a d5 CustomOp,
for the operator table and for timing frameworks against each other.
"""
from __future__ import annotations

import itertools
from typing import Any

import mxnet as mx
import numpy as np

from d5.frameworks import bridge
from d5.frameworks.bridge import bridge_backward, bridge_forward, check_custom_op
from d5.frameworks.mxnet.operators import MXOp, create_operator
from d5.frameworks.mxnet.operators._helpers import Symbol, ValueNeededWhileTracing, as_symbol, dtype_of, shape_of
from d5.frameworks.mxnet.tensors import as_mx_value, as_numpy_value, holds, to_ndarray, to_numpy
from d5.ops.cpp_op import CppOp
from d5.ops.operator import CustomOp

#: key (a string MXNet passes to the CustomOpProp) -> the layout of one use of a bridged op in a graph.
_USES: dict[str, "_Use"] = {}
_KEYS = itertools.count()


class _Use:
    """One bridged call in a composed graph: the CustomOpCall, which inputs are present, which are auxiliary states
    (written back), and the outputs' declared shapes and dtypes."""

    def __init__(self, call: "CustomOpCall", count: int, present: list[int], state: list[int], floating: list[int],
                 shapes: list[tuple[int, ...]], dtypes: list[np.dtype], state_shapes: list[tuple[int, ...]],
                 state_dtypes: list[np.dtype]) -> None:
        self.call, self.count, self.present, self.state, self.floating = call, count, present, state, floating
        self.shapes, self.dtypes = shapes, dtypes
        self.state_shapes, self.state_dtypes = state_shapes, state_dtypes
        self.arguments = [i for i in present if i not in state]
        self.stash: dict[str, Any] = {}


def _read(array: mx.nd.NDArray) -> np.ndarray:
    """An NDArray's values as NumPy, through DLPack without a copy where MXNet allows it."""
    try:
        capsule = array.to_dlpack_for_read()
        return np.from_dlpack(_Capsule(capsule))
    except Exception:  # noqa: BLE001 -- an MXNet or NumPy without the DLPack path: one copy
        return to_numpy(array)


class _Capsule:
    """NDArray has no ``__dlpack__``: this gives NumPy's ``from_dlpack`` the capsule MXNet made (CPU memory)."""

    def __init__(self, capsule: Any) -> None:
        self.capsule = capsule

    def __dlpack__(self, stream: Any = None) -> Any:
        return self.capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)


class _BridgeOp(mx.operator.CustomOp):
    def __init__(self, use: _Use) -> None:
        super().__init__()
        self.use = use

    def forward(self, is_train, req, in_data, out_data, aux):
        use = self.use
        op = use.call.op
        op.training = use.call.training
        full: list[Any] = [None] * use.count
        for index, array in zip(use.arguments, in_data):
            full[index] = _read(array)
        for index, array in zip(use.state, aux):
            full[index] = to_numpy(array)  # copied: the op may keep it, and MXNet writes it below
        results = bridge_forward(op, full, [i in use.floating for i in range(use.count)])
        use.stash["arrays"], use.stash["results"] = full, results
        for out, kind, result, dtype in zip(out_data, req, results, use.dtypes):
            self.assign(out, kind, to_ndarray(np.asarray(result, dtype=dtype)))
        if op.training:
            updates = op.state_updates()
            for position, index in enumerate(use.state):
                if index in updates:
                    value = np.asarray(updates[index], dtype=full[index].dtype)
                    self.assign(aux[position], "write", to_ndarray(value))

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        use = self.use
        grads = [to_numpy(g) for g in out_grad]
        found = bridge_backward(use.call.op, grads, use.stash["arrays"], use.stash["results"])
        for grad, kind, index in zip(in_grad, req, use.arguments):
            if kind == "null":
                continue
            array = use.stash["arrays"][index]
            value = np.zeros_like(array) if found[index] is None else np.asarray(found[index], dtype=array.dtype)
            self.assign(grad, kind, to_ndarray(value))


@mx.operator.register("d5_bridge")
class _BridgeProp(mx.operator.CustomOpProp):
    def __init__(self, key: str) -> None:
        super().__init__(need_top_grad=True)
        self.use = _USES[key]

    def list_arguments(self):
        return [f"in{i}" for i in self.use.arguments]

    def list_auxiliary_states(self):
        return [f"state{i}" for i in self.use.state]

    def list_outputs(self):
        return [f"out{k}" for k in range(len(self.use.shapes))]

    def infer_shape(self, in_shape):
        return in_shape, [list(s) for s in self.use.shapes], [list(s) for s in self.use.state_shapes]

    def infer_type(self, in_type):
        # MXNet's table is keyed by NumPy scalar types (np.float32), not dtype instances
        return in_type, [d.type for d in self.use.dtypes], [d.type for d in self.use.state_dtypes]

    def create_operator(self, ctx, shapes, dtypes):
        return _BridgeOp(self.use)


class CustomOpCall:
    """A d5 CustomOp as an MXNet computation (see the module docstring): called with symbols, NumPy values and
    None while the executor composes a graph (one ``mx.sym.Custom`` node); :meth:`eager` runs it at once on
    NDArrays. ``state_inputs`` (set by the executor in training) are the positions of running statistics: MXNet
    auxiliary states the op writes back. ``node``/``opset`` (set by the executor) let ONNX's shape inference declare
    the outputs."""

    def __init__(self, op: CustomOp) -> None:
        self.op = op
        self.training = False
        self.node_output_count: int | None = None
        self.state_inputs: list[int] = []
        self.node: Any = None
        self.opset: int | None = None

    def __repr__(self) -> str:
        return f"custom_op({type(self.op).__name__})"

    def __call__(self, *inputs: Any) -> Any:
        count = len(inputs)
        present = [i for i, x in enumerate(inputs) if x is not None]
        floating = [i for i in present if dtype_of(inputs[i]).kind == "f"]
        state = [i for i in self.state_inputs if i in present]
        shapes, dtypes = self._declared(inputs)
        if not all(holds(np.dtype(d)) for d in dtypes):  # e.g. a uint16 output: values, node by node
            raise ValueNeededWhileTracing(f"the MXNet framework cannot hold the outputs ({[np.dtype(d).name for d in dtypes]}) "
                                          "of this operator in a graph (as a value known while tracing)")
        symbols = {i: as_symbol(inputs[i]) for i in present}
        use = _Use(self, count, present, state, floating, shapes, dtypes,
                   [shape_of(inputs[i]) for i in state], [dtype_of(inputs[i]) for i in state])
        key = str(next(_KEYS))
        _USES[key] = use
        ordered = [symbols[i] for i in use.arguments] + [symbols[i] for i in state]
        result = mx.sym.Custom(*ordered, op_type="d5_bridge", key=key)
        outputs = [result[k] for k in range(len(shapes))] if len(shapes) > 1 else [result]
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    # ------------------------------------------------------------------ declared outputs
    def _declared(self, inputs: tuple[Any, ...]) -> tuple[list[tuple[int, ...]], list[np.dtype]]:
        """The outputs' static shapes and dtypes (module docstring)."""
        if isinstance(self.op, CppOp):
            tensors = [x for x in inputs if x is not None]
            dtype = np.dtype(self.op.element_type([dtype_of(t).name for t in tensors]))
            shapes = self.op.output_shapes([list(shape_of(t)) for t in tensors], dtype.name)
            return [tuple(s) for s in shapes], [dtype] * len(shapes)
        if self.node is not None and not type(self.op).__module__.startswith("d5.frameworks.mxnet"):
            inferred = _node_inference(self.node, self.opset, inputs)
            if inferred is not None:
                return inferred
            if type(self.op).__module__.startswith("d5.frameworks.reference"):
                raise ValueNeededWhileTracing(f"the MXNet framework cannot tell the output shapes of {self.node.op_type!r} "
                                              "before the graph runs (as a value known while tracing)")
        zeros = [None if x is None else x if not isinstance(x, Symbol) else np.zeros(shape_of(x), dtype_of(x))
                 for x in inputs]
        op = self.op
        op.training = False
        results = [np.asarray(r) for r in bridge_forward(op, zeros, [False] * len(zeros))]
        if not all(holds(r.dtype) for r in results):
            raise ValueNeededWhileTracing("the MXNet framework cannot hold this operator's outputs in a graph (as a "
                                          "value known while tracing)")
        return [r.shape for r in results], [r.dtype for r in results]

    # ------------------------------------------------------------------ node by node
    def eager(self, inputs: list[Any]) -> list[Any]:
        """Run the op at once on NDArrays, NumPy values and None (the executor's node-by-node runs); its gradient is
        recorded when autograd records and every output is a tensor MXNet holds."""
        op = self.op
        op.training = self.training
        arrays = [as_numpy_value(x) for x in inputs]
        floating = [i for i, x in enumerate(inputs) if isinstance(x, mx.nd.NDArray) and np.dtype(x.dtype).kind == "f"]
        results = bridge_forward(op, arrays, [i in floating for i in range(len(inputs))])
        if op.training:
            for index, value in op.state_updates().items():
                if isinstance(inputs[index], mx.nd.NDArray):
                    inputs[index]._sync_copyfrom(np.ascontiguousarray(value, dtype=arrays[index].dtype))
        held = all(isinstance(r, np.ndarray) and holds(r.dtype) for r in results)
        if not held or not floating or not mx.autograd.is_recording():
            return [as_mx_value(r) if isinstance(r, np.ndarray) and holds(r.dtype) else r for r in results]
        function = _Recorded(op, arrays, results, floating)
        outputs = function(*[inputs[i] for i in floating])
        return [outputs] if isinstance(outputs, mx.nd.NDArray) else list(outputs)


class _Recorded(mx.autograd.Function):
    """An already computed custom op as a node of MXNet's autograd tape (node-by-node runs)."""

    def __init__(self, op: CustomOp, arrays: list[Any], results: list[np.ndarray], floating: list[int]) -> None:
        super().__init__()
        self.op, self.arrays, self.results, self.floating = op, arrays, results, floating

    def forward(self, *tensors):
        outputs = [to_ndarray(r) for r in self.results]
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def backward(self, *grads):
        found = bridge_backward(self.op, [to_numpy(g) for g in grads], self.arrays, self.results)
        values = [to_ndarray(np.zeros_like(self.arrays[i]) if found[i] is None else
                              np.asarray(found[i], dtype=self.arrays[i].dtype))
                  for i in self.floating]
        return values[0] if len(values) == 1 else tuple(values)


def _node_inference(node: Any, opset: int | None, inputs: tuple[Any, ...]
                    ) -> tuple[list[tuple[int, ...]], list[np.dtype]] | None:
    """ONNX shape inference of ``node`` alone, its inputs typed with their static shapes (constant inputs as
    initializers): the outputs' shapes and dtypes when every dimension is known, else None."""
    import onnx
    from onnx import helper, numpy_helper

    from d5.network.onnx_export import node_to_proto

    try:
        proto = node_to_proto(node, opset)
        names = list(proto.input)
        graph_inputs, initializers = [], []
        for name, value in zip(names, inputs):
            if not name or value is None:
                continue
            if isinstance(value, Symbol):
                graph_inputs.append(helper.make_tensor_value_info(
                    name, helper.np_dtype_to_tensor_dtype(dtype_of(value)), list(shape_of(value))))
            else:
                initializers.append(numpy_helper.from_array(np.asarray(value), name))
        outputs = [helper.make_tensor_value_info(name, onnx.TensorProto.UNDEFINED, None) for name in proto.output
                   if name]
        graph = helper.make_graph([proto], "node", graph_inputs, outputs, initializers)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset or 21)])
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
    except Exception:  # noqa: BLE001 -- inference is a hint: no schema (d5's own operators), or it fails
        return None
    found = {info.name: info for info in inferred.graph.output}
    found.update((info.name, info) for info in inferred.graph.value_info)
    shapes, dtypes = [], []
    for name in proto.output:
        info = found.get(name)
        if not name or info is None or not info.type.tensor_type.HasField("shape"):
            return None
        dims = info.type.tensor_type.shape.dim
        if not all(d.HasField("dim_value") for d in dims) or not info.type.tensor_type.elem_type:
            return None
        shapes.append(tuple(d.dim_value for d in dims))
        dtypes.append(np.dtype(helper.tensor_dtype_to_np_dtype(info.type.tensor_type.elem_type)))
    count = len(shapes)
    return (shapes, dtypes) if count else None


def custom_op(op: CustomOp) -> CustomOpCall:
    """``op`` as an MXNet computation with a gradient (see the module docstring and :class:`CustomOpCall`).

    >>> import numpy as np, mxnet as mx
    >>> from d5.ops import CustomPythonOp
    >>> class IPowOp(CustomPythonOp):
    ...     def __init__(self, power):
    ...         super().__init__()
    ...         self.power = power
    ...     def forward(self, inputs):
    ...         return inputs[0] ** self.power
    ...     def backward(self, grads, fwd_inputs, fwd_outputs):
    ...         return grads[0] * self.power * fwd_inputs[0] ** (self.power - 1)
    >>> x = mx.nd.array([1.0, 2.0])
    >>> x.attach_grad()
    >>> with mx.autograd.record():
    ...     (y,) = custom_op(IPowOp(3)).eager([x])
    >>> y.backward()
    >>> y.asnumpy().tolist(), x.grad.asnumpy().tolist()
    ([1.0, 8.0], [3.0, 12.0])
    """
    check_custom_op(op, "mxnet")
    return CustomOpCall(op)


class NativeOp(bridge.NativeOp):
    """An MXNet converter of an ONNX operator (``operators/``) as a d5 CustomOp, NumPy in and out (see
    :class:`d5.frameworks.bridge.NativeOp`): forward runs the converter's graph on NDArrays, backward is
    ``mx.autograd``'s gradient of the same computation. Floating inputs enter as NDArray copies, so running
    statistics MXNet updates in place come back through ``state_updates``."""

    def create(self, op_type: str, attributes: dict[str, Any], opset: int | None) -> MXOp:
        return create_operator(op_type, attributes, opset)

    def _call(self, inputs: list[Any], wanted: list[bool] | None = None) -> tuple[list[Any], list[Any]]:
        from d5.frameworks.mxnet.executor import evaluate

        self.module.training = self.training
        self.module.node_output_count = self.node_output_count
        by_value = getattr(self.module, "value_inputs", ())
        values = [as_mx_value(x) if isinstance(x, np.ndarray) and x.dtype.kind == "f" and holds(x.dtype)
                  and i not in by_value else x for i, x in enumerate(inputs)]
        with mx.util.np_shape(True):  # 0-d inputs too
            if wanted is not None:
                for value, want in zip(values, wanted):
                    if want and isinstance(value, mx.nd.NDArray):
                        value.attach_grad()
            if wanted is None and not self.training:
                return values, evaluate(self.module, values, self.module.opset or 21)
            # train_mode always: converters choose their mode themselves (``training``), and oneDNN's pooling
            # backward needs the workspace only a training-mode forward keeps
            with mx.autograd.record(train_mode=True):
                return values, evaluate(self.module, values, self.module.opset or 21)

    def run(self, inputs: list[Any]) -> tuple[list[Any], tuple[Any, ...]]:
        values, outputs = self._call(inputs)
        return [as_numpy_value(v) for v in values], tuple(as_numpy_value(o) for o in outputs)

    def input_gradients(self, inputs: list[Any], wanted: list[bool], grads: Any) -> list[Any]:
        values, outputs = self._call(inputs, wanted)
        heads, head_grads = [], []
        for output, grad in zip(outputs, grads):
            if isinstance(output, mx.nd.NDArray) and np.dtype(output.dtype).kind == "f" and grad is not None:
                heads.append(output)
                head_grads.append(to_ndarray(np.asarray(grad)))
        sources = [v for v, w in zip(values, wanted) if w and isinstance(v, mx.nd.NDArray)]
        if heads and sources:
            with mx.util.np_shape(True):
                mx.autograd.backward(heads, head_grads)
        result = []
        for value, want in zip(values, wanted):
            if want and isinstance(value, mx.nd.NDArray):
                result.append(to_numpy(value.grad) if value.grad is not None and heads else
                              np.zeros(value.shape, np.dtype(value.dtype)))
            else:
                result.append(None)
        return result


def native_op(op_type: str, opset: int | None = None, **attributes: Any) -> NativeOp:
    """MXNet's own implementation of ONNX operator ``op_type`` (with these attributes, at ``opset``) as a d5
    CustomOp, for validating and timing it against other frameworks' (see :class:`NativeOp`).

    >>> import numpy as np
    >>> op = native_op("Relu")
    >>> op.forward([np.array([-1.0, 2.0], np.float32)]).tolist()
    [0.0, 2.0]
    """
    return NativeOp(op_type, attributes, opset)


__all__ = ["CustomOpCall", "NativeOp", "custom_op", "native_op"]
