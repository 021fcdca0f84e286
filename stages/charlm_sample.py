"""charlm-sample: text sampled from every trained run, and the transformers' attention maps."""

from __future__ import annotations

import click

from arithrepro.stages.common import done, friendly_errors, params_option, paths


@click.command("charlm-sample")
@params_option
@friendly_errors
def charlm_sample(params_path: str) -> None:
    """Sample text from every trained run and draw the transformers' first-layer attention.

    Reads params: charlm.{models,schedules,seeds,schedule,architectures,sample,attention};
    runs/charlm/<run>/model.pt, data/charlm/meta.json. Writes metrics/charlm/samples.md (per run: the
    prompt and `chars` characters drawn from softmax(logits / temperature), seeded) and
    plots/charlm/attention/<run>.png (the first layer's heads for the attention prompt).
    """
    import shutil

    import torch

    from arithrepro import config
    from arithrepro.decoding import sample
    from arithrepro.io import write_text
    from arithrepro.models.registry import MODELS, load_model
    from arithrepro.report.plotting import STYLE, attention_grid, pyplot, save
    from arithrepro.tasks.charlm import read_corpus, run_arch, runs

    params = config.load(params_path)
    m = params["charlm"]
    s, prompt_a = m["sample"], m["attention"]["prompt"]
    _, vocab, meta = read_corpus(paths.data("charlm"))
    prompt = vocab.encode(s["prompt"], "charlm.sample.prompt")   # both checked before any work
    tokens_a = vocab.encode(prompt_a, "charlm.attention.prompt")
    todo = runs(params)
    models = {}
    for run in todo:
        path = run.dir / "model.pt"
        if not path.is_file():
            raise FileNotFoundError(f"{path}: missing; run `dvc repro train-charlm` first")
        models[run.name] = load_model(path)[0]
    out_dir = paths.plots / "charlm" / "attention"
    shutil.rmtree(out_dir, ignore_errors=True)
    lines = [f"# charlm samples\n\nCorpus: {meta['source']} ({meta['chars']:,} characters, "
             f"{meta['vocab_size']} distinct). Prompt {s['prompt']!r}, {s['chars']} characters "
             f"drawn from softmax(logits / {s['temperature']:g}), seed {s['seed']}.\n"]
    plt = pyplot()
    figures = []
    for run in todo:
        net = models[run.name].eval()
        model = run_arch(params, run)[0]
        block = m["schedule"][run.label]["seq_length"]
        context = block if MODELS[model].context == "max_len" else None
        drawn = sample(net, prompt, s["chars"], s["temperature"],
                       torch.Generator().manual_seed(s["seed"]), context)
        lines.append(f"## {run.name}\n\n```text\n{s['prompt']}{vocab.decode(drawn)}\n```\n")
        if MODELS[model].traces:
            first = net.trace(tokens_a.unsqueeze(0))["attention"][0][0]  # layer 1, sample 0
            shown = [{"\n": "\\n", " ": "␣"}.get(c, c) for c in prompt_a]
            with plt.rc_context(STYLE):
                fig = attention_grid(plt, [first], shown, f"{run.name}: first layer's attention")
                figures.append(save(plt, fig, out_dir / f"{run.name}.png"))
    write_text(paths.record("charlm").parent / "samples.md", "\n".join(lines))
    done(f"charlm-sample: {len(todo)} samples -> metrics/charlm/samples.md; "
         f"{len(figures)} attention maps -> {out_dir}")
