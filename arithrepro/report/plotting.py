"""What every figure shares: the house style, the colours and markers of the architectures,
seed spreads drawn as bands or error bars, and the file handling (pyplot without a display,
atomic PNG writes, CSV inputs that name the stage producing them).

matplotlib is imported inside the functions, so importing a figure module stays fast.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from arithrepro.io import ArtifactError, atomic_path, read_frame
from arithrepro.runs import CONFIG_KEY

ARCH_NAMES = {"gpt": "GPT", "lstm": "LSTM", "retran": "ReTran"}
# One colour per model in every figure, whichever of them a figure shows (tab10's grey is kept
# for reference lines and the OOD shading): GPT, the LSTM and ReTran take tab10's first three;
# charlm's architectures the rest of it (the RNN and the GRU, drawn side by side, far apart);
# looped's two encoders and the abacus model dark tones of tab20b. A model's sizes share it.
MODEL_COLOURS = {
    "gpt": "#1f77b4", "lstm": "#ff7f0e", "retran": "#2ca02c",
    "rnn": "#9467bd", "gru": "#d62728", "multi-rnn": "#17becf", "multi-rnn-3": "#0b7285",
    "multi-rnn-4": "#7fb3d5", "gru-small": "#e377c2", "transformer-1": "#bcbd22",
    "transformer-8": "#8c564b",
    "looped": "#7b4173", "standard": "#637939", "abacus": "#393b79",
}
# models no line above names (a user's own), in turn: tab20b's light tones, none of the above
OTHER_COLOURS = ["#6b6ecf", "#b5cf6b", "#e7ba52", "#d6616b", "#ce6dbd", "#9c9ede", "#cedb9c",
                 "#e7cb94", "#e7969c"]
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*", "h"]
SPLIT_STYLES = {  # Dark2 colours: distinct from the architectures' tab10 ones
    "train": dict(color="#1b9e77", linestyle="-", linewidth=2.4),
    "valid": dict(color="#7570b3", linestyle="--", linewidth=1.6),
    "test": dict(color="#d95f02", linestyle=":", linewidth=1.8),
    "ood": dict(color="#e7298a", linestyle="-", linewidth=1.6),
}

OOD_SHADE = dict(color="0.88", zorder=0, linewidth=0)
STYLE = {
    "figure.figsize": (6.4, 4.2),
    "figure.dpi": 150,
    # Unlike tight_layout, constrained layout makes room for legends outside the axes.
    "figure.constrained_layout.use": True,
    "savefig.dpi": 150,
    "axes.grid": True,
    "grid.alpha": 0.35,
    "grid.linewidth": 0.6,
    "axes.titlesize": 11,
    "axes.labelsize": 10,
    "legend.fontsize": 8,
    "legend.framealpha": 0.9,
    "xtick.labelsize": 9,
    "ytick.labelsize": 9,
}


# --- shared --------------------------------------------------------------------------------

def display_name(model: str) -> str:
    return ARCH_NAMES.get(model, model)


def arch_order(models) -> list[str]:
    """Known architectures in their fixed order, then any others alphabetically."""
    models = set(models)
    return [m for m in ARCH_NAMES if m in models] + sorted(models - set(ARCH_NAMES))


def arch_style(model: str, models) -> dict:
    """Colour and marker of a model: fixed for the known ones (MODEL_COLOURS), the next free
    for others among `models`."""
    if model in MODEL_COLOURS:
        i = list(MODEL_COLOURS).index(model)
        return dict(color=MODEL_COLOURS[model], marker=MARKERS[i % len(MARKERS)])
    k = sorted(set(models) - set(MODEL_COLOURS)).index(model)
    return dict(color=OTHER_COLOURS[k % len(OTHER_COLOURS)],
                marker=MARKERS[(len(MODEL_COLOURS) + k) % len(MARKERS)])


def pyplot():
    import matplotlib

    matplotlib.use("Agg")  # no display on the pipeline's machines; must precede pyplot
    import matplotlib.pyplot as plt

    return plt


def save(plt, fig, path: Path) -> Path:
    try:
        # The temporary file ends in .tmp, from which matplotlib cannot tell the format.
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format="png", dpi=150)
    finally:
        plt.close(fig)
    return path


def read_csv(path: Path, columns: set[str], producer: str, text=()) -> pd.DataFrame:
    """`columns` hold numbers, except those named in `text`; a figure's input has rows."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing; run `arithrepro {producer}` first")
    frame = read_frame(path, columns, text)
    if frame.empty:
        raise ArtifactError(path, "no rows")
    return frame


def require(frame: pd.DataFrame, columns: set[str], what: str) -> None:
    missing = sorted(columns - set(frame.columns))
    if missing:
        raise ValueError(f"{what}: no column {', '.join(missing)}")


def seed_note(seeds: pd.Series, what: str) -> str:
    """E.g. 'mean over 2 seeds' or 'mean over 1–3 seeds', from each drawn cell's seed count."""
    if seeds.max() == 1:
        return "one seed"
    n = f"{seeds.max()}" if seeds.min() == seeds.max() else f"{seeds.min()}–{seeds.max()}"
    return f"{what} over {n} seeds"


def seeds_per_cell(summary: pd.DataFrame) -> pd.Series:
    return summary.groupby(CONFIG_KEY)["seed"].nunique()


def seed_spread(frame: pd.DataFrame, by, value: str, band: str = "std") -> pd.DataFrame:
    """Per `by` group (frame holds one row per seed there): n, mean, low and high of `value`.

    band "std": mean ± the sample std, as the tables report it; "range": the lowest and the
    highest seed, the honest summary of two seeds, whose std says little. One seed: low = high.
    """
    if band not in ("std", "range"):
        raise ValueError(f"band {band!r}: expected 'std' or 'range'")
    groups = frame.dropna(subset=[value]).groupby(by)[value]
    out = groups.agg(n="count", mean="mean", std="std", low="min", high="max").reset_index()
    if band == "std":
        std = out["std"].fillna(0)  # NaN with one seed
        out["low"], out["high"] = out["mean"] - std, out["mean"] + std
    return out.drop(columns="std")


def shade_spread(ax, spread: pd.DataFrame, x: str, color, scale: float = 1.0,
                 bounds: tuple[float, float] | None = None) -> None:
    """A faint band from low to high of a seed_spread frame; none where it holds one seed.

    bounds (in the unscaled units) clip a mean ± std band to what the metric can take: an
    accuracy band reaching past 100 % would show values no seed had.
    """
    if not (spread["n"] > 1).any():
        return
    low, high = spread["low"], spread["high"]
    if bounds is not None:
        low, high = low.clip(*bounds), high.clip(*bounds)
    ax.fill_between(spread[x], scale * low, scale * high, color=color, alpha=0.2, linewidth=0)


def attention_grid(plt, weights: list, tokens: list[str], title: str):
    """Rows = layers, columns = heads; weights[l] is (heads, T, T) for one sample."""
    L, H = len(weights), weights[0].shape[0]
    fig, axes = plt.subplots(L, H, figsize=(2.6 * H + 1.2, 2.6 * L + 0.8), squeeze=False)
    image = None
    for li in range(L):
        for h in range(H):
            ax = axes[li][h]
            image = ax.imshow(np.asarray(weights[li][h]), cmap="magma", vmin=0, vmax=1)
            T = len(tokens)
            ax.set_xticks(range(T), tokens, fontsize=8, rotation=90)
            ax.set_yticks(range(T), tokens, fontsize=8)
            ax.grid(False)
            ax.set_title(f"layer {li + 1}, head {h + 1}", fontsize=9)
            if h == 0:
                ax.set_ylabel("query")
            if li == L - 1:
                ax.set_xlabel("key")
    fig.colorbar(image, ax=axes, shrink=0.8, label="attention weight")
    fig.suptitle(title)
    return fig
