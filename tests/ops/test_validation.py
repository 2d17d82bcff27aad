"""d5.ops.test_forward / test_gradient: verdicts, error norms, per-input blame and bad input."""
from __future__ import annotations

import numpy as np
import pytest

from d5.errors import D5Error, ShapeError, UnsupportedOperatorError
from d5.ops import CustomOp, CustomPythonOp, ForwardCheckResult, GradientCheckResult, test_forward, test_gradient


class IPowOp(CustomPythonOp):
    """The seeds' example operator, verbatim in behaviour."""

    def __init__(self, power):
        super().__init__()
        self.power = power
        assert int(power) == power  # integral

    def forward(self, inputs):
        return inputs[0] ** self.power

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return grads[0] * self.power * (fwd_inputs[0] ** (self.power - 1))


class IPowForgetsPower(IPowOp):
    """A deliberately wrong backward: the factor ``power`` is missing."""

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return grads[0] * (fwd_inputs[0] ** (self.power - 1))


class ScaledProduct(CustomPythonOp):
    """``a * b`` with a gradient for ``b`` that is wrong by ``b_error`` (0: correct)."""

    def __init__(self, b_error=0.0):
        super().__init__()
        self.b_error = b_error

    def forward(self, inputs):
        return inputs[0] * inputs[1]

    def backward(self, grads, fwd_inputs, fwd_outputs):
        a, b = fwd_inputs
        return grads[0] * b, grads[0] * a * (1 + self.b_error)


class Linear(CustomPythonOp):
    """``y = forward_scale * x`` whose backward claims ``backward_scale``."""

    def __init__(self, forward_scale, backward_scale):
        super().__init__()
        self.forward_scale, self.backward_scale = forward_scale, backward_scale

    def forward(self, inputs):
        return self.forward_scale * inputs[0]

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return self.backward_scale * grads[0]


class Constant(CustomPythonOp):
    """Returns fixed outputs whatever its inputs (for hand-computed forward norms)."""

    def __init__(self, *outputs):
        super().__init__()
        self.outputs = outputs

    def forward(self, inputs):
        return self.outputs if len(self.outputs) > 1 else self.outputs[0]


def rng_input(*shape, seed=0):
    return np.random.default_rng(seed).uniform(0.5, 2.0, shape)


def test_validators_are_not_collected_by_pytest():
    assert test_forward.__test__ is False and test_gradient.__test__ is False


# ------------------------------------------------------------------------------------------ gradient

@pytest.mark.parametrize("power", [2, 3, 5])
@pytest.mark.parametrize("shape", [(7,), (3, 4), (2, 3, 4)])
def test_seeds_ipow_op_passes(power, shape):
    result = test_gradient(IPowOp(power), [rng_input(*shape)])
    assert isinstance(result, GradientCheckResult)
    assert result.passed and bool(result) and result.failed_inputs == []
    assert result.analytic.shape == result.numeric.shape == (4,)
    np.testing.assert_allclose(result.analytic, result.numeric, rtol=1e-6)
    assert "PASSED" in str(result)


def test_ipow_op_whose_backward_forgets_the_power_fails_and_names_the_input():
    result = test_gradient(IPowForgetsPower(3), [rng_input(3, 4)])
    assert not result.passed and not bool(result)
    assert result.failed_inputs == [0]
    # The analytic derivative is off by exactly the forgotten factor.
    np.testing.assert_allclose(3 * result.analytic, result.numeric, rtol=1e-6)
    text = result.summary()
    assert "FAILED" in text and "input 0" in text and "WRONG GRADIENT" in text


def test_wrong_gradient_of_second_input_is_blamed_on_that_input_only():
    inputs = [rng_input(4, 3, seed=1), rng_input(4, 3, seed=2)]
    assert test_gradient(ScaledProduct(), inputs).passed
    result = test_gradient(ScaledProduct(b_error=0.01), inputs)
    assert not result.passed
    assert result.failed_inputs == [1]
    assert [check.passed for check in result.inputs] == [True, False]
    assert "input(s) [1]" in str(result)


def test_wrt_restricts_the_check():
    inputs = [rng_input(4, 3, seed=1), rng_input(4, 3, seed=2)]
    result = test_gradient(ScaledProduct(b_error=0.5), inputs, wrt=[0])
    assert result.passed and [check.index for check in result.inputs] == [0]


def test_gradient_error_norms_are_those_of_analytic_minus_numeric():
    # y = 2x with a backward claiming 3: analytic = 3 <v, u>, numeric = 2 <v, u> (exact for a linear map).
    result = test_gradient(Linear(2.0, 3.0), [rng_input(5)], projections=6)
    assert not result.passed and result.failed_inputs == [0]
    a, n = result.analytic, result.numeric
    np.testing.assert_allclose(a, 1.5 * n, rtol=1e-7)
    diff = np.abs(a - n)
    assert result.l1 == pytest.approx(diff.sum())
    assert result.l2 == pytest.approx(np.sqrt((diff ** 2).sum()))
    assert result.linf == pytest.approx(diff.max())
    assert result.max_relative == pytest.approx(0.5, rel=1e-6)  # |3 - 2| / 2


def test_gradient_check_is_reproducible_from_its_seed():
    first = test_gradient(Linear(2.0, 3.0), [rng_input(5)], seed=4)
    again = test_gradient(Linear(2.0, 3.0), [rng_input(5)], seed=4)
    other = test_gradient(Linear(2.0, 3.0), [rng_input(5)], seed=5)
    np.testing.assert_array_equal(first.analytic, again.analytic)
    assert not np.array_equal(first.analytic, other.analytic)


def test_tolerances_decide_the_verdict():
    # A 1e-3 relative error in the gradient passes a loose rtol and fails the default one.
    op = Linear(2.0, 2.002)
    assert not test_gradient(op, [rng_input(5)])
    assert test_gradient(op, [rng_input(5)], rtol=1e-2)


def test_float32_inputs_are_checked_in_float64():
    seen = []

    class Recording(IPowOp):
        def forward(self, inputs):
            seen.append(inputs[0].dtype)
            return super().forward(inputs)

    assert test_gradient(Recording(2), [rng_input(6).astype(np.float32)])
    assert set(seen) == {np.dtype(np.float64)}


def test_integer_inputs_are_passed_through_and_not_differentiated():
    class Gather(CustomPythonOp):
        def forward(self, inputs):
            return inputs[0][inputs[1]]

        def backward(self, grads, fwd_inputs, fwd_outputs):
            grad = np.zeros_like(fwd_inputs[0])
            np.add.at(grad, fwd_inputs[1], grads[0])
            return grad, None

    indices = np.array([0, 2, 2, 1])
    result = test_gradient(Gather(), [rng_input(3), indices])
    assert result.passed and [check.index for check in result.inputs] == [0]
    with pytest.raises(D5Error, match="input 1 is not floating point"):
        test_gradient(Gather(), [rng_input(3), indices], wrt=[1])


def test_training_flag_is_set_before_forward():
    modes = []

    class ModeRecording(IPowOp):
        def forward(self, inputs):
            modes.append(self.training)
            return super().forward(inputs)

    op = ModeRecording(2)
    test_gradient(op, [rng_input(3)], training=True)
    assert modes and all(modes)
    modes.clear()
    op.training = True
    test_forward(op, [rng_input(3)], [rng_input(3) ** 2])
    assert modes == [False]


class NoisyScale(CustomPythonOp):
    """``x * noise`` with noise drawn on every forward: checkable only when ``reset_rng`` restarts it."""

    def __init__(self, resettable):
        super().__init__()
        self.resettable = resettable
        self.rng = np.random.default_rng(0)
        if resettable:
            self.reset_rng = lambda: setattr(self, "rng", np.random.default_rng(0))

    def forward(self, inputs):
        self.noise = self.rng.uniform(0.5, 1.5, inputs[0].shape)
        return inputs[0] * self.noise

    def backward(self, grads, fwd_inputs, fwd_outputs):
        return grads[0] * self.noise


def test_randomized_operator_is_checkable_through_reset_rng():
    assert test_gradient(NoisyScale(resettable=True), [rng_input(20)])
    assert not test_gradient(NoisyScale(resettable=False), [rng_input(20)])


def test_operator_writing_into_its_input_fails():
    class InPlaceShift(CustomPythonOp):
        def forward(self, inputs):
            return np.add(inputs[0], 1.0, out=inputs[0])

        def backward(self, grads, fwd_inputs, fwd_outputs):
            return grads[0]

    result = test_gradient(InPlaceShift(), [rng_input(4)])
    assert not result.passed and "in place" in str(result)


def test_multiple_outputs_all_contribute():
    class SquareAndCube(CustomPythonOp):
        def __init__(self, cube_factor):
            super().__init__()
            self.cube_factor = cube_factor

        def forward(self, inputs):
            return inputs[0] ** 2, inputs[0] ** 3

        def backward(self, grads, fwd_inputs, fwd_outputs):
            x = fwd_inputs[0]
            return grads[0] * 2 * x + grads[1] * self.cube_factor * x ** 2

    assert test_gradient(SquareAndCube(3), [rng_input(5)])
    assert not test_gradient(SquareAndCube(2), [rng_input(5)])


# ------------------------------------------------------------------------------------------- forward

def test_forward_norms_on_a_hand_computed_example():
    result = test_forward(Constant(np.array([1.0, 2.0, 3.0])), [np.zeros(3)], [np.array([1.0, 2.0, 4.0])])
    assert isinstance(result, ForwardCheckResult)
    assert not result.passed and not bool(result)
    assert (result.l1, result.l2, result.linf, result.max_relative) == (1.0, 1.0, 1.0, 0.25)
    assert result.outputs[0].mismatched == 1
    np.testing.assert_array_equal(result.actual[0], [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(result.expected[0], [1.0, 2.0, 4.0])


def test_forward_norms_span_all_outputs():
    op = Constant(np.array([0.0, 1.0]), np.array([[2.0]]))
    result = test_forward(op, [np.zeros(1)], [np.array([3.0, 1.0]), np.array([[-2.0]])])
    # Differences 3, 0 and 4: L1 7, L2 5, Linf 4; relative 3/3 and 4/2.
    assert (result.l1, result.l2, result.linf, result.max_relative) == (7.0, 5.0, 4.0, 2.0)
    assert [o.passed for o in result.outputs] == [False, False]


def test_forward_passes_within_tolerance_and_accepts_a_callable_reference():
    op = IPowOp(2)
    x = rng_input(3, 4)
    assert test_forward(op, [x], lambda inputs: inputs[0] * inputs[0])
    assert test_forward(op, [x], [x ** 2 * (1 + 1e-7)])
    assert not test_forward(op, [x], [x ** 2 * (1 + 1e-3)])
    assert test_forward(op, [x], [x ** 2 * (1 + 1e-3)], rtol=1e-2)


def test_forward_treats_matching_nan_as_agreement():
    op = Constant(np.array([np.nan, 1.0]))
    assert test_forward(op, [np.zeros(2)], [np.array([np.nan, 1.0])])
    assert not test_forward(op, [np.zeros(2)], [np.array([0.0, 1.0])])


def test_forward_shape_or_count_mismatch_fails_with_a_reason():
    result = test_forward(IPowOp(2), [np.ones(3)], [np.ones((3, 1))])
    assert not result.passed and "shape (3,)" in str(result) and "(3, 1)" in str(result)
    result = test_forward(IPowOp(2), [np.ones(3)], [np.ones(3), np.ones(3)])
    assert not result.passed and "no output 1" in str(result)


def test_forward_reference_sees_unmodified_inputs():
    class InPlaceNeg(CustomPythonOp):
        def forward(self, inputs):
            return np.negative(inputs[0], out=inputs[0])

    x = np.ones(3)
    assert not test_forward(InPlaceNeg(), [x], lambda inputs: inputs[0])
    np.testing.assert_array_equal(x, 1.0)


# --------------------------------------------------------------------------------------------- errors

class ForwardOnly(CustomOp):
    def forward(self, inputs):
        return inputs[0]


@pytest.mark.parametrize("call, error, words", [
    (lambda: test_gradient(IPowOp(2), []), D5Error, "empty"),
    (lambda: test_forward(IPowOp(2), [], [np.ones(1)]), D5Error, "empty"),
    (lambda: test_gradient(IPowOp(2), [[1.0, 2.0]]), D5Error, "not a numpy array"),
    (lambda: test_gradient(IPowOp(2), ["abc"]), D5Error, "not a numpy array"),
    (lambda: test_gradient(IPowOp(2), np.ones(3)), D5Error, "list of numpy arrays"),
    (lambda: test_gradient(IPowOp(2), [np.array(["a"])]), ShapeError, "dtype"),
    (lambda: test_gradient(ForwardOnly(), [np.ones(2)]), UnsupportedOperatorError, "defines no backward"),
    (lambda: test_gradient(lambda x: x, [np.ones(2)]), D5Error, "expected an operator"),
    (lambda: test_forward(IPowOp(2), [np.ones(2)], np.ones(2)), D5Error, "reference must be"),
    (lambda: test_gradient(IPowOp(2), [np.ones(2)], wrt=[3]), D5Error, "wrt index 3"),
    (lambda: test_gradient(IPowOp(2), [np.ones(2)], projections=0), D5Error, "projections"),
    (lambda: test_gradient(IPowOp(2), [np.arange(3)]), D5Error, "None for every floating-point input|no floating"),
])
def test_bad_input_raises_d5_errors(call, error, words):
    with pytest.raises(error, match=words):
        call()


def test_backward_returning_the_wrong_number_of_gradients_is_a_shape_error():
    class TwoGradients(IPowOp):
        def backward(self, grads, fwd_inputs, fwd_outputs):
            return grads[0], grads[0]

    with pytest.raises(ShapeError, match="2 gradient"):
        test_gradient(TwoGradients(2), [np.ones(3)])


def test_backward_returning_the_wrong_shape_fails_that_input():
    class SummedGradient(IPowOp):
        def backward(self, grads, fwd_inputs, fwd_outputs):
            return grads[0].sum(keepdims=True)

    result = test_gradient(SummedGradient(2), [np.ones(3)])
    assert not result.passed and result.failed_inputs == [0] and "shape (1,)" in str(result)
