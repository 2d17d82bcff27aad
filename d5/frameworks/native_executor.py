"""What every framework's executor does the same way, written once: :class:`NativeExecutor` and
:class:`NativeLiveNetwork`. A framework supplies hooks only -- its native operator for a node, its custom-op
bridge, which values it holds, how to build and run a plan -- and the rest is here:

- **which operator runs a node**, with one ``fallback`` policy (:data:`FALLBACKS`) and one
  :class:`FallbackWarning` naming what does not run natively; control-flow bodies; construction errors that name
  the node;
- **the plan per set of fed inputs**: the steps the inputs reach, the "no graph output can be computed" and the
  "cannot differentiate y" errors, cached;
- trailing omitted optional inputs dropped (operators see only the inputs that exist), the outer-scope values a
  control-flow node captures appended;
- zero gradients for the parameters ``y`` does not depend on; refusing a device the framework or the machine
  lacks; the live state's checks (:meth:`NativeLiveNetwork.feed_tensor`).

>>> import numpy as np, d5
>>> from d5.frameworks import reference
>>> ex = reference.from_model(d5.models.mlp((4,), hidden=(3,), num_classes=2))
>>> ex.inference({"label": np.zeros(2, np.int64)})
Traceback (most recent call last):
d5.errors.GraphError: no graph output can be computed without inputs ['input']; provide them
"""
from __future__ import annotations

import abc
import dataclasses
import functools
import inspect
import warnings
from typing import Any, Callable

import numpy as np

from d5.errors import D5Error, GraphError, OperatorError, UnsupportedOperatorError
from d5.frameworks.base import DEFAULT_FALLBACK, FallbackWarning, FrameworkExecutor, resolve_fallback  # noqa: F401
from d5.frameworks.bridge import check_custom_op
from d5.network.executor import LiveNetwork
from d5.network.graph import Network, Node, gradient_name, like_param, node_captures, require_name
from d5.network.operator_errors import operator_failure
from d5.ops.operator import CustomOp

@dataclasses.dataclass
class Step:
    """One node of the graph and the framework's operator for it. ``inputs``: the node's inputs without the
    trailing omitted optional ones, then the outer-scope tensors a control-flow node's bodies capture (its
    operator receives their values after the inputs, and planning sees them as read by this step)."""

    node: Node
    op: Any
    inputs: list[str]


@dataclasses.dataclass
class Reach:
    """What one set of fed inputs reaches: the steps that can run, in order, and the graph outputs computed."""

    steps: list[Step]
    outputs: list[str]
    missing: list[str]


class NativeExecutor(FrameworkExecutor):
    """The shared half of a framework's executor (see the module docstring). A framework overrides:

    - :meth:`native_operator` -- its operator for an ONNX node (raise UnsupportedOperatorError when it has none);
    - :meth:`bridge` -- a d5 CustomOp as its operator (its ``custom_op``); :meth:`custom_operator` when some
      custom operators need other handling (a native module the user brought);
    - :attr:`holds` -- which NumPy dtypes its tensors hold (None: every value; nodes touching other values run on
      the reference);
    - :meth:`make_live_network`, :meth:`build_plan` (what a set of fed inputs runs), :meth:`run_inference` and
      :meth:`run_training` (which fetch the plan with :meth:`plan`).
    """

    #: Which NumPy dtypes the framework's tensors hold, or None for every value (see d5.frameworks.placement).
    holds: Callable[[np.dtype], bool] | None = None

    def __init__(self, network: Network, *, device: Any = None, fallback: Any = DEFAULT_FALLBACK) -> None:
        self.check_device(device)
        super().__init__(network, device)
        self.fallback = resolve_fallback(fallback)
        #: op type -> where it runs instead of natively ('reference' or 'onnx.reference').
        self.fallbacks: dict[str, str] = {}
        placed = self._nodes_on_reference()
        self.steps = [Step(node, self._node_operator(node, placed.get(node.name)),
                           trim_optional(node.inputs) + node_captures(node))
                      for node in self.graph.topological_order()]
        for step in self.steps:
            step.op.node_output_count = len(step.node.outputs)
            inner = getattr(step.op, "op", None)  # a bridged CustomOp reads it too
            if isinstance(inner, CustomOp) and not isinstance(step.op, CustomOp):
                inner.node_output_count = len(step.node.outputs)
        self._warn_fallbacks()
        self._plans: dict[tuple, Any] = {}

    # ------------------------------------------------------------------ hooks
    @abc.abstractmethod
    def native_operator(self, node: Node) -> Any:
        """The framework's own operator for ``node`` at the graph's opset; UnsupportedOperatorError if none."""

    def bridge(self, op: CustomOp) -> Any:
        """A d5 CustomOp as the framework's operator (the framework's ``custom_op``; a CustomOp runs as it is on
        a framework whose operators are d5 CustomOps, the reference)."""
        return check_custom_op(op, self.framework)

    def custom_operator(self, node: Node) -> Any:
        """The operator of a node holding a custom operator (``node.custom_op``)."""
        return self.bridge(node.custom_op)

    @abc.abstractmethod
    def build_plan(self, reach: Reach, y: str | None) -> Any:
        """What the framework runs for one set of fed inputs (cached by :meth:`plan`): ``reach`` has the steps
        they reach and the graph outputs computed; ``y`` is the tensor to differentiate (None: inference)."""

    @classmethod
    def gpu_count(cls) -> int:
        """GPUs this framework can use on this machine (its ``runtime.gpu_count()``)."""
        from d5.frameworks import runtime

        return runtime(cls.framework).gpu_count()

    # ------------------------------------------------------------------ devices
    @classmethod
    def check_device(cls, device: Any) -> None:
        """Refuse a GPU the framework cannot use or the machine lacks, saying what to pass instead."""
        if device is None or not getattr(device, "is_gpu", False):
            return
        count = cls.gpu_count()
        if device.index >= count:
            where = f"the {cls.framework} framework runs on the CPU only" if not cls.gpu_supported() else \
                f"this machine has {count} GPU(s) the {cls.framework} framework can use"
            raise D5Error(f"{device!r}: {where}; run on the CPU with device=None or d5.CPUDevice()")

    @classmethod
    def gpu_supported(cls) -> bool:
        import importlib

        return importlib.import_module(f"d5.frameworks.{cls.framework}").CAPABILITIES.gpu

    # ------------------------------------------------------------------ operators
    def operators(self) -> dict[str, Any]:
        return {step.node.name: step.op for step in self.steps}

    @property
    def fallback_operators(self) -> list[str]:
        """The op types that do not run on the framework's own operators (see :data:`FALLBACKS`)."""
        return sorted(self.fallbacks)

    def _nodes_on_reference(self) -> dict[str, str]:
        if self.holds is None:
            return {}
        from d5.frameworks.placement import nodes_on_reference

        return nodes_on_reference(self.graph, self.holds)

    def _node_operator(self, node: Node, foreign: str | None) -> Any:
        """The operator running ``node``: a custom operator's bridge, else the native one, else the fallback."""
        if node.custom_op is not None:
            return self.custom_operator(node)
        if foreign is None:
            try:
                return self._prepared(node, lambda: self.native_operator(node))
            except UnsupportedOperatorError as err:
                why = f"has no native operator for {node.op_type!r}" if self.framework != "reference" else str(err)
        else:
            why = f"cannot hold the values of {node.op_type!r} ({foreign})"
        if self.fallback == "none" and self.framework != "reference":
            raise UnsupportedOperatorError(f"node {node.name!r}: the {self.framework} framework {why} (fallback='none' "
                                           "refuses the reference fallback)") from None
        from d5.frameworks.reference.operators import create_operator, supported_operators

        if self.framework != "reference" and node.op_type in supported_operators():
            op = self._prepared(node, lambda: create_operator(node.op_type, node.attrs, self.graph.opset))
            self.fallbacks[node.op_type] = "reference"
            return self.bridge(op)
        if self.fallback != "onnx" or node.op_type in supported_operators():
            hint = "" if self.fallback == "onnx" else "; fallback='onnx' runs it on onnx.reference (inference only)"
            if self.framework == "reference":
                raise UnsupportedOperatorError(f"node {node.name!r}: {why}{hint}") from None
            raise UnsupportedOperatorError(f"node {node.name!r}: neither the {self.framework} nor the reference "
                                           f"framework implements {node.op_type!r}{hint}") from None
        from d5.frameworks.reference.operators._fallback import OnnxReferenceFallbackOp
        from d5.network.onnx_export import node_to_proto

        try:
            op = OnnxReferenceFallbackOp(node_to_proto(node, self.graph.opset), self.graph.opset)
        except D5Error as err:
            raise type(err)(f"node {node.name!r}: {err}") from None
        self.fallbacks[node.op_type] = "onnx.reference"
        return self.bridge(op)

    def _prepared(self, node: Node, make: Callable[[], Any]) -> Any:
        """``make()``'s operator for ``node``, its control-flow bodies given executors (so errors inside them show
        now); a construction failure other than a missing operator is a d5 error naming the node."""
        try:
            op = make()
        except UnsupportedOperatorError:
            raise
        except Exception as err:  # the backstop, as when the operator runs (operator_failure)
            raise operator_failure(err, node, [], self.graph.opset, "construction") from err
        prepare = getattr(op, "prepare_subgraphs", None)
        if prepare is not None:  # control flow: the bodies run on the reference framework, under this policy
            for op_type in prepare(self._body_executor):
                self.fallbacks[op_type] = "onnx.reference"
        return op

    def _body_executor(self, body: Network) -> Any:
        from d5.frameworks.reference.executor import ReferenceGraphExecutor

        with warnings.catch_warnings():  # this executor reports the bodies' fallback operators
            warnings.simplefilter("ignore", FallbackWarning)
            return ReferenceGraphExecutor(body, fallback=self.fallback)

    def _warn_fallbacks(self) -> None:
        on_reference = sorted(op for op, where in self.fallbacks.items() if where == "reference")
        on_onnx = sorted(op for op, where in self.fallbacks.items() if where == "onnx.reference")
        parts = []
        if on_reference:
            parts.append(f"operators {on_reference} have no native {self.framework} operator and run on the reference "
                         "framework through the custom-op bridge")
        if on_onnx:
            parts.append(f"operators {on_onnx} are not implemented by d5 and run on onnx.reference (inference only, "
                         "no gradient)")
        if parts:
            warnings.warn(f"d5 {self.framework} framework: {'; '.join(parts)} (fallback='none' refuses them)",
                          FallbackWarning, stacklevel=4)

    # ------------------------------------------------------------------ plans
    def plan(self, fed: frozenset, y: str | None) -> Any:
        """The framework's plan (:meth:`build_plan`) for inputs ``fed`` and loss ``y``, built once per key."""
        key = (fed, y)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = self.build_plan(self.reach(fed, y), y)
        return plan

    def reach(self, fed: frozenset, y: str | None = None) -> Reach:
        """The steps inputs ``fed`` reach (with the parameters), in order; refuses inputs that compute no graph
        output, or that do not compute ``y``."""
        known = set(fed) | set(self.graph.params) | {""}
        steps = []
        for step in self.steps:
            if all(t in known for t in step.inputs):
                steps.append(step)
                known.update(step.node.outputs)
        outputs = [name for name in self.graph.outputs if name in known]
        missing = [name for name in self.graph.inputs if name not in fed]
        if not outputs:
            raise GraphError(f"no graph output can be computed without inputs {missing}; provide them")
        if y is not None and y not in known:
            raise GraphError(f"cannot compute {y!r} from the given inputs (missing {missing}) to differentiate it")
        return Reach(steps, outputs, missing)

    def node_failure(self, err: BaseException, phase: str = "") -> D5Error:
        """The backstop of a framework that runs a whole plan in one call: ``err`` (escaped from it, or from the
        backward pass) as a d5 error naming the node whose operator raised it, found in the traceback (the
        operator's own frame has it as ``self``, and its arguments are the node's inputs)."""
        nodes = {id(step.op): step.node for step in self.steps}
        failing, inputs = None, []
        trace = err.__traceback__
        while trace is not None and failing is None:
            frame = trace.tb_frame
            if "self" in frame.f_code.co_varnames and id(frame.f_locals.get("self")) in nodes:
                failing = nodes[id(frame.f_locals["self"])]
                inputs = [self.network.as_numpy(value) for value in _arguments(frame)]
            trace = trace.tb_next
        if failing is not None:
            return operator_failure(err, failing, inputs, self.graph.opset, phase)
        if isinstance(err, D5Error):
            return err
        return OperatorError(f"the {self.framework} framework's {phase or 'forward'} pass failed: {type(err).__name__}: "
                             f"{str(err).splitlines()[0] if str(err) else ''}")

    def gradients_with_zeros(self, grads: dict[str, Any], zeros_like: Callable[[Any], Any]) -> dict[str, Any]:
        """``grads`` (by parameter name) by gradient name, with a zero gradient for every trainable parameter ``y``
        does not depend on, as on every framework (optimizers then decay it like any other)."""
        params = self.network.param_values
        return {grad_name: grads[name] if grads.get(name) is not None else zeros_like(params[name])
                for name, grad_name in self._gradient_names()}

    def _gradient_names(self) -> list[tuple[str, str]]:
        """``[(param, gradient name)]`` of the trainable parameters, computed once per edit of the graph."""
        cached = self.__dict__.get("_gradient_pairs")
        if cached is None or cached[0] != self.graph.version:
            cached = self._gradient_pairs = (self.graph.version, [(name, gradient_name(name))
                                                                  for name in self.graph.get_params()])
        return cached[1]


class NativeLiveNetwork(LiveNetwork):
    """A framework's live state, with the checks every framework makes when a value is fed. A framework overrides
    :meth:`assign` (write into a parameter it holds), :meth:`new_param` (a parameter added by ``feed_tensor``) and
    :meth:`to_native` (another tensor of the pass); a parameter value the framework does not hold (a string
    tensor) stays NumPy."""

    def feed_tensor(self, name: str, value: Any, is_param: bool = False) -> None:
        require_name(name, "tensor name")
        current = self.param_values.get(name)
        if current is not None and isinstance(current, np.ndarray):
            self.param_values[name] = like_param(name, value, current)  # no copy when the dtype matches
        elif current is not None:
            self.assign(name, current, value)
        elif is_param:
            self.graph.add_param(name, self.as_numpy(value) if not isinstance(value, np.ndarray) else value)
            self.param_values[name] = self.new_param(self.graph.params[name])
        else:
            self._pass[name] = self.to_native(value)

    def assign(self, name: str, current: Any, value: Any) -> None:
        """Write ``value`` into parameter ``name`` held as the framework's tensor ``current`` (shape and dtype
        checked as :func:`d5.network.graph.like_param` does)."""
        raise NotImplementedError

    def new_param(self, value: np.ndarray) -> Any:
        """The framework's tensor for a trainable parameter added by ``feed_tensor(name, value, is_param=True)``."""
        return value

    def to_native(self, value: Any) -> Any:
        """A fed tensor that is not a parameter, as the framework keeps it."""
        return value


def _arguments(frame: Any) -> list[Any]:
    """The positional arguments a frame's function was called with (after self), as its locals hold them now."""
    code = frame.f_code
    values = [frame.f_locals.get(name) for name in code.co_varnames[1:code.co_argcount]]
    if code.co_flags & inspect.CO_VARARGS:
        values += list(frame.f_locals.get(code.co_varnames[code.co_argcount + code.co_kwonlyargcount], ()))
    return values


@functools.lru_cache(maxsize=None)
def _single_output_schema(op_type: str, domain: str, opset: int) -> bool:
    import onnx.defs

    try:
        return onnx.defs.get_schema(op_type, opset, domain).max_output == 1
    except onnx.defs.SchemaError:  # d5's own operators (ai.d5) have no ONNX schema
        return False


def single_output(node: Node, opset: int) -> bool:
    """Whether ``node``'s ONNX operator has exactly one output (a framework's operator for it then returns one
    tensor, not a tuple).

    >>> from d5.network.graph import Node
    >>> single_output(Node("r", "Relu", ["x"], ["y"]), 17), single_output(Node("s", "Split", ["x"], ["a"]), 17)
    (True, False)
    """
    return node.domain in ("", "ai.onnx") and _single_output_schema(node.op_type, node.domain, opset)


def trim_optional(inputs: list[str]) -> list[str]:
    """Drop trailing omitted ('') optional inputs, so operators see only the inputs that exist.

    >>> trim_optional(["x", "", "scale", "", ""])
    ['x', '', 'scale']
    """
    inputs = list(inputs)
    while inputs and not inputs[-1]:
        inputs.pop()
    return inputs
