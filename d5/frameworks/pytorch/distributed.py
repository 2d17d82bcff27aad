"""The PyTorch half of :class:`d5.distributed.DataParallel`: gradients into flat buckets from autograd hooks, so
each bucket's allreduce starts while the backward pass is still running (DDP's overlap, on MPI).

``Tensor.register_post_accumulate_grad_hook`` runs once per parameter and backward pass, after ``param.grad`` is
set (autograd sums the contributions of a parameter used several times before that). The hook copies the gradient
into the parameter's slot and makes ``param.grad`` a view of the slot (DDP's ``gradient_as_bucket_view``): the
averaged bucket is then the gradient the clipping and ``torch.optim`` read, with nothing copied back. Parameters
off the CPU cannot point into a host bucket: their averages are copied back into ``param.grad``.

The hooks hold the buckets weakly and do nothing outside a DataParallel step (``begin()`` arms them, ``finish()``
disarms them): a backward pass run for anything else on the same network is left alone. ``close()``, or dropping
the buckets, removes them.
"""
from __future__ import annotations

import weakref
from typing import Any, Callable

import numpy as np
import torch

from d5.distributed.communication import CommunicationNetwork
from d5.distributed.data_parallel import DEFAULT_BUCKET_MB, BucketReducer
from d5.errors import DistributedError


def _numpy_dtype(name: str, dtype: torch.dtype) -> np.dtype:
    try:
        return torch.empty(0, dtype=dtype).numpy().dtype
    except TypeError:
        raise DistributedError(f"parameter {name!r} is {dtype}, which MPI cannot carry as NumPy; DataParallel "
                               "averages float16/32/64 gradients") from None


def _hook(buckets: weakref.ref, slot: int, view: torch.Tensor, as_view: bool) -> Callable[[torch.Tensor], None]:
    def hook(param: torch.Tensor) -> None:
        owner = buckets()
        if owner is None or not owner.armed:
            return
        grad = param.grad
        if grad is not view:
            view.copy_(grad)
            if as_view:
                param.grad = view
        owner.arrived(slot)

    return hook


def _remove(handles: list) -> None:
    for handle in handles:
        handle.remove()
    handles.clear()


class GradientBuckets(BucketReducer):
    """The trainable parameters of ``network`` (a TorchLiveNetwork: ``executor.network``) in buckets of at most
    ``bucket_mb`` MiB, reduced over ``comm`` (see :class:`d5.distributed.data_parallel.BucketReducer`)."""

    def __init__(self, network: Any, comm: CommunicationNetwork, bucket_mb: float = DEFAULT_BUCKET_MB,
                 overlap: bool = True, compression: Any = None) -> None:
        names = list(network.get_params())
        _, params = network.trainable()
        super().__init__(names, [tuple(param.shape) for param in params],
                         [_numpy_dtype(name, param.dtype) for name, param in zip(names, params)],
                         comm, bucket_mb, overlap, compression)
        self.network = network
        self._params = list(params)
        # torch tensors over the NumPy buffers (shared memory): what the hooks copy into and param.grad points to.
        self._tensor_views = [torch.from_numpy(self.view(slot)) for slot in range(len(names))]
        self._as_view = [param.device.type == "cpu" for param in params]
        self._off_host = [slot for slot, on_host in enumerate(self._as_view) if not on_host]
        self._handles: list = []
        self._remover: weakref.finalize | None = None

    def attach(self) -> None:
        """Register one post-accumulate-grad hook per parameter (idempotent)."""
        if self._handles:
            return
        owner = weakref.ref(self)
        for slot, param in enumerate(self._params):
            self._handles.append(param.register_post_accumulate_grad_hook(
                _hook(owner, slot, self._tensor_views[slot], self._as_view[slot])))
        # Dropping the buckets removes the hooks (the finalizer holds the handles, not the buckets).
        self._remover = weakref.finalize(self, _remove, self._handles)
        self._remover.atexit = False

    def close(self) -> None:
        super().close()
        if self._remover is not None:
            self._remover()

    def fill(self, slots: list[int]) -> None:
        """Parameters whose hook did not run (the loss does not reach them: the executor gave them zeros)."""
        for slot in slots:
            grad = self._params[slot].grad
            view = self._tensor_views[slot]
            if grad is None:
                view.zero_()
            elif grad is not view:
                view.copy_(grad)
            self.arrived(slot)

    def write_back(self, slots: list[int]) -> None:
        """``param.grad`` of the hooked CPU parameters already is its bucket view; the others get a copy."""
        if self._off_host:
            slots = sorted(set(slots) | set(self._off_host))
        for slot in slots:
            param, view = self._params[slot], self._tensor_views[slot]
            if param.grad is None:
                param.grad = view.to(param.device, copy=True)
            elif param.grad is not view:
                with torch.no_grad():
                    param.grad.copy_(view)


__all__ = ["GradientBuckets"]
