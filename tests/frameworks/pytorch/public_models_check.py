"""Export a public torch model to ONNX, import it with a d5 framework (``d5.frameworks.pytorch`` unless
``check_model(framework=...)`` names another, e.g. ``'tensorflow'``), add a cross-entropy loss the d5 way
(``Network.add_input/add_node/add_output``) and check that d5 computes, and trains, what torch does.

:func:`check_model` runs, on one :class:`~public_models.PublicModel`:

export
    ``torch.onnx.export(dynamo=False, training=TrainingMode.TRAINING, do_constant_folding=False)`` with the batch
    axis of every input and of the output dynamic (``'N'``). torch 2.13's default exporter (``dynamo=True``) needs
    onnxscript, which is not installed; the TorchScript exporter needs nothing (its default opset is 20).
    Training mode keeps BatchNormalization a node with its own scale, bias and statistics (an eval-mode export
    folds it into the convolution, and one without constant folding still replaces initializers of equal value,
    e.g. a fresh running_var of ones, by an Identity of the BN scale); constant folding off keeps every parameter
    under its torch name (folding stores transposed copies under ``onnx::MatMul_*`` names and un-ties tied
    weights). The file passes ``onnx.checker`` (full check) and onnxruntime reproduces torch's output.
(a) forward
    ``d5.frameworks.<framework>.from_onnx(file).inference`` equals torch's forward (train mode: the export's
    BatchNormalization has ``training_mode=1``, batch statistics, also in d5's inference, as the ONNX spec says).
    Operators that run on the reference fallback are recorded (``fallback_ops``).
(b) gradients
    every trainable parameter's gradient from d5 ``inference_and_backprop`` equals torch autograd's gradient of
    the same loss from the same weights. Names map one to one (the export keeps torch's names; a tied weight is
    one initializer under its first name, as ``named_parameters()`` lists it). ONNX does not tell parameters from constants,
    so the torch module's float buffers (a positional encoding) are frozen with ``Network.set_trainable(name,
    False)``, as a user does; any other trainable initializer torch does not have is reported (``d5_only_params``)
    and fails the check only when its gradient is non-zero, since training then changes it.
(c) training
    ``steps`` steps of d5's native optimizer (MomentumOptimizer(lr, 0.9) or AdamOptimizer(lr)) on the imported
    model and of the same torch.optim optimizer on the torch model, on one fixed batch: same loss trajectory, and
    the loss decreases.
(d) batch size
    inference and a training pass (loss and gradients) at a batch size other than the exported one equal torch's,
    and so do the losses of an optimizer step at that size right after the trajectory of (c) and of one more step
    back at the first size (the optimizer state carries across the change).

Tolerances (everything runs in float32, as users run it). A tensor passes when
``max|d5 - torch| <= rtol * max|torch| + atol + 2 * noise``:

* rtol = 1e-4: float32 rounding over tens of layers stays near 1e-6 of the largest value, wrong semantics is of
  the order of the value itself;
* atol = 1e-5 for outputs, 1e-6 for gradients (a tensor whose exact gradient is zero, such as the bias of a
  BatchNormalization followed by another one, carries rounding noise of about 1e-9);
* noise = max|torch float32 - torch float64|, torch's own rounding error on that tensor, measured by running the
  same model in float64: where batch statistics over few numbers make a gradient ill-conditioned, two correct
  float32 implementations may each be that far from the exact value. It is ~1e-7 relative for most tensors.

A loss passes when ``|d5 - torch| <= 1e-4 * |torch| + 1e-6 + 2 * |torch float32 - torch float64|``, step by step.
"""
from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import sys
import time
import warnings
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

if os.path.dirname(os.path.abspath(__file__)) not in sys.path:  # pytest's --import-mode=importlib does not add it
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from public_models import PublicModel  # noqa: E402

RTOL = 1e-4
OUTPUT_ATOL = 1e-5
GRAD_ATOL = 1e-6
LOSS_RTOL = 1e-4
LOSS_ATOL = 1e-6
NOISE_FACTOR = 2.0
#: The relative gradient error is reported over the tensors whose exact (float64) gradient reaches this fraction
#: of the model's largest: a tensor whose exact gradient vanishes has only rounding noise, relative to itself.
SIGNIFICANT_GRADIENT = 1e-4


@dataclasses.dataclass
class ModelReport:
    """What :func:`check_model` found; ``failures`` is empty when every check passed."""

    name: str
    source: str
    framework: str = "pytorch"  # the d5 framework that ran the ONNX file
    parameters: int = 0
    opset: int | None = None
    onnx_ops: list[str] = dataclasses.field(default_factory=list)
    fallback_ops: list[str] = dataclasses.field(default_factory=list)
    ort_forward_error: float | None = None  # max|ort - torch| / max|torch|
    forward_error: float | None = None  # max|d5 - torch| / max|torch|
    gradient_error: float | None = None  # max over significant tensors of max|d5 - torch| / max|torch|
    torch_gradient_noise: float | None = None  # the same for torch float32 against torch float64
    gradient_tolerance_used: float | None = None  # max over tensors of max|d5 - torch| / tolerance
    worst_gradient: str | None = None
    d5_only_params: list[str] = dataclasses.field(default_factory=list)
    optimizer: str = ""
    losses_d5: list[float] = dataclasses.field(default_factory=list)
    losses_torch: list[float] = dataclasses.field(default_factory=list)
    losses_torch64: list[float] = dataclasses.field(default_factory=list)
    #: [d5, torch] losses of a step on the other batch size after the trajectory, then of one more on the first
    losses_after_batch_change: list[list[float]] = dataclasses.field(default_factory=list)
    final_param_difference: float | None = None  # max|d5 - torch| over all parameters after training
    running_mean_error: float | None = None  # after training, relative to the largest statistic (informative)
    running_var_error: float | None = None
    batch_change: str = ""
    batch_change_error: float | None = None
    checks: dict[str, bool] = dataclasses.field(default_factory=dict)
    failures: list[str] = dataclasses.field(default_factory=list)
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return not self.failures


# ------------------------------------------------------------------------------------------- helpers
def export(spec: PublicModel, module: torch.nn.Module, feeds: dict[str, np.ndarray]) -> bytes:
    """The ONNX file of ``module`` (see the module docstring for the exporter settings)."""
    axes = {name: {spec.batch_axis: "N"} for name in feeds}
    axes["output"] = {spec.batch_axis: "N"}
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notice and tracer warnings
        torch.onnx.export(module.train(), tuple(torch.from_numpy(v) for v in feeds.values()), buffer, dynamo=False,
                          input_names=list(feeds), output_names=["output"], dynamic_axes=axes,
                          training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
    return buffer.getvalue()


def add_cross_entropy_loss(network, class_axis: int, rank: int, logits: str = "output") -> None:
    """Give an imported network input ``'label'`` (int64, the logits' shape without the class axis) and output
    ``'loss'``: mean SoftmaxCrossEntropyLoss, after a Transpose moving the class axis to 1 where it is elsewhere
    (ONNX's loss takes (N, C, d1, ...), a language model's logits are (N, T, V))."""
    scores = logits
    if class_axis != 1:
        perm = [0, class_axis] + [axis for axis in range(1, rank) if axis != class_axis]
        network.add_node("Transpose", [logits], ["loss_scores"], name="loss_scores", perm=perm)
        scores = "loss_scores"
    network.add_input("label", None, "int64")
    network.add_node("SoftmaxCrossEntropyLoss", [scores, "label"], ["loss"], name="loss", reduction="mean")
    network.add_output("loss")


def torch_loss(spec: PublicModel, output: torch.Tensor, labels: np.ndarray) -> torch.Tensor:
    return F.cross_entropy(output.movedim(spec.class_axis, 1), torch.from_numpy(labels))


def _torch_inputs(feeds: dict[str, np.ndarray], dtype: torch.dtype) -> list[torch.Tensor]:
    return [torch.from_numpy(v).to(dtype) if v.dtype.kind == "f" else torch.from_numpy(v) for v in feeds.values()]


def _torch_model(spec: PublicModel, dtype: torch.dtype, buffers: dict[str, np.ndarray]) -> torch.nn.Module:
    """A fresh torch model in train mode whose buffers hold the exported file's values: the TorchScript exporter
    runs the model once in training mode, so the running statistics it writes are one batch further than those
    of a freshly built model."""
    module = spec.build()
    with torch.no_grad():
        for name, value in module.named_buffers():
            if name in buffers:
                value.copy_(torch.from_numpy(np.array(buffers[name])))
    return module.to(dtype).train()


def exported_buffers(spec: PublicModel, onnx_bytes: bytes) -> dict[str, np.ndarray]:
    """The initializers of the ONNX file that are buffers of the torch model, by name."""
    import onnx
    from onnx import numpy_helper

    names = {name for name, _ in spec.build().named_buffers()}
    return {init.name: numpy_helper.to_array(init) for init in onnx.load_from_string(onnx_bytes).graph.initializer
            if init.name in names}


@dataclasses.dataclass
class _TorchPass:
    output: np.ndarray
    loss: float
    grads: dict[str, np.ndarray]


def _torch_pass(spec: PublicModel, buffers, feeds: dict[str, np.ndarray], labels: np.ndarray,
                dtype: torch.dtype = torch.float32) -> _TorchPass:
    """A fresh torch model's train-mode output, loss and parameter gradients."""
    module = _torch_model(spec, dtype, buffers)
    output = module(*_torch_inputs(feeds, dtype))
    loss = torch_loss(spec, output, labels)
    loss.backward()
    grads = {name: (p.grad if p.grad is not None else torch.zeros_like(p)).numpy()
             for name, p in module.named_parameters()}
    return _TorchPass(output.detach().numpy(), float(loss.detach()), grads)


def _errors(actual, expected, exact=None) -> tuple[float, float, float]:
    """(max|actual - expected|, max|expected|, max|expected - exact|) in float64; exact defaults to expected."""
    actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    if actual.shape != expected.shape:
        raise AssertionError(f"shape {actual.shape} != torch's {expected.shape}")
    noise = 0.0 if exact is None else float(np.max(np.abs(expected - np.asarray(exact, np.float64)), initial=0.0))
    return float(np.max(np.abs(actual - expected), initial=0.0)), float(np.max(np.abs(expected), initial=0.0)), noise


def _tolerance(scale: float, atol: float, noise: float) -> float:
    return RTOL * scale + atol + NOISE_FACTOR * noise


def _output_check(actual, expected, exact) -> tuple[bool, float]:
    error, scale, noise = _errors(actual, expected, exact)
    return error <= _tolerance(scale, OUTPUT_ATOL, noise), error / (scale if scale > 0 else 1.0)


def _loss_ok(d5: float, torch32: float, torch64: float) -> bool:
    return abs(d5 - torch32) <= LOSS_RTOL * abs(torch32) + LOSS_ATOL + NOISE_FACTOR * abs(torch32 - torch64)


class _D5Model:
    """The imported network with its loss; ``executor()`` builds a fresh executor (fresh weights and statistics)."""

    def __init__(self, spec: PublicModel, onnx_bytes: bytes, rank: int, framework: str = "pytorch") -> None:
        import d5

        self.framework = framework
        self.network = d5.load_onnx(onnx_bytes)
        # What a user does: the module's float buffers (a positional encoding) are constants, not weights.
        for name, _ in spec.build().named_buffers():
            if name in self.network.params:
                self.network.set_trainable(name, False)
        add_cross_entropy_loss(self.network, spec.class_axis, rank)

    def executor(self):
        import d5.frameworks
        from d5.frameworks.base import FallbackWarning

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FallbackWarning)  # check (a) records them
            return d5.frameworks.get(self.framework).from_model(self.network)


def _d5_gradients(executor) -> dict[str, np.ndarray]:
    pairs = executor.network.gradient("loss")
    values = executor.network.fetch_tensors([grad for _, grad in pairs])
    return {param: np.array(value) for (param, _), value in zip(pairs, values)}


def compare_gradients(report: ModelReport, d5_grads: dict[str, np.ndarray], torch32: dict[str, np.ndarray],
                      torch64: dict[str, np.ndarray], where: str) -> bool:
    """Check (b) on one pass: every torch parameter's gradient against d5's of the initializer of that name."""
    ok = True
    largest = max((float(np.max(np.abs(g), initial=0.0)) for g in torch64.values()), default=0.0)
    worst_rel = worst_noise = worst_used = 0.0
    worst_name = None
    for name, expected in torch32.items():
        if name not in d5_grads:
            report.failures.append(f"{where}: torch parameter {name!r} has no trainable initializer of that name in "
                                   "the ONNX model")
            ok = False
            continue
        error, scale, noise = _errors(d5_grads[name], expected, torch64[name])
        used = error / _tolerance(scale, GRAD_ATOL, noise)
        if used > worst_used:
            worst_used, worst_name = used, name
        if float(np.max(np.abs(torch64[name]), initial=0.0)) >= SIGNIFICANT_GRADIENT * largest and scale > 0:
            worst_rel, worst_noise = max(worst_rel, error / scale), max(worst_noise, noise / scale)
        if used > 1.0:
            ok = False
            report.failures.append(f"{where}: gradient of {name!r} differs: max|d5 - torch| = {error:.3g}, "
                                   f"max|torch| = {scale:.3g}, torch float32's own error {noise:.3g}")
    for name in sorted(set(d5_grads) - set(torch32)):
        if name not in report.d5_only_params:
            report.d5_only_params.append(name)
        magnitude = float(np.max(np.abs(d5_grads[name]), initial=0.0))
        if magnitude > 0:
            ok = False
            report.failures.append(f"{where}: initializer {name!r} is no torch parameter (a buffer or exporter "
                                   f"constant) but d5 trains it and its gradient is non-zero (max {magnitude:.3g}): "
                                   "training changes a constant of the torch model")
    report.gradient_error = max(report.gradient_error or 0.0, worst_rel)
    report.torch_gradient_noise = max(report.torch_gradient_noise or 0.0, worst_noise)
    if report.gradient_tolerance_used is None or worst_used > report.gradient_tolerance_used:
        report.gradient_tolerance_used, report.worst_gradient = worst_used, worst_name
    return ok


def _torch_optimizer(spec: PublicModel, module: torch.nn.Module) -> torch.optim.Optimizer:
    if spec.optimizer == "sgd":
        return torch.optim.SGD(module.parameters(), lr=spec.lr, momentum=0.9)
    return torch.optim.Adam(module.parameters(), lr=spec.lr)


def _d5_optimizer(spec: PublicModel, executor, framework: str = "pytorch"):
    import d5.frameworks

    native = d5.frameworks.get(framework)  # its native optimizers, of the reference's names
    if spec.optimizer == "sgd":
        return native.MomentumOptimizer(executor, lr=spec.lr, momentum=0.9), f"Momentum(lr={spec.lr}, 0.9)"
    return native.AdamOptimizer(executor, lr=spec.lr), f"Adam(lr={spec.lr})"


def _torch_training(spec: PublicModel, buffers, schedule, dtype: torch.dtype):
    """Train a fresh torch model one optimizer step per ``(feeds, labels)`` of ``schedule``; the losses."""
    module = _torch_model(spec, dtype, buffers)
    optimizer = _torch_optimizer(spec, module)
    losses = []
    for feeds, labels in schedule:
        optimizer.zero_grad()
        loss = torch_loss(spec, module(*_torch_inputs(feeds, dtype)), labels)
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    return module, losses


# ------------------------------------------------------------------------------------------- the tests' selection
#: The models the normal suite runs on every framework: depthwise convolutions + squeeze-excitation + hardswish +
#: BatchNormalization; nn.MultiheadAttention, LayerNorm, GELU, class token; causal attention with a tied LM head and
#: (N, T, V) logits; a padding mask as a second input; nn.LSTM sequence-first (batch on axis 1); a bidirectional
#: 2-layer nn.GRU. The rest run with ``D5_ALL_PUBLIC_MODELS=1`` (``make public-models``).
IN_SUITE = ("mobilenet_v3_small", "vit", "gpt2", "bert", "lstm_lm", "bigru_classifier")


def run_all_models() -> bool:
    """Whether the tests run every public model (``D5_ALL_PUBLIC_MODELS=1``) or only :data:`IN_SUITE`."""
    return os.environ.get("D5_ALL_PUBLIC_MODELS") == "1"


@contextlib.contextmanager
def one_torch_thread():
    """torch on one intra-op thread for the block (the tests' module fixture): these models are too small to gain
    from intra-op threads, and two threads per process on a 2-core machine shared with another process
    (pytest-xdist, a parallel build) spin-wait: measured 60 s instead of 6 s."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def model_params(models, known_failures: dict[str, str]) -> list:
    """``pytest.param`` per model for a framework's test: those of ``known_failures`` (name -> reason, that
    framework's) strictly expected to fail, those outside :data:`IN_SUITE` skipped unless :func:`run_all_models`."""
    import pytest

    params = []
    for model in models:
        marks = []
        if model.name in known_failures:
            marks.append(pytest.mark.xfail(strict=True, reason=known_failures[model.name]))
        if model.name not in IN_SUITE and not run_all_models():
            marks.append(pytest.mark.skip(reason="runs with D5_ALL_PUBLIC_MODELS=1 (make public-models)"))
        params.append(pytest.param(model, id=model.name, marks=marks))
    return params


# ------------------------------------------------------------------------------------------- the check
def check_model(spec: PublicModel, batch: int = 4, new_batch: int = 3, steps: int = 5,
                framework: str = "pytorch") -> ModelReport:
    """Run export and checks (a)-(d) on ``spec`` with d5 framework ``framework`` (see the module docstring); never
    raises for a failed check: the report lists failures (an exception inside a step is one, with its type and
    message)."""
    start = time.perf_counter()
    report = ModelReport(spec.name, spec.source, framework)
    rng = np.random.default_rng(0)
    feeds, labels = spec.inputs(batch, rng), spec.labels(batch, rng)
    new_feeds, new_labels = spec.inputs(new_batch, rng), spec.labels(new_batch, rng)
    module = spec.build()
    report.parameters = sum(p.numel() for p in module.parameters())
    stage = "export"
    try:
        onnx_bytes = export(spec, module, feeds)
        buffers = exported_buffers(spec, onnx_bytes)
        reference = _torch_pass(spec, buffers, feeds, labels), _torch_pass(spec, buffers, feeds, labels, torch.float64)
        _check_file(report, onnx_bytes, feeds, reference)
        stage = "(a) forward"
        _check_forward(report, onnx_bytes, feeds, reference, framework)
        stage = "import with a loss"
        model = _D5Model(spec, onnx_bytes, reference[0].output.ndim, framework)
        stage = "(b) gradients"
        _check_gradients(report, model, feeds, labels, reference)
        stage = "(c) training"
        _check_training(report, spec, buffers, model, feeds, labels, new_feeds, new_labels, steps)
        stage = "(d) batch size"
        _check_batch_change(report, spec, buffers, model, new_feeds, new_labels, batch, new_batch)
    except Exception as err:  # noqa: BLE001 - a crash is a failed check, reported with the stage it happened in
        report.failures.append(f"{stage}: {type(err).__name__}: {err}")
        report.checks[stage] = False
    report.seconds = time.perf_counter() - start
    return report


def _check_file(report: ModelReport, onnx_bytes: bytes, feeds, reference) -> None:
    import onnx
    import onnxruntime as ort

    proto = onnx.load_from_string(onnx_bytes)
    onnx.checker.check_model(proto, full_check=True)
    report.opset = next(op.version for op in proto.opset_import if op.domain in ("", "ai.onnx"))
    report.onnx_ops = sorted({node.op_type for node in proto.graph.node})
    session = ort.InferenceSession(onnx_bytes, providers=["CPUExecutionProvider"])
    got = session.run(["output"], feeds)[0]
    ok, report.ort_forward_error = _output_check(got, reference[0].output, reference[1].output)
    report.checks["onnxruntime"] = ok
    if not ok:
        report.failures.append(f"export: onnxruntime's output differs from torch's (relative {report.ort_forward_error:.3g})")


def _check_forward(report, onnx_bytes: bytes, feeds, reference, framework: str = "pytorch") -> None:
    import d5.frameworks
    from d5.frameworks.base import FallbackWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)  # recorded from executor.fallback_operators
        executor = d5.frameworks.get(framework).from_onnx(onnx_bytes)  # the file as it is, no loss: what a user runs for inference
    report.fallback_ops = sorted(set(executor.fallback_operators))
    got = executor.inference(feeds)["output"]
    ok, report.forward_error = _output_check(got, reference[0].output, reference[1].output)
    report.checks["forward"] = ok
    if not ok:
        report.failures.append(f"(a) forward: d5's output differs from torch's (max relative {report.forward_error:.3g})")


def _check_pass(report, model: _D5Model, feeds, labels, reference, where: str) -> bool:
    torch32, torch64 = reference
    executor = model.executor()
    loss = float(executor.inference_and_backprop({**feeds, "label": labels})["loss"])
    ok = _loss_ok(loss, torch32.loss, torch64.loss)
    if not ok:
        report.failures.append(f"{where}: loss {loss!r} != torch's {torch32.loss!r}")
    return compare_gradients(report, _d5_gradients(executor), torch32.grads, torch64.grads, where) and ok


def _check_gradients(report, model: _D5Model, feeds, labels, reference) -> None:
    report.checks["gradients"] = _check_pass(report, model, feeds, labels, reference, "(b) gradients")


def _check_training(report, spec, buffers, model: _D5Model, feeds, labels, new_feeds, new_labels,
                    steps: int) -> None:
    """(c), and the part of (d) that trains: ``steps`` steps on the batch, then one on a batch of the other size and
    one more on the first (the optimizer state carries across the change)."""
    schedule = [(feeds, labels)] * steps + [(new_feeds, new_labels), (feeds, labels)]
    executor = model.executor()
    optimizer, report.optimizer = _d5_optimizer(spec, executor, model.framework)
    d5 = [float(optimizer.step({**f, "label": y})["loss"]) for f, y in schedule]
    module, torch32 = _torch_training(spec, buffers, schedule, torch.float32)
    torch64 = _torch_training(spec, buffers, schedule, torch.float64)[1]
    report.losses_d5, report.losses_torch, report.losses_torch64 = d5[:steps], torch32[:steps], torch64[:steps]
    report.losses_after_batch_change = [d5[steps:], torch32[steps:]]
    same = all(_loss_ok(*losses) for losses in zip(d5[:steps], torch32[:steps], torch64[:steps]))
    decreased = d5[steps - 1] < d5[0]
    if not same:
        report.failures.append("(c) training: d5's loss trajectory " + _losses(d5[:steps]) + " differs from "
                               "torch's " + _losses(torch32[:steps]) + " (float64: " + _losses(torch64[:steps]) + ")")
    if not decreased:
        report.failures.append("(c) training: d5's loss did not decrease: " + _losses(d5[:steps]))
    report.checks["training"] = same and decreased
    changed = all(_loss_ok(*losses) for losses in zip(d5[steps:], torch32[steps:], torch64[steps:]))
    if not changed:
        size = next(iter(new_feeds.values())).shape[spec.batch_axis]
        report.failures.append(f"(d) batch size {size}: an optimizer step on it, then back: "
                               f"d5's losses {_losses(d5[steps:])} differ from torch's {_losses(torch32[steps:])}")
    report.checks["batch_change_training"] = changed
    trained = dict(zip(executor.network.get_params(), executor.network.fetch_tensors(executor.network.get_params())))
    report.final_param_difference = max((_errors(trained[name], p.detach().numpy())[0]
                                         for name, p in module.named_parameters() if name in trained), default=None)
    # Running statistics: informative only. The ONNX spec updates running_var with the biased batch variance,
    # torch with the unbiased one; the exported graph cannot say which.
    stats = dict(zip(executor.graph.params, executor.network.fetch_tensors(list(executor.graph.params))))
    for kind in ("running_mean", "running_var"):
        pairs = [_errors(stats[name], b.numpy())[:2] for name, b in module.named_buffers()
                 if name.endswith(kind) and name in stats]
        if pairs:  # relative to the model's largest statistic of that kind (a centred layer's mean is ~1e-9)
            setattr(report, f"{kind}_error", max(e for e, _ in pairs) / max(max(s for _, s in pairs), 1e-12))


def _check_batch_change(report, spec, buffers, model: _D5Model, feeds, labels, batch: int, new_batch: int) -> None:
    report.batch_change = f"{batch} -> {new_batch}"
    reference = _torch_pass(spec, buffers, feeds, labels), _torch_pass(spec, buffers, feeds, labels, torch.float64)
    got = model.executor().inference(feeds)["output"]
    ok, report.batch_change_error = _output_check(got, reference[0].output, reference[1].output)
    if not ok:
        report.failures.append(f"(d) batch size {new_batch}: d5's output differs from torch's (relative "
                               f"{report.batch_change_error:.3g})")
    ok = _check_pass(report, model, feeds, labels, reference, f"(d) batch size {new_batch}") and ok
    report.checks["batch_change"] = ok


def _losses(values) -> str:
    return "[" + ", ".join(f"{v:.5f}" for v in values) + "]"


# ------------------------------------------------------------------------------------------- default export
@dataclasses.dataclass
class DefaultExportReport:
    """What a plain ``torch.onnx.export(model.eval(), ...)`` (constant folding on, the exporter's defaults but the
    dynamic batch) gives d5: inference at another batch size, and how the torch parameters survive in the file."""

    name: str
    forward_error: float | None = None  # d5 inference at the new batch size against torch eval, relative
    forward_ok: bool = False
    kept: int = 0  # torch parameters present under their own name
    folded: list[str] = dataclasses.field(default_factory=list)  # parameters gone (folded into new initializers)
    new_initializers: int = 0  # initializers under exporter names (onnx::Conv_*, onnx::MatMul_*: folded values)
    aliases: list[str] = dataclasses.field(default_factory=list)  # parameters that are an Identity of another
    error: str | None = None


def check_default_export(spec: PublicModel, batch: int = 4, new_batch: int = 3) -> DefaultExportReport:
    """Export ``spec`` in eval mode with the exporter's defaults and run it in d5 at another batch size. Training
    such a file trains another model: BatchNormalization is folded into the convolutions, weights used transposed
    are stored transposed under new names (a tied weight gets an untied copy), and initializers of equal value are
    merged into one (fresh zero biases become a single shared tensor), which d5 then trains as one."""
    import onnx
    from onnx import numpy_helper

    from d5.frameworks import pytorch

    report = DefaultExportReport(spec.name)
    rng = np.random.default_rng(0)
    feeds, new_feeds = spec.inputs(batch, rng), spec.inputs(new_batch, rng)
    module = spec.build().eval()
    axes = {name: {spec.batch_axis: "N"} for name in feeds}
    axes["output"] = {spec.batch_axis: "N"}
    buffer = io.BytesIO()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(module, tuple(torch.from_numpy(v) for v in feeds.values()), buffer, dynamo=False,
                              input_names=list(feeds), output_names=["output"], dynamic_axes=axes)
            proto = onnx.load_from_string(buffer.getvalue())
            params = dict(module.named_parameters())
            known = set(params) | {name for name, _ in module.named_buffers()}
            inits = {init.name: numpy_helper.to_array(init) for init in proto.graph.initializer}
            report.kept = sum(name in inits for name in params)
            report.new_initializers = sum(name not in known for name in inits)
            report.aliases = sorted(node.output[0] for node in proto.graph.node
                                    if node.op_type == "Identity" and node.output[0] in params and node.input[0] in inits)
            report.folded = sorted(name for name in params if name not in inits and name not in report.aliases)
            executor = pytorch.from_onnx(buffer.getvalue())
            got = executor.inference(new_feeds)["output"]
        with torch.no_grad():
            expected = module(*(torch.from_numpy(v) for v in new_feeds.values())).numpy()
        report.forward_ok, report.forward_error = _output_check(got, expected, None)
    except Exception as err:  # noqa: BLE001 - reported
        report.error = f"{type(err).__name__}: {err}"
    return report


def default_export_table(reports: list[DefaultExportReport]) -> str:
    header = ["model", "d5 inference at batch 3 (eval) vs torch", "parameters kept by name",
              "folded away", "merged into another (Identity)", "new initializers"]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] * len(header)) + "|"]
    for r in reports:
        forward = (f"{'ok' if r.forward_ok else 'FAILED'} ({_num(r.forward_error)})" if r.error is None
                   else "FAILED: " + r.error.splitlines()[0][:120])
        lines.append(f"| {r.name} | {forward} | {r.kept} | {len(r.folded)} | {len(r.aliases)} | "
                     f"{r.new_initializers} |")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------- reporting
def failure_summary(report: ModelReport) -> str:
    """The failed checks of ``report``, one phrase each, for a table cell or a skip reason."""
    return "; ".join(dict.fromkeys(failure.split(":")[0] for failure in report.failures))


def markdown_table(reports: list[ModelReport]) -> str:
    """One row per model: the figures of issue 9 item 6."""
    header = ["model", "parameters", "ONNX ops (opset)", "fallback ops", "max forward error (ort / d5)",
              "max relative gradient error (torch fp32 noise)", "losses d5", "losses torch", "batch 4 -> 3", "result"]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] * len(header)) + "|"]
    for r in reports:
        batch = "-" if "batch_change" not in r.checks else \
            ("ok" if r.checks["batch_change"] and r.checks.get("batch_change_training") else "FAILED")
        result = "pass" if r.passed else "FAIL: " + failure_summary(r)
        cells = [r.name, f"{r.parameters:,}", f"{' '.join(r.onnx_ops)} ({r.opset})", " ".join(r.fallback_ops) or "-",
                 f"{_num(r.ort_forward_error)} / {_num(r.forward_error)}",
                 f"{_num(r.gradient_error)} ({_num(r.torch_gradient_noise)})", _losses(r.losses_d5),
                 _losses(r.losses_torch), batch, result]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.1e}"


def summary(reports: list[ModelReport]) -> dict[str, Any]:
    return {r.name: dataclasses.asdict(r) | {"passed": r.passed} for r in reports}


__all__ = ["DefaultExportReport", "ModelReport", "add_cross_entropy_loss", "check_default_export", "check_model",
           "compare_gradients", "default_export_table", "export", "exported_buffers", "failure_summary",
           "IN_SUITE", "markdown_table", "model_params", "one_torch_thread", "run_all_models", "summary"]
