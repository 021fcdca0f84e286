"""The expr source's LSTM: short state h (d_model), long state c (d_ff), h <- P(o * c).

Unlike torch.nn.LSTM there is no tanh on the output, the long state is wider than the short one,
and the cell's output is a second projection Out(o * c). ReTran (retran.py) reuses the cell.
"""

from __future__ import annotations

import torch
from torch import nn

from arithrepro.models.lm import LanguageModel


class SourceLSTMCell(nn.Module):
    def __init__(self, d_in: int, d_model: int, d_ff: int, input_init: str = "kaiming"):
        super().__init__()
        self.d_ff = d_ff
        self.W = nn.Linear(d_in, 4 * d_ff)               # input weights; carries the gate biases
        self.U = nn.Linear(d_model, 4 * d_ff, bias=False)  # recurrent weights
        self.P = nn.Linear(d_ff, d_model)                # next short state
        self.out = nn.Linear(d_ff, d_model)              # the cell's output
        self.h0 = nn.Parameter(torch.zeros(d_model))
        self.c0 = nn.Parameter(torch.zeros(d_ff))
        self.reset_gates(input_init)

    def reset_gates(self, input_init: str) -> None:
        for gate in self.U.weight.data.split(self.d_ff):  # gate order: i, f, o, g
            nn.init.orthogonal_(gate)
        if input_init == "kaiming":
            nn.init.kaiming_uniform_(self.W.weight)
        else:
            nn.init.normal_(self.W.weight, 0.0, 0.02)
        nn.init.zeros_(self.W.bias)
        nn.init.ones_(self.W.bias.data[self.d_ff:2 * self.d_ff])  # forget gate starts open

    def initial(self, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.h0.expand(batch, -1), self.c0.expand(batch, -1)

    def step(self, xw, h, c, keep=None):
        """One time step given xw = W(x_t) (B, 4 d_ff). Returns (o * c, h, c)."""
        gates = torch.addmm(xw, h, self.U.weight.t())
        ifo = gates[:, :3 * self.d_ff].sigmoid()
        g = gates[:, 3 * self.d_ff:].tanh()
        i, f, o = ifo.chunk(3, dim=1)
        c_new = torch.addcmul(f * c, i, g)
        m = o * c_new
        h_new = self.P(m)
        if keep is not None:  # padding leaves the state as it was
            k = keep.unsqueeze(1)
            h_new, c_new = torch.where(k, h_new, h), torch.where(k, c_new, c)
        return m, h_new, c_new


class LSTMCore(nn.Module):
    """Stacked source cells, dropout between layers (not after the last)."""

    def __init__(self, d_model: int, d_ff: int, layers: int, dropout: float):
        super().__init__()
        self.cells = nn.ModuleList(SourceLSTMCell(d_model, d_model, d_ff) for _ in range(layers))
        self.drop = nn.Dropout(dropout)

    def forward(self, x, keep=None, state=None, pos: int = 0):
        B, T, _ = x.shape
        if state is None:
            keep = None  # as in ReTran: trailing padding cannot change a real position's output
        for li, cell in enumerate(self.cells):
            h, c = cell.initial(B) if state is None else state[li]
            # The input half of every gate, for all steps in one matmul. unbind, not xw[:, t]:
            # each slice's backward would materialize a zero gradient the size of all of xw.
            xw = cell.W(x).unbind(1)
            ms = []
            for t in range(T):
                m, h, c = cell.step(xw[t], h, c, None if keep is None else keep[:, t])
                ms.append(m)
            if state is not None:
                state[li] = (h, c)
            x = cell.out(torch.stack(ms, dim=1))  # the output map, for all steps in one matmul
            if li < len(self.cells) - 1:
                x = self.drop(x)
        return x, state

    def init_state(self, batch, max_len, device=None, dtype=None):
        return [tuple(s.detach().clone() for s in cell.initial(batch)) for cell in self.cells]


def build(size: dict, *, vocab_size: int, dropout: float, max_len: int, pad_id: int) -> LanguageModel:
    core = LSTMCore(size["d_model"], size["d_ff"], size["layers"], dropout)
    return LanguageModel(core, vocab_size, size["d_model"], dropout, pad_id)
