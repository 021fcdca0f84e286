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
"""

from __future__ import annotations

import math

import torch
import torch_optimizer


class ForeachLamb(torch_optimizer.Lamb):
    def __init__(self, params, *args, blocks: dict | None = None, capturable: bool = False,
                 **kwargs):
        super().__init__(params, *args, **kwargs)
        self.blocks = {id(p): k for p, k in (blocks or {}).items()}
        self.capturable = capturable

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
            weight_norm = torch.stack(torch._foreach_norm(params)).clamp(0, self.clamp_value)
            denominator = torch._foreach_sqrt(exp_avg_sq)
            torch._foreach_add_(denominator, group["eps"])
            adam_step = torch._foreach_div(exp_avg, denominator)
            if group["weight_decay"] != 0:
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
