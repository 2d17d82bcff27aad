"""Recurrent layers as native torch operations: ONNX LSTM (gates i, o, f, c; peepholes i, o, f), GRU (gates
z, r, h; linear_before_reset) and RNN, as explicit time loops so every ONNX feature the reference supports
carries over: directions (forward, reverse, bidirectional), layouts 0/1, initial states, sequence_lens (past a
sequence's end the state is kept and the output is zero), clip, and the listed activations with their
alpha/beta. Outputs ``(Y, Y_h[, Y_c])``; autograd differentiates the loop (BPTT)."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from d5.frameworks.pytorch.operators import TorchOp, register
from d5.ops.onnx_attributes import adopt, operator_attributes
from d5.ops.sequence_plans import (RecurrentSpec, check_hidden_size, check_recurrent_attributes,
                                   check_recurrent_weights, gru_cell, lstm_cell)

# name -> f(a, alpha, beta); which take alpha/beta: onnx_attributes.RECURRENT_ACTIVATIONS
_ACTIVATIONS = {
    "sigmoid": lambda a, al, be: torch.sigmoid(a),
    "tanh": lambda a, al, be: torch.tanh(a),
    "relu": lambda a, al, be: torch.relu(a),
    "leakyrelu": lambda a, al, be: torch.where(a >= 0, a, al * a),
    "thresholdedrelu": lambda a, al, be: torch.where(a > al, a, torch.zeros_like(a)),
    "hardsigmoid": lambda a, al, be: torch.clamp(al * a + be, 0, 1),
    "affine": lambda a, al, be: al * a + be,
    "scaledtanh": lambda a, al, be: al * torch.tanh(be * a),
    "elu": lambda a, al, be: torch.where(a >= 0, a, al * torch.expm1(torch.clamp(a, max=0))),
    "softsign": lambda a, al, be: F.softsign(a),
    "softplus": lambda a, al, be: F.softplus(a),
}


class _Recurrent(TorchOp, RecurrentSpec):
    def __init__(self, **attributes) -> None:
        super().__init__()
        attributes = adopt(self, operator_attributes(self.op_name, attributes))
        self.activations = [(_ACTIVATIONS[name], alpha, beta) for name, alpha, beta in attributes.activations]
        check_recurrent_attributes(self.op_name, attributes)

    def _act(self, index: int, a):
        if self.clip is not None:
            a = torch.clamp(a, -self.clip, self.clip)
        fn, alpha, beta = self.activations[index]
        return fn(a, alpha, beta)

    def forward(self, x, w, r, b=None, sequence_lens=None, initial_h=None, initial_c=None, p=None):
        if self.layout:
            x = x.transpose(0, 1)
            initial_h = None if initial_h is None else initial_h.transpose(0, 1)
            initial_c = None if initial_c is None else initial_c.transpose(0, 1)
        seq, batch, features = x.shape
        dirs, gates = self.num_directions, self.gates
        hidden = check_hidden_size(self.op_name, self.hidden_size, tuple(r.shape))
        check_recurrent_weights(self.op_name, direction=self.direction, dirs=dirs, gates=gates, hidden=hidden,
                                x_shape=tuple(x.shape), w_shape=tuple(w.shape), r_shape=tuple(r.shape))
        zeros = x.new_zeros((dirs, batch, hidden))
        h0 = zeros if initial_h is None else initial_h
        c0 = zeros if initial_c is None else initial_c
        mask = None
        if sequence_lens is not None:
            lens = sequence_lens.reshape(-1).long().to(x.device)
            if bool((lens < seq).any()):
                mask = (torch.arange(seq, device=x.device)[:, None] < lens[None, :])[:, :, None]  # (seq, batch, 1)
        ys, hs, cs = [], [], []
        for d in range(dirs):
            wb = b[d, :gates * hidden] if b is not None else None
            rb = b[d, gates * hidden:] if b is not None else None
            xw = x @ w[d].t()
            if wb is not None:
                xw = xw + wb
            peep = None if p is None else p[d]
            y, h, c = self._run(d, xw, r[d], rb, peep, h0[d], c0[d], mask, hidden)
            ys.append(y)
            hs.append(h)
            cs.append(c)
        y = torch.stack(ys, dim=1)                              # (seq, dirs, batch, hidden)
        y_h = torch.stack(hs)
        outputs = [y.permute(2, 0, 1, 3) if self.layout else y, y_h.transpose(0, 1) if self.layout else y_h]
        if self.has_cell_state:
            y_c = torch.stack(cs)
            outputs.append(y_c.transpose(0, 1) if self.layout else y_c)
        return tuple(outputs)

    def _run(self, d, xw, r, rb, p, h, c, mask, hidden):
        reverse = self.direction == "reverse" or d == 1
        steps = range(xw.shape[0] - 1, -1, -1) if reverse else range(xw.shape[0])
        outputs = [None] * xw.shape[0]
        acts = len(self.default_activations) * d
        for t in steps:
            h_new, c_new = self._step(acts, xw[t], h, c, r, rb, p, hidden)
            if mask is None:
                h, c, outputs[t] = h_new, c_new, h_new
            else:
                m = mask[t]
                h = torch.where(m, h_new, h)
                c = None if c_new is None else torch.where(m, c_new, c)
                outputs[t] = torch.where(m, h_new, torch.zeros_like(h_new))
        return torch.stack(outputs), h, c

    def _step(self, acts, xw, h, c, r, rb, p, hidden):
        raise NotImplementedError


@register("LSTM")
class LSTM(_Recurrent):
    op_name = "LSTM"

    def _step(self, acts, xw, h, c, r, rb, p, n):
        pre = xw + h @ r.t()
        if rb is not None:
            pre = pre + rb
        fn, alpha, beta = self.activations[acts + 2]  # h(): the reference applies no clip to the cell output
        return lstm_cell(pre, c, p, n, lambda a: self._act(acts, a), lambda a: self._act(acts + 1, a),
                         lambda a: fn(a, alpha, beta))


@register("GRU")
class GRU(_Recurrent):
    op_name = "GRU"

    def _step(self, acts, xw, h, c, r, rb, p, n):
        def dense(v, start, stop):
            out = v @ r[start:stop].t()
            return out if rb is None else out + rb[start:stop]

        return gru_cell(xw, h, n, dense, lambda a: self._act(acts, a), lambda a: self._act(acts + 1, a),
                        self.linear_before_reset), None


@register("RNN")
class RNN(_Recurrent):
    op_name = "RNN"

    def _step(self, acts, xw, h, c, r, rb, p, n):
        pre = xw + h @ r.t()
        if rb is not None:
            pre = pre + rb
        return self._act(acts, pre), None
