"""The table of built-in reference operators: ONNX op type -> operator class.

A reference operator is a :class:`d5.ops.CustomOp` constructed from the ONNX node's attributes
(``Conv(strides=[1, 1], pads=[0, 0, 0, 0], ...)``); missing attributes take ONNX's defaults.
"""
from __future__ import annotations

from typing import Callable

from d5.errors import UnsupportedOperatorError
from d5.ops.operator import CustomOp

_OPERATORS: dict[str, type[CustomOp]] = {}


class ReferenceOp(CustomOp):
    """Base class of the built-in NumPy/C++ operators. Subclasses take ONNX attributes as keyword arguments."""

    #: False for operators whose ``backward`` d5 does not implement (Shape, ArgMax, TopK, control flow, ...).
    #: The executor still plans backpropagation through them when a floating-point output leads to the loss,
    #: and their ``backward`` then raises naming them: many (TopK, Attention, GridSample) do have a gradient,
    #: and treating their outputs as constants would silently give zero gradients.
    differentiable: bool = True

    #: True for operators whose outputs are locally constant in their inputs, so the gradient is exactly
    #: zero (Hardmax, EyeLike): the executor stops backpropagation there. Integer and boolean outputs
    #: (Shape's, ArgMax's) stop it whatever this says.
    zero_gradient: bool = False


class NonDifferentiableOp(ReferenceOp):
    """Base of operators without a ``backward`` in d5 (indices, strings, sequences, quantized values, ...):
    ``backward`` raises an UnsupportedOperatorError that names the operator and gives
    :attr:`no_gradient_reason`. Backpropagation stops before them by itself where their outputs are integers
    or where :attr:`ReferenceOp.zero_gradient` is set."""

    differentiable = False
    #: Why there is no gradient and what to do instead; subclasses refine it.
    no_gradient_reason = "stop backpropagation before it (its output is treated as a constant)"

    def backward(self, grads, fwd_inputs, fwd_outputs):
        raise UnsupportedOperatorError(f"{type(self).__name__} has no gradient in d5; {self.no_gradient_reason}")


def register(*op_types: str) -> Callable[[type[CustomOp]], type[CustomOp]]:
    """Class decorator: make the class the reference implementation of the ONNX ``op_types``."""

    def decorate(cls: type[CustomOp]) -> type[CustomOp]:
        for op_type in op_types:
            if op_type in _OPERATORS:
                raise RuntimeError(f"reference operator {op_type!r} registered twice")
            _OPERATORS[op_type] = cls
        return cls

    return decorate


def supported_operators() -> list[str]:
    """Sorted ONNX op types the reference framework implements."""
    _load_all()
    return sorted(_OPERATORS)


def create_operator(op_type: str, attributes: dict) -> CustomOp:
    """Instantiate the reference operator for ``op_type`` with the node's ``attributes``."""
    _load_all()
    try:
        cls = _OPERATORS[op_type]
    except KeyError:
        raise UnsupportedOperatorError(
            f"the reference framework has no implementation of operator {op_type!r}; "
            f"it implements: {', '.join(sorted(_OPERATORS))}"
        ) from None
    try:
        return cls(**attributes)
    except TypeError as err:
        raise UnsupportedOperatorError(f"operator {op_type!r}: unsupported attributes {sorted(attributes)}: {err}") from None


def _load_all() -> None:
    # Importing the modules registers their operators; done on first use, not at import of d5.
    from d5.frameworks.reference.operators import _modules  # noqa: F401
