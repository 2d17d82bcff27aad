"""The pieces optimizers are chained from, the global view over all gradients, the learning rate as a float or a
schedule, hyper-parameters changed between steps, and bad input."""
from __future__ import annotations

import numpy as np
import pytest

import d5
from d5.errors import D5Error, InvalidHyperparameterError
from d5.frameworks import reference
from d5.training import gradient_transforms as gt
from d5.training.optimizer import ThreeStepOptimizer
from d5.training.optimizers import (OPTIMIZERS, AcceleGradOptimizer, AdamOptimizer, ChainOptimizer, GradientDescent,
                                    LAMBOptimizer, LARSOptimizer, MomentumOptimizer, chain, optimizer_by_name)
from d5.training.schedules import CosineSchedule, MultiStepSchedule

torch = pytest.importorskip("torch")

SHAPES = {"conv.W": (3, 2, 3, 3), "fc.W": (4, 5), "fc.b": (5,), "scale": ()}


def random_tensors(seed: int, scale: float = 1.0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {name: np.array(scale * rng.standard_normal(shape)) for name, shape in SHAPES.items()}  # 0-d: an array


def run_rule(optimizer, params, gradients):
    """Steps of a detached optimizer through the ThreeStepOptimizer hooks, as a distributed scheme calls them."""
    params = dict(params)
    for grads in gradients:
        optimizer.new_input()
        if optimizer.uses_all_gradients:
            optimizer.prepare_gradients(grads, params)
        for name, grad in grads.items():
            params[name] = optimizer.update_rule(grad, params[name], name)
    return params


# ---------------------------------------------------------------------- clipping against torch
@pytest.mark.parametrize("max_norm", [0.5, 1e3])  # clipping, and a bound the norm stays under
def test_clip_by_global_norm_is_torchs_clip_grad_norm_over_all_parameters(max_norm):
    grads = random_tensors(0)
    clip = gt.ClipByGlobalNorm(max_norm)
    clip.observe(grads, grads, step=1)
    tensors = [torch.tensor(grad) for grad in grads.values()]
    for tensor in tensors:
        tensor.grad = tensor.clone()
    total = torch.nn.utils.clip_grad_norm_(tensors, max_norm)
    assert clip.last_norm == pytest.approx(float(total), rel=1e-14)
    for (name, grad), tensor in zip(grads.items(), tensors):
        ours, _ = clip.update(grad.copy(), {}, grad, step=1)
        np.testing.assert_allclose(ours, tensor.grad.numpy(), rtol=1e-14, err_msg=name)


def test_clip_by_value_is_torchs_clip_grad_value_():
    grads = random_tensors(1)
    for name, grad in grads.items():
        tensor = torch.tensor(grad)
        tensor.grad = tensor.clone()
        torch.nn.utils.clip_grad_value_([tensor], 0.3)
        np.testing.assert_array_equal(gt.ClipByValue(0.3).update(grad.copy(), {}, grad, step=1)[0], tensor.grad.numpy())


def test_a_global_piece_in_the_middle_of_a_chain_sees_the_directions_that_reach_it():
    """Adam's directions of all parameters, clipped together by their joint norm, then scaled by -lr."""
    params, gradients = random_tensors(2), [random_tensors(3 + step) for step in range(4)]
    optimizer = chain(None, gt.ScaleByAdam(), gt.ClipByGlobalNorm(1.0), gt.ScaleByLearningRate(0.1))
    ours = run_rule(optimizer, params, gradients)
    expected, m, v = dict(params), {n: 0.0 for n in SHAPES}, {n: 0.0 for n in SHAPES}
    for t, grads in enumerate(gradients, start=1):
        directions = {}
        for name, g in grads.items():
            m[name] = 0.9 * m[name] + 0.1 * g
            v[name] = 0.999 * v[name] + 0.001 * g ** 2
            directions[name] = (m[name] / (1 - 0.9 ** t)) / (np.sqrt(v[name] / (1 - 0.999 ** t)) + 1e-8)
        norm = np.sqrt(sum(np.sum(d ** 2) for d in directions.values()))
        factor = min(1.0, 1.0 / (norm + 1e-6))
        assert factor < 1  # the clipping is exercised
        expected = {name: expected[name] - 0.1 * factor * directions[name] for name in SHAPES}
    for name in SHAPES:
        np.testing.assert_allclose(ours[name], expected[name], rtol=1e-12, err_msg=name)


def test_a_global_piece_without_the_global_view_is_a_clear_error():
    optimizer = MomentumOptimizer(None, lr=0.1, clip_norm=1.0)
    optimizer.new_input()
    with pytest.raises(D5Error, match="prepare_gradients"):
        optimizer.update_rule(np.ones(2), np.zeros(2), "w")
    accelegrad = AcceleGradOptimizer(None)
    accelegrad.new_input()
    with pytest.raises(D5Error, match="prepare_gradients"):
        accelegrad.update_rule(np.ones(2), np.zeros(2), "w")


def test_step_shows_every_gradient_before_the_first_update_only_when_asked():
    calls = []

    class Recording(ThreeStepOptimizer):
        wants_all = True

        @property
        def uses_all_gradients(self):
            return self.wants_all

        def prepare_gradients(self, gradients, params):
            calls.append(("prepare", sorted(gradients), sorted(params)))
            for name, grad in gradients.items():  # the same arrays update_rule gets next
                assert grad.shape == params[name].shape

        def update_rule(self, grad, old_param, param_name):
            calls.append(("update", param_name))
            return old_param - 0.1 * grad

    executor = reference.from_model(d5.models.mlp((4,), hidden=(3,), num_classes=2))
    batch = {"input": np.ones((2, 4), np.float32), "label": np.array([0, 1])}
    optimizer = Recording(executor)
    optimizer.step(batch)
    names = sorted(executor.network.get_params())
    assert calls[0] == ("prepare", names, names)
    assert sorted(call[1] for call in calls[1:]) == names and len(calls) == 1 + len(names)
    calls.clear()
    optimizer.wants_all = False
    optimizer.step(batch)
    assert all(call[0] == "update" for call in calls)


def test_clip_norm_switched_on_between_steps_takes_effect():
    executor = reference.from_model(d5.models.mlp((4,), hidden=(3,), num_classes=2))
    optimizer = GradientDescent(executor, lr=0.1)
    assert not optimizer.uses_all_gradients
    optimizer.clip_norm = 1e-3
    assert optimizer.uses_all_gradients and optimizer.pieces[1].max_norm == 1e-3
    before = {name: executor.network.fetch_tensor(name).copy() for name in executor.network.get_params()}
    optimizer.step({"input": np.ones((2, 4), np.float32) * 5, "label": np.array([0, 1])})
    moved = np.sqrt(sum(np.sum((executor.network.fetch_tensor(n) - before[n]) ** 2) for n in before))
    assert moved == pytest.approx(0.1 * 1e-3, rel=1e-3)  # the step of a gradient clipped to norm 1e-3


# ---------------------------------------------------------------------- hyper-parameters between steps
def torch_steps(make, params, gradients, changes):
    tensors = {name: torch.tensor(value, requires_grad=True) for name, value in params.items()}
    optimizer = make(list(tensors.values()))
    for step, grads in enumerate(gradients):
        for key, value in changes.get(step, {}).items():
            for group in optimizer.param_groups:
                group[key] = value
        for name, grad in grads.items():
            tensors[name].grad = torch.tensor(grad)
        optimizer.step()
    return {name: tensor.detach().numpy() for name, tensor in tensors.items()}


def test_hyperparameters_set_as_attributes_reach_the_pieces_like_torchs_param_groups():
    params, gradients = random_tensors(4), [random_tensors(5 + step) for step in range(6)]
    ours = MomentumOptimizer(None, lr=0.1, momentum=0.9)
    changes = {2: {"momentum": 0.5, "weight_decay": 0.01}, 4: {"lr": 0.02, "nesterov": True}}
    expected = torch_steps(lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9), params, gradients, changes)
    current = dict(params)
    for step, grads in enumerate(gradients):
        for key, value in changes.get(step, {}).items():
            setattr(ours, key, value)
        current = run_rule(ours, current, [grads])
    for name in SHAPES:
        np.testing.assert_allclose(current[name], expected[name], rtol=1e-12, err_msg=name)
    assert (ours.momentum, ours.weight_decay, ours.nesterov, ours.lr) == (0.5, 0.01, True, 0.02)
    assert "momentum=0.5" in repr(ours)


def test_adam_betas_and_epsilon_set_between_steps_match_torch():
    params, gradients = random_tensors(6), [random_tensors(7 + step) for step in range(5)]
    ours = AdamOptimizer(None, lr=0.01)
    expected = torch_steps(lambda p: torch.optim.Adam(p, lr=0.01), params, gradients,
                           {2: {"betas": (0.5, 0.99), "eps": 1e-4}})
    current = dict(params)
    for step, grads in enumerate(gradients):
        if step == 2:
            ours.beta1, ours.beta2, ours.epsilon = 0.5, 0.99, 1e-4
        current = run_rule(ours, current, [grads])
    for name in SHAPES:
        np.testing.assert_allclose(current[name], expected[name], rtol=1e-12, err_msg=name)


# ---------------------------------------------------------------------- lr: a float or a schedule
def test_a_schedule_as_lr_sets_the_float_lr_of_every_step():
    schedule = MultiStepSchedule(0.1, milestones=[2, 4], gamma=0.5)
    optimizer = GradientDescent(None, lr=schedule)
    assert optimizer.lr == 0.1 and optimizer.lr_schedule is schedule
    seen = []
    for _ in range(6):
        optimizer.new_input()
        seen.append(optimizer.lr)
        new = optimizer.update_rule(np.array([1.0]), np.array([0.0]), "w")
        assert new[0] == -optimizer.lr  # the rate in force is the one applied
    assert seen == [schedule(step) for step in range(6)] == [0.1, 0.1, 0.05, 0.05, 0.025, 0.025]


def test_setting_lr_replaces_the_schedule_and_a_schedule_set_later_starts_where_training_is():
    optimizer = MomentumOptimizer(None, lr=CosineSchedule(0.1, period=10))
    optimizer.new_input()
    optimizer.lr = 0.5  # an event's value wins from now on
    assert optimizer.lr_schedule is None
    optimizer.new_input()
    assert optimizer.lr == 0.5
    later = MultiStepSchedule(1.0, milestones=[3], gamma=0.1)
    optimizer.lr = later  # two steps taken: the next one is step 2
    assert optimizer.lr == 1.0
    optimizer.new_input()
    optimizer.new_input()
    assert optimizer.lr == pytest.approx(0.1) and optimizer.lr_schedule is later


def test_the_pytorch_optimizers_take_a_schedule_and_a_float_lr_the_same_way():
    from d5.frameworks import pytorch

    executor = pytorch.from_model(d5.models.mlp((4,), hidden=(3,), num_classes=2))
    optimizer = pytorch.GradientDescent(executor, lr=MultiStepSchedule(0.1, milestones=[1], gamma=0.5))
    batch = {"input": np.ones((2, 4), np.float32), "label": np.array([0, 1])}
    group = optimizer.torch_optimizer.param_groups[0]
    optimizer.step(batch)
    assert group["lr"] == 0.1
    optimizer.step(batch)
    assert group["lr"] == optimizer.lr == 0.05
    optimizer.lr = 0.3
    optimizer.step(batch)
    assert group["lr"] == 0.3 and optimizer.lr_schedule is None


def test_a_schedule_giving_a_bad_rate_is_refused_naming_the_step():
    optimizer = GradientDescent(None, lr=lambda step: 0.1 if step < 2 else -1.0)
    optimizer.new_input()
    optimizer.new_input()
    with pytest.raises(InvalidHyperparameterError, match="at step 2"):
        optimizer.new_input()


# ---------------------------------------------------------------------- update rules: inputs untouched, dtypes
@pytest.mark.parametrize("make", [
    lambda: LARSOptimizer(None, lr=1.0, trust_coefficient=0.02),
    lambda: LAMBOptimizer(None, lr=0.01),
    lambda: AcceleGradOptimizer(None),
    lambda: MomentumOptimizer(None, lr=0.1, clip_norm=0.5, clip_value=0.2, weight_decay=0.1),
    lambda: chain(None, gt.ScaleByAdam(amsgrad=True), gt.ClipByGlobalNorm(0.1), gt.DecoupledWeightDecay(0.1),
                  gt.ScaleByLearningRate(0.1)),
], ids=["lars", "lamb", "accelegrad", "momentum-clipped", "chain-adam-clip-decay"])
def test_update_rules_leave_their_inputs_untouched_and_keep_float32(make):
    optimizer = make()
    rng = np.random.default_rng(8)
    params = {"w": rng.standard_normal((3, 4)).astype(np.float32), "s": np.array(0.5, np.float32)}
    for _ in range(3):
        grads = {name: rng.standard_normal(value.shape).astype(np.float32) for name, value in params.items()}
        before = {name: (params[name].copy(), grads[name].copy()) for name in params}
        new = run_rule(optimizer, params, [grads])
        for name in params:
            np.testing.assert_array_equal(params[name], before[name][0])
            np.testing.assert_array_equal(grads[name], before[name][1])
            assert new[name].dtype == np.float32 and new[name].shape == params[name].shape
            assert new[name] is not params[name] and not np.array_equal(new[name], params[name])
        params = new


# ---------------------------------------------------------------------- names and bad input
def test_optimizers_by_name():
    for short, cls in OPTIMIZERS.items():
        assert optimizer_by_name(short) is cls and optimizer_by_name(cls.__name__.upper()) is cls
    with pytest.raises(D5Error, match="unknown optimizer 'adamax'.*sgd, momentum, adam, adamw.*lars, lamb"):
        optimizer_by_name("adamax")


@pytest.mark.parametrize("make_bad,named", [
    (lambda: LARSOptimizer(None, trust_coefficient=-1.0), "trust_coefficient"),
    (lambda: LARSOptimizer(None, momentum=0.0, nesterov=True), "Nesterov"),
    (lambda: LAMBOptimizer(None, beta2=1.0), r"beta2.*\[0.0, 1.0\)"),
    (lambda: LAMBOptimizer(None, weight_decay=float("nan")), "weight_decay"),
    (lambda: AcceleGradOptimizer(None, diameter=-2.0), r"diameter.*\[0.0, inf\)"),
    (lambda: AdamOptimizer(None, clip_norm=-1.0), "clip_norm"),
    (lambda: GradientDescent(None, clip_value="big"), "clip_value"),
    (lambda: GradientDescent(None, lr=-0.1), r"lr=-0.1 is out of range; it must lie in \[0.0, inf\)"),
    (lambda: gt.ScaleByRMSProp(alpha=1.5), "alpha"),
    (lambda: gt.ScaleByLearningRate(lambda step: float("inf")), "lr"),
])
def test_bad_hyperparameters_name_themselves_and_their_valid_range(make_bad, named):
    with pytest.raises(InvalidHyperparameterError, match=named):
        make_bad()


def test_chains_refuse_what_is_not_a_piece_and_need_exactly_one_learning_rate():
    with pytest.raises(D5Error, match="GradientTransform"):
        chain(None, gt.Momentum(0.9), lambda g: g, gt.ScaleByLearningRate(0.1))
    with pytest.raises(D5Error, match="exactly one ScaleByLearningRate"):
        chain(None, gt.Momentum(0.9))
    with pytest.raises(D5Error, match="exactly one ScaleByLearningRate.*got 2"):
        ChainOptimizer(None, [gt.ScaleByLearningRate(0.1), gt.ScaleByLearningRate(0.1)])
