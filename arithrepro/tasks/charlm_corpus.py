"""charlm's corpus: a text of `chars` characters from one of four sources, and its
vocabulary (docs/charlm.md).
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
The vocabulary is the sorted set of its characters.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

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

    def __len__(self) -> int:
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


# a vocabulary of 96 characters for timing runs before the corpus exists (charlm's data, trial)
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
