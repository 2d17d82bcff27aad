"""TensorFlow native optimizers beyond the framework contract (tests/frameworks/test_contract_optimizers.py): the
fused step (pass and update in one traced function) against the unfused one DataParallel runs, a diverging step
changing nothing, and the traces: one per structure, none for a new value."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import d5
from d5.errors import DivergenceError
from d5.frameworks import tensorflow as d5tf
from d5.frameworks.tensorflow import optimizers
from d5.network.gradient_check import as_float64
from d5.training.schedules import CosineSchedule

CASES = {
    "momentum": ("MomentumOptimizer", dict(momentum=0.9)),
    "momentum-nesterov-clip": ("MomentumOptimizer", dict(momentum=0.9, nesterov=True, weight_decay=0.01,
                                                         clip_value=0.05, clip_norm=0.1)),
    "momentum-dampening": ("MomentumOptimizer", dict(momentum=0.8, dampening=0.3)),
    "sgd": ("GradientDescent", dict(weight_decay=0.05)),
    "adam-amsgrad": ("AdamOptimizer", dict(beta2=0.9, epsilon=1e-3, weight_decay=0.05, amsgrad=True)),
    "adamw": ("AdamWOptimizer", dict(weight_decay=0.1)),
    "adagrad": ("AdaGradOptimizer", dict(lr_decay=0.1, initial_accumulator_value=0.05, weight_decay=0.01)),
    "rmsprop": ("RMSPropOptimizer", dict(alpha=0.9, centered=True, momentum=0.5, weight_decay=0.01)),
}


def network(float64: bool = True) -> d5.Network:
    net = d5.models.mlp((5,), hidden=(4,), num_classes=3, seed=0)
    return as_float64(net) if float64 else net


def batches(count: int, nan_at: int | None = None, dtype=np.float64) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    out = [{"input": rng.standard_normal((8, 5)).astype(dtype), "label": rng.integers(0, 3, 8)}
           for _ in range(count)]
    if nan_at is not None:
        out[nan_at]["input"][:] = np.nan
    return out


def parameters(executor) -> dict[str, np.ndarray]:
    return {name: executor.network.fetch_tensor(name).copy() for name in executor.network.get_params()}


def counted(optimizer) -> list[dict[str, bool]]:
    """The structures traced from now on: ``apply`` runs in Python only while a traced function is built."""
    traces: list[dict[str, bool]] = []
    apply = optimizer.apply

    def counting(structure, *args):
        traces.append(dict(structure))
        return apply(structure, *args)

    optimizer.apply = counting
    return traces


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_fused_step_is_the_unfused_step(case):
    name, kwargs = CASES[case]
    runs = []
    for hooked in (False, True):
        executor = d5tf.from_model(network())
        optimizer = getattr(d5tf, name)(executor, lr=0.05, **kwargs)
        if hooked:  # what DataParallel sets: the pass, the hook, then the update as a function of its own
            optimizer.gradient_hook = lambda: None
        losses = [float(optimizer.step(batch)["loss"]) for batch in batches(6)]
        runs.append((losses, parameters(executor), optimizer.native_state_dict()))
    (losses, params, state), (hooked_losses, hooked_params, hooked_state) = runs
    np.testing.assert_allclose(losses, hooked_losses, rtol=1e-12)
    for param, value in params.items():
        np.testing.assert_allclose(value, hooked_params[param], rtol=1e-12, atol=1e-15, err_msg=param)
    assert state["flags"] == hooked_state["flags"]
    assert not np.allclose(params["fc2.weight"], network().params["fc2.weight"])


@pytest.mark.parametrize("hooked", [False, True])
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_nan_loss_raises_divergence_error_and_changes_nothing(case, hooked):
    name, kwargs = CASES[case]
    executor = d5tf.from_model(network())
    optimizer = getattr(d5tf, name)(executor, lr=0.05, **kwargs)
    if hooked:
        optimizer.gradient_hook = lambda: None
    data = batches(4, nan_at=2)
    for batch in data[:2]:
        optimizer.step(batch)
    before, state = parameters(executor), optimizer.native_state_dict()
    with pytest.raises(DivergenceError, match="at step 3"):
        optimizer.step(data[2])
    for param, value in parameters(executor).items():
        np.testing.assert_array_equal(value, before[param], err_msg=param)
    after = optimizer.native_state_dict()
    assert after["flags"] == state["flags"]
    for param, slots in state["state"].items():
        for slot, value in slots.items():
            np.testing.assert_array_equal(after["state"][param][slot], value, err_msg=f"{param}.{slot}")
    optimizer.step(data[3])  # training goes on
    assert not np.array_equal(parameters(executor)["fc2.weight"], before["fc2.weight"])


def test_without_the_divergence_check_a_nan_step_updates_as_the_unfused_step_does():
    results = []
    for hooked in (False, True):
        executor = d5tf.from_model(network())
        optimizer = d5tf.MomentumOptimizer(executor, lr=0.05, check_divergence=False)
        if hooked:
            optimizer.gradient_hook = lambda: None
        for batch in batches(3, nan_at=1):
            optimizer.step(batch)
        results.append(parameters(executor))
    assert np.isnan(results[0]["fc2.weight"]).all()
    for param, value in results[0].items():
        np.testing.assert_array_equal(value, results[1][param], err_msg=param)


@pytest.mark.parametrize("name, kwargs", [("MomentumOptimizer", dict(momentum=0.9)),
                                          ("AdamOptimizer", dict(weight_decay=0.01)),
                                          ("AdaGradOptimizer", dict(lr_decay=0.1))])
@pytest.mark.parametrize("mode", ["set", "schedule"])
def test_a_new_learning_rate_every_step_does_not_retrace(name, kwargs, mode):
    executor = d5tf.from_model(network(float64=False))
    lr = CosineSchedule(0.1, period=3, min_lr=0.01, restarts=True) if mode == "schedule" else 0.1
    optimizer = getattr(d5tf, name)(executor, lr=lr, **kwargs)
    traces = counted(optimizer)
    for step, batch in enumerate(batches(8, dtype=np.float32)):
        if mode == "set":
            optimizer.lr = 0.1 / (step + 1)
            optimizer.weight_decay = 0.01 * (step + 1)  # a new nonzero value: the same structure
        optimizer.step(batch)
        assert float(optimizer.native.hyper["lr"].numpy()) == optimizer.lr
    assert len(traces) == 1


def test_turning_clipping_on_traces_once_and_off_again_reuses_the_first_trace():
    executor = d5tf.from_model(network(float64=False))
    optimizer = d5tf.MomentumOptimizer(executor, lr=0.1)
    traces = counted(optimizer)
    data = batches(9, dtype=np.float32)
    for batch in data[:3]:
        optimizer.step(batch)
    assert len(traces) == 1 and not traces[0]["clip_norm"]
    optimizer.clip_norm = 0.5
    for index, batch in enumerate(data[3:6]):
        optimizer.clip_norm = 0.5 / (index + 1)  # new values of the same structure
        optimizer.step(batch)
    assert len(traces) == 2 and traces[1]["clip_norm"]
    optimizer.clip_norm = None
    for batch in data[6:]:
        optimizer.step(batch)
    assert len(traces) == 2


def test_the_dampened_buffer_traces_its_first_step_apart():
    executor = d5tf.from_model(network(float64=False))
    optimizer = d5tf.MomentumOptimizer(executor, lr=0.1, momentum=0.9, dampening=0.5)
    traces = counted(optimizer)
    for batch in batches(5, dtype=np.float32):
        optimizer.step(batch)
    assert [trace["started"] for trace in traces] == [False, True]
    assert optimizer.native_state_dict()["flags"] == {"velocity": True}


def _op_types(optimizer) -> set[str]:
    entry = optimizer._entry()
    specs = [tf.TensorSpec(param.shape, param.dtype) for param in optimizer.native.params]
    extra = [tf.TensorSpec((), tf.float64)] if entry.needs_step else []
    function = tf.function(lambda grads, *args: entry.update(grads, *args), autograph=False)
    graph = function.get_concrete_function(specs, *extra).graph
    return {op.type for op in graph.get_operations()}


def test_an_update_computes_only_what_its_structure_needs():
    optimizer = d5tf.MomentumOptimizer(d5tf.from_model(network(float64=False)), lr=0.1, momentum=0.9)
    plain = _op_types(optimizer)
    assert "ResourceApplyMomentum" in plain
    assert not plain & {"If", "StatelessIf", "Select", "SelectV2", "Sqrt", "ClipByValue", "Minimum", "Mul"}
    optimizer.clip_norm, optimizer.weight_decay = 1.0, 0.01
    clipped = _op_types(optimizer)
    assert {"Sqrt", "Minimum", "Mul"} <= clipped and not clipped & {"If", "StatelessIf", "Select", "SelectV2"}
    adam = d5tf.AdamOptimizer(d5tf.from_model(network(float64=False)))
    assert not _op_types(adam) & {"If", "StatelessIf", "Select", "SelectV2", "Maximum"}  # no AMSGrad, no flags


@pytest.mark.parametrize("case", ["momentum", "momentum-nesterov-clip", "sgd", "rmsprop"])
def test_the_fused_kernels_compute_what_the_plain_operations_do(case, monkeypatch):
    """Where TensorFlow's ResourceApply* kernels lack a dtype (bfloat16), the update is plain operations."""
    name, kwargs = CASES[case]
    runs = []
    for fused in (True, False):
        if not fused:
            monkeypatch.setattr(optimizers, "_FUSED", frozenset())
        executor = d5tf.from_model(network())
        optimizer = getattr(d5tf, name)(executor, lr=0.05, **kwargs)
        types = _op_types(optimizer)
        assert any(kind.startswith("ResourceApply") for kind in types) == fused
        for batch in batches(5):
            optimizer.step(batch)
        runs.append(parameters(executor))
    for param, value in runs[0].items():
        np.testing.assert_allclose(value, runs[1][param], rtol=1e-12, atol=1e-15, err_msg=param)
