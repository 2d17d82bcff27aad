"""Recipes: component validation, the seeds' spellings, overrides and the exit code of a recipe script."""
import errno
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import d5
from d5.errors import RecipeError

ROOT = Path(__file__).resolve().parents[1]


def separable_data(n=512, seed=0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n).astype(np.int64)
    x = rng.normal(size=(n, 1, 28, 28)).astype(np.float32)
    x[y == 1, :, :14] += 1.0  # class 1 has a brighter top half
    return lambda: (d5.NumpyDataset(x[: n // 2], y[: n // 2]), d5.NumpyDataset(x[n // 2:], y[n // 2:]))


FIXED = {"model": "lenet5", "model_kwarg": {"num_classes": 2}, "epochs": 2}


def mutable(**extra):
    return {"dataset": separable_data(), "batch_size": 32, "optimizer": d5.MomentumOptimizer,
            "optimizer_args": (0.05, 0.9), **extra}


def test_recipe_meets_and_misses_thresholds():
    assert d5.run_recipe(FIXED, mutable(), [(d5.TestAccuracy(), 70.0)], argv=[], progress=False, verbose=False)
    assert not d5.run_recipe(FIXED, mutable(), [(d5.TestAccuracy(), 100.1)], argv=[], progress=False, verbose=False)


def test_overlapping_components_are_rejected():
    with pytest.raises(RecipeError, match="both FIXED and MUTABLE"):
        d5.run_recipe(FIXED, mutable(epochs=1), [], argv=[])
    # The seeds' spelling `_kwarg` and `_kwargs` name the same component.
    with pytest.raises(RecipeError, match="both"):
        d5.run_recipe(FIXED, mutable(model_kwargs={"num_classes": 2}), [], argv=[])


def test_unknown_component_and_bad_metric_are_rejected():
    with pytest.raises(RecipeError, match="unknown component 'optimiser'"):
        d5.run_recipe(FIXED, {"optimiser": d5.GradientDescent}, [], argv=[])
    with pytest.raises(RecipeError, match="TrainingMetric"):
        d5.run_recipe(FIXED, mutable(), [("accuracy", 90)], argv=[])
    with pytest.raises(RecipeError, match="--epochs must be positive"):
        d5.run_recipe(FIXED, mutable(), [], argv=["--epochs", "0"])


def test_overrides_change_the_run_and_are_reported(capsys, tmp_path):
    out = tmp_path / "run.json"
    metric = d5.WallclockTime()
    d5.run_recipe(FIXED, mutable(), [(metric, None)], argv=["--epochs", "1", "--subset", "64", "--json", str(out)],
                  progress=False)
    assert len(metric.step_times) == 64 // 32  # one epoch of 64 examples at batch 32
    verdict = capsys.readouterr().out.splitlines()[-1]
    assert verdict == ("recipe MODIFIED by --epochs 1 --subset 64: ran to the end, not a valid benchmark result; "
                       "every metric met (exit status 0)")
    result = d5.bench.results.read_result(out)
    assert result["extra"]["overrides"] == {"epochs": 1, "subset": 64}


def test_recipe_script_exit_code_smoke_run():
    pytest.importorskip("d5._C")
    try:
        d5.datasets.load_fashion_mnist(download=False)
    except d5.errors.DatasetError:
        pytest.skip("Fashion-MNIST is not installed")
    script = ROOT / "recipes" / "fashion_mnist_lenet.py"
    # A 500-image, one-epoch smoke run cannot reach 87%: the recipe must say so with exit code 1, and say that
    # it is a modified run, not a failed benchmark.
    result = subprocess.run([sys.executable, str(script), "--epochs", "1", "--subset", "500"],
                            capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert result.returncode == 1, result.stderr
    assert "TestAccuracy" in result.stdout and "recipe FAILED" not in result.stdout
    assert "recipe MODIFIED by --epochs 1 --subset 500: ran to the end, not a valid benchmark result; missed " \
           "TestAccuracy (exit status 1)" in result.stdout


# --- components and overrides of the wrong type: a RecipeError before anything is built -------------------

def spy_dataset():
    """A dataset component that records whether it was called (building it starts the run)."""
    calls = []

    def build():
        calls.append(1)
        return separable_data(64)()
    return build, calls


@pytest.mark.parametrize("fixed, mutable_, expected", [
    ({**FIXED, "epochs": "two"}, {}, "component 'epochs' must be an int >= 1, got 'two'"),
    ({**FIXED, "epochs": 1.5}, {}, "component 'epochs' must be an int >= 1, got 1.5"),
    ({**FIXED, "epochs": True}, {}, "component 'epochs' must be an int >= 1, got True"),
    ({**FIXED, "epochs": 0}, {}, "component 'epochs' must be an int >= 1, got 0"),
    (FIXED, {"batch_size": 0}, "component 'batch_size' must be an int >= 1, got 0"),
    (FIXED, {"seed": -1}, "component 'seed' must be an int >= 0, got -1"),
    (FIXED, {"epochs_args": (2,)}, "component 'epochs' is a number, not a builder"),
    ([("model", "lenet5")], {}, "FIXED must be a dict of components"),
    (FIXED, None, "MUTABLE must be a dict of components"),
    ({**FIXED, 3: "x"}, {}, "FIXED keys must be component names (str), got 3"),
    (FIXED, {"optimizer": d5.GradientDescent, "optimizer_args": 0.1}, "'optimizer_args' must be a tuple"),
    (FIXED, {"optimizer": d5.GradientDescent, "optimizer_kwargs": [("lr", 0.1)]}, "'optimizer_kwargs' must be a dict"),
    (FIXED, {"events": d5.StopAfter(steps=1)}, "component 'events' must be a list of d5 TrainerEvents"),
], ids=lambda value: None)
def test_components_of_the_wrong_type_are_refused_before_anything_is_built(fixed, mutable_, expected):
    dataset, calls = spy_dataset()
    table = mutable_ if mutable_ is None else {"dataset": dataset, **mutable_}
    with pytest.raises(RecipeError) as info:
        d5.run_recipe(fixed, table, [], argv=[], progress=False, verbose=False)
    assert expected in str(info.value)
    assert not calls


@pytest.mark.parametrize("returns, expected", [
    (lambda: 5, "got int 5"),
    (lambda: (d5.NumpyDataset(np.zeros((4, 1)), np.zeros(4)),), "got a tuple of 1 (NumpyDataset)"),
    (lambda: (1, 2), "got a tuple of 2 (int, int)"),
    (lambda: None, "got NoneType None"),
], ids=["number", "one dataset", "two numbers", "None"])
def test_a_dataset_function_must_return_a_train_test_pair_of_datasets(returns, expected):
    with pytest.raises(RecipeError) as info:
        d5.run_recipe(FIXED, {"dataset": returns}, [], argv=[], progress=False, verbose=False)
    assert "the 'dataset' component must give a (train, test) pair of d5 Datasets" in str(info.value)
    assert expected in str(info.value)


@pytest.mark.parametrize("mutable_, expected", [
    ({"model": lambda **kwargs: 5}, "the 'model' builder <lambda> must return a d5.Network, got int"),
    ({"executor": lambda network: "executor"}, "the 'executor' component must return a d5.GraphExecutor"),
    ({"optimizer": lambda executor, *args: 0.1}, "the 'optimizer' component must build a d5 Optimizer"),
], ids=["model", "executor", "optimizer"])
def test_builders_returning_the_wrong_kind_of_object_are_named(mutable_, expected):
    fixed = {key: value for key, value in FIXED.items() if key not in mutable_}
    with pytest.raises(RecipeError) as info:
        d5.run_recipe(fixed, {**mutable(), **mutable_}, [], argv=[], progress=False, verbose=False)
    assert expected in str(info.value)


@pytest.mark.parametrize("metrics, expected", [
    (None, "METRICS must be a list of (d5 TrainingMetric, threshold) pairs, got NoneType"),
    ([d5.TestAccuracy()], "METRICS entries are (d5 TrainingMetric, threshold) pairs"),
    ([(d5.TestAccuracy(), "high")], "threshold of TestAccuracy must be a number or None (report only), got 'high'"),
], ids=["None", "bare metric", "string threshold"])
def test_metrics_of_the_wrong_shape_are_refused(metrics, expected):
    with pytest.raises(RecipeError) as info:
        d5.run_recipe(FIXED, mutable(), metrics, argv=[], progress=False, verbose=False)
    assert expected in str(info.value)


@pytest.mark.parametrize("argv, expected", [
    (["--seed", "-1"], "--seed must be >= 0, got -1"),
    (["--epochs", "0"], "--epochs must be positive, got 0"),
    (["--batch-size", "0"], "--batch-size must be positive, got 0"),
    (["--subset", "0"], "--subset must be positive, got 0"),
    (["--subset", "-5"], "--subset must be positive, got -5"),
    (["--epochs", "two"], "argument --epochs: invalid int value: 'two'"),
    (["--seed"], "argument --seed: expected one argument"),
], ids=lambda value: None)
def test_meaningless_overrides_are_refused_with_a_recipe_error(argv, expected):
    dataset, calls = spy_dataset()
    with pytest.raises(RecipeError) as info:
        d5.run_recipe(FIXED, {"dataset": dataset}, [], argv=argv, progress=False, verbose=False)
    assert expected in str(info.value)
    assert not calls


@pytest.mark.parametrize("make_path, expected", [
    (lambda tmp: tmp, "is a directory"),
    (lambda tmp: str(tmp / "out") + "/", "is a directory"),
    (lambda tmp: tmp / "a_file" / "run.json", "is a file, not a directory"),
    (lambda tmp: tmp / "a_file" / "deeper" / "run.json", "is a file, not a directory"),
], ids=["directory", "trailing slash", "under a file", "deep under a file"])
def test_an_unwritable_json_path_is_refused_before_training_starts(tmp_path, make_path, expected):
    (tmp_path / "a_file").write_text("not a directory")
    dataset, calls = spy_dataset()
    path = make_path(tmp_path)
    with pytest.raises(d5.errors.D5Error) as info:
        d5.run_recipe(FIXED, {"dataset": dataset}, [], argv=["--json", str(path)], progress=False, verbose=False)
    assert "--json path" in str(info.value) and expected in str(info.value)
    assert not calls  # refused in a second, not after the (lost) training run
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]  # and nothing left behind


def test_the_json_result_is_written_atomically_into_a_new_directory(tmp_path):
    out = tmp_path / "results" / "nested" / "run.json"
    d5.run_recipe(FIXED, mutable(), [(d5.TestAccuracy(), None)], argv=["--epochs", "1", "--subset", "64",
                                                                        "--json", str(out)], progress=False,
                  verbose=False)
    assert d5.bench.results.read_result(out)["extra"]["epochs"] == 1
    assert [p.name for p in out.parent.iterdir()] == ["run.json"]  # no temporary or probe files


def test_cli_reports_a_recipe_error_with_exit_code_2_and_restores_argv(tmp_path, capsys):
    from d5.cli import main

    script = tmp_path / "tiny_recipe.py"
    script.write_text("import d5\nd5.run_recipe({'model': 'lenet5', 'dataset': lambda: 1}, {}, [])\n")
    argv = list(sys.argv)
    assert main(["recipe", str(script), "--seed", "-1"]) == 2
    assert "d5: error: --seed must be >= 0, got -1" in capsys.readouterr().err
    assert sys.argv == argv
    script.write_text("import sys\nsys.exit('the recipe gave up')\n")
    assert main(["recipe", str(script)]) == 1  # sys.exit(message): printed, status 1, as Python does
    assert "the recipe gave up" in capsys.readouterr().err


def test_a_json_directory_without_write_permission_or_on_a_read_only_mount_is_refused(tmp_path, monkeypatch):
    # Tests may run as root, which ignores permission bits: simulate what a normal user meets.
    import errno

    import d5.io_utils

    dataset, calls = spy_dataset()
    monkeypatch.setattr(d5.io_utils.os, "access", lambda path, mode: False)
    with pytest.raises(d5.errors.D5Error, match="directory .* is not writable; choose a path you may write to"):
        d5.run_recipe(FIXED, {"dataset": dataset}, [], argv=["--json", str(tmp_path / "new" / "run.json")])
    monkeypatch.undo()

    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")
    monkeypatch.setattr(d5.io_utils.tempfile, "mkstemp", read_only)
    with pytest.raises(d5.errors.D5Error, match="cannot be written: Read-only file system"):
        d5.run_recipe(FIXED, {"dataset": dataset}, [], argv=["--json", str(tmp_path / "run.json")])
    assert not calls and list(tmp_path.iterdir()) == []


# --- --device, --framework with executor keywords, transforms through sampler kwargs ----------------------

def spy_executor(seen):
    """An executor factory outside d5.frameworks that records the device it is given."""
    def build(network, device=None):
        seen.append(device)
        return d5.frameworks.reference.from_model(network)
    return build


@pytest.mark.parametrize("argv, expected", [
    (["--device", "cpu"], d5.CPUDevice()),
    (["--device", "gpu"], d5.GPUDevice(0)),
    (["--device", "gpu:2"], d5.GPUDevice(2)),
    (["--device", "cuda:1"], d5.GPUDevice(1)),
    ([], d5.GPUDevice(3)),  # no override: the recipe's own device
], ids=["cpu", "gpu", "gpu:2", "cuda:1", "none"])
def test_device_override_replaces_the_executor_device(argv, expected, tmp_path):
    seen, out = [], tmp_path / "run.json"
    d5.run_recipe(FIXED, mutable(executor=spy_executor(seen), executor_kwargs={"device": d5.GPUDevice(3)}),
                  [(d5.TestAccuracy(), None)], argv=[*argv, "--epochs", "1", "--subset", "32", "--json", str(out)],
                  progress=False, verbose=False)
    assert seen == [expected]
    extra = d5.bench.results.read_result(out)["extra"]
    assert extra["device"] == repr(expected)
    assert extra["overrides"] == {"epochs": 1, "subset": 32}  # the device is mutable: not a modification


def test_device_best_asks_best_device(monkeypatch):
    from d5 import devices

    seen, asked = [], []
    for answer in (d5.GPUDevice(0), d5.CPUDevice()):  # as on a machine with a GPU, then without
        monkeypatch.setattr(devices, "best_device", lambda framework=None, answer=answer: asked.append(framework)
                            or answer)
        d5.run_recipe(FIXED, mutable(executor=spy_executor(seen)), [], argv=["--device", "best", "--subset", "32"],
                      progress=False, verbose=False)
    assert seen == [d5.GPUDevice(0), d5.CPUDevice()]
    assert asked == [None, None]  # an executor outside d5.frameworks: best_device over every framework


@pytest.mark.parametrize("mutable_, argv, expected", [
    ({"executor": lambda network: d5.frameworks.reference.from_model(network)}, ["--device", "cpu"],
     "the executor <lambda> takes no 'device' keyword"),
    ({}, ["--device", "gpu"], "--device GPUDevice(0): framework 'reference' runs on the CPU only"),
    ({}, ["--device", "tpu"], "--device must be cpu, gpu, gpu:N (N = 0, 1, ...) or best; got 'tpu'"),
    ({}, ["--device", "gpu:-1"], "got 'gpu:-1'"),
    ({"executor_kwargs": {"compile": True}}, ["--framework", "reference"],
     "--framework reference: its from_model takes no 'compile'"),
], ids=["no device keyword", "gpu on reference", "unknown device", "negative index", "foreign keyword"])
def test_device_and_framework_overrides_are_refused_before_anything_is_built(mutable_, argv, expected):
    dataset, calls = spy_dataset()
    with pytest.raises(RecipeError) as info:
        d5.run_recipe(FIXED, {"dataset": dataset, **mutable_}, [], argv=argv, progress=False, verbose=False)
    assert expected in str(info.value)
    assert not calls


def test_framework_reference_runs_a_gpu_recipe_on_the_cpu_and_says_so(capsys):
    # What `--framework reference` meets on a GPU machine, where the recipe's d5.best_device() is a GPU.
    ok = d5.run_recipe(FIXED, mutable(executor_kwargs={"device": d5.GPUDevice(0)}), [(d5.TestAccuracy(), None)],
                       argv=["--framework", "reference", "--subset", "32", "--epochs", "1"], progress=False)
    assert ok
    assert "note: --framework reference runs on the CPU only; using CPUDevice() instead of the recipe's " \
           "GPUDevice(0)" in capsys.readouterr().out


def test_framework_pytorch_keeps_the_recipe_device():
    pytest.importorskip("torch")
    import torch

    recipe = mutable(executor_kwargs={"device": d5.CPUDevice()})
    assert d5.run_recipe(FIXED, recipe, [], argv=["--framework", "pytorch", "--subset", "32", "--epochs", "1"],
                         progress=False, verbose=False)
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the refusal below needs one that lacks it")
    # The GPU device reaches the PyTorch executor, which refuses a GPU this machine lacks.
    with pytest.raises(d5.errors.D5Error, match=r"GPUDevice\(0\): this machine has 0 "):
        d5.run_recipe(FIXED, mutable(executor_kwargs={"device": d5.GPUDevice(0)}), [],
                      argv=["--framework", "pytorch", "--subset", "32"], progress=False, verbose=False)


def test_a_transform_reaches_the_train_sampler_through_its_kwargs():
    calls = []

    def recording(images, rng):
        calls.append((images.shape, type(rng).__name__))
        return d5.RandomHorizontalFlip()(images, rng)

    d5.run_recipe(FIXED, mutable(train_sampler_kwargs={"transform": recording}), [(d5.TestAccuracy(), None)],
                  argv=["--subset", "64", "--epochs", "1"], progress=False, verbose=False)
    # Two training batches of 32, each transformed once with a numpy Generator; the test set is not.
    assert calls == [((32, 1, 28, 28), "Generator")] * 2


# --- --lr, --threads, the metric rows and the recorded configuration (d5.recipe_args, d5.recipe_record) ---------

class LearningRateProbe(d5.TrainerEvent):
    """Records the optimizer's learning rate at the start of training and of each epoch (after schedules)."""

    def __init__(self):
        self.seen = []

    def before_training(self, trainer):
        self.seen.append(("start", trainer.optimizer.lr))

    def before_epoch(self, trainer, epoch):
        self.seen.append((epoch, trainer.optimizer.lr))


@pytest.mark.parametrize("optimizer_parts, expected", [
    ({"optimizer_args": (0.05, 0.9)}, 0.2),                                  # lr positional
    ({"optimizer_args": (), "optimizer_kwargs": {"lr": 0.05, "momentum": 0.9}}, 0.2),  # lr as keyword
    ({"optimizer_args": ()}, 0.2),                                          # the optimizer's default lr
], ids=["positional", "keyword", "default"])
def test_lr_override_sets_the_optimizer_learning_rate_wherever_the_recipe_gives_it(optimizer_parts, expected):
    probe = LearningRateProbe()
    recipe = {**mutable(), **optimizer_parts, "events": [probe]}
    d5.run_recipe(FIXED, recipe, [], argv=["--lr", "0.2", "--epochs", "1", "--subset", "32"], progress=False,
                  verbose=False)
    assert probe.seen == [("start", pytest.approx(expected)), (0, pytest.approx(expected))]


def test_lr_override_scales_a_learning_rate_schedule_keeping_its_shape():
    schedule = d5.LearningRateSchedule(lambda epoch: 0.05 * 0.5 ** epoch)
    probe = LearningRateProbe()
    d5.run_recipe({**FIXED, "epochs": 3}, {**mutable(), "events": [schedule, probe]}, [],
                  argv=["--lr", "0.2", "--subset", "32"], progress=False, verbose=False)
    # The oracle: the recipe's schedule times 0.2 / 0.05.
    assert [lr for epoch, lr in probe.seen[1:]] == pytest.approx([0.2, 0.1, 0.05])
    assert schedule.history == []  # the recipe's own event was not used (nor changed)


@pytest.mark.parametrize("recipe, expected", [
    ({"optimizer": lambda executor: d5.GradientDescent(executor, 0.1), "optimizer_args": ()},
     "--lr: the optimizer <lambda> takes no 'lr'"),
    ({"optimizer_args": (), "optimizer_kwargs": {"lr": lambda step: 0.1}},
     "--lr: the recipe's learning rate is a schedule"),
    ({"optimizer_args": (0, 0.9), "events": [d5.LearningRateSchedule(lambda e: 0.1)]},
     "the recipe's LearningRateSchedule is relative to the optimizer's base learning rate, which is 0 here"),
], ids=["no lr", "schedule", "zero base"])
def test_lr_override_is_refused_where_it_has_no_meaning(recipe, expected):
    dataset, calls = spy_dataset()
    with pytest.raises(RecipeError) as info:
        d5.run_recipe(FIXED, {**mutable(), "dataset": dataset, **recipe}, [], argv=["--lr", "0.1"], progress=False,
                      verbose=False)
    assert expected in str(info.value) and not calls


@pytest.mark.parametrize("argv, expected", [
    (["--lr", "0"], "--lr must be a positive finite number, got 0.0"),
    (["--lr", "inf"], "--lr must be a positive finite number, got inf"),
    (["--lr", "fast"], "argument --lr: invalid float value: 'fast'"),
    (["--threads", "0"], "--threads must be positive, got 0"),
    (["--framework", "caffe"], "--framework must be one of reference, pytorch, tensorflow, mxnet; got 'caffe'"),
], ids=lambda value: None)
def test_new_overrides_with_meaningless_values_are_refused(argv, expected):
    dataset, calls = spy_dataset()
    with pytest.raises(RecipeError) as info:
        d5.run_recipe(FIXED, {"dataset": dataset}, [], argv=argv, progress=False, verbose=False)
    assert expected in str(info.value) and not calls


def test_threads_limits_the_pools_during_training_only():
    from threadpoolctl import threadpool_info

    class PoolProbe(d5.TrainerEvent):
        def before_training(self, trainer):
            self.pools = {pool["num_threads"] for pool in threadpool_info()}
            self.reference = d5.frameworks.reference.num_threads()

    pytest.importorskip("d5._C")
    probe = PoolProbe()
    before = ([pool["num_threads"] for pool in threadpool_info()], d5.frameworks.reference.num_threads())
    d5.run_recipe(FIXED, {**mutable(), "events": [probe]}, [], argv=["--threads", "1", "--subset", "32", "--epochs",
                                                                     "1"], progress=False, verbose=False)
    assert probe.pools == {1} and probe.reference == 1
    after = [pool["num_threads"] for pool in threadpool_info()][:len(before[0])]
    assert (after, d5.frameworks.reference.num_threads()) == before


def test_metric_rows_carry_the_direction_and_the_step_time_summary(tmp_path):
    from d5.bench.stats import summarize

    wallclock, out = d5.WallclockTime(), tmp_path / "run.json"
    d5.run_recipe(FIXED, mutable(), [(d5.TestAccuracy(), None), (wallclock, None)],
                  argv=["--epochs", "1", "--subset", "64", "--json", str(out)], progress=False, verbose=False)
    figures = d5.bench.results.read_result(out)["figures"]
    assert figures["TestAccuracy"]["higher_is_better"] is True and figures["WallclockTime"]["higher_is_better"] is False
    assert figures["WallclockTime"]["step_time"] == summarize(wallclock.step_times).as_dict()
    assert "step_time" not in figures["TestAccuracy"]


def test_describe_gives_importable_names_attributes_and_digests():
    from d5.recipe_record import describe

    assert describe(d5.ShuffleSampler) == {"callable": "d5.training.sampler.ShuffleSampler"}
    assert describe(lambda: 0)["importable"] is False
    crop = describe(d5.RandomCrop(32, padding=4))
    assert crop["object"] == "d5.training.transforms.RandomCrop"
    assert crop["attributes"]["size"] == [32, 32] and crop["attributes"]["padding"] == 4
    normalize = describe(d5.Normalize([0.5], [0.25]))["attributes"]
    assert normalize["mean"] == {"array": [0.5], "dtype": "float64"}
    big = np.arange(1000, dtype=np.float32)
    import hashlib

    digest = hashlib.sha256(big.tobytes()).hexdigest()
    assert describe(big) == {"array_shape": [1000], "dtype": "float32", "sha256": digest}
    assert describe(d5.GPUDevice(2))["repr"] == "GPUDevice(2)"
    variant = describe(d5.models.MODELS["wrn28_10"])
    assert variant == {"callable": "d5.models.resnet.wide_resnet", "args": [28, 10], "kwargs": {}}
    assert " at 0x" not in str(describe(object()))  # no memory addresses: descriptions compare across runs


@pytest.mark.parametrize("fixed, mutable_, argv, expected", [
    ({**FIXED, "dataset": "imagenet"}, {}, [], "unknown dataset 'imagenet'; d5.datasets has "),
    ({**FIXED, "model": "lenet7"}, {}, [], "unknown model 'lenet7'; the zoo has "),
    (FIXED, {"optimizer": "SGD"}, [], "unknown optimizer 'SGD'; framework 'reference' has AdaGradOptimizer, "
                                      "AdamOptimizer, AdamWOptimizer, GradientDescent, MomentumOptimizer"),
    (FIXED, {"optimizer": d5.ThreeStepOptimizer}, ["--framework", "reference"],
     "framework 'reference' has no optimizer named 'ThreeStepOptimizer'; it has AdaGradOptimizer"),
], ids=["dataset", "model", "optimizer", "framework optimizer"])
def test_unknown_names_are_refused_with_the_valid_ones_before_anything_is_built(fixed, mutable_, argv, expected):
    dataset, calls = spy_dataset()
    table = {"dataset": dataset, **mutable_} if "dataset" not in fixed else mutable_
    with pytest.raises(RecipeError) as info:
        d5.run_recipe(fixed, table, [], argv=argv, progress=False, verbose=False)
    assert expected in str(info.value)
    assert not calls
    if "dataset" in fixed:
        assert "mnist" in str(info.value) and "cifar10" in str(info.value)


def test_an_optimizer_named_by_a_string_is_the_framework_s_class(tmp_path):
    out = tmp_path / "run.json"
    assert d5.run_recipe(FIXED, {**mutable(), "optimizer": "MomentumOptimizer"}, [(d5.TestAccuracy(), 70.0)],
                         argv=["--json", str(out)], progress=False, verbose=False)
    components = d5.bench.results.read_result(out)["extra"]["recipe"]["components"]
    assert components["optimizer"] == {"callable": "d5.training.optimizers.MomentumOptimizer"}


# --- a recipe run as a script: its verdict, its exit status, d5 errors as `d5 run` reports them ---------------

TINY = ROOT / "tests" / "recipes" / "tiny_mlp_recipe.py"


def python(*args):
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=300, cwd=ROOT)


@pytest.mark.parametrize("overrides, status, last_line", [
    ([], 0, "recipe PASSED: every metric met"),
    (["--batch-size", "16"], 0,
     "recipe MODIFIED by --batch-size 16: ran to the end, not a valid benchmark result; every metric met "
     "(exit status 0)"),
    (["--epochs", "1", "--subset", "64"], 1,
     "recipe MODIFIED by --epochs 1 --subset 64: ran to the end, not a valid benchmark result; missed "
     "TestAccuracy (exit status 1)"),
], ids=["benchmark", "modified, met", "smoke test, missed"])
def test_a_recipe_script_ends_with_its_verdict_and_exit_status(overrides, status, last_line):
    result = python(str(TINY), *overrides)
    assert result.returncode == status, result.stderr
    assert result.stdout.splitlines()[-1] == last_line


@pytest.mark.parametrize("overrides, message", [
    (["--bogus", "1"], "unknown flag --bogus; a recipe takes --epochs, --batch-size, --framework, --subset"),
    (["--batch_size", "8"], "unknown flag --batch_size (did you mean --batch-size?); a recipe takes --epochs"),
    (["--device", "gpu"], "--device GPUDevice(0): framework 'reference' runs on the CPU only"),
], ids=["unknown flag", "misspelt flag", "no GPU framework"])
def test_a_recipe_script_reports_a_d5_error_exactly_as_d5_run_does(overrides, message):
    script = python(str(TINY), *overrides)
    via_d5_run = python("-m", "d5.cli", "run", str(TINY), *overrides)
    assert script.returncode == via_d5_run.returncode == 2
    assert script.stderr == via_d5_run.stderr  # one line, no traceback
    assert script.stderr.startswith(f"d5: error: {message}") and script.stderr.count("\n") == 1
    assert script.stdout == ""  # refused before training


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc, in which no directory can be created")
def test_a_json_directory_that_cannot_be_created_is_one_d5_error_line():
    script = python(str(TINY), "--json", "/proc/d5probe/run.json")
    assert script.returncode == 2 and script.stdout == ""
    assert script.stderr.startswith("d5: error: --json path '/proc/d5probe/run.json' cannot be written: directory ")
    assert "choose a path" in script.stderr and script.stderr.count("\n") == 1


def test_run_recipe_called_by_a_program_raises_and_ignores_that_program_s_command_line(monkeypatch):
    # pytest, a notebook kernel or the user's own program has flags the recipe does not know: not the recipe's.
    monkeypatch.setattr(sys, "argv", ["pytest", "--bogus", "-x"])
    assert d5.run_recipe(FIXED, mutable(), [(d5.TestAccuracy(), 70.0)], progress=False, verbose=False)
    with pytest.raises(RecipeError, match="unknown flag --bogus"):  # a program gets the exception, not an exit
        d5.run_recipe(FIXED, mutable(), [], argv=["--bogus"], progress=False, verbose=False)


@pytest.mark.parametrize("argv, expected", [
    (["--bogus", "1"], "unknown flag --bogus; a recipe takes --epochs, --batch-size, --framework, --subset, --seed, "
                       "--device, --lr, --threads, --scheme, --compression, --json, --checkpoint, --checkpoint-every, "
                       "--resume, --baseline-throughput, --baseline (see --help)"),
    (["--epcohs", "2"], "unknown flag --epcohs (did you mean --epochs?); "),
    (["--batch_size=8"], "unknown flag --batch_size (did you mean --batch-size?); "),
    (["--epochs", "1", "2"], "unexpected argument '2', which follows no flag that takes a value; a recipe takes "),
], ids=["unknown", "misspelt", "underscore with =", "stray value"])
def test_unknown_flags_are_refused_with_the_known_ones_before_anything_is_built(argv, expected):
    dataset, calls = spy_dataset()
    with pytest.raises(RecipeError) as info:
        d5.run_recipe(FIXED, {"dataset": dataset}, [], argv=argv, progress=False, verbose=False)
    assert str(info.value).startswith(expected)
    assert not calls


def test_a_unique_prefix_of_a_flag_is_that_flag():
    from d5.recipe_args import parse_overrides

    assert parse_overrides(["--epoch", "2"]).epochs == 2  # argparse's abbreviation: not an unknown flag


# --- output paths that cannot be written: a d5 error (and an OSError), never a raw one, nothing left behind ----

def test_atomic_write_into_a_directory_that_cannot_be_created_says_so(tmp_path):
    from d5.errors import OutputPathError
    from d5.io_utils import atomic_write

    (tmp_path / "a_file").write_text("not a directory")
    with pytest.raises(OutputPathError) as info:
        with atomic_write(tmp_path / "a_file" / "sub" / "run.json") as handle:
            handle.write("{}")
    message = str(info.value)
    assert f"directory {str(tmp_path / 'a_file' / 'sub')!r} cannot be created" in message
    assert "choose a path under a directory you may write to, or create the directory first" in message
    assert isinstance(info.value, OSError)  # callers that handle a failed write keep handling it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc, in which no directory can be created")
def test_check_writable_and_atomic_write_refuse_a_directory_in_proc():
    from d5.errors import OutputPathError
    from d5.io_utils import atomic_write, check_writable

    # As root, permission bits allow it: only creating the directory for real shows that it cannot be.
    with pytest.raises(OutputPathError, match=r"--json path '/proc/d5probe/run.json' cannot be written: .*choose"):
        check_writable("/proc/d5probe/run.json", "--json path")
    with pytest.raises(OutputPathError, match=r"directory '/proc/d5probe' cannot be created"):
        with atomic_write("/proc/d5probe/run.json"):
            pass


@pytest.mark.parametrize("failing, error, expected", [
    ("mkstemp", errno.EROFS, "Read-only file system; choose a path you may write to"),
    ("fsync", errno.ENOSPC, "No space left on device; free some space, or choose a path on another disk"),
    ("replace", errno.EISDIR, "Is a directory; choose a path you may write to"),
], ids=["read-only", "disk full", "rename"])
def test_atomic_write_turns_a_failed_write_into_a_d5_error_and_leaves_nothing(tmp_path, monkeypatch, failing, error,
                                                                               expected):
    import d5.io_utils
    from d5.errors import OutputPathError

    def fail(*args, **kwargs):
        raise OSError(error, os.strerror(error))
    module = d5.io_utils.tempfile if failing == "mkstemp" else d5.io_utils.os
    monkeypatch.setattr(module, failing, fail)
    target = tmp_path / "run.json"
    with pytest.raises(OutputPathError, match=re.escape(f"cannot write {str(target)!r}: {expected}")):
        with d5.io_utils.atomic_write(target) as handle:
            handle.write("{}")
    monkeypatch.undo()
    assert list(tmp_path.iterdir()) == []


def test_atomic_write_lets_the_caller_s_own_errors_through(tmp_path):
    from d5.errors import OutputPathError
    from d5.io_utils import atomic_write

    with pytest.raises(OSError) as info:
        with atomic_write(tmp_path / "run.json"):
            raise OSError(errno.EIO, "the source went away")
    assert not isinstance(info.value, OutputPathError)
    assert list(tmp_path.iterdir()) == []
