"""A recipe that runs in a fraction of a second, for the tests of `d5 run`, `d5 sweep` and `d5 report`: an MLP
(d5.models.mlp) on two Gaussian blobs generated from a fixed seed, on the reference framework.

    python tests/recipes/tiny_mlp_recipe.py --epochs 2 --json run.json
"""
import numpy as np

import d5
import d5.frameworks.reference as d5fw


def blobs(n=256, features=8, seed=1234):
    """Two classes of points around -0.7 and +0.7 in every coordinate (unit variance): separable to ~99%."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, n).astype(np.int64)
    inputs = (rng.normal(size=(n, features)) + np.where(labels[:, None] == 1, 0.7, -0.7)).astype(np.float32)
    half = n // 2
    return d5.NumpyDataset(inputs[:half], labels[:half]), d5.NumpyDataset(inputs[half:], labels[half:])


FIXED = {
    "model": "mlp",
    "model_kwargs": dict(input_shape=(8,), hidden=(16,), num_classes=2),
    "dataset": blobs,
    "epochs": 2,
}

MUTABLE = {
    "batch_size": 32,
    "executor": d5fw.from_model,
    "optimizer": d5fw.MomentumOptimizer,
    "optimizer_args": (0.05, 0.9),
    "events": [d5.LearningRateSchedule(lambda epoch: 0.05 * 0.5 ** epoch)],
}

METRICS = [
    (d5.TestAccuracy(), 80.0),
    (d5.WallclockTime(), None),
    (d5.Throughput(), None),
]

if __name__ == "__main__":
    d5.run_recipe(FIXED, MUTABLE, METRICS, progress=False) or exit(1)
