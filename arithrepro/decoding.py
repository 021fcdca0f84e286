"""Decoding, the one evaluation path: batched greedy decoding with caches (each task scores what
it decodes), and sampling from the softmax (or greedily), for the language models.

Samples in a batch have prompts of different lengths. Every sample's tokens stay contiguous from
position 0 (no padding inside a prompt): the shortest prompt is prefilled in one call, then the
batch advances one position at a time, each sample reading its own prompt token while it has
one and its own previous prediction after that. So the key/value cache (GPT) or recurrent state
(LSTM, ReTran) needs no padding mask and every position has its true rotary index.
"""

from __future__ import annotations

import torch


@torch.no_grad()
def greedy_decode(model, tokens: torch.Tensor, prompt_len: torch.Tensor, max_new: int,
                  stop_id: int) -> torch.Tensor:
    """tokens (B, W) hold each prompt in tokens[i, :prompt_len[i]] (the rest is ignored).
    Returns (B, max_new): the tokens generated after each prompt; after <stop> they repeat it."""
    B = tokens.size(0)
    lo, hi = int(prompt_len.min()), int(prompt_len.max())
    total = hi + max_new
    if tokens.size(1) < hi:
        raise ValueError("prompt_len exceeds the token width")
    tokens = torch.nn.functional.pad(tokens[:, :hi], (0, total - hi))
    state = model.init_state(B, total)
    logits, _ = model(tokens[:, :lo], state, 0)
    out = torch.full((B, max_new), stop_id, dtype=tokens.dtype, device=tokens.device)
    done = torch.zeros(B, dtype=torch.bool, device=tokens.device)
    for t in range(lo, total):
        pred = logits[:, -1].argmax(-1)
        step = t - prompt_len                       # index into `out` (negative: still prompt)
        writing = (step >= 0) & ~done
        if writing.any():
            idx = step.clamp(min=0, max=max_new - 1)
            out[writing, idx[writing]] = pred[writing]
            done |= writing & ((pred == stop_id) | (step >= max_new - 1))
        if bool(done.all()) or t == total - 1:
            break
        # A finished sample reads <stop> from here on: what it would read is never scored, and
        # its own predictions could grow a digit run past what the positions cover (abacus).
        x = torch.where(t < prompt_len, tokens[:, t], torch.where(done, stop_id, pred))
        logits, _ = model(x.unsqueeze(1), state, t)
    return out


@torch.no_grad()
def decode_split(model, tokens: torch.Tensor, prompt_len: torch.Tensor, max_new, stop_id: int,
                 batch_size: int, progress=None) -> torch.Tensor:
    """Greedy continuations of many prompts, batched by prompt length (less wasted stepping).

    max_new: one budget for all prompts, or one per prompt (a batch decodes its largest).
    Returns (N, largest budget); a row's tokens past what its batch decoded are stop_id.
    """
    budget = torch.as_tensor(max_new).expand(len(prompt_len))
    width = int(budget.max())
    order = torch.argsort(prompt_len * (width + 1) + budget, stable=True)
    device = next(model.parameters()).device
    out = torch.full((len(prompt_len), width), stop_id, dtype=tokens.dtype)
    for i in range(0, len(order), batch_size):
        idx = order[i:i + batch_size]
        n = int(budget[idx].max())
        out[idx, :n] = greedy_decode(model, tokens[idx].to(device), prompt_len[idx].to(device), n,
                                     stop_id).cpu()
        if progress:
            progress(len(idx))
    return out


def accuracy_by(correct: torch.Tensor, groups: torch.Tensor) -> list[dict]:
    """Rows {group, n, correct, accuracy} for each distinct group value, in ascending order."""
    rows = []
    for g in torch.unique(groups).tolist():
        sel = correct[groups == g]
        rows.append({"length": int(g), "n": int(sel.numel()), "correct": int(sel.sum()),
                     "accuracy": float(sel.float().mean())})
    return rows


@torch.no_grad()
def sample(model, prompt: torch.Tensor, n: int, temperature: float, generator: torch.Generator,
           context: int | None = None, greedy: bool = False) -> torch.Tensor:
    """n tokens generated one at a time after `prompt` (1-D): each drawn from
    softmax(logits / temperature) with `generator` (torch.multinomial), or, greedy, the argmax
    of the logits (temperature and generator unused).

    context: the model's block size (learned positions). The cache serves while the text fits
    in it; after that each step re-reads the last `context` tokens, as nanoGPT does. None: a
    recurrent model, whose state carries any length.
    """
    model.eval()
    device = next(model.parameters()).device
    ids = prompt.tolist()
    x = prompt[-context:] if context else prompt
    state = model.init_state(1, context or 0)
    logits, state = model(x.view(1, -1).to(device), state, 0)
    pos = x.numel()
    out = []
    for i in range(n):
        if greedy:
            token = int(logits[0, -1].argmax())
        else:
            probs = torch.softmax(logits[0, -1].float().cpu() / temperature, dim=-1)
            token = int(torch.multinomial(probs, 1, generator=generator))
        out.append(token)
        ids.append(token)
        if i == n - 1:
            break
        if context is None or pos < context:
            logits, state = model(torch.tensor([[token]], device=device), state, pos)
            pos += 1
        else:
            logits = model(torch.tensor([ids[-context:]], device=device))
    return torch.tensor(out, dtype=torch.long)
