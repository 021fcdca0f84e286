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


def _pairs_as_tokens(net, base: int, classes: int):
    # here, not at the top: the commands that only check params read this module, and they
    # should not import torch
    from arithrepro.models.pairs import PairsAsTokens

    return PairsAsTokens(net, base, classes)


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
              wrap=lambda net, dims: _pairs_as_tokens(net, dims["base"], dims["classes"]),
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
