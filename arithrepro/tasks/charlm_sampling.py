"""charlm's samples (charlm-sample): how a trained run writes text after a prompt."""

from __future__ import annotations

from arithrepro.models.registry import MODELS
from arithrepro.runs import Run
from arithrepro.tasks.charlm_corpus import Vocab

# How a run picks each next character: `softmax` draws it from softmax(logits / temperature)
# (torch.multinomial, the source's RNNs and transformer), `greedy` takes the argmax (the source's
# GRU). charlm.sample.rule names the architectures that do not draw from the softmax.
RULES = ("softmax", "greedy")
# The source's sample lengths: its RNNs write `length=100` characters in all, the random start
# token included; its transformer writes `max_new_tokens=100` after the start token.
SOURCE_LENGTH = 100


def sample_rule(params: dict, model: str) -> str:
    """The rule of architecture `model` (a name in charlm.architectures): softmax unless
    charlm.sample.rule says otherwise."""
    return params["charlm"]["sample"]["rule"].get(model, "softmax")


def sample_chars(s: dict, arch: str) -> int:
    """Characters a run of registry model `arch` generates after its prompt: charlm.sample.chars,
    or (null) the source's: 99 for a recurrent model (100 in all after one start token),
    100 for a transformer (one start token and 100 new)."""
    if s["chars"] is not None:
        return s["chars"]
    return SOURCE_LENGTH if MODELS[arch].context == "max_len" else SOURCE_LENGTH - 1


def sample_prompt(s: dict, vocab: Vocab, generator):
    """The prompt's ids: charlm.sample.prompt encoded, or (null) one start token drawn uniformly
    from the vocabulary with `generator` (torch.randint, as the source starts)."""
    import torch

    if s["prompt"] is None:
        return torch.randint(len(vocab), (1,), generator=generator)
    return vocab.encode(s["prompt"], "charlm.sample.prompt")


def draw_sample(net, run: Run, params: dict, vocab: Vocab):
    """(prompt ids, generated ids, rule) of one run: a generator seeded by charlm.sample.seed
    draws the start token (prompt null), then the characters (rule softmax)."""
    import torch

    from arithrepro.decoding import sample

    s = params["charlm"]["sample"]
    arch = run.config.architecture["model"]
    rule = sample_rule(params, run.model)
    generator = torch.Generator().manual_seed(s["seed"])
    prompt = sample_prompt(s, vocab, generator)
    block = run.config.architecture["dims"]["max_len"]
    context = block if MODELS[arch].context == "max_len" else None
    drawn = sample(net, prompt, sample_chars(s, arch), s["temperature"], generator, context,
                   greedy=rule == "greedy")
    return prompt, drawn, rule
