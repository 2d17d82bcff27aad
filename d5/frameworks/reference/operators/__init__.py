"""Built-in reference operators: NumPy, and C++ kernels from d5._C for convolution, pooling and batch norm.

One module per ONNX operator category (:data:`CATEGORIES`, the file names every framework's ``operators``
package uses); support code is private (``_checks``: NumPy-side input checks and conversions, ``_windows``:
N-D sliding-window kernels, ``_fallback``: the onnx.reference fallback operator). Framework-neutral ONNX rules
(axes, optional inputs, broadcasting, window geometry) are in :mod:`d5.ops.onnx_semantics`.

A reference operator is a :class:`ReferenceOp` constructed from the ONNX node's attributes
(``Conv(strides=[1, 1], pads=[0, 0, 0, 0], ...)``; missing attributes take ONNX's defaults), registered in
:data:`REGISTRY` by ``@register("Softmax")``, or ``@register("Softmax", since=13)`` for one version of an
operator whose semantics changed between opsets. The category modules are imported on the first lookup.

>>> import numpy as np
>>> "Conv" in supported_operators()
True
>>> create_operator("Relu", {}).forward([np.array([-1.0, 2.0])])
array([0., 2.])
"""
from __future__ import annotations

from typing import Any, Mapping

from d5.frameworks.base import OPERATOR_CATEGORIES
from d5.ops.operator import CustomOp
from d5.ops.registry import OperatorRegistry

#: The operator modules, one per ONNX category: the reference implements operators of every category.
CATEGORIES = OPERATOR_CATEGORIES


class ReferenceOp(CustomOp):
    """Base class of the built-in NumPy/C++ operators. Subclasses take ONNX attributes as keyword arguments and
    declare their :class:`d5.ops.Gradient` (``gradient = Gradient.NONE`` with a ``no_gradient_reason`` where d5
    has no backward, ``Gradient.ZERO`` where the outputs are locally constant)."""


#: ONNX op type -> reference operator class, by opset.
REGISTRY = OperatorRegistry.of_package("reference", __name__, CATEGORIES)

#: Class decorator: ``@register("Relu")``, ``@register("Softmax", since=13)``.
register = REGISTRY.register


def create_operator(op_type: str, attributes: Mapping[str, Any], opset: int | None = None) -> CustomOp:
    """Instantiate the reference operator for ``op_type`` at ``opset`` (None: the newest) with the node's
    ``attributes``."""
    return REGISTRY.create(op_type, attributes, opset)


def supported_operators() -> list[str]:
    """Sorted ONNX op types the reference framework implements."""
    return REGISTRY.supported()


__all__ = ["CATEGORIES", "REGISTRY", "ReferenceOp", "create_operator", "register", "supported_operators"]
