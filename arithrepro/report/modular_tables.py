"""The modular studies' tables, as markdown (metrics/modular.md) and LaTeX (metrics/modular.tex).

Mean ± the sample std over seeds (n − 1), as every table of the project; the source's table gives
the population std (two seeds 7500 and 8200 read 7850 ± 350), and the results page sets the two
side by side under its own labels. The best mean of each metric in bold. The sanity
study has the source's layout (metrics as rows, models as columns); a sweep has one row per model
and swept value.
"""

from __future__ import annotations

import math
import re
import statistics

import pandas as pd

from arithrepro.runs import CONFIG_KEY

# (record key, label, better): the source's per-run metrics in its order
METRICS = [
    ("train_loss", "L_train", min), ("val_loss", "L_val", min),
    ("train_acc", "A_train", max), ("val_acc", "A_val", max),
    ("train_loss_step", "t_f(L_train)", min), ("val_loss_step", "t_f(L_val)", min),
    ("train_acc_step", "t_f(A_train)", min), ("val_acc_step", "t_f(A_val)", min),
    ("dt_loss_steps", "Δt(L)", min), ("dt_acc_steps", "Δt(A)", min),
]
SWEPT_LABEL = {"r_train": "r_train", "layers": "L", "d_model": "d", "batch_size": "B",
               "weight_decay": "weight decay", "p": "p"}


def study_rows(summary: pd.DataFrame, study: str) -> pd.DataFrame:
    rows = summary[(summary["task"] == "modular")
                   & summary["size"].map(lambda s: s == study or s.startswith(study + "."))]
    return rows.reset_index(drop=True)


def budgets_of(rows: pd.DataFrame) -> list[float]:
    """The compute study's budgets alpha, read off its a<alpha>_val_acc columns."""
    found = [re.fullmatch(r"a([0-9.]+)_val_acc", c) for c in rows.columns]
    return sorted(float(m.group(1)) for m in found if m and rows[m.group(0)].notna().any())


def _stat(values: list[float], metric: str) -> tuple[float, str]:
    mean = statistics.fmean(values)
    std = statistics.stdev(values) if len(values) > 1 else None
    fmt = _fmt(metric)
    return mean, fmt(mean) + ("" if std is None else f" ± {fmt(std)}")


def _fmt(metric: str):
    if metric.endswith(("_loss", "_acc")):
        return lambda x: f"{x:.4f}"
    if metric == "param_norm":
        return lambda x: f"{x:.1f}"
    return lambda x: f"{x:g}" if x != round(x) else f"{x:.0f}"


def _groups(rows: pd.DataFrame, swept: list[str]):
    """(model, label) groups, by model and then by the swept values."""
    groups = rows.groupby(CONFIG_KEY, sort=False)
    return sorted(groups, key=lambda item: (item[0][0], *(float(item[1][k].iloc[0]) for k in swept)))


def _best(means: list[float], better) -> list[bool]:
    """Which means to bold: the best, unless every row ties."""
    top = better(means)
    marks = [math.isclose(m, top) for m in means]
    return marks if not all(marks) else [False] * len(means)


def table(summary: pd.DataFrame, study: str, swept: list[str], extra: list[tuple] = ()) -> tuple:
    """(header, body, bold) of one study: bold[i][j] marks the best mean of its metric."""
    rows = study_rows(summary, study)
    if rows.empty:
        raise ValueError(f"no records for the modular study {study!r}")
    metrics = [m for m in METRICS if m[0] in rows] + [m for m in extra if m[0] in rows]
    groups = _groups(rows, swept)
    cells = [[_stat([float(v) for v in g[key].dropna()], key) for key, _, _ in metrics]
             for _, g in groups]
    marks = [_best([c[j][0] for c in cells], better) for j, (_, _, better) in enumerate(metrics)]
    if study == "sanity":  # the source's layout: a row per metric, a column per model
        header = ["metric"] + [model for (model, _), _ in groups]
        body = [[label] + [c[j][1] for c in cells] for j, (_, label, _) in enumerate(metrics)]
        bold = [[False] + marks[j] for j in range(len(metrics))]
        return header, body, bold
    header = ["model", *(SWEPT_LABEL.get(k, k) for k in swept), "P", "seeds",
              *(label for _, label, _ in metrics)]
    body, bold = [], []
    for ((model, _), g), c in zip(groups, cells):
        values = [_fmt(k)(float(g[k].iloc[0])) for k in swept]
        body.append([model, *values, f"{int(g['params'].iloc[0]):,}", str(len(g)),
                     *(text for _, text in c)])
        bold.append([False] * (3 + len(swept)) + [marks[j][len(body) - 1] for j in range(len(c))])
    return header, body, bold


def budget_table(summary: pd.DataFrame, budgets: list[float], metric: str = "val_acc") -> tuple:
    """One of the compute study's metrics within the first alpha * T steps (its record column
    a<alpha>_<metric>): a row per (model, B), a column per alpha."""
    rows = study_rows(summary, "compute")
    better = next(b for key, _, b in METRICS if key == metric)
    groups = _groups(rows, ["batch_size"])
    header = ["model", "B"] + [f"α = {a:g}" for a in budgets]
    body, means = [], []
    for (model, _), g in groups:
        stats = [_stat([float(v) for v in g[f"a{a:g}_{metric}"].dropna()], metric) for a in budgets]
        body.append([model, str(int(g["batch_size"].iloc[0]))] + [s[1] for s in stats])
        means.append([s[0] for s in stats])
    bold = [[False] * (2 + len(budgets)) for _ in body]
    for model in dict.fromkeys(b[0] for b in body):  # the best batch size at each budget, per model
        same = [i for i, b in enumerate(body) if b[0] == model]
        for j in range(len(budgets)):
            for i, mark in zip(same, _best([means[i][j] for i in same], better)):
                bold[i][2 + j] = mark
    return header, body, bold


# The compute study's per-budget tables: the source's eight metrics, each a table of its own
# (a column per alpha; one table of them all would be 8 x 10 columns wide).
BUDGET_METRICS = [m for m in METRICS if not m[0].startswith("dt_")]


def _budget_caption(key: str, label: str) -> str:
    best = ("the earliest" if key.endswith("_step") else "the lowest" if key.endswith("_loss")
            else "the highest")
    return (f"compute: {label} within the first α·T steps, mean ± std over seeds (per model and "
            f"α, the batch size with {best} mean in bold)")


def markdown(header, body, bold) -> str:
    rows = [header] + [[f"**{c}**" if b else c for c, b in zip(r, br)] for r, br in zip(body, bold)]
    widths = [max(3, *(len(r[i]) for r in rows)) for i in range(len(header))]
    left = {0} | {i for i, h in enumerate(header) if h in ("model", "metric")}
    line = lambda r: "| " + " | ".join(c.ljust(w) if i in left else c.rjust(w)  # noqa: E731
                                       for i, (c, w) in enumerate(zip(r, widths))) + " |"
    rule = "| " + " | ".join("-" * w if i in left else "-" * (w - 1) + ":"
                             for i, w in enumerate(widths)) + " |"
    return "\n".join([line(rows[0]), rule, *(line(r) for r in rows[1:])])


def latex(header, body, bold, caption: str, label: str) -> str:
    def tex(text: str) -> str:
        text = text.replace("_", r"\_").replace("±", r"$\pm$").replace("Δ", r"$\Delta$")
        return text.replace("α·T", r"$\alpha \cdot T$").replace("α", r"$\alpha$")

    spec = "l" + "r" * (len(header) - 1)
    lines = [r"\begin{table}[t]", r"\centering", rf"\begin{{tabular}}{{{spec}}}", r"\toprule",
             " & ".join(tex(h) for h in header) + r" \\", r"\midrule"]
    for r, br in zip(body, bold):
        lines.append(" & ".join(rf"\textbf{{{tex(c)}}}" if b else tex(c) for c, b in zip(r, br)) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", rf"\caption{{{tex(caption)}}}",
              rf"\label{{{label}}}", r"\end{table}"]
    return "\n".join(lines)


STUDY_TABLES = {
    # study: (swept keys, extra metrics, title)
    "sanity": ([], [], "sanity: the base configuration"),
    "data": (["r_train"], [], "data: training fraction r_train"),
    "orders": (["p"], [("o2_val_acc", "A_val (order 2)", max), ("o3_val_acc", "A_val (order 3)", max),
                       ("o2_val_acc_step", "t_f(A_val) o2", min),
                       ("o3_val_acc_step", "t_f(A_val) o3", min)],
               "orders: a ∘ b and a ∘ b ∘ c mixed"),
    "size": (["layers", "d_model"], [], "size: layers L and width d"),
    "compute": (["batch_size"], [], "compute: batch size B over the full budget T"),
    "regularization": (["weight_decay"], [("param_norm", "final ‖θ‖", min)],
                       "regularization: weight decay"),
}


def write(summary: pd.DataFrame) -> dict[str, str]:
    """{"md": markdown, "tex": latex} of every study with records."""
    budgets = budgets_of(study_rows(summary, "compute"))
    md, tex = ["# modular: LSTM vs GPT on a ∘ b mod p\n",
               "Mean ± sample std over seeds (n − 1; the source's table gives the population "
               "std); best mean in bold. "
               "P: parameters without the token embedding. t_f: the first evaluated step "
               "reaching the best value; Δt = t_f(val) − t_f(train).\n"], []
    for study, (swept, extra, title) in STUDY_TABLES.items():
        if study_rows(summary, study).empty:
            continue
        parts = table(summary, study, swept, extra)
        md += [f"## {title}\n", markdown(*parts), ""]
        tex += [latex(*parts, title, f"tab:modular-{study}"), ""]
        for key, label, _ in BUDGET_METRICS if study == "compute" and budgets else []:
            parts = budget_table(summary, budgets, key)
            caption = _budget_caption(key, label)
            md += [f"### {caption}\n", markdown(*parts), ""]
            tex += [latex(*parts, caption, f"tab:modular-compute-budgets-{key.replace('_', '-')}"), ""]
        if study == "data":
            md += [_data_verdict(study_rows(summary, "data")), ""]
    return {"md": "\n".join(md), "tex": "\n".join(tex)}


def _data_verdict(rows: pd.DataFrame) -> str:
    """The source's two data-study numbers per model: the smallest r_train that generalizes
    (A_val >= 0.9) and the largest that only memorizes (A_train ~ 1, A_val <= 0.5)."""
    lines = []
    for model, g in rows.groupby("model", sort=False):
        m = g.groupby("r_train")[["train_acc", "val_acc"]].mean()
        gen = [r for r, v in m["val_acc"].items() if v >= 0.9]
        mem = [r for r, v in m.iterrows() if v["train_acc"] >= 0.99 and v["val_acc"] <= 0.5]
        lines.append(f"- {model}: smallest r_train with A_val ≥ 0.9: "
                     f"{min(gen) if gen else 'none'}; largest that only memorizes "
                     f"(A_train ≥ 0.99, A_val ≤ 0.5): {max(mem) if mem else 'none'}")
    return "\n".join(lines)
