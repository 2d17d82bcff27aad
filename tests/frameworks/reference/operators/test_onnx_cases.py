"""ONNX's own backend test cases (expected outputs from ONNX), by group of operators, judged on d5's reference
operators alone (no onnx.reference fallback) through d5.bench.conformance: every judged case of a group passes,
each group judges at least its minimum number of cases, and every operator of a group is exercised by a passing
case. A group selects its cases by name (``patterns``) or as every one-node case of its operators
(``one_node_of``)."""
from __future__ import annotations

import functools
import warnings

import pytest

import d5.bench.conformance as conformance
from d5.bench.conformance import failures, run_conformance, uncovered_operators
from _tables import CORE_OPS, HEAVY_OPS, OPERATORS

pytest.importorskip("onnx")

ONNX_DOMAINS = ("", "ai.onnx")

#: Groups of ONNX backend cases (selected by name) judged on d5's own operators through d5.bench.conformance:
#: the least number of judged cases, the operators whose cases are judged (None: every case) and must be covered;
#: ``excluded_names``, where given, replaces d5.bench.conformance's exclusions by these name markers.
CONFORMANCE_GROUPS = {
    # Every one-node case of the operators of the forward table (_tables.CASES), sequences and optionals included.
    "core": dict(kinds=("node",), minimum=151, skip_expanded=False, judge_only_own=False,
                 one_node_of=(set(CORE_OPS) - {"MeanSquaredError"}, ONNX_DOMAINS),
                 operators=set(CORE_OPS) - {"MeanSquaredError"}),  # MeanSquaredError: d5's own, not ONNX's
    # Every one-node case of the shape, reduction and math operators; only float8 casts are left out (by name:
    # they need ONNX's saturation rules), so the float4 casts that d5.bench.conformance excludes are judged here.
    "shape_reduction_math": dict(kinds=("node",), minimum=460, skip_expanded=False, judge_only_own=False,
                                 one_node_of=(set(OPERATORS), ONNX_DOMAINS),
                                 excluded_names=("float8", "e4m3", "e5m2", "e8m0"), operators=set(OPERATORS)),
    # Every one-node case of the heavier operators, in any domain.
    "heavy": dict(kinds=("node",), minimum=50, skip_expanded=False, judge_only_own=False,
                  one_node_of=(set(HEAVY_OPS), None), operators=set(HEAVY_OPS)),
    "gaps": dict(kinds=("node",), minimum=22, skip_expanded=True, judge_only_own=False,
                 patterns=("test_reduce_log_sum_desc_axes", "test_reduce_log_sum_asc_axes", "test_reduce_log_sum_default",
                           "test_reduce_log_sum_negative_axes", "test_reduce_log_sum_empty_set",
                           "test_range_float_type_positive_delta", "test_range_float16_type_positive_delta",
                           "test_range_bfloat16_type_positive_delta", "test_range_int32_type_negative_delta",
                           "test_simple_rnn_defaults", "test_simple_rnn_with_initial_bias", "test_rnn_seq_length",
                           "test_simple_rnn_batchwise", "test_simple_rnn_reverse", "test_simple_rnn_bidirectional",
                           "test_globalmaxpool", "test_affine_grid_2d", "test_affine_grid_3d", "test_maxpool_2d_uint8"),
                 operators={"ReduceLogSum", "Range", "RNN", "GlobalMaxPool", "AffineGrid", "MaxPool"}),
    # Every case must pass, including test_l2normalization_axis_0, whose all-zero slices must normalize to 0
    # (onnx.reference's fallback gives NaN there).
    "image_misc": dict(kinds=("node",), minimum=180, skip_expanded=False, judge_only_own=True,
                       patterns=("test_resize_", "test_gridsample", "test_lppool", "test_spacetodepth",
                                 "test_depthtospace", "test_center_crop_pad", "test_col2im", "test_tril", "test_triu",
                                 "test_cumsum", "test_cumprod", "test_top_k", "test_onehot", "test_hardmax",
                                 "test_lpnormalization", "test_l1normalization", "test_l2normalization", "test_celu",
                                 "test_thresholdedrelu", "test_hardswish", "test_mish", "test_eyelike",
                                 "test_reversesequence", "test_compress", "test_gathernd", "test_scatter_elements",
                                 "test_scatter_with_axis", "test_scatter_without_axis", "test_scatternd"),
                       operators={"Resize", "GridSample", "LpPool", "SpaceToDepth", "DepthToSpace", "CenterCropPad",
                                  "Col2Im", "Trilu", "CumSum", "CumProd", "TopK", "OneHot", "Hardmax",
                                  "LpNormalization", "Celu", "ThresholdedRelu", "HardSwish", "Mish", "EyeLike",
                                  "ReverseSequence", "Compress", "GatherND", "ScatterElements", "Scatter",
                                  "ScatterND"}),
    # Deliberate exclusions are those the conformance runner itself makes (float8/float4 quantization types).
    "integer_quant": dict(kinds=("node",), minimum=110, skip_expanded=False, judge_only_own=False,
                          patterns=("test_bitshift", "test_bitwise", "test_bitcast", "test_quantizelinear",
                                    "test_dequantizelinear", "test_dynamicquantizelinear", "test_qlinearmatmul",
                                    "test_qlinearconv", "test_matmulinteger", "test_convinteger", "test_unique",
                                    "test_nonzero", "test_nonmaxsuppression", "test_det_", "test_shrink"),
                          operators=None),
    "normalization_signal": dict(kinds=("node",), minimum=16, skip_expanded=False, judge_only_own=True,
                                 patterns=("test_lrn", "test_group_normalization", "test_mvn", "test_maxunpool",
                                           "test_hannwindow", "test_hammingwindow", "test_blackmanwindow",
                                           "test_melweightmatrix", "test_stft"),
                                 operators={"LRN", "GroupNormalization", "MeanVarianceNormalization", "MaxUnpool",
                                            "HannWindow", "HammingWindow", "BlackmanWindow", "MelWeightMatrix",
                                            "STFT"}),
    "string_signal": dict(kinds=("node", "simple"), minimum=60, skip_expanded=False, judge_only_own=True,
                          patterns=("test_string_concat", "test_string_split", "test_regex_full_match",
                                    "test_strnorm", "test_acos", "test_asin", "test_atan", "test_tan", "test_sinh",
                                    "test_cosh", "test_tensorscatter", "test_roialign", "test_dft"),
                          operators={"StringConcat", "StringSplit", "RegexFullMatch", "StringNormalizer", "Acos",
                                     "Asin", "Atan", "Acosh", "Asinh", "Atanh", "Tan", "Sinh", "Cosh",
                                     "TensorScatter", "RoiAlign", "DFT"}),
}

@functools.lru_cache(maxsize=None)
def one_node_case_names(operators: frozenset, domains: tuple | None) -> frozenset:
    """The names of ONNX's node cases that are one node of ``operators`` (in ``domains``; None: any)."""
    from onnx.backend.test.loader import load_model_tests

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the case generators overflow casts on purpose
        cases = load_model_tests(kind="node")
    return frozenset(case.name for case in cases if case.model is not None and len(case.model.graph.node) == 1
                     and case.model.graph.node[0].op_type in operators
                     and (domains is None or case.model.graph.node[0].domain in domains))


def excluded_by_name(markers: tuple):
    """An exclusion rule for d5.bench.conformance that leaves out the cases whose names hold one of ``markers``."""
    def reason(case_name: str, model) -> str | None:
        return next((f"{marker} types (excluded by name)" for marker in markers if marker in case_name.lower()), None)
    return reason


@pytest.fixture(scope="module")
def conformance_results():
    """The d5.bench.conformance results of one group (each group run once per module)."""
    cache = {}

    def results(group: str):
        if group not in cache:
            spec = CONFORMANCE_GROUPS[group]
            with pytest.MonkeyPatch.context() as patch:
                if "excluded_names" in spec:
                    patch.setattr(conformance, "exclusion_reason", excluded_by_name(spec["excluded_names"]))
                if "one_node_of" in spec:
                    operators, domains = spec["one_node_of"]
                    names = one_node_case_names(frozenset(operators), domains)
                    cache[group] = [r for r in run_conformance(kinds=spec["kinds"], patterns=sorted(names),
                                                               progress=False) if r.name in names]
                else:
                    cache[group] = run_conformance(kinds=spec["kinds"], patterns=spec["patterns"], progress=False)
        return cache[group]

    return results


@pytest.mark.parametrize("group", sorted(CONFORMANCE_GROUPS))
def test_onnx_cases_pass_with_d5_operators(conformance_results, group):
    spec = CONFORMANCE_GROUPS[group]
    judged = [r for r in conformance_results(group) if r.status != "excluded"
              and not (spec["skip_expanded"] and r.name.endswith("_expanded"))
              and not (spec["judge_only_own"] and not set(r.operators) & spec["operators"])]
    assert len(judged) >= spec["minimum"], f"expected at least {spec['minimum']} judged cases, found {len(judged)}"
    failing = failures(judged)
    assert not failing, "\n".join(failing)


@pytest.mark.parametrize("group", sorted(g for g, spec in CONFORMANCE_GROUPS.items() if spec["operators"]))
def test_every_operator_of_a_group_is_covered(conformance_results, group):
    missing = uncovered_operators(conformance_results(group), CONFORMANCE_GROUPS[group]["operators"])
    assert not missing, missing


def test_only_low_precision_cases_are_excluded(conformance_results):
    excluded = [r for r in conformance_results("integer_quant") if r.status == "excluded"]
    assert excluded and all("float8/float4" in r.reason for r in excluded), [(r.name, r.reason) for r in excluded]
