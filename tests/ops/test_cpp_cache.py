"""The build cache of compile_cpp_op: reuse without recompiling, rebuilds on every change that matters,
corrupt or half-written entries never loaded, and concurrent processes compiling once."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

from d5.ops import compile_cpp_op, cpp_build

SOURCE = """
#include "scale.h"
template <typename T> struct scaled {
    long n; scaled(long n) : n(n) {}
    void forward(const T* x, T* y) { for (long i = 0; i < n; ++i) y[i] = SCALE * x[i] + OFFSET; }
    void backward(const T* gy, const T*, const T*, T* gx) { for (long i = 0; i < n; ++i) gx[i] = SCALE * gy[i]; }
};
D5_REGISTER_OP(scaled)
"""


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A fresh cache holding the session's compiled d5 runtime object (which takes ~7 s to build), with the
    in-process memo of loaded libraries emptied, so every call below goes to the disk."""
    root = tmp_path / "cache"
    root.mkdir()
    compile_cpp_op("template <typename T> struct warm { warm(long) {} void forward(const T*, T*) {} };\n"
                   "D5_REGISTER_OP(warm)", "warm")  # makes sure the session cache has the runtime object
    for runtime in cpp_build.cache_dir().glob("runtime-*"):
        shutil.copytree(runtime, root / runtime.name)
    monkeypatch.setenv(cpp_build.CACHE_ENV, str(root))
    monkeypatch.setattr(cpp_build, "_LOADED", {})
    return root


def _source_dir(tmp_path, offset="0"):
    directory = tmp_path / "src"
    directory.mkdir(exist_ok=True)
    (directory / "scale.h").write_text(f"#define OFFSET {offset}\n")
    (directory / "scaled.cpp").write_text(SOURCE)
    return directory / "scaled.cpp"


def _entries(cache):
    return sorted(p for p in cache.iterdir() if p.is_dir() and p.name.startswith("scaled-"))


def test_a_second_call_loads_the_cached_build_without_compiling(cache, tmp_path, monkeypatch):
    path = _source_dir(tmp_path)
    first = compile_cpp_op(path, "scaled", defines={"SCALE": 2})
    assert first.library.built
    monkeypatch.setattr(cpp_build, "_LOADED", {})
    again = compile_cpp_op(path, "scaled", defines={"SCALE": 2})  # its time is a figure: benchmarks/custom_ops.py
    assert not again.library.built and again.library.path == first.library.path
    np.testing.assert_array_equal(again.forward([np.arange(3.0)]), [0, 2, 4])
    assert len(_entries(cache)) == 1


def test_a_changed_define_header_or_flag_rebuilds(cache, tmp_path):
    path = _source_dir(tmp_path)
    x = np.arange(3.0)
    np.testing.assert_array_equal(compile_cpp_op(path, "scaled", defines={"SCALE": 2}).forward([x]), [0, 2, 4])
    np.testing.assert_array_equal(compile_cpp_op(path, "scaled", defines={"SCALE": 3}).forward([x]), [0, 3, 6])
    (path.parent / "scale.h").write_text("#define OFFSET 10\n")  # an included header changes
    changed = compile_cpp_op(path, "scaled", defines={"SCALE": 2})
    assert changed.library.built
    np.testing.assert_array_equal(changed.forward([x]), [10, 12, 14])
    strict = compile_cpp_op(path, "scaled", defines={"SCALE": 2}, strict_math=True)
    assert strict.library.built and "-funsafe-math-optimizations" not in strict.library.flags
    assert len(_entries(cache)) == 4


@pytest.mark.parametrize("damage", ["truncate", "flip_bytes", "manifest_key", "no_manifest"])
def test_a_corrupt_or_stale_entry_is_rebuilt_never_loaded(cache, tmp_path, monkeypatch, damage):
    path = _source_dir(tmp_path)
    # Built by another process, so that this one never maps the file damaged below.
    assert _compile_in_subprocess(cache, path).communicate(timeout=300)[0].strip() == "built"
    [entry] = _entries(cache)
    library_file = cpp_build._library_file(entry)
    if damage == "truncate":
        library_file.write_bytes(library_file.read_bytes()[:1000])
    elif damage == "flip_bytes":
        data = bytearray(library_file.read_bytes())
        data[len(data) // 2] ^= 0xFF
        library_file.write_bytes(bytes(data))
    elif damage == "manifest_key":
        manifest = json.loads((entry / "manifest.json").read_text())
        (entry / "manifest.json").write_text(json.dumps({**manifest, "key": "0" * 64}))
    else:
        (entry / "manifest.json").unlink()
    rebuilt = compile_cpp_op(path, "scaled", defines={"SCALE": 2})
    assert rebuilt.library.built
    np.testing.assert_array_equal(rebuilt.forward([np.arange(3.0)]), [0, 2, 4])
    assert _entries(cache) == [entry]


def _compile_in_subprocess(cache, path, *extra):
    code = ("import sys, d5.ops as o; lib = o.compile_cpp_op(sys.argv[1], 'scaled', defines={'SCALE': 2}).library; "
            "print('built' if lib.built else 'loaded')")
    return subprocess.Popen([sys.executable, "-c", code, str(path), *extra], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, cpp_build.CACHE_ENV: str(cache)})


def test_concurrent_processes_compile_once(cache, tmp_path):
    path = _source_dir(tmp_path)
    processes = [_compile_in_subprocess(cache, path) for _ in range(3)]
    outputs = [p.communicate(timeout=300) for p in processes]
    assert all(p.returncode == 0 for p in processes), outputs
    assert sorted(out.strip() for out, _ in outputs) == ["built", "loaded", "loaded"]
    assert len(_entries(cache)) == 1


def test_a_killed_compile_leaves_nothing_a_later_run_loads(cache, tmp_path):
    path = _source_dir(tmp_path)
    process = _compile_in_subprocess(cache, path)
    deadline = time.monotonic() + 60
    while not list(cache.glob(".build-*/library/operator.o")) and not list(cache.glob(".build-*/library")):
        assert time.monotonic() < deadline and process.poll() is None, "the compile never started"
        time.sleep(0.01)
    process.kill()  # SIGKILL, in the middle of compiling: no cleanup code runs
    process.wait()
    assert _entries(cache) == []  # only the temporary build directory is left
    op = compile_cpp_op(path, "scaled", defines={"SCALE": 2})
    assert op.library.built
    np.testing.assert_array_equal(op.forward([np.arange(3.0)]), [0, 2, 4])
