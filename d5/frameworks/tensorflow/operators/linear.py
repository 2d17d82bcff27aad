"""Linear algebra as native TensorFlow operations: Gemm, MatMul, Einsum, Det.

TensorFlow's CPU MatMul and Einsum kernels take floats, int32 and int64 only: the other integer types are computed
in int64 (uint64 by its bits) and cast back, whose wrap-around is theirs, as the PyTorch converter does.
"""
from __future__ import annotations

import numpy as np
import tensorflow as tf

from d5.errors import ShapeError
from d5.frameworks.tensorflow.operators import TFOp, register
from d5.ops.onnx_attributes import adopt, operator_attributes

# The integer dtypes TensorFlow's CPU MatMul and Einsum compute in.
_NATIVE_INTEGERS = (tf.int32, tf.int64)


def _widened(x: tf.Tensor) -> tf.Tensor:
    """An integer tensor TensorFlow has no product kernel for, as int64 (uint64 reinterpreted by its bits)."""
    return tf.bitcast(x, tf.int64) if x.dtype == tf.uint64 else tf.cast(x, tf.int64)


def _narrowed(y: tf.Tensor, dtype: tf.DType) -> tf.Tensor:
    """An int64 result back in ``dtype`` (truncating: modular arithmetic, as the narrow type's own)."""
    return tf.bitcast(y, tf.uint64) if dtype == tf.uint64 else tf.cast(y, dtype)


def _products(dtype: tf.DType) -> bool:
    """Whether TensorFlow multiplies matrices of ``dtype`` itself."""
    return dtype.is_floating or dtype.is_complex or dtype in _NATIVE_INTEGERS


def _broadcasts_to(shape, target) -> bool:
    # ONNX's unidirectional broadcasting: C may stretch to the output shape, never the reverse.
    try:
        return np.broadcast_shapes(tuple(shape), tuple(target)) == tuple(target)
    except ValueError:
        return False


@register("Gemm")
class Gemm(TFOp):
    """``alpha * A' @ B' + beta * C`` with A' = A^T if transA, B' = B^T if transB (read transposed by the
    MatMul kernel, not copied); C optional, broadcasting."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("Gemm", attributes))

    def __call__(self, a, b, c=None):
        if a.shape.rank != 2 or b.shape.rank != 2:
            raise ShapeError(f"Gemm: A and B must be 2-D, got A {tuple(a.shape)} and B {tuple(b.shape)}; use MatMul "
                             "for other ranks")
        rows = a.shape[1] if self.transA else a.shape[0]
        inner_a = a.shape[0] if self.transA else a.shape[1]
        inner_b = b.shape[1] if self.transB else b.shape[0]
        cols = b.shape[0] if self.transB else b.shape[1]
        if inner_a is not None and inner_b is not None and inner_a != inner_b:
            raise ShapeError(f"Gemm: inner dimensions differ: A {tuple(a.shape)}, B {tuple(b.shape)} with "
                             f"transA={int(self.transA)}, transB={int(self.transB)}; check the transpose flags")
        if c is not None and None not in (rows, cols) and not _broadcasts_to(c.shape.as_list(), (rows, cols)):
            raise ShapeError(f"Gemm: C of shape {tuple(c.shape)} does not broadcast to the output shape "
                             f"{(rows, cols)}")
        dtype = a.dtype
        if not _products(dtype):
            a, b, c = _widened(a), _widened(b), None if c is None else _widened(c)
        y = tf.linalg.matmul(a, b, transpose_a=self.transA, transpose_b=self.transB)
        if self.alpha != 1.0:
            y = y * tf.cast(self.alpha, y.dtype)
        if c is not None and self.beta != 0.0:
            c = tf.cast(c, y.dtype)
            y = y + (c if self.beta == 1.0 else c * tf.cast(self.beta, y.dtype))
        return y if y.dtype == dtype else _narrowed(y, dtype)


@register("MatMul")
class MatMul(TFOp):
    """NumPy ``matmul``: batched with broadcast batch axes, 1-D operands promoted to a row/column and the added
    axis removed."""

    def __call__(self, a, b):
        inner_b = None if b.shape.rank == 0 else b.shape[-2] if b.shape.rank > 1 else b.shape[0]
        if a.shape.rank == 0 or b.shape.rank == 0 or (None not in (a.shape[-1], inner_b) and a.shape[-1] != inner_b):
            raise ShapeError(f"MatMul: shapes {tuple(a.shape)} and {tuple(b.shape)} do not multiply (the last "
                             "dimension of A must equal the second-to-last of B, batch dimensions must broadcast, "
                             "no 0-D operands)")
        dtype = a.dtype
        if not _products(dtype):
            a, b = _widened(a), _widened(b)
        vector_a, vector_b = a.shape.rank == 1, b.shape.rank == 1
        if vector_a:
            a = a[tf.newaxis, :]
        if vector_b:
            b = b[:, tf.newaxis]
        if a.shape.rank > 2 and b.shape.rank == 2 and a.shape[1:].is_fully_defined():
            # B shared by the whole batch: one GEMM over the batch folded into the rows.
            y = tf.reshape(tf.linalg.matmul(tf.reshape(a, [-1, a.shape[-1]]), b),
                           [-1, *a.shape.as_list()[1:-1], b.shape[-1]])
        else:
            try:
                y = tf.linalg.matmul(a, b)
            except (ValueError, tf.errors.InvalidArgumentError) as err:
                raise ShapeError(f"MatMul: shapes {tuple(a.shape)} and {tuple(b.shape)} do not multiply: "
                                 f"{str(err).splitlines()[0]}") from None
        if vector_a:
            y = tf.squeeze(y, -2)
        if vector_b:
            y = tf.squeeze(y, -1)
        return y if y.dtype == dtype else _narrowed(y, dtype)


@register("Einsum")
class Einsum(TFOp):
    """ONNX Einsum (``numpy.einsum`` semantics), keeping the operands' dtype; integer types TensorFlow has no
    Einsum kernel for are computed in int64 (wrapping as theirs)."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("Einsum", attributes))

    def __call__(self, *inputs):
        for index, x in enumerate(inputs):
            if x.dtype == tf.bool or x.dtype.is_complex or not (x.dtype.is_floating or x.dtype.is_integer):
                raise ShapeError(f"Einsum: operand {index} has dtype {x.dtype.name}; Einsum takes integer tensors "
                                 "and float16, float32, float64 or bfloat16. Cast it first")
        dtype = inputs[0].dtype if inputs else None
        operands = list(inputs)
        if dtype is not None and not _products(dtype):
            operands = [_widened(x) for x in operands]
        try:
            out = tf.einsum(self.equation, *operands)
        except (ValueError, tf.errors.InvalidArgumentError) as err:
            raise ShapeError(f"Einsum: equation {self.equation!r} does not fit the operand shapes "
                             f"{[tuple(x.shape) for x in inputs]}: {str(err).splitlines()[0]}") from None
        return out if out.dtype == dtype else _narrowed(out, dtype)


@register("Det")
class Det(TFOp):
    """Determinant of the square matrices in the last two axes (float16/bfloat16 computed in float32, which
    TensorFlow's CPU kernel needs; integers in float64); its gradient ``det * inv^T``, as the reference's."""

    def __call__(self, x):
        if x.shape.rank < 2 or x.shape[-1] != x.shape[-2]:
            raise ShapeError(f"Det: input must be (..., M, M) square matrices, got shape {tuple(x.shape)}")
        if x.dtype in (tf.float32, tf.float64):
            return tf.linalg.det(x)
        compute = tf.float32 if x.dtype.is_floating else tf.float64
        return tf.cast(tf.linalg.det(tf.cast(x, compute)), x.dtype)
