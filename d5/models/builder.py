"""A small helper for writing model-zoo networks layer by layer, with PyTorch's default initialization.

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

    def conv(self, x: str, channels: int, kernel: int, stride: int = 1, pad: int = 0, bias: bool = True) -> str:
        c, h, w = self._shapes[x]
        name = self._name("conv")
        fan_in = c * kernel * kernel
        self.network.add_param(f"{name}.weight", self._uniform((channels, c, kernel, kernel), fan_in))
        inputs = [x, f"{name}.weight"]
        if bias:
            self.network.add_param(f"{name}.bias", self._uniform((channels,), fan_in))
            inputs.append(f"{name}.bias")
        self.network.add_node("Conv", inputs, [name], name=name, kernel_shape=[kernel, kernel],
                              strides=[stride, stride], pads=[pad] * 4)
        self._shapes[name] = (channels, (h + 2 * pad - kernel) // stride + 1, (w + 2 * pad - kernel) // stride + 1)
        return name

    def relu(self, x: str) -> str:
        name = self._name("relu")
        self.network.add_node("Relu", [x], [name], name=name)
        self._shapes[name] = self._shapes[x]
        return name

    def max_pool(self, x: str, kernel: int, stride: int | None = None) -> str:
        stride = stride or kernel
        c, h, w = self._shapes[x]
        name = self._name("maxpool")
        self.network.add_node("MaxPool", [x], [name], name=name, kernel_shape=[kernel, kernel], strides=[stride, stride])
        self._shapes[name] = (c, (h - kernel) // stride + 1, (w - kernel) // stride + 1)
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
