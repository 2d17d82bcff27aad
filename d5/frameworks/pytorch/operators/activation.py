"""Activations as native torch operations: Relu, Sigmoid, Tanh, LeakyRelu, Elu, Selu, Celu, Gelu, HardSigmoid,
HardSwish, Mish, Softplus, Softsign, ThresholdedRelu, PRelu, Shrink, Swish, SwiGLU, Softmax/LogSoftmax/Hardmax
(opset 13 and the 2-D-coercing opsets 1-12), and Dropout (with its mask output)."""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from d5.frameworks.pytorch.operators import TorchOp, register
from d5.frameworks.pytorch.operators._helpers import scalar
from d5.ops.onnx_attributes import adopt, operator_attributes
from d5.ops.onnx_semantics import normalize_axis
from d5.ops.window_checks import CoercedTo2D, check_dropout_ratio, check_swiglu_inputs, per_channel_slope


class _Unary(TorchOp):
    fn = staticmethod(lambda x: x)

    def forward(self, x):
        return type(self).fn(x)


@register("Relu")
class Relu(_Unary):
    fn = staticmethod(torch.relu)


@register("Sigmoid")
class Sigmoid(_Unary):
    fn = staticmethod(torch.sigmoid)


@register("Tanh")
class Tanh(_Unary):
    fn = staticmethod(torch.tanh)


@register("Softplus")
class Softplus(_Unary):
    fn = staticmethod(F.softplus)


@register("Softsign")
class Softsign(_Unary):
    fn = staticmethod(F.softsign)


@register("Mish")
class Mish(_Unary):
    fn = staticmethod(F.mish)


@register("HardSwish")
class HardSwish(_Unary):
    fn = staticmethod(F.hardswish)  # x * max(0, min(1, x/6 + 1/2)), ONNX's alpha=1/6, beta=0.5


@register("LeakyRelu")
class LeakyRelu(TorchOp):
    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("LeakyRelu", attributes))

    def forward(self, x):
        return F.leaky_relu(x, self.alpha)


@register("Elu")
class Elu(TorchOp):
    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("Elu", attributes))

    def forward(self, x):
        return F.elu(x, self.alpha)


@register("Celu")
class Celu(TorchOp):
    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("Celu", attributes))

    def forward(self, x):
        return F.celu(x, self.alpha)


@register("Selu")
class Selu(TorchOp):
    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("Selu", attributes))

    def forward(self, x):
        return self.gamma * torch.where(x > 0, x, self.alpha * torch.expm1(torch.clamp(x, max=0)))


@register("ThresholdedRelu")
class ThresholdedRelu(TorchOp):
    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("ThresholdedRelu", attributes))

    def forward(self, x):
        return torch.where(x > self.alpha, x, torch.zeros_like(x))


@register("Gelu")
class Gelu(TorchOp):
    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("Gelu", attributes))

    def forward(self, x):
        return F.gelu(x, approximate=self.approximate)


@register("HardSigmoid")
class HardSigmoid(TorchOp):
    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("HardSigmoid", attributes))

    def forward(self, x):
        return torch.clamp(x * self.alpha + self.beta, 0, 1)


@register("PRelu")
class PRelu(TorchOp):
    """``x`` where positive, ``slope * x`` elsewhere; the slope broadcasts against x (ONNX's unidirectional
    broadcasting; a 1-D slope of C values on an (N, C, ...) input applies per channel, as the reference)."""

    def forward(self, x, slope):
        if per_channel_slope(x.shape, slope.shape):
            slope = slope.reshape(-1, *(1,) * (x.dim() - 2))
        return torch.where(x >= 0, x, x * slope)


@register("Shrink")
class Shrink(TorchOp):
    """``X + bias`` where ``X < -lambd``, ``X - bias`` where ``X > lambd``, 0 elsewhere (any numeric type; the
    bias in X's type, as the reference); gradient 1 outside ``[-lambd, lambd]``."""

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("Shrink", attributes))

    def forward(self, x):
        bias = self.bias if x.is_floating_point() else int(self.bias)  # NumPy's astype truncates toward zero
        zero = torch.zeros((), dtype=x.dtype, device=x.device)
        return torch.where(x < -self.lambd, x + bias, torch.where(x > self.lambd, x - bias, zero)).to(x.dtype)


_NARROW_FLOATS = (torch.float16, torch.bfloat16)


def _swish(x: torch.Tensor, alpha: float) -> torch.Tensor:
    # Computed in float32 for the narrow floats (as the reference); F.silu is the fused alpha = 1 case.
    return F.silu(x) if alpha == 1.0 else x * torch.sigmoid(alpha * x)


@register("Swish")
class Swish(TorchOp):
    """``X * sigmoid(alpha * X)`` (SiLU for ``alpha=1``)."""

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("Swish", attributes))

    def forward(self, x):
        if x.dtype in _NARROW_FLOATS:
            return _swish(x.float(), self.alpha).to(x.dtype)
        return _swish(x, self.alpha)


@register("SwiGLU")
class SwiGLU(TorchOp):
    """``Swish_alpha(A) * B`` for A and B of one shape (no broadcasting)."""

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("SwiGLU", attributes))

    def forward(self, a, b=None):
        check_swiglu_inputs(a.shape, None if b is None else b.shape)
        if a.dtype in _NARROW_FLOATS or b.dtype in _NARROW_FLOATS:
            compute = torch.float64 if torch.float64 in (a.dtype, b.dtype) else torch.float32
            return (_swish(a.to(compute), self.alpha) * b.to(compute)).to(a.dtype)
        return _swish(a, self.alpha) * b


@register("Softmax", since=13)
class Softmax(TorchOp):
    op_name = "Softmax"

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes(self.op_name, attributes, opset=13))

    def forward(self, x):
        return self._apply(x, normalize_axis(type(self).__name__, self.axis, x.dim()))

    def _apply(self, x, axis):
        if x.dtype == torch.float16:
            # ONNX's expected float16 outputs round after each step (exp, sum, divide); torch's fused kernel
            # computes in float32 and rounds once, which can differ by one unit in the last place.
            e = torch.exp(x - x.amax(axis, keepdim=True))
            return e / e.sum(axis, keepdim=True)
        return torch.softmax(x, axis)


@register("LogSoftmax", since=13)
class LogSoftmax(Softmax):
    op_name = "LogSoftmax"

    def _apply(self, x, axis):
        return torch.log_softmax(x, axis)


@register("Hardmax", since=13)
class Hardmax(Softmax):
    op_name = "Hardmax"

    def _apply(self, x, axis):
        if x.numel() == 0:
            return torch.zeros_like(x)
        winner = torch.argmax(x.detach(), dim=axis, keepdim=True)  # the first maximum, as numpy.argmax
        return torch.zeros_like(x).scatter(axis, winner, 1.0)


class _CoercedTo2D(CoercedTo2D):
    """Opsets 1-12: the input coerced to 2-D at ``axis`` (default 1), each row normalized."""

    def forward(self, x):
        flat = x.reshape(self.coerced_shape(x.shape))
        return self._apply(flat, 1).reshape(x.shape)


@register("Softmax", since=1)
class Softmax1(_CoercedTo2D, Softmax):
    pass


@register("LogSoftmax", since=1)
class LogSoftmax1(_CoercedTo2D, LogSoftmax):
    pass


@register("Hardmax", since=1)
class Hardmax1(_CoercedTo2D, Hardmax):
    pass


@register("Dropout")
class Dropout(TorchOp):
    """Inverted dropout, active in training passes (``self.training``) or when the ``training_mode`` input is
    true, with ratio > 0; returns ``(output, mask)`` when the node names two outputs, else the output. The
    mask comes from torch's generator (seeded by ``seed`` when given), so it differs from the reference's
    NumPy stream; the deterministic cases (inactive, ratio 0) are identical."""

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("Dropout", attributes))
        self._generator = None
        if self.seed is not None:
            self._generator = torch.Generator().manual_seed(self.seed % 2 ** 63)

    def random_state(self):
        """The seeded generator's state as a uint8 array (None: masks come from torch's global generator, which
        the executor's random state holds), for checkpoints."""
        return None if self._generator is None else self._generator.get_state().numpy()

    def set_random_state(self, state) -> None:
        if self._generator is not None and state is not None:
            self._generator.set_state(torch.from_numpy(np.asarray(state, dtype=np.uint8).copy()))

    def forward(self, data, ratio=None, training_mode=None):
        ratio = self.ratio if ratio is None else scalar(ratio, float)
        check_dropout_ratio(ratio)
        active = (self.training or (training_mode is not None and scalar(training_mode, bool))) and ratio > 0.0
        want_mask = self.node_output_count is not None and self.node_output_count > 1
        if not active:
            output = data
            mask = torch.ones(data.shape, dtype=torch.bool, device=data.device) if want_mask else None
        else:
            if self._generator is not None and data.device.type == "cpu":
                noise = torch.rand(data.shape, generator=self._generator, dtype=torch.float32)
            else:
                noise = torch.rand(data.shape, dtype=torch.float32, device=data.device)
            mask = noise >= ratio
            output = data * mask
            if ratio < 1.0:
                output = output * (1.0 / (1.0 - ratio))
        return (output, mask) if want_mask else output
