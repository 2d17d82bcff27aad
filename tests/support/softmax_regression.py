"""A three-class softmax regression (``logits = x @ W``, mean cross-entropy) with its executor and data, for the
training level's tests of metrics, events and resources: the whole computation is a few lines of NumPy, so a
test can check a metric against its own arithmetic. (It is not a framework: the contract suites test those.)"""
import time

import numpy as np

from d5.training.dataset import NumpyDataset


class SoftmaxRegressionNetwork:
    """The live state: W (3, 3) and, after a training pass, W_grad."""

    outputs = ["output", "loss"]

    def __init__(self):
        self.tensors = {"W": np.zeros((3, 3))}

    def get_params(self):
        return ["W"]

    def gradient(self, y="loss"):
        return [("W", "W_grad")]

    def fetch_tensors(self, names):
        return [self.tensors[name] for name in names]

    def feed_tensor(self, name, value, is_param=False):
        self.tensors[name] = value


class SoftmaxRegression:
    """The executor; ``work='spin'`` or ``'sleep'`` makes each backward pass also busy the CPU or sleep for
    ``seconds`` (for resource metrics)."""

    def __init__(self, work="none", seconds=0.0):
        self.network, self.work, self.seconds = SoftmaxRegressionNetwork(), work, seconds

    def inference(self, inputs):
        logits = inputs["input"] @ self.network.tensors["W"]
        log_prob = logits - logits.max(1, keepdims=True)
        log_prob -= np.log(np.exp(log_prob).sum(1, keepdims=True))
        self._log_prob = log_prob
        return {"output": logits, "loss": -log_prob[np.arange(len(log_prob)), inputs["label"]].mean()}

    def inference_and_backprop(self, inputs, y="loss"):
        end = time.perf_counter() + self.seconds
        if self.work == "spin":
            while time.perf_counter() < end:
                pass
        elif self.work == "sleep":
            time.sleep(self.seconds)
        outputs = self.inference(inputs)
        d_logits = np.exp(self._log_prob)
        d_logits[np.arange(len(d_logits)), inputs["label"]] -= 1.0
        self.network.tensors["W_grad"] = inputs["input"].T @ d_logits / len(d_logits)
        return outputs


def three_blobs(n, seed, noise=1.2):
    """``n`` points around the three unit vectors (scaled by 3, Gaussian noise of scale ``noise``), labels 0..2."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 3, n)
    return NumpyDataset(3.0 * np.eye(3)[labels] + noise * rng.standard_normal((n, 3)), labels)
