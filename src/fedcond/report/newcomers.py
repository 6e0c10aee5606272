"""The figure beside the newcomers table (newcomers_table.newcomers_section): every run with clients held
out, its seen accuracy against its unseen one, a colour and a marker per method (hollow for the
Conditionals fed the eigenvalues), each method's measured budget in the legend; the diagonal is
"newcomers served as well as the training clients"."""

from __future__ import annotations

from pathlib import Path

from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from .data import method_order
from .figures import _save
from .newcomers_table import newcomer_groups, seen_unseen

NAME = "newcomers_seen_unseen.png"


def budget_labels(ok: list[dict]) -> dict[str, str]:
    """Method -> its communication and compute budget as measured (extra.traffic): the rounds, and
    the samples a training client trained on relative to FedAvg's in the same configuration (mean
    over configurations); "pooled" for a method whose clients train nothing (they send their data)."""
    samples: dict[tuple[str, str], float] = {}  # (experiment, method) -> samples trained per client
    rounds: dict[str, set[int]] = {}
    for (exp, _, method, _), runs in newcomer_groups(ok).items():
        t = (runs[0].get("extra") or {}).get("traffic")
        if t:
            samples.setdefault((exp, method), t["samples_trained_per_client"])
            rounds.setdefault(method, set()).add(int(t["rounds"]))
    out = {}
    for method, rs in rounds.items():
        mine = [(v, samples.get((exp, "FedAvg"))) for (exp, m), v in samples.items() if m == method]
        span = "/".join(str(r) for r in sorted(rs))
        if all(v == 0 for v, _ in mine):
            text = f"{span} epochs on pooled data"
        else:
            text = f"{span} rounds"
            ratios = [v / base for v, base in mine if base]
            if ratios:
                text += f", {sum(ratios) / len(ratios):.1f}x FedAvg's compute"
        out[method] = text
    return out


_MARKERS = ("o", "s", "D", "v", "P", "X", "<", ">", "p", "h")
ZOOM_FROM = 85.0  # the enlarged panel's lower edge (%)


def draw_seen_unseen(ok: list[dict], out: Path) -> Path | None:
    """One point per row of the newcomers table (newcomers_table.newcomer_groups: experiment, statistic,
    method, rounds), mean over seeds; None where no row held clients out. Each method has a colour
    and a marker of its own (a hollow marker: the Conditionals fed the eigenvalues), and its
    legend entry carries its measured budget (budget_labels)."""
    points: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for (_, statistic, method, _), runs in newcomer_groups(ok).items():
        seen, unseen = seen_unseen(runs)
        if unseen is None:
            continue  # no model for a newcomer: no point
        key = (method, statistic if method.startswith("Conditional") else "")
        points.setdefault(key, []).append((100 * seen, 100 * unseen))
    if not points:
        return None
    budgets = budget_labels(ok)
    methods = sorted({m for m, _ in points}, key=method_order)
    palette = distinct_colours(len(methods))
    style = {m: (palette[i], _MARKERS[i % len(_MARKERS)]) for i, m in enumerate(methods)}
    panels = figure_panels(min(min(min(x, y) for x, y in xy) for xy in points.values()))
    fig = Figure(figsize=(6.4 * len(panels), 5.6 + 0.16 * len(points)), layout="constrained")
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    handles = []
    for (method, statistic), xy in sorted(points.items(), key=lambda kv: (method_order(kv[0][0]), kv[0][1])):
        xs, ys = zip(*xy)
        c, marker = style[method]
        hollow = statistic == "eigenvalues"
        face = "none" if hollow else c
        for ax in axes:
            ax.scatter(xs, ys, s=30, marker=marker, facecolors=face, edgecolors=c, linewidths=1.0, alpha=0.85)
        label = method + (f" ({statistic})" if statistic else "")
        if method in budgets:
            label += f": {budgets[method]}"
        handles.append(Line2D([], [], color=c, marker=marker, markerfacecolor=face, ls="", label=label))
    for ax, (start, title) in zip(axes, panels):
        ax.plot([start, 100], [start, 100], color="grey", lw=0.8, ls="--")
        ax.set_xlim(start, 100.5)
        ax.set_ylim(start, 100.5)
        ax.set_xlabel("seen clients: accuracy (%)")
        ax.set_ylabel("clients held out of training: accuracy (%)")
        ax.set_title(title, fontsize=9)
    fig.suptitle("Training clients against newcomers, one point per configuration", fontsize=10)
    # below the axes, not inside them: a long name with its budget would cover the points and the y label
    fig.legend(handles=handles, fontsize=7, loc="outside lower center", frameon=False)
    path = Path(out) / NAME
    _save(fig, path)
    return path


def figure_panels(lowest: float) -> list[tuple[float, str]]:
    """(lower edge, title) of each panel: every point, and where they reach far below the top right, where
    most rows sit, a second panel that enlarges it."""
    lo = max(0.0, lowest - 3)
    panels = [(lo, "every configuration")]
    if lo < ZOOM_FROM - 5:
        panels.append((ZOOM_FROM, f"enlarged: {ZOOM_FROM:g}-100%"))
    return panels


def distinct_colours(n: int) -> list:
    """n colours, all different: matplotlib's tab10, or tab20 beyond ten."""
    from matplotlib import colormaps

    cmap = colormaps["tab10" if n <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(n)]
