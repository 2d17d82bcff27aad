"""scikit-learn's 8x8 digits: the seeded stratified split, the scaling, and the registry name."""
from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import load_digits as sklearn_digits

import d5.datasets
from d5.datasets.digits import load_digits, stratified_split
from d5.errors import DatasetError


def test_every_image_lands_in_exactly_one_split_unchanged():
    reference = sklearn_digits()
    train, test = load_digits(normalize=False)
    assert (len(train), len(test)) == (1438, 359)
    assert train.data.shape == (1438, 1, 8, 8) and train.data.dtype == np.float32
    assert train.labels.dtype == np.int64 and not train.data.flags.writeable
    train_index, test_index = stratified_split(reference.target, 0.2, 0)
    assert sorted(np.r_[train_index, test_index].tolist()) == list(range(1797))
    for dataset, index in ((train, train_index), (test, test_index)):
        np.testing.assert_array_equal(dataset.data[:, 0], (reference.images[index] / 16.0).astype(np.float32))
        np.testing.assert_array_equal(dataset.labels, reference.target[index])
        assert 0.0 <= dataset.data.min() and dataset.data.max() <= 1.0


def test_the_split_is_stratified_and_follows_the_seed():
    labels = sklearn_digits().target
    _, test_index = stratified_split(labels, 0.25, seed=4)
    for digit in range(10):
        assert (labels[test_index] == digit).sum() == round(0.25 * (labels == digit).sum())
    same = load_digits(seed=4)[1].labels
    np.testing.assert_array_equal(same, load_digits(seed=4)[1].labels)
    first, other = load_digits(seed=4, normalize=False)[1].data, load_digits(seed=5, normalize=False)[1].data
    assert first.shape == other.shape and not np.array_equal(first, other)


def test_normalize_uses_the_training_splits_statistics():
    train, test = load_digits(normalize=True)
    raw_train, raw_test = load_digits(normalize=False)
    mean, std = raw_train.data.astype(np.float64).mean(), raw_train.data.astype(np.float64).std()
    assert abs(float(train.data.astype(np.float64).mean())) < 1e-6
    assert abs(float(train.data.astype(np.float64).std()) - 1.0) < 1e-5
    np.testing.assert_allclose(test.data, (raw_test.data - mean) / std, rtol=1e-5, atol=1e-5)


def test_registry_and_bad_fractions():
    train, test = d5.datasets.load("Digits", test_fraction=0.5, seed=1)
    assert abs(len(train) - len(test)) <= 10
    for fraction in (0, 1, 1.5, -0.1, "0.2", True):
        with pytest.raises(DatasetError, match="test_fraction"):
            load_digits(test_fraction=fraction)
    with pytest.raises(DatasetError, match="seed"):
        load_digits(seed=-1)
