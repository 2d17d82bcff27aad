"""L0: the operator interface every d5 operator implements, built-in or user-written.

An operator maps a list of input arrays to one or more output arrays (``forward``) and, given the
gradients of the loss with respect to its outputs, returns the gradients with respect to its inputs
(``backward``), exactly as in the seeds' ``IPowOp``:

>>> import numpy as np
>>> from d5.ops import CustomPythonOp
>>> class IPowOp(CustomPythonOp):
...     def __init__(self, power):
...         super().__init__()
...         self.power = power
...     def forward(self, inputs):
...         return inputs[0] ** self.power
...     def backward(self, grads, fwd_inputs, fwd_outputs):
...         return grads[0] * self.power * fwd_inputs[0] ** (self.power - 1)
>>> op = IPowOp(3)
>>> op.forward([np.array([2.0])])
array([8.])
"""
from __future__ import annotations

import abc
import enum
from typing import Any, Sequence

import numpy as np

from d5.errors import UnsupportedOperatorError


class Gradient(enum.Enum):
    """What an operator declares about its gradient (:attr:`CustomOp.gradient`); executors read it.

    - ``DEFINED``: ``backward`` computes it (the default).
    - ``ZERO``: the outputs are locally constant in the inputs (Hardmax, EyeLike), so the gradient is exactly
      zero: executors stop backpropagation at the operator and never call ``backward``.
    - ``NONE``: d5 has no gradient for it (TopK, Attention, control flow, string operators): an executor asked
      to backpropagate through it raises :class:`d5.errors.UnsupportedOperatorError` naming the node and
      :attr:`CustomOp.no_gradient_reason`, before the backward pass starts. Its outputs are not treated as
      constants, which would silently give wrong (zero) gradients.

    Integer and boolean outputs (Shape's, ArgMax's) stop backpropagation whatever the operator declares.
    """

    DEFINED = "defined"
    ZERO = "zero"
    NONE = "none"


class CustomOp(abc.ABC):
    """Base class of every operator.

    ``forward(inputs)`` receives a list of arrays and returns one array or a tuple of arrays.
    ``backward(grads, fwd_inputs, fwd_outputs)`` receives one gradient per forward output (zeros
    where no gradient flows), the forward inputs and the forward outputs, and returns one gradient per
    forward input (a single array when there is one input), with ``None`` for inputs that are not
    differentiable (integer labels, shapes, indices).

    An operator instance belongs to one graph node, so ``forward`` may cache what ``backward`` needs
    (an argmax, a mask, im2col columns) on ``self``.
    """

    #: Whether ``backward`` exists (see :class:`Gradient`); executors plan backpropagation by it.
    gradient: Gradient = Gradient.DEFINED

    #: For ``gradient = Gradient.NONE``: why there is none and what to do instead (shown in the error).
    no_gradient_reason: str = "stop backpropagation before it (detach its output or feed it as an input)"

    #: Set by executors before each pass: True inside ``inference_and_backprop`` (batch statistics,
    #: active dropout), False in ``inference``.
    training: bool = False

    #: Set by executors before backward: one flag per input, False where no gradient is needed (the data
    #: input of a network's first layer). None means all are needed. Operators may skip work accordingly
    #: and return None for those inputs.
    input_grad_required: tuple[bool, ...] | None = None

    #: How many inputs and outputs the operator takes, where it is fixed (a compiled C++ operator's is, by its
    #: forward's parameters); None: any. ``Network.add_custom_node`` refuses a node with other counts.
    num_inputs: int | None = None
    num_outputs: int | None = None

    #: Set by executors when building the operator for a graph node: how many outputs the node names.
    #: ONNX lets a few operators infer from it what their attributes leave open (Split into equal pieces).
    node_output_count: int | None = None

    def __init__(self) -> None:
        self.training = False

    @abc.abstractmethod
    def forward(self, inputs: Sequence[Any]) -> Any:
        """Compute the outputs from ``inputs`` (a list)."""

    def backward(self, grads: Sequence[Any], fwd_inputs: Sequence[Any], fwd_outputs: Sequence[Any]) -> Any:
        """Return the gradients with respect to the inputs (``None`` where not differentiable)."""
        if self.gradient is Gradient.NONE:
            raise UnsupportedOperatorError(f"{type(self).__name__} has no gradient in d5; {self.no_gradient_reason}")
        raise NotImplementedError(f"{type(self).__name__} does not define backward(); it can only be used for inference")

    def state_updates(self) -> dict[int, Any]:
        """State the last training-mode ``forward`` wants written back into its inputs.

        Returns ``{input_index: new_value}``; executors write each value into the parameter feeding that
        input (batch normalization's running mean and variance use this). Most operators have none.
        """
        return {}


class CustomPythonOp(CustomOp):
    """An operator written in Python (NumPy arrays in, NumPy arrays out)."""


def as_tuple(result: Any) -> tuple:
    """Normalize what ``forward``/``backward`` returned (one array, a tuple or a list) to a tuple."""
    if isinstance(result, (tuple, list)):
        return tuple(result)
    return (result,)


def as_array_list(values: Sequence[Any]) -> list[np.ndarray]:
    """Inputs of a Python operator as NumPy arrays (scalars become 0-d arrays)."""
    return [v if isinstance(v, np.ndarray) or v is None else np.asarray(v) for v in values]
