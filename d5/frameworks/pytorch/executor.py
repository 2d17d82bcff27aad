"""The PyTorch GraphExecutor: a d5.Network as a generated ``torch.fx.GraphModule`` over native torch tensors.

Each ONNX node becomes a call of its converter (``operators/``, an ``nn.Module`` built from the node's
attributes at the node's opset); a node no converter maps runs the reference framework's operator through the
custom-op bridge (``custom_op.py``), with a warning naming the operators (``strict=True`` refuses them). The
parameters are the live state (:class:`TorchLiveNetwork`): trainable ones are ``torch.nn.Parameter`` s whose
``.grad`` autograd fills, the others (running statistics) plain tensors the converters update in place. They
are passed to the generated module on every call, so a value an optimizer feeds is read by the next pass.
"""
from __future__ import annotations

import functools
import inspect
import operator
import warnings
from typing import Any

import numpy as np
import torch
import torch.fx

from d5.errors import D5Error, GraphError, OperatorError, ShapeError, UnsupportedOperatorError
from d5.frameworks.allocator import keep_freed_memory
from d5.frameworks.base import FrameworkExecutor
from d5.frameworks.placement import nodes_on_reference
from d5.frameworks.pytorch.custom_op import CustomOpModule, custom_op
from d5.frameworks.pytorch.operators import TorchOp, create_operator
from d5.network.executor import LiveNetwork
from d5.network.operator_errors import operator_failure
from d5.network.graph import Network, Node, gradient_name, like_param, node_captures, require_name
from d5.ops.operator import CustomOp


class FallbackWarning(UserWarning):
    """Some operators of a network run on the reference framework through the custom-op bridge."""


def torch_device(device: Any) -> torch.device:
    """The torch device for a d5 device (None: the CPU); a GPU this machine lacks is a d5 error."""
    if device is None or not getattr(device, "is_gpu", False):
        return torch.device("cpu")
    if not torch.cuda.is_available() or device.index >= torch.cuda.device_count():
        raise D5Error(f"{device!r}: this machine has {torch.cuda.device_count()} CUDA GPU(s) torch can use; run on "
                      "the CPU with device=None or d5.CPUDevice()")
    return torch.device("cuda", device.index)


class NativeModuleOp(CustomOp):
    """Marks a graph node computed by a user's ``torch.nn.Module`` (or a torch loss function): the pytorch
    executor calls it directly with the node's tensor inputs, and its parameters are the live state.
    ``loss_of`` is, for a loss, the module whose output it takes (named when the two do not fit)."""

    def __init__(self, module: Any, loss_of: Any = None) -> None:
        super().__init__()
        self.module = module
        self.loss_of = loss_of

    def forward(self, inputs):
        raise D5Error(f"{type(self.module).__name__} is a torch module: run this network on the pytorch framework")


class _NativeCall(torch.nn.Module):
    """Calls a native module on the node's inputs (its parameters are its own: the live state holds them)."""

    def __init__(self, module: Any, arity: int, loss_of: Any = None) -> None:
        super().__init__()
        self.module = module  # an nn.Module becomes a submodule, so train()/eval() reach it
        self.arity = arity
        self.loss_of = loss_of

    def forward(self, *inputs: torch.Tensor) -> Any:
        if self.loss_of is None:
            return self.module(*inputs[:self.arity])
        try:
            return self.module(*inputs[:self.arity])
        except Exception as err:  # torch's message names neither the model nor the loss
            output, label = (_describe_value(v) for v in inputs[:2])
            raise ShapeError(f"from_native: the output of {_name(self.loss_of)} ({output}) does not fit the loss "
                             f"{_name(self.module)} with label {label}: {str(err).splitlines()[0] if str(err) else type(err).__name__}. "
                             "Make the model output what the loss takes (e.g. (N, classes) logits and (N,) int64 "
                             "class labels for CrossEntropyLoss), or pick another loss") from err


def _arguments(frame: Any) -> list[Any]:
    """The positional arguments a frame's function was called with (after self), as its locals hold them now."""
    code = frame.f_code
    values = [frame.f_locals.get(name) for name in code.co_varnames[1:code.co_argcount]]
    if code.co_flags & inspect.CO_VARARGS:
        values += list(frame.f_locals.get(code.co_varnames[code.co_argcount + code.co_kwonlyargcount], ()))
    return values


def _name(module: Any) -> str:
    return type(module).__name__ if isinstance(module, torch.nn.Module) else getattr(module, "__name__", repr(module))


def _describe_value(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"shape {tuple(value.shape)}, {str(value.dtype).replace('torch.', '')}"
    return type(value).__name__


def native_tensors(graph: Network) -> dict[str, torch.Tensor]:
    """The parameters and buffers of the native modules in ``graph``, by the names the graph gives them."""
    tensors: dict[str, torch.Tensor] = {}
    for node in graph.nodes:
        module = getattr(node.custom_op, "module", None)
        if isinstance(node.custom_op, NativeModuleOp) and isinstance(module, torch.nn.Module):
            tensors.update(module.named_parameters())
            tensors.update(module.named_buffers())
    return tensors


class TorchLiveNetwork(LiveNetwork):
    """The PyTorch framework's live state: parameters as torch tensors on the executor's device.

    ``fetch_tensors`` returns zero-copy NumPy views of CPU tensors (host copies of GPU ones); ``feed_tensor``
    accepts NumPy arrays and torch tensors and copies the value into the parameter (one copy, in place, so
    torch optimizers holding the parameter keep seeing it)."""

    def __init__(self, graph: Network, device: torch.device) -> None:
        super().__init__(graph)
        self.device = device
        #: Current parameter values: ``nn.Parameter`` for trainable ones, plain tensors for the others.
        native = native_tensors(graph)  # a user's module keeps its own tensors
        self.param_values: dict[str, torch.Tensor] = {
            name: native[name] if name in native else
            (torch.nn.Parameter(_owned(_to_torch(value, device))) if graph.is_trainable(name)
             else _owned(as_module_value(value, device)))
            for name, value in graph.params.items()}
        self._trainable: tuple[int, list[str], list[torch.nn.Parameter]] | None = None

    def parameters(self) -> list[torch.nn.Parameter]:
        """The trainable parameters, in ``get_params()`` order (what torch optimizers take)."""
        return list(self.trainable()[1])

    def trainable(self) -> tuple[list[str], list[torch.nn.Parameter]]:
        """The gradient names and the tensors of the trainable parameters, in ``get_params()`` order; computed
        once per edit of the graph (a training step reads them)."""
        if self._trainable is None or self._trainable[0] != self.graph.version:
            names = self.get_params()
            self._trainable = (self.graph.version, [gradient_name(name) for name in names],
                               [self.param_values[name] for name in names])
        return self._trainable[1], self._trainable[2]

    def as_numpy(self, value: Any) -> Any:
        return as_numpy_value(value)

    def feed_tensor(self, name: str, value: Any, is_param: bool = False) -> None:
        require_name(name, "tensor name")
        current = self.param_values.get(name)
        if current is not None and not isinstance(current, torch.Tensor):  # a value torch cannot hold (strings...)
            self.param_values[name] = like_param(name, value, current)
        elif current is not None:
            if isinstance(value, torch.Tensor):
                if tuple(value.shape) != tuple(current.shape):
                    like_param(name, np.empty(tuple(value.shape)), np.empty(tuple(current.shape)))  # the ShapeError
                source = value
            else:
                source = as_module_value(like_param(name, value, _to_numpy(current)), current.device)
            with torch.no_grad():
                current.copy_(source)
        elif is_param:
            self.graph.add_param(name, _to_numpy(value) if isinstance(value, torch.Tensor) else value)
            self.param_values[name] = torch.nn.Parameter(_to_torch(self.graph.params[name], self.device))
        else:
            self._pass[name] = value if isinstance(value, torch.Tensor) else torch.as_tensor(np.asarray(value))


class PyTorchGraphExecutor(FrameworkExecutor):
    """Runs a copy of ``network`` (``executor.graph``) with native torch operators; see the module docstring."""

    def __init__(self, network: Network, device: Any = None, strict: bool = False, compile: bool = False) -> None:
        self._device = torch_device(device)
        keep_freed_memory()  # a step's tensors are reused, not returned to the OS and faulted in again
        super().__init__(network, device)
        self.fallback_operators: list[str] = []
        #: Nodes touching values torch cannot hold (strings, sequences, int4...): the reference runs them.
        self._on_reference = nodes_on_reference(self.graph, holds)
        self._ops = torch.nn.ModuleDict()
        self._steps: list[tuple[Node, str, list[str]]] = []
        for index, node in enumerate(self.graph.topological_order()):
            key = f"n{index}"
            op = self._ops[key] = self._make_op(node, strict)
            op.node_output_count = len(node.outputs)
            if isinstance(op, CustomOpModule):
                op.op.node_output_count = len(node.outputs)
            self._steps.append((node, key, [t for t in node.inputs] + node_captures(node)))
        if self.fallback_operators:
            warnings.warn(f"d5 pytorch framework: operators {sorted(set(self.fallback_operators))} have no native torch "
                          "mapping and run on the reference framework through the custom-op bridge", FallbackWarning,
                          stacklevel=3)
        self._compile = bool(compile)
        self._training = self._ops.training
        self._modules: dict[frozenset, tuple[torch.nn.Module, list[str], list[str], list[str]]] = {}

    def make_live_network(self, graph: Network) -> TorchLiveNetwork:
        return TorchLiveNetwork(graph, self._device)

    def operators(self) -> dict[str, torch.nn.Module]:
        return {node.name: self._ops[key] for node, key, _ in self._steps}

    def random_state(self) -> dict[str, Any]:
        """The operators' seeded generators and torch's global CPU generator (unseeded Dropout draws from it)."""
        return {**super().random_state(), "torch": torch.get_rng_state().numpy()}

    def set_random_state(self, state: Any) -> None:
        super().set_random_state(state)
        if isinstance(state, dict) and state.get("torch") is not None:
            torch.set_rng_state(torch.from_numpy(np.asarray(state["torch"], dtype=np.uint8).copy()))

    def _make_op(self, node: Node, strict: bool) -> torch.nn.Module:
        if isinstance(node.custom_op, NativeModuleOp):
            return _NativeCall(node.custom_op.module, len(node.inputs), node.custom_op.loss_of)
        if node.custom_op is not None:
            return custom_op(node.custom_op)
        foreign = self._on_reference.get(node.name)
        if foreign is None:
            try:
                return create_operator(node.op_type, node.attrs, self.graph.opset)
            except UnsupportedOperatorError:
                why = f"has no native mapping of {node.op_type!r}"
        else:
            why = f"cannot hold the values of {node.op_type!r} ({foreign})"
        if strict:
            raise UnsupportedOperatorError(f"node {node.name!r}: the pytorch framework {why} (strict=True refuses "
                                           "the reference fallback)") from None
        from d5.frameworks.reference.operators import create_operator as reference_operator

        try:
            op = reference_operator(node.op_type, node.attrs, self.graph.opset)
        except UnsupportedOperatorError as err:
            raise UnsupportedOperatorError(f"node {node.name!r}: neither torch nor the reference framework implements "
                                           f"{node.op_type!r} ({err})") from None
        prepare = getattr(op, "prepare_subgraphs", None)
        if prepare is not None:  # control flow: its bodies run on the reference too
            from d5.frameworks.reference.executor import ReferenceGraphExecutor

            prepare(ReferenceGraphExecutor)
        self.fallback_operators.append(node.op_type)
        return custom_op(op)

    # ------------------------------------------------------------------ the generated module
    def _module(self, fed: frozenset) -> tuple[torch.nn.Module, list[str], list[str], list[str]]:
        cached = self._modules.get(fed)
        if cached is None:
            cached = self._modules[fed] = self._build(fed)
        return cached

    def _build(self, fed: frozenset) -> tuple[torch.nn.Module, list[str], list[str], list[str]]:
        """A GraphModule computing every graph output the fed inputs determine: ``forward(*inputs, *params)``,
        with the names of its inputs, outputs and parameters."""
        graph = torch.fx.Graph()
        env: dict[str, torch.fx.Node] = {}
        inputs = [name for name in self.graph.inputs if name in fed]
        for index, name in enumerate(inputs):
            env[name] = graph.placeholder(f"input_{index}")
        params = list(self.graph.params)
        for index, name in enumerate(params):
            env[name] = graph.placeholder(f"param_{index}")
        for node, key, names in self._steps:
            if not all(not t or t in env for t in names):
                continue
            # The converter's bound forward, called directly (a global of the generated code): nn.Module.__call__'s
            # hook machinery and two attribute lookups per node cost a small network's step a few percent, and d5's
            # converters have no hooks (a user's module, called inside _NativeCall, keeps its own).
            op = self._ops[key]
            result = graph.call_function(op.forward, tuple(env[t] if t else None for t in names))
            outputs = [o for o in node.outputs]
            if len(outputs) == 1 and isinstance(op, TorchOp) and _single_output(node, self.graph.opset):
                env[outputs[0]] = result  # a converter of a one-output operator returns a tensor
            elif len(outputs) == 1:
                env[outputs[0]] = graph.call_function(_first, (result,))
            else:
                for position, name in enumerate(outputs):
                    if name:
                        env[name] = graph.call_function(operator.getitem, (result, position))
        outputs = [name for name in self.graph.outputs if name in env]
        if not outputs:
            missing = [name for name in self.graph.inputs if name not in fed]
            raise GraphError(f"no graph output can be computed without inputs {missing}; provide them")
        graph.output(tuple(env[name] for name in outputs))
        root = torch.nn.Module()
        root.ops = self._ops
        module = torch.fx.GraphModule(root, graph)
        # The generated forward, called directly: nn.Module.__call__ and GraphModule's error-reporting wrapper
        # cost a small network's step about 1% (failures are d5 errors from self._failure anyway).
        call = torch.compile(module) if self._compile else module.forward
        return call, inputs, outputs, params

    def _run(self, feeds: dict[str, Any], training: bool):
        module, inputs, outputs, params = self._module(frozenset(feeds))
        if training != self._training:  # Module.train() walks every converter: only on a change of mode
            self._ops.train(training)
            self._training = training
        args = [as_module_value(feeds[name], self._device) for name in inputs]
        live = self.network.param_values
        try:
            values = module(*args, *[live[name] for name in params])
        except Exception as err:
            raise self._failure(err) from err
        return dict(zip(outputs, values))

    def _failure(self, err: Exception, phase: str = "") -> D5Error:
        """The backstop: ``err`` escaped the generated module (or autograd) as a d5 error naming the node whose
        converter raised it, found from the traceback (the converter's frame has it as ``self``)."""
        nodes = {id(self._ops[key]): node for node, key, _ in self._steps}
        failing, inputs = None, []
        trace = err.__traceback__
        while trace is not None:
            frame = trace.tb_frame
            if failing is None and "self" in frame.f_code.co_varnames and id(frame.f_locals.get("self")) in nodes:
                failing = nodes[id(frame.f_locals["self"])]  # the converter's forward: its arguments are the inputs
                inputs = [as_numpy_value(value) for value in _arguments(frame)]
            trace = trace.tb_next
        if failing is None:
            if isinstance(err, D5Error):
                return err
            return OperatorError(f"the pytorch framework's {phase or 'forward'} pass failed: {type(err).__name__}: "
                                 f"{str(err).splitlines()[0] if str(err) else ''}")
        return operator_failure(err, failing, inputs, self.graph.opset, phase)

    # ------------------------------------------------------------------ passes
    def run_inference(self, feeds: dict[str, Any]) -> dict[str, np.ndarray]:
        with torch.no_grad():
            values = self._run(feeds, training=False)
        return {name: as_numpy_value(value) for name, value in values.items()}

    def run_training(self, feeds: dict[str, Any], y: str) -> dict[str, np.ndarray]:
        # Python work between torch's kernels runs with cold caches (a step's tensors evict the interpreter's
        # data), at several times its warm cost: on a small network every lookup here shows in the step time.
        network = self.network
        names, params = network.trainable()
        # Let go of the last pass's tensors and gradients first, so their memory -- still hot in the caches -- is
        # what this pass allocates (autograd allocates fresh gradients; arrays fetched earlier keep theirs valid).
        network.set_pass_tensors({})
        for param in params:
            param.grad = None
        values = self._run(feeds, training=True)
        loss = values.get(y)
        if loss is None:
            raise GraphError(f"cannot differentiate {y!r}: it is not a graph output computed from the given inputs "
                             f"({sorted(values)})")
        if loss.requires_grad:
            try:
                loss.backward(None if loss.dim() == 0 else torch.ones_like(loss))
            except Exception as err:
                raise self._failure(err, "backward") from err
        outputs = {name: as_numpy_value(value) for name, value in values.items()}
        for name, param in zip(names, params):
            if param.grad is None:  # y does not depend on it: a zero gradient, as on every framework (and torch
                param.grad = torch.zeros_like(param)  # optimizers then decay it like the reference's do)
            values[name] = param.grad
        network.set_pass_tensors(values)  # outputs as autograd left them: fetches detach them
        return outputs


@functools.lru_cache(maxsize=None)
def _single_output_schema(op_type: str, domain: str, opset: int) -> bool:
    import onnx.defs

    try:
        return onnx.defs.get_schema(op_type, opset, domain).max_output == 1
    except onnx.defs.SchemaError:  # d5's own operators (ai.d5) have no ONNX schema
        return False


def _single_output(node: Node, opset: int) -> bool:
    """Whether ``node``'s ONNX operator has exactly one output (its converter then returns a tensor, not a tuple)."""
    return node.domain in ("", "ai.onnx") and _single_output_schema(node.op_type, node.domain, opset)


def _first(result: Any) -> Any:
    """The first output of a converter that may return one tensor or a tuple."""
    return result[0] if isinstance(result, (tuple, list)) else result


def holds(dtype: np.dtype) -> bool:
    """Whether torch holds and computes with tensors of NumPy ``dtype``; values of other types (strings, 4-bit
    integers, float8) stay NumPy, on the reference. (uint16..uint64, which torch stores but has few kernels
    for, are held: the converters compute them in a wider type.)

    >>> holds(np.dtype(np.float32)), holds(np.dtype(np.uint32)), holds(np.dtype(object))
    (True, True, False)
    """
    return dtype.kind in "biufc" or dtype.name == "bfloat16"


def _contiguous(array: np.ndarray) -> np.ndarray:
    # Not np.ascontiguousarray: with NumPy 1.x it turns a 0-d array into a 1-d one.
    return array if array.flags.c_contiguous else np.array(array, order="C")


def as_module_value(value: Any, device: torch.device) -> Any:
    """A value as the generated module takes it: a torch tensor, or, for what torch cannot hold (sequences,
    strings, int4, ...), the value itself, which only reference operators read."""
    if type(value) is np.ndarray and device.type == "cpu" and value.dtype.kind in "fiub" and value.flags.c_contiguous:
        return torch.from_numpy(value)  # the common case, first (uint16..64 included: torch holds them)
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if value is None or isinstance(value, list):
        return value
    array = np.asarray(value)
    if not holds(array.dtype):
        return array
    if array.dtype.name == "bfloat16":  # ml_dtypes' bfloat16: same bits as torch's
        return torch.from_numpy(_contiguous(array).view(np.int16)).view(torch.bfloat16).to(device)
    return torch.from_numpy(_contiguous(array)).to(device)


def as_numpy_value(value: Any) -> Any:
    """A module output as NumPy: tensors as arrays (zero-copy on the CPU), sequences element by element."""
    if isinstance(value, torch.Tensor):
        if value.is_cpu and value.dtype is not torch.bfloat16:  # the common case, first
            return value.detach().numpy()
        return _to_numpy(value)
    if isinstance(value, (list, tuple)):
        return [as_numpy_value(v) for v in value]
    return value


def _owned(value: Any) -> Any:
    """A CPU tensor in memory of torch's own (a copy of one viewing a NumPy array): torch aligns its blocks for
    its vector kernels, NumPy only to 16 bytes, and a step with misaligned weights was measurably slower."""
    if isinstance(value, torch.Tensor) and value.device.type == "cpu":
        return value.clone()
    return value


def _to_torch(value: Any, device: torch.device) -> torch.Tensor:
    converted = as_module_value(value, device)
    if not isinstance(converted, torch.Tensor):
        raise D5Error(f"the pytorch framework holds numeric tensors; got {type(value).__name__} of dtype "
                      f"{getattr(np.asarray(value), 'dtype', '?')}")
    return converted


def _to_numpy(value: torch.Tensor) -> np.ndarray:
    value = value.detach()
    if value.device.type != "cpu":
        value = value.cpu()
    if value.dtype == torch.bfloat16:
        import ml_dtypes

        return value.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return value.numpy()
