"""Models users bring, on MXNet: the public architectures of ``tests/frameworks/pytorch/public_models.py``
exported from torch to ONNX, run with ``d5.frameworks.mxnet.from_onnx``, imported with ``d5.load_onnx``, given
a cross-entropy loss and trained with d5's MXNet framework and its native optimizers; d5 must compute the
same outputs and gradients as torch, follow the same loss trajectory under the same optimizer, and take another
batch size.

The export, the checks and their tolerances -- the same as on PyTorch, MXNet needs no looser one -- are
``public_models_check.check_model(framework="mxnet")``; the models of the normal suite are
``public_models_check.IN_SUITE``, the rest run with ``D5_ALL_PUBLIC_MODELS=1`` (``make public-models``), as in
``tests/frameworks/pytorch/test_public_models.py``. All 13 pass. (DenseNet's composed backward pass crashed
MXNet's oneDNN concat kernel with a SIGFPE; the Concat converter now uses MXNet's NumPy concatenate, see its
module.)
"""
from __future__ import annotations

import os
import sys

import pytest

pytest.importorskip("torch")  # the models and the oracle are torch's
pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

PUBLIC_MODELS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "pytorch")
if PUBLIC_MODELS not in sys.path:  # pytest's --import-mode=importlib does not add it
    sys.path.insert(0, PUBLIC_MODELS)
from public_models import MODELS  # noqa: E402
from public_models_check import check_model, model_params, one_torch_thread  # noqa: E402

#: Models that cannot pass on MXNet, with the reason (strict: a fix turns them into failures to remove).
KNOWN_FAILURES: dict[str, str] = {}

@pytest.fixture(scope="module", autouse=True)
def torch_on_one_thread():
    with one_torch_thread():  # the torch oracle only (public_models_check.one_torch_thread)
        yield


@pytest.mark.parametrize("model", model_params(MODELS, KNOWN_FAILURES))
def test_exported_model_computes_and_trains_like_torch_at_any_batch_size_on_mxnet(model):
    report = check_model(model, framework="mxnet")
    assert report.passed, f"{model.name} ({model.source}) on mxnet:\n  " + "\n  ".join(report.failures)
    assert set(report.checks) == {"onnxruntime", "forward", "gradients", "training", "batch_change_training",
                                  "batch_change"}
    assert report.framework == "mxnet" and report.optimizer.startswith(("Momentum(", "Adam("))
    assert report.losses_d5[-1] < report.losses_d5[0]


def test_the_checks_catch_an_mxnet_converter_that_is_slightly_wrong(monkeypatch):
    # As on PyTorch: GELU's tanh approximation is at most ~5e-4 from the exact (erf) GELU that ViT exports, 1.5e-4
    # of the output. Checks run through MXNet must see it, so they do run MXNet's operators.
    import mxnet as mx

    from d5.frameworks.mxnet.operators import activation

    monkeypatch.setattr(activation.Gelu, "__call__",
                        lambda self, x: 0.5 * x * (1 + mx.sym.tanh(0.7978845608 * (x + 0.044715 * x ** 3))))
    report = check_model(next(model for model in MODELS if model.name == "vit"), steps=2, framework="mxnet")
    assert not report.checks["forward"] and not report.checks["gradients"] and not report.checks["batch_change"]
