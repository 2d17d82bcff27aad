"""The word-level LSTM language model of Zaremba, Sutskever & Vinyals 2014 ("small" configuration), the RNN
experiment of the seeds: an embedding, stacked LSTM layers unrolled over a fixed number of steps, and a
linear decoder over the vocabulary trained with softmax cross-entropy at every step.
"""
from __future__ import annotations

import numpy as np

from d5.errors import ShapeError
from d5.network.graph import Network

#: Zaremba et al. initialize every weight uniformly in [-0.1, 0.1] for the small model.
INIT_SCALE = 0.1


def lstm_lm(vocab_size: int = 10000, hidden: int = 200, layers: int = 2, steps: int = 20, seed: int = 0,
            dtype: str = "float32") -> Network:
    """Zaremba et al.'s small LSTM language model as a d5.Network (defaults: 10k words, 2 layers of 200 units,
    20 unrolled steps; 4,653,200 trainable parameters, with ONNX's two LSTM bias vectors as in PyTorch).

    Inputs ``input`` and ``label``, both (N, ``steps``) int64 word ids (``label`` is ``input`` shifted by one
    word). Outputs ``output`` (N, steps, vocab_size) logits and ``loss``, the mean cross-entropy over all
    N * steps words (perplexity is ``exp(loss)``). The graph is Gather (embedding) -> Transpose to
    time-major -> one ONNX LSTM node per layer (zero initial state: each sequence of ``steps`` words
    starts afresh) -> Gemm decoder -> SoftmaxCrossEntropyLoss. Parameters: ``encoder.weight`` (V, H),
    ``lstm{l}.W`` / ``.R`` / ``.B`` (ONNX gate order i, o, f, c), ``decoder.weight`` (V, H), ``decoder.bias``.

    >>> net = lstm_lm()
    >>> sum(net.params[p].size for p in net.get_params())
    4653200
    >>> [n.op_type for n in net.nodes][:4]
    ['Gather', 'Transpose', 'LSTM', 'Reshape']
    """
    for label, value in (("vocab_size", vocab_size), ("hidden", hidden), ("layers", layers), ("steps", steps)):
        if int(value) < 1:
            raise ShapeError(f"lstm_lm: {label} must be a positive integer, got {value}")
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)

    def uniform(*shape: int) -> np.ndarray:
        return rng.uniform(-INIT_SCALE, INIT_SCALE, size=shape).astype(dtype)

    net = Network(f"lstm_lm_{layers}x{hidden}")
    net.add_input("input", ("N", steps), "int64")
    net.add_input("label", ("N", steps), "int64")
    net.add_param("encoder.weight", uniform(vocab_size, hidden))
    # Reshape targets are int64 initializers (not trained); -1 lets the symbolic batch size through.
    net.add_param("shape.time_major", np.array([steps, -1, hidden], np.int64), trainable=False)
    net.add_param("shape.rows", np.array([-1, hidden], np.int64), trainable=False)
    net.add_param("shape.output", np.array([-1, steps, vocab_size], np.int64), trainable=False)
    net.add_param("shape.labels", np.array([-1], np.int64), trainable=False)

    net.add_node("Gather", ["encoder.weight", "input"], ["embedded"], name="encoder", axis=0)
    # ONNX LSTM reads (steps, batch, features) in its default layout; layout=1 is not supported everywhere.
    net.add_node("Transpose", ["embedded"], ["lstm0.input"], name="to_time_major", perm=[1, 0, 2])
    x = "lstm0.input"
    for layer in range(layers):
        name = f"lstm{layer}"
        net.add_param(f"{name}.W", uniform(1, 4 * hidden, hidden))
        net.add_param(f"{name}.R", uniform(1, 4 * hidden, hidden))
        net.add_param(f"{name}.B", uniform(1, 8 * hidden))
        net.add_node("LSTM", [x, f"{name}.W", f"{name}.R", f"{name}.B"], [f"{name}.Y"], name=name,
                     hidden_size=hidden, direction="forward")
        # Y is (steps, num_directions=1, N, hidden); drop the directions axis.
        net.add_node("Reshape", [f"{name}.Y", "shape.time_major"], [f"{name}.output"], name=f"{name}.squeeze")
        x = f"{name}.output"
    net.add_node("Transpose", [x], ["batch_major"], name="to_batch_major", perm=[1, 0, 2])
    net.add_node("Reshape", ["batch_major", "shape.rows"], ["rows"], name="rows")
    net.add_param("decoder.weight", uniform(vocab_size, hidden))
    net.add_param("decoder.bias", np.zeros(vocab_size, dtype))
    net.add_node("Gemm", ["rows", "decoder.weight", "decoder.bias"], ["logits"], name="decoder", transB=1)
    net.add_node("Reshape", ["logits", "shape.output"], ["output"], name="output")
    net.add_node("Reshape", ["label", "shape.labels"], ["flat_label"], name="flat_label")
    net.add_node("SoftmaxCrossEntropyLoss", ["logits", "flat_label"], ["loss"], name="loss", reduction="mean")
    net.add_output("output")
    net.add_output("loss")
    return net
