"""scripts/name_conditional_fedavg_rows.py: after a change of Conditional-FedAvg's defaults, every row's
name, built today, runs what the row recorded; values stay; a second pass changes nothing."""

import json
import sqlite3
from pathlib import Path

import pytest

from fedcond import results
from fedcond.algorithms import hyperparameters, make_algorithm
from fedcond.algorithms.server_opt import ServerOptimiser
from fedcond_testing import script_module

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "name_conditional_fedavg_rows.py"


def _row(con, method: str, hyper: dict, seed: int, experiment: str = "E1/mnist/K=2/rich") -> None:
    results.save_row(
        con,
        results.run_row(
            family="E1", dataset="mnist", scenario={}, method=method, seed=seed, protocol={"batch_size": 64},
            result=None, experiment=experiment, protocol_name="paper", status="failed", error="x",
            hyperparameters=hyper,
        ),
    )


def _read(s, hyper: dict) -> dict:
    """The fields of `hyper` its server step reads."""
    return {k: v for k, v in hyper.items() if k in s.DEFAULTS and k not in ServerOptimiser.unread(hyper["server_opt"])}


def test_rows_are_named_by_what_they_ran(tmp_path, monkeypatch):
    s = script_module(SCRIPT)
    monkeypatch.setattr(s, "smallest_client", lambda *a: 6000)  # rich: min_local_steps changes nothing
    defaults = dict(s.DEFAULTS)
    db = tmp_path / "r.sqlite"
    con = results.connect(db)
    _row(con, "Conditional-FedAvg", {**defaults, "server_momentum": 0.7}, 0)  # a default changed since
    _row(con, "Conditional-FedAvg(server_opt=avg)", {**defaults, "server_opt": "avg", "server_momentum": 0.7}, 1)
    _row(con, "Conditional-FedAvg", dict(defaults), 2)  # today's defaults: left alone
    _row(con, "Conditional-FedAvg", {"server_opt": "avg", "server_lr": None}, 3)  # before stop 50
    _row(con, "Conditional-FedAvg", {}, 4)  # a failed row of stops 50-59
    _row(con, "FedAvg", {"server_opt": "avg"}, 5)  # another method: untouched
    con.close()

    assert s.migrate(str(db)) == 3  # seeds 0, 3 and 4
    got = {seed: (m, json.loads(h)) for seed, m, h in sqlite3.connect(db).execute(
        "SELECT seed, method, hyperparameters FROM runs")}
    assert got[0][0] == "Conditional-FedAvg(server_momentum=0.7)"
    assert got[1][0] == "Conditional-FedAvg(server_opt=avg)"  # beta is not read by avg: not in the name
    assert got[2][0] == "Conditional-FedAvg"
    assert got[3][1] == {"server_opt": "avg", "server_lr": None, "conditioning": None, "local_epochs": None}
    assert got[4][1]["server_momentum"] == 0.9 and got[4][1]["local_epochs"] == 5
    assert got[5] == ("FedAvg", {"server_opt": "avg"})
    for seed in range(5):  # the name, built today, runs what the row recorded
        name, hyper = got[seed]
        built = hyperparameters(make_algorithm(name))
        assert _read(s, built) == _read(s, {**built, **hyper}), name
    assert s.migrate(str(db)) == 0  # twice changes nothing


def test_rows_before_min_local_steps_are_named_none_only_where_it_changes_their_steps(tmp_path, monkeypatch):
    """Stop 69: a row with no `min_local_steps` took the protocol's batch on every client. Where its scenario
    has a client with fewer than 18 x 64 samples it is named `min_local_steps=None`; where not (today's default
    runs the same steps), or where the scenario cannot be built, as below."""
    s = script_module(SCRIPT)
    sizes = {"E1/mnist/K=2/rich": 6000, "E1/mnist/K=2/super_sparse": 300, "E4a/mnist+fmnist/clients=100": 1152}
    monkeypatch.setattr(s, "smallest_client", lambda experiment, protocol_name, seed: sizes.get(experiment))
    old = {k: v for k, v in s.DEFAULTS.items() if k != "min_local_steps"}
    db = tmp_path / "r.sqlite"
    con = results.connect(db)
    for seed, experiment in enumerate([*sizes, "E9/unknown"]):
        _row(con, "Conditional-FedAvg", dict(old), seed, experiment)
    _row(con, "Conditional-FedAvg", dict(s.DEFAULTS), 9, "E1/mnist/K=2/super_sparse")  # made under today's default
    con.close()
    assert s.migrate(str(db)) == 2
    got = dict(sqlite3.connect(db).execute("SELECT experiment || seed, method FROM runs"))
    assert got["E1/mnist/K=2/rich0"] == "Conditional-FedAvg"
    assert got["E1/mnist/K=2/super_sparse1"] == "Conditional-FedAvg(min_local_steps=None)"
    assert got["E4a/mnist+fmnist/clients=1002"] == "Conditional-FedAvg"  # 1152 // 18 = 64: the same batch
    assert got["E9/unknown3"] == "Conditional-FedAvg(min_local_steps=None)"
    assert got["E1/mnist/K=2/super_sparse9"] == "Conditional-FedAvg"
    assert make_algorithm(got["E1/mnist/K=2/super_sparse1"]).min_local_steps is None
    assert s.migrate(str(db)) == 0


def test_a_name_keeps_its_own_order_and_missing_data_stops_the_script(tmp_path, monkeypatch):
    """A rich row named with the plain FedAvg form keeps its name as typed (the sweeps match names exactly),
    while a super sparse one gains min_local_steps=None at the end. Where the data is missing the script stops
    (exit 2) and the database is left as it was; a row that names no registered experiment is named None."""
    s = script_module(SCRIPT)
    plain = "Conditional-FedAvg(server_opt=avg,conditioning=None,local_epochs=None)"
    hyper = {**{k: v for k, v in s.DEFAULTS.items() if k not in ("min_local_steps", "min_batch_size")},
             "server_opt": "avg", "conditioning": None, "local_epochs": None}
    monkeypatch.setattr(s, "smallest_client", lambda e, p, seed: 6000 if e.endswith("rich") else 300)
    db = tmp_path / "r.sqlite"
    con = results.connect(db)
    _row(con, plain, dict(hyper), 0, "E1/mnist/K=2/rich")
    _row(con, plain, dict(hyper), 1, "E1/mnist/K=2/super_sparse")
    con.close()
    assert s.migrate(str(db)) == 1
    got = dict(sqlite3.connect(db).execute("SELECT seed, method FROM runs"))
    assert got[0] == plain
    assert got[1] == plain[:-1] + ",min_local_steps=None)"
    assert s.migrate(str(db)) == 0

    monkeypatch.undo()
    s = script_module(SCRIPT)
    assert s.smallest_client(None, "paper", 0) is None and s.smallest_client("E9/nothing", "paper", 0) is None
    monkeypatch.setenv("FEDCOND_DATA", str(tmp_path / "no-data-here"))
    s.smallest_client.cache_clear()
    db2 = tmp_path / "r2.sqlite"
    con = results.connect(db2)
    _row(con, "Conditional-FedAvg", dict(hyper), 0, "E1/mnist/K=2/rich")
    con.close()
    before = list(sqlite3.connect(db2).execute("SELECT method, hyperparameters FROM runs"))
    with pytest.raises(s.CannotCount, match="cannot build E1/mnist/K=2/rich"):
        s.migrate(str(db2))
    assert list(sqlite3.connect(db2).execute("SELECT method, hyperparameters FROM runs")) == before
