"""Reference linear algebra: Gemm (``alpha * A' @ B' + beta * C``), MatMul (numpy matmul semantics), Einsum
(ONNX semantics = numpy.einsum) and Det. MatMulInteger and QLinearMatMul are with the quantization operators.

Gemm and MatMul run their float32/float64 products through d5._C (``kernels.gemm``/``kernels.matmul``: d5's
threads, single-threaded BLAS, the same bits at any thread count); transposed operands are read in place,
never copied.

Einsum's backward is built from einsum itself: the gradient of operand k is an einsum of the output gradient
with the other operands into operand k's subscripts. Three details make that general: letters that appear
only in operand k (summed away by the forward) come back by broadcasting; a repeated letter in operand k (a
diagonal, ``ii->i``) is handled by writing the gradient into the diagonal view of a zero array; and an
ellipsis is expanded into explicit letters, summing over dimensions that were broadcast from size 1.

>>> import numpy as np
>>> from d5.frameworks.reference.operators import create_operator
>>> gemm = create_operator("Gemm", {"transB": 1, "alpha": 2.0})
>>> gemm.forward([np.ones((2, 3)), np.ones((4, 3)), np.arange(4.0)])
array([[6., 7., 8., 9.],
       [6., 7., 8., 9.]])
>>> op = Einsum(equation="ij,jk->ik")
>>> a, b = np.arange(6.0).reshape(2, 3), np.ones((3, 2))
>>> op.forward([a, b]).tolist()
[[3.0, 3.0], [12.0, 12.0]]
>>> [g.shape for g in op.backward([np.ones((2, 2))], [a, b], None)]
[(2, 3), (3, 2)]
"""
from __future__ import annotations

import string

import numpy as np

from d5.errors import ShapeError
from d5.frameworks.reference.kernels import gemm, matmul
from d5.frameworks.reference.operators import ReferenceOp, register
from d5.frameworks.reference.operators.elementwise import ensure_array, unbroadcast
from d5.ops.onnx_attributes import adopt, operator_attributes
from d5.ops.tensor_checks import (check_gemm_bias, check_gemm_operands, check_square_matrices, einsum_mismatch,
                                  matmul_mismatch, require_einsum_dtype)


@register("Gemm")
class Gemm(ReferenceOp):
    """``Y = alpha * A' @ B' + beta * C`` with ``A' = A.T`` if ``transA`` (same for B); C is optional and
    broadcasts to ``(M, N)``."""

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("Gemm", attributes))

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
            check_gemm_bias(c.shape, y.shape)
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
        check_gemm_operands(a.shape, b.shape)
        return (a.T if self.transA else a), (b.T if self.transB else b)


@register("MatMul")
class MatMul(ReferenceOp):
    """Matrix product with numpy ``matmul`` semantics: batched (broadcast batch dimensions) and 1-D operands."""

    def forward(self, inputs):
        a, b = inputs[0], inputs[1]
        try:
            product = ensure_array(matmul(a, b))  # 1-D @ 1-D is a 0-d array, not a scalar
        except ValueError:
            raise matmul_mismatch(a.shape, b.shape) from None
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


def _parse(equation: str, shapes: list[tuple[int, ...]]) -> tuple[list[str], str]:
    """Explicit, ellipsis-free subscripts (one string per operand) and the output subscripts."""
    equation = equation.replace(" ", "")
    lhs, arrow, rhs = equation.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise ShapeError(f"Einsum: equation {equation!r} names {len(terms)} operands, got {len(shapes)} inputs")
    used = set(equation) - set(".,->")
    if not all(c in string.ascii_letters for c in used):
        raise ShapeError(f"Einsum: equation {equation!r} may only use letters, ',', '->' and '...'")
    spare = [c for c in string.ascii_letters if c not in used]
    ellipsis_rank = 0
    for term, shape in zip(terms, shapes):
        if "..." in term:
            ellipsis_rank = max(ellipsis_rank, len(shape) - len(term.replace("...", "")))
    ellipsis_letters = "".join(spare[:ellipsis_rank])
    explicit = []
    for term, shape in zip(terms, shapes):
        if "..." in term:
            rank = len(shape) - len(term.replace("...", ""))
            term = term.replace("...", ellipsis_letters[ellipsis_rank - rank:] if rank else "")
        if len(term) != len(shape):
            raise ShapeError(f"Einsum: subscripts {term!r} do not match an operand of rank {len(shape)}")
        explicit.append(term)
    if arrow:
        output = rhs.replace("...", ellipsis_letters)
    else:  # implicit mode: broadcast dims first, then letters used exactly once, in alphabetical order
        counts = "".join(t for t in lhs.split(",")).replace("...", "")
        output = ellipsis_letters + "".join(sorted(c for c in set(counts) if counts.count(c) == 1))
    return explicit, output


def _numpy_native(dtype: np.dtype) -> bool:
    return dtype.kind in "biufc" and np.dtype(dtype.str) == dtype  # a dtype numpy's own loops handle


def _einsum_dtype(dtype: np.dtype) -> bool:
    """The dtypes ONNX Einsum defines (integers, float16/32/64), plus bfloat16, computed in float32; not
    bool, strings, complex or float8 (whose float32 round trip would pass for an Einsum ONNX does not have)."""
    return (dtype.kind in "iuf" and _numpy_native(dtype)) or dtype.name == "bfloat16"


@register("Einsum")
class Einsum(ReferenceOp):
    """ONNX Einsum: ``Output = numpy.einsum(equation, *Inputs)``; dtype-preserving.

    >>> import numpy as np
    >>> Einsum(equation="ii").forward([np.eye(3)])
    array(3.)
    """

    def __init__(self, **attributes) -> None:
        super().__init__()
        adopt(self, operator_attributes("Einsum", attributes))

    def forward(self, inputs):
        arrays = [np.asarray(a) for a in inputs]
        for index, array in enumerate(arrays):
            require_einsum_dtype(index, _einsum_dtype(array.dtype), array.dtype)
        _parse(self.equation, [a.shape for a in arrays])
        exotic = {a.dtype for a in arrays if not _numpy_native(a.dtype)}
        if exotic:
            # bfloat16 (ml_dtypes) has no einsum loop in numpy: compute in float32 and cast back.
            arrays = [a.astype(np.float32) for a in arrays]
        try:
            result = np.asarray(np.einsum(self.equation, *arrays, optimize=len(arrays) > 2))
            return result.astype(exotic.pop(), copy=False) if exotic else result
        except ValueError as err:
            raise einsum_mismatch(self.equation, [a.shape for a in arrays], err) from None

    def backward(self, grads, fwd_inputs, fwd_outputs):
        arrays = [np.asarray(a) for a in fwd_inputs]
        terms, output = _parse(self.equation, [a.shape for a in arrays])
        sizes = {}
        for term, array in zip(terms, arrays):
            for letter, n in zip(term, array.shape):
                sizes[letter] = max(sizes.get(letter, 1), n)
        dy = np.asarray(grads[0])
        return tuple(None if not np.issubdtype(a.dtype, np.inexact) else
                     self._operand_grad(k, terms, output, arrays, dy, sizes) for k, a in enumerate(arrays))

    def _operand_grad(self, k, terms, output, arrays, dy, sizes):
        term, array = terms[k], arrays[k]
        unique = "".join(dict.fromkeys(term))                 # letters of operand k, first occurrence order
        others = [(t, a) for i, (t, a) in enumerate(zip(terms, arrays)) if i != k]
        available = set(output).union(*(set(t) for t, _ in others))
        reachable = "".join(c for c in unique if c in available)
        # Broadcast size-1 axes of the other operands/output must not shrink letters of operand k.
        subscripts = ",".join([output] + [t for t, _ in others]) + "->" + reachable
        grad = np.einsum(subscripts, dy, *[a for _, a in others], optimize=len(others) > 1)
        # Letters only in operand k were summed by the forward: the gradient is constant along them.
        full_shape = tuple(sizes[c] if c in reachable else array.shape[term.index(c)] for c in unique)
        expand = "".join(c for c in unique if c not in reachable)
        if expand:
            grad = grad.reshape([sizes[c] if c in reachable else 1 for c in unique])
            grad = np.broadcast_to(grad, full_shape)
        # Operand k's own size-1 axes that were broadcast against larger ones: sum back to size 1.
        own = tuple(array.shape[term.index(c)] for c in unique)
        axes = tuple(i for i, (n, m) in enumerate(zip(own, grad.shape)) if n == 1 and m != 1)
        if axes:
            grad = grad.sum(axis=axes, keepdims=True)
        if unique != term:                                     # repeated letters: write onto the diagonal
            result = np.zeros(array.shape, dtype=np.result_type(grad, array))
            np.einsum(f"{term}->{unique}", result)[...] = grad
            grad = result
        return np.asarray(grad).reshape(array.shape).astype(array.dtype, copy=False)


@register("Det")
class Det(ReferenceOp):
    """Determinant of the square matrices in the last two axes; gradient ``g * det(X) * inv(X)^T``.

    >>> Det().forward([np.array([[2.0, 1.0], [1.0, 3.0]], np.float32)])
    array(5., dtype=float32)
    """

    def forward(self, inputs):
        x = inputs[0]
        check_square_matrices(x.shape)
        return ensure_array(np.linalg.det(x)).astype(x.dtype)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        x, g = fwd_inputs[0], grads[0]
        # d det(X) / dX = adj(X)^T = det(X) * inv(X)^T (singular X would need the adjugate; rare in practice).
        inverse_t = np.swapaxes(np.linalg.inv(x.astype(np.float64)), -1, -2)
        det = np.asarray(fwd_outputs[0], np.float64)[..., None, None]
        return ensure_array(np.asarray(g, np.float64)[..., None, None] * det * inverse_t).astype(x.dtype)


__all__ = ["Det", "Einsum", "Gemm", "MatMul"]
