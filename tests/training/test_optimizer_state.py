"""The state protocol of every optimizer: a run resumed from a checkpoint continues bitwise identically (reference
optimizers, and the PyTorch framework's native ones); a state of another optimizer, chain or network is refused."""
from __future__ import annotations

import numpy as np
import pytest

import d5
from d5.errors import CheckpointError, D5Error
from d5.frameworks import reference
from d5.training import gradient_transforms as gt
from d5.training.checkpoint import load_checkpoint, restore_checkpoint, save_checkpoint
from d5.training.optimizers import (AcceleGradOptimizer, AdaGradOptimizer, AdamOptimizer, AdamWOptimizer,
                                    ChainOptimizer, GradientDescent, LAMBOptimizer, LARSOptimizer, MomentumOptimizer,
                                    RMSPropOptimizer)
from d5.training.schedules import CosineSchedule, OneCycleSchedule, WarmupSchedule

MAKERS = {
    "sgd-clip_value": lambda ex: GradientDescent(ex, lr=0.1, weight_decay=1e-3, clip_value=0.1),
    "momentum-nesterov-clip_norm": lambda ex: MomentumOptimizer(ex, lr=CosineSchedule(0.1, period=4), nesterov=True,
                                                                clip_norm=0.5),
    "adam-amsgrad": lambda ex: AdamOptimizer(ex, lr=0.01, amsgrad=True, weight_decay=1e-4),
    "adamw-one_cycle": lambda ex: AdamWOptimizer(ex, lr=OneCycleSchedule(0.01, total_steps=20)),
    "adagrad": lambda ex: AdaGradOptimizer(ex, lr=0.1, lr_decay=0.01),
    "rmsprop-centered-momentum": lambda ex: RMSPropOptimizer(ex, lr=0.01, momentum=0.5, centered=True),
    "lars": lambda ex: LARSOptimizer(ex, lr=1.0, trust_coefficient=0.02),
    "lamb": lambda ex: LAMBOptimizer(ex, lr=WarmupSchedule(0.01, warmup_steps=3)),
    "accelegrad": lambda ex: AcceleGradOptimizer(ex, diameter=0.5),
    "chain-global-norm-after-adam": lambda ex: ChainOptimizer(ex, [gt.ScaleByAdam(), gt.ClipByGlobalNorm(0.5),
                                                                   gt.ScaleByLearningRate(0.01)]),
}


def network(hidden: int = 5) -> d5.Network:
    return d5.models.mlp((6,), hidden=(hidden,), num_classes=3, seed=0)


def batches(count: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    return [{"input": rng.standard_normal((8, 6)).astype(np.float32), "label": rng.integers(0, 3, 8)}
            for _ in range(count)]


def parameters(executor) -> dict[str, np.ndarray]:
    return {name: executor.network.fetch_tensor(name).copy() for name in executor.network.get_params()}


def assert_plain_state(value, where="state"):
    """A state holds only scalars, strings, None, lists/tuples, dicts and NumPy arrays (checkpoint-safe)."""
    if isinstance(value, dict):
        for key, item in value.items():
            assert isinstance(key, str), f"{where}: key {key!r}"
            assert_plain_state(item, f"{where}.{key}")
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            assert_plain_state(item, f"{where}[{index}]")
    else:
        assert value is None or isinstance(value, (bool, int, float, str, np.ndarray, np.generic)), \
            f"{where} is a {type(value).__name__}"
        assert not isinstance(value, np.ndarray) or not value.dtype.hasobject, where


def resume_bitwise(module, make, tmp_path, framework_batches, split: int):
    """Train uninterrupted; train `split` steps, checkpoint, restore into a fresh executor and optimizer, finish.
    Returns both final parameter sets and the two optimizers."""
    straight = module.from_model(network())
    straight_optimizer = make(straight)
    for batch in framework_batches:
        straight_optimizer.step(batch)

    first = module.from_model(network())
    first_optimizer = make(first)
    for batch in framework_batches[:split]:
        first_optimizer.step(batch)
    path = save_checkpoint(tmp_path / "run.d5ckpt", first, step=split, optimizer=first_optimizer)
    for batch in framework_batches[split:split + 2]:  # the first run goes on and changes its state after saving
        first_optimizer.step(batch)

    resumed = module.from_model(d5.models.mlp((6,), hidden=(5,), num_classes=3, seed=1))  # other initial weights
    resumed_optimizer = make(resumed)
    restore_checkpoint(load_checkpoint(path), resumed, optimizer=resumed_optimizer)
    for batch in framework_batches[split:]:
        resumed_optimizer.step(batch)
    return parameters(straight), parameters(resumed), straight_optimizer, resumed_optimizer


@pytest.mark.parametrize("name", list(MAKERS))
def test_a_resumed_reference_run_continues_bitwise(name, tmp_path):
    straight, resumed, straight_optimizer, resumed_optimizer = resume_bitwise(reference, MAKERS[name], tmp_path,
                                                                              batches(7), split=4)
    for param in straight:
        np.testing.assert_array_equal(resumed[param], straight[param], err_msg=f"{name}: {param}")
    assert resumed_optimizer.steps == straight_optimizer.steps == 7
    assert resumed_optimizer.lr == straight_optimizer.lr
    assert_plain_state(straight_optimizer.state_dict())


def test_hyperparameters_changed_during_the_run_are_restored(tmp_path):
    executor = reference.from_model(network())
    optimizer = MomentumOptimizer(executor, lr=CosineSchedule(0.1, period=10))
    optimizer.step(batches(1)[0])
    optimizer.momentum, optimizer.clip_norm, optimizer.lr = 0.5, 0.25, 0.02  # an event's lr replaces the schedule
    state = optimizer.state_dict()
    fresh = MomentumOptimizer(reference.from_model(network()), lr=CosineSchedule(0.1, period=10))
    fresh.load_state_dict(state)
    assert (fresh.momentum, fresh.clip_norm, fresh.lr, fresh.lr_schedule, fresh.t) == (0.5, 0.25, 0.02, None, 1)


def test_a_state_dict_is_a_copy():
    executor = reference.from_model(network())
    optimizer = AdamOptimizer(executor, lr=0.01)
    optimizer.step(batches(1)[0])
    state = optimizer.state_dict()
    saved = {name: entry["first_moment"].copy() for name, entry in state["pieces"][3]["state"].items()}
    optimizer.step(batches(2)[1])
    for name, moment in saved.items():
        np.testing.assert_array_equal(state["pieces"][3]["state"][name]["first_moment"], moment)
    assert state["pieces"][3]["piece"] == "ScaleByAdam"


@pytest.mark.parametrize("make_other,message", [
    (lambda ex: RMSPropOptimizer(ex), "of a 'AdamOptimizer', not of a RMSPropOptimizer"),
    (lambda ex: AdamWOptimizer(ex), "not of a AdamWOptimizer"),
    (lambda ex: AdamOptimizer(reference.from_model(network(hidden=7))), r"'fc2.weight' is \(7, 6\) here but \(5, 6\)"),
    (lambda ex: AdamOptimizer(reference.from_model(d5.models.mlp((6,), hidden=(), num_classes=3))),
     r"parameters this network lacks: \['fc2.bias', 'fc2.weight'\]"),
    (lambda ex: AdamOptimizer(ex, lr=CosineSchedule(0.1, period=3)), None),  # a schedule here, none saved: fine
])
def test_incompatible_states_are_refused_saying_why(make_other, message):
    executor = reference.from_model(network())
    optimizer = AdamOptimizer(executor, lr=0.01)
    optimizer.step(batches(1)[0])
    other = make_other(reference.from_model(network()))
    if message is None:
        other.load_state_dict(optimizer.state_dict())
        assert other.lr_schedule is None and other.lr == 0.01
        return
    with pytest.raises(CheckpointError, match=message) as info:
        other.load_state_dict(optimizer.state_dict())
    assert isinstance(info.value, D5Error)


def test_other_chains_and_a_missing_schedule_are_refused():
    executor = reference.from_model(network())
    scheduled = MomentumOptimizer(executor, lr=CosineSchedule(0.1, period=3))
    scheduled.step(batches(1)[0])
    with pytest.raises(CheckpointError, match="followed a learning-rate schedule"):
        MomentumOptimizer(executor, lr=0.1).load_state_dict(scheduled.state_dict())
    mine = ChainOptimizer(executor, [gt.Momentum(0.9), gt.ScaleByLearningRate(0.1)])
    other = ChainOptimizer(executor, [gt.ScaleByAdam(), gt.ScaleByLearningRate(0.1)])
    with pytest.raises(CheckpointError, match=r"chain \['ScaleByAdam', 'ScaleByLearningRate'\]"):
        mine.load_state_dict(other.state_dict())
    with pytest.raises(CheckpointError, match="needs the dict"):
        mine.load_state_dict([1, 2])


# ---------------------------------------------------------------------- the PyTorch framework's native optimizers
NATIVE = ["GradientDescent", "MomentumOptimizer", "AdamOptimizer", "AdamWOptimizer", "AdaGradOptimizer",
          "RMSPropOptimizer"]


@pytest.mark.parametrize("name", NATIVE)
def test_a_resumed_pytorch_run_continues_bitwise(name, tmp_path):
    pytorch = pytest.importorskip("d5.frameworks.pytorch")
    kwargs = {"RMSPropOptimizer": dict(momentum=0.5, centered=True), "AdamOptimizer": dict(amsgrad=True),
              "MomentumOptimizer": dict(lr=CosineSchedule(0.1, period=4), clip_norm=0.5)}.get(name, {})

    def make(executor):
        return getattr(pytorch, name)(executor, **kwargs)

    straight, resumed, straight_optimizer, resumed_optimizer = resume_bitwise(pytorch, make, tmp_path, batches(6),
                                                                              split=3)
    for param in straight:
        np.testing.assert_array_equal(resumed[param], straight[param], err_msg=f"{name}: {param}")
    assert resumed_optimizer.steps == 6 and resumed_optimizer.lr == straight_optimizer.lr
    state = straight_optimizer.state_dict()
    assert_plain_state(state)
    assert set(state["state"]) == (set() if name == "GradientDescent" else set(straight_optimizer.param_names))


def test_pytorch_states_of_another_network_or_optimizer_are_refused():
    pytorch = pytest.importorskip("d5.frameworks.pytorch")
    optimizer = pytorch.AdamOptimizer(pytorch.from_model(network()))
    optimizer.step(batches(1)[0])
    with pytest.raises(CheckpointError, match="other parameters"):
        pytorch.AdamOptimizer(pytorch.from_model(network(hidden=7))).load_state_dict(optimizer.state_dict())
    with pytest.raises(CheckpointError, match="not of a MomentumOptimizer"):
        pytorch.MomentumOptimizer(pytorch.from_model(network())).load_state_dict(optimizer.state_dict())
