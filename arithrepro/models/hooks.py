"""What a module tells the training loop and the ensemble about itself, declared by inheriting
one of these classes; the loop and the ensemble ask `isinstance`, never an attribute's name.

- GateBlocks: some parameters hold several blocks that LAMB rates apart (an LSTM's four gate
  matrices in one tensor), as the source's separate tensors;
- Fused: a hand-written autograd Function runs the module (`fused`; False runs the per-op
  reference), and `fused_copies` says whether that Function has an ensemble form;
- Vmapped: the module switches to its fused Function's ensemble form as an ensemble's template;
- SkipsPadding: the module skips rows past their last real position, a schedule read from the
  batch; an ensemble (whose copies' rows end at different steps) and a static step (whose
  shapes are fixed before the batch is read) run every row instead;
- SharedDraw: a training forward draws integers on the host that shape it (the looped
  encoder's extra loops); an ensemble's copies and a static step draw them once, before it.

`ensemble_template`, `every_row` and `own_forms` set and undo these switches on a model's
modules, as instance attributes over the class's defaults.
"""

from __future__ import annotations

from torch import nn


class GateBlocks:
    def lamb_blocks(self) -> dict:
        """{parameter: the number of equal row blocks it holds}."""
        raise NotImplementedError


class Fused:
    fused = True
    fused_copies = False


class Vmapped:
    vmapped = False


class SkipsPadding:
    skip_padding = True


class SharedDraw:
    def shared_draw(self, x) -> dict:
        """The keyword arguments a training forward on x would draw for itself."""
        raise NotImplementedError


_SWITCHES = ("fused", "vmapped", "skip_padding")


def lamb_blocks(model: nn.Module) -> dict:
    return {p: k for m in model.modules() if isinstance(m, GateBlocks)
            for p, k in m.lamb_blocks().items()}


def ensemble_template(model: nn.Module) -> None:
    """Switch `model`'s modules to what a vmapped ensemble runs."""
    for m in model.modules():
        if isinstance(m, Vmapped):
            m.vmapped = True
        if isinstance(m, SkipsPadding):
            m.skip_padding = False
        if isinstance(m, Fused) and not m.fused_copies:
            m.fused = False


def every_row(model: nn.Module) -> list:
    """Turn off row skipping in `model`; returns what `restore` needs to put it back."""
    out = []
    for m in model.modules():
        if isinstance(m, SkipsPadding):
            out.append((m, m.__dict__.get("skip_padding")))
            m.skip_padding = False
    return out


def restore(saved: list) -> None:
    for m, own in saved:
        if own is None:
            m.__dict__.pop("skip_padding", None)
        else:
            m.skip_padding = own


def own_forms(model: nn.Module) -> None:
    """Every module back on its class's own switches."""
    for m in model.modules():
        for switch in _SWITCHES:
            m.__dict__.pop(switch, None)
