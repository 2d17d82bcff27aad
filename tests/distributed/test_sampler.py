"""DistributedSampler: disjoint, epoch-seeded shards per rank, equal step counts, the uneven tail in each mode,
bitwise resume, and a Trainer run on one rank's shard. No MPI: one sampler per rank, built in one process."""
from __future__ import annotations

import collections
import json
import os
import pathlib
import subprocess
import sys
import types

import numpy as np
import pytest

from d5.distributed.sampler import DistributedSampler
from d5.errors import CheckpointError, D5Error, DatasetError, DistributedError
from d5.training.dataset import NumpyDataset
from d5.training.sampler import OrderedSampler, ShuffleSampler
from d5.training.transforms import Compose, RandomCrop, RandomHorizontalFlip

# (examples, ranks, per-rank batch): divisible by size*batch, divisible by size only, neither, one rank, ...
SHAPES = [(24, 3, 4), (30, 3, 4), (10, 3, 2), (10, 4, 3), (7, 2, 3), (101, 4, 8), (5, 5, 1), (9, 1, 4)]


def make_dataset(n: int) -> NumpyDataset:
    return NumpyDataset(np.arange(n * 2, dtype=np.float32).reshape(n, 2), np.arange(n, dtype=np.int64))


def ranks(n: int, size: int, batch: int, **kwargs) -> list:
    dataset = make_dataset(n)
    return [DistributedSampler(dataset, batch, rank=r, size=size, **kwargs) for r in range(size)]


def epoch_batches(sampler) -> list:
    """One epoch of a sampler as a list of label lists (labels are the example indices)."""
    return [batch["label"].tolist() for batch in sampler]


def flat(batches) -> list:
    return [index for batch in batches for index in batch]


# --- the default mode: padded, every rank the same batches -----------------------------------------------------

@pytest.mark.parametrize("n,size,batch", SHAPES)
def test_default_mode_covers_every_example_and_pads_fewer_than_size(n, size, batch):
    samplers = ranks(n, size, batch, seed=5)
    per_rank = [epoch_batches(s) for s in samplers]
    # the same number of steps, and at each step the same batch size, on every rank
    assert len({len(batches) for batches in per_rank}) == 1
    assert all(len(batches) == len(s) for batches, s in zip(per_rank, samplers))
    for step in zip(*per_rank):
        assert len({len(b) for b in step}) == 1
    counts = collections.Counter(flat(flat(per_rank)))
    assert set(counts) == set(range(n))  # every example at least once
    pad = -n % size
    assert samplers[0].padding == pad < size and samplers[0].dropped == 0
    twice = sorted(index for index, count in counts.items() if count == 2)
    assert max(counts.values()) <= 2 and len(twice) == pad
    # the repeated examples are the first `pad` of the epoch's order (shared by every rank)
    assert twice == sorted(samplers[0].global_indices(0)[:pad].tolist())
    if pad == 0:
        assert all(count == 1 for count in counts.values())


@pytest.mark.parametrize("n,size,batch", SHAPES)
def test_shards_are_disjoint_strided_positions_of_one_epoch_order(n, size, batch):
    samplers = ranks(n, size, batch, seed=2)
    order = samplers[0].global_indices(0)
    for rank, sampler in enumerate(samplers):
        np.testing.assert_array_equal(sampler.global_indices(0), order)  # the same on every rank
        np.testing.assert_array_equal(sampler.epoch_indices(0), order[rank::size])
        assert flat(epoch_batches(sampler)) == order[rank::size].tolist()


@pytest.mark.parametrize("n,size,batch", [(24, 3, 4), (30, 3, 4), (101, 4, 8)])
def test_step_k_on_all_ranks_is_batch_k_of_a_single_process_run_with_the_global_batch(n, size, batch):
    """Synchronous data parallelism sees the global batches of ShuffleSampler(batch * size): same examples."""
    for kwargs in ({}, {"drop_last": True}):
        per_rank = [epoch_batches(s) for s in ranks(n, size, batch, seed=9, **kwargs)]
        single = epoch_batches(ShuffleSampler(make_dataset(n), batch * size, seed=9, drop_last=True))
        for k, step in enumerate(zip(*per_rank)):
            if k < len(single):
                assert sorted(flat(step)) == sorted(single[k])


def test_one_rank_is_a_shuffle_sampler_and_unshuffled_an_ordered_sampler():
    dataset = make_dataset(23)
    augment = Compose([RandomCrop(2, padding=1), RandomHorizontalFlip()])
    images = NumpyDataset(np.random.default_rng(0).normal(size=(23, 1, 2, 2)).astype(np.float32), np.arange(23))
    for epoch in range(2):
        for drop_last in (False, True):
            one = DistributedSampler(dataset, 5, rank=0, size=1, seed=3, drop_last=drop_last)
            plain = ShuffleSampler(dataset, 5, seed=3, drop_last=drop_last)
            one.set_epoch(epoch), plain.set_epoch(epoch)
            assert epoch_batches(one) == epoch_batches(plain)
        ordered = DistributedSampler(dataset, 5, rank=0, size=1, shuffle=False)
        assert epoch_batches(ordered) == epoch_batches(OrderedSampler(dataset, 5))
        one = DistributedSampler(images, 5, rank=0, size=1, seed=3, transform=augment)
        plain = ShuffleSampler(images, 5, seed=3, transform=augment)
        one.set_epoch(epoch), plain.set_epoch(epoch)
        for a, b in zip(one, plain):
            np.testing.assert_array_equal(a["input"], b["input"])


# --- drop_last and the exact mode ----------------------------------------------------------------------------

@pytest.mark.parametrize("n,size,batch", SHAPES)
def test_drop_last_gives_full_batches_no_repeats_and_skips_the_orders_tail(n, size, batch):
    if n < size * batch:
        pytest.skip("smaller than one global batch: refused (see test_a_batch_larger_than_the_shard_is_refused)")
    samplers = ranks(n, size, batch, seed=4, drop_last=True)
    per_rank = [epoch_batches(s) for s in samplers]
    steps = n // (size * batch)
    assert [len(b) for b in per_rank] == [len(s) for s in samplers] == [steps] * size
    assert all(len(b) == batch for b in flat(per_rank))
    seen = flat(flat(per_rank))
    assert len(seen) == len(set(seen)) == steps * size * batch  # at most once
    skipped = set(range(n)) - set(seen)
    assert len(skipped) == samplers[0].dropped == n % (size * batch) and samplers[0].padding == 0
    order = np.random.default_rng((4, 0)).permutation(n)
    assert skipped == set(order[steps * size * batch:].tolist())  # the epoch order's last examples


@pytest.mark.parametrize("n,size,batch", SHAPES)
def test_exact_mode_visits_every_example_exactly_once(n, size, batch):
    if batch > n // size:
        pytest.skip("a batch larger than a shard: refused (see test_a_batch_larger_than_the_shard_is_refused)")
    samplers = ranks(n, size, batch, seed=6, even_batches=False)
    per_rank = [epoch_batches(s) for s in samplers]
    seen = flat(flat(per_rank))
    assert sorted(seen) == list(range(n))
    shard_sizes = [len(flat(b)) for b in per_rank]
    assert shard_sizes == [len(range(r, n, size)) for r in range(size)]
    assert max(shard_sizes) - min(shard_sizes) <= 1
    lengths = [len(b) for b in per_rank]
    assert lengths == [len(s) for s in samplers] == list(samplers[0].batches_per_rank)
    assert max(lengths) - min(lengths) <= 1
    assert all(s.equal_steps == (len(set(lengths)) == 1) for s in samplers)
    assert samplers[0].padding == samplers[0].dropped == 0


def test_exact_mode_can_leave_a_rank_one_step_short_and_says_so():
    samplers = ranks(9, 2, 1, even_batches=False)  # 5 and 4 examples: 5 and 4 steps
    assert [len(s) for s in samplers] == [5, 4]
    assert not samplers[1].equal_steps and samplers[1].batches_per_rank == (5, 4)
    even = ranks(9, 2, 1)  # the default pads rank 1 to 5 steps
    assert [len(s) for s in even] == [5, 5] and even[0].equal_steps and even[0].padding == 1


def test_exact_mode_with_drop_last_drops_each_ranks_short_batch():
    samplers = ranks(11, 2, 4, even_batches=False, drop_last=True)  # shards of 6 and 5: one full batch each
    per_rank = [epoch_batches(s) for s in samplers]
    assert [len(b) for b in per_rank] == [1, 1] and all(len(b) == 4 for b in flat(per_rank))
    assert samplers[0].dropped == 3 and len(set(flat(flat(per_rank)))) == 8


# --- epochs and seeds ----------------------------------------------------------------------------------------

def test_every_epoch_reshuffles_and_set_epoch_replays_an_epoch():
    samplers = ranks(40, 4, 3, seed=1)
    epochs = [[epoch_batches(s) for s in samplers] for _ in range(3)]  # iterating advances the epoch
    assert epochs[0] != epochs[1] != epochs[2] != epochs[0]
    for per_rank in epochs:
        assert sorted(flat(flat(per_rank))) == list(range(40))  # every epoch covers, 40 = 4 * 10: no padding
        assert len({len(b) for b in per_rank}) == 1
    assert all(s.epoch == 3 for s in samplers)
    for s in samplers:
        s.set_epoch(1)
    assert [epoch_batches(s) for s in samplers] == epochs[1]


def test_the_same_seed_gives_the_same_shards_and_another_seed_other_shards():
    first = [epoch_batches(s) for s in ranks(50, 3, 4, seed=7)]
    assert [epoch_batches(s) for s in ranks(50, 3, 4, seed=7)] == first
    assert [epoch_batches(s) for s in ranks(50, 3, 4, seed=8)] != first
    unshuffled = [epoch_batches(s) for s in ranks(50, 3, 4, seed=7, shuffle=False)]
    assert unshuffled == [epoch_batches(s) for s in ranks(50, 3, 4, seed=8, shuffle=False)]
    assert flat(unshuffled[0])[:3] == [0, 3, 6]


def test_shards_are_the_same_in_another_process():
    """What mpiexec relies on: each rank's process computes its shard alone, from (seed, epoch)."""
    program = ("import json, numpy as np\n"
               "from d5.distributed.sampler import DistributedSampler\n"
               "from d5.training.dataset import NumpyDataset\n"
               "ds = NumpyDataset(np.zeros((37, 1), np.float32), np.arange(37))\n"
               "out = []\n"
               "for r in range(3):\n"
               "    s = DistributedSampler(ds, 4, rank=r, size=3, seed=11)\n"
               "    s.set_epoch(2)\n"
               "    out.append([b['label'].tolist() for b in s])\n"
               "print(json.dumps(out))\n")
    root = pathlib.Path(__file__).resolve().parents[2]
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120, cwd=root,
                            env={**os.environ, "PYTHONHASHSEED": "123"}, check=True)
    here = []
    for s in ranks(37, 3, 4, seed=11):
        s.set_epoch(2)
        here.append(epoch_batches(s))
    assert json.loads(result.stdout) == here


# --- transforms ----------------------------------------------------------------------------------------------

def test_transforms_are_seeded_per_rank_and_never_touch_the_dataset():
    rng = np.random.default_rng(0)
    dataset = NumpyDataset(rng.normal(size=(16, 1, 4, 4)).astype(np.float32), np.arange(16))
    before = dataset.data.copy()
    noise = lambda x, g: x + g.normal(size=x.shape).astype(x.dtype)  # noqa: E731
    tagged = lambda batch: {**batch, "tag": np.ones(len(batch["label"]))}  # noqa: E731
    samplers = [DistributedSampler(dataset, 4, rank=r, size=2, seed=3, transform=noise, transforms=[tagged])
                for r in range(2)]
    outputs = [list(s) for s in samplers]
    for r, batches in enumerate(outputs):
        for b, batch in enumerate(batches):
            assert "tag" in batch
            delta = batch["input"] - dataset.data[batch["label"]]
            other = outputs[1 - r][b]["input"] - dataset.data[outputs[1 - r][b]["label"]]
            assert not np.allclose(delta, other)  # independent streams per rank
    np.testing.assert_array_equal(dataset.data, before)
    samplers[1].set_epoch(0)
    for a, b in zip(samplers[1], outputs[1]):
        np.testing.assert_array_equal(a["input"], b["input"])  # and reproducible from (seed, epoch)


# --- state: bitwise resume mid-epoch ---------------------------------------------------------------------------

@pytest.mark.parametrize("mode", [{}, {"drop_last": True}, {"even_batches": False}])
@pytest.mark.parametrize("stop_after", [0, 1, 3, 5])  # 50 over 3 ranks: 6, 5 (drop_last) or 6 batches
def test_resuming_from_a_state_continues_bitwise(mode, stop_after):
    dataset = NumpyDataset(np.random.default_rng(1).normal(size=(50, 1, 4, 4)).astype(np.float32), np.arange(50))
    augment = Compose([RandomCrop(4, padding=1), RandomHorizontalFlip()])

    def build(rank):
        return DistributedSampler(dataset, 3, rank=rank, size=3, seed=13, transform=augment, **mode)

    for rank in range(3):
        straight = build(rank)
        straight.set_epoch(1)
        expected = list(straight) + list(straight)  # epochs 1 and 2
        interrupted = build(rank)
        interrupted.set_epoch(1)
        batches = iter(interrupted)
        for _ in range(stop_after):
            next(batches)
        state = json.loads(json.dumps(interrupted.state_dict()))  # fits a JSON checkpoint
        assert (state["epoch"], state["position"]) == (1, stop_after)
        assert state["config"]["rank"] == rank and state["config"]["size"] == 3
        resumed = build(rank)
        resumed.load_state_dict(state)
        resumed.set_epoch(1)  # what the Trainer does at the start of the epoch; the position survives
        got = list(resumed) + list(resumed)
        assert len(got) == len(expected) - stop_after
        for a, b in zip(got, expected[stop_after:]):
            np.testing.assert_array_equal(a["label"], b["label"])
            np.testing.assert_array_equal(a["input"], b["input"])


@pytest.mark.parametrize("other,message", [
    (dict(rank=1), "rank: saved 0, now 1"),
    (dict(size=4), "size: saved 3, now 4"),
    (dict(even_batches=False), "even_batches"),
    (dict(shuffle=False), "shuffle"),
    (dict(batch_size=2), "batch_size"),
])
def test_a_state_of_another_rank_or_configuration_is_refused(other, message):
    base = dict(rank=0, size=3, batch_size=3)
    saved = DistributedSampler(make_dataset(30), seed=1, **base)
    next(iter(saved))
    loading = DistributedSampler(make_dataset(30), seed=1, **{**base, **other})
    with pytest.raises(CheckpointError, match=message):
        loading.load_state_dict(saved.state_dict())
    with pytest.raises(CheckpointError, match="not a ShuffleSampler"):
        ShuffleSampler(make_dataset(30), 3).load_state_dict(saved.state_dict())


# --- bad input ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs,error,message", [
    (dict(rank=2, size=2), DistributedError, r"rank=2 is not in \[0, 2\)"),
    (dict(rank=-1, size=2), DistributedError, r"rank=-1 is not in \[0, 2\)"),
    (dict(rank=0, size=0), DistributedError, "size=0"),
    (dict(rank=True, size=2), DistributedError, "rank must be an integer"),
    (dict(rank=0.0, size=2), DistributedError, "rank must be an integer"),
    (dict(rank=0, size="2"), DistributedError, "size must be an integer"),
    (dict(rank=0), DistributedError, "pass rank= and size="),
    (dict(), DistributedError, "pass rank= and size="),
    (dict(comm=object()), DistributedError, r"must have \.rank and \.size"),
    (dict(comm=types.SimpleNamespace(rank=0, size=2), rank=0), DistributedError, "not both"),
    (dict(comm=types.SimpleNamespace(rank=3, size=2)), DistributedError, r"comm \(SimpleNamespace\) rank=3"),
    (dict(rank=0, size=2, shuffle="yes"), DatasetError, "shuffle must be True or False"),
    (dict(rank=0, size=2, even_batches=None), DatasetError, "even_batches must be True or False"),
    (dict(rank=0, size=2, seed=-1), DatasetError, "seed must be an integer >= 0"),
])
def test_bad_rank_size_and_options_raise_d5_errors_saying_what_to_pass(kwargs, error, message):
    with pytest.raises(error, match=message):
        DistributedSampler(make_dataset(10), 2, **kwargs)


@pytest.mark.parametrize("n,size,batch,kwargs,smallest", [
    (10, 2, 6, {}, 5),                        # shards of 5: a global batch of 12 was meant as per-rank?
    (11, 2, 6, {}, 6),                        # padded to 6 per rank: fits (no error), see below
    (11, 2, 6, {"even_batches": False}, 5),   # the smaller shard decides, on every rank
    (9, 2, 5, {"drop_last": True}, 4),
])
def test_a_batch_larger_than_the_shard_is_refused(n, size, batch, kwargs, smallest):
    if batch <= smallest:
        assert all(len(s) == 1 for s in ranks(n, size, batch, **kwargs))
        return
    for rank in range(size):  # the same error on every rank, so no rank goes on to a collective alone
        with pytest.raises(DatasetError, match=f"batch_size={batch} is per rank.*only {smallest} per epoch.*"
                                               f"batch_size <= {smallest}"):
            DistributedSampler(make_dataset(n), batch, rank=rank, size=size, **kwargs)


def test_fewer_examples_than_ranks_and_bad_datasets_are_refused():
    with pytest.raises(DatasetError, match="3 examples, fewer than the 4 ranks"):
        DistributedSampler(make_dataset(3), 1, rank=0, size=4)
    with pytest.raises(DatasetError, match="empty"):
        DistributedSampler(NumpyDataset(np.zeros((0, 2)), np.zeros(0, np.int64)), 1, rank=0, size=1)
    with pytest.raises(DatasetError, match="needs a Dataset"):
        DistributedSampler(5, 1, rank=0, size=1)
    with pytest.raises(DatasetError, match="batch_size must be an integer >= 1"):
        DistributedSampler(make_dataset(4), 0, rank=0, size=2)
    assert issubclass(DistributedError, D5Error) and issubclass(DatasetError, D5Error)


def test_a_comm_object_stands_for_rank_and_size():
    comm = types.SimpleNamespace(rank=np.int64(1), size=np.int64(3))  # e.g. mpi4py's COMM_WORLD has both
    via_comm = DistributedSampler(make_dataset(20), 2, comm=comm, seed=4)
    assert (via_comm.rank, via_comm.size) == (1, 3) and type(via_comm.rank) is int
    assert epoch_batches(via_comm) == epoch_batches(DistributedSampler(make_dataset(20), 2, rank=1, size=3, seed=4))
    assert "rank=1, size=3" in repr(via_comm)


# --- with the Trainer --------------------------------------------------------------------------------------------

def _digits_trainer(events=()):
    """rank 0 of 2 on the 8x8 digits: 1,438 training images -> 719 per rank, 23 batches of 32 (the last of 15)."""
    reference = pytest.importorskip("d5.frameworks.reference")
    from d5.datasets.digits import load_digits
    from d5.models.simple import mlp
    from d5.training.optimizers import MomentumOptimizer
    from d5.training.trainer import Trainer

    train, test = load_digits()
    executor = reference.from_model(mlp((1, 8, 8), hidden=(32,), num_classes=10, seed=0))
    optimizer = MomentumOptimizer(executor, lr=0.05, momentum=0.9)
    sampler = DistributedSampler(train, 32, rank=0, size=2, seed=1)
    return Trainer(sampler, OrderedSampler(test, 128), executor, optimizer, events=list(events), progress=False)


def _parameters(trainer):
    names = list(trainer.executor.network.get_params())
    return {name: value.copy() for name, value in zip(names, trainer.executor.network.fetch_tensors(names))}


def test_the_trainer_runs_unchanged_on_one_ranks_shard():
    pytest.importorskip("sklearn")
    from d5.training.events import TrainerEvent

    class Labels(TrainerEvent):
        def __init__(self):
            self.seen = collections.defaultdict(list)

        def before_step(self, trainer, step, inputs):
            self.seen[trainer.epoch].extend(inputs["label"].tolist())

    record = Labels()
    trainer = _digits_trainer([record])
    sampler = trainer.train_sampler
    assert (len(sampler), sampler.samples_per_epoch, sampler.padding) == (23, 719, 0)
    stats = trainer.run(2)
    assert (stats.epochs, stats.steps, stats.samples) == (2, 46, 2 * 719)
    assert stats.test_accuracy[-1] > 80.0  # it learns from half the data
    labels = sampler.dataset.labels
    for epoch in (0, 1):
        assert record.seen[epoch] == labels[sampler.epoch_indices(epoch)].tolist()  # the shard, in order
    # the Trainer's checkpoint holds the sampler's state, rank and world size included
    state = trainer.state_dict()["sampler"]
    assert (state["sampler"], state["epoch"], state["position"]) == ("DistributedSampler", 2, 0)
    assert (state["config"]["rank"], state["config"]["size"]) == (0, 2)


@pytest.mark.parametrize("stop_at", [10, 23, 30])
def test_a_trainer_stopped_mid_epoch_resumes_bitwise_on_its_shard(stop_at):
    pytest.importorskip("sklearn")
    from d5.training.events import StopAfter

    straight = _digits_trainer()
    expected = straight.run(2)
    stopped = _digits_trainer()
    stopped.run(2, events=[StopAfter(steps=stop_at)])
    state = stopped.state_dict()
    assert (state["epoch"], state["position"]) == divmod(stop_at, 23)
    resumed = _digits_trainer()
    for name, value in _parameters(stopped).items():
        resumed.executor.network.feed_tensor(name, value)
    resumed.load_state_dict(state)
    stats = resumed.run(2)
    final, want = _parameters(resumed), _parameters(straight)
    for name in want:
        np.testing.assert_array_equal(final[name], want[name], err_msg=name)
    assert (stats.steps, stats.samples, stats.train_loss) == (expected.steps, expected.samples, expected.train_loss)
