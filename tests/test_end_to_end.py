"""LeNet-5 trained end to end on the reference framework, on real Fashion-MNIST when it is installed."""
import numpy as np
import pytest

import d5
from d5.errors import DivergenceError
from d5.frameworks import reference


def training_data():
    """A subset of real Fashion-MNIST, or generated class-dependent images when it is absent."""
    try:
        train, test = d5.datasets.load_fashion_mnist(download=False)
        return train[np.arange(6000)], test[np.arange(2000)], "fashion-mnist"
    except d5.errors.DatasetError:
        rng = np.random.default_rng(0)
        prototypes = rng.normal(size=(10, 1, 28, 28)).astype(np.float32)
        def make(n):
            labels = rng.integers(0, 10, n)
            return {"input": prototypes[labels] + rng.normal(scale=2.0, size=(n, 1, 28, 28)).astype(np.float32),
                    "label": labels.astype(np.int64)}
        return make(6000), make(2000), "generated"


def test_lenet5_learns_well_above_chance():
    train, test, source = training_data()
    executor = reference.from_model(d5.models.lenet5(seed=0))
    optimizer = d5.MomentumOptimizer(executor, 0.01, 0.9)
    accuracy = d5.TestAccuracy()
    d5.Trainer(d5.ShuffleSampler(d5.NumpyDataset(train["input"], train["label"]), 64, seed=0),
               d5.OrderedSampler(d5.NumpyDataset(test["input"], test["label"]), 500),
               executor, optimizer, events=[accuracy], progress=False).run(2)
    # Chance is 10%; 6,000 real images and 2 epochs give about 75%.
    assert accuracy.result() > 60.0, f"{source}: {accuracy.describe()}"


def test_divergence_names_the_step():
    rng = np.random.default_rng(0)
    batch = {"input": rng.normal(size=(16, 1, 28, 28)).astype(np.float32) * 100,
             "label": rng.integers(0, 10, 16).astype(np.int64)}
    executor = reference.from_model(d5.models.lenet5())
    optimizer = d5.GradientDescent(executor, lr=1e6)
    with pytest.raises(DivergenceError, match=r"step \d+"):
        for _ in range(50):
            optimizer.step(batch)
    unchecked = d5.GradientDescent(reference.from_model(d5.models.lenet5()), lr=1e6, check_divergence=False)
    for _ in range(10):
        unchecked.step(batch)  # no error when the check is off
