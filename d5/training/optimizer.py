"""L2: the optimizer interfaces every d5 optimizer implements.

An :class:`Optimizer` owns one training step: it runs the executor's forward and backward pass and
updates the network's parameters. Most optimizers are :class:`ThreeStepOptimizer` s, which split the
step into three hooks so that distributed schemes (L3) can reuse them around their own communication,
exactly as the seeds' ``ConsistentNeighbors`` does::

    optimizer.new_input()                      # once per step (e.g. Adam's step counter)
    optimizer.prepare_param(name)              # once per parameter, before the backward pass
    optimizer.prepare_gradients(grads, params)     # once per step, only if optimizer.uses_all_gradients
    new = optimizer.update_rule(grad, old, name)   # once per parameter, after it

``prepare_gradients`` gives rules that need a view over all parameters at once (clipping by the global norm,
AcceleGrad's step size) every gradient of the step, by name, before the first ``update_rule``; a scheme that
changes the gradients (averaging them over ranks) passes the changed ones.

An optimizer that is nothing but an update rule derives from :class:`UpdateRuleOptimizer`:

>>> import numpy as np
>>> class HalfStep(UpdateRuleOptimizer):
...     def update_rule(self, grad, old_param, param_name):
...         return old_param - 0.5 * self.lr * grad
>>> rule = HalfStep(None)   # executor=None: a detached update rule, handy for trying it out
>>> rule.lr = 1.0
>>> rule.update_rule(np.array([2.0]), np.array([1.0]), 'w')
array([0.])
"""
from __future__ import annotations

import abc
import math
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

import numpy as np

from d5.errors import CheckpointError, D5Error, DivergenceError, InvalidHyperparameterError
from d5.training.dataset import check_batch

if TYPE_CHECKING:  # only for annotations: trainer imports nothing from here at run time either
    from d5.training.events import TrainerEvent
    from d5.training.trainer import TrainingStats


def check_hyperparameter(name: str, value: float, low: float = 0.0, high: float = math.inf,
                         high_inclusive: bool = True) -> float:
    """Return ``value`` as a float, or raise :class:`InvalidHyperparameterError` if outside [low, high]
    (infinity and NaN are always outside).

    >>> check_hyperparameter('momentum', 0.9, high=1.0)
    0.9
    """
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise InvalidHyperparameterError(f"{name} must be a number, got {value!r}; pass e.g. {name}=0.1") from None
    if math.isinf(high):
        high_inclusive = False  # no hyper-parameter may be infinite
    above = number > high if high_inclusive else number >= high
    if not number >= low or above:  # `not >=` also rejects NaN
        upper = f"{high}]" if high_inclusive else f"{high})"
        raise InvalidHyperparameterError(
            f"{name}={value!r} is out of range; it must lie in [{low}, {upper}")
    return number


def is_schedule(lr: Any) -> bool:
    """True when ``lr`` is a learning-rate schedule (a callable ``step -> lr``) rather than a number.

    >>> is_schedule(0.1), is_schedule(lambda step: 0.1 * 0.5 ** step)
    (False, True)
    """
    return callable(lr) and not isinstance(lr, (int, float, np.number))


def learning_rate_at(schedule: Callable[[int], float], step: int) -> float:
    """``schedule(step)`` for the 0-based optimizer step ``step``, checked to be a finite rate >= 0.

    >>> learning_rate_at(lambda step: 0.1 / (step + 1), 1)
    0.05
    """
    return check_hyperparameter(f"lr (the value of schedule {schedule!r} at step {step})", schedule(step))


def check_state(owner: Any, state: Any, kind: str) -> dict:
    """Refuse (:class:`d5.errors.CheckpointError`, a D5Error) a ``state`` that ``owner.state_dict()`` did not make:
    not a dict, or one of another ``kind`` (the class name saved under the key ``kind``). Returns ``state``.

    >>> check_state(object(), {'kind': 'object'}, 'kind')
    {'kind': 'object'}
    """
    name = type(owner).__name__
    if not isinstance(state, Mapping):
        raise CheckpointError(f"{name}.load_state_dict needs the dict that {name}.state_dict() returned, got "
                              f"{type(state).__name__}")
    if state.get(kind) != name:
        raise CheckpointError(f"{name}.load_state_dict: the state is of a {state.get(kind)!r}, not of a {name}; "
                              f"restore it into the {kind} it was saved from")
    return dict(state)


class Optimizer(abc.ABC):
    """Base class of every optimizer: ``step(inputs)`` trains on one batch and returns the outputs.

    ``executor`` is a :class:`d5.GraphExecutor`; ``loss`` names the network output that is minimized.
    With ``check_divergence=True`` (the default) a step whose loss is NaN or infinite raises
    :class:`d5.errors.DivergenceError` naming the step and the loss, *before* any parameter is
    updated, so the network keeps its last finite state. ``steps`` counts the steps taken so far.
    Learning-rate schedules change the attribute ``lr``.

    >>> class Passive(Optimizer):      # an optimizer that only evaluates (for illustration)
    ...     def step(self, inputs):
    ...         return self.finish_step(self.executor.inference(inputs))
    """

    lr: float

    def __init__(self, executor: Any, loss: str = "loss", check_divergence: bool = True) -> None:
        if not isinstance(loss, str) or not loss:
            raise D5Error(f"loss must be the name of a network output (a non-empty str), got {loss!r}")
        self.executor = executor
        # executor=None gives a detached optimizer whose update rule can be used on its own (inside a
        # distributed optimizer, or to test the rule); it cannot step().
        self.network = None if executor is None else getattr(executor, "network", None)
        if executor is not None and self.network is None:
            raise D5Error(f"{type(self).__name__} needs a d5.GraphExecutor (with a .network), got "
                          f"{type(executor).__name__}; build one with d5.frameworks.<fw>.from_model(network)")
        self.loss = loss
        self.check_divergence = bool(check_divergence)
        self.steps = 0

    @abc.abstractmethod
    def step(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Train on one batch of named tensors; return the network's outputs for it."""

    def finish_step(self, outputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Count the step and check the loss in ``outputs``; call it once per step, before updating.

        Raises :class:`DivergenceError` (with attributes ``step`` and ``loss``) on a NaN/inf loss.
        A loss the executor did not return cannot be checked and is let through.
        """
        self.steps += 1
        if self.check_divergence:
            loss_value = outputs.get(self.loss)
            if loss_value is not None:
                # float() of a 0-d/size-1 array is cheap; np.isfinite covers per-sample loss vectors too
                finite = math.isfinite(float(loss_value)) if getattr(loss_value, "size", None) == 1 \
                    else bool(np.isfinite(loss_value).all())
                if not finite:
                    self._raise_divergence(loss_value)
        return outputs

    def _raise_divergence(self, loss_value: Any) -> None:
        shown = float(loss_value) if np.size(loss_value) == 1 else np.asarray(loss_value)
        err = DivergenceError(
            f"training diverged: loss '{self.loss}' is {shown} at step {self.steps} of "
            f"{type(self).__name__} (parameters were not updated by this step). Lower the learning rate "
            f"(lr={getattr(self, 'lr', '?')}), check the inputs for NaN/inf, or pass check_divergence=False "
            f"to keep going.")
        err.step = self.steps
        err.loss = shown
        raise err

    def train(self, sampler: Any, epochs: int = 1, events: Iterable[TrainerEvent] | None = None,
              validation_sampler: Any = None, progress: bool = True) -> TrainingStats:
        """Train for ``epochs`` epochs over ``sampler`` (convenience for :class:`d5.training.trainer.Trainer`).

        >>> # stats = d5.MomentumOptimizer(executor, lr=0.1).train(sampler, epochs=2)
        """
        from d5.training.trainer import Trainer  # local: trainer is the heavier module; keep this one light

        trainer = Trainer(sampler, validation_sampler, self.executor, self, events=events, progress=progress)
        return trainer.run(epochs)


class ThreeStepOptimizer(Optimizer):
    """An optimizer defined by ``new_input``, ``prepare_param`` and ``update_rule`` (see module docs).

    ``step`` is the seeds' loop: ``new_input()``; ``prepare_param`` per parameter; the forward and
    backward pass; then, per (parameter, gradient), fetch both, apply ``update_rule`` and feed the new
    value back. Per-parameter state belongs in dicts keyed by parameter name.

    >>> class PlainSGD(ThreeStepOptimizer):
    ...     def update_rule(self, grad, old_param, param_name):
    ...         return old_param - self.lr * grad
    """

    def __init__(self, executor: Any, loss: str = "loss", check_divergence: bool = True) -> None:
        super().__init__(executor, loss, check_divergence)
        # Cached after the first step: the parameter list and gradient pairs do not change while
        # training, and asking the network each step costs a graph walk. Call
        # ``invalidate_cache()`` after editing the network.
        self._params: list[str] | None = None
        self._gradients: list[tuple[str, str]] | None = None
        # Skip the per-parameter prepare_param loop entirely when the subclass does not use it.
        self._has_prepare = type(self).prepare_param is not ThreeStepOptimizer.prepare_param

    @property
    def uses_all_gradients(self) -> bool:
        """True when :meth:`prepare_gradients` must see every gradient of a step before its first ``update_rule``
        (checked once per step: a hyper-parameter such as ``clip_norm`` may switch it on or off)."""
        return False

    def invalidate_cache(self) -> None:
        """Forget the cached parameter and gradient names (call after editing the network's graph)."""
        self._params = None
        self._gradients = None

    def new_input(self) -> None:
        """Called once at the start of each step (before any parameter is touched)."""

    def prepare_param(self, param_name: str) -> None:
        """Called once per parameter before the forward/backward pass (e.g. look-ahead momentum)."""

    def prepare_gradients(self, gradients: Mapping[str, np.ndarray], params: Mapping[str, np.ndarray]) -> None:
        """Called once per step with every gradient and parameter value (by parameter name) after the backward
        pass and before the first ``update_rule`` -- only when :attr:`uses_all_gradients` is true. Must not
        modify the arrays."""

    @abc.abstractmethod
    def update_rule(self, grad: np.ndarray, old_param: np.ndarray, param_name: str) -> np.ndarray:
        """Return the new value of ``param_name`` given its gradient and current value.

        Must not modify ``grad`` or ``old_param`` in place: they may be the executor's live buffers.
        """

    def step(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        network = self.network
        if network is None:
            raise D5Error(f"{type(self).__name__} was created without an executor, so it can only apply "
                          f"update_rule(); pass the GraphExecutor to train with step()")
        check_batch(inputs, f"{type(self).__name__}.step")  # before new_input(): a refused step changes no state
        self.new_input()
        if self._has_prepare:
            if self._params is None:
                self._params = list(network.get_params())
            for param_name in self._params:
                self.prepare_param(param_name)
        outputs = self.executor.inference_and_backprop(inputs, self.loss)
        self.finish_step(outputs)
        if self._gradients is None:
            self._gradients = list(network.gradient(self.loss))
        if self.uses_all_gradients:
            # Every gradient before the first update (fetched at once, before any parameter changes).
            values = network.fetch_tensors([name for pair in self._gradients for name in pair])
            params = {name: values[2 * i] for i, (name, _) in enumerate(self._gradients)}
            grads = {name: values[2 * i + 1] for i, (name, _) in enumerate(self._gradients)}
            self.prepare_gradients(grads, params)
            for param_name, _ in self._gradients:
                network.feed_tensor(param_name, self.update_rule(grads[param_name], params[param_name], param_name),
                                    is_param=True)
            return outputs
        for param_name, grad_name in self._gradients:
            param, grad = network.fetch_tensors([param_name, grad_name])
            network.feed_tensor(param_name, self.update_rule(grad, param, param_name), is_param=True)
        return outputs


class UpdateRuleOptimizer(ThreeStepOptimizer):
    """An optimizer defined only by its ``update_rule`` (``new_input``/``prepare_param`` do nothing).

    >>> import numpy as np
    >>> class SignSGD(UpdateRuleOptimizer):
    ...     def __init__(self, executor, lr=0.01, loss='loss'):
    ...         super().__init__(executor, loss)
    ...         self.lr = lr
    ...     def update_rule(self, grad, old_param, param_name):
    ...         return old_param - self.lr * np.sign(grad)
    """


__all__ = ["Optimizer", "ThreeStepOptimizer", "UpdateRuleOptimizer", "InvalidHyperparameterError",
           "check_hyperparameter", "check_state", "is_schedule", "learning_rate_at"]
