"""L0: check an operator's forward against a reference, and its backward against finite differences.

``test_forward(op, inputs, reference)`` runs the operator and compares every output with the expected
arrays (given directly, or computed by a callable such as another framework's implementation).

``test_gradient(op, inputs)`` checks ``backward`` without ever building a Jacobian (memory O(N)): for a
few random projections it draws a cotangent ``v_k`` per output and a direction ``u_i`` per input and
compares the analytic directional derivative ``sum_i <backward(v)_i, u_i>`` with the float64 central
difference ``(f(x + eps u) - f(x - eps u)) / (2 eps)`` of ``f(x) = sum_k <v_k, forward(x)_k>``. Each
input is also perturbed on its own, so a wrong gradient for one input is named in the verdict.

Both return a verdict object (``bool(result)`` is the verdict) carrying the error norms (L1, L2, L-inf,
max relative) and the compared values, never just printed numbers:

>>> import numpy as np
>>> from d5.ops import CustomPythonOp, test_gradient
>>> class Square(CustomPythonOp):
...     def forward(self, inputs):
...         return inputs[0] ** 2
...     def backward(self, grads, fwd_inputs, fwd_outputs):
...         return grads[0] * 2 * fwd_inputs[0]
>>> bool(test_gradient(Square(), [np.linspace(-1.0, 1.0, 7)]))
True

Randomized operators (dropout): the validator calls ``op.reset_rng()`` before every forward when the
operator defines it, so the repeated forwards of a gradient check draw the same random numbers. An
operator that keeps its randomness in a seeded generator only needs to re-create that generator there.

The two functions are named like tests; ``__test__ = False`` stops pytest from collecting them when a
test module imports them.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import numpy as np

from d5.errors import D5Error, ShapeError, UnsupportedOperatorError
from d5.ops.operator import CustomOp, as_tuple

Reference = Callable[[list], Any] | Sequence[Any]


@dataclasses.dataclass(frozen=True)
class ErrorNorms:
    """Norms of ``actual - expected``: L1, L2, L-inf, and the largest elementwise ``|a - e| / |e|``.

    Where ``e == 0`` the relative error is 0 if ``a == 0`` too, infinite otherwise.

    >>> ErrorNorms.between(np.array([1.0, 2.0, 3.0]), np.array([1.0, 2.0, 4.0]))
    ErrorNorms(l1=1.0, l2=1.0, linf=1.0, max_relative=0.25)
    """

    l1: float
    l2: float
    linf: float
    max_relative: float

    @staticmethod
    def between(actual: np.ndarray, expected: np.ndarray) -> "ErrorNorms":
        """Error norms of ``actual`` against ``expected`` (compared in float64)."""
        a = np.asarray(actual, dtype=np.float64).ravel()
        e = np.asarray(expected, dtype=np.float64).ravel()
        if a.size == 0:
            return ErrorNorms(0.0, 0.0, 0.0, 0.0)
        with np.errstate(invalid="ignore"):
            diff = np.abs(a - e)
        # NaN at the same place in both, or the same infinity, is agreement, not an error of NaN size.
        diff[(np.isnan(a) & np.isnan(e)) | (a == e)] = 0.0
        with np.errstate(divide="ignore", invalid="ignore"):
            relative = np.where(diff == 0, 0.0, diff / np.abs(e))
        return ErrorNorms(float(diff.sum()), float(np.sqrt(np.dot(diff, diff))), float(diff.max()),
                          float(relative.max()))

    @staticmethod
    def undefined() -> "ErrorNorms":
        """Norms of a comparison that could not be made (shapes differ)."""
        return ErrorNorms(float("nan"), float("nan"), float("nan"), float("nan"))

    def __str__(self) -> str:
        return f"L1={self.l1:.3g} L2={self.l2:.3g} Linf={self.linf:.3g} max_rel={self.max_relative:.3g}"


@dataclasses.dataclass
class OutputComparison:
    """One output of :func:`test_forward`: the op's value, the expected value and their error norms."""

    index: int
    passed: bool
    norms: ErrorNorms
    actual: np.ndarray
    expected: np.ndarray
    #: Elements outside ``atol + rtol * |expected|`` (0 when passed).
    mismatched: int = 0
    reason: str = ""
    #: The tensor's name where the comparison is of named tensors (d5.network.validation), else "".
    name: str = ""

    def __str__(self) -> str:
        verdict = "ok" if self.passed else "FAILED"
        detail = self.reason or f"{self.norms}, {self.mismatched}/{self.expected.size} elements out of tolerance"
        what = repr(self.name) if self.name else f"output {self.index}"
        return f"{what} {tuple(np.shape(self.actual))} {np.asarray(self.actual).dtype}: {verdict} ({detail})"


@dataclasses.dataclass
class ForwardCheckResult:
    """Verdict of :func:`test_forward`; ``bool(result)`` is ``result.passed``.

    The norms are over all outputs together; ``outputs`` holds the per-output comparison (with the
    compared arrays).

    >>> import numpy as np
    >>> class Double(CustomOp):
    ...     def forward(self, inputs):
    ...         return inputs[0] * 2
    >>> result = test_forward(Double(), [np.ones(3)], [np.array([2.0, 2.0, 2.5])])
    >>> bool(result), result.linf
    (False, 0.5)
    """

    passed: bool
    l1: float
    l2: float
    linf: float
    max_relative: float
    outputs: list[OutputComparison]
    rtol: float
    atol: float

    @property
    def actual(self) -> list[np.ndarray]:
        """The operator's outputs."""
        return [o.actual for o in self.outputs]

    @property
    def expected(self) -> list[np.ndarray]:
        """The reference outputs."""
        return [o.expected for o in self.outputs]

    def __bool__(self) -> bool:
        return self.passed

    def summary(self) -> str:
        """One paragraph: the verdict, the norms, and a line per output."""
        head = (f"forward check {'PASSED' if self.passed else 'FAILED'} (rtol={self.rtol:g}, atol={self.atol:g}): "
                f"L1={self.l1:.3g} L2={self.l2:.3g} Linf={self.linf:.3g} max_rel={self.max_relative:.3g}")
        return "\n".join([head] + [f"  {o}" for o in self.outputs])

    __str__ = summary


@dataclasses.dataclass
class InputGradientCheck:
    """Gradient check of one input: analytic vs numeric directional derivatives, one per projection."""

    index: int
    passed: bool
    norms: ErrorNorms
    analytic: np.ndarray
    numeric: np.ndarray
    reason: str = ""

    def __str__(self) -> str:
        verdict = "ok" if self.passed else "WRONG GRADIENT"
        return f"input {self.index}: {verdict} ({self.reason or self.norms})"


@dataclasses.dataclass
class GradientCheckResult:
    """Verdict of :func:`test_gradient`; ``bool(result)`` is ``result.passed``.

    ``analytic`` and ``numeric`` hold the directional derivatives along all checked inputs at once (one
    per projection) and the norms are of their difference; ``inputs`` holds the same per input, and
    ``failed_inputs`` names the inputs whose gradient is wrong.

    >>> import numpy as np
    >>> class Triple(CustomOp):
    ...     def forward(self, inputs):
    ...         return 3 * inputs[0]
    ...     def backward(self, grads, fwd_inputs, fwd_outputs):
    ...         return 2 * grads[0]        # wrong on purpose
    >>> result = test_gradient(Triple(), [np.ones(4)])
    >>> bool(result), result.failed_inputs
    (False, [0])
    """

    passed: bool
    l1: float
    l2: float
    linf: float
    max_relative: float
    analytic: np.ndarray
    numeric: np.ndarray
    inputs: list[InputGradientCheck]
    eps: float
    rtol: float
    atol: float
    reason: str = ""

    @property
    def failed_inputs(self) -> list[int]:
        """Indices of the inputs whose gradient check failed."""
        return [check.index for check in self.inputs if not check.passed]

    def __bool__(self) -> bool:
        return self.passed

    def summary(self) -> str:
        """One paragraph: the verdict, the norms, and a line per checked input."""
        head = (f"gradient check {'PASSED' if self.passed else 'FAILED'} ({len(self.analytic)} projections, "
                f"eps={self.eps:g}, rtol={self.rtol:g}, atol={self.atol:g}): "
                f"L1={self.l1:.3g} L2={self.l2:.3g} Linf={self.linf:.3g} max_rel={self.max_relative:.3g}")
        lines = [head]
        if self.reason:
            lines.append(f"  {self.reason}")
        if self.failed_inputs:
            lines.append(f"  wrong gradient for input(s) {self.failed_inputs}")
        lines += [f"  {check}" for check in self.inputs]
        return "\n".join(lines)

    __str__ = summary


def test_forward(op: CustomOp, inputs: Sequence[np.ndarray], reference: Reference, *, rtol: float = 1e-5,
                 atol: float = 1e-6, training: bool = False) -> ForwardCheckResult:
    """Run ``op.forward(inputs)`` and compare each output with ``reference``.

    ``reference`` is a list of expected arrays, or a callable that takes the inputs list and returns
    them (one array or a tuple), e.g. another framework's implementation. An output passes when every
    element satisfies ``|actual - expected| <= atol + rtol * |expected|`` (NaN matches NaN only);
    differing shapes or output counts fail. ``op.training`` is set to ``training`` first.

    >>> import numpy as np
    >>> from d5.ops import CustomPythonOp
    >>> class Relu(CustomPythonOp):
    ...     def forward(self, inputs):
    ...         return np.maximum(inputs[0], 0)
    >>> bool(test_forward(Relu(), [np.array([-1.0, 0.5])], [np.array([0.0, 0.5])]))
    True
    """
    _check_op(op, need_backward=False)
    arrays = _check_inputs(inputs)
    op.training = bool(training)
    # Each side gets its own copy, so an operator that (wrongly) writes into its inputs cannot change
    # what the reference sees.
    actual = _run_forward(op, [_copy(a) for a in arrays])
    if callable(reference):
        expected = tuple(np.asarray(e) for e in as_tuple(reference([_copy(a) for a in arrays])))
    elif isinstance(reference, (list, tuple)):
        expected = tuple(np.asarray(e) for e in reference)
    else:
        raise D5Error(f"test_forward: reference must be a list of expected arrays or a callable taking the inputs "
                      f"list, got {type(reference).__name__}; wrap a single expected array in a list")
    comparisons = []
    for index in range(max(len(actual), len(expected))):
        if index >= len(actual) or index >= len(expected):
            missing = "the operator" if index >= len(actual) else "the reference"
            present = actual[index] if index < len(actual) else expected[index]
            comparisons.append(OutputComparison(index, False, ErrorNorms.undefined(),
                                                present if missing == "the reference" else np.array([]),
                                                present if missing == "the operator" else np.array([]),
                                                reason=f"{missing} returned no output {index} "
                                                       f"({len(actual)} outputs vs {len(expected)} expected)"))
            continue
        comparisons.append(compare_arrays(index, actual[index], expected[index], rtol, atol))
    passed = all(c.passed for c in comparisons)
    comparable = [c for c in comparisons if not c.reason]
    if len(comparable) == len(comparisons) and comparable:
        total = ErrorNorms.between(np.concatenate([np.ravel(c.actual).astype(np.float64) for c in comparable]),
                                   np.concatenate([np.ravel(c.expected).astype(np.float64) for c in comparable]))
    else:
        total = ErrorNorms.undefined()
    return ForwardCheckResult(passed, total.l1, total.l2, total.linf, total.max_relative, comparisons, rtol, atol)


test_forward.__test__ = False  # not a pytest test, though named like one


def test_gradient(op: CustomOp, inputs: Sequence[np.ndarray], *, eps: float = 1e-6, rtol: float = 1e-4,
                  atol: float = 1e-6, projections: int = 4, seed: int = 0, wrt: Sequence[int] | None = None,
                  training: bool = False) -> GradientCheckResult:
    """Check ``op.backward`` against float64 central differences of ``op.forward`` along random projections.

    Floating inputs are cast to float64; integer inputs (labels, shapes) are passed unchanged and never
    perturbed. ``wrt`` lists the input indices to check (default: every floating input whose gradient
    ``backward`` does not return as ``None``). For each of ``projections`` draws (from
    ``numpy.random.default_rng(seed)``) a projection passes when
    ``|analytic - numeric| <= atol + rtol * |numeric|``, along all inputs at once and along each input
    alone. Operators with kinks (Relu, Abs, max pooling) need inputs at least ``eps`` away from them.
    ``op.training`` is set to ``training``, and ``op.reset_rng()`` (if defined) is called before every
    forward so that randomized operators repeat their random numbers.

    >>> import numpy as np
    >>> from d5.ops import CustomPythonOp
    >>> class Square(CustomPythonOp):
    ...     def forward(self, inputs):
    ...         return inputs[0] ** 2
    ...     def backward(self, grads, fwd_inputs, fwd_outputs):
    ...         return 2 * fwd_inputs[0] * grads[0]
    >>> x = np.random.default_rng(0).standard_normal((3, 4))
    >>> result = test_gradient(Square(), [x])
    >>> result.passed, result.failed_inputs
    (True, [])
    """
    _check_op(op, need_backward=True)
    arrays = _check_inputs(inputs)
    if projections < 1:
        raise D5Error(f"test_gradient: projections must be at least 1, got {projections}")
    if not eps > 0:
        raise D5Error(f"test_gradient: eps must be positive, got {eps}")
    x = [a.astype(np.float64) if a is not None and _is_float(a) else a for a in arrays]
    pristine = [_copy(a) for a in x]
    op.training = bool(training)
    rng = np.random.default_rng(seed)

    outputs = _run_forward(op, x)
    float_outputs = [k for k, out in enumerate(outputs) if _is_float(out)]
    if not float_outputs:
        raise D5Error(f"test_gradient: {type(op).__name__} has no floating-point output to differentiate "
                      f"(output dtypes {[str(o.dtype) for o in outputs]})")

    def objective(point: list, cotangents: list) -> float:
        outs = _run_forward(op, point)
        return float(sum(np.vdot(cotangents[k], np.asarray(outs[k], dtype=np.float64)) for k in float_outputs))

    analytic = {}  # input index (or -1 for all together) -> one value per projection
    numeric = {}
    shape_problems: dict[int, str] = {}
    checked: list[int] | None = None
    for _ in range(projections):
        cotangents = [rng.standard_normal(out.shape) if k in float_outputs else np.zeros_like(out)
                      for k, out in enumerate(outputs)]
        # forward again right before backward: the perturbed forwards of the previous projection
        # overwrote whatever the operator cached for its backward.
        base_outputs = _run_forward(op, x)
        grads = _run_backward(op, cotangents, x, base_outputs)
        if checked is None:
            checked = _select_inputs(op, x, grads, wrt)
            for i in checked:
                if grads[i] is not None and np.shape(grads[i]) != x[i].shape:
                    shape_problems[i] = (f"backward returned a gradient of shape {np.shape(grads[i])} for an input of "
                                         f"shape {x[i].shape}")
            checked_ok = [i for i in checked if i not in shape_problems]
            for key in checked_ok + ([-1] if len(checked_ok) > 1 else []):
                analytic[key], numeric[key] = [], []
        directions = {i: rng.standard_normal(x[i].shape) for i in checked_ok}
        for i in checked_ok:
            analytic[i].append(float(np.vdot(np.asarray(grads[i], dtype=np.float64), directions[i])))
            numeric[i].append(_central_difference(objective, x, {i: directions[i]}, cotangents, eps))
        if len(checked_ok) > 1:
            analytic[-1].append(sum(analytic[i][-1] for i in checked_ok))
            numeric[-1].append(_central_difference(objective, x, directions, cotangents, eps))

    per_input = []
    for i in checked:
        if i in shape_problems:
            per_input.append(InputGradientCheck(i, False, ErrorNorms.undefined(), np.array([]), np.array([]),
                                                reason=shape_problems[i]))
            continue
        a, n = np.array(analytic[i]), np.array(numeric[i])
        per_input.append(InputGradientCheck(i, _within(a, n, rtol, atol), ErrorNorms.between(a, n), a, n))
    key = -1 if -1 in analytic else (checked_ok[0] if checked_ok else None)
    if key is None:
        a = n = np.array([])
        norms = ErrorNorms.undefined()
    else:
        a, n = np.array(analytic[key]), np.array(numeric[key])
        norms = ErrorNorms.between(a, n)
    passed = all(check.passed for check in per_input) and (key is None or _within(a, n, rtol, atol))
    reason = ""
    mutated = [i for i, (now, before) in enumerate(zip(x, pristine))
               if now is not None and not np.array_equal(now, before, equal_nan=_is_float(now))]
    if mutated:
        passed = False
        reason = f"the operator modified its input(s) {mutated} in place; forward and backward must not write into inputs"
    return GradientCheckResult(passed, norms.l1, norms.l2, norms.linf, norms.max_relative, a, n, per_input,
                               eps, rtol, atol, reason)


test_gradient.__test__ = False  # not a pytest test, though named like one


# ----------------------------------------------------------------------------------------------- helpers

def _check_op(op: Any, need_backward: bool) -> None:
    if not callable(getattr(op, "forward", None)):
        raise D5Error(f"expected an operator (a d5.CustomOp with forward/backward), got {type(op).__name__}")
    if need_backward:
        backward = getattr(type(op), "backward", None)
        if backward is None or backward is CustomOp.backward:
            raise UnsupportedOperatorError(f"{type(op).__name__} defines no backward(), so its gradient cannot be "
                                           "checked; implement backward(grads, fwd_inputs, fwd_outputs) or use "
                                           "test_forward only")


def _check_inputs(inputs: Any) -> list:
    if isinstance(inputs, np.ndarray) or not isinstance(inputs, (list, tuple)):
        raise D5Error(f"inputs must be a list of numpy arrays (one per operator input), got {type(inputs).__name__}; "
                      "wrap a single array as [array]")
    if len(inputs) == 0:
        raise D5Error("inputs is empty: pass one numpy array per operator input")
    arrays = []
    for index, value in enumerate(inputs):
        if value is None:  # an omitted optional input, as an empty input name in ONNX
            arrays.append(None)
            continue
        if isinstance(value, np.generic):
            value = np.asarray(value)
        if not isinstance(value, np.ndarray):
            raise D5Error(f"input {index} is a {type(value).__name__}, not a numpy array; convert it with "
                          "numpy.asarray(value, dtype=...) so its dtype is explicit")
        if not (np.issubdtype(value.dtype, np.number) or value.dtype == np.bool_):
            raise ShapeError(f"input {index} has dtype {value.dtype}; operators take numeric or bool arrays")
        arrays.append(value)
    return arrays


def _is_float(array: Any) -> bool:
    return isinstance(array, np.ndarray) and np.issubdtype(array.dtype, np.floating)


def _copy(array: Any) -> Any:
    return None if array is None else array.copy()


def _run_forward(op: CustomOp, inputs: list) -> tuple:
    reset = getattr(op, "reset_rng", None)
    if callable(reset):
        reset()
    return tuple(np.asarray(out) for out in as_tuple(op.forward(list(inputs))))


def _run_backward(op: CustomOp, grads: list, inputs: list, outputs: tuple) -> tuple:
    try:
        result = as_tuple(op.backward(list(grads), list(inputs), list(outputs)))
    except NotImplementedError as err:
        raise UnsupportedOperatorError(f"{type(op).__name__}.backward is not implemented: {err}") from err
    if len(result) != len(inputs):
        raise ShapeError(f"{type(op).__name__}.backward returned {len(result)} gradient(s) for {len(inputs)} input(s); "
                         "return one per input, None for a non-differentiable one")
    return result


def _select_inputs(op: CustomOp, x: list, grads: tuple, wrt: Sequence[int] | None) -> list[int]:
    if wrt is None:
        selected = [i for i, (a, g) in enumerate(zip(x, grads)) if _is_float(a) and g is not None]
        if not selected:
            raise D5Error(f"test_gradient: {type(op).__name__}.backward returned None for every floating-point input; "
                          "there is no gradient to check")
        return selected
    selected = []
    for i in wrt:
        if not isinstance(i, (int, np.integer)) or not -len(x) <= i < len(x):
            raise D5Error(f"test_gradient: wrt index {i!r} is not an input index (the op has {len(x)} inputs)")
        i = int(i) % len(x)
        if not _is_float(x[i]):
            raise D5Error(f"test_gradient: input {i} is not floating point ({'absent' if x[i] is None else x[i].dtype}) "
                          "and cannot be differentiated; drop it from wrt")
        if grads[i] is None:
            raise D5Error(f"test_gradient: {type(op).__name__}.backward returned None for input {i}, which wrt asks to "
                          "check; return its gradient or drop it from wrt")
        selected.append(i)
    return sorted(set(selected))


def _central_difference(objective: Callable, x: list, directions: dict, cotangents: list, eps: float) -> float:
    plus = [a + eps * directions[i] if i in directions else a for i, a in enumerate(x)]
    minus = [a - eps * directions[i] if i in directions else a for i, a in enumerate(x)]
    return (objective(plus, cotangents) - objective(minus, cotangents)) / (2.0 * eps)


def _within(actual: np.ndarray, expected: np.ndarray, rtol: float, atol: float) -> bool:
    return bool(np.all(np.abs(actual - expected) <= atol + rtol * np.abs(expected)))


def compare_arrays(index: int, actual: np.ndarray, expected: np.ndarray, rtol: float, atol: float,
                   name: str = "") -> OutputComparison:
    """Compare ``actual`` with ``expected`` elementwise (``|a - e| <= atol + rtol * |e|``; NaN matches NaN)."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    if actual.shape != expected.shape:
        return OutputComparison(index, False, ErrorNorms.undefined(), actual, expected,
                                reason=f"shape {actual.shape} but the reference has shape {expected.shape}", name=name)
    a = actual.astype(np.float64, copy=False)
    e = expected.astype(np.float64, copy=False)
    with np.errstate(invalid="ignore"):
        close = (np.abs(a - e) <= atol + rtol * np.abs(e)) | (np.isnan(a) & np.isnan(e)) | (a == e)
    mismatched = int(close.size - np.count_nonzero(close))
    return OutputComparison(index, mismatched == 0, ErrorNorms.between(a, e), actual, expected, mismatched, name=name)
