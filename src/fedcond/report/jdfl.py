"""The report's JDFL section (SPEC Part C): the main table (five bases x standalone / graded /
random), per-domain accuracy, the hard-label ablation, the M sweep, the pseudo-domains' ARI and
the discovery diagnostics, each with the claim it checks, read from the database rows.

JDFL reports *global* test accuracy: over all domains' held-out images (the database's
`weighted_accuracy`), mean ± sample std over seeds, in percent.
"""

from __future__ import annotations

import statistics

from ..experiments import DISCOVERY_GRID, JDFL_DATASETS, JDFL_SLOT_SWEEP
from .curves import GLOBAL, Line, Panel, draw_curves
from .paired import mcnemar_p
from .tables import _table, pct

BASES = ("FedAvg", "SCAFFOLD", "FedDyn", "FedDC", "FedProc")
SCHEMES = ("jdfl-graded", "jdfl-random")
MAIN_CELLS = tuple(m for b in BASES for m in (b, *(f"{b}+{s}" for s in SCHEMES)))


def base_of(method: str) -> str | None:
    """The base a method name starts from (`FedProc(temperature=0.5)` -> FedProc), or None."""
    return next((b for b in BASES if method == b or method.startswith((f"{b}+", f"{b}("))), None)


def _by(rows: list[dict], experiment: str) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in rows:
        if r["experiment"] == experiment:
            out.setdefault(r["method"], []).append(r)
    return out


def _last(r: dict) -> float | None:
    return r["weighted_accuracy"]


def _best_of(r: dict) -> float | None:
    """The maximum global accuracy over rounds (what the JDFL text reports), where the run stored its curve."""
    return (r.get("extra") or {}).get("best_weighted_accuracy")


def _acc(rows: list[dict] | None) -> list[float]:
    return [v for r in rows or [] if (v := _last(r)) is not None]


def _best(rows: list[dict] | None) -> list[float]:
    return [v for r in rows or [] if (v := _best_of(r)) is not None]


def _by_seed(rows: list[dict] | None, value) -> dict[int, float]:
    return {r["seed"]: v for r in rows or [] if (v := value(r)) is not None}


def _text(values: list[float]) -> str:
    if not values:
        return "not run"
    mean = pct(statistics.fmean(values))
    return mean + (f" ± {pct(statistics.stdev(values))}" if len(values) >= 2 else "") + f" (n={len(values)})"


def _delta(rows: list[dict] | None, ref: list[dict] | None, value=_last) -> str:
    """rows minus ref, seed by seed over the seeds both ran (a mean over unequal seed sets would
    mix the seed spread into the difference); names those seeds where either side ran others."""
    mine, theirs = _by_seed(rows, value), _by_seed(ref, value)
    if not mine or not theirs:
        return ""
    common = sorted(mine.keys() & theirs.keys())
    if not common:
        return " [no seed in common]"
    diff = 100 * statistics.fmean(mine[s] - theirs[s] for s in common)
    where = "" if set(mine) == set(theirs) else f" on seed{'s' * (len(common) > 1)} {', '.join(map(str, common))}"
    return f" [{diff:+.1f} pp{where}]"


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def jdfl_section(protocol: str | None, ok: list[dict], label: str, out_dir=None, why: dict | None = None) -> list[str]:
    """`why`: explanations by (experiment, method); ("JDFL/<dataset>/main", "*") says why a dataset
    has no run (e.g. its data cannot be had where the campaign ran)."""
    rows = [r for r in ok if r["protocol_name"] == protocol and (r["experiment"] or "").startswith("JDFL/")]
    lines = [f"### JDFL (SPEC Part C), {label}", ""]
    if not rows:
        return lines + ["No JDFL run of this protocol.", ""]
    lines += [
        "Global test accuracy (all domains' held-out images), %, mean ± std over seeds; "
        "[difference to the base standalone, pp, seed by seed over the seeds both ran, named where either ran others].",
        "",
    ]
    for short in JDFL_DATASETS:
        if not any(r["experiment"].startswith(f"JDFL/{short}/") for r in rows):
            reason = (why or {}).get((f"JDFL/{short}/main", "*"))
            lines += [f"#### {short}", "", "No run of this protocol" + (f": {reason}" if reason else "."), ""]
            continue
        lines += _dataset(short, rows)
        lines += _curves(short, rows, protocol, out_dir)
    return lines


PLATEAU_PP = 0.5  # a curve has flattened once it gains less than this over the last PLATEAU_WINDOW rounds
PLATEAU_WINDOW = 10


def gain_over_window(curve: list, end: int, window: int = PLATEAU_WINDOW) -> float | None:
    """Global accuracy at round `end` minus at round `end - window` (the curve's third column), or None."""
    by_round = {int(r): w for r, _, w in curve}
    if end not in by_round or end - window not in by_round:
        return None
    return by_round[end] - by_round[end - window]


def protocol_probes_section(ok: list[dict], out_dir=None) -> list[str]:
    """FedAvg's curve on each JDFL dataset under every protocol that stored one: the probes that set
    the `jdfl` preset's momentum and rounds. Gains over each 10-round window, and the first round
    where the gain fell below PLATEAU_PP."""
    lines = []
    for short, dataset in JDFL_DATASETS.items():
        runs = [
            r
            for r in ok
            if r["experiment"] == f"JDFL/{short}/main"
            and r["method"] == "FedAvg"
            and (r.get("extra") or {}).get("curve")
        ]
        if not runs:
            continue
        runs.sort(key=lambda r: (r["protocol_name"] or "", r["seed"]))
        table = []
        for r in runs:
            c = r["extra"]["curve"]
            last = int(c[-1][0])
            gains = [
                (end, g)
                for end in range(PLATEAU_WINDOW, last + 1, PLATEAU_WINDOW)
                if (g := gain_over_window(c, end)) is not None
            ]
            flat = next((end for end, g in gains if g < PLATEAU_PP / 100), None)
            proto = r.get("protocol") or {}
            table.append(
                [
                    f"`{r['protocol_name']}`",
                    str(r["seed"]),
                    str(proto.get("momentum", "-")),
                    str(last),
                    pct(c[-1][2]),
                    pct(max(x[2] for x in c)),
                    ", ".join(f"{end}: {100 * g:+.1f}" for end, g in gains) or "-",
                    str(flat) if flat else f"not by {last}",
                ]
            )
        lines += [
            f"#### FedAvg's curve on {short} under each protocol probed",
            "",
            "Global test accuracy (%) after the last round and at "
            f"the best; gain (pp) over each {PLATEAU_WINDOW} rounds "
            f"ending at the round named; the first such round where the gain fell below {PLATEAU_PP} pp.",
            "",
        ]
        lines += _table(
            [
                "protocol",
                "seed",
                "momentum",
                "rounds",
                "last",
                "best",
                f"gain per {PLATEAU_WINDOW} rounds",
                "flat from",
            ],
            table,
        ) + [""]
        if out_dir is not None:
            lines += _probe_figure(short, runs, out_dir)
    return (["## JDFL protocol probes", ""] + lines) if lines else []


def _probe_figure(short: str, runs: list[dict], out_dir) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from pathlib import Path

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for r in runs:
        c = r["extra"]["curve"]
        ax.plot([x[0] for x in c], [100 * x[2] for x in c], label=f"{r['protocol_name']} (seed {r['seed']})")
    ax.set_xlabel("round")
    ax.set_ylabel("global test accuracy, %")
    ax.set_title(f"FedAvg on {short}: the protocol probes")
    ax.legend(fontsize=7)
    fig.tight_layout()
    name = f"jdfl_probes_{short}.png"
    fig.savefig(Path(out_dir) / name, dpi=110)
    plt.close(fig)
    return [f"![FedAvg on {short} under each probed protocol]({name})", ""]


def _curves(short: str, rows: list[dict], protocol: str | None, out_dir) -> list[str]:
    """Global test accuracy against rounds, mean over seeds, per base: standalone and both schemes."""
    main = _by(rows, f"JDFL/{short}/main")
    curves = {m: [r["extra"]["curve"] for r in rs if "curve" in r["extra"]] for m, rs in main.items()}
    curves = {m: c for m, c in curves.items() if c}
    if not curves or out_dir is None:
        return []
    from pathlib import Path

    bases = [b for b in BASES if any(base_of(m) == b for m in curves)]
    panels = []
    for b in bases:
        variants = [(m, "-.") for m in sorted(curves) if base_of(m) == b and m not in MAIN_CELLS]
        lines = [
            Line(m.replace(b, "base") if m != b else "standalone", style, curves[m])
            for m, style in ((b, "-"), (f"{b}+jdfl-graded", "--"), (f"{b}+jdfl-random", ":"), *variants)
            if curves.get(m)
        ]
        panels.append(Panel(b, lines))
    tag = (protocol or "none").replace("[", "_").replace("]", "").replace(",", "_").replace("=", "")
    name = f"jdfl_curves_{short}_{tag}.png"
    draw_curves(panels, Path(out_dir) / name, "global test accuracy, %", GLOBAL)
    return [
        f"![JDFL {short}: global accuracy against rounds]({name})",
        "",
        "*Global test accuracy after every round, mean over seeds: each base standalone (solid), with graded "
        "(dashed) and random (dotted) JDFL, and any variant of them (dash-dot, by its name).*",
        "",
    ]


def _dataset(short: str, rows: list[dict]) -> list[str]:
    main, ablation = _by(rows, f"JDFL/{short}/main"), _by(rows, f"JDFL/{short}/ablation")
    sweep, disc = _by(rows, f"JDFL/{short}/m_sweep"), _by(rows, f"JDFL/{short}/discovery")
    replicate = _by(rows, f"JDFL/{short}/replicate")
    per_sample = _by(rows, f"JDFL/{short}/random_per_sample")
    if not (main or ablation or sweep or disc or replicate or per_sample):
        return []
    out = [f"#### {short}", ""]
    variants = {m: rs for m, rs in main.items() if m not in MAIN_CELLS}
    main = {m: rs for m, rs in main.items() if m in MAIN_CELLS}
    if main:
        out += ["Main table: each base standalone (C-way head) and with JDFL's expanded head, M from the elbow.", ""]
        table = []
        for b in BASES:
            table.append(
                [b, _text(_acc(main.get(b)))]
                + [_text(_acc(main.get(f"{b}+{s}"))) + _delta(main.get(f"{b}+{s}"), main.get(b)) for s in SCHEMES]
            )
        out += _table(["base", "standalone", "+ JDFL graded", "+ JDFL random"], table) + [""]
        if any(_best(rs) for rs in main.values()):
            best_table = [
                [b, _text(_best(main.get(b)))]
                + [
                    _text(_best(main.get(f"{b}+{s}"))) + _delta(main.get(f"{b}+{s}"), main.get(b), _best_of)
                    for s in SCHEMES
                ]
                for b in BASES
            ]
            out += [
                "Best round (the maximum global accuracy over rounds, as the JDFL text reports; the table above is "
                "after the last round).",
                "",
            ]
            out += _table(["base", "standalone", "+ JDFL graded", "+ JDFL random"], best_table) + [""]
        out += _per_domain(main)
        out += _feddyn_models(main)
        out += _pseudo_domains(main)
        out += _sample_pairs(main)
    if main:
        out += _claims(main, ablation, sweep)
    # the side tables give each cell after the last round and, where the runs they show stored curves
    # (main's included: the ablation shows main's cells), at the best round: the claims' measure
    with_best = any(_best(rs) for group in (main, replicate, per_sample, ablation, sweep) for rs in group.values())
    when = " Each cell after the last round and at the best round (the claims' measure)." if with_best else ""
    if replicate:
        table = []
        for b in BASES:
            table.append(
                [b, *_cells(main.get(b), None, with_best)]
                + [
                    c
                    for s in SCHEMES
                    for c in _cells(replicate.get(f"{b}+{s}(init=replicate)"), main.get(b), with_best)
                ]
            )
        out += [
            "Replicated head (`init=replicate`: the expanded head starts as M copies of the base's C-way head, "
            "so the collapsed output starts as the base's; main's cells draw it anew)." + when,
            "",
        ]
        out += _table(
            ["base", *_heads(("standalone", "+ graded, replicated head", "+ random, replicated head"), with_best)],
            table,
        ) + [""]
    if per_sample:
        table = []
        for b in BASES:
            base, step = main.get(b), main.get(f"{b}+jdfl-random")
            got = per_sample.get(f"{b}+jdfl-random(draw=sample)")
            table.append(
                [b, *_cells(base, None, with_best), *_cells(step, base, with_best), *_cells(got, base, with_best)]
            )
        out += [
            "Random scheme, slot fixed per sample (`draw=sample`: each sample keeps one pseudo-domain slot for the "
            "run) beside main's slot drawn anew at every step." + when,
            "",
        ]
        out += _table(
            ["base", *_heads(("standalone", "+ random, per step (main)", "+ random, per sample"), with_best)], table
        ) + [""]
    if ablation or main:
        fedavg = main.get("FedAvg")
        table = [["FedAvg (C-way head)", *_cells(fedavg, None, with_best)]]
        for name, label in (
            ("FedAvg+expanded-hard", "expanded head, hard client-fixed joint labels"),
            ("FedAvg+jdfl-graded", "expanded head, graded (JDFL)"),
            ("FedAvg+jdfl-random", "expanded head, random (JDFL)"),
        ):
            src = ablation if name in ablation else main
            table.append([label, *_cells(src.get(name), fedavg, with_best)])
        out += ["Ablation (FedAvg base; the claim: hard labels do not give the gain, graded and random do)." + when, ""]
        out += _table(["head and targets", *_heads(("accuracy",), with_best)], table) + [""]
    if sweep:
        fedavg = main.get("FedAvg")
        table = [["1 (FedAvg)", *_cells(fedavg, None, with_best), *_cells(fedavg, None, with_best)]]
        for m in JDFL_SLOT_SWEEP:
            table.append(
                [str(m)] + [c for s in SCHEMES for c in _cells(sweep.get(f"FedAvg+{s}(M={m})"), fedavg, with_best)]
            )
        out += [
            "M sweep (FedAvg base, M fixed; the claim: both schemes beat M = 1 throughout, little sensitivity)." + when,
            "",
        ]
        out += _table(["M", *_heads(("graded", "random"), with_best)], table) + [""]
    if disc:
        out += _discovery(disc)
    if variants:
        out += _variants(variants, main)
    return out


def _cells(rows: list[dict] | None, ref: list[dict] | None, with_best: bool) -> list[str]:
    """A side table's cells for one group of runs: after the last round and, `with_best`, at the best
    round, each with its difference to `ref` seed by seed."""
    cells = [_text(_acc(rows)) + _delta(rows, ref)]
    if with_best:
        best = _best(rows)
        cells.append(_text(best) + _delta(rows, ref, _best_of) if best or not rows else "no curve stored")
    return cells


def _heads(names: tuple[str, ...], with_best: bool) -> list[str]:
    return [h for n in names for h in ((f"{n}, last round", f"{n}, best round") if with_best else (n,))]


def _variants(variants: dict[str, list[dict]], main: dict[str, list[dict]]) -> list[str]:
    """Methods run on main's setting that are not main's cells (probes such as `FedProc(temperature=0.5)`),
    each beside the main cell it varies."""
    table = []
    for m, rs in sorted(variants.items()):
        ref = next((c for c in (m.split("(")[0], base_of(m)) if c in main), None)
        best, rounds = _best(rs), [r["extra"]["best_weighted_round"] for r in rs if "best_weighted_round" in r["extra"]]
        table.append(
            [
                f"`{m}`",
                _text(_acc(rs)) + (_delta(rs, main[ref]) if ref else ""),
                _text(best) + (_delta(rs, main[ref], _best_of) if ref else ""),
                ", ".join(map(str, rounds)) or "-",
                f"`{ref}`" if ref else "-",
            ]
        )
    return (
        ["Variants run on the main table's setting (not among its cells); [difference to the main cell named].", ""]
        + _table(["method", "last round", "best round", "best at round", "main cell"], table)
        + [""]
    )


def _feddyn_models(main: dict[str, list[dict]]) -> list[str]:
    """FedDyn keeps two models: the clients' plain average, which it is evaluated on (what its authors' code
    reports), and the server model theta it broadcasts, whose accuracy each row keeps beside it."""
    table = []
    for method in (m for m in MAIN_CELLS if m.split("+")[0] == "FedDyn"):
        rs = [r for r in main.get(method) or [] if "server_model_accuracy" in r["extra"]]
        if rs:
            avg, server = [r["accuracy"] for r in rs], [r["extra"]["server_model_accuracy"] for r in rs]
            diff = 100 * statistics.fmean(s - a for s, a in zip(server, avg))
            table.append([method, _text(avg), _text(server), f"{diff:+.1f}"])
    if not table:
        return []
    return (
        [
            "FedDyn's two models after the last round (accuracy %, mean over clients): the clients' plain average "
            "(the model every table here evaluates, as the FedDyn authors' code reports) and the server model theta it "
            "broadcasts; the difference is theta's minus the average's, pp, paired by seed.",
            "",
        ]
        + _table(["method", "client average (evaluated)", "server model theta", "theta minus average"], table)
        + [""]
    )


def _per_domain(main: dict[str, list[dict]]) -> list[str]:
    domains = None
    table = []
    for method in MAIN_CELLS:
        rs = main.get(method) or []
        accs = [r["extra"].get("cluster_accuracy") for r in rs if r["extra"].get("cluster_accuracy")]
        if not accs:
            continue
        domains = domains or _domain_order(list(accs[0]))
        table.append([method] + [pct(statistics.fmean(a[d] for a in accs)) for d in domains])
    if not table:
        return []
    return ["Per-domain accuracy (%, mean over seeds):", ""] + _table(["method"] + domains, table) + [""]


def _sample_pairs(main: dict[str, list[dict]]) -> list[str]:
    """The claims' pairs sample by sample, where both rows kept which test samples they got right."""
    from ..results import unpack_hits

    def kept(rows):
        return {
            r["seed"]: r["extra"] for r in rows or [] if "test_hits" in r["extra"] and "cluster_of_client" in r["extra"]
        }

    rows = [r for rs in main.values() for r in rs if "cluster_of_client" in r["extra"]]
    domains = _domain_order(sorted({d for r in rows for d in r["extra"]["cluster_of_client"]}))
    table = []
    for b in BASES:
        for a_name, b_name in (
            (f"{b}+jdfl-graded", b),
            (f"{b}+jdfl-random", b),
            (f"{b}+jdfl-random", f"{b}+jdfl-graded"),
        ):
            first, second = kept(main.get(a_name)), kept(main.get(b_name))
            for seed in sorted(set(first) & set(second)):
                ea, eb = first[seed], second[seed]
                if (
                    ea["test_hits"]["sizes"] != eb["test_hits"]["sizes"]
                    or ea["cluster_of_client"] != eb["cluster_of_client"]
                ):
                    continue  # not the same test sets
                ha, hb = unpack_hits(ea["test_hits"]), unpack_hits(eb["test_hits"])
                split = {d: [0, 0] for d in domains}
                for x, y, d in zip(ha, hb, ea["cluster_of_client"]):
                    split[d][0] += int((x & ~y).sum())
                    split[d][1] += int((~x & y).sum())
                only_a, only_b = sum(v[0] for v in split.values()), sum(v[1] for v in split.values())
                table.append(
                    [f"{a_name} vs {b_name}", str(seed)]
                    + [f"{split[d][0]} / {split[d][1]}" for d in domains]
                    + [f"{only_a} / {only_b}", f"{mcnemar_p(only_a, only_b):.3g}"]
                )
    if not table:
        return []
    return (
        [
            "Sample by sample, after the last round (rows that kept which test samples they got right): test images "
            "only the first run got right / only the second, per domain and in all, and McNemar's exact p (how likely "
            "so uneven a split is if the two models were equally "
            "good on this test set; one test per row, not corrected "
            "for the number of rows, and it does not measure the spread over training seeds).",
            "",
        ]
        + _table(["pair", "seed"] + domains + ["all", "McNemar p"], table)
        + [""]
    )


def _domain_order(names: list[str]) -> list[str]:
    """The datasets' own domain order (the database stores them sorted by name)."""
    from ..data.office_caltech import DOMAINS as OFFICE
    from ..data.pacs import DOMAINS as PACS

    for order in (PACS, OFFICE):
        if set(names) == set(order):
            return list(order)
    return sorted(names)


def _pseudo_domains(main: dict[str, list[dict]]) -> list[str]:
    seeds = {}
    for rs in main.values():
        for r in rs:
            if "pseudo_domains" in r["extra"]:
                seeds[r["seed"]] = (r["extra"]["pseudo_domains"], r["extra"].get("ari"))
    if not seeds:
        return []
    text = "; ".join(f"seed {s}: M = {m}, ARI {a:.3f}" for s, (m, a) in sorted(seeds.items()))
    return [f"Pseudo-domains found by discovery (E0 = 3, layers B, elbow) against the true domains: {text}.", ""]


def _discovery(disc: dict[str, list[dict]]) -> list[str]:
    from ..jdfl.diagnostics import parse

    cells: dict[tuple, list[dict]] = {}
    for name, rs in disc.items():
        cells[parse(name)] = [r["extra"] for r in rs]
    out = [
        "Discovery diagnostics: ARI of the pseudo-domains with M fixed to the true number of domains "
        "(mean over seeds), by E0 (rows), batch size and layer subset "
        "(A head, B last conv + head, C last two convs + head).",
        "",
    ]
    head = ["E0"] + [f"b={b} {lay}" for b in DISCOVERY_GRID["batch"] for lay in DISCOVERY_GRID["layers"]]
    table = []
    for e in DISCOVERY_GRID["e0"]:
        row = [str(e)]
        for b in DISCOVERY_GRID["batch"]:
            for lay in DISCOVERY_GRID["layers"]:
                ex = cells.get((e, b, lay))
                row.append(f"{statistics.fmean(x['ari'] for x in ex):.2f}" if ex else "-")
        table.append(row)
    out += _table(head, table) + [""]
    picks = [x["elbow"] for exs in cells.values() for x in exs]
    true_m = next(x["true_domains"] for exs in cells.values() for x in exs)
    hist = {m: picks.count(m) for m in sorted(set(picks))}
    out += [
        f"The elbow picked M = {true_m} (the true number) in {hist.get(true_m, 0)} of {len(picks)} cells; "
        "picks: " + ", ".join(f"M={m}: {n}" for m, n in hist.items()) + ".",
        "",
    ]
    return out


def _measure(r: dict) -> float | None:
    """The accuracy the claims are judged on: the best round's (the text's measure) where the run
    stored its curve, else the last round's."""
    return (r.get("extra") or {}).get("best_weighted_accuracy", r["weighted_accuracy"])


def _paired(a: list[dict] | None, b: list[dict] | None, seeds: set | None = None, value=_measure) -> list[float]:
    """a minus b, seed by seed, over the seeds both ran (and only `seeds`, where given)."""
    mine, theirs = _by_seed(a, value), _by_seed(b, value)
    return [mine[s] - theirs[s] for s in sorted(mine.keys() & theirs.keys()) if seeds is None or s in seeds]


def _verdict(diffs: list[float], expect_gain: bool = True) -> str:
    """holds: every seed's paired difference has the claimed sign; does not hold: the mean has the
    other sign; mixed: the mean agrees but some seed does not; one seed alone is 'indicative'."""
    if not diffs:
        return "not run"
    sign = 1 if expect_gain else -1
    mean = statistics.fmean(diffs)
    if sign * mean <= 0:
        verdict = "does not hold"
    elif all(sign * d > 0 for d in diffs):
        verdict = "holds"
    else:
        verdict = "mixed"
    return verdict + (" (one seed: indicative)" if len(diffs) == 1 else "")


def _diff_text(diffs: list[float]) -> str:
    if not diffs:
        return "-"
    text = f"{100 * statistics.fmean(diffs):+.1f}"
    if len(diffs) >= 2:
        text += f" ± {100 * statistics.stdev(diffs):.1f}"
    return text + f" pp (n={len(diffs)}; per seed " + ", ".join(f"{100 * d:+.1f}" for d in diffs) + ")"


def _claims(main: dict, ablation: dict, sweep: dict) -> list[str]:
    """Each of the JDFL text's claims with the paired (same-seed) differences it rests on."""
    rows = []
    for b in BASES:
        for s in SCHEMES:
            d = _paired(main.get(f"{b}+{s}"), main.get(b))
            if d:
                rows.append([f"{b} + {s.split('-')[1]} beats {b}", _diff_text(d), _verdict(d)])
    for b in BASES:
        d = _paired(main.get(f"{b}+jdfl-random"), main.get(f"{b}+jdfl-graded"))
        if d:
            better = "random" if b in ("FedAvg", "SCAFFOLD") else "graded"
            rows.append(
                [f"{better} helps {b} more (random minus graded)", _diff_text(d), _verdict(d, better == "random")]
            )
    hard = _paired(ablation.get("FedAvg+expanded-hard"), main.get("FedAvg"))
    if hard:
        hard_seeds = {r["seed"] for r in ablation.get("FedAvg+expanded-hard") or []}
        gains = [g for s in SCHEMES if (g := _paired(main.get(f"FedAvg+{s}"), main.get("FedAvg"), hard_seeds))]
        smaller = bool(gains) and all(statistics.fmean(hard) < statistics.fmean(g) for g in gains)
        verdict = ("holds" if statistics.fmean(hard) <= 0 or smaller else "does not hold") + (
            " (one seed: indicative)" if len(hard) == 1 else ""
        )
        rows.append(
            [
                "the hard head gives no gain (hard minus FedAvg; holds if its mean is <= 0 or below both schemes' "
                "mean gains on the same seeds)",
                _diff_text(hard),
                verdict,
            ]
        )
    for s in SCHEMES:
        ds = {m: _paired(sweep.get(f"FedAvg+{s}(M={m})"), main.get("FedAvg")) for m in JDFL_SLOT_SWEEP}
        ds = {m: d for m, d in ds.items() if d}
        if ds:
            wins = [m for m, d in ds.items() if statistics.fmean(d) > 0]
            rows.append(
                [
                    f"every M in 2..7 beats M = 1 ({s.split('-')[1]}; each M's mean over its seeds)",
                    ", ".join(f"M={m}: {100 * statistics.fmean(d):+.1f}" for m, d in ds.items()) + " pp",
                    (
                        "holds"
                        if len(wins) == len(ds) == len(JDFL_SLOT_SWEEP)
                        else "does not hold"
                        if len(wins) < len(ds)
                        else f"{len(ds)} of {len(JDFL_SLOT_SWEEP)} M run"
                    )
                    + (" (one seed: indicative)" if all(len(d) == 1 for d in ds.values()) else ""),
                ]
            )
    if not rows:
        return []
    return (
        [
            "The JDFL text's claims, judged on paired differences (same seed) of the best-round global accuracy "
            "(the last round's where no curve was stored): *holds* when every seed's difference has the claimed sign, "
            "*mixed* when the mean has it but a seed does not, *does not hold* when the mean has the other sign "
            "(any size counts: read the differences beside the seed spread). The hard-head and M rows judge means, "
            "as their rule says.",
            "",
        ]
        + _table(["claim", "paired difference", "verdict"], rows)
        + [""]
    )
