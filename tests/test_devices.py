"""d5.best_device: what it picks, why it says so, what it imports; and executors refusing a GPU they lack."""
import importlib.util
import logging
import subprocess
import sys

import pytest

import d5
from d5 import devices
from d5.errors import D5Error, FrameworkNotInstalledError

HAS_TORCH = importlib.util.find_spec("torch") is not None


def torch_sees_a_gpu() -> bool:
    if not HAS_TORCH:
        return False
    import torch

    return torch.cuda.is_available()


def test_best_device_agrees_with_torch_on_this_machine():
    # The oracle is torch itself (or its absence): a GPU exactly when torch can use one.
    expected = d5.GPUDevice(0) if torch_sees_a_gpu() else d5.CPUDevice()
    assert d5.best_device() == expected
    assert d5.best_device("pytorch") == expected


def test_best_device_picks_gpu_0_when_a_framework_sees_gpus_and_logs_why(monkeypatch, caplog):
    monkeypatch.setitem(devices.GPU_PROBES, "pytorch", ("numpy", lambda: 2))  # an installed package, 2 GPUs
    with caplog.at_level(logging.INFO, logger="d5"):
        device = d5.best_device()
    assert device == d5.GPUDevice(0) and repr(device) == "GPUDevice(0)" and device.is_gpu
    assert [r.name for r in caplog.records] == ["d5"]
    assert "GPUDevice(0)" in caplog.text and "sees 2 GPU(s)" in caplog.text


def test_best_device_falls_back_to_the_cpu_and_says_why(monkeypatch, caplog):
    monkeypatch.setitem(devices.GPU_PROBES, "pytorch", ("numpy", lambda: 0))
    with caplog.at_level(logging.INFO, logger="d5"):
        assert d5.best_device() == d5.CPUDevice()
    assert "CPUDevice()" in caplog.text and "sees 0 GPU(s)" in caplog.text

    monkeypatch.setitem(devices.GPU_PROBES, "pytorch", ("a_package_that_is_not_installed", lambda: 1 / 0))
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="d5"):
        assert d5.best_device() == d5.CPUDevice()  # the probe is never called: the package is missing
    assert "a_package_that_is_not_installed is not installed" in caplog.text


def test_a_broken_gpu_probe_warns_and_uses_the_cpu(monkeypatch, caplog):
    def broken():
        raise RuntimeError("CUDA driver version is insufficient")

    monkeypatch.setitem(devices.GPU_PROBES, "pytorch", ("numpy", broken))
    with caplog.at_level(logging.WARNING, logger="d5"):
        assert d5.best_device() == d5.CPUDevice()
    assert "CUDA driver version is insufficient" in caplog.text
    assert caplog.records[0].levelno == logging.WARNING


def test_best_device_for_a_cpu_only_framework_and_unknown_names(monkeypatch):
    monkeypatch.setitem(devices.GPU_PROBES, "pytorch", ("numpy", lambda: 4))
    assert d5.best_device("reference") == d5.CPUDevice()  # even when another framework has GPUs
    assert d5.best_device("pytorch") == d5.GPUDevice(0)
    with pytest.raises(FrameworkNotInstalledError, match="unknown framework 'caffe'"):
        d5.best_device("caffe")


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
    with pytest.raises(D5Error, match=r"GPUDevice\(\d+\): this machine has \d+ CUDA GPU"):
        pytorch.from_model(d5.models.lenet5(), device=missing)
    # The CPU and best_device() always work.
    assert pytorch.from_model(d5.models.lenet5(), device=d5.best_device("pytorch")) is not None
