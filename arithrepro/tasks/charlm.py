"""charlm: character-level language modelling on one corpus (docs/charlm.md).

The corpus is a text of `chars` characters from one of four sources:
- python-docs (the default): English prose every machine with Python has offline and nobody has
  to ship: the reference topics `help()` shows (the pydoc_data package), then the docstrings of
  the standard library's modules, classes and functions in file order. Letters, punctuation and
  words, like the source's TinyStories; the arithmetic lines below have 17 characters and too
  little to tell the models apart. The text depends on the Python version, so meta.json records
  its hash;
- arithmetic: lines `problem=value` drawn from the expr grammar (expr_grammar.py), seeded;
- tinystories: the first `chars` characters of TinyStories' train split, stories joined by
  newlines, from the hub through `datasets` or from a local copy at `path`;
- file: any UTF-8 text file at `path`.
The vocabulary is the sorted set of its characters. The text is cut into non-overlapping chunks
of seq_length + 1 characters (input: the first seq_length, target: shifted by one) and the
chunks are split into train and validation by a permutation seeded by corpus.seed, the same for
every run, so runs of different seeds differ in their initialization and batches only.

A run is one architecture of charlm.models at one schedule of charlm.schedules (a seq_length and
a number of steps) with one seed, `<model>-<schedule>-<seed>`: a cell of dvc.yaml's train-charlm.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from pathlib import Path

from arithrepro.models.registry import MODELS
from arithrepro.runs import Built, Config, Data, Run, data_dir, runs_dir
from arithrepro.schema import (ParamsError, check_schema, choice, fail, integer, list_of,
                               number)
from arithrepro.tasks.base import Task
from arithrepro.tasks.declared import Report, Stages, Takes
from arithrepro.train.batches import EpochBatches

SOURCES = ("python-docs", "arithmetic", "tinystories", "file")
TINYSTORIES = "roneneldan/TinyStories"
STORY_END = "<|endoftext|>"  # the separator of TinyStories' own text files


# --- the corpus ----------------------------------------------------------------------------

def arithmetic_text(chars: int, seed: int, max_in: int = 24) -> str:
    """Lines `problem=value` from the expr grammar until `chars` characters."""
    from arithrepro.tasks.expr_grammar import sample

    rng = random.Random(seed)
    lines, n = [], 0
    while n < chars:
        draw = sample(rng, max_in)
        if draw is not None:
            line = f"{draw[0]}={draw[1]}\n"
            lines.append(line)
            n += len(line)
    return "".join(lines)[:chars]


def python_docs_text(chars: int) -> str:
    """The Python installation's documentation: help() topics, then stdlib docstrings."""
    return _first_chars(_python_docs(), chars)


def _python_docs():
    import ast
    import sysconfig

    from pydoc_data.topics import topics

    for name in sorted(topics):
        yield topics[name].strip("\n")
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    skip = {"test", "tests", "idle_test", "site-packages", "dist-packages"}
    for path in sorted(stdlib.rglob("*.py")):
        if skip & set(path.relative_to(stdlib).parts):
            continue
        try:
            tree = ast.parse(path.read_bytes())
        except (SyntaxError, ValueError):  # a deliberately broken file (lib2to3 data, say)
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if doc and len(doc) >= 80:   # one-line docstrings are names, not prose
                    yield doc


def _first_chars(texts, chars: int) -> str:
    """Texts joined by newlines, cut after `chars` characters (reading no more than needed)."""
    parts, n = [], 0
    for text in texts:
        parts.append(text)
        n += len(text) + 1
        if n >= chars:
            break
    return "\n".join(parts)[:chars]


def _text_column(rows):
    for row in rows:
        yield row["text"]


def tinystories_text(chars: int, path: str | None = None) -> str:
    """The first `chars` characters of TinyStories' train split, stories joined by newlines.

    path: None (the hub, through `datasets`), a directory (`Dataset.save_to_disk`, or data files
    `datasets` can load), a .txt file in TinyStories' own format (stories separated by
    <|endoftext|> lines) or a .json/.jsonl/.parquet/.csv/.arrow file with a `text` column.
    """
    if path is not None:
        return _local_tinystories(Path(path), chars)
    # no hub here means a quick one-line error, not minutes of retries
    os.environ.setdefault("HF_HUB_ETAG_TIMEOUT", "10")
    os.environ.setdefault("HF_HUB_DOWNLOAD_TIMEOUT", "10")
    try:
        import datasets

        rows = datasets.load_dataset(TINYSTORIES, split="train", streaming=True)
        return _first_chars(_text_column(rows), chars)
    except Exception as err:  # noqa: BLE001 - any failure of the hub is reported the same way
        reason = str(err).splitlines()[0][:160] if str(err) else type(err).__name__
        raise FileNotFoundError(
            f"charlm.corpus: TinyStories ({TINYSTORIES}) could not be loaded from the hub "
            f"({reason}); set charlm.corpus.path to a local copy") from None


def _local_tinystories(path: Path, chars: int) -> str:
    if not path.exists():
        raise FileNotFoundError(f"charlm.corpus.path = {str(path)!r}: no such file or directory")
    if path.is_file() and path.suffix == ".txt":
        return _first_chars(_stories(path), chars)
    import datasets

    formats = {".json": "json", ".jsonl": "json", ".parquet": "parquet", ".csv": "csv",
               ".arrow": "arrow"}
    try:
        if path.is_dir() and (path / "dataset_info.json").is_file():
            rows = datasets.load_from_disk(str(path))
            rows = rows["train"] if isinstance(rows, datasets.DatasetDict) else rows
        elif path.is_dir():
            rows = datasets.load_dataset(str(path), split="train")
        elif path.suffix in formats:
            rows = datasets.load_dataset(formats[path.suffix], data_files=str(path), split="train")
        else:
            raise ValueError(f"expected a directory or a {', '.join(['.txt', *formats])} file")
        if "text" not in rows.column_names:
            raise ValueError(f"no `text` column (columns: {', '.join(rows.column_names)})")
        return _first_chars(_text_column(rows), chars)
    except ValueError as err:
        raise ValueError(f"charlm.corpus.path = {str(path)!r}: {err}") from None


def _stories(path: Path):
    """Stories of a TinyStories .txt file, read line by line."""
    story: list[str] = []
    with path.open(encoding="utf-8") as f:
        for line in f:
            if line.strip() == STORY_END:
                if story:
                    yield "".join(story).strip("\n")
                story = []
            else:
                story.append(line)
    if story:
        yield "".join(story).strip("\n")


def file_text(path: str, chars: int) -> str:
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"charlm.corpus.path = {path!r}: no such file")
    try:
        with p.open(encoding="utf-8") as f:
            return f.read(chars)
    except UnicodeDecodeError:
        raise ValueError(f"charlm.corpus.path = {path!r}: not UTF-8 text") from None


def build_corpus(c: dict) -> str:
    """The text the corpus block (charlm.corpus) asks for."""
    if c["source"] == "python-docs":
        text = python_docs_text(c["chars"])
    elif c["source"] == "arithmetic":
        text = arithmetic_text(c["chars"], c["seed"])
    elif c["source"] == "tinystories":
        text = tinystories_text(c["chars"], c["path"])
    else:
        text = file_text(c["path"], c["chars"])
    if len(set(text)) < 2:
        raise ValueError(f"charlm.corpus: the {c['source']} text has {len(text)} characters and "
                         f"{len(set(text))} distinct ones; a language model needs more")
    return text


class Vocab:
    """Characters <-> ids, ids in sorted character order."""

    def __init__(self, chars: list[str]):
        self.chars = list(chars)
        self.ids = {c: i for i, c in enumerate(self.chars)}

    @classmethod
    def of(cls, text: str) -> "Vocab":
        return cls(sorted(set(text)))

    @property
    def size(self) -> int:
        return len(self.chars)

    def encode(self, text: str, key: str = "text"):
        import torch

        unknown = sorted(set(text) - set(self.ids))
        if unknown:
            raise ValueError(f"{key}: characters not in the corpus vocabulary: "
                             f"{''.join(unknown)!r}")
        return torch.tensor([self.ids[c] for c in text], dtype=torch.long)

    def decode(self, ids) -> str:
        return "".join(self.chars[int(i)] for i in ids)


def chunk(ids, seq_length: int):
    """(N, seq_length + 1) non-overlapping chunks; the remainder is dropped."""
    n = len(ids) // (seq_length + 1)
    return ids[:n * (seq_length + 1)].view(n, seq_length + 1)


def split(n: int, val_frac: float, seed: int):
    """Seeded (train, validation) chunk indices; at least one of each."""
    import torch

    if n < 2:
        raise ValueError(f"charlm: the corpus makes {n} chunk(s); raise charlm.corpus.chars "
                         "or lower seq_length")
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    n_val = min(n - 1, max(1, round(val_frac * n)))
    return order[n_val:].sort().values, order[:n_val].sort().values


@dataclass(frozen=True)
class Chunks:
    train: object  # (N, seq_length + 1) LongTensors
    val: object

    @classmethod
    def of(cls, ids, seq_length: int, val_frac: float, seed: int, device) -> "Chunks":
        chunks = chunk(ids, seq_length)
        tr, va = split(len(chunks), val_frac, seed)
        return cls(chunks[tr].to(device), chunks[va].to(device))

    @staticmethod
    def batch(chunks, idx):
        c = chunks[idx]
        x, y = c[:, :-1], c[:, 1:]
        import torch

        return x, y, torch.ones_like(y, dtype=torch.bool)


# --- runs and params -----------------------------------------------------------------------

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


class CharLMTask(Task):
    name = "charlm"

    @classmethod
    def params_schema(cls) -> dict:
        return {
            "corpus": {"source": choice(*SOURCES), "chars": integer(100), "path": _path,
                       "seed": integer(0), "val_frac": number(0, 1, lo_open=True, hi_open=True)},
            "models": list_of(_text),
            "schedules": list_of(_text),
            "seeds": list_of(integer(0, 2**31 - 1)),
            "architectures": _Architectures(),
            "schedule": _schedules,
            "train": {"lr": number(0, lo_open=True), "batch_size": integer(1),
                      "dropout": number(0, 1, hi_open=True),
                      "eval_every": integer(1), "checkpoint_every": integer(1)},
            "sample": {"prompt": _prompt, "chars": _chars,
                       "temperature": number(0, lo_open=True), "seed": integer(0),
                       "rule": _rules},
            "attention": {"prompt": _text},
            "compute": {"repeats": integer(1), "rounds": integer(1), "warmup": integer(1),
                        "timed": integer(1)},
        }

    @classmethod
    def check_params(cls, params: dict) -> None:
        m = params["charlm"]
        c = m["corpus"]
        if c["source"] == "file" and c["path"] is None:
            raise ParamsError("charlm.corpus.path: missing; the file source reads it")
        for key, within in (("models", "architectures"), ("schedules", "schedule")):
            names, known = m[key], m[within]
            for name in names:
                if name not in known:
                    raise ParamsError(f"charlm.{key}: {name!r} is not one of charlm.{within} "
                                      f"({', '.join(known)})")
        for name in m["sample"]["rule"]:
            if name not in m["architectures"]:
                raise ParamsError(f"charlm.sample.rule.{name}: not one of charlm.architectures "
                                  f"({', '.join(m['architectures'])})")
        prompt = m["attention"]["prompt"]
        for c in TASK.configs(params):
            block = c.settings["schedule"]["seq_length"]
            if MODELS[c.architecture["model"]].context == "max_len" and len(prompt) > block:
                raise ParamsError(f"charlm.attention.prompt: {len(prompt)} characters, longer "
                                  f"than {c.name}'s block of {block}")

    def dims(self, setting: dict) -> dict:
        """setting: {vocab_size: the corpus's, seq_length: the run's}."""
        return {"vocab_size": setting["vocab_size"], "max_len": setting["seq_length"],
                "pad_id": -1}  # no padding

    def listed(self, params: dict) -> list[tuple[tuple, tuple]]:
        """models x schedules, in dvc.yaml's order (train-charlm); a configuration's label is
        its schedule's name."""
        m = params["charlm"]
        return [((name, schedule), tuple(m["seeds"]))
                for name in m["models"] for schedule in m["schedules"]]

    def config(self, params: dict, name: str, schedule: str, seeds=()) -> Config:
        """Architecture `name` (charlm.architectures) on `schedule`: the source's Adam at a
        constant rate, the last state kept; the corpus decides the vocabulary (`data`)."""
        m = params["charlm"]
        arch = dict(m["architectures"][name])
        model = arch.pop("model")
        sched, t = m["schedule"][schedule], m["train"]
        dims = {"max_len": sched["seq_length"], "pad_id": -1}   # no padding
        loop = dict(lr=float(t["lr"]), optimizer="adam", schedule="constant", warmup_frac=0.0,
                    val_every=t["eval_every"], checkpoint_every=t["checkpoint_every"],
                    validate_epochs=False, restore_best=False, eval_batch_size=256)
        return Config("charlm", name, schedule, seeds,
                      {"model": model, "size": arch, "dropout": float(t["dropout"]), "dims": dims},
                      loop, {"model": model, "size": arch, "schedule": sched, "train": t,
                             "corpus": m["corpus"]}, key=(name, schedule),
                      stage="train-charlm", item=(name, schedule))

    def data(self, run: Run, params: dict, device, trial: bool = False) -> Data:
        """The corpus in chunks of the schedule's length, and its vocabulary; trial: random
        characters of a 96-character vocabulary instead (the real corpus may be out of reach,
        and the vocabulary only sizes the embedding and the output layer)."""
        import torch

        s = run.config.settings
        corpus, sched = s["corpus"], s["schedule"]
        if trial:
            ids = torch.randint(len(TIMING_VOCAB.chars), (corpus["chars"],),
                                generator=torch.Generator().manual_seed(0))
            vocab, files = TIMING_VOCAB, []
        else:
            text, vocab, _ = read_corpus(data_dir("charlm"))
            ids, files = vocab.encode(text), [data_dir("charlm") / "corpus.txt"]
        chunks = Chunks.of(ids, sched["seq_length"], corpus["val_frac"], corpus["seed"], device)
        batches = EpochBatches(lambda idx: Chunks.batch(chunks.train, idx), len(chunks.train),
                               s["train"]["batch_size"], 1, run.seed, device,
                               steps=sched["steps"])
        return Data(batches, (lambda idx: Chunks.batch(chunks.val, idx), len(chunks.val)),
                    architecture={"dims": {"vocab_size": vocab.size}, "vocab": vocab.chars},
                    files=files,
                    notes={"train_chunks": len(chunks.train), "val_chunks": len(chunks.val)})

    def record(self, run: Run, built: Built, result: dict, summary: dict, params: dict) -> dict:
        """Final and best validation loss, bits per character, parameters, train_seconds,
        tokens/s (metrics/charlm/runs/<run>.json)."""
        import math

        final = float(result["val_curve"][-1]["val_loss"])
        return {"params": summary["params"], "seq_length": built.read["settings"]["schedule"]["seq_length"],
                "steps": result["steps"], "final_val_loss": final,
                "best_val_loss": result["best_val_loss"], "best_step": result["best_step"],
                "final_bpc": final / math.log(2), "best_bpc": result["best_val_loss"] / math.log(2),
                "train_seconds": result["train_seconds"], "tokens_per_s": result["tokens_per_s"],
                "vocab_size": built.arch["dims"]["vocab_size"], **built.data.notes}


class _Architectures:
    """charlm.architectures: name -> {model, sizes...}; a schema leaf (free keys)."""

    def __call__(self, key: str, value) -> None:
        if not isinstance(value, dict) or not value:
            fail(key, value, "a mapping of model names to architectures")
        for name, arch in value.items():
            _architecture(f"{key}.{name}", arch)


TASK = CharLMTask()


def stages() -> list:
    """The corpus; a run per model x schedule x seed; samples and attention maps of every
    run; the compute table (each architecture's cost, timed)."""
    from arithrepro.dvcfile import Stage, item, placeholders, ref, train_stage

    run = placeholders("charlm", item("schedule"))
    models = "charlm.models", "charlm.schedules", "charlm.seeds"
    return [
        Stage("charlm-corpus", "charlm-corpus", "charlm", params=["charlm.corpus"],
              outs=["data/charlm"]),
        train_stage("train-charlm", run,
                    {"model": ref("charlm.models"), "schedule": ref("charlm.schedules"),
                     "seed": ref("charlm.seeds")},
                    [f"charlm.architectures.{item('model')}",
                     f"charlm.schedule.{item('schedule')}", "charlm.train", "charlm.corpus"],
                    deps=["data/charlm"], outs=(str(run.record),)),
        Stage("charlm-sample", "charlm-sample", "charlm",
              # the runs' configurations read their training block and corpus too
              params=[*models, "charlm.architectures", "charlm.schedule", "charlm.train",
                      "charlm.corpus", "charlm.sample", "charlm.attention"],
              outs=["metrics/charlm/samples.md", "plots/charlm/attention"],
              deps=[str(data_dir("charlm")), str(runs_dir("charlm"))]),
        Stage("charlm-compute", "charlm-compute", "charlm",
              params=["device", "precision", "compile", "graphs", "charlm.architectures",
                      "charlm.schedules", "charlm.schedule", "charlm.train", "charlm.corpus",
                      "charlm.seeds", "charlm.compute"],
              outs=["metrics/charlm/compute.csv", "metrics/charlm/steps.csv",
                    "metrics/charlm/compute.md"],
              deps=["data/charlm"]),
    ]


STAGES = Stages("RNN, GRU and transformer character LMs, and what they cost",
                run_keys=("models", "schedules", "seeds"), images=("plots/charlm/attention",),
                make=stages)
REPORT = Report(("final_bpc",))
TAKES = Takes(own=OWN_MODELS, decodes=True, priced=True)   # the compute table prices every model

# a vocabulary of 96 characters for timing runs before the corpus exists (CharLMTask.data, trial)
TIMING_VOCAB = Vocab([chr(32 + i) for i in range(96)])


def read_corpus(data_dir: Path):
    """(text, Vocab, meta) of data/charlm, checked whole: a corpus cut short or changed since
    its meta.json was written is an ArtifactError, not other text to train on."""
    import hashlib

    from arithrepro.io import ArtifactError, read_json

    meta, text = data_dir / "meta.json", data_dir / "corpus.txt"
    for f in (meta, text):
        if not f.is_file():
            raise FileNotFoundError(f"{f}: missing; run `arithrepro charlm-corpus` first")
    m = read_json(meta, ("source", "chars", "vocab", "vocab_size", "sha256"))
    if not (isinstance(m["vocab"], list) and all(isinstance(c, str) and len(c) == 1
                                                 for c in m["vocab"])):
        raise ArtifactError(meta, "vocab is not a list of characters")
    try:
        corpus = text.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise ArtifactError(text, f"not UTF-8 text ({err})") from None
    # a corpus cut short or changed since its meta.json was written would train on other text;
    # the file's bytes are the text written unless newlines were translated (on Windows)
    if m["sha256"] not in {hashlib.sha256(text.read_bytes()).hexdigest(),
                           hashlib.sha256(corpus.encode()).hexdigest()}:
        raise ArtifactError(text, f"its sha256 is not the one in {meta}")
    return corpus, Vocab(m["vocab"]), m


# --- samples (charlm-sample) ---------------------------------------------------------------

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
        return torch.randint(vocab.size, (1,), generator=generator)
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
