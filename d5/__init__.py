"""d5 — a deep-learning meta-framework: a framework for frameworks to reside in.

Four levels, each a small framework-neutral interface: operators (``d5.ops``), networks
(``d5.network``), training (``d5.training``) and distributed training (``d5.distributed``); frameworks
plug in under ``d5.frameworks``. ``import d5`` imports no framework: names resolve lazily.

>>> import d5
>>> net = d5.models.lenet5()
>>> executor = d5.frameworks.reference.from_model(net)
>>> type(d5.ShuffleSampler).__name__
'ABCMeta'
"""
from __future__ import annotations

import importlib

from d5 import errors
from d5.devices import CPUDevice, Device, GPUDevice, best_device
from d5.network import GraphExecutor, Network
from d5.ops import CustomOp, CustomPythonOp

__version__ = "0.1.0"

# Public name -> module defining it. Resolved on first access so `import d5` stays light.
_LAZY = {name: "d5.training" for name in (
    "AcceleGradOptimizer", "AdaGradOptimizer", "AdamOptimizer", "AdamWOptimizer", "BucketSampler", "CPUUtilization",
    "CSVLogger", "Checkpoint", "ChoiceSampler", "Compose", "CosineSchedule", "Cutout", "Dataset", "EarlyStopping",
    "EpochSummary", "FinalTestAccuracy", "GradientDescent", "JSONLogger", "LAMBOptimizer", "LARSOptimizer",
    "Latency", "LearningRateSchedule", "MomentumOptimizer", "MultiStepSchedule", "Normalize", "NumpyDataset",
    "OneCycleSchedule", "Optimizer", "OrderedSampler", "PeakMemory", "Perplexity", "PhaseBreakdown", "PlotWriter", "ProgressBar",
    "RMSPropOptimizer", "RandomCrop", "RandomHorizontalFlip", "ResourceTable", "Sampler", "ShuffleSampler",
    "StepSchedule", "StopAfter", "StopWhenAccuracy", "TestAccuracy", "TestMetric", "Throughput", "TimeToAccuracy",
    "ThreeStepOptimizer", "TopKAccuracy", "Trainer", "TrainerEvent", "TrainingAccuracy", "TrainingMetric",
    "TrainingStats", "UpdateRuleOptimizer", "WallclockTime", "WarmupSchedule", "chain")}
_LAZY["run_recipe"] = "d5.recipe"
_LAZY.update({name: "d5.distributed" for name in ("CommunicationVolume", "DistributedSampler",
                                                  "MPICommunicationNetwork")})
_LAZY["load_onnx"] = "d5.network.onnx_import"
_LAZY["save_onnx"] = "d5.network.onnx_export"
_SUBMODULES = {"ops", "network", "training", "distributed", "frameworks", "datasets", "models", "bench", "recipe",
               "sweep"}


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    if name in _SUBMODULES:
        return importlib.import_module(f"d5.{name}")
    raise AttributeError(f"module 'd5' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY) | _SUBMODULES)


__all__ = ["CPUDevice", "CustomOp", "CustomPythonOp", "Device", "GPUDevice", "GraphExecutor", "Network",
           "best_device", "errors", *_LAZY]
