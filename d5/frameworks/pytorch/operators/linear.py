"""Linear algebra as native torch operations: Gemm, MatMul, Einsum."""
from __future__ import annotations

import torch

from d5.frameworks.pytorch.operators import TorchOp, register
from d5.ops.onnx_semantics import as_text


@register("Gemm")
class Gemm(TorchOp):
    """``alpha * A' @ B' + beta * C`` with A' = A^T if transA, B' = B^T if transB; C optional, broadcasting."""

    def __init__(self, alpha: float = 1.0, beta: float = 1.0, transA: int = 0, transB: int = 0) -> None:
        super().__init__()
        self.alpha, self.beta = float(alpha), float(beta)
        self.trans_a, self.trans_b = bool(transA), bool(transB)

    def forward(self, a, b, c=None):
        a = a.t() if self.trans_a else a
        b = b.t() if self.trans_b else b
        if c is not None and self.beta != 0.0:
            if self.alpha == 1.0 and self.beta == 1.0 and c.dim() <= 2:
                return torch.addmm(c.expand(a.shape[0], b.shape[1]), a, b)
            return torch.addmm(c.expand(a.shape[0], b.shape[1]), a, b, beta=self.beta, alpha=self.alpha)
        y = a @ b
        return y if self.alpha == 1.0 else y * self.alpha


@register("MatMul")
class MatMul(TorchOp):
    def forward(self, a, b):
        return torch.matmul(a, b)


@register("Einsum")
class Einsum(TorchOp):
    def __init__(self, equation) -> None:
        super().__init__()
        self.equation = as_text(equation).replace(" ", "")

    def forward(self, *inputs):
        return torch.einsum(self.equation, *inputs)
