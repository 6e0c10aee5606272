"""The figure beside the newcomers table (tables.newcomers_section): every run with clients held
out, its seen accuracy against its unseen one, a colour per method, a marker per statistic of the
Conditionals; the diagonal is "newcomers served as well as the training clients"."""

from __future__ import annotations

from pathlib import Path

from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from .data import method_order
from .figures import _save, colour
from .tables import newcomer_groups, seen_unseen

NAME = "newcomers_seen_unseen.png"


def draw_seen_unseen(ok: list[dict], out: Path) -> Path | None:
    """One point per row of the newcomers table (tables.newcomer_groups: experiment, statistic,
    method, rounds), mean over seeds; None where no row held clients out."""
    points: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for (_, statistic, method, _), runs in newcomer_groups(ok).items():
        seen, unseen = seen_unseen(runs)
        if unseen is None:
            continue  # no model for a newcomer: no point
        key = (method, statistic if method.startswith("Conditional") else "")
        points.setdefault(key, []).append((100 * seen, 100 * unseen))
    if not points:
        return None
    fig = Figure(figsize=(6.4, 5.6))
    ax = fig.add_subplot()
    markers = {"": "o", "class_means": "o", "eigenvalues": "^"}
    handles = []
    for (method, statistic), xy in sorted(points.items(), key=lambda kv: (method_order(kv[0][0]), kv[0][1])):
        xs, ys = zip(*xy)
        ax.scatter(xs, ys, s=28, color=colour(method), marker=markers.get(statistic, "s"), alpha=0.85, linewidths=0)
        label = method + (f" ({statistic})" if statistic else "")
        handles.append(Line2D([], [], color=colour(method), marker=markers.get(statistic, "s"), ls="", label=label))
    lo = min(min(min(x, y) for x, y in xy) for xy in points.values())
    lo = max(0.0, lo - 3)
    ax.plot([lo, 100], [lo, 100], color="grey", lw=0.8, ls="--")
    ax.set_xlim(lo, 100.5)
    ax.set_ylim(lo, 100.5)
    ax.set_xlabel("seen clients: accuracy (%)")
    ax.set_ylabel("clients held out of training: accuracy (%)")
    ax.set_title("Training clients against newcomers, one point per configuration", fontsize=10)
    ax.legend(handles=handles, fontsize=7, loc="lower right", frameon=False)
    path = Path(out) / NAME
    _save(fig, path)
    return path
