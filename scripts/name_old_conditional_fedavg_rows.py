"""One-off migration (issue 45, stop 50): Conditional-FedAvg's defaults changed from
(server_opt=avg, the protocol's conditioning, the protocol's local epochs) to (server_opt=momentum,
conditioning=film, local_epochs=5). Rows made before name the method as it was typed, so a plain
`Conditional-FedAvg` row would now read as the new default. This names every such row by what it ran:
the fields that differ from the new defaults, spelled out (`conditioning=None` and `local_epochs=None`
mean "the protocol's", as they did then); the hyper-parameters column gains the two new fields. Values
and every other column stay as they were. Rows made after the change (their hyper-parameters already
hold `local_epochs`) are left alone; running the script twice changes nothing.

    python scripts/name_old_conditional_fedavg_rows.py docs/results/*.sqlite
"""

from __future__ import annotations

import json
import sqlite3
import sys

from fedcond.algorithms.names import parse_call

NEW_DEFAULTS = {"server_opt": "momentum", "conditioning": "film", "local_epochs": 5}
OLD_FIELDS = ("server_opt", "server_lr", "server_momentum", "server_beta2", "server_tau")


def explicit_name(method: str) -> str:
    call = parse_call(method)
    given = {} if call is None else {k: str(v) for k, v in call[1].items()}
    given.setdefault("server_opt", "avg")
    given.setdefault("conditioning", "None")
    given.setdefault("local_epochs", "None")
    order = [*OLD_FIELDS, "conditioning", "local_epochs"]
    kept = [(k, given[k]) for k in order if k in given and given[k] != str(NEW_DEFAULTS.get(k, object()))]
    return "Conditional-FedAvg(" + ",".join(f"{k}={v}" for k, v in kept) + ")"


def migrate(path: str) -> int:
    con = sqlite3.connect(path)
    moved = 0
    with con:
        rows = con.execute(
            "SELECT id, method, hyperparameters FROM runs WHERE method = 'Conditional-FedAvg' "
            "OR method LIKE 'Conditional-FedAvg(%'"
        ).fetchall()
        for rid, method, hyper in rows:
            h = json.loads(hyper)
            if "local_epochs" in h:
                continue  # made under the new fields
            h.setdefault("server_opt", "avg")  # rows older than the server optimisers averaged
            h.update(conditioning=None, local_epochs=None)
            con.execute(
                "UPDATE runs SET method = ?, hyperparameters = ? WHERE id = ?",
                (explicit_name(method), json.dumps(h, sort_keys=True), rid),
            )
            moved += 1
    con.close()
    return moved


if __name__ == "__main__":
    for p in sys.argv[1:]:
        print(f"{p}: {migrate(p)} row(s) named by what they ran")
