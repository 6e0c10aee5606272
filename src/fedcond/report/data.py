"""What a report reads: the results database (through `results.connect`, so a database of another
schema version is refused) and the published numbers shipped in `fedcond.resources`; and the one
aggregation every table and figure shares, seeds -> a cell (mean and spread over seeds).

Accuracies stay fractions here (as stored and as published); the tables and figures show percent.
"""

from __future__ import annotations

import csv
import functools
import importlib.resources
import io
import sqlite3
import statistics
from dataclasses import dataclass, replace
from pathlib import Path

from .. import results
from ..algorithms import ALGORITHMS, PAPER_METHODS
from ..errors import FedcondError
from ..experiments import EXPERIMENTS, parse_variant
from ..protocol import GRID_PRECISION

_ORDER = "ORDER BY experiment, protocol_name, method, seed, id"  # deterministic, whatever the insertion order


@dataclass(frozen=True)
class Database:
    """Everything a report takes from one results database."""

    path: Path
    ok: list[dict]  # status 'ok' rows of named experiments
    failed: list[dict]  # every row whose status is not 'ok', with its error
    total: int
    ad_hoc: int  # rows without an experiment name (`fedcond run`), every status
    protocols: dict[str | None, int]  # protocol_name -> rows, every status
    git_revs: dict[str, tuple[int, str, str]]  # revision -> (rows, first created_at, last created_at)
    superseded: tuple[tuple[str, int], ...] = ()  # (reason, rows) moved out of the tables (results.supersede)
    ad_hoc_ok: tuple[dict, ...] = ()  # status 'ok' rows without an experiment name (report/adhoc.py)


def read_database(db_path: str | Path | None) -> Database:
    """Read a results database (default: the user data dir's). A missing file is an error, not an
    empty database: a report never creates one."""
    path = Path(db_path) if db_path else results.default_db_path()
    if not path.is_file():
        raise FedcondError(f"no results database at {path}")
    con = results.connect(path)  # refuses another schema version
    try:
        con.row_factory = sqlite3.Row
        ok = [
            results.decode_row(r)
            for r in con.execute(f"SELECT * FROM runs WHERE status = 'ok' AND experiment IS NOT NULL {_ORDER}")
        ]
        failed = [results.decode_row(r) for r in con.execute(f"SELECT * FROM runs WHERE status != 'ok' {_ORDER}")]
        ad_hoc_ok = tuple(
            results.decode_row(r)
            for r in con.execute("SELECT * FROM runs WHERE status = 'ok' AND experiment IS NULL ORDER BY id")
        )
        total, ad_hoc = con.execute("SELECT COUNT(*), SUM(experiment IS NULL) FROM runs").fetchone()
        protocols = {p: n for p, n in con.execute("SELECT protocol_name, COUNT(*) FROM runs GROUP BY protocol_name")}
        revs = {
            r: (n, a, b)
            for r, n, a, b in con.execute(
                "SELECT git_rev, COUNT(*), MIN(created_at), MAX(created_at) "
                "FROM runs GROUP BY git_rev ORDER BY MIN(created_at), git_rev"
            )
        }
        gone = tuple(results.superseded(con))
    except sqlite3.DatabaseError as e:
        raise FedcondError(f"cannot read results database {path}: {e}") from None
    finally:
        con.close()
    return Database(
        path, ok, failed, int(total), int(ad_hoc or 0), protocols, revs, gone, ad_hoc_ok
    )  # as given: reports get committed


def load_runs(db_path: str | Path | None) -> list[dict]:
    """The finished (status 'ok') rows of named experiments, one dict per row, JSON columns decoded."""
    return read_database(db_path).ok


def load_failed(db_path: str | Path | None) -> list[dict]:
    """The failed rows (status not 'ok'), each with its `error`."""
    return read_database(db_path).failed


@functools.lru_cache(maxsize=1)
def _paper_rows() -> tuple[tuple[tuple[str, object], ...], ...]:
    text = importlib.resources.files("fedcond.resources").joinpath("paper_results.csv").read_text(encoding="utf-8")
    return tuple(tuple({**r, "accuracy": float(r["accuracy"])}.items()) for r in csv.DictReader(io.StringIO(text)))


def paper_results() -> list[dict]:
    """The published numbers, in the CSV's order: table, experiment (the family), dataset, setting,
    method, accuracy (a fraction)."""
    return [dict(r) for r in _paper_rows()]


# ---- seeds -> cells ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Cell:
    """One (protocol, experiment, method): its finished seeds and how many seeds failed."""

    seeds: tuple[int, ...] = ()
    accuracies: tuple[float, ...] = ()  # mean-over-clients accuracy, one per seed
    ari: tuple[float, ...] = ()  # where the method records one (IFCA)
    failed: int = 0
    stand_in: str | None = None  # the variant protocol this cell was run under, where it stands in for the preset's

    @property
    def n(self) -> int:
        return len(self.accuracies)

    @property
    def mean(self) -> float | None:
        return statistics.fmean(self.accuracies) if self.accuracies else None

    @property
    def std(self) -> float | None:
        """Sample standard deviation over seeds; None below two seeds."""
        return statistics.stdev(self.accuracies) if self.n >= 2 else None


CellKey = tuple  # (protocol_name, experiment, method)


def cells(ok: list[dict], failed: list[dict]) -> dict[CellKey, Cell]:
    """Group rows by (protocol_name, experiment, method); seeds in seed order."""
    acc: dict[CellKey, list[tuple[int, float, float | None]]] = {}
    for r in ok:
        if r["accuracy"] is None:
            continue
        ari = (r.get("extra") or {}).get("ari")
        acc.setdefault((r["protocol_name"], r["experiment"], r["method"]), []).append((r["seed"], r["accuracy"], ari))
    n_failed: dict[CellKey, int] = {}
    for r in failed:
        if r["experiment"] is not None:
            key = (r["protocol_name"], r["experiment"], r["method"])
            n_failed[key] = n_failed.get(key, 0) + 1
    out = {}
    for key in sorted(set(acc) | set(n_failed), key=_key_order):
        runs = sorted(acc.get(key, []))
        out[key] = Cell(
            tuple(s for s, _, _ in runs),
            tuple(a for _, a, _ in runs),
            tuple(x for _, _, x in runs if x is not None),
            n_failed.get(key, 0),
        )
    return out


# Options whose change may stand in for a `paper` cell that has no run of its own, marked as such
# wherever shown, each with where it may (None: every dataset, any value; else {dataset: the one value
# adopted there}) and why (docs/choices.md): the CIFAR encoder's source replaces an input the paper's
# setting needs and these machines lack; bf16 arithmetic was validated against fp32 on
# E1/cifar10/K=2/rich and adopted for the CIFAR grid only (any other precision stays a variant).
STAND_IN_OPTIONS: dict[str, tuple[dict[str, object] | None, str]] = {
    "encoder_source": (
        None,
        "the paper's setting needs an input these machines lack (the CIFAR encoder's CIFAR-100 source)",
    ),
    "precision": (
        dict(GRID_PRECISION),
        "bf16 arithmetic, adopted for the CIFAR-10 grid after its validation against fp32 (the report's "
        "'Reduced precision against fp32')",
    ),
}


def stands_in(protocol: str | None, preset: str = "paper", experiment: str | None = None) -> bool:
    """Whether `protocol` is `preset[...]` with changes to STAND_IN_OPTIONS only, each to the value adopted
    on `experiment`'s dataset (on some dataset when `experiment` is None)."""
    if protocol is None:
        return False
    try:
        base, changes = parse_variant(protocol)
    except FedcondError:
        return False  # not a name a sweep writes: nothing stands in
    if base != preset or not changes or not set(changes) <= set(STAND_IN_OPTIONS):
        return False
    dataset = experiment.split("/")[1] if experiment and experiment.count("/") >= 1 else None
    for k, value in changes.items():
        adopted = STAND_IN_OPTIONS[k][0]
        if adopted is None:
            continue
        if dataset is None:
            if value not in adopted.values():
                return False
        elif dataset not in adopted or adopted[dataset] != value:
            return False
    return True


def stand_in_reasons(protocol: str) -> list[str]:
    """Why each option a stand-in variant changes may stand in (STAND_IN_OPTIONS), in its order."""
    _, changes = parse_variant(protocol)
    return [why for k, (_, why) in STAND_IN_OPTIONS.items() if k in changes]


def with_stand_ins(cells: dict[CellKey, Cell], preset: str = "paper") -> dict[CellKey, Cell]:
    """`cells` plus, for every (experiment, method) that `preset` has no finished seed of, the cell of
    a stand-in variant, filed under `preset` and marked with the variant's name: the variant that changes
    the fewest options (an fp32 pacs32 row before a bf16 pacs32 one), then the first by name."""
    out = dict(cells)
    standing = sorted(  # (options changed, variant, experiment, method): fewest changed first, then by name
        (len(parse_variant(p)[1]), p, e, m)
        for (p, e, m), c in cells.items()
        if c.mean is not None and stands_in(p, preset, e)
    )
    for _, p, e, m in standing:
        own = out.get((preset, e, m))
        if own is None or own.mean is None:
            out[(preset, e, m)] = replace(cells[(p, e, m)], stand_in=p)
    return {k: out[k] for k in sorted(out, key=_key_order)}


def _key_order(key: CellKey):
    p, e, m = key
    return (protocol_order(p), experiment_order(e), method_order(m))


# ---- orders and lookups -----------------------------------------------------------------------

_EXPERIMENT_INDEX = {name: i for i, name in enumerate(EXPERIMENTS)}
_METHOD_INDEX = {name: i for i, name in enumerate(dict.fromkeys(PAPER_METHODS + tuple(ALGORITHMS)))}


def protocol_order(p: str | None):
    """paper first, then the others by name, unnamed last."""
    return (p is None, p != "paper", p or "")


def experiment_order(name: str):
    """Registry order; names the registry does not know (renamed, removed) after, by name."""
    return (_EXPERIMENT_INDEX.get(name, len(_EXPERIMENT_INDEX)), name)


def method_order(name: str):
    """The paper's table order, then the rest of the registry, then unknown names."""
    return (_METHOD_INDEX.get(name, len(_METHOD_INDEX)), name)


@functools.lru_cache(maxsize=1)
def _experiment_by_setting() -> dict[tuple[str, str, str, str], str]:
    out = {}
    for e in EXPERIMENTS.values():
        for table, setting in (e.paper_setting or {}).items():
            out[(table, e.family, e.dataset, setting)] = e.name
    return out


def experiment_for(table: str, family: str, dataset: str, setting: str) -> str | None:
    """The registry experiment that reproduces one published row, or None."""
    return _experiment_by_setting().get((table, family, dataset, setting))


@dataclass(frozen=True)
class PublishedTable:
    table: str  # "X"
    family: str  # "E1"
    rows: tuple[tuple[str, str, str | None], ...]  # (dataset, setting, experiment name or None), CSV order
    methods: tuple[str, ...]  # CSV order
    values: dict  # (dataset, setting, method) -> accuracy

    @property
    def experiments(self) -> list[str]:
        return [e for _, _, e in self.rows if e is not None]


def published_tables(paper: list[dict] | None = None) -> list[PublishedTable]:
    """The published tables in the CSV's order, each with its rows mapped to registry experiments."""
    paper = paper_results() if paper is None else paper
    out = []
    for table in dict.fromkeys(r["table"] for r in paper):
        rows = [r for r in paper if r["table"] == table]
        family = rows[0]["experiment"]
        settings = dict.fromkeys((r["dataset"], r["setting"]) for r in rows)
        out.append(
            PublishedTable(
                table,
                family,
                tuple((d, s, experiment_for(table, family, d, s)) for d, s in settings),
                tuple(dict.fromkeys(r["method"] for r in rows)),
                {(r["dataset"], r["setting"], r["method"]): r["accuracy"] for r in rows},
            )
        )
    return out


def published_for(tables: list[PublishedTable], experiment: str, method: str) -> float | None:
    """The first published value for an experiment's method (a setting in two tables: the first)."""
    for t in tables:
        for d, s, e in t.rows:
            if e == experiment and (d, s, method) in t.values:
                return t.values[(d, s, method)]
    return None
