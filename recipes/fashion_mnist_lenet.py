"""LeNet-5 on Fashion-MNIST with a momentum optimizer on the reference framework: the CNN experiment of
the seeds' distributed-training study, with final test accuracy as the acceptable metric.

    python recipes/fashion_mnist_lenet.py                       # the benchmark (3 epochs)
    python recipes/fashion_mnist_lenet.py --epochs 1 --subset 2000   # a smoke test in seconds
    python recipes/fashion_mnist_lenet.py --framework pytorch   # the same recipe on PyTorch (torch.optim.SGD)

``--framework pytorch`` swaps in d5.frameworks.pytorch's ``from_model`` and its ``MomentumOptimizer``; with
the same seed it reproduces the reference run's losses (tests/recipes/test_recipe_scripts.py checks this).
Add ``--device gpu`` to train on a GPU there.
"""
import d5
import d5.frameworks.reference as d5fw

# Fixed components
FIXED = {
    "model": "lenet5",
    "dataset": "fashion_mnist",
    "train_sampler": d5.ShuffleSampler,
    "epochs": 3,
}

# Mutable components
MUTABLE = {
    "batch_size": 64,
    "executor": d5fw.from_model,
    "optimizer": d5fw.MomentumOptimizer,
    "optimizer_args": (0.01, 0.9),
}

# Acceptable metrics (None: reported, not required)
METRICS = [
    (d5.TestAccuracy(), 87.0),
    (d5.WallclockTime(), None),
    (d5.Throughput(), None),
]

if __name__ == "__main__":
    d5.run_recipe(FIXED, MUTABLE, METRICS) or exit(1)
