"""`import d5` imports no framework; the public API resolves lazily."""
import subprocess
import sys


def test_import_d5_imports_no_framework():
    code = ("import sys, d5; d5.Network; d5.ShuffleSampler; d5.TestAccuracy; d5.models.lenet5(); "
            "import d5.frameworks.reference; "
            "bad = [m for m in ('torch', 'tensorflow', 'mxnet', 'mpi4py', 'onnxruntime') if m in sys.modules]; "
            "print(','.join(bad)); sys.exit(1 if bad else 0)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"frameworks imported: {result.stdout} {result.stderr}"


def test_public_names_resolve():
    import d5

    for name in d5.__all__:
        assert getattr(d5, name) is not None
    assert d5.GPUDevice(1).index == 1
