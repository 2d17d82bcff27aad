"""The MXNet half of :class:`d5.distributed.DataParallel`: gradients into flat buckets after the pass.

MXNet's autograd has no per-parameter gradient hooks (the CachedOp's backward fills every gradient buffer in one
call), so nothing can start a bucket during the backward pass (:class:`d5.distributed.data_parallel.PassBuckets`).
The optimizer's ``gradient_hook`` (``finish``) copies the gradients of the pass -- the parameters' gradient
buffers -- into the buckets (``asnumpy`` waits for the backward pass and copies once), allreduces them, and writes
the averages back into the same buffers (``write_back``), which the native optimizer's update then reads.
"""
from __future__ import annotations

from typing import Any

import mxnet as mx
import numpy as np

from d5.distributed.communication import CommunicationNetwork
from d5.distributed.data_parallel import DEFAULT_BUCKET_MB, PassBuckets
from d5.errors import DistributedError


def _numpy_dtype(name: str, dtype: Any) -> np.dtype:
    dtype = np.dtype(dtype)
    if dtype.kind != "f":
        raise DistributedError(f"parameter {name!r} is {dtype.name}, which DataParallel does not average; it averages "
                               "float16/32/64 gradients")
    return dtype


class GradientBuckets(PassBuckets):
    """The trainable parameters of ``network`` (an MXLiveNetwork: ``executor.network``) in buckets of at most
    ``bucket_mb`` MiB, reduced over ``comm`` after the pass (see :class:`d5.distributed.data_parallel.PassBuckets`)."""

    def __init__(self, network: Any, comm: CommunicationNetwork, bucket_mb: float = DEFAULT_BUCKET_MB,
                 overlap: bool = True, compression: Any = None) -> None:
        _, params = network.trainable()
        super().__init__(network, comm, bucket_mb, compression,
                         [_numpy_dtype(name, param.dtype) for name, param in zip(network.get_params(), params)])

    def host_values(self, grad: Any) -> np.ndarray:
        with mx.util.np_shape(True):  # a 0-d gradient stays 0-d
            return grad.asnumpy()

    def write_back(self, slots: list[int]) -> None:
        """Write the averaged slots into the pass's gradient buffers (in place: the optimizer reads them)."""
        passed = self.network._pass
        with mx.util.np_shape(True):
            for slot in slots:
                passed[self.gradient_names[slot]]._sync_copyfrom(self.view(slot))


__all__ = ["GradientBuckets"]
