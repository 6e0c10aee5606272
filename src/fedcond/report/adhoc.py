"""The report's section on ad-hoc runs (`fedcond run` without --experiment): rows no registry cell
names, grouped by scenario (its arguments, the seed aside) and protocol (the paper preset's options
that differ, as a sweep would name them), a method x accuracy table per group, and the accuracy
curves of runs that stored one (--eval-every), one figure per scenario, one panel per protocol."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from ..errors import FedcondError
from ..experiments import PROTOCOL_OPTIONS, variant_name
from .curves import CLIENT_MEAN, Line, Panel, draw_curves
from .data import method_order
from .figures import colour
from .tables import _table, pct

UNNAMED = "custom"  # a row whose protocol no paper variant names (e.g. written by an older fedcond)


def protocol_of(row: dict) -> str:
    """The paper preset with the row's options that differ from it, e.g. `paper[epochs=4,eval_every=1]`."""
    proto = row.get("protocol") or {}
    try:
        return variant_name("paper", {k: proto[k] for k in PROTOCOL_OPTIONS if k in proto})
    except FedcondError:
        return UNNAMED


def scenario_of(row: dict) -> str:
    """The scenario's arguments without the seed, e.g. `E1 on digits (groups=0,1|2,3, k=2)`."""
    args = {k: v for k, v in (row.get("scenario") or {}).items() if k not in ("family", "dataset", "seed")}
    detail = ", ".join(f"{k}={json.dumps(v) if not isinstance(v, str) else v}" for k, v in sorted(args.items()))
    return f"{row['family']} on {row['dataset']}" + (f" ({detail})" if detail else "")


def _groups(rows: list[dict]) -> dict[str, dict[str, list[dict]]]:
    """scenario -> protocol -> rows, in a fixed order (the rows' order is the database's)."""
    out: dict[str, dict[str, list[dict]]] = {}
    for r in rows:
        out.setdefault(scenario_of(r), {}).setdefault(protocol_of(r), []).append(r)
    return {s: dict(sorted(out[s].items())) for s in sorted(out)}


def _mean_std(values: list[float]) -> str:
    mean = pct(statistics.fmean(values))
    return mean + (f" ± {pct(statistics.stdev(values))}" if len(values) >= 2 else "")


def _by_method(rows: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in sorted(rows, key=lambda r: method_order(r["method"])):
        out.setdefault(r["method"], []).append(r)
    return out


def _table_rows(rows: list[dict]) -> list[list[str]]:
    table = []
    for method, runs in _by_method(rows).items():
        best = [r["extra"]["best_accuracy"] for r in runs if "best_accuracy" in (r.get("extra") or {})]
        table.append(
            [
                method,
                str(len(runs)),
                ", ".join(str(s) for s in sorted({r["seed"] for r in runs})),
                _mean_std([r["accuracy"] for r in runs]),
                _mean_std([r["weighted_accuracy"] for r in runs]),
                _mean_std(best) if best else "no curve",
                f"{statistics.fmean(r['seconds'] for r in runs):.1f}",
            ]
        )
    return table


def adhoc_section(rows: list[dict], protocol_filter: str | None, out_dir: Path | None) -> list[str]:
    """Markdown lines (and the curves' PNGs in out_dir) for the finished ad-hoc rows; with a protocol
    filter, only the groups whose protocol it names."""
    groups = _groups(rows)
    if protocol_filter is not None:
        groups = {s: {p: g for p, g in ps.items() if p == protocol_filter} for s, ps in groups.items()}
        groups = {s: ps for s, ps in groups.items() if ps}
    if not groups:
        return []
    n = sum(len(g) for ps in groups.values() for g in ps.values())
    lines = [
        "## Ad-hoc runs",
        "",
        f"{n} finished run{'' if n == 1 else 's'} of `fedcond run` without an experiment name, grouped by scenario "
        "(its arguments; seeds pooled) and protocol (the paper preset's options that differ). Accuracy: mean over "
        "clients; weighted: over all test samples; best: the highest point of the curve, for runs that stored one "
        "(--eval-every); mean ± std over the runs, in percent. Failed runs are listed under Failed runs.",
        "",
    ]
    head = ["method", "runs", "seeds", "accuracy %", "weighted %", "best %", "seconds"]
    for k, (scenario, protocols) in enumerate(groups.items(), start=1):
        for protocol, group in protocols.items():
            lines += [f"### {scenario}, `{protocol}`", ""] + _table(head, _table_rows(group)) + [""]
        if out_dir is not None:
            lines += _curves_figure(scenario, protocols, Path(out_dir) / f"adhoc_curves_{k}.png")
    return lines


def _curves_figure(scenario: str, protocols: dict[str, list[dict]], path: Path) -> list[str]:
    panels = []
    for protocol, group in protocols.items():
        methods = _by_method(group).items()
        curves = {m: [r["extra"]["curve"] for r in runs if "curve" in r["extra"]] for m, runs in methods}
        lines = [Line(m, "-", c, colour(m)) for m, c in curves.items() if c]
        if lines:
            panels.append(Panel(protocol, lines))
    if not panels:
        return []
    draw_curves(panels, path, "accuracy (mean over clients), %", CLIENT_MEAN, width=4.2, legend_each=True)
    return [
        f"![{scenario}: accuracy against rounds]({path.name})",
        "",
        f"*{scenario}: accuracy (mean over clients) after each evaluated round, mean over runs, one panel per "
        "protocol that stored curves.*",
        "",
    ]
