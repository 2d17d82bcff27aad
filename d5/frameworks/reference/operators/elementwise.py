"""Reference elementwise operators: Add, Sub, Mul, Div (numpy broadcasting), Neg, Abs, Exp, Log, Sqrt, Pow.

ONNX semantics; the output keeps the input's float dtype. Gradients handed back may be views of (or the
same object as) the incoming gradient: executors treat gradients as read-only and accumulate out of place.

>>> import numpy as np
>>> from d5.frameworks.reference.operators import create_operator
>>> add = create_operator("Add", {})
>>> add.forward([np.ones((2, 3), np.float32), np.arange(3, dtype=np.float32)])
array([[1., 2., 3.],
       [1., 2., 3.]], dtype=float32)
>>> grad_a, grad_b = add.backward([np.ones((2, 3), np.float32)], [np.ones((2, 3)), np.ones(3)], [None])
>>> grad_b
array([2., 2., 2.], dtype=float32)
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from d5.errors import ShapeError
from d5.frameworks.reference.operators.registry import ReferenceOp, register


def ensure_array(value) -> np.ndarray:
    """``value`` as an ndarray: numpy ufuncs turn 0-d array inputs into numpy scalars, which executors and
    ``.shape``-less consumers must not see. Free for arrays (the common case)."""
    return value if type(value) is np.ndarray else np.asarray(value)


def unbroadcast(grad: np.ndarray, shape: tuple) -> np.ndarray:
    """Sum ``grad`` (shaped like a broadcast result) back down to an input of ``shape``.

    Numpy broadcasting prepends axes and stretches axes of length 1; the gradient of a broadcast input
    is the sum over exactly those axes. Returns ``grad`` itself when no reduction is needed.

    >>> unbroadcast(np.ones((4, 2, 3)), (2, 1)).tolist()
    [[12.0], [12.0]]
    """
    shape = tuple(shape)
    if grad.shape == shape:
        return ensure_array(grad)
    leading = grad.ndim - len(shape)
    axes = tuple(range(leading)) + tuple(
        leading + i for i, size in enumerate(shape) if size == 1 and grad.shape[leading + i] != 1)
    return grad.sum(axis=axes).reshape(shape)


def broadcast_error(op_name: str, *arrays: np.ndarray) -> ShapeError:
    """The ShapeError for inputs whose shapes do not broadcast together."""
    shapes = ", ".join(str(a.shape) for a in arrays)
    return ShapeError(f"{op_name}: input shapes {shapes} are not broadcastable (numpy rules: trailing dimensions "
                      "must be equal or 1); reshape or unsqueeze an input")


def _binary(op_name: str, function: Callable, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    try:
        return ensure_array(function(a, b))
    except ValueError:
        # Only reached on error, so the hot path pays no shape check of its own.
        raise broadcast_error(op_name, a, b) from None


@register("Add")
class Add(ReferenceOp):
    """``A + B`` with numpy broadcasting."""

    def forward(self, inputs):
        return _binary("Add", np.add, inputs[0], inputs[1])

    def backward(self, grads, fwd_inputs, fwd_outputs):
        g = grads[0]
        return unbroadcast(g, fwd_inputs[0].shape), unbroadcast(g, fwd_inputs[1].shape)


@register("Sub")
class Sub(ReferenceOp):
    """``A - B`` with numpy broadcasting."""

    def forward(self, inputs):
        return _binary("Sub", np.subtract, inputs[0], inputs[1])

    def backward(self, grads, fwd_inputs, fwd_outputs):
        g = grads[0]
        return unbroadcast(g, fwd_inputs[0].shape), np.negative(unbroadcast(g, fwd_inputs[1].shape))


@register("Mul")
class Mul(ReferenceOp):
    """``A * B`` with numpy broadcasting."""

    def forward(self, inputs):
        return _binary("Mul", np.multiply, inputs[0], inputs[1])

    def backward(self, grads, fwd_inputs, fwd_outputs):
        g, (a, b) = grads[0], fwd_inputs
        return unbroadcast(g * b, a.shape), unbroadcast(g * a, b.shape)


@register("Div")
class Div(ReferenceOp):
    """``A / B`` with numpy broadcasting (true division for floats)."""

    def forward(self, inputs):
        a, b = inputs[0], inputs[1]
        if np.issubdtype(a.dtype, np.integer) and np.issubdtype(b.dtype, np.integer):
            return _binary("Div", _truncating_divide, a, b)
        return _binary("Div", np.true_divide, a, b)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        (a, b), out = fwd_inputs, fwd_outputs[0]
        grad_a = ensure_array(grads[0] / b)
        # d(a/b)/db = -a / b**2 = -(a/b) / b, so reuse the forward output instead of squaring b.
        grad_b = ensure_array(np.multiply(grad_a, out))
        np.negative(grad_b, out=grad_b)
        return unbroadcast(grad_a, a.shape), unbroadcast(grad_b, b.shape)


def _truncating_divide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    # ONNX integer Div truncates toward zero (as C does); numpy's // floors.
    quotient = np.floor_divide(a, b)
    if np.issubdtype(quotient.dtype, np.signedinteger):
        quotient += ((np.remainder(a, b) != 0) & ((a < 0) != (b < 0))).astype(quotient.dtype)
    return quotient


@register("Neg")
class Neg(ReferenceOp):
    """``-X``."""

    def forward(self, inputs):
        return ensure_array(np.negative(inputs[0]))

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return ensure_array(np.negative(grads[0]))


@register("Abs")
class Abs(ReferenceOp):
    """``|X|``; the gradient at 0 is 0 (the subgradient PyTorch uses)."""

    def forward(self, inputs):
        return ensure_array(np.abs(inputs[0]))

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return ensure_array(grads[0] * np.sign(fwd_inputs[0]))


@register("Exp")
class Exp(ReferenceOp):
    """``exp(X)``."""

    def forward(self, inputs):
        return ensure_array(np.exp(inputs[0]))

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return ensure_array(grads[0] * fwd_outputs[0])


@register("Log")
class Log(ReferenceOp):
    """Natural logarithm (NaN for negative inputs, -inf at 0, as in ONNX)."""

    def forward(self, inputs):
        with np.errstate(divide="ignore", invalid="ignore"):
            return ensure_array(np.log(inputs[0]))

    def backward(self, grads, fwd_inputs, fwd_outputs):
        with np.errstate(divide="ignore"):
            return ensure_array(grads[0] / fwd_inputs[0])


@register("Sqrt")
class Sqrt(ReferenceOp):
    """Square root (NaN for negative inputs, as in ONNX)."""

    def forward(self, inputs):
        with np.errstate(invalid="ignore"):
            return ensure_array(np.sqrt(inputs[0]))

    def backward(self, grads, fwd_inputs, fwd_outputs):
        with np.errstate(divide="ignore"):
            grad = ensure_array(grads[0] / fwd_outputs[0])
        grad *= 0.5
        return grad


@register("Pow")
class Pow(ReferenceOp):
    """``X ** Y`` with broadcasting; the output has X's dtype (an integer Y is converted to it).

    Edge cases follow PyTorch: the gradient for X is 0 where Y == 0, the gradient for Y is 0 where
    X == 0 and Y >= 0; an integer Y gets no gradient.
    """

    def forward(self, inputs):
        x, y = inputs[0], inputs[1]
        if y.dtype != x.dtype:
            y = y.astype(x.dtype)
        with np.errstate(divide="ignore", invalid="ignore"):
            return _binary("Pow", np.power, x, y)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        (x, y), out, g = fwd_inputs, fwd_outputs[0], grads[0]
        y_float = y if y.dtype == x.dtype else y.astype(x.dtype)
        with np.errstate(divide="ignore", invalid="ignore"):
            grad_x = g * y_float * np.power(x, y_float - 1)
            grad_x = np.where(y_float == 0, 0, grad_x).astype(grad_x.dtype, copy=False)
            grad_y = None
            if np.issubdtype(y.dtype, np.floating):
                grad_y = g * out * np.log(x)
                grad_y = np.where((x == 0) & (y >= 0), 0, grad_y).astype(grad_y.dtype, copy=False)
                grad_y = unbroadcast(grad_y, y.shape)
        # Python/0-d operands above may have promoted float32 to float64: hand back the inputs' dtypes.
        grad_x = unbroadcast(grad_x, x.shape).astype(x.dtype, copy=False)
        return grad_x, None if grad_y is None else grad_y.astype(y.dtype, copy=False)
