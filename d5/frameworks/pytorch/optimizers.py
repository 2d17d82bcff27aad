"""Native optimizers of the PyTorch framework: ``torch.optim`` under the reference optimizers' names and
constructor signatures, updating the parameters where they live (no host round trip per step).

``lr`` and the other hyper-parameters are attributes a schedule may change between steps; setting one passes
it to the torch optimizer's parameter groups at once. ``lr`` may also be a schedule (``d5.training.schedules``),
followed step by step; ``clip_value=``/``clip_norm=`` clip the gradients with ``torch.nn.utils.clip_grad_value_``
/``clip_grad_norm_`` before each step. The update equations are torch's, which the reference optimizers
(d5.training.optimizers) follow exactly, so the two agree step by step. ``state_dict()`` is torch's own, its
tensors as NumPy arrays keyed by parameter name; ``load_state_dict`` restores it exactly.

>>> import numpy as np, d5
>>> from d5.frameworks import pytorch
>>> from d5.training.schedules import StepSchedule
>>> executor = pytorch.from_model(d5.models.mlp((4,), hidden=(3,), num_classes=2))
>>> sgd = MomentumOptimizer(executor, lr=StepSchedule(0.1, step_size=1, gamma=0.5), clip_norm=1.0)
>>> _ = sgd.step({"input": np.ones((2, 4), np.float32), "label": np.array([0, 1])})
>>> sgd.lr, sgd.torch_optimizer.param_groups[0]["lr"]
(0.1, 0.1)
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import torch

from d5.errors import CheckpointError, D5Error
from d5.training.dataset import check_batch
from d5.training.gradient_transforms import Momentum
from d5.training.optimizer import Optimizer, check_hyperparameter, check_state, is_schedule, learning_rate_at


def _to_numpy(value: Any) -> Any:
    """A torch optimizer state value with its tensors as NumPy arrays (copies)."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy().copy()
    return value


def _to_torch(value: Any) -> Any:
    """The inverse of :func:`_to_numpy` (torch's load_state_dict moves the tensors to the parameters' device)."""
    if isinstance(value, np.ndarray):
        return torch.from_numpy(np.array(value, copy=True))
    return value


class _TorchOptimizer(Optimizer):
    """Shared step: the executor's forward and backward pass, the divergence check, then ``torch.optim``'s step.

    Subclasses name the torch class and map their hyper-parameter attributes to its parameter-group keys."""

    torch_class: type[torch.optim.Optimizer]
    #: d5 attribute -> torch parameter-group key (schedules change the attributes).
    group_keys: Mapping[str, str] = {"lr": "lr", "weight_decay": "weight_decay"}
    #: Attributes whose change updates torch's parameter groups: the group keys' attributes and what they derive
    #: from (Adam's ``betas`` from ``beta1`` and ``beta2``).
    pushed_attributes: frozenset[str] = frozenset(group_keys)

    def __init__(self, executor: Any, loss: str, check_divergence: bool, lr: Any, weight_decay: float,
                 clip_norm: float | None = None, clip_value: float | None = None, **fixed: Any) -> None:
        super().__init__(executor, loss, check_divergence)
        parameters = getattr(self.network, "parameters", None)
        if parameters is None:
            raise D5Error(f"{type(self).__name__} is the pytorch framework's native optimizer; it needs a pytorch "
                          f"executor (d5.frameworks.pytorch.from_model), got {type(executor).__name__}. d5's "
                          "framework-neutral optimizers (d5.MomentumOptimizer, ...) work on any executor")
        self.lr = lr
        self.weight_decay = check_hyperparameter("weight_decay", weight_decay)
        self.clip_norm = None if clip_norm is None else check_hyperparameter("clip_norm", clip_norm)
        self.clip_value = None if clip_value is None else check_hyperparameter("clip_value", clip_value)
        #: The parameters' names, in the order torch's optimizer holds them (its state is keyed by position).
        self.param_names = list(self.network.get_params())
        self.torch_optimizer = self.torch_class(parameters(), **self._group(), **fixed)

    @property
    def lr(self) -> float:
        """The learning rate of the coming step (setting a float replaces a schedule; setting a schedule follows
        it from the next step on)."""
        return self._lr

    @lr.setter
    def lr(self, value: Any) -> None:
        if is_schedule(value):
            self.lr_schedule = value
            self._lr = learning_rate_at(value, self.steps)
        else:
            self.lr_schedule = None
            self._lr = check_hyperparameter("lr", value)

    def __setattr__(self, name: str, value: Any) -> None:
        # A hyper-parameter set between steps (a schedule's lr) goes into torch's parameter groups at once, so a
        # step itself copies nothing. (``lr`` is a property: its value arrives through ``_lr``.)
        super().__setattr__(name, value)
        if (name in self.pushed_attributes or name == "_lr") and "torch_optimizer" in self.__dict__:
            group = self._group()
            for param_group in self.torch_optimizer.param_groups:
                param_group.update(group)

    def _group(self) -> dict[str, Any]:
        return {key: getattr(self, attribute) for attribute, key in self.group_keys.items()}

    def step(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        check_batch(inputs, f"{type(self).__name__}.step")
        if self.lr_schedule is not None:
            self._lr = learning_rate_at(self.lr_schedule, self.steps)
        outputs = self.executor.inference_and_backprop(inputs, self.loss)
        self.finish_step(outputs)  # raises on a NaN loss before any parameter changes
        if self.clip_value is not None or self.clip_norm is not None:
            parameters = self.network.parameters()
            if self.clip_value is not None:
                torch.nn.utils.clip_grad_value_(parameters, self.clip_value)
            if self.clip_norm is not None:
                torch.nn.utils.clip_grad_norm_(parameters, self.clip_norm)
        self.torch_optimizer.step()
        return outputs

    def hyperparameters(self) -> dict[str, Any]:
        """The d5 hyper-parameter attributes by name (what a schedule or an event may set)."""
        names = [name for name in self.group_keys if name != "betas"]  # betas derive from beta1 and beta2
        names += sorted(self.pushed_attributes - set(self.group_keys)) + ["clip_norm", "clip_value"]
        return {name: getattr(self, name) for name in names}

    def state_dict(self) -> dict[str, Any]:
        """torch's optimizer state (tensors as NumPy arrays, keyed by parameter name), the d5 hyper-parameters
        and the step count."""
        native = self.torch_optimizer.state_dict()
        shapes = {name: list(param.shape) for name, param in zip(self.param_names, self.network.parameters())}
        return {"optimizer": type(self).__name__, "steps": self.steps, "lr_scheduled": self.lr_schedule is not None,
                "hyperparameters": self.hyperparameters(), "parameters": shapes,
                "state": {self.param_names[index]: {key: _to_numpy(value) for key, value in entry.items()}
                          for index, entry in native["state"].items()},
                "param_groups": [{key: value for key, value in group.items() if key != "params"}
                                 for group in native["param_groups"]]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned, exactly; refuses (CheckpointError) another optimizer's state,
        another network's, and a scheduled run's state into an optimizer without the schedule."""
        state = check_state(self, state, "optimizer")
        current = {name: list(param.shape) for name, param in zip(self.param_names, self.network.parameters())}
        saved = {name: [int(n) for n in shape] for name, shape in state["parameters"].items()}
        if saved != current:
            different = sorted(set(saved) ^ set(current)) or [n for n in saved if saved[n] != current[n]]
            raise CheckpointError(f"{type(self).__name__}.load_state_dict: the state is of other parameters (first "
                                  f"differences: {different[:3]}); restore it into an optimizer of the network it was "
                                  "saved from")
        if state["lr_scheduled"] and self.lr_schedule is None:
            raise CheckpointError(f"{type(self).__name__}.load_state_dict: the saved optimizer followed a learning-"
                                  "rate schedule but this one has a constant lr; construct it with the same schedule")
        schedule = self.lr_schedule if state["lr_scheduled"] else None
        for name, value in state["hyperparameters"].items():
            setattr(self, name, value)
        self.lr_schedule = schedule
        index = {name: position for position, name in enumerate(self.param_names)}
        groups = [dict(group, params=list(range(len(self.param_names)))) for group in state["param_groups"]]
        self.torch_optimizer.load_state_dict({
            "state": {index[name]: {key: _to_torch(value) for key, value in entry.items()}
                      for name, entry in state["state"].items()},
            "param_groups": groups})
        self.steps = int(state["steps"])

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self._group().items())})"


class GradientDescent(_TorchOptimizer):
    """``torch.optim.SGD`` without momentum (the reference GradientDescent's signature)."""

    torch_class = torch.optim.SGD

    def __init__(self, executor: Any, lr: Any = 0.01, loss: str = "loss", weight_decay: float = 0.0,
                 check_divergence: bool = True, *, clip_norm: float | None = None,
                 clip_value: float | None = None) -> None:
        super().__init__(executor, loss, check_divergence, lr, weight_decay, clip_norm, clip_value)


class MomentumOptimizer(_TorchOptimizer):
    """``torch.optim.SGD`` with (Nesterov) momentum (the reference MomentumOptimizer's signature)."""

    torch_class = torch.optim.SGD
    group_keys = {"lr": "lr", "weight_decay": "weight_decay", "momentum": "momentum", "dampening": "dampening",
                  "nesterov": "nesterov"}
    pushed_attributes = frozenset(group_keys)

    def __init__(self, executor: Any, lr: Any = 0.01, momentum: float = 0.9, nesterov: bool = False,
                 loss: str = "loss", weight_decay: float = 0.0, dampening: float = 0.0,
                 check_divergence: bool = True, *, clip_norm: float | None = None,
                 clip_value: float | None = None) -> None:
        Momentum(momentum, dampening, nesterov)  # the reference's checks (Nesterov needs momentum, no dampening)
        self.momentum = check_hyperparameter("momentum", momentum)
        self.dampening = check_hyperparameter("dampening", dampening, high=1.0)
        self.nesterov = bool(nesterov)
        super().__init__(executor, loss, check_divergence, lr, weight_decay, clip_norm, clip_value)


class AdamOptimizer(_TorchOptimizer):
    """``torch.optim.Adam`` (the reference AdamOptimizer's signature)."""

    torch_class = torch.optim.Adam
    group_keys = {"lr": "lr", "weight_decay": "weight_decay", "betas": "betas", "epsilon": "eps",
                  "amsgrad": "amsgrad"}
    pushed_attributes = frozenset(group_keys) | {"beta1", "beta2"}

    def __init__(self, executor: Any, lr: Any = 0.001, beta1: float = 0.9, beta2: float = 0.999,
                 epsilon: float = 1e-8, loss: str = "loss", weight_decay: float = 0.0,
                 check_divergence: bool = True, *, amsgrad: bool = False, clip_norm: float | None = None,
                 clip_value: float | None = None) -> None:
        self.beta1 = check_hyperparameter("beta1", beta1, high=1.0, high_inclusive=False)
        self.beta2 = check_hyperparameter("beta2", beta2, high=1.0, high_inclusive=False)
        self.epsilon = check_hyperparameter("epsilon", epsilon)
        self.amsgrad = bool(amsgrad)
        super().__init__(executor, loss, check_divergence, lr, weight_decay, clip_norm, clip_value)

    @property
    def betas(self) -> tuple[float, float]:
        return (self.beta1, self.beta2)


class AdamWOptimizer(AdamOptimizer):
    """``torch.optim.AdamW`` (decoupled weight decay; the reference AdamWOptimizer's signature)."""

    torch_class = torch.optim.AdamW

    def __init__(self, executor: Any, lr: Any = 0.001, beta1: float = 0.9, beta2: float = 0.999,
                 epsilon: float = 1e-8, loss: str = "loss", weight_decay: float = 0.01,
                 check_divergence: bool = True, *, amsgrad: bool = False, clip_norm: float | None = None,
                 clip_value: float | None = None) -> None:
        super().__init__(executor, lr, beta1, beta2, epsilon, loss, weight_decay, check_divergence, amsgrad=amsgrad,
                         clip_norm=clip_norm, clip_value=clip_value)


class AdaGradOptimizer(_TorchOptimizer):
    """``torch.optim.Adagrad`` (the reference AdaGradOptimizer's signature)."""

    torch_class = torch.optim.Adagrad
    group_keys = {"lr": "lr", "weight_decay": "weight_decay", "lr_decay": "lr_decay", "epsilon": "eps"}
    pushed_attributes = frozenset(group_keys)

    def __init__(self, executor: Any, lr: Any = 0.01, lr_decay: float = 0.0, epsilon: float = 1e-10,
                 initial_accumulator_value: float = 0.0, loss: str = "loss", weight_decay: float = 0.0,
                 check_divergence: bool = True, *, clip_norm: float | None = None,
                 clip_value: float | None = None) -> None:
        self.lr_decay = check_hyperparameter("lr_decay", lr_decay)
        self.epsilon = check_hyperparameter("epsilon", epsilon)
        super().__init__(executor, loss, check_divergence, lr, weight_decay, clip_norm, clip_value,
                         initial_accumulator_value=check_hyperparameter("initial_accumulator_value",
                                                                        initial_accumulator_value))


class RMSPropOptimizer(_TorchOptimizer):
    """``torch.optim.RMSprop`` (the reference RMSPropOptimizer's signature)."""

    torch_class = torch.optim.RMSprop
    group_keys = {"lr": "lr", "weight_decay": "weight_decay", "alpha": "alpha", "epsilon": "eps",
                  "momentum": "momentum", "centered": "centered"}
    pushed_attributes = frozenset(group_keys)

    def __init__(self, executor: Any, lr: Any = 0.01, alpha: float = 0.99, epsilon: float = 1e-8,
                 momentum: float = 0.0, centered: bool = False, loss: str = "loss", weight_decay: float = 0.0,
                 check_divergence: bool = True, *, clip_norm: float | None = None,
                 clip_value: float | None = None) -> None:
        self.alpha = check_hyperparameter("alpha", alpha, high=1.0)
        self.epsilon = check_hyperparameter("epsilon", epsilon)
        self.momentum = check_hyperparameter("momentum", momentum)
        self.centered = bool(centered)
        super().__init__(executor, loss, check_divergence, lr, weight_decay, clip_norm, clip_value)


__all__ = ["AdaGradOptimizer", "AdamOptimizer", "AdamWOptimizer", "GradientDescent", "MomentumOptimizer",
           "RMSPropOptimizer"]
