"""The oracle the PyTorch converter tests share: a converter against the reference operator of the same name,
forward outputs in float32 and torch autograd's gradient of ``sum(output * cotangent)`` against the reference's
``backward``. A case is ``(id, op_type, attributes, [input makers (None: omitted)], options)``; options:
``opset``, ``training``, ``outputs`` (node_output_count). Input makers take a NumPy Generator.
"""
from __future__ import annotations

import numpy as np
import torch

from d5.frameworks.pytorch.operators import create_operator
from d5.frameworks.reference.operators import create_operator as reference_op
from d5.ops.operator import as_tuple

RNG_SEED = 1234


def _rand(*shape, low=-1.0, high=1.0):
    return lambda rng: rng.uniform(low, high, shape).astype(np.float32)


def _ints(values, dtype=np.int64):
    return lambda rng: np.asarray(values, dtype=dtype)


def _labels(n, classes, *rest):
    return lambda rng: rng.integers(0, classes, (n, *rest)).astype(np.int64)


def _distinct(*shape):
    # Distinct values (no ties), so max/argmax-style gradients are unambiguous.
    return lambda rng: (rng.permutation(int(np.prod(shape))).reshape(shape) / 7.0 - 1.0).astype(np.float32)


def _make_inputs(makers):
    rng = np.random.default_rng(RNG_SEED)
    return [None if make is None else make(rng) for make in makers]


def _reference_inputs(arrays):
    # The reference takes a list with trailing omitted inputs dropped and interior ones as None.
    while arrays and arrays[-1] is None:
        arrays = arrays[:-1]
    return list(arrays)


def check_against_reference(case) -> None:
    """Assert the converter of ``case`` computes the reference operator's outputs and gradients."""
    _, op_type, attributes, makers, options = case
    opset, training, outputs = options.get("opset"), options.get("training", False), options.get("outputs")
    arrays = _make_inputs(makers)

    reference = reference_op(op_type, dict(attributes), opset)
    reference.training = training
    reference.node_output_count = outputs
    ref_inputs = _reference_inputs([None if a is None else a.copy() for a in arrays])
    ref_outputs = as_tuple(reference.forward(ref_inputs))

    converter = create_operator(op_type, dict(attributes), opset)
    converter.train(training)
    converter.node_output_count = outputs
    tensors = []
    for a in arrays:
        t = None if a is None else torch.from_numpy(a.copy())
        if t is not None and t.is_floating_point():
            t.requires_grad_(True)
        tensors.append(t)
    live = [None if t is None else t.detach().clone() for t in tensors]  # BatchNorm's statistics are updated
    call_inputs = [t if i < 3 or op_type != "BatchNormalization" else live[i] for i, t in enumerate(tensors)]
    got = as_tuple(converter(*call_inputs))

    assert len(got) <= len(ref_outputs)
    for index, (value, expected) in enumerate(zip(got, ref_outputs)):
        expected = np.asarray(expected)
        assert tuple(value.shape) == expected.shape, f"output {index}"
        if expected.dtype == bool or np.issubdtype(expected.dtype, np.integer):
            assert value.dtype == torch.from_numpy(np.ascontiguousarray(expected)).dtype, f"output {index}"
            np.testing.assert_array_equal(value.detach().numpy(), expected, err_msg=f"output {index}")
        else:
            np.testing.assert_allclose(value.detach().numpy(), expected, rtol=1e-5, atol=1e-5,
                                       err_msg=f"output {index}")

    if op_type == "BatchNormalization" and (training or attributes.get("training_mode")):
        for index, new_value in reference.state_updates().items():  # running statistics written back in place
            np.testing.assert_allclose(live[index].numpy(), new_value, rtol=1e-5, atol=1e-6)

    differentiable = [i for i, t in enumerate(tensors) if t is not None and t.requires_grad
                      and not (op_type == "BatchNormalization" and i >= 3)]
    float_outputs = [i for i, v in enumerate(got) if v.is_floating_point() and v.requires_grad]
    if not differentiable or not float_outputs:
        return
    rng = np.random.default_rng(RNG_SEED + 1)
    cotangents = [rng.standard_normal(np.shape(out)).astype(np.asarray(out).dtype)
                  if np.issubdtype(np.asarray(out).dtype, np.floating) else None for out in ref_outputs]
    ref_grads = [np.zeros_like(np.asarray(o)) if c is not None and i >= len(got) else c
                 for i, (o, c) in enumerate(zip(ref_outputs, cotangents))]
    total = sum((got[i] * torch.from_numpy(cotangents[i])).sum() for i in float_outputs)
    total.backward()
    expected_grads = as_tuple(reference.backward(ref_grads, ref_inputs, list(ref_outputs)))
    for i in differentiable:
        expected = expected_grads[i] if i < len(expected_grads) else None
        actual = tensors[i].grad
        if expected is None:
            assert actual is None or not actual.any(), f"input {i} has a gradient the reference does not give"
            continue
        actual = torch.zeros_like(tensors[i]) if actual is None else actual
        np.testing.assert_allclose(actual.numpy(), np.asarray(expected), rtol=1e-4, atol=1e-5,
                                   err_msg=f"gradient of input {i}")
