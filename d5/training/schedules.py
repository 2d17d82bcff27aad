"""L2: learning-rate schedules -- callables ``schedule(step) -> lr`` for the 0-based optimizer step ``step``.

Each one gives, value for value, the learning rates of its ``torch.optim.lr_scheduler`` counterpart stepped once
per optimizer step (``tests/training/test_schedules.py`` checks this); epoch-based schedules take
``steps_per_epoch`` and then count their sizes in epochs, like a torch scheduler stepped once per epoch.
They are pure functions of the step (closed forms), so a run resumed from a checkpoint at step ``k`` simply
continues with ``schedule(k)``.

Any d5 optimizer takes one as its ``lr`` (``d5.MomentumOptimizer(executor, lr=CosineSchedule(0.1, 1000))``)
and sets ``optimizer.lr = schedule(step)`` before each step; the same schedule drives a
``LearningRateSchedule(schedule, per='step')`` event on an optimizer built with a float ``lr``.

>>> warm_cosine = WarmupSchedule(CosineSchedule(0.1, period=8), warmup_steps=2)
>>> [round(warm_cosine(step), 4) for step in range(5)]
[0.0, 0.05, 0.1, 0.0962, 0.0854]
"""
from __future__ import annotations

import abc
import bisect
import math
from typing import Any, Callable, Sequence

from d5.errors import InvalidHyperparameterError


def _check(name: str, value: Any, low: float = 0.0, high: float = math.inf, low_inclusive: bool = True,
           high_inclusive: bool = True) -> float:
    """``value`` as a float, or InvalidHyperparameterError naming ``name`` and the range it must lie in."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise InvalidHyperparameterError(f"{name} must be a number, got {value!r}") from None
    too_low = not (number >= low if low_inclusive else number > low)  # `not` also rejects NaN
    high_inclusive = high_inclusive and not math.isinf(high)  # no rate or factor may be infinite
    too_high = number > high if high_inclusive else number >= high
    if too_low or too_high:
        interval = f"{'[' if low_inclusive else '('}{low}, {high}{']' if high_inclusive else ')'}"
        raise InvalidHyperparameterError(f"{name}={value!r} is out of range; it must lie in {interval}")
    return number


def _check_step(schedule: Any, step: Any) -> int:
    """``step`` as an int >= 0, or InvalidHyperparameterError naming the schedule."""
    if not isinstance(step, bool):
        try:
            if int(step) == step and step >= 0:
                return int(step)
        except (TypeError, ValueError):
            pass
    raise InvalidHyperparameterError(f"{type(schedule).__name__}: the step must be a whole number >= 0 (the 0-based "
                                     f"optimizer step), got {step!r}")


def _check_count(name: str, value: Any, minimum: int = 1) -> int:
    """``value`` as an int >= ``minimum`` (a whole number of steps or epochs), or InvalidHyperparameterError."""
    if isinstance(value, bool) or not isinstance(value, int) and not (isinstance(value, float) and value.is_integer()):
        raise InvalidHyperparameterError(f"{name} must be a whole number >= {minimum}, got {value!r}")
    if int(value) < minimum:
        raise InvalidHyperparameterError(f"{name}={value!r} is out of range; it must be a whole number >= {minimum}")
    return int(value)


class Schedule(abc.ABC):
    """Base class: ``schedule(step)`` is the learning rate at the 0-based optimizer step ``step``.

    Subclasses implement :meth:`at` for the schedule's own unit (the epoch when ``steps_per_epoch`` > 1).

    >>> class Halving(Schedule):
    ...     def at(self, index):
    ...         return 1.0 / 2 ** index
    >>> Halving()(3)
    0.125
    """

    steps_per_epoch: int = 1

    def __call__(self, step: int) -> float:
        return float(self.at(_check_step(self, step) // self.steps_per_epoch))

    @abc.abstractmethod
    def at(self, index: int) -> float:
        """The learning rate at ``index`` (the step, or the epoch of an epoch-based schedule)."""

    def __repr__(self) -> str:
        fields = ", ".join(f"{key}={value!r}" for key, value in vars(self).items() if not key.startswith("_"))
        return f"{type(self).__name__}({fields})"


class ConstantSchedule(Schedule):
    """The same learning rate at every step.

    >>> ConstantSchedule(0.1)(1000)
    0.1
    """

    def __init__(self, lr: float) -> None:
        self.lr = _check("lr", lr)

    def at(self, index: int) -> float:
        return self.lr


class StepSchedule(Schedule):
    """``lr * gamma ** (epoch // step_size)`` (``torch.optim.lr_scheduler.StepLR``).

    >>> [StepSchedule(1.0, step_size=2, gamma=0.5)(step) for step in range(5)]
    [1.0, 1.0, 0.5, 0.5, 0.25]
    >>> StepSchedule(1.0, step_size=30, steps_per_epoch=100)(3000)    # epoch 30
    0.1
    """

    def __init__(self, lr: float, step_size: int, gamma: float = 0.1, steps_per_epoch: int = 1) -> None:
        self.lr = _check("lr", lr)
        self.step_size = _check_count("step_size", step_size)
        self.gamma = _check("gamma", gamma)
        self.steps_per_epoch = _check_count("steps_per_epoch", steps_per_epoch)

    def at(self, index: int) -> float:
        return self.lr * self.gamma ** (index // self.step_size)


class MultiStepSchedule(Schedule):
    """``lr * gamma ** (number of milestones <= epoch)`` (``torch.optim.lr_scheduler.MultiStepLR``).

    >>> [MultiStepSchedule(1.0, milestones=[1, 3], gamma=0.1)(step) for step in range(4)]
    [1.0, 0.1, 0.1, 0.010000000000000002]
    """

    def __init__(self, lr: float, milestones: Sequence[int], gamma: float = 0.1, steps_per_epoch: int = 1) -> None:
        self.lr = _check("lr", lr)
        try:
            self.milestones = sorted(_check_count("milestone", m, minimum=0) for m in milestones)
        except TypeError:
            raise InvalidHyperparameterError(f"milestones must be a list of whole numbers >= 0 (epochs at which the "
                                             f"rate is multiplied by gamma), got {milestones!r}") from None
        self.gamma = _check("gamma", gamma)
        self.steps_per_epoch = _check_count("steps_per_epoch", steps_per_epoch)

    def at(self, index: int) -> float:
        return self.lr * self.gamma ** bisect.bisect_right(self.milestones, index)


class CosineSchedule(Schedule):
    """Cosine annealing from ``lr`` to ``min_lr`` over ``period`` epochs (``CosineAnnealingLR``; past the period
    the cosine goes on, as torch's does). With ``restarts=True`` it starts again at ``lr`` after each period, each
    period ``period_multiplier`` times longer than the last (SGDR, ``CosineAnnealingWarmRestarts``).

    >>> cosine = CosineSchedule(1.0, period=4)
    >>> [round(cosine(step), 4) for step in range(6)]
    [1.0, 0.8536, 0.5, 0.1464, 0.0, 0.1464]
    >>> [round(CosineSchedule(1.0, period=2, restarts=True)(step), 4) for step in range(5)]
    [1.0, 0.5, 1.0, 0.5, 1.0]
    """

    def __init__(self, lr: float, period: int, min_lr: float = 0.0, restarts: bool = False,
                 period_multiplier: int = 1, steps_per_epoch: int = 1) -> None:
        self.lr = _check("lr", lr)
        self.period = _check_count("period", period)
        self.min_lr = _check("min_lr", min_lr)
        self.restarts = bool(restarts)
        self.period_multiplier = _check_count("period_multiplier", period_multiplier)
        if self.period_multiplier != 1 and not self.restarts:
            raise InvalidHyperparameterError(f"period_multiplier={period_multiplier!r} only applies with "
                                             "restarts=True; pass restarts=True or leave period_multiplier at 1")
        self.steps_per_epoch = _check_count("steps_per_epoch", steps_per_epoch)

    def at(self, index: int) -> float:
        position, period = index, self.period
        if self.restarts:
            while position >= period:  # whole numbers: exact, like torch's step-by-step T_cur bookkeeping
                position -= period
                period *= self.period_multiplier
        return self.min_lr + (self.lr - self.min_lr) * (1 + math.cos(math.pi * position / period)) / 2


class LinearSchedule(Schedule):
    """``lr`` times a factor going linearly from ``start_factor`` to ``end_factor`` over ``total_steps`` epochs,
    then staying at ``end_factor`` (``torch.optim.lr_scheduler.LinearLR``): a warm-up or a linear decay.

    >>> [LinearSchedule(1.0, start_factor=0.25, total_steps=3)(step) for step in range(5)]
    [0.25, 0.5, 0.75, 1.0, 1.0]
    """

    def __init__(self, lr: float, start_factor: float = 1.0 / 3, end_factor: float = 1.0, total_steps: int = 5,
                 steps_per_epoch: int = 1) -> None:
        self.lr = _check("lr", lr)
        self.start_factor = _check("start_factor", start_factor)
        self.end_factor = _check("end_factor", end_factor)
        self.total_steps = _check_count("total_steps", total_steps)
        self.steps_per_epoch = _check_count("steps_per_epoch", steps_per_epoch)

    def at(self, index: int) -> float:
        progress = min(self.total_steps, index) / self.total_steps
        return self.lr * (self.start_factor + (self.end_factor - self.start_factor) * progress)


class WarmupSchedule(Schedule):
    """A linear warm-up, then another schedule: for ``step < warmup_steps`` the rate rises linearly from
    ``start_factor * then(0)`` towards ``then(0)``; from there on it is ``then(step - warmup_steps)``. This is
    torch's ``SequentialLR([LinearLR(start_factor, 1.0, warmup_steps), then], milestones=[warmup_steps])``.
    ``then`` is a schedule or a constant learning rate.

    >>> [round(WarmupSchedule(0.4, warmup_steps=4)(step), 6) for step in range(6)]
    [0.0, 0.1, 0.2, 0.3, 0.4, 0.4]
    """

    def __init__(self, then: float | Callable[[int], float], warmup_steps: int, start_factor: float = 0.0) -> None:
        self.then = then if callable(then) else ConstantSchedule(then)
        self.warmup_steps = _check_count("warmup_steps", warmup_steps)
        self.start_factor = _check("start_factor", start_factor, high=1.0)

    def __call__(self, step: int) -> float:
        # The warm-up counts optimizer steps; `then` keeps its own unit (epochs, if it has steps_per_epoch).
        step = _check_step(self, step)
        if step < self.warmup_steps:
            target = float(self.then(0))
            return target * (self.start_factor + (1.0 - self.start_factor) * step / self.warmup_steps)
        return float(self.then(step - self.warmup_steps))

    def at(self, index: int) -> float:
        return self(index)


class OneCycleSchedule(Schedule):
    """The one-cycle policy (Smith & Topin 2017) as ``torch.optim.lr_scheduler.OneCycleLR``: from
    ``max_lr / div_factor`` up to ``max_lr`` over the first ``pct_start`` of ``total_steps``, then down to
    ``max_lr / div_factor / final_div_factor``; ``anneal='cos'`` (default) or ``'linear'``; ``three_phase=True``
    comes back to the initial rate before the final decay. ``total_steps`` may instead be given as
    ``epochs * steps_per_epoch``. (Momentum cycling is not part of it: keep momentum fixed, or schedule it with
    an event.)

    >>> one_cycle = OneCycleSchedule(1.0, total_steps=10)
    >>> [round(one_cycle(step), 3) for step in (0, 2, 5, 9)]
    [0.04, 1.0, 0.611, 0.0]
    """

    def __init__(self, max_lr: float, total_steps: int | None = None, epochs: int | None = None,
                 steps_per_epoch: int | None = None, pct_start: float = 0.3, anneal: str = "cos",
                 div_factor: float = 25.0, final_div_factor: float = 1e4, three_phase: bool = False) -> None:
        self.max_lr = _check("max_lr", max_lr)
        if total_steps is None:
            if epochs is None or steps_per_epoch is None:
                raise InvalidHyperparameterError("OneCycleSchedule needs total_steps, or epochs and steps_per_epoch")
            total_steps = _check_count("epochs", epochs) * _check_count("steps_per_epoch", steps_per_epoch)
        self.total_steps = _check_count("total_steps", total_steps)
        self.pct_start = _check("pct_start", pct_start, high=1.0)
        if anneal not in ("cos", "linear"):
            raise InvalidHyperparameterError(f"anneal={anneal!r}: it must be 'cos' or 'linear'")
        self.anneal = anneal
        self.div_factor = _check("div_factor", div_factor, low_inclusive=False)
        self.final_div_factor = _check("final_div_factor", final_div_factor, low_inclusive=False)
        self.three_phase = bool(three_phase)
        initial = self.max_lr / self.div_factor
        minimum = initial / self.final_div_factor
        rise_end = float(self.pct_start * self.total_steps) - 1
        if self.three_phase:
            self._phases = [(rise_end, initial, self.max_lr), (float(2 * self.pct_start * self.total_steps) - 2,
                                                              self.max_lr, initial),
                            (self.total_steps - 1, initial, minimum)]
        else:
            self._phases = [(rise_end, initial, self.max_lr), (self.total_steps - 1, self.max_lr, minimum)]

    def at(self, index: int) -> float:
        if index > self.total_steps:  # torch refuses too; past the cycle there is no rate to give
            raise InvalidHyperparameterError(f"OneCycleSchedule: step {index} is past total_steps="
                                             f"{self.total_steps}; make the cycle as long as the training")
        start_step = 0.0
        for number, (end_step, start_lr, end_lr) in enumerate(self._phases):
            if index <= end_step or number == len(self._phases) - 1:
                pct = (index - start_step) / (end_step - start_step)
                if self.anneal == "cos":
                    return end_lr + (start_lr - end_lr) / 2.0 * (math.cos(math.pi * pct) + 1)
                return (end_lr - start_lr) * pct + start_lr
            start_step = end_step
        raise AssertionError("unreachable: the last phase always matches")


#: Schedules by name, for configuration files and recipes (:func:`schedule_by_name`).
SCHEDULES: dict[str, type[Schedule]] = {
    "constant": ConstantSchedule, "step": StepSchedule, "multistep": MultiStepSchedule, "cosine": CosineSchedule,
    "linear": LinearSchedule, "warmup": WarmupSchedule, "one_cycle": OneCycleSchedule,
}


def schedule_by_name(name: str, *args: Any, **kwargs: Any) -> Schedule:
    """Build the schedule called ``name`` (see :data:`SCHEDULES`) with these arguments.

    >>> schedule_by_name("step", 0.1, step_size=10)(10)
    0.010000000000000002
    """
    key = str(name).lower().replace("-", "_")
    if key.endswith("_schedule"):
        key = key[:-len("_schedule")]
    if key not in SCHEDULES:
        raise InvalidHyperparameterError(f"unknown learning-rate schedule {name!r}; the valid ones are "
                                         f"{', '.join(sorted(SCHEDULES))}")
    return SCHEDULES[key](*args, **kwargs)


__all__ = ["ConstantSchedule", "CosineSchedule", "LinearSchedule", "MultiStepSchedule", "OneCycleSchedule",
           "SCHEDULES", "Schedule", "StepSchedule", "WarmupSchedule", "schedule_by_name"]
