"""Where tasks and models meet: the forms of a task's samples, and the adapters between forms.

A form is what a task feeds a model and what it reads back:
- tokens: a token sequence (B, T) -> next-token logits (B, T, vocab); the task scores the
  answer's tokens and decodes it token by token. dims: vocab_size, max_len, pad_id.
- digit-tokens: tokens, with the digit tokens named and the longest digit runs bounded, so that
  positions can count digits (Abacus). dims: those of tokens and digit_ids, train_run, eval_run.
- pairs: aligned digit pairs (B, T, 2), least significant first -> a class per position
  (B, T, classes). dims: base, classes, max_len.

A task offers forms (`Task.forms`; its dims hold the keys of every one), a model takes one
(`ModelSpec.form`). They meet directly where the task offers the model's form (a model is built
with that form's dims alone), else through the adapter from the model's form to the first form
the task offers that one fits; a pair without either is refused with one line naming both
(`meeting`). Each adapter is written once, for every model of its form.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable

import torch
from torch import nn


@dataclass(frozen=True)
class Form:
    dims: tuple[str, ...]
    text: str


FORMS: dict[str, Form] = {
    "tokens": Form(("vocab_size", "max_len", "pad_id"),
                   "token sequences, scored and decoded on the answer's tokens"),
    "digit-tokens": Form(("vocab_size", "max_len", "pad_id", "digit_ids", "train_run", "eval_run"),
                         "token sequences whose digit tokens are named"),
    "pairs": Form(("base", "classes", "max_len"), "aligned digit pairs, a class per position"),
}


def dims_of(form: str, dims: dict) -> dict:
    """The task's dims that a model of `form` is built with."""
    missing = [k for k in FORMS[form].dims if k not in dims]
    if missing:
        raise TypeError(f"form {form}: the task's dims lack {', '.join(missing)}")
    return {k: dims[k] for k in FORMS[form].dims}


class PairsAsTokens(nn.Module):
    """A causal token model on aligned digit pairs: the pair (a, b) is the token a·base + b, and
    the model's head keeps its first `classes` rows, a class per position.

    Causal suffices: least significant first, digit i of a sum depends on the pairs 0..i, which
    position i sees. The head's rows are cut from the model's own, so the head starts as the
    model's initialization draws it."""

    def __init__(self, model: nn.Module, base: int, classes: int):
        super().__init__()
        head = getattr(model, "head", None)
        if not isinstance(head, nn.Linear) or head.out_features < classes:
            raise TypeError("pairs adapter: the model needs a linear head `head` over at least "
                            f"{classes} tokens")
        cut = nn.Linear(head.in_features, classes, bias=head.bias is not None,
                        device=head.weight.device, dtype=head.weight.dtype)
        with torch.no_grad():
            cut.weight.copy_(head.weight[:classes])
            if head.bias is not None:
                cut.bias.copy_(head.bias[:classes])
        model.head = cut
        self.model, self.base = model, base

    def forward(self, pairs: torch.Tensor) -> torch.Tensor:
        """pairs (B, T, 2) -> logits (B, T, classes)."""
        return self.model(pairs[..., 0] * self.base + pairs[..., 1])

    @property
    def recurrences(self) -> int:
        return self.model.recurrences

    @recurrences.setter
    def recurrences(self, r: int) -> None:
        self.model.recurrences = r


def _pair_token_dims(dims: dict) -> dict:
    """A token model's dims for pairs: base² pair tokens, all digits (their runs as long as the
    input), and one padding token that batches never hold."""
    tokens = dims["base"] ** 2
    return {"vocab_size": tokens + 1, "max_len": dims["max_len"], "pad_id": tokens,
            "digit_ids": list(range(tokens)), "train_run": dims["max_len"],
            "eval_run": dims["max_len"]}


@dataclass(frozen=True)
class Adapter:
    text: str
    model_dims: Callable[[dict], dict]    # the task's dims -> the model's form's
    wrap: Callable[[Any, dict], Any]      # (model, the task's dims) -> the adapted model
    needs_causal: bool = False
    # what the adapted model offers the training loop and the tasks (ModelSpec fields)
    spec: dict = field(default_factory=dict)


_PAIRS = dict(text="each digit pair one token, a class per position from the model's head",
              model_dims=_pair_token_dims,
              wrap=lambda net, dims: PairsAsTokens(net, dims["base"], dims["classes"]),
              needs_causal=True,
              spec={"decodes": False, "causal": False, "prunes_outputs": False, "traces": False,
                    "context": "any"})

# (the model's form, the task's form) -> the adapter
ADAPTERS: dict[tuple[str, str], Adapter] = {
    ("tokens", "pairs"): Adapter(**_PAIRS),
    ("digit-tokens", "pairs"): Adapter(**_PAIRS),
}


def meeting(spec, offered: tuple[str, ...]) -> tuple[str, Adapter | None] | None:
    """(the task's form the model is given, the adapter or None) for a model and the forms a
    task offers; None where none fits."""
    if spec.form in offered:
        return spec.form, None
    for form in offered:
        adapter = ADAPTERS.get((spec.form, form))
        if adapter and (spec.causal or not adapter.needs_causal):
            return form, adapter
    return None


def refusal(task: str, offered: tuple[str, ...], model: str, spec) -> str:
    """One line: why `model` cannot take `task`'s samples."""
    return (f"model {model} takes {spec.form} ({FORMS[spec.form].text}); task {task} offers "
            f"{' / '.join(offered)}, and no adapter turns one into the other")


def adapted_spec(spec, adapter: Adapter | None, form: str):
    """The model's registry entry as the loop and the tasks see it through `adapter`."""
    if adapter is None:
        return spec
    return replace(spec, form=form, **adapter.spec)
