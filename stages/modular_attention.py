"""modular-attention: attention maps of a GPT that generalized, for chosen samples."""

from __future__ import annotations

import click

from arithrepro.runs import PLOTS
from arithrepro.stages.common import done, friendly_errors, params_option


@click.command("modular-attention")
@params_option
@friendly_errors
def modular_attention(params_path: str) -> None:
    """Draw the attention weights of every layer and head for each chosen sample, and measure
    where every run's attention goes on them.

    Reads params: modular.attention (study, model, samples) and the study's settings;
    metrics/modular/runs/<study>/ (to pick the run of `model` whose last state, the one
    model.pt holds, has the best validation accuracy, then the best over the run, then the
    lowest validation loss) and runs/modular/<study>/<run>/model.pt. Writes
    plots/modular/attention/sample<i>.png: a grid of maps, rows = layers, columns = heads, both
    axes labelled with the sample's tokens; the title says whether the sample is in that run's
    training split (the source draws training samples) or its validation split. Writes
    plots/modular/attention/measures.json beside them: for every run of `model` in the study,
    its last state's validation accuracy and, per sample and layer, the attention measures the findings read
    (findings.modular.attention_shape).
    """
    import shutil

    from arithrepro import config
    from arithrepro.io import read_json, write_json
    from arithrepro.models.registry import load_model
    from arithrepro.report.plotting import STYLE, attention_grid, pyplot, save
    from arithrepro.params_reads import unrecorded
    from arithrepro.tasks.modular import TASK, settings
    from arithrepro.tasks.modular_data import encode

    params = config.load(params_path)
    a = params["modular"]["attention"]
    runs = [r for c in TASK.configs(unrecorded(params))
            if c.group == a["study"] and c.model == a["model"] for r in c.runs]
    if not runs:
        raise config.ParamsError(f"modular.attention.model = {a['model']!r}: no such run in the "
                                 f"{a['study']} study")
    records = {}
    for r in runs:
        path = r.files.record
        if not path.is_file():
            raise FileNotFoundError(f"{path}: missing; run `dvc repro train-modular-{a['study']}` "
                                    "first")
        records[r.name] = read_json(path, ("val_acc", "val_acc_last", "val_loss"))
    # model.pt holds the run's last state (the source keeps no best one), so the run is chosen,
    # and labelled, by that state's accuracy; the best over the run is shown beside it
    best = max(runs, key=lambda r: (records[r.name]["val_acc_last"], records[r.name]["val_acc"],
                                    -records[r.name]["val_loss"]))
    net, saved = load_model(best.files.model, ("vocab",))
    net.eval()
    vocab = saved["vocab"]

    def config_of(run):   # read from the recorded params: the study's base and set
        return settings(params, run.group, run.config.key[2])

    c = config_of(best)
    out_dir = PLOTS / "modular" / "attention"
    shutil.rmtree(out_dir, ignore_errors=True)
    plt = pyplot()
    written = []
    with plt.rc_context(STYLE):
        for i, operands in enumerate(a["samples"]):
            tokens = encode(operands, c["p"], c["operator"])[:-1]  # the model's input: up to r
            trace = net.trace(tokens.unsqueeze(0))
            weights = [w[0] for w in trace["attention"]]
            text = [vocab[t] for t in tokens.tolist()]
            predicted = vocab[int(trace["logits"][0, -2].argmax())]
            side = sample_side(operands, c, best.seed)
            rec = records[best.name]
            title = (f"{best.name} (val. accuracy {100 * rec['val_acc_last']:.1f} % at its last "
                     f"step, {100 * rec['val_acc']:.1f} % at best): "
                     f"{' '.join(text[1:])}  — predicted r = {predicted}\na {side} sample"
                     + (" (in the run's training split)" if side == "training"
                        else ": not in the run's training split"))
            written.append(save(plt, attention_grid(plt, weights, text, title),
                                 out_dir / f"sample{i + 1}.png"))
    write_json(out_dir / "measures.json",
               {"study": a["study"], "model": a["model"],
                **measures(runs, records, a["samples"], config_of,
                           {best.name: net})})
    done(f"modular-attention: {len(written)} figures of {best.name} and the measures of "
         f"{len(runs)} runs -> {out_dir}")


def measures(runs, records: dict, samples: list, config_of, loaded: dict | None = None) -> dict:
    """Per run (seed, the validation accuracy of the state model.pt holds, its last) and per
    sample, each layer's (weight on the start and the recent positions, its uniform share,
    evenness): findings.modular.attention_shape. `loaded`: {run name: its model, already loaded}.
    The runs are one study's, so they share its operator."""
    from arithrepro.findings.modular import attention_shape
    from arithrepro.models.registry import load_model
    from arithrepro.tasks.modular_data import encode

    out, operators = [], set()
    for run in runs:
        net = (loaded or {}).get(run.name) or load_model(run.files.model, ("vocab",))[0]
        c = config_of(run)
        operators.add(c["operator"])
        out.append({"run": run.name, "seed": run.seed,
                    "val_acc": records[run.name]["val_acc_last"],
                    "samples": [attention_shape(net.eval(), encode(list(x), c["p"], c["operator"])[:-1])
                                for x in samples]})
    if len(operators) > 1:
        raise ValueError(f"modular.attention.study: its runs mix operators {sorted(operators)}; "
                         "the measures are of one")
    return {"samples": [list(x) for x in samples], "operator": next(iter(operators), None),
            "runs": out}


def sample_side(operands: list[int], config: dict, seed: int) -> str:
    """'training' or 'validation': the side of the run's seeded split the sample fell on, split
    as the run's data was (tasks.modular_data: `sequences` of its orders, `split` by its seed)."""
    import torch

    from arithrepro.tasks.modular_data import sequences, split

    tokens, order = sequences(config["p"], sorted(config["orders"]), config["operator"])
    k = len(operands)
    same = (order == k) & (tokens[:, 1:2 * k:2] == torch.tensor(operands)).all(1)
    train, _ = split(order, config["r_train"], seed)
    return "training" if bool(same[train].any()) else "validation"
