"""charlm-compute: the cost table, by the formulas, counted and timed (untrained models)."""

from __future__ import annotations

import click

from arithrepro.runs import METRICS, data_dir
from arithrepro.stages.common import done, friendly_errors, params_option


@click.command("charlm-compute")
@params_option
@friendly_errors
def charlm_compute(params_path: str) -> None:
    """The compute table: FLOPs and sequential matmuls to generate and to train on T tokens,
    by the source's formulas and as counted, beside measured seconds per token (the formulas
    and the one count that is not the source's answer, a transformer generating T tokens in T
    cached passes: arithrepro/cost.py); and the step table: seconds per 100 training steps at
    the source's batch, as the source prints them, every architecture at every schedule, the
    transformers with fused and with written-out attention, in interleaved rounds
    (cost.step_rows), which the speed findings compare round by round.

    Reads params: device, precision, compile, graphs, charlm.{architectures, schedules,
    schedule, train, corpus, seeds, compute} (every architecture at T = each seq_length of the
    schedules that train) and data/charlm/meta.json (the vocabulary size). Models are built
    untrained: the cost does not depend on the weights. Writes metrics/charlm/compute.csv,
    metrics/charlm/steps.csv and metrics/charlm/compute.md.
    """
    import pandas as pd
    import torch

    from arithrepro import config
    from arithrepro.cost import formulas, measure, step_rows
    from arithrepro.io import write_frame, write_text
    from arithrepro.models.registry import MODELS, build_model
    from arithrepro.models.lm import count_params
    from arithrepro.report.charlm_figures import compute_markdown, steps_markdown
    from arithrepro.tasks.charlm import TASK
    from arithrepro.tasks.charlm_corpus import read_corpus

    params = config.load(params_path)
    m = params["charlm"]
    _, vocab, _ = read_corpus(data_dir("charlm"))
    device = config.device_of(params)
    lengths = sorted({m["schedule"][s]["seq_length"] for s in m["schedules"]})
    rows = []
    for T in lengths:
        for name, arch in m["architectures"].items():
            size = {k: v for k, v in arch.items() if k != "model"}
            torch.manual_seed(0)
            net = build_model(arch["model"], size, dropout=0.0,
                              **TASK.dims({"vocab_size": len(vocab), "seq_length": T})).to(device)
            context = T if MODELS[arch["model"]].context == "max_len" else None
            rows.append({"model": name, "arch": arch["model"], "params": count_params(net),
                         "layers": size["layers"], "d_model": size["d_model"], "T": T,
                         **formulas(MODELS[arch["model"]], size, T),
                         **measure(net, T, context, m["compute"]["repeats"])})
    frame = pd.DataFrame(rows)
    c = m["compute"]
    steps = pd.DataFrame(step_rows(params, c["rounds"], c["warmup"], c["timed"]))
    d = METRICS / "charlm"
    write_frame(d / "compute.csv", frame)
    write_frame(d / "steps.csv", steps)
    write_text(d / "compute.md", compute_markdown(frame, device) + "\n" + steps_markdown(steps, device))
    done(f"charlm-compute: {len(rows)} rows, {len(steps)} step timings on {device} -> {d / 'compute.md'}")
