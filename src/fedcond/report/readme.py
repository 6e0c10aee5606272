"""The README's few lines on where the reproduction stands, made from the same database and
explanations as the report, written between two markers so that `fedcond report --readme` can
redo them after every campaign session (never typed by hand)."""

from __future__ import annotations

from pathlib import Path

from ..errors import FedcondError
from . import tables as md

BEGIN = "<!-- reproduction summary: begin (fedcond report --readme) -->"
END = "<!-- reproduction summary: end -->"


def summary_lines(published: list, protocol: str | None, cells: dict, explanations: dict) -> list[str]:
    """Per published table: cells run, mean and mean absolute difference; then the cells beyond
    GAP_PP, each with the head of its explanation."""
    rows = []
    for t in published:
        diffs = md.table_differences(t, protocol, cells)
        mean, mean_abs = md.mean_differences(diffs) if diffs else ("-", "-")
        rows.append([f"{t.table} ({md.table_title(t)})", f"{len(diffs)} of {len(t.values)}", mean, mean_abs])
    lines = md._table(["published table", "cells run", "mean difference", "mean absolute difference"], rows) + [""]
    gaps = md.gap_rows(published, protocol, cells, explanations)
    shown = [cells.get((protocol, e, m)) for t in published for _, _, e in t.rows if e for m in t.methods]
    note = md.stand_in_note(shown)
    footnote = [""] + note[:-1] if note else []  # the README block ends without a blank line
    if not gaps:
        return lines + [f"No cell run is more than {md.GAP_PP:g} pp from its published value."] + footnote
    items = []
    for table, exp, method, ours, pub, diff, _spread, why in gaps:
        reason = "unexplained" if why.startswith(md.UNEXPLAINED) else md.explanation_head(why)
        items.append(f"{exp} {method} {ours} against {pub} ({diff}; {reason})")
    return (
        lines
        + [
            f"More than {md.GAP_PP:g} pp from the published value: {md.gap_counts(gaps)}. Their explanations, "
            "with the evidence, are in `docs/results/explanations.csv`; in short: " + "; ".join(items) + "."
        ]
        + footnote
    )


def update_readme(path: str | Path, lines: list[str]) -> None:
    """Replace what stands between BEGIN and END in `path` by `lines`; the rest is left as it is."""
    path = Path(path)
    if not path.is_file():
        raise FedcondError(f"no README at {path}")
    text = path.read_text(encoding="utf-8")
    start, stop = text.find(BEGIN), text.find(END)
    if start < 0 or stop < start:
        raise FedcondError(f"{path} has no '{BEGIN}' ... '{END}' block to fill")
    body = "\n".join([BEGIN, *lines, END])
    path.write_text(text[:start] + body + text[stop + len(END) :], encoding="utf-8")
