"""Elementwise operators as native torch operations: arithmetic with ONNX (NumPy) broadcasting, unary math,
comparisons and logic (bool outputs), Where, Cast/CastLike, Clip, and the variadic Min/Max/Sum/Mean."""
from __future__ import annotations

import torch

from d5.errors import ShapeError
from d5.frameworks.pytorch.operators import TorchOp, register
from d5.frameworks.pytorch.operators._helpers import torch_dtype


def _simple(op_type: str, fn, doc: str) -> type:
    """Register a converter with no attributes that applies ``fn`` to its inputs."""

    def forward(self, *inputs):
        return fn(*inputs)

    cls = type(op_type, (TorchOp,), {"forward": forward, "__doc__": doc, "__module__": __name__})
    register(op_type)(cls)
    return cls


def _div(a, b):
    # ONNX Div on integers truncates toward zero (C semantics), as the reference's NumPy path does for ints.
    if not a.is_floating_point() and not b.is_floating_point():
        return torch.div(a, b, rounding_mode="trunc")
    return a / b


def _pow(x, y):
    out = torch.pow(x, y)
    return out.to(x.dtype) if out.dtype != x.dtype else out  # ONNX Pow keeps the base's type


Add = _simple("Add", torch.add, "``A + B``.")
Sub = _simple("Sub", torch.sub, "``A - B``.")
Mul = _simple("Mul", torch.mul, "``A * B``.")
Div = _simple("Div", _div, "``A / B`` (integer division truncates).")
Pow = _simple("Pow", _pow, "``X ** Y`` in X's type.")
Neg = _simple("Neg", torch.neg, "``-X``.")
Abs = _simple("Abs", torch.abs, "``|X|``.")
Exp = _simple("Exp", torch.exp, "``e ** X``.")
Log = _simple("Log", torch.log, "Natural logarithm.")
Sqrt = _simple("Sqrt", torch.sqrt, "Square root.")
Reciprocal = _simple("Reciprocal", torch.reciprocal, "``1 / X``.")
Erf = _simple("Erf", torch.erf, "The error function.")
Floor = _simple("Floor", torch.floor, "Round down.")
Ceil = _simple("Ceil", torch.ceil, "Round up.")
Round = _simple("Round", torch.round, "Round half to even.")
Sign = _simple("Sign", torch.sign, "-1, 0 or 1.")
Sin = _simple("Sin", torch.sin, "Sine.")
Cos = _simple("Cos", torch.cos, "Cosine.")
Equal = _simple("Equal", torch.eq, "``A == B`` (bool).")
Less = _simple("Less", torch.lt, "``A < B`` (bool).")
LessOrEqual = _simple("LessOrEqual", torch.le, "``A <= B`` (bool).")
Greater = _simple("Greater", torch.gt, "``A > B`` (bool).")
GreaterOrEqual = _simple("GreaterOrEqual", torch.ge, "``A >= B`` (bool).")
Not = _simple("Not", torch.logical_not, "Logical not.")
And = _simple("And", torch.logical_and, "Logical and.")
Or = _simple("Or", torch.logical_or, "Logical or.")
Xor = _simple("Xor", torch.logical_xor, "Logical xor.")
IsNaN = _simple("IsNaN", torch.isnan, "NaN test (bool).")
Where = _simple("Where", torch.where, "``X`` where the condition holds, else ``Y``.")


def _variadic(op_type: str, combine, finish=None) -> type:
    def forward(self, *inputs):
        if not inputs:
            raise ShapeError(f"{op_type}: needs at least one input")
        out = inputs[0]
        for x in inputs[1:]:
            out = combine(out, x)
        return finish(out, len(inputs)) if finish else out

    cls = type(op_type, (TorchOp,), {"forward": forward, "__module__": __name__,
                                      "__doc__": f"ONNX {op_type} of one or more broadcasting inputs."})
    register(op_type)(cls)
    return cls


Max = _variadic("Max", torch.maximum)
Min = _variadic("Min", torch.minimum)
Sum = _variadic("Sum", torch.add)
Mean = _variadic("Mean", torch.add, lambda total, n: total / n)


@register("Clip")
class Clip(TorchOp):
    """``min(max(X, min), max)``; min/max are optional scalar inputs (attributes before opset 11)."""

    def __init__(self, min: float | None = None, max: float | None = None) -> None:  # noqa: A002 (ONNX names)
        super().__init__()
        self.low, self.high = min, max

    def forward(self, x, low=None, high=None):
        low = self.low if low is None else low
        high = self.high if high is None else high
        out = x
        if low is not None:
            out = torch.maximum(out, _bound(low, x))
        if high is not None:
            out = torch.minimum(out, _bound(high, x))
        return out


@register("Cast")
class Cast(TorchOp):
    def __init__(self, to, saturate: int = 1, round_mode="up") -> None:
        super().__init__()
        self.dtype = torch_dtype(to)

    def forward(self, x):
        return x.to(self.dtype)


@register("CastLike")
class CastLike(TorchOp):
    def __init__(self, saturate: int = 1, round_mode="up") -> None:
        super().__init__()

    def forward(self, x, like):
        return x.to(like.dtype)


def _bound(value, x):
    # The bounds get no gradient, as in the reference (they are constants of the graph).
    if isinstance(value, torch.Tensor):
        return value.detach().to(x.dtype).reshape(())
    return torch.tensor(value, dtype=x.dtype, device=x.device)
