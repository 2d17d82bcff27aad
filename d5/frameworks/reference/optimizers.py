"""Optimizers of the reference framework: d5's framework-neutral NumPy optimizers are its native ones."""
from d5.training.optimizers import AdamOptimizer, GradientDescent, MomentumOptimizer  # noqa: F401

__all__ = ["AdamOptimizer", "GradientDescent", "MomentumOptimizer"]
