"""Fixed fuzz cases: the reproducers quoted in issue 7 and every unmutated seed model.

The issue's cases run exactly as quoted (import, then inference a few times). Those the issue says d5 must
refuse carry ``expect_error`` (running them is a wrong result); the seeds and the Swin-style ScatterND
model carry ``valid`` (a d5 error is a wrong result). Kernel reproducers are in fuzz_kernel_cases.

>>> cases = fixed_onnx_cases()
>>> len(cases) > 40 and all(c["kind"] == "onnx" for c in cases)
True
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from fuzz_network_spec import network_spec
from fuzz_onnx_models import (BUILDER_NAMES, OPSET, SINGLE_NODE_OPS, builder_seed, single_node_seed, tensor_proto)


def _model(nodes, inputs, outputs, initializers=(), opset: int = OPSET) -> bytes:
    graph = helper.make_graph(nodes, "issue7", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8).SerializeToString()


def _info(name: str, elem: int = TensorProto.FLOAT, shape=()):
    return helper.make_tensor_value_info(name, elem, shape)  # onnx.checker wants every output's shape


def _case(label: str, description: str, model: bytes, feeds, **flags) -> dict:
    return {"kind": "onnx", "label": label, "model": model, "feeds": feeds, "runs": 5,
            "description": f"issue 7: {description}", **flags}


def issue_cases() -> list[dict]:
    x1 = np.ones((1, 1, 1, 1), np.float32)
    f23 = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    conv = lambda **attrs: helper.make_node("Conv", ["x", "w"], ["y"], name="conv", **attrs)  # noqa: E731
    cases = [
        _case("Conv", "Conv pads=[2**32-1, 2**32-1, 0, 0], strides=[2**32, 2**32], x (1,1,1,1), w ones (heap corruption)",
              _model([conv(pads=[2**32 - 1, 2**32 - 1, 0, 0], strides=[2**32, 2**32])], [_info("x", shape=[1, 1, 1, 1])],
                     [_info("y", shape=[1, 1, 1, 1])], [numpy_helper.from_array(x1, "w")]), {"x": x1}),
        _case("Conv", "float64 Conv X (1,1,1,1), W (1,1,316,316), pads=[316]*4 (std::terminate)",
              _model([conv(pads=[316] * 4)], [_info("x", TensorProto.DOUBLE, [1, 1, 1, 1])],
                     [_info("y", TensorProto.DOUBLE, [1, 1, 318, 318])],
                     [numpy_helper.from_array(np.ones((1, 1, 316, 316)), "w")]), {"x": np.ones((1, 1, 1, 1))}),
        _case("Conv", "Conv with N=0 and pads=[2**28]*4 (std::terminate)",
              _model([conv(pads=[2**28] * 4)], [_info("x", shape=["N", 1, 1, 1])], [_info("y", shape=["N", 1, "H", "W"])],
                     [numpy_helper.from_array(x1, "w")]), {"x": np.ones((0, 1, 1, 1), np.float32)}),
        _case("Relu", "Relu with two inputs", _model([helper.make_node("Relu", ["x", "x"], ["y"])], [_info("x", shape=[2, 3])],
                                                     [_info("y", shape=[2, 3])]), {"x": f23}, expect_error=True),
        _case("Gemm", "Gemm with four inputs",
              _model([helper.make_node("Gemm", ["a", "b", "c", "c"], ["y"])], [_info("a", shape=[2, 3])], [_info("y", shape=[2, 2])],
                     [numpy_helper.from_array(f23.T.copy(), "b"), numpy_helper.from_array(np.ones(3, np.float32), "c")]),
              {"a": f23}, expect_error=True),
        _case("ScatterElements", "ScatterElements with out-of-range indices",
              _model([helper.make_node("ScatterElements", ["x", "i", "u"], ["y"], axis=0)], [_info("x", shape=[3, 3])],
                     [_info("y", shape=[3, 3])], [numpy_helper.from_array(np.array([[5, 0, -9]], np.int64), "i"),
                                    numpy_helper.from_array(np.ones((1, 3), np.float32), "u")]),
              {"x": np.zeros((3, 3), np.float32)}, expect_error=True),
        _case("OneHot", "OneHot with swapped inputs (values where indices go)",
              _model([helper.make_node("OneHot", ["values", "depth", "indices"], ["y"])], [], [_info("y", shape=["a", "b"])],
                     [numpy_helper.from_array(np.array([0.0, 1.0], np.float32), "values"),
                      numpy_helper.from_array(np.array(4, np.int64), "depth"),
                      numpy_helper.from_array(np.array([0, 2, 1, 3], np.int64), "indices")]), {}, expect_error=True),
        _case("Softmax", "Softmax on int64", _model([helper.make_node("Softmax", ["x"], ["y"])],
                                                     [_info("x", TensorProto.INT64, [2, 3])], [_info("y", TensorProto.INT64, [2, 3])]),
              {"x": np.arange(6, dtype=np.int64).reshape(2, 3)}, expect_error=True),
        _case("Add", "Add with one input", _model([helper.make_node("Add", ["x"], ["y"])], [_info("x", shape=[2, 3])],
                                                  [_info("y", shape=[2, 3])]), {"x": f23}, expect_error=True),
        _case("Add", "a string parameter fed to Add",
              _model([helper.make_node("Add", ["x", "s"], ["y"])], [_info("x", shape=[2, 3])], [_info("y", shape=[2, 3])],
                     [tensor_proto("s", np.zeros(3), TensorProto.STRING)]), {"x": f23}, expect_error=True),
        _case("Relu", "a list (sequence input) fed to a tensor operator",
              _model([helper.make_node("Relu", ["xs"], ["y"])],
                     [helper.make_tensor_sequence_value_info("xs", TensorProto.FLOAT, [2, 3])], [_info("y", shape=[2, 3])]),
              {"xs": [f23, f23]}, expect_error=True),
        _case("Einsum", "Einsum on float8",
              _model([helper.make_node("Einsum", ["a", "b"], ["y"], equation="ij,jk->ik")], [],
                     [_info("y", TensorProto.FLOAT8E4M3FN, [2, 2])],
                     [tensor_proto("a", f23, TensorProto.FLOAT8E4M3FN), tensor_proto("b", f23.T, TensorProto.FLOAT8E4M3FN)]),
              {}, expect_error=True),
        _case("Relu", "executor.inference([x]): a list instead of a dict",
              _model([helper.make_node("Relu", ["x"], ["y"])], [_info("x", shape=[2, 3])], [_info("y", shape=[2, 3])]), [f23],
              expect_error=True),
        _case("Relu", "executor.inference(None)",
              _model([helper.make_node("Relu", ["x"], ["y"])], [_info("x", shape=[2, 3])], [_info("y", shape=[2, 3])]), None,
              expect_error=True),
        _case("Add", "a uint64 value that does not fit the declared int64 input",
              _model([helper.make_node("Add", ["i", "i"], ["y"])], [_info("i", TensorProto.INT64, [2])],
                     [_info("y", TensorProto.INT64, [2])]), {"i": np.array([2**63 + 5, 1], np.uint64)}, expect_error=True),
        _case("ScatterND", "item 5a: Swin-style attention mask (Shape -> ConstantOfShape -> ScatterND) must train",
              _swin_mask_model(), {"x": np.random.default_rng(1).standard_normal((2, 4)).astype(np.float32)},
              valid=True, runs=2),
    ]
    return cases


def _swin_mask_model() -> bytes:
    """``h = linear(x); m = zeros(h.shape[0], 4); m[:2] = 1; return h + m`` with a dynamic batch."""
    rng = np.random.default_rng(2)
    nodes = [
        helper.make_node("Gemm", ["x", "W"], ["h"], transB=1),
        helper.make_node("Shape", ["h"], ["shape"]),
        helper.make_node("ConstantOfShape", ["shape"], ["zeros"], value=numpy_helper.from_array(np.zeros(1, np.float32))),
        helper.make_node("ScatterND", ["zeros", "rows", "ones"], ["mask"]),
        helper.make_node("Add", ["h", "mask"], ["y"]),
    ]
    initializers = [numpy_helper.from_array(rng.standard_normal((4, 4)).astype(np.float32), "W"),
                    numpy_helper.from_array(np.array([[0], [1]], np.int64), "rows"),
                    numpy_helper.from_array(np.ones((2, 4), np.float32), "ones")]
    return _model(nodes, [_info("x", shape=["N", 4])], [_info("y", shape=["N", 4])], initializers)


def seed_cases() -> list[dict]:
    """Every unmutated seed (float operands as trainable initializers, so backward runs): d5 must run each
    and agree with onnxruntime, or the mutation fuzzers start from a broken model."""
    cases = []
    for op in SINGLE_NODE_OPS:
        seed = single_node_seed(op, np.random.default_rng(0), placement=lambda name: name not in ("X", "x", "A", "data", "input"))
        cases.append({"kind": "onnx", "label": op, "model": seed.model, "feeds": seed.feeds, "runs": 2, "valid": True,
                      "description": f"unmutated seed {op}"})
    for name in BUILDER_NAMES:
        seed = builder_seed(name, np.random.default_rng(0))
        cases.append({"kind": "onnx", "label": name, "model": seed.model, "feeds": seed.feeds, "runs": 2, "valid": True,
                      "description": f"unmutated seed {name}"})
    return cases


def finding_cases() -> list[dict]:
    """Minimal forms of what this fuzz suite found (see the report in issue 7), kept as regressions."""
    x34 = np.random.default_rng(3).standard_normal((3, 4)).astype(np.float32)
    x4 = np.random.default_rng(4).standard_normal((1, 4, 3, 3)).astype(np.float32)
    x6 = np.random.default_rng(6).standard_normal((1, 2, 6, 6)).astype(np.float32)

    def single(label, node, x, y_elem=TensorProto.FLOAT, y_shape=("a",), initializers=(), **flags):
        model = _model([node], [_info("x", helper.np_dtype_to_tensor_dtype(x.dtype), list(x.shape))],
                       [_info("y", y_elem, list(y_shape))], initializers)
        return {"kind": "onnx", "label": label, "model": model, "feeds": {"x": x}, "runs": 3, **flags}

    return [
        single("GatherND", helper.make_node("GatherND", ["x", "i"], ["y"], batch_dims=-2**31), x34, y_shape=["a"],
               initializers=[numpy_helper.from_array(np.array([[0, 1], [2, 3]], np.int64), "i")],
               description="fuzz: GatherND batch_dims=-2**31 passes onnx.checker; onnx shape inference (run by "
                           "the executor's memory check) segfaults"),
        single("LRN", helper.make_node("LRN", ["x"], ["y"], size=2**28), x4, y_shape=[1, 4, 3, 3], timeout=15,
               expect_error=True, description="fuzz: LRN size=2**28 on a (1, 4, 3, 3) input does not return (and an "
                                              "even size is refused, as onnxruntime refuses it)"),
        single("LRN", helper.make_node("LRN", ["x"], ["y"], size=2**28 + 1), x4, y_shape=[1, 4, 3, 3], timeout=15,
               valid=True, oracle=False,  # onnxruntime loops over the size: about 30 s
               description="fuzz: LRN with an odd size of 2**28 + 1 must run in time independent of the size"),
        single("ConvTranspose", helper.make_node("ConvTranspose", ["x", "w"], ["y"], kernel_shape=[2], strides=[2],
                                                 pads=[1, 1], output_padding=[1], output_shape=[1]),
               np.array([[[1.0, 2.0]]], np.float32), y_shape=[1, 1, 1],
               initializers=[numpy_helper.from_array(np.array([[[1.0, 10.0]]], np.float32), "w")],
               description="fuzz: ConvTranspose with output_shape must ignore pads (ONNX: pads are then computed); "
                           "onnxruntime gives 2, d5 uses the pads"),
        single("ConvTranspose", helper.make_node("ConvTranspose", ["x", "w"], ["y"], output_shape=[4], pads=[0, 3]),
               np.arange(1.0, 6.0, dtype=np.float32).reshape(1, 1, 5), y_shape=[1, 1, 4], valid=True,
               initializers=[numpy_helper.from_array(np.array([[[1.0, 10.0]]], np.float32), "w")],
               description="fuzz: ConvTranspose output_shape=[4] on [1..5] with w [1, 10]: onnxruntime gives "
                           "[12, 23, 34, 45] (the pads ignored), d5 gave [1, 12, 23, 34]"),
        single("OneHot", helper.make_node("OneHot", ["x", "depth", "values"], ["y"]), np.array([0, 2, 1, 2], np.int64),
               y_shape=[4, 3], valid=True,
               initializers=[numpy_helper.from_array(np.array(3, np.int64), "depth"),
                             numpy_helper.from_array(np.array([0.1, 0.9], np.float32), "values")],
               description="fuzz: OneHot with a trainable float values initializer: training raised 'OneHot has "
                           "no gradient', though the output is linear in values"),
        single("ConstantOfShape", helper.make_node("ConstantOfShape", ["x"], ["y"],
                                                   value=numpy_helper.from_array(np.zeros(0, np.float32))),
               np.array([2, 3], np.int64), y_shape=[2, 3], expect_error=True,
               description="fuzz: ConstantOfShape with an empty value tensor (ONNX: exactly one element)"),
        {"kind": "onnx", "label": "Relu", "feeds": {"x": x34}, "runs": 2,
         "model": _model([helper.make_node("Relu", ["x"], ["y"], name="relu_node")], [_info("x", shape=[3, 4])],
                         [_info("y", shape=[3, 4])]).replace(b"relu_node", b"\xccelu_node"),
         "description": "fuzz: a node name that is not UTF-8 is imported, then inference raises UnicodeDecodeError"},
        single("ArgMax", helper.make_node("ArgMax", ["x"], ["y"], axis=1, keepdims=-2**63), x34, TensorProto.INT64,
               expect_error=True, description="fuzz: ArgMax keepdims=-2**63 (only 0 or 1 mean anything)"),
        single("ReduceSum", helper.make_node("ReduceSum", ["x"], ["y"], keepdims=2**62), x34, y_shape=["a", "b"],
               expect_error=True, description="fuzz: ReduceSum keepdims=2**62 (only 0 or 1 mean anything)"),
        single("AveragePool", helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2],
                                               pads=[1, 1, 1, 1], ceil_mode=7), x6, y_shape=["a", "b", "c", "d"],
               expect_error=True, description="fuzz: AveragePool ceil_mode=7 (only 0 or 1 mean anything)"),
    ]


def api_route_cases() -> list[dict]:
    """The issue's must-refuse models once more, built through the Python API (past onnx.checker)."""
    cases = []
    for case in issue_cases():
        if case.get("expect_error") and isinstance(case["feeds"], dict):
            spec = network_spec(onnx.ModelProto.FromString(case["model"]))
            if spec is not None:
                cases.append(dict(case, network=spec, label=f"{case['label']} (api)",
                                  description=case["description"] + " [Python API]"))
    return cases


def fixed_onnx_cases() -> list[dict]:
    return issue_cases() + api_route_cases() + finding_cases() + seed_cases()

