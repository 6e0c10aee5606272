"""Configuration files (fedcond.config): `run --config`, `sweep --config`, and `config show ROW`
writing back a file that reproduces the row."""

import json
import sqlite3

import pytest

from fedcond.cli import main
from fedcond_testing import SHARED, shared_file


def cli(capsys, *argv):
    try:
        code = main(list(argv))
    except SystemExit as e:  # argparse's own errors
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


def rows(db):
    con = sqlite3.connect(db)
    con.row_factory = sqlite3.Row
    return [dict(r) for r in con.execute("SELECT * FROM runs ORDER BY id")]


TINY = ["--k", "2", "--clients-per-cluster", "2", "--workers", "1", "--no-progress", "--json"]


def test_a_file_is_its_options_and_the_command_line_wins(capsys, tmp_path):
    cfg = tmp_path / "exp.toml"
    cfg.write_text('[run]\nmethods = ["FedAvg", "Conditional"]\nepochs = 2\nk = 2\nclients_per_cluster = 2\n'
                   'workers = 1\nno_progress = true\nseed = 4\n')
    code, out, err = cli(capsys, "run", "--config", str(cfg), "--epochs", "1", "--db", str(tmp_path / "a.sqlite"), "--json")
    assert code == 0, err
    code, _, err = cli(capsys, "run", "--methods", "FedAvg,Conditional", "--epochs", "1", "--seed", "4", *TINY,
                       "--db", str(tmp_path / "b.sqlite"))
    assert code == 0, err
    a, b = rows(tmp_path / "a.sqlite"), rows(tmp_path / "b.sqlite")
    assert [r["method"] for r in a] == ["FedAvg", "Conditional"]
    assert json.loads(a[0]["protocol"])["epochs"] == 1  # the command line's, not the file's 2
    for ra, rb in zip(a, b):
        assert (ra["accuracy"], ra["per_client"], ra["scenario"], ra["protocol"], ra["seed"]) == \
               (rb["accuracy"], rb["per_client"], rb["scenario"], rb["protocol"], rb["seed"])


def test_config_show_writes_a_file_that_reproduces_the_row(capsys, tmp_path):
    db = tmp_path / "r.sqlite"
    code, _, err = cli(capsys, "run", "--methods", "FedAvg(server_opt=momentum),Conditional", "--protocol", "smoke",
                       "--lr", "0.05", "--statistic", "class_means", "--seed", "7", *TINY, "--db", str(db))
    assert code == 0, err
    for row in rows(db):
        code, text, err = cli(capsys, "config", "show", str(row["id"]), "--db", str(db))
        assert code == 0, err
        cfg = tmp_path / f"row{row['id']}.toml"
        cfg.write_text(text)
        again = tmp_path / f"again{row['id']}.sqlite"
        code, _, err = cli(capsys, "run", "--config", str(cfg), "--db", str(again), "--no-progress", "--json")
        assert code == 0, err
        (new,) = rows(again)
        for column in ("method", "seed", "scenario", "protocol", "hyperparameters", "accuracy", "per_client"):
            assert new[column] == row[column], column


def test_an_experiment_rows_file_names_the_same_cell(capsys, tmp_path):
    shared_file("mnist.npz.xz")
    db = tmp_path / "e.sqlite"
    code, _, err = cli(capsys, "run", "--experiment", "E1/mnist/K=2/rich", "--protocol", "smoke", "--methods", "FedAvg",
                       "--epochs", "2", "--workers", "1", "--no-progress", "--json", "--db", str(db),
                       "--data-dir", str(SHARED))
    assert code == 0, err
    (row,) = rows(db)
    code, text, err = cli(capsys, "config", "show", str(row["id"]), "--db", str(db))
    assert code == 0 and 'experiment = "E1/mnist/K=2/rich"' in text and 'protocol = "smoke"' in text, err
    cfg = tmp_path / "cell.toml"
    cfg.write_text(text + f'data_dir = "{SHARED}"\n')
    code, _, err = cli(capsys, "run", "--config", str(cfg), "--db", str(db), "--no-progress")
    assert "already in" in err  # the same cell: a sweep or a run would skip it
    other = tmp_path / "other.sqlite"
    code, _, err = cli(capsys, "run", "--config", str(cfg), "--db", str(other), "--no-progress", "--json")
    assert code == 0, err
    (new,) = rows(other)
    assert (new["experiment"], new["protocol_name"], new["accuracy"]) == \
           (row["experiment"], row["protocol_name"], row["accuracy"])


def test_sweep_takes_its_pattern_from_the_file_unless_the_command_line_gives_one(capsys, tmp_path):
    cfg = tmp_path / "sweep.toml"
    cfg.write_text('pattern = "E1/mnist/K=2/rich"\nmethods = ["FedAvg", "Local"]\nseeds = "0,1"\nprotocol = "smoke"\n')
    db = str(tmp_path / "s.sqlite")
    code, out, err = cli(capsys, "sweep", "--config", str(cfg), "--db", db, "--dry-run")
    assert code == 0, err
    assert out.count("E1/mnist/K=2/rich") == 4 and "4 cells" in out
    code, out, err = cli(capsys, "sweep", "E1/fmnist/K=2/rich", "--config", str(cfg), "--db", db, "--dry-run")
    assert code == 0, err
    assert "E1/fmnist/K=2/rich" in out and "E1/mnist/K=2/rich" not in out


@pytest.mark.parametrize("text, needle", [
    ("epochs = 0\n", "--epochs: expected a whole number in [1, 10000], got 0"),  # the same checks as typed
    ("epoch = 3\n", "unknown option 'epoch' for `fedcond run`"),
    ("json = 1\n", "json is a switch: true or false"),
    ("[sweep]\nseeds = '0'\n", "table [sweep] is not for `fedcond run`"),
    ("methods = [\n", "is not valid TOML"),
    ("methods = [[1]]\n", "methods takes a list of plain values"),
])
def test_a_bad_file_is_one_line_and_exit_2(capsys, tmp_path, text, needle):
    cfg = tmp_path / "bad.toml"
    cfg.write_text(text)
    code, _, err = cli(capsys, "run", "--config", str(cfg), "--db", str(tmp_path / "x.sqlite"))
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err


def test_config_show_of_a_missing_row_or_database_is_one_line(capsys, tmp_path):
    code, _, err = cli(capsys, "config", "show", "3", "--db", str(tmp_path / "none.sqlite"))
    assert code == 2 and "no results database" in err
    code, _, err = cli(capsys, "run", "--config", str(tmp_path / "none.toml"))
    assert code == 2 and "cannot read the configuration" in err
