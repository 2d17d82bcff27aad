"""The synthetic classification dataset: deterministic, any shape/classes/size/dtype, and learnable."""
from __future__ import annotations

import numpy as np
import pytest

import d5.datasets
from d5.datasets.synthetic import load_synthetic, synthetic_arrays
from d5.errors import DatasetError


@pytest.mark.parametrize("shape, num_classes, size", [((5,), 2, 7), ((1, 8, 8), 10, 103), ((2, 3, 4, 5), 3, 12)])
def test_any_shape_class_count_and_size(shape, num_classes, size):
    data, labels = synthetic_arrays(size, shape, num_classes, seed=1)
    assert data.shape == (size,) + shape and data.dtype == np.float32 and labels.dtype == np.int64
    counts = np.bincount(labels, minlength=num_classes)
    assert counts.sum() == size and counts.max() - counts.min() <= 1  # balanced


def test_same_seed_same_arrays_and_other_seeds_differ():
    first = load_synthetic(shape=(3, 4, 4), train_size=50, test_size=20, seed=7)
    again = load_synthetic(shape=(3, 4, 4), train_size=50, test_size=20, seed=7)
    other = load_synthetic(shape=(3, 4, 4), train_size=50, test_size=20, seed=8)
    for a, b, c in zip(first, again, other):
        assert a.data.tobytes() == b.data.tobytes() and a.labels.tobytes() == b.labels.tobytes()
        assert not np.array_equal(a.data, c.data)
    assert not first[0].data.flags.writeable
    assert not np.array_equal(first[0].data[:20], first[1].data)  # train and test are different draws


def nearest_prototype_accuracy(train, test) -> float:
    """The oracle classifier: class means estimated on train, nearest mean on test."""
    flat_train, flat_test = train.data.reshape(len(train), -1), test.data.reshape(len(test), -1)
    classes = np.unique(train.labels)
    means = np.stack([flat_train[train.labels == c].mean(axis=0) for c in classes]).astype(np.float64)
    distances = ((flat_test[:, None, :] - means[None]) ** 2).sum(axis=-1)
    return float((classes[distances.argmin(axis=1)] == test.labels).mean())


def test_it_is_learnable_and_noise_controls_how_hard():
    easy = load_synthetic(shape=(3, 8, 8), num_classes=10, train_size=500, test_size=300, seed=0)
    assert nearest_prototype_accuracy(*easy) >= 0.99
    # D = 2 elements, noise 1: neighbouring classes overlap (Phi(-1) ~ 16% per pair) -- well below perfect
    hard = load_synthetic(shape=(2,), num_classes=10, train_size=2000, test_size=1000, seed=0)
    assert 0.15 < nearest_prototype_accuracy(*hard) < 0.9
    # The examples scatter around their class's prototype with the requested standard deviation.
    data, labels = synthetic_arrays(4000, (6,), 4, noise=0.5, seed=2)
    residual = np.concatenate([data[labels == c] - data[labels == c].mean(axis=0) for c in range(4)])
    assert abs(residual.std() - 0.5) < 0.02


@pytest.mark.parametrize("dtype", ["float64", "float16", "uint8", "int8", "int16"])
def test_dtypes_float_kept_integers_quantized(dtype):
    data, labels = synthetic_arrays(200, (16,), 4, dtype=dtype, seed=3)
    assert data.dtype == np.dtype(dtype)
    reference, _ = synthetic_arrays(200, (16,), 4, dtype="float64", seed=3)
    if np.dtype(dtype).kind == "f":
        np.testing.assert_allclose(data.astype(np.float64), reference, rtol=1e-3, atol=1e-3)
    elif dtype == "uint8":
        np.testing.assert_array_equal(data, np.clip(np.rint(128 + 32 * reference), 0, 255))
    else:
        info = np.iinfo(dtype)
        np.testing.assert_array_equal(data, np.clip(np.rint(reference * (info.max + 1) / 8), info.min, info.max))
    train, test = load_synthetic(shape=(1, 6, 6), num_classes=3, train_size=300, test_size=90, dtype=dtype, seed=1)
    assert nearest_prototype_accuracy(train, test) > 0.9  # quantized, still learnable


@pytest.mark.parametrize("kwargs, message", [
    (dict(shape=(0, 3)), "every dimension of shape"), (dict(shape="3x32x32"), "shape is the shape of one example"),
    (dict(num_classes=0), "num_classes"), (dict(train_size=0), "num_examples"),
    (dict(dtype=bool), "floating or integer"),
    (dict(dtype="complex64"), "floating or integer"), (dict(dtype="pixels"), "not a numpy dtype"),
    (dict(noise=-1.0), "noise is a standard deviation"), (dict(noise=float("inf")), "noise"), (dict(seed=-2), "seed"),
])
def test_bad_arguments_say_what_to_do(kwargs, message):
    with pytest.raises(DatasetError, match=message):
        load_synthetic(**kwargs)


def test_registry_name():
    train, test = d5.datasets.load("synthetic", shape=(4,), num_classes=3, train_size=9, test_size=6)
    assert (len(train), len(test), train.data.shape[1:]) == (9, 6, (4,))
    default_train, _ = d5.datasets.load("synthetic")
    assert default_train.data.shape == (1000, 3, 32, 32) and int(default_train.labels.max()) == 9
