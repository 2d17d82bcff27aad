"""Helpers shared by the operator tests (one copy each): random inputs, running a one-node ONNX model with
onnxruntime or onnx.reference (the independent oracles), running a d5 reference operator, and comparing with
PyTorch autograd. Imported by plain name (``from _helpers import ...``): conftest.py puts this folder on sys.path."""
from __future__ import annotations

import numpy as np
import pytest

from d5.frameworks.reference.operators import create_operator


# ------------------------------------------------------------------------------------------------- inputs

def random_normal(shape, seed=0, dtype=np.float64) -> np.ndarray:
    """Standard-normal values of ``shape`` from ``np.random.default_rng(seed)``."""
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


# ----------------------------------------------------------------------------- one-node models and oracles

def _value_info(name, value):
    from onnx import TensorProto, helper

    value = np.asarray(value)
    elem = TensorProto.STRING if value.dtype == object else helper.np_dtype_to_tensor_dtype(value.dtype)
    return helper.make_tensor_value_info(name, elem, value.shape)


def one_node_model(op_type, inputs, n_outputs=1, attributes=None, opset=20):
    """(model, feeds): a one-node ONNX model of ``op_type`` over ``inputs`` (None: an omitted optional input)."""
    from onnx import helper

    names = [f"x{i}" if x is not None else "" for i, x in enumerate(inputs)]
    outputs = [f"y{i}" for i in range(n_outputs)]
    node = helper.make_node(op_type, names, outputs, **(attributes or {}))
    graph = helper.make_graph([node], "g", [_value_info(n, x) for n, x in zip(names, inputs) if n],
                              [helper.make_empty_tensor_value_info(o) for o in outputs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10  # onnx may write a newer IR version than this onnxruntime reads
    feeds = {n: np.asarray(x) if not isinstance(x, np.ndarray) else x for n, x in zip(names, inputs) if n}
    return model, feeds


def onnxruntime_outputs(op_type, inputs, n_outputs=1, attributes=None, opset=20) -> list:
    """The outputs of a one-node model of ``op_type`` run by onnxruntime (skips the test without it)."""
    ort = pytest.importorskip("onnxruntime")
    model, feeds = one_node_model(op_type, inputs, n_outputs, attributes, opset)
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def onnx_reference_outputs(op_type, inputs, n_outputs=1, attributes=None, opset=24) -> list:
    """The outputs of a one-node model of ``op_type`` run by onnx.reference.ReferenceEvaluator."""
    from onnx.reference import ReferenceEvaluator

    model, feeds = one_node_model(op_type, inputs, n_outputs, attributes, opset)
    return ReferenceEvaluator(model).run(None, feeds)


def d5_outputs(op_type, inputs, attributes=None) -> list:
    """The outputs of d5's reference operator ``op_type`` (always a list)."""
    out = create_operator(op_type, attributes or {}).forward(inputs)
    return list(out) if isinstance(out, tuple) else [out]


def assert_same(got, expected, rtol=1e-5, atol=1e-6):
    """Same number of outputs, shapes, dtypes (numeric) and values (strings compared exactly)."""
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        g, e = np.asarray(g), np.asarray(e)
        assert g.shape == e.shape, (g.shape, e.shape)
        if e.dtype == object or e.dtype.kind in "USb":
            assert g.tolist() == e.tolist()
        else:
            assert g.dtype == e.dtype
            np.testing.assert_allclose(g, e, rtol=rtol, atol=atol)


# ---------------------------------------------------------------------------------------- PyTorch autograd

def torch_grads(fn, inputs, grad_output):
    """Gradients of ``sum(fn(*inputs) * grad_output)`` for the float inputs, by PyTorch autograd."""
    import torch

    tensors = [torch.tensor(x, requires_grad=True) for x in inputs]
    (fn(*tensors) * torch.tensor(grad_output)).sum().backward()
    return [t.grad.numpy() for t in tensors]


def torch_leaf(array):
    """A float64 torch leaf tensor of ``array`` that records its gradient."""
    import torch

    return torch.tensor(array, dtype=torch.float64, requires_grad=True)


def torch_padding(pads):
    """ONNX pads (begins, then ends) -> F.pad's order (last axis first)."""
    rank = len(pads) // 2
    return [p for axis in reversed(range(rank)) for p in (pads[axis], pads[axis + rank])]


def assert_close(actual, expected):
    """Float64 comparison (1e-10) of an array with an array or a torch tensor; shapes must be equal."""
    expected = expected.detach().numpy() if hasattr(expected, "detach") else expected
    assert actual.shape == expected.shape
    np.testing.assert_allclose(actual, expected, rtol=1e-10, atol=1e-10)


def check_backward(op, inputs, y, expected, leaves, seed=99):
    """Backward of ``op`` against autograd of ``expected`` for the same random dY, for every leaf."""
    import torch

    dy = random_normal(y.shape, seed)
    expected.backward(torch.tensor(dy))
    grads = op.backward([dy], inputs, [y])
    grads = grads if isinstance(grads, tuple) else (grads,)
    for grad, leaf in zip(grads, leaves):
        assert_close(grad, leaf.grad)
