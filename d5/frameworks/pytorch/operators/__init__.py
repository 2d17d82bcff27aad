"""ONNX operator -> native PyTorch converters, filed by ONNX category under the reference framework's module
names (:data:`d5.frameworks.base.OPERATOR_CATEGORIES`; only the categories with converters exist here).

A converter is a :class:`TorchOp`, a ``torch.nn.Module`` built from an ONNX node's attributes, so the executor
can place it in a ``torch.fx.GraphModule`` (``call_module``) and torch autograd differentiates it. Each has
the semantics of the reference operator of the same name (:mod:`d5.frameworks.reference.operators`), the oracle
``tests/frameworks/pytorch/test_operators.py`` compares against, forward and gradient.

>>> import torch
>>> create_operator("Relu", {})(torch.tensor([-1.0, 2.0]))
tensor([0., 2.])
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

import torch

from d5.frameworks.base import OPERATOR_CATEGORIES
from d5.ops.registry import OperatorRegistry, memoized_plan, present_categories

#: The categories this framework has converters for: the OPERATOR_CATEGORIES with a module here (same file names).
CATEGORIES = present_categories(__name__, OPERATOR_CATEGORIES)


class TorchOp(torch.nn.Module):
    """A converter: constructed from an ONNX node's attributes (keyword arguments; missing ones take ONNX's
    defaults at that version), called with torch tensors (None for an omitted optional input), returns a
    tensor or a tuple of tensors. self.training (nn.Module's flag) is True in training passes.

    Inputs that ONNX passes as tensors but that are really shapes, axes or pads arrive as int64 tensors and
    are read with ``.tolist()``. ``node_output_count`` (set by the executor, like the reference operators'
    attribute) is how many outputs the node names, for the operators whose results depend on it.
    """

    #: How many outputs the graph node names (None: unknown); Split and BatchNormalization read it.
    node_output_count: int | None = None
    #: The opset the converter was built for (set by OperatorRegistry.create; None: the newest).
    opset: int | None = None

    def planned(self, key: Any, make: Callable[..., Any], *args: Any) -> Any:
        """``make(*args)``, memoized per ``key`` (the input shapes it depends on): what a converter derives from
        shapes (window geometry, padding, divisors) is computed once per shape instead of every step, where on a
        small network it cost a training step a few percent. Not memoized while torch.compile traces.

        >>> op = create_operator("Relu", {})
        >>> op.planned((2, 3), lambda a, b: a * b, 2, 3), op.planned((2, 3), lambda a, b: 0, 2, 3)
        (6, 6)
        """
        if torch.compiler.is_compiling():
            return make(*args)
        return memoized_plan(self, key, make, *args)


#: ONNX op type -> converter class, by opset.
REGISTRY = OperatorRegistry.of_package("pytorch", __name__, CATEGORIES)

#: Class decorator: ``@register("Relu")``, ``@register("Softmax", since=13)``.
register = REGISTRY.register


def create_operator(op_type: str, attributes: Mapping[str, Any], opset: int | None = None) -> TorchOp:
    """Instantiate the converter for ``op_type`` at ``opset`` (None: the newest) with the node's attributes."""
    return REGISTRY.create(op_type, attributes, opset)


def supported_operators() -> list[str]:
    """Sorted ONNX op types the PyTorch framework converts to native torch operations."""
    return REGISTRY.supported()


__all__ = ["CATEGORIES", "REGISTRY", "TorchOp", "create_operator", "register", "supported_operators"]
