"""ONNX operator -> native TensorFlow converters, filed by ONNX category under the reference framework's module
names (:data:`d5.frameworks.base.OPERATOR_CATEGORIES`; only the categories with converters exist here).

A converter is a :class:`TFOp`, built from an ONNX node's attributes and called with TensorFlow tensors inside the
executor's ``tf.function`` (and eagerly by ``native_op``); ``tf.GradientTape`` differentiates it. Each has the
semantics of the reference operator of the same name (:mod:`d5.frameworks.reference.operators`), which the
operator table ``tests/frameworks/operators/`` compares it against, forward and gradient.

**Channels-last.** TensorFlow's CPU convolution and pooling kernels take NHWC data only, so the executor keeps
spatial activations channels-last between the operators that can take them and converts at the boundary (see
:mod:`d5.frameworks.tensorflow.tensors`). A converter says what it can take:

- ``elementwise = True``: it computes element by element with NumPy broadcasting (Relu, Add, Clip, ...); given a
  channels-last operand it runs unchanged on operands the executor brought to the same layout, and its outputs
  are channels-last;
- :meth:`TFOp.channels_last`: its own channels-last computation (Conv, MaxPool, BatchNormalization, Concat,
  ...), taking the inputs listed by ``channels_last_inputs`` channels-last when they have a rank in
  ``channels_last_ranks``; its outputs listed by ``channels_last_outputs`` are channels-last;
- anything else receives every input in ONNX layout.

>>> import tensorflow as tf
>>> create_operator("Relu", {})(tf.constant([-1.0, 2.0])).numpy().tolist()
[0.0, 2.0]
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

from d5.frameworks.base import OPERATOR_CATEGORIES
from d5.ops.registry import OperatorRegistry, memoized_plan, present_categories

#: The categories this framework has converters for: the OPERATOR_CATEGORIES with a module here (same file names).
CATEGORIES = present_categories(__name__, OPERATOR_CATEGORIES)


class TFOp:
    """A converter: constructed from an ONNX node's attributes (keyword arguments; missing ones take ONNX's
    defaults at that version), called with TensorFlow tensors (None for an omitted optional input; a parameter may
    arrive as a ``tf.Variable``, which a converter updating state -- BatchNormalization's running statistics in
    training -- assigns), returns a tensor or a tuple of tensors. ``training`` is True in training passes (the
    executor traces one function per mode).

    Inputs that ONNX passes as tensors but that are really shapes, axes or pads are read with
    :func:`~d5.frameworks.tensorflow.operators._helpers.ints` (a constant inside a traced function, or an
    eager tensor). ``node_output_count`` (set by the executor) is how many outputs the node names.
    """

    #: How many outputs the graph node names (None: unknown); Split and BatchNormalization read it.
    node_output_count: int | None = None
    #: The opset the converter was built for (set by OperatorRegistry.create; None: the newest).
    opset: int | None = None
    #: True in training passes.
    training: bool = False
    #: False while the executor traces a pass nothing differentiates (inference): a converter may then use a kernel
    #: whose gradient omits some inputs (BatchNormalization's fused inference kernel gives the statistics none).
    differentiated: bool = True
    #: Element by element with NumPy broadcasting: runs unchanged on channels-last operands (module docstring).
    elementwise: bool = False
    #: The inputs :meth:`channels_last` takes channels-last (positions, or "all": every tensor input), when their
    #: rank is in channels_last_ranks.
    channels_last_inputs: tuple[int, ...] | str = ()
    #: The ranks of those inputs :meth:`channels_last` handles.
    channels_last_ranks: tuple[int, ...] = (4,)
    #: The outputs :meth:`channels_last` returns channels-last.
    channels_last_outputs: tuple[int, ...] = (0,)

    def __call__(self, *inputs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} has no TensorFlow computation")

    def channels_last(self, *inputs: Any) -> Any:
        """The computation on channels-last inputs (those of ``channels_last_inputs``); only for the converters
        that declare such inputs."""
        raise NotImplementedError(f"{type(self).__name__} has no channels-last computation")

    def takes_channels_last(self, ranks: list[int | None]) -> bool:
        """Whether :meth:`channels_last` handles inputs of these ranks (None: an omitted input); by default when
        every declared input has a rank in ``channels_last_ranks``."""
        if not self.channels_last_inputs:
            return False
        positions = range(len(ranks)) if self.channels_last_inputs == "all" else self.channels_last_inputs
        declared = [ranks[i] for i in positions if i < len(ranks) and ranks[i] is not None]
        return bool(declared) and all(rank in self.channels_last_ranks for rank in declared)

    def planned(self, key: Any, make: Callable[..., Any], *args: Any) -> Any:
        """``make(*args)``, memoized per ``key`` (the static input shapes it depends on): window geometry,
        padding and other shape-derived plans are computed once per shape, not at every trace or eager call."""
        return memoized_plan(self, key, make, *args)


#: ONNX op type -> converter class, by opset.
REGISTRY = OperatorRegistry.of_package("tensorflow", __name__, CATEGORIES)

#: Class decorator: ``@register("Relu")``, ``@register("Softmax", since=13)``.
register = REGISTRY.register


def create_operator(op_type: str, attributes: Mapping[str, Any], opset: int | None = None) -> TFOp:
    """Instantiate the converter for ``op_type`` at ``opset`` (None: the newest) with the node's attributes."""
    return REGISTRY.create(op_type, attributes, opset)


def supported_operators() -> list[str]:
    """Sorted ONNX op types the TensorFlow framework converts to native TensorFlow operations."""
    return REGISTRY.supported()


__all__ = ["CATEGORIES", "REGISTRY", "TFOp", "create_operator", "register", "supported_operators"]
