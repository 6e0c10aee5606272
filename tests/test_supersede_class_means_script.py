"""scripts/supersede_class_means_few_labels.py: after class_means widened for tasks with few labels, the rows a
conditioned method made with the narrower statistic on such a task leave for the superseded table; nothing else
moves, and a second pass moves nothing."""

import sqlite3
from pathlib import Path

from fedcond import results
from fedcond_testing import script_module

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "supersede_class_means_few_labels.py"
PROTO = "paper[statistic=class_means,holdout_clients=1]"


def _row(con, experiment: str, method: str, seed: int, protocol_name: str = PROTO, extra: dict | None = None) -> None:
    family, dataset = experiment.split("/")[:2]
    row = results.run_row(family=family, dataset=dataset, scenario={}, method=method, seed=seed, protocol={},
                          result=None, experiment=experiment, protocol_name=protocol_name, status="failed", error="x")
    row["extra"] = extra or {}
    results.save_row(con, row)


def test_only_narrow_class_means_rows_of_conditioned_methods_on_few_label_tasks_move(tmp_path):
    s = script_module(SCRIPT)
    db = tmp_path / "r.sqlite"
    con = results.connect(db)
    _row(con, "E3a/mnist/K=2/rich", "Conditional", 0)  # binary task, made before the change: moves
    _row(con, "E3a/mnist/K=2/rich", "Conditional-FedAvg(server_momentum=0.9)", 0)  # conditioned too: moves
    _row(con, "E3a/mnist/K=2/rich", "Conditional", 1, extra={"statistic_width": 32})  # made after: stays
    _row(con, "E3a/mnist/K=2/rich", "Oracle", 0)  # takes no statistic: stays
    _row(con, "E3a/mnist/K=2/rich", "Conditional", 0, protocol_name="paper")  # the eigenvalues: stays
    _row(con, "E3b/mnist/K=2/rich", "Conditional", 0)  # ten labels, the width unchanged: stays
    con.close()

    moved = s.supersede_stale(str(db))
    assert sorted(moved) == sorted(f"E3a/mnist/K=2/rich {m} seed 0 [{PROTO}]"
                                   for m in ("Conditional", "Conditional-FedAvg(server_momentum=0.9)"))
    left = sqlite3.connect(db).execute("SELECT method, seed, protocol_name, experiment FROM runs").fetchall()
    assert len(left) == 4 and ("Oracle", 0, PROTO, "E3a/mnist/K=2/rich") in left
    reasons = results.superseded(results.connect(db))
    assert len(reasons) == 1 and reasons[0][1] == 2 and "class_means widened" in reasons[0][0]
    assert s.supersede_stale(str(db)) == []  # twice moves nothing
