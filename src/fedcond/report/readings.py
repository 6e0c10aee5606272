"""The report's "Readings probed" section: each candidate reading of the paper, run on a probe set of
cells (a probes database), against the default on the same cells and the published values.

A candidate is what a probe row ran: its method with its hyper-parameters (`Gossip(carry_momentum=True)`)
under its protocol's options (`paper[inputs=raw]`). A row evaluated every few rounds (`paper[eval_every=1]`)
stands for the reading "the paper reported the best round": its candidate score is the best point of its
curve (extra.best_accuracy), since evaluating leaves training as it was and its last round is the
default's. Its fit is the mean |ours - published| over its probe cells, beside the default's over the
same cells (the main database's row of the plain method under the plain protocol, same seed; a cell the
default has not run is left out of both means).

A run *collapses* when it scores no better than a dead network: each client predicting the most
frequent label of its own training data (the "dead level", computed from the seed's split; within 3 pp
counts). The published collapses (Gossip's .100, .151, .500, ...) are such levels, so a reading of
Gossip is also judged by how many of the probe cells it collapses as the paper did. The dead level
needs the dataset; without it the column says "-".
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import FedcondError
from .data import published_for
from .tables import _table, pct, pp

DEAD_MARGIN = 0.03  # a score within 3 pp of the dead level counts as collapsed


@dataclass
class Candidate:
    method: str  # as the probe row stores it
    protocol: str
    is_default: bool
    best_round: bool = False  # scored at the best round of its curve, not the last
    joint: bool = False  # several methods' cells together (`together`): its label is a phrase, not a method
    cells: list[dict] = field(default_factory=list)  # experiment, seed, ours, default, published, dead


def base_method(name: str) -> str:
    """`Gossip(carry_momentum=True)` -> `Gossip`."""
    return name.split("(", 1)[0]


def _is_default(method: str, protocol: str) -> bool:
    """Whether the probe ran exactly the default (a probe made before its reading became the default)."""
    from ..algorithms import make_algorithm

    if protocol != "paper":
        return False
    try:
        return repr(make_algorithm(method)) == repr(make_algorithm(base_method(method)))
    except FedcondError:
        return False


def dead_level(experiment: str, protocol: str, seed: int, cache: dict) -> float | None:
    """Mean over clients of the share of the client's test labels equal to its most frequent training label."""
    import numpy as np

    from ..experiments import EXPERIMENTS, scenario_options

    options = scenario_options(protocol)
    key = (experiment, tuple(sorted(options.items())), seed)
    if key not in cache:
        exp = EXPERIMENTS.get(experiment)
        try:
            fed = None if exp is None else exp.spec(seed=seed, **options).build().federation
        except (FedcondError, OSError):
            fed = None
        if fed is None:
            cache[key] = None
        else:
            tops = fed.label_counts().argmax(axis=1)  # each client's most frequent training label
            cache[key] = float(np.mean([float((c.y_test == int(t)).float().mean()) for c, t in zip(fed.clients, tops)]))
    return cache[key]


def candidates(probes: list[dict], main: list[dict], published: list, levels: bool = True) -> list[Candidate]:
    """Probe rows grouped by (method, protocol), each cell beside the default's same-seed row and the
    published value. main: the main database's ok rows (the default's are those under `paper`)."""
    default = {
        (r["experiment"], r["method"], r["seed"]): r["accuracy"]
        for r in main
        if r["protocol_name"] == "paper" and r["accuracy"] is not None
    }
    out: dict[tuple[str, str], Candidate] = {}
    cache: dict = {}
    for r in sorted(probes, key=lambda r: r["id"]):
        if r["experiment"] is None or r["accuracy"] is None:
            continue
        best = (r.get("extra") or {}).get("best_accuracy") if (r.get("protocol") or {}).get("eval_every") else None
        key = (r["method"], r["protocol_name"])
        if key not in out:
            out[key] = Candidate(r["method"], r["protocol_name"], _is_default(*key), best_round=best is not None)
        base = base_method(r["method"])
        out[key].cells.append(
            {
                "experiment": r["experiment"],
                "seed": r["seed"],
                "ours": best if out[key].best_round and best is not None else r["accuracy"],
                "default": default.get((r["experiment"], base, r["seed"])),
                "published": published_for(published, r["experiment"], base),
                "dead": dead_level(r["experiment"], r["protocol_name"], r["seed"], cache) if levels else None,
            }
        )
    return list(out.values())


def _compared(cells: list[dict]) -> list[dict]:
    """The cells with both a published value and the default's row: the ones a fit is read over."""
    return [c for c in cells if c["published"] is not None and c["default"] is not None]


def _fit(cells: list[dict], which: str) -> float | None:
    both = _compared(cells)
    return sum(abs(c[which] - c["published"]) for c in both) / len(both) if both else None


def _gain(cells: list[dict]) -> str:
    """How much nearer the published values the candidate is than the default, cell by cell (paired): the mean
    of |default - published| - |candidate - published| and, over two or more cells, its standard error."""
    d = [100 * (abs(c["default"] - c["published"]) - abs(c["ours"] - c["published"])) for c in _compared(cells)]
    if not d:
        return "-"
    mean = sum(d) / len(d)
    if len(d) == 1:
        return f"{mean:+.1f} pp"
    se = (sum((x - mean) ** 2 for x in d) / (len(d) - 1) / len(d)) ** 0.5
    return f"{mean:+.1f} ± {se:.1f} pp"


def together(found: list[Candidate]) -> list[Candidate]:
    """A protocol reading (`paper[drop_last=True]`) changes every method's training: one more candidate per such
    protocol probed on two or more plain methods, their cells together, so its fit is read over all of them."""
    groups: dict[str, list[Candidate]] = {}
    for c in found:
        if c.protocol != "paper" and not c.best_round and c.method == base_method(c.method):
            groups.setdefault(c.protocol, []).append(c)
    return [
        Candidate(
            "every method probed (" + ", ".join(c.method for c in cs) + ")",
            protocol,
            False,
            joint=True,
            cells=[x for c in cs for x in c.cells],
        )
        for protocol, cs in groups.items()
        if len(cs) >= 2
    ]


def _collapsed(x: float | None, dead: float | None) -> bool | None:
    return None if x is None or dead is None else x <= dead + DEAD_MARGIN


def _collapse_text(cells: list[dict]) -> str:
    judged = [c for c in cells if c["dead"] is not None and c["published"] is not None]
    if not judged:
        return "-"
    pub = sum(bool(_collapsed(c["published"], c["dead"])) for c in judged)
    ours = sum(_collapsed(c["ours"], c["dead"]) == _collapsed(c["published"], c["dead"]) for c in judged)
    dflt = [c for c in judged if c["default"] is not None]
    d = sum(_collapsed(c["default"], c["dead"]) == _collapsed(c["published"], c["dead"]) for c in dflt)
    return (
        f"published {pub} of {len(judged)}; as published: candidate {ours} of {len(judged)}, default {d} of {len(dflt)}"
    )


def readings_section(probes: list[dict], main: list[dict], published: list, levels: bool = True) -> list[str]:
    """Markdown lines; nothing when there are no probe rows."""
    found = candidates(probes, main, published, levels)
    if not found:
        return []
    lines = [
        "### Readings probed",
        "",
        "Each reading the paper leaves open that was probed (a probes database beside the results), as the "
        "probe ran it, against the default on the same cells and seed. Fit: mean |ours - published| over the "
        "cells the default has also run. Collapsed: within 3 pp of the dead level (each client predicting its "
        "most frequent training label), computed from the seed's split. Gained: how much nearer the published "
        "values the candidate lands than the default, cell by cell (mean of |default - published| - |candidate - "
        "published|, ± its standard error, which treats the cells as independent although cells of one experiment "
        "and seed share a split: a rough guide); a protocol reading probed on several methods also gets a row of them "
        "together. Which reading is the default and why: `docs/choices.md`.",
        "",
    ]
    rows = []
    for c in found + together(found):
        fit, fit_default = _fit(c.cells, "ours"), _fit(c.cells, "default")
        compared = _compared(c.cells)
        nearer = sum(abs(x["ours"] - x["published"]) < abs(x["default"] - x["published"]) for x in compared)
        rows.append(
            [
                (c.method if c.joint else f"`{c.method}`")
                + (", best round" if c.best_round else "")
                + (" (the default)" if c.is_default and not c.best_round else ""),
                f"`{c.protocol}`",
                str(len(c.cells)),
                "-" if fit is None else f"{100 * fit:.1f} pp",
                "-" if fit_default is None else f"{100 * fit_default:.1f} pp",
                f"{nearer} of {len(compared)}" if compared else "-",
                _gain(c.cells),
                _collapse_text(c.cells),
            ]
        )
    lines += _table(
        [
            "candidate",
            "protocol",
            "cells",
            "fit",
            "default's fit",
            "nearer than the default",
            "gained",
            "collapsed",
        ],
        rows,
    )
    lines += ["", "Per cell (accuracy %, seed as run; difference against the published value):", ""]
    detail = []
    for c in found:
        for x in c.cells:
            pub = x["published"]
            detail.append(
                [
                    f"`{c.method}` `{c.protocol}`" + (", best round" if c.best_round else ""),
                    x["experiment"],
                    str(x["seed"]),
                    pct(x["ours"]) + ("" if pub is None else f" ({pp(x['ours'] - pub)})"),
                    "-"
                    if x["default"] is None
                    else pct(x["default"]) + ("" if pub is None else f" ({pp(x['default'] - pub)})"),
                    "-" if pub is None else pct(pub),
                    "-" if x["dead"] is None else pct(x["dead"]),
                ]
            )
    lines += _table(["candidate", "experiment", "seed", "candidate", "default", "published", "dead level"], detail)
    return lines + [""]
