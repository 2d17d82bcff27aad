"""Devices an executor can run on, and :func:`best_device` to pick one.

>>> import d5
>>> d5.GPUDevice(1)
GPUDevice(1)
>>> d5.CPUDevice().kind
'cpu'
>>> d5.best_device("reference")   # the reference framework runs on the CPU only
CPUDevice()

:func:`best_device` says what it picked and why through the standard :mod:`logging` logger ``"d5"`` at
INFO level, which prints nothing unless the program asks for it (``logging.basicConfig(level=logging.INFO)``).
"""
from __future__ import annotations

import dataclasses
import importlib.util
import logging
from typing import Callable, Dict, Optional, Tuple

from d5.errors import FrameworkNotInstalledError

logger = logging.getLogger("d5")


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


def _torch_gpu_count() -> int:
    import torch  # lazily: `import d5` must not import a framework

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


#: d5 framework name -> (Python package, function counting the GPUs that framework can use here).
#: Only frameworks whose d5 back-end runs on GPUs are listed; a new back-end adds its probe here.
GPU_PROBES: Dict[str, Tuple[str, Callable[[], int]]] = {"pytorch": ("torch", _torch_gpu_count)}


def _gpu_count(framework: str) -> Tuple[int, str]:
    """(usable GPUs, why) for one framework, importing its package only if it is installed."""
    if framework not in GPU_PROBES:
        return 0, f"d5's {framework!r} back-end runs on the CPU only"
    package, probe = GPU_PROBES[framework]
    if importlib.util.find_spec(package) is None:
        return 0, f"{package} is not installed"
    try:
        count = int(probe())
    except Exception as err:  # a broken driver or install must not stop a program that can run on the CPU
        logger.warning("best_device: %s could not query its GPUs (%s: %s); using the CPU",
                       package, type(err).__name__, err)
        return 0, f"{package} could not query its GPUs"
    return count, f"{framework} ({package}) sees {count} GPU(s)"


def best_device(framework: Optional[str] = None) -> Device:
    """``GPUDevice(0)`` when a GPU is usable by ``framework`` (None: by any installed framework d5 runs on
    GPUs, today PyTorch via ``torch.cuda.is_available()``), else ``CPUDevice()``.

    A framework's package is imported only if it is installed (so calling this may import torch; importing
    d5 never does). The choice and its reason are logged at INFO on the ``"d5"`` logger. Pick another GPU
    with ``d5.GPUDevice(n)`` (or a recipe's ``--device gpu:N``).

    >>> best_device("reference")
    CPUDevice()
    >>> best_device() in (CPUDevice(), GPUDevice(0))
    True
    """
    from d5.frameworks import FRAMEWORKS  # imports no framework

    if framework is not None and framework not in FRAMEWORKS:
        raise FrameworkNotInstalledError(f"best_device: unknown framework {framework!r}; d5 knows "
                                         f"{sorted(FRAMEWORKS)} (or pass None for any installed one)")
    reasons = []
    for name in ([framework] if framework is not None else list(GPU_PROBES)):
        count, why = _gpu_count(name)
        if count > 0:
            logger.info("best_device: GPUDevice(0) because %s", why)
            return GPUDevice(0)
        reasons.append(why)
    logger.info("best_device: CPUDevice() because %s", "; ".join(reasons) or "no framework runs on GPUs")
    return CPUDevice()


__all__ = ["Device", "CPUDevice", "GPUDevice", "best_device", "GPU_PROBES"]
