"""The reference update rules against torch.optim (the oracle), table-driven over every optimizer."""
from __future__ import annotations

import numpy as np
import pytest

from d5.errors import D5Error, DivergenceError
from d5.training.optimizer import InvalidHyperparameterError, ThreeStepOptimizer, UpdateRuleOptimizer
from d5.training.optimizers import (AdaGradOptimizer, AdamOptimizer, AdamWOptimizer, GradientDescent,
                                    MomentumOptimizer, RMSPropOptimizer)

torch = pytest.importorskip("torch")

# (id, d5 optimizer factory, torch optimizer factory): identical hyper-parameters on both sides.
CASES = [
    ("sgd", lambda: GradientDescent(None, lr=0.1),
     lambda p: torch.optim.SGD(p, lr=0.1)),
    ("sgd-wd", lambda: GradientDescent(None, lr=0.05, weight_decay=0.1),
     lambda p: torch.optim.SGD(p, lr=0.05, weight_decay=0.1)),
    ("momentum", lambda: MomentumOptimizer(None, lr=0.1, momentum=0.9),
     lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9)),
    ("momentum-dampening-wd", lambda: MomentumOptimizer(None, lr=0.03, momentum=0.8, dampening=0.3,
                                                        weight_decay=0.01),
     lambda p: torch.optim.SGD(p, lr=0.03, momentum=0.8, dampening=0.3, weight_decay=0.01)),
    ("nesterov", lambda: MomentumOptimizer(None, lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-3),
     lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-3)),
    ("adam", lambda: AdamOptimizer(None, lr=0.01),
     lambda p: torch.optim.Adam(p, lr=0.01)),
    ("adam-betas-wd", lambda: AdamOptimizer(None, lr=0.02, beta1=0.8, beta2=0.9, epsilon=1e-6, weight_decay=0.05),
     lambda p: torch.optim.Adam(p, lr=0.02, betas=(0.8, 0.9), eps=1e-6, weight_decay=0.05)),
    ("adamw", lambda: AdamWOptimizer(None, lr=0.01, weight_decay=0.1),
     lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.1)),
    ("adagrad", lambda: AdaGradOptimizer(None, lr=0.1),
     lambda p: torch.optim.Adagrad(p, lr=0.1)),
    ("adagrad-decay-init-wd", lambda: AdaGradOptimizer(None, lr=0.1, lr_decay=0.05, initial_accumulator_value=0.2,
                                                       weight_decay=0.01),
     lambda p: torch.optim.Adagrad(p, lr=0.1, lr_decay=0.05, initial_accumulator_value=0.2, weight_decay=0.01)),
    ("rmsprop", lambda: RMSPropOptimizer(None, lr=0.01),
     lambda p: torch.optim.RMSprop(p, lr=0.01)),
    ("rmsprop-centered-momentum-wd", lambda: RMSPropOptimizer(None, lr=0.01, alpha=0.9, momentum=0.5,
                                                              centered=True, weight_decay=0.01),
     lambda p: torch.optim.RMSprop(p, lr=0.01, alpha=0.9, momentum=0.5, centered=True, weight_decay=0.01)),
]
SHAPES = {"conv.W": (3, 2, 3, 3), "fc.W": (4, 5), "fc.b": (5,), "scale": ()}
STEPS = 6


def _gradient_sequence(seed: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{name: rng.standard_normal(shape) for name, shape in SHAPES.items()} for _ in range(STEPS)]


def _run_d5(optimizer, params, gradients, lr_at=None):
    params = {name: value.copy() for name, value in params.items()}
    for step, grads in enumerate(gradients):
        if lr_at and step in lr_at:
            optimizer.lr = lr_at[step]
        optimizer.new_input()
        for name, grad in grads.items():
            params[name] = optimizer.update_rule(grad, params[name], name)
    return params


def _run_torch(make_optimizer, params, gradients, lr_at=None):
    tensors = {name: torch.tensor(value, dtype=torch.float64, requires_grad=True) for name, value in params.items()}
    optimizer = make_optimizer(list(tensors.values()))
    for step, grads in enumerate(gradients):
        if lr_at and step in lr_at:
            for group in optimizer.param_groups:
                group["lr"] = lr_at[step]
        for name, grad in grads.items():
            tensors[name].grad = torch.tensor(grad, dtype=torch.float64)
        optimizer.step()
    return {name: tensor.detach().numpy() for name, tensor in tensors.items()}


@pytest.mark.parametrize("case_id,make_d5,make_torch", CASES, ids=[case[0] for case in CASES])
def test_update_rule_matches_torch(case_id, make_d5, make_torch):
    rng = np.random.default_rng(0)
    params = {name: rng.standard_normal(shape) for name, shape in SHAPES.items()}
    gradients = _gradient_sequence(seed=1)
    ours = _run_d5(make_d5(), params, gradients)
    theirs = _run_torch(make_torch, params, gradients)
    for name in SHAPES:
        assert ours[name].dtype == np.float64 and ours[name].shape == SHAPES[name]
        np.testing.assert_allclose(ours[name], theirs[name], rtol=1e-12, atol=1e-14, err_msg=f"{case_id}: {name}")
        # the optimizer must actually have moved the parameter
        assert not np.allclose(ours[name], params[name])


@pytest.mark.parametrize("case_id,make_d5,make_torch", CASES, ids=[case[0] for case in CASES])
def test_learning_rate_changes_mid_training_match_torch(case_id, make_d5, make_torch):
    rng = np.random.default_rng(2)
    params = {name: rng.standard_normal(shape) for name, shape in SHAPES.items()}
    gradients = _gradient_sequence(seed=3)
    schedule = {2: 0.003, 4: 0.5}
    ours = _run_d5(make_d5(), params, gradients, lr_at=schedule)
    theirs = _run_torch(make_torch, params, gradients, lr_at=schedule)
    for name in SHAPES:
        np.testing.assert_allclose(ours[name], theirs[name], rtol=1e-12, atol=1e-14, err_msg=f"{case_id}: {name}")


@pytest.mark.parametrize("case_id,make_d5,make_torch", CASES, ids=[case[0] for case in CASES])
def test_update_rule_leaves_inputs_untouched_and_keeps_float32(case_id, make_d5, make_torch):
    optimizer = make_d5()
    rng = np.random.default_rng(4)
    param = rng.standard_normal((3, 4)).astype(np.float32)
    for _ in range(2):
        grad = rng.standard_normal((3, 4)).astype(np.float32)
        param_before, grad_before = param.copy(), grad.copy()
        optimizer.new_input()
        new_param = optimizer.update_rule(grad, param, "w")
        np.testing.assert_array_equal(param, param_before)
        np.testing.assert_array_equal(grad, grad_before)
        assert new_param.dtype == np.float32 and new_param is not param
        param = new_param


@pytest.mark.parametrize("make_bad", [
    lambda: GradientDescent(None, lr=-1.0),
    lambda: GradientDescent(None, lr=float("nan")),
    lambda: GradientDescent(None, lr="fast"),
    lambda: MomentumOptimizer(None, momentum=-0.1),
    lambda: MomentumOptimizer(None, momentum=0.0, nesterov=True),
    lambda: MomentumOptimizer(None, momentum=0.9, dampening=0.1, nesterov=True),
    lambda: AdamOptimizer(None, beta1=1.0),
    lambda: AdamOptimizer(None, beta2=1.5),
    lambda: RMSPropOptimizer(None, alpha=2.0),
    lambda: AdaGradOptimizer(None, epsilon=-1.0),
])
def test_bad_hyperparameters_raise_a_d5_error_naming_them(make_bad):
    with pytest.raises(InvalidHyperparameterError) as info:
        make_bad()
    assert isinstance(info.value, D5Error) and isinstance(info.value, ValueError)
    assert any(word in str(info.value) for word in ("lr", "momentum", "beta", "alpha", "epsilon", "Nesterov"))


def test_adam_update_rule_before_new_input_is_a_clear_error():
    with pytest.raises(InvalidHyperparameterError, match="new_input"):
        AdamOptimizer(None).update_rule(np.ones(2), np.ones(2), "w")


def test_detached_optimizer_cannot_step():
    with pytest.raises(D5Error, match="without an executor"):
        GradientDescent(None).step({"x": np.ones(1)})


# --- ThreeStepOptimizer.step on a real (NumPy least-squares) executor --------------------------------------

class _LeastSquaresNetwork:
    """Live state of the model ``y_hat = x @ w + b`` with loss ``mean((y_hat - y)**2)``."""

    outputs = ["output", "loss"]

    def __init__(self, n_features: int):
        self.tensors = {"w": np.zeros(n_features), "b": np.zeros(1)}
        self.gradient_calls = 0

    def get_params(self):
        return ["w", "b"]

    def gradient(self, y="loss"):
        self.gradient_calls += 1
        return [("w", "grad_w"), ("b", "grad_b")]

    def fetch_tensors(self, names):
        return [self.tensors[name] for name in names]

    def feed_tensor(self, name, value, is_param=False):
        self.tensors[name] = value


class _LeastSquaresExecutor:
    def __init__(self, n_features: int):
        self.network = _LeastSquaresNetwork(n_features)

    def inference(self, inputs):
        t = self.network.tensors
        prediction = inputs["x"] @ t["w"] + t["b"][0]
        return {"output": prediction, "loss": np.float64(np.mean((prediction - inputs["y"]) ** 2))}

    def inference_and_backprop(self, inputs, y="loss"):
        outputs = self.inference(inputs)
        residual = 2.0 * (outputs["output"] - inputs["y"]) / len(inputs["y"])
        self.network.tensors["grad_w"] = inputs["x"].T @ residual
        self.network.tensors["grad_b"] = np.array([residual.sum()])
        return outputs


def _regression_batch(seed=0, n=32):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 3))
    return {"x": x, "y": x @ np.array([1.0, -2.0, 0.5]) + 0.25}


def test_three_step_step_follows_the_seed_loop_and_caches_gradient_names():
    calls = []

    class Recording(ThreeStepOptimizer):
        def new_input(self):
            calls.append("new_input")

        def prepare_param(self, param_name):
            calls.append(f"prepare {param_name}")

        def update_rule(self, grad, old_param, param_name):
            calls.append(f"update {param_name}")
            return old_param - 0.1 * grad

    executor = _LeastSquaresExecutor(3)
    optimizer = Recording(executor)
    for _ in range(3):
        outputs = optimizer.step(_regression_batch())
    assert set(outputs) == {"output", "loss"}
    assert calls[:5] == ["new_input", "prepare w", "prepare b", "update w", "update b"]
    assert len(calls) == 15 and optimizer.steps == 3
    assert executor.network.gradient_calls == 1  # cached after the first step


def test_gradient_descent_step_equals_manual_least_squares_update():
    executor = _LeastSquaresExecutor(3)
    batch = _regression_batch()
    optimizer = GradientDescent(executor, lr=0.1)
    w, b = np.zeros(3), 0.0
    for _ in range(5):
        optimizer.step(batch)
        residual = 2.0 * (batch["x"] @ w + b - batch["y"]) / len(batch["y"])
        w, b = w - 0.1 * batch["x"].T @ residual, b - 0.1 * residual.sum()
    np.testing.assert_allclose(executor.network.tensors["w"], w, rtol=1e-12)
    np.testing.assert_allclose(executor.network.tensors["b"], [b], rtol=1e-12)


def test_momentum_optimizer_fits_least_squares():
    executor = _LeastSquaresExecutor(3)
    optimizer = MomentumOptimizer(executor, lr=0.05, momentum=0.9)
    for step in range(200):
        loss = optimizer.step(_regression_batch(seed=step))["loss"]
    assert loss < 1e-6
    np.testing.assert_allclose(executor.network.tensors["w"], [1.0, -2.0, 0.5], atol=1e-3)


def test_divergence_error_names_the_step_and_loss_and_leaves_params_untouched():
    executor = _LeastSquaresExecutor(3)
    optimizer = MomentumOptimizer(executor, lr=0.01)
    optimizer.step(_regression_batch())
    optimizer.step(_regression_batch())
    w_before = executor.network.tensors["w"].copy()
    bad = _regression_batch()
    bad["y"][3] = np.nan
    with pytest.raises(DivergenceError, match=r"step 3\b.*") as info:
        optimizer.step(bad)
    assert "nan" in str(info.value) and "'loss'" in str(info.value)
    assert info.value.step == 3 and np.isnan(info.value.loss)
    np.testing.assert_array_equal(executor.network.tensors["w"], w_before)


def test_infinite_loss_also_diverges_and_check_can_be_turned_off():
    bad = _regression_batch()
    bad["y"][0] = np.inf
    with pytest.raises(DivergenceError, match="inf"):
        GradientDescent(_LeastSquaresExecutor(3), lr=0.01).step(bad)
    executor = _LeastSquaresExecutor(3)
    outputs = GradientDescent(executor, lr=0.01, check_divergence=False).step(bad)
    assert not np.isfinite(outputs["loss"])
    assert not np.isfinite(executor.network.tensors["w"]).all()  # it really applied the step


def test_update_rule_optimizer_needs_only_an_update_rule():
    class SignDescent(UpdateRuleOptimizer):
        lr = 0.01

        def update_rule(self, grad, old_param, param_name):
            return old_param - self.lr * np.sign(grad)

    executor = _LeastSquaresExecutor(3)
    SignDescent(executor).step(_regression_batch())
    batch = _regression_batch()
    np.testing.assert_allclose(executor.network.tensors["w"], 0.01 * np.sign(batch["x"].T @ batch["y"]))


def test_optimizer_needs_an_executor_with_a_network():
    with pytest.raises(D5Error, match="GraphExecutor"):
        GradientDescent(object())
