"""What is PyTorch's own in its Col2Im and DeformConv converters: torch autograd's gradients, checked by gradcheck
(the reference Col2Im is forward only), and DeformConv, which the reference framework lacks, against ONNX's own
reference implementation (onnx.reference). The comparisons of every framework's Col2Im with the reference (the case
table, the errors bad inputs raise) are in tests/frameworks/operators/."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from d5.errors import ShapeError  # noqa: E402
from d5.frameworks.pytorch.operators import create_operator  # noqa: E402


@pytest.mark.parametrize("image, block", [([4, 5], [2, 3]), ([5], [2]), ([3, 3, 3], [2, 1, 2])])
def test_col2im_gradient_is_torch_autograd(image, block):
    blocks = np.prod([i - b + 1 for i, b in zip(image, block)])
    columns = torch.tensor(np.random.default_rng(0).uniform(-1, 1, (1, 2 * int(np.prod(block)), blocks)),
                           requires_grad=True)
    op = create_operator("Col2Im", {})
    assert torch.autograd.gradcheck(lambda c: op(c, torch.tensor(image), torch.tensor(block)), (columns,),
                                    fast_mode=True)


# -- DeformConv against onnx.reference ---------------------------------------------------------------------------

def _onnx_deform_conv(attributes, arrays):
    import onnx
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    names = ["X", "W", "offset", "B", "mask"][:len(arrays)]
    node = helper.make_node("DeformConv", [n if a is not None else "" for n, a in zip(names, arrays)], ["Y"],
                            **attributes)
    inputs = [helper.make_tensor_value_info(n, onnx.TensorProto.DOUBLE, a.shape)
              for n, a in zip(names, arrays) if a is not None]
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("Y", onnx.TensorProto.DOUBLE, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    feeds = {n: a for n, a in zip(names, arrays) if a is not None}
    return ReferenceEvaluator(model).run(None, feeds)[0]


DEFORM_CASES = [
    ("basic", {}, (1, 2, 4, 4), (3, 2, 2, 2), False, False),
    ("pads_strides_bias_mask", {"pads": [1, 0, 1, 1], "strides": [2, 1]}, (2, 2, 4, 5), (2, 2, 3, 2), True, True),
    ("dilations_groups", {"dilations": [2, 1], "group": 2}, (1, 4, 5, 4), (4, 2, 2, 2), True, False),
    ("offset_groups", {"offset_group": 2, "pads": [1, 1, 1, 1]}, (1, 4, 3, 3), (2, 4, 3, 3), False, True),
]


def _deform_inputs(attributes, x_shape, w_shape, bias, mask, seed=0):
    rng = np.random.default_rng(seed)
    kernel = w_shape[2:]
    pads = attributes.get("pads", [0] * 4)
    strides = attributes.get("strides", [1, 1])
    dilations = attributes.get("dilations", [1, 1])
    out = [(x_shape[2 + a] + pads[a] + pads[a + 2] - (kernel[a] - 1) * dilations[a] - 1) // strides[a] + 1
           for a in range(2)]
    groups = attributes.get("offset_group", 1)
    taps = int(np.prod(kernel))
    return [rng.uniform(-1, 1, x_shape), rng.uniform(-1, 1, w_shape),
            rng.uniform(-1.5, 1.5, (x_shape[0], groups * taps * 2, *out)),
            rng.uniform(-1, 1, w_shape[0]) if bias else None,
            rng.uniform(0, 1, (x_shape[0], groups * taps, *out)) if mask else None]


@pytest.mark.parametrize("attributes, x_shape, w_shape, bias, mask", [c[1:] for c in DEFORM_CASES],
                         ids=[c[0] for c in DEFORM_CASES])
def test_deform_conv_matches_onnx_reference(attributes, x_shape, w_shape, bias, mask):
    arrays = _deform_inputs(attributes, x_shape, w_shape, bias, mask)
    while arrays[-1] is None:
        arrays.pop()
    expected = _onnx_deform_conv(attributes, arrays)
    got = create_operator("DeformConv", attributes)(*[None if a is None else torch.from_numpy(a) for a in arrays])
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-5, atol=1e-6)  # onnx.reference samples in float32


def test_deform_conv_gradient_is_torch_autograd():
    attributes = {"pads": [1, 1, 1, 1], "offset_group": 2}
    arrays = _deform_inputs(attributes, (1, 2, 3, 3), (2, 2, 2, 2), True, True, seed=1)
    tensors = [torch.tensor(a, requires_grad=True) for a in arrays]
    assert torch.autograd.gradcheck(create_operator("DeformConv", attributes), tuple(tensors), fast_mode=True)


def test_deform_conv_bad_shapes_raise_shape_error():
    x, w = torch.zeros(1, 2, 4, 4), torch.zeros(3, 2, 2, 2)
    op = create_operator("DeformConv", {})
    with pytest.raises(ShapeError, match="offset must be"):
        op(x, w, torch.zeros(1, 4, 3, 3))
    with pytest.raises(ShapeError, match="not the convolution's output"):
        op(x, w, torch.zeros(1, 8, 4, 4))
    with pytest.raises(ShapeError, match="group"):
        create_operator("DeformConv", {"group": 2})(x, w, torch.zeros(1, 8, 3, 3))
