"""The PyTorch framework's converters of the zoo's and common operators against the reference operators (the oracle): forward outputs in
float32, and torch autograd's gradient of ``sum(output * cotangent)`` against the reference's ``backward``."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from _torch_oracle import _distinct, _ints, _labels, _rand, check_against_reference  # noqa: E402
from d5.frameworks.pytorch.operators import create_operator, supported_operators  # noqa: E402
from d5.frameworks.reference.operators import create_operator as reference_op  # noqa: E402

# (id, op_type, attributes, [input makers (None: omitted)], options)
# options: opset, training, outputs (node_output_count)
CASES = [
    # -- the zoo's operators first
    ("conv", "Conv", {"pads": [1, 1, 1, 1]}, [_rand(2, 3, 6, 6), _rand(4, 3, 3, 3), _rand(4)], {}),
    ("conv_stride_group", "Conv", {"strides": [2, 2], "group": 2, "dilations": [2, 1], "pads": [1, 0, 2, 1]},
     [_rand(2, 4, 7, 8), _rand(6, 2, 2, 3)], {}),
    ("conv_same_upper", "Conv", {"auto_pad": "SAME_UPPER", "strides": [2, 2]}, [_rand(1, 2, 5, 6), _rand(3, 2, 2, 2)], {}),
    ("conv_same_lower_1d", "Conv", {"auto_pad": "SAME_LOWER"}, [_rand(2, 2, 7), _rand(3, 2, 4), _rand(3)], {}),
    ("conv_3d", "Conv", {"pads": [1, 0, 0, 0, 1, 1]}, [_rand(1, 2, 4, 4, 3), _rand(2, 2, 2, 2, 2)], {}),
    ("conv_depthwise", "Conv", {"group": 3, "pads": [1, 1, 1, 1]}, [_rand(2, 3, 5, 5), _rand(3, 1, 3, 3)], {}),
    ("conv_transpose", "ConvTranspose", {"strides": [2, 2], "pads": [1, 0, 0, 1], "output_padding": [1, 0]},
     [_rand(2, 3, 4, 3), _rand(3, 2, 3, 3), _rand(2)], {}),
    ("conv_transpose_group_shape", "ConvTranspose", {"group": 2, "strides": [2], "output_shape": [9]},
     [_rand(1, 4, 4), _rand(4, 1, 3)], {}),
    ("batchnorm_inference", "BatchNormalization", {"epsilon": 1e-3},
     [_rand(3, 4, 2, 3), _rand(4), _rand(4), _rand(4), _rand(4, low=0.5, high=1.5)], {}),
    ("batchnorm_training", "BatchNormalization", {"momentum": 0.8},
     [_rand(3, 4, 2, 3), _rand(4), _rand(4), _rand(4), _rand(4, low=0.5, high=1.5)], {"training": True}),
    ("batchnorm_training_3_outputs", "BatchNormalization", {"training_mode": 1},
     [_rand(5, 2, 3), _rand(2), _rand(2), _rand(2), _rand(2, low=0.5, high=1.5)], {"outputs": 3}),
    ("relu", "Relu", {}, [_rand(3, 4)], {}),
    ("maxpool", "MaxPool", {"kernel_shape": [2, 2], "strides": [2, 2]}, [_distinct(2, 3, 6, 6)], {}),
    ("maxpool_pads_ceil", "MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 0, 1],
                                      "ceil_mode": 1}, [_distinct(1, 2, 6, 7)], {"outputs": 2}),
    ("maxpool_subsample_view", "MaxPool", {"kernel_shape": [1, 1], "strides": [2, 3]}, [_distinct(2, 3, 7, 6)], {}),
    ("maxpool_subsample_ceil", "MaxPool", {"kernel_shape": [1, 1], "strides": [3, 2], "ceil_mode": 1},
     [_distinct(1, 2, 7, 6)], {}),
    ("maxpool_dilated_same", "MaxPool", {"kernel_shape": [2, 2], "dilations": [2, 1], "auto_pad": "SAME_UPPER"},
     [_distinct(1, 2, 5, 5)], {"outputs": 2}),
    ("maxpool_1d_storage", "MaxPool", {"kernel_shape": [3], "strides": [2], "pads": [1, 1]},
     [_distinct(2, 2, 7)], {"outputs": 2}),
    ("maxpool_2d_colmajor", "MaxPool", {"kernel_shape": [2, 2], "storage_order": 1}, [_distinct(1, 2, 3, 4)],
     {"outputs": 2}),
    ("avgpool", "AveragePool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
     [_rand(2, 2, 6, 6)], {}),
    ("avgpool_include_pad_ceil", "AveragePool", {"kernel_shape": [3, 2], "strides": [2, 2], "pads": [1, 0, 1, 1],
                                                 "count_include_pad": 1, "ceil_mode": 1}, [_rand(1, 2, 6, 5)], {}),
    ("avgpool_dilated_3d", "AveragePool",
     {"kernel_shape": [2, 2, 2], "dilations": [1, 2, 1], "auto_pad": "SAME_LOWER"}, [_rand(1, 1, 3, 4, 3)], {}),
    ("global_avgpool", "GlobalAveragePool", {}, [_rand(2, 3, 4, 5)], {}),
    ("global_maxpool", "GlobalMaxPool", {}, [_distinct(2, 3, 4, 5)], {}),
    ("flatten", "Flatten", {"axis": 2}, [_rand(2, 3, 4, 2)], {}),
    ("gemm", "Gemm", {}, [_rand(3, 4), _rand(4, 5), _rand(5)], {}),
    ("gemm_trans_alpha_beta", "Gemm", {"alpha": 0.5, "beta": 2.0, "transA": 1, "transB": 1},
     [_rand(4, 3), _rand(5, 4), _rand(3, 1)], {}),
    ("gemm_no_c", "Gemm", {"alpha": 2.0}, [_rand(3, 4), _rand(4, 2)], {}),
    ("gemm_linear_layer", "Gemm", {"transB": 1}, [_rand(3, 4), _rand(5, 4), _rand(5)], {}),  # torch's linear
    ("gemm_linear_layer_no_c", "Gemm", {"transB": 1}, [_rand(3, 4), _rand(5, 4)], {}),
    ("gemm_linear_layer_row_c", "Gemm", {"transB": 1}, [_rand(3, 4), _rand(5, 4), _rand(1, 5)], {}),
    ("add_broadcast", "Add", {}, [_rand(2, 3, 4), _rand(4)], {}),
    ("sub_broadcast", "Sub", {}, [_rand(2, 1, 4), _rand(3, 1)], {}),
    ("concat", "Concat", {"axis": 1}, [_rand(2, 3), _rand(2, 1), _rand(2, 2)], {}),
    ("concat_negative_axis", "Concat", {"axis": -1}, [_rand(2, 3), _rand(2, 1)], {}),
    ("dropout_inference", "Dropout", {}, [_rand(3, 4), _ints(0.5, np.float32)], {"outputs": 2}),
    ("dropout_training_ratio0", "Dropout", {}, [_rand(3, 4), _ints(0.0, np.float32)], {"training": True}),
    ("dropout_attr_inactive", "Dropout", {"ratio": 0.3}, [_rand(3, 4)], {"opset": 10}),
    ("softmax_xent", "SoftmaxCrossEntropyLoss", {}, [_rand(4, 5), _labels(4, 5)], {}),
    ("softmax_xent_both", "SoftmaxCrossEntropyLoss", {"reduction": "sum"}, [_rand(4, 5, 3), _labels(4, 5, 3)],
     {"outputs": 2}),
    ("softmax_xent_weights_ignore", "SoftmaxCrossEntropyLoss", {"ignore_index": 1},
     [_rand(6, 4), _ints([0, 1, 2, 3, 1, 2]), _rand(4, low=0.2, high=1.0)], {}),
    ("nll_none", "NegativeLogLikelihoodLoss", {"reduction": "none"}, [_rand(4, 3, 2), _labels(4, 3, 2)], {}),
    ("nll_weights", "NegativeLogLikelihoodLoss", {}, [_rand(5, 3), _labels(5, 3), _rand(3, low=0.2, high=1.0)], {}),
    ("mse", "MeanSquaredError", {}, [_rand(4, 3), _rand(4, 3)], {}),
    ("mse_sum_broadcast", "MeanSquaredError", {"reduction": "sum"}, [_rand(4, 3), _rand(3)], {}),
    ("mse_none", "MeanSquaredError", {"reduction": "none"}, [_rand(4, 3), _rand(4, 3)], {}),
    ("lstm", "LSTM", {"hidden_size": 3}, [_rand(4, 2, 5), _rand(1, 12, 5), _rand(1, 12, 3), _rand(1, 24)],
     {"outputs": 3}),
    ("lstm_bidirectional_states_peephole", "LSTM", {"hidden_size": 2, "direction": "bidirectional"},
     [_rand(3, 2, 4), _rand(2, 8, 4), _rand(2, 8, 2), _rand(2, 16), None, _rand(2, 2, 2), _rand(2, 2, 2),
      _rand(2, 6)], {"outputs": 3}),
    ("lstm_layout_seqlens_clip", "LSTM", {"hidden_size": 2, "direction": "reverse", "layout": 1, "clip": 0.7},
     [_rand(3, 4, 2, low=-2, high=2), _rand(1, 8, 2), _rand(1, 8, 2), None, _ints([4, 2, 3], np.int32)],
     {"outputs": 3}),
    ("gru", "GRU", {"hidden_size": 3, "direction": "bidirectional"},
     [_rand(4, 2, 3), _rand(2, 9, 3), _rand(2, 9, 3), _rand(2, 18), None, _rand(2, 2, 3)], {"outputs": 2}),
    ("gru_linear_before_reset_seqlens", "GRU", {"hidden_size": 2, "linear_before_reset": 1},
     [_rand(4, 3, 2), _rand(1, 6, 2), _rand(1, 6, 2), _rand(1, 12), _ints([4, 1, 3], np.int32)], {"outputs": 2}),
    ("rnn_activation", "RNN", {"hidden_size": 3, "activations": ["LeakyRelu"], "activation_alpha": [0.2]},
     [_rand(3, 2, 2), _rand(1, 3, 2), _rand(1, 3, 3), _rand(1, 6)], {"outputs": 2}),
    ("gather", "Gather", {"axis": 0}, [_rand(5, 3), _ints([[0, 4], [-1, 2]])], {}),
    ("gather_axis1", "Gather", {"axis": 1}, [_rand(2, 5, 3), _ints([3, 0, 3])], {}),
    ("reshape", "Reshape", {}, [_rand(2, 3, 4), _ints([0, -1])], {}),
    ("reshape_allowzero", "Reshape", {"allowzero": 1}, [_rand(2, 3, 4), _ints([4, 6])], {}),
    ("transpose", "Transpose", {"perm": [2, 0, 1]}, [_rand(2, 3, 4)], {}),
    ("transpose_default", "Transpose", {}, [_rand(2, 3, 4)], {}),
    ("identity", "Identity", {}, [_rand(3)], {}),
    ("matmul_batched", "MatMul", {}, [_rand(2, 3, 4), _rand(4, 5)], {}),
    ("matmul_vector", "MatMul", {}, [_rand(4), _rand(2, 4, 3)], {}),
    # -- the rest, in the brief's order
    ("einsum", "Einsum", {"equation": "bij,bjk->bik"}, [_rand(2, 3, 4), _rand(2, 4, 2)], {}),
    ("instance_norm", "InstanceNormalization", {"epsilon": 1e-4}, [_rand(2, 3, 4, 2), _rand(3), _rand(3)], {}),
    ("layer_norm", "LayerNormalization", {"axis": 1}, [_rand(2, 3, 4), _rand(3, 4), _rand(3, 4)], {}),
    ("layer_norm_stats", "LayerNormalization", {}, [_rand(2, 3, 4), _rand(4), _rand(4)], {"outputs": 3}),
    ("group_norm", "GroupNormalization", {"num_groups": 2}, [_rand(2, 4, 3), _rand(4), _rand(4)], {}),
    ("group_norm_18", "GroupNormalization", {"num_groups": 2}, [_rand(2, 4, 3), _rand(2), _rand(2)], {"opset": 18}),
    ("sigmoid", "Sigmoid", {}, [_rand(3, 4, low=-4, high=4)], {}),
    ("tanh", "Tanh", {}, [_rand(3, 4, low=-3, high=3)], {}),
    ("gelu", "Gelu", {}, [_rand(3, 4, low=-3, high=3)], {}),
    ("gelu_tanh", "Gelu", {"approximate": "tanh"}, [_rand(3, 4, low=-3, high=3)], {}),
    ("erf", "Erf", {}, [_rand(3, 4, low=-2, high=2)], {}),
    ("leaky_relu", "LeakyRelu", {"alpha": 0.1}, [_rand(3, 4)], {}),
    ("elu", "Elu", {"alpha": 0.5}, [_rand(3, 4)], {}),
    ("selu", "Selu", {}, [_rand(3, 4)], {}),
    ("softplus", "Softplus", {}, [_rand(3, 4, low=-5, high=5)], {}),
    ("hard_sigmoid", "HardSigmoid", {"alpha": 0.3}, [_rand(3, 4, low=-4, high=4)], {}),
    ("hard_swish", "HardSwish", {}, [_rand(3, 4, low=-5, high=5)], {}),
    ("prelu_channel", "PRelu", {}, [_rand(2, 3, 4), _rand(3, 1)], {}),
    ("prelu_broadcast", "PRelu", {}, [_rand(2, 3, 4), _rand(4)], {}),
    ("softmax", "Softmax", {"axis": 1}, [_rand(2, 3, 4, low=-3, high=3)], {}),
    ("softmax_v11", "Softmax", {}, [_rand(2, 3, 4, low=-3, high=3)], {"opset": 11}),
    ("log_softmax", "LogSoftmax", {}, [_rand(2, 3, 4, low=-3, high=3)], {}),
    ("log_softmax_v1_axis2", "LogSoftmax", {"axis": 2}, [_rand(2, 3, 4, 2)], {"opset": 1}),
    ("hardmax", "Hardmax", {}, [_distinct(2, 3, 4)], {}),
    ("hardmax_v11", "Hardmax", {}, [_distinct(2, 3, 4)], {"opset": 11}),
    ("mul", "Mul", {}, [_rand(2, 3), _rand(2, 1)], {}),
    ("div", "Div", {}, [_rand(2, 3), _rand(3, low=0.5, high=2.0)], {}),
    ("pow", "Pow", {}, [_rand(2, 3, low=0.5, high=2.0), _rand(3)], {}),
    ("neg", "Neg", {}, [_rand(4)], {}),
    ("abs", "Abs", {}, [_rand(4)], {}),
    ("exp", "Exp", {}, [_rand(4)], {}),
    ("log", "Log", {}, [_rand(4, low=0.1, high=3.0)], {}),
    ("sqrt", "Sqrt", {}, [_rand(4, low=0.1, high=3.0)], {}),
    ("reciprocal", "Reciprocal", {}, [_rand(4, low=0.5, high=3.0)], {}),
    ("min", "Min", {}, [_distinct(2, 3), _rand(3, low=-0.5, high=0.5)], {}),
    ("max", "Max", {}, [_distinct(2, 3), _rand(2, 1, low=-0.5, high=0.5), _rand(3)], {}),
    ("sum", "Sum", {}, [_rand(2, 3), _rand(3), _rand(2, 1)], {}),
    ("mean", "Mean", {}, [_rand(2, 3), _rand(3)], {}),
    ("equal", "Equal", {}, [_ints([1, 2, 3]), _ints([1, 0, 3])], {}),
    ("less", "Less", {}, [_rand(2, 3), _rand(3)], {}),
    ("greater", "Greater", {}, [_rand(2, 3), _rand(3)], {}),
    ("not", "Not", {}, [_ints([True, False], bool)], {}),
    ("and", "And", {}, [_ints([True, False, True], bool), _ints([True, True, False], bool)], {}),
    ("or", "Or", {}, [_ints([True, False, False], bool), _ints([False, False, True], bool)], {}),
    ("where", "Where", {}, [_ints([[True, False, True]], bool), _rand(2, 3), _rand(3)], {}),
    ("cast", "Cast", {"to": 7}, [_rand(2, 3, low=-5, high=5)], {}),
    ("cast_float", "Cast", {"to": 11}, [_rand(2, 3)], {}),
    ("clip_inputs", "Clip", {}, [_rand(3, 4), _ints(-0.5, np.float32), _ints(0.4, np.float32)], {}),
    ("clip_max_only", "Clip", {}, [_rand(3, 4), None, _ints(0.2, np.float32)], {}),
    ("clip_attributes", "Clip", {"min": -0.3, "max": 0.3}, [_rand(3, 4)], {"opset": 6}),
    ("split", "Split", {"axis": 1}, [_rand(2, 5), _ints([2, 3])], {"outputs": 2}),
    ("split_equal", "Split", {"axis": 0}, [_rand(6, 2)], {"outputs": 3}),
    ("split_num_outputs", "Split", {"axis": 0, "num_outputs": 3}, [_rand(7, 2)], {"outputs": 3}),
    ("slice", "Slice", {}, [_rand(4, 5), _ints([1, 0]), _ints([3, 10]), _ints([0, 1]), _ints([1, 2])], {}),
    ("slice_negative_step", "Slice", {}, [_rand(4, 6), _ints([-1, 5]), _ints([-10, 0]), _ints([0, 1]),
                                          _ints([-2, -3])], {}),
    ("slice_attributes", "Slice", {"starts": [1], "ends": [-1], "axes": [1]}, [_rand(3, 5)], {"opset": 9}),
    ("gather_elements", "GatherElements", {"axis": 1}, [_rand(3, 4), _ints([[0, 3], [1, 1], [-1, 2]])], {}),
    ("pad_constant", "Pad", {}, [_rand(2, 3), _ints([1, 0, 2, -1]), _ints(0.5, np.float32)], {}),
    ("pad_reflect", "Pad", {"mode": "reflect"}, [_rand(2, 3, 4), _ints([0, 1, 2, 0, 1, 1])], {}),
    ("pad_edge", "Pad", {"mode": "edge"}, [_rand(3, 4), _ints([2, 1, 0, 3])], {}),
    ("squeeze", "Squeeze", {}, [_rand(2, 1, 3, 1), _ints([1, -1])], {}),
    ("squeeze_all", "Squeeze", {}, [_rand(1, 3, 1)], {}),
    ("unsqueeze", "Unsqueeze", {}, [_rand(2, 3), _ints([0, -1])], {}),
    ("unsqueeze_attribute", "Unsqueeze", {"axes": [1]}, [_rand(2, 3)], {"opset": 11}),
    ("expand", "Expand", {}, [_rand(3, 1), _ints([2, 1, 4])], {}),
    ("shape", "Shape", {}, [_rand(2, 3, 4)], {}),
    ("shape_slice", "Shape", {"start": 1, "end": -1}, [_rand(2, 3, 4)], {}),
    ("constant_of_shape", "ConstantOfShape", {"value": np.array([2.5], np.float32)}, [_ints([2, 3])], {}),
    ("constant", "Constant", {"value": np.arange(6, dtype=np.float32).reshape(2, 3)}, [], {}),
    ("range", "Range", {}, [_ints(1), _ints(10), _ints(3)], {}),
    ("range_float", "Range", {}, [_ints(0.5, np.float32), _ints(2.0, np.float32), _ints(0.25, np.float32)], {}),
    ("tile", "Tile", {}, [_rand(2, 3), _ints([2, 1])], {}),
    ("reduce_sum", "ReduceSum", {}, [_rand(2, 3, 4), _ints([1])], {}),
    ("reduce_sum_noop", "ReduceSum", {"noop_with_empty_axes": 1}, [_rand(2, 3)], {}),
    ("reduce_mean_attr", "ReduceMean", {"axes": [0, 2], "keepdims": 0}, [_rand(2, 3, 4)], {"opset": 11}),
    ("reduce_max", "ReduceMax", {"keepdims": 0}, [_distinct(2, 3, 4), _ints([-1])], {}),
    ("reduce_min_all", "ReduceMin", {}, [_distinct(2, 3)], {}),
    ("reduce_prod", "ReduceProd", {}, [_rand(2, 3, low=0.5, high=1.5), _ints([1])], {}),
    ("reduce_l2", "ReduceL2", {"keepdims": 0}, [_rand(2, 3, 4), _ints([0, 1])], {}),
    ("reduce_log_sum_exp", "ReduceLogSumExp", {}, [_rand(2, 3, 4), _ints([2])], {}),
    ("argmax", "ArgMax", {"axis": 1}, [_distinct(2, 3, 4)], {}),
    ("argmin_last", "ArgMin", {"axis": -1, "keepdims": 0, "select_last_index": 1}, [_ints([[1, 0, 0, 2]], np.float32)],
     {}),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_converter_matches_reference(case):
    check_against_reference(case)


def test_zoo_operators_are_registered():
    import d5

    models = [d5.models.lenet5(), d5.models.resnet(20), d5.models.wide_resnet(10, 1),
              d5.models.mobilenet_v1((3, 32, 32), num_classes=10, width=0.25), d5.models.lstm_lm(50, 8, 2, 4),
              d5.models.simple_cnn(), d5.models.mlp()]
    used = {node.op_type for model in models for node in model.nodes}
    assert used - set(supported_operators()) == set()


def test_converters_are_modules_with_versions():
    assert isinstance(create_operator("Relu", {}), torch.nn.Module)
    assert type(create_operator("Softmax", {}, opset=11)).__name__ == "Softmax1"
    assert type(create_operator("Softmax", {}, opset=13)).__name__ == "Softmax"


def test_dropout_in_training_masks_and_scales():
    op = create_operator("Dropout", {"seed": 3})
    op.train(True)
    op.node_output_count = 2
    x = torch.ones(1000, requires_grad=True)
    y, mask = op(x, torch.tensor(0.25))
    assert mask.dtype == torch.bool and 0.6 < mask.float().mean().item() < 0.9
    torch.testing.assert_close(y, mask.float() / 0.75)
    y.sum().backward()
    torch.testing.assert_close(x.grad, mask.float() / 0.75)
    op.eval()
    assert torch.equal(op(x, torch.tensor(0.25))[0], x)
    assert op(x, torch.tensor(0.25), torch.tensor(True))[1].float().mean().item() < 1  # training_mode input


def test_maxpool_integer_input_matches_reference():
    x = np.random.default_rng(0).integers(-50, 50, (1, 2, 5, 5)).astype(np.int32)
    attributes = {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [1, 1, 1, 1]}
    expected = reference_op("MaxPool", attributes).forward([x])[0]
    got = create_operator("MaxPool", attributes)(torch.from_numpy(x))
    assert got.dtype == torch.int32
    np.testing.assert_array_equal(got.numpy(), expected)
