"""recipes/digits_mlp.py and recipes/ptb_lstm.py, and the Perplexity metric they need.

digits_mlp is offline and takes seconds, so it runs for real on every installed framework d5 implements
(``d5.frameworks.available()``): it must reach its threshold on each, and each native framework must retrace the
reference run (the oracle). ptb_lstm runs through `d5 run` on PTB files generated
in the official format; its update is checked against Zaremba et al.'s clipped SGD step computed by hand from
the reference framework's gradient. Perplexity is checked against exp of the per-word cross-entropy computed
with NumPy from the network's logits."""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib.util
import io
import json
import math
import runpy
from pathlib import Path

import numpy as np
import pytest

import d5
import d5.frameworks
import d5.frameworks.reference as reference
from d5.bench.results import read_result
from d5.cli import main
from d5.datasets import ptb
from d5.datasets.storage import Checksum, RemoteFile
from d5.errors import D5Error
from d5.models import lstm_lm
from d5.network.graph import gradient_name
from d5.training.dataset import TokenWindowDataset
from d5.training.metrics import Perplexity, TestAccuracy
from d5.training.sampler import OrderedSampler
from d5.training.trainer import Trainer

ROOT = Path(__file__).resolve().parents[2]
DIGITS_RECIPE = ROOT / "recipes" / "digits_mlp.py"
PTB_RECIPE = ROOT / "recipes" / "ptb_lstm.py"
HAS_TORCH = importlib.util.find_spec("torch") is not None
needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="needs torch (d5.frameworks.pytorch)")
#: Every installed framework d5 implements, the reference (the oracle) first; NATIVE: those checked against it.
FRAMEWORKS = d5.frameworks.available()
NATIVE = [name for name in FRAMEWORKS if name != "reference"]


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    """$D5_DATA_DIR in a temporary directory, and a HOME that keeps the user's ~/.cache/d5 out of reach."""
    monkeypatch.setenv("D5_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return tmp_path / "data"


# ------------------------------------------------------------------------------------------------ Perplexity

def log_softmax_nll(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Per-word cross-entropy (nats) of ``labels`` under ``logits`` (..., V), in float64: the oracle."""
    logits = logits.astype(np.float64)
    shifted = logits - logits.max(axis=-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    return -np.take_along_axis(log_probs, labels[..., None], axis=-1)[..., 0]


def tiny_language_model_run(epochs: int = 2):
    """A small lstm_lm trained for ``epochs`` with Perplexity on a validation set of 9 windows in batches of 4,
    so the last batch holds 1 window: batch means would weigh its words 4 times too much."""
    rng = np.random.default_rng(0)
    vocab, steps = 30, 5
    train = TokenWindowDataset(rng.integers(0, vocab, size=400), batch_size=4, steps=steps)
    test = TokenWindowDataset(rng.integers(0, vocab, size=3 * (3 * steps + 1)), batch_size=3, steps=steps)
    assert len(test) == 9
    executor = reference.from_model(lstm_lm(vocab_size=vocab, hidden=8, layers=1, steps=steps, seed=0))
    perplexity = Perplexity()
    trainer = Trainer(train.sampler(), OrderedSampler(test, 4), executor,
                      d5.GradientDescent(executor, 2.0, clip_norm=1.0), events=[perplexity], progress=False)
    trainer.run(epochs)
    return perplexity, executor, test


def test_perplexity_is_exp_of_the_word_weighted_mean_cross_entropy_of_the_logits():
    perplexity, executor, test = tiny_language_model_run(epochs=2)
    windows = test[np.arange(len(test))]
    nll = log_softmax_nll(executor.inference(windows)["output"], windows["label"])   # (9, steps)
    expected = math.exp(nll.mean())
    assert perplexity.value == pytest.approx(expected, rel=1e-5)
    assert perplexity.cross_entropy == pytest.approx(nll.mean(), rel=1e-5)
    assert perplexity.words == nll.size == 45
    assert len(perplexity.history) == 2 and perplexity.history[-1] == perplexity.value
    # Averaging the three batch means instead would give another number (the test would catch that mistake).
    batch_means = [nll[:4].mean(), nll[4:8].mean(), nll[8:].mean()]
    assert abs(math.exp(np.mean(batch_means)) - expected) > 1e-3 * expected


def test_perplexity_is_lower_is_better_and_checks_its_input():
    perplexity = Perplexity()
    assert perplexity.higher_is_better is False and not perplexity.is_met(1e9)   # no result yet
    perplexity.add(np.array(math.log(120.0), dtype=np.float32), words=400)
    perplexity._record(0, perplexity.current())
    assert perplexity.value == pytest.approx(120.0, rel=1e-6)
    assert perplexity.is_met(130.0) and not perplexity.is_met(110.0)
    assert "target <= 130: met" in perplexity.describe(130.0)
    perplexity.add(1e6, words=1)   # a diverged batch: inf, not an OverflowError
    assert perplexity.current() == math.inf
    for words in (0, -3, 2.5, True):
        with pytest.raises(D5Error, match="words must be an int"):
            perplexity.add(1.0, words=words)
    with pytest.raises(D5Error, match="reduction='mean'"):
        perplexity.add(np.ones(3), words=3)
    with pytest.raises(D5Error, match="no words counted"):
        Perplexity().current()
    executor = reference.from_model(lstm_lm(vocab_size=10, hidden=4, layers=1, steps=3))
    train = TokenWindowDataset(np.arange(40) % 10, batch_size=2, steps=3)
    with pytest.raises(D5Error, match="validation sampler"):
        Trainer(train.sampler(), None, executor, d5.GradientDescent(executor), events=[Perplexity()],
                progress=False).run(1)


def test_perplexity_state_round_trips_and_refuses_another_metrics_state():
    perplexity, _, _ = tiny_language_model_run(epochs=1)
    state = perplexity.state_dict()
    json.dumps(state)   # plain data only: it goes into a checkpoint
    restored = Perplexity()
    restored.load_state_dict(state)
    assert (restored.value, restored.history, restored.words, restored.nll_sum) == \
           (perplexity.value, perplexity.history, perplexity.words, perplexity.nll_sum)
    restored.history.append(1.0)
    assert len(perplexity.history) == 1   # the state is a copy, not the metric's live list
    with pytest.raises(D5Error, match="TestAccuracy"):
        restored.load_state_dict(TestAccuracy().state_dict())


# ------------------------------------------------------------------------------------------------ digits_mlp

def test_digits_mlp_components_and_the_source_of_its_threshold():
    recipe = runpy.run_path(str(DIGITS_RECIPE))   # not as __main__: the components only
    fixed, mutable, metrics = recipe["FIXED"], recipe["MUTABLE"], recipe["METRICS"]
    assert fixed["model"] == "mlp" and fixed["dataset"] == "digits" and fixed["epochs"] == 20
    assert fixed["model_kwarg"] == {"input_shape": (1, 8, 8), "hidden": (256,), "num_classes": 10}
    assert mutable["optimizer"] is reference.MomentumOptimizer and mutable["optimizer_args"] == (0.05, 0.9)
    (schedule,) = mutable["events"]
    assert [schedule.fn(e) for e in (0, 14, 15, 19)] == pytest.approx([0.05, 0.05, 0.005, 0.005])
    assert [(type(m).__name__, t) for m, t in metrics] == [("TestAccuracy", 97.0), ("WallclockTime", None),
                                                             ("Throughput", None)]
    assert "plot_digits_classification" in DIGITS_RECIPE.read_text()


def test_the_threshold_is_what_scikit_learns_digits_example_reaches():
    """The docstring's source, rerun: SVC(gamma=0.001) trained on the first half of the digits, tested on the
    second half, as in scikit-learn's "Recognizing hand-written digits" (its report says accuracy 0.97)."""
    from sklearn import datasets, svm

    digits = datasets.load_digits()
    data, half = digits.images.reshape(len(digits.images), -1), len(digits.images) // 2
    classifier = svm.SVC(gamma=0.001).fit(data[:half], digits.target[:half])
    accuracy = 100.0 * np.mean(classifier.predict(data[half:]) == digits.target[half:])
    assert round(accuracy) == 97


@pytest.fixture(scope="module")
def digits_runs(tmp_path_factory):
    """The whole digits_mlp benchmark (seconds) on a framework, run once per module when a test first asks for
    it: ``digits_runs(framework)`` is (exit status, result)."""
    directory = tmp_path_factory.mktemp("digits")
    runs = {}

    def run(framework):
        if framework not in runs:
            out = directory / f"{framework}.json"
            argv = [] if framework == "reference" else ["--framework", framework]   # the reference run: as written
            status = main(["run", "digits_mlp", *argv, "--json", str(out)])
            runs[framework] = (status, read_result(out))
        return runs[framework]
    return run


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_digits_mlp_reaches_its_threshold(digits_runs, framework):
    status, record = digits_runs(framework)
    accuracy = record["figures"]["TestAccuracy"]
    assert status == 0 and accuracy["met"] and accuracy["value"] >= 97.0 and accuracy["threshold"] == 97.0
    extra = record["extra"]
    assert extra["training"]["steps"] == 20 * math.ceil(1438 / 32) and extra["framework"] == framework
    assert extra["overrides"] == ({} if framework == "reference" else {"framework": framework})


@pytest.mark.parametrize("framework", NATIVE)
def test_digits_mlp_on_each_framework_retraces_the_reference_run(digits_runs, framework):
    (_, oracle), (_, native) = digits_runs("reference"), digits_runs(framework)
    np.testing.assert_allclose(native["extra"]["training"]["train_loss"],
                               oracle["extra"]["training"]["train_loss"], rtol=1e-3)
    assert native["figures"]["TestAccuracy"]["value"] == pytest.approx(
        oracle["figures"]["TestAccuracy"]["value"], abs=0.6)   # at most two of the 359 test images differ


# -------------------------------------------------------------------------------------------------- ptb_lstm

def ptb_text(lines: int, seed: int, words: int = 60) -> str:
    """A file in PTB's format: one sentence a line, with a leading and a trailing space, lower-case words, ``N``
    for numbers and ``<unk>`` for rare words; word frequencies skewed like a language's (Zipf)."""
    rng = np.random.default_rng(seed)
    vocabulary = [f"w{i}" for i in range(words)] + ["N", "<unk>", "the", "n't", "$"]
    weights = 1.0 / np.arange(1, len(vocabulary) + 1)
    sentences = (rng.choice(vocabulary, size=int(rng.integers(1, 15)), p=weights / weights.sum())
                 for _ in range(lines))
    return "".join(" " + " ".join(sentence) + " \n" for sentence in sentences)


@pytest.fixture
def ptb_files(data_dir, monkeypatch):
    """ptb.{train,valid,test}.txt in $D5_DATA_DIR/ptb, trusted by their SHA-256 (no generated file can match
    the official checksums); the corpus read from them."""
    texts = {"train": ptb_text(300, 1), "valid": ptb_text(40, 2), "test": ptb_text(60, 3)}
    directory = data_dir / "ptb"
    directory.mkdir(parents=True)
    for split, text in texts.items():
        (directory / f"ptb.{split}.txt").write_text(text)
    files = tuple(RemoteFile(f"ptb.{split}.txt", Checksum("sha256", hashlib.sha256(text.encode()).hexdigest()))
                  for split, text in texts.items())
    monkeypatch.setattr(ptb, "PTB", dataclasses.replace(ptb.PTB, files=files))
    return ptb.load_ptb_corpus(download=False)


@needs_torch
def test_ptb_lstm_components_follow_zaremba_et_al():
    recipe = runpy.run_path(str(PTB_RECIPE))
    fixed, mutable, metrics = recipe["FIXED"], recipe["MUTABLE"], recipe["METRICS"]
    assert fixed["model"] == "lstm_lm" and fixed["epochs"] == 13
    assert fixed["model_kwarg"] == {"vocab_size": 10000, "hidden": 200, "layers": 2, "steps": 20}
    assert fixed["dataset"] == "ptb" and fixed["dataset_kwarg"] == {"batch_size": 20, "steps": 20,
                                                                     "test_split": "test"}
    assert fixed["train_sampler"] is d5.OrderedSampler and mutable["batch_size"] == 20
    assert mutable["optimizer"] is d5.frameworks.pytorch.GradientDescent
    # Their rate 1.0 and clipping norm 5 for a loss summed over 20 steps = 20 and 0.25 for d5's mean.
    assert mutable["optimizer_args"] == (20.0,) and mutable["optimizer_kwarg"] == {"clip_norm": 0.25}
    (schedule,) = mutable["events"]
    assert schedule.per == "epoch"
    # TensorFlow's ptb_word_lm.py: lr = 1.0 * 0.5 ** max(i + 1 - max_epoch, 0), max_epoch = 4, 13 epochs.
    assert [schedule.fn(e) for e in range(13)] == pytest.approx([20.0 * 0.5 ** max(e + 1 - 4, 0) for e in range(13)])
    assert [schedule.fn(e) for e in (3, 4, 12)] == pytest.approx([20.0, 10.0, 20.0 / 2 ** 9])
    assert [(type(m).__name__, t) for m, t in metrics][0] == ("Perplexity", 130.0)
    text = PTB_RECIPE.read_text()
    assert "114.5" in text and "1409.2329" in text and "1703.10724" in text


@needs_torch
@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("decoder_bias", [10.0, 0.0], ids=["clipped", "not-clipped"])
def test_ptb_lstm_step_is_zarembas_clipped_sgd_step(decoder_bias, framework):
    """One step of the recipe's optimizer, on the recipe's framework and as ``--framework NAME`` swaps it in (that
    framework's from_model and its optimizer of the same name), equals ``p - 1.0 * clip_by_global_norm(20 g, 5)``
    (their step on a cost summed over 20 steps), with ``g`` the reference framework's gradient of d5's mean loss."""
    recipe = runpy.run_path(str(PTB_RECIPE))
    mutable = recipe["MUTABLE"]
    steps = recipe["FIXED"]["model_kwarg"]["steps"]
    network = lstm_lm(vocab_size=50, hidden=16, layers=2, steps=steps, seed=0)
    bias = network.params["decoder.bias"].copy()
    bias[0] = decoder_bias   # word 0 never occurs: a strong wrong guess gives a gradient to clip
    network.feed_tensor("decoder.bias", bias, is_param=True)
    tokens = np.random.default_rng(0).integers(1, 50, size=(20, steps + 1))
    batch = {"input": tokens[:, :steps], "label": tokens[:, 1:]}

    oracle = reference.from_model(network)
    oracle.inference_and_backprop(batch)
    names = network.get_params()
    before = dict(zip(names, oracle.network.fetch_tensors(names)))
    gradients = dict(zip(names, oracle.network.fetch_tensors([gradient_name(name) for name in names])))
    summed = {name: steps * gradients[name].astype(np.float64) for name in names}   # their cost's gradient
    norm = math.sqrt(sum(float(np.sum(g * g)) for g in summed.values()))
    assert (norm > 5.0) == (decoder_bias > 0)
    expected = {name: before[name] - 1.0 * min(1.0, 5.0 / norm) * summed[name] for name in names}

    module = d5.frameworks.get(framework)
    assert mutable["executor"] is d5.frameworks.pytorch.from_model   # the recipe's own: checked as 'pytorch'
    executor = module.from_model(network)
    optimizer = getattr(module, mutable["optimizer"].__name__)(executor, *mutable["optimizer_args"],
                                                               **mutable["optimizer_kwarg"])
    optimizer.step(batch)
    after = dict(zip(names, executor.network.fetch_tensors(names)))
    for name in names:
        np.testing.assert_allclose(after[name], expected[name], rtol=0, atol=1e-5, err_msg=name)


def ptb_smoke_run(directory: Path, framework: str) -> tuple[int, str, dict]:
    """ptb_lstm for 2 steps (``--epochs 1 --subset 40``) on the CPU, with ``--framework`` unless ``framework`` is the
    recipe's own (pytorch): (exit status, what it printed, its result)."""
    out = directory / f"ptb-{framework}.json"
    argv = ["--epochs", "1", "--subset", "40", "--device", "cpu"]
    argv += [] if framework == "pytorch" else ["--framework", framework]
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        status = main(["run", "ptb_lstm", *argv, "--json", str(out)])
    return status, printed.getvalue(), read_result(out)


@needs_torch
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_ptb_lstm_smoke_run_on_generated_ptb_files(ptb_files, tmp_path, framework):
    status, printed, record = ptb_smoke_run(tmp_path, framework)
    assert status == 1   # a 2-step smoke test misses 130
    assert "| Perplexity" in printed and "| 130        | NO" in printed
    flags = "--epochs 1 --subset 40" if framework == "pytorch" else f"--epochs 1 --framework {framework} --subset 40"
    assert f"recipe MODIFIED by {flags}: ran to the end, not a valid benchmark result; missed " \
           "Perplexity (exit status 1)" in printed  # --device is not a modification
    perplexity = record["figures"]["Perplexity"]
    assert math.isfinite(perplexity["value"]) and 1.0 < perplexity["value"] < 1e6
    assert perplexity["higher_is_better"] is False and perplexity["met"] is False
    # 20 test windows of 20 words (the generated test split fills one window per row).
    assert perplexity["result"]["words"] == 400 and perplexity["result"]["history"] == [perplexity["value"]]
    assert perplexity["result"]["cross_entropy"] == pytest.approx(math.log(perplexity["value"]))
    extra = record["extra"]
    assert extra["training"]["steps"] == 2 and extra["framework"] == framework and extra["lr"] == 20.0
    assert extra["recipe"]["components"]["dataset"] == "ptb"
    if framework != "reference":   # same seed, data and initial weights: the oracle's numbers
        _, _, oracle = ptb_smoke_run(tmp_path, "reference")
        np.testing.assert_allclose(extra["training"]["train_loss"], oracle["extra"]["training"]["train_loss"],
                                   rtol=1e-3)
        # The per-word cross-entropy to the same 1e-3, not the perplexity: exp(~11 nats) turns a 1e-4 relative
        # difference of the cross-entropy (rounding, amplified by two steps at rate 20) into 1e-3 of the perplexity.
        assert perplexity["result"]["cross_entropy"] == pytest.approx(
            oracle["figures"]["Perplexity"]["result"]["cross_entropy"], rel=1e-3)


@needs_torch
def test_ptb_lstm_beats_a_uniform_guess_on_generated_text(ptb_files, tmp_path):
    """Six short epochs (36 steps, the schedule halving the rate from the fifth) bring the test perplexity
    below the generated vocabulary's size, a uniform guess over the words that occur (the model's 10,000
    outputs start near a uniform guess over all of them)."""
    out = tmp_path / "ptb.json"
    assert main(["run", "ptb_lstm", "--epochs", "6", "--device", "cpu", "--json", str(out)]) in (0, 1)
    history = read_result(out)["figures"]["Perplexity"]["result"]["history"]
    assert len(history) == 6 and history[0] < 10000
    assert history[-1] < len(ptb_files.vocabulary) == 66
