"""Small baseline networks: a multi-layer perceptron and a two-block CNN (PyTorch default initialization)."""
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
