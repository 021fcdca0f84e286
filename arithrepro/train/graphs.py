"""The static step (TrainConfig.graphs): every step at a static shape, reading nothing from the
device, so that on a GPU each shape's whole step (forward, backward and optimizer) is captured
once as a CUDA graph and replayed.

Every batch is padded to the largest shape seen so far (unscored rows and columns), the loss
zeroes unscored positions instead of gathering the scored ones (masked_loss), the recurrences
run every row at every step (models/hooks.every_row), and what the step draws on the host (a
progressive loss's depth, a looped encoder's extra loops) is drawn before it, in the order the
eager step draws it. On a CPU that step runs as it is (tests compare it with the eager one).
"""

from __future__ import annotations

import torch

from arithrepro.device import autocast
from arithrepro.models import hooks
from arithrepro.models.lm import LanguageModel
from arithrepro.train.config import TrainConfig
from arithrepro.train.losses import masked_loss, scored
from arithrepro.train.parts import Parts


class StaticBatch:
    """A batch as the static step runs it: padded to the largest shape seen so far (extra rows
    unscored, a language model's extra columns its padding token, unscored), with what the step
    draws on the host before it (a progressive loss's exit depth, a looped encoder's extra
    loops), in the order the eager step draws them. `key` names the graph that runs it."""

    def __init__(self, template, cfg: TrainConfig):
        self.template, self.outputs_from = template, cfg.outputs_from
        self.recurrences = template.recurrences if cfg.progressive else 0
        # only a causal language model takes extra columns (its padding token)
        self.pad_id = template.pad_id if isinstance(template, LanguageModel) else None
        self.shape = (0, 0)

    def __call__(self, x, y, mask) -> tuple:
        """Copy-stacked (x, y, mask) -> (x, y, mask, the drawn arguments), padded."""
        x, y, mask = self._pad(x, y, mask)
        kw = {}
        if self.recurrences and not self.outputs_from:  # as losses.outputs draws it
            kw["exit_at"] = int(torch.randint(1, self.recurrences + 1, ()))
        if isinstance(self.template, hooks.SharedDraw) and self.template.training:
            kw["drawn"] = self.template.shared_draw(x[0])
        return x, y, mask, kw

    @staticmethod
    def key(x, kw: dict) -> tuple:
        """What one captured graph runs: the padded shape and the host's draws."""
        return tuple(x.shape), repr(sorted(kw.items()))

    def _pad(self, x, y, mask):
        B, T = mask.shape[1], mask.shape[2]
        wide = self.pad_id is not None
        self.shape = (max(self.shape[0], B), max(self.shape[1], T) if wide else T)
        rows, cols = self.shape
        if (rows, cols) == (B, T):
            return x, y, mask
        fill = self.pad_id if wide else 0
        out = []
        for t, value in ((x, fill), (y, 0), (mask, False)):
            shape = list(t.shape)
            shape[1], shape[2] = rows, cols
            padded = t.new_full(shape, value)
            padded[:, :B, :T] = t
            out.append(padded)
        return tuple(out)


class StaticStep:
    def __init__(self, parts: Parts, cfg: TrainConfig, ens):
        self.parts, self.cfg, self.ens, self.device = parts, cfg, ens, parts.device
        self.recurrences = ens.template.recurrences if cfg.progressive else 0
        self.restore = hooks.every_row(ens.template)
        self.batch = StaticBatch(ens.template, cfg)
        self.graphs, self.pool, self.ready = {}, None, False

    def close(self) -> None:
        """Give the model back as the step found it (its recurrences skip padding again)."""
        hooks.restore(self.restore)

    def __call__(self, x, y, mask):
        p = self.parts
        x, y, mask, kw = self.batch(x, y, mask)
        count = scored(mask, self.cfg.outputs_from)
        # the rate on the host, as the schedule sets it (a GPU's is a tensor on the device)
        lr = p.rate()
        if self.device.type == "cuda":
            loss = self._replay(x, y, mask, count, kw)
        else:
            p.opt.zero_grad(set_to_none=True)
            loss = self._body(x, y, mask, count, kw)
        p.sched.step()
        return loss, lr

    def _loss(self, x, y, mask, count, kw) -> torch.Tensor:
        outs = self.ens.forward(self.parts.runner, x, self.recurrences, self.cfg.outputs_from,
                                  **kw)
        return masked_loss(outs, y, mask, count, self.cfg.outputs_from)

    def _body(self, x, y, mask, count, kw) -> torch.Tensor:
        """Forward, backward and the optimizer's step at a static shape; the loss (detached)."""
        with autocast(self.device.type, self.cfg.precision):
            loss = self._loss(x, y, mask, count, kw)
        loss.sum().backward()
        if self.cfg.grad_clip:
            self.ens.clip(self.cfg.grad_clip)
        self.parts.opt.step()
        return loss.detach()

    def _replay(self, x, y, mask, count, kw) -> torch.Tensor:
        key = self.batch.key(x, kw)
        if key not in self.graphs:
            self.graphs[key] = self._capture(x, y, mask, count, kw)
        inputs, graph, loss = self.graphs[key]
        for static, t in zip(inputs, (x, y, mask, count)):
            static.copy_(t)
        graph.replay()
        return loss.clone()

    def _capture(self, x, y, mask, count, kw):
        """One CUDA graph of the whole step at this shape: a warm-up forward and backward on a
        side stream (no optimizer step), then the capture, which trains nothing until replayed."""
        p = self.parts
        if not self.ready:
            init_optimizer_state(p.opt)
            self.pool, self.ready = torch.cuda.graph_pool_handle(), True
        inputs = [t.clone() for t in (x, y, mask, count)]
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                p.opt.zero_grad(set_to_none=True)
                with autocast(self.device.type, self.cfg.precision):
                    loss = self._loss(*inputs, kw)
                loss.sum().backward()
        torch.cuda.current_stream().wait_stream(side)
        p.opt.zero_grad(set_to_none=True)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            loss = self._body(*inputs, kw)
        return inputs, graph, loss


def init_optimizer_state(opt) -> None:
    """Make the optimizer's state exist before a capture (a captured first step would zero it at
    every replay): one step at rate 0 on zero gradients for the parameters that have none yet,
    after which their state is zeroed (moments and step counts); every other tensor, a resumed
    run's state and the parameters themselves, is put back as it was, in place."""
    params = [q for g in opt.param_groups for q in g["params"]]
    fresh = {id(q) for q in params if not opt.state.get(q)}
    if not fresh:
        return
    kept = {id(t): t.detach().clone() for q in params
            for t in [q, *(v for v in opt.state.get(q, {}).values() if torch.is_tensor(v))]}
    counts = {q: dict(st) for q, st in opt.state.items()}
    rates = []
    for g in opt.param_groups:
        if torch.is_tensor(g["lr"]):  # the scheduler's tensor: keep the object, zero its value
            rates.append(g["lr"].clone())
            g["lr"].fill_(0.0)
        else:
            rates.append(g["lr"])
            g["lr"] = 0.0
        for q in g["params"]:
            q.grad = torch.zeros_like(q) if id(q) in fresh else None
    opt.step()
    for g, rate in zip(opt.param_groups, rates):
        if torch.is_tensor(g["lr"]):
            g["lr"].copy_(rate)
        else:
            g["lr"] = rate
    with torch.no_grad():
        for q in params:
            state = opt.state.get(q, {})
            if id(q) in fresh:
                for key, v in state.items():
                    if torch.is_tensor(v):
                        v.zero_()
                    elif key == "step":
                        state[key] = 0
            else:
                for key, v in counts[q].items():
                    if torch.is_tensor(v):
                        state[key].copy_(kept[id(v)])
                    else:
                        state[key] = v
            q.copy_(kept[id(q)])
    opt.zero_grad(set_to_none=True)
