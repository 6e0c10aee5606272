"""The results database (SQLite). Every finished method run is one row, written as soon as it ends,
so an interrupted run loses nothing already computed. Rows carry the full configuration, the
package versions and the git revision, so every number can be traced to the code that made it.
"""

from __future__ import annotations

import base64
import json
import sqlite3
import time
from pathlib import Path

import numpy as np
import platformdirs

from .errors import FedcondError
from .version import read_revision

SCHEMA_VERSION = 2  # 2: experiment cells (protocol_name, status, error, unique index)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    created_at TEXT NOT NULL,
    experiment TEXT,                 -- registry name, e.g. E1/mnist/K=2/rich (NULL for ad-hoc runs)
    protocol_name TEXT,              -- paper | smoke | custom
    status TEXT NOT NULL DEFAULT 'ok',  -- ok | failed (diverged, with its reason in error)
    error TEXT,
    family TEXT NOT NULL,
    dataset TEXT NOT NULL,
    scenario TEXT NOT NULL,          -- JSON: the builder's arguments
    method TEXT NOT NULL,
    seed INTEGER NOT NULL,
    protocol TEXT NOT NULL,          -- JSON: the resolved Protocol
    hyperparameters TEXT NOT NULL,   -- JSON
    accuracy REAL,          -- mean over clients
    accuracy_std REAL,      -- spread over clients
    weighted_accuracy REAL, -- over all test samples
    per_client TEXT,        -- JSON list, client order of the scenario
    extra TEXT NOT NULL,             -- JSON: e.g. ARI of clustering methods, the curve, test_hits (unpack_hits)
    rounds INTEGER,
    seconds REAL,
    device TEXT NOT NULL,
    versions TEXT NOT NULL,          -- JSON: python, torch, numpy, fedcond, cpu (model and vector ISA)
    git_rev TEXT NOT NULL
);
-- a sweep cell is finished at most once: resuming skips it, a crash never duplicates it
CREATE UNIQUE INDEX IF NOT EXISTS runs_cell ON runs (experiment, method, seed, protocol_name)
    WHERE experiment IS NOT NULL;
-- rows made under a default that has since changed: kept whole (JSON), out of every table and sweep
CREATE TABLE IF NOT EXISTS superseded (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    superseded_at TEXT NOT NULL,
    reason TEXT NOT NULL,
    experiment TEXT, method TEXT, seed INTEGER, protocol_name TEXT,
    run TEXT NOT NULL                -- JSON: the runs row as it was
);
"""


def default_db_path() -> Path:
    return Path(platformdirs.user_data_dir("fedcond")) / "results.sqlite"


def connect(path: str | Path | None = None) -> sqlite3.Connection:
    """Open (creating if needed) a results database; refuse one written by another schema version."""
    path = Path(path) if path else default_db_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        con = sqlite3.connect(path, timeout=30)
        con.execute("PRAGMA journal_mode=WAL")  # readers never block the writer; crash-safe commits
        con.executescript(_SCHEMA)
        row = con.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
    except (sqlite3.DatabaseError, OSError) as e:
        raise FedcondError(f"cannot open results database {path}: {e}") from None
    if row is None:
        with con:
            con.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
    elif int(row[0]) != SCHEMA_VERSION:
        con.close()
        raise FedcondError(
            f"results database {path} has schema version {row[0]}, this "
            f"fedcond writes version {SCHEMA_VERSION}; use another --db"
        )
    return con


# Read when this module is first imported, i.e. when the process loaded its code: a sweep runs for
# hours while commits land, and its rows must name the code that made them, not the newest commit.
# version.read_revision: a wheel's build stamp first, else git in a checkout.
_REVISION = read_revision()[0]


def git_revision() -> str:
    """The commit of the code this process runs (read at import; "unknown" outside a git checkout
    unless the package was built with its revision stamped)."""
    return _REVISION


def versions() -> dict:
    import platform

    import numpy
    import torch

    from . import __version__
    from .engine import denormals
    from .models.cpu_kernels.build import cpu_model, vector_isa

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "fedcond": __version__,
        "cpu": f"{cpu_model()} ({vector_isa()}; torch uses {torch.backends.cpu.get_cpu_capability().lower()})",
        "denormals": "flush" if denormals.apply() == "flushed" else "keep",
    }  # what computes here (CPU)
    # wall times differ by CPU, even between machines of one kind, and by the ISA torch was allowed


def run_row(
    *,
    family,
    dataset,
    scenario: dict,
    method,
    seed,
    protocol: dict,
    result,
    experiment: str | None = None,
    protocol_name: str | None = None,
    device: str = "cpu",
    status: str = "ok",
    error: str | None = None,
    ran_with: dict | None = None,
    hyperparameters: dict | None = None,
) -> dict:
    """One finished (or failed: result None, status 'failed', error) run as a row of the runs table:
    column -> value, the JSON columns as Python values. ran_with: versions() where the run computed,
    if not in this process (a Ray node); hyperparameters: a failed run's (run.Failure), what it ran."""
    r = result
    return {
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "experiment": experiment,
        "protocol_name": protocol_name,
        "status": status,
        "error": error,
        "family": family,
        "dataset": dataset,
        "scenario": scenario,
        "method": method,
        "seed": seed,
        "protocol": protocol,
        "hyperparameters": r.hyperparameters if r else (hyperparameters or {}),
        "accuracy": r.accuracy if r else None,
        "accuracy_std": r.accuracy_std if r else None,
        "weighted_accuracy": r.weighted_accuracy if r else None,
        "per_client": r.per_client if r else None,
        "extra": r.extra if r else {},
        "rounds": r.rounds if r else None,
        "seconds": r.seconds if r else None,
        "device": device,
        "versions": ran_with or versions(),
        "git_rev": git_revision(),
    }


# the runs table's columns stored as JSON text: encoded by save_row, decoded by decode_row
JSON_COLUMNS = ("scenario", "protocol", "hyperparameters", "per_client", "extra", "versions")


def decode_row(row: sqlite3.Row) -> dict:
    """A row read back as a dict, its JSON columns decoded."""
    out = dict(row)
    for k in JSON_COLUMNS:
        if out.get(k) is not None:
            out[k] = json.loads(out[k])
    return out


def save_row(con: sqlite3.Connection, row: dict) -> int:
    """Insert one run_row in its own transaction; returns its id."""
    values = {
        k: (None if v is None else json.dumps(v, sort_keys=True)) if k in JSON_COLUMNS else v for k, v in row.items()
    }
    with con:
        cur = con.execute(
            f"INSERT INTO runs ({', '.join(values)}) VALUES ({', '.join('?' * len(values))})", tuple(values.values())
        )
    return int(cur.lastrowid)


def save_run(con: sqlite3.Connection, **fields) -> int:
    """Insert one finished (or failed) run in its own transaction (run_row's fields); returns its id."""
    return save_row(con, run_row(**fields))


def finished_cells(con: sqlite3.Connection) -> set[tuple[str, str, int, str]]:
    """(experiment, method, seed, protocol_name) of every recorded sweep cell, failed ones included."""
    rows = con.execute("SELECT experiment, method, seed, protocol_name FROM runs WHERE experiment IS NOT NULL")
    return {(e, m, int(s), p) for e, m, s, p in rows}


def supersede(con: sqlite3.Connection, where: str, params: tuple, reason: str) -> int:
    """Move the runs rows matching `where` (an SQL condition on runs) to the superseded table, with
    the reason, in one transaction; returns how many moved. A sweep then runs those cells again
    under the current defaults, and reports say how many rows were superseded and why."""
    con.row_factory = sqlite3.Row
    try:
        rows = con.execute(f"SELECT * FROM runs WHERE {where}", params).fetchall()
        with con:
            for r in rows:
                con.execute(
                    "INSERT INTO superseded (superseded_at, reason, experiment, method, seed, protocol_name, run) "
                    "VALUES (?,?,?,?,?,?,?)",
                    (
                        time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                        reason,
                        r["experiment"],
                        r["method"],
                        r["seed"],
                        r["protocol_name"],
                        json.dumps(dict(r)),
                    ),
                )
                con.execute("DELETE FROM runs WHERE id = ?", (r["id"],))
    finally:
        con.row_factory = None
    return len(rows)


def superseded(con: sqlite3.Connection) -> list[tuple[str, int]]:
    """(reason, rows) of every superseded group, oldest first."""
    return [(r, n) for r, n in con.execute("SELECT reason, COUNT(*) FROM superseded GROUP BY reason ORDER BY MIN(id)")]


def pack_hits(hits: list[np.ndarray]) -> dict:
    """Every test sample's hit as one bit (client order, base64) with each client's number of test
    samples: a row keeps which samples its run got right, for paired comparisons of two runs on one
    scenario (same seed, same test sets)."""
    bits = np.packbits(np.concatenate(hits) if hits else np.zeros(0, bool))
    return {"sizes": [int(h.size) for h in hits], "bits": base64.b64encode(bits.tobytes()).decode()}


def unpack_hits(packed: dict) -> list[np.ndarray]:
    """pack_hits undone: per client, a bool per test sample."""
    sizes = packed["sizes"]
    bits = np.frombuffer(base64.b64decode(packed["bits"]), dtype=np.uint8)
    flat = np.unpackbits(bits, count=sum(sizes)).astype(bool)
    return np.split(flat, np.cumsum(sizes)[:-1]) if sizes else []
