"""Gradients of the reference operators: every case of the gradient tables (_tables.py: the forward cases in
float64, GRADIENT_CASES, MISC_GRADIENT_CASES) against float64 central differences (d5.ops.test_gradient); float32
inputs keep float32 outputs and gradients of the inputs' shapes; and a small network of these operators trained
through the reference executor matches finite differences of the loss."""
from __future__ import annotations

import numpy as np
import pytest

from d5.frameworks.reference.operators import create_operator
from d5.ops import as_tuple, test_gradient
from _tables import ALL_GRADIENT_CASES, CASES, ints, make_case_inputs, normal64


@pytest.mark.parametrize("op_type, attributes, make_inputs, options", ALL_GRADIENT_CASES)
def test_gradient_matches_finite_differences(op_type, attributes, make_inputs, options):
    """float64 central differences (d5.ops.test_gradient) for every case of the tables above."""
    result = test_gradient(create_operator(op_type, attributes), make_inputs(), **options)
    assert result.passed, result.summary()
    assert result.inputs, "no input was checked"


def _float32(*extra):
    """A 0-d and a 2-d float32 input, each followed by ``extra``: 0-d inputs are where numpy 1.x's value-based
    casting would silently promote to float64."""
    return [[x, *[np.asarray(e) for e in extra]] for x in (np.array(0.3, np.float32), np.full((2, 3), 0.3, np.float32))]


#: (op_type, attributes, input sets): every forward case in float32, and operators whose float32 is easy to lose.
FLOAT32_CASES = [
    *[pytest.param(case.op_type, case.attrs, [make_case_inputs(case, np.float32)], id=f"oracle-{case.id}")
      for case in CASES],
    *[pytest.param(op_type, attributes, _float32(*extra), id=f"scalar-and-matrix-{op_type}-{k}")
      for k, (op_type, attributes, extra) in enumerate([
          ("Gelu", {}, []), ("Gelu", {"approximate": "tanh"}, []), ("Erf", {}, []), ("Selu", {}, []),
          ("HardSigmoid", {}, []), ("Softplus", {}, []), ("Mean", {}, [np.float32(1.0)]),
          ("ReduceMean", {}, []), ("ReduceL2", {}, []), ("ReduceLogSumExp", {}, []), ("Clip", {"min": -0.5}, []),
      ])],
]


@pytest.mark.parametrize("op_type, attributes, input_sets", FLOAT32_CASES)
def test_float32_stays_float32_through_forward_and_backward(op_type, attributes, input_sets):
    for inputs in input_sets:
        op = create_operator(op_type, attributes)
        outputs = as_tuple(op.forward(list(inputs)))
        assert isinstance(outputs[0], np.ndarray) and outputs[0].dtype == np.float32, outputs[0]
        grads = as_tuple(op.backward([np.ones_like(o) for o in outputs], inputs, list(outputs)))
        assert grads[0] is not None, "no gradient for the first (float) input"
        for x, g in zip(inputs, grads):
            if g is not None:
                assert g.dtype == np.float32 and g.shape == x.shape, (g.dtype, g.shape, x.shape)


def test_network_trains_through_the_new_operators():
    """Gradients through a graph of the new operators, via the reference executor, match finite differences."""
    import d5
    from d5.frameworks import reference

    net = d5.Network("extended")
    net.add_input("x", ("N", 3, 4))
    net.add_param("W", normal64(4, 3).astype(np.float32))
    net.add_param("axes", ints(2))
    net.add_node("Transpose", ["x"], ["xt"], perm=[0, 2, 1])
    net.add_node("Gelu", ["xt"], ["g"])
    net.add_node("Mul", ["g", "W"], ["gw"])
    net.add_node("Split", ["gw"], ["a", "b"], axis=1, num_outputs=2)
    net.add_node("Max", ["a", "b"], ["m"])
    net.add_node("ReduceSum", ["m", "axes"], ["s"], keepdims=0)
    net.add_node("ReduceMean", ["s"], ["loss"], keepdims=0)
    net.add_output("loss")
    executor = reference.from_model(net)
    x = normal64(2, 3, 4, seed=3).astype(np.float32)
    executor.inference_and_backprop({"x": x}, y="loss")
    (w_grad,) = executor.network.fetch_tensors(["W_grad"])

    def loss(w):
        g = x.transpose(0, 2, 1).astype(np.float64)
        g = 0.5 * g * (1 + __import__("scipy").special.erf(g / np.sqrt(2))) * w
        return np.maximum(g[:, :2], g[:, 2:]).sum(axis=2).mean()

    w0, eps = executor.network.fetch_tensors(["W"])[0].astype(np.float64), 1e-6
    numeric = np.zeros_like(w0)
    for index in np.ndindex(w0.shape):
        step = np.zeros_like(w0)
        step[index] = eps
        numeric[index] = (loss(w0 + step) - loss(w0 - step)) / (2 * eps)
    np.testing.assert_allclose(w_grad, numeric, rtol=1e-3, atol=1e-5)
