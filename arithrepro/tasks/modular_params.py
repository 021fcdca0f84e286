"""modular's params block: the studies, the keys each sweeps and how a swept value reads in a
configuration's label, and the schema's leaves (the base, a study's `set` and `sweep`)."""

from __future__ import annotations

import math

from arithrepro.schema import ParamsError, choice, fail, integer, list_of, number
from arithrepro.tasks.modular_data import OPERATORS

STUDIES = ("sanity", "data", "orders", "size", "compute", "regularization")
# The keys each study sweeps: its DVC stage (train-modular-<study>) expands over them, so a
# study sweeps these and no others (any key may be set).
SWEEPS = {"sanity": (), "data": ("r_train",), "orders": (), "size": ("layers", "d_model"),
          "compute": ("batch_size",), "regularization": ("weight_decay",)}
# The keys whose values change no step's shape: configurations that differ in these alone
# (a data study's r_train, a regularization study's weight decay, a rate) train as one ensemble
# where repro ensembles (on a GPU); a training set smaller than a batch pads its rows.
FREE = ("r_train", "lr", "weight_decay")
# How a swept key reads in a cell's name: data.r0.3, size.L2d128, compute.B64, ...
ABBREV = {"r_train": "r", "layers": "L", "d_model": "d", "heads": "h", "batch_size": "B",
          "weight_decay": "wd", "lr": "lr", "warmup_frac": "wu", "schedule": "sched",
          "beta2": "b2", "eps": "eps", "steps": "T", "p": "p", "dropout": "drop", "eval_every": "e",
          "orders": "o", "operator": "op", "norm": "norm", "grad_clip": "clip"}


def label(study: str, swept: dict) -> str:
    """A run's label: the study and its swept values ("data.r0.3", "size.L2d128", "sanity")."""
    return study + ("." + "".join(f"{ABBREV[k]}{v}" for k, v in swept.items())
                    if swept else "")


# The LMs a study builds from its (d_model, layers, heads)
OWN_MODELS = ("lstm-std", "gpt-sin")


def _model_names() -> tuple[str, ...]:
    return OWN_MODELS


def _prime(key, value) -> None:
    integer(2, 1000)(key, value)
    if any(value % q == 0 for q in range(2, int(math.isqrt(value)) + 1)):
        fail(key, value, "a prime (every nonzero residue needs an inverse)")


BASE = {
    "p": _prime,
    "orders": list_of(integer(2, 3)),
    "operator": choice(*OPERATORS),
    "r_train": number(0, 1, lo_open=True, hi_open=True),
    "layers": integer(1, 64),
    "d_model": integer(1),
    "heads": integer(1),
    "norm": choice("pre", "post"),
    "dropout": number(0, 1, hi_open=True),
    "lr": number(0, lo_open=True),
    "warmup_frac": number(0, 1, hi_open=True),
    "schedule": choice("constant", "linear"),
    "beta2": number(0, 1, lo_open=True, hi_open=True),
    "eps": number(0, lo_open=True),
    "weight_decay": number(0),
    "grad_clip": number(0),
    "batch_size": integer(1),
    "steps": integer(1),
    "eval_every": integer(1),
    "checkpoint_every": integer(1),
}


def _values(key, value) -> None:
    if not isinstance(value, dict):
        fail(key, value, "a mapping of params keys to values")
    for k, v in value.items():
        if k not in BASE:
            raise ParamsError(f"{key}.{k}: unknown key; allowed: {', '.join(BASE)}")
        BASE[k](f"{key}.{k}", v)


def _sweep(study: str):
    keys = SWEEPS[study]

    def check(key, value) -> None:
        if not isinstance(value, dict) or set(value) != set(keys):
            fail(key, value, f"a mapping of {', '.join(keys)} to lists of values (the keys "
                             f"train-modular-{study} expands over)" if keys else
                             "{} (the study sweeps nothing; its `set` changes any key)")
        for k in keys:
            v = value[k]
            if not isinstance(v, list) or not v:
                fail(f"{key}.{k}", v, "a non-empty list")
            for i, item in enumerate(v):
                BASE[k](f"{key}.{k}[{i}]", item)
            if len(set(v)) != len(v):
                fail(f"{key}.{k}", v, "distinct values")
    return check


def _study_schema(study: str) -> dict:
    s = {"models": list_of(lambda k, v: choice(*_model_names())(k, v)),
         "seeds": list_of(integer(0)), "set": _values, "sweep": _sweep(study)}
    if study == "compute":
        s["budgets"] = list_of(number(0, 1, lo_open=True))
    return s
