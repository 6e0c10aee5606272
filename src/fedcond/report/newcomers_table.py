"""The report's section on clients never seen in training (`--holdout-clients`): seen and unseen
accuracy per experiment, statistic and method, each method's measured budget, and a few sentences
on who wins where, how far the deployable Conditional lies from Oracle and whether that gap is more
than a handful of test samples (paired.py). The figure beside it is newcomers.py's."""

from __future__ import annotations

import statistics

from .data import experiment_order, method_order
from .paired import paired
from .tables import _table, pct, pp


def newcomer_groups(ok: list[dict]) -> dict[tuple, list[dict]]:
    """The rows with clients held out (--holdout-clients), grouped by (experiment, statistic, method,
    rounds) in report order: across protocols, since they differ by option only; a budget of more
    rounds (a probe's) is a group of its own. The newcomers table and its figure read these."""
    groups: dict[tuple, list[dict]] = {}
    for r in ok:
        extra, protocol = r.get("extra") or {}, r.get("protocol") or {}
        # a method with no model for a newcomer (Local, Ditto) still has its seen accuracy under the hold-out
        held = "unseen_accuracy" in extra or (protocol.get("holdout_clients") or 0) > 0
        if held and r["accuracy"] is not None:
            statistic = protocol.get("statistic", "eigenvalues")
            groups.setdefault((r["experiment"], statistic, r["method"], r.get("rounds") or 0), []).append(r)
    order = sorted(groups, key=lambda k: (experiment_order(k[0]), k[1], method_order(k[2]), k[3]))
    return {k: groups[k] for k in order}


def seen_unseen(runs: list[dict]) -> tuple[float, float | None]:
    """A group's seen and unseen accuracy, each the mean over its seeds; unseen None where the method
    serves no newcomer."""
    unseen = [r["extra"]["unseen_accuracy"] for r in runs if "unseen_accuracy" in (r.get("extra") or {})]
    return statistics.fmean(r["accuracy"] for r in runs), (statistics.fmean(unseen) if unseen else None)


def newcomers_summary(groups: dict[tuple, list[dict]], within: float = 0.015) -> list[str]:
    """A few sentences from the newcomers table: which method is best where (seen, unseen), and how far
    each deployable Conditional (`Conditional-FedAvg...`) lies from Oracle, its gaps included. Only the
    configurations (experiment, statistic) where Oracle ran are compared, each method at its fewest
    rounds (a probe's longer budget is left out)."""
    by_config: dict[tuple[str, str], dict[str, tuple[float, float | None]]] = {}
    rows: dict[tuple[str, str], dict[str, list[dict]]] = {}
    for (exp, statistic, method, rounds), runs in sorted(groups.items(), key=lambda kv: -kv[0][3]):
        by_config.setdefault((exp, statistic), {})[method] = seen_unseen(runs)  # the fewest rounds win
        rows.setdefault((exp, statistic), {})[method] = runs
    configs = {k: v for k, v in by_config.items() if "Oracle" in v and len(v) > 1}
    if not configs:
        return []
    lines = []
    for which, index in (("the training clients (seen)", 0), ("the newcomers (unseen)", 1)):
        wins: dict[str, list[str]] = {}
        for (exp, _), methods in configs.items():
            # the oracles (Oracle, Oracle-FedAvg) know the clusters: never "the best method"
            scored = {
                m: score for m, v in methods.items() if (score := v[index]) is not None and not m.startswith("Oracle")
            }
            if scored:
                best = max(scored.values())
                for m, v in scored.items():
                    if v == best:
                        wins.setdefault(m, []).append(exp)
        if wins:
            ranked = sorted(wins.items(), key=lambda kv: (-len(kv[1]), method_order(kv[0])))
            lines.append(
                f"- Best method other than Oracle on {which}: "
                + "; ".join(f"{m} on {len(e)} of {len(configs)}" for m, e in ranked)
                + "."
            )
    deployable = sorted({m for v in configs.values() for m in v if m.startswith("Conditional-FedAvg")})
    for m in deployable:
        for which, index in (("seen", 0), ("unseen", 1)):
            gaps = []
            for (exp, statistic), scores in configs.items():
                mine, oracle = scores[m][index] if m in scores else None, scores["Oracle"][index]
                if mine is not None and oracle is not None:
                    gaps.append((mine - oracle, exp, statistic))
            if not gaps:
                continue
            close = sum(g >= -within for g, _, _ in gaps)
            worst = min(gaps)
            lines.append(
                f"- {m} against Oracle, {which}: within {100 * within:.1f} pp on {close} of {len(gaps)} "
                f"configuration(s); mean {pp(statistics.fmean(g for g, _, _ in gaps))}, worst "
                f"{pp(worst[0])} on {worst[1]} ({worst[2]})."
            )
            lines += _gaps_sample_by_sample(m, which, [(g, e, s) for g, e, s in gaps if g < -within], rows, within)
            lines.append(_losses_to_rivals(m, which, index, configs))
    lines += _against_reference_runs(deployable, configs)
    return lines


def _gaps_sample_by_sample(m: str, which: str, gaps: list, rows: dict, within: float) -> list[str]:
    """The gaps to Oracle beyond `within`, each as the test samples behind it, seed by seed (paired.py):
    a gap of a few percentage points on a newcomer's 40-60 test images can be two images."""
    said = []
    for _, exp, statistic in sorted(gaps):
        mine = {r["seed"]: r for r in rows[(exp, statistic)][m]}
        for oracle in rows[(exp, statistic)]["Oracle"]:
            if oracle["seed"] in mine and (test := paired(mine[oracle["seed"]], oracle, which == "unseen")):
                said.append(f"{exp} seed {oracle['seed']}: {test.text()}")
    if not said:
        return []
    return [
        f"- {m}'s gaps to Oracle beyond {100 * within:.1f} pp, {which}, sample by sample (the same test samples; "
        f"right only for {m} / only for Oracle, McNemar's exact p): " + "; ".join(said) + "."
    ]


# runs the deployable Conditional is read against besides Oracle: (name prefix, how the line names the run, the
# run a second difference is taken against, what that difference is called, that difference from (mine, its, ref))
REFERENCE_RUNS = (
    # FedAvg within each true cluster at the same rounds: a gap to Oracle is the cost of training federated within
    # the budget (the ceiling's own gap) or the conditioning's (the rest)
    ("Oracle-FedAvg", "the federated ceiling {} (FedAvg within each true cluster)", "Oracle",
     "the ceiling against Oracle", lambda mine, its, ref: its - ref),
    # FedAvg at another budget (say the deployable Conditional's local epochs and server momentum): a lead over
    # FedAvg is the conditioning's (the lead over it) or the compute's (the rest of the lead over plain FedAvg)
    ("FedAvg(", "{} (FedAvg at another budget)", "FedAvg", "against plain FedAvg", lambda mine, its, ref: mine - ref),
)  # fmt: skip


def _against_reference_runs(deployable: list[str], configs: dict) -> list[str]:
    """Where a reference run (REFERENCE_RUNS) ran beside the deployable Conditional: its difference to that
    run, per configuration, with the second difference that says how to read it."""
    lines = []
    for prefix, naming, ref, second_name, second in REFERENCE_RUNS:
        for c in sorted({c for v in configs.values() for c in v if c.startswith(prefix)}, key=method_order):
            for m in deployable:
                for which, index in (("seen", 0), ("unseen", 1)):
                    pairs = [
                        (exp, v[m][index] - v[c][index], second(v[m][index], v[c][index], v[ref][index]))
                        for (exp, _), v in configs.items()
                        if {m, c, ref} <= v.keys() and None not in (v[m][index], v[c][index], v[ref][index])
                    ]
                    if pairs:
                        lines.append(
                            f"- {m} against {naming.format(c)}, {which}: "
                            + "; ".join(f"{exp} {pp(g)} ({second_name} {pp(o)})" for exp, g, o in pairs)
                            + "."
                        )
    return lines


def _margin(d: float) -> str:
    return f"{100 * d:.1f} pp" if d >= 0.0005 else "less than 0.1 pp"  # never "by 0.0 pp"


NOT_RIVALS = ("Oracle", "Conditional")  # the ceiling and the method's own forms (pooled, deployable)


def _losses_to_rivals(m: str, which: str, index: int, configs: dict) -> str:
    """Where the deployable Conditional `m` scores below a rival (a method other than Oracle and the
    Conditionals), with the best such rival and by how much: its losses said as plainly as its gap."""
    losses = []
    for (exp, _), v in configs.items():
        mine = v[m][index] if m in v else None
        rivals = {r: s[index] for r, s in v.items() if s[index] is not None and not r.startswith(NOT_RIVALS)}
        if mine is None or not rivals:
            continue
        best = min(rivals, key=lambda r: (-rivals[r], method_order(r)))  # ties: the paper's order
        if rivals[best] > mine:
            losses.append((mine - rivals[best], exp, best))
    compared = sum(1 for v in configs.values() if m in v and v[m][index] is not None)
    if not losses:
        return f"- {m} below a rival, {which}: on none of {compared} configuration(s)."
    return (
        f"- {m} below a rival, {which}: on {len(losses)} of {compared} configuration(s): "
        + "; ".join(f"{r} on {exp} by {_margin(-g)}" for g, exp, r in sorted(losses))
        + "."
    )


def newcomers_section(ok: list[dict]) -> list[str]:
    """Runs with clients held out of training (--holdout-clients): seen and unseen accuracy side by
    side, per experiment, statistic and method (newcomer_groups). With what a training client sent,
    received and computed, where the method counts it (extra.traffic, algorithms/traffic.py)."""
    groups = newcomer_groups(ok)
    if not groups:
        return []
    table = []
    for (exp, statistic, method, _), runs in groups.items():
        seen, unseen = seen_unseen(runs)
        table.append(
            [
                exp,
                statistic if method.startswith("Conditional") else "-",
                method,
                pct(seen),
                "-" if unseen is None else pct(unseen),
                "-" if unseen is None else pp(unseen - seen),
                str(len(runs)),
                *_traffic_cells(runs[0]),
            ]
        )
    head = ["experiment", "statistic", "method", "seen", "unseen", "unseen - seen", "seeds"]
    head += ["rounds", "MB down / client", "MB up / client", "samples trained / client"]
    return (
        [
            "## Clients never seen in training",
            "",
            "Runs with `--holdout-clients`: accuracy (%) of the training clients (seen) and of the held-out ones "
            "(unseen), each evaluated with its own statistic, mean over seeds (`-`: the method has no model for "
            "a newcomer, e.g. Local and Ditto, whose models belong to the training clients). Communication and "
            "compute of a "
            "training client over the whole run, mean over clients, as measured (seed 0's run; `-`: the method "
            "does not count it): megabytes of tensors the server sent it and it sent back (a pooled method's "
            "clients send their training data), and the samples it trained on (forward and backward).",
            "",
        ]
        + _table(head, table)
        + [""]
        + (lines + [""] if (lines := newcomers_summary(groups)) else [])
    )


def _traffic_cells(row: dict) -> list[str]:
    t = (row.get("extra") or {}).get("traffic")
    if not t:
        return [str(row.get("rounds") or "-"), "-", "-", "-"]
    return [
        str(t["rounds"]),
        f"{t['bytes_down_per_client'] / 1e6:.2f}",
        f"{t['bytes_up_per_client'] / 1e6:.2f}",
        f"{t['samples_trained_per_client']:.0f}",
    ]
