"""Linear algebra as native torch operations: Gemm, MatMul, Einsum, Det."""
from __future__ import annotations

import torch

from d5.frameworks.pytorch.operators import TorchOp, register
from d5.frameworks.pytorch.operators.elementwise import SIGNED_OF, as_signed
from d5.ops.onnx_attributes import adopt, operator_attributes
from d5.ops.tensor_checks import check_square_matrices, einsum_mismatch, require_einsum_dtype


@register("Gemm")
class Gemm(TorchOp):
    """``alpha * A' @ B' + beta * C`` with A' = A^T if transA, B' = B^T if transB; C optional, broadcasting."""

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("Gemm", attributes))

    def forward(self, a, b, c=None):
        if (self.transB and not self.transA and self.alpha == 1.0 and a.dim() == 2 and b.dim() == 2
                and (c is None or self.beta == 0.0 or (self.beta == 1.0 and c.dim() == 1 and c.shape[0] == b.shape[0]))):
            # A fully connected layer (W stored (out, in), as torch's): torch's own linear, which nn.Linear runs
            return torch.nn.functional.linear(a, b, None if self.beta == 0.0 else c)
        a = a.t() if self.transA else a
        b = b.t() if self.transB else b
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
    """ONNX Einsum (``numpy.einsum`` semantics), keeping the operands' dtype: torch sums integers into int64,
    and has no kernels for uint16/32/64 (those are computed on int64, whose wrap-around truncates to theirs)."""

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("Einsum", attributes))

    def forward(self, *inputs):
        for index, x in enumerate(inputs):
            require_einsum_dtype(index, not (x.dtype == torch.bool or x.is_complex()), x.dtype)
        dtype = inputs[0].dtype if inputs else None
        try:
            if dtype in SIGNED_OF:
                out = torch.einsum(self.equation, *(as_signed(x).to(torch.int64) for x in inputs))
                return out.view(dtype) if dtype == torch.uint64 else out.to(dtype)
            out = torch.einsum(self.equation, *inputs)
        except RuntimeError as err:
            raise einsum_mismatch(self.equation, [tuple(x.shape) for x in inputs], str(err).splitlines()[0]) from None
        return out if out.dtype == dtype else out.to(dtype)


@register("Det")
class Det(TorchOp):
    """Determinant of the square matrices in the last two axes (float16/bfloat16 computed in float32)."""

    def forward(self, x):
        check_square_matrices(tuple(x.shape))
        if x.dtype in (torch.float32, torch.float64):
            return torch.linalg.det(x)
        compute = torch.float32 if x.is_floating_point() else torch.float64
        return torch.linalg.det(x.to(compute)).to(x.dtype)
