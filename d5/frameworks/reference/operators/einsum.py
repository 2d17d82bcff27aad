"""Reference Einsum (ONNX semantics = numpy.einsum), with a backward built from einsum itself.

The gradient of operand k is an einsum of the output gradient with the other operands into operand k's
subscripts. Three details make that general: letters that appear only in operand k (summed away by the
forward) come back by broadcasting; a repeated letter in operand k (a diagonal, ``ii->i``) is handled by
writing the gradient into the diagonal view of a zero array; and an ellipsis is expanded into explicit
letters, summing over dimensions that were broadcast from size 1.

>>> import numpy as np
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

from d5.errors import ShapeError, UnsupportedOperatorError
from d5.frameworks.reference.operators.registry import ReferenceOp, register


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

    def __init__(self, equation: str) -> None:
        super().__init__()
        self.equation = (equation.decode() if isinstance(equation, bytes) else str(equation)).replace(" ", "")

    def forward(self, inputs):
        arrays = [np.asarray(a) for a in inputs]
        for index, array in enumerate(arrays):
            if not _einsum_dtype(array.dtype):
                raise ShapeError(f"Einsum: operand {index} has dtype {array.dtype}; Einsum takes integer tensors and "
                                 "float16, float32, float64 or bfloat16. Cast it first")
        _parse(self.equation, [a.shape for a in arrays])
        exotic = {a.dtype for a in arrays if not _numpy_native(a.dtype)}
        if exotic:
            # bfloat16 (ml_dtypes) has no einsum loop in numpy: compute in float32 and cast back.
            arrays = [a.astype(np.float32) for a in arrays]
        try:
            result = np.asarray(np.einsum(self.equation, *arrays, optimize=len(arrays) > 2))
            return result.astype(exotic.pop(), copy=False) if exotic else result
        except ValueError as err:
            raise ShapeError(f"Einsum: equation {self.equation!r} does not fit the operand shapes "
                             f"{[a.shape for a in arrays]}: {err}") from None

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


__all__ = ["Einsum"]
