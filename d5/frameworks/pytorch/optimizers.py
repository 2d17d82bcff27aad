"""Native optimizers of the PyTorch framework: ``torch.optim`` under the reference optimizers' names and
constructor signatures, updating the parameters where they live (no host round trip per step).

``lr`` and the other hyper-parameters are attributes a schedule may change between steps; each step passes
them to the torch optimizer's parameter group. The update equations are torch's, which the reference
optimizers (d5.training.optimizers) follow exactly, so the two agree step by step.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import torch

from d5.errors import D5Error
from d5.training.dataset import check_batch
from d5.training.optimizer import Optimizer, check_hyperparameter


class _TorchOptimizer(Optimizer):
    """Shared step: the executor's forward and backward pass, the divergence check, then ``torch.optim``'s step.

    Subclasses name the torch class and map their hyper-parameter attributes to its parameter-group keys."""

    torch_class: type[torch.optim.Optimizer]
    #: d5 attribute -> torch parameter-group key (schedules change the attributes).
    group_keys: Mapping[str, str] = {"lr": "lr", "weight_decay": "weight_decay"}
    #: Attributes whose change updates torch's parameter groups: the group keys' attributes and what they derive
    #: from (Adam's ``betas`` from ``beta1`` and ``beta2``).
    pushed_attributes: frozenset[str] = frozenset(group_keys)

    def __init__(self, executor: Any, loss: str, check_divergence: bool, lr: float, weight_decay: float,
                 **fixed: Any) -> None:
        super().__init__(executor, loss, check_divergence)
        parameters = getattr(self.network, "parameters", None)
        if parameters is None:
            raise D5Error(f"{type(self).__name__} is the pytorch framework's native optimizer; it needs a pytorch "
                          f"executor (d5.frameworks.pytorch.from_model), got {type(executor).__name__}. d5's "
                          "framework-neutral optimizers (d5.MomentumOptimizer, ...) work on any executor")
        self.lr = check_hyperparameter("lr", lr)
        self.weight_decay = check_hyperparameter("weight_decay", weight_decay)
        self.torch_optimizer = self.torch_class(parameters(), **self._group(), **fixed)

    def __setattr__(self, name: str, value: Any) -> None:
        # A hyper-parameter set between steps (a schedule's lr) goes into torch's parameter groups at once, so a
        # step itself copies nothing.
        super().__setattr__(name, value)
        if name in self.pushed_attributes and "torch_optimizer" in self.__dict__:
            group = self._group()
            for param_group in self.torch_optimizer.param_groups:
                param_group.update(group)

    def _group(self) -> dict[str, Any]:
        return {key: getattr(self, attribute) for attribute, key in self.group_keys.items()}

    def step(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        check_batch(inputs, f"{type(self).__name__}.step")
        outputs = self.executor.inference_and_backprop(inputs, self.loss)
        self.finish_step(outputs)  # raises on a NaN loss before any parameter changes
        self.torch_optimizer.step()
        return outputs

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self._group().items())})"


class GradientDescent(_TorchOptimizer):
    """``torch.optim.SGD`` without momentum (the reference GradientDescent's signature)."""

    torch_class = torch.optim.SGD

    def __init__(self, executor: Any, lr: float = 0.01, loss: str = "loss", weight_decay: float = 0.0,
                 check_divergence: bool = True) -> None:
        super().__init__(executor, loss, check_divergence, lr, weight_decay)


class MomentumOptimizer(_TorchOptimizer):
    """``torch.optim.SGD`` with (Nesterov) momentum (the reference MomentumOptimizer's signature)."""

    torch_class = torch.optim.SGD
    group_keys = {"lr": "lr", "weight_decay": "weight_decay", "momentum": "momentum", "dampening": "dampening",
                  "nesterov": "nesterov"}
    pushed_attributes = frozenset(group_keys)

    def __init__(self, executor: Any, lr: float = 0.01, momentum: float = 0.9, nesterov: bool = False,
                 loss: str = "loss", weight_decay: float = 0.0, dampening: float = 0.0,
                 check_divergence: bool = True) -> None:
        self.momentum = check_hyperparameter("momentum", momentum)
        self.dampening = check_hyperparameter("dampening", dampening, high=1.0)
        self.nesterov = bool(nesterov)
        super().__init__(executor, loss, check_divergence, lr, weight_decay)


class AdamOptimizer(_TorchOptimizer):
    """``torch.optim.Adam`` (the reference AdamOptimizer's signature)."""

    torch_class = torch.optim.Adam
    group_keys = {"lr": "lr", "weight_decay": "weight_decay", "betas": "betas", "epsilon": "eps"}
    pushed_attributes = frozenset(group_keys) | {"beta1", "beta2"}

    def __init__(self, executor: Any, lr: float = 0.001, beta1: float = 0.9, beta2: float = 0.999,
                 epsilon: float = 1e-8, loss: str = "loss", weight_decay: float = 0.0,
                 check_divergence: bool = True) -> None:
        self.beta1 = check_hyperparameter("beta1", beta1, high=1.0, high_inclusive=False)
        self.beta2 = check_hyperparameter("beta2", beta2, high=1.0, high_inclusive=False)
        self.epsilon = check_hyperparameter("epsilon", epsilon)
        super().__init__(executor, loss, check_divergence, lr, weight_decay)

    @property
    def betas(self) -> tuple[float, float]:
        return (self.beta1, self.beta2)


class AdamWOptimizer(AdamOptimizer):
    """``torch.optim.AdamW`` (decoupled weight decay; the reference AdamWOptimizer's signature)."""

    torch_class = torch.optim.AdamW

    def __init__(self, executor: Any, lr: float = 0.001, beta1: float = 0.9, beta2: float = 0.999,
                 epsilon: float = 1e-8, loss: str = "loss", weight_decay: float = 0.01,
                 check_divergence: bool = True) -> None:
        super().__init__(executor, lr, beta1, beta2, epsilon, loss, weight_decay, check_divergence)


class AdaGradOptimizer(_TorchOptimizer):
    """``torch.optim.Adagrad`` (the reference AdaGradOptimizer's signature)."""

    torch_class = torch.optim.Adagrad
    group_keys = {"lr": "lr", "weight_decay": "weight_decay", "lr_decay": "lr_decay", "epsilon": "eps"}
    pushed_attributes = frozenset(group_keys)

    def __init__(self, executor: Any, lr: float = 0.01, lr_decay: float = 0.0, epsilon: float = 1e-10,
                 initial_accumulator_value: float = 0.0, loss: str = "loss", weight_decay: float = 0.0,
                 check_divergence: bool = True) -> None:
        self.lr_decay = check_hyperparameter("lr_decay", lr_decay)
        self.epsilon = check_hyperparameter("epsilon", epsilon)
        super().__init__(executor, loss, check_divergence, lr, weight_decay,
                         initial_accumulator_value=check_hyperparameter("initial_accumulator_value",
                                                                        initial_accumulator_value))


class RMSPropOptimizer(_TorchOptimizer):
    """``torch.optim.RMSprop`` (the reference RMSPropOptimizer's signature)."""

    torch_class = torch.optim.RMSprop
    group_keys = {"lr": "lr", "weight_decay": "weight_decay", "alpha": "alpha", "epsilon": "eps",
                  "momentum": "momentum", "centered": "centered"}
    pushed_attributes = frozenset(group_keys)

    def __init__(self, executor: Any, lr: float = 0.01, alpha: float = 0.99, epsilon: float = 1e-8,
                 momentum: float = 0.0, centered: bool = False, loss: str = "loss", weight_decay: float = 0.0,
                 check_divergence: bool = True) -> None:
        self.alpha = check_hyperparameter("alpha", alpha, high=1.0)
        self.epsilon = check_hyperparameter("epsilon", epsilon)
        self.momentum = check_hyperparameter("momentum", momentum)
        self.centered = bool(centered)
        super().__init__(executor, loss, check_divergence, lr, weight_decay)


__all__ = ["AdaGradOptimizer", "AdamOptimizer", "AdamWOptimizer", "GradientDescent", "MomentumOptimizer",
           "RMSPropOptimizer"]
