"""scripts/name_conditional_fedavg_rows.py: after a change of Conditional-FedAvg's defaults, every row's
name, built today, runs what the row recorded; values stay; a second pass changes nothing."""

import json
import sqlite3
from pathlib import Path

from fedcond import results
from fedcond.algorithms import hyperparameters, make_algorithm
from fedcond.algorithms.server_opt import ServerOptimiser
from fedcond_testing import script_module

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "name_conditional_fedavg_rows.py"


def _row(con, method: str, hyper: dict, seed: int) -> None:
    results.save_row(
        con,
        results.run_row(
            family="E1", dataset="mnist", scenario={}, method=method, seed=seed, protocol={}, result=None,
            experiment="E1/mnist/K=2/rich", protocol_name="paper", status="failed", error="x", hyperparameters=hyper,
        ),
    )


def _read(s, hyper: dict) -> dict:
    """The fields of `hyper` its server step reads."""
    return {k: v for k, v in hyper.items() if k in s.DEFAULTS and k not in ServerOptimiser.unread(hyper["server_opt"])}


def test_rows_are_named_by_what_they_ran(tmp_path):
    s = script_module(SCRIPT)
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
