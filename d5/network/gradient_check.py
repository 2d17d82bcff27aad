"""Whole-network gradient check: ``inference_and_backprop`` gradients against float64 finite differences.

The network is copied and cast to float64 (floating parameters and inputs), then for a few random
directions ``u`` (one unit-length array per trainable parameter) the analytic directional derivative
``sum_p <dL/dp, u_p>`` is compared with the central difference ``(L(p + eps u) - L(p - eps u)) / (2 eps)``,
along all parameters together and along each parameter alone (so a wrong gradient is named). ``L`` is the
sum of tensor ``y``, evaluated by the same training-mode pass that computes the gradients (batch-norm
uses batch statistics), with the non-trainable parameters (running statistics) restored before every pass.
The verdict reuses :class:`d5.ops.validation.GradientCheckResult`; its per-input entries are the
parameters, in ``network.get_params()`` order, and ``failed_params`` names the wrong ones.

Like every neutral level, it imports no framework: the caller passes the framework's ``from_model``.

>>> import numpy as np, d5
>>> from d5.frameworks import reference
>>> from d5.network.gradient_check import check_network_gradient
>>> net = d5.models.mlp((4,), hidden=(3,), num_classes=2)
>>> rng = np.random.default_rng(0)
>>> batch = {"input": rng.normal(size=(5, 4)), "label": np.array([0, 1, 1, 0, 1])}
>>> result = check_network_gradient(net, batch, from_model=reference.from_model)
>>> result.passed, result.failed_params
(True, [])
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping

import numpy as np

from d5.errors import D5Error
from d5.network.graph import Network, gradient_name
from d5.ops.validation import ErrorNorms, GradientCheckResult, InputGradientCheck


@dataclasses.dataclass
class NetworkGradientCheckResult(GradientCheckResult):
    """A :class:`GradientCheckResult` whose inputs are the network's trainable parameters (``param_names``)."""

    param_names: list[str] = dataclasses.field(default_factory=list)

    @property
    def failed_params(self) -> list[str]:
        """Names of the parameters whose gradient check failed."""
        return [self.param_names[i] for i in self.failed_inputs]

    def summary(self) -> str:
        text = super().summary()
        if self.failed_params:
            text += f"\n  wrong gradient for parameter(s) {self.failed_params}"
        return text + "\n  inputs are parameters: " + ", ".join(f"{i}={n}" for i, n in enumerate(self.param_names))

    __str__ = summary


def check_network_gradient(network: Network, inputs: Mapping[str, Any], y: str = "loss", *, eps: float = 1e-6,
                           seed: int = 0, rtol: float = 1e-4, atol: float = 1e-6, projections: int = 2,
                           from_model: Callable[[Network], Any]) -> NetworkGradientCheckResult:
    """Check the gradients of ``sum(y)`` with respect to every trainable parameter of ``network`` (see the
    module docstring). ``from_model`` builds the executor: a framework's ``from_model``. Randomized
    operators must be deterministic here (Dropout ratio 0), and inputs should keep ReLU/max-pool arguments
    away from their kinks by more than ``eps``. ``network`` itself is not modified.
    """
    if not eps > 0 or projections < 1:
        raise D5Error(f"check_network_gradient: need eps > 0 and projections >= 1, got eps={eps}, projections={projections}")
    if not callable(from_model):
        raise D5Error(f"check_network_gradient: from_model must build an executor (e.g. "
                      f"d5.frameworks.reference.from_model), got {type(from_model).__name__}")
    net64 = as_float64(network)
    names = net64.get_params()
    if not names:
        raise D5Error(f"check_network_gradient: network {network.name!r} has no trainable parameter to check")
    feeds = {k: (np.asarray(v, np.float64) if np.issubdtype(np.asarray(v).dtype, np.floating) else np.asarray(v))
             for k, v in inputs.items()}
    executor = from_model(net64)
    live = executor.network
    origin = {name: value.copy() for name, value in live.params.items()}

    def loss_and_grads(offsets: Mapping[str, np.ndarray] | None) -> tuple[float, list[np.ndarray]]:
        for name, value in origin.items():
            live.feed_tensor(name, value + offsets[name] if offsets and name in offsets else value)
        executor.inference_and_backprop(feeds, y)
        loss = float(np.sum(np.asarray(live.fetch_tensor(y), np.float64)))
        return loss, [np.array(g, np.float64) for g in live.fetch_tensors([gradient_name(n) for n in names])]

    def difference(directions: Mapping[str, np.ndarray]) -> float:
        plus = loss_and_grads({n: eps * d for n, d in directions.items()})[0]
        minus = loss_and_grads({n: -eps * d for n, d in directions.items()})[0]
        return (plus - minus) / (2.0 * eps)

    _, grads = loss_and_grads(None)
    rng = np.random.default_rng(seed)
    analytic = {i: [] for i in range(-1, len(names))}
    numeric = {i: [] for i in range(-1, len(names))}
    for _ in range(projections):
        directions = {n: _unit(rng.standard_normal(origin[n].shape)) for n in names}
        for i, name in enumerate(names):
            analytic[i].append(float(np.vdot(grads[i], directions[name])))
            numeric[i].append(difference({name: directions[name]}))
        analytic[-1].append(sum(analytic[i][-1] for i in range(len(names))))
        numeric[-1].append(difference(directions))

    def verdict(key: int) -> tuple[bool, ErrorNorms, np.ndarray, np.ndarray]:
        a, n = np.array(analytic[key]), np.array(numeric[key])
        return bool(np.all(np.abs(a - n) <= atol + rtol * np.abs(n))), ErrorNorms.between(a, n), a, n

    per_param = [InputGradientCheck(i, *verdict(i)) for i in range(len(names))]
    passed, norms, a, n = verdict(-1)
    passed = passed and all(check.passed for check in per_param)
    return NetworkGradientCheckResult(passed, norms.l1, norms.l2, norms.linf, norms.max_relative, a, n, per_param,
                                      eps, rtol, atol, param_names=names)


def _unit(direction: np.ndarray) -> np.ndarray:
    # Unit length per parameter: a raw Gaussian direction over a 10^4-element weight moves the
    # pre-activations by ~100 eps, enough to cross ReLU kinks somewhere in a network and spoil the
    # difference quotient; a unit step moves them by ~eps.
    norm = float(np.linalg.norm(direction))
    return direction / norm if norm > 0 else direction


def as_float64(network: Network) -> Network:
    """A copy of ``network`` whose floating parameters and declared floating inputs are float64."""
    clone = network.copy()
    # Network has no public dtype-changing edit (feed_tensor keeps a parameter's dtype, deliberately), so
    # this module of the same package rewrites the copy's tables directly.
    for name, value in clone._params.items():
        if np.issubdtype(value.dtype, np.floating):
            clone._params[name] = value.astype(np.float64)
    for name, info in clone._inputs.items():
        if np.issubdtype(info.dtype, np.floating):
            clone._inputs[name] = dataclasses.replace(info, dtype=np.dtype(np.float64))
    clone._edited()
    return clone
