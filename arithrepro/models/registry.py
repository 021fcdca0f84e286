"""Model registry: one line per model, naming its builder and what it can do.

A builder is called as `build(size, dropout=..., **dims)`: `size` holds the architecture fields
(`size_fields`, from models.<name>.sizes.<size> for grid models, from the task's block for the
others) plus the `budget_fields` it borrows from a task's budget, the params block its line
names in `budget_from` (the abacus width, abacus.model, on every task it trains).
`form` says which dims: the form of samples the model takes (models/forms.py: tokens,
digit-tokens or pairs), and a builder gets that form's dims alone. A task offers forms; a
model meets a task that offers its form directly, or through an adapter (forms.ADAPTERS: a
token model on digit pairs), and `build_model(..., form=<the task's>)` builds it so. `sizes`
says where a model's architecture comes from: "models"
(models.<name>.sizes.<size>, the grid tasks' models) or "run" (the run's own configuration: a
modular study's, a charlm architecture's); a task names the "run" models it builds itself
(its TAKES, `own`: tasks/declared.py).

Capabilities, declared here so no caller tests a model's name (checked when the table is built):
- decodes: has `init_state`, so it generates token by token with a cache (expr, abacus, charlm
  sampling need it);
- context: how far it sees: "any" length, or "max_len" for learned positions (nanoGPT's block
  size), so generation slides a window of max_len tokens;
- traces: `trace()` returns every block's attention weights (the attention figures);
- cost: the cost formula of the charlm compute table: "attention", or "recurrent" with `gates`,
  the matrices a cell multiplies its state by (Elman 1, GRU 3);
- causal: position t sees positions <= t only (what cutting a batch into length-sorted pieces
  needs; the encoders see both ways);
- prunes_outputs: forward(outputs_from=n) skips the work of positions before n (a causal
  transformer's last block) instead of computing them and dropping their outputs;
- loops: its block stack runs `recurrences` times with exits in between (the progressive
  loss trains them; a task's `progressive` asks it of such models only);
- eager: why torch.compile cannot run it ("" when it can): the loop runs it eager, with a warning.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module
from typing import Any, Callable

from arithrepro.io import ArtifactError
from arithrepro.models.forms import ADAPTERS, FORMS, adapted_spec, dims_of
from arithrepro.schema import Optional, ParamsError, integer

COSTS = ("", "attention", "recurrent")
CONTEXTS = ("any", "max_len")


@dataclass(frozen=True)
class Builder:
    """A builder named by its module and function, imported on its first call. Every command
    reads this table (the params are checked against it), and only those that build a model
    should pay for importing torch (3 s of CPU per process on these machines)."""

    module: str
    function: str

    def __call__(self, *args, **kwargs):
        return getattr(import_module(self.module), self.function)(*args, **kwargs)


def builder_module(build: Callable) -> str:
    """The module a builder's code lives in (what a stage that builds the model depends on)."""
    return build.module if isinstance(build, Builder) else build.__module__


@dataclass(frozen=True)
class ModelSpec:
    build: Callable[..., Any]   # build(size, *, dropout, **dims) -> nn.Module (or a Builder)
    form: str
    size_fields: tuple[str, ...]
    budget_fields: tuple[str, ...] = ()
    budget_from: str = ""       # the params block that sets budget_fields: "<grid task>.model"
    optional_fields: tuple[str, ...] = ()  # size fields that may be left out or 0
    sizes: str = "models"  # "models": models.<name>.sizes; "run": the run's configuration
    rotary: bool = False  # attention with rotary embeddings: head size must be even
    decodes: bool = True
    context: str = "any"
    traces: bool = False
    cost: str = ""
    gates: int = 0
    causal: bool = True
    prunes_outputs: bool = False
    loops: bool = False     # a block stack run `recurrences` times (the progressive loss's exits)
    eager: str = ""

    def check(self, name: str) -> None:
        """TypeError naming the model if its declaration contradicts itself."""
        problems = [
            not callable(self.build) and "its builder is not callable",
            self.form not in FORMS and f"form {self.form!r} is not one of {', '.join(FORMS)}",
            not self.size_fields and "it declares no size fields",
            self.context not in CONTEXTS and f"context {self.context!r} is not one of {', '.join(CONTEXTS)}",
            self.cost not in COSTS and f"cost {self.cost!r} is not one of {', '.join(COSTS[1:])}",
            (self.cost == "recurrent") != (self.gates > 0) and "recurrent cost needs gates >= 1 (and only it)",
            self.sizes not in ("models", "run") and f"sizes {self.sizes!r} is not models or run",
            self.traces and self.form == "pairs" and "only language models trace attention",
            self.prunes_outputs and not self.causal and "only a causal model prunes outputs",
            self.loops and "recurrences" not in self.size_fields and "a looped model sizes its recurrences",
            bool(self.budget_fields) != bool(self.budget_from)
            and "budget fields need the block that sets them (budget_from), and only they",
            self.form != "pairs" and not self.causal and "a language model is causal",
        ]
        for problem in problems:
            if problem:
                raise TypeError(f"model registry: {name}: {problem}")

    @property
    def grid(self) -> bool:
        return self.sizes == "models"

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


_ATTN = ("d_model", "d_ff", "d_sa", "layers", "heads")


def _in(ref: str) -> Builder:
    """"transformer.build" -> the builder `build` of arithrepro/models/transformer.py."""
    module, function = ref.split(".")
    return Builder(f"arithrepro.models.{module}", function)


MODELS: dict[str, ModelSpec] = {
    "gpt": ModelSpec(_in("transformer.build"), "tokens", _ATTN, rotary=True, traces=True,
                     prunes_outputs=True),
    "lstm": ModelSpec(_in("recurrent.build"), "tokens", ("d_model", "d_ff", "layers")),
    "retran": ModelSpec(_in("retran.build"), "tokens", _ATTN, rotary=True,
                        eager="torch.compile cannot trace the in-place cache writes that ReTran's "
                              "saved-tensor hooks allow, and would unroll T x layers steps"),
    "abacus": ModelSpec(_in("abacus.build"), "digit-tokens", ("block_layers", "recurrences"),
                        budget_fields=("d_model", "d_ff", "heads", "offset_k"),
                        budget_from="abacus.model",
                        traces=True, loops=True,
                        prunes_outputs=True),
    "standard": ModelSpec(_in("looped.build_standard"), "pairs",
                          ("d_model", "d_ff", "layers", "heads"), decodes=False, causal=False),
    "looped": ModelSpec(_in("looped.build_looped"), "pairs",
                        ("d_model", "d_ff", "heads", "loop_offset"),
                        optional_fields=("extra_loops",), decodes=False, causal=False),
    "lstm-std": ModelSpec(_in("recurrent.build_standard"), "tokens", ("d_model", "layers"),
                          sizes="run"),
    "gpt-sin": ModelSpec(_in("transformer.build_sinusoidal"), "tokens",
                         ("d_model", "layers", "heads"), sizes="run", traces=True,
                         prunes_outputs=True),
    "rnn": ModelSpec(_in("recurrent.build_rnn"), "tokens", ("d_embed", "d_model", "layers"),
                     sizes="run", cost="recurrent", gates=1),
    "gru": ModelSpec(_in("recurrent.build_gru"), "tokens", ("d_embed", "d_model", "layers"),
                     sizes="run", cost="recurrent", gates=3),
    "nanogpt": ModelSpec(_in("transformer.build_nanogpt"), "tokens", ("d_model", "layers", "heads"),
                         sizes="run", context="max_len", traces=True, cost="attention",
                         prunes_outputs=True),
}


def build_model(name: str, size: dict, *, dropout: float, form: str | None = None, **dims) -> Any:
    """The registry model `name` for samples of `form` (None: its own), from the task's dims:
    built with its form's dims, and wrapped in the adapter from its form to `form`."""
    spec = MODELS[name]
    if form in (None, spec.form):
        return spec.build(size, dropout=dropout, **dims_of(spec.form, dims))
    adapter = ADAPTERS.get((spec.form, form))
    if adapter is None or (adapter.needs_causal and not spec.causal):
        raise TypeError(f"model {name} takes {spec.form}; no adapter gives it {form}")
    net = spec.build(size, dropout=dropout, **dims_of(spec.form, adapter.model_dims(dims)))
    return adapter.wrap(net, dims)


def spec_of(arch: dict) -> ModelSpec:
    """The registry entry of a built model's architecture ({model, form, ...}) as the training
    loop and the tasks see it: an adapted model's, where an adapter gives it another form."""
    spec = MODELS[arch["model"]]
    form = arch.get("form") or spec.form
    return adapted_spec(spec, ADAPTERS.get((spec.form, form)), form)


for _name, _spec in MODELS.items():
    _spec.check(_name)


SAVED_KEYS = ("model", "size", "dropout", "dims", "state_dict")


def read_saved(path, keys: tuple[str, ...] = ()) -> dict:
    """The dict a trained model was saved as, {model, size, dropout, dims, state_dict, ...}
    and `keys`, without building the model; ArtifactError if the file is anything else."""
    import torch

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
    saved = read_saved(path, keys)
    try:
        net = build_model(saved["model"], saved["size"], dropout=saved["dropout"],
                          form=saved.get("form"), **saved["dims"])
    except Exception as err:
        raise ArtifactError(path, f"cannot build the {saved['model']} it declares "
                                  f"({err})") from None
    try:
        net.load_state_dict(saved["state_dict"])
    except Exception as err:  # missing or unexpected weights, or other shapes
        raise ArtifactError(path, f"its weights do not fit the {saved['model']} it declares "
                                  f"({err})") from None
    return net, saved
