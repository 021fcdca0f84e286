"""LAMB as torch-optimizer's Lamb computes it, over all parameters at once.

torch_optimizer.Lamb loops over the parameters in Python, about a dozen ops each, and compares
two norms with `==` and scales by a tensor-valued alpha, which reads values back from the device
for every parameter (two host syncs per parameter per step on a GPU). ForeachLamb is a subclass
with the same hyper-parameters, state layout (so checkpoints load either way) and maths, written
with torch._foreach_* ops and the trust ratios kept on the device: the same updates to float
rounding (tests compare the two over several steps).

`blocks` maps a parameter to the number of equal row blocks it holds (an LSTM's four gates in
one matrix): LAMB then treats each block as the separate tensor the source has, with its own
norms and trust ratio. The blocks are views, so the state layout does not change.

`capturable`: the step counts live on the parameters' device and the bias corrections are
computed there, so a step reads nothing from the host (the learning rate may be a tensor too,
which the scheduler fills in place): what a CUDA graph of the whole training step needs, and on
a GPU it saves a host-to-device copy per step. The same updates to float rounding (tests).

`copies`, and CopiesAdam for Adam and AdamW: every copy of an ensemble's stacked parameters
(arithrepro/stacking.py) with its own learning rate and weight decay, so that configurations
that differ in those alone train as one ensemble, each copy stepping as its standalone run's
optimizer would (tests compare them).
"""

from __future__ import annotations

import math

import torch
import torch_optimizer


class ForeachLamb(torch_optimizer.Lamb):
    def __init__(self, params, *args, blocks: dict | None = None, capturable: bool = False,
                 copies: tuple | None = None, **kwargs):
        super().__init__(params, *args, **kwargs)
        self.blocks = {id(p): k for p, k in (blocks or {}).items()}
        self.capturable = capturable
        # (learning rates, weight decays), one each per copy of parameters stacked per copy:
        # the group's lr is then the schedule's factor and its weight decay unused
        self.copies = None if copies is None else tuple(map(list, copies))
        self._rates = {}

    def _per_block(self, counts: list[int]) -> tuple[list, list]:
        """Each block's copy's (rate, weight decay): a stacked parameter's blocks are its copies'
        in order, each copy's own blocks (gates) together."""
        lrs, wds = self.copies
        rates, decays = [], []
        for k in counts:
            if k % len(lrs):
                raise ValueError(f"a parameter of {k} blocks for {len(lrs)} copies")
            for j in range(k):
                rates.append(lrs[j * len(lrs) // k])
                decays.append(wds[j * len(lrs) // k])
        return rates, decays

    @staticmethod
    def _split(tensors: list, counts: list[int]) -> list:
        """Each tensor, or its `count` blocks as views when its parameter holds several."""
        out = []
        for t, k in zip(tensors, counts):
            out.extend([t] if k == 1 else t.reshape(k, -1).unbind(0))  # views: contiguous
        return out

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            grads = [p.grad for p in params]
            if any(g.is_sparse for g in grads):
                raise RuntimeError("Lamb does not support sparse gradients")
            states = [self.state[p] for p in params]
            for p, st in zip(params, states):
                if not st:
                    st["step"] = 0
                    st["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    st["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                if self.capturable and not (torch.is_tensor(st["step"])
                                            and st["step"].device == p.device):
                    # a plain run's count, or a checkpoint's loaded on the host
                    st["step"] = torch.tensor(float(st["step"]), device=p.device)
                elif not self.capturable and torch.is_tensor(st["step"]):
                    st["step"] = int(st["step"])  # a checkpoint from a capturable run
            if self.capturable:
                torch._foreach_add_([st["step"] for st in states], 1.0)
            else:
                for st in states:
                    st["step"] += 1
            counts = [self.blocks.get(id(p), 1) for p in params]
            exp_avg = self._split([st["exp_avg"] for st in states], counts)
            exp_avg_sq = self._split([st["exp_avg_sq"] for st in states], counts)
            grads = self._split(grads, counts)
            states = [st for st, k in zip(states, counts) for _ in range(k)]
            params = self._split(params, counts)
            beta1, beta2 = group["betas"]
            torch._foreach_mul_(exp_avg, beta1)
            torch._foreach_add_(exp_avg, grads, alpha=1 - beta1)
            torch._foreach_mul_(exp_avg_sq, beta2)
            torch._foreach_addcmul_(exp_avg_sq, grads, grads, value=1 - beta2)
            step_sizes = self._step_sizes(states, group["lr"], beta1, beta2, params[0].dtype)
            decays = None
            if self.copies is not None:
                rates, decays = self._per_block(counts)
                if torch.is_tensor(step_sizes):
                    key = (tuple(counts), step_sizes.device)
                    if key not in self._rates:  # copied to the device once
                        self._rates[key] = torch.tensor(rates, dtype=torch.float64).to(step_sizes.device)
                    step_sizes = step_sizes * self._rates[key]
                else:
                    step_sizes = [s * r for s, r in zip(step_sizes, rates)]
            weight_norm = torch.stack(torch._foreach_norm(params)).clamp(0, self.clamp_value)
            denominator = torch._foreach_sqrt(exp_avg_sq)
            torch._foreach_add_(denominator, group["eps"])
            adam_step = torch._foreach_div(exp_avg, denominator)
            if decays is not None:
                if any(decays):
                    torch._foreach_add_(adam_step, torch._foreach_mul(params, decays))
            elif group["weight_decay"] != 0:
                torch._foreach_add_(adam_step, params, alpha=group["weight_decay"])
            adam_norm = torch.stack(torch._foreach_norm(adam_step))
            trust = torch.where((weight_norm == 0) | (adam_norm == 0), 1.0, weight_norm / adam_norm)
            if self.adam:
                trust = torch.ones_like(trust)
            if not torch.is_tensor(step_sizes):
                step_sizes = torch.tensor(step_sizes, dtype=trust.dtype, device=trust.device)
            scale = trust * -step_sizes.to(trust.dtype)
            torch._foreach_mul_(adam_step, list(scale.unbind()))
            torch._foreach_add_(params, adam_step)
        return loss

    def _step_sizes(self, states: list, lr, beta1: float, beta2: float, dtype):
        """lr times the bias correction per state: a list of floats, or (capturable) a tensor
        of `dtype` computed on the device."""
        if not self.capturable:
            out = []
            for st in states:
                correction = 1.0
                if self.debias:
                    correction = math.sqrt(1 - beta2 ** st["step"]) / (1 - beta1 ** st["step"])
                out.append(lr * correction)
            return out
        steps = torch.stack([st["step"] for st in states]).to(dtype)
        if not self.debias:
            return torch.ones_like(steps) * lr
        return (1 - beta2 ** steps).sqrt() / (1 - beta1 ** steps) * lr


def copy_view(rates: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """Per-copy values (E,), on `p`'s device, shaped to scale a parameter stacked per copy
    along dim 0."""
    return rates.view(-1, *([1] * (p.dim() - 1)))


class CopiesAdam(torch.optim.Optimizer):
    """Adam (decoupled: AdamW) over parameters stacked per copy (an Ensemble's), each copy with
    its own learning rate and weight decay (`lrs`, `wds`, one each per copy): configurations
    that differ in them alone train as one ensemble. A group's `lr` is the schedule's factor
    (1 at the start), which every copy's own rate multiplies. The maths is torch's Adam and AdamW
    step for step (tests compare each copy with torch's on the standalone model); `capturable`
    as theirs: step counts and bias corrections on the device, for a captured step."""

    def __init__(self, params, lrs, wds, *, decoupled: bool, betas=(0.9, 0.999),
                 eps: float = 1e-8, capturable: bool = False):
        super().__init__(params, {"lr": 1.0, "betas": betas, "eps": eps})
        # float64: a copy's rate times the factor rounds as a standalone run's Python floats do
        self.lrs = torch.tensor([float(v) for v in lrs], dtype=torch.float64)
        self.wds = torch.tensor([float(v) for v in wds], dtype=torch.float64)
        self.decoupled, self.capturable = decoupled, capturable
        self._placed = {}

    def _on(self, device) -> tuple:
        """The rates on `device`, copied there once (a captured step copies nothing)."""
        if device not in self._placed:
            self._placed[device] = (self.lrs.to(device), self.wds.to(device))
        return self._placed[device]

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.size(0) != len(self.lrs):
                    raise ValueError(f"a parameter of {p.size(0)} copies for {len(self.lrs)} rates")
                st = self.state[p]
                if not st:
                    st["step"] = torch.zeros((), device=p.device) if self.capturable else 0
                    st["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    st["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                elif self.capturable and not torch.is_tensor(st["step"]):
                    st["step"] = torch.tensor(float(st["step"]), device=p.device)
                st["step"] += 1
                lrs, wds = self._on(p.device)
                rate = copy_view(lrs, p) * group["lr"]   # float64, (E, 1, ...)
                decay = copy_view(wds, p)
                grad = p.grad
                if self.decoupled:
                    p.mul_((1 - rate * decay).to(p.dtype))
                else:
                    grad = grad + decay.to(p.dtype) * p
                st["exp_avg"].lerp_(grad, 1 - beta1)
                st["exp_avg_sq"].mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                step = st["step"]
                correction1 = 1 - beta1 ** step
                correction2 = (1 - beta2 ** step) ** 0.5
                denom = (st["exp_avg_sq"].sqrt() / correction2).add_(group["eps"])
                p.sub_(st["exp_avg"] / denom * (rate / correction1).to(p.dtype))
        return loss
