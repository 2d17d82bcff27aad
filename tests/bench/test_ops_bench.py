"""Tests of the operator benchmark (d5.bench.ops, d5.bench.ops_problems, ``d5 bench ops``) on tiny problems.

Oracles: NumPy float64 products and formulas, PyTorch's own kernels and output shapes (independent of the
reference framework), hand-counted FLOPs, the PNG file signature and the JSON read back from disk. The
benchmark itself names no framework: it takes every framework the registry (d5.frameworks) has, which a test
shows with a framework registered for the test alone.
"""
from __future__ import annotations

import importlib
import subprocess
import sys
import time

import numpy as np
import psutil
import pytest

import d5.frameworks
from d5.bench.ops import (CHECK_TOLERANCE, OpsSettings, OtherProcessesCPU, check_passes, gflops, relative_error,
                          run_ops_benchmark)
from d5.bench.ops_problems import (ConvProblem, ElementwiseProblem, GemmProblem, Implementation,
                                   ImplementationCatalog, bind_custom_op, expected_results, quick_subset)
from d5.bench.results import read_result
from d5.errors import D5Error, FrameworkNotInstalledError
from d5.ops import CustomPythonOp

torch = pytest.importorskip("torch")

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _numpy_oracle(problem, inputs, output_grad):
    """Forward output and input gradients in float64, written directly from the definitions."""
    if isinstance(problem, GemmProblem):
        a, b = (x.astype(np.float64) for x in inputs)
        a_op, b_op = (a.T if problem.trans_a else a), (b.T if problem.trans_b else b)
        g = output_grad.astype(np.float64)
        grad_a_op, grad_b_op = g @ b_op.T, a_op.T @ g
        return a_op @ b_op, [grad_a_op.T if problem.trans_a else grad_a_op,
                             grad_b_op.T if problem.trans_b else grad_b_op]
    x = inputs[0].astype(np.float64)
    if problem.operation == "ipow3":
        return x ** 3, [3 * x ** 2 * output_grad]
    return np.maximum(x, 0), [np.where(x > 0, output_grad, 0.0)]


@pytest.mark.parametrize("problem", quick_subset(), ids=lambda p: p.name)
def test_every_framework_agrees_with_the_others_and_an_independent_oracle(problem):
    rng = np.random.default_rng(1)
    inputs = problem.make_inputs(rng)
    output, output_grad, input_grads = expected_results(problem, inputs, rng)
    frameworks = d5.frameworks.available()
    implementations = [i for i in ImplementationCatalog(frameworks).for_problem(problem)
                       if isinstance(i, Implementation)]
    assert {i.framework for i in implementations} == set(frameworks) >= {"reference", "pytorch"}
    assert {i.framework for i in implementations if i.name == "native"} == set(frameworks)
    for implementation in implementations:
        passes = implementation.bind(inputs, output_grad)
        assert passes.output.dtype == np.float32, implementation
        np.testing.assert_allclose(passes.output, output, rtol=1e-5, atol=1e-5, err_msg=str(implementation))
        for got, want in zip(passes.input_grads, input_grads, strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=str(implementation))
        assert check_passes(passes, output, input_grads) <= CHECK_TOLERANCE
    if isinstance(problem, ConvProblem):  # torch's conv2d is the independent oracle for the reference's Conv
        x, w = (torch.from_numpy(a.astype(np.float64)) for a in inputs)
        want = torch.nn.functional.conv2d(x, w, padding=(problem.pad_h, problem.pad_w),
                                          stride=(problem.stride_h, problem.stride_w)).numpy()
        np.testing.assert_allclose(output, want, rtol=1e-5, atol=1e-5)
    else:
        want_output, want_grads = _numpy_oracle(problem, inputs, output_grad)
        np.testing.assert_allclose(output, want_output, rtol=1e-5, atol=1e-5)
        for got, want in zip(input_grads, want_grads, strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_flop_and_byte_counts_and_gflops_arithmetic():
    gemm = GemmProblem("g", m=5, n=3, k=7, trans_b=True)
    a, b = gemm.make_inputs(np.random.default_rng(0))
    m, k = a.shape
    n = b.shape[0]
    assert gemm.flops("forward") == 2 * m * n * k == 210          # one multiply and one add per product term
    assert gemm.flops("backward") == 420                          # dA and dB: one GEMM each
    assert gemm.bytes_moved("forward") == 4 * (5 * 7 + 7 * 3 + 5 * 3)
    conv = ConvProblem("c", w=9, h=7, c=3, n=2, k=4, r=3, s=2, pad_h=1, pad_w=0, stride_h=2, stride_w=1)
    x, w = conv.make_inputs(np.random.default_rng(0))
    y = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), padding=(1, 0), stride=(2, 1))
    assert conv.output_hw == tuple(y.shape[2:])
    assert conv.flops("forward") == 2 * y.numel() * 3 * 3 * 2     # each output: C*R*S multiply-adds
    assert conv.flops("backward") == 2 * conv.flops("forward")
    assert ElementwiseProblem("e", "ipow3", 10).flops("forward") == 20
    assert ElementwiseProblem("e", "relu", 10).bytes_moved("backward") == 120
    assert gflops(2 * 1000 ** 3, 0.01) == pytest.approx(200.0)
    with pytest.raises(D5Error, match="positive"):
        gflops(1, 0.0)
    with pytest.raises(D5Error, match="pass"):
        gemm.flops("sideways")
    with pytest.raises(D5Error, match="element-wise"):
        ElementwiseProblem("e", "tanh", 10)


def test_relative_error_catches_wrong_values_and_shapes():
    assert relative_error(np.array([1.0, 4.0]), np.array([1.0, 4.0])) == 0.0
    assert relative_error(np.array([1.0, 5.0]), np.array([1.0, 4.0])) == pytest.approx(0.25)
    assert relative_error(np.ones(3), np.ones(4)) == float("inf")


class _OffByOnePercent(CustomPythonOp):
    """A matrix product 1% too large, with the matching gradients."""

    def forward(self, inputs):
        return 1.01 * (inputs[0] @ inputs[1])

    def backward(self, grads, fwd_inputs, fwd_outputs):
        a, b = fwd_inputs
        return 1.01 * (grads[0] @ b.T), 1.01 * (a.T @ grads[0])


class _WithAWrongImplementation(ImplementationCatalog):
    """The reference, plus a 'kernel' that is 1% off: the benchmark must refuse to time it."""

    def for_problem(self, problem):
        wrong = Implementation("reference", "off by 1%", bind_custom_op(_OffByOnePercent()))
        return super().for_problem(problem) + [wrong]


def test_an_implementation_with_wrong_outputs_is_reported_failed_and_not_timed(tmp_path):
    settings = OpsSettings(quick=True, frameworks=("reference",), repeats=2, threads=1)
    outcome = run_ops_benchmark(tmp_path, settings, problems=[GemmProblem("g", 24, 8, 16)],
                                catalog=_WithAWrongImplementation(("reference",)), progress=False,
                                report=lambda line: None)
    by_name = {(row["implementation"], row["pass"]): row for row in outcome.rows}
    assert by_name[("native", "forward")]["status"] == "ok"
    wrong = by_name[("off by 1%", "backward")]
    assert wrong["status"] == "failed" and "seconds" not in wrong and "gflops" not in wrong
    assert wrong["check_error"] == pytest.approx(0.01, rel=1e-3)
    assert outcome.failed == 2
    assert "failed: g reference off by 1%" in "\n".join(outcome.summary_lines)


def test_other_processes_cpu_sees_a_busy_process():
    busy_loop = "import time\nend = time.time() + 5\nwhile time.time() < end: pass"
    spinner = subprocess.Popen([sys.executable, "-c", busy_loop])
    try:
        time.sleep(0.3)  # let it start spinning
        with OtherProcessesCPU() as others:
            time.sleep(0.6)
    finally:  # reaped only after the block: a reaped child's time would count as this process's own
        spinner.kill()
        spinner.wait()
    assert others.fraction >= 0.7 / psutil.cpu_count()  # one core of cpu_count() kept busy


def test_bad_settings_are_refused_with_what_to_do():
    with pytest.raises(D5Error, match=r"unknown or no frameworks \['caffe'\]; choose from \['reference'"):
        OpsSettings(frameworks=("caffe",)).resolved()
    with pytest.raises(D5Error, match="unknown peer framework 'caffe'"):
        OpsSettings(peer="caffe").resolved()
    with pytest.raises(D5Error, match="repeats must be a positive integer"):
        OpsSettings(repeats=0).resolved()
    for name in set(d5.frameworks.FRAMEWORKS) - set(d5.frameworks.available()):  # known, not available here
        with pytest.raises(FrameworkNotInstalledError, match=f"framework {name!r} is not"):
            OpsSettings(frameworks=(name,)).resolved()


@pytest.fixture
def registered_framework(tmp_path, monkeypatch):
    """A framework ``benchfw`` registered as a real one is (its package with a runtime.py, one registry entry)
    for this test alone: its runtime times the reference's kernels under its own name."""
    root = tmp_path / "frameworks" / "benchfw"
    root.mkdir(parents=True)
    (root / "__init__.py").write_text('NAME = "benchfw"\n')
    (root / "runtime.py").write_text("from d5.frameworks.reference.runtime import *  # noqa: F401,F403\n")
    importlib.invalidate_caches()
    monkeypatch.setattr(d5.frameworks, "__path__", [*d5.frameworks.__path__, str(root.parent)])
    monkeypatch.setattr(d5.frameworks, "FRAMEWORKS", {"reference": None, "benchfw": None})
    yield "benchfw"
    for name in [m for m in sys.modules if m.startswith("d5.frameworks.benchfw")]:
        del sys.modules[name]
    vars(d5.frameworks).pop("benchfw", None)


def test_a_newly_registered_framework_is_benchmarked_with_no_change_to_the_benchmark(tmp_path, registered_framework):
    settings = OpsSettings(quick=True, repeats=2, threads=1, peer=registered_framework)
    problems = [GemmProblem("g", 24, 8, 16), ElementwiseProblem("e", "relu", 64)]
    outcome = run_ops_benchmark(tmp_path, settings, problems=problems, progress=False, report=lambda line: None)
    assert outcome.failed == 0
    assert {(r["framework"], r["implementation"], r["problem"]) for r in outcome.rows} == {
        (f, "native", p.name) for f in ("reference", "benchfw") for p in problems}
    figures = read_result(outcome.paths["json"])["figures"]
    assert figures["threaded_frameworks"] == ["reference", "benchfw"]
    assert [c["framework"] for c in figures["sgemm_peak"]["candidates"]] == ["reference", "benchfw"]
    ratios = figures["elementwise_vs_benchfw_native"]  # the peer's figure, named after it
    assert [(r["framework"], r["implementation"]) for r in ratios] == [("reference", "native")]


@pytest.fixture(scope="module")
def quick_cli_run(tmp_path_factory):
    from d5.cli import main

    output = tmp_path_factory.mktemp("ops")
    status = main(["bench", "ops", "--quick", "--output", str(output), "--repeats", "2", "--threads", "1"])
    return status, output


def test_d5_bench_ops_quick_runs_and_writes_json_markdown_and_png(quick_cli_run):
    status, output = quick_cli_run
    assert status == 0
    assert (output / "ops-quick.png").read_bytes()[:8] == PNG_SIGNATURE
    markdown = (output / "ops-quick.md").read_text()
    assert "| problem" in markdown and "SGEMM peak" in markdown and "gemm_96x32x80_nn" in markdown


def test_the_json_result_has_the_expected_fields(quick_cli_run):
    _, output = quick_cli_run
    document = read_result(output / "ops-quick.json")
    figures = document["figures"]
    assert document["name"] == "ops" and document["environment"]["python"]
    frameworks = d5.frameworks.available()
    assert figures["threads"] == 1 and figures["thread_pools"]["torch"]["num_threads"] == 1
    assert figures["threaded_frameworks"] == frameworks
    assert figures["sgemm_peak"]["gflops"] > 0 and figures["memory_bandwidth"]["gbytes_per_s"] > 0
    assert {c["library"] for c in figures["sgemm_peak"]["candidates"]} >= {"numpy.matmul", "torch.matmul"}
    assert {c["framework"] for c in figures["memory_bandwidth"]["candidates"]} == set(frameworks)
    rows = figures["rows"]
    assert {(r["framework"], r["pass"]) for r in rows} == {(f, p) for f in frameworks
                                                          for p in ("forward", "backward")}
    for row in rows:
        assert row["status"] in ("ok", "skipped"), row
        if row["status"] == "ok":
            assert row["seconds"]["n"] == 2 and row["check_error"] <= CHECK_TOLERANCE
            flops = row["flops"]
            assert row["gflops"] == pytest.approx(flops / row["seconds"]["median"] / 1e9)
        assert "other_processes_cpu" in row
    gemm_conv = [r for r in rows if r["kind"] in ("gemm", "conv") and r["status"] == "ok"]
    for row in gemm_conv:
        assert row["fraction_of_peak"] == pytest.approx(row["gflops"] / figures["sgemm_peak"]["gflops"])
        assert row["meets_half_peak"] == (row["fraction_of_peak"] >= 0.5)
    fractions = figures["reference_fraction_of_peak"]
    assert len(fractions) == sum(1 for r in gemm_conv if r["framework"] == "reference") == 6
    assert any("SGEMM peak" in line for line in figures["summary"])
    implementations = {(r["framework"], r["implementation"]) for r in rows if r["problem"] == "ipow3_4k"}
    assert implementations >= {(f, name) for f in ("reference", "pytorch")
                               for name in ("native", "IPowOp (Python)", "ipowop (C++)")}
    ratios = {(r["problem"], r["framework"], r["implementation"]) for r in figures["elementwise_vs_torch_native"]}
    assert ("ipow3_4k", "pytorch", "ipowop (C++)") in ratios and ("relu_4k", "reference", "native") in ratios
    assert not {key for key in ratios if key[1:] == ("pytorch", "native")}  # the peer is the denominator
    assert [p["name"] for p in document["extra"]["problems"]] == [p.name for p in quick_subset()]
