"""The framework contract for native optimizers, checked on every installed framework package.

Each framework's optimizers under the reference names (d5.frameworks.base.OPTIMIZER_NAMES) follow the reference
optimizers of d5.training.optimizers (``torch.optim`` semantics) step by step, over ten steps whose learning rate
changes at every step, in the configurations where other libraries' optimizers differ: coupled weight decay,
Nesterov, dampening, AMSGrad, epsilon inside Adam's bias correction, AdamW, AdaGrad's ``lr_decay`` and initial
accumulator, centered RMSProp with momentum, clipping. They take the reference's arguments and refuse bad ones with
the reference's errors, refuse another framework's executor, resume exactly from ``state_dict()``, and stop a
diverging step before any update. The last tests show that wrappers with Keras's semantics fail this contract.

Float64 networks: the trajectories then agree to ~1e-14 where the equations are the same (measured with PyTorch), so
the tolerance below (1e-8) tells equations apart, not summation orders.
"""
from __future__ import annotations

import importlib
import inspect
import types
from typing import Any, Callable

import numpy as np
import pytest

import d5
from d5.errors import D5Error, DivergenceError, InvalidHyperparameterError
from d5.frameworks import base, reference
from d5.network.gradient_check import as_float64
from d5.training import optimizers as reference_optimizers
from d5.training.native_optimizer import NativeOptimizer
from d5.training.schedules import CosineSchedule

FRAMEWORKS = d5.frameworks.available()
STEPS = 10
#: Learning-rate factors, one per step: up and down, so that a rate folded into a momentum buffer shows.
LR_FACTORS = (1.0, 0.4, 1.5, 0.2, 1.2, 0.6, 2.0, 0.3, 0.9, 0.5)
RTOL, ATOL = 1e-8, 1e-11

#: case -> (optimizer name, keyword arguments, base learning rate).
CASES = {
    "sgd-weight_decay": ("GradientDescent", dict(weight_decay=0.05), 0.2),
    "sgd-clip": ("GradientDescent", dict(clip_value=0.02, clip_norm=0.05), 0.2),
    "momentum-nesterov": ("MomentumOptimizer", dict(momentum=0.9, nesterov=True, weight_decay=0.01), 0.1),
    "momentum-dampening": ("MomentumOptimizer", dict(momentum=0.8, dampening=0.3), 0.1),
    "adam": ("AdamOptimizer", dict(beta1=0.8, beta2=0.95, epsilon=1e-3), 0.01),
    "adam-amsgrad-weight_decay": ("AdamOptimizer", dict(beta2=0.9, epsilon=1e-3, weight_decay=0.05, amsgrad=True),
                                  0.01),
    "adamw": ("AdamWOptimizer", dict(beta2=0.95, epsilon=1e-3, weight_decay=0.1), 0.01),
    "adagrad-lr_decay-initial_accumulator": ("AdaGradOptimizer", dict(lr_decay=0.1, initial_accumulator_value=0.05,
                                                                      epsilon=1e-3, weight_decay=0.01), 0.1),
    "rmsprop-centered-momentum": ("RMSPropOptimizer", dict(alpha=0.9, centered=True, momentum=0.5, epsilon=1e-3,
                                                           weight_decay=0.01), 0.01),
}


@pytest.fixture(params=FRAMEWORKS)
def framework(request) -> types.ModuleType:
    return importlib.import_module(f"d5.frameworks.{request.param}")


def network(seed: int = 0) -> d5.Network:
    """A float64 MLP, and a parameter no node reads: its gradient is zero, but weight decay still moves it."""
    net = as_float64(d5.models.mlp((5,), hidden=(4,), num_classes=3, seed=seed))
    net.add_param("unused", np.linspace(-1.0, 1.0, 3) + seed)
    return net


def batches(count: int = STEPS, nan_at: int | None = None) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    out = [{"input": rng.standard_normal((8, 5)), "label": rng.integers(0, 3, 8)} for _ in range(count)]
    if nan_at is not None:
        out[nan_at]["input"][:] = np.nan
    return out


def parameters(executor) -> dict[str, np.ndarray]:
    return {name: executor.network.fetch_tensor(name).copy() for name in executor.network.get_params()}


def trajectory(make: Callable[..., Any], from_model: Callable, kwargs: dict, lr: float, mode: str
               ) -> tuple[list[float], dict[str, np.ndarray], Any]:
    """Ten steps of ``make(executor, **kwargs)``: ``mode`` 'set' sets ``optimizer.lr`` before every step (and
    ``weight_decay`` before the sixth: a hyper-parameter changed mid-run), 'schedule' passes a schedule, 'constant'
    keeps ``lr``, 'attributes' sets ``kwargs`` as attributes after construction (before the first step they act as
    constructor arguments do, ``initial_accumulator_value`` included)."""
    executor = from_model(network())
    if mode == "schedule":
        optimizer = make(executor, lr=CosineSchedule(lr, period=3, min_lr=0.2 * lr, restarts=True), **kwargs)
    elif mode == "attributes":
        optimizer = make(executor, lr=lr)
        for name, value in kwargs.items():
            setattr(optimizer, name, value)
    else:
        optimizer = make(executor, lr=lr, **kwargs)
    losses = []
    for step, batch in enumerate(batches()):
        if mode == "set":
            optimizer.lr = lr * LR_FACTORS[step]
            if step == 5:
                optimizer.weight_decay = 0.02
        losses.append(float(optimizer.step(batch)["loss"]))
    return losses, parameters(executor), optimizer


def assert_follows_reference(make: Callable[..., Any], from_model: Callable, case: str, mode: str) -> None:
    name, kwargs, lr = CASES[case]
    losses, params, optimizer = trajectory(make, from_model, kwargs, lr, mode)
    expected_losses, expected, oracle = trajectory(getattr(reference_optimizers, name), reference.from_model, kwargs,
                                                   lr, mode)
    np.testing.assert_allclose(losses, expected_losses, rtol=RTOL, atol=ATOL, err_msg=f"{case}: losses")
    for param, want in expected.items():
        np.testing.assert_allclose(params[param], want, rtol=RTOL, atol=ATOL, err_msg=f"{case}: {param}")
    assert optimizer.hyperparameters() == oracle.hyperparameters()
    assert not np.allclose(expected["fc2.weight"], network().params["fc2.weight"])  # it did train


# ---------------------------------------------------------------- the update equations
def test_the_cases_cover_every_optimizer_name():
    assert {name for name, _, _ in CASES.values()} == set(base.OPTIMIZER_NAMES)


@pytest.mark.parametrize("mode", ["set", "schedule", "attributes"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_native_optimizers_follow_the_reference_step_by_step(framework, case, mode):
    assert_follows_reference(getattr(framework, CASES[case][0]), framework.from_model, case, mode)


# ---------------------------------------------------------------- arguments and executors
@pytest.mark.parametrize("name", base.OPTIMIZER_NAMES)
def test_native_optimizers_take_the_reference_arguments(framework, name):
    native, oracle = getattr(framework, name), getattr(reference_optimizers, name)
    assert inspect.signature(native) == inspect.signature(oracle)
    optimizer, expected = native(framework.from_model(network())), oracle(reference.from_model(network()))
    assert optimizer.hyperparameters() == expected.hyperparameters()
    for hyperparameter, value in expected.hyperparameters().items():
        assert getattr(optimizer, hyperparameter) == value


BAD_ARGUMENTS = [
    ("GradientDescent", dict(lr=-0.1)),
    ("GradientDescent", dict(lr=float("nan"))),
    ("GradientDescent", dict(weight_decay=-1.0)),
    ("GradientDescent", dict(clip_norm=-1.0)),
    ("GradientDescent", dict(clip_value=float("inf"))),
    ("GradientDescent", dict(loss="")),
    ("MomentumOptimizer", dict(momentum=-0.5)),
    ("MomentumOptimizer", dict(dampening=1.5)),
    ("MomentumOptimizer", dict(nesterov=True, dampening=0.5)),
    ("MomentumOptimizer", dict(nesterov=True, momentum=0.0)),
    ("AdamOptimizer", dict(beta1=1.0)),
    ("AdamOptimizer", dict(beta2=-0.1)),
    ("AdamWOptimizer", dict(epsilon=-1e-8)),
    ("AdaGradOptimizer", dict(lr_decay=-0.1)),
    ("AdaGradOptimizer", dict(initial_accumulator_value=-1.0)),
    ("RMSPropOptimizer", dict(alpha=1.5)),
    ("RMSPropOptimizer", dict(momentum="fast")),
    ("RMSPropOptimizer", dict(lr=lambda step: -1.0)),  # a schedule giving a negative rate at step 0
]


@pytest.mark.parametrize("name, kwargs", BAD_ARGUMENTS, ids=[f"{n}-{'-'.join(k)}" for n, k in BAD_ARGUMENTS])
def test_bad_arguments_raise_the_reference_error(framework, name, kwargs):
    with pytest.raises(D5Error) as expected:
        getattr(reference_optimizers, name)(reference.from_model(network()), **kwargs)
    with pytest.raises(D5Error) as raised:
        getattr(framework, name)(framework.from_model(network()), **kwargs)
    assert type(raised.value) is type(expected.value) and str(raised.value) == str(expected.value)


def test_an_unknown_argument_or_a_bad_rate_set_later_are_refused_like_the_reference(framework):
    with pytest.raises(TypeError, match="nesterof"):
        framework.MomentumOptimizer(framework.from_model(network()), nesterof=True)
    optimizer = framework.AdamOptimizer(framework.from_model(network()), lr=0.01)
    with pytest.raises(InvalidHyperparameterError, match="lr=-1.0"):
        optimizer.lr = -1.0
    assert optimizer.lr == 0.01
    scheduled = framework.GradientDescent(framework.from_model(network()), lr=lambda step: 0.1 - 0.1 * step)
    scheduled.step(batches(1)[0])
    with pytest.raises(InvalidHyperparameterError, match="at step 2"):  # 0.1 - 0.2 < 0 at the third step
        for batch in batches(2):
            scheduled.step(batch)


@pytest.mark.parametrize("name", base.OPTIMIZER_NAMES)
def test_a_native_optimizer_refuses_another_frameworks_executor(framework, name):
    if getattr(framework, name) is getattr(reference_optimizers, name):
        pytest.skip(f"{framework.NAME}'s optimizers are the framework-neutral ones, which train any executor")
    with pytest.raises(D5Error, match=rf"needs a {framework.NAME} executor .*got a reference executor"):
        getattr(framework, name)(reference.from_model(network()))
    with pytest.raises(D5Error, match=rf"needs a {framework.NAME} executor .*got None"):
        getattr(framework, name)(None)


# ---------------------------------------------------------------- state and divergence
def assert_same_state(a: Any, b: Any, where: str = "state") -> None:
    assert type(a) is type(b), where
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            assert_same_state(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for index, (x, y) in enumerate(zip(a, b)):
            assert_same_state(x, y, f"{where}[{index}]")
    elif isinstance(a, np.ndarray):
        np.testing.assert_array_equal(a, b, err_msg=where)
    else:
        assert a == b or (a != a and b != b), where


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_run_resumed_from_state_dict_continues_exactly(framework, case):
    name, kwargs, lr = CASES[case]

    def make(executor):
        return getattr(framework, name)(executor, lr=CosineSchedule(lr, period=3, min_lr=0.2 * lr, restarts=True),
                                        **kwargs)

    data = batches(7)
    first = framework.from_model(network())
    optimizer = make(first)
    for batch in data[:4]:
        optimizer.step(batch)
    state, saved, hyperparameters = optimizer.state_dict(), parameters(first), optimizer.hyperparameters()
    for batch in data[4:]:  # the first run goes on: the saved state must not change with it
        optimizer.step(batch)
    resumed = framework.from_model(network(seed=1))
    for param, value in saved.items():
        resumed.network.feed_tensor(param, value, is_param=True)
    resumed_optimizer = make(resumed)
    resumed_optimizer.load_state_dict(state)
    assert resumed_optimizer.steps == 4 and resumed_optimizer.hyperparameters() == hyperparameters
    for batch in data[4:]:
        resumed_optimizer.step(batch)
    for param, value in parameters(first).items():
        np.testing.assert_array_equal(parameters(resumed)[param], value, err_msg=f"{case}: {param}")
    assert_same_state(resumed_optimizer.state_dict(), optimizer.state_dict())


@pytest.mark.parametrize("name", base.OPTIMIZER_NAMES)
def test_a_nan_loss_is_a_divergence_error_naming_the_step_before_any_update(framework, name):
    executor = framework.from_model(network())
    optimizer = getattr(framework, name)(executor, lr=0.05)
    data = batches(3, nan_at=2)
    for batch in data[:2]:
        optimizer.step(batch)
    before, state = parameters(executor), optimizer.state_dict()
    with pytest.raises(DivergenceError, match="at step 3") as info:
        optimizer.step(data[2])
    assert info.value.step == 3 and optimizer.steps == 3
    for param, value in parameters(executor).items():
        np.testing.assert_array_equal(value, before[param], err_msg=param)
    after = optimizer.state_dict()
    for counts in (state, after):  # the step counts advanced; nothing else did
        counts.pop("steps"), counts.pop("t", None)
    assert_same_state(after, state)


# ---------------------------------------------------------------- the contract catches other libraries' semantics
class _NumpyOptimizer(NativeOptimizer):
    """A native optimizer of the reference framework in NumPy (fetch, update, feed): the hooks at their smallest,
    to show that the comparison above fails a wrapper whose library computes something else."""

    framework = "reference"

    def make_native(self, hyperparameters):
        return {}  # per-parameter state; the hyper-parameters are read at every update

    def push_hyperparameters(self, changed):
        pass

    def clip_gradients(self, clip_value, clip_norm):
        raise NotImplementedError

    def apply_update(self):
        self.native.setdefault("t", 0)
        self.native["t"] += 1
        for param, grad in self.network.gradient(self.loss):
            value, gradient = self.network.fetch_tensors([param, grad])
            new = self.update(value, gradient, self.native.setdefault(param, {}), self.native["t"])
            self.network.feed_tensor(param, new, is_param=True)

    def native_state_dict(self):
        return {"numpy": {key: dict(value) if isinstance(value, dict) else value for key, value in self.native.items()}}

    def load_native_state_dict(self, state):
        self.native = {key: dict(value) if isinstance(value, dict) else value for key, value in state["numpy"].items()}


class TorchMomentum(_NumpyOptimizer):
    """torch.optim.SGD: ``v = momentum * v + (1 - dampening) * (g + wd * p)``, ``p -= lr * v``."""

    reference = reference_optimizers.MomentumOptimizer

    def update(self, p, g, state, t):
        g = g + self.weight_decay * p
        state["v"] = g if "v" not in state else self.momentum * state["v"] + (1 - self.dampening) * g
        return p - self.lr * (g + self.momentum * state["v"] if self.nesterov else state["v"])


class KerasMomentum(TorchMomentum):
    """keras.optimizers.SGD's way (and MXNet's): the rate folded into the velocity, ``v = momentum * v - lr * g``,
    ``p += v``; otherwise torch's (dampening, Nesterov). The same as torch's while the rate stays constant."""

    def update(self, p, g, state, t):
        g = g + self.weight_decay * p
        rate = self.lr * (1 - self.dampening) if "v" in state else self.lr  # torch's first step: undampened
        state["v"] = self.momentum * state.get("v", 0.0) - rate * g
        return p + (-self.lr * g + self.momentum * state["v"] if self.nesterov else state["v"])


class TorchAdam(_NumpyOptimizer):
    """torch.optim.Adam: ``p -= lr / (1 - beta1**t) * m / (sqrt(v) / sqrt(1 - beta2**t) + epsilon)``."""

    reference = reference_optimizers.AdamOptimizer

    def update(self, p, g, state, t):
        g = g + self.weight_decay * p
        state["m"] = self.beta1 * state.get("m", 0.0) + (1 - self.beta1) * g
        state["v"] = self.beta2 * state.get("v", 0.0) + (1 - self.beta2) * g * g
        denominator = np.sqrt(state["v"]) / np.sqrt(1 - self.beta2 ** t) + self.epsilon
        return p - self.lr / (1 - self.beta1 ** t) * state["m"] / denominator


class KerasAdam(TorchAdam):
    """keras.optimizers.Adam: epsilon outside the bias correction, ``p -= alpha * m / (sqrt(v) + epsilon)``."""

    def update(self, p, g, state, t):
        g = g + self.weight_decay * p
        state["m"] = self.beta1 * state.get("m", 0.0) + (1 - self.beta1) * g
        state["v"] = self.beta2 * state.get("v", 0.0) + (1 - self.beta2) * g * g
        alpha = self.lr * np.sqrt(1 - self.beta2 ** t) / (1 - self.beta1 ** t)
        return p - alpha * state["m"] / (np.sqrt(state["v"]) + self.epsilon)


@pytest.mark.parametrize("right, wrong, case, same_at_a_constant_rate", [
    (TorchMomentum, KerasMomentum, "momentum-dampening", True),
    (TorchMomentum, KerasMomentum, "momentum-nesterov", True),
    (TorchAdam, KerasAdam, "adam", False),
])
def test_a_wrapper_with_another_librarys_semantics_fails_the_contract(right, wrong, case, same_at_a_constant_rate):
    assert inspect.signature(right) == inspect.signature(right.reference)
    for mode in ("set", "schedule"):
        assert_follows_reference(right, reference.from_model, case, mode)
        with pytest.raises(AssertionError):
            assert_follows_reference(wrong, reference.from_model, case, mode)
    if same_at_a_constant_rate:  # so a test at a constant learning rate would let Keras's SGD through
        assert_follows_reference(wrong, reference.from_model, case, "constant")
    with pytest.raises(D5Error, match="needs a reference executor"):
        right(None)
