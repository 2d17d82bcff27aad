"""Learning-rate schedules, value for value against torch.optim.lr_scheduler (stepped once per optimizer step, or
once per epoch for the epoch-based ones), and their bad input."""
from __future__ import annotations

import warnings

import pytest

from d5.errors import D5Error, InvalidHyperparameterError
from d5.training.schedules import (SCHEDULES, ConstantSchedule, CosineSchedule, LinearSchedule, MultiStepSchedule,
                                   OneCycleSchedule, StepSchedule, WarmupSchedule, schedule_by_name)

torch = pytest.importorskip("torch")
lr_scheduler = torch.optim.lr_scheduler
STEPS = 60


def torch_rates(make_scheduler, lr: float, steps: int = STEPS) -> list[float]:
    """The rate torch uses at each of ``steps`` optimizer steps (the scheduler stepped after each)."""
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)
    scheduler = make_scheduler(optimizer)
    rates = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SequentialLR's deprecation chatter
        for _ in range(steps):
            rates.append(optimizer.param_groups[0]["lr"])
            optimizer.step()
            scheduler.step()
    return rates


CASES = [
    ("step", StepSchedule(0.1, step_size=7, gamma=0.5), 0.1, lambda o: lr_scheduler.StepLR(o, 7, gamma=0.5)),
    ("multistep", MultiStepSchedule(0.1, milestones=[30, 5, 30, 44], gamma=0.3), 0.1,
     lambda o: lr_scheduler.MultiStepLR(o, [30, 5, 30, 44], gamma=0.3)),
    ("cosine-past-its-period", CosineSchedule(0.1, period=25, min_lr=0.01), 0.1,
     lambda o: lr_scheduler.CosineAnnealingLR(o, T_max=25, eta_min=0.01)),
    ("cosine-restarts", CosineSchedule(0.1, period=9, min_lr=0.001, restarts=True), 0.1,
     lambda o: lr_scheduler.CosineAnnealingWarmRestarts(o, T_0=9, eta_min=0.001)),
    ("cosine-restarts-growing", CosineSchedule(0.1, period=4, restarts=True, period_multiplier=3), 0.1,
     lambda o: lr_scheduler.CosineAnnealingWarmRestarts(o, T_0=4, T_mult=3)),
    ("linear-warmup", LinearSchedule(0.1, start_factor=0.1, total_steps=12), 0.1,
     lambda o: lr_scheduler.LinearLR(o, start_factor=0.1, total_iters=12)),
    ("linear-decay", LinearSchedule(0.1, start_factor=1.0, end_factor=0.05, total_steps=40), 0.1,
     lambda o: lr_scheduler.LinearLR(o, start_factor=1.0, end_factor=0.05, total_iters=40)),
    ("one-cycle", OneCycleSchedule(0.3, total_steps=STEPS), 0.3,
     lambda o: lr_scheduler.OneCycleLR(o, max_lr=0.3, total_steps=STEPS, cycle_momentum=False)),
    ("one-cycle-linear-three-phase", OneCycleSchedule(0.3, epochs=6, steps_per_epoch=10, pct_start=0.4,
                                                      anneal="linear", div_factor=10.0, final_div_factor=100.0,
                                                      three_phase=True), 0.3,
     lambda o: lr_scheduler.OneCycleLR(o, max_lr=0.3, epochs=6, steps_per_epoch=10, pct_start=0.4,
                                       anneal_strategy="linear", div_factor=10.0, final_div_factor=100.0,
                                       three_phase=True, cycle_momentum=False)),
    ("warmup-then-cosine", WarmupSchedule(CosineSchedule(0.1, period=30, min_lr=0.005), warmup_steps=8,
                                          start_factor=0.05), 0.1,
     lambda o: lr_scheduler.SequentialLR(o, [lr_scheduler.LinearLR(o, start_factor=0.05, total_iters=8),
                                             lr_scheduler.CosineAnnealingLR(o, T_max=30, eta_min=0.005)],
                                         milestones=[8])),
    ("warmup-then-multistep", WarmupSchedule(MultiStepSchedule(0.2, milestones=[10, 20]), warmup_steps=5,
                                             start_factor=0.5), 0.2,
     lambda o: lr_scheduler.SequentialLR(o, [lr_scheduler.LinearLR(o, start_factor=0.5, total_iters=5),
                                             lr_scheduler.MultiStepLR(o, [10, 20])], milestones=[5])),
    ("constant", ConstantSchedule(0.05), 0.05, lambda o: lr_scheduler.ConstantLR(o, factor=1.0)),
]


@pytest.mark.parametrize("name,schedule,lr,make_scheduler", CASES, ids=[case[0] for case in CASES])
def test_schedules_give_torchs_rates_value_for_value(name, schedule, lr, make_scheduler):
    expected = torch_rates(make_scheduler, lr)
    ours = [schedule(step) for step in range(STEPS)]
    assert ours == pytest.approx(expected, rel=1e-12, abs=1e-15)
    assert len(set(round(rate, 12) for rate in ours)) > 1 or name == "constant"  # the schedule moves


@pytest.mark.parametrize("schedule,make_scheduler", [
    (StepSchedule(0.1, step_size=2, gamma=0.5, steps_per_epoch=7), lambda o: lr_scheduler.StepLR(o, 2, gamma=0.5)),
    (MultiStepSchedule(0.1, milestones=[1, 3], steps_per_epoch=7), lambda o: lr_scheduler.MultiStepLR(o, [1, 3])),
    (CosineSchedule(0.1, period=5, steps_per_epoch=7), lambda o: lr_scheduler.CosineAnnealingLR(o, T_max=5)),
    (LinearSchedule(0.1, start_factor=0.5, total_steps=4, steps_per_epoch=7),
     lambda o: lr_scheduler.LinearLR(o, start_factor=0.5, total_iters=4)),
], ids=["step", "multistep", "cosine", "linear"])
def test_epoch_based_schedules_follow_torch_stepped_once_per_epoch(schedule, make_scheduler):
    per_epoch = torch_rates(make_scheduler, 0.1, steps=8)
    ours = [schedule(step) for step in range(8 * 7)]
    assert ours == pytest.approx([rate for rate in per_epoch for _ in range(7)], rel=1e-12)


def test_one_cycle_refuses_steps_past_its_cycle():
    schedule = OneCycleSchedule(0.1, total_steps=10)
    schedule(10)  # torch, too, accepts total_steps scheduler steps
    with pytest.raises(InvalidHyperparameterError, match="past total_steps=10"):
        schedule(11)


@pytest.mark.parametrize("make_bad,message", [
    (lambda: StepSchedule(-0.1, step_size=3), r"lr=-0.1 is out of range"),
    (lambda: StepSchedule(0.1, step_size=0), "step_size=0 is out of range"),
    (lambda: StepSchedule(0.1, step_size=2.5), "step_size must be a whole number"),
    (lambda: MultiStepSchedule(0.1, milestones=5), "milestones must be a list"),
    (lambda: CosineSchedule(0.1, period=10, period_multiplier=2), "restarts=True"),
    (lambda: LinearSchedule(0.1, start_factor=float("inf")), "start_factor"),
    (lambda: WarmupSchedule(0.1, warmup_steps=4, start_factor=2.0), r"start_factor=2.0 .*\[0.0, 1.0\]"),
    (lambda: OneCycleSchedule(0.1), "total_steps, or epochs and steps_per_epoch"),
    (lambda: OneCycleSchedule(0.1, total_steps=10, anneal="cosine"), "'cos' or 'linear'"),
    (lambda: OneCycleSchedule(0.1, total_steps=10, div_factor=0.0), r"div_factor.*\(0.0, inf\)"),
    (lambda: StepSchedule(0.1, step_size=2)(-1), "whole number >= 0"),
    (lambda: StepSchedule(0.1, step_size=2)(1.5), "whole number >= 0"),
])
def test_bad_schedule_arguments_say_what_is_valid(make_bad, message):
    with pytest.raises(InvalidHyperparameterError, match=message):
        make_bad()


def test_schedules_by_name():
    assert schedule_by_name("Cosine", 0.1, period=10)(0) == 0.1
    assert schedule_by_name("one-cycle", 0.1, total_steps=10)(3) == OneCycleSchedule(0.1, total_steps=10)(3)
    assert schedule_by_name("step_schedule", 1.0, step_size=1, gamma=0.5)(2) == 0.25
    with pytest.raises(D5Error, match="unknown learning-rate schedule 'exponential'.*constant, cosine, linear, "
                                      "multistep, one_cycle, step, warmup"):
        schedule_by_name("exponential", 0.1)
    assert set(SCHEDULES) == {"constant", "step", "multistep", "cosine", "linear", "warmup", "one_cycle"}


def test_a_refused_learning_rate_keeps_the_schedule_on_every_framework():
    import numpy as np

    import d5

    for name in d5.frameworks.available():
        framework = d5.frameworks.get(name)
        executor = framework.from_model(d5.models.mlp((4,), hidden=(3,), num_classes=2))
        optimizer = framework.MomentumOptimizer(executor, lr=StepSchedule(0.1, step_size=1, gamma=0.5))
        with pytest.raises(InvalidHyperparameterError, match="lr"):
            optimizer.lr = -1.0
        assert optimizer.lr_schedule is not None and optimizer.lr == 0.1, name
        optimizer.step({"input": np.ones((2, 4), np.float32), "label": np.array([0, 1])})
        optimizer.step({"input": np.ones((2, 4), np.float32), "label": np.array([0, 1])})
        assert optimizer.lr == pytest.approx(0.05), name
