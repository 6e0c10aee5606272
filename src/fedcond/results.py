"""The results database (SQLite). Every finished method run is one row, written as soon as it ends,
so an interrupted run loses nothing already computed. Rows carry the full configuration, the
package versions and the git revision, so every number can be traced to the code that made it.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import time
from pathlib import Path

import platformdirs

from .errors import FedcondError

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    created_at TEXT NOT NULL,
    experiment TEXT,
    family TEXT NOT NULL,
    dataset TEXT NOT NULL,
    scenario TEXT NOT NULL,          -- JSON: the builder's arguments
    method TEXT NOT NULL,
    seed INTEGER NOT NULL,
    protocol TEXT NOT NULL,          -- JSON: the resolved Protocol
    hyperparameters TEXT NOT NULL,   -- JSON
    accuracy REAL NOT NULL,          -- mean over clients
    accuracy_std REAL NOT NULL,      -- spread over clients
    weighted_accuracy REAL NOT NULL, -- over all test samples
    per_client TEXT NOT NULL,        -- JSON list, client order of the scenario
    extra TEXT NOT NULL,             -- JSON: e.g. ARI for clustering methods
    rounds INTEGER NOT NULL,
    seconds REAL NOT NULL,
    device TEXT NOT NULL,
    versions TEXT NOT NULL,          -- JSON: python, torch, numpy, fedcond
    git_rev TEXT NOT NULL
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
            f"results database {path} has schema version {row[0]}, this fedcond writes version {SCHEMA_VERSION}; use another --db"
        )
    return con


def git_revision() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent, capture_output=True, text=True, timeout=5
        )
        return out.stdout.strip() if out.returncode == 0 else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def versions() -> dict:
    import platform

    import numpy
    import torch

    from . import __version__

    return {"python": platform.python_version(), "torch": torch.__version__, "numpy": numpy.__version__, "fedcond": __version__}


def save_run(con: sqlite3.Connection, *, family, dataset, scenario: dict, method, seed, protocol: dict, result,
             experiment: str | None = None, device: str = "cpu") -> int:
    """Insert one finished run in its own transaction; returns its row id."""
    with con:
        cur = con.execute(
            "INSERT INTO runs (created_at, experiment, family, dataset, scenario, method, seed, protocol, hyperparameters,"
            " accuracy, accuracy_std, weighted_accuracy, per_client, extra, rounds, seconds, device, versions, git_rev)"
            " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                time.strftime("%Y-%m-%dT%H:%M:%S%z"), experiment, family, dataset, json.dumps(scenario, sort_keys=True),
                method, seed, json.dumps(protocol, sort_keys=True), json.dumps(result.hyperparameters, sort_keys=True),
                result.accuracy, result.accuracy_std, result.weighted_accuracy, json.dumps(result.per_client),
                json.dumps(result.extra, sort_keys=True), result.rounds, result.seconds, device,
                json.dumps(versions(), sort_keys=True), git_revision(),
            ),
        )
    return int(cur.lastrowid)
