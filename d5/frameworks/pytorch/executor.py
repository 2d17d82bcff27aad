"""The PyTorch GraphExecutor: a d5.Network as a generated ``torch.fx.GraphModule`` over native torch tensors.

Each ONNX node becomes a call of its converter (``operators/``, an ``nn.Module`` built from the node's
attributes at the node's opset); a node no converter maps runs the reference framework's operator through the
custom-op bridge (``custom_op.py``), with a warning naming the operators (``strict=True`` refuses them). The
parameters are the live state (:class:`TorchLiveNetwork`): trainable ones are ``torch.nn.Parameter`` s whose
``.grad`` autograd fills, the others (running statistics) plain tensors the converters update in place. They
are passed to the generated module on every call, so a value an optimizer feeds is read by the next pass.
"""
from __future__ import annotations

import operator
import warnings
from typing import Any

import numpy as np
import torch
import torch.fx

from d5.errors import D5Error, GraphError, UnsupportedOperatorError
from d5.frameworks.base import FrameworkExecutor
from d5.frameworks.pytorch.custom_op import CustomOpModule, custom_op
from d5.frameworks.pytorch.operators import create_operator
from d5.network.executor import LiveNetwork
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
    executor calls it directly with the node's tensor inputs, and its parameters are the live state."""

    def __init__(self, module: Any) -> None:
        super().__init__()
        self.module = module

    def forward(self, inputs):
        raise D5Error(f"{type(self.module).__name__} is a torch module: run this network on the pytorch framework")


class _NativeCall(torch.nn.Module):
    """Calls a native module on the node's inputs (its parameters are its own: the live state holds them)."""

    def __init__(self, module: Any, arity: int) -> None:
        super().__init__()
        self.module = module  # an nn.Module becomes a submodule, so train()/eval() reach it
        self.arity = arity

    def forward(self, *inputs: torch.Tensor) -> Any:
        return self.module(*inputs[:self.arity])


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
            (torch.nn.Parameter(_to_torch(value, device)) if graph.is_trainable(name) else _to_torch(value, device))
            for name, value in graph.params.items()}

    def parameters(self) -> list[torch.nn.Parameter]:
        """The trainable parameters, in ``get_params()`` order (what torch optimizers take)."""
        return [self.param_values[name] for name in self.get_params()]

    def as_numpy(self, value: torch.Tensor) -> np.ndarray:
        return _to_numpy(value)

    def feed_tensor(self, name: str, value: Any, is_param: bool = False) -> None:
        require_name(name, "tensor name")
        current = self.param_values.get(name)
        if current is not None:
            if isinstance(value, torch.Tensor):
                if tuple(value.shape) != tuple(current.shape):
                    like_param(name, np.empty(tuple(value.shape)), np.empty(tuple(current.shape)))  # the ShapeError
                source = value
            else:
                source = torch.from_numpy(np.ascontiguousarray(like_param(name, value, _to_numpy(current))))
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
        super().__init__(network, device)
        self.fallback_operators: list[str] = []
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
        self._modules: dict[frozenset, tuple[torch.nn.Module, list[str], list[str]]] = {}

    def make_live_network(self, graph: Network) -> TorchLiveNetwork:
        return TorchLiveNetwork(graph, self._device)

    def _make_op(self, node: Node, strict: bool) -> torch.nn.Module:
        if isinstance(node.custom_op, NativeModuleOp):
            return _NativeCall(node.custom_op.module, len(node.inputs))
        if node.custom_op is not None:
            return custom_op(node.custom_op)
        try:
            return create_operator(node.op_type, node.attrs, self.graph.opset)
        except UnsupportedOperatorError:
            if strict:
                raise UnsupportedOperatorError(f"node {node.name!r}: the pytorch framework has no native mapping of "
                                               f"{node.op_type!r} (strict=True refuses the reference fallback)") from None
        from d5.frameworks.reference.operators import create_operator as reference_operator

        try:
            op = reference_operator(node.op_type, node.attrs, self.graph.opset)
        except UnsupportedOperatorError as err:
            raise UnsupportedOperatorError(f"node {node.name!r}: neither torch nor the reference framework implements "
                                           f"{node.op_type!r} ({err})") from None
        self.fallback_operators.append(node.op_type)
        return custom_op(op)

    # ------------------------------------------------------------------ the generated module
    def _module(self, fed: frozenset) -> tuple[torch.nn.Module, list[str], list[str]]:
        cached = self._modules.get(fed)
        if cached is None:
            cached = self._modules[fed] = self._build(fed)
        return cached

    def _build(self, fed: frozenset) -> tuple[torch.nn.Module, list[str], list[str]]:
        """A GraphModule computing every graph output the fed inputs determine: ``forward(*inputs, *params)``."""
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
            result = graph.call_module(f"ops.{key}", tuple(env[t] if t else None for t in names))
            outputs = [o for o in node.outputs]
            if len(outputs) == 1:
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
        if self._compile:
            module = torch.compile(module)
        return module, inputs, outputs

    def _run(self, feeds: dict[str, Any], training: bool):
        module, inputs, outputs = self._module(frozenset(feeds))
        self._ops.train(training)
        args = [_to_torch(feeds[name], self._device) for name in inputs]
        live = self.network.param_values
        values = module(*args, *[live[name] for name in self.graph.params])
        return dict(zip(outputs, values))

    # ------------------------------------------------------------------ passes
    def run_inference(self, feeds: dict[str, Any]) -> dict[str, np.ndarray]:
        with torch.no_grad():
            values = self._run(feeds, training=False)
        return {name: _to_numpy(value) for name, value in values.items()}

    def run_training(self, feeds: dict[str, Any], y: str) -> dict[str, np.ndarray]:
        params = self.network.parameters()
        for param in params:
            param.grad = None  # autograd allocates fresh gradients; the last pass's stay valid for their holders
        values = self._run(feeds, training=True)
        loss = values.get(y)
        if loss is None:
            raise GraphError(f"cannot differentiate {y!r}: it is not a graph output computed from the given inputs "
                             f"({sorted(values)})")
        if loss.requires_grad:
            loss.backward(torch.ones_like(loss))
        tensors = {name: value.detach() for name, value in values.items()}
        for name, param in zip(self.graph.get_params(), params):
            if param.grad is None:  # y does not depend on it: a zero gradient, as on every framework (and torch
                param.grad = torch.zeros_like(param)  # optimizers then decay it like the reference's do)
            tensors[gradient_name(name)] = param.grad
        self.network.set_pass_tensors(tensors)
        return {name: _to_numpy(value) for name, value in tensors.items() if name in values}


def _first(result: Any) -> Any:
    """The first output of a converter that may return one tensor or a tuple."""
    return result[0] if isinstance(result, (tuple, list)) else result


def _to_torch(value: Any, device: torch.device) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value.to(device)
    array = np.asarray(value)
    if array.dtype.kind not in "biuf":
        raise D5Error(f"the pytorch framework takes numeric tensors; got dtype {array.dtype}")
    return torch.from_numpy(np.ascontiguousarray(array)).to(device)


def _to_numpy(value: torch.Tensor) -> np.ndarray:
    value = value.detach()
    return value.numpy() if value.device.type == "cpu" else value.cpu().numpy()
