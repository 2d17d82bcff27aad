"""Samplers (order, shuffling, bucketing, random choice, epochs, drop_last, transforms, resumable state) and the
datasets they read from."""
from __future__ import annotations

import json

import numpy as np
import pytest

from d5.errors import CheckpointError, DatasetError
from d5.training.dataset import Dataset, NumpyDataset, SequenceDataset
from d5.training.sampler import (BUCKET_STREAM, BucketSampler, ChoiceSampler, OrderedSampler, Sampler,
                                 ShuffleSampler)
from d5.training.transforms import Compose, Cutout, RandomCrop, RandomHorizontalFlip


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


# --- BucketSampler ----------------------------------------------------------------------------------

def sequence_dataset(n: int = 60, seed: int = 0) -> SequenceDataset:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 40, n)
    sequences = [np.arange(1, length + 1, dtype=np.int64) + 1000 * i for i, length in enumerate(lengths)]
    return SequenceDataset(sequences, np.arange(n, dtype=np.int64))


def test_bucket_sampler_covers_every_example_once_with_one_short_batch_at_most():
    dataset = sequence_dataset(61)
    sampler = BucketSampler(dataset, batch_size=8, pool_batches=3, seed=2)
    batches = list(sampler.batch_indices(0))
    assert len(sampler) == len(batches) == 8
    assert sorted(np.concatenate(batches).tolist()) == list(range(61))
    assert sorted(len(b) for b in batches) == [5] + [8] * 7
    assert np.concatenate(batches).tolist() == sampler.epoch_indices(0).tolist()
    dropping = BucketSampler(dataset, batch_size=8, pool_batches=3, seed=2, drop_last=True)
    assert len(dropping) == 7 and all(len(b) == 8 for b in dropping.batch_indices(0))


def test_one_pool_gives_batches_of_consecutive_lengths():
    dataset = sequence_dataset(64)
    lengths = dataset.lengths
    batches = list(BucketSampler(dataset, batch_size=8, pool_batches=8, seed=0).batch_indices(0))
    ranges = sorted((lengths[b].min(), lengths[b].max()) for b in batches)
    # One pool sorts the whole epoch: the batches' length ranges follow each other without overlap.
    assert all(high <= next_low for (_, high), (next_low, _) in zip(ranges, ranges[1:]))
    # Less padding than shuffled batches of the same size (the point of bucketing).
    shuffled = np.random.default_rng(0).permutation(64).reshape(8, 8)
    padded = sum(len(b) * lengths[b].max() for b in batches)
    assert padded < sum(8 * lengths[b].max() for b in shuffled)


def test_bucket_pools_follow_the_documented_generator():
    dataset = sequence_dataset(42)
    sampler = BucketSampler(dataset, batch_size=4, pool_batches=2, seed=5)
    # The oracle: shuffle, cut into pools of 2 batches, sort each pool by length (stable), cut into batches.
    order = np.random.default_rng((5, 3, BUCKET_STREAM)).permutation(42).tolist()
    expected = []
    for start in range(0, 42, 8):
        pool = sorted(order[start:start + 8], key=lambda i: dataset.lengths[i])
        expected += [tuple(pool[i:i + 4]) for i in range(0, len(pool), 4)]
    got = [tuple(batch.tolist()) for batch in sampler.batch_indices(3)]
    assert sorted(got) == sorted(expected) and len(got) == 11
    assert got != expected  # the batches' order is shuffled too


def test_bucket_sampler_reshuffles_per_epoch_and_seed_reproducibly():
    def epoch(seed, number):
        sampler = BucketSampler(sequence_dataset(50), batch_size=5, pool_batches=2, seed=seed)
        sampler.set_epoch(number)
        return [b["label"].tolist() for b in sampler]

    assert epoch(1, 0) == epoch(1, 0)
    assert epoch(1, 0) != epoch(1, 1) and epoch(1, 0) != epoch(2, 0)


def test_bucket_lengths_from_an_array_a_callable_or_the_dataset():
    dataset = sequence_dataset(30)
    from_dataset = BucketSampler(dataset, batch_size=4, seed=3)
    from_array = BucketSampler(dataset, batch_size=4, seed=3, lengths=np.asarray(dataset.lengths).tolist())
    from_callable = BucketSampler(dataset, batch_size=4, seed=3, lengths=lambda example: len(example["input"]))
    expected = [b.tolist() for b in from_dataset.batch_indices(0)]
    assert [b.tolist() for b in from_array.batch_indices(0)] == expected
    assert [b.tolist() for b in from_callable.batch_indices(0)] == expected
    batch = next(iter(from_dataset))
    assert batch["input"].shape == (4, dataset.lengths[batch["label"]].max())  # padded to the batch's longest


@pytest.mark.parametrize("lengths, message", [
    (None, "needs the examples' lengths"), (np.ones(5), "one length per example"),
    (np.r_[np.ones(9), -1.0], "finite and >= 0"), (np.r_[np.ones(9), np.nan], "finite and >= 0"),
    (["a"] * 10, "must be numbers"),
])
def test_bucket_sampler_refuses_bad_lengths(lengths, message):
    with pytest.raises(DatasetError, match=message):
        BucketSampler(make_dataset(10), batch_size=2, lengths=lengths)
    with pytest.raises(DatasetError, match="pool_batches"):
        BucketSampler(sequence_dataset(10), batch_size=2, pool_batches=0)


def test_sequence_dataset_pads_per_batch_and_never_aliases():
    dataset = SequenceDataset([np.ones((3, 2)), np.ones((1, 2)) * 2], [5, 6], pad_value=-1, length_node="length")
    batch = dataset[np.array([1, 0])]
    assert batch["input"].shape == (2, 3, 2) and batch["length"].tolist() == [1, 3]
    np.testing.assert_array_equal(batch["input"][0], [[2, 2], [-1, -1], [-1, -1]])
    batch["input"][:] = 0
    dataset[0]["input"][:] = 0
    assert dataset.sequences[0].sum() == 6
    with pytest.raises(DatasetError, match="same dtype and other dimensions"):
        SequenceDataset([np.ones((3, 2)), np.ones((1, 3))], [0, 1])
    with pytest.raises(DatasetError, match="one label per sequence"):
        SequenceDataset([np.ones(3)], [0, 1])


# --- ChoiceSampler ----------------------------------------------------------------------------------

def test_choice_with_replacement_is_uniform_and_per_epoch():
    sampler = ChoiceSampler(make_dataset(10), batch_size=64, num_samples=5000, seed=1)
    assert len(sampler) == 79 and sampler.samples_per_epoch == 5000
    drawn = np.concatenate([b["label"] for b in sampler])
    counts = np.bincount(drawn, minlength=10)
    assert drawn.size == 5000 and counts.sum() == 5000
    # chi-square over 9 degrees of freedom below its 99.9% point: uniform draws
    assert ((counts - 500.0) ** 2 / 500.0).sum() < 27.9
    assert np.concatenate([b["label"] for b in sampler]).tolist() != drawn.tolist()  # epoch 1 differs


def test_choice_with_weights_follows_them_and_never_picks_zero_weight():
    weights = np.array([1.0, 2.0, 3.0, 4.0, 0.0])
    sampler = ChoiceSampler(make_dataset(5), batch_size=100, num_samples=10000, weights=weights, seed=2)
    counts = np.bincount(sampler.epoch_indices(0), minlength=5)
    assert counts[4] == 0
    expected = 10000 * weights[:4] / weights.sum()
    assert ((counts[:4] - expected) ** 2 / expected).sum() < 16.3  # 3 dof, 99.9%


def test_choice_without_replacement_draws_distinct_examples():
    sampler = ChoiceSampler(make_dataset(30), batch_size=7, num_samples=20, replacement=False, seed=3)
    for epoch in range(3):
        indices = sampler.epoch_indices(epoch)
        assert indices.size == 20 and len(set(indices.tolist())) == 20 and indices.max() < 30
    everything = ChoiceSampler(make_dataset(30), batch_size=7, replacement=False, seed=3).epoch_indices(0)
    assert sorted(everything.tolist()) == list(range(30))
    assert sampler.epoch_indices(1).tolist() == ChoiceSampler(
        make_dataset(30), batch_size=7, num_samples=20, replacement=False, seed=3).epoch_indices(1).tolist()


@pytest.mark.parametrize("kwargs, message", [
    (dict(num_samples=11, replacement=False), "cannot draw num_samples=11 from 10"),
    (dict(num_samples=3, replacement=False, weights=[1, 1] + [0] * 8), "2 examples of non-zero weight"),
    (dict(num_samples=0), "num_samples must be an integer >= 1"),
    (dict(weights=[1.0] * 9), "one weight per example"),
    (dict(weights=[0.0] * 10), "not all 0"),
    (dict(weights=[-1.0] + [1.0] * 9), "finite, >= 0"),
    (dict(replacement="yes"), "True or False"),
])
def test_choice_sampler_refuses_bad_arguments(kwargs, message):
    with pytest.raises(DatasetError, match=message):
        ChoiceSampler(make_dataset(10), batch_size=2, **kwargs)


# --- the state protocol: resume bitwise where the run stopped ----------------------------------------

def image_data(n: int = 37) -> NumpyDataset:
    return NumpyDataset(np.random.default_rng(0).random((n, 3, 8, 8), dtype=np.float32), np.arange(n))


AUGMENT = Compose([RandomCrop(8, padding=2), RandomHorizontalFlip(), Cutout(3)])
SAMPLERS = {
    "ordered": lambda seed=0, **kw: OrderedSampler(image_data(), 5, seed=seed, transform=AUGMENT, **kw),
    "shuffle": lambda seed=0, **kw: ShuffleSampler(image_data(), 5, seed=seed, transform=AUGMENT, **kw),
    "bucket": lambda seed=0, **kw: BucketSampler(image_data(), 5, lengths=np.arange(37) % 7, pool_batches=2,
                                                 seed=seed, transform=AUGMENT, **kw),
    "choice": lambda seed=0, **kw: ChoiceSampler(image_data(), 5, num_samples=23, seed=seed, transform=AUGMENT, **kw),
}


def assert_same_batches(got, expected):
    assert len(got) == len(expected)
    for a, b in zip(got, expected):
        assert a.keys() == b.keys()
        for name in a:
            assert a[name].dtype == b[name].dtype and a[name].tobytes() == b[name].tobytes()  # bitwise


@pytest.mark.parametrize("kind", sorted(SAMPLERS))
@pytest.mark.parametrize("stop_after", [0, 3, "end"])
def test_resuming_from_a_state_continues_bitwise(kind, stop_after):
    uninterrupted = SAMPLERS[kind](seed=9)
    expected = list(uninterrupted) + list(uninterrupted)          # epochs 0 and 1
    interrupted = SAMPLERS[kind](seed=9)
    batches = iter(interrupted)
    taken = len(interrupted) if stop_after == "end" else stop_after
    for _ in range(taken):
        next(batches)
    state = json.loads(json.dumps(interrupted.state_dict()))      # what a JSON checkpoint keeps
    assert (state["epoch"], state["position"]) == (0, taken)
    resumed = SAMPLERS[kind](seed=123)                            # the seed comes from the state
    resumed.load_state_dict(state)
    assert resumed.state_dict() == state
    assert_same_batches(list(resumed) + list(resumed), expected[taken:])
    assert resumed.state_dict()["epoch"] == 2 and resumed.state_dict()["position"] == 0


@pytest.mark.parametrize("kind", sorted(SAMPLERS))
def test_a_trainer_calling_set_epoch_keeps_the_restored_position(kind):
    reference = SAMPLERS[kind]()
    reference.set_epoch(4)
    expected = list(reference)
    stopped = SAMPLERS[kind]()
    stopped.set_epoch(4)
    batches = iter(stopped)
    next(batches), next(batches)
    resumed = SAMPLERS[kind]()
    resumed.load_state_dict(stopped.state_dict())
    resumed.set_epoch(4)   # what Trainer._run_epoch does first
    assert_same_batches(list(resumed), expected[2:])
    resumed.load_state_dict(stopped.state_dict())
    resumed.set_epoch(5)   # another epoch starts from its first batch
    assert resumed.state_dict()["position"] == 0 and len(list(resumed)) == len(expected)


def test_state_follows_iteration():
    sampler = SAMPLERS["shuffle"]()
    assert (sampler.state_dict()["epoch"], sampler.state_dict()["position"]) == (0, 0)
    list(sampler)
    assert (sampler.state_dict()["epoch"], sampler.state_dict()["position"]) == (1, 0)
    batches = iter(sampler)
    assert (sampler.state_dict()["epoch"], sampler.state_dict()["position"]) == (1, 0)
    next(batches)
    assert (sampler.state_dict()["epoch"], sampler.state_dict()["position"]) == (1, 1)
    sampler.set_epoch(7)   # an abandoned iteration no longer counts
    assert (sampler.state_dict()["epoch"], sampler.state_dict()["position"]) == (7, 0)
    state = sampler.state_dict()
    assert set(state) == {"sampler", "version", "epoch", "position", "seed", "config"}
    assert all(isinstance(v, (int, str, bool, type(None))) for v in state["config"].values())


@pytest.mark.parametrize("make_other, message", [
    (lambda: SAMPLERS["ordered"](), "state is of a ShuffleSampler, not a OrderedSampler"),
    (lambda: ShuffleSampler(image_data(), 6), "batch_size: saved 5, now 6"),
    (lambda: ShuffleSampler(image_data(36), 5), "examples: saved 37, now 36"),
    (lambda: ShuffleSampler(image_data(), 5, drop_last=True), "drop_last: saved False, now True"),
])
def test_a_state_of_another_sampler_is_refused(make_other, message):
    state = SAMPLERS["shuffle"]().state_dict()
    other = make_other()
    with pytest.raises(CheckpointError, match=message):
        other.load_state_dict(state)


def test_bucket_and_choice_states_carry_what_shapes_their_batches():
    bucket_state = SAMPLERS["bucket"]().state_dict()
    with pytest.raises(CheckpointError, match="lengths: saved"):
        BucketSampler(image_data(), 5, lengths=np.arange(37) % 5, pool_batches=2).load_state_dict(bucket_state)
    with pytest.raises(CheckpointError, match="pool_batches: saved 2, now 3"):
        BucketSampler(image_data(), 5, lengths=np.arange(37) % 7, pool_batches=3).load_state_dict(bucket_state)
    choice_state = SAMPLERS["choice"]().state_dict()
    with pytest.raises(CheckpointError, match="replacement: saved True, now False"):
        ChoiceSampler(image_data(), 5, num_samples=23, replacement=False).load_state_dict(choice_state)
    with pytest.raises(CheckpointError, match="samples_per_epoch: saved 23, now 24"):
        ChoiceSampler(image_data(), 5, num_samples=24).load_state_dict(choice_state)


@pytest.mark.parametrize("damage, message", [
    (lambda s: [], "takes the dict"),
    (lambda s: {k: v for k, v in s.items() if k != "position"}, r"lacks \['position'\]"),
    (lambda s: {**s, "position": 99}, "past the 8 batches"),
    (lambda s: {**s, "epoch": -1}, "epoch must be an integer >= 0"),
    (lambda s: {**s, "version": 99}, "state version 99"),
])
def test_a_damaged_state_is_refused(damage, message):
    sampler = SAMPLERS["shuffle"]()
    with pytest.raises(CheckpointError, match=message):
        sampler.load_state_dict(damage(sampler.state_dict()))
