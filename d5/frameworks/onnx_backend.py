"""Any d5 framework as an ``onnx.backend.base.Backend``, so ONNX's own backend test suite can judge it.

:func:`backend_for` makes the Backend class of a framework from its name; the framework is imported when a
model is first prepared. ``ReferenceBackend`` is the reference framework's.

>>> import numpy as np, onnx
>>> from onnx import helper, TensorProto
>>> node = helper.make_node("Relu", ["x"], ["y"])
>>> graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
...                           [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
>>> model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
>>> ReferenceBackend.run_model(model, [np.array([-1.0, 2.0], np.float32)])[0]
array([0., 2.], dtype=float32)
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import onnx.backend.base

from d5.errors import D5Error
from d5.frameworks import FRAMEWORKS, get as get_framework


class FrameworkBackendRep(onnx.backend.base.BackendRep):
    """A prepared model: the imported network on a framework's executor."""

    def __init__(self, executor, input_names: list[str], output_names: list[str]) -> None:
        self.executor = executor
        self.input_names = input_names
        self.output_names = output_names

    def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:
        if isinstance(inputs, dict):
            feeds = dict(inputs)
        else:
            if isinstance(inputs, np.ndarray):
                inputs = [inputs]
            feeds = dict(zip(self.input_names, inputs))
        outputs = self.executor.inference(feeds)
        missing = [name for name in self.output_names if name not in outputs]
        if missing:
            raise D5Error(f"outputs {missing} could not be computed from the inputs given ({sorted(feeds)})")
        return tuple(outputs[name] for name in self.output_names)


class FrameworkBackend(onnx.backend.base.Backend):
    """Runs ONNX models with the d5 framework named by :attr:`framework` (see :func:`backend_for`).
    ``fallback=True`` (a prepare/run keyword) lets operators the framework does not implement run on
    onnx.reference, with a warning naming them."""

    #: The d5 framework's name (``d5.frameworks.FRAMEWORKS``).
    framework = "reference"

    @classmethod
    def prepare(cls, model, device: str = "CPU", **kwargs: Any) -> FrameworkBackendRep:
        from d5.network.graph import Network

        network = Network.from_onnx(model)
        executor = get_framework(cls.framework).from_model(network, fallback=bool(kwargs.get("fallback", False)))
        return FrameworkBackendRep(executor, list(network.inputs), list(network.outputs))

    @classmethod
    def supports_device(cls, device: str) -> bool:
        kind = device.split(":")[0].lower()
        return kind in get_framework(cls.framework).CAPABILITIES.devices or (kind == "cuda" and "gpu" in
                                                                         get_framework(cls.framework).CAPABILITIES.devices)

    @classmethod
    def run_node(cls, node, inputs: Sequence[Any], device: str = "CPU", outputs_info=None, **kwargs: Any):
        """Run one NodeProto by wrapping it in a model (inputs typed from the given arrays)."""
        from onnx import helper

        arrays = [list(x) if isinstance(x, (list, tuple)) else x if x is None else np.asarray(x) for x in inputs]
        graph_inputs = [_value_info_of(name, a) for name, a in zip(node.input, arrays) if name]
        graph_outputs = [helper.make_empty_tensor_value_info(name) for name in node.output if name]
        graph = helper.make_graph([node], "node", graph_inputs, graph_outputs)
        opset = kwargs.pop("opset_version", None) or onnx.defs.onnx_opset_version()
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid(node.domain or "", opset)])
        feeds = [a for name, a in zip(node.input, arrays) if name]
        return cls.run_model(model, feeds, device, **kwargs)


def _value_info_of(name: str, value: Any):
    """A graph input typed from a fed value: an array is a tensor, a list a sequence of tensors (typed from
    its first element; float32 when empty) and None an empty optional float32 tensor."""
    from onnx import TensorProto, helper

    if isinstance(value, np.ndarray):
        return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(value.dtype), value.shape)
    if isinstance(value, list):
        elem = helper.np_dtype_to_tensor_dtype(np.asarray(value[0]).dtype) if value else TensorProto.FLOAT
        return helper.make_tensor_sequence_value_info(name, elem, None)
    return helper.make_value_info(name, helper.make_optional_type_proto(
        helper.make_tensor_type_proto(TensorProto.FLOAT, None)))


def backend_for(framework: str) -> type[FrameworkBackend]:
    """The ``onnx.backend.base.Backend`` class running models on d5 framework ``framework``.

    >>> backend_for("reference").framework
    'reference'
    """
    if framework not in FRAMEWORKS:
        raise D5Error(f"unknown framework {framework!r}; d5 knows {sorted(FRAMEWORKS)}")
    return type(f"{framework.title()}Backend", (FrameworkBackend,), {"framework": framework, "__doc__":
                f"Runs ONNX models with d5's {framework} framework (see FrameworkBackend)."})


#: The reference framework's Backend.
ReferenceBackend = backend_for("reference")
