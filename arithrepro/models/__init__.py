"""Model registry: one line per model. Builders import torch lazily so `--help` and params
validation stay fast.

A model's architecture fields come from models.<name>.sizes.<size> (`size_fields`) and, for
models whose width is part of a budget, from profiles.<profile>.<task>.model (`budget_fields`).
`kind` says what a task must provide: "lm" models take token sequences (vocab_size, max_len,
pad_id), "abacus-lm" ones also which tokens are digits and the longest digit runs, and
"classifier" models take digit pairs and classify each position. A task accepts one kind.
Models with a `task` (the modular studies' LSTM and GPT, the charlm models) take their sizes and
settings from that task's block instead of models.<name>.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module
from typing import Any

from arithrepro.config import Optional, ParamsError, integer


@dataclass(frozen=True)
class ModelSpec:
    name: str
    builder: str         # "module:function" under arithrepro.models; called as f(size, dropout=, **dims)
    kind: str            # "lm" | "abacus-lm" | "classifier"
    size_fields: tuple[str, ...]
    budget_fields: tuple[str, ...] = ()
    rotary: bool = False  # attention with rotary embeddings: head size must be even
    task: str = ""        # "": configured in models.<name> for grid tasks; else by that task's block
    optional_fields: tuple[str, ...] = ()  # size fields that may be left out or 0

    @property
    def grid(self) -> bool:
        return not self.task

    def size_schema(self) -> dict:
        return {**{f: integer(1) for f in self.size_fields},
                **{f: Optional(integer(0)) for f in self.optional_fields}}

    def budget_schema(self) -> dict:
        return {f: integer(1) for f in self.budget_fields}

    def check_size(self, key: str, size: dict) -> None:
        """Checks across fields of the (merged) architecture."""
        heads = size.get("heads")
        if heads is None:
            return
        d_sa = size.get("d_sa", size.get("d_model"))
        field = "d_sa" if "d_sa" in size else "d_model"
        if d_sa % heads:
            raise ParamsError(f"{key}.{field} = {d_sa}: expected a multiple of heads ({heads})")
        if self.rotary and (d_sa // heads) % 2:
            raise ParamsError(f"{key}.{field} = {d_sa}: expected a multiple of heads ({heads}) "
                              "with an even head size (rotary embeddings rotate pairs)")

    def build(self, size: dict, *, dropout: float, **dims) -> Any:
        module, function = self.builder.split(":")
        return getattr(import_module(f"arithrepro.models.{module}"), function)(
            size, dropout=dropout, **dims)


_ATTN = ("d_model", "d_ff", "d_sa", "layers", "heads")

MODELS: dict[str, ModelSpec] = {
    "gpt": ModelSpec("gpt", "transformer:build", "lm", _ATTN, rotary=True),
    "lstm": ModelSpec("lstm", "recurrent:build", "lm", ("d_model", "d_ff", "layers")),
    "retran": ModelSpec("retran", "retran:build", "lm", _ATTN, rotary=True),
    "abacus": ModelSpec("abacus", "abacus:build", "abacus-lm", ("block_layers", "recurrences"),
                        budget_fields=("d_model", "d_ff", "heads", "offset_k")),
    "standard": ModelSpec("standard", "looped:build_standard", "classifier",
                          ("d_model", "d_ff", "layers", "heads")),
    "looped": ModelSpec("looped", "looped:build_looped", "classifier",
                        ("d_model", "d_ff", "heads", "loop_offset"),
                        optional_fields=("extra_loops",)),
    "lstm-std": ModelSpec("lstm-std", "recurrent:build_standard", "lm", ("d_model", "layers"),
                          task="modular"),
    "gpt-sin": ModelSpec("gpt-sin", "transformer:build_sinusoidal", "lm",
                         ("d_model", "layers", "heads"), task="modular"),
    "rnn": ModelSpec("rnn", "recurrent:build_rnn", "lm", ("d_embed", "d_model", "layers"),
                     task="charlm"),
    "gru": ModelSpec("gru", "recurrent:build_gru", "lm", ("d_embed", "d_model", "layers"),
                     task="charlm"),
    "nanogpt": ModelSpec("nanogpt", "transformer:build_nanogpt", "lm",
                         ("d_model", "layers", "heads"), task="charlm"),
}


def build_model(name: str, size: dict, **kwargs) -> Any:
    return MODELS[name].build(size, **kwargs)


SAVED_KEYS = ("model", "size", "dropout", "dims", "state_dict")


def read_saved(path, keys: tuple[str, ...] = ()) -> dict:
    """The dict a trained model was saved as, {model, size, dropout, dims, state_dict, ...}
    and `keys`, without building the model; ArtifactError if the file is anything else."""
    import torch

    from arithrepro.io import ArtifactError

    try:
        saved = torch.load(path, map_location="cpu", weights_only=False)
    except FileNotFoundError:
        raise
    except Exception as err:  # a cut-short zip, a pickle of something else, random bytes
        raise ArtifactError(path, f"unreadable model file ({err})") from None
    if not isinstance(saved, dict):
        raise ArtifactError(path, f"not a saved model (a {type(saved).__name__})")
    missing = [k for k in (*SAVED_KEYS, *keys) if k not in saved]
    if missing:
        raise ArtifactError(path, f"not a saved model (no {', '.join(missing)})")
    if saved["model"] not in MODELS:
        raise ArtifactError(path, f"saved model {saved['model']!r} is not one of "
                                  f"{', '.join(MODELS)}")
    return saved


def load_model(path, keys: tuple[str, ...] = ()) -> tuple[Any, dict]:
    """A model saved as {model, size, dropout, dims, state_dict, ...} (on the CPU), and the
    saved dict, which must also hold `keys`."""
    from arithrepro.io import ArtifactError

    saved = read_saved(path, keys)
    try:
        net = build_model(saved["model"], saved["size"], dropout=saved["dropout"], **saved["dims"])
    except Exception as err:
        raise ArtifactError(path, f"cannot build the {saved['model']} it declares "
                                  f"({err})") from None
    try:
        net.load_state_dict(saved["state_dict"])
    except Exception as err:  # missing or unexpected weights, or other shapes
        raise ArtifactError(path, f"its weights do not fit the {saved['model']} it declares "
                                  f"({err})") from None
    return net, saved
