"""fedcond results list / show / export over a database written with results.save_run (no training)."""

import csv
import json
import sys
from types import SimpleNamespace

import pytest

from fedcond import results
from fedcond.cli import main


def _result(acc: float, curve=None):
    extra = {"test_hits": results.pack_hits([]), **({"curve": curve} if curve else {})}
    return SimpleNamespace(
        hyperparameters={"mu": 0.1}, accuracy=acc, accuracy_std=0.1, weighted_accuracy=acc, per_client=[acc],
        extra=extra, rounds=2, seconds=1.5,
    )


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "r.sqlite"
    con = results.connect(path)
    common = dict(family="E1", scenario={"family": "E1", "k": 2}, seed=0, protocol={"epochs": 2}, ran_with={"python": "x"})
    results.save_run(con, dataset="digits", method="FedAvg", result=_result(0.5, [[1, 0.4, 0.4], [2, 0.5, 0.5]]), **common)
    results.save_run(con, dataset="mnist", method="Local", result=_result(0.7), experiment="E1/mnist/K=2/rich",
                     protocol_name="smoke", **common)
    results.save_run(con, dataset="mnist", method="FedProx", result=None, status="failed", error="diverged", **common)
    con.close()
    return str(path)


def test_list_newest_first_and_filters(db, capsys):
    assert main(["results", "list", "--db", db]) == 0
    lines = capsys.readouterr().out.splitlines()[1:]
    assert [int(line.split()[0]) for line in lines] == [3, 2, 1]
    assert "(ad hoc)" in lines[2] and "E1/mnist/K=2/rich [smoke]" in lines[1] and "failed" in lines[0]
    main(["results", "list", "--db", db, "--dataset", "mnist", "--status", "ok"])
    assert [line.split()[0] for line in capsys.readouterr().out.splitlines()[1:]] == ["2"]
    main(["results", "list", "--db", db, "--method", "Fed*", "--ad-hoc"])
    assert [line.split()[0] for line in capsys.readouterr().out.splitlines()[1:]] == ["3", "1"]
    main(["results", "list", "--db", db, "--protocol", "smoke", "--experiment", "E1/*"])
    assert [line.split()[0] for line in capsys.readouterr().out.splitlines()[1:]] == ["2"]


def test_show_readable_and_json(db, capsys):
    assert main(["results", "show", "1", "--db", db]) == 0
    text = capsys.readouterr().out
    assert "method: FedAvg" in text and "  curve: [[1, 0.4, 0.4], [2, 0.5, 0.5]]" in text
    assert "test_hits: <0 test samples' hits" in text
    assert main(["results", "show", "3", "--db", db, "--json"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["status"] == "failed" and row["error"] == "diverged" and row["git_rev"] == results.git_revision()


@pytest.mark.parametrize("argv", [["show", "9"], ["list", "--status", "bad"], ["export", "--format", "xml", "--out", "x"],
                                  ["export", "--format", "csv", "--out", "x", "--method", "Nothing"]])
def test_bad_input_is_one_line_and_exit_2(db, capsys, argv, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    try:
        code = main(["results", *argv, "--db", db])
    except SystemExit as e:
        code = e.code
    assert code == 2 and len(capsys.readouterr().err.strip().splitlines()) == 1
    assert not (tmp_path / "x").exists()


def test_missing_database_is_refused_not_created(tmp_path, capsys):
    assert main(["results", "list", "--db", str(tmp_path / "none.sqlite")]) == 2
    assert not (tmp_path / "none.sqlite").exists()


def test_export_csv_and_json_read_back(db, tmp_path):
    assert main(["results", "export", "--db", db, "--format", "csv", "--out", str(tmp_path / "r.csv"), "--status", "ok"]) == 0
    with open(tmp_path / "r.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["method"] for r in rows] == ["Local", "FedAvg"] and json.loads(rows[1]["hyperparameters"]) == {"mu": 0.1}
    assert main(["results", "export", "--db", db, "--format", "json", "--out", str(tmp_path / "r.json")]) == 0
    rows = json.loads((tmp_path / "r.json").read_text())
    assert len(rows) == 3 and rows[2]["extra"]["curve"][1] == [2, 0.5, 0.5]


def test_export_parquet(db, tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    assert main(["results", "export", "--db", db, "--format", "parquet", "--out", str(tmp_path / "r.parquet")]) == 0
    table = pq.read_table(tmp_path / "r.parquet")
    assert table.num_rows == 3 and table.column("method").to_pylist() == ["FedProx", "Local", "FedAvg"]


def test_export_parquet_without_pyarrow_names_the_extra(db, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import fails as if not installed
    assert main(["results", "export", "--db", db, "--format", "parquet", "--out", str(tmp_path / "r.parquet")]) == 2
    err = capsys.readouterr().err.strip()
    assert "fedcond[export]" in err and len(err.splitlines()) == 1
