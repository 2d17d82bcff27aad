"""Recurrent layers as native MXNet operations: ONNX LSTM (gates i, o, f, c; peepholes i, o, f), GRU (gates z, r,
h; linear_before_reset) and RNN, with every ONNX feature the reference supports: directions (forward, reverse,
bidirectional), layouts 0/1, initial states, sequence_lens (past a sequence's end the state is kept and the output
is zero), clip, and the listed activations with their alpha/beta. Outputs ``(Y, Y_h[, Y_c])``; ``mx.autograd``
differentiates the composed graph (BPTT).

Two computations, chosen per node:

- **MXNet's fused ``RNN`` kernel** (what ``gluon.rnn.LSTM/GRU/RNN`` run; oneDNN's on the CPU) where its semantics
  are exactly ONNX's: the default activations (LSTM sigmoid/tanh/tanh, GRU sigmoid/tanh with
  ``linear_before_reset=1`` -- MXNet's GRU is cuDNN's --, RNN tanh or relu), no clip, no peepholes and no
  sequence_lens shorter than the sequence. ONNX's weights are reordered to MXNet's gate order (LSTM i, f, c, o;
  GRU r, z, h) and packed into the kernel's flat parameter vector inside the graph, so their gradients flow back to
  ONNX's W, R and B. A ``reverse`` layer runs the kernel on the time-reversed sequence.
- **An unrolled loop of symbol operations** otherwise: the sequence length is static (the executor composes one
  graph per input signature), every step's input projection is one ``FullyConnected`` before the loop and each step
  one ``FullyConnected`` of the state plus elementwise gates; activations and clip carry the reference's
  derivatives (clipped entries pass no gradient).

float16 computes in float32 and float64 wins over float32, as in the reference; outputs take X's dtype.

>>> import numpy as np
>>> from d5.frameworks.mxnet.custom_op import native_op
>>> x = np.ones((2, 1, 3), np.float32)
>>> w, r = np.zeros((1, 4, 3), np.float32), np.zeros((1, 4, 1), np.float32)
>>> y, y_h, y_c = native_op("LSTM", hidden_size=1).forward([x, w, r])
>>> y.shape, y_h.shape, float(y_c[0, 0, 0])
((2, 1, 1, 1), (1, 1, 1), 0.0)
"""
from __future__ import annotations

import mxnet as mx
import numpy as np

from d5.errors import ShapeError
from d5.frameworks.mxnet.operators import MXOp, register
from d5.frameworks.mxnet.operators._helpers import Symbol, as_symbol, dtype_of, reshape, shape_of, static
from d5.ops.onnx_attributes import adopt, operator_attributes
from d5.ops.sequence_plans import (RecurrentSpec, check_hidden_size, check_recurrent_attributes,
                                   check_recurrent_inputs, check_recurrent_optional, check_recurrent_ranks,
                                   check_recurrent_weights, check_sequence_lens_count, recurrent_state_shape,
                                   sequence_lengths)


def _hard_sigmoid(a, alpha, beta):
    v = a * alpha + beta
    # Inside (0, 1) the slope is alpha; at and beyond the corners 0 (the reference's derivative).
    inside = (v > 0.0) * (v < 1.0)
    return mx.sym.where(inside, v, mx.sym.BlockGrad(mx.sym.clip(v, 0.0, 1.0)))


# name -> f(a, alpha, beta), each with the reference's derivative; which take alpha/beta:
# onnx_attributes.RECURRENT_ACTIVATIONS
_ACTIVATIONS = {
    "sigmoid": lambda a, al, be: mx.sym.sigmoid(a),
    "tanh": lambda a, al, be: mx.sym.tanh(a),
    "relu": lambda a, al, be: mx.sym.relu(a),
    "leakyrelu": lambda a, al, be: mx.sym.where(a >= 0.0, a, a * al),
    "thresholdedrelu": lambda a, al, be: mx.sym.where(a > al, a, mx.sym.zeros_like(a)),
    "hardsigmoid": _hard_sigmoid,
    "affine": lambda a, al, be: a * al + be,
    "scaledtanh": lambda a, al, be: mx.sym.tanh(a * be) * al,
    "elu": lambda a, al, be: mx.sym.where(a >= 0.0, a, mx.sym.expm1(mx.sym.minimum(a, 0.0)) * al),
    "softsign": lambda a, al, be: mx.sym.softsign(a),
    "softplus": lambda a, al, be: mx.sym.Activation(a, act_type="softrelu"),
}

#: The activations MXNet's fused RNN kernel computes, per op (ONNX's lower-case names per direction).
_FUSED_ACTIVATIONS = {"LSTM": {("sigmoid", "tanh", "tanh"): "lstm"}, "GRU": {("sigmoid", "tanh"): "gru"},
                      "RNN": {("tanh",): "rnn_tanh", ("relu",): "rnn_relu"}}
#: ONNX's gate blocks in the order of MXNet's fused kernel (LSTM i, o, f, c -> i, f, c, o; GRU z, r, h -> r, z, h).
_FUSED_GATE_ORDER = {"LSTM": (0, 2, 3, 1), "GRU": (1, 0, 2), "RNN": (0,)}


def _parts(x: Symbol, count: int, axis: int = 0) -> list[Symbol]:
    """``x`` split into ``count`` equal parts along ``axis``, that axis squeezed away."""
    shape = shape_of(x)
    if count == 1:
        return [reshape(x, shape[:axis] + shape[axis + 1:])]
    pieces = mx.sym.split(x, num_outputs=count, axis=axis, squeeze_axis=True)
    return [pieces[i] for i in range(count)]


def _blocks(x: Symbol, count: int, axis: int = 0) -> list[Symbol]:
    """``x`` split into ``count`` equal blocks along ``axis`` (the axis kept)."""
    if count == 1:
        return [x]
    pieces = mx.sym.split(x, num_outputs=count, axis=axis)
    return [pieces[i] for i in range(count)]


class _Recurrent(MXOp, RecurrentSpec):
    def __init__(self, **attributes) -> None:
        attributes = adopt(self, operator_attributes(self.op_name, attributes))
        self.activation_names = [name for name, _, _ in attributes.activations]
        self.activations = [(_ACTIVATIONS[name], alpha, beta) for name, alpha, beta in attributes.activations]
        check_recurrent_attributes(self.op_name, attributes)

    def _act(self, index: int, a):
        if self.clip is not None:
            # Clipped entries pass no gradient, at the bound too (the reference's |a| >= clip).
            clipped = mx.sym.BlockGrad(mx.sym.clip(a, -self.clip, self.clip))
            a = mx.sym.where(mx.sym.abs(a) >= self.clip, clipped, a)
        fn, alpha, beta = self.activations[index]
        return fn(a, alpha, beta)

    def __call__(self, x, w, r, b=None, sequence_lens=None, initial_h=None, initial_c=None, p=None):
        name = self.op_name
        check_recurrent_inputs(name, x, w, r)
        xs, ws, rs = shape_of(x), shape_of(w), shape_of(r)
        check_recurrent_ranks(name, xs, ws, rs)
        given = [v for v in (x, w, r, b, initial_h, initial_c, p) if v is not None]
        kinds = [dtype_of(v) for v in given]
        if not all(k.kind == "f" for k in kinds):
            raise ShapeError(f"{name}: expected floating-point inputs, got dtypes {[k.name for k in kinds]}; cast "
                             "the input to float32 or float64")
        out_dtype = dtype_of(x)
        dtype = np.dtype(np.float64) if any(k == np.float64 for k in kinds) else np.dtype(np.float32)
        hidden = check_hidden_size(name, self.hidden_size, rs)
        seq, batch, features = (xs[1], xs[0], xs[2]) if self.layout else xs
        dirs, gates = self.num_directions, self.gates
        check_recurrent_weights(name, direction=self.direction, dirs=dirs, gates=gates, hidden=hidden,
                                x_shape=(seq, batch, features), w_shape=ws, r_shape=rs)
        b_shape, h_shape, c_shape, p_shape = (None if v is None else shape_of(v) for v in (b, initial_h, initial_c, p))
        check_recurrent_optional(name, dirs=dirs, gates=gates, hidden=hidden,
                                 state=recurrent_state_shape(dirs, batch, hidden, self.layout), b=b_shape,
                                 initial_h=h_shape, initial_c=c_shape, p=p_shape)
        lens = self._lengths(sequence_lens, seq, batch)

        def cast(v):
            return None if v is None else as_symbol(v, dtype)

        x, w, r, b, initial_h, initial_c, p = (cast(v) for v in (x, w, r, b, initial_h, initial_c, p))
        if self.layout:
            x = mx.sym.swapaxes(x, 0, 1)
            initial_h = None if initial_h is None else mx.sym.swapaxes(initial_h, 0, 1)
            initial_c = None if initial_c is None else mx.sym.swapaxes(initial_c, 0, 1)
        mode = self._fused_mode(p, lens)
        if mode is not None:
            outputs = self._fused(mode, x, w, r, b, initial_h, initial_c, seq, batch, hidden, dtype)
        else:
            outputs = self._unrolled(x, w, r, b, lens, initial_h, initial_c, p, seq, batch, features, hidden, dtype)
        y, y_h, y_c = outputs                                   # (seq, dirs, batch, hidden), (dirs, batch, hidden)
        if self.layout:
            y, y_h = mx.sym.transpose(y, axes=(2, 0, 1, 3)), mx.sym.swapaxes(y_h, 0, 1)
            y_c = None if y_c is None else mx.sym.swapaxes(y_c, 0, 1)
        results = [y, y_h] + ([y_c] if self.has_cell_state else [])
        return tuple(v if out_dtype == dtype else mx.sym.cast(v, out_dtype.name) for v in results)

    # -- checks --------------------------------------------------------------------------------------

    def _lengths(self, sequence_lens, seq: int, batch: int):
        """sequence_lens as a (batch,) symbol of the compute dtype's lengths, or None where every sequence is
        known to be whole (or none is given)."""
        if sequence_lens is None:
            return None
        if dtype_of(sequence_lens).kind not in "iu":
            raise ShapeError(f"{self.op_name}: sequence_lens must be integers (int32), got "
                             f"{dtype_of(sequence_lens).name}")
        known = static(sequence_lens)
        if known is not None:
            return sequence_lengths(self.op_name, known, batch, seq)
        check_sequence_lens_count(self.op_name, int(np.prod(shape_of(sequence_lens))), batch, shape_of(sequence_lens))
        return reshape(sequence_lens, (batch,))

    # -- the fused kernel ----------------------------------------------------------------------------

    def _fused_mode(self, p, lens) -> str | None:
        """MXNet's RNN kernel mode when it computes exactly this node, else None."""
        if self.clip is not None or lens is not None or (self.op_name == "GRU" and not self.linear_before_reset):
            return None
        if p is not None:
            known = static(p)
            if known is None or np.any(known):
                return None
        per = len(self.default_activations)
        modes = {_FUSED_ACTIVATIONS[self.op_name].get(tuple(self.activation_names[d * per:(d + 1) * per]))
                 for d in range(self.num_directions)}
        return modes.pop() if len(modes) == 1 else None

    def _fused(self, mode, x, w, r, b, h0, c0, seq, batch, hidden, dtype):
        dirs, gates = self.num_directions, self.gates
        order = _FUSED_GATE_ORDER[self.op_name]

        def reordered(v):  # (gates * hidden, ...) in ONNX's gate order -> MXNet's, flattened
            blocks = _blocks(v, gates)
            v = blocks[0] if gates == 1 else mx.sym.concat(*(blocks[g] for g in order), dim=0)
            return mx.sym.reshape(v, shape=(-1,))

        ws, rs = _parts(w, dirs), _parts(r, dirs)
        weights = [reordered(m) for d in range(dirs) for m in (ws[d], rs[d])]
        if b is None:
            biases = [mx.sym.zeros((2 * dirs * gates * hidden,), dtype=dtype.name)]
        else:
            biases = [reordered(v) for bd in _parts(b, dirs) for v in _blocks(bd, 2)]
        params = mx.sym.concat(*weights, *biases, dim=0)
        zeros = mx.sym.zeros((dirs, batch, hidden), dtype=dtype.name)
        state = zeros if h0 is None else h0
        if self.direction == "reverse":
            x = mx.sym.reverse(x, axis=0)
        kwargs = dict(state_size=hidden, num_layers=1, bidirectional=dirs == 2, mode=mode, p=0.0, state_outputs=True)
        if self.has_cell_state:
            outputs = mx.sym.RNN(x, params, state, zeros if c0 is None else c0, **kwargs)
            y, y_h, y_c = outputs[0], outputs[1], outputs[2]
        else:
            outputs = mx.sym.RNN(x, params, state, **kwargs)
            y, y_h, y_c = outputs[0], outputs[1], None
        if self.direction == "reverse":
            y = mx.sym.reverse(y, axis=0)
        y = reshape(y, (seq, batch, dirs, hidden))  # MXNet's (seq, batch, dirs * hidden)
        return mx.sym.swapaxes(y, 1, 2), y_h, y_c

    # -- the unrolled loop ---------------------------------------------------------------------------

    def _unrolled(self, x, w, r, b, lens, h0, c0, p, seq, batch, features, hidden, dtype):
        dirs, gates = self.num_directions, self.gates
        if lens is not None and not isinstance(lens, Symbol):
            lens = as_symbol(lens, dtype)
        elif lens is not None:
            lens = mx.sym.cast(lens, dtype.name)
        ws, rs = _parts(w, dirs), _parts(r, dirs)
        bs = None if b is None else _parts(b, dirs)
        h0s = None if h0 is None else _parts(h0, dirs)
        c0s = None if c0 is None else _parts(c0, dirs)
        ps = None if p is None else _parts(p, dirs)
        zeros = mx.sym.zeros((batch, hidden), dtype=dtype.name)
        ys, hs, cs = [], [], []
        for d in range(dirs):
            wb, rb = (None, None) if bs is None else _blocks(bs[d], 2)
            if wb is None:
                xw = mx.sym.FullyConnected(x, ws[d], num_hidden=gates * hidden, no_bias=True, flatten=False)
            else:
                xw = mx.sym.FullyConnected(x, ws[d], wb, num_hidden=gates * hidden, flatten=False)
            steps = _parts(xw, seq) if seq else []
            h = zeros if h0s is None else h0s[d]
            c = (zeros if c0s is None else c0s[d]) if self.has_cell_state else None
            peep = None if ps is None else [reshape(v, (1, hidden)) for v in _blocks(ps[d], 3)]
            acts = len(self.default_activations) * d
            cell = self._cell(rs[d], rb, peep, acts, hidden)
            outputs = [None] * seq
            for t in (range(seq - 1, -1, -1) if (self.direction == "reverse" or d == 1) else range(seq)):
                h_new, c_new = cell(steps[t], h, c)
                if lens is None:
                    h, c, outputs[t] = h_new, c_new, h_new
                else:  # past a sequence's end: keep the state, output zeros
                    inside = lens > float(t)
                    h = mx.sym.where(inside, h_new, h)
                    c = None if c is None else mx.sym.where(inside, c_new, c)
                    outputs[t] = mx.sym.where(inside, h_new, mx.sym.zeros_like(h_new))
            ys.append(mx.sym.stack(*outputs, axis=0) if seq else
                      mx.sym.zeros((0, batch, hidden), dtype=dtype.name))
            hs.append(h)
            cs.append(c)
        y = mx.sym.stack(*ys, axis=1)
        return y, mx.sym.stack(*hs, axis=0), mx.sym.stack(*cs, axis=0) if self.has_cell_state else None

    def _cell(self, r, rb, peep, acts, hidden):
        """The step function ``(xw_t, h, c) -> (h_new, c_new)`` of one direction."""
        raise NotImplementedError


def _dense(h, weight, bias, units):
    """``h @ weight^T (+ bias)``."""
    if bias is None:
        return mx.sym.FullyConnected(h, weight, num_hidden=units, no_bias=True)
    return mx.sym.FullyConnected(h, weight, bias, num_hidden=units)


@register("LSTM")
class LSTM(_Recurrent):
    """ONNX LSTM: inputs X, W, R, optional B, sequence_lens, initial_h, initial_c, P; outputs Y, Y_h, Y_c."""

    op_name = "LSTM"

    def _cell(self, r, rb, peep, acts, n):
        def step(xw, h, c):
            pre = xw + _dense(h, r, rb, 4 * n)
            a_i, a_o, a_f, a_c = _blocks(pre, 4, axis=1)
            if peep is not None:
                a_i = a_i + mx.sym.broadcast_mul(c, peep[0])
                a_f = a_f + mx.sym.broadcast_mul(c, peep[2])
            i, f = self._act(acts, a_i), self._act(acts, a_f)
            c_new = f * c + i * self._act(acts + 1, a_c)
            if peep is not None:
                a_o = a_o + mx.sym.broadcast_mul(c_new, peep[1])
            o = self._act(acts, a_o)
            fn, alpha, beta = self.activations[acts + 2]  # h(): the reference applies no clip to the cell output
            return o * fn(c_new, alpha, beta), c_new
        return step


@register("GRU")
class GRU(_Recurrent):
    """ONNX GRU: inputs X, W, R, optional B, sequence_lens, initial_h; outputs Y, Y_h."""

    op_name = "GRU"

    def _cell(self, r, rb, peep, acts, n):
        r_zr, r_h = (mx.sym.slice_axis(r, axis=0, begin=0, end=2 * n), mx.sym.slice_axis(r, axis=0, begin=2 * n,
                                                                                           end=3 * n))
        rb_zr, rb_h = (None, None) if rb is None else (mx.sym.slice_axis(rb, axis=0, begin=0, end=2 * n),
                                                       mx.sym.slice_axis(rb, axis=0, begin=2 * n, end=3 * n))

        def step(xw, h, c):
            x_z, x_r, x_h = _blocks(xw, 3, axis=1)
            h_z, h_r = _blocks(_dense(h, r_zr, rb_zr, 2 * n), 2, axis=1)
            z = self._act(acts, x_z + h_z)
            reset = self._act(acts, x_r + h_r)
            if self.linear_before_reset:
                candidate = self._act(acts + 1, x_h + reset * _dense(h, r_h, rb_h, n))
            else:
                candidate = self._act(acts + 1, x_h + _dense(reset * h, r_h, rb_h, n))
            return (1.0 - z) * candidate + z * h, None
        return step


@register("RNN")
class RNN(_Recurrent):
    """ONNX RNN (Elman): ``H_t = f(X_t W^T + H_{t-1} R^T + Wb + Rb)``; outputs Y, Y_h."""

    op_name = "RNN"

    def _cell(self, r, rb, peep, acts, n):
        def step(xw, h, c):
            return self._act(acts, xw + _dense(h, r, rb, n)), None
        return step


__all__ = ["GRU", "LSTM", "RNN"]
