"""ONNX operator -> native MXNet converters, filed by ONNX category under the reference framework's module names
(:data:`d5.frameworks.base.OPERATOR_CATEGORIES`; only the categories with converters exist here).

A converter is an :class:`MXOp`, built from an ONNX node's attributes and called while the executor composes
the network's MXNet symbol (``mx.sym``): each input is ``None`` (an omitted optional input), a NumPy array (a
value known before the graph runs -- a constant, a shape, an integer parameter; the executor folds every node
whose inputs are all such values) or an ``mx.sym.Symbol`` whose shape and dtype are known
(:func:`~d5.frameworks.mxnet.operators._helpers.shape_of`, ``dtype_of``: the executor builds one symbol per
input signature, so every shape is static). A converter returns symbols (or NumPy arrays where it computes a
value from shapes alone, as Shape does); MXNet's autograd differentiates the composed graph. Each converter has
the semantics of the reference operator of the same name, which the operator table ``tests/frameworks/operators/``
compares it against, forward and gradient (through ``native_op``, which evaluates the same symbol on NDArrays).

MXNet computes in ONNX's layout (NCHW) on the CPU, so unlike TensorFlow's converters these need no layout
protocol.

>>> import numpy as np
>>> from d5.frameworks.mxnet.custom_op import native_op
>>> native_op("Relu").forward([np.array([-1.0, 2.0], np.float32)]).tolist()
[0.0, 2.0]
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

from d5.frameworks.base import OPERATOR_CATEGORIES
from d5.ops.registry import OperatorRegistry, memoized_plan, present_categories

#: The categories this framework has converters for: the OPERATOR_CATEGORIES with a module here (same file names).
CATEGORIES = present_categories(__name__, OPERATOR_CATEGORIES)


class MXOp:
    """A converter: constructed from an ONNX node's attributes (keyword arguments; missing ones take ONNX's
    defaults at that version), called with symbols, NumPy values and None (module docstring), returns a symbol or
    a tuple of them. ``training`` is True while the executor composes a training pass's graph. ``node_output_count``
    (set by the executor) is how many outputs the node names.

    A converter reading an input that ONNX passes as a tensor but that is really a shape, axes or pads uses
    :func:`~d5.frameworks.mxnet.operators._helpers.ints`, which refuses a value computed from the data (the
    executor then runs that network node by node, where every value is known)."""

    #: How many outputs the graph node names (None: unknown); Split and BatchNormalization read it.
    node_output_count: int | None = None
    #: The opset the converter was built for (set by OperatorRegistry.create; None: the newest).
    opset: int | None = None
    #: True in training passes.
    training: bool = False
    #: False for operators whose outputs depend on more than their inputs (random generators): the executor never
    #: folds them into constants.
    deterministic: bool = True

    #: Inputs whose VALUES the converter checks when it sees them (class labels against the class count): when such
    #: an input is fed to the graph, the executor calls :meth:`check_value` on each fed value before running, as
    #: the kernels MXNet would run check nothing (``pick`` clips an index out of range).
    checked_inputs: tuple[int, ...] = ()
    #: Inputs whose VALUES decide the output's shape even when they are floating (Range's start/limit/delta,
    #: OneHot's depth, NonZero's data): ``native_op`` and node-by-node runs pass them as NumPy values; in a composed
    #: graph such an input computed from the data makes the network run node by node.
    value_inputs: tuple[int, ...] = ()

    def __call__(self, *inputs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} has no MXNet computation")

    def check_value(self, index: int, value: Any, shapes: list[tuple[int, ...] | None]) -> None:
        """Raise the reference's d5 error if input ``index``'s fed ``value`` is invalid; ``shapes`` are the node's
        input shapes (None: omitted)."""

    def planned(self, key: Any, make: Callable[..., Any], *args: Any) -> Any:
        """``make(*args)``, memoized per ``key`` (the static input shapes it depends on)."""
        return memoized_plan(self, key, make, *args)


#: ONNX op type -> converter class, by opset.
REGISTRY = OperatorRegistry.of_package("mxnet", __name__, CATEGORIES)

#: Class decorator: ``@register("Relu")``, ``@register("Softmax", since=13)``.
register = REGISTRY.register


def create_operator(op_type: str, attributes: Mapping[str, Any], opset: int | None = None) -> MXOp:
    """Instantiate the converter for ``op_type`` at ``opset`` (None: the newest) with the node's attributes."""
    return REGISTRY.create(op_type, attributes, opset)


def supported_operators() -> list[str]:
    """Sorted ONNX op types the MXNet framework converts to native MXNet operations."""
    return REGISTRY.supported()


__all__ = ["CATEGORIES", "MXOp", "REGISTRY", "create_operator", "register", "supported_operators"]
