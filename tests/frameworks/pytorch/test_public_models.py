"""Models users bring (issue 9 item 6): public architectures exported from torch to ONNX, run with
``d5.frameworks.pytorch.from_onnx``, and imported with ``d5.load_onnx``, given a loss and trained with d5's
PyTorch framework; d5 must compute the same outputs and gradients as torch, follow the same loss trajectory under
the same optimizer, and take another batch size.

The checks and their tolerances are in ``public_models_check.py``, the models in ``public_models.py``. A few
models that together cover most operators run in the normal suite; the rest run with ``D5_ALL_PUBLIC_MODELS=1``
(``make public-models``). ``benchmarks/public_models.py`` writes the same checks as a table
(docs/public_models.md).
"""
from __future__ import annotations

import os
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

if os.path.dirname(os.path.abspath(__file__)) not in sys.path:  # pytest's --import-mode=importlib does not add it
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from public_models import MODELS  # noqa: E402
from public_models_check import check_model, model_params, one_torch_thread  # noqa: E402

#: Models that cannot pass, with the reason (strict: a fix turns them into failures to remove from here). The
#: models of the normal suite (about 5 s together, all 13: 12 s) are public_models_check.IN_SUITE, shared with
#: tests/frameworks/tensorflow/test_public_models.py.
KNOWN_FAILURES: dict[str, str] = {}


@pytest.fixture(scope="module", autouse=True)
def torch_on_one_thread():
    with one_torch_thread():  # see public_models_check.one_torch_thread (60 s instead of 6 s on 2 cores)
        yield


@pytest.mark.parametrize("model", model_params(MODELS, KNOWN_FAILURES))
def test_exported_model_computes_and_trains_like_torch_at_any_batch_size(model):
    report = check_model(model)
    assert report.passed, f"{model.name} ({model.source}):\n  " + "\n  ".join(report.failures)
    assert set(report.checks) == {"onnxruntime", "forward", "gradients", "training", "batch_change_training",
                                  "batch_change"}
    assert report.losses_d5[-1] < report.losses_d5[0]


def test_the_checks_catch_a_converter_that_is_slightly_wrong(monkeypatch):
    # GELU's tanh approximation differs from the exact (erf) GELU ViT exports by at most ~5e-4: 1.5e-4 of the
    # output, 100 times float32 rounding. The checks must see it (a vacuous tolerance would not).
    import torch.nn.functional as F

    from d5.frameworks.pytorch.operators import activation

    monkeypatch.setattr(activation.Gelu, "forward", lambda self, x: F.gelu(x, approximate="tanh"))
    report = check_model(next(model for model in MODELS if model.name == "vit"), steps=2)
    assert not report.checks["forward"] and not report.checks["gradients"] and not report.checks["batch_change"]


def test_a_trained_buffer_fails_the_gradient_check_and_an_untrained_one_does_not():
    import numpy as np

    from public_models_check import ModelReport, compare_gradients

    grads = {"w": np.ones(3, np.float32)}
    report = ModelReport("synthetic", "")
    assert compare_gradients(report, {**grads, "mask": np.zeros(2, np.float32)}, grads, grads, "(b)")
    assert report.d5_only_params == ["mask"] and report.passed
    assert not compare_gradients(report, {**grads, "pe": np.full(2, 0.5, np.float32)}, grads, grads, "(b)")
    assert "'pe' is no torch parameter" in report.failures[0]
    assert not compare_gradients(ModelReport("synthetic", ""), {"w": np.ones(3, np.float32) * (1 + 1e-3)}, grads,
                                 grads, "(b)")
