"""`write_report`: the Markdown report and its figures, from the results database and the
published numbers only (never from a run in memory), so any report can be remade from the files."""

from __future__ import annotations

import os
from pathlib import Path

from ..algorithms import PAPER_METHODS
from ..errors import FedcondError
from ..experiments import PROTOCOLS
from . import tables as md
from .adhoc import adhoc_section, protocol_of
from .jdfl import jdfl_section, protocol_probes_section
from .newcomers_table import newcomers_section
from .precision import precision_section
from .readme import summary_lines, update_readme
from .standard import standard_partitions_section
from .data import cells as make_cells
from .data import paper_results, protocol_order, published_tables, read_database, stands_in, with_stand_ins


def read_explanations(path: str | Path | None) -> dict:
    """(experiment, method) -> explanation text; method '*' covers every method of the experiment.
    A CSV with columns experiment, method, explanation; a missing file explains nothing."""
    import csv

    if path is None or not Path(path).is_file():
        return {}
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        missing = {"experiment", "method", "explanation"} - set(reader.fieldnames or ())
        if missing:
            raise FedcondError(
                f"explanations file {path}: no column {', '.join(sorted(missing))} "
                "(expected experiment, method, explanation)"
            )
        out = {}
        for n, r in enumerate(reader, start=2):
            if any(r.get(k) is None for k in ("experiment", "method", "explanation")):
                raise FedcondError(f"explanations file {path}, line {n}: fewer than three fields")
            out[(r["experiment"].strip(), r["method"].strip())] = r["explanation"].strip()
        return out


def write_report(
    db_path: str | Path | None,
    out_dir: str | Path,
    protocol_name: str | None = None,
    explanations: str | Path | None = None,
    readme: str | Path | None = None,
    probes: str | Path | None = None,
) -> Path:
    """Write `out_dir/report.md` and its PNG figures; return the report's path. With `readme`, also
    refill that file's reproduction-summary block (readme.py) for `protocol_name`. With `probes` (a
    results database of reading probes), add the "Readings probed" section (readings.py).

    One section per protocol in the database (a smoke run is labelled as such in every heading,
    never presented as a reproduction), or only `protocol_name`'s. A protocol that the database
    holds no run of is refused unless it is a preset name (its report then shows every cell as
    not run)."""
    from .figures import draw_all  # matplotlib only when drawing

    if readme is not None and protocol_name is None:
        raise FedcondError("--readme summarises one protocol: give --protocol too (e.g. --protocol paper)")
    db = read_database(db_path)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ok, failed = db.ok, db.failed
    seen = set(db.protocols) | {protocol_of(r) for r in db.ad_hoc_ok}  # ad-hoc runs: named as a sweep would
    if protocol_name is not None:
        if protocol_name not in seen and protocol_name not in PROTOCOLS:
            held = ", ".join(sorted(str(p) for p in seen)) or "none"
            raise FedcondError(
                f"results database {db.path} holds no run of protocol '{protocol_name}' (it holds: {held})"
            )
        ok = [r for r in ok if r["protocol_name"] == protocol_name]
        failed = [r for r in failed if r["protocol_name"] == protocol_name]
        groups = [protocol_name]
    else:
        groups = sorted({r["protocol_name"] for r in ok + failed if r["experiment"] is not None}, key=protocol_order)
    # the control sits beside paper's Conditional and a stand-in variant (data.STAND_IN_OPTIONS) fills
    # paper's cells it has no run of: both are read even when only `paper` is reported
    beside = (
        [
            r
            for r in db.ok
            if r["protocol_name"] == md.CONTROL or stands_in(r["protocol_name"], experiment=r["experiment"])
        ]
        if protocol_name == "paper"
        else []
    )
    cells = with_stand_ins(make_cells(ok + beside, failed))
    published = published_tables(paper_results())
    why = read_explanations(explanations)

    lines = md.header(db, protocol_name)
    legend_at, shows_published = len(lines), False
    runs_exist = bool(groups) and (protocol_name is None or bool(ok or failed))
    if not runs_exist:
        adhoc = len(db.ad_hoc_ok)  # `fedcond run` rows: reported below, but they fill no published cell
        lines += [
            ("No registry experiment has been run yet" if adhoc else "No experiment has been run yet")
            + (f" under {md.protocol_label(protocol_name)}" if protocol_name else "")
            + ": the paper's tables show the published numbers only"
            + (f"; {adhoc} ad-hoc run{'s' * (adhoc != 1)} of `fedcond run` under Ad-hoc runs." if adhoc else "."),
            "",
        ]
        groups = groups or [None]
    if len(groups) > 1:
        lines += [
            "The database holds several protocols: "
            + ", ".join(md.protocol_label(p) for p in groups)
            + "; each has its own tables and figures below.",
            "",
        ]
    for p in groups:
        label = md.protocol_label(p) if runs_exist else (f"{md.protocol_label(p)}, no runs yet" if p else "no runs yet")
        lines += [f"## Results, {label}", ""]
        note = md.reproduction_note(p) if runs_exist else ""
        if note:
            lines += [note, ""]
        tables = [line for t in published for line in md.published_table(t, p, cells, label)]
        unpublished = md.unpublished(p, cells, PAPER_METHODS, label)
        # the paper's sections and figures: for another protocol (jdfl, smoke, a variant) only
        # where it ran a paper experiment, else they would all read "not run"
        paper_sections = bool(tables or unpublished) or md.shows_every_table(p)
        shows_published |= paper_sections
        if paper_sections:
            lines += tables
            lines += md.gaps_section(published, p, cells, why, label)
            lines += unpublished
            lines += md.control_section(p, cells, published)
            lines += md.ari_section(p, cells, label)
        lines += md.study_section(p, cells, label)
        lines += jdfl_section(p, ok, label, out, why)
        if not paper_sections:
            continue
        lines += [f"### Figures, {label}", ""]
        for f in draw_all(published, p, cells, out):
            if f.path is None:
                lines += [f"- {f.title}: skipped, {f.note}.", ""]
            else:
                rel = os.path.relpath(f.path, out)
                lines += [f"![{f.title}, {label}]({rel})", "", f"*{f.title}: {f.note}.*", ""]
    if shows_published:
        lines[legend_at:legend_at] = md.cells_legend()
    has_default = any(r["protocol_name"] == "paper" for r in db.ok)  # the rows a probe is compared with
    if probes is not None and protocol_name in (None, "paper") and has_default:
        from .readings import readings_section

        lines += readings_section(read_database(probes).ok, db.ok, published)
    if protocol_name in (None, "paper"):  # bf16 rows live under their own variant: read from every row
        lines += precision_section(db.ok)
    lines += standard_partitions_section(make_cells(db.ok, db.failed), out)
    lines += adhoc_section(list(db.ad_hoc_ok), protocol_name, out)
    newcomers = newcomers_section(ok)
    if newcomers:
        from .newcomers import draw_seen_unseen

        picture = draw_seen_unseen(ok, out)
        if picture is not None:
            newcomers += [
                f"![seen against unseen accuracy]({picture.name})",
                "",
                "*Every configuration with clients held out: the training clients' accuracy (x) against the "
                "newcomers' (y), mean over seeds; on the dashed line newcomers are served as well as the clients "
                "the model trained on. Methods whose models belong to the training clients (Local, Ditto) have no "
                "point. The legend gives each method's budget as measured: its rounds, and the samples a training "
                "client trained on against FedAvg's in the same configuration (mean over configurations).*",
                "",
            ]
    lines += newcomers
    lines += protocol_probes_section(ok, out)
    lines += md.walltime_section(ok + beside)  # every row a table above reads
    lines += md.superseded_section(db.superseded)
    lines += md.failed_section(failed)
    path = out / "report.md"
    path.write_text("\n".join(lines).rstrip("\n") + "\n", encoding="utf-8")
    if readme is not None:
        update_readme(readme, summary_lines(published, protocol_name, cells, why))
    return path
