"""Generators as native torch operations: Constant, ConstantOfShape, Range. Their outputs carry no gradient."""
from __future__ import annotations

import numpy as np
import torch

from d5.errors import ShapeError
from d5.frameworks.pytorch.operators import TorchOp, register
from d5.frameworks.pytorch.operators._helpers import ints
from d5.ops.onnx_semantics import tensor_attribute


def _as_tensor(value) -> torch.Tensor:
    array = np.ascontiguousarray(tensor_attribute(value))
    if array.dtype == object:
        raise ShapeError("the PyTorch framework has no string tensors; keep string constants out of the graph")
    return torch.from_numpy(array.copy())


@register("Constant")
class Constant(TorchOp):
    def __init__(self, value=None, value_float=None, value_floats=None, value_int=None, value_ints=None,
                 value_string=None, value_strings=None, sparse_value=None) -> None:
        super().__init__()
        given = {n: v for n, v in [("value", value), ("value_float", value_float), ("value_floats", value_floats),
                                   ("value_int", value_int), ("value_ints", value_ints),
                                   ("value_string", value_string), ("value_strings", value_strings),
                                   ("sparse_value", sparse_value)] if v is not None}
        if len(given) != 1:
            raise ShapeError(f"Constant: exactly one value attribute must be set, got {sorted(given) or 'none'}")
        if value is not None:
            tensor = _as_tensor(value)
        elif value_float is not None or value_floats is not None:
            tensor = torch.tensor(value_float if value_floats is None else list(value_floats), dtype=torch.float32)
        elif value_int is not None or value_ints is not None:
            tensor = torch.tensor(value_int if value_ints is None else list(value_ints), dtype=torch.int64)
        else:
            raise ShapeError("Constant: string and sparse constants are not supported by the PyTorch framework")
        # A buffer, so it moves with the module (.to(device)) and is saved with the model.
        self.register_buffer("value", tensor, persistent=False)

    def forward(self):
        return self.value


@register("ConstantOfShape")
class ConstantOfShape(TorchOp):
    def __init__(self, value=None) -> None:
        super().__init__()
        fill = torch.zeros(1, dtype=torch.float32) if value is None else _as_tensor(value)
        if fill.numel() != 1:
            raise ShapeError(f"ConstantOfShape: value must hold exactly one element, got shape {tuple(fill.shape)}")
        self.register_buffer("fill", fill.reshape(()), persistent=False)

    def forward(self, shape):
        shape = ints(shape)
        if any(d < 0 for d in shape):
            raise ShapeError(f"ConstantOfShape: dimensions must be non-negative, got {shape}")
        return self.fill.expand(shape).clone()


@register("Range")
class Range(TorchOp):
    def __init__(self, stash_type: int | None = None) -> None:
        super().__init__()

    def forward(self, start, limit, delta):
        dtype = start.dtype
        s, l, d = (v.detach().reshape(-1)[0].item() for v in (start, limit, delta))
        if d == 0:
            raise ShapeError("Range: delta must not be 0")
        count = max(int(np.ceil((l - s) / d)), 0)
        return (s + torch.arange(count, dtype=torch.float64 if dtype.is_floating_point else torch.int64,
                                 device=start.device) * d).to(dtype)
