"""Linear algebra as native MXNet operations: Gemm (MXNet's ``FullyConnected`` kernel where Gemm is a dense layer,
what a Gluon ``Dense`` runs; ``dot`` otherwise), MatMul (NumPy's ``matmul``: a 2-D right operand shared by a batch
is one ``dot`` over the batch folded into the rows, other shapes one ``batch_dot`` over the broadcast batch axes --
not ``np.matmul``, whose gradient does not sum over broadcast batch axes), Einsum
(``np.einsum``) and Det (``linalg.det``, its gradient ``det * inv^T``).

MXNet's CPU products (``dot``, ``batch_dot``, ``FullyConnected``, ``linalg``) take float32 and float64 only:
float16 and bfloat16 are computed in float32 and cast back; integer matrix products are exact sums of int64 products
(broadcast multiply and sum), cast back to the operands' type, whose wrap-around is the narrow type's own, as
NumPy's. ``np.einsum`` has integer kernels; uint32/uint64, which MXNet does not hold, arrive only as values known
before the graph runs and are computed at once in int64 (uint64 by its bits).

>>> import numpy as np
>>> from d5.frameworks.mxnet.custom_op import native_op
>>> native_op("MatMul").forward([np.ones((2, 1, 2, 3), np.float32), np.ones((5, 3, 4), np.float32)]).shape
(2, 5, 2, 4)
"""
from __future__ import annotations

import mxnet as mx
import numpy as np

from d5.errors import ShapeError
from d5.frameworks.mxnet.operators import MXOp, register
from d5.frameworks.mxnet.operators._helpers import HELD_DTYPES, Symbol, as_symbol, dtype_of, reshape, shape_of
from d5.frameworks.mxnet.tensors import MX_BFLOAT16
from d5.ops.onnx_attributes import adopt, operator_attributes
from d5.ops.tensor_checks import (check_matmul_shapes, check_square_matrices, einsum_mismatch, gemm_shape,
                                  require_einsum_dtype)


def _np(x: Symbol):
    return x.as_np_ndarray()


def _bfloat16(dtype: np.dtype) -> bool:
    """bfloat16: MXNet's record type (a symbol's dtype) or ml_dtypes' (a NumPy value's)."""
    return dtype == MX_BFLOAT16 or dtype.name == "bfloat16"


def _compute_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype MXNet's CPU kernels multiply matrices of ``dtype`` in (float16 and bfloat16 in float32)."""
    if dtype in (np.float32, np.float64):
        return dtype
    if dtype.kind == "f" or _bfloat16(dtype):
        return np.dtype(np.float32)
    return np.dtype(np.int64)


def _cast_back(y: Symbol, compute: np.dtype, dtype: np.dtype) -> Symbol:
    """A result computed in ``compute`` as ``dtype`` (integers truncated: the narrow type's wrap-around)."""
    if compute == dtype:
        return y
    return mx.sym.cast(y, "bfloat16" if _bfloat16(dtype) else dtype.name)


def _operand_dtype(*operands) -> np.dtype:
    """The operands' common dtype (NumPy's promotion; bfloat16, MXNet's record type, as it is)."""
    dtypes = [dtype_of(x) for x in operands]
    found = [d for d in dtypes if _bfloat16(d)]
    return found[0] if found else np.result_type(*dtypes)


def _integer_matmul(a: Symbol, b: Symbol) -> Symbol:
    """``a @ b`` of int64 matrices (..., m, k) and (..., k, n), batch axes broadcasting: exact int64 sums."""
    products = mx.sym.np.multiply(mx.sym.np.expand_dims(_np(a), -1), mx.sym.np.expand_dims(_np(b), -3))
    return mx.sym.np.sum(products, axis=-2).as_nd_ndarray()


def _broadcast(x: Symbol, shape: tuple[int, ...], target: tuple[int, ...]) -> Symbol:
    """``x`` of ``shape`` broadcast to ``target`` (its gradient sums over the broadcast axes)."""
    if tuple(shape) == tuple(target):
        return x
    return mx.sym.np.broadcast_to(_np(x), tuple(target)).as_nd_ndarray()


def _matmul(a: Symbol, b: Symbol, shape_a: tuple[int, ...], shape_b: tuple[int, ...], dtype: np.dtype) -> Symbol:
    """NumPy ``matmul`` of ``a`` and ``b`` (ranks >= 1) in ``dtype``'s compute type, cast back to ``dtype``."""
    compute = _compute_dtype(dtype)
    a, b = as_symbol(a, compute), as_symbol(b, compute)
    vector_a, vector_b = len(shape_a) == 1, len(shape_b) == 1
    if vector_a:
        a, shape_a = reshape(a, (1,) + shape_a), (1,) + shape_a
    if vector_b:
        b, shape_b = reshape(b, shape_b + (1,)), shape_b + (1,)
    out_shape = np.broadcast_shapes(shape_a[:-2], shape_b[:-2]) + (shape_a[-2], shape_b[-1])
    if compute.kind != "f":
        y = _integer_matmul(a, b)
    elif len(shape_b) == 2:
        # B shared by the whole batch: one GEMM with the batch folded into the rows.
        rows = int(np.prod(shape_a[:-1]))
        y = reshape(mx.sym.dot(reshape(a, (rows, shape_a[-1])), b), shape_a[:-1] + (shape_b[-1],))
    else:
        # One batch_dot over the broadcast batch (np.matmul's gradient does not sum over broadcast batch axes).
        batch = out_shape[:-2]
        count = int(np.prod(batch))
        a = reshape(_broadcast(a, shape_a, batch + shape_a[-2:]), (count,) + shape_a[-2:])
        b = reshape(_broadcast(b, shape_b, batch + shape_b[-2:]), (count,) + shape_b[-2:])
        y = reshape(mx.sym.batch_dot(a, b), out_shape)
    if vector_a or vector_b:
        keep = out_shape[:-2] + (() if vector_a else out_shape[-2:-1]) + (() if vector_b else out_shape[-1:])
        y = reshape(y, keep)
    return _cast_back(y, compute, dtype)


@register("Gemm")
class Gemm(MXOp):
    """``alpha * A' @ B' + beta * C`` with A' = A^T if transA, B' = B^T if transB; C optional, broadcasting."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("Gemm", attributes))

    def __call__(self, a, b, c=None):
        rows, inner, cols = gemm_shape(shape_of(a), shape_of(b), None if c is None else shape_of(c), self.transA,
                                       self.transB)
        dtype = dtype_of(a if isinstance(a, Symbol) else b)
        compute = _compute_dtype(dtype)
        a, b = as_symbol(a, compute), as_symbol(b, compute)
        dense = not self.transA and self.transB and self.alpha == 1.0 and compute == dtype and dtype.kind == "f"
        if dense and (c is None or (self.beta == 1.0 and shape_of(c) in ((cols,), (1, cols)))):
            if c is None:
                return mx.sym.FullyConnected(a, b, num_hidden=cols, no_bias=True, flatten=False)
            return mx.sym.FullyConnected(a, b, reshape(as_symbol(c, dtype), (cols,)), num_hidden=cols,
                                         flatten=False)
        if compute.kind == "f":  # dot reads the transposed operands in place
            y = mx.sym.dot(a, b, transpose_a=bool(self.transA), transpose_b=bool(self.transB))
        else:
            y = _matmul(mx.sym.transpose(a) if self.transA else a, mx.sym.transpose(b) if self.transB else b,
                        (rows, inner), (inner, cols), compute)
        if dtype == np.float16:  # scaled and added in float16, as the reference's
            y, compute = _cast_back(y, compute, dtype), dtype
        if self.alpha != 1.0:
            y = y * float(self.alpha)
        if c is not None and self.beta != 0.0:
            c = as_symbol(c, compute)
            y = mx.sym.broadcast_add(y, c if self.beta == 1.0 else c * float(self.beta))
        return _cast_back(y, compute, dtype)


@register("MatMul")
class MatMul(MXOp):
    """NumPy ``matmul``: batched with broadcast batch axes, 1-D operands promoted to a row/column and the added
    axis removed; the operands' dtype kept."""

    def __call__(self, a, b):
        sa, sb = shape_of(a), shape_of(b)
        check_matmul_shapes(sa, sb)
        return _matmul(a, b, sa, sb, _operand_dtype(a, b))


def _einsum_dtype(dtype: np.dtype) -> bool:
    return dtype.kind in "iuf" or _bfloat16(dtype)


def _explicit(equation: str, shapes: list[tuple[int, ...]]) -> tuple[list[str], str, dict[str, int]]:
    """The reference's explicit subscripts of each operand (ellipses as letters), the output's, and each
    letter's size (NumPy's broadcasting of size-1 axes); a ShapeError where the operands do not fit."""
    from d5.frameworks.reference.operators.linear import _parse

    terms, output = _parse(equation, shapes)
    sizes: dict[str, int] = {}
    for term, shape in zip(terms, shapes):
        for letter, n in zip(term, shape):
            if sizes.get(letter, 1) not in (1, n) and n != 1:
                raise einsum_mismatch(equation, shapes, f"subscript {letter!r} has sizes {sizes[letter]} and {n}")
            sizes[letter] = max(sizes.get(letter, 1), n)
    missing = [c for c in output if c not in sizes]
    if missing or len(set(output)) != len(output):
        raise einsum_mismatch(equation, shapes, f"the output subscripts {output!r} must be distinct letters of the "
                              "operands")
    return terms, output, sizes


@register("Einsum")
class Einsum(MXOp):
    """ONNX Einsum (``numpy.einsum`` semantics) on MXNet's ``np.einsum``, keeping the operands' dtype (float16 in
    float32); uint32/uint64 operands (values known before running) computed at once in int64."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("Einsum", attributes))

    def __call__(self, *inputs):
        for index, x in enumerate(inputs):
            require_einsum_dtype(index, _einsum_dtype(dtype_of(x)), dtype_of(x).name)
        shapes = [shape_of(x) for x in inputs]
        terms, output, sizes = _explicit(self.equation, shapes)
        dtype = _operand_dtype(*inputs) if inputs else np.dtype(np.float32)
        if dtype not in HELD_DTYPES and not _bfloat16(dtype):  # uint32/uint64: NumPy values (not held by MXNet)
            return self._unheld(inputs, dtype)
        compute = dtype if dtype.kind in "iu" else _compute_dtype(dtype)
        # Size-1 axes broadcast explicitly (np.einsum's gradient does not sum over them), on the equation with the
        # ellipses spelled out as letters.
        if len(terms) == 1 and len(set(terms[0])) == len(terms[0]) and sorted(terms[0]) == sorted(output):
            # a permutation of one operand (or its identity): a transpose. MXNet's np.einsum backward fails on a
            # 0-d operand after it has run another equation ("index 2 must be in range [0, 1)")
            x = as_symbol(inputs[0], compute)
            out = mx.sym.transpose(x, axes=tuple(terms[0].index(c) for c in output)) if output else \
                mx.sym.identity(x)
            return _cast_back(out, compute, dtype)
        operands = [_np(_broadcast(as_symbol(x, compute), shape, tuple(sizes[c] for c in term)))
                    for x, shape, term in zip(inputs, shapes, terms)]
        out = mx.sym.np.einsum(",".join(terms) + "->" + output, *operands).as_nd_ndarray()
        return _cast_back(out, compute, dtype)

    def _unheld(self, inputs, dtype: np.dtype) -> np.ndarray:
        """uint32/uint64 operands in int64 (uint64 by its bits: the products and sums wrap as uint64's)."""
        if any(isinstance(x, Symbol) for x in inputs):
            raise ShapeError(f"Einsum: the MXNet framework holds no {dtype.name} tensors")
        arrays = [np.asarray(x) for x in inputs]
        wide = [a.view(np.int64) if a.dtype == np.uint64 else a.astype(np.int64) for a in arrays]
        out = mx.np.einsum(self.equation, *[mx.np.array(w, dtype=np.int64) for w in wide]).asnumpy()
        out = np.asarray(out, dtype=np.int64)
        return out.view(np.uint64) if dtype == np.uint64 else out.astype(dtype)


@register("Det")
class Det(MXOp):
    """Determinant of the square matrices in the last two axes on MXNet's ``linalg.det`` (float16 in float32,
    integers in float64, cast back); its gradient ``det * inv^T``, as the reference's."""

    def __call__(self, x):
        check_square_matrices(shape_of(x))
        dtype = dtype_of(x)
        compute = _compute_dtype(dtype) if dtype.kind == "f" or _bfloat16(dtype) else np.dtype(np.float64)
        return _cast_back(mx.sym.linalg.det(as_symbol(x, compute)), compute, dtype)
