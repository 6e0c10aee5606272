"""Accuracy against rounds, from the curves runs store with --eval-every (extra["curve"]: rows
[round, mean accuracy over clients, accuracy over all test samples]): one panel per group, one line
per method, the mean over seeds. The JDFL section and the ad-hoc runs' section both draw with it."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

CLIENT_MEAN, GLOBAL = 1, 2  # the curve's columns: accuracy averaged over clients, over all test samples


@dataclass(frozen=True)
class Line:
    label: str
    style: str  # a matplotlib format string: "-", "--", ":", "-."
    runs: list[list]  # one curve per seed
    colour: str | None = None  # None: matplotlib's cycle


@dataclass(frozen=True)
class Panel:
    title: str
    lines: list[Line]


def mean_curve(runs: list[list], column: int) -> tuple[list[int], list[float]]:
    """Rounds and the mean over runs (seeds) of one column, in percent, up to the shortest run."""
    n = min(len(c) for c in runs)
    xs = [int(runs[0][i][0]) for i in range(n)]
    return xs, [100 * statistics.fmean(c[i][column] for c in runs) for i in range(n)]


def draw_curves(
    panels: list[Panel],
    path: Path,
    ylabel: str,
    column: int = GLOBAL,
    width: float = 3.2,
    legend_each: bool = False,
) -> None:
    """Panels side by side sharing the y axis, the legend on the first (on each with legend_each: panels
    that show different methods); written to `path` (PNG). Rounds are whole numbers on the x axis; a
    curve of few points gets markers. matplotlib's Figure on the Agg canvas: no pyplot, no global backend."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(width * len(panels), 3))
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(panels), sharey=True, squeeze=False)[0]
    for ax, panel in zip(axes, panels):
        for line in panel.lines:
            xs, ys = mean_curve(line.runs, column)
            marker = "o" if len(xs) <= 12 else None
            ax.plot(xs, ys, line.style, label=line.label, color=line.colour, marker=marker, markersize=3)
        ax.set_title(panel.title, fontsize=9)
        ax.set_xlabel("round")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if legend_each:
            ax.legend(fontsize=7)
    axes[0].set_ylabel(ylabel)
    if not legend_each:
        axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata={"Software": None})  # no Software metadata: same data, same bytes
