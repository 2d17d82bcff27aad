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
import logging
from typing import Optional, Tuple

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


def _gpu_count(framework: str) -> Tuple[int, str]:
    """(usable GPUs, why) for one framework: its ``runtime.gpu_count()`` through the registry
    (:func:`d5.frameworks.runtime`), which imports the framework only if it is available."""
    import d5.frameworks

    if framework not in d5.frameworks.available():
        return 0, f"{framework} is not available here"
    try:
        count = int(d5.frameworks.runtime(framework).gpu_count())
    except Exception as err:  # a broken driver or install must not stop a program that can run on the CPU
        logger.warning("best_device: %s could not query its GPUs (%s: %s); using the CPU",
                       framework, type(err).__name__, err)
        return 0, f"{framework} could not query its GPUs"
    return count, f"{framework} sees {count} GPU(s)"


def best_device(framework: Optional[str] = None) -> Device:
    """``GPUDevice(0)`` when a GPU is usable by ``framework`` (None: by any available framework, asked in the
    registry's order), else ``CPUDevice()``. Each framework counts its own GPUs (``gpu_count()`` in its
    ``runtime.py``).

    A framework is imported only if it is available (so calling this may import one; importing d5 never
    does). The choice and its reason are logged at INFO on the ``"d5"`` logger; a framework that fails to
    count its GPUs is logged at WARNING and counts none. Pick another GPU with ``d5.GPUDevice(n)`` (or a
    recipe's ``--device gpu:N``).

    >>> best_device("reference")
    CPUDevice()
    >>> best_device() in (CPUDevice(), GPUDevice(0))
    True
    """
    import d5.frameworks  # imports no framework

    if framework is not None and framework not in d5.frameworks.FRAMEWORKS:
        raise FrameworkNotInstalledError(f"best_device: unknown framework {framework!r}; d5 knows "
                                         f"{sorted(d5.frameworks.FRAMEWORKS)} (or pass None for any installed one)")
    reasons = []
    for name in ([framework] if framework is not None else d5.frameworks.available()):
        count, why = _gpu_count(name)
        if count > 0:
            logger.info("best_device: GPUDevice(0) because %s", why)
            return GPUDevice(0)
        reasons.append(why)
    logger.info("best_device: CPUDevice() because %s", "; ".join(reasons) or "no framework is available")
    return CPUDevice()


__all__ = ["Device", "CPUDevice", "GPUDevice", "best_device"]
