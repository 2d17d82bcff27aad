"""Samplers (order, shuffling, epochs, drop_last, transforms) and the NumpyDataset they read from."""
from __future__ import annotations

import numpy as np
import pytest

from d5.errors import DatasetError
from d5.training.dataset import Dataset, NumpyDataset
from d5.training.sampler import OrderedSampler, Sampler, ShuffleSampler


def make_dataset(n: int = 10) -> NumpyDataset:
    data = np.arange(n * 3, dtype=np.float32).reshape(n, 3)
    return NumpyDataset(data, np.arange(n, dtype=np.int64))


def epoch_labels(sampler) -> list:
    return np.concatenate([batch["label"] for batch in sampler]).tolist()


# --- NumpyDataset -----------------------------------------------------------------------------------

def test_numpy_dataset_rejects_length_mismatch():
    with pytest.raises(DatasetError, match="5 examples but labels has 4"):
        NumpyDataset(np.zeros((5, 2)), np.zeros(4))


def test_numpy_dataset_indexing_forms():
    ds = make_dataset(6)
    assert len(ds) == 6 and isinstance(ds, Dataset)
    batch = ds[np.array([4, 1])]
    assert set(batch) == {"input", "label"}
    np.testing.assert_array_equal(batch["input"], [[12, 13, 14], [3, 4, 5]])
    single = ds[2]
    assert single["input"].shape == (3,) and int(single["label"]) == 2
    assert ds[-1]["label"] == 5
    custom = NumpyDataset(np.zeros((2, 1)), np.zeros(2), input_node="x", label_node="y")
    assert set(custom[np.array([0])]) == {"x", "y"}


@pytest.mark.parametrize("index", [np.array([0.5]), np.zeros((2, 2), dtype=int), "3", [1, 2]])
def test_numpy_dataset_rejects_bad_index_types(index):
    with pytest.raises(DatasetError):
        make_dataset()[index]


@pytest.mark.parametrize("index", [10, -11, np.array([3, 10])])
def test_numpy_dataset_out_of_range(index):
    with pytest.raises(DatasetError, match="out of range"):
        make_dataset(10)[index]


def test_numpy_dataset_lookups_never_alias_storage():
    ds = make_dataset(4)
    before = ds.data.copy()
    ds[np.array([0, 1])]["input"][:] = -1
    ds[2]["input"][:] = -1
    ds[1:3]["input"][:] = -1
    np.testing.assert_array_equal(ds.data, before)


# --- OrderedSampler ---------------------------------------------------------------------------------

def test_ordered_sampler_covers_every_index_once_in_order():
    sampler = OrderedSampler(make_dataset(10), batch_size=4)
    batches = list(sampler)
    assert len(sampler) == len(batches) == 3
    assert [len(b["label"]) for b in batches] == [4, 4, 2]
    assert epoch_labels(sampler) == list(range(10))
    np.testing.assert_array_equal(batches[1]["input"], make_dataset(10).data[4:8])


def test_drop_last_skips_the_short_batch():
    sampler = OrderedSampler(make_dataset(10), batch_size=4, drop_last=True)
    assert len(sampler) == 2
    assert [b["label"].tolist() for b in sampler] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    shuffled = ShuffleSampler(make_dataset(10), batch_size=3, drop_last=True)
    assert len(shuffled) == 3 and [len(b["label"]) for b in shuffled] == [3, 3, 3]


def test_exact_multiple_has_no_empty_batch():
    sampler = OrderedSampler(make_dataset(8), batch_size=4)
    assert len(sampler) == 2 and [len(b["label"]) for b in sampler] == [4, 4]


@pytest.mark.parametrize("batch_size", [0, -3, 2.5, "4", True, None])
def test_bad_batch_size_raises(batch_size):
    with pytest.raises(DatasetError, match="batch_size"):
        OrderedSampler(make_dataset(), batch_size=batch_size)


def test_drop_last_with_batch_larger_than_dataset_raises():
    with pytest.raises(DatasetError, match="drops every batch"):
        ShuffleSampler(make_dataset(5), batch_size=8, drop_last=True)
    assert len(OrderedSampler(make_dataset(5), batch_size=8)) == 1


def test_empty_dataset_raises():
    with pytest.raises(DatasetError, match="empty"):
        OrderedSampler(NumpyDataset(np.zeros((0, 2)), np.zeros(0)), batch_size=2)


# --- ShuffleSampler ---------------------------------------------------------------------------------

def test_shuffle_is_a_permutation_matching_the_documented_rng():
    sampler = ShuffleSampler(make_dataset(50), batch_size=7, seed=3)
    labels = epoch_labels(sampler)
    assert sorted(labels) == list(range(50)) and labels != list(range(50))
    assert labels == np.random.default_rng((3, 0)).permutation(50).tolist()


def test_shuffle_is_reproducible_and_differs_per_epoch_and_seed():
    def run(seed, epoch):
        sampler = ShuffleSampler(make_dataset(40), batch_size=8, seed=seed)
        sampler.set_epoch(epoch)
        return epoch_labels(sampler)

    assert run(0, 0) == run(0, 0)
    assert run(0, 5) == run(0, 5)
    assert run(0, 0) != run(0, 1)
    assert run(0, 0) != run(1, 0)


def test_iterating_again_advances_the_epoch_and_set_epoch_rewinds():
    sampler = ShuffleSampler(make_dataset(30), batch_size=4, seed=7)
    first, second = epoch_labels(sampler), epoch_labels(sampler)
    assert first != second
    assert sampler.epoch == 2
    assert second == sampler.epoch_indices(1).tolist()
    sampler.set_epoch(0)
    assert epoch_labels(sampler) == first
    # iter() alone claims the epoch, so an abandoned iteration still moves on.
    iter(sampler)
    assert sampler.epoch == 2


@pytest.mark.parametrize("seed", [-1, 1.5, "0"])
def test_bad_seed_raises(seed):
    with pytest.raises(DatasetError, match="seed"):
        ShuffleSampler(make_dataset(), batch_size=2, seed=seed)


def test_epoch_indices_is_the_override_hook():
    class EvenOnly(Sampler):  # the shape a DistributedSampler takes: a different index stream
        @property
        def samples_per_epoch(self):
            return (len(self.dataset) + 1) // 2

        def epoch_indices(self, epoch):
            return np.arange(0, len(self.dataset), 2)

    sampler = EvenOnly(make_dataset(9), batch_size=2)
    assert len(sampler) == 3
    assert [b["label"].tolist() for b in sampler] == [[0, 2], [4, 6], [8]]


# --- transforms -------------------------------------------------------------------------------------

def test_transforms_apply_in_order_and_never_mutate_the_dataset():
    dataset = make_dataset(10)
    original = dataset.data.copy()

    def negate_in_place(batch):
        batch["input"] *= -1
        return batch

    def add_flag(batch):
        batch = dict(batch)
        batch["flag"] = np.ones(len(batch["label"]))
        return batch

    sampler = ShuffleSampler(dataset, batch_size=3, seed=0, transforms=[negate_in_place, add_flag])
    for batch in sampler:
        assert set(batch) == {"input", "label", "flag"}
        np.testing.assert_array_equal(batch["input"], -original[batch["label"]])
    np.testing.assert_array_equal(dataset.data, original)


def test_non_callable_transform_raises():
    with pytest.raises(DatasetError, match="callable"):
        OrderedSampler(make_dataset(), batch_size=2, transforms=["flip"])
