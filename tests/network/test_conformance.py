"""A fast, representative subset of ONNX's backend test suite, run on the reference framework.

`make conformance` runs all of it and writes the report; here the operators of the foundation set must
pass with d5's own kernels.
"""
import pytest

from d5.bench.conformance import failures, markdown_report, run_conformance, summarize_results

FOUNDATION_CASES = ("test_relu", "test_sigmoid", "test_tanh", "test_gemm_", "test_matmul_2d", "test_conv_with_strides",
                    "test_basic_conv_", "test_maxpool_2d_default", "test_averagepool_2d_default", "test_globalaveragepool",
                    "test_batchnorm_epsilon", "test_softmax_axis", "test_logsoftmax_axis", "test_add_bcast", "test_sub_bcast",
                    "test_mul_bcast", "test_div_bcast", "test_flatten_axis", "test_reshape_reordered", "test_concat_2d",
                    "test_sce_mean", "test_leakyrelu", "test_exp", "test_log", "test_sqrt")


@pytest.fixture(scope="module")
def results():
    return run_conformance(kinds=("node",), patterns=FOUNDATION_CASES, progress=False)


def test_foundation_operators_pass_onnx_node_cases(results):
    judged = [r for r in results if r.status != "excluded"]
    assert len(judged) >= 60
    failing = failures(judged)
    assert not failing, "\n".join(failing)


def test_report_groups_by_operator_and_summarizes(results):
    summary = summarize_results(results)["node"]
    assert summary["pass_own"] == summary["judged"] and summary["rate_own"] == 1.0
    report = markdown_report(results)
    assert "| Relu" in report and "Node cases by operator" in report


def test_old_opset_ir3_models_are_upgraded_and_pass():
    """IR-3/opset-6 models from the pytorch-converted set: the version converter turns Pad-2's attribute into
    an initializer, which IR 3 forbids unless it is also a graph input; the importer raises the IR version."""
    results = run_conformance(kinds=("pytorch-converted", "pytorch-operator"),
                              patterns=("test_ConstantPad2d", "test_ReflectionPad2d", "test_operator_pad"),
                              progress=False)
    assert len(results) == 3
    failing = failures(results)
    assert not failing, "\n".join(failing)
    report = markdown_report(results)  # model cases only: no per-operator table, still a report
    assert "Node cases by operator" not in report and "pytorch-converted" in report
