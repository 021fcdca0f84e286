"""The recurrent cells, written from their equations, and the one core that runs any of them.

- source (expr): short state h (d_model), long state c (d_ff), h <- P(o * c). Unlike
  torch.nn.LSTM there is no tanh on the output, the long state is wider than the short one, the
  cell's output is a second projection Out(o * c), and the initial state is learned. ReTran
  (retran.py) reuses the cell.
- standard (modular, `lstm-std`): the textbook cell, h = o * tanh(c) with c as wide as h, a zero
  initial state; equal to torch.nn.LSTM given the same weights (tests). Its source has one
  nn.Linear(d_x + d_h, d_h) per gate on [x; h], so every weight and bias starts
  U(±1/sqrt(d_x + d_h)).
- Elman and GRU (charlm, `rnn` / `gru`): h = tanh(W x + U h) with biases, and the bias-free GRU;
  equal to torch.nn.RNN and torch.nn.GRU(bias=False) given the same weights (tests). Their
  source's maps are nn.Linear layers at their default initialization, U(±1/sqrt(fan_in)).

The gates of a cell live in one matrix (W: all four input maps, U: all four recurrent maps),
which the fused recurrence needs. LAMB, which scales each tensor's step by its own norm, is told
the blocks (`lamb_blocks`), so its trust ratios are the source's per-gate ones.

Each cell's `step` is the reference (and what decoding from a state runs). From a fresh state
(training, whole-sequence evaluation) a layer runs as one autograd Function whose backward
through time is written by hand, instead of a graph of a dozen small nodes per step: its forward
keeps gates and states in preallocated buffers, its backward runs only the sequential products
per step and each weight gradient as one matmul over all steps. The LSTMs' Function also skips
trailing padding: sequences sorted by length, each step runs on the rows not yet ended, and the
outputs at padding are zero (no real position sees them). The Functions live in recurrence.py;
tests compare both paths.
"""

from __future__ import annotations

import torch
from torch import nn

from arithrepro.models.dropout import Dropout
from arithrepro.models.hooks import Fused, GateBlocks, SkipsPadding, Vmapped
from arithrepro.models.lm import LanguageModel
from arithrepro.models.recurrence import (ElmanRecurrence, GRURecurrence, LSTMRecurrence, Rows,
                                          run_fused)
from arithrepro.models.recurrence_copies import VmappedElman, VmappedGRU, VmappedLSTM


class SourceLSTMCell(nn.Module, GateBlocks, Vmapped):
    # Vmapped: as an ensemble's template, `sequence` runs the copies' Function (recurrence_copies)

    def __init__(self, d_in: int, d_model: int, d_ff: int, input_init: str = "kaiming",
                 standard: bool = False):
        super().__init__()
        self.d_ff, self.standard, self.zero_start = d_ff, standard, standard
        self.W = nn.Linear(d_in, 4 * d_ff)               # input weights; carries the gate biases
        self.U = nn.Linear(d_model, 4 * d_ff, bias=False)  # recurrent weights
        if standard:
            assert d_ff == d_model, "the standard cell's long state is as wide as its short one"
            self.register_buffer("h0", torch.zeros(d_model), persistent=False)
            self.register_buffer("c0", torch.zeros(d_ff), persistent=False)
            bound = (d_in + d_model) ** -0.5  # nn.Linear(d_x + d_h, d_h)'s default, per gate
            for p in (self.W.weight, self.W.bias, self.U.weight):
                nn.init.uniform_(p, -bound, bound)
            return
        self.P = nn.Linear(d_ff, d_model)                # next short state
        self.out = nn.Linear(d_ff, d_model)              # the cell's output
        self.h0 = nn.Parameter(torch.zeros(d_model))
        self.c0 = nn.Parameter(torch.zeros(d_ff))
        self.reset(input_init)

    def reset(self, input_init: str) -> None:
        """The expr source's initialization. input_init "kaiming" (its LSTM): input weights and
        the output map kaiming_uniform_ at its defaults; "normal" (inside ReTran): both N(0, 0.02).
        Either way: recurrent weights and the next-state map orthogonal, the forget gate's bias 1,
        every other bias 0."""
        for gate in self.U.weight.data.split(self.d_ff):  # gate order: i, f, o, g
            nn.init.orthogonal_(gate)
        nn.init.orthogonal_(self.P.weight)
        for w in (self.W.weight, self.out.weight):
            if input_init == "kaiming":
                nn.init.kaiming_uniform_(w)
            else:
                nn.init.normal_(w, 0.0, 0.02)
        for b in (self.W.bias, self.P.bias, self.out.bias):
            nn.init.zeros_(b)
        nn.init.ones_(self.W.bias.data[self.d_ff:2 * self.d_ff])  # forget gate starts open

    def lamb_blocks(self) -> dict:
        """The tensors that hold one block per gate, for LAMB's per-tensor trust ratios."""
        return {self.W.weight: 4, self.W.bias: 4, self.U.weight: 4}

    def initial(self, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.h0.expand(batch, -1), self.c0.expand(batch, -1)

    def inputs(self, x: torch.Tensor) -> torch.Tensor:
        return self.W(x)

    def finish(self, x: torch.Tensor) -> torch.Tensor:
        return x if self.standard else self.out(x)  # the output map, for all steps in one matmul

    def sequence(self, x: torch.Tensor, rows: "Rows") -> torch.Tensor:
        """The finished outputs of all steps from the initial state, zero at padding (rows)."""
        W, U = self.W, self.U.weight
        fn, rest = (VmappedLSTM, ()) if self.vmapped else (LSTMRecurrence, (rows,))
        if self.standard:
            return run_fused(fn, x, *rest, W.weight, W.bias, U, *[None] * 6)
        h0, c0 = self.initial(x.size(0))
        return run_fused(fn, x, *rest, W.weight, W.bias, U, self.P.weight, self.P.bias,
                         h0, c0, self.out.weight, self.out.bias)

    def step(self, xw, h, c, keep=None):
        """One time step given xw = W(x_t) (B, 4 d_ff). Returns (output, h, c): the output is
        o * c (source) or h = o * tanh(c) (standard)."""
        # h = c = None: the zero initial state, whose products need not be computed
        gates = xw if h is None else torch.addmm(xw, h, self.U.weight.t())
        ifo = gates[:, :3 * self.d_ff].sigmoid()
        g = gates[:, 3 * self.d_ff:].tanh()
        i, f, o = ifo.chunk(3, dim=1)
        c_new = i * g if c is None else torch.addcmul(f * c, i, g)
        if self.standard:
            m = h_new = o * c_new.tanh()
        else:
            m = o * c_new
            h_new = self.P(m)
        if keep is not None:  # padding leaves the state as it was
            k = keep.unsqueeze(1)
            h_new, c_new = torch.where(k, h_new, h), torch.where(k, c_new, c)
        return m, h_new, c_new


class _ZeroStartCell(nn.Module, Vmapped):
    """A cell whose state is one vector h that starts at zero (its products are skipped). W and
    U keep nn.Linear's initialization, as the charlm source's layers do: the input map
    U(±1/sqrt(d_in)), the recurrent one U(±1/sqrt(d))."""

    zero_start = True

    def __init__(self, W: nn.Linear, U: nn.Linear, d_model: int):
        super().__init__()
        self.d, self.W, self.U = d_model, W, U
        self.register_buffer("h0", torch.zeros(d_model), persistent=False)

    def initial(self, batch: int) -> tuple[torch.Tensor]:
        return (self.h0.expand(batch, -1),)

    def finish(self, x: torch.Tensor) -> torch.Tensor:
        return x

    @staticmethod
    def kept(h_new, h, keep):
        """Padding leaves the state as it was."""
        return h_new if keep is None else torch.where(keep.unsqueeze(1), h_new, h)


class ElmanCell(_ZeroStartCell):
    """h = tanh(W_ih x + b_ih + W_hh h + b_hh), torch.nn.RNN's equation."""

    def __init__(self, d_in: int, d_model: int):
        super().__init__(nn.Linear(d_in, d_model), nn.Linear(d_model, d_model), d_model)

    def inputs(self, x: torch.Tensor) -> torch.Tensor:
        # both biases join the input half, for all steps in one op
        return self.W(x) + self.U.bias

    def sequence(self, x: torch.Tensor, rows: "Rows") -> torch.Tensor:
        fn = VmappedElman if self.vmapped else ElmanRecurrence
        return run_fused(fn, self.inputs(x), self.U.weight)

    def step(self, xw, h, keep=None):
        h_new = self.kept((xw if h is None else torch.addmm(xw, h, self.U.weight.t())).tanh(),
                          h, keep)
        return h_new, h_new


class GRUCell(_ZeroStartCell):
    """The bias-free GRU: r = σ(W_r x + U_r h), z = σ(W_z x + U_z h),
    n = tanh(W_n x + r ⊙ (U_n h)), h = (1 - z) ⊙ n + z ⊙ h; equal to torch.nn.GRU(bias=False)
    (tests), whose gate order (r, z, n) it keeps."""

    def __init__(self, d_in: int, d_model: int):
        super().__init__(nn.Linear(d_in, 3 * d_model, bias=False),
                         nn.Linear(d_model, 3 * d_model, bias=False), d_model)

    def inputs(self, x: torch.Tensor) -> torch.Tensor:
        return self.W(x)

    def sequence(self, x: torch.Tensor, rows: "Rows") -> torch.Tensor:
        fn = VmappedGRU if self.vmapped else GRURecurrence
        return run_fused(fn, self.inputs(x), self.U.weight)

    def step(self, xw, h, keep=None):
        d = self.d
        if h is None:  # U h = 0
            z = xw[:, d:2 * d].sigmoid()
            n = xw[:, 2 * d:].tanh()
            h_new = n - z * n
        else:
            hu = h @ self.U.weight.t()
            r, z = (xw[:, :2 * d] + hu[:, :2 * d]).sigmoid().chunk(2, dim=1)
            n = torch.addcmul(xw[:, 2 * d:], r, hu[:, 2 * d:]).tanh()
            h_new = self.kept(torch.addcmul(n, z, h - n), h, keep)
        return h_new, h_new


class RecurrentCore(nn.Module, Fused, SkipsPadding):
    """Stacked cells run step by step, dropout between layers (not after the last).

    A cell provides inputs(x) (its input half for all steps at once), initial(batch) (its
    state, a tuple), step(xw_t, *state, keep) -> (output, *state) and finish(outputs); cells
    with zero_start begin from a zero state whose products are skipped.

    From a fresh state (training, and evaluation of whole sequences) a cell's
    sequence(x, rows) -> finished outputs runs all its steps as one autograd Function (rows: the
    real positions, see Rows); `fused = False` runs `step` instead, the reference the Functions
    are tested against. Under torch.compile the steps run, as before."""

    fused_copies = True  # its cells' Functions have an ensemble form (recurrence_copies.py)
    # skip_padding: the fused LSTM runs only the rows still inside their sequence (False: every
    # row at every step, a schedule fixed before the batch is read; its outputs at padding are
    # then computed)

    def __init__(self, cells, dropout: float):
        super().__init__()
        self.cells = nn.ModuleList(cells)
        self.drop = Dropout(dropout)

    def forward(self, x, keep=None, state=None, pos: int = 0):
        """x (B, T, d_in) -> (B, T, d); with a state, that state is advanced in place."""
        B, T, _ = x.shape
        fused = state is None and self.fused and not torch.compiler.is_compiling()
        if fused:
            rows = (Rows.of(keep, B, T, x.device) if self.skip_padding
                    else Rows.full(B, T, x.device))
        if state is None:
            keep = None  # as in ReTran: trailing padding cannot change a real position's output
        for li, cell in enumerate(self.cells):
            if state is not None:
                s = state[li]
            else:
                s = cell.initial(B)
                if cell.zero_start:
                    s = (None,) * len(s)
            if fused:
                x = cell.sequence(x, rows)
            else:
                # unbind, not xw[:, t]: each slice's backward would materialize a zero gradient
                # the size of all of xw.
                xw = cell.inputs(x).unbind(1)
                ms = []
                for t in range(T):
                    m, *s = cell.step(xw[t], *s, None if keep is None else keep[:, t])
                    ms.append(m)
                if state is not None:
                    state[li] = tuple(s)
                x = cell.finish(torch.stack(ms, dim=1))
            if li < len(self.cells) - 1:
                x = self.drop(x)
        return x, state

    def init_state(self, batch, max_len, device=None, dtype=None):
        return [tuple(s.detach().clone() for s in cell.initial(batch)) for cell in self.cells]


class LSTMCore(RecurrentCore):
    def __init__(self, d_model: int, d_ff: int, layers: int, dropout: float, standard: bool = False):
        super().__init__((SourceLSTMCell(d_model, d_model, d_ff, standard=standard)
                          for _ in range(layers)), dropout)


def build(size: dict, *, vocab_size: int, dropout: float, max_len: int, pad_id: int) -> LanguageModel:
    core = LSTMCore(size["d_model"], size["d_ff"], size["layers"], dropout)
    return LanguageModel(core, vocab_size, size["d_model"], pad_id)


def build_standard(size: dict, *, vocab_size: int, dropout: float, max_len: int,
                   pad_id: int) -> LanguageModel:
    """The modular source's LSTM LM: embedding d -> L standard layers (hidden d) -> classifier
    d -> V with bias."""
    d = size["d_model"]
    core = LSTMCore(d, d, size["layers"], dropout, standard=True)
    return LanguageModel(core, vocab_size, d, pad_id, logit_scale=False, head_bias=True)


def build_rnn(size: dict, *, vocab_size: int, dropout: float, max_len: int, pad_id: int,
              cell: str = "elman") -> LanguageModel:
    """The charlm source's recurrent LMs: embedding d_embed -> `layers` cells (hidden d_model)
    -> linear head with bias. Elman cells (one layer: SimpleRNN; more: the multi-layer RNN) or
    bias-free GRU cells."""
    Cell = {"elman": ElmanCell, "gru": GRUCell}[cell]
    e, d = size["d_embed"], size["d_model"]
    core = RecurrentCore((Cell(e if i == 0 else d, d) for i in range(size["layers"])), dropout)
    return LanguageModel(core, vocab_size, d, pad_id, logit_scale=False, head_bias=True,
                         d_embed=e)


def build_gru(size: dict, **kwargs) -> LanguageModel:
    return build_rnn(size, cell="gru", **kwargs)
