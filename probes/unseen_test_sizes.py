"""The newcomers' test-set sizes, written into the rows that kept their accuracies only (issue 45).

Rows from before `unseen_test_hits` (holdout.evaluate_unseen) keep each newcomer's accuracy but not
how many test samples it holds, so a gap of a few percentage points cannot be read as a number of
images. The held-out clients are fixed by the experiment, the seed and the protocol (the scenario is
built as the row's run built it; `--holdout-clients` takes the last clients of every cluster), so
their sizes can be rebuilt without training anything. This writes them as `unseen_test_sizes` into
each such row's `extra`, after checking that every accuracy is a whole number of those samples
(a row that fails the check is left alone and named). Rows that kept their hits are not touched.

Usage: FEDCOND_DATA=... python probes/unseen_test_sizes.py docs/results/rivals.sqlite [--dry-run]
"""

from __future__ import annotations

import argparse
import json
import sys

from fedcond import results
from fedcond.experiments import EXPERIMENTS, protocol, scenario_options
from fedcond.holdout import float32_accuracy, hold_out


def sizes_for(experiment: str, seed: int, protocol_name: str) -> list[int]:
    proto, fraction = protocol(protocol_name)
    spec = EXPERIMENTS[experiment].spec(seed, None, fraction, **scenario_options(protocol_name))
    _, unseen = hold_out(spec.build(), proto.holdout_clients)
    return [int(c.n_test) for c in unseen.clients]


def whole(accuracies: list[float], sizes: list[int]) -> bool:
    """Each accuracy is k / n in float32 for a whole k (how evaluate_unseen computed it)."""
    return all(float32_accuracy(round(a * n), n) == a for a, n in zip(accuracies, sizes))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("db")
    ap.add_argument("--dry-run", action="store_true", help="say what would be written, write nothing")
    args = ap.parse_args()
    con = results.connect(args.db)
    rows = con.execute(
        "SELECT id, experiment, seed, protocol_name, method, extra FROM runs "
        "WHERE status = 'ok' AND experiment IS NOT NULL"
    ).fetchall()
    built: dict[tuple, list[int]] = {}
    written = refused = 0
    for row_id, experiment, seed, protocol_name, method, extra_text in rows:
        extra = json.loads(extra_text)
        if "unseen_per_client" not in extra or "unseen_test_hits" in extra or "unseen_test_sizes" in extra:
            continue
        key = (experiment, seed, protocol_name)
        if key not in built:
            built[key] = sizes_for(*key)
        sizes = built[key]
        if len(sizes) != len(extra["unseen_per_client"]) or not whole(extra["unseen_per_client"], sizes):
            print(f"not written: {experiment} {method} seed {seed}: its accuracies are not whole counts of {sizes}")
            refused += 1
            continue
        print(f"{experiment} {method} seed {seed}: unseen_test_sizes {sizes}")
        if not args.dry_run:
            extra["unseen_test_sizes"] = sizes
            con.execute("UPDATE runs SET extra = ? WHERE id = ?", (json.dumps(extra), row_id))
        written += 1
    con.commit()
    print(f"{written} row(s) {'to write' if args.dry_run else 'written'}, {refused} refused")
    return 1 if refused else 0


if __name__ == "__main__":
    sys.exit(main())
