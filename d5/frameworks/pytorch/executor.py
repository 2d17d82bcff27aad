"""The PyTorch GraphExecutor: a d5.Network as a generated ``torch.fx.GraphModule`` over native torch tensors.

Each ONNX node becomes a call of its converter (``operators/``, an ``nn.Module`` built from the node's
attributes at the node's opset); what the shared layer (:mod:`d5.frameworks.native_executor`) does not run natively
goes through the custom-op bridge (``custom_op.py``). The parameters are the live state (:class:`TorchLiveNetwork`):
trainable ones are ``torch.nn.Parameter`` s whose ``.grad`` autograd fills, the others (running statistics) plain
tensors the converters update in place. They are passed to the generated module on every call, so a value an
optimizer feeds is read by the next pass.
"""
from __future__ import annotations

import operator
from typing import Any

import numpy as np
import torch
import torch.fx

from d5.frameworks.allocator import keep_freed_memory
from d5.frameworks.base import NativeModelOp, loss_mismatch
from d5.frameworks.native_executor import (FallbackWarning, NativeExecutor, NativeLiveNetwork, Reach,  # noqa: F401
                                           single_output)
from d5.frameworks.pytorch.custom_op import custom_op
from d5.frameworks.pytorch.operators import TorchOp, create_operator
from d5.errors import D5Error
from d5.frameworks.pytorch.tensors import as_module_value, as_numpy_value, holds, owned, to_numpy, torch_device
from d5.network.graph import Network, Node, like_param
from d5.ops.operator import CustomOp


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
            raise loss_mismatch(self.loss_of, self.module, *map(_describe_value, inputs[:2]), err) from err


def _describe_value(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"shape {tuple(value.shape)}, {str(value.dtype).replace('torch.', '')}"
    return type(value).__name__


def native_tensors(graph: Network) -> dict[str, torch.Tensor]:
    """The parameters and buffers of the native modules in ``graph``, by the names the graph gives them."""
    tensors: dict[str, torch.Tensor] = {}
    for node in graph.nodes:
        module = getattr(node.custom_op, "module", None)
        if isinstance(node.custom_op, NativeModelOp) and isinstance(module, torch.nn.Module):
            tensors.update(module.named_parameters())
            tensors.update(module.named_buffers())
    return tensors


class TorchLiveNetwork(NativeLiveNetwork):
    """The PyTorch framework's live state: parameters as torch tensors on the executor's device.

    ``fetch_tensors`` returns zero-copy NumPy views of CPU tensors (host copies of GPU ones); ``feed_tensor``
    accepts NumPy arrays and torch tensors and copies the value into the parameter (one copy, in place, so
    torch optimizers holding the parameter keep seeing it)."""

    def __init__(self, graph: Network, device: torch.device) -> None:
        super().__init__(graph)
        self.device = device
        native = native_tensors(graph)  # a user's module keeps its own tensors
        #: Current parameter values: ``nn.Parameter`` for trainable ones, plain tensors for the others.
        self.param_values: dict[str, Any] = {
            name: native[name] if name in native else
            (self.new_param(value) if graph.is_trainable(name) else owned(as_module_value(value, device)))
            for name, value in graph.params.items()}
        self._trainable: tuple[int, list[str], list[torch.nn.Parameter]] | None = None

    def trainable(self) -> tuple[list[str], list[torch.nn.Parameter]]:
        """The gradient names and the tensors of the trainable parameters (what torch optimizers take), in
        ``get_params()`` order; computed once per edit of the graph (a training step reads them)."""
        if self._trainable is None or self._trainable[0] != self.graph.version:
            names = self.get_params()
            self._trainable = (self.graph.version, [f"{name}_grad" for name in names],
                               [self.param_values[name] for name in names])
        return self._trainable[1], self._trainable[2]

    def as_numpy(self, value: Any) -> Any:
        return as_numpy_value(value)

    def assign(self, name: str, current: torch.Tensor, value: Any) -> None:
        if isinstance(value, torch.Tensor):
            if tuple(value.shape) != tuple(current.shape):
                like_param(name, np.empty(tuple(value.shape)), np.empty(tuple(current.shape)))  # the ShapeError
            source = value
        else:
            source = as_module_value(like_param(name, value, to_numpy(current)), current.device)
        with torch.no_grad():
            current.copy_(source)

    def new_param(self, value: Any) -> torch.nn.Parameter:
        tensor = as_module_value(value, self.device)
        if not isinstance(tensor, torch.Tensor):
            raise D5Error(f"the pytorch framework trains numeric tensors; got a parameter of dtype {value.dtype}")
        return torch.nn.Parameter(owned(tensor))

    def to_native(self, value: Any) -> Any:
        return value if isinstance(value, torch.Tensor) else torch.as_tensor(np.asarray(value))


class PyTorchGraphExecutor(NativeExecutor):
    """Runs a copy of ``network`` (``executor.graph``) with native torch operators; see the module docstring.
    ``compile=True`` wraps the generated module in ``torch.compile``."""

    framework = "pytorch"
    holds = staticmethod(holds)

    def __init__(self, network: Network, *, device: Any = None, fallback: Any = "reference",
                 compile: bool = False) -> None:
        self.check_device(device)
        self._device = torch_device(device)
        keep_freed_memory()  # a step's tensors are reused, not returned to the OS and faulted in again
        self._ops = torch.nn.ModuleDict()  # every converter, so train()/eval() reach them
        super().__init__(network, device=device, fallback=fallback)
        self._compile = bool(compile)
        self._training = self._ops.training

    def make_live_network(self, graph: Network) -> TorchLiveNetwork:
        return TorchLiveNetwork(graph, self._device)

    def native_operator(self, node: Node) -> torch.nn.Module:
        return self._register(create_operator(node.op_type, node.attrs, self.graph.opset))

    def bridge(self, op: CustomOp) -> torch.nn.Module:
        return self._register(custom_op(op))

    def custom_operator(self, node: Node) -> torch.nn.Module:
        if isinstance(node.custom_op, NativeModelOp):
            return self._register(_NativeCall(node.custom_op.module, len(node.inputs), node.custom_op.loss_of))
        return self.bridge(node.custom_op)

    def _register(self, module: torch.nn.Module) -> torch.nn.Module:
        self._ops[f"n{len(self._ops)}"] = module
        return module

    def random_state(self) -> dict[str, Any]:
        """The operators' seeded generators and torch's global CPU generator (unseeded Dropout draws from it)."""
        return {**super().random_state(), "torch": torch.get_rng_state().numpy()}

    def set_random_state(self, state: Any) -> None:
        super().set_random_state(state)
        if isinstance(state, dict) and state.get("torch") is not None:
            torch.set_rng_state(torch.from_numpy(np.asarray(state["torch"], dtype=np.uint8).copy()))

    # ------------------------------------------------------------------ the generated module
    def build_plan(self, reach: Reach, y: str | None) -> tuple[Any, list[str], list[str], list[str]]:
        """A GraphModule computing the graph outputs the fed inputs reach (and ``y``): ``forward(*inputs,
        *params)``, with the names of its inputs, outputs and parameters."""
        graph = torch.fx.Graph()
        env: dict[str, torch.fx.Node] = {}
        inputs = [name for name in self.graph.inputs if name not in reach.missing]
        for index, name in enumerate(inputs):
            env[name] = graph.placeholder(f"input_{index}")
        params = list(self.graph.params)
        for index, name in enumerate(params):
            env[name] = graph.placeholder(f"param_{index}")
        for step in reach.steps:
            node, op = step.node, step.op
            # The converter's bound forward, called directly (a global of the generated code): nn.Module.__call__'s
            # hook machinery and two attribute lookups per node cost a small network's step a few percent, and d5's
            # converters have no hooks (a user's module, called inside _NativeCall, keeps its own).
            result = graph.call_function(op.forward, tuple(env[t] if t else None for t in step.inputs))
            if len(node.outputs) == 1 and isinstance(op, TorchOp) and single_output(node, self.graph.opset):
                env[node.outputs[0]] = result  # a converter of a one-output operator returns a tensor
            elif len(node.outputs) == 1:
                env[node.outputs[0]] = graph.call_function(_first, (result,))
            else:
                for position, name in enumerate(node.outputs):
                    if name:
                        env[name] = graph.call_function(operator.getitem, (result, position))
        outputs = reach.outputs + ([y] if y is not None and y not in reach.outputs else [])
        graph.output(tuple(env[name] for name in outputs))
        root = torch.nn.Module()
        root.ops = self._ops
        module = torch.fx.GraphModule(root, graph)
        # The generated forward, called directly: nn.Module.__call__ and GraphModule's error-reporting wrapper
        # cost a small network's step about 1% (failures are d5 errors from self._failure anyway).
        call = torch.compile(module) if self._compile else module.forward
        return call, inputs, outputs, params

    def _run(self, feeds: dict[str, Any], training: bool, y: str | None = None) -> dict[str, Any]:
        module, inputs, outputs, params = self.plan(frozenset(feeds), y)
        if training != self._training:  # Module.train() walks every converter: only on a change of mode
            self._ops.train(training)
            self._training = training
        args = [as_module_value(feeds[name], self._device) for name in inputs]
        live = self.network.param_values
        try:
            values = module(*args, *[live[name] for name in params])
        except Exception as err:
            raise self.node_failure(err) from err
        return dict(zip(outputs, values))

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
        values = self._run(feeds, training=True, y=y)
        loss = values[y]
        if loss.requires_grad:
            try:
                loss.backward(None if loss.dim() == 0 else torch.ones_like(loss))
            except Exception as err:
                raise self.node_failure(err, "backward") from err
        outputs = {name: as_numpy_value(values[name]) for name in self.graph.outputs if name in values}
        for name, param in zip(names, params):
            if param.grad is None:  # y does not depend on it: a zero gradient, as on every framework (and torch
                param.grad = torch.zeros_like(param)  # optimizers then decay it like the reference's do)
            values[name] = param.grad
        network.set_pass_tensors(values)  # outputs as autograd left them: fetches detach them
        return outputs


def _first(result: Any) -> Any:
    """The first output of a converter that may return one tensor or a tuple."""
    return result[0] if isinstance(result, (tuple, list)) else result
