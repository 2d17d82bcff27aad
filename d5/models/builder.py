"""A small helper for writing model-zoo networks layer by layer, with PyTorch's initializations.

Layers are named automatically (``conv1``, ``relu2``, ...) unless given a ``name``; the zoo's ResNets pass
torchvision's names (``layer1.0.conv1``) so that a PyTorch ``state_dict`` maps onto the parameters by name.

>>> from d5.models.builder import NetworkBuilder
>>> b = NetworkBuilder("tiny", input_shape=(1, 8, 8), num_classes=3, seed=0)
>>> x = b.relu(b.conv(b.input, 4, kernel=3, pad=1))
>>> net = b.classifier(b.linear(b.flatten(x), 3))
>>> net.outputs
['output', 'loss']
"""
from __future__ import annotations

import math

import numpy as np

from d5.errors import D5Error, ShapeError
from d5.network.graph import Network


class NetworkBuilder:
    """Appends layers to a :class:`Network` with a symbolic batch dimension ``'N'``; every layer method
    takes the name of its input tensor and returns the name of its output tensor."""

    def __init__(self, name: str, input_shape: tuple[int, ...], num_classes: int, seed: int = 0,
                 dtype: str = "float32") -> None:
        self.network = Network(name)
        self.rng = np.random.default_rng(seed)
        self.dtype = np.dtype(dtype)
        self.num_classes = num_classes
        self.input = "input"
        self.network.add_input("input", ("N", *input_shape), self.dtype)
        self._shapes = {"input": tuple(input_shape)}  # per-example shapes, to size the parameters
        self._counter = 0

    def _name(self, kind: str) -> str:
        self._counter += 1
        return f"{kind}{self._counter}"

    def _uniform(self, shape: tuple[int, ...], fan_in: int) -> np.ndarray:
        # PyTorch's default for Conv and Linear: kaiming_uniform(a=sqrt(5)) == U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
        bound = 1.0 / math.sqrt(fan_in)
        return self.rng.uniform(-bound, bound, size=shape).astype(self.dtype)

    def _kaiming_normal_fan_out(self, shape: tuple[int, ...]) -> np.ndarray:
        # torchvision's ResNet init: kaiming_normal_(mode="fan_out", nonlinearity="relu"), std = sqrt(2 / fan_out).
        fan_out = shape[0] * int(np.prod(shape[2:]))
        return self.rng.normal(0.0, math.sqrt(2.0 / fan_out), size=shape).astype(self.dtype)

    def shape(self, x: str) -> tuple[int, ...]:
        """The per-example shape (without the batch dimension) of tensor ``x``."""
        return self._shapes[x]

    def conv(self, x: str, channels: int, kernel: int, stride: int = 1, pad: int = 0, bias: bool = True,
             name: str | None = None, init: str = "uniform", groups: int = 1) -> str:
        """Conv2d. ``init`` is ``'uniform'`` (PyTorch's default) or ``'kaiming_fan_out'`` (torchvision's ResNets);
        ``groups`` splits the channels into independent groups (``groups == channels``: depthwise)."""
        c, h, w = self._shapes[x]
        name = name or self._name("conv")
        if groups < 1 or c % groups or channels % groups:
            raise ShapeError(f"conv {name!r}: groups={groups} must divide the {c} input and {channels} output channels")
        fan_in = c // groups * kernel * kernel
        shape = (channels, c // groups, kernel, kernel)
        if init == "uniform":
            weight = self._uniform(shape, fan_in)
        elif init == "kaiming_fan_out":
            weight = self._kaiming_normal_fan_out(shape)
        else:
            raise D5Error(f"conv: unknown init {init!r}; use 'uniform' or 'kaiming_fan_out'")
        self.network.add_param(f"{name}.weight", weight)
        inputs = [x, f"{name}.weight"]
        if bias:
            self.network.add_param(f"{name}.bias", self._uniform((channels,), fan_in))
            inputs.append(f"{name}.bias")
        self.network.add_node("Conv", inputs, [name], name=name, kernel_shape=[kernel, kernel],
                              strides=[stride, stride], pads=[pad] * 4, **({"group": groups} if groups > 1 else {}))
        self._shapes[name] = (channels, (h + 2 * pad - kernel) // stride + 1, (w + 2 * pad - kernel) // stride + 1)
        return name

    def batch_norm(self, x: str, name: str | None = None, epsilon: float = 1e-5, momentum: float = 0.9) -> str:
        """BatchNormalization over channels: trainable ``.weight`` (scale, 1) and ``.bias`` (0), non-trainable
        ``.running_mean`` (0) and ``.running_var`` (1), named as in PyTorch. ONNX's ``momentum`` weighs the old
        running value, so PyTorch's default momentum 0.1 is ONNX's 0.9."""
        channels = self._shapes[x][0]
        name = name or self._name("bn")
        self.network.add_param(f"{name}.weight", np.ones(channels, self.dtype))
        self.network.add_param(f"{name}.bias", np.zeros(channels, self.dtype))
        self.network.add_param(f"{name}.running_mean", np.zeros(channels, self.dtype), trainable=False)
        self.network.add_param(f"{name}.running_var", np.ones(channels, self.dtype), trainable=False)
        self.network.add_node("BatchNormalization", [x] + [f"{name}.{p}" for p in ("weight", "bias", "running_mean",
                                                                                    "running_var")],
                              [name], name=name, epsilon=epsilon, momentum=momentum)
        self._shapes[name] = self._shapes[x]
        return name

    def add(self, a: str, b: str) -> str:
        """Elementwise sum (residual connections); both tensors must have the same shape."""
        if self._shapes[a] != self._shapes[b]:
            raise ShapeError(f"add: {a!r} has shape {self._shapes[a]} but {b!r} has {self._shapes[b]}")
        name = self._name("add")
        self.network.add_node("Add", [a, b], [name], name=name)
        self._shapes[name] = self._shapes[a]
        return name

    def global_avg_pool(self, x: str) -> str:
        """GlobalAveragePool: (C, H, W) -> (C, 1, 1)."""
        name = self._name("avgpool")
        self.network.add_node("GlobalAveragePool", [x], [name], name=name)
        self._shapes[name] = (self._shapes[x][0],) + (1,) * (len(self._shapes[x]) - 1)
        return name

    def dropout(self, x: str, ratio: float) -> str:
        """Inverted dropout with probability ``ratio`` (active in training only); ``ratio`` is an ONNX input
        since opset 12, stored as a non-trainable scalar parameter."""
        name = self._name("dropout")
        self.network.add_param(f"{name}.ratio", np.array(ratio, self.dtype), trainable=False)
        self.network.add_node("Dropout", [x, f"{name}.ratio"], [name], name=name)
        self._shapes[name] = self._shapes[x]
        return name

    def zero_pad_channels(self, x: str, channels: int) -> str:
        """Append zero channels to ``x`` until it has ``channels`` (a multiple of its own count): the
        parameter-free "option A" shortcut of He et al. 2016. The zeros are ``x - x`` so that they follow
        ``x``'s batch size and dtype without a shape computation."""
        c = self._shapes[x][0]
        if channels % c or channels < c:
            raise ShapeError(f"zero_pad_channels: {channels} is not a multiple of the {c} channels of {x!r}")
        if channels == c:
            return x
        zeros = self._name("zeros")
        self.network.add_node("Sub", [x, x], [zeros], name=zeros)
        name = self._name("pad")
        self.network.add_node("Concat", [x] + [zeros] * (channels // c - 1), [name], name=name, axis=1)
        self._shapes[name] = (channels, *self._shapes[x][1:])
        return name

    def subsample(self, x: str, stride: int) -> str:
        """``x[:, :, ::stride, ::stride]``, as a 1x1 MaxPool with that stride (ONNX's strided Slice needs
        shape arithmetic for the symbolic batch; a 1x1 pooling window needs none and has a gradient)."""
        if stride == 1:
            return x
        return self.max_pool(x, 1, stride)

    def relu(self, x: str) -> str:
        name = self._name("relu")
        self.network.add_node("Relu", [x], [name], name=name)
        self._shapes[name] = self._shapes[x]
        return name

    def max_pool(self, x: str, kernel: int, stride: int | None = None, pad: int = 0) -> str:
        stride = stride or kernel
        c, h, w = self._shapes[x]
        name = self._name("maxpool")
        attrs = {"pads": [pad] * 4} if pad else {}
        self.network.add_node("MaxPool", [x], [name], name=name, kernel_shape=[kernel, kernel], strides=[stride, stride],
                              **attrs)
        self._shapes[name] = (c, (h + 2 * pad - kernel) // stride + 1, (w + 2 * pad - kernel) // stride + 1)
        return name

    def flatten(self, x: str) -> str:
        name = self._name("flatten")
        self.network.add_node("Flatten", [x], [name], name=name, axis=1)
        self._shapes[name] = (int(np.prod(self._shapes[x])),)
        return name

    def linear(self, x: str, features: int, output: str | None = None) -> str:
        (fan_in,) = self._shapes[x]
        name = output or self._name("fc")
        self.network.add_param(f"{name}.weight", self._uniform((features, fan_in), fan_in))
        self.network.add_param(f"{name}.bias", self._uniform((features,), fan_in))
        self.network.add_node("Gemm", [x, f"{name}.weight", f"{name}.bias"], [name], name=name, transB=1)
        self._shapes[name] = (features,)
        return name

    def classifier(self, logits: str) -> Network:
        """Finish the network: ``logits`` becomes output ``'output'``, and ``'loss'`` is the mean softmax
        cross-entropy against the int64 input ``'label'``."""
        net = self.network
        if logits != "output":
            net.add_node("Identity", [logits], ["output"], name="output")
        net.add_input("label", ("N",), "int64")
        net.add_node("SoftmaxCrossEntropyLoss", ["output", "label"], ["loss"], name="loss", reduction="mean")
        net.add_output("output")
        net.add_output("loss")
        return net
