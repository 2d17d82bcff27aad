"""The case tables shared by the registry-wide operator tests, one copy each: the forward cases with their
oracles (torch.nn.functional, or onnx.reference.ReferenceEvaluator running a one-node model), the
finite-difference gradient cases, and the operator families the registry must hold. Imported by plain name
(``from _tables import ...``): conftest.py puts this folder on sys.path."""
from __future__ import annotations

import dataclasses
import functools
import zlib
from typing import Callable

import numpy as np
import pytest

from _helpers import random_normal

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
F = torch.nn.functional

OPSET = 17  # every operator here has had its opset-13/14 semantics unchanged through 17


# ----------------------------------------------------------------------------------- operators by family

#: The elementwise, activation, linear, shape and loss operators of the forward table CASES.
CORE_OPS = ["Add", "Sub", "Mul", "Div", "Neg", "Abs", "Exp", "Log", "Sqrt", "Pow", "Relu", "Sigmoid", "Tanh",
            "LeakyRelu", "Elu", "Softmax", "LogSoftmax", "Dropout", "Gemm", "MatMul", "Flatten", "Reshape",
            "Concat", "Identity", "SoftmaxCrossEntropyLoss", "MeanSquaredError"]

SHAPE_OPS = ["Transpose", "Squeeze", "Unsqueeze", "Slice", "Gather", "GatherElements", "Split", "Shape", "Size",
             "Constant", "ConstantOfShape", "Cast", "CastLike", "Expand", "Tile", "Pad", "Range", "Where"]

REDUCTIONS = ["ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
              "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare", "ArgMax", "ArgMin"]

MATH_OPS = ["Clip", "Gelu", "Erf", "Reciprocal", "Floor", "Ceil", "Round", "Sign", "Min", "Max", "Sum", "Mean",
            "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Not", "And", "Or", "Xor", "Sin", "Cos",
            "HardSigmoid", "Softplus", "Softsign", "Selu", "PRelu", "Mod", "IsNaN", "IsInf"]

#: The shape, reduction and math operators of GRADIENT_CASES.
OPERATORS = SHAPE_OPS + REDUCTIONS + MATH_OPS

#: Heavier operators, whose forward is judged on ONNX's node cases (test_onnx_cases.py).
HEAVY_OPS = ["LayerNormalization", "InstanceNormalization", "ConvTranspose", "LSTM", "GRU", "RNN", "Einsum"]


# ------------------------------------------------------------------------ forward cases and their oracles


def onnx_oracle(op_type: str, attrs: dict, n_outputs: int = 1) -> Callable[[list], list]:
    """An oracle that runs ONNX's own reference implementation on a one-node model."""
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    def run(inputs: list) -> list:
        names = [f"in{i}" if x is not None else "" for i, x in enumerate(inputs)]
        graph_inputs = [helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)
                        for name, x in zip(names, inputs) if x is not None]
        outputs = [helper.make_tensor_value_info(f"out{k}", onnx.TensorProto.UNDEFINED, None) for k in range(n_outputs)]
        node = helper.make_node(op_type, names, [o.name for o in outputs], **attrs)
        model = helper.make_model(helper.make_graph([node], "one_node", graph_inputs, outputs),
                                  opset_imports=[helper.make_opsetid("", OPSET)])
        feeds = {name: x for name, x in zip(names, inputs) if x is not None}
        return list(ReferenceEvaluator(model).run(None, feeds))

    return run


def torch_oracle(function: Callable) -> Callable[[list], list]:
    """An oracle computing ``function(*torch_tensors)`` (non-float inputs become int64 tensors)."""

    def run(inputs: list) -> list:
        result = function(*[None if x is None else torch.from_numpy(np.array(x)) for x in inputs])
        results = result if isinstance(result, tuple) else (result,)
        return [r.numpy() for r in results]

    return run


def normal(*shape):
    return lambda rng, dtype: np.asarray(rng.standard_normal(shape), dtype=dtype)


def away_from_zero(*shape, low=0.2, high=2.0):
    """Inputs at least ``low`` from 0, so a finite difference never straddles a kink (Relu, Abs)."""
    def make(rng, dtype):
        return np.asarray(rng.uniform(low, high, shape) * rng.choice([-1.0, 1.0], shape), dtype=dtype)
    return make


def positive(*shape, low=0.5, high=2.0):
    return lambda rng, dtype: np.asarray(rng.uniform(low, high, shape), dtype=dtype)


def inputs_of(*makers):
    """Combine per-input makers; non-callables are constant inputs (int64 shapes, labels)."""
    return lambda rng, dtype: [m(rng, dtype) if callable(m) else m for m in makers]


@dataclasses.dataclass
class Case:
    id: str
    op_type: str
    attrs: dict
    make_inputs: Callable
    oracle: Callable[[list], list]
    #: Outputs the oracle computes (others the op returns, like Dropout's mask, are not compared).
    compared_outputs: int = 1
    gradient: dict = dataclasses.field(default_factory=dict)


def binary_cases(op_type, torch_function, b_maker=normal):
    shapes = [((3, 4), (3, 4)), ((2, 3, 4), (4,)), ((2, 1, 4), (3, 1)), ((3,), (2, 3, 1, 1)), ((2, 3), ()), ((), ())]
    cases = []
    for a_shape, b_shape in shapes:
        cases.append(Case(f"{op_type}-{a_shape}-{b_shape}", op_type, {},
                          inputs_of(normal(*a_shape), b_maker(*b_shape)), torch_oracle(torch_function)))
    return cases


def sce_case(name, scores_shape, labels_shape, classes, reduction="mean", ignore_index=None, weights=False):
    rng = np.random.default_rng(len(name))
    labels = rng.integers(0, classes, labels_shape).astype(np.int64)
    if ignore_index is not None:
        labels.reshape(-1)[::3] = ignore_index
    attrs = {"reduction": reduction} | ({} if ignore_index is None else {"ignore_index": ignore_index})
    makers = [normal(*scores_shape), labels] + ([positive(classes)] if weights else [])

    def oracle(inputs):
        scores, label_tensor = torch.from_numpy(inputs[0]), torch.from_numpy(inputs[1])
        weight = torch.from_numpy(inputs[2]) if weights else None
        loss = F.cross_entropy(scores, label_tensor, weight=weight, reduction=reduction,
                               ignore_index=-100 if ignore_index is None else ignore_index)
        return [loss.numpy(), F.log_softmax(scores, dim=1).numpy()]

    return Case(name, "SoftmaxCrossEntropyLoss", attrs, inputs_of(*makers), oracle, compared_outputs=2,
                gradient={"wrt": [0, 2] if weights else [0]})


def mse_oracle(reduction):
    def function(prediction, target):
        squared = (prediction - target) ** 2  # explicit, so broadcasting targets need no torch warning
        return {"mean": squared.mean(), "sum": squared.sum(), "none": squared}[reduction]
    return torch_oracle(function)


CASES = [
    *binary_cases("Add", torch.add),
    *binary_cases("Sub", torch.sub),
    *binary_cases("Mul", torch.mul),
    *binary_cases("Div", torch.div, b_maker=away_from_zero),
    Case("Neg", "Neg", {}, inputs_of(normal(3, 4)), torch_oracle(torch.neg)),
    Case("Abs", "Abs", {}, inputs_of(away_from_zero(3, 4)), torch_oracle(torch.abs)),
    Case("Exp", "Exp", {}, inputs_of(normal(2, 3, 4)), torch_oracle(torch.exp)),
    Case("Exp-0d", "Exp", {}, inputs_of(normal()), torch_oracle(torch.exp)),
    *[Case(f"{op_type}-0d", op_type, attrs, inputs_of(away_from_zero()), torch_oracle(function))
      for op_type, attrs, function in [("Relu", {}, F.relu), ("Tanh", {}, torch.tanh), ("Sigmoid", {}, torch.sigmoid),
                                       ("LeakyRelu", {"alpha": 0.1}, lambda x: F.leaky_relu(x, 0.1)),
                                       ("Elu", {"alpha": 0.5}, lambda x: F.elu(x, 0.5)), ("Abs", {}, torch.abs)]],
    Case("Sqrt-0d", "Sqrt", {}, inputs_of(positive()), torch_oracle(torch.sqrt)),
    Case("Pow-0d", "Pow", {}, inputs_of(positive(), normal()), torch_oracle(torch.pow)),
    Case("Log", "Log", {}, inputs_of(positive(3, 4)), torch_oracle(torch.log)),
    Case("Sqrt", "Sqrt", {}, inputs_of(positive(3, 4)), torch_oracle(torch.sqrt)),
    Case("Pow-float-exponent", "Pow", {}, inputs_of(positive(3, 4), normal(4)), torch_oracle(torch.pow)),
    Case("Pow-int-exponent", "Pow", {}, inputs_of(normal(3, 4), np.array(3, dtype=np.int64)),
         onnx_oracle("Pow", {})),
    Case("Relu", "Relu", {}, inputs_of(away_from_zero(3, 4)), torch_oracle(F.relu)),
    Case("Sigmoid", "Sigmoid", {}, inputs_of(normal(3, 4)), torch_oracle(torch.sigmoid)),
    Case("Tanh", "Tanh", {}, inputs_of(normal(3, 4)), torch_oracle(torch.tanh)),
    Case("LeakyRelu-default", "LeakyRelu", {}, inputs_of(away_from_zero(3, 4)), torch_oracle(F.leaky_relu)),
    Case("LeakyRelu-0.2", "LeakyRelu", {"alpha": 0.2}, inputs_of(away_from_zero(3, 4)),
         torch_oracle(lambda x: F.leaky_relu(x, 0.2))),
    Case("Elu-default", "Elu", {}, inputs_of(away_from_zero(3, 4)), torch_oracle(F.elu)),
    Case("Elu-0.5", "Elu", {"alpha": 0.5}, inputs_of(away_from_zero(3, 4)), torch_oracle(lambda x: F.elu(x, 0.5))),
    Case("Softmax-default", "Softmax", {}, inputs_of(normal(2, 3, 5)), torch_oracle(lambda x: F.softmax(x, -1))),
    Case("Softmax-axis1", "Softmax", {"axis": 1}, inputs_of(normal(2, 3, 5)), torch_oracle(lambda x: F.softmax(x, 1))),
    Case("Softmax-onnx-axis0", "Softmax", {"axis": 0}, inputs_of(normal(4, 3)), onnx_oracle("Softmax", {"axis": 0})),
    Case("LogSoftmax-default", "LogSoftmax", {}, inputs_of(normal(2, 3, 5)),
         torch_oracle(lambda x: F.log_softmax(x, -1))),
    Case("LogSoftmax-axis-2", "LogSoftmax", {"axis": -2}, inputs_of(normal(2, 3, 5)),
         onnx_oracle("LogSoftmax", {"axis": -2})),
    Case("Dropout-inference", "Dropout", {}, inputs_of(normal(3, 4)), onnx_oracle("Dropout", {}, 2),
         compared_outputs=2),
    Case("Gemm-default", "Gemm", {}, inputs_of(normal(3, 4), normal(4, 5)), onnx_oracle("Gemm", {})),
    Case("Gemm-transposed-C-row", "Gemm", {"transA": 1, "transB": 1, "alpha": 0.5, "beta": 2.0},
         inputs_of(normal(4, 3), normal(5, 4), normal(5)),
         onnx_oracle("Gemm", {"transA": 1, "transB": 1, "alpha": 0.5, "beta": 2.0})),
    Case("Gemm-C-column", "Gemm", {"transB": 1}, inputs_of(normal(3, 4), normal(5, 4), normal(3, 1)),
         torch_oracle(lambda a, b, c: torch.addmm(c, a, b.T))),
    Case("Gemm-C-full", "Gemm", {"beta": 0.0}, inputs_of(normal(3, 4), normal(4, 5), normal(3, 5)),
         onnx_oracle("Gemm", {"beta": 0.0})),
    *[Case(f"MatMul-{a}-{b}", "MatMul", {}, inputs_of(normal(*a), normal(*b)), torch_oracle(torch.matmul))
      for a, b in [((3, 4), (4, 5)), ((2, 3, 4), (4, 5)), ((4, 5), (2, 5, 3)), ((2, 1, 3, 4), (3, 4, 2)),
                   ((4,), (4, 5)), ((2, 3, 4), (4,)), ((4,), (4,))]],
    Case("Flatten-default", "Flatten", {}, inputs_of(normal(2, 3, 4)), torch_oracle(lambda x: x.flatten(1))),
    *[Case(f"Flatten-axis{axis}", "Flatten", {"axis": axis}, inputs_of(normal(2, 3, 4)),
           onnx_oracle("Flatten", {"axis": axis})) for axis in (0, 2, 3, -1)],
    *[Case(f"Reshape-{shape}-allowzero{allowzero}", "Reshape", {"allowzero": allowzero},
           inputs_of(normal(*data), np.array(shape, dtype=np.int64)), onnx_oracle("Reshape", {"allowzero": allowzero}))
      for data, shape, allowzero in [((2, 3, 4), [0, -1], 0), ((2, 3, 4), [4, -1, 2], 0), ((2, 3, 4), [24], 0),
                                     ((2, 3, 4), [0, 0, 2, 2], 0), ((2, 3, 4), [3, 8], 1)]],
    *[Case(f"Concat-axis{axis}", "Concat", {"axis": axis},
           inputs_of(normal(*a), normal(*b), normal(*c)), onnx_oracle("Concat", {"axis": axis}))
      for axis, a, b, c in [(0, (1, 3), (2, 3), (4, 3)), (1, (2, 1, 4), (2, 3, 4), (2, 2, 4)), (-1, (2, 3), (2, 1), (2, 2))]],
    Case("Identity", "Identity", {}, inputs_of(normal(3, 4)), torch_oracle(lambda x: x.clone())),
    sce_case("SCE-mean", (5, 4), (5,), 4),
    sce_case("SCE-sum", (5, 4), (5,), 4, reduction="sum"),
    sce_case("SCE-none", (5, 4), (5,), 4, reduction="none"),
    sce_case("SCE-weights", (6, 3), (6,), 3, weights=True),
    sce_case("SCE-weights-sum", (6, 3), (6,), 3, reduction="sum", weights=True),
    sce_case("SCE-ignore", (6, 4), (6,), 4, ignore_index=2),
    sce_case("SCE-ignore-weights-none", (6, 4), (6,), 4, reduction="none", ignore_index=-1, weights=True),
    sce_case("SCE-spatial", (2, 3, 4, 5), (2, 4, 5), 3),
    sce_case("SCE-spatial-ignore-weights", (2, 3, 4), (2, 4), 3, ignore_index=1, weights=True),
    *[Case(f"MSE-{reduction}-{target}", "MeanSquaredError", {"reduction": reduction},
           inputs_of(normal(3, 4), normal(*target)), mse_oracle(reduction))
      for reduction in ("mean", "sum", "none") for target in [(3, 4), (4,)]],
]


def make_case_inputs(case: Case, dtype) -> list:
    return case.make_inputs(np.random.default_rng(zlib.crc32(case.id.encode())), dtype)


# ------------------------------------------------------------------------------ gradient cases (float64)

def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def off_grid(*shape, seed: int = 0) -> np.ndarray:
    """Values a fraction 0.1-0.4 past an integer: away from the kinks of Floor, Ceil and Round (at .5)."""
    return rng(seed).integers(-3, 3, shape) + rng(seed + 1).uniform(0.1, 0.4, shape)


def ints(*values) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def normal64(*shape, seed: int = 0) -> np.ndarray:
    return rng(seed).standard_normal(shape)


def away_from_zero64(*shape, seed: int = 0) -> np.ndarray:
    values = rng(seed).uniform(0.5, 2.0, shape)
    return values * rng(seed + 1).choice([-1.0, 1.0], shape)


GRADIENT_CASES = {
    "Transpose": ("Transpose", {"perm": [2, 0, 1]}, lambda: [normal64(2, 3, 4)]),
    "Transpose-default": ("Transpose", {}, lambda: [normal64(2, 3, 4)]),
    "Squeeze": ("Squeeze", {}, lambda: [normal64(2, 1, 3, 1), ints(1, -1)]),
    "Squeeze-attr": ("Squeeze", {"axes": [1]}, lambda: [normal64(2, 1, 3)]),
    "Unsqueeze": ("Unsqueeze", {}, lambda: [normal64(2, 3), ints(0, -1)]),
    "Unsqueeze-attr": ("Unsqueeze", {"axes": [1]}, lambda: [normal64(2, 3)]),
    "Slice": ("Slice", {}, lambda: [normal64(5, 6), ints(1, -1), ints(4, 0), ints(0, 1), ints(1, -2)]),
    "Slice-attr": ("Slice", {"starts": [1], "ends": [100], "axes": [1]}, lambda: [normal64(3, 4)]),
    "Gather-repeated": ("Gather", {"axis": 0}, lambda: [normal64(5, 3), ints(0, 2, 4, 0).reshape(2, 2)]),
    "Gather-axis1": ("Gather", {"axis": 1}, lambda: [normal64(2, 4, 3), ints(-1, 1, 1)]),
    "GatherElements": ("GatherElements", {"axis": 1}, lambda: [normal64(3, 4), ints(0, 3, 3, 1, 2, 2).reshape(3, 2)]),
    "Split": ("Split", {"axis": 0}, lambda: [normal64(6, 4), ints(2, 4)]),
    "Split-attr": ("Split", {"axis": 1, "split": [1, 3]}, lambda: [normal64(2, 4)]),
    "Split-num-outputs": ("Split", {"axis": 1, "num_outputs": 3}, lambda: [normal64(2, 5)]),
    "Cast": ("Cast", {"to": 11}, lambda: [normal64(3, 4)]),
    "CastLike": ("CastLike", {}, lambda: [normal64(3, 4), np.zeros(1)]),
    "Expand": ("Expand", {}, lambda: [normal64(3, 1), ints(2, 3, 4)]),
    "Tile": ("Tile", {}, lambda: [normal64(2, 3), ints(2, 3)]),
    "Pad-constant": ("Pad", {}, lambda: [normal64(3, 4), ints(1, -1, 2, 1), np.array(0.5)]),
    "Pad-reflect": ("Pad", {"mode": "reflect"}, lambda: [normal64(4, 5), ints(2, 1, 1, 3)]),
    "Pad-edge": ("Pad", {"mode": "edge"}, lambda: [normal64(4, 5), ints(2, 1, 1, 3)]),
    "Pad-wrap": ("Pad", {"mode": "wrap"}, lambda: [normal64(4, 5), ints(2, 1, 1, 3)]),
    "Pad-axes": ("Pad", {"mode": "reflect"}, lambda: [normal64(3, 4, 5), ints(2, 1), None, ints(-1)]),
    "Pad-attr": ("Pad", {"pads": [0, 1, 2, 0], "value": 1.5}, lambda: [normal64(2, 3)]),
    "Where": ("Where", {}, lambda: [normal64(2, 3) > 0, normal64(2, 3, seed=1), normal64(3, seed=2)]),
    "ReduceSum": ("ReduceSum", {"keepdims": 0}, lambda: [normal64(3, 4, 5), ints(0, 2)]),
    "ReduceSum-all": ("ReduceSum", {}, lambda: [normal64(3, 4)]),
    "ReduceSum-noop": ("ReduceSum", {"noop_with_empty_axes": 1}, lambda: [normal64(3, 4)]),
    "ReduceMean": ("ReduceMean", {"axes": [1]}, lambda: [normal64(3, 4, 5)]),
    "ReduceMean-input": ("ReduceMean", {"keepdims": 0}, lambda: [normal64(3, 4, 5), ints(-1)]),
    "ReduceMax": ("ReduceMax", {"axes": [0, 2]}, lambda: [normal64(3, 4, 5)]),
    "ReduceMin": ("ReduceMin", {"keepdims": 0}, lambda: [normal64(3, 4, 5), ints(1)]),
    "ReduceProd": ("ReduceProd", {"axes": [1, 2]}, lambda: [away_from_zero64(2, 3, 4)]),
    "ReduceProd-zero": ("ReduceProd", {"axes": [1]}, lambda: [np.array([[0.0, 2.0, 3.0], [1.5, -1.0, 0.5]])]),
    "ReduceL1": ("ReduceL1", {"axes": [0]}, lambda: [away_from_zero64(3, 4)]),
    "ReduceL2": ("ReduceL2", {"axes": [1], "keepdims": 0}, lambda: [normal64(3, 4)]),
    "ReduceLogSum": ("ReduceLogSum", {"keepdims": 0}, lambda: [np.abs(away_from_zero64(3, 4, 5)), ints(0, 2)]),
    "ReduceLogSumExp": ("ReduceLogSumExp", {"axes": [1]}, lambda: [normal64(3, 4) * 10]),
    "ReduceSumSquare": ("ReduceSumSquare", {}, lambda: [normal64(3, 4), ints(0)]),
    "Clip": ("Clip", {}, lambda: [normal64(4, 5), np.array(-0.5), np.array(0.7)]),
    "Clip-min-only": ("Clip", {}, lambda: [normal64(4, 5), np.array(-0.5)]),
    "Clip-attr": ("Clip", {"min": -0.5, "max": 0.5}, lambda: [normal64(4, 5)]),
    "Gelu": ("Gelu", {}, lambda: [normal64(4, 5) * 2]),
    "Gelu-tanh": ("Gelu", {"approximate": "tanh"}, lambda: [normal64(4, 5) * 2]),
    "Erf": ("Erf", {}, lambda: [normal64(4, 5)]),
    "Reciprocal": ("Reciprocal", {}, lambda: [away_from_zero64(4, 5)]),
    "Floor": ("Floor", {}, lambda: [off_grid(4, 5)]),
    "Ceil": ("Ceil", {}, lambda: [off_grid(4, 5)]),
    "Round": ("Round", {}, lambda: [off_grid(4, 5)]),
    "Sign": ("Sign", {}, lambda: [away_from_zero64(4, 5)]),
    "Max": ("Max", {}, lambda: [normal64(2, 3), normal64(3, seed=1), normal64(2, 1, seed=2)]),
    "Min": ("Min", {}, lambda: [normal64(2, 3), normal64(3, seed=1), normal64(2, 1, seed=2)]),
    "Sum": ("Sum", {}, lambda: [normal64(2, 3), normal64(3, seed=1), normal64(2, 1, seed=2)]),
    "Mean": ("Mean", {}, lambda: [normal64(2, 3), normal64(3, seed=1), normal64(2, 1, seed=2)]),
    "Max-single": ("Max", {}, lambda: [normal64(2, 3)]),
    "Sin": ("Sin", {}, lambda: [normal64(4, 5)]),
    "Cos": ("Cos", {}, lambda: [normal64(4, 5)]),
    "HardSigmoid": ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}, lambda: [normal64(4, 5) * 2]),
    "Softplus": ("Softplus", {}, lambda: [normal64(4, 5) * 3]),
    "Softsign": ("Softsign", {}, lambda: [normal64(4, 5)]),
    "Selu": ("Selu", {}, lambda: [normal64(4, 5)]),
    "PRelu": ("PRelu", {}, lambda: [normal64(2, 3, 4), normal64(3, 1, seed=1)]),
    "Mod-fmod": ("Mod", {"fmod": 1}, lambda: [normal64(3, 4) * 5, away_from_zero64(4)]),
    "Mod": ("Mod", {}, lambda: [normal64(3, 4) * 5, away_from_zero64(3, 4)]),
}

#: One-off gradient cases (image and misc operators) beside the tables above.
MISC_GRADIENT_CASES = [
    ("Trilu", {"upper": 1}, [random_normal((2, 3, 4)), np.array(1)]),
    ("Trilu", {"upper": 0}, [random_normal((3, 3)), np.array(-1)]),
    ("CumSum", {}, [random_normal((3, 4)), np.array(1)]),
    ("CumSum", {"exclusive": 1, "reverse": 1}, [random_normal((3, 4)), np.array(0)]),
    ("SpaceToDepth", {"blocksize": 2}, [random_normal((2, 3, 4, 6))]),
    ("SpaceToDepth", {"blocksize": 2, "mode": "CRD"}, [random_normal((1, 2, 4, 2))]),
    ("DepthToSpace", {"blocksize": 2}, [random_normal((2, 8, 2, 3))]),
    ("DepthToSpace", {"blocksize": 2, "mode": "CRD"}, [random_normal((1, 8, 3, 2))]),
    ("Celu", {"alpha": 2.0}, [random_normal((3, 5))]),
    ("Mish", {}, [random_normal((3, 5))]),
    ("LpNormalization", {"axis": 1, "p": 2}, [random_normal((3, 4))]),
    ("LpNormalization", {"axis": 0, "p": 1}, [random_normal((3, 4)) + 5.0]),
    ("GatherND", {}, [random_normal((3, 4)), np.array([[0, 1], [2, 3], [0, 1]])]),
    ("GatherND", {"batch_dims": 1}, [random_normal((2, 3, 4)), np.array([[1], [2]])]),
]


def _all_gradient_cases() -> list:
    cases = [pytest.param(case.op_type, case.attrs, functools.partial(make_case_inputs, case, np.float64),
                          case.gradient, id=f"oracle-{case.id}") for case in CASES]
    cases += [pytest.param(op_type, attributes, make_inputs, {}, id=name)
              for name, (op_type, attributes, make_inputs) in sorted(GRADIENT_CASES.items())]
    cases += [pytest.param(op_type, attributes, functools.partial(list, inputs), {}, id=f"misc-{op_type}-{k}")
              for k, (op_type, attributes, inputs) in enumerate(MISC_GRADIENT_CASES)]
    return cases


ALL_GRADIENT_CASES = _all_gradient_cases()
