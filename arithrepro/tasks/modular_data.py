"""modular's data: every sample of (a, b) ∈ [0, p)² (and (a, b, c) for order 3) as
`BOS a ∘ b = r EOS`, padded with PAD when orders are mixed; a seeded fraction r_train of each
order trains, the rest validates. Both sets are evaluated in full every `eval_every` steps:
per-sample mean NLL over the right-hand side (r and EOS), then the mean over samples; a sample
is correct only when every right-hand-side token is the argmax. Training minimizes the same
loss: every sample has two right-hand-side tokens, so the mean over tokens is the mean over
samples.
"""

from __future__ import annotations

from dataclasses import dataclass

OPERATORS = ("+", "-", "*", "/")


class Vocab:
    """The numbers 0..p-1 are their own ids; the operator, '=', BOS, EOS and PAD follow."""

    def __init__(self, p: int, operator: str):
        self.p, self.operator = p, operator
        self.op, self.eq, self.bos, self.eos, self.pad = range(p, p + 5)

    def __len__(self) -> int:
        return self.p + 5

    def tokens(self) -> list[str]:
        return [str(i) for i in range(self.p)] + [self.operator, "=", "BOS", "EOS", "PAD"]


def combine(a, b, p: int, operator: str):
    """(a ∘ b) mod p elementwise on integer tensors; '/' multiplies by b's inverse mod p."""
    import torch

    if operator == "+":
        return (a + b) % p
    if operator == "-":
        return (a - b) % p
    if operator == "*":
        return (a * b) % p
    inverse = torch.tensor([0] + [pow(i, -1, p) for i in range(1, p)], dtype=a.dtype)
    return (a * inverse[b]) % p


def sequences(p: int, orders: list[int], operator: str):
    """Every sample of the given orders: tokens (N, 2 max(order) + 3) and each sample's order.
    Order k: all k-tuples of operands, the divisors of '/' nonzero; r = ((x1 ∘ x2) ∘ x3) mod p."""
    import torch

    v = Vocab(p, operator)
    width = 2 * max(orders) + 3
    parts, order_of = [], []
    for k in sorted(orders):
        ranges = [torch.arange(p)] + [torch.arange(1 if operator == "/" else 0, p)] * (k - 1)
        xs = torch.cartesian_prod(*ranges).reshape(-1, k)
        r = xs[:, 0]
        for j in range(1, k):
            r = combine(r, xs[:, j], p, operator)
        seq = torch.full((len(xs), width), v.pad, dtype=torch.long)
        seq[:, 0] = v.bos
        seq[:, 1:2 * k:2] = xs
        seq[:, 2:2 * k - 1:2] = v.op
        seq[:, 2 * k] = v.eq
        seq[:, 2 * k + 1] = r
        seq[:, 2 * k + 2] = v.eos
        parts.append(seq)
        order_of.append(torch.full((len(xs),), k, dtype=torch.long))
    return torch.cat(parts), torch.cat(order_of)


def encode(operands: list[int], p: int, operator: str):
    """One sample's full token sequence (a LongTensor), as `sequences` writes it."""
    import torch

    tokens, order = sequences(p, [len(operands)], operator)
    k = len(operands)
    rows = tokens[:, 1:2 * k:2]
    hit = (rows == torch.tensor(operands)).all(1).nonzero()
    if len(hit) == 0:
        raise ValueError(f"operands {operands}: not a sample of p = {p}, operator {operator!r} "
                         "(each below p; divisors nonzero)")
    return tokens[int(hit[0])]


def split(order, r_train: float, seed: int):
    """Seeded train / validation indices: a fraction r_train of each order's samples trains
    (at least one sample on each side)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    train, valid = [], []
    for k in sorted(set(order.tolist())):
        idx = torch.nonzero(order == k).squeeze(1)
        idx = idx[torch.randperm(len(idx), generator=g)]
        n = min(max(round(r_train * len(idx)), 1), len(idx) - 1)
        train.append(idx[:n])
        valid.append(idx[n:])
    return torch.cat(train), torch.cat(valid)


def inputs_targets(tokens, vocab: Vocab):
    """x = tokens[:, :-1], y = tokens[:, 1:], mask: the right-hand side's targets (every
    position from '=' on whose target is not PAD)."""
    x, y = tokens[:, :-1], tokens[:, 1:]
    mask = ((x == vocab.eq).cumsum(1) > 0) & (y != vocab.pad)
    return x, y, mask


def first_scored(mask) -> int:
    """The first position any sample scores: a model need not produce logits before it."""
    return int(mask.any(0).nonzero()[0])


def score(model, x, y, mask, outputs_from: int, batch_size: int = 4096):
    """Per-sample right-hand-side loss, correctness and logit margin (three tensors of len(x)),
    in batches of whole tensors: no loop over samples. The margin is the true class's logit
    minus the largest other one, averaged over the scored positions: how far the softmax is
    from a tie, the scale a cross-entropy keeps pushing up once every answer is right."""
    import torch
    import torch.nn.functional as F

    losses, correct, margins = [], [], []
    with torch.no_grad():
        for i in range(0, len(x), batch_size):
            xb, yb, mb = (t[i:i + batch_size] for t in (x, y, mask))
            logits = model(xb, outputs_from=outputs_from)
            yb, mb = yb[:, outputs_from:], mb[:, outputs_from:]
            nll = F.cross_entropy(logits.transpose(1, 2), yb, reduction="none")
            n = mb.sum(1)
            losses.append((nll * mb).sum(1) / n)
            correct.append(((logits.argmax(-1) == yb) | ~mb).all(1))
            true = logits.gather(-1, yb.unsqueeze(-1)).squeeze(-1)
            other = logits.scatter(-1, yb.unsqueeze(-1), float("-inf")).amax(-1)
            margins.append(((true - other) * mb).sum(1) / n)
    return torch.cat(losses), torch.cat(correct), torch.cat(margins)


@dataclass(frozen=True)
class Split:
    x: object      # (N, T) inputs
    y: object      # (N, T) next-token targets
    mask: object   # (N, T) the right-hand side's targets
    order: object  # (N,) each sample's order


class Splits:
    """One run's data: every sample, split by the seed, on the device; evaluate(model) scores
    both sets in full (the fit loop's validation hook)."""

    def __init__(self, config: dict, seed: int, device):
        self.vocab = Vocab(config["p"], config["operator"])
        self.orders = sorted(config["orders"])
        tokens, order = sequences(config["p"], self.orders, config["operator"])
        x, y, mask = inputs_targets(tokens, self.vocab)
        self.outputs_from = first_scored(mask)
        parts = split(order, config["r_train"], seed)
        self.splits = {name: Split(*(t[idx].to(device) for t in (x, y, mask, order)))
                       for name, idx in zip(("train", "val"), parts)}

    def evaluate(self, model) -> dict:
        """Both sets' loss and accuracy; then what explains a collapse (docs/modular.md): the
        training set's mean logit margin, the norms of all weights and of the output layer's,
        and how far the weights moved since the previous evaluation (`update_norm`, the
        optimizer's steps in between summed as vectors; NaN at the first)."""
        import torch

        out = {}
        for name, s in self.splits.items():
            loss, correct, margin = score(model, s.x, s.y, s.mask, self.outputs_from)
            out[f"{name}_loss"], out[f"{name}_acc"] = _mean(loss), _mean(correct)
            if name == "train":
                out["train_margin"] = _mean(margin)
            if len(self.orders) > 1:
                for k in self.orders:
                    sel = s.order == k
                    out[f"o{k}_{name}_loss"], out[f"o{k}_{name}_acc"] = _mean(loss[sel]), _mean(correct[sel])
        with torch.no_grad():
            weights = [p.detach().clone() for p in model.parameters()]
            out["param_norm"] = float(torch.sqrt(sum(w.pow(2).sum() for w in weights)))
            out["head_norm"] = float(model.head.weight.norm())
            last = getattr(self, "_last_weights", None)
            out["update_norm"] = (float(torch.sqrt(sum((w - v).pow(2).sum() for w, v in zip(weights, last))))
                                  if last is not None else float("nan"))
            self._last_weights = weights
        return out


def _mean(t) -> float:
    return float(t.float().mean())
