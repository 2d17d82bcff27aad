"""Generators as native torch operations: Constant, ConstantOfShape, Range, EyeLike. Their outputs carry no
gradient (Range's values are treated as constants, EyeLike's output is locally constant), as in the reference."""
from __future__ import annotations

import numpy as np
import torch

from d5.errors import ShapeError
from d5.frameworks.pytorch.operators import TorchOp, register
from d5.frameworks.pytorch.operators._helpers import ints, torch_dtype
from d5.network.memory import check_allocation
from d5.ops.onnx_attributes import operator_attributes
from d5.ops.onnx_semantics import range_length, tensor_attribute


def _numpy_dtype(dtype: torch.dtype) -> np.dtype:
    """The NumPy dtype of a torch dtype (for the sizes and messages of :func:`check_allocation`)."""
    if dtype == torch.bfloat16:
        import ml_dtypes  # onnx's dependency; NumPy has no bfloat16 of its own

        return np.dtype(ml_dtypes.bfloat16)
    return torch.empty(0, dtype=dtype).numpy().dtype


def _as_tensor(value) -> torch.Tensor:
    # np.array, not np.ascontiguousarray: that makes a 0-d value 1-d (NumPy < 2).
    array = np.array(tensor_attribute(value), order="C", copy=True)
    if array.dtype == object:
        raise ShapeError("the PyTorch framework has no string tensors; keep string constants out of the graph")
    if array.dtype.name == "bfloat16":  # ml_dtypes' bfloat16: the same bits as torch's
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(array)


@register("Constant")
class Constant(TorchOp):
    def __init__(self, **attributes) -> None:
        super().__init__()
        name, value = operator_attributes("Constant", attributes)  # the one value attribute given
        if name == "value":
            tensor = _as_tensor(value)
        elif name in ("value_float", "value_floats"):
            tensor = torch.tensor(value if name == "value_float" else list(value), dtype=torch.float32)
        elif name in ("value_int", "value_ints"):
            tensor = torch.tensor(value if name == "value_int" else list(value), dtype=torch.int64)
        else:
            raise ShapeError("Constant: string and sparse constants are not supported by the PyTorch framework")
        # A buffer, so it moves with the module (.to(device)) and is saved with the model.
        self.register_buffer("value", tensor, persistent=False)

    def forward(self):
        return self.value


@register("ConstantOfShape")
class ConstantOfShape(TorchOp):
    def __init__(self, **attributes) -> None:
        super().__init__()
        value = operator_attributes("ConstantOfShape", attributes).value
        fill = torch.zeros(1, dtype=torch.float32) if value is None else _as_tensor(value)
        if fill.numel() != 1:
            raise ShapeError(f"ConstantOfShape: value must hold exactly one element, got shape {tuple(fill.shape)}")
        self.register_buffer("fill", fill.reshape(()), persistent=False)

    def forward(self, shape):
        shape = ints(shape)
        if any(d < 0 for d in shape):
            raise ShapeError(f"ConstantOfShape: dimensions must be non-negative, got {shape}")
        check_allocation("ConstantOfShape output", shape, _numpy_dtype(self.fill.dtype))
        return self.fill.expand(shape).clone()


_RANGE_STASH_DTYPES = {1: torch.float32, 11: torch.float64}


@register("Range")
class Range(TorchOp):
    """``start, start + delta, ...`` up to (excluding) ``limit``, computed as the reference does: in the inputs'
    own dtype, or in ``stash_type`` (opset 27: 1 = float32, 11 = float64) for float16/bfloat16 inputs."""

    def __init__(self, **attributes) -> None:
        super().__init__()
        stash_type = operator_attributes("Range", attributes).stash_type
        self.stash_dtype = None if stash_type is None else _RANGE_STASH_DTYPES[stash_type]

    def forward(self, start, limit, delta):
        for value, what in ((start, "start"), (limit, "limit"), (delta, "delta")):
            if value.numel() != 1:
                raise ShapeError(f"Range: {what} must be a single value (a scalar or a 1-element tensor), got shape "
                                 f"{tuple(value.shape)}")
        start, limit, delta = (v.detach().reshape(()) for v in (start, limit, delta))
        dtype = start.dtype
        compute = self.stash_dtype if self.stash_dtype is not None and dtype in (torch.float16, torch.bfloat16) \
            else dtype
        count = range_length(start.to(compute).item(), limit.item(), delta.to(compute).item())
        check_allocation("Range output", [count], _numpy_dtype(compute))
        steps = torch.arange(count, dtype=compute, device=start.device)
        return (start.to(compute) + steps * delta.to(compute)).to(dtype)


@register("EyeLike")
class EyeLike(TorchOp):
    """A 2-D matrix shaped like the input with ones on diagonal ``k`` (above the main one for k > 0), of
    ``dtype`` (default: the input's)."""

    def __init__(self, **attributes) -> None:
        super().__init__()
        eye = operator_attributes("EyeLike", attributes)
        self.dtype, self.k = None if eye.dtype is None else torch_dtype(eye.dtype), eye.k

    def forward(self, x):
        if x.dim() != 2:
            raise ShapeError(f"EyeLike: the input must be 2-D, got shape {tuple(x.shape)}")
        rows = torch.arange(x.shape[0], device=x.device).unsqueeze(1)
        columns = torch.arange(x.shape[1], device=x.device)
        return (columns - rows == self.k).to(x.dtype if self.dtype is None else self.dtype)
