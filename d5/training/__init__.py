"""L2 — training: datasets, samplers, optimizers, the trainer, events and metrics (framework-neutral).

Nothing here imports a deep-learning framework.
"""
from d5.training.dataset import Dataset, NumpyDataset
from d5.training.events import (CSVLogger, EpochSummary, JSONLogger, LearningRateSchedule, ProgressBar, StopAfter,
                                StopWhenAccuracy, TrainerEvent)
from d5.training.metrics import (OutputError, RunTime, TestAccuracy, TestMetric, Throughput, TimeToAccuracy,
                                 TrainingAccuracy, TrainingMetric, WallclockTime)
from d5.training.optimizer import Optimizer, ThreeStepOptimizer, UpdateRuleOptimizer
from d5.training.optimizers import (AdaGradOptimizer, AdamOptimizer, AdamWOptimizer, GradientDescent,
                                    MomentumOptimizer, RMSPropOptimizer)
from d5.training.sampler import OrderedSampler, Sampler, ShuffleSampler
from d5.training.trainer import Trainer, TrainingStats
from d5.training.transforms import Compose, Normalize, RandomCrop, RandomHorizontalFlip, Transform

__all__ = [
    "AdaGradOptimizer", "AdamOptimizer", "AdamWOptimizer", "CSVLogger", "Compose", "Dataset", "EpochSummary",
    "GradientDescent", "JSONLogger", "LearningRateSchedule", "MomentumOptimizer", "Normalize", "NumpyDataset",
    "Optimizer", "OrderedSampler", "OutputError", "ProgressBar", "RMSPropOptimizer", "RandomCrop",
    "RandomHorizontalFlip", "RunTime", "Sampler", "ShuffleSampler", "StopAfter", "StopWhenAccuracy", "TestAccuracy",
    "TestMetric", "Throughput", "TimeToAccuracy", "ThreeStepOptimizer", "Trainer", "TrainerEvent",
    "TrainingAccuracy", "TrainingMetric", "TrainingStats", "Transform", "UpdateRuleOptimizer", "WallclockTime",
]
