"""What every framework's custom-op bridge and ``native_op`` share, written once.

- :func:`check_custom_op`: ``custom_op`` takes a :class:`d5.ops.CustomOp` of a kind the framework declares;
- :func:`bridge_forward` / :func:`bridge_backward`: a CustomOp called as a bridge calls it (NumPy in and out),
  with the gradients it does not give or that no input can take settled the same way everywhere;
- :func:`unreferenced`: whether a result may be handed to the framework without a copy;
- :class:`NativeOp`: a framework's own operator for an ONNX node as a CustomOp, NumPy in and out (``native_op``),
  so d5's operator validation and benchmarks compare frameworks' kernels with the reference's.

>>> import numpy as np
>>> from d5.ops import CustomPythonOp
>>> class Square(CustomPythonOp):
...     def forward(self, inputs): return inputs[0] ** 2
...     def backward(self, grads, fwd_inputs, fwd_outputs): return 2 * fwd_inputs[0] * grads[0]
>>> x = np.array([1.0, 3.0])
>>> results = bridge_forward(Square(), [x, np.array([1, 2])], [True, False])
>>> bridge_backward(Square(), [None], [x, np.array([1, 2])], results)   # no output gradient: zeros
[array([0., 0.]), None]
"""
from __future__ import annotations

import sys
from typing import Any, Sequence

import numpy as np

from d5.errors import UnsupportedOperatorError
from d5.ops.operator import CustomOp, as_tuple


def check_custom_op(op: Any, framework: str) -> CustomOp:
    """Every framework's ``custom_op`` takes a :class:`d5.ops.CustomOp` of a kind its capabilities declare
    (``custom_ops``: a compiled C++ operator is ``"cpp"``, any other ``"python"``), and nothing else."""
    if not isinstance(op, CustomOp):
        raise UnsupportedOperatorError(f"custom_op expects a d5.ops.CustomOp, got {type(op).__name__}")
    from d5.frameworks import get
    from d5.ops.cpp_op import CppOp

    kind = "cpp" if isinstance(op, CppOp) else "python"
    if kind not in get(framework).CAPABILITIES.custom_ops:
        raise UnsupportedOperatorError(f"the {framework} framework does not run {kind} custom operators "
                                       f"({type(op).__name__}); its CAPABILITIES.custom_ops are "
                                       f"{list(get(framework).CAPABILITIES.custom_ops)}")
    return op


def bridge_forward(op: CustomOp, arrays: list[Any], grad_required: Sequence[bool]) -> list[Any]:
    """``op.forward(arrays)`` as a bridge runs it: the op is told which inputs need a gradient (a hint it may use
    to skip work), and its results come back as a list of arrays -- sequences (lists) and absent optionals (None)
    as they are."""
    op.input_grad_required = tuple(grad_required)
    return [r if r is None or isinstance(r, list) else np.asarray(r) for r in as_tuple(op.forward(arrays))]


def bridge_backward(op: CustomOp, grads: Sequence[Any], arrays: list[Any], results: list[Any]) -> list[Any]:
    """``op.backward`` for the output gradients ``grads`` (None: the output was not used, a zero gradient), one
    entry per input: the op's gradient, or None where it gave none or the input is no floating-point array."""
    out_grads = [g if g is not None else np.zeros_like(r) if isinstance(r, np.ndarray) else None
                 for g, r in zip(grads, results)]
    in_grads = as_tuple(op.backward(out_grads, arrays, results))
    return [in_grads[index] if index < len(in_grads) and isinstance(array, np.ndarray) and array.dtype.kind in "fc"
            else None for index, array in enumerate(arrays)]


_BASELINE_REFERENCES: list[int] = []


def unreferenced(items: list | tuple, index: int) -> bool:
    """Whether ``items[index]`` is an array that owns its memory and that nothing but ``items`` refers to -- not
    the op (keeping it to reuse), not a view (a view refers to its base). Then no one else can change it, and a
    bridge may hand it to the framework without a copy, which for 1M floats saves ~0.1-0.3 ms a call. The count is
    compared with that of a fresh array in a fresh list, measured here the same way, so the interpreter's own
    references (arguments, the stack) are the same on both sides."""
    if not _BASELINE_REFERENCES:
        _BASELINE_REFERENCES.append(sys.getrefcount([np.empty(1)][0]))
    if sys.getrefcount(items[index]) > _BASELINE_REFERENCES[0] + 1:  # + 1: held by `items`
        return False
    value = items[index]
    return isinstance(value, np.ndarray) and value.flags.owndata and value.base is None


class NativeOp(CustomOp):
    """A framework's own operator for ONNX operator ``op_type`` (its ``operators/`` mapping) as a d5 CustomOp,
    NumPy in and out: forward runs the framework's kernels, backward is the framework's own gradient of the same
    computation (recomputed from the inputs, so it is right whatever ran in between, as in a gradient check).
    The operator runs on copies of the inputs: what it updates in place (BatchNormalization's running statistics)
    comes back through :meth:`state_updates`, as from any d5 operator. A framework overrides :meth:`create`,
    :meth:`run` and :meth:`input_gradients`."""

    def __init__(self, op_type: str, attributes: dict[str, Any], opset: int | None = None) -> None:
        super().__init__()
        self.op_type = op_type
        self.module = self.create(op_type, attributes, opset)
        self._state: dict[int, np.ndarray] = {}

    def create(self, op_type: str, attributes: dict[str, Any], opset: int | None) -> Any:
        """The framework's operator for the node (its ``operators.create_operator``)."""
        raise NotImplementedError

    def run(self, inputs: list[Any]) -> tuple[list[Any], tuple[Any, ...]]:
        """Run the operator on copies of ``inputs`` (training mode per ``self.training``): the copies after the
        call and the outputs, all as NumPy values (arrays copied out of the framework)."""
        raise NotImplementedError

    def input_gradients(self, inputs: list[Any], wanted: list[bool], grads: Sequence[Any]) -> list[Any]:
        """The framework's gradients of the outputs, weighted by ``grads``, with respect to the inputs where
        ``wanted`` (zeros where an output does not depend on one), None elsewhere."""
        raise NotImplementedError

    def forward(self, inputs: Any) -> Any:
        after, outputs = self.run(list(inputs))
        self._state = {index: value for index, (value, before) in enumerate(zip(after, inputs))
                       if isinstance(before, np.ndarray) and isinstance(value, np.ndarray) and _changed(value, before)}
        return outputs[0] if len(outputs) == 1 else outputs

    def state_updates(self) -> dict[int, Any]:
        """The inputs the operator updated in place in the last forward (running statistics), by position."""
        return dict(self._state)

    def backward(self, grads: Any, fwd_inputs: Any, fwd_outputs: Any) -> Any:
        required = self.input_grad_required  # as executors pass it: no gradient asked of running statistics
        wanted = [isinstance(x, np.ndarray) and (x.dtype.kind == "f" or x.dtype.name == "bfloat16")
                  and (required is None or (i < len(required) and required[i])) for i, x in enumerate(fwd_inputs)]
        result = self.input_gradients(list(fwd_inputs), wanted, grads)
        return result[0] if len(result) == 1 else tuple(result)


def _changed(after: np.ndarray, before: np.ndarray) -> bool:
    """Whether an operator wrote into an input (bitwise: NaN inputs are unchanged NaN)."""
    return after.shape != before.shape or after.dtype != before.dtype or after.tobytes() != before.tobytes()
