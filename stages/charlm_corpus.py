"""charlm-corpus: the corpus text and its vocabulary (data/charlm)."""

from __future__ import annotations

import click

from arithrepro.runs import data_dir
from arithrepro.stages.common import done, friendly_errors, params_option


@click.command("charlm-corpus")
@params_option
@friendly_errors
def charlm_corpus(params_path: str) -> None:
    """Build the corpus and its vocabulary.

    Reads params: charlm.corpus. Writes
    data/charlm/corpus.txt and data/charlm/meta.json (source, characters, vocabulary).
    """
    import hashlib

    from arithrepro import config
    from arithrepro.io import write_json, write_text
    from arithrepro.tasks.charlm_corpus import Vocab, build_corpus

    params = config.load(params_path)
    c = params["charlm"]["corpus"]
    text = build_corpus(c)
    vocab = Vocab.of(text)
    out = data_dir("charlm")
    write_text(out / "corpus.txt", text)
    write_json(out / "meta.json", {"source": c["source"], "path": c["path"], "chars": len(text),
                                   "vocab": vocab.chars, "vocab_size": len(vocab),
                                   "sha256": hashlib.sha256(text.encode()).hexdigest()})
    done(f"charlm-corpus: {len(text):,} characters of {c['source']} text, {len(vocab)} distinct "
         f"-> {out}")
