"""The label distribution of a federation's clients as a picture (`fedcond scenario describe --plot`):
on top each client's training samples as a bar stacked by class, below the clients x classes heat
map of its class proportions. Agg canvas, never pyplot (as report/figures.py)."""

from __future__ import annotations

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure


def label_distribution(counts: np.ndarray, label_names: tuple[str, ...], title: str, path: str) -> None:
    """counts [clients, classes] -> a PNG at `path`; the width grows with the clients, so 100 stay readable."""
    n, C = counts.shape
    width = float(np.clip(4 + 0.12 * n, 8, 30))
    fig = Figure(figsize=(width, 6.5), layout="constrained")
    FigureCanvasAgg(fig)
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=(1, 1.3))
    cmap = _class_colours(C)
    x = np.arange(n)
    base = np.zeros(n)
    for c in range(C):
        top.bar(x, counts[:, c], bottom=base, width=0.9, color=cmap[c], label=_name(label_names, c), linewidth=0)
        base += counts[:, c]
    top.set_ylabel("training samples")
    top.set_title(title, fontsize=11)
    if C <= 20:
        top.legend(ncol=min(C, 10), fontsize=8, loc="upper right", frameon=False, bbox_to_anchor=(1, 1.28))
    share = counts / np.maximum(counts.sum(axis=1, keepdims=True), 1)
    image = bottom.imshow(
        share.T,
        aspect="auto",
        cmap="viridis",
        vmin=0,
        vmax=1,
        interpolation="nearest",
        extent=(-0.5, n - 0.5, C - 0.5, -0.5),
    )
    bottom.set_ylabel("class")
    bottom.set_xlabel("client")
    if C <= 20:
        bottom.set_yticks(range(C), [_name(label_names, c) for c in range(C)], fontsize=8)
    step = 1 if n <= 30 else 5 if n <= 150 else 10 ** int(np.log10(n) - 1) * 2
    bottom.set_xticks(range(0, n, step))
    bottom.tick_params(axis="x", labelsize=8)
    fig.colorbar(image, ax=bottom, label="share of the client's samples", pad=0.01, fraction=0.03)
    fig.savefig(path, dpi=100)


def _name(label_names: tuple[str, ...], c: int) -> str:
    return f"{c} {label_names[c]}" if c < len(label_names) and label_names[c] != str(c) else str(c)


def _class_colours(C: int) -> list:
    from matplotlib import colormaps

    table = colormaps["tab10" if C <= 10 else "tab20"]
    return [table(c % table.N) for c in range(C)]
