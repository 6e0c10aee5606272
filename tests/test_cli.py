"""The command line as a user meets it: JSON shapes, saved rows, one-line errors with exit code 2."""

import json
import sqlite3
import subprocess
import sys

import pytest

from fedcond.cli import main


def run_cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_run_json_and_database(capsys, tmp_path):
    db = tmp_path / "r.sqlite"
    code, out, err = run_cli(capsys, "run", "--methods", "FedAvg,Conditional", "--epochs", "1", "--k", "2",
                             "--workers", "1", "--json", "--no-progress", "--db", str(db))
    assert code == 0, err
    res = json.loads(out)["results"]
    assert [r["method"] for r in res] == ["FedAvg", "Conditional"]
    for r in res:
        assert 0 <= r["accuracy"] <= 1 and len(r["per_client"]) == 10 and r["seconds"] > 0
    rows = sqlite3.connect(db).execute("SELECT method, accuracy, per_client, git_rev, versions FROM runs ORDER BY id").fetchall()
    assert sorted(r[0] for r in rows) == ["Conditional", "FedAvg"]
    assert {r[0]: r[1] for r in rows}["FedAvg"] == res[0]["accuracy"]
    assert json.loads(rows[0][4])["torch"]


def test_scenario_describe_json(capsys):
    code, out, _ = run_cli(capsys, "scenario", "describe", "E1", "--dataset", "digits", "--k", "2",
                           "--clients-per-cluster", "3", "--json")
    assert code == 0
    d = json.loads(out)
    assert d["family"] == "E1" and d["dataset"] == "digits" and len(d["clients"]) == 6
    c = d["clients"][0]
    assert set(c) >= {"id", "cluster", "n_train", "n_test", "train_labels", "test_labels"}
    assert sum(c["train_labels"].values()) == c["n_train"]
    assert set(c["train_labels"]) <= {"0", "1", "2", "3", "4"} or set(c["train_labels"]) <= {"5", "6", "7", "8", "9"}


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["scenario", "describe", "E9", "--json"], "unknown scenario family"),
        (["scenario", "describe", "E1", "--k", "11"], "K"),
        (["scenario", "describe", "E1", "--clients-per-cluster", "5000"], "fewer than"),
        (["run", "--methods", "Nope"], "unknown method"),
        (["scenario", "describe", "E1", "--dataset", "nosuch"], "nosuch"),
    ],
)
def test_bad_input_is_one_line_exit_2(capsys, argv, needle):
    code, out, err = run_cli(capsys, *argv)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("fedcond: error:") and needle in err


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["run", "--momentum", "1.5"], "--momentum: expected a number in [0, 1), got 1.5"),
        (["run", "--lr", "0"], "--lr: expected a number in (0, inf), got 0"),
        (["run", "--lr", "abc"], "--lr: expected a number, got 'abc'"),
        (["run", "--k", "x"], "--k: expected a whole number"),
        (["nosuchcommand"], "invalid choice"),
    ],
)
def test_argument_errors_are_one_line_exit_2(capsys, argv, needle):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    _, err = capsys.readouterr()
    assert exc.value.code == 2
    assert err.count("\n") == 1 and "error:" in err and needle in err


def test_optimiser_flags_reach_the_protocol(capsys, tmp_path):
    code, out, err = run_cli(capsys, "run", "--methods", "FedAvg", "--epochs", "1", "--k", "2", "--lr", "0.05",
                             "--momentum", "0", "--workers", "1", "--json", "--no-progress", "--db", str(tmp_path / "r.sqlite"))
    assert code == 0, err
    row = sqlite3.connect(tmp_path / "r.sqlite").execute("SELECT protocol FROM runs").fetchone()
    protocol = json.loads(row[0])
    assert protocol["lr"] == 0.05 and protocol["momentum"] == 0.0


def test_missing_dataset_names_dir_variable_and_command(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "fedcond.cli", "scenario", "describe", "E1", "--dataset", "mnist", "--data-dir", str(tmp_path)],
        capture_output=True, text=True,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1
    assert str(tmp_path) in proc.stderr and "FEDCOND_DATA" in proc.stderr and "fedcond data download mnist" in proc.stderr


@pytest.mark.slow
def test_default_run_acceptance(tmp_path):
    """`fedcond run` with no arguments (the README's main job), in a subprocess with its two workers:
    Conditional within 2 pp of Oracle, FedAvg clearly below both."""
    proc = subprocess.run([sys.executable, "-m", "fedcond.cli", "run", "--json", "--no-progress", "--db", str(tmp_path / "r.sqlite")],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    acc = {r["method"]: r["accuracy"] for r in json.loads(proc.stdout)["results"]}
    assert set(acc) == {"Local", "FedAvg", "Gossip", "Ditto", "IFCA", "DAC", "Oracle", "Conditional", "Conditional-FedAvg"}
    assert acc["Conditional"] >= acc["Oracle"] - 0.02
    assert acc["FedAvg"] < min(acc["Conditional"], acc["Oracle"]) - 0.3


def test_run_under_an_experiment_name_is_seen_by_sweeps(capsys, tmp_path):
    from fedcond_testing import SHARED, shared_file

    shared_file("mnist.npz.xz")
    db = tmp_path / "e.sqlite"
    code, out, err = run_cli(capsys, "run", "--experiment", "E1/mnist/K=2/rich", "--methods", "FedAvg", "--epochs", "1",
                             "--workers", "1", "--no-progress", "--json", "--db", str(db), "--data-dir", str(SHARED))
    assert code == 0, err
    row = sqlite3.connect(db).execute("SELECT experiment, protocol_name, scenario FROM runs").fetchone()
    assert row[0] == "E1/mnist/K=2/rich" and row[1] == "custom"  # 1 epoch is not the paper protocol
    assert json.loads(row[2])["clients_per_cluster"] == 5
