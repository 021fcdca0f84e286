"""Model registry: one line per model. Builders import torch lazily so `--help` and params
validation stay fast."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module
from typing import Any

from arithrepro.config import ParamsError, integer


@dataclass(frozen=True)
class ModelSpec:
    name: str
    module: str          # arithrepro.models.<module> defines build(size, vocab_size, dropout, max_len, pad_id)
    size_fields: tuple[str, ...]
    attention: bool      # needs d_sa divisible by heads with an even head size (rotary)

    def size_schema(self) -> dict:
        return {f: integer(1) for f in self.size_fields}

    def check_size(self, key: str, size: dict) -> None:
        if self.attention:
            d_sa, heads = size["d_sa"], size["heads"]
            if d_sa % heads or (d_sa // heads) % 2:
                raise ParamsError(f"{key}.d_sa = {d_sa}: expected a multiple of heads ({heads}) "
                                  "with an even head size (rotary embeddings rotate pairs)")

    def build(self, size: dict, *, vocab_size: int, dropout: float, max_len: int, pad_id: int) -> Any:
        module = import_module(f"arithrepro.models.{self.module}")
        return module.build(size, vocab_size=vocab_size, dropout=dropout, max_len=max_len, pad_id=pad_id)


_ATTN = ("d_model", "d_ff", "d_sa", "layers", "heads")

MODELS: dict[str, ModelSpec] = {
    "gpt": ModelSpec("gpt", "transformer", _ATTN, attention=True),
    "lstm": ModelSpec("lstm", "recurrent", ("d_model", "d_ff", "layers"), attention=False),
    "retran": ModelSpec("retran", "retran", _ATTN, attention=True),
}


def build_model(name: str, size: dict, **kwargs) -> Any:
    return MODELS[name].build(size, **kwargs)
