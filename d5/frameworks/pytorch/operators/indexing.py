"""Indexing operators as native torch operations: Gather, GatherElements, GatherND, OneHot-free subset.
Negative indices count from the end, as ONNX allows."""
from __future__ import annotations

import torch

from d5.errors import ShapeError
from d5.frameworks.pytorch.operators import TorchOp, register
from d5.ops.onnx_semantics import normalize_axis


def _wrap(indices: torch.Tensor, size: int, op_name: str) -> torch.Tensor:
    indices = indices.long()
    if indices.numel() and (bool((indices < -size).any()) or bool((indices >= size).any())):
        raise ShapeError(f"{op_name}: indices out of range for an axis of length {size}")
    return torch.where(indices < 0, indices + size, indices)


@register("Gather")
class Gather(TorchOp):
    """``take`` along ``axis``: the output is data's shape with ``axis`` replaced by indices' shape."""

    def __init__(self, axis: int = 0) -> None:
        super().__init__()
        self.axis = int(axis)

    def forward(self, data, indices):
        axis = normalize_axis("Gather", self.axis, data.dim())
        index = _wrap(indices, data.shape[axis], "Gather")
        picked = torch.index_select(data, axis, index.reshape(-1))
        return picked.reshape(*data.shape[:axis], *index.shape, *data.shape[axis + 1:])


@register("GatherElements")
class GatherElements(TorchOp):
    def __init__(self, axis: int = 0) -> None:
        super().__init__()
        self.axis = int(axis)

    def forward(self, data, indices):
        axis = normalize_axis("GatherElements", self.axis, data.dim())
        return torch.gather(data, axis, _wrap(indices, data.shape[axis], "GatherElements"))


@register("GatherND")
class GatherND(TorchOp):
    def __init__(self, batch_dims: int = 0) -> None:
        super().__init__()
        self.batch_dims = int(batch_dims)

    def forward(self, data, indices):
        b = self.batch_dims
        depth = indices.shape[-1]
        batch_shape = data.shape[:b]
        batch = int(torch.tensor(batch_shape).prod()) if b else 1
        flat_data = data.reshape(batch, *data.shape[b:])
        flat_idx = indices.long().reshape(batch, -1, depth)
        sizes = torch.tensor(data.shape[b:b + depth], dtype=torch.long, device=data.device)
        flat_idx = torch.where(flat_idx < 0, flat_idx + sizes, flat_idx)
        rows = torch.arange(batch, device=data.device).unsqueeze(1).expand(-1, flat_idx.shape[1])
        picked = flat_data[(rows, *flat_idx.unbind(-1))]
        return picked.reshape(*indices.shape[:-1], *data.shape[b + depth:])
