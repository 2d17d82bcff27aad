"""What is PyTorch's own in its image converters: GridSample against onnx.reference (whose border padding the d5
reference does not follow), GridSample's torch autograd gradient (gradcheck), and Resize's batched fast path
against its per-plane taps. The comparisons of every framework's native_op with the reference (the case tables,
the errors bad inputs raise) are in tests/frameworks/operators/."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from d5.frameworks.pytorch.operators import create_operator  # noqa: E402


def _onnx_reference(op_type, attributes, inputs, opset=22):
    from onnx import helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    names = [f"i{k}" for k in range(len(inputs))]
    node = helper.make_node(op_type, names, ["y"], **attributes)
    graph = helper.make_graph([node], "g", [], [helper.make_empty_tensor_value_info("y")],
                              initializer=[numpy_helper.from_array(a, n) for a, n in zip(inputs, names)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return ReferenceEvaluator(model).run(None, {})[0]


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("align_corners", [0, 1])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
def test_gridsample_matches_onnx_reference(mode, align_corners, padding_mode):
    # onnx.reference defines GridSample (the d5 reference zeroes border taps outside the image instead of
    # reading the edge, so for border padding this is the oracle).
    rng = np.random.default_rng(7)
    x = rng.standard_normal((1, 2, 4, 5)).astype(np.float32)
    grid = rng.uniform(-1.6, 1.6, (1, 3, 4, 2)).astype(np.float32)
    attributes = {"mode": mode, "align_corners": align_corners, "padding_mode": padding_mode}
    expected = _onnx_reference("GridSample", attributes, [x, grid])
    got = create_operator("GridSample", attributes)(torch.from_numpy(x), torch.from_numpy(grid))
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-5, atol=1e-5)


def test_gridsample_is_differentiable_in_input_and_grid():
    op = create_operator("GridSample", {"mode": "cubic"})
    x = torch.rand(1, 1, 4, 4, dtype=torch.float64, requires_grad=True)
    grid = (torch.rand(1, 2, 3, 2, dtype=torch.float64) * 1.6 - 0.8).requires_grad_(True)
    assert torch.autograd.gradcheck(op, (x, grid))


def test_resize_fast_path_agrees_with_taps():
    x = torch.rand(2, 3, 5, 7, dtype=torch.float64)
    op = create_operator("Resize", {"mode": "linear"})
    fast = op(x, None, torch.tensor([1, 1, 1.6, 0.7]))
    plain = torch.stack([op(x[i, j], None, torch.tensor([1.6, 0.7])) for i in range(2) for j in range(3)])
    torch.testing.assert_close(fast, plain.reshape(fast.shape))
