"""Name every Conditional-FedAvg row by what it ran, after a change of the method's defaults (issue 45).

A row stores the method as it was typed (`Conditional-FedAvg`, or with the arguments given), so when a
default changes, a plain name would read as the new default. This rewrites each such name to spell out
every hyper-parameter whose recorded value (the row's hyperparameters column) differs from today's
default, and leaves values and every other column as they were. Running it twice changes nothing.

- Stop 50 (server momentum, FiLM, 5 local epochs became the defaults): rows older than that hold no
  `local_epochs`; they averaged (`server_opt=avg`) and took the protocol's conditioning and local
  epochs (`conditioning=None`, `local_epochs=None`), and their hyperparameters column gains those fields.
- Stop 60 (server momentum's beta 0.9 -> 0.5): a momentum row made before it gains `server_momentum=0.9`.
  Failed rows recorded no hyperparameters before stop 60; the only such rows are from stops 50-59 (the
  divergence that led to the change), so they ran stop 50's defaults with beta 0.9, and are named so.

- Stop 69 (`min_local_steps` None -> 18): a row made before it recorded no `min_local_steps`, and every client
  took the protocol's batch. Where some client of its scenario has fewer than 18 x batch samples, today's
  default would train that client at a smaller batch, so the row gains `min_local_steps=None`; where every client
  has that many, today's default runs the same steps bit for bit and the row is left as it is. The scenario is
  built from the row's experiment, seed and protocol to count (FEDCOND_DATA: where the data is missing the script
  stops, exit 2, and leaves the database as it was); a row that names no registered experiment is named None.

Fields a row's server optimiser does not read (beta for `avg`, adam's beta2 and tau for `momentum`)
are left out of the name.

    python scripts/name_conditional_fedavg_rows.py docs/results/*.sqlite
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import sqlite3
import sys

from fedcond.algorithms.fedavg import ConditionalFedAvg
from fedcond.algorithms.server_opt import ServerOptimiser
from fedcond.algorithms.names import parse_call
from fedcond.errors import FedcondError

METHOD = "Conditional-FedAvg"
DEFAULTS = {f.name: f.default for f in dataclasses.fields(ConditionalFedAvg)}
BEFORE_STOP_50 = {"server_opt": "avg", "conditioning": None, "local_epochs": None}
STOPS_50_TO_59 = {"server_opt": "momentum", "server_momentum": 0.9, "conditioning": "film", "local_epochs": 5}


def _text(v) -> str:
    return "None" if v is None else str(v)


def name_for(hyper: dict, method: str = METHOD) -> str:
    """The method name that runs `hyper` under today's defaults: the fields that differ, those the row's own
    name (`method`) gives in its order, then the others in field order (a name the sweeps already match stays)."""
    unread = ServerOptimiser.unread(hyper.get("server_opt", DEFAULTS["server_opt"]))
    call = parse_call(method)
    given = [k for k in (call[1] if call else {}) if k in DEFAULTS]
    order = given + [k for k in DEFAULTS if k not in given]
    kept = [f"{k}={_text(hyper[k])}" for k in order if k in hyper and k not in unread and hyper[k] != DEFAULTS[k]]
    return f"{METHOD}({','.join(kept)})" if kept else METHOD


class CannotCount(Exception):
    """A row's scenario could not be built here (its data missing): the script stops rather than guess."""


@functools.cache
def smallest_client(experiment: str | None, protocol_name: str | None, seed: int) -> int | None:
    """The fewest training samples any client of the row's scenario holds; None for a row that names no
    registered experiment (a `fedcond run --db` row), whose scenario cannot be known."""
    from fedcond import experiments

    exp = experiments.EXPERIMENTS.get(experiment) if experiment else None
    if exp is None:
        return None
    try:
        _, fraction = experiments.protocol(protocol_name or "paper")
        options = experiments.scenario_options(protocol_name or "paper")
        spec = exp.spec(seed, os.environ.get("FEDCOND_DATA"), fraction, **options)
        return min(c.n_train for c in spec.build().federation.clients)
    except (FedcondError, OSError) as e:
        raise CannotCount(f"cannot build {experiment} (seed {seed}) to count its clients' samples: {e}") from e


def shrinks(row: dict) -> bool:
    """Whether today's `min_local_steps` would give some client of the row's scenario a smaller batch (a row
    whose scenario cannot be known: yes, so it is named by the old default)."""
    n = smallest_client(row["experiment"], row["protocol_name"], row["seed"])
    return n is None or ConditionalFedAvg().client_batch(row["batch_size"], n) < row["batch_size"]


def recorded(method: str, hyper: dict, row: dict | None = None) -> dict:
    """What the row ran: its hyperparameters column, completed for rows made before stop 50, for the
    failed rows of stops 50-59 (which recorded none) and, where it changes their steps, for the rows made
    before stop 69 (`row`: the experiment, protocol name, seed and batch size the scenario is built from)."""
    before_69 = "min_local_steps" not in hyper
    if "local_epochs" in hyper:
        out = dict(hyper)
    else:
        call = parse_call(method)
        given = {} if call is None else call[1]
        if not hyper:
            kept = {k: v for k, v in DEFAULTS.items() if k != "min_local_steps"}
            out = {**kept, **STOPS_50_TO_59, **given}
        else:
            out = {**hyper, **{k: given.get(k, v) for k, v in BEFORE_STOP_50.items()}}
    if before_69 and (row is None or shrinks(row)):
        out["min_local_steps"] = None
    return out


def migrate(path: str) -> int:
    con = sqlite3.connect(path)
    moved = 0
    with con:
        rows = con.execute(
            "SELECT id, method, hyperparameters, experiment, protocol_name, seed, protocol FROM runs "
            "WHERE method = ? OR method LIKE ?",
            (METHOD, METHOD + "(%"),
        ).fetchall()
        for rid, method, text, experiment, protocol_name, seed, protocol in rows:
            stored = json.loads(text)
            batch = stored.get("local_batch_size") or json.loads(protocol or "{}").get("batch_size", 64)
            row = {"experiment": experiment, "protocol_name": protocol_name, "seed": seed, "batch_size": batch}
            hyper = recorded(method, stored, row)
            name = name_for(hyper, method)
            if name != method or hyper != stored:
                con.execute(
                    "UPDATE runs SET method = ?, hyperparameters = ? WHERE id = ?",
                    (name, json.dumps(hyper, sort_keys=True), rid),
                )
                moved += 1
    con.close()
    return moved


if __name__ == "__main__":
    for p in sys.argv[1:]:
        try:
            print(f"{p}: {migrate(p)} row(s) named by what they ran")
        except CannotCount as e:  # the database is left as it was (one transaction)
            print(f"name_conditional_fedavg_rows: {p}: {e}; set FEDCOND_DATA to the datasets", file=sys.stderr)
            sys.exit(2)
