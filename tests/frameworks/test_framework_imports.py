"""The environment of the four frameworks (``d5.frameworks.require_installed``): PyTorch, TensorFlow and MXNet import
into one process in any order; MXNet's ``numpy.bool`` alias is restored in one place, only when missing; a package
that is installed but fails to import is a FrameworkImportError carrying its message and what to do, an absent one
a FrameworkNotInstalledError naming the extra -- never a raw traceback. Each case runs in a fresh interpreter (the
import order is the point)."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap

import pytest

INSTALLED = [name for name, package in (("pytorch", "torch"), ("tensorflow", "tensorflow"), ("mxnet", "mxnet"))
             if importlib.util.find_spec(package) is not None]


def python(code: str, env: dict | None = None, timeout: float = 240) -> subprocess.CompletedProcess:
    environment = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", **(env or {})}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout, env=environment)


@pytest.mark.skipif(len(INSTALLED) < 2, reason="needs two of torch, tensorflow, mxnet installed")
@pytest.mark.parametrize("order", [INSTALLED, INSTALLED[::-1]], ids=["-".join(INSTALLED), "-".join(INSTALLED[::-1])])
def test_the_frameworks_import_into_one_process_in_any_order_and_compute(order):
    done = python(f"""
        import numpy as np
        from d5.frameworks import require_installed
        for name in {order!r}:
            require_installed(name)
        results = []
        if "pytorch" in {order!r}:
            import torch
            results.append(float(torch.ones(3).sum()))
        if "tensorflow" in {order!r}:
            import tensorflow as tf
            results.append(float(tf.reduce_sum(tf.ones(3))))
        if "mxnet" in {order!r}:
            import mxnet as mx
            x = mx.np.array([1.0, -2.0, 3.0])
            results.append(float(x[x > 0].sum()))  # boolean indexing reads numpy.bool at run time
            results.append(float(mx.nd.ones(3).sum().asscalar()))
        print(results)
        """)
    assert done.returncode == 0, done.stderr[-3000:]
    expected = {"pytorch": [3.0], "tensorflow": [3.0], "mxnet": [4.0, 3.0]}
    values = [float(value) for value in done.stdout.strip().splitlines()[-1].strip("[]").split(",")]
    assert values == [value for name in ("pytorch", "tensorflow", "mxnet") if name in order
                      for value in expected[name]]


@pytest.mark.skipif("mxnet" not in INSTALLED, reason="mxnet is not installed")
def test_the_numpy_bool_alias_is_added_only_when_missing():
    done = python("""
        import numpy
        had = "bool" in vars(numpy)
        from d5.frameworks import require_installed
        require_installed("mxnet")
        print(had, numpy.bool is bool)
        """)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["False", "True"]  # NumPy 1.26 lacks it; d5 restored the builtin alias
    done = python("""
        import numpy
        sentinel = numpy.bool_
        numpy.bool = sentinel   # already there (NumPy 2 has its own): left alone
        from d5.frameworks import _numpy_bool_for_mxnet
        _numpy_bool_for_mxnet()
        print(numpy.bool is sentinel)
        """)
    assert done.stdout.split() == ["True"], done.stderr


BROKEN = {
    "protobuf clash": ("tensorflow", "raise TypeError('Descriptors cannot be created directly. If this call came "
                                     "from a _pb2.py file, your generated code is out of date')",
                       "TypeError: Descriptors cannot be created directly", "protobuf does not match"),
    "numpy ABI clash": ("mxnet", "raise ImportError('numpy.core.multiarray failed to import')",
                        "ImportError: numpy.core.multiarray failed to import", "NumPy does not match"),
    "anything else": ("pytorch", "raise RuntimeError('the CPU lacks AVX')", "RuntimeError: the CPU lacks AVX",
                      "reinstall the environment in one pip resolve"),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_an_installed_package_that_fails_to_import_is_a_d5_error_with_its_message_and_what_to_do(tmp_path, case):
    framework, failure, original, advice = BROKEN[case]
    package = {"pytorch": "torch"}.get(framework, framework)
    (tmp_path / package).mkdir()
    (tmp_path / package / "__init__.py").write_text(failure + "\n")  # a real package on disk, broken as in the wild
    done = python(f"""
        from d5.errors import FrameworkImportError
        from d5.frameworks import require_installed
        try:
            require_installed({framework!r})
        except FrameworkImportError as err:
            print("D5", err)
        """, env={"PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])})
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.stdout.startswith(f"D5 the d5 {framework} framework: {package!r} is installed but failed to import")
    assert original in done.stdout and advice in done.stdout


@pytest.mark.parametrize("framework,extra", [("mxnet", "mxnet"), ("tensorflow", "tensorflow")])
def test_an_absent_package_names_the_extra_to_install(framework, extra):
    done = python(f"""
        import sys
        sys.modules[{framework!r}] = None   # as if not installed
        from d5.errors import FrameworkNotInstalledError
        from d5.frameworks import require_installed
        try:
            require_installed({framework!r})
        except FrameworkNotInstalledError as err:
            print(err)
        """)
    assert f"pip install -e '.[{extra}]' -c constraints.txt" in done.stdout, done.stderr[-3000:]
