"""The NumPy reference operators (all but conv/pooling/batch-norm) against independent oracles.

Forward: float32, compared with torch.nn.functional or with onnx.reference.ReferenceEvaluator running a
one-node ONNX model. Gradient: float64 central differences through d5.ops.test_gradient.
"""
from __future__ import annotations

import dataclasses
import zlib
from typing import Callable

import numpy as np
import pytest

from d5.errors import ShapeError, UnsupportedOperatorError
from d5.frameworks.reference.operators import create_operator, supported_operators
from d5.ops import as_tuple, test_forward, test_gradient

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
F = torch.nn.functional

OPSET = 17  # every operator here has had its opset-13/14 semantics unchanged through 17


# ------------------------------------------------------------------------------------------ oracles

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


# --------------------------------------------------------------------------------------- input makers

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


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_forward_matches_oracle_float32(case):
    op = create_operator(case.op_type, case.attrs)
    inputs = make_case_inputs(case, np.float32)
    result = test_forward(_FirstOutputs(op, case.compared_outputs), inputs, case.oracle, rtol=1e-5, atol=1e-5)
    assert result, result.summary()
    # Dtype preservation: a float32 network stays float32 (reduced losses as 0-d float32 arrays).
    for output in as_tuple(op.forward(list(inputs))):
        assert isinstance(output, np.ndarray)
        assert output.dtype in (np.float32, np.bool_), output.dtype


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_gradient_float64(case):
    op = create_operator(case.op_type, case.attrs)
    inputs = make_case_inputs(case, np.float64)
    result = test_gradient(op, inputs, **case.gradient)
    assert result, result.summary()
    assert result.inputs, "no input was checked"


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_backward_keeps_float32(case):
    op = create_operator(case.op_type, case.attrs)
    inputs = make_case_inputs(case, np.float32)
    outputs = as_tuple(op.forward(list(inputs)))
    grads = as_tuple(op.backward([np.ones_like(o) for o in outputs], inputs, list(outputs)))
    for x, g in zip(inputs, grads):
        if g is not None:
            assert g.dtype == np.float32 and g.shape == x.shape


class _FirstOutputs:
    """Compare only the outputs an oracle computes (Dropout's mask, say, is checked separately)."""

    def __init__(self, op, count):
        self.op, self.count = op, count
        self.training = False

    def forward(self, inputs):
        self.op.training = self.training
        outputs = self.op.forward(inputs)
        return outputs[:self.count] if isinstance(outputs, tuple) else outputs


# ------------------------------------------------------------------------------ ONNX conformance cases

#: ONNX node tests that cannot apply, and why.
CONFORMANCE_EXCLUDED = {
    "test_identity_sequence": "a sequence, not a tensor",
    "test_identity_opt": "an optional, not a tensor",
    # ONNX's expected outputs come from numpy's global RNG; our dropout tests check mask and scaling.
    "test_training_dropout": "random mask", "test_training_dropout_mask": "random mask",
    "test_training_dropout_default": "random mask", "test_training_dropout_default_mask": "random mask",
}


def test_onnx_conformance_cases_of_these_operators():
    """ONNX's own node test cases (expected outputs from ONNX) for every operator implemented here."""
    import warnings

    from onnx import helper
    from onnx.backend.test.loader import load_model_tests

    ours = {"Add", "Sub", "Mul", "Div", "Neg", "Abs", "Exp", "Log", "Sqrt", "Pow", "Relu", "Sigmoid", "Tanh",
            "LeakyRelu", "Elu", "Softmax", "LogSoftmax", "Dropout", "Gemm", "MatMul", "Flatten", "Reshape",
            "Concat", "Identity", "SoftmaxCrossEntropyLoss"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the generators' own overflow warnings (Cast cases)
        cases = [c for c in load_model_tests(kind="node")
                 if c.model is not None and len(c.model.graph.node) == 1
                 and c.model.graph.node[0].op_type in ours and c.model.graph.node[0].domain in ("", "ai.onnx")
                 and c.name not in CONFORMANCE_EXCLUDED]
    failures, covered = [], set()
    for case in cases:
        node = case.model.graph.node[0]
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        names = [i.name for i in case.model.graph.input]
        for inputs, outputs in case.data_sets:
            feeds = dict(zip(names, inputs))
            op = _FirstOutputs(create_operator(node.op_type, attrs), len(node.output))
            result = test_forward(op, [feeds[n] if n else None for n in node.input], list(outputs),
                                  rtol=max(case.rtol, 1e-6), atol=max(case.atol, 1e-6))
            if not result:
                failures.append(f"{case.name}: {result.summary()}")
        covered.add(node.op_type)
    assert len(cases) > 150 and covered == ours, sorted(ours - covered)
    assert not failures, "\n".join(failures)


# ----------------------------------------------------------------------------------------- dropout

def test_dropout_training_drops_and_rescales_reproducibly():
    x = np.random.default_rng(1).standard_normal((200, 100)).astype(np.float32)
    op = create_operator("Dropout", {"seed": 7})
    op.training = True
    out, mask = op.forward([x, np.array(0.3, np.float32)])
    assert out.dtype == np.float32 and mask.dtype == bool
    np.testing.assert_allclose(out, np.where(mask, x / 0.7, 0), rtol=1e-6)
    assert abs(1 - mask.mean() - 0.3) < 0.02  # 20,000 draws: the standard deviation is 0.003
    again = create_operator("Dropout", {"seed": 7})
    again.training = True
    np.testing.assert_array_equal(again.forward([x, np.array(0.3, np.float32)])[1], mask)
    op.reset_rng()
    np.testing.assert_array_equal(op.forward([x, np.array(0.3, np.float32)])[1], mask)
    assert not np.array_equal(op.forward([x, np.array(0.3, np.float32)])[1], mask)  # the stream moves on


def test_dropout_training_mode_input_activates_it():
    x = np.ones((50, 50))
    op = create_operator("Dropout", {"seed": 0})
    out, mask = op.forward([x, np.array(0.5), np.array(True)])
    assert 0 < mask.mean() < 1
    np.testing.assert_array_equal(out, np.where(mask, 2.0, 0.0))
    out, mask = op.forward([x, np.array(0.5), np.array(False)])
    assert mask.all() and np.array_equal(out, x)


@pytest.mark.parametrize("ratio", [0.2, 0.5])
def test_dropout_gradient_in_training(ratio):
    x = np.random.default_rng(0).standard_normal((6, 7))
    op = create_operator("Dropout", {"seed": 3})
    result = test_gradient(op, [x, np.array(ratio)], training=True, wrt=[0])
    assert result, result.summary()
    op.training = True
    out, mask = op.forward([x, np.array(ratio)])
    assert 0 < mask.mean() < 1
    grad = op.backward([np.ones_like(x), np.zeros_like(mask)], [x, np.array(ratio)], [out, mask])[0]
    np.testing.assert_allclose(grad, mask / (1 - ratio))


# ------------------------------------------------------------------------------------------- errors

@pytest.mark.parametrize("op_type, attrs, inputs, words", [
    ("Add", {}, [np.ones((2, 3)), np.ones((4,))], ["Add", "(2, 3)", "(4,)"]),
    ("Mul", {}, [np.ones((2, 3)), np.ones((3, 2))], ["Mul", "(2, 3)", "(3, 2)"]),
    ("Gemm", {}, [np.ones((2, 3)), np.ones((4, 5))], ["Gemm", "(2, 3)", "(4, 5)"]),
    ("Gemm", {"transA": 1}, [np.ones((2, 3)), np.ones((3, 5))], ["Gemm", "(2, 3)", "transA=1"]),
    ("Gemm", {}, [np.ones((2, 3)), np.ones((3, 5)), np.ones((3, 5))], ["Gemm", "(3, 5)", "(2, 5)"]),
    ("MatMul", {}, [np.ones((2, 3)), np.ones((4, 5))], ["MatMul", "(2, 3)", "(4, 5)"]),
    ("SoftmaxCrossEntropyLoss", {}, [np.ones((2, 3)), np.array([0, 3])], ["SoftmaxCrossEntropyLoss", "3", "(2, 3)"]),
    ("SoftmaxCrossEntropyLoss", {}, [np.ones((2, 3)), np.array([0, -1])], ["out of range", "-1"]),
    ("SoftmaxCrossEntropyLoss", {}, [np.ones((2, 3)), np.array([0, 1, 2])], ["(3,)", "(2, 3)"]),
    ("SoftmaxCrossEntropyLoss", {}, [np.ones((2, 3)), np.array([0.0, 1.0])], ["integer"]),
    ("SoftmaxCrossEntropyLoss", {}, [np.ones((2, 3)), np.array([0, 1]), np.ones(2)], ["weights", "(2,)"]),
    ("MeanSquaredError", {}, [np.ones((2, 3)), np.ones((2,))], ["MeanSquaredError", "(2, 3)", "(2,)"]),
    ("Reshape", {}, [np.ones((2, 3)), np.array([4, -1], dtype=np.int64)], ["Reshape", "(2, 3)"]),
    ("Reshape", {}, [np.ones((2, 3)), np.array([-1, -1], dtype=np.int64)], ["Reshape", "-1"]),
    ("Concat", {"axis": 0}, [np.ones((2, 3)), np.ones((2, 4))], ["Concat", "(2, 3)", "(2, 4)"]),
    ("Softmax", {"axis": 2}, [np.ones((2, 3))], ["Softmax", "axis 2"]),
    ("Flatten", {"axis": 4}, [np.ones((2, 3))], ["Flatten", "axis 4"]),
    ("Dropout", {}, [np.ones(3), np.array(1.5)], ["Dropout", "ratio"]),
])
def test_bad_shapes_raise_shape_error_naming_op_and_shapes(op_type, attrs, inputs, words):
    op = create_operator(op_type, attrs)
    with pytest.raises(ShapeError) as info:
        op.forward(inputs)
    for word in words:
        assert word in str(info.value)


def test_bad_reduction_and_unknown_attribute():
    with pytest.raises(ShapeError, match="reduction"):
        create_operator("MeanSquaredError", {"reduction": "average"})
    with pytest.raises(UnsupportedOperatorError, match="Relu"):
        create_operator("Relu", {"alpha": 1.0})


def test_registry_lists_the_operators():
    expected = {"Add", "Sub", "Mul", "Div", "Neg", "Abs", "Exp", "Log", "Sqrt", "Pow", "Relu", "Sigmoid", "Tanh",
                "LeakyRelu", "Elu", "Softmax", "LogSoftmax", "Dropout", "Gemm", "MatMul", "Flatten", "Reshape",
                "Concat", "Identity", "SoftmaxCrossEntropyLoss", "MeanSquaredError"}
    assert expected <= set(supported_operators())


# ------------------------------------------------------------------------------------ numerical edges

def test_softmax_family_is_stable_for_huge_inputs():
    x = np.array([[1e4, 0.0, -1e4]], dtype=np.float32)
    np.testing.assert_allclose(create_operator("Softmax", {}).forward([x]), [[1, 0, 0]])
    np.testing.assert_allclose(create_operator("LogSoftmax", {}).forward([x]), [[0, -1e4, -2e4]])
    loss, _ = create_operator("SoftmaxCrossEntropyLoss", {}).forward([x, np.array([2])])
    assert np.isfinite(loss) and loss.dtype == np.float32 and loss.shape == ()
    np.testing.assert_allclose(loss, 2e4)


def test_loss_output_is_zero_dim_array_of_score_dtype():
    for dtype in (np.float32, np.float64):
        loss = create_operator("MeanSquaredError", {}).forward([np.ones(3, dtype), np.zeros(3, dtype)])
        assert isinstance(loss, np.ndarray) and loss.shape == () and loss.dtype == dtype


def test_pow_gradient_edges_follow_torch():
    x = torch.tensor([0.0, 0.0, 2.0, -2.0], dtype=torch.float64, requires_grad=True)
    y = torch.tensor([0.0, 2.0, 0.0, 3.0], dtype=torch.float64, requires_grad=True)
    (x ** y).sum().backward()
    op = create_operator("Pow", {})
    xs, ys = x.detach().numpy(), y.detach().numpy()
    out = op.forward([xs, ys])
    grad_x, grad_y = op.backward([np.ones(4)], [xs, ys], [out])
    np.testing.assert_allclose(grad_x, x.grad.numpy())
    np.testing.assert_allclose(grad_y[:3], y.grad.numpy()[:3])  # torch gives NaN at (-2)**3's exponent too
    assert np.isnan(grad_y[3]) and np.isnan(y.grad.numpy()[3])


def test_binary_ops_do_not_write_into_inputs():
    a, b = np.ones((2, 3)), np.full(3, 2.0)
    for op_type in ("Add", "Sub", "Mul", "Div"):
        op = create_operator(op_type, {})
        out = op.forward([a, b])
        op.backward([np.ones_like(out)], [a, b], [out])
    np.testing.assert_array_equal(a, 1.0)
    np.testing.assert_array_equal(b, 2.0)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("with_weights", [False, True])
def test_negative_log_likelihood_loss_matches_torch_and_finite_differences(reduction, with_weights):
    import torch

    from d5.frameworks.reference.operators import create_operator
    from d5.ops.validation import test_gradient as check_gradient

    rng = np.random.default_rng(0)
    log_prob = np.log(rng.dirichlet(np.ones(5), size=(6, 3)).transpose(0, 2, 1))  # (N=6, C=5, d=3)
    labels = rng.integers(0, 5, size=(6, 3))
    weights = rng.uniform(0.5, 2.0, size=5) if with_weights else None
    inputs = [log_prob, labels] + ([weights] if with_weights else [])
    op = create_operator("NegativeLogLikelihoodLoss", {"reduction": reduction})
    expected = torch.nn.functional.nll_loss(torch.from_numpy(log_prob), torch.from_numpy(labels),
                                            weight=None if weights is None else torch.from_numpy(weights),
                                            reduction=reduction).numpy()
    np.testing.assert_allclose(op.forward(inputs), expected, rtol=1e-10)
    result = check_gradient(op, inputs)
    assert result.passed, str(result)
