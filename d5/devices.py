"""Devices an executor can run on.

>>> import d5
>>> d5.GPUDevice(1)
GPUDevice(1)
>>> d5.CPUDevice().kind
'cpu'
"""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Device:
    """A compute device: ``kind`` is 'cpu' or 'gpu'; ``index`` selects among several GPUs."""

    kind: str
    index: int = 0

    @property
    def is_gpu(self) -> bool:
        return self.kind == "gpu"


class CPUDevice(Device):
    def __init__(self) -> None:
        super().__init__("cpu", 0)

    def __repr__(self) -> str:
        return "CPUDevice()"


class GPUDevice(Device):
    def __init__(self, index: int = 0) -> None:
        super().__init__("gpu", index)

    def __repr__(self) -> str:
        return f"GPUDevice({self.index})"
