"""`fedcond report`: the results report (tables against the published values, figures, the
explanations of cells far from them) of one database, written to a folder."""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import FedcondError


def report_command(args) -> int:
    """The explanations file and the probes database default to those beside the database."""
    from ..report import write_report

    explanations = args.explanations
    if explanations is not None and not os.path.isfile(explanations):
        raise FedcondError(f"no explanations file at {explanations}")
    if explanations is None and args.db:
        explanations = Path(args.db).with_name("explanations.csv")
    probes = args.probes
    if probes is not None and not os.path.isfile(probes):
        raise FedcondError(f"no probes database at {probes}")
    if probes is None and args.db:
        beside = Path(args.db).with_name("probes.sqlite")
        probes = beside if beside.is_file() and beside.resolve() != Path(args.db).resolve() else None
    print(write_report(args.db, args.out, args.protocol, explanations, readme=args.readme, probes=probes))
    return 0
