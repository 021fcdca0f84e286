"""charlm-sample: text sampled from every trained run, and the transformers' attention maps."""

from __future__ import annotations

import click

from arithrepro.runs import METRICS, PLOTS, data_dir
from arithrepro.stages.common import done, friendly_errors, params_option


@click.command("charlm-sample")
@params_option
@friendly_errors
def charlm_sample(params_path: str) -> None:
    """Sample text from every trained run and draw the transformers' first-layer attention.

    Reads params: charlm.{models,schedules,seeds,schedule,architectures,sample,attention};
    runs/charlm/<run>/model.pt, data/charlm/meta.json. Writes metrics/charlm/samples.md (per run:
    its rule and its text: the prompt, or one start token drawn uniformly from the vocabulary,
    then the characters generated after it, each drawn from softmax(logits / temperature) or,
    where charlm.sample.rule says greedy, the argmax; one generator seeded by sample.seed) and
    plots/charlm/attention/<run>.png (the first layer's heads for the attention prompt).
    """
    import shutil

    from arithrepro import config
    from arithrepro.io import write_text
    from arithrepro.models.registry import MODELS, load_model
    from arithrepro.report.plotting import STYLE, attention_grid, pyplot, save
    from arithrepro.tasks.charlm import TASK
    from arithrepro.tasks.charlm_corpus import read_corpus
    from arithrepro.tasks.charlm_sampling import draw_sample

    params = config.load(params_path)
    m = params["charlm"]
    s, prompt_a = m["sample"], m["attention"]["prompt"]
    _, vocab, meta = read_corpus(data_dir("charlm"))
    if s["prompt"] is not None:                                   # both checked before any work
        vocab.encode(s["prompt"], "charlm.sample.prompt")
    tokens_a = vocab.encode(prompt_a, "charlm.attention.prompt")
    # each run's configuration from the params, read: the samples depend on its values
    todo = [run for key, seeds in TASK.listed(params)
            for run in TASK.config(params, *key, seeds=seeds).runs]
    models = {}
    for run in todo:
        path = run.files.model
        if not path.is_file():
            raise FileNotFoundError(f"{path}: missing; run `dvc repro train-charlm` first")
        models[run.name] = load_model(path)[0]
    out_dir = PLOTS / "charlm" / "attention"
    shutil.rmtree(out_dir, ignore_errors=True)
    lines = [samples_header(meta, s)]
    plt = pyplot()
    figures = []
    for run in todo:
        net = models[run.name].eval()
        model = run.config.architecture["model"]
        prompt, drawn, rule = draw_sample(net, run, params, vocab)
        lines.append(f"## {run.name}\n\n{rule_line(rule, s, len(prompt), len(drawn))}\n\n"
                     f"```text\n{vocab.decode(prompt)}{vocab.decode(drawn)}\n```\n")
        if MODELS[model].traces:
            first = net.trace(tokens_a.unsqueeze(0))["attention"][0][0]  # layer 1, sample 0
            shown = [{"\n": "\\n", " ": "␣"}.get(c, c) for c in prompt_a]
            with plt.rc_context(STYLE):
                fig = attention_grid(plt, [first], shown, f"{run.name}: first layer's attention")
                figures.append(save(plt, fig, out_dir / f"{run.name}.png"))
    out_dir.mkdir(parents=True, exist_ok=True)   # a DVC output even when no model attends
    write_text(METRICS / "charlm" / "samples.md", "\n".join(lines))
    done(f"charlm-sample: {len(todo)} samples -> metrics/charlm/samples.md; "
         f"{len(figures)} attention maps -> {out_dir}")


def samples_header(meta: dict, s: dict) -> str:
    """samples.md's first lines: the corpus, how every sample starts and how long it is."""
    if s["prompt"] is None:
        start = "Every sample starts from one token drawn uniformly from the vocabulary"
    else:
        start = f"Every sample starts from the prompt {s['prompt']!r}"
    if s["chars"] is None:
        length = ("a recurrent model then generates 99 characters (the source's length=100, the "
                  "start included), a transformer 100 (the source's max_new_tokens=100)")
    else:
        length = f"every model then generates {s['chars']} characters"
    return (f"# charlm samples\n\nCorpus: {meta['source']} ({meta['chars']:,} characters, "
            f"{meta['vocab_size']} distinct). {start}; {length}. One generator, seeded by "
            f"{s['seed']}, draws the start and the characters, the same for every run. Each "
            "run's rule is under its name: softmax (each character drawn from "
            "softmax(logits / temperature)) or greedy (the argmax; charlm.sample.rule).\n")


def rule_line(rule: str, s: dict, prompt_len: int, n: int) -> str:
    """The line under a run's heading: how it generated, and how many characters."""
    how = ("greedy, the argmax of the logits" if rule == "greedy"
           else f"softmax, drawn from softmax(logits / {s['temperature']:g})")
    return f"Rule: {how}; {prompt_len} + {n} characters."
