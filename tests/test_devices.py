"""d5.best_device: what it picks, why it says so, what it imports; and executors refusing a GPU they lack."""
import importlib
import importlib.util
import logging
import pathlib
import subprocess
import sys

import pytest

import d5
import d5.frameworks
from d5 import devices
from d5.errors import D5Error, FrameworkNotInstalledError

HAS_TORCH = importlib.util.find_spec("torch") is not None


def torch_sees_a_gpu() -> bool:
    if not HAS_TORCH:
        return False
    import torch

    return torch.cuda.is_available()


def test_best_device_agrees_with_torch_on_this_machine():
    # The oracle is torch itself (or its absence): a GPU exactly when torch can use one (the only framework
    # installed here that runs on GPUs).
    expected = d5.GPUDevice(0) if torch_sees_a_gpu() else d5.CPUDevice()
    assert d5.best_device() == expected
    assert d5.best_device("pytorch") == expected


@pytest.fixture
def register(tmp_path, monkeypatch):
    """``register(runtime_source, package=None)``: a framework ``fakegpu`` registered as a real one is -- a package
    ``d5.frameworks.fakegpu`` whose ``runtime.py`` is ``runtime_source``, and one registry entry naming the Python
    package it needs -- beside the reference alone, so the frameworks installed here do not take part."""
    root = tmp_path / "frameworks"

    def register_framework(runtime_source: str, package: str | None = None) -> str:
        (root / "fakegpu").mkdir(parents=True)
        (root / "fakegpu" / "__init__.py").write_text('NAME = "fakegpu"\n')
        (root / "fakegpu" / "runtime.py").write_text(runtime_source)
        importlib.invalidate_caches()
        monkeypatch.setattr(d5.frameworks, "__path__", [*d5.frameworks.__path__, str(root)])
        monkeypatch.setattr(d5.frameworks, "FRAMEWORKS", {"reference": None, "fakegpu": package})
        return "fakegpu"

    yield register_framework
    for name in [m for m in sys.modules if m == "d5.frameworks.fakegpu" or m.startswith("d5.frameworks.fakegpu.")]:
        del sys.modules[name]
    vars(d5.frameworks).pop("fakegpu", None)


def test_best_device_picks_gpu_0_when_a_framework_sees_gpus_and_logs_why(register, caplog):
    register("def gpu_count():\n    return 2\n")
    with caplog.at_level(logging.INFO, logger="d5"):
        device = d5.best_device()
    assert device == d5.GPUDevice(0) and repr(device) == "GPUDevice(0)" and device.is_gpu
    assert [r.name for r in caplog.records] == ["d5"]
    assert "GPUDevice(0)" in caplog.text and "fakegpu sees 2 GPU(s)" in caplog.text


def test_best_device_falls_back_to_the_cpu_and_says_why(register, caplog):
    register("def gpu_count():\n    return 0\n")
    with caplog.at_level(logging.INFO, logger="d5"):
        assert d5.best_device() == d5.CPUDevice()
    assert "CPUDevice()" in caplog.text and "reference sees 0 GPU(s); fakegpu sees 0 GPU(s)" in caplog.text


def test_a_framework_whose_package_is_missing_is_never_imported(register, caplog):
    register("raise AssertionError('imported')\n", package="a_package_that_is_not_installed")
    assert d5.frameworks.available() == ["reference"]
    with caplog.at_level(logging.INFO, logger="d5"):
        assert d5.best_device() == d5.CPUDevice()
        assert d5.best_device("fakegpu") == d5.CPUDevice()
    assert "fakegpu is not available here" in caplog.text
    assert "d5.frameworks.fakegpu" not in sys.modules


@pytest.mark.parametrize("runtime_source, message", [
    ("def gpu_count():\n    raise RuntimeError('CUDA driver version is insufficient')\n",
     "RuntimeError: CUDA driver version is insufficient"),
    ("raise ImportError('libcuda.so.1: cannot open shared object file')\n",
     "ImportError: libcuda.so.1: cannot open shared object file"),
], ids=["probe raises", "runtime fails to import"])
def test_a_broken_gpu_probe_warns_and_uses_the_cpu(register, caplog, runtime_source, message):
    register(runtime_source, package="numpy")  # an installed package: the framework is available
    with caplog.at_level(logging.INFO, logger="d5"):
        assert d5.best_device() == d5.CPUDevice()
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "fakegpu could not query its GPUs" in warnings[0].getMessage()
    assert message in warnings[0].getMessage()
    assert "fakegpu could not query its GPUs" in caplog.records[-1].getMessage()  # the INFO line says why


def test_best_device_for_a_cpu_only_framework_and_unknown_names(register):
    register("def gpu_count():\n    return 4\n")
    assert d5.best_device("reference") == d5.CPUDevice()  # even when another framework has GPUs
    assert d5.best_device("fakegpu") == d5.GPUDevice(0)
    with pytest.raises(FrameworkNotInstalledError, match="unknown framework 'caffe'"):
        d5.best_device("caffe")


def test_devices_names_no_framework():
    # The GPU probe goes through the registry: a framework registers it in its own runtime.py.
    source = (pathlib.Path(devices.__file__)).read_text()
    assert not [word for word in ("torch", "tensorflow", "mxnet", "cuda") if word in source.lower()]


def test_import_d5_and_best_device_for_reference_import_no_framework():
    code = ("import sys, d5; d = d5.best_device('reference'); "
            "bad = [m for m in ('torch', 'tensorflow', 'mxnet') if m in sys.modules]; "
            "print(repr(d), ','.join(bad)); sys.exit(1 if bad else 0)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("CPUDevice()")


def test_logging_is_silent_by_default():
    code = "import d5; d5.best_device()"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout == "" and result.stderr == ""


# --- executors on a GPU this machine lacks ----------------------------------------------------------------

def test_the_reference_executor_refuses_a_gpu():
    with pytest.raises(D5Error, match="CPU only"):
        d5.frameworks.reference.from_model(d5.models.lenet5(), device=d5.GPUDevice(0))


@pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed")
def test_the_pytorch_executor_refuses_a_gpu_it_cannot_use():
    from d5.frameworks import pytorch

    import torch

    missing = d5.GPUDevice(torch.cuda.device_count())  # one past the last GPU torch sees (GPU 0 without CUDA)
    with pytest.raises(D5Error, match=r"GPUDevice\(\d+\): this machine has \d+ (CUDA )?GPU"):
        pytorch.from_model(d5.models.lenet5(), device=missing)
    # The CPU and best_device() always work.
    assert pytorch.from_model(d5.models.lenet5(), device=d5.best_device("pytorch")) is not None
