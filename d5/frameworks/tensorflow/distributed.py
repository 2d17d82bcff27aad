"""The TensorFlow half of :class:`d5.distributed.DataParallel`: gradients into flat buckets after the pass.

TensorFlow has no per-parameter gradient hooks (the executor's traced training function returns every gradient at
once), so nothing can start a bucket during the backward pass (:class:`d5.distributed.data_parallel.PassBuckets`).
The optimizer's ``gradient_hook`` (``finish``) copies the gradients of the pass -- the executor's pass tensors --
into the buckets, allreduces them, and feeds the averages back as the pass's gradient tensors (``write_back``),
which the native optimizer's update function then reads. Fed tensors are copies (``tf.constant``), so the next
step's buckets do not change the gradients a fetch returns.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from d5.distributed.communication import CommunicationNetwork
from d5.distributed.data_parallel import DEFAULT_BUCKET_MB, PassBuckets
from d5.errors import DistributedError


def _numpy_dtype(name: str, dtype: tf.DType) -> np.dtype:
    try:
        return np.dtype(dtype.as_numpy_dtype)
    except TypeError:
        raise DistributedError(f"parameter {name!r} is {dtype.name}, which MPI cannot carry as NumPy; DataParallel "
                               "averages float16/32/64 gradients") from None


class GradientBuckets(PassBuckets):
    """The trainable parameters of ``network`` (a TFLiveNetwork: ``executor.network``) in buckets of at most
    ``bucket_mb`` MiB, reduced over ``comm`` after the pass (see :class:`d5.distributed.data_parallel.PassBuckets`)."""

    def __init__(self, network: Any, comm: CommunicationNetwork, bucket_mb: float = DEFAULT_BUCKET_MB,
                 overlap: bool = True, compression: Any = None) -> None:
        _, params = network.trainable()
        super().__init__(network, comm, bucket_mb, compression,
                         [_numpy_dtype(name, param.dtype) for name, param in zip(network.get_params(), params)])

    def host_values(self, grad: Any) -> np.ndarray:
        """A gradient tensor's values as NumPy without the copy ``.numpy()`` makes (``_numpy()`` is the host buffer
        of a CPU tensor; a device tensor is copied to the host either way)."""
        read = getattr(grad, "_numpy", None)
        return np.asarray(read() if read is not None else grad)

    def write_back(self, slots: list[int]) -> None:
        """Feed the averaged slots as the pass's gradient tensors (copies on the executor's device)."""
        network = self.network
        with tf.device(network.device):
            for slot in slots:
                network.feed_tensor(self.gradient_names[slot], self.view(slot))


__all__ = ["GradientBuckets"]
