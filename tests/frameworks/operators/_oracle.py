"""The framework-neutral operator oracle: every installed framework's ``native_op`` (its own kernels, NumPy in and
out, backward its own autograd's gradient) against the reference operator of the same name, the forward outputs and
the gradient of ``sum(output * cotangent)`` for a fixed random cotangent of each floating output.

A case is ``(id, op_type, attributes, [input makers (None: omitted)], options)``; input makers take a NumPy
Generator; options: ``opset``, ``training``, ``outputs`` (node_output_count). :func:`case_params` parametrizes a
table over every framework ``d5.frameworks.available()`` lists (the reference too: it must agree with itself), so a
new framework is held to the whole table from its first commit; :data:`KNOWN_FAILURES` marks what a framework does
not pass yet, with the reason.

What is compared, with the tolerances the PyTorch converter tests had:

- forward: NumPy outputs; shapes; dtypes and exact values for integer and boolean outputs; floating values to
  rtol = atol = 1e-5. The framework may return fewer outputs than the reference (those its node does not name),
  never more.
- state: what the framework's op reports through ``state_updates()`` after forward -- the CustomOp contract,
  executors write it back -- equals the reference's (BatchNormalization's running statistics in a training pass or
  with ``training_mode``; nothing elsewhere), to rtol 1e-5, atol 1e-6.
- gradient, where the reference has one (``Gradient.DEFINED`` and its ``backward`` does not raise
  UnsupportedOperatorError): each floating input's, to rtol 1e-4, atol 1e-5; where the reference gives None
  (not differentiable) the framework must give None or zeros. BatchNormalization's running mean and variance
  (inputs 3 and 4) are not compared. As executors do, ``input_grad_required`` flags the inputs compared, and
  outputs get the cotangent if floating, else zeros (and, on the reference's side, zeros for the outputs the
  framework did not return).
- the inputs: a CustomOp must leave them as they were (state goes through ``state_updates``).

Omitted inputs are None; trailing omitted inputs are dropped (a node's input list ends at its last given input).
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
import pytest

import d5.frameworks
from d5.errors import UnsupportedOperatorError
from d5.frameworks.reference.operators import create_operator as reference_op
from d5.ops.operator import Gradient, as_tuple

RNG_SEED = 1234

#: Every framework d5 implements and finds installed here; the tables run on each.
FRAMEWORKS: list[str] = d5.frameworks.available()

#: (framework, op_type, case id) -> why that framework's native_op does not pass the case yet (strict xfail: a fix
#: makes the case XPASS, which fails, so the entry is removed with the fix).
KNOWN_FAILURES: dict[tuple[str, str, str], str] = {
}

#: MXNet 1.9.1 holds float16/32/64, uint8, int8, int32, int64, bool and bfloat16 tensors only (its dtype table
#: ``_DTYPE_NP_TO_MX``, https://github.com/apache/mxnet/blob/1.9.1/python/mxnet/ndarray/ndarray.py): a case of
#: another dtype cannot run on MXNet's kernels. d5's MXNet executor places such nodes on the reference
#: (d5.frameworks.placement), as the contract suite checks.
_MXNET_DTYPES = ("MXNet 1.9.1 has no uint16/uint32/uint64/int16 tensors (_DTYPE_NP_TO_MX in "
                 "https://github.com/apache/mxnet/blob/1.9.1/python/mxnet/ndarray/ndarray.py); the MXNet executor "
                 "runs such nodes on the reference")
#: MXNet 1.9.1 has no operator reinterpreting a tensor's bits as another dtype (its ``cast`` converts values:
#: https://mxnet.apache.org/versions/1.9.1/api/python/docs/api/ndarray/ndarray.html#mxnet.ndarray.cast); the
#: converter refuses such targets when built, so executors run BitCast on the reference.
_MXNET_BITCAST = ("MXNet 1.9.1 cannot reinterpret bits as another dtype (its cast converts values, "
                  "https://mxnet.apache.org/versions/1.9.1/api/python/docs/api/ndarray/ndarray.html#mxnet.ndarray.cast);"
                  " the converter refuses the target when built, before the width check, and executors run it on "
                  "the reference")
KNOWN_FAILURES.update({("mxnet", op_type, case): _MXNET_DTYPES for op_type, case in [
    ("Mod", "mod_uint64"), ("Mod", "mod_uint16_broadcast"), ("BitShift", "bitshift_right_uint16"),
    ("BitShift", "bitshift_left_uint32"), ("BitShift", "bitshift_right_uint64"), ("BitShift", "bitshift_left_uint64"),
    ("BitwiseOr", "bitwise_or_uint64"), ("BitwiseXor", "bitwise_xor_uint16"), ("BitwiseNot", "bitwise_not_uint16"),
    ("BitwiseNot", "bitwise_not_uint64"), ("Add", "add_uint16"), ("Add", "add_uint64"), ("Sub", "sub_uint32"),
    ("Sub", "sub_uint64"), ("Mul", "mul_uint64"), ("Div", "div_uint16"), ("Div", "div_uint32"), ("Div", "div_uint64"),
    ("Less", "less_uint64"), ("LessOrEqual", "less_equal_uint32"), ("Greater", "greater_uint16"),
    ("GreaterOrEqual", "greater_equal_uint64"), ("Equal", "equal_uint32"), ("Max", "max_uint64"),
    ("Min", "min_uint32"), ("Min", "min_uint16_single"), ("Sum", "sum_uint64"), ("Abs", "abs_uint32"),
    ("Sign", "sign_uint64"), ("Clip", "clip_uint16"), ("Neg", "neg_int16"),
    ("QuantizeLinear", "quantize_int16_negative_axis"), ("QuantizeLinear", "quantize_uint16"),
    ("CumSum", "cumsum_uint32_reverse"), ("CumProd", "cumprod_uint64_wraps"), ("ReduceMax", "reduce_max_uint64"),
    ("ReduceMin", "reduce_min_uint16"), ("BitCast", "bitcast_uint16_to_int16")]})
KNOWN_FAILURES.update({("mxnet", "BitCast", case): _MXNET_BITCAST for case in [
    "bitcast_float32_to_int32", "bitcast_int64_to_float64", "bitcast_scalar", "BitCast-0"]})


# ------------------------------------------------------------------------------------------ input makers

def _rand(*shape, low=-1.0, high=1.0):
    return lambda rng: rng.uniform(low, high, shape).astype(np.float32)


def _ints(values, dtype=np.int64):
    return lambda rng: np.asarray(values, dtype=dtype)


def _labels(n, classes, *rest):
    return lambda rng: rng.integers(0, classes, (n, *rest)).astype(np.int64)


def _distinct(*shape):
    # Distinct values (no ties), so max/argmax-style gradients are unambiguous.
    return lambda rng: (rng.permutation(int(np.prod(shape))).reshape(shape) / 7.0 - 1.0).astype(np.float32)


def make_inputs(makers: Sequence[Callable | None]) -> list[np.ndarray | None]:
    """The case's inputs, the same every run; trailing omitted inputs dropped, interior ones None."""
    rng = np.random.default_rng(RNG_SEED)
    arrays = [None if make is None else make(rng) for make in makers]
    while arrays and arrays[-1] is None:
        arrays.pop()
    return arrays


# ------------------------------------------------------------------------------------------ parametrization

def _marks(framework: str, op_type: str, case_id: str) -> list:
    reason = KNOWN_FAILURES.get((framework, op_type, case_id))
    return [pytest.mark.xfail(reason=reason, strict=True)] if reason else []


def case_params(table: Sequence[tuple]) -> list:
    """``(framework, case)`` parameters for a case table, for every framework; ids read ``pytorch-shrink_soft``."""
    return [pytest.param(framework, case, id=f"{framework}-{case[0]}", marks=_marks(framework, case[1], case[0]))
            for framework in FRAMEWORKS for case in table]


def framework_params(rows: Sequence[tuple]) -> list:
    """``(framework, *row)`` parameters for rows that start with an op_type (the bad-input tables), for every
    framework; ids read ``pytorch-Add-0`` (the op_type and its row's number among that op_type's rows)."""
    ids, seen = [], {}
    for row in rows:
        seen[row[0]] = seen.get(row[0], -1) + 1
        ids.append(f"{row[0]}-{seen[row[0]]}")
    return [pytest.param(framework, *row, id=f"{framework}-{row_id}", marks=_marks(framework, row[0], row_id))
            for framework in FRAMEWORKS for row, row_id in zip(rows, ids)]


# ------------------------------------------------------------------------------------------ the oracle

def native(framework: str, op_type: str, attributes: dict[str, Any] | None = None, opset: int | None = None):
    """Framework ``framework``'s own implementation of ``op_type`` as a d5 CustomOp."""
    return d5.frameworks.get(framework).native_op(op_type, opset=opset, **dict(attributes or {}))


def check_error(framework: str, op_type: str, attributes: dict[str, Any], arrays: Sequence[Any] | None,
                error: type[BaseException], match: str | None = None, opset: int | None = None) -> None:
    """Assert ``framework``'s ``op_type`` raises the d5 ``error`` (its message matching ``match``) when built with
    ``attributes`` or, given ``arrays``, run forward on them."""
    with pytest.raises(error, match=match):
        op = native(framework, op_type, attributes, opset)
        if arrays is not None:
            op.forward([_copy(a) for a in arrays])


def _copy(value: Any) -> Any:
    return value.copy() if isinstance(value, np.ndarray) else value


def _is_float(value: Any) -> bool:
    dtype = np.asarray(value).dtype
    return dtype.kind == "f" or dtype.name == "bfloat16"


def check_against_reference(framework: str, case: tuple) -> None:
    """Assert ``framework``'s native_op of ``case`` computes the reference operator's outputs, running state and
    gradients (see the module docstring)."""
    _, op_type, attributes, makers, options = case
    opset, training, outputs = options.get("opset"), options.get("training", False), options.get("outputs")
    arrays = make_inputs(makers)

    reference = reference_op(op_type, dict(attributes), opset)
    reference.training = training
    reference.node_output_count = outputs
    ref_inputs = [_copy(a) for a in arrays]
    ref_outputs = as_tuple(reference.forward(ref_inputs))

    op = native(framework, op_type, attributes, opset)
    op.training = training
    op.node_output_count = outputs
    inputs = [_copy(a) for a in arrays]
    got = as_tuple(op.forward(inputs))
    state = dict(op.state_updates())  # read right after forward, as executors do

    assert len(got) <= len(ref_outputs), f"{len(got)} outputs, the reference gives {len(ref_outputs)}"
    for index, (value, expected) in enumerate(zip(got, ref_outputs)):
        expected = np.asarray(expected)
        assert isinstance(value, (np.ndarray, np.generic)), f"output {index} is a {type(value).__name__}, not NumPy"
        assert np.shape(value) == expected.shape, f"output {index}"
        if expected.dtype == bool or np.issubdtype(expected.dtype, np.integer):
            assert np.asarray(value).dtype == expected.dtype, f"output {index}"
            np.testing.assert_array_equal(value, expected, err_msg=f"output {index}")
        else:
            np.testing.assert_allclose(value, expected, rtol=1e-5, atol=1e-5, err_msg=f"output {index}")

    _check_gradient(reference, op, case, arrays, ref_inputs, ref_outputs, inputs, got)

    expected_state = reference.state_updates()
    assert sorted(state) == sorted(expected_state), \
        f"state_updates() reports inputs {sorted(state)}, the reference {sorted(expected_state)}"
    for index, new_value in expected_state.items():  # running statistics, written back by the executor
        np.testing.assert_allclose(state[index], new_value, rtol=1e-5, atol=1e-6, err_msg=f"state of input {index}")

    for index, (given, original) in enumerate(zip(inputs, arrays)):
        if isinstance(original, np.ndarray):
            np.testing.assert_array_equal(given, original, err_msg=f"input {index} was written by forward or "
                                          f"backward (state goes through state_updates())")


def _check_gradient(reference, op, case, arrays, ref_inputs, ref_outputs, inputs, got) -> None:
    _, op_type, _, _, _ = case
    if reference.gradient is not Gradient.DEFINED:
        return  # NONE: forward only; ZERO: executors never ask for it
    differentiable = [i for i, a in enumerate(arrays) if a is not None and _is_float(a)
                      and not (op_type == "BatchNormalization" and i >= 3)]
    float_outputs = [i for i in range(len(got)) if _is_float(ref_outputs[i])]
    if not differentiable or not float_outputs:
        return
    rng = np.random.default_rng(RNG_SEED + 1)
    cotangents = [rng.standard_normal(np.shape(out)).astype(np.asarray(out).dtype) if _is_float(out) else None
                  for out in ref_outputs]
    ref_grads = [c if c is not None and i < len(got) else np.zeros_like(np.asarray(o))
                 for i, (o, c) in enumerate(zip(ref_outputs, cotangents))]
    # As executors do: the gradients wanted, one flag per input (not BatchNormalization's running statistics).
    reference.input_grad_required = op.input_grad_required = tuple(i in differentiable for i in range(len(arrays)))
    try:
        expected_grads = as_tuple(reference.backward(ref_grads, ref_inputs, list(ref_outputs)))
    except UnsupportedOperatorError:
        return  # no gradient for these attributes (a scatter's mul/max/min reduction): forward only
    grads = [cotangents[i] if i in float_outputs else np.zeros_like(np.asarray(o)) for i, o in enumerate(got)]
    actual_grads = as_tuple(op.backward(grads, inputs, list(got)))
    for i in differentiable:
        expected = expected_grads[i] if i < len(expected_grads) else None
        actual = actual_grads[i] if i < len(actual_grads) else None
        if expected is None:
            assert actual is None or not np.any(actual), f"input {i} has a gradient the reference does not give"
            continue
        actual = np.zeros_like(arrays[i]) if actual is None else actual
        np.testing.assert_allclose(np.asarray(actual), np.asarray(expected), rtol=1e-4, atol=1e-5,
                                   err_msg=f"gradient of input {i}")
