"""Values between NumPy and TensorFlow, in one place (the executor, the custom-op bridge and native_op share them):
which dtypes TensorFlow holds, NumPy arrays as tensors and back, and the channels-last layout the executor keeps
spatial activations in.

TensorFlow's CPU kernels for convolution and pooling (and their gradients) take channels-last data only (NHWC);
the executor therefore holds the activations between such operators channels-last and converts at the boundary
(:func:`to_channels_last` / :func:`from_channels_last`), never around every operator. ``EagerTensor.numpy()``
always copies (TensorFlow's own code: ``maybe_arr.copy()``), so a fetch is one copy out.

>>> import numpy as np
>>> tensor = as_tf_value(np.arange(3, dtype=np.float32))
>>> as_numpy_value(tensor).tolist(), holds(np.dtype(object))
([0.0, 1.0, 2.0], False)
>>> channels_last_permutation(4), channels_first_permutation(4)
([0, 2, 3, 1], [0, 3, 1, 2])
"""
from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf


def tf_device(device: Any) -> str:
    """The TensorFlow device string for a d5 device (None: the CPU); the executor has checked that it exists."""
    if device is None or not getattr(device, "is_gpu", False):
        return "/CPU:0"
    return f"/GPU:{device.index}"


def holds(dtype: np.dtype) -> bool:
    """Whether TensorFlow holds and computes with tensors of NumPy ``dtype``; values of other types (strings,
    4-bit integers, float8) stay NumPy, on the reference.

    >>> holds(np.dtype(np.float32)), holds(np.dtype(np.uint64)), holds(np.dtype("U3"))
    (True, True, False)
    """
    return dtype.kind in "biufc" or dtype.name == "bfloat16"


def as_tf_value(value: Any) -> Any:
    """A value as TensorFlow code takes it: a tensor, or, for what TensorFlow cannot hold (sequences, strings,
    int4, ...), the value itself, which only reference operators read."""
    if type(value) is np.ndarray and value.dtype.kind in "biufc":  # the common case first: a fed array
        return tf.constant(value)
    if isinstance(value, (tf.Tensor, tf.Variable)):
        return value
    if value is None or isinstance(value, list):
        return value
    array = np.asarray(value)
    if not holds(array.dtype):
        return array
    if array.dtype.name == "bfloat16":  # ml_dtypes' bfloat16: TensorFlow converts it by its bits
        return tf.bitcast(tf.constant(array.view(np.uint16)), tf.bfloat16)
    return tf.constant(array)


def as_numpy_value(value: Any) -> Any:
    """A TensorFlow value as NumPy: tensors and variables as arrays (one copy: ``.numpy()`` always copies),
    sequences element by element."""
    if isinstance(value, (tf.Tensor, tf.Variable)):
        return to_numpy(value)
    if isinstance(value, (list, tuple)):
        return [as_numpy_value(v) for v in value]
    return value


def to_numpy(value: Any) -> np.ndarray:
    """A tensor or variable (bfloat16 included) as a NumPy array."""
    if value.dtype == tf.bfloat16:
        import ml_dtypes

        return tf.bitcast(value, tf.uint16).numpy().view(ml_dtypes.bfloat16)
    return np.asarray(value.numpy())  # a 0-d tensor gives a NumPy scalar: an array, as every framework returns


def channels_last_permutation(rank: int) -> list[int]:
    """The axes of an ONNX-layout (N, C, spatial...) tensor in channels-last order (N, spatial..., C)."""
    return [0, *range(2, rank), 1]


def channels_first_permutation(rank: int) -> list[int]:
    """The inverse of :func:`channels_last_permutation`."""
    return [0, rank - 1, *range(1, rank - 1)]


def to_channels_last(x: tf.Tensor) -> tf.Tensor:
    """An ONNX-layout tensor of rank >= 3 in channels-last layout."""
    return tf.transpose(x, channels_last_permutation(x.shape.rank))


def from_channels_last(x: tf.Tensor) -> tf.Tensor:
    """A channels-last tensor in ONNX layout."""
    return tf.transpose(x, channels_first_permutation(x.shape.rank))


def broadcast_to_channels_last(x: tf.Tensor, rank: int) -> tf.Tensor:
    """An ONNX-layout operand of an elementwise operation whose other operand, of ``rank``, is channels-last: its
    shape padded with leading 1s to ``rank`` (NumPy broadcasting), then permuted the same way, so broadcasting
    pairs the same elements. A scalar needs nothing."""
    own = x.shape.rank
    if own == 0:
        return x
    if own < rank:
        x = tf.reshape(x, [1] * (rank - own) + tf.unstack(tf.shape(x)) if None in x.shape.as_list()
                       else [1] * (rank - own) + x.shape.as_list())
    return tf.transpose(x, channels_last_permutation(rank))
