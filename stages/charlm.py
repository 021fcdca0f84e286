"""The charlm stages: corpus -> train (every run) -> samples and attention maps; the compute table.

charlm-train trains all the profile's runs in one stage (the run list depends on the profile,
which DVC cannot interpolate into a matrix). Each run is memoized by content in
runs/charlm/cells/<fingerprint> (its architecture, schedule, training settings, the corpus and
the training code), so a change to one model's settings retrains that model's runs only.
"""

from __future__ import annotations

from pathlib import Path

import click

from arithrepro.stages.common import (code_hash, done, fingerprint, friendly_errors,
                                     memo_finished, params_option, placement, paths)

CODE = ("train.py", "models", "tasks/charlm.py")
# What a memo cell must hold to be reused: record.json's keys the stages read, and the CSVs'
# columns.
MEMO = (("task", "model", "seed", "best_val_loss"),
        {"curves.csv": ("step", "loss"), "val.csv": ("step", "val_loss")})


def _corpus(data_dir: Path):
    import hashlib

    from arithrepro.io import ArtifactError, read_json
    from arithrepro.tasks.charlm import Vocab

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


@click.command("charlm-corpus")
@params_option
@friendly_errors
def charlm_corpus(params_path: str) -> None:
    """Build the corpus and its vocabulary.

    Reads params: profile, charlm.corpus (merged with profiles.<profile>.charlm.corpus). Writes
    data/charlm/corpus.txt and data/charlm/meta.json (source, characters, vocabulary).
    """
    import hashlib

    from arithrepro import config
    from arithrepro.io import write_json, write_text
    from arithrepro.tasks.charlm import Vocab, build_corpus, merged

    params = config.load(params_path)
    c = merged(params)["corpus"]
    text = build_corpus(c)
    vocab = Vocab.of(text)
    out = paths.data("charlm")
    write_text(out / "corpus.txt", text)
    write_json(out / "meta.json", {"source": c["source"], "path": c["path"], "chars": len(text),
                                   "vocab": vocab.chars, "vocab_size": vocab.size,
                                   "sha256": hashlib.sha256(text.encode()).hexdigest()})
    done(f"charlm-corpus: {len(text):,} characters of {c['source']} text, {vocab.size} distinct "
         f"-> {out}")


@click.command("charlm-train")
@params_option
@friendly_errors
def charlm_train(params_path: str) -> None:
    """Train every charlm run of the profile (models x seq_lengths).

    Reads params: profile, charlm.{models,runs,seeds,train,corpus.{val_frac,seed}} (merged with
    profiles.<profile>.charlm), data/charlm/. Writes per run `<model>-s<seq_length>-<seed>`:
    metrics/charlm/runs/<run>.json (final and best validation loss, bits per character,
    parameters, train_seconds, tokens/s), plots/charlm/curves/<run>.csv (training loss per
    step), plots/charlm/val/<run>.csv (validation loss every eval_every steps) and
    runs/charlm/models/<run>.pt (the final model).
    """
    import shutil

    from arithrepro import config
    from arithrepro.io import copy_file, read_json, write_json
    from arithrepro.tasks.charlm import merged, runs

    params = config.load(params_path)
    m = merged(params)
    text, vocab, meta = _corpus(paths.data("charlm"))
    device, precision = placement(params, "charlm")
    code = code_hash(CODE)
    out = {"records": paths.record("charlm"), "curves": paths.plots / "charlm" / "curves",
           "val": paths.plots / "charlm" / "val", "models": paths.run("charlm", "models")}
    for d in out.values():  # a run dropped from the profile leaves nothing behind
        shutil.rmtree(d, ignore_errors=True)
    todo = runs(params)
    trained, best = 0, None
    for i, run in enumerate(todo):
        key = fingerprint(run.model, run.size, run.seq_length, run.steps, run.seed, m["train"],
                          m["corpus"]["val_frac"], m["corpus"]["seed"], meta["sha256"], precision,
                          params["compile"], code)
        cell = Path("runs/charlm/cells") / key
        if not memo_finished(cell, *MEMO):
            click.echo(f"[{i + 1}/{len(todo)}] {run.name}", err=True)
            _train(run, m, text, vocab, cell, device, precision, params["compile"])
            trained += 1
        # a cell shared by two model names of the same architecture is named after this one
        record = {**read_json(cell / "record.json"), "model": run.model_name, "size": run.label}
        write_json(out["records"] / f"{run.name}.json", record)
        copy_file(cell / "curves.csv", out["curves"] / f"{run.name}.csv")
        copy_file(cell / "val.csv", out["val"] / f"{run.name}.csv")
        copy_file(cell / "model.pt", out["models"] / f"{run.name}.pt")
        if best is None or record["best_val_loss"] < best[1]:
            best = (run.name, record["best_val_loss"])
    done(f"charlm-train: {len(todo)} runs ({trained} trained, {len(todo) - trained} reused) on "
         f"{device}; lowest validation loss {best[1]:.4f} ({best[0]}) -> {out['records']}")


def setup(run, m: dict, ids, vocab_size: int, device: str, precision: str, compile_: bool):
    """One run, ready to train on the corpus `ids`: (model, dims, data, loop config, batches,
    validation set)."""
    import torch

    from arithrepro.models import build_model
    from arithrepro.tasks.charlm import TASK, Data
    from arithrepro.train import EpochBatches, TrainConfig

    t = m["train"]
    data = Data.of(ids, run.seq_length, m["corpus"]["val_frac"], m["corpus"]["seed"], device)
    torch.manual_seed(run.seed)
    dims = TASK.dims(vocab_size, run.seq_length)
    net = build_model(run.model, run.size, dropout=float(t["dropout"]), **dims).to(device)
    cfg = TrainConfig(lr=float(t["lr"]), seed=run.seed, optimizer="adam", schedule="constant",
                      warmup_frac=0.0, val_every=t["eval_every"],
                      checkpoint_every=t["checkpoint_every"], validate_epochs=False,
                      restore_best=False, eval_batch_size=256, precision=precision,
                      compile=compile_)
    batches = EpochBatches(lambda idx: Data.batch(data.train, idx), len(data.train),
                           t["batch_size"], 1, run.seed, device, steps=run.steps)
    return net, dims, data, cfg, batches, (lambda idx: Data.batch(data.val, idx), len(data.val))


def _train(run, m: dict, text: str, vocab, cell: Path, device: str, precision: str,
           compile_: bool) -> None:
    import math

    import pandas as pd

    from arithrepro.io import save_torch, write_frame, write_json
    from arithrepro.models.lm import count_params
    from arithrepro.provenance import provenance
    from arithrepro.train import fit

    t = m["train"]
    net, dims, data, cfg, batches, valid = setup(run, m, vocab.encode(text), vocab.size, device,
                                                 precision, compile_)
    # model_name is left out: a cell is shared by the names of one architecture
    read = {"model": run.model, "size": run.size, "seq_length": run.seq_length, "steps": run.steps,
            "seed": run.seed, "train": t, "corpus": m["corpus"]}
    origin = provenance(read, device=device, precision=precision, compiled=compile_)
    result = fit(net, batches, valid, cfg, cell / "checkpoint.pt", cell.name)
    val = pd.DataFrame(result["val_curve"]).drop(columns="epoch")
    final = float(val["val_loss"].iloc[-1])
    record = {"task": "charlm", "model": run.model_name, "size": run.label, "seed": run.seed,
              "params": count_params(net), "seq_length": run.seq_length, "steps": result["steps"],
              "final_val_loss": final, "best_val_loss": result["best_val_loss"],
              "best_step": result["best_step"], "final_bpc": final / math.log(2),
              "best_bpc": result["best_val_loss"] / math.log(2),
              "train_seconds": result["train_seconds"], "tokens_per_s": result["tokens_per_s"],
              "vocab_size": vocab.size, "train_chunks": len(data.train),
              "val_chunks": len(data.val), "provenance": {"train": origin}}
    write_frame(cell / "curves.csv", pd.DataFrame(result["train_curve"])[["step", "loss"]])
    write_frame(cell / "val.csv", val)
    save_torch(cell / "model.pt", {"model": run.model, "size": run.size,
                                   "dropout": float(t["dropout"]), "dims": dims,
                                   "vocab": vocab.chars,
                                   "state_dict": {k: v.cpu() for k, v in net.state_dict().items()}})
    (cell / "checkpoint.pt").unlink(missing_ok=True)
    write_json(cell / "record.json", record)  # last: its presence marks the run finished


@click.command("charlm-sample")
@params_option
@friendly_errors
def charlm_sample(params_path: str) -> None:
    """Sample text from every trained run and draw the transformers' first-layer attention.

    Reads params: profile, charlm.{runs,sample,attention} (merged with the profile's),
    runs/charlm/models/, data/charlm/meta.json. Writes metrics/charlm/samples.md (per run: the
    prompt and `chars` characters drawn from softmax(logits / temperature), seeded) and
    plots/charlm/attention/<run>.png (the first layer's heads for the attention prompt).
    """
    import shutil

    import torch

    from arithrepro import config
    from arithrepro.evaluate import sample
    from arithrepro.io import write_text
    from arithrepro.models import load_model
    from arithrepro.report.figures import STYLE, _pyplot, _save
    from arithrepro.report.modular_figures import attention_grid
    from arithrepro.tasks.charlm import merged, runs

    params = config.load(params_path)
    m = merged(params)
    s, prompt_a = m["sample"], m["attention"]["prompt"]
    _, vocab, meta = _corpus(paths.data("charlm"))
    prompt = vocab.encode(s["prompt"], "charlm.sample.prompt")   # both checked before any work
    tokens_a = vocab.encode(prompt_a, "charlm.attention.prompt")
    todo = runs(params)
    models = {}
    for run in todo:
        path = paths.run("charlm", "models") / f"{run.name}.pt"
        if not path.is_file():
            raise FileNotFoundError(f"{path}: missing; run `arithrepro charlm-train` first")
        models[run.name] = load_model(path)[0]
    out_dir = paths.plots / "charlm" / "attention"
    shutil.rmtree(out_dir, ignore_errors=True)
    lines = [f"# charlm samples\n\nCorpus: {meta['source']} ({meta['chars']:,} characters, "
             f"{meta['vocab_size']} distinct). Prompt {s['prompt']!r}, {s['chars']} characters "
             f"drawn from softmax(logits / {s['temperature']:g}), seed {s['seed']}.\n"]
    plt = _pyplot()
    figures = []
    for run in todo:
        net = models[run.name].eval()
        context = run.seq_length if run.model == "nanogpt" else None
        drawn = sample(net, prompt, s["chars"], s["temperature"],
                       torch.Generator().manual_seed(s["seed"]), context)
        lines.append(f"## {run.name}\n\n```text\n{s['prompt']}{vocab.decode(drawn)}\n```\n")
        if run.model == "nanogpt":
            first = net.trace(tokens_a.unsqueeze(0))["attention"][0][0]  # layer 1, sample 0
            shown = [{"\n": "\\n", " ": "␣"}.get(c, c) for c in prompt_a]
            with plt.rc_context(STYLE):
                fig = attention_grid(plt, [first], shown, f"{run.name}: first layer's attention")
                figures.append(_save(plt, fig, out_dir / f"{run.name}.png"))
    write_text(paths.record("charlm").parent / "samples.md", "\n".join(lines))
    done(f"charlm-sample: {len(todo)} samples -> metrics/charlm/samples.md; "
         f"{len(figures)} attention maps -> {out_dir}")


@click.command("charlm-compute")
@params_option
@friendly_errors
def charlm_compute(params_path: str) -> None:
    """The compute table: FLOPs and sequential matmuls to generate and to train on T tokens,
    by the spec's formulas and as counted, beside measured seconds per token.

    Reads params: profile, charlm.{models,runs,compute} (merged with the profile's; T = each
    seq_length of the runs) and data/charlm/meta.json (the vocabulary size). Models are built
    untrained: the cost does not depend on the weights. Writes metrics/charlm/compute.csv and
    metrics/charlm/compute.md.
    """
    import pandas as pd
    import torch

    from arithrepro import config
    from arithrepro.compute import formulas, measure
    from arithrepro.io import write_frame, write_text
    from arithrepro.models import build_model
    from arithrepro.models.lm import count_params
    from arithrepro.report.charlm_report import compute_markdown
    from arithrepro.tasks.charlm import TASK, merged

    params = config.load(params_path)
    m = merged(params)
    _, vocab, _ = _corpus(paths.data("charlm"))
    device, _ = placement(params, "charlm")
    lengths = sorted({r["seq_length"] for r in m["runs"]})
    rows = []
    for T in lengths:
        for name, arch in m["models"].items():
            size = {k: v for k, v in arch.items() if k != "model"}
            torch.manual_seed(0)
            net = build_model(arch["model"], size, dropout=0.0,
                              **TASK.dims(vocab.size, T)).to(device)
            context = T if arch["model"] == "nanogpt" else None
            rows.append({"model": name, "arch": arch["model"], "params": count_params(net),
                         "layers": size["layers"], "d_model": size["d_model"], "T": T,
                         **formulas(arch["model"], size, T),
                         **measure(net, T, context, m["compute"]["repeats"])})
    frame = pd.DataFrame(rows)
    d = paths.record("charlm").parent
    write_frame(d / "compute.csv", frame)
    write_text(d / "compute.md", compute_markdown(frame, device))
    done(f"charlm-compute: {len(rows)} rows on {device} -> {d / 'compute.md'}")
