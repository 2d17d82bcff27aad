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

    #: False for operators with no gradient at all (Shape, ArgMax, ...); the executor stops backprop there.
    differentiable: bool = True


class NonDifferentiableOp(ReferenceOp):
    """Base of operators with no gradient (indices, strings, sequences, quantized values, ...): the executor
    stops backpropagation at them, and ``backward`` raises an UnsupportedOperatorError that names the
    operator and gives :attr:`no_gradient_reason`."""

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
