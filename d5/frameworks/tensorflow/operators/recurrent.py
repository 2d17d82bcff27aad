"""Recurrent layers as native TensorFlow operations: ONNX LSTM (gates i, o, f, c; peepholes i, o, f), GRU (gates
z, r, h; linear_before_reset) and RNN, as explicit time loops so every ONNX feature the reference supports carries
over: directions (forward, reverse, bidirectional), layouts 0/1, initial states, sequence_lens (past a sequence's
end the state is kept and the output is zero), clip, and the listed activations with their alpha/beta. Outputs
``(Y, Y_h[, Y_c])``; ``tf.GradientTape`` differentiates the loop (BPTT).

The time axis is static (the executor traces per input shape): up to :data:`UNROLL_LIMIT` steps the loop is
unrolled in Python (one fused graph, quick to trace at these lengths), longer sequences run ``tf.scan`` (one
while loop, traced once). float16/bfloat16 compute in float32 and float64 wins over float32, as the reference.
"""
from __future__ import annotations

import tensorflow as tf

from d5.errors import ShapeError
from d5.frameworks.tensorflow.operators import TFOp, register
from d5.frameworks.tensorflow.operators._helpers import static, static_shape
from d5.ops.onnx_attributes import adopt, operator_attributes
from d5.ops.sequence_plans import (RecurrentSpec, check_hidden_size, check_recurrent_attributes,
                                   check_recurrent_inputs, check_recurrent_optional, check_recurrent_ranks,
                                   check_recurrent_weights, check_sequence_lens_count, gru_cell, lstm_cell,
                                   sequence_lengths)

#: Sequences up to this many steps are unrolled; longer ones run tf.scan.
UNROLL_LIMIT = 64


def _hard_sigmoid(a, alpha, beta):
    v = alpha * a + beta
    # Inside (0, 1) the slope is alpha; at and beyond the corners 0 (the reference's derivative).
    return tf.where((v > 0) & (v < 1), v, tf.stop_gradient(tf.clip_by_value(v, 0.0, 1.0)))


# name -> f(a, alpha, beta), each with the reference's derivative; which take alpha/beta:
# onnx_attributes.RECURRENT_ACTIVATIONS
_ACTIVATIONS = {
    "sigmoid": lambda a, al, be: tf.sigmoid(a),
    "tanh": lambda a, al, be: tf.tanh(a),
    "relu": lambda a, al, be: tf.nn.relu(a),
    "leakyrelu": lambda a, al, be: tf.where(a >= 0, a, al * a),
    "thresholdedrelu": lambda a, al, be: tf.where(a > al, a, tf.zeros_like(a)),
    "hardsigmoid": _hard_sigmoid,
    "affine": lambda a, al, be: al * a + be,
    "scaledtanh": lambda a, al, be: al * tf.tanh(be * a),
    "elu": lambda a, al, be: tf.where(a >= 0, a, al * tf.math.expm1(tf.minimum(a, 0.0))),
    "softsign": lambda a, al, be: tf.nn.softsign(a),
    "softplus": lambda a, al, be: tf.math.softplus(a),
}


class _Recurrent(TFOp, RecurrentSpec):
    def __init__(self, **attributes) -> None:
        attributes = adopt(self, operator_attributes(self.op_name, attributes))
        self.activations = [(_ACTIVATIONS[name], alpha, beta) for name, alpha, beta in attributes.activations]
        check_recurrent_attributes(self.op_name, attributes)

    def _act(self, index: int, a):
        if self.clip is not None:
            # Clipped entries pass no gradient, at the bound too (the reference's |a| >= clip).
            clipped = tf.stop_gradient(tf.clip_by_value(a, -self.clip, self.clip))
            a = tf.where(tf.abs(a) >= self.clip, clipped, a)
        fn, alpha, beta = self.activations[index]
        return fn(a, alpha, beta)

    def __call__(self, x, w, r, b=None, sequence_lens=None, initial_h=None, initial_c=None, p=None):
        name = self.op_name
        check_recurrent_inputs(name, x, w, r)
        check_recurrent_ranks(name, tuple(x.shape), tuple(w.shape), tuple(r.shape))
        out_dtype = x.dtype
        given = [v for v in (x, w, r, b, initial_h, initial_c, p) if v is not None]
        if not all(v.dtype.is_floating for v in given):
            raise ShapeError(f"{name}: expected floating-point inputs, got dtypes {[v.dtype.name for v in given]}")
        dtype = tf.float64 if any(v.dtype == tf.float64 for v in given) else tf.float32

        def cast(v):
            return None if v is None else (v if v.dtype == dtype else tf.cast(v, dtype))

        x, w, r, b, initial_h, initial_c, p = (cast(v) for v in (x, w, r, b, initial_h, initial_c, p))
        if self.layout:
            x = tf.transpose(x, [1, 0, 2])
            initial_h = None if initial_h is None else tf.transpose(initial_h, [1, 0, 2])
            initial_c = None if initial_c is None else tf.transpose(initial_c, [1, 0, 2])
        seq, batch, features = static_shape(x)
        hidden = r.shape[-1]
        dirs, gates = self.num_directions, self.gates
        self._check_shapes(x, w, r, b, initial_h, initial_c, p, hidden)
        zeros = tf.zeros((batch, hidden), dtype)
        mask = self._mask(sequence_lens, seq, batch)
        ys, hs, cs = [], [], []
        for d in range(dirs):
            xw = tf.reshape(tf.matmul(tf.reshape(x, [seq * batch, features]), w[d], transpose_b=True),
                            [seq, batch, gates * hidden])  # every step's input projection: one GEMM
            rb = None
            if b is not None:
                xw = xw + b[d, :gates * hidden]
                rb = b[d, gates * hidden:]
            h0 = zeros if initial_h is None else initial_h[d]
            c0 = zeros if initial_c is None else initial_c[d]
            y, h, c = self._run(d, xw, r[d], rb, None if p is None else p[d], h0, c0, mask, hidden)
            ys.append(y)
            hs.append(h)
            cs.append(c)
        y = tf.stack(ys, axis=1)                                # (seq, dirs, batch, hidden)
        y_h = tf.stack(hs)
        outputs = [tf.transpose(y, [2, 0, 1, 3]) if self.layout else y,
                   tf.transpose(y_h, [1, 0, 2]) if self.layout else y_h]
        if self.has_cell_state:
            y_c = tf.stack(cs)
            outputs.append(tf.transpose(y_c, [1, 0, 2]) if self.layout else y_c)
        return tuple(o if o.dtype == out_dtype else tf.cast(o, out_dtype) for o in outputs)

    def _check_shapes(self, x, w, r, b, initial_h, initial_c, p, hidden):
        name, dirs, gates = self.op_name, self.num_directions, self.gates
        check_hidden_size(name, self.hidden_size, tuple(r.shape))
        check_recurrent_weights(name, direction=self.direction, dirs=dirs, gates=gates, hidden=hidden,
                                x_shape=tuple(x.shape), w_shape=tuple(w.shape), r_shape=tuple(r.shape))
        # initial states are checked after the layout transpose: (dirs, batch, hidden) here either way.
        b, initial_h, initial_c, p = (None if v is None else tuple(v.shape) for v in (b, initial_h, initial_c, p))
        check_recurrent_optional(name, dirs=dirs, gates=gates, hidden=hidden, state=(dirs, x.shape[1], hidden), b=b,
                                 initial_h=initial_h, initial_c=initial_c, p=p, note=" (in layout 0)")

    def _mask(self, sequence_lens, seq: int, batch: int):
        """(seq, batch, 1) booleans, True where a step is inside its sequence; None without sequence_lens or
        when every sequence is known to be whole."""
        if sequence_lens is None:
            return None
        check_sequence_lens_count(self.op_name, sequence_lens.shape.num_elements(), batch,
                                  tuple(sequence_lens.shape))
        known = static(sequence_lens)
        if known is not None and sequence_lengths(self.op_name, known, batch, seq) is None:
            return None
        lens = tf.cast(tf.reshape(sequence_lens, [-1]), tf.int64)
        return (tf.range(seq, dtype=tf.int64)[:, None] < lens[None, :])[:, :, None]

    def _run(self, d, xw, r, rb, p, h, c, mask, hidden):
        """One direction's time loop over ``xw`` (seq, batch, gates * hidden): (Y, last h, last c)."""
        reverse = self.direction == "reverse" or d == 1
        acts = len(self.default_activations) * d
        seq = xw.shape[0]

        def step(state, xw_t, m):
            h, c = state
            h_new, c_new = self._step(acts, xw_t, h, c, r, rb, p, hidden)
            if m is None:
                return (h_new, c_new), h_new
            h_kept = tf.where(m, h_new, h)  # past a sequence's end: keep the state, output zeros
            c_kept = None if c_new is None else tf.where(m, c_new, c)
            return (h_kept, c_kept), tf.where(m, h_new, tf.zeros_like(h_new))

        if not self.has_cell_state:
            c = None
        if seq <= UNROLL_LIMIT:
            outputs = [None] * seq
            for t in (range(seq - 1, -1, -1) if reverse else range(seq)):
                (h, c), outputs[t] = step((h, c), xw[t], None if mask is None else mask[t])
            return tf.stack(outputs), h, c
        return self._scan(step, xw, h, c, mask, reverse)

    def _scan(self, step, xw, h, c, mask, reverse):
        """The loop as one tf.scan (a while loop) over the time axis; its state carries h (and c) and the step's
        output, whose stacked values are Y."""
        cell = self.has_cell_state
        elems = (xw,) if mask is None else (xw, mask)

        def body(carry, elem):
            state = (carry[0], carry[1] if cell else None)
            (h_new, c_new), y = step(state, elem[0], elem[1] if len(elem) > 1 else None)
            return (h_new, c_new if cell else carry[1], y)

        placeholder = c if cell else tf.zeros_like(h)  # tf.scan's state cannot hold None
        final_h, final_c, y = tf.scan(body, elems, initializer=(h, placeholder, tf.zeros_like(h)), reverse=reverse)
        return y, final_h[-1 if not reverse else 0], (final_c[-1 if not reverse else 0] if cell else None)

    def _step(self, acts, xw, h, c, r, rb, p, hidden):
        raise NotImplementedError


@register("LSTM")
class LSTM(_Recurrent):
    """ONNX LSTM: inputs X, W, R, optional B, sequence_lens, initial_h, initial_c, P; outputs Y, Y_h, Y_c."""

    op_name = "LSTM"

    def _step(self, acts, xw, h, c, r, rb, p, n):
        pre = xw + tf.matmul(h, r, transpose_b=True)
        if rb is not None:
            pre = pre + rb
        fn, alpha, beta = self.activations[acts + 2]  # h(): the reference applies no clip to the cell output
        return lstm_cell(pre, c, p, n, lambda a: self._act(acts, a), lambda a: self._act(acts + 1, a),
                         lambda a: fn(a, alpha, beta))


@register("GRU")
class GRU(_Recurrent):
    """ONNX GRU: inputs X, W, R, optional B, sequence_lens, initial_h; outputs Y, Y_h."""

    op_name = "GRU"

    def _step(self, acts, xw, h, c, r, rb, p, n):
        def dense(v, start, stop):
            out = tf.matmul(v, r[start:stop], transpose_b=True)
            return out if rb is None else out + rb[start:stop]

        return gru_cell(xw, h, n, dense, lambda a: self._act(acts, a), lambda a: self._act(acts + 1, a),
                        self.linear_before_reset), None


@register("RNN")
class RNN(_Recurrent):
    """ONNX RNN (Elman): ``H_t = f(X_t W^T + H_{t-1} R^T + Wb + Rb)``; outputs Y, Y_h."""

    op_name = "RNN"

    def _step(self, acts, xw, h, c, r, rb, p, n):
        pre = xw + tf.matmul(h, r, transpose_b=True)
        if rb is not None:
            pre = pre + rb
        return self._act(acts, pre), None
