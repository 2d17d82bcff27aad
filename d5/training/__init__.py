"""L2 — training: datasets, samplers, transforms, optimizers and schedules, the trainer, events, metrics and
checkpoints (framework-neutral).

Nothing here imports a deep-learning framework.
"""
from d5.training.breakdown import PhaseBreakdown
from d5.training.checkpoint import Checkpoint, latest_checkpoint, load_checkpoint, resume, save_checkpoint
from d5.training.dataset import Dataset, NumpyDataset, SequenceDataset, TokenWindowDataset
from d5.training.early_stopping import EarlyStopping
from d5.training.events import (CSVLogger, EpochSummary, HyperparameterSchedule, JSONLogger, LearningRateSchedule,
                                ProgressBar, StopAfter, StopWhenAccuracy, TrainerEvent)
from d5.training.metrics import (FinalTestAccuracy, Latency, OutputError, Perplexity, RunTime, TestAccuracy,
                                 TestMetric, Throughput, TimeToAccuracy, TopKAccuracy, TrainingAccuracy, TrainingMetric,
                                 WallclockTime)
from d5.training.native_optimizer import NativeOptimizer
from d5.training.optimizer import Optimizer, ThreeStepOptimizer, UpdateRuleOptimizer
from d5.training.optimizers import (AcceleGradOptimizer, AdaGradOptimizer, AdamOptimizer, AdamWOptimizer,
                                    ChainOptimizer, GradientDescent, LAMBOptimizer, LARSOptimizer, MomentumOptimizer,
                                    RMSPropOptimizer, chain)
from d5.training.plots import PlotWriter
from d5.training.resources import CPUUtilization, PeakMemory, ResourceTable
from d5.training.sampler import BucketSampler, ChoiceSampler, OrderedSampler, Sampler, ShuffleSampler
from d5.training.schedules import (ConstantSchedule, CosineSchedule, LinearSchedule, MultiStepSchedule,
                                   OneCycleSchedule, Schedule, StepSchedule, WarmupSchedule)
from d5.training.trainer import Trainer, TrainingStats
from d5.training.transforms import Compose, Cutout, Normalize, RandomCrop, RandomHorizontalFlip, Transform

__all__ = [
    "AcceleGradOptimizer", "AdaGradOptimizer", "AdamOptimizer", "AdamWOptimizer", "BucketSampler", "CPUUtilization",
    "CSVLogger", "ChainOptimizer", "Checkpoint", "ChoiceSampler", "Compose", "ConstantSchedule", "CosineSchedule",
    "Cutout", "Dataset", "EarlyStopping", "EpochSummary", "FinalTestAccuracy", "GradientDescent",
    "HyperparameterSchedule", "JSONLogger", "LAMBOptimizer", "LARSOptimizer", "Latency", "LearningRateSchedule",
    "LinearSchedule", "MomentumOptimizer", "MultiStepSchedule", "NativeOptimizer", "Normalize", "NumpyDataset",
    "OneCycleSchedule",
    "Optimizer", "OrderedSampler", "OutputError", "PeakMemory", "Perplexity", "PhaseBreakdown", "PlotWriter", "ProgressBar",
    "RMSPropOptimizer", "RandomCrop", "RandomHorizontalFlip", "ResourceTable", "RunTime", "Sampler", "Schedule",
    "SequenceDataset", "ShuffleSampler", "StepSchedule", "StopAfter", "StopWhenAccuracy", "TestAccuracy",
    "TestMetric", "ThreeStepOptimizer", "Throughput", "TimeToAccuracy", "TokenWindowDataset", "TopKAccuracy",
    "Trainer", "TrainerEvent", "TrainingAccuracy", "TrainingMetric", "TrainingStats", "Transform",
    "UpdateRuleOptimizer", "WallclockTime", "WarmupSchedule", "chain", "latest_checkpoint", "load_checkpoint",
    "resume", "save_checkpoint",
]
