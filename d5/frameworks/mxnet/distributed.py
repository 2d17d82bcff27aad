"""The MXNet half of :class:`d5.distributed.DataParallel`: gradients into flat buckets after the pass.

MXNet's autograd has no per-parameter gradient hooks (the CachedOp's backward fills every gradient buffer in one
call), so nothing can start a bucket during the backward pass: ``overlap`` is accepted and reported False. The
optimizer's ``gradient_hook`` (``finish``) copies the gradients of the pass -- the parameters' gradient buffers --
into the buckets (``fill``; ``asnumpy`` waits for the backward pass and copies once), allreduces them, and writes
the averages back into the same buffers (``write_back``), which the native optimizer's update then reads.
"""
from __future__ import annotations

from typing import Any

import mxnet as mx
import numpy as np

from d5.distributed.communication import CommunicationNetwork
from d5.distributed.data_parallel import DEFAULT_BUCKET_MB, BucketReducer
from d5.errors import DistributedError


def _numpy_dtype(name: str, dtype: Any) -> np.dtype:
    dtype = np.dtype(dtype)
    if dtype.kind != "f":
        raise DistributedError(f"parameter {name!r} is {dtype.name}, which DataParallel does not average; it averages "
                               "float16/32/64 gradients")
    return dtype


class GradientBuckets(BucketReducer):
    """The trainable parameters of ``network`` (an MXLiveNetwork: ``executor.network``) in buckets of at most
    ``bucket_mb`` MiB, reduced over ``comm`` after the pass (see :class:`d5.distributed.data_parallel.BucketReducer`;
    ``overlap`` is accepted for the common signature and is always off here)."""

    def __init__(self, network: Any, comm: CommunicationNetwork, bucket_mb: float = DEFAULT_BUCKET_MB,
                 overlap: bool = True, compression: Any = None) -> None:
        names = list(network.get_params())
        gradient_names, params = network.trainable()
        super().__init__(names, [tuple(param.shape) for param in params],
                         [_numpy_dtype(name, param.dtype) for name, param in zip(names, params)],
                         comm, bucket_mb, False, compression)  # no hooks: nothing overlaps the backward pass
        self.network = network
        self._gradient_names = list(gradient_names)

    def fill(self, slots: list[int]) -> None:
        """Copy the gradients of the pass into their slots (all of them: no hook brought any)."""
        passed = self.network._pass
        for slot in slots:
            name = self._gradient_names[slot]
            grad = passed.get(name)
            if grad is None:
                raise DistributedError(f"DataParallel: the pass left no gradient {name!r}; the optimizer's step runs "
                                       "the backward pass before its gradient_hook")
            with mx.util.np_shape(True):
                grad.wait_to_read()
                np.copyto(self.view(slot), grad.asnumpy())
            self.arrived(slot)

    def write_back(self, slots: list[int]) -> None:
        """Write the averaged slots into the pass's gradient buffers (in place: the optimizer reads them)."""
        passed = self.network._pass
        with mx.util.np_shape(True):
            for slot in slots:
                grad = passed[self._gradient_names[slot]]
                grad._sync_copyfrom(self.view(slot))


__all__ = ["GradientBuckets"]
