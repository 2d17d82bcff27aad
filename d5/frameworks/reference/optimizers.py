"""Optimizers of the reference framework: d5's framework-neutral NumPy optimizers are its native ones."""
from d5.training.optimizers import (AcceleGradOptimizer, AdaGradOptimizer, AdamOptimizer,  # noqa: F401
                                    AdamWOptimizer, GradientDescent, LAMBOptimizer, LARSOptimizer, MomentumOptimizer,
                                    RMSPropOptimizer)

__all__ = ["AcceleGradOptimizer", "AdaGradOptimizer", "AdamOptimizer", "AdamWOptimizer", "GradientDescent", "MomentumOptimizer",
           "LAMBOptimizer", "LARSOptimizer", "RMSPropOptimizer"]
