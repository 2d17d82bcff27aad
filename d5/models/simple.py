"""Small baseline networks: a multi-layer perceptron, a two-block CNN and MobileNet v1 (PyTorch default
initialization)."""
from __future__ import annotations

from typing import Sequence

from d5.errors import ShapeError
from d5.models.builder import NetworkBuilder
from d5.network.graph import Network


def mlp(input_shape: Sequence[int] = (1, 28, 28), hidden: Sequence[int] = (512, 256), num_classes: int = 10,
        seed: int = 0) -> Network:
    """A multi-layer perceptron: flatten, then ``Gemm + Relu`` per entry of ``hidden``, then a linear
    classifier. Inputs ``input`` (N, *input_shape) float32 and ``label`` (N,) int64; outputs ``output``
    (logits) and ``loss`` (mean softmax cross-entropy). The default has 535,818 parameters.

    >>> net = mlp()
    >>> sum(net.params[p].size for p in net.get_params())
    535818
    >>> mlp((4,), hidden=(3,), num_classes=2).params["fc2.weight"].shape
    (3, 4)
    """
    if any(int(h) < 1 for h in hidden):
        raise ShapeError(f"mlp: hidden layer sizes must be positive, got {tuple(hidden)}")
    b = NetworkBuilder("mlp", tuple(input_shape), num_classes, seed=seed)
    x = b.flatten(b.input)
    for features in hidden:
        x = b.relu(b.linear(x, int(features)))
    return b.classifier(b.linear(x, num_classes, output="output"))


def simple_cnn(input_shape: Sequence[int] = (1, 28, 28), channels: Sequence[int] = (32, 64), hidden: int = 128,
               num_classes: int = 10, seed: int = 0) -> Network:
    """A small CNN: per entry of ``channels`` a 3x3 convolution (padding 1), Relu and 2x2 max pooling, then
    a hidden fully connected layer of ``hidden`` units and a linear classifier. Same inputs and outputs as
    :func:`mlp`. The default (28x28 grey images) has 421,642 parameters.

    >>> net = simple_cnn()
    >>> sum(net.params[p].size for p in net.get_params())
    421642
    >>> simple_cnn((3, 8, 8), channels=(4,), hidden=5).inputs["input"].shape
    ('N', 3, 8, 8)
    """
    if len(input_shape) != 3:
        raise ShapeError(f"simple_cnn: input_shape must be (channels, height, width), got {tuple(input_shape)}")
    if input_shape[1] < 2 ** len(channels) or input_shape[2] < 2 ** len(channels):
        raise ShapeError(f"simple_cnn: a {input_shape[1]}x{input_shape[2]} input is too small for {len(channels)} "
                         f"2x2 poolings; use fewer channels entries or a larger input")
    b = NetworkBuilder("simple_cnn", tuple(input_shape), num_classes, seed=seed)
    x = b.input
    for c in channels:
        x = b.max_pool(b.relu(b.conv(x, int(c), kernel=3, pad=1)), 2)
    x = b.relu(b.linear(b.flatten(x), hidden))
    return b.classifier(b.linear(x, num_classes, output="output"))


#: MobileNet v1's depthwise-separable blocks: (output channels, stride).
_MOBILENET_BLOCKS = ((64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), *((512, 1),) * 5, (1024, 2), (1024, 1))


def mobilenet_v1(input_shape: Sequence[int] = (3, 224, 224), num_classes: int = 1000, width: float = 1.0,
                 seed: int = 0) -> Network:
    """MobileNet v1 (Howard et al., 2017): a 3x3 stride-2 convolution, then 13 depthwise-separable blocks
    (a 3x3 depthwise convolution, ``group`` = channels, and a 1x1 pointwise one, each followed by batch
    normalization and Relu), global average pooling and a linear classifier. ``width`` scales every channel
    count (the paper's alpha). Same inputs and outputs as :func:`mlp`; the default has 4,231,976 parameters.

    >>> net = mobilenet_v1((3, 32, 32), num_classes=10, width=0.25)
    >>> [node.attrs.get("group", 1) for node in net.nodes if node.op_type == "Conv"][:3]
    [1, 8, 1]
    """
    if len(input_shape) != 3:
        raise ShapeError(f"mobilenet_v1: input_shape must be (channels, height, width), got {tuple(input_shape)}")
    if width <= 0:
        raise ShapeError(f"mobilenet_v1: width must be positive, got {width}")
    b = NetworkBuilder("mobilenet_v1", tuple(input_shape), num_classes, seed=seed)

    def conv_bn_relu(x: str, channels: int, kernel: int, stride: int, groups: int = 1) -> str:
        conv = b.conv(x, channels, kernel, stride=stride, pad=kernel // 2, bias=False, groups=groups,
                      init="kaiming_fan_out")
        return b.relu(b.batch_norm(conv))

    x = conv_bn_relu(b.input, max(1, int(32 * width)), 3, 2)
    for channels, stride in _MOBILENET_BLOCKS:
        depth = b.shape(x)[0]
        x = conv_bn_relu(x, depth, 3, stride, groups=depth)
        x = conv_bn_relu(x, max(1, int(channels * width)), 1, 1)
    return b.classifier(b.linear(b.flatten(b.global_avg_pool(x)), num_classes, output="output"))
