"""E copies of one architecture trained as one model: the seeds of a configuration in one process.

Each parameter of the copies is stacked on a new leading dimension (copy e at index e), and a
forward runs every copy at once through torch.func.vmap over torch.func.functional_call of one
template module: each operation of a copy's forward runs once for all copies, on E times the
data. A model this small leaves most of a machine idle per operation; E copies fill more of it.

What stays per copy:
- the weights: each copy is the model its own seed builds (the caller builds the copies);
- the data: forward takes inputs stacked the same way, (E, B, ...), one batch per copy;
- dropout and any other random draw inside the forward (vmap's randomness="different": each
  copy's masks are independent, from the process's one generator, so not the stream a
  standalone run of that seed would draw);
- the optimizer's maths: an elementwise optimizer (Adam, AdamW) is per copy as it stands, and
  `lamb_blocks` gives LAMB one block per copy (and per gate within it), so every trust ratio is
  a copy's own.

Integers a model draws on the host to shape its forward (the looped encoder's extra loops) cannot
differ between copies that run as one program: a template that is a `SharedDraw`
(models/hooks.py) is asked for them once per forward, and every copy runs with the same ones.

The fused recurrences and ReTran's fused layer run their ensemble forms
(models/recurrence_copies.py, models/retran_copies.py) over every row: the copies' rows end at
different steps, so none is skipped. `Ensemble` sets these switches on its template
(hooks.ensemble_template); `copy_of` gives a copy back with its class's own.
"""

from __future__ import annotations

import copy
from contextlib import nullcontext

import torch
from torch import nn
from torch.func import functional_call, vmap
from torch.nn.attention import SDPBackend, sdpa_kernel

from arithrepro.models import hooks


class Ensemble(nn.Module, hooks.GateBlocks):
    def __init__(self, copies: list[nn.Module]):
        super().__init__()
        if not copies:
            raise ValueError("an ensemble needs at least one copy")
        first = copies[0]
        names = [n for n, _ in first.named_parameters()]
        for i, other in enumerate(copies[1:], 1):
            theirs = dict(other.named_parameters())
            if type(other) is not type(first) or list(theirs) != names or any(
                    theirs[n].shape != p.shape for n, p in first.named_parameters()):
                raise ValueError(f"ensemble copy {i}: not the same architecture as copy 0")
        self.members = len(copies)
        self.names = names
        self.stacked = nn.ParameterList(
            nn.Parameter(torch.stack([dict(c.named_parameters())[n].detach() for c in copies]))
            for n in names)
        self.buffer_names = []
        for j, (n, b) in enumerate(first.named_buffers()):
            for i, other in enumerate(copies[1:], 1):
                if not torch.equal(dict(other.named_buffers())[n], b):
                    raise ValueError(f"ensemble copy {i}: buffer {n} differs from copy 0's")
            self.register_buffer(f"buffer{j}", b.detach().clone(), persistent=False)
            self.buffer_names.append(n)
        template = copy.deepcopy(first)
        hooks.ensemble_template(template)
        # a list, so that nn.Module does not register the template's own parameters
        self._template = [template]

    @property
    def template(self) -> nn.Module:
        return self._template[0]

    def _apply(self, fn, recurse=True):
        self.template._apply(fn, recurse)
        return super()._apply(fn, recurse)

    def train(self, mode: bool = True):
        self.template.train(mode)
        return super().train(mode)

    def params(self) -> dict:
        return dict(zip(self.names, self.stacked))

    def buffers_of_template(self) -> dict:
        return {n: getattr(self, f"buffer{j}") for j, n in enumerate(self.buffer_names)}

    def forward(self, x: torch.Tensor, *args, shared: bool = False, drawn: dict | None = None,
                **kwargs):
        """x (E, B, ...): one batch per copy -> outputs (E, ...). shared: x (B, ...) is every
        copy's input. drawn: the template's shared_draw, made by the caller (None: drawn here).
        Other arguments go to every copy as they are."""
        if drawn is None and isinstance(self.template, hooks.SharedDraw) and self.training:
            drawn = self.template.shared_draw(x if shared else x[0])
        kwargs = {**(drawn or {}), **kwargs}
        template, buffers = self.template, self.buffers_of_template()

        def one(params, inputs):
            return functional_call(template, (params, buffers), (inputs, *args), kwargs)

        with attention_kernels(x.device):
            return vmap(one, in_dims=(0, None if shared else 0),
                        randomness="different")(self.params(), x)

    def lamb_blocks(self) -> dict:
        """Every stacked parameter as E times the blocks its template parameter holds (an LSTM
        gate matrix holds 4): LAMB's trust ratio per copy and, within one, per gate."""
        ids = {id(p): n for n, p in self.template.named_parameters()}
        per_copy = {ids[id(p)]: k for p, k in hooks.lamb_blocks(self.template).items()}
        return {p: self.members * per_copy.get(n, 1) for n, p in zip(self.names, self.stacked)}

    @torch.no_grad()
    def state_of(self, i: int) -> dict:
        """Copy i's parameters as the template names them (detached clones)."""
        return {n: p[i].detach().clone() for n, p in zip(self.names, self.stacked)}

    @torch.no_grad()
    def load_state_of(self, i: int, state: dict) -> None:
        """Set copy i's parameters from `state` (state_of's, or a standalone model's
        state_dict)."""
        for n, p in zip(self.names, self.stacked):
            p[i].copy_(state[n])

    def copy_of(self, i: int) -> nn.Module:
        """Copy i as a standalone model (its own tensors), in the ensemble's mode, with the
        fused paths its architecture has."""
        model = copy.deepcopy(self.template)
        hooks.own_forms(model)
        with torch.no_grad():
            own = dict(model.named_parameters())
            for n, p in zip(self.names, self.stacked):
                own[n].copy_(p[i])
        return model.train(self.training)


def attention_kernels(device: torch.device):
    """The attention kernels a forward under vmap may use on `device`. On CUDA, the plain (math)
    one: vmap's batching rule hands the memory-efficient kernel's backward a log-sum-exp it
    refuses ("LSE is not correctly aligned (strideH)", torch 2.11 on an H100, the eager GPT
    ensemble of tests/test_cuda.py), and at these lengths (under 100 tokens) the plain kernel
    costs little. Elsewhere, torch's own choice."""
    return sdpa_kernel(SDPBackend.MATH) if device.type == "cuda" else nullcontext()


def padding(model_spec, dims: dict) -> dict | None:
    """What stack_inputs pads a model's copies' batches with: a causal language model's padding
    token (None for an encoder, or a model without one: its batches must share a width)."""
    pad = dims.get("pad_id", -1)
    return {"x": pad} if model_spec.causal and pad >= 0 else None


def stack_inputs(batches: list[tuple], pad: dict | None = None) -> tuple:
    """Per-copy batches (x, y, mask) -> (X, Y, M), each (E, B, ...): every copy's batch padded
    to the most rows (rows of x's padding token, or 0 where the model has none, unscored: each
    row's outputs are its own, and the loss counts each copy's scored positions only) and its
    columns to the widest, x with pad["x"] (the model's padding token), y with 0, mask with
    False. For a causal model the appended columns change no scored output; a model that sees
    both ways needs batches of one width (stack_inputs refuses others without `pad`)."""
    widths = {b[0].size(1) for b in batches}
    if len(widths) > 1 and pad is None:
        raise ValueError(f"copies' batches have {len(widths)} widths; an encoder's copies must "
                         "draw batches of one width")
    rows, width = max(b[0].size(0) for b in batches), max(widths)
    out = []
    for k, fill in enumerate(((pad or {}).get("x", 0), 0, False)):
        parts = []
        for b in batches:
            t = b[k]
            if t.size(1) < width:
                extra = t.new_full((t.size(0), width - t.size(1), *t.shape[2:]), fill)
                t = torch.cat([t, extra], dim=1)
            if t.size(0) < rows:
                t = torch.cat([t, t.new_full((rows - t.size(0), *t.shape[1:]), fill)])
            parts.append(t)
        out.append(torch.stack(parts))
    return tuple(out)


class CopiesBatches:
    """The copies' batch sources (each an EpochBatches or StreamBatches of its own run, as its
    standalone run draws them) as one: batch(step) -> (X, Y, M), stacked by stack_inputs. The
    copies run the same steps; their epochs may differ in length (copies of one configuration
    on training sets of different sizes), where the loop validates by step."""

    def __init__(self, sources: list, pad: dict | None = None):
        if len({s.steps for s in sources}) != 1:
            raise ValueError("the copies' batch sources must run the same steps")
        self.sources, self.pad, self.steps = sources, pad, sources[0].steps

    def epoch(self, step: int):
        """The epoch of `step`: one, or a list of each copy's where theirs differ."""
        epochs = [s.epoch(step) for s in self.sources]
        return epochs[0] if len(set(epochs)) == 1 else epochs

    def epoch_end(self, step: int) -> bool:
        ends = {s.epoch_end(step) for s in self.sources}
        if len(ends) > 1:
            raise ValueError(f"step {step}: the copies' epochs end at different steps; copies "
                             "whose epochs differ train only where validation goes by step")
        return ends.pop()

    def __call__(self, step: int):
        return stack_inputs([s(step) for s in self.sources], self.pad)


def stacked(builts: list) -> tuple[nn.Module, object]:
    """(model, batches) that train runs.Built `builts` as one: one run's own, or its copies
    stacked with their batches (padded to one width where the model takes a padding token)."""
    from arithrepro.models.registry import spec_of

    first = builts[0]
    return (ensemble([b.net for b in builts]),
            stacked_batches([b.data.batches for b in builts],
                            padding(spec_of(first.arch), first.arch["dims"])))


def ensembles(builts: list) -> list[list[int]]:
    """`builts` (runs.Built) in groups that can train as one ensemble, by index, in order: runs
    of one architecture whose training settings differ in runs.PER_COPY alone (seed,
    learning rate, weight decay) and that run as many steps, with epochs of one length where
    the loop validates at epoch ends (their batches' rows and widths are padded to one shape:
    stack_inputs). So configurations that differ in their seeds, rates, decays, or data (modular's
    r_train), train together."""
    import json
    from dataclasses import asdict

    from arithrepro.runs import PER_COPY

    def key(b) -> str:
        cfg = {k: v for k, v in asdict(b.cfg).items() if k not in PER_COPY}
        batches = b.data.batches
        return json.dumps([b.arch, cfg, batches.steps,
                           batches.per_epoch if b.cfg.validate_epochs else None],
                          sort_keys=True, default=str)

    groups: dict[str, list[int]] = {}
    for i, b in enumerate(builts):
        groups.setdefault(key(b), []).append(i)
    return list(groups.values())


def ensemble(models: list[nn.Module]) -> nn.Module:
    """What trains `models` as one: one model is its own ensemble of one (arithrepro/train
    trains it as such, bit for bit as alone); several are stacked in an Ensemble."""
    return models[0] if len(models) == 1 else Ensemble(models)


def stacked_batches(sources: list, pad: dict | None = None):
    """The batches of `ensemble(models)`: one model's own source, or the copies' stacked."""
    return sources[0] if len(sources) == 1 else CopiesBatches(sources, pad)
