"""d5's frameworks against the loops PyTorch and TensorFlow users write by hand: training and inference steps, as
ratios measured in the same process and the same run.

Workloads (batch 64, data in memory, the same threads for everyone):
- ``resnet44_train``: one CIFAR ResNet-44 training step (forward, backward, SGD with momentum 0.9);
- ``lenet5_train``: one LeNet-5 training step on 28x28 images (where per-step overhead shows);
- ``resnet44_infer``: ResNet-44 inference.

Variants: ``native`` is the hand-written loop (an ``nn.Module`` of the same architecture,
``nn.CrossEntropyLoss``, ``torch.optim.SGD``, ``zero_grad(set_to_none=True)``, ``loss.item()`` each step as a
logging loop does; ``module.eval()`` under ``torch.no_grad()`` for inference); ``d5-pytorch`` is
``d5.frameworks.pytorch.from_model`` with ``d5.frameworks.pytorch.MomentumOptimizer`` (``executor.inference``
for inference); ``d5-pytorch-compiled`` adds ``compile=True`` (torch.compile); ``d5-reference`` is the
reference framework with ``d5.MomentumOptimizer``, measured last (its OpenMP pool would otherwise share the
cores with torch's), for the side-by-side images/s table. ``native-tf`` is the loop a TensorFlow user writes (the
same architecture in Keras layers, channels-last, a ``tf.function`` step with ``GradientTape`` and Keras SGD with
momentum; ``model(x, training=False)`` in a ``tf.function`` for inference) and ``d5-tensorflow`` is
``d5.frameworks.tensorflow.from_model`` with its ``MomentumOptimizer``; the two alternate in a process of their own
(``--frameworks``), with TensorFlow's default threads (one per core, as torch's). ``native-mx`` is the loop a Gluon
user writes (the same architecture as a hybridized HybridBlock with static allocation, ``gluon.Trainer`` SGD with
momentum, ``step(1)`` on the mean loss) and ``d5-mxnet`` is ``d5.frameworks.mxnet.from_model`` with its
``MomentumOptimizer``, both timed to ``mx.nd.waitall()``, alternating in a process of their own.

Host memory: building a d5 pytorch executor raises glibc's malloc thresholds once per process
(``d5.frameworks.allocator``), so the native loop, in the same process, runs with them too and the ratio is
d5's own cost. (With glibc's defaults a torch.fx module -- d5's or one traced from the native model -- paid up to
25% in page faults that the eager loop did not; the allocator module says why.) ``D5_MALLOC_TUNING=0`` measures
with the defaults.

Steps are timed one by one in rounds; in every round each torch variant runs a short block of steps, in an
order that rotates from round to round, so drift on a noisy machine (its speed was seen to change by 30%
within minutes) hits all alike. The figure is paired: per round, the ratio of the two variants' median step
times; reported as the median of those ratios with its non-parametric CI (``d5.bench.stats.summarize``). The
unpaired ratio of all steps' medians with a bootstrap CI (``d5.bench.stats.compare``) is reported beside it.

    python benchmarks/frameworks.py                      # all figures, JSON + PNG in results/
    python benchmarks/frameworks.py --quick --no-compile # a smoke run in a minute
"""
from __future__ import annotations

import argparse
from typing import Callable

import numpy as np

import d5
from d5.bench.results import write_result
from d5.frameworks.allocator import keep_freed_memory
from d5.bench.paired import alternate, flat, paired_ratio, time_calls
from d5.bench.stats import compare, summarize

BATCH = 64
LR, MOMENTUM = 0.1, 0.9
#: The issue's targets: d5-pytorch step time / native step time at most this.
TARGETS = {"resnet44_train": 1.03, "lenet5_train": 1.05, "resnet44_infer": 1.03}
#: d5-tensorflow step time / the hand-written TensorFlow loop's at most this (issue 20).
TF_TARGETS = {"resnet44_train": 1.05, "lenet5_train": 1.05, "resnet44_infer": 1.05}
#: d5-mxnet step time / the hand-written Gluon loop's at most this (issue 20).
MX_TARGETS = {"resnet44_train": 1.05, "lenet5_train": 1.05, "resnet44_infer": 1.05}
#: The frameworks measured in processes of their own: their hand-written loop's variant name and d5's targets.
OTHER_FRAMEWORKS = {"tensorflow": ("native-tf", TF_TARGETS), "mxnet": ("native-mx", MX_TARGETS)}
WORKLOADS = {"resnet44_train": ("resnet44", True), "lenet5_train": ("lenet5", True),
             "resnet44_infer": ("resnet44", False)}
#: Rounds per workload: LeNet-5's 5 ms steps afford five times ResNet-44's rounds in a fraction of its time, and
#: its smaller effect (a few percent of a short step) needs them for a CI narrower than the margin to the target.
ROUNDS = {"resnet44_train": 40, "lenet5_train": 200, "resnet44_infer": 40}


# ---------------------------------------------------------------------- the hand-written PyTorch models
def native_model(name: str):
    """The architecture of ``d5.models`` ``name`` written as a PyTorch user writes it (torch.nn layers)."""
    import torch
    from torch import nn
    import torch.nn.functional as F

    if name == "lenet5":
        return nn.Sequential(nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(6, 16, 5),
                             nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(400, 120), nn.ReLU(),
                             nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, 10))

    class Block(nn.Module):  # He et al.'s CIFAR basic block with the option-A (zero-padding) shortcut
        def __init__(self, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.stride, self.extra = stride, cout - cin

        def forward(self, x):
            out = F.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            shortcut = x
            if self.stride != 1 or self.extra:
                shortcut = F.pad(x[:, :, ::self.stride, ::self.stride], (0, 0, 0, 0, 0, self.extra))
            return F.relu(out + shortcut)

    class ResNet(nn.Module):
        def __init__(self, depth: int) -> None:
            super().__init__()
            n = (depth - 2) // 6
            self.conv1 = nn.Conv2d(3, 16, 3, 1, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(16)
            layers, cin = [], 16
            for stage, cout in enumerate((16, 32, 64)):
                for index in range(n):
                    layers.append(Block(cin, cout, 2 if stage and not index else 1))
                    cin = cout
            self.layers = nn.Sequential(*layers)
            self.linear = nn.Linear(64, 10)

        def forward(self, x):
            x = self.layers(F.relu(self.bn1(self.conv1(x))))
            return self.linear(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))

    return ResNet(44)


def native_tf_model(name: str):
    """The architecture of ``d5.models`` ``name`` as a TensorFlow user writes it: Keras layers, channels-last
    (TensorFlow's CPU convolutions take NHWC only), BatchNormalization with PyTorch's momentum and epsilon."""
    import keras
    import tensorflow as tf

    layers = keras.layers
    keras.utils.set_random_seed(0)
    if name == "lenet5":
        return keras.Sequential([keras.Input((28, 28, 1)), layers.Conv2D(6, 5, padding="same", activation="relu"),
                                 layers.MaxPooling2D(2), layers.Conv2D(16, 5, activation="relu"),
                                 layers.MaxPooling2D(2), layers.Flatten(), layers.Dense(120, activation="relu"),
                                 layers.Dense(84, activation="relu"), layers.Dense(10)])

    def batch_norm():
        return layers.BatchNormalization(momentum=0.9, epsilon=1e-5)

    def block(x, cin: int, cout: int, stride: int):
        out = layers.ReLU()(batch_norm()(layers.Conv2D(cout, 3, stride, padding="same", use_bias=False)(x)))
        out = batch_norm()(layers.Conv2D(cout, 3, 1, padding="same", use_bias=False)(out))
        if stride != 1 or cout != cin:  # option A: subsample, pad the channels with zeros
            x = layers.Lambda(lambda t: tf.pad(t[:, ::stride, ::stride, :], [[0, 0], [0, 0], [0, 0], [0, cout - cin]]))(x)
        return layers.ReLU()(layers.Add()([out, x]))

    inputs = keras.Input((32, 32, 3))
    x = layers.ReLU()(batch_norm()(layers.Conv2D(16, 3, padding="same", use_bias=False)(inputs)))
    cin = 16
    for stage, cout in enumerate((16, 32, 64)):
        for index in range(7):
            x = block(x, cin, cout, 2 if stage and not index else 1)
            cin = cout
    return keras.Model(inputs, layers.Dense(10)(layers.GlobalAveragePooling2D()(x)))


def native_tf_step(name: str, train: bool) -> Callable[[], None]:
    """The loop a TensorFlow user writes: a ``tf.function`` step with ``GradientTape`` and Keras SGD with momentum
    (faster per batch than ``model.fit``'s), the loss read each step as a logging loop does; the images in NHWC."""
    import keras
    import tensorflow as tf

    model = native_tf_model(name)
    data = batch(name)
    x = tf.constant(np.ascontiguousarray(data["input"].transpose(0, 2, 3, 1)))
    y = tf.constant(data["label"])
    if not train:
        infer = tf.function(lambda images: model(images, training=False))
        return lambda: infer(x).numpy()
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    optimizer = keras.optimizers.SGD(LR, momentum=MOMENTUM)

    @tf.function
    def step(images, labels):
        with tf.GradientTape() as tape:
            loss = loss_fn(labels, model(images, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    return lambda: step(x, y).numpy()


def native_mx_model(name: str):
    """The architecture of ``d5.models`` ``name`` as a Gluon user writes it: a HybridBlock of Gluon layers (NCHW),
    BatchNorm with PyTorch's momentum and epsilon, hybridized with static allocation and static shapes."""
    import d5.frameworks as frameworks

    frameworks.require_installed("mxnet")
    import mxnet as mx
    from mxnet.gluon import nn

    mx.random.seed(0)
    if name == "lenet5":
        net = nn.HybridSequential()
        net.add(nn.Conv2D(6, 5, padding=2, activation="relu"), nn.MaxPool2D(2), nn.Conv2D(16, 5, activation="relu"),
                nn.MaxPool2D(2), nn.Flatten(), nn.Dense(120, activation="relu"), nn.Dense(84, activation="relu"),
                nn.Dense(10))
    else:
        class Block(nn.HybridBlock):
            def __init__(self, cin: int, cout: int, stride: int) -> None:
                super().__init__()
                self.cin, self.cout, self.stride = cin, cout, stride
                self.body = nn.HybridSequential()
                self.body.add(nn.Conv2D(cout, 3, stride, 1, use_bias=False), nn.BatchNorm(momentum=0.9, epsilon=1e-5),
                              nn.Activation("relu"), nn.Conv2D(cout, 3, 1, 1, use_bias=False),
                              nn.BatchNorm(momentum=0.9, epsilon=1e-5))

            def hybrid_forward(self, F, x):
                shortcut = x
                if self.stride != 1 or self.cin != self.cout:  # option A: subsample, pad the channels with zeros
                    shortcut = F.slice(x, begin=(None, None, None, None), end=(None, None, None, None),
                                       step=(1, 1, self.stride, self.stride))
                    shortcut = F.concat(shortcut, F.zeros_like(shortcut), dim=1)
                return F.Activation(self.body(x) + shortcut, act_type="relu")  # as Gluon's model zoo writes it

        net = nn.HybridSequential()
        net.add(nn.Conv2D(16, 3, 1, 1, use_bias=False), nn.BatchNorm(momentum=0.9, epsilon=1e-5), nn.Activation("relu"))
        cin = 16
        for stage, cout in enumerate((16, 32, 64)):
            for index in range(7):
                net.add(Block(cin, cout, 2 if stage and not index else 1))
                cin = cout
        net.add(nn.GlobalAvgPool2D(), nn.Flatten(), nn.Dense(10))
    net.initialize(mx.init.Xavier())
    net.hybridize(static_alloc=True, static_shape=True)
    shape = (BATCH, 1, 28, 28) if name == "lenet5" else (BATCH, 3, 32, 32)
    net(mx.nd.zeros(shape))  # the parameters' shapes (deferred initialization)
    return net


def native_mx_step(name: str, train: bool) -> Callable[[], None]:
    """The loop a Gluon user writes: ``autograd.record`` around the hybridized block and
    ``SoftmaxCrossEntropyLoss``, ``backward``, ``gluon.Trainer`` SGD with momentum, ``step(1)`` on the batch's mean
    loss, the loss read each step as a logging loop does; each step timed to ``mx.nd.waitall()`` (MXNet's engine
    is asynchronous)."""
    model = native_mx_model(name)  # imports MXNet (with the numpy.bool alias it needs)
    import mxnet as mx

    data = batch(name)
    x, y = mx.nd.array(data["input"]), mx.nd.array(data["label"], dtype="int64")
    if not train:
        def infer() -> None:
            model(x).asnumpy()
            mx.nd.waitall()
        return infer
    loss_fn = mx.gluon.loss.SoftmaxCrossEntropyLoss()
    trainer = mx.gluon.Trainer(model.collect_params(), "sgd", {"learning_rate": LR, "momentum": MOMENTUM})

    def step() -> None:
        with mx.autograd.record():
            loss = loss_fn(model(x), y).mean()
        loss.backward()
        trainer.step(1)
        loss.asscalar()
        mx.nd.waitall()
    return step


def d5_model(name: str) -> d5.Network:
    return d5.models.lenet5(seed=0) if name == "lenet5" else d5.models.resnet(44, seed=0)


def batch(name: str) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    shape = (BATCH, 1, 28, 28) if name == "lenet5" else (BATCH, 3, 32, 32)
    return {"input": rng.standard_normal(shape).astype(np.float32),
            "label": rng.integers(0, 10, BATCH).astype(np.int64)}


# ---------------------------------------------------------------------- one step of each variant
def native_step(name: str, train: bool) -> Callable[[], None]:
    import torch

    torch.manual_seed(0)
    model = native_model(name)
    data = batch(name)
    x, y = torch.from_numpy(data["input"]), torch.from_numpy(data["label"])
    if not train:
        model.eval()

        def infer() -> None:
            with torch.no_grad():
                model(x).numpy()
        return infer
    loss_fn = torch.nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    model.train()

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        loss.item()
    return step


def d5_step(framework: str, name: str, train: bool, compile: bool = False) -> Callable[[], None]:
    data = batch(name)
    if framework == "pytorch":
        import d5.frameworks.pytorch as fw

        executor = fw.from_model(d5_model(name), compile=compile)
        optimizer = fw.MomentumOptimizer(executor, LR, MOMENTUM) if train else None
    elif framework in ("tensorflow", "mxnet"):
        import importlib

        fw = importlib.import_module(f"d5.frameworks.{framework}")
        executor = fw.from_model(d5_model(name))
        optimizer = fw.MomentumOptimizer(executor, LR, MOMENTUM) if train else None
    else:
        executor = d5.frameworks.reference.from_model(d5_model(name))
        optimizer = d5.MomentumOptimizer(executor, LR, MOMENTUM) if train else None
    if framework == "mxnet":  # timed to the end of the engine's work, as the Gluon loop is
        import mxnet as mx

        if not train:
            feeds = {"input": data["input"]}
            return lambda: (executor.inference(feeds), mx.nd.waitall())
        return lambda: (optimizer.step(data), mx.nd.waitall())
    if not train:
        feeds = {"input": data["input"]}
        return lambda: executor.inference(feeds)
    return lambda: optimizer.step(data)


def count_parameters_equal(name: str, framework: str = "pytorch") -> bool:
    """The native model has exactly the d5 model's trainable parameter count (the same architecture)."""
    network = d5_model(name)
    ours = sum(network.params[p].size for p in network.get_params())
    if framework == "tensorflow":
        return ours == sum(int(np.prod(v.shape)) for v in native_tf_model(name).trainable_variables)
    if framework == "mxnet":
        return ours == sum(int(np.prod(p.shape)) for p in native_mx_model(name).collect_params().values()
                           if p.grad_req != "null")
    return ours == sum(p.numel() for p in native_model(name).parameters())


# ---------------------------------------------------------------------- measurement
def measure_workload(workload: str, rounds: int, block: int, warmup: int,
                     compile: bool, framework: str = "pytorch") -> dict[str, list[list[float]]]:
    """Per variant, per round, the step times of its block: native against d5 first, then, in rounds of their
    own, d5 against d5 compiled (inductor's kernels bring their own OpenMP threads, which would otherwise share
    the cores with the steps measured after them)."""
    name, train = WORKLOADS[workload]
    if framework == "tensorflow":  # a process of its own: TensorFlow's and torch's thread pools never overlap
        steps = {"native-tf": native_tf_step(name, train), "d5-tensorflow": d5_step("tensorflow", name, train)}
        return alternate(steps, rounds, block, warmup, f"{workload} (tensorflow)")
    if framework == "mxnet":
        steps = {"native-mx": native_mx_step(name, train), "d5-mxnet": d5_step("mxnet", name, train)}
        return alternate(steps, rounds, block, warmup, f"{workload} (mxnet)")
    steps = {"native": native_step(name, train), "d5-pytorch": d5_step("pytorch", name, train)}
    samples = alternate(steps, rounds, block, warmup, workload)
    if compile:
        compiled = {"d5-pytorch": steps["d5-pytorch"],
                    "d5-pytorch-compiled": d5_step("pytorch", name, train, compile=True)}
        pair = alternate(compiled, rounds, block, warmup, f"{workload} (compiled)")
        samples["d5-pytorch-compiled"] = pair["d5-pytorch-compiled"]
        samples["d5-pytorch (compile rounds)"] = pair["d5-pytorch"]
    return samples


def images_per_second(samples: list[float]) -> float:
    return BATCH / float(np.median(samples))


def bar_chart(throughput: dict[str, dict[str, float]], path: str) -> None:
    """Images/s per workload and variant, as grouped bars (PNG, written atomically)."""
    from matplotlib.figure import Figure

    from d5.io_utils import atomic_write

    workloads = list(throughput)
    variants = sorted({v for row in throughput.values() for v in row}, key=["native", "d5-pytorch",
                      "d5-pytorch-compiled", "native-tf", "d5-tensorflow", "native-mx", "d5-mxnet", "d5-reference"].index)
    figure = Figure(figsize=(8, 4), dpi=100)
    axes = figure.add_subplot()
    width = 0.8 / len(variants)
    for index, variant in enumerate(variants):
        values = [throughput[w].get(variant, 0.0) for w in workloads]
        positions = np.arange(len(workloads)) + (index - (len(variants) - 1) / 2) * width
        axes.bar(positions, values, width, label=variant)
    axes.set_xticks(np.arange(len(workloads)))
    axes.set_xticklabels(workloads)
    axes.set_yscale("log")
    axes.set_ylabel("images / s (median step, log scale)")
    axes.set_title(f"d5 frameworks vs hand-written PyTorch and TensorFlow loops, batch {BATCH}")
    axes.legend(fontsize=8)
    axes.grid(axis="y", alpha=0.3)
    figure.tight_layout()
    with atomic_write(path, "wb") as handle:
        figure.savefig(handle, format="png")


def measure_in_fresh_process(workload: str, args: argparse.Namespace,
                             framework: str = "pytorch") -> dict[str, list[list[float]]]:
    """:func:`measure_workload` in a new process: what one workload leaves behind (a heap grown by ResNet-44, the
    compiled kernels' threads) must not slow the next one."""
    import json
    import subprocess
    import sys

    rounds = args.rounds or ROUNDS[workload]
    command = [sys.executable, __file__, "--worker", workload, "--rounds", str(rounds), "--block",
               str(args.block), "--warmup", str(args.warmup), "--worker-framework", framework] + \
        ([] if args.compile else ["--no-compile"])
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{workload} worker failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    parser.add_argument("--rounds", type=int, default=0, help="rounds per workload (default: ROUNDS)")
    parser.add_argument("--block", type=int, default=3, help="steps per variant per round")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--reference-steps", type=int, default=6, help="steps of the reference (0: skip it)")
    parser.add_argument("--no-compile", dest="compile", action="store_false", help="skip torch.compile")
    parser.add_argument("--quick", action="store_true", help="few samples: a smoke run, not a result")
    parser.add_argument("--output", default="results/frameworks.json")
    parser.add_argument("--chart", default="results/frameworks.png")
    parser.add_argument("--frameworks", nargs="+", default=[f for f in ("pytorch", *OTHER_FRAMEWORKS)
                                                                if f in d5.frameworks.available()],
                        choices=["pytorch", *OTHER_FRAMEWORKS], help="whose hand-written loops to compare d5 with")
    parser.add_argument("--worker", choices=list(WORKLOADS), help=argparse.SUPPRESS)
    parser.add_argument("--worker-framework", default="pytorch", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:  # one workload, in this (fresh) process; prints its samples as one JSON line
        import json

        torch.manual_seed(0)
        print(json.dumps(measure_workload(args.worker, args.rounds, args.block, args.warmup, args.compile,
                                          args.worker_framework)))
        return 0
    if args.quick:
        args.rounds, args.block, args.warmup, args.reference_steps = 3, 3, 3, 2
    torch.manual_seed(0)

    figures, throughput, all_samples = {}, {}, {}
    for workload in args.workloads:
        name, train = WORKLOADS[workload]
        if not count_parameters_equal(name):
            raise SystemExit(f"{workload}: the native model is not the d5 model's architecture")
        figures[workload], throughput[workload], all_samples[workload] = {}, {}, {}
        for framework in OTHER_FRAMEWORKS:
            if framework in args.frameworks:
                measure_other(framework, workload, args, figures[workload], throughput[workload],
                              all_samples[workload])
        if "pytorch" not in args.frameworks:
            continue
        per_round = measure_in_fresh_process(workload, args)
        samples = {variant: flat(blocks) for variant, blocks in per_round.items() if "rounds" not in variant}
        all_samples[workload].update(samples)
        paired = paired_ratio(per_round["d5-pytorch"], per_round["native"])
        row = figures[workload]
        row |= {"native_step_s": summarize(samples["native"]), "d5_pytorch_step_s": summarize(samples["d5-pytorch"]),
               "ratio_d5_pytorch_over_native": paired,
               "unpaired_ratio_d5_pytorch_over_native": compare(samples["d5-pytorch"], samples["native"]),
               "target_at_most": TARGETS[workload], "met": bool(paired.median <= TARGETS[workload])}
        if "d5-pytorch-compiled" in per_round:
            compiled = paired_ratio(per_round["d5-pytorch-compiled"], per_round["d5-pytorch (compile rounds)"])
            row["ratio_compiled_over_d5_pytorch"] = compiled
            row["compile_helped"] = bool(compiled.ci_high < 1.0)
        throughput[workload].update({v: images_per_second(s) for v, s in samples.items()})
        print(f"{workload}: d5-pytorch / native = {paired.median:.3f} [{paired.ci_low:.3f}, {paired.ci_high:.3f}] "
              f"(paired over {len(per_round['native'])} rounds; unpaired {row['unpaired_ratio_d5_pytorch_over_native']}) "
              f"target <= {TARGETS[workload]}", flush=True)
        if "ratio_compiled_over_d5_pytorch" in row:
            c = row["ratio_compiled_over_d5_pytorch"]
            print(f"{workload}: compiled / d5-pytorch = {c.median:.3f} [{c.ci_low:.3f}, {c.ci_high:.3f}]", flush=True)
    if args.reference_steps and "pytorch" in args.frameworks:
        for workload in args.workloads:  # last: the reference's OpenMP threads must not overlap torch's
            name, train = WORKLOADS[workload]
            step = d5_step("reference", name, train)
            time_calls(step, 1)
            samples = time_calls(step, args.reference_steps)
            all_samples[workload]["d5-reference"] = samples
            throughput[workload]["d5-reference"] = images_per_second(samples)
            figures[workload]["d5_reference_step_s"] = summarize(samples)
            figures[workload]["ratio_reference_over_d5_pytorch"] = compare(
                samples, all_samples[workload]["d5-pytorch"])
    figures["images_per_second"] = throughput
    path = write_result(args.output, "frameworks", figures,
                        extra={"batch_size": BATCH, "rounds": {w: args.rounds or ROUNDS[w] for w in args.workloads}, "block": args.block,
                               "warmup": args.warmup, "quick": args.quick, "torch_threads": torch.get_num_threads(),
                               "malloc_tuned": keep_freed_memory(),
                               "samples": all_samples})
    bar_chart(throughput, args.chart)
    from d5.bench.report import markdown_table

    print(markdown_table([{"workload": w, **{k: f"{v:.1f}" for k, v in row.items()}} for w, row in throughput.items()]))
    print(f"wrote {path} and {args.chart}")
    return 0 if all(figures[w].get("met", True) and figures[w].get("met_tensorflow", True)
                    and figures[w].get("met_mxnet", True) for w in args.workloads) else 1


def measure_other(framework: str, workload: str, args: argparse.Namespace, row: dict, throughput: dict,
                  samples: dict) -> None:
    """d5's ``framework`` (TensorFlow, MXNet) against that framework's hand-written loop, in a process of their
    own."""
    name, _ = WORKLOADS[workload]
    native, targets = OTHER_FRAMEWORKS[framework]
    if not count_parameters_equal(name, framework):
        raise SystemExit(f"{workload}: the hand-written {framework} model is not the d5 model's architecture")
    per_round = measure_in_fresh_process(workload, args, framework)
    flat_samples = {variant: flat(blocks) for variant, blocks in per_round.items()}
    samples.update(flat_samples)
    ours, key = f"d5-{framework}", native.replace("-", "_")
    paired = paired_ratio(per_round[ours], per_round[native])
    row.update({f"{key}_step_s": summarize(flat_samples[native]),
                f"d5_{framework}_step_s": summarize(flat_samples[ours]),
                f"ratio_d5_{framework}_over_{key}": paired,
                f"unpaired_ratio_d5_{framework}_over_{key}": compare(flat_samples[ours], flat_samples[native]),
                f"target_{framework}_at_most": targets[workload],
                f"met_{framework}": bool(paired.median <= targets[workload])})
    throughput.update({v: images_per_second(s) for v, s in flat_samples.items()})
    print(f"{workload}: {ours} / {native} = {paired.median:.3f} [{paired.ci_low:.3f}, {paired.ci_high:.3f}] "
          f"(paired over {len(per_round[native])} rounds) target <= {targets[workload]}", flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
