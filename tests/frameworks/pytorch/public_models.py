"""Public architectures written in plain torch after their published definitions (torchvision's and Hugging
Face's modules, the PyTorch examples), at sizes that train in seconds on a CPU: the "models users bring" that
``public_models_check.py`` exports to ONNX, imports with ``d5.frameworks.pytorch.from_onnx`` and trains.

Each :class:`PublicModel` names a builder (fixed seed: the same weights every call), example inputs at any
batch size, the labels of a cross-entropy loss and where the class axis of the output is. Dropout is 0 (and
stochastic depth off) everywhere: a random mask cannot be compared between two runtimes, and it is the only
deviation from the published definitions besides the sizes.

>>> [model.name for model in MODELS][:3]
['mobilenet_v2', 'mobilenet_v3_small', 'efficientnet_b0']
"""
from __future__ import annotations

import dataclasses
import math
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

NUM_CLASSES = 10
IMAGE = (3, 32, 32)
VOCAB = 50
SEQ = 8


@dataclasses.dataclass(frozen=True)
class PublicModel:
    """A public architecture: ``build()`` returns the torch module with seeded weights; ``inputs(batch, rng)``
    the example inputs by ONNX input name (NumPy); ``labels(batch, rng)`` the cross-entropy labels, whose shape
    is the output's without its class axis ``class_axis``; ``batch_axis`` is where the batch is (a sequence-first
    model has it on axis 1)."""

    name: str
    build: Callable[[], nn.Module]
    inputs: Callable[[int, np.random.Generator], dict[str, np.ndarray]]
    labels: Callable[[int, np.random.Generator], np.ndarray]
    source: str
    class_axis: int = 1
    batch_axis: int = 0
    #: "sgd" (momentum 0.9) for the CNNs as in their papers, "adam" for transformers and recurrent models.
    optimizer: str = "sgd"
    lr: float = 0.05


def _seeded(builder: Callable[[], nn.Module]) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        torch.manual_seed(0)
        return builder()
    build.__name__ = builder.__name__
    return build


def _images(batch: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {"input": rng.normal(size=(batch, *IMAGE)).astype(np.float32)}


def _large_images(batch: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    # ResNet-18 and ShuffleNetV2 downsample 32 times: at 32x32 their last BatchNormalizations see one pixel per
    # image, statistics over 4 numbers, so that float32 rounding alone (torch's own, measured against float64)
    # moves a 5-step trajectory by percents. At 64x64 they see 4 pixels and torch float32 stays within 1e-5.
    return {"input": rng.normal(size=(batch, 3, 64, 64)).astype(np.float32)}


def _image_labels(batch: int, rng: np.random.Generator) -> np.ndarray:
    return rng.integers(0, NUM_CLASSES, batch).astype(np.int64)


def _make_divisible(v: float, divisor: int, min_value: int | None = None) -> int:
    # torchvision.models._utils._make_divisible (from the TensorFlow MobileNet code).
    min_value = min_value or divisor
    new_v = max(min_value, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


def _torchvision_cnn_init(model: nn.Module) -> None:
    # torchvision's MobileNet/EfficientNet/ResNet initialization.
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out")
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0, 0.01)
            nn.init.zeros_(m.bias)


class ConvBNAct(nn.Sequential):
    """torchvision.ops.Conv2dNormActivation: Conv (no bias) -> BatchNorm -> activation."""

    def __init__(self, cin: int, cout: int, kernel: int = 3, stride: int = 1, groups: int = 1,
                 act: type[nn.Module] | None = nn.ReLU6) -> None:
        layers: list[nn.Module] = [nn.Conv2d(cin, cout, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False),
                                   nn.BatchNorm2d(cout)]
        if act is not None:
            layers.append(act())
        super().__init__(*layers)


# ------------------------------------------------------------------------------------------- MobileNetV2
class InvertedResidualV2(nn.Module):
    """Sandler et al., "MobileNetV2: Inverted Residuals and Linear Bottlenecks", CVPR 2018;
    torchvision/models/mobilenetv2.py InvertedResidual: 1x1 expand, 3x3 depthwise, linear 1x1 project."""

    def __init__(self, inp: int, oup: int, stride: int, expand_ratio: int) -> None:
        super().__init__()
        hidden = int(round(inp * expand_ratio))
        self.use_res_connect = stride == 1 and inp == oup
        layers: list[nn.Module] = [] if expand_ratio == 1 else [ConvBNAct(inp, hidden, 1)]
        layers += [ConvBNAct(hidden, hidden, stride=stride, groups=hidden),
                   nn.Conv2d(hidden, oup, 1, 1, 0, bias=False), nn.BatchNorm2d(oup)]
        self.conv = nn.Sequential(*layers)

    def forward(self, x):
        return x + self.conv(x) if self.use_res_connect else self.conv(x)


class MobileNetV2(nn.Module):
    """torchvision mobilenet_v2 with width 0.5 and the first stages of its [t, c, n, s] table."""

    def __init__(self, num_classes: int = NUM_CLASSES, width: float = 0.5) -> None:
        super().__init__()
        settings = [[1, 16, 1, 1], [6, 24, 2, 2], [6, 32, 2, 2], [6, 64, 1, 2]]
        cin = _make_divisible(32 * width, 8)
        last = _make_divisible(256 * width, 8)
        features: list[nn.Module] = [ConvBNAct(3, cin, stride=2)]
        for t, c, n, s in settings:
            cout = _make_divisible(c * width, 8)
            for i in range(n):
                features.append(InvertedResidualV2(cin, cout, s if i == 0 else 1, t))
                cin = cout
        features.append(ConvBNAct(cin, last, 1))
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Dropout(0.0), nn.Linear(last, num_classes))
        _torchvision_cnn_init(self)

    def forward(self, x):
        x = self.features(x)
        x = F.adaptive_avg_pool2d(x, (1, 1))
        return self.classifier(torch.flatten(x, 1))


# ------------------------------------------------------------------------------------------- MobileNetV3
class SqueezeExcitation(nn.Module):
    """Hu et al., "Squeeze-and-Excitation Networks", CVPR 2018; torchvision.ops.SqueezeExcitation:
    global average pool, 1x1 conv, activation, 1x1 conv, gate (Hardsigmoid in MobileNetV3, Sigmoid in
    EfficientNet), channel-wise scale."""

    def __init__(self, channels: int, squeeze: int, act: type[nn.Module] = nn.ReLU,
                 gate: type[nn.Module] = nn.Hardsigmoid) -> None:
        super().__init__()
        self.fc1 = nn.Conv2d(channels, squeeze, 1)
        self.fc2 = nn.Conv2d(squeeze, channels, 1)
        self.activation = act()
        self.scale_activation = gate()

    def forward(self, x):
        scale = F.adaptive_avg_pool2d(x, 1)
        scale = self.fc2(self.activation(self.fc1(scale)))
        return self.scale_activation(scale) * x


class InvertedResidualV3(nn.Module):
    """Howard et al., "Searching for MobileNetV3", ICCV 2019; torchvision/models/mobilenetv3.py
    InvertedResidual: expand, depthwise, optional squeeze-excitation, project; ReLU or Hardswish."""

    def __init__(self, cin: int, kernel: int, expanded: int, cout: int, use_se: bool, act: str, stride: int) -> None:
        super().__init__()
        self.use_res_connect = stride == 1 and cin == cout
        activation = nn.Hardswish if act == "HS" else nn.ReLU
        layers: list[nn.Module] = []
        if expanded != cin:
            layers.append(ConvBNAct(cin, expanded, 1, act=activation))
        layers.append(ConvBNAct(expanded, expanded, kernel, stride, groups=expanded, act=activation))
        if use_se:
            layers.append(SqueezeExcitation(expanded, _make_divisible(expanded // 4, 8)))
        layers.append(ConvBNAct(expanded, cout, 1, act=None))
        self.block = nn.Sequential(*layers)

    def forward(self, x):
        result = self.block(x)
        return result + x if self.use_res_connect else result


class MobileNetV3Small(nn.Module):
    """torchvision mobilenet_v3_small (width 0.5), its first five bottleneck rows."""

    def __init__(self, num_classes: int = NUM_CLASSES, width: float = 0.5) -> None:
        super().__init__()
        c = lambda v: _make_divisible(v * width, 8)  # noqa: E731 - torchvision's adjust_channels
        rows = [(16, 3, 16, 16, True, "RE", 2), (16, 3, 72, 24, False, "RE", 2), (24, 3, 88, 24, False, "RE", 1),
                (24, 5, 96, 40, True, "HS", 2), (40, 5, 240, 40, True, "HS", 1)]
        layers: list[nn.Module] = [ConvBNAct(3, c(16), 3, 2, act=nn.Hardswish)]
        for cin, k, exp, cout, se, act, s in rows:
            layers.append(InvertedResidualV3(c(cin), k, c(exp), c(cout), se, act, s))
        last_in = c(40)
        layers.append(ConvBNAct(last_in, 6 * last_in, 1, act=nn.Hardswish))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Linear(6 * last_in, 64), nn.Hardswish(), nn.Dropout(0.0),
                                        nn.Linear(64, num_classes))
        _torchvision_cnn_init(self)

    def forward(self, x):
        x = self.avgpool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


# ------------------------------------------------------------------------------------------- EfficientNet
class MBConv(nn.Module):
    """Tan & Le, "EfficientNet: Rethinking Model Scaling for CNNs", ICML 2019; torchvision/models/efficientnet.py
    MBConv: expand (SiLU), depthwise (SiLU), squeeze-excitation (SiLU, Sigmoid gate) on input_channels // 4,
    project; stochastic depth (0 here: identity) on the residual."""

    def __init__(self, expand: int, kernel: int, stride: int, cin: int, cout: int) -> None:
        super().__init__()
        self.use_res_connect = stride == 1 and cin == cout
        expanded = _make_divisible(cin * expand, 8)
        layers: list[nn.Module] = []
        if expanded != cin:
            layers.append(ConvBNAct(cin, expanded, 1, act=nn.SiLU))
        layers.append(ConvBNAct(expanded, expanded, kernel, stride, groups=expanded, act=nn.SiLU))
        layers.append(SqueezeExcitation(expanded, max(1, cin // 4), act=nn.SiLU, gate=nn.Sigmoid))
        layers.append(ConvBNAct(expanded, cout, 1, act=None))
        self.block = nn.Sequential(*layers)

    def forward(self, x):
        result = self.block(x)
        return result + x if self.use_res_connect else result


class EfficientNetB0(nn.Module):
    """torchvision efficientnet_b0's stage table (expand, kernel, stride, in, out, layers) at width 0.25, depth cut
    to one or two blocks per stage."""

    def __init__(self, num_classes: int = NUM_CLASSES) -> None:
        super().__init__()
        stages = [(1, 3, 1, 8, 8, 1), (6, 3, 2, 8, 16, 2), (6, 5, 2, 16, 24, 1), (6, 3, 2, 24, 32, 1)]
        layers: list[nn.Module] = [ConvBNAct(3, 8, 3, 2, act=nn.SiLU)]
        for expand, k, s, cin, cout, n in stages:
            for i in range(n):
                layers.append(MBConv(expand, k, s if i == 0 else 1, cin if i == 0 else cout, cout))
        layers.append(ConvBNAct(32, 128, 1, act=nn.SiLU))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Dropout(0.0), nn.Linear(128, num_classes))
        _torchvision_cnn_init(self)

    def forward(self, x):
        x = self.avgpool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


# ------------------------------------------------------------------------------------------- ShuffleNetV2
def channel_shuffle(x: torch.Tensor, groups: int) -> torch.Tensor:
    # torchvision/models/shufflenetv2.py channel_shuffle.
    batchsize, num_channels, height, width = x.size()
    channels_per_group = num_channels // groups
    x = x.view(batchsize, groups, channels_per_group, height, width)
    x = torch.transpose(x, 1, 2).contiguous()
    return x.view(batchsize, num_channels, height, width)


class ShuffleUnit(nn.Module):
    """Ma et al., "ShuffleNet V2: Practical Guidelines for Efficient CNN Architecture Design", ECCV 2018;
    torchvision InvertedResidual: channel split (chunk), branch of 1x1 / depthwise 3x3 / 1x1, concat, shuffle."""

    def __init__(self, inp: int, oup: int, stride: int) -> None:
        super().__init__()
        self.stride = stride
        branch = oup // 2
        if stride > 1:
            self.branch1 = nn.Sequential(
                nn.Conv2d(inp, inp, 3, stride, 1, groups=inp, bias=False), nn.BatchNorm2d(inp),
                nn.Conv2d(inp, branch, 1, 1, 0, bias=False), nn.BatchNorm2d(branch), nn.ReLU(inplace=True))
        else:
            self.branch1 = nn.Sequential()
        cin = inp if stride > 1 else branch
        self.branch2 = nn.Sequential(
            nn.Conv2d(cin, branch, 1, 1, 0, bias=False), nn.BatchNorm2d(branch), nn.ReLU(inplace=True),
            nn.Conv2d(branch, branch, 3, stride, 1, groups=branch, bias=False), nn.BatchNorm2d(branch),
            nn.Conv2d(branch, branch, 1, 1, 0, bias=False), nn.BatchNorm2d(branch), nn.ReLU(inplace=True))

    def forward(self, x):
        if self.stride == 1:
            x1, x2 = x.chunk(2, dim=1)
            out = torch.cat((x1, self.branch2(x2)), dim=1)
        else:
            out = torch.cat((self.branch1(x), self.branch2(x)), dim=1)
        return channel_shuffle(out, 2)


class ShuffleNetV2(nn.Module):
    """torchvision shufflenet_v2 with stages_repeats [2, 2, 1] and stages_out_channels [12, 24, 48, 96, 128]."""

    def __init__(self, num_classes: int = NUM_CLASSES) -> None:
        super().__init__()
        repeats, channels = [2, 2, 1], [12, 24, 48, 96, 128]
        self.conv1 = nn.Sequential(nn.Conv2d(3, channels[0], 3, 2, 1, bias=False), nn.BatchNorm2d(channels[0]),
                                   nn.ReLU(inplace=True))
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        cin = channels[0]
        for name, n, cout in zip(["stage2", "stage3", "stage4"], repeats, channels[1:]):
            setattr(self, name, nn.Sequential(ShuffleUnit(cin, cout, 2), *[ShuffleUnit(cout, cout, 1) for _ in range(n - 1)]))
            cin = cout
        self.conv5 = nn.Sequential(nn.Conv2d(cin, channels[-1], 1, 1, 0, bias=False), nn.BatchNorm2d(channels[-1]),
                                   nn.ReLU(inplace=True))
        self.fc = nn.Linear(channels[-1], num_classes)

    def forward(self, x):
        x = self.maxpool(self.conv1(x))
        x = self.conv5(self.stage4(self.stage3(self.stage2(x))))
        return self.fc(x.mean([2, 3]))  # globalpool, as torchvision writes it


# ------------------------------------------------------------------------------------------- SqueezeNet
class Fire(nn.Module):
    """Iandola et al., "SqueezeNet: AlexNet-level accuracy with 50x fewer parameters", 2016;
    torchvision/models/squeezenet.py Fire: squeeze 1x1, expand 1x1 and 3x3 concatenated."""

    def __init__(self, inplanes: int, squeeze: int, expand1x1: int, expand3x3: int) -> None:
        super().__init__()
        self.squeeze = nn.Conv2d(inplanes, squeeze, 1)
        self.squeeze_activation = nn.ReLU(inplace=True)
        self.expand1x1 = nn.Conv2d(squeeze, expand1x1, 1)
        self.expand1x1_activation = nn.ReLU(inplace=True)
        self.expand3x3 = nn.Conv2d(squeeze, expand3x3, 3, padding=1)
        self.expand3x3_activation = nn.ReLU(inplace=True)

    def forward(self, x):
        x = self.squeeze_activation(self.squeeze(x))
        return torch.cat([self.expand1x1_activation(self.expand1x1(x)), self.expand3x3_activation(self.expand3x3(x))], 1)


class SqueezeNet11(nn.Module):
    """torchvision squeezenet1_1 with a quarter of the channels (ceil-mode max pools, conv classifier)."""

    def __init__(self, num_classes: int = NUM_CLASSES) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, stride=2), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, ceil_mode=True),
            Fire(16, 4, 16, 16), Fire(32, 4, 16, 16), nn.MaxPool2d(3, 2, ceil_mode=True),
            Fire(32, 8, 32, 32), Fire(64, 8, 32, 32), nn.MaxPool2d(3, 2, ceil_mode=True),
            Fire(64, 12, 48, 48), Fire(96, 12, 48, 48), Fire(96, 16, 64, 64), Fire(128, 16, 64, 64))
        final_conv = nn.Conv2d(128, num_classes, 1)
        self.classifier = nn.Sequential(nn.Dropout(0.0), final_conv, nn.ReLU(inplace=True), nn.AdaptiveAvgPool2d((1, 1)))
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                if m is final_conv:
                    nn.init.normal_(m.weight, mean=0.0, std=0.01)
                else:
                    nn.init.kaiming_uniform_(m.weight)
                nn.init.zeros_(m.bias)

    def forward(self, x):
        return torch.flatten(self.classifier(self.features(x)), 1)


# ------------------------------------------------------------------------------------------- ResNet-18
class BasicBlock(nn.Module):
    """He et al., "Deep Residual Learning for Image Recognition", CVPR 2016; torchvision/models/resnet.py
    BasicBlock: two 3x3 conv-BN, identity or 1x1-conv-BN downsample shortcut."""

    def __init__(self, inplanes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or inplanes != planes:
            self.downsample = nn.Sequential(nn.Conv2d(inplanes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class ResNet18(nn.Module):
    """torchvision resnet18 (layers [2, 2, 2, 2]) with widths [8, 16, 32, 64]."""

    def __init__(self, num_classes: int = NUM_CLASSES, widths=(8, 16, 32, 64)) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, widths[0], 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(widths[0])
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        cin = widths[0]
        for index, planes in enumerate(widths):
            stride = 1 if index == 0 else 2
            setattr(self, f"layer{index + 1}", nn.Sequential(BasicBlock(cin, planes, stride), BasicBlock(planes, planes)))
            cin = planes
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(cin, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


# ------------------------------------------------------------------------------------------- DenseNet
class DenseLayer(nn.Module):
    """Huang et al., "Densely Connected Convolutional Networks", CVPR 2017; torchvision/models/densenet.py
    _DenseLayer: BN-ReLU-Conv1x1 (bn_size * growth), BN-ReLU-Conv3x3 (growth), on the concatenated features."""

    def __init__(self, num_input_features: int, growth_rate: int, bn_size: int) -> None:
        super().__init__()
        self.norm1 = nn.BatchNorm2d(num_input_features)
        self.relu1 = nn.ReLU(inplace=True)
        self.conv1 = nn.Conv2d(num_input_features, bn_size * growth_rate, 1, 1, bias=False)
        self.norm2 = nn.BatchNorm2d(bn_size * growth_rate)
        self.relu2 = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(bn_size * growth_rate, growth_rate, 3, 1, 1, bias=False)

    def forward(self, features: list[torch.Tensor]) -> torch.Tensor:
        concated = torch.cat(features, 1)
        bottleneck = self.conv1(self.relu1(self.norm1(concated)))
        return self.conv2(self.relu2(self.norm2(bottleneck)))


class DenseBlock(nn.ModuleDict):
    def __init__(self, num_layers: int, num_input_features: int, bn_size: int, growth_rate: int) -> None:
        super().__init__()
        for i in range(num_layers):
            self[f"denselayer{i + 1}"] = DenseLayer(num_input_features + i * growth_rate, growth_rate, bn_size)

    def forward(self, init_features):
        features = [init_features]
        for layer in self.values():
            features.append(layer(features))
        return torch.cat(features, 1)


class Transition(nn.Sequential):
    def __init__(self, num_input_features: int, num_output_features: int) -> None:
        super().__init__()
        self.norm = nn.BatchNorm2d(num_input_features)
        self.relu = nn.ReLU(inplace=True)
        self.conv = nn.Conv2d(num_input_features, num_output_features, 1, 1, bias=False)
        self.pool = nn.AvgPool2d(kernel_size=2, stride=2)


class DenseNet(nn.Module):
    """torchvision DenseNet with growth 8, block_config (2, 2, 2), 16 initial features, bn_size 2."""

    def __init__(self, num_classes: int = NUM_CLASSES, growth_rate: int = 8, block_config=(2, 2, 2),
                 num_init_features: int = 16, bn_size: int = 2) -> None:
        super().__init__()
        self.features = nn.Sequential()
        self.features.add_module("conv0", nn.Conv2d(3, num_init_features, 7, 2, 3, bias=False))
        self.features.add_module("norm0", nn.BatchNorm2d(num_init_features))
        self.features.add_module("relu0", nn.ReLU(inplace=True))
        self.features.add_module("pool0", nn.MaxPool2d(kernel_size=3, stride=2, padding=1))
        num = num_init_features
        for i, num_layers in enumerate(block_config):
            self.features.add_module(f"denseblock{i + 1}", DenseBlock(num_layers, num, bn_size, growth_rate))
            num += num_layers * growth_rate
            if i != len(block_config) - 1:
                self.features.add_module(f"transition{i + 1}", Transition(num, num // 2))
                num //= 2
        self.features.add_module("norm5", nn.BatchNorm2d(num))
        self.classifier = nn.Linear(num, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)
            elif isinstance(m, nn.Linear):
                nn.init.constant_(m.bias, 0)

    def forward(self, x):
        out = F.relu(self.features(x), inplace=True)
        out = torch.flatten(F.adaptive_avg_pool2d(out, (1, 1)), 1)
        return self.classifier(out)


# ------------------------------------------------------------------------------------------- ViT
class EncoderBlock(nn.Module):
    """Dosovitskiy et al., "An Image is Worth 16x16 Words", ICLR 2021; torchvision/models/vision_transformer.py
    EncoderBlock: pre-LayerNorm (eps 1e-6) nn.MultiheadAttention and GELU MLP, each with a residual."""

    def __init__(self, num_heads: int, hidden_dim: int, mlp_dim: int) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(hidden_dim, eps=1e-6)
        self.self_attention = nn.MultiheadAttention(hidden_dim, num_heads, dropout=0.0, batch_first=True)
        self.ln_2 = nn.LayerNorm(hidden_dim, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(hidden_dim, mlp_dim), nn.GELU(), nn.Dropout(0.0),
                                 nn.Linear(mlp_dim, hidden_dim), nn.Dropout(0.0))

    def forward(self, x):
        y = self.ln_1(x)
        y, _ = self.self_attention(y, y, y, need_weights=False)
        x = x + y
        return x + self.mlp(self.ln_2(x))


class VisionTransformer(nn.Module):
    """torchvision VisionTransformer: conv patch embedding, class token, learned position embedding, encoder
    blocks, final LayerNorm, linear head on the class token. Here 16x16 images, 4x4 patches, 2 layers, 4 heads,
    hidden 32, MLP 64."""

    def __init__(self, image_size: int = 16, patch_size: int = 4, num_layers: int = 2, num_heads: int = 4,
                 hidden_dim: int = 32, mlp_dim: int = 64, num_classes: int = NUM_CLASSES) -> None:
        super().__init__()
        self.patch_size, self.hidden_dim = patch_size, hidden_dim
        self.conv_proj = nn.Conv2d(3, hidden_dim, kernel_size=patch_size, stride=patch_size)
        seq_length = (image_size // patch_size) ** 2 + 1
        self.class_token = nn.Parameter(torch.zeros(1, 1, hidden_dim))
        self.pos_embedding = nn.Parameter(torch.empty(1, seq_length, hidden_dim).normal_(std=0.02))
        self.layers = nn.Sequential(*[EncoderBlock(num_heads, hidden_dim, mlp_dim) for _ in range(num_layers)])
        self.ln = nn.LayerNorm(hidden_dim, eps=1e-6)
        self.head = nn.Linear(hidden_dim, num_classes)
        fan_in = 3 * patch_size ** 2
        nn.init.trunc_normal_(self.conv_proj.weight, std=math.sqrt(1 / fan_in))
        nn.init.zeros_(self.conv_proj.bias)
        with torch.no_grad():
            self.class_token.normal_(std=0.02)  # torchvision starts it at 0; random so its gradient path is generic

    def forward(self, x):
        n = x.shape[0]
        x = self.conv_proj(x)  # (n, hidden, n_h, n_w)
        x = x.reshape(n, self.hidden_dim, -1).permute(0, 2, 1)
        x = torch.cat([self.class_token.expand(n, -1, -1), x], dim=1)
        x = self.ln(self.layers(x + self.pos_embedding))
        return self.head(x[:, 0])


def _vit_images(batch: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {"input": rng.normal(size=(batch, 3, 16, 16)).astype(np.float32)}


# ------------------------------------------------------------------------------------------- BERT
class BertLayer(nn.Module):
    """Devlin et al., "BERT: Pre-training of Deep Bidirectional Transformers", NAACL 2019; Hugging Face
    transformers/models/bert/modeling_bert.py BertSelfAttention + BertSelfOutput + BertIntermediate +
    BertOutput: post-LayerNorm (eps 1e-12) attention with an additive padding mask, erf-GELU feed-forward."""

    def __init__(self, hidden: int, heads: int, intermediate: int) -> None:
        super().__init__()
        self.heads, self.head_size = heads, hidden // heads
        self.query, self.key, self.value = nn.Linear(hidden, hidden), nn.Linear(hidden, hidden), nn.Linear(hidden, hidden)
        self.attention_output = nn.Linear(hidden, hidden)
        self.attention_norm = nn.LayerNorm(hidden, eps=1e-12)
        self.intermediate = nn.Linear(hidden, intermediate)
        self.output = nn.Linear(intermediate, hidden)
        self.output_norm = nn.LayerNorm(hidden, eps=1e-12)

    def _heads(self, x):
        return x.view(x.size(0), x.size(1), self.heads, self.head_size).permute(0, 2, 1, 3)

    def forward(self, hidden_states, extended_mask):
        q, k, v = (self._heads(f(hidden_states)) for f in (self.query, self.key, self.value))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_size) + extended_mask
        context = torch.matmul(torch.softmax(scores, dim=-1), v).permute(0, 2, 1, 3).contiguous()
        context = context.view(context.size(0), context.size(1), -1)
        attention = self.attention_norm(self.attention_output(context) + hidden_states)
        return self.output_norm(self.output(F.gelu(self.intermediate(attention))) + attention)


class BertForSequenceClassification(nn.Module):
    """HF BertModel (word + position + token-type embeddings, LayerNorm, encoder, tanh pooler on [CLS]) with the
    classification head; vocabulary 50, hidden 32, 2 layers, 4 heads, intermediate 64, 16 positions."""

    def __init__(self, vocab: int = VOCAB, hidden: int = 32, layers: int = 2, heads: int = 4, intermediate: int = 64,
                 max_positions: int = 16, num_classes: int = NUM_CLASSES) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab, hidden, padding_idx=0)
        self.position_embeddings = nn.Embedding(max_positions, hidden)
        self.token_type_embeddings = nn.Embedding(2, hidden)
        self.embeddings_norm = nn.LayerNorm(hidden, eps=1e-12)
        self.register_buffer("position_ids", torch.arange(max_positions).expand((1, -1)), persistent=False)
        self.layer = nn.ModuleList([BertLayer(hidden, heads, intermediate) for _ in range(layers)])
        self.pooler = nn.Linear(hidden, hidden)
        self.classifier = nn.Linear(hidden, num_classes)
        for m in self.modules():  # BertPreTrainedModel._init_weights
            if isinstance(m, (nn.Linear, nn.Embedding)):
                m.weight.data.normal_(mean=0.0, std=0.02)
                if isinstance(m, nn.Linear):
                    m.bias.data.zero_()
                elif m.padding_idx is not None:
                    m.weight.data[m.padding_idx].zero_()

    def forward(self, input_ids, attention_mask):
        seq_length = input_ids.size(1)
        position_ids = self.position_ids[:, :seq_length]
        token_type_ids = torch.zeros_like(input_ids)
        x = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids) + \
            self.position_embeddings(position_ids)
        x = self.embeddings_norm(x)
        extended = attention_mask[:, None, None, :].to(x.dtype)
        extended = (1.0 - extended) * torch.finfo(x.dtype).min
        for layer in self.layer:
            x = layer(x, extended)
        pooled = torch.tanh(self.pooler(x[:, 0]))
        return self.classifier(pooled)


def _bert_inputs(batch: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    ids = rng.integers(1, VOCAB, (batch, SEQ)).astype(np.int64)
    mask = np.ones((batch, SEQ), np.int64)
    lengths = rng.integers(SEQ // 2, SEQ + 1, batch)
    for row, length in enumerate(lengths):  # padded sequences, as a tokenizer's batch has them
        ids[row, length:] = 0
        mask[row, length:] = 0
    return {"input": ids, "attention_mask": mask}


# ------------------------------------------------------------------------------------------- GPT
class Conv1D(nn.Module):
    """Hugging Face's GPT-2 Conv1D: a linear layer with the weight stored (in, out)."""

    def __init__(self, nf: int, nx: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(nx, nf).normal_(std=0.02))
        self.bias = nn.Parameter(torch.zeros(nf))

    def forward(self, x):
        size_out = x.size()[:-1] + (self.weight.size(-1),)
        x = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        return x.view(size_out)


class GPT2Block(nn.Module):
    """Radford et al., "Language Models are Unsupervised Multitask Learners", 2019; Hugging Face
    transformers/models/gpt2/modeling_gpt2.py GPT2Block: pre-LayerNorm causal self-attention (a lower-triangular
    bool ``bias`` buffer masks with finfo.min), tanh-GELU MLP (NewGELUActivation), Conv1D projections."""

    def __init__(self, hidden: int, heads: int, n_positions: int) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.ln_1 = nn.LayerNorm(hidden)
        self.c_attn = Conv1D(3 * hidden, hidden)
        self.attn_proj = Conv1D(hidden, hidden)
        self.register_buffer("bias", torch.tril(torch.ones((n_positions, n_positions), dtype=torch.bool))
                             .view(1, 1, n_positions, n_positions), persistent=False)
        self.ln_2 = nn.LayerNorm(hidden)
        self.c_fc = Conv1D(4 * hidden, hidden)
        self.mlp_proj = Conv1D(hidden, 4 * hidden)

    def _split(self, x):
        return x.view(*x.size()[:-1], self.heads, self.head_dim).permute(0, 2, 1, 3)

    def forward(self, x):
        q, k, v = self.c_attn(self.ln_1(x)).split(x.size(-1), dim=2)
        q, k, v = self._split(q), self._split(k), self._split(v)
        weights = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        length = q.size(-2)
        causal = self.bias[:, :, :length, :length]
        weights = torch.where(causal, weights, torch.tensor(torch.finfo(weights.dtype).min, dtype=weights.dtype))
        attn = torch.matmul(torch.softmax(weights, dim=-1), v).permute(0, 2, 1, 3).contiguous()
        x = x + self.attn_proj(attn.view(*attn.size()[:-2], -1))
        h = self.c_fc(self.ln_2(x))
        h = 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * torch.pow(h, 3.0))))
        return x + self.mlp_proj(h)


class GPT2LMHeadModel(nn.Module):
    """HF GPT2LMHeadModel: token + learned position embeddings, blocks, final LayerNorm, LM head TIED to the
    token embedding; vocabulary 50, 16 positions, hidden 32, 2 layers, 4 heads."""

    def __init__(self, vocab: int = VOCAB, n_positions: int = 16, hidden: int = 32, layers: int = 2, heads: int = 4) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab, hidden)
        self.wpe = nn.Embedding(n_positions, hidden)
        nn.init.normal_(self.wte.weight, std=0.02)
        nn.init.normal_(self.wpe.weight, std=0.02)
        self.h = nn.ModuleList([GPT2Block(hidden, heads, n_positions) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(hidden)
        self.lm_head = nn.Linear(hidden, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # tie_weights()

    def forward(self, input_ids):
        positions = torch.arange(0, input_ids.size(-1), dtype=torch.long, device=input_ids.device).unsqueeze(0)
        x = self.wte(input_ids) + self.wpe(positions)
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))  # (batch, seq, vocab)


def _tokens(batch: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {"input": rng.integers(0, VOCAB, (batch, SEQ)).astype(np.int64)}


def _token_labels(batch: int, rng: np.random.Generator) -> np.ndarray:
    return rng.integers(0, VOCAB, (batch, SEQ)).astype(np.int64)


# ------------------------------------------------------------------------------------------- recurrent
class RNNModel(nn.Module):
    """Zaremba et al., "Recurrent Neural Network Regularization", 2014, as the PyTorch examples write it
    (examples/word_language_model/model.py RNNModel): embedding, 2-layer nn.LSTM, linear decoder, uniform(-0.1,
    0.1) init; sequence-first (seq, batch) like the example. Vocabulary 50, 24 units."""

    def __init__(self, ntoken: int = VOCAB, ninp: int = 24, nhid: int = 24, nlayers: int = 2) -> None:
        super().__init__()
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=0.0)
        self.decoder = nn.Linear(nhid, ntoken)
        nn.init.uniform_(self.encoder.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -0.1, 0.1)

    def forward(self, input):
        output, _ = self.rnn(self.encoder(input))
        return self.decoder(output)  # (seq, batch, vocab)


def _seq_first_tokens(batch: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {"input": rng.integers(0, VOCAB, (SEQ, batch)).astype(np.int64)}


def _seq_first_labels(batch: int, rng: np.random.Generator) -> np.ndarray:
    return rng.integers(0, VOCAB, (SEQ, batch)).astype(np.int64)


class BiGRUClassifier(nn.Module):
    """Cho et al., "Learning Phrase Representations using RNN Encoder-Decoder", EMNLP 2014 (GRU), read in both
    directions (Schuster & Paliwal 1997) as in the usual text classifier: embedding, 2-layer bidirectional
    nn.GRU (batch_first), the last layer's final forward and backward states concatenated, linear head."""

    def __init__(self, vocab: int = VOCAB, embed: int = 16, hidden: int = 16, num_classes: int = NUM_CLASSES) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab, embed)
        self.gru = nn.GRU(embed, hidden, num_layers=2, batch_first=True, bidirectional=True)
        self.fc = nn.Linear(2 * hidden, num_classes)

    def forward(self, input):
        _, h_n = self.gru(self.embedding(input))  # h_n: (layers * 2, batch, hidden)
        return self.fc(torch.cat([h_n[-2], h_n[-1]], dim=1))


# ------------------------------------------------------------------------------------------- Transformer LM
class PositionalEncoding(nn.Module):
    """Vaswani et al., "Attention Is All You Need", NeurIPS 2017: sinusoidal encodings in a float buffer, as the
    PyTorch tutorial "Language Modeling with nn.Transformer" writes it."""

    def __init__(self, d_model: int, max_len: int = 16) -> None:
        super().__init__()
        position = torch.arange(max_len).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
        pe = torch.zeros(max_len, 1, d_model)
        pe[:, 0, 0::2] = torch.sin(position * div_term)
        pe[:, 0, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe)

    def forward(self, x):
        return x + self.pe[:x.size(0)]


class TransformerModel(nn.Module):
    """The PyTorch tutorial's TransformerModel: embedding * sqrt(d), sinusoidal positions, nn.TransformerEncoder
    of nn.TransformerEncoderLayer (post-LayerNorm, ReLU) with a causal float mask, linear decoder; sequence-first.
    d_model 32, 4 heads, feed-forward 64, 2 layers."""

    def __init__(self, ntoken: int = VOCAB, d_model: int = 32, nhead: int = 4, d_hid: int = 64, nlayers: int = 2) -> None:
        super().__init__()
        self.pos_encoder = PositionalEncoding(d_model)
        layer = nn.TransformerEncoderLayer(d_model, nhead, d_hid, dropout=0.0)
        self.transformer_encoder = nn.TransformerEncoder(layer, nlayers, enable_nested_tensor=False)
        self.embedding = nn.Embedding(ntoken, d_model)
        self.d_model = d_model
        self.linear = nn.Linear(d_model, ntoken)
        nn.init.uniform_(self.embedding.weight, -0.1, 0.1)
        nn.init.zeros_(self.linear.bias)
        nn.init.uniform_(self.linear.weight, -0.1, 0.1)

    def forward(self, src):
        src_mask = nn.Transformer.generate_square_subsequent_mask(src.size(0))
        src = self.pos_encoder(self.embedding(src) * math.sqrt(self.d_model))
        return self.linear(self.transformer_encoder(src, src_mask, is_causal=True))  # (seq, batch, vocab)


MODELS: list[PublicModel] = [
    PublicModel("mobilenet_v2", _seeded(MobileNetV2), _images, _image_labels,
                "Sandler et al. 2018; torchvision.models.mobilenetv2"),
    PublicModel("mobilenet_v3_small", _seeded(MobileNetV3Small), _images, _image_labels,
                "Howard et al. 2019; torchvision.models.mobilenetv3"),
    PublicModel("efficientnet_b0", _seeded(EfficientNetB0), _images, _image_labels,
                "Tan & Le 2019; torchvision.models.efficientnet"),
    PublicModel("shufflenet_v2", _seeded(ShuffleNetV2), _large_images, _image_labels,
                "Ma et al. 2018; torchvision.models.shufflenetv2"),
    PublicModel("squeezenet1_1", _seeded(SqueezeNet11), _images, _image_labels,
                "Iandola et al. 2016; torchvision.models.squeezenet", lr=0.01),
    PublicModel("resnet18", _seeded(ResNet18), _large_images, _image_labels, "He et al. 2016; torchvision.models.resnet"),
    PublicModel("densenet", _seeded(DenseNet), _images, _image_labels, "Huang et al. 2017; torchvision.models.densenet",
                lr=0.02),
    PublicModel("vit", _seeded(VisionTransformer), _vit_images, _image_labels,
                "Dosovitskiy et al. 2021; torchvision.models.vision_transformer", optimizer="adam", lr=1e-3),
    PublicModel("bert", _seeded(BertForSequenceClassification), _bert_inputs, _image_labels,
                "Devlin et al. 2019; transformers.models.bert.modeling_bert", optimizer="adam", lr=1e-3),
    PublicModel("gpt2", _seeded(GPT2LMHeadModel), _tokens, _token_labels,
                "Radford et al. 2019; transformers.models.gpt2.modeling_gpt2", class_axis=2, optimizer="adam",
                lr=1e-3),
    PublicModel("lstm_lm", _seeded(RNNModel), _seq_first_tokens, _seq_first_labels,
                "Zaremba et al. 2014; pytorch/examples word_language_model", class_axis=2, batch_axis=1,
                optimizer="adam", lr=1e-2),
    PublicModel("bigru_classifier", _seeded(BiGRUClassifier), _tokens, _image_labels,
                "Cho et al. 2014, Schuster & Paliwal 1997", optimizer="adam", lr=1e-2),
    PublicModel("transformer_lm", _seeded(TransformerModel), _seq_first_tokens, _seq_first_labels,
                "Vaswani et al. 2017; PyTorch tutorial 'Language Modeling with nn.Transformer'", class_axis=2,
                batch_axis=1, optimizer="adam", lr=1e-3),
]

BY_NAME = {model.name: model for model in MODELS}
