"""Move the rows whose class-means statistic was 3 projections a class where it is now wider to the
superseded table, so the sweeps run them again (issue 45, stop 67).

`class_means` gives each class mean at least enough projections to make the statistic as wide as the
paper's eigenvalues (stats.class_means_projections): unchanged for 10 labels, 15 projections for a
binary task (E2a, E3a on MNIST/Fashion-MNIST), 10 for a ternary one. Rows of a conditioned method
(one that takes the statistic: Conditional, Conditional-FedAvg) under `statistic=class_means` on such
a task were made with the narrower statistic and are no longer what the cell names. Rows of methods
that ignore the statistic (Oracle, FedAvg, the rivals) are left alone, and so are rows that record the
width they ran with (`statistic_width`, kept from this change on): a second pass moves nothing. The
task's number of labels is read from the scenario the row's experiment builds (data loaded, nothing
trained).

Usage: FEDCOND_DATA=... python scripts/supersede_class_means_few_labels.py DB [DB ...] [--dry-run]
"""

from __future__ import annotations

import argparse
import json
import sys

from fedcond import results
from fedcond.algorithms.names import make_algorithm
from fedcond.experiments import EXPERIMENTS, protocol, scenario_options
from fedcond.stats import PROJECTIONS_PER_CLASS, class_means_projections

REASON = (
    "class_means widened for tasks with few labels (3 -> 15 projections a class for a binary task, 10 for a "
    "ternary one: at least the eigenvalues' 32 numbers); issue 45, stop 67"
)


def labels_of(experiment: str, protocol_name: str) -> int:
    _, fraction = protocol(protocol_name)
    spec = EXPERIMENTS[experiment].spec(0, None, fraction, **scenario_options(protocol_name))
    return spec.build().federation.num_classes


def stale(experiment: str, method: str, protocol_name: str, extra: dict, cache: dict) -> bool:
    if "statistic=class_means" not in protocol_name or experiment not in EXPERIMENTS or "statistic_width" in extra:
        return False
    if not make_algorithm(method).conditioned:
        return False
    key = (experiment, protocol_name)
    if key not in cache:
        proto, _ = protocol(protocol_name)
        cache[key] = class_means_projections(labels_of(experiment, protocol_name), proto.num_eigenvalues)
    return cache[key] != PROJECTIONS_PER_CLASS


def supersede_stale(db: str, dry_run: bool = False, cache: dict | None = None) -> list[str]:
    """The stale rows of `db`, named; moved to its superseded table unless dry_run."""
    cache = {} if cache is None else cache
    con = results.connect(db)
    try:
        rows = con.execute(
            "SELECT id, experiment, method, seed, protocol_name, extra FROM runs WHERE protocol_name LIKE '%class_means%'"
        ).fetchall()
        stale_rows = [r for r in rows if r[1] and stale(r[1], r[2], r[4], json.loads(r[5] or "{}"), cache)]
        if stale_rows and not dry_run:
            ids = tuple(r[0] for r in stale_rows)
            results.supersede(con, f"id IN ({','.join('?' * len(ids))})", ids, REASON)
    finally:
        con.close()
    return [f"{r[1]} {r[2]} seed {r[3]} [{r[4]}]" for r in stale_rows]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dbs", nargs="+")
    ap.add_argument("--dry-run", action="store_true", help="name the rows, move nothing")
    args = ap.parse_args()
    cache: dict = {}
    for db in args.dbs:
        names = supersede_stale(db, args.dry_run, cache)
        for name in names:
            print(f"{db}: {name}")
        print(f"{db}: {len(names)} row(s) {'to supersede' if args.dry_run else 'superseded'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
