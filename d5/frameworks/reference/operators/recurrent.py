"""Reference recurrent layers (ONNX LSTM, GRU and RNN), forward and backpropagation through time in NumPy.

The input projection ``X W^T + Wb`` of every time step is one GEMM before the time loop and its gradient one
GEMM after it; only the recurrent part runs step by step. ``sequence_lens`` is applied as a mask (steps past
a sequence's end keep the state and output zeros), which makes it differentiable too. The gate order is
ONNX's: LSTM ``i, o, f, c``; GRU ``z, r, h``.

>>> import numpy as np
>>> x = np.ones((2, 1, 3), np.float32)                               # (seq, batch, input)
>>> w, r = np.zeros((1, 4, 3), np.float32), np.zeros((1, 4, 1), np.float32)
>>> y, y_h, y_c = LSTM(hidden_size=1).forward([x, w, r])
>>> y.shape, y_h.shape, y.dtype, round(float(y_c[0, 0, 0]), 4)   # c = 0.5 * c_prev + 0.5 * tanh(0)
((2, 1, 1, 1), (1, 1, 1), dtype('float32'), 0.0)
"""
from __future__ import annotations

import numpy as np

from d5.errors import ShapeError
from d5.frameworks.reference.kernels import compute_dtype
from d5.frameworks.reference.operators import ReferenceOp, register
from d5.ops.onnx_attributes import adopt, operator_attributes
from d5.ops.sequence_plans import (RecurrentSpec, check_hidden_size, check_recurrent_attributes,
                                   check_recurrent_optional, check_recurrent_ranks, check_recurrent_weights,
                                   gate_blocks, peephole_blocks, recurrent_state_shape, sequence_lengths)


# ----------------------------------------------------------------------------------------- activations

def _sigmoid(a):
    return 0.5 * (np.tanh(0.5 * a) + 1.0)  # overflow-free logistic


# name -> (f(a, alpha, beta), df(a, y, alpha, beta)); which take alpha/beta: onnx_attributes.RECURRENT_ACTIVATIONS
_ACTIVATIONS: dict[str, tuple] = {
    "sigmoid": (lambda a, al, be: _sigmoid(a), lambda a, y, al, be: y * (1.0 - y)),
    "tanh": (lambda a, al, be: np.tanh(a), lambda a, y, al, be: 1.0 - y * y),
    "relu": (lambda a, al, be: np.maximum(a, 0), lambda a, y, al, be: (a > 0).astype(a.dtype)),
    "leakyrelu": (lambda a, al, be: np.where(a >= 0, a, al * a),
                  lambda a, y, al, be: np.where(a >= 0, 1.0, al).astype(a.dtype)),
    "thresholdedrelu": (lambda a, al, be: np.where(a > al, a, 0).astype(a.dtype),
                        lambda a, y, al, be: (a > al).astype(a.dtype)),
    "hardsigmoid": (lambda a, al, be: np.clip(al * a + be, 0, 1),
                    lambda a, y, al, be: np.where((al * a + be > 0) & (al * a + be < 1), al, 0).astype(a.dtype)),
    "affine": (lambda a, al, be: al * a + be, lambda a, y, al, be: np.full_like(a, al)),
    "scaledtanh": (lambda a, al, be: al * np.tanh(be * a),
                   lambda a, y, al, be: al * be * (1.0 - np.tanh(be * a) ** 2)),
    "elu": (lambda a, al, be: np.where(a >= 0, a, al * (np.exp(np.minimum(a, 0)) - 1)),
            lambda a, y, al, be: np.where(a >= 0, 1.0, al * np.exp(np.minimum(a, 0))).astype(a.dtype)),
    "softsign": (lambda a, al, be: a / (1 + np.abs(a)),
                 lambda a, y, al, be: 1.0 / (1 + np.abs(a)) ** 2),
    "softplus": (lambda a, al, be: np.logaddexp(0, a), lambda a, y, al, be: _sigmoid(a)),
}


class _Activation:
    """One activation function with its derivative, its alpha/beta bound."""

    def __init__(self, name: str, alpha: float | None, beta: float | None) -> None:
        entry = _ACTIVATIONS[name]
        self.alpha, self.beta = alpha, beta
        self._f, self._df = entry

    def __call__(self, a: np.ndarray) -> np.ndarray:
        return self._f(a, self.alpha, self.beta)

    def grad(self, a: np.ndarray, y: np.ndarray) -> np.ndarray:
        return self._df(a, y, self.alpha, self.beta)


def _activate(fn: _Activation, a: np.ndarray, clip: float | None) -> tuple[np.ndarray, np.ndarray]:
    if clip is not None:
        a = np.clip(a, -clip, clip)
    return a, fn(a)


def _activate_grad(fn: _Activation, a: np.ndarray, y: np.ndarray, dy: np.ndarray, clip: float | None) -> np.ndarray:
    # a is the (clipped) pre-activation; clipped entries pass no gradient.
    g = dy * fn.grad(a, y)
    if clip is not None:
        g = np.where(np.abs(a) >= clip, 0.0, g).astype(g.dtype, copy=False)
    return g


# ---------------------------------------------------------------------------------------------- cells
# A cell runs one direction: step(xw_t, h, c) -> (h_new, c_new, cache) and step_back(dh_new, dc_new,
# cache) -> (d xw_t, dh, dc), accumulating its recurrent-parameter gradients in self.grads.

class _LSTMCell:
    gates = 4

    def __init__(self, r, rb, p, acts, clip, hidden):
        self.r, self.rb, self.p, self.clip, self.hidden = r, rb, p, clip, hidden
        self.f, self.g, self.h = acts
        self.grads = {"R": np.zeros_like(r), "Rb": np.zeros_like(rb), "P": np.zeros_like(p)}

    def step(self, xw, h, c):
        pre = xw + h @ self.r.T + self.rb
        pre_i, pre_o, pre_f, pre_c = gate_blocks(pre, self.hidden, 4)
        pi, po, pf = peephole_blocks(self.p, self.hidden)
        a_i, i = _activate(self.f, pre_i + pi * c, self.clip)
        a_f, f = _activate(self.f, pre_f + pf * c, self.clip)
        a_c, cc = _activate(self.g, pre_c, self.clip)
        c_new = f * c + i * cc
        a_o, o = _activate(self.f, pre_o + po * c_new, self.clip)
        hc = self.h(c_new)
        return o * hc, c_new, (h, c, c_new, a_i, i, a_f, f, a_c, cc, a_o, o, hc)

    def step_back(self, dh_new, dc_new, cache):
        h, c, c_new, a_i, i, a_f, f, a_c, cc, a_o, o, hc = cache
        pi, po, pf = peephole_blocks(self.p, self.hidden)
        d_ao = _activate_grad(self.f, a_o, o, dh_new * hc, self.clip)
        dc_new = dc_new + self.h.grad(c_new, hc) * dh_new * o + d_ao * po
        d_ai = _activate_grad(self.f, a_i, i, dc_new * cc, self.clip)
        d_af = _activate_grad(self.f, a_f, f, dc_new * c, self.clip)
        d_ac = _activate_grad(self.g, a_c, cc, dc_new * i, self.clip)
        dpre = np.concatenate([d_ai, d_ao, d_af, d_ac], axis=1)
        self.grads["R"] += dpre.T @ h
        self.grads["Rb"] += dpre.sum(axis=0)
        self.grads["P"] += np.concatenate([(d_ai * c).sum(0), (d_ao * c_new).sum(0), (d_af * c).sum(0)])
        dc = dc_new * f + d_ai * pi + d_af * pf
        return dpre, dpre @ self.r, dc


class _GRUCell:
    gates = 3

    def __init__(self, r, rb, acts, clip, hidden, linear_before_reset):
        self.r, self.rb, self.clip, self.hidden, self.lbr = r, rb, clip, hidden, linear_before_reset
        self.f, self.g = acts
        self.grads = {"R": np.zeros_like(r), "Rb": np.zeros_like(rb)}

    def step(self, xw, h, c):
        n = self.hidden
        rzr = h @ self.r[:2 * n].T + self.rb[:2 * n]
        a_z, z = _activate(self.f, xw[:, :n] + rzr[:, :n], self.clip)
        a_r, r = _activate(self.f, xw[:, n:2 * n] + rzr[:, n:], self.clip)
        if self.lbr:
            rh = h @ self.r[2 * n:].T + self.rb[2 * n:]
            a_h, hh = _activate(self.g, xw[:, 2 * n:] + r * rh, self.clip)
        else:
            rh = None
            a_h, hh = _activate(self.g, xw[:, 2 * n:] + (r * h) @ self.r[2 * n:].T + self.rb[2 * n:], self.clip)
        return (1.0 - z) * hh + z * h, None, (h, a_z, z, a_r, r, a_h, hh, rh)

    def step_back(self, dh_new, dc_new, cache):
        h, a_z, z, a_r, r, a_h, hh, rh = cache
        n = self.hidden
        r_z, r_r, r_h = self.r[:n], self.r[n:2 * n], self.r[2 * n:]
        d_az = _activate_grad(self.f, a_z, z, dh_new * (h - hh), self.clip)
        d_ah = _activate_grad(self.g, a_h, hh, dh_new * (1.0 - z), self.clip)
        dh = dh_new * z
        if self.lbr:
            d_rh = d_ah * r                                     # gradient of (h R_h^T + Rb_h)
            d_ar = _activate_grad(self.f, a_r, r, d_ah * rh, self.clip)
            self.grads["R"][2 * n:] += d_rh.T @ h
            self.grads["Rb"][2 * n:] += d_rh.sum(0)
            dh = dh + d_rh @ r_h
        else:
            rhh = r * h
            self.grads["R"][2 * n:] += d_ah.T @ rhh
            self.grads["Rb"][2 * n:] += d_ah.sum(0)
            d_rhh = d_ah @ r_h
            d_ar = _activate_grad(self.f, a_r, r, d_rhh * h, self.clip)
            dh = dh + d_rhh * r
        self.grads["R"][:n] += d_az.T @ h
        self.grads["R"][n:2 * n] += d_ar.T @ h
        self.grads["Rb"][:n] += d_az.sum(0)
        self.grads["Rb"][n:2 * n] += d_ar.sum(0)
        dh = dh + d_az @ r_z + d_ar @ r_r
        return np.concatenate([d_az, d_ar, d_ah], axis=1), dh, None


class _RNNCell:
    gates = 1

    def __init__(self, r, rb, acts, clip, hidden):
        self.r, self.rb, self.clip, self.hidden = r, rb, clip, hidden
        self.f = acts[0]
        self.grads = {"R": np.zeros_like(r), "Rb": np.zeros_like(rb)}

    def step(self, xw, h, c):
        a, y = _activate(self.f, xw + h @ self.r.T + self.rb, self.clip)
        return y, None, (h, a, y)

    def step_back(self, dh_new, dc_new, cache):
        h, a, y = cache
        da = _activate_grad(self.f, a, y, dh_new, self.clip)
        self.grads["R"] += da.T @ h
        self.grads["Rb"] += da.sum(0)
        return da, da @ self.r, None


# --------------------------------------------------------------------------------------------- the op

class _RecurrentOp(ReferenceOp, RecurrentSpec):
    """Shared driver of LSTM/GRU/RNN: attribute checks, layouts, directions, masking and BPTT."""

    def __init__(self, **attributes) -> None:
        super().__init__()
        attributes = adopt(self, operator_attributes(self.op_name, attributes))
        self.activations = [_Activation(*activation) for activation in attributes.activations]
        self._saved: tuple | None = None
        check_recurrent_attributes(self.op_name, attributes, by=" by the reference framework")

    # -- subclass hooks ----------------------------------------------------------------------------

    def _make_cell(self, r, rb, p, acts):
        raise NotImplementedError

    # -- forward / backward --------------------------------------------------------------------------

    def forward(self, inputs):
        prepared = self._prepare(inputs)
        x, w, wb, mask, h0, c0 = (prepared[k] for k in ("x", "w", "wb", "mask", "h0", "c0"))
        ys, hs, cs, runs = [], [], [], []
        for d in range(self.num_directions):
            cell = self._cell(prepared, d)
            xw = x @ w[d].T + wb[d]                            # one GEMM for every step's input projection
            y, h, c, caches = self._run(cell, xw, h0[d], None if c0 is None else c0[d], mask, reverse=self._reverse(d))
            ys.append(y)
            hs.append(h)
            cs.append(c)
            runs.append((cell, caches))
        self._saved = (tuple(inputs), runs)
        dtype = np.asarray(inputs[0]).dtype
        y = np.stack(ys, axis=1)                               # (seq, dirs, batch, hidden)
        y_h = np.stack(hs)
        if self.layout:
            y, y_h = y.transpose(2, 0, 1, 3), y_h.transpose(1, 0, 2)
        outputs = [y.astype(dtype, copy=False), y_h.astype(dtype, copy=False)]
        if self.has_cell_state:
            y_c = np.stack(cs)
            outputs.append((y_c.transpose(1, 0, 2) if self.layout else y_c).astype(dtype, copy=False))
        return tuple(outputs)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        if self._saved is None or len(self._saved[0]) != len(fwd_inputs) or any(
                a is not b for a, b in zip(self._saved[0], fwd_inputs)):
            self.forward(fwd_inputs)                            # backward of another input: recompute
        runs = self._saved[1]
        prepared = self._prepare(fwd_inputs)
        x, w, mask = prepared["x"], prepared["w"], prepared["mask"]
        dtype = x.dtype
        if grads[0] is None:
            dy = np.zeros((x.shape[0], self.num_directions, x.shape[1], self.hidden_size), dtype)
        else:
            dy = np.asarray(grads[0], dtype)
            dy = dy.transpose(1, 2, 0, 3) if self.layout else dy  # -> (seq, dirs, batch, hidden)
        dh_last = self._state_grad(grads, 1, dtype)
        dc_last = self._state_grad(grads, 2, dtype) if self.has_cell_state else None
        dx = np.zeros_like(x)
        dw, dwb = np.zeros_like(w), np.zeros_like(prepared["wb"])
        drb, dr = np.zeros_like(prepared["rb"]), np.zeros_like(prepared["r"])
        dp = np.zeros_like(prepared["p"]) if prepared["p"] is not None else None
        dh0 = np.zeros_like(prepared["h0"])
        dc0 = None if prepared["c0"] is None else np.zeros_like(prepared["c0"])
        for d, (cell, caches) in enumerate(runs):
            for value in cell.grads.values():
                value[...] = 0
            dxw, dh, dc = self._run_back(cell, caches, dy[:, d], dh_last[d],
                                         None if dc_last is None else dc_last[d], mask, reverse=self._reverse(d))
            flat = dxw.reshape(-1, dxw.shape[-1])
            dx += dxw @ w[d]
            dw[d] = flat.T @ x.reshape(-1, x.shape[-1])
            dwb[d] = flat.sum(axis=0)
            dr[d], drb[d] = cell.grads["R"], cell.grads["Rb"]
            if dp is not None:
                dp[d] = cell.grads["P"]
            dh0[d] = dh
            if dc0 is not None:
                dc0[d] = dc
        return self._input_grads(fwd_inputs, prepared, dx, dw, dr, dwb, drb, dh0, dc0, dp)

    # -- the time loops -----------------------------------------------------------------------------

    def _reverse(self, direction: int) -> bool:
        return self.direction == "reverse" or direction == 1

    @staticmethod
    def _run(cell, xw, h, c, mask, reverse):
        seq = xw.shape[0]
        y = np.empty(xw.shape[:2] + (h.shape[-1],), xw.dtype)
        caches = []
        for t in (range(seq - 1, -1, -1) if reverse else range(seq)):
            h_new, c_new, cache = cell.step(xw[t], h, c)
            caches.append(cache)
            if mask is None:
                h, c, y[t] = h_new, c_new, h_new
            else:  # past a sequence's end: keep the state, output zeros (so reverse starts at its last step)
                m = mask[t]
                h = np.where(m, h_new, h)
                c = None if c is None else np.where(m, c_new, c)
                y[t] = np.where(m, h_new, 0)
        return y, h, c, caches

    @staticmethod
    def _run_back(cell, caches, dy, dh, dc, mask, reverse):
        seq = dy.shape[0]
        dxw = np.empty((seq, dy.shape[1], cell.gates * dy.shape[2]), dy.dtype)
        steps = list(range(seq - 1, -1, -1) if reverse else range(seq))
        for k in range(len(steps) - 1, -1, -1):
            t = steps[k]
            if mask is None:
                dh_new, dc_new = dy[t] + dh, dc
            else:
                m = mask[t]
                dh_new = np.where(m, dy[t] + dh, 0)
                dc_new = None if dc is None else np.where(m, dc, 0)
            dxw[t], dh_prev, dc_prev = cell.step_back(dh_new, dc_new, caches[k])
            if mask is not None:
                dh_prev = dh_prev + np.where(mask[t], 0, dh)
                dc_prev = None if dc is None else dc_prev + np.where(mask[t], 0, dc)
            dh, dc = dh_prev, dc_prev
        return dxw, dh, dc

    # -- inputs ------------------------------------------------------------------------------------

    def _state_grad(self, grads, index, dtype):
        shape = (self.num_directions, self._batch, self.hidden_size)
        if len(grads) <= index or grads[index] is None:
            return np.zeros(shape, dtype)
        g = np.asarray(grads[index], dtype)
        return g.transpose(1, 0, 2) if self.layout else g

    def _cell(self, prepared, d):
        acts_per_dir = len(self.default_activations)
        acts = self.activations[d * acts_per_dir:(d + 1) * acts_per_dir]
        p = None if prepared["p"] is None else prepared["p"][d]
        return self._make_cell(prepared["r"][d], prepared["rb"][d], p, acts)

    def _prepare(self, inputs) -> dict:
        name = self.op_name
        if len(inputs) < 3 or inputs[0] is None or inputs[1] is None or inputs[2] is None:
            raise ShapeError(f"{name}: inputs X, W and R are required, got {len(inputs)} inputs")
        x, w, r = (np.asarray(a) for a in inputs[:3])
        optional = [None if len(inputs) <= i or inputs[i] is None else np.asarray(inputs[i]) for i in range(3, 8)]
        b, seq_lens, h0, c0, p = optional
        gates = self.gates
        check_recurrent_ranks(name, x.shape, w.shape, r.shape)
        hidden = self.hidden_size = check_hidden_size(name, self.hidden_size, r.shape)
        dirs = self.num_directions
        if self.layout:
            x = x.transpose(1, 0, 2)
        seq, batch, features = x.shape
        self._batch = batch
        check_recurrent_weights(name, direction=self.direction, dirs=dirs, gates=gates, hidden=hidden, x_shape=x.shape,
                                w_shape=w.shape, r_shape=r.shape)
        check_recurrent_optional(name, dirs=dirs, gates=gates, hidden=hidden,
                                 state=recurrent_state_shape(dirs, batch, hidden, self.layout),
                                 b=None if b is None else b.shape, initial_h=None if h0 is None else h0.shape,
                                 initial_c=None if c0 is None else c0.shape, p=None if p is None else p.shape)
        dtype = compute_dtype(name, *(a for a in (x, w, r, b, h0, c0, p) if a is not None))
        cast = (lambda a: None if a is None else a.astype(dtype, copy=False))
        x, w, r, b, h0, c0, p = (cast(a) for a in (x, w, r, b, h0, c0, p))
        if b is None:
            b = np.zeros((dirs, 2 * gates * hidden), dtype)
        if h0 is None:
            h0 = np.zeros((dirs, batch, hidden), dtype)
        elif self.layout:
            h0 = h0.transpose(1, 0, 2)
        if self.has_cell_state:
            c0 = np.zeros((dirs, batch, hidden), dtype) if c0 is None else (c0.transpose(1, 0, 2) if self.layout else c0)
            p = np.zeros((dirs, 3 * hidden), dtype) if p is None else p
        mask = None
        lens = None if seq_lens is None else sequence_lengths(name, seq_lens, batch, seq)
        if lens is not None:
            mask = (np.arange(seq)[:, None] < lens[None, :])[:, :, None]  # (seq, batch, 1)
        return {"x": x, "w": w, "r": r, "wb": b[:, :gates * hidden], "rb": b[:, gates * hidden:], "mask": mask,
                "h0": h0, "c0": c0, "p": p}

    def _input_grads(self, fwd_inputs, prepared, dx, dw, dr, dwb, drb, dh0, dc0, dp):
        def like(grad, index):
            if len(fwd_inputs) <= index or fwd_inputs[index] is None:
                return None
            return grad.astype(np.asarray(fwd_inputs[index]).dtype, copy=False)

        if self.layout:
            dx, dh0 = dx.transpose(1, 0, 2), dh0.transpose(1, 0, 2)
            dc0 = None if dc0 is None else dc0.transpose(1, 0, 2)
        result = [like(dx, 0), like(dw, 1), like(dr, 2), like(np.concatenate([dwb, drb], axis=1), 3), None,
                  like(dh0, 5)]
        if self.has_cell_state:
            result += [like(dc0, 6), None if dp is None else like(dp, 7)]
        return tuple(result[:len(fwd_inputs)])


@register("LSTM")
class LSTM(_RecurrentOp):
    """ONNX LSTM: inputs X, W, R, optional B, sequence_lens, initial_h, initial_c, P; outputs Y, Y_h, Y_c.

    Gate order ``i, o, f, c``; peepholes P are ``i, o, f``. ``input_forget`` (coupled gates) is not supported.

    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> x, w, r = rng.standard_normal((3, 2, 4)), rng.standard_normal((2, 20, 4)), rng.standard_normal((2, 20, 5))
    >>> [a.shape for a in LSTM(hidden_size=5, direction="bidirectional").forward([x, w, r])]
    [(3, 2, 2, 5), (2, 2, 5), (2, 2, 5)]
    """

    op_name = "LSTM"

    def _make_cell(self, r, rb, p, acts):
        return _LSTMCell(r, rb, p, acts, self.clip, self.hidden_size)


@register("GRU")
class GRU(_RecurrentOp):
    """ONNX GRU: inputs X, W, R, optional B, sequence_lens, initial_h; outputs Y, Y_h. Gate order ``z, r, h``.

    >>> import numpy as np
    >>> x, w, r = np.ones((2, 1, 3)), np.zeros((1, 6, 3)), np.zeros((1, 6, 2))
    >>> GRU(hidden_size=2, linear_before_reset=1).forward([x, w, r])[1].tolist()  # h = 0.5 * tanh(0) + 0.5 * h
    [[[0.0, 0.0]]]
    """

    op_name = "GRU"

    def _make_cell(self, r, rb, p, acts):
        return _GRUCell(r, rb, acts, self.clip, self.hidden_size, self.linear_before_reset)


@register("RNN")
class RNN(_RecurrentOp):
    """ONNX RNN (Elman): ``H_t = f(X_t W^T + H_{t-1} R^T + Wb + Rb)``; outputs Y, Y_h.

    >>> import numpy as np
    >>> RNN(hidden_size=1).forward([np.ones((1, 1, 1)), np.ones((1, 1, 1)), np.ones((1, 1, 1))])[0].round(4).tolist()
    [[[[0.7616]]]]
    """

    op_name = "RNN"

    def _make_cell(self, r, rb, p, acts):
        return _RNNCell(r, rb, acts, self.clip, self.hidden_size)


__all__ = ["GRU", "LSTM", "RNN"]
