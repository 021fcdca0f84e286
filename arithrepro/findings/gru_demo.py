"""charlm's two-unit GRU demo (the source's section 6): the project's gru cell set to the
demo's hand-picked weights, and the source's answers about it checked on a grid of inputs.

Unit 0 carries data, unit 1 a control signal that drives the gates: the reset and update gates
of unit 0 read the control input and state, the new content reads the data input and state.
The demo's sliders start at reset 3, update -3 and both new-content weights 3, with the control
input at 2 and the control state at 0; the data sliders span [-2, 2]. These are consistency
checks: a deterministic cell, no run and no seed."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from arithrepro.findings.base import NOT_REPRODUCED, REPRODUCED, Finding, Verdict

# how close "almost" is: the demo's extreme weight 3 at control 2 puts a gate at σ(±6), 0.25 %
# from 0 or 1, which moves the output by at most 0.01 on the sliders' range
NEAR = 0.05
RANGE = 2.0      # the data sliders' span, ±
STEPS = 21       # grid points per axis over it


@dataclass(frozen=True)
class Weights:
    reset: float = 3.0
    update: float = -3.0
    new_in: float = 3.0
    new_hidden: float = 3.0


DEFAULT = Weights()
# the answers' settings: exercise 2 (difference), 3 (memory) and 4 (pure input, two ways)
CONFIGS = {"sum (the default)": DEFAULT, "difference": Weights(new_hidden=-3.0),
           "memory": Weights(update=3.0), "pure input": Weights(reset=-3.0)}


def _grid():
    import torch

    g = torch.linspace(-RANGE, RANGE, STEPS, dtype=torch.float64)
    x, h = torch.meshgrid(g, g, indexing="ij")
    return x.flatten(), h.flatten()


@functools.lru_cache(maxsize=None)
def _cell(w: Weights):
    """The project's gru cell, one data input and one control input, at the demo's weights: its
    W (input) and U (state) rows r, z, n for each unit, torch's order."""
    import torch

    from arithrepro.models.recurrent import GRUCell

    cell = GRUCell(2, 2).double()
    with torch.no_grad():
        W, U = cell.W.weight, cell.U.weight
        W.zero_()
        U.zero_()
        W[0, 1] = U[0, 1] = w.reset
        W[2, 1] = U[2, 1] = w.update
        W[4, 0], U[4, 0] = w.new_in, w.new_hidden
    return cell


def step(x, h, w: Weights, control: float = 2.0) -> dict:
    """The project's gru cell at the demo's weights, on data inputs x and states h (tensors):
    unit 0's gates r and z and new content n by the source's equations, and its new state as
    the cell computes it (h_new) and as the source's equations do (h_source)."""
    import torch

    cell = _cell(w)
    W, U = cell.W.weight, cell.U.weight
    with torch.no_grad():
        xs = torch.stack([x, torch.full_like(x, control)], 1)
        hs = torch.stack([h, torch.zeros_like(h)], 1)
        h_new, _ = cell.step(cell.inputs(xs), hs)
        r = torch.sigmoid(xs @ W[0] + hs @ U[0])
        z = torch.sigmoid(xs @ W[2] + hs @ U[2])
        n = torch.tanh(xs @ W[4] + r * (hs @ U[4]))
    return {"r": r, "z": z, "n": n, "h_new": h_new[:, 0], "h_source": (1 - z) * n + z * h}


def _slope(w: Weights, control: float, wrt: str) -> float:
    """The mean |∂h_new/∂(x or h)| over the grid (central differences)."""
    x, h = _grid()
    e = 1e-4
    up = {"x": (x + e, h), "h": (x, h + e)}[wrt]
    down = {"x": (x - e, h), "h": (x, h - e)}[wrt]
    return float(((step(*up, w, control)["h_new"] - step(*down, w, control)["h_new"])
                  / (2 * e)).abs().mean())


def _demo(judge):
    """A check: judge(grid outputs of each config) -> (held, words), after the cell is found to
    compute the source's equations."""
    def check(rows, params):
        x, h = _grid()
        out = {name: step(x, h, w) for name, w in CONFIGS.items()}
        off = max(float((o["h_new"] - o["h_source"]).abs().max()) for o in out.values())
        if off > 1e-9:
            return Verdict(NOT_REPRODUCED, f"the gru cell departs from the source's GRU equations "
                           f"by up to {off:.2g} at the demo's weights", 1)
        held, words = judge(x, h, out)
        return Verdict(REPRODUCED if held else NOT_REPRODUCED,
                       f"{words} (the gru cell at the demo's weights, data input and state on a "
                       f"{STEPS}×{STEPS} grid over ±{RANGE:g}; it computes the source's equations)",
                       1)

    return check


def _default_sum(x, h, out):
    import torch
    off = float((out["sum (the default)"]["h_new"] - torch.tanh(3 * x + 3 * h)).abs().max())
    return off <= NEAR, f"new state − tanh(3x + 3h): at most {off:.3f} in size"


def _same_way(x, h, out):
    """n and h_new rise with x and with h; at x = h = 2 both high; n inside [-1, 1]."""
    o = out["sum (the default)"]
    rising = all(_monotone(o[k], axis) >= 0 for k in ("n", "h_new") for axis in (0, 1))
    top = (x == RANGE) & (h == RANGE)
    hi = min(float(o["n"][top]), float(o["h_new"][top]))
    inside = float(o["n"].abs().max()) <= 1.0
    held = rising and hi >= 1 - NEAR and inside
    return held, (f"n and the new state {'rise' if rising else 'do not all rise'} with the input "
                  f"and with the state; at input = state = {RANGE:g} the lower of the two is "
                  f"{hi:.3f}; n {'stays' if inside else 'does not stay'} inside [-1, 1]")


def _monotone(values, axis: int) -> float:
    """The smallest step of `values` along one axis of the grid (negative: it falls somewhere)."""
    grid = values.reshape(STEPS, STEPS)
    return float(grid.diff(dim=axis).min())


def _difference(x, h, out):
    import torch
    o = out["difference"]
    falls = float(o["n"].reshape(STEPS, STEPS).diff(dim=1).max()) < 0   # every step a fall
    top = (x == RANGE) & (h == RANGE)
    both_high = abs(float(o["n"][top]))
    off = float((o["h_new"] - torch.tanh(3 * x - 3 * h)).abs().max())
    held = falls and both_high <= NEAR and off <= NEAR
    return held, (f"W_hn[0,0] = -3: n {'falls' if falls else 'does not fall'} as the state "
                  f"rises; n is {both_high:.3f} from 0 at input = state = {RANGE:g}; new state − "
                  f"tanh(3x − 3h): at most {off:.3f} in size")


def _memory(x, h, out):
    o = out["memory"]
    z = float(o["z"].min())
    off = float((o["h_new"] - h).abs().max())
    return z >= 1 - NEAR and off <= NEAR, (f"W_xz[0,1] = W_hz[0,1] = 3: z ≥ {z:.4f}; new state − "
                                           f"old: at most {off:.4f} in size")


def _pure_input(x, h, out):
    import torch
    o = out["pure input"]
    r = float(o["r"].max())
    off = float((o["n"] - torch.tanh(3 * x)).abs().max())
    zero = step(x, h, Weights(new_hidden=0.0))
    off0 = float((zero["n"] - torch.tanh(3 * x)).abs().max())
    held = r <= NEAR and off <= NEAR and off0 <= 1e-12
    return held, (f"W_xr[0,1] = W_hr[0,1] = -3: r ≤ {r:.4f}, n − tanh(3x) at most {off:.4f}; "
                  f"W_hn[0,0] = 0: n − tanh(3x) at most {off0:.1g}")


def _control_zero(x, h, out):
    """At control 0 both gates sit at σ(0); per setting, the new state's mean sensitivity to the
    input falls and to the old state rises against control 2."""
    at_zero = [step(x, h, w, control=0.0) for w in CONFIGS.values()]
    at_half = max(float((o[k] - 0.5).abs().max()) for o in at_zero for k in ("r", "z")) <= 1e-12
    shifted = {}
    for name, w in CONFIGS.items():
        dx = (_slope(w, 2.0, "x"), _slope(w, 0.0, "x"))
        dh = (_slope(w, 2.0, "h"), _slope(w, 0.0, "h"))
        shifted[name] = (dx[1] < dx[0] and dh[1] > dh[0], dx, dh)
    held = at_half and all(s[0] for s in shifted.values())
    parts = "; ".join(f"{name}: along the input {dx[0]:.2f} → {dx[1]:.2f}, along the state "
                      f"{dh[0]:.2f} → {dh[1]:.2f}{'' if ok else ' (not so)'}"
                      for name, (ok, dx, dh) in shifted.items())
    return held, (f"control 0: r and z {'all' if at_half else 'not all'} at 0.50; the new "
                  f"state's mean absolute slope, control 2 → 0, {parts}")


TEST = ("the gru cell set to the demo's weights (control input 2), on a grid of data input and "
        "state over ±2: ")
FINDINGS = (
    Finding("charlm.gru-demo-sum", "with both new-content weights at the demo's default the "
            "GRU's state is a squashed sum of input and state",
            TEST + f"the new state within {NEAR:g} of tanh(3x + 3h) everywhere", _demo(_default_sum)),
    Finding("charlm.gru-demo-same-way", "new content and output move with input and state, high "
            "when both are high, the new content bounded by the tanh",
            TEST + "n and the new state never fall as input or state rises; both within "
            f"{NEAR:g} of 1 at input = state = 2; n inside [-1, 1]", _demo(_same_way)),
    Finding("charlm.gru-demo-difference", "a negative new-content weight on the state makes the "
            "new content a squashed difference of input and state",
                    TEST + f"n falls as the state rises, n within {NEAR:g} of 0 at input = state = 2, "
            f"and the new state within {NEAR:g} of tanh(3x − 3h)", _demo(_difference)),
    Finding("charlm.gru-demo-memory", "high update-gate weights make the cell copy its old state",
            TEST + f"z within {NEAR:g} of 1 and the new state within {NEAR:g} of the old "
            "everywhere", _demo(_memory)),
    Finding("charlm.gru-demo-pure-input", "negative reset weights, or a zero new-content weight on "
            "the state, make the new content ignore the old state",
            TEST + f"r ≤ {NEAR:g} and n within {NEAR:g} of tanh(3x) at reset weights -3; n equal "
            "to tanh(3x) at W_hn[0,0] = 0", _demo(_pure_input)),
    Finding("charlm.gru-demo-control-zero", "with the control input off both gates sit at one half "
            "and the output leans less on the input and more on the old state",
            "the gru cell at each of the four settings the answers found (sum, difference, "
            "memory, pure input), control input 2 against 0: r and z at 0.5 at control 0, and "
            "in every setting the new state's mean absolute slope over the grid falls along the "
            "input and rises along the state", _demo(_control_zero)),
)
