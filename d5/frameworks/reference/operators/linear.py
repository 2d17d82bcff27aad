"""Reference linear algebra: Gemm (``alpha * A' @ B' + beta * C``) and MatMul (numpy matmul semantics).

Both run their float32/float64 products through d5._C (``kernels.gemm``/``kernels.matmul``: d5's threads,
single-threaded BLAS, the same bits at any thread count); transposed operands are read in place, never copied.

>>> import numpy as np
>>> from d5.frameworks.reference.operators import create_operator
>>> gemm = create_operator("Gemm", {"transB": 1, "alpha": 2.0})
>>> gemm.forward([np.ones((2, 3)), np.ones((4, 3)), np.arange(4.0)])
array([[6., 7., 8., 9.],
       [6., 7., 8., 9.]])
"""
from __future__ import annotations

import numpy as np

from d5.errors import ShapeError
from d5.frameworks.reference.kernels import gemm, matmul
from d5.frameworks.reference.operators.elementwise import ensure_array, unbroadcast
from d5.frameworks.reference.operators.registry import ReferenceOp, register


@register("Gemm")
class Gemm(ReferenceOp):
    """``Y = alpha * A' @ B' + beta * C`` with ``A' = A.T`` if ``transA`` (same for B); C is optional and
    broadcasts to ``(M, N)``."""

    def __init__(self, alpha: float = 1.0, beta: float = 1.0, transA: int = 0, transB: int = 0) -> None:
        super().__init__()
        self.alpha = float(alpha)
        self.beta = float(beta)
        self.transA = bool(transA)
        self.transB = bool(transB)

    def forward(self, inputs):
        a, b = self._operands(inputs[0], inputs[1])
        c = inputs[2] if len(inputs) > 2 else None
        if a.shape[1] != b.shape[0]:
            raise ShapeError(f"Gemm: inner dimensions differ: A{'.T' if self.transA else ''} is {a.shape} and "
                             f"B{'.T' if self.transB else ''} is {b.shape} (A {inputs[0].shape}, B {inputs[1].shape}, "
                             f"transA={int(self.transA)}, transB={int(self.transB)}); check the transpose flags")
        y = gemm(inputs[0], inputs[1], self.transA, self.transB)
        if self.alpha != 1.0:
            y *= self.alpha
        if c is not None:
            if not _broadcasts_to(c.shape, y.shape):
                raise ShapeError(f"Gemm: C of shape {c.shape} does not broadcast to the output shape {y.shape}")
            if self.beta == 1.0:
                y += c
            elif self.beta != 0.0:
                y += self.beta * c
        return y

    def backward(self, grads, fwd_inputs, fwd_outputs):
        g = grads[0]
        a, b = fwd_inputs[0], fwd_inputs[1]
        self._operands(a, b)
        # Gradients of A' and B' are g @ B'.T and A'.T @ g; for a transposed operand compute the
        # transpose directly (B' @ g.T) rather than transposing the product.
        grad_a = gemm(b, g, self.transB, True) if self.transA else gemm(g, b, False, not self.transB)
        grad_b = gemm(g, a, True, self.transA) if self.transB else gemm(a, g, not self.transA, False)
        if self.alpha != 1.0:
            grad_a *= self.alpha
            grad_b *= self.alpha
        result = [grad_a, grad_b]
        if len(fwd_inputs) > 2:
            c = fwd_inputs[2]
            result.append(None if c is None else unbroadcast(g * self.beta if self.beta != 1.0 else g, c.shape))
        return tuple(result)

    def _operands(self, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if a.ndim != 2 or b.ndim != 2:
            raise ShapeError(f"Gemm: A and B must be 2-D, got A {a.shape} and B {b.shape}; use MatMul for other ranks")
        return (a.T if self.transA else a), (b.T if self.transB else b)


def _broadcasts_to(shape: tuple, target: tuple) -> bool:
    # ONNX's unidirectional broadcasting: C may stretch to the output shape, never the reverse.
    try:
        return np.broadcast_shapes(shape, target) == tuple(target)
    except ValueError:
        return False


@register("MatMul")
class MatMul(ReferenceOp):
    """Matrix product with numpy ``matmul`` semantics: batched (broadcast batch dimensions) and 1-D operands."""

    def forward(self, inputs):
        a, b = inputs[0], inputs[1]
        try:
            product = ensure_array(matmul(a, b))  # 1-D @ 1-D is a 0-d array, not a scalar
        except ValueError:
            raise ShapeError(f"MatMul: shapes {a.shape} and {b.shape} do not multiply (the last dimension of A must "
                             "equal the second-to-last of B, batch dimensions must broadcast, no 0-D operands)") from None
        # ml_dtypes' bfloat16 matmul accumulates and returns float32; ONNX keeps the operands' type.
        return product.astype(np.result_type(a, b), copy=False)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        a, b = fwd_inputs
        # Promote 1-D operands to matrices as matmul does, so one formula covers every case.
        a2 = a[np.newaxis, :] if a.ndim == 1 else a
        b2 = b[:, np.newaxis] if b.ndim == 1 else b
        out_shape = np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2]) + (a2.shape[-2], b2.shape[-1])
        g = grads[0].reshape(out_shape)
        grad_a = matmul(g, np.swapaxes(b2, -1, -2))
        if b2.ndim == 2 and a2.ndim > 2:
            # B is shared by the whole batch: fold the batch into one GEMM instead of a batched product
            # followed by a sum over the batch.
            grad_b = gemm(np.ascontiguousarray(a2).reshape(-1, a2.shape[-1]), g.reshape(-1, g.shape[-1]), True, False)
        else:
            grad_b = unbroadcast(matmul(np.swapaxes(a2, -1, -2), g), b2.shape)
        grad_a = unbroadcast(grad_a, a2.shape)
        return (ensure_array(grad_a).reshape(a.shape).astype(a.dtype, copy=False),
                ensure_array(grad_b).reshape(b.shape).astype(b.dtype, copy=False))
