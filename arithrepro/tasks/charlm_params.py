"""charlm's params block: its schema's leaves (the architectures, schedules, the corpus's path,
the samples' prompt, length and rules)."""

from __future__ import annotations

from arithrepro.models.registry import MODELS
from arithrepro.schema import check_schema, choice, fail, integer
from arithrepro.tasks.charlm_sampling import RULES

# The character LMs an architecture of charlm.architectures builds (each with a cost formula)
OWN_MODELS = ("rnn", "gru", "nanogpt")


def _models() -> tuple[str, ...]:
    return OWN_MODELS


def _architecture(key: str, value) -> None:
    if not isinstance(value, dict) or "model" not in value:
        fail(key, value, f"a mapping with `model` (one of {', '.join(_models())}) and its sizes")
    choice(*_models())(f"{key}.model", value["model"])
    spec = MODELS[value["model"]]
    check_schema({"model": lambda k, v: None, **spec.size_schema()}, value, key)
    spec.check_size(key, value)


def _path(key: str, value) -> None:
    if value is not None and not (isinstance(value, str) and value):
        fail(key, value, "a path or null")


def _text(key: str, value) -> None:
    if not isinstance(value, str) or not value:
        fail(key, value, "a non-empty string")


def _prompt(key: str, value) -> None:
    if value is not None and not (isinstance(value, str) and value):
        fail(key, value, "a non-empty string or null (one random start token)")


def _chars(key: str, value) -> None:
    if value is not None:
        integer(1)(key, value)


def _rules(key: str, value) -> None:
    if not isinstance(value, dict):
        fail(key, value, f"a mapping of architecture names to a rule ({', '.join(RULES)})")
    for name, rule in value.items():
        choice(*RULES)(f"{key}.{name}", rule)


def _schedules(key: str, value) -> None:
    if not isinstance(value, dict) or not value:
        fail(key, value, "a mapping of schedule names to {seq_length, steps}")
    for name, sched in value.items():
        check_schema({"seq_length": integer(1), "steps": integer(1)}, sched, f"{key}.{name}")


class _Architectures:
    """charlm.architectures: name -> {model, sizes...}; a schema leaf (free keys)."""

    def __call__(self, key: str, value) -> None:
        if not isinstance(value, dict) or not value:
            fail(key, value, "a mapping of model names to architectures")
        for name, arch in value.items():
            _architecture(f"{key}.{name}", arch)
