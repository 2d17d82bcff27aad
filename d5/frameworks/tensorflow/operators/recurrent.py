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

from d5.errors import ShapeError, UnsupportedOperatorError
from d5.frameworks.tensorflow.operators import TFOp, register
from d5.frameworks.tensorflow.operators._helpers import static, static_shape
from d5.ops.onnx_attributes import RECURRENT_DEFAULT_ACTIVATIONS, adopt, operator_attributes

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


class _Recurrent(TFOp):
    op_name = ""
    gates = 1
    default_activations: tuple[str, ...] = ()
    has_cell_state = False

    def __init__(self, **attributes) -> None:
        attributes = adopt(self, operator_attributes(self.op_name, attributes))
        self.activations = [(_ACTIVATIONS[name], alpha, beta) for name, alpha, beta in attributes.activations]

    def _act(self, index: int, a):
        if self.clip is not None:
            # Clipped entries pass no gradient, at the bound too (the reference's |a| >= clip).
            clipped = tf.stop_gradient(tf.clip_by_value(a, -self.clip, self.clip))
            a = tf.where(tf.abs(a) >= self.clip, clipped, a)
        fn, alpha, beta = self.activations[index]
        return fn(a, alpha, beta)

    def __call__(self, x, w, r, b=None, sequence_lens=None, initial_h=None, initial_c=None, p=None):
        name = self.op_name
        if x is None or w is None or r is None:
            raise ShapeError(f"{name}: inputs X, W and R are required")
        if x.shape.rank != 3 or w.shape.rank != 3 or r.shape.rank != 3:
            raise ShapeError(f"{name}: X, W and R must be 3-D, got X {tuple(x.shape)}, W {tuple(w.shape)}, "
                             f"R {tuple(r.shape)}")
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
        seq, batch, features = x.shape
        if self.hidden_size is not None and self.hidden_size != hidden:
            raise ShapeError(f"{name}: hidden_size={self.hidden_size} disagrees with R of shape {tuple(r.shape)}")
        if tuple(w.shape) != (dirs, gates * hidden, features) or tuple(r.shape) != (dirs, gates * hidden, hidden):
            raise ShapeError(f"{name}: with direction={self.direction} and X {tuple(x.shape)} expected W "
                             f"{(dirs, gates * hidden, features)} and R {(dirs, gates * hidden, hidden)}; got W "
                             f"{tuple(w.shape)}, R {tuple(r.shape)}")
        # initial states are checked after the layout transpose: (dirs, batch, hidden) here either way.
        state = (dirs, batch, hidden)
        for label, value, shape in (("B", b, (dirs, 2 * gates * hidden)), ("initial_h", initial_h, state),
                                    ("initial_c", initial_c, state), ("P", p, (dirs, 3 * hidden))):
            if value is not None and tuple(value.shape) != shape:
                raise ShapeError(f"{name}: {label} must have shape {shape} (in layout 0), got "
                                 f"{tuple(value.shape)}")

    def _mask(self, sequence_lens, seq: int, batch: int):
        """(seq, batch, 1) booleans, True where a step is inside its sequence; None without sequence_lens or
        when every sequence is known to be whole."""
        if sequence_lens is None:
            return None
        if sequence_lens.shape.num_elements() != batch:
            raise ShapeError(f"{self.op_name}: sequence_lens must hold {batch} lengths (one per batch item), got "
                             f"shape {tuple(sequence_lens.shape)}")
        known = static(sequence_lens)
        if known is not None:
            lens = [int(v) for v in known.reshape(-1)]
            if any(n < 0 or n > seq for n in lens):
                raise ShapeError(f"{self.op_name}: sequence_lens must be {batch} integers in [0, {seq}], got {lens}")
            if all(n == seq for n in lens):
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

    op_name, gates, has_cell_state = "LSTM", 4, True
    default_activations = RECURRENT_DEFAULT_ACTIVATIONS["LSTM"]

    def __init__(self, **attributes) -> None:
        super().__init__(**attributes)
        if self.input_forget:
            raise UnsupportedOperatorError("LSTM: input_forget=1 (coupled input and forget gates) is not supported; "
                                           "use input_forget=0")

    def _step(self, acts, xw, h, c, r, rb, p, n):
        pre = xw + tf.matmul(h, r, transpose_b=True)
        if rb is not None:
            pre = pre + rb
        a_i, a_o, a_f, a_c = pre[:, :n], pre[:, n:2 * n], pre[:, 2 * n:3 * n], pre[:, 3 * n:]
        if p is not None:
            a_i, a_f = a_i + p[:n] * c, a_f + p[2 * n:] * c
        i, f = self._act(acts, a_i), self._act(acts, a_f)
        c_new = f * c + i * self._act(acts + 1, a_c)
        if p is not None:
            a_o = a_o + p[n:2 * n] * c_new
        o = self._act(acts, a_o)
        fn, alpha, beta = self.activations[acts + 2]  # h(): the reference applies no clip to the cell output
        return o * fn(c_new, alpha, beta), c_new


@register("GRU")
class GRU(_Recurrent):
    """ONNX GRU: inputs X, W, R, optional B, sequence_lens, initial_h; outputs Y, Y_h."""

    op_name, gates = "GRU", 3
    default_activations = RECURRENT_DEFAULT_ACTIVATIONS["GRU"]

    def _step(self, acts, xw, h, c, r, rb, p, n):
        rzr = tf.matmul(h, r[:2 * n], transpose_b=True)
        if rb is not None:
            rzr = rzr + rb[:2 * n]
        z = self._act(acts, xw[:, :n] + rzr[:, :n])
        reset = self._act(acts, xw[:, n:2 * n] + rzr[:, n:])
        if self.linear_before_reset:
            rh = tf.matmul(h, r[2 * n:], transpose_b=True)
            if rb is not None:
                rh = rh + rb[2 * n:]
            candidate = self._act(acts + 1, xw[:, 2 * n:] + reset * rh)
        else:
            inner = tf.matmul(reset * h, r[2 * n:], transpose_b=True)
            if rb is not None:
                inner = inner + rb[2 * n:]
            candidate = self._act(acts + 1, xw[:, 2 * n:] + inner)
        return (1.0 - z) * candidate + z * h, None


@register("RNN")
class RNN(_Recurrent):
    """ONNX RNN (Elman): ``H_t = f(X_t W^T + H_{t-1} R^T + Wb + Rb)``; outputs Y, Y_h."""

    op_name, gates = "RNN", 1
    default_activations = RECURRENT_DEFAULT_ACTIVATIONS["RNN"]

    def _step(self, acts, xw, h, c, r, rb, p, n):
        pre = xw + tf.matmul(h, r, transpose_b=True)
        if rb is not None:
            pre = pre + rb
        return self._act(acts, pre), None
