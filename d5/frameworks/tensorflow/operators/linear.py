"""Linear algebra as native TensorFlow operations: Gemm, MatMul, Einsum, Det.

TensorFlow's CPU MatMul and Einsum kernels take floats, int32 and int64 only: the other integer types are computed
in int64 (uint64 by its bits) and cast back, whose wrap-around is theirs, as the PyTorch converter does.
"""
from __future__ import annotations

import tensorflow as tf

from d5.errors import ShapeError
from d5.frameworks.tensorflow.operators import TFOp, register
from d5.ops.onnx_attributes import adopt, operator_attributes
from d5.ops.tensor_checks import (check_matmul_shapes, check_square_matrices, einsum_mismatch, gemm_shape,
                                  require_einsum_dtype)

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


@register("Gemm")
class Gemm(TFOp):
    """``alpha * A' @ B' + beta * C`` with A' = A^T if transA, B' = B^T if transB (read transposed by the
    MatMul kernel, not copied); C optional, broadcasting."""

    def __init__(self, **attributes) -> None:
        adopt(self, operator_attributes("Gemm", attributes))

    def __call__(self, a, b, c=None):
        gemm_shape(tuple(a.shape.as_list()), tuple(b.shape.as_list()), None if c is None else tuple(c.shape.as_list()),
                   self.transA, self.transB)
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
        # Batch dimensions are left to tf.linalg.matmul, whose error the ShapeError below quotes.
        check_matmul_shapes(tuple(a.shape.as_list()), tuple(b.shape.as_list()), batch=False)
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
            supported = not (x.dtype == tf.bool or x.dtype.is_complex) and (x.dtype.is_floating or x.dtype.is_integer)
            require_einsum_dtype(index, supported, x.dtype.name)
        dtype = inputs[0].dtype if inputs else None
        operands = list(inputs)
        if dtype is not None and not _products(dtype):
            operands = [_widened(x) for x in operands]
        try:
            out = tf.einsum(self.equation, *operands)
        except (ValueError, tf.errors.InvalidArgumentError) as err:
            raise einsum_mismatch(self.equation, [tuple(x.shape) for x in inputs], str(err).splitlines()[0]) from None
        return out if out.dtype == dtype else _narrowed(out, dtype)


@register("Det")
class Det(TFOp):
    """Determinant of the square matrices in the last two axes (float16/bfloat16 computed in float32, which
    TensorFlow's CPU kernel needs; integers in float64); its gradient ``det * inv^T``, as the reference's."""

    def __call__(self, x):
        check_square_matrices(tuple(x.shape.as_list()))
        if x.dtype in (tf.float32, tf.float64):
            return tf.linalg.det(x)
        compute = tf.float32 if x.dtype.is_floating else tf.float64
        return tf.cast(tf.linalg.det(tf.cast(x, compute)), x.dtype)
