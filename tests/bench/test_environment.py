"""Tests of d5.bench.environment.capture_environment.

Oracles: importlib.metadata, psutil, os.environ, platform and a throw-away git repository built here.
"""
from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
from importlib import metadata

import numpy as np
import psutil
import pytest

from d5.bench.environment import THREAD_VARIABLES, TRACKED_PACKAGES, capture_environment

EXPECTED_KEYS = {"timestamp_utc", "hostname", "python", "platform", "cpu", "memory", "threads", "blas",
                 "versions", "git", "seeds", "capture_errors"}


def installed(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def test_capture_has_every_key_and_is_json_serializable():
    env = capture_environment(seeds={"sampler": 1, "init": np.int64(2)})
    assert set(env) == EXPECTED_KEYS
    assert env["capture_errors"] == []
    assert json.loads(json.dumps(env, allow_nan=False)) == env
    assert env["seeds"] == {"sampler": 1, "init": 2}
    assert env["python"]["version"] == platform.python_version()
    assert env["platform"]["machine"] == platform.machine()
    assert env["cpu"]["logical_cores"] == psutil.cpu_count(logical=True)
    assert env["cpu"]["physical_cores"] == psutil.cpu_count(logical=False)
    assert env["cpu"]["model"]
    assert env["memory"]["total_bytes"] == psutil.virtual_memory().total
    assert env["timestamp_utc"].endswith("+00:00")


def test_versions_list_exactly_the_installed_tracked_packages():
    versions = capture_environment()["versions"]
    for name in TRACKED_PACKAGES:
        assert versions.get(name) == installed(name)
    assert versions["numpy"] == np.__version__
    assert "d5" in versions


def test_thread_variables_are_read_from_the_environment(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    threads = capture_environment()["threads"]
    assert set(threads) == set(THREAD_VARIABLES)
    assert threads["OMP_NUM_THREADS"] == "3" and threads["MKL_NUM_THREADS"] is None


def test_numpy_blas_info_is_recorded():
    blas = capture_environment()["blas"]
    expected = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
    assert blas["blas"]["name"] == expected["name"]


def test_capture_does_not_import_frameworks():
    code = (
        "import sys, json\n"
        "from d5.bench.environment import capture_environment\n"
        "env = capture_environment(seeds=0)\n"
        "json.dumps(env)\n"
        "loaded = sorted(m for m in ('torch', 'tensorflow', 'mxnet', 'onnxruntime', 'mpi4py', 'scipy', "
        "'matplotlib') if m in sys.modules)\n"
        "assert not loaded, loaded\n"
        "print(env['versions'].get('torch'))\n"
    )
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip() == str(installed("torch"))


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_git_commit_and_dirty_flag(tmp_path):
    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True,
                       env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
                            "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"})

    git("init", "-q")
    assert capture_environment(git_dir=tmp_path)["git"]["commit"] is None  # no commit yet
    (tmp_path / "a.txt").write_text("one")
    git("add", "a.txt")
    git("commit", "-q", "-m", "first")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True, text=True,
                          check=True).stdout.strip()
    clean = capture_environment(git_dir=tmp_path)["git"]
    assert clean["commit"] == head and clean["dirty"] is False
    (tmp_path / "a.txt").write_text("two")
    assert capture_environment(git_dir=tmp_path)["git"] == {"commit": head, "dirty": True,
                                                            "directory": str(tmp_path)}


def test_outside_a_repository_and_with_odd_input_capture_never_raises(tmp_path, monkeypatch):
    outside = tmp_path / "not-a-repo"
    outside.mkdir()
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    env = capture_environment(seeds=object(), git_dir=outside)
    assert env["git"] is None
    assert isinstance(env["seeds"], str)  # unknown objects are kept as their repr
    missing = capture_environment(git_dir=tmp_path / "does-not-exist")
    assert missing["git"] is None
    json.dumps(env)


def test_a_failing_part_is_reported_not_raised(monkeypatch):
    import d5.bench.environment as environment

    def broken():
        raise RuntimeError("psutil exploded")

    monkeypatch.setattr(environment, "_memory_info", broken)
    env = capture_environment()
    assert env["memory"] is None
    assert env["capture_errors"] == ["memory: RuntimeError: psutil exploded"]
    assert env["cpu"] is not None
