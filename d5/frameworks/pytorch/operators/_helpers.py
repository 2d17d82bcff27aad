"""Support shared by the converters: reading shape-like inputs, optional inputs, ONNX data types, and resolving
ONNX window attributes into explicit (possibly negative) per-side pads for torch."""
from __future__ import annotations

from typing import Any, Sequence

import torch

from d5.errors import ShapeError
from d5.ops.onnx_semantics import as_text, window_sides

# ONNX TensorProto.DataType -> torch dtype (the types torch has).
_ONNX_DTYPES = {1: torch.float32, 2: torch.uint8, 3: torch.int8, 4: torch.uint16, 5: torch.int16, 6: torch.int32,
                7: torch.int64, 9: torch.bool, 10: torch.float16, 11: torch.float64, 12: torch.uint32,
                13: torch.uint64, 16: torch.bfloat16}
_NAMED_DTYPES = {"float32": torch.float32, "float": torch.float32, "float64": torch.float64, "double": torch.float64,
                 "float16": torch.float16, "bfloat16": torch.bfloat16, "int64": torch.int64, "int32": torch.int32,
                 "int16": torch.int16, "int8": torch.int8, "uint8": torch.uint8, "bool": torch.bool}


def torch_dtype(to: Any) -> torch.dtype:
    """The torch dtype of an ONNX data type number (or a dtype name)."""
    if isinstance(to, torch.dtype):
        return to
    if isinstance(to, (bytes, str)):
        name = as_text(to).lower()
        if name in _NAMED_DTYPES:
            return _NAMED_DTYPES[name]
    elif int(to) in _ONNX_DTYPES:
        return _ONNX_DTYPES[int(to)]
    raise ShapeError(f"unsupported ONNX data type {to!r} for the PyTorch framework; use one of "
                     f"{sorted(_ONNX_DTYPES)} (TensorProto.DataType)")


def ints(value: Any) -> list[int] | None:
    """A shape-like input (int64 tensor, sequence or scalar) as a list of Python ints; None stays None."""
    if value is None:
        return None
    if isinstance(value, torch.Tensor):
        value = value.reshape(-1).tolist()
    elif not isinstance(value, (list, tuple)):
        value = [value]
    return [int(v) for v in value]


def scalar(value: Any, kind=float):
    """A 0-d/1-element input as a Python number."""
    if isinstance(value, torch.Tensor):
        value = value.reshape(-1)[0].item()
    return kind(value)


def resolve_pads(op_name: str, spatial: Sequence[int], kernel: Sequence[int], strides, dilations, pads,
                 auto_pad: str, ceil_mode: bool = False, clamp_same_pads: bool = False):
    """The window geometry and, per spatial axis, the (begin, end) amounts to pad (negative: crop) the input
    by so that plain stride/dilation windows with no padding give exactly ONNX's output (ceil_mode overhang
    included). Memoized: a converter meets the same input shapes step after step, and resolving them anew
    would cost a training step of a small network a few percent."""
    def optional(values):
        return None if not values else tuple(values)

    # torch.compile traces the plain function (it would warn about, and ignore, the cache anyway).
    resolve = window_sides.__wrapped__ if torch.compiler.is_compiling() else window_sides
    return resolve(op_name, tuple(spatial), tuple(kernel), optional(strides), optional(dilations),
                   optional(pads), auto_pad, bool(ceil_mode), bool(clamp_same_pads))


def pad_spatial(x: torch.Tensor, sides: Sequence[tuple[int, int]], value: float = 0.0) -> torch.Tensor:
    """Pad (or crop, for negative amounts) the trailing spatial axes of ``x`` by ``sides`` (begin, end) each."""
    if all(b == 0 and e == 0 for b, e in sides):
        return x
    flat = []
    for begin, end in reversed(sides):  # F.pad lists the last axis first
        flat += [begin, end]
    return torch.nn.functional.pad(x, flat, mode="constant", value=value)
