"""Residual networks: ResNet for CIFAR (He et al. 2016, sec. 4.2) and ImageNet (torchvision's layout), and
pre-activation Wide ResNets (Zagoruyko & Komodakis 2016).

Parameters are named as in the PyTorch reference implementations (torchvision's ``resnet18`` for ImageNet,
Yerlan Idelbayev's ``resnet20`` for CIFAR, xternalz's ``WideResNet``), so a PyTorch ``state_dict`` maps onto
``network.params`` by name (drop ``num_batches_tracked``). Convolutions followed by batch normalization have
no bias; they are initialized as torchvision does (Kaiming normal, fan_out, ReLU gain), batch-norm scales to
1 and shifts to 0, the final linear layer with PyTorch's default uniform initialization.
"""
from __future__ import annotations

from typing import Sequence

from d5.errors import ShapeError
from d5.models.builder import NetworkBuilder
from d5.network.graph import Network

#: ImageNet ResNets: depth -> (block kind, blocks per stage), from He et al. 2016, table 1.
IMAGENET_LAYOUTS = {18: ("basic", (2, 2, 2, 2)), 34: ("basic", (3, 4, 6, 3)), 50: ("bottleneck", (3, 4, 6, 3)),
                    101: ("bottleneck", (3, 4, 23, 3)), 152: ("bottleneck", (3, 8, 36, 3))}
_DEFAULT_CLASSES = {"cifar10": 10, "cifar100": 100, "imagenet": 1000}
_DEFAULT_INPUT = {"cifar10": (3, 32, 32), "cifar100": (3, 32, 32), "imagenet": (3, 224, 224)}


def resnet(depth: int, dataset: str = "cifar10", num_classes: int | None = None, seed: int = 0,
           shortcut: str = "A", input_shape: Sequence[int] | None = None) -> Network:
    """A ResNet as a d5.Network with inputs ``input`` (N, 3, H, W) float32 and ``label`` (N,) int64 and
    outputs ``output`` (logits) and ``loss`` (mean softmax cross-entropy).

    ``dataset='cifar10'`` or ``'cifar100'``: the 6n+2-layer CIFAR network (depth 20, 32, 44, 56, 110, or any
    6n+2 such as 8 for quick tests): a 3x3 stem of 16 channels, three stages of n basic blocks with 16, 32
    and 64 channels, global average pooling and a linear classifier. ``shortcut='A'`` (the paper's CIFAR
    choice) makes the down-sampling shortcuts parameter-free: the input subsampled with stride 2 and zero
    channels appended after its own. (Idelbayev's PyTorch code puts half the zeros before the input
    channels; the two networks are the same up to a permutation of channels.) Trainable parameters with
    option A, as published: ResNet-20 269,722 (0.27M), -32 464,154 (0.46M), -44 658,586 (0.66M), -56
    853,018 (0.85M), -110 1,727,962 (1.7M). ``shortcut='B'`` uses 1x1 convolution + batch-norm projections
    there instead (named ``layerS.0.shortcut.0`` / ``.1``), which adds 2,752 parameters (ResNet-20: 272,474).

    ``dataset='imagenet'``: torchvision's ResNet-18/34 (basic blocks) and -50/101/152 (bottleneck blocks,
    stride in the 3x3 convolution, "v1.5"), with the 7x7 stride-2 stem and 3x3 max pooling; 11,689,512,
    21,797,672 and 25,557,032 trainable parameters for depth 18, 34 and 50. ``input_shape`` defaults to
    (3, 224, 224); smaller inputs (64x64) work for tests.

    >>> net = resnet(20)
    >>> sum(net.params[p].size for p in net.get_params())
    269722
    >>> net.inputs["input"].shape
    ('N', 3, 32, 32)
    >>> resnet(18, "imagenet", input_shape=(3, 64, 64)).params["layer2.0.downsample.0.weight"].shape
    (128, 64, 1, 1)
    """
    if dataset not in _DEFAULT_CLASSES:
        raise ShapeError(f"resnet: unknown dataset {dataset!r}; use one of {sorted(_DEFAULT_CLASSES)}")
    if shortcut not in ("A", "B"):
        raise ShapeError(f"resnet: shortcut must be 'A' (zero-padding identity) or 'B' (1x1 projection), got {shortcut!r}")
    classes = num_classes or _DEFAULT_CLASSES[dataset]
    shape = tuple(input_shape or _DEFAULT_INPUT[dataset])
    if dataset == "imagenet":
        return _imagenet_resnet(depth, classes, seed, shape)
    if depth < 8 or (depth - 2) % 6:
        hint = (f"; for the ImageNet ResNet-{depth} pass dataset='imagenet' (resnet({depth}, dataset='imagenet'))"
                if depth in IMAGENET_LAYOUTS else
                f"; ImageNet ResNets ({', '.join(map(str, sorted(IMAGENET_LAYOUTS)))}) need dataset='imagenet'")
        raise ShapeError(f"resnet: a {dataset} ResNet has 6n+2 layers (20, 32, 44, 56, 110, ...), got depth {depth}"
                         f"{hint}")
    blocks = (depth - 2) // 6
    b = NetworkBuilder(f"resnet{depth}_{dataset}{'' if shortcut == 'A' else '_B'}", shape, classes, seed=seed)
    x = b.relu(b.batch_norm(_conv(b, b.input, 16, 3, 1, "conv1"), "bn1"))
    in_channels = 16
    for stage, channels in enumerate((16, 32, 64)):
        for index in range(blocks):
            stride = 2 if stage > 0 and index == 0 else 1
            prefix = f"layer{stage + 1}.{index}"
            if stride == 1 and in_channels == channels:
                residual = x
            elif shortcut == "A":
                residual = b.zero_pad_channels(b.subsample(x, stride), channels)
            else:
                residual = _projection(b, x, channels, stride, f"{prefix}.shortcut")
            x = _basic_block(b, x, channels, stride, prefix, residual)
            in_channels = channels
    x = b.flatten(b.global_avg_pool(x))
    return b.classifier(b.linear(x, classes, output="linear"))


def wide_resnet(depth: int, width: int, num_classes: int = 10, dropout: float = 0.0, seed: int = 0,
                input_shape: Sequence[int] = (3, 32, 32)) -> Network:
    """WRN-``depth``-``width`` (Zagoruyko & Komodakis 2016): a 3x3 stem of 16 channels, three stages of
    (depth - 4) / 6 pre-activation basic blocks (BN-ReLU-conv, twice) with 16k, 32k and 64k channels
    (k = ``width``), 1x1 convolution shortcuts where the channel count changes, then BN-ReLU, global average
    pooling and a linear classifier. ``dropout`` > 0 puts Dropout between the two convolutions of a block.
    WRN-28-10 has 36,479,194 trainable parameters and WRN-16-4 2,748,890, as published.

    >>> net = wide_resnet(16, 4)
    >>> sum(net.params[p].size for p in net.get_params())
    2748890
    """
    if depth < 10 or (depth - 4) % 6:
        raise ShapeError(f"wide_resnet: depth must be 6n+4 (16, 22, 28, 40, ...), got {depth}")
    if width < 1:
        raise ShapeError(f"wide_resnet: width must be a positive integer, got {width}")
    blocks = (depth - 4) // 6
    b = NetworkBuilder(f"wrn{depth}_{width}", tuple(input_shape), num_classes, seed=seed)
    x = _conv(b, b.input, 16, 3, 1, "conv1")
    in_channels = 16
    for stage, channels in enumerate((16 * width, 32 * width, 64 * width)):
        for index in range(blocks):
            stride = 2 if stage > 0 and index == 0 else 1
            prefix = f"block{stage + 1}.layer.{index}"
            activated = b.relu(b.batch_norm(x, f"{prefix}.bn1"))
            if in_channels == channels:
                residual = x  # identity shortcut on the block's un-activated input
            else:
                # As in the reference code: the projection reads the activated input, shared with the main path.
                residual = _conv(b, activated, channels, 1, stride, f"{prefix}.convShortcut")
            out = _conv(b, activated, channels, 3, stride, f"{prefix}.conv1")
            out = b.relu(b.batch_norm(out, f"{prefix}.bn2"))
            if dropout > 0:
                out = b.dropout(out, dropout)
            out = _conv(b, out, channels, 3, 1, f"{prefix}.conv2")
            x = b.add(out, residual)
            in_channels = channels
    x = b.relu(b.batch_norm(x, "bn1"))
    x = b.flatten(b.global_avg_pool(x))
    return b.classifier(b.linear(x, num_classes, output="fc"))


# ------------------------------------------------------------------------------------------------ pieces

def _conv(b: NetworkBuilder, x: str, channels: int, kernel: int, stride: int, name: str) -> str:
    return b.conv(x, channels, kernel, stride=stride, pad=kernel // 2, bias=False, name=name, init="kaiming_fan_out")


def _projection(b: NetworkBuilder, x: str, channels: int, stride: int, prefix: str) -> str:
    """Option-B / torchvision ``downsample`` shortcut: 1x1 convolution with stride, then batch norm."""
    return b.batch_norm(_conv(b, x, channels, 1, stride, f"{prefix}.0"), f"{prefix}.1")


def _basic_block(b: NetworkBuilder, x: str, channels: int, stride: int, prefix: str, residual: str) -> str:
    out = b.relu(b.batch_norm(_conv(b, x, channels, 3, stride, f"{prefix}.conv1"), f"{prefix}.bn1"))
    out = b.batch_norm(_conv(b, out, channels, 3, 1, f"{prefix}.conv2"), f"{prefix}.bn2")
    return b.relu(b.add(out, residual))


def _bottleneck_block(b: NetworkBuilder, x: str, planes: int, stride: int, prefix: str, residual: str) -> str:
    out = b.relu(b.batch_norm(_conv(b, x, planes, 1, 1, f"{prefix}.conv1"), f"{prefix}.bn1"))
    out = b.relu(b.batch_norm(_conv(b, out, planes, 3, stride, f"{prefix}.conv2"), f"{prefix}.bn2"))
    out = b.batch_norm(_conv(b, out, planes * 4, 1, 1, f"{prefix}.conv3"), f"{prefix}.bn3")
    return b.relu(b.add(out, residual))


def _imagenet_resnet(depth: int, num_classes: int, seed: int, input_shape: tuple) -> Network:
    if depth not in IMAGENET_LAYOUTS:
        raise ShapeError(f"resnet: no ImageNet ResNet of depth {depth}; choose one of {sorted(IMAGENET_LAYOUTS)}")
    if len(input_shape) != 3 or min(input_shape[1:]) < 32:
        raise ShapeError(f"resnet: an ImageNet ResNet needs a (3, H, W) input with H, W >= 32 (it down-samples 32x), "
                         f"got {input_shape}")
    kind, layout = IMAGENET_LAYOUTS[depth]
    expansion = 4 if kind == "bottleneck" else 1
    block = _bottleneck_block if kind == "bottleneck" else _basic_block
    b = NetworkBuilder(f"resnet{depth}", input_shape, num_classes, seed=seed)
    x = b.relu(b.batch_norm(b.conv(b.input, 64, 7, stride=2, pad=3, bias=False, name="conv1", init="kaiming_fan_out"),
                            "bn1"))
    x = b.max_pool(x, 3, 2, pad=1)
    in_channels = 64
    for stage, (planes, count) in enumerate(zip((64, 128, 256, 512), layout)):
        for index in range(count):
            stride = 2 if stage > 0 and index == 0 else 1
            prefix = f"layer{stage + 1}.{index}"
            if stride != 1 or in_channels != planes * expansion:
                residual = _projection(b, x, planes * expansion, stride, f"{prefix}.downsample")
            else:
                residual = x
            x = block(b, x, planes, stride, prefix, residual)
            in_channels = planes * expansion
    x = b.flatten(b.global_avg_pool(x))
    return b.classifier(b.linear(x, num_classes, output="fc"))
