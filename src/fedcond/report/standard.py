"""The report's section on the standard partitions (dirichlet, pathological, shards, quantity, and
the partitions plug-ins register): one
table per family with every protocol that ran it (a row per experiment and protocol, a column per
method), and each experiment's label distribution drawn beside it.

Across protocols, unlike the paper's tables: a standard federation is often run under a variant
(`paper[statistic=class_means]` for Conditional-FedAvg), and a report of `--protocol paper` must
still show it. The picture is rebuilt from the registry (the split is a function of the seed), so
it needs the dataset; where the data is missing the section says so and keeps the table.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import FedcondError
from ..experiments import EXPERIMENTS
from ..scenarios.families import STANDARD
from .data import experiment_order, method_order, protocol_order
from .tables import FAMILY_TITLES, _seeds_text, _table, cell_text


def standard_partitions_section(cells: dict, out: Path, draw: bool = True) -> list[str]:
    """cells: (protocol, experiment, method) -> Cell over every protocol in the database."""
    lines: list[str] = []
    for family in STANDARD:
        ran = {(p, e, m) for (p, e, m) in cells if e is not None and e.startswith(f"{family}/")}
        if not ran:
            continue
        names = sorted({e for _, e, _ in ran}, key=experiment_order)
        methods = sorted({m for _, _, m in ran}, key=method_order)
        rows = []
        for name in names:
            for p in sorted({p for p, e, _ in ran if e == name}, key=protocol_order):
                cs = [cells.get((p, name, m)) for m in methods]
                rows.append([name, f"`{p}`", _seeds_text(cs)] + [cell_text(c, None) for c in cs])
        title = FAMILY_TITLES.get(family, "a plug-in's partition")
        lines += [f"### Standard partition: {title} ({family})", ""]
        lines += [
            "Accuracy (%) as the mean over clients; a federation without true clusters has no Oracle. The protocol "
            "column names the paper preset's options a row ran with (a statistic option matters to the "
            "Conditionals only).",
            "",
        ]
        lines += _table(["experiment", "protocol", "seeds"] + methods, rows) + [""]
        if draw:
            for name in names:
                lines += _label_picture(name, out)
    return lines


def _label_picture(name: str, out: Path) -> list[str]:
    """The experiment's seed-0 label distribution as `labels_<name>.png` in `out`, and its Markdown."""
    from ..report.partition_plot import label_distribution

    exp = EXPERIMENTS.get(name)
    if exp is None:
        return [f"- {name}: no label picture, the experiment is not in this version's registry.", ""]
    path = out / ("labels_" + name.replace("/", "_").replace("=", "") + ".png")
    try:
        fed = exp.spec(seed=0).build().federation
    except (FedcondError, OSError) as e:
        return [f"- {name}: no label picture ({str(e).splitlines()[0]}).", ""]
    label_distribution(fed.label_counts(), fed.label_names, f"{name} (seed 0)", str(path))
    rel = os.path.relpath(path, out)
    return [
        f"![label distribution of {name}]({rel})",
        "",
        f"*{name}, seed 0: each client's training samples stacked by class (top) and the clients x classes "
        "share (bottom).*",
        "",
    ]
