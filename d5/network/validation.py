"""L1: compare two executors of the same network -- outputs and every parameter gradient -- with a verdict.

This is how d5 holds every framework to the reference: build both executors from one network, and
:func:`compare_executors` gives the oracle the executor's current parameter values, runs the same batch
through both (a training pass when ``y`` names a loss, else inference) and compares each graph output and each
gradient ``network.gradient(y)`` names. Like every neutral level it imports no framework: the caller passes
both executors.

Tolerance. Each element must satisfy ``|a - e| <= atol * scale + rtol * |e|``, where ``scale`` is the largest
``|e|`` of that tensor (at least 1). Deep networks sum thousands of float32 products in a different order
on each framework, so an element that is small next to its tensor's largest carries an absolute error of the
tensor's size, not its own; a purely elementwise relative test would fail on cancellation noise.

>>> import numpy as np, d5
>>> from d5.frameworks import reference
>>> net = d5.models.mlp((4,), hidden=(3,), num_classes=2)
>>> batch = {"input": np.ones((5, 4), np.float32), "label": np.array([0, 1, 1, 0, 1])}
>>> result = compare_executors(reference.from_model(net), reference.from_model(net), batch)
>>> result.passed, len(result.gradients)
(True, 4)
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import numpy as np

from d5.errors import D5Error
from d5.ops.validation import ErrorNorms, OutputComparison, compare_arrays


@dataclasses.dataclass
class ExecutorComparison:
    """Verdict of :func:`compare_executors`; ``bool(result)`` is ``result.passed``. ``outputs`` and ``gradients``
    hold one comparison per tensor (with both arrays and their error norms)."""

    passed: bool
    outputs: list[OutputComparison]
    gradients: list[OutputComparison]
    rtol: float
    atol: float

    def __bool__(self) -> bool:
        return self.passed

    @property
    def failed(self) -> list[str]:
        """Names of the outputs and gradients that disagree."""
        return [c.name for c in self.outputs + self.gradients if not c.passed]

    def summary(self) -> str:
        lines = [f"{'agree' if self.passed else 'DISAGREE'} (rtol={self.rtol:g}, atol={self.atol:g} x scale)"]
        lines += [f"  {c}" for c in self.outputs + self.gradients]
        return "\n".join(lines)

    __str__ = summary


def compare_executors(executor: Any, oracle: Any, inputs: Mapping[str, Any], y: str | None = "loss", *,
                      rtol: float = 1e-4, atol: float = 1e-5) -> ExecutorComparison:
    """Compare ``executor`` with ``oracle`` (usually the reference framework's) on one batch; see the module
    docstring. The oracle's parameters are overwritten with the executor's current values first, so both
    compute with the same weights. ``y=None`` compares inference only."""
    if not (rtol >= 0 and atol >= 0):
        raise D5Error(f"compare_executors: rtol and atol must be >= 0, got rtol={rtol}, atol={atol}")
    names = list(executor.network.graph.params)
    missing = sorted(set(names) ^ set(oracle.network.graph.params))
    if missing:
        raise D5Error(f"compare_executors: the executors run different networks (parameters {missing[:5]} are in "
                      "only one); build both from the same d5.Network")
    for name, value in zip(names, executor.network.fetch_tensors(names)):
        oracle.network.feed_tensor(name, np.array(value))  # a copy: the oracle must not share the executor's memory
    if y is None:
        actual, expected = executor.inference(inputs), oracle.inference(inputs)
        gradients: list[OutputComparison] = []
    else:
        actual, expected = executor.inference_and_backprop(inputs, y), oracle.inference_and_backprop(inputs, y)
        pairs = executor.network.gradient(y)
        grad_names = [grad for _, grad in pairs]
        gradients = [_compare(i, name, a, e, rtol, atol) for i, (name, a, e) in enumerate(
            zip(grad_names, executor.network.fetch_tensors(grad_names), oracle.network.fetch_tensors(grad_names)))]
    outputs = [_compare(i, name, actual.get(name), value, rtol, atol) for i, (name, value) in enumerate(expected.items())]
    passed = all(c.passed for c in outputs + gradients)
    return ExecutorComparison(passed, outputs, gradients, rtol, atol)


def _compare(index: int, name: str, actual: Any, expected: Any, rtol: float, atol: float) -> OutputComparison:
    expected = np.asarray(expected)
    if actual is None:
        return OutputComparison(index, False, ErrorNorms.undefined(), np.array([]), expected,
                                reason="the executor did not return it", name=name)
    magnitudes = np.abs(expected[np.isfinite(expected)]) if expected.dtype.kind in "fciu" else np.zeros(0)
    scale = max(1.0, float(magnitudes.max())) if magnitudes.size else 1.0
    return compare_arrays(index, np.asarray(actual), expected, rtol, atol * scale, name=name)
