"""Native optimizers of the PyTorch framework: ``torch.optim`` under the reference optimizers' names and
constructor signatures, updating the parameters where they live (no host round trip per step).

Everything but the torch calls is :class:`d5.training.native_optimizer.NativeOptimizer`'s: the arguments and their
checks, ``lr`` as a float or a schedule, the step, clipping's place in it and the state protocol. Here: which torch
class, d5's hyper-parameter names as torch's parameter-group keys (a change reaches the groups at once),
``torch.nn.utils`` clipping, and torch's state as NumPy arrays keyed by parameter name. torch's equations are the
reference's (d5.training.optimizers follows them), so the two agree step by step.

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

from d5.training import optimizers as d5_optimizers
from d5.training.native_optimizer import NativeOptimizer

#: d5 hyper-parameters that are not torch parameter-group keys (clipping happens before torch's step; Adam's
#: betas are one key).
_NOT_GROUP_KEYS = frozenset({"clip_value", "clip_norm", "beta1", "beta2"})


def _group(hyperparameters: Mapping[str, Any]) -> dict[str, Any]:
    """d5's hyper-parameters as torch parameter-group entries."""
    group = {("eps" if name == "epsilon" else name): value for name, value in hyperparameters.items()
             if name not in _NOT_GROUP_KEYS}
    if "beta1" in hyperparameters:
        group["betas"] = (hyperparameters["beta1"], hyperparameters["beta2"])
    return group


class _TorchOptimizer(NativeOptimizer):
    """The torch half of every native optimizer; a subclass names its ``reference`` and its ``torch_class``."""

    framework = "pytorch"
    torch_class: type[torch.optim.Optimizer]

    @property
    def torch_optimizer(self) -> torch.optim.Optimizer:
        """The ``torch.optim`` optimizer (its parameter groups follow the d5 hyper-parameters)."""
        return self.native

    def make_native(self, hyperparameters: Mapping[str, Any]) -> torch.optim.Optimizer:
        return self.torch_class(self.network.trainable()[1], **_group(hyperparameters))

    def push_hyperparameters(self, changed: Mapping[str, Any]) -> None:
        group = _group(self.hyperparameters())  # all of them: betas need both of beta1 and beta2
        for param_group in self.native.param_groups:
            param_group.update(group)
        if "initial_accumulator_value" in changed:  # Adagrad fills its sums when built; d5 when first updating
            for entry in self.native.state.values():
                if float(entry["step"]) == 0:
                    entry["sum"].fill_(changed["initial_accumulator_value"])

    def clip_gradients(self, clip_value: float | None, clip_norm: float | None) -> None:
        parameters = self.network.trainable()[1]
        if clip_value is not None:
            torch.nn.utils.clip_grad_value_(parameters, clip_value)
        if clip_norm is not None:
            torch.nn.utils.clip_grad_norm_(parameters, clip_norm)

    def apply_update(self) -> None:
        self.native.step()

    def native_state_dict(self) -> dict[str, Any]:
        """torch's state (tensors as NumPy copies, keyed by parameter name) and its parameter groups."""
        native = self.native.state_dict()
        return {"state": {self.param_names[index]: {key: value.detach().cpu().numpy().copy()
                                                    if isinstance(value, torch.Tensor) else value
                                                    for key, value in entry.items()}
                          for index, entry in native["state"].items()},
                "param_groups": [{key: value for key, value in group.items() if key != "params"}
                                 for group in native["param_groups"]]}

    def load_native_state_dict(self, state: Mapping[str, Any]) -> None:
        # torch's load_state_dict moves the tensors to the parameters' device and dtype.
        index = {name: position for position, name in enumerate(self.param_names)}
        self.native.load_state_dict({
            "state": {index[name]: {key: torch.from_numpy(np.array(value, copy=True))
                                    if isinstance(value, np.ndarray) else value for key, value in entry.items()}
                      for name, entry in state["state"].items()},
            "param_groups": [dict(group, params=list(range(len(self.param_names))))
                             for group in state["param_groups"]]})


class GradientDescent(_TorchOptimizer):
    """``torch.optim.SGD`` without momentum."""

    reference, torch_class = d5_optimizers.GradientDescent, torch.optim.SGD


class MomentumOptimizer(_TorchOptimizer):
    """``torch.optim.SGD`` with (Nesterov) momentum and dampening."""

    reference, torch_class = d5_optimizers.MomentumOptimizer, torch.optim.SGD


class AdamOptimizer(_TorchOptimizer):
    """``torch.optim.Adam`` (L2 weight decay, optional AMSGrad)."""

    reference, torch_class = d5_optimizers.AdamOptimizer, torch.optim.Adam


class AdamWOptimizer(AdamOptimizer):
    """``torch.optim.AdamW`` (decoupled weight decay)."""

    reference, torch_class = d5_optimizers.AdamWOptimizer, torch.optim.AdamW


class AdaGradOptimizer(_TorchOptimizer):
    """``torch.optim.Adagrad`` (``lr_decay``, ``initial_accumulator_value``)."""

    reference, torch_class = d5_optimizers.AdaGradOptimizer, torch.optim.Adagrad


class RMSPropOptimizer(_TorchOptimizer):
    """``torch.optim.RMSprop`` (``momentum``, ``centered``)."""

    reference, torch_class = d5_optimizers.RMSPropOptimizer, torch.optim.RMSprop


__all__ = ["AdaGradOptimizer", "AdamOptimizer", "AdamWOptimizer", "GradientDescent", "MomentumOptimizer",
           "RMSPropOptimizer"]
