"""`fedcond report`: the results report (tables against the published values, figures, the
explanations of cells far from them) of one database, written to a folder."""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import FedcondError


def report_command(args) -> int:
    """The explanations file and the probes database default to those beside the database, where
    they exist; a path given that does not exist is an error."""
    from ..report import write_report

    explanations = _given_or_beside(args.explanations, args.db, "explanations.csv", "explanations file")
    probes = _given_or_beside(args.probes, args.db, "probes.sqlite", "probes database")
    print(write_report(args.db, args.out, args.protocol, explanations, readme=args.readme, probes=probes))
    return 0


def _given_or_beside(given: str | None, db: str | None, name: str, what: str) -> Path | None:
    if given is not None:
        if not os.path.isfile(given):
            raise FedcondError(f"no {what} at {given}")
        return Path(given)
    if not db:
        return None
    beside = Path(db).with_name(name)
    # the probes database is never the database itself (a report of probes.sqlite)
    return beside if beside.is_file() and beside.resolve() != Path(db).resolve() else None
