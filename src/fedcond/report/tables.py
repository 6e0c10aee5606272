"""The report's Markdown: a header on the database, one table per published table and protocol
(ours beside the published number and the difference), our experiments without a published
table, the clustering ARI where recorded, and the failed runs with their reasons.

Numbers are accuracy in percent (mean over clients, as the paper reports), one decimal; a
difference is ours minus published, in percentage points (pp).
"""

from __future__ import annotations

import re
import statistics

from ..experiments import EXPERIMENTS
from ..scenarios.families import STANDARD
from . import seed_spread
from .data import (
    Cell,
    Database,
    PublishedTable,
    experiment_order,
    method_order,
    protocol_order,
    published_tables,
    stand_in_reasons,
)

NOT_RUN = "not run"

FAMILY_TITLES = {
    "E1": "label shift",
    "E2a": "covariate shift by subclasses",
    "E2b": "covariate shift by rotation",
    "E3a": "semantic concept shift",
    "E3b": "concept shift by label permutation",
    "E4a": "cross-dataset shift",
    "E4b": "combined shift",
    "dirichlet": "Dirichlet label skew",
    "pathological": "k-class pathological label skew",
    "shards": "label-sorted shards",
    "quantity": "quantity skew",
}


def pct(x: float) -> str:
    return f"{100 * x:.1f}"


def pp(diff: float) -> str:
    return f"{100 * diff:+.1f} pp"


def _esc(text) -> str:
    """A Markdown table cell: no pipes, no line breaks."""
    return str(text).replace("|", "\\|").replace("\r", " ").replace("\n", " ").strip()


def protocol_label(p: str | None) -> str:
    """How a protocol is named in every heading and figure title: any protocol but the paper's
    says it is not a reproduction; a variant of the paper's names what it changed."""
    for preset in ("paper", "jdfl"):  # the reproductions' own protocols (SPEC A.4; SPEC C.5 with our choices)
        if p == preset:
            return f"protocol `{preset}`"
        if p is not None and p.startswith(preset + "["):
            return f"protocol `{preset}` with {p[len(preset) + 1 : -1]}"
    return f"protocol `{p}` (not a reproduction)" if p is not None else "no protocol recorded (not a reproduction)"


def reproduction_note(p: str | None) -> str:
    if p == "paper":
        return ""
    if p == "jdfl":
        return (
            "JDFL's protocol: the text's SGD with learning rate 0.01 and no weight decay; momentum and the number "
            "of rounds, which the text leaves to an appendix we do not have, were chosen by probes of FedAvg on PACS "
            "(docs/choices.md). Every round is evaluated: tables give the best round (the text's measure) and the last."
        )
    if p is not None and p.startswith("jdfl["):
        return (
            f"**JDFL's protocol with one or more settings changed ({p[len('jdfl[') : -1]}): a probe or variant, "
            f"not the main tables.**"
        )
    if p is not None and p.startswith("paper["):
        return (
            f"**The paper's protocol with one or more settings changed ({p[len('paper[') : -1]}): a documented "
            f"variant or control, shown beside the published numbers for comparison, not as the reproduction "
            f"itself.**"
        )
    name = f"Protocol `{p}`" if p is not None else "A run without a recorded protocol"
    return (
        f"**{name} is not the paper's protocol: these numbers test the pipeline and are not a "
        f"reproduction of the published ones.**"
    )


STAND_IN_MARK = "†"


def ours_text(cell: Cell | None) -> str | None:
    """'97.5 ± 0.7' (spread = sample std over seeds, shown from two seeds on), or None when no seed
    finished; a stand-in variant's cell carries STAND_IN_MARK."""
    if cell is None or cell.mean is None:
        return None
    mark = f" {STAND_IN_MARK}" if cell.stand_in else ""
    return pct(cell.mean) + (f" ± {pct(cell.std)}" if cell.std is not None else "") + mark


def stand_in_note(shown: list[Cell | None]) -> list[str]:
    """The footnote for the stand-in cells among `shown` (none: no lines)."""
    variants = sorted({c.stand_in for c in shown if c is not None and c.stand_in and c.mean is not None})
    if not variants:
        return []
    reasons = list(dict.fromkeys(why for v in variants for why in stand_in_reasons(v)))
    return [
        f"{STAND_IN_MARK} Run under " + ", ".join(f"`{v}`" for v in variants) + ": " + "; ".join(reasons) + ". "
        "This documented stand-in (docs/choices.md) fills the cell and counts toward the table.",
        "",
    ]


def _failed_note(cell: Cell | None) -> str:
    return f"{cell.failed} seed{'s' if cell.failed > 1 else ''} failed" if cell is not None and cell.failed else ""


def cell_text(cell: Cell | None, published: float | None) -> str:
    """'ours (published, ±diff pp)', where seeds failed too 'ours (published, ±diff pp; 1 seed failed)';
    with no finished seed 'not run (published)' or 'failed ×n (published)'."""
    ours = ours_text(cell)
    if ours is None:
        status = f"failed ×{cell.failed}" if cell is not None and cell.failed else NOT_RUN
        return status if published is None else f"{status} ({pct(published)})"
    failed = _failed_note(cell)
    if published is None:
        return f"{ours} ({failed})" if failed else ours
    return f"{ours} ({pct(published)}, {pp(cell.mean - published)}{'; ' + failed if failed else ''})"


def _seeds_text(cs: list[Cell | None]) -> str:
    ns = sorted({c.n for c in cs if c is not None and c.n})
    if not ns:
        return "-"
    return str(ns[0]) if len(ns) == 1 else f"{ns[0]}-{ns[-1]}"


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(_esc(h) for h in head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(_esc(c) for c in row) + " |" for row in rows]
    return lines


def _rows(n: int) -> str:
    return f"{n} row{'' if n == 1 else 's'}"


def header(db: Database, protocol_filter: str | None) -> list[str]:
    ok_named = len(db.ok)
    lines = [
        "# fedcond results report",
        "",
        f"- Database: `{db.path}`",
        f"- Rows: {db.total} ({ok_named} finished experiment runs, {len(db.failed)} failed, "
        f"{db.ad_hoc} ad-hoc runs without an experiment name" + (", under Ad-hoc runs)" if db.ad_hoc_ok else ")"),
        "- Protocols: "
        + (
            ", ".join(
                f"`{p}` ({_rows(n)})" if p else f"none recorded ({_rows(n)})"
                for p, n in sorted(db.protocols.items(), key=lambda kv: protocol_order(kv[0]))
            )
            or "none"
        ),
        "- Git revisions: "
        + (", ".join(f"`{rev[:12]}` ({_rows(n)}, {a} to {b})" for rev, (n, a, b) in db.git_revs.items()) or "none"),
    ]
    if protocol_filter is not None:
        lines.append(f"- Reported: {protocol_label(protocol_filter)} only")
    return lines + [""]


def cells_legend() -> list[str]:
    """How to read a published table's cells; only a report that shows one needs it (JDFL's tables
    say their own measure)."""
    return [
        "Cells read *ours (published, difference)*: accuracy in %, the mean over clients; ours is the mean over "
        "seeds, with ± the sample standard deviation over seeds where there are several; the difference is ours "
        "minus published in percentage points. *not run* keeps the published value in parentheses.",
        "",
    ]


def shows_every_table(protocol: str | None) -> bool:
    """`paper` (the reproduction's target, or no protocol yet) lists every published table and
    section, run or not, so progress shows; any other protocol (smoke, jdfl, a variant `paper[...]`)
    only what it ran: the rest would repeat the published numbers as "not run"."""
    return protocol in (None, "paper")


def mean_differences(diffs: list[float]) -> tuple[str, str]:
    """(mean difference, mean absolute difference) of ours minus published, as text in pp."""
    return pp(sum(diffs) / len(diffs)), f"{100 * sum(abs(d) for d in diffs) / len(diffs):.1f} pp"


def table_title(t: PublishedTable) -> str:
    family = FAMILY_TITLES.get(t.family, "")
    return f"{t.family}{' ' + family if family else ''}"


def table_differences(t: PublishedTable, protocol: str | None, cells: dict) -> list[float]:
    """Ours minus published (fractions) for every published cell of `t` that we ran."""
    out = []
    for dataset, setting, exp in t.rows:
        for m in t.methods:
            c = cells.get((protocol, exp, m)) if exp else None
            pub = t.values.get((dataset, setting, m))
            if c is not None and c.mean is not None and pub is not None:
                out.append(c.mean - pub)
    return out


def published_table(t: PublishedTable, protocol: str | None, cells: dict, label: str) -> list[str]:
    """One published table under one protocol. Methods beyond the paper's that we ran on these
    settings get extra columns (ours only). Under a protocol that does not show every table (a
    variant, smoke, jdfl), a table none of whose cells it ran is left out, and so is each of its
    rows (configurations) the protocol did not run: the rest would only repeat the published numbers."""
    exps = set(t.experiments)
    ran_cells = [(e, m) for (p, e, m) in cells if p == protocol and e in exps]
    ran, ours_methods = {e for e, _ in ran_cells}, {m for _, m in ran_cells}
    every = shows_every_table(protocol)
    if not ours_methods and not every:
        return []
    extra = sorted(ours_methods - set(t.methods), key=method_order)
    methods = list(t.methods) + extra
    shown_rows = [r for r in t.rows if every or r[2] in ran]
    rows = []
    for dataset, setting, exp in shown_rows:
        cs = [cells.get((protocol, exp, m)) if exp else None for m in methods]
        row = [dataset, setting, _seeds_text(cs)]
        for m, c in zip(methods, cs):
            row.append(cell_text(c, t.values.get((dataset, setting, m))))
        rows.append(row)
    lines = [f"### Table {t.table}: {table_title(t)}, {label}", ""]
    diffs = table_differences(t, protocol, cells)
    summary = f"{len(diffs)} of {len(t.values)} published cells run"
    if diffs:
        mean, mean_abs = mean_differences(diffs)
        summary += f"; mean difference {mean}, mean absolute difference {mean_abs}"
    if len(shown_rows) < len(t.rows):
        summary += f"; only the {len(shown_rows)} of its {len(t.rows)} configurations this protocol ran are shown"
    lines += [summary + ".", ""]
    head = ["dataset", "setting", "seeds"] + [m if m in t.methods else f"{m} (not in paper)" for m in methods]
    shown = [cells.get((protocol, exp, m)) for _, _, exp in shown_rows if exp for m in methods]
    return lines + _table(head, rows) + [""] + stand_in_note(shown)


GAP_PP = 3.0  # a cell this far (percentage points) from its published value is listed with its explanation
UNEXPLAINED = "**unexplained**"  # an explanations.csv text may start with "unexplained" and give what was measured


def gap_counts(rows: list[list[str]]) -> str:
    """'N cells; U unexplained; R explained by a reading other than the default': a text starting "reading" says a
    probe under another reading matches (or brackets) the published value, which the default does not. Where
    some unexplained cell has the published value inside our seeds' prediction interval, the count says so
    (a measurement beside the labels, which it does not change)."""
    unexplained = [r for r in rows if r[-1].startswith(UNEXPLAINED)]
    by_reading = sum(r[-1].lower().startswith("reading") for r in rows)
    cells = f"{len(rows)} cell" + ("" if len(rows) == 1 else "s")
    text = f"{cells}; {len(unexplained)} unexplained; {by_reading} explained by a reading other than the default"
    inside = sum(r[-2].startswith("inside") for r in unexplained)
    if inside:
        text += (
            f" (of the unexplained, {inside} with the published value inside our seeds' "
            f"{100 * seed_spread.LEVEL:g}% prediction interval)"
        )
    return text


def explanation_head(why: str) -> str:
    """An explanation's first clause, for one-line lists: up to its first ';' or ':', less a parenthesis
    that the cut leaves open ("Reading of the loader (issue 40; ..." gives "Reading of the loader")."""
    head = re.split("[;:]", why, maxsplit=1)[0]
    unclosed: list[int] = []  # where each "(" still open opened
    for i, ch in enumerate(head):
        if ch == "(":
            unclosed.append(i)
        elif ch == ")" and unclosed:
            unclosed.pop()
    return head[: unclosed[0] if unclosed else len(head)].rstrip()


def gap_rows(published: list, protocol: str | None, cells: dict, explanations: dict) -> list[list[str]]:
    """[table, experiment, method, ours, published, difference, seed interval, explanation] for every run
    cell more than GAP_PP from its published value; the seed interval says whether the published value
    lies inside the interval one more seed of ours would fall in (seed_spread.verdict); the explanation
    comes from the explanations file (experiment, method -> text with its evidence) or is UNEXPLAINED."""
    rows, seen = [], set()
    for t in published:
        for dataset, setting, exp in t.rows:
            for m in t.methods:
                c = cells.get((protocol, exp, m)) if exp else None
                pub = t.values.get((dataset, setting, m))
                if c is None or c.mean is None or pub is None or (exp, m) in seen:
                    continue
                seen.add((exp, m))  # a setting in two tables is listed once
                diff = c.mean - pub
                if abs(diff) * 100 > GAP_PP:
                    why = explanations.get((exp, m)) or explanations.get((exp, "*")) or UNEXPLAINED
                    if why.lower().startswith("unexplained"):  # measured, yet no reading or probe accounts for it
                        why = UNEXPLAINED + why[len("unexplained") :]
                    spread = seed_spread.verdict(c.accuracies, pub)
                    rows.append([f"{t.table}", exp, m, ours_text(c), f"{100 * pub:.1f}", pp(diff), spread, why])
    return rows


def gaps_section(published: list, protocol: str | None, cells: dict, explanations: dict, label: str) -> list[str]:
    rows = gap_rows(published, protocol, cells, explanations)
    lines = [f"### Cells more than {GAP_PP:g} pp from the published value, {label}", ""]
    if not rows:
        return lines + ["None among the cells run.", ""]
    lines += [
        f"{gap_counts(rows)}. Explanations come from `docs/results/explanations.csv` and name their evidence; "
        "one explained by a reading is matched by a probe under a reading the default does not take, because "
        "the fit over every cell that reading affects chose the default (`docs/choices.md`). The column "
        f"before it is computed: where one more seed of ours would fall with probability {100 * seed_spread.LEVEL:g}% "
        "(mean +- t * sd * sqrt(1 + 1/n), from three seeds or more), and whether the published value, one run, "
        "lies inside. It is wide at three seeds (about 5 sd either side) and does not change the labels.",
        "",
    ]
    head = [
        "table",
        "experiment",
        "method",
        "ours",
        "published",
        "difference",
        f"published in our seeds' {100 * seed_spread.LEVEL:g}% prediction interval",
        "explanation",
    ]
    return lines + _table(head, rows) + [""] + stand_in_note([cells[(protocol, exp, m)] for _, exp, m, *_ in rows])


def unpublished(protocol: str | None, cells: dict, methods_default: tuple[str, ...], label: str) -> list[str]:
    """Our experiments without a published table: the registry's (E2b, E4a), every one listed so
    progress shows, and any experiment name the registry does not know."""
    names = [
        e.name
        for e in EXPERIMENTS.values()  # JDFL, the earlier study, the standard partitions: their own sections
        if not e.tables and e.kind == "train" and not e.name.startswith("JDFL/") and e.family not in STANDARD
    ]
    own = ("MCDC/", "JDFL/", *(f"{f}/" for f in STANDARD))
    unknown = sorted(
        {e for (p, e, m) in cells if p == protocol and e not in EXPERIMENTS and not e.startswith(own)},
        key=experiment_order,
    )
    names += unknown
    wanted = set(names)
    ran = {m for (p, e, m) in cells if p == protocol and e in wanted}
    if not ran and not shows_every_table(protocol):
        return []
    methods = sorted(set(methods_default) | ran, key=method_order)
    rows = []
    for name in names:
        cs = [cells.get((protocol, name, m)) for m in methods]
        note = " (not in the registry)" if name in unknown else ""
        rows.append([name + note, _seeds_text(cs)] + [cell_text(c, None) for c in cs])
    lines = [f"### Experiments without a published table, {label}", ""]
    shown = [cells.get((protocol, name, m)) for name in names for m in methods]
    return lines + _table(["experiment", "seeds"] + methods, rows) + [""] + stand_in_note(shown)


CONTROL = "paper[statistic=random]"


def control_section(protocol: str | None, cells: dict, published: list) -> list[str]:
    """The random-vector control (protocol paper[statistic=random]: Conditional fed a random vector
    per client instead of its statistics) beside Conditional with the eigenvalues and the Oracle."""
    from .data import published_for

    if protocol != "paper":
        return []
    names = sorted({e for (p, e, m) in cells if p == CONTROL and m == "Conditional"}, key=experiment_order)
    if not names:
        return []
    rows = []
    for name in names:
        eig, rnd, oracle = (
            cells.get(k)
            for k in (("paper", name, "Conditional"), (CONTROL, name, "Conditional"), ("paper", name, "Oracle"))
        )
        pub = published_for(published, name, "Conditional")
        rows.append(
            [
                name,
                cell_text(eig, None),
                cell_text(rnd, None),
                cell_text(oracle, None),
                f"{100 * pub:.1f}" if pub is not None else "-",
            ]
        )
    return (
        [
            "### Control: Conditional with a random vector per client (no data), protocol `paper`",
            "",
            "The random vector is drawn from the seed and the client's id, has the statistics' dimension and is "
            "z-scored the same way. What it scores, a model can reach by telling clients apart alone.",
            "",
        ]
        + _table(
            [
                "experiment",
                "Conditional (eigenvalues)",
                "Conditional (random vector)",
                "Oracle",
                "published Conditional",
            ],
            rows,
        )
        + [""]
    )


def ari_section(protocol: str | None, cells: dict, label: str) -> list[str]:
    rows = [[e, m, _mean_std(c.ari), str(len(c.ari))] for (p, e, m), c in cells.items() if p == protocol and c.ari]
    lines = [f"### Cluster recovery (adjusted Rand index), {label}", ""]
    if not rows:
        return lines + ["No run of this protocol recorded an ARI (IFCA records one).", ""]
    lines += ["ARI of the final cluster assignment against the true clusters (1 = exact), mean ± std over seeds.", ""]
    return lines + _table(["experiment", "method", "ARI", "seeds"], rows) + [""]


def _mean_std(values: tuple[float, ...]) -> str:
    mean = statistics.fmean(values)
    return f"{mean:.3f}" if len(values) < 2 else f"{mean:.3f} ± {statistics.stdev(values):.3f}"


def recorded_cpu(r: dict) -> float | None:
    """A row's recorded CPU time (`extra.cpu_seconds`, every process of the run); None for rows without."""
    cpu = (r.get("extra") or {}).get("cpu_seconds")
    return None if cpu is None else float(cpu)


def core_seconds(r: dict) -> float:
    """What a row cost on the CPU: its recorded CPU time, else its wall time, an upper bound (it also holds
    whatever else shared the cores, or a paused process)."""
    cpu = recorded_cpu(r)
    return cpu if cpu is not None else float(r.get("seconds") or 0)


def _cpu_minutes(cpu: list[float], rows: int) -> str:
    """The summed CPU minutes of the rows that recorded them, and how many those are where not all did."""
    if not cpu:
        return "-"
    return f"{sum(cpu) / 60:.0f}" + (f" ({len(cpu)} row{'s' * (len(cpu) != 1)})" if len(cpu) < rows else "")


def walltime_section(ok: list[dict]) -> list[str]:
    """Per experiment and protocol: the cells run, their wall and CPU time and the CPUs they ran on (the
    same machine kind can be an AVX-512 or an AVX2 CPU, and times differ between them)."""
    groups: dict[tuple, list[dict]] = {}
    for r in ok:
        groups.setdefault((r["protocol_name"], r["experiment"]), []).append(r)
    if not groups:
        return []
    table = []
    for (p, exp), rs in sorted(
        groups.items(), key=lambda kv: (protocol_order(kv[0][0]), experiment_order(kv[0][1] or ""))
    ):
        secs = [r["seconds"] for r in rs if r.get("seconds") is not None]
        cpu = [c for c in map(recorded_cpu, rs) if c is not None]
        slowest = max(rs, key=lambda r: r.get("seconds") or 0)
        cpus = sorted({(r.get("versions") or {}).get("cpu", "not recorded") for r in rs})
        table.append(
            [
                p or "-",
                exp,
                str(len(rs)),
                f"{sum(secs) / 60:.0f}",
                _cpu_minutes(cpu, len(rs)),
                f"{slowest['method']} ({(slowest.get('seconds') or 0) / 60:.0f})",
                "; ".join(cpus),
            ]
        )
    total = sum(core_seconds(r) for r in ok) / 3600
    timed = sum(recorded_cpu(r) is not None for r in ok)
    return (
        [
            "## Wall time per configuration",
            "",
            f"Rows (cells and seeds) per experiment and protocol, their summed wall time in minutes, the CPU time "
            f"of the rows that recorded it, the slowest method, and the CPU (rows made before the CPU was recorded "
            f"say so). In all: {len(ok)} rows, {total:.1f} core-hours. A row's core-hours are its CPU time where it "
            f"recorded one ({timed} of {len(ok)} rows: every process of the run, whatever else shared the cores), "
            f"else its wall time, which includes whatever else shared the machine's cores and any time its process "
            f"was paused (SIGSTOP), an upper bound.",
            "",
        ]
        + per_table_walltime(ok)
        + _table(["protocol", "experiment", "rows", "minutes", "CPU minutes", "slowest (minutes)", "CPU"], table)
        + [""]
    )


def per_table_walltime(ok: list[dict]) -> list[str]:
    """Core-hours (core_seconds) per published table and protocol, and the CPUs they ran on; a configuration
    that two tables print (E1 K=2 rich: X and XI) counts in both, so the column adds up to more than the total."""
    groups: dict[tuple, list[dict]] = {}
    for r in ok:
        exp = EXPERIMENTS.get(r["experiment"] or "")
        for t in exp.tables if exp is not None and exp.tables else ("no published table",):
            groups.setdefault((r["protocol_name"], t), []).append(r)
    if not groups:
        return []
    index = {t.table: k for k, t in enumerate(published_tables())}  # the report's table order (X, XI, ... XXI)
    body = []
    for (p, t), rs in sorted(
        groups.items(), key=lambda kv: (protocol_order(kv[0][0]), index.get(kv[0][1], len(index)), kv[0][1])
    ):
        cpus = sorted({(r.get("versions") or {}).get("cpu", "not recorded") for r in rs})
        hours = sum(core_seconds(r) for r in rs) / 3600
        body.append([p or "-", t, str(len(rs)), f"{hours:.1f}", "; ".join(cpus)])
    return (
        ["Per published table (a configuration two tables print counts in both):", ""]
        + _table(["protocol", "table", "rows", "core-hours", "CPU"], body)
        + ["", "Per configuration:", ""]
    )


def superseded_section(gone) -> list[str]:
    """Rows made under defaults that have changed since: not in any table above; why, and how many."""
    if not gone:
        return []
    return (
        [
            "## Superseded rows",
            "",
            "Made under a default that has since changed; kept in the database's "
            "`superseded` table and left out of every table and figure (a sweep of those cells runs them under the "
            "current default):",
            "",
        ]
        + [f"- {n} row{'s' if n != 1 else ''}: {reason}" for reason, n in gone]
        + [""]
    )


def failed_section(failed: list[dict]) -> list[str]:
    lines = ["## Failed runs", ""]
    if not failed:
        return lines + ["None.", ""]
    rows = [
        [
            r["protocol_name"] or "-",
            r["experiment"] or "(ad hoc)",
            r["method"],
            str(r["seed"]),
            r["error"] or "(no reason recorded)",
            (r["git_rev"] or "")[:12],
            r["created_at"],
        ]
        for r in sorted(
            failed,
            key=lambda r: (
                protocol_order(r["protocol_name"]),
                experiment_order(r["experiment"] or ""),
                method_order(r["method"]),
                r["seed"],
                r["id"],
            ),
        )
    ]
    return lines + _table(["protocol", "experiment", "method", "seed", "error", "git revision", "when"], rows) + [""]


def study_section(protocol: str | None, cells: dict, label: str) -> list[str]:
    """The earlier study (SPEC Part B, `MCDC/...`): RMSE for linear regression (lower is better),
    accuracy in % for logistic regression and EMNIST; mean over seeds."""
    from ..study import EXPERIMENTS as STUDY

    names = [n for n in STUDY if any(p == protocol and e == n for (p, e, m) in cells)]
    lines = [f"### The earlier study (synthetic tasks, EMNIST), {label}", ""]
    if not names:
        return lines + ["No run of this protocol.", ""] if shows_every_table(protocol) else []
    for name in names:
        exp = STUDY[name]
        rmse = exp.task == "linreg"
        values = []
        for m in exp.methods:
            c = cells.get((protocol, name, m))
            if c is None or c.mean is None:
                values.append(NOT_RUN)
            else:
                values.append(f"{c.mean:.4f}" if rmse else pct(c.mean))
        lines += [f"`{name}` ({'RMSE, lower is better' if rmse else 'accuracy, %'})", ""]
        lines += _table(list(exp.methods), [values]) + [""]
    return lines
