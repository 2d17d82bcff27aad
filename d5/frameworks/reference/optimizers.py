"""Optimizers of the reference framework: d5's framework-neutral NumPy optimizers are its native ones."""
from d5.training.optimizers import (AdaGradOptimizer, AdamOptimizer, AdamWOptimizer, GradientDescent,  # noqa: F401
                                    MomentumOptimizer, RMSPropOptimizer)

__all__ = ["AdaGradOptimizer", "AdamOptimizer", "AdamWOptimizer", "GradientDescent", "MomentumOptimizer",
           "RMSPropOptimizer"]
