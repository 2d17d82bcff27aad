"""The reference framework's half of :class:`d5.distributed.DataParallel`: gradients into flat buckets after the
pass (the reference computes its gradients in one piece, so there is no hook to start a bucket earlier).

``fill`` copies each gradient into its slot, starting each bucket's allreduce as soon as the bucket is filled (with
``overlap``); ``write_back`` feeds the averaged slots -- views of the buckets, no copy -- as the gradients of the
pass, which is what the optimizer then fetches. The gradients the pass left are not written into: the live
network's arrays may be shared between tensors (backward passes gradients through without copying), so the
LiveNetwork contract is to feed new arrays, never to write into fetched ones.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from d5.distributed.communication import CommunicationNetwork
from d5.distributed.data_parallel import DEFAULT_BUCKET_MB, BucketReducer
from d5.network.graph import gradient_name


class GradientBuckets(BucketReducer):
    """The trainable parameters of ``network`` (``executor.network``) in buckets of at most ``bucket_mb`` MiB,
    reduced over ``comm`` (see :class:`d5.distributed.data_parallel.BucketReducer`)."""

    def __init__(self, network: Any, comm: CommunicationNetwork, bucket_mb: float = DEFAULT_BUCKET_MB,
                 overlap: bool = True, compression: Any = None) -> None:
        names = list(network.get_params())
        values = [np.asarray(value) for value in network.fetch_tensors(names)]
        super().__init__(names, [value.shape for value in values], [value.dtype for value in values], comm,
                         bucket_mb, overlap, compression)
        self.network = network
        self._gradient_names = [gradient_name(name) for name in names]

    def fill(self, slots: list[int]) -> None:
        grads = self.network.fetch_tensors([self._gradient_names[slot] for slot in slots])
        for slot, grad in zip(slots, grads):
            np.copyto(self.view(slot), grad)
            self.arrived(slot)

    def write_back(self, slots: list[int]) -> None:
        network = self.network
        for slot in slots:
            network.feed_tensor(self._gradient_names[slot], self.view(slot))


__all__ = ["GradientBuckets"]
