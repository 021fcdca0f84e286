"""The benchmark's grid (render-figures-bench): every grid task x every grid model, accuracy within the
training lengths and beyond them, mean ± sample std over seeds and n, each cell linked to its
configuration. A task's own models are read from the task's own records at the size bench.sizes
names (its own grid trained them), the others from the benchmark's (arithrepro/bench.py).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from arithrepro.io import ArtifactError

TABLE = Path("metrics/bench.md")
FIGURE = Path("plots/bench/grid.png")
SIDES = ("within", "beyond")   # the task's first two headline metrics, in that order


def grid(params: dict) -> list[dict]:
    """One entry per grid task x grid model, in the registries' order: {task, model, size,
    form, adapter, origin ("own", "bench" or "" where they cannot meet), note, runs (Runs),
    metrics ({side: metric name}), values ({side: [per seed]}), link}."""
    from arithrepro import bench
    from arithrepro.models.forms import meeting, refusal
    from arithrepro.models.registry import MODELS
    from arithrepro.tasks.registry import GRID_TASKS, REPORTS, models_of

    out = []
    models = [m for m, s in MODELS.items() if s.grid]
    for name, task in GRID_TASKS.items():
        across = {(s.model, s.seed): s for s in bench.runs(task, params)}
        own = task.runs(params)
        for model in models:
            spec, size = MODELS[model], params["bench"]["sizes"][model]
            met = meeting(spec, task.forms)
            entry = {"task": name, "model": model, "size": size, "form": met and met[0],
                     "adapter": bool(met and met[1]), "origin": "", "runs": [],
                     "metrics": dict(zip(SIDES, REPORTS[name].headline)), "values": {}, "note": ""}
            if met is None:
                entry["note"] = refusal(name, task.forms, model, spec)
            elif model in models_of(task):
                entry["origin"] = "own"
                entry["runs"] = [s for s in own if s.model == model and s.label == size]
                if not entry["runs"]:
                    entry["note"] = f"not in {name}'s own grid at size {size}"
            else:
                entry["origin"] = "bench"
                entry["runs"] = [s for (m, _), s in across.items() if m == model]
                if not entry["runs"]:
                    entry["note"] = "not trained: the benchmark is off (-S bench=grid)"
            out.append(entry)
    return out


def read(entries: list[dict]) -> list[dict]:
    """Each entry's per-seed values of its two metrics, from the records that exist (a cell not
    yet evaluated counts as not run)."""
    for e in entries:
        found = [s for s in e["runs"] if s.files.record.is_file()]
        for side, metric in e["metrics"].items():
            values = []
            for s in found:
                try:
                    record = json.loads(s.files.record.read_text())
                except (OSError, json.JSONDecodeError) as err:
                    raise ArtifactError(s.files.record, f"unreadable run record ({err})") from None
                if metric in record and record[metric] is not None:
                    values.append(float(record[metric]))
            e["values"][side] = values
        if e["runs"] and not found:
            e["note"] = "not run yet"
        e["link"] = str(found[0].files.live / "params.yaml") if found else ""
    return entries


def spread(values: list[float]) -> str:
    if not values:
        return ""
    mean = 100 * statistics.fmean(values)
    std = f" ± {100 * statistics.stdev(values):.1f}" if len(values) > 1 else ""
    return f"{mean:.1f}{std} % (n {len(values)})"


def markdown(entries: list[dict], params: dict) -> str:
    from arithrepro.models.forms import FORMS

    tasks = list(dict.fromkeys(e["task"] for e in entries))
    models = list(dict.fromkeys(e["model"] for e in entries))
    at = {(e["task"], e["model"]): e for e in entries}
    lines = ["# Benchmark: every grid model on every grid task", "",
             "Written by `arithrepro render-figures-bench` from the run records; edit nothing here. A "
             "cell: exact-match accuracy, mean ± sample std over its seeds, and n; its link opens "
             "the configuration its first seed trained with (the run's `live/params.yaml`). A "
             "task's own models come from its own grid; the others from the benchmark's cells "
             f"(seeds {params['bench']['seeds'] or 'none: off'}). Sizes: "
             + ", ".join(f"{m} {params['bench']['sizes'][m]}" for m in models) + ".", ""]
    for side, title in zip(SIDES, ("Within the training lengths", "Beyond the training lengths")):
        lines += [f"## {title}", "", "| task (metric) | " + " | ".join(models) + " |",
                  "|---|" + "---|" * len(models)]
        for task in tasks:
            metric = at[(task, models[0])]["metrics"][side]
            row = [f"{task} (`{metric}`)"]
            for model in models:
                e = at[(task, model)]
                text = spread(e["values"].get(side, []))
                if text and e["link"]:
                    text = f"[{text}](../{e['link']})"
                row.append(text or ("–" if not e["origin"] else "not run"))
            lines.append("| " + " | ".join(row) + " |")
        lines.append("")
    lines += ["## How each model meets each task", "",
              "| task | " + " | ".join(models) + " |", "|---|" + "---|" * len(models)]
    for task in tasks:
        row = [task]
        for model in models:
            e = at[(task, model)]
            if not e["origin"]:
                row.append("cannot")
            else:
                how = e["form"] + (" (adapter)" if e["adapter"] else "")
                row.append(how + (", own grid" if e["origin"] == "own" else ""))
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", "Forms: " + "; ".join(f"{n}: {f.text}" for n, f in FORMS.items()) + ".", ""]
    notes = [f"- {e['task']} × {e['model']}: {e['note']}" for e in entries if e["note"]]
    if notes:
        lines += ["## Cells without numbers", "", *notes, ""]
    return "\n".join(lines)


def llm_records(params: dict) -> list[dict]:
    """The records of the LLM endpoints the params ask (llm.endpoints) that have answered."""
    out = []
    for name in params["llm"]["endpoints"]:
        path = Path("metrics/expr/llm") / f"{name}.json"
        if path.is_file():
            try:
                out.append({"name": name, "path": path, **json.loads(path.read_text())})
            except json.JSONDecodeError as err:
                raise ArtifactError(path, f"unreadable LLM record ({err})") from None
    return out


def own_by_length(entries: list[dict]) -> dict:
    """{model: {(split, length): [accuracy per seed]}} of expr's own cells in the grid."""
    from arithrepro.io import read_frame

    out = {}
    for e in entries:
        if e["task"] != "expr" or e["origin"] != "own":
            continue
        for s in e["runs"]:
            if s.files.evaluation.is_file():
                frame = read_frame(s.files.evaluation, ("split", "length", "accuracy"), text=("split",))
                for row in frame.to_dict("records"):
                    key = (row["split"], int(row["length"]))
                    out.setdefault(e["model"], {}).setdefault(key, []).append(float(row["accuracy"]))
    return out


def llm_markdown(records: list[dict], entries: list[dict]) -> str:
    """The LLMs' accuracy overall, per split and by length, beside expr's own models."""
    from arithrepro.report.expr_figures import GPT4O_LABEL

    lines = ["## LLMs on expr's problems", "",
             "Asked by the `llm-expr` stage through each endpoint with the expr source's protocol "
             "(docs/bench.md); a malformed, refused, timed-out or failed answer counts as wrong. "
             f"For reference, not a run: {GPT4O_LABEL}.", "",
             "| endpoint | model | test | OOD | problems | right | wrong | malformed | refused "
             "| timed out | failed |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in records:
        k = r["kinds"]
        cell = (lambda v: "–" if v is None else f"{100 * v:.1f} %")
        lines.append(f"| [{r['name']}](../{r['path']}) | `{r['endpoint']['model']}` | "
                     f"{cell(r.get('test_acc'))} | {cell(r.get('ood_acc'))} | {r['n']} | "
                     f"{k['right']} | {k['wrong']} | {k['malformed']} | {k['refused']} | "
                     f"{k['timeout']} | {k['error']} |")
    own = own_by_length(entries)
    models = list(own)
    lines += ["", "By problem length (exact match; expr's own models: mean over seeds at the "
              "bench's sizes):", "",
              "| split | length | " + " | ".join([r["name"] for r in records] + models) + " |",
              "|---|---|" + "---|" * (len(records) + len(models))]
    keys = sorted({(b["split"], b["length"]) for r in records for b in r["by_length"]},
                  key=lambda k: (k[0] != "test", k[1]))
    for split, length in keys:
        row = [split, str(length)]
        for r in records:
            hit = [b for b in r["by_length"] if (b["split"], b["length"]) == (split, length)]
            row.append(f"{100 * hit[0]['accuracy']:.1f} (n {hit[0]['n']})" if hit else "–")
        for m in models:
            values = own[m].get((split, length), [])
            row.append(f"{100 * statistics.fmean(values):.1f}" if values else "–")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def figure(entries: list[dict], path: Path) -> Path:
    """Two heat maps, within and beyond the training lengths: a row per task, a column per
    model, each cell's mean over seeds with its std and n."""
    import numpy as np

    from arithrepro.report.plotting import STYLE, display_name, pyplot, save

    plt = pyplot()
    tasks = list(dict.fromkeys(e["task"] for e in entries))
    models = list(dict.fromkeys(e["model"] for e in entries))
    at = {(e["task"], e["model"]): e for e in entries}
    with plt.rc_context({**STYLE, "axes.grid": False}):
        # one panel above the other, so that a row of tasks reads across both
        fig, axes = plt.subplots(2, 1, figsize=(1.15 * len(models) + 2.6, 2 * (0.75 * len(tasks) + 1.0)))
        for ax, side, title in zip(axes, SIDES, ("within the training lengths",
                                                 "beyond the training lengths")):
            grid_values = np.full((len(tasks), len(models)), np.nan)
            for i, task in enumerate(tasks):
                for j, model in enumerate(models):
                    values = at[(task, model)]["values"].get(side, [])
                    if values:
                        grid_values[i, j] = 100 * statistics.fmean(values)
            image = ax.imshow(grid_values, cmap="viridis", vmin=0, vmax=100, aspect="auto")
            ax.set_facecolor("0.93")
            for i, task in enumerate(tasks):
                for j, model in enumerate(models):
                    e = at[(task, model)]
                    values = e["values"].get(side, [])
                    if values:
                        std = (f"± {100 * statistics.stdev(values):.1f}\n" if len(values) > 1
                               else "")
                        text = f"{100 * statistics.fmean(values):.1f}\n{std}n {len(values)}"
                        dark = statistics.fmean(values) < 0.6
                        ax.text(j, i, text, ha="center", va="center", fontsize=7.5,
                                color="white" if dark else "black")
                    else:
                        ax.text(j, i, "cannot\nmeet" if not e["origin"] else "not run",
                                ha="center", va="center", fontsize=7, color="0.45")
            ax.set_xticks(range(len(models)), [display_name(m) for m in models], rotation=30,
                          ha="right")
            ax.set_yticks(range(len(tasks)), tasks)
            ax.set_title(f"accuracy {title} (%)")
        fig.colorbar(image, ax=list(axes), shrink=0.85, label="exact match (%), mean over seeds")
        return save(plt, fig, path)


def write(params: dict) -> list[Path]:
    from arithrepro.io import write_text

    entries = read(grid(params))
    text = markdown(entries, params)
    records = llm_records(params)
    if records:
        text += "\n" + llm_markdown(records, entries)
    write_text(TABLE, text)
    return [TABLE, figure(entries, FIGURE)]
