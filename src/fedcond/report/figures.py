"""The report's figures, one protocol at a time, drawn from whatever cells exist: ours as solid
lines (error bars: the spread over seeds), the published values as dashed lines with hollow
markers in the same colour. A figure with nothing to draw is skipped, with the reason returned
for the report to state.

Figures are made with `matplotlib.figure.Figure` on the Agg canvas, never through pyplot, so no
global backend or figure registry is touched.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from ..experiments import EXPERIMENTS
from ..scenarios.groupings import SPARSITY
from .data import PublishedTable, experiment_order, method_order, published_for
from .tables import protocol_label


def _label(protocol: str | None) -> str:
    return protocol_label(protocol).replace("`", "")  # Markdown code marks mean nothing in a PNG title


DPI = 110
_COLOURS = (
    "tab:blue",
    "tab:orange",
    "tab:green",
    "tab:red",
    "tab:purple",
    "tab:brown",
    "tab:pink",
    "tab:olive",
    "tab:cyan",
    "tab:gray",
)
_OURS = dict(linestyle="-", marker="o", markersize=4, linewidth=1.6, capsize=2)
_PUBLISHED = dict(linestyle="--", marker="o", markersize=5, markerfacecolor="none", linewidth=1.0, alpha=0.8)


@dataclass(frozen=True)
class Outcome:
    """One figure: written to `path`, or skipped (`path` None) for the reason in `note`."""

    key: str
    title: str
    path: Path | None
    note: str


def slug(protocol: str | None) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "_", protocol) if protocol else "none"


def colour(method: str) -> str:
    return _COLOURS[method_order(method)[0] % len(_COLOURS)]


def _save(fig: Figure, path: Path) -> None:
    FigureCanvasAgg(fig)
    # no Software/date metadata: the same data gives the same bytes
    fig.savefig(path, dpi=DPI, bbox_inches="tight", metadata={"Software": None})


def method_label(m: str, width: int = 24) -> str:
    """A method's name as a figure shows it: a long one broken after its '(' and its commas, so that a
    probe's hyper-parameters (`Oracle-FedAvg(server_opt=momentum,...)`) do not squeeze the axes to nothing."""
    if len(m) <= width or "(" not in m:
        return m
    head, args = m.split("(", 1)
    lines, line = [head + "("], ""
    for part in args.split(","):
        piece = part if not line else "," + part
        if line and len(line) + len(piece) > width:
            lines.append(line + ",")
            line = part
        else:
            line += piece
    return "\n".join(lines + [line])


def _style_legend(methods: list[str], published: bool, error_bars: bool) -> list:
    handles = [Line2D([], [], color=colour(m), linewidth=2, label=method_label(m)) for m in methods]
    handles.append(
        Line2D(
            [],
            [],
            color="black",
            **{k: v for k, v in _OURS.items() if k != "capsize"},
            label="ours (mean over seeds" + (", bars: std)" if error_bars else ")"),
        )
    )
    if published:
        handles.append(Line2D([], [], color="black", **_PUBLISHED, label="published"))
    return handles


# ---- line figures: accuracy (or a gap) against K or sparsity, one panel per dataset -------------


@dataclass
class _Series:
    xs: list = field(default_factory=list)
    ys: list = field(default_factory=list)
    err: list = field(default_factory=list)
    pub_xs: list = field(default_factory=list)
    pub_ys: list = field(default_factory=list)


@dataclass
class _Panel:
    title: str
    ticks: list  # (position, label)
    series: dict  # method -> _Series


def _k_x(setting: str) -> int | None:
    m = re.fullmatch(r"[KC]=(\d+)", setting)
    return int(m.group(1)) if m else None


def _sparsity_of(setting: str) -> str | None:
    level = setting.split(",")[-1]
    return level if "," in setting and level in SPARSITY else None


_LEVELS = list(SPARSITY)


def _k_tick(x: int) -> str:
    return str(x)


def _sparsity_x(setting: str) -> int | None:
    level = _sparsity_of(setting)
    return _LEVELS.index(level) if level else None


def _sparsity_tick(x: int) -> str:
    return _LEVELS[x].replace("_", "\n")


def accuracy(get, m):
    """Percent accuracy of method m."""
    v = get(m)
    return None if v is None else 100 * v


def gap_to_oracle(get, m):
    """Method m minus Oracle, in pp (None for Oracle itself)."""
    if m == "Oracle":
        return None
    v, o = get(m), get("Oracle")
    return None if v is None or o is None else 100 * (v - o)


def _panels(t: PublishedTable, protocol, cells, x_of, tick, value, error_bars: bool) -> list[_Panel]:
    """One panel per dataset of `t` (CSV order) holding at least one of our points. `x_of(setting)`
    is the x position (None: the row is not in this figure); `value(get, m)` the plotted value,
    from a getter of method -> accuracy. Error bars (seed std, in pp) only where asked."""
    panels = []
    for dataset in dict.fromkeys(d for d, _, _ in t.rows):
        rows = sorted(
            ((x_of(s), s, e) for d, s, e in t.rows if d == dataset and x_of(s) is not None), key=lambda r: r[0]
        )
        series: dict[str, _Series] = {}
        for x, setting, exp in rows:
            mine = {
                k[2]: c for k, c in cells.items() if exp and k[0] == protocol and k[1] == exp and c.mean is not None
            }

            def ours(m):
                return mine[m].mean if m in mine else None

            def pub(m, setting=setting):
                return t.values.get((dataset, setting, m))

            for m in sorted(set(t.methods) | set(mine), key=method_order):
                s = series.setdefault(m, _Series())
                y = value(ours, m)
                if y is not None:
                    s.xs.append(x)
                    s.ys.append(y)
                    s.err.append(100 * (mine[m].std or 0.0) if error_bars else 0.0)
                py = value(pub, m)
                if py is not None:
                    s.pub_xs.append(x)
                    s.pub_ys.append(py)
        series = {m: s for m, s in series.items() if s.xs}  # a method appears where we ran it
        if series:
            panels.append(_Panel(dataset, [(x, tick(x)) for x, _, _ in rows], series))
    return panels


def _runs(xs: list, order: list) -> list[tuple[int, int]]:
    """[i, j) slices of `xs` (sorted positions) whose points sit on consecutive positions of `order`
    (the panel's levels): a level that was not run breaks the line, so a line never stands for a
    measurement that was not made (a solid line from rich straight to super sparse hid Gossip's cliff)."""
    rank = {x: n for n, x in enumerate(order)}
    runs, start = [], 0
    for n in range(1, len(xs) + 1):
        if n == len(xs) or rank[xs[n]] != rank[xs[n - 1]] + 1:
            runs.append((start, n))
            start = n
    return runs


def _line_figure(
    title: str,
    rows: list[tuple[str, list[_Panel]]],
    xlabel: str,
    ylabel: str,
    zero_line: bool = False,
    error_bars: bool = True,
) -> Figure:
    ncols = max(len(panels) for _, panels in rows)
    fig = Figure(figsize=(4.2 * ncols + 2.2, 3.3 * len(rows) + 0.6), layout="constrained")
    axes = fig.subplots(len(rows), ncols, squeeze=False)
    methods, any_published = set(), False
    for r, (row_title, panels) in enumerate(rows):
        for c in range(ncols):
            ax = axes[r][c]
            if c >= len(panels):
                ax.set_visible(False)
                continue
            p = panels[c]
            order = [x for x, _ in p.ticks]
            for m, s in p.series.items():
                methods.add(m)
                for i, j in _runs(s.xs, order):  # a line joins neighbouring levels only: no line across a gap
                    err = s.err[i:j] if any(s.err[i:j]) else None
                    ax.errorbar(s.xs[i:j], s.ys[i:j], yerr=err, color=colour(m), **_OURS)
                if s.pub_xs:
                    any_published = True
                    for i, j in _runs(s.pub_xs, order):
                        ax.plot(s.pub_xs[i:j], s.pub_ys[i:j], color=colour(m), **_PUBLISHED)
            if zero_line:
                ax.axhline(0, color="black", linewidth=0.8)
            ax.set_xticks([x for x, _ in p.ticks], [label for _, label in p.ticks])
            ax.set_title(f"{row_title}{p.title}", fontsize=10)
            ax.set_xlabel(xlabel)
            ax.set_ylabel(ylabel)
            ax.grid(alpha=0.3)
    fig.suptitle(title)
    fig.legend(
        handles=_style_legend(sorted(methods, key=method_order), any_published, error_bars),
        loc="outside right center",
        fontsize=9,
        frameon=False,
    )
    return fig


def _table_rows(tables, protocol, cells, sweeps, x_of, tick, value, error_bars: bool) -> list[tuple[str, list[_Panel]]]:
    """One row of panels per published table that `sweeps(settings)` selects and that holds a run of ours."""
    rows = []
    for t in tables:
        if t.rows and sweeps([s for _, s, _ in t.rows]):
            panels = _panels(t, protocol, cells, x_of, tick, value, error_bars=error_bars)
            if panels:
                rows.append((f"table {t.table} ({t.family}): ", panels))
    return rows


def _is_k_sweep(settings: list[str]) -> bool:
    """Settings that are numbers of clusters, more than one (table XII's one K=20 is not a sweep)."""
    return len(set(settings)) > 1 and all(_k_x(s) is not None for s in settings)


def accuracy_vs_k(tables, protocol, cells) -> tuple[Figure | None, str]:
    """Every table that sweeps the number of clusters (E1 X, E2a XIII, E3b XVII, E4b XX): one row each."""
    rows = _table_rows(tables, protocol, cells, _is_k_sweep, _k_x, _k_tick, accuracy, error_bars=True)
    if not rows:
        return None, "no run of a K-sweep setting (tables X, XIII, XVII, XX) under this protocol"
    fig = _line_figure(
        f"Accuracy vs number of clusters K, one row per table with a K sweep, {_label(protocol)}",
        rows,
        "clusters K (E4b: C per concept)",
        "accuracy (%)",
    )
    return fig, _rows_note(rows)


def _sparsity_rows(tables, protocol, cells, value, error_bars: bool) -> list[tuple[str, list[_Panel]]]:
    """One row of panels per published table whose settings are sparsity levels (XI, XIV, XVI, XVIII, XXI)."""
    return _table_rows(
        tables,
        protocol,
        cells,
        lambda settings: all(_sparsity_of(s) for s in settings),
        _sparsity_x,
        _sparsity_tick,
        value,
        error_bars,
    )


def _rows_note(rows) -> str:
    return "; ".join(f"{r[0].rstrip(': ')}: {', '.join(p.title for p in r[1])}" for r in rows)


def accuracy_vs_sparsity(tables, protocol, cells) -> tuple[Figure | None, str]:
    """Every family with a sparsity table (E1 XI, E2a XIV, E3a XVI, E3b XVIII, E4b XXI): one row each."""
    rows = _sparsity_rows(tables, protocol, cells, accuracy, error_bars=True)
    if not rows:
        return None, "no sparsity setting (tables XI, XIV, XVI, XVIII, XXI) run under this protocol"
    fig = _line_figure(
        f"Accuracy vs sparsity, every family with a sparsity table, {_label(protocol)}",
        rows,
        "sparsity (clients per cluster: 5, 10, 20, 50, 100)",
        "accuracy (%)",
    )
    return fig, _rows_note(rows)


def gap_vs_sparsity(tables, protocol, cells) -> tuple[Figure | None, str]:
    rows = _sparsity_rows(tables, protocol, cells, gap_to_oracle, error_bars=False)
    if not rows:
        return None, "no sparsity setting under this protocol has Oracle and another method both run"
    fig = _line_figure(
        f"Gap to Oracle across sparsity (method minus Oracle), {_label(protocol)}",
        rows,
        "sparsity",
        "accuracy minus Oracle (pp)",
        zero_line=True,
        error_bars=False,
    )
    return fig, _rows_note(rows)


# ---- the overview heatmap ----------------------------------------------------------------------


def heatmap(tables, protocol, cells) -> tuple[Figure | None, str]:
    mine = {(e, m): c.mean for (p, e, m), c in cells.items() if p == protocol and c.mean is not None}
    if not mine:
        return None, "no finished run under this protocol"
    exps = sorted({e for e, _ in mine}, key=experiment_order)
    methods = sorted({m for _, m in mine}, key=method_order)
    grid = np.full((len(exps), len(methods)), np.nan)
    for (e, m), v in mine.items():
        grid[exps.index(e), methods.index(m)] = 100 * v
    fig = Figure(figsize=(3.2 + 0.9 * len(methods), 2.2 + 0.28 * len(exps)), layout="constrained")
    ax = fig.subplots()
    cmap = _cmap()
    im = ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, vmin=0, vmax=100, aspect="auto", interpolation="nearest")
    if grid.size <= 1500:  # beyond that the numbers would not be legible
        for i in range(len(exps)):
            for j in range(len(methods)):
                if not math.isnan(grid[i, j]):
                    ax.text(
                        j,
                        i,
                        f"{grid[i, j]:.1f}",
                        ha="center",
                        va="center",
                        fontsize=7,
                        color="white" if grid[i, j] < 55 else "black",
                    )
    ax.set_xticks(range(len(methods)), [method_label(m) for m in methods], rotation=30, ha="right", fontsize=8)
    ax.set_yticks(range(len(exps)), exps, fontsize=8)
    ax.set_xlabel("method")
    ax.set_ylabel("experiment")
    ax.set_title(f"Accuracy (%) of every experiment and method (ours), {_label(protocol)}", fontsize=10)
    fig.colorbar(im, ax=ax, label="accuracy (%)", fraction=0.05)
    fig.legend(
        handles=[Patch(facecolor="lightgrey", label="not run")], loc="outside lower right", fontsize=8, frameon=False
    )
    return fig, f"{len(exps)} experiment(s) x {len(methods)} method(s)"


def _cmap():
    import matplotlib

    return matplotlib.colormaps["viridis"].with_extremes(bad="lightgrey")


# ---- Conditional minus Oracle, per family ------------------------------------------------------


def conditional_vs_oracle(tables, protocol, cells) -> tuple[Figure | None, str]:
    families = list(dict.fromkeys(e.family for e in EXPERIMENTS.values()))
    per_family: dict[str, list[tuple[str, float, float | None]]] = {}
    exps = sorted({e for (p, e, _) in cells if p == protocol}, key=experiment_order)
    for e in exps:
        c, o = cells.get((protocol, e, "Conditional")), cells.get((protocol, e, "Oracle"))
        if c is None or o is None or c.mean is None or o.mean is None:
            continue
        pc, po = published_for(tables, e, "Conditional"), published_for(tables, e, "Oracle")
        family = EXPERIMENTS[e].family if e in EXPERIMENTS else e.split("/")[0]
        per_family.setdefault(family, []).append(
            (e, 100 * (c.mean - o.mean), None if pc is None or po is None else 100 * (pc - po))
        )
    if not per_family:
        return None, "no experiment under this protocol has both Conditional and Oracle run"
    order = sorted(per_family, key=lambda f: (families.index(f) if f in families else len(families), f))
    fig = Figure(figsize=(4.0 + 1.3 * len(order), 4.2), layout="constrained")
    ax = fig.subplots()
    any_published = False
    shown: list[float] = []
    for i, f in enumerate(order):
        vals = [d for _, d, _ in per_family[f]]
        shown += vals
        ax.bar(i, float(np.mean(vals)), width=0.6, color="tab:blue", alpha=0.35, edgecolor="tab:blue")
        offsets = np.linspace(-0.2, 0.2, len(vals)) if len(vals) > 1 else np.zeros(1)
        ax.plot(i + offsets, vals, "o", color="tab:blue", markersize=4)
        pubs = [p for _, _, p in per_family[f] if p is not None]
        if pubs:
            any_published = True
            ax.hlines(
                float(np.mean(pubs)), i - 0.35, i + 0.35, colors="black", linestyles="--", linewidth=1.5, zorder=3
            )
            shown += pubs
    ax.axhline(0, color="grey", linewidth=0.8, zorder=1)
    lo, hi = min(shown + [0.0]), max(shown + [0.0])
    pad = max(0.5, 0.1 * (hi - lo))
    ax.set_ylim(lo - pad, hi + pad)  # the zero line and a published mean of 0 stay visible
    ax.set_xticks(
        range(len(order)),
        [f"{f}\n({len(per_family[f])} setting{'s' if len(per_family[f]) != 1 else ''})" for f in order],
    )
    ax.set_xlabel("scenario family")
    ax.set_ylabel("Conditional minus Oracle (pp)")
    ax.set_title(f"Conditional minus Oracle per family, {_label(protocol)}", fontsize=10)
    handles = [
        Patch(facecolor="tab:blue", alpha=0.35, edgecolor="tab:blue", label="ours, mean over settings"),
        Line2D([], [], marker="o", linestyle="none", color="tab:blue", markersize=4, label="ours, one setting"),
    ]
    if any_published:
        handles.append(Line2D([], [], color="black", linestyle="--", label="published, mean over the same settings"))
    fig.legend(handles=handles, loc="outside right center", fontsize=8, frameon=False)
    ax.grid(axis="y", alpha=0.3)
    return fig, ", ".join(f"{f}: {len(per_family[f])} setting(s)" for f in order)


FIGURES = (  # key, title, drawer
    ("accuracy_vs_k", "Accuracy vs K, one row per table with a K sweep", accuracy_vs_k),
    ("accuracy_vs_sparsity", "Accuracy vs sparsity, one row per family with a sparsity table", accuracy_vs_sparsity),
    ("gap_to_oracle", "Gap to Oracle across sparsity", gap_vs_sparsity),
    ("heatmap", "All experiments x methods", heatmap),
    ("conditional_minus_oracle", "Conditional minus Oracle per family", conditional_vs_oracle),
)


def draw_all(tables: list[PublishedTable], protocol: str | None, cells: dict, out_dir: Path) -> list[Outcome]:
    """Every figure for one protocol, written as `<key>_<protocol>.png` in `out_dir`. A skipped
    figure's old file (from an earlier report) is removed, so the folder never shows stale data."""
    out = []
    for key, title, draw in FIGURES:
        path = out_dir / f"{key}_{slug(protocol)}.png"
        fig, note = draw(tables, protocol, cells)
        if fig is None:
            path.unlink(missing_ok=True)
            out.append(Outcome(key, title, None, note))
        else:
            _save(fig, path)
            out.append(Outcome(key, title, path, note))
    return out
