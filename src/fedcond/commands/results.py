"""`fedcond results list | show | export`: the rows of a results database, for reading and taking away.

The database is read, never created: a path with no database is an error (as for `fedcond report`)."""

from __future__ import annotations

import csv
import json
import sqlite3
import sys
from dataclasses import dataclass
from pathlib import Path

from .. import results
from ..errors import FedcondError

JSON_COLUMNS = results.JSON_COLUMNS  # the runs table's columns stored as JSON text
EXPORT_FORMATS = ("csv", "json", "parquet")


@dataclass(frozen=True)
class RowFilter:
    """Which rows to read: each field None means any. experiment and method are SQLite GLOB patterns
    (`E1/mnist/*`, `FedAvg*`); ad_hoc keeps only rows without an experiment name."""

    method: str | None = None
    experiment: str | None = None
    dataset: str | None = None
    protocol: str | None = None
    status: str | None = None
    ad_hoc: bool = False

    def where(self) -> tuple[str, tuple]:
        clauses: list[str] = []
        params: list = []
        for column, value, op in (
            ("method", self.method, "GLOB"),
            ("experiment", self.experiment, "GLOB"),
            ("dataset", self.dataset, "="),
            ("protocol_name", self.protocol, "="),
            ("status", self.status, "="),
        ):
            if value is not None:
                clauses.append(f"{column} {op} ?")
                params.append(value)
        if self.ad_hoc:
            clauses.append("experiment IS NULL")
        return (" WHERE " + " AND ".join(clauses)) if clauses else "", tuple(params)


def _open(db: str | None) -> sqlite3.Connection:
    path = Path(db) if db else results.default_db_path()
    if not path.is_file():
        raise FedcondError(f"no results database at {path}")
    con = results.connect(path)  # refuses another schema version
    con.row_factory = sqlite3.Row
    return con


def read_rows(db: str | None, where: RowFilter, limit: int | None = None) -> list[dict]:
    """The matching rows, newest first (by id: the insertion order), JSON columns decoded."""
    sql, params = where.where()
    con = _open(db)
    try:
        query = f"SELECT * FROM runs{sql} ORDER BY id DESC" + (" LIMIT ?" if limit else "")
        return [results.decode_row(r) for r in con.execute(query, params + ((limit,) if limit else ()))]
    except sqlite3.DatabaseError as e:
        raise FedcondError(f"cannot read results database {db}: {e}") from None
    finally:
        con.close()


def read_row(db: str | None, row_id: int) -> dict:
    con = _open(db)
    try:
        row = con.execute("SELECT * FROM runs WHERE id = ?", (row_id,)).fetchone()
    finally:
        con.close()
    if row is None:
        raise FedcondError(f"no run with id {row_id} in {db or results.default_db_path()}")
    return results.decode_row(row)


def add_parser(sub, int_type) -> None:
    res = sub.add_parser("results", help="the rows of a results database: list, show one, export")
    res_sub = res.add_subparsers(dest="results_command", required=True)
    ls = res_sub.add_parser("list", help="a compact table of the runs, newest first, with their ids")
    _add_filters(ls)
    ls.add_argument("--limit", type=int_type, default=50, help="show at most this many rows (default 50)")
    show = res_sub.add_parser("show", help="one run, every column (JSON with --json)")
    show.add_argument("id", type=int_type, help="the row id (fedcond results list)")
    show.add_argument("--db", help="results database (default: the user data dir's results.sqlite)")
    show.add_argument("--json", action="store_true", help="the row as JSON, every field whole")
    exp = res_sub.add_parser("export", help="the matching runs to a CSV, JSON or Parquet file")
    _add_filters(exp)
    exp.add_argument(
        "--format", required=True, choices=EXPORT_FORMATS, help="parquet needs pyarrow (pip install 'fedcond[export]')"
    )
    exp.add_argument("--out", required=True, help="the file to write")


def _add_filters(p) -> None:
    p.add_argument("--db", help="results database (default: the user data dir's results.sqlite)")
    p.add_argument("--method", help="method name or glob, e.g. 'FedAvg*'")
    p.add_argument("--experiment", help="experiment name or glob, e.g. 'E1/mnist/*'")
    p.add_argument("--ad-hoc", action="store_true", help="only runs without an experiment name (plain fedcond run)")
    p.add_argument("--dataset", help="dataset name, e.g. mnist")
    p.add_argument("--protocol", help="protocol name of sweep cells, e.g. paper or smoke")
    p.add_argument("--status", choices=["ok", "failed"], help="ok or failed")


def _filter_of(args) -> RowFilter:
    return RowFilter(args.method, args.experiment, args.dataset, args.protocol, args.status, args.ad_hoc)


def results_command(args) -> int:
    if args.results_command == "list":
        return _list(read_rows(args.db, _filter_of(args), args.limit))
    if args.results_command == "show":
        row = read_row(args.db, args.id)
        print(json.dumps(row, indent=2, sort_keys=False) if args.json else "\n".join(readable(row)))
        return 0
    rows = read_rows(args.db, _filter_of(args))
    if not rows:  # a file without columns would read as a broken export
        raise FedcondError("no run matches the filters; nothing written")
    export(rows, args.format, Path(args.out))
    print(f"{len(rows)} rows -> {args.out}", file=sys.stderr)
    return 0


def _pct(value) -> str:
    return "-" if value is None else f"{100 * value:.2f}"


def _list(rows: list[dict]) -> int:
    head = f"{'id':>5s}  {'created':19s}  {'method':24s} {'dataset':9s} {'scenario':8s} {'seed':>4s}  "
    print(head + f"{'experiment / protocol':34s} {'status':6s} {'acc %':>6s} {'seconds':>8s}")
    for r in rows:
        where = f"{r['experiment']} [{r['protocol_name']}]" if r["experiment"] else "(ad hoc)"
        seconds = "-" if r["seconds"] is None else f"{r['seconds']:.1f}"
        print(
            f"{r['id']:5d}  {r['created_at'][:19]:19s}  {r['method'][:24]:24s} {r['dataset'][:9]:9s} "
            f"{r['family'][:8]:8s} {r['seed']:4d}  {where[:34]:34s} {r['status'][:6]:6s} {_pct(r['accuracy']):>6s} "
            f"{seconds:>8s}"
        )
    print(f"{len(rows)} rows (newest first)", file=sys.stderr)
    return 0


def _hits_summary(hits) -> str:
    """The packed test hits (results.pack_hits: a long base64 text) in a few words."""
    n = sum(hits.get("sizes", [])) if isinstance(hits, dict) else "?"
    return f"<{n} test samples' hits, packed (whole with --json)>"


def readable(row: dict) -> list[str]:
    """`key: value` lines, JSON columns one line each (the extra's dictionary one line per key)."""
    lines = []
    for k, v in row.items():
        if k == "extra" and isinstance(v, dict):
            lines.append("extra:")
            for name, x in sorted(v.items()):
                lines.append(f"  {name}: {_hits_summary(x) if name == 'test_hits' else json.dumps(x, sort_keys=True)}")
        elif k in JSON_COLUMNS:
            lines.append(f"{k}: {json.dumps(v, sort_keys=True)}")
        else:
            lines.append(f"{k}: {v}")
    return lines


def _flat(row: dict) -> dict:
    """A row for a table file: the JSON columns as JSON text, as the database stores them."""
    return {k: (json.dumps(v, sort_keys=True) if k in JSON_COLUMNS and v is not None else v) for k, v in row.items()}


def export(rows: list[dict], fmt: str, out: Path) -> None:
    """rows (read_rows) to `out`: csv and parquet one column per database column (JSON columns as text),
    json a list of rows with the JSON columns decoded."""
    try:
        if fmt == "json":
            out.write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
        elif fmt == "csv":
            columns = list(rows[0]) if rows else []
            with open(out, "w", newline="", encoding="utf-8") as f:
                writer = csv.DictWriter(f, fieldnames=columns)
                writer.writeheader()
                writer.writerows(_flat(r) for r in rows)
        else:
            _write_parquet(rows, out)
    except OSError as e:
        raise FedcondError(f"cannot write {out}: {e.strerror or e}") from None


def _write_parquet(rows: list[dict], out: Path) -> None:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise FedcondError("--format parquet needs pyarrow: pip install 'fedcond[export]'") from None
    pq.write_table(pa.Table.from_pylist([_flat(r) for r in rows]), out)
