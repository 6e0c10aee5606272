"""The report's section on ad-hoc runs (report/adhoc.py): grouped by scenario and protocol, with curves."""

import dataclasses
from types import SimpleNamespace

import pytest

from fedcond import results
from fedcond.experiments import PROTOCOLS
from fedcond.report import write_report

PAPER = dataclasses.asdict(PROTOCOLS["paper"][0])


def _save(con, method, seed, acc, protocol=None, scenario=None, curve=None, experiment=None, status="ok"):
    extra = {"curve": curve, "best_accuracy": max(c[1] for c in curve)} if curve else {}
    res = SimpleNamespace(accuracy=acc, accuracy_std=0.0, weighted_accuracy=acc - 0.01, per_client=[acc], seconds=2.0,
                          rounds=3, hyperparameters={}, extra=extra)
    results.save_run(con, family="E1", dataset="digits", scenario={"family": "E1", "dataset": "digits", "k": 2,
                     "seed": seed, **(scenario or {})}, method=method, seed=seed,
                     protocol={**PAPER, **(protocol or {})}, result=None if status != "ok" else res,
                     experiment=experiment, protocol_name="smoke" if experiment else None, status=status,
                     error="diverged" if status != "ok" else None, ran_with={"python": "x"})


def _db(tmp_path):
    con = results.connect(tmp_path / "r.sqlite")
    short = {"epochs": 3, "eval_every": 1}
    for seed, (fedavg, local) in enumerate(((0.5, 0.7), (0.6, 0.8))):  # two seeds pooled in one group
        _save(con, "FedAvg", seed, fedavg, short, curve=[[1, 0.2, 0.2], [2, 0.4, 0.4], [3, fedavg, fedavg]])
        _save(con, "Local", seed, local, short, curve=[[1, 0.3, 0.3], [2, 0.9, 0.9], [3, local, local]])
    _save(con, "FedAvg", 0, 0.55, {"epochs": 3, "lr": 0.05})  # another protocol, no curve
    _save(con, "FedAvg", 0, 0.9, short, scenario={"k": 3})  # another scenario
    _save(con, "FedAvg", 1, 0.0, short, status="failed")  # not in the tables
    _save(con, "FedAvg", 0, 0.1, short, experiment="E1/mnist/K=2/rich")  # a named run: not ad hoc
    con.close()
    return tmp_path / "r.sqlite"


def test_adhoc_runs_grouped_by_scenario_and_protocol(tmp_path):
    text = write_report(_db(tmp_path), tmp_path / "out").read_text()
    assert "7 ad-hoc runs without an experiment name, under Ad-hoc runs" in text
    section = text.split("## Ad-hoc runs")[1].split("\n## ")[0]
    assert "6 finished runs of `fedcond run`" in section
    group = section.split("### E1 on digits (k=2), `paper[epochs=3,eval_every=1]`")[1].split("###")[0]
    assert "| FedAvg | 2 | 0, 1 | 55.0 ± 7.1 | 54.0 ± 7.1 | 55.0 ± 7.1 | 2.0 |" in group
    assert "| Local | 2 | 0, 1 | 75.0 ± 7.1 | 74.0 ± 7.1 | 90.0 ± 0.0 | 2.0 |" in group  # best: round 2 of both seeds
    other = section.split("### E1 on digits (k=2), `paper[epochs=3,lr=0.05]`")[1].split("###")[0]
    assert "| FedAvg | 1 | 0 | 55.0 | 54.0 | no curve | 2.0 |" in other
    assert "### E1 on digits (k=3), `paper[epochs=3,eval_every=1]`" in section
    # one figure per scenario that stored curves: k=2 (one panel, lr=0.05 has no curve) and k=3 has none
    assert "![E1 on digits (k=2): accuracy against rounds](adhoc_curves_1.png)" in section
    assert (tmp_path / "out" / "adhoc_curves_1.png").is_file() and not (tmp_path / "out" / "adhoc_curves_2.png").exists()


def test_protocol_filter_keeps_the_adhoc_groups_it_names(tmp_path):
    text = write_report(_db(tmp_path), tmp_path / "out", protocol_name="paper[epochs=3,lr=0.05]").read_text()
    section = text.split("## Ad-hoc runs")[1]
    assert "`paper[epochs=3,lr=0.05]`" in section and "eval_every=1" not in section


def test_curve_means_over_seeds():
    from fedcond.report.curves import CLIENT_MEAN, mean_curve

    runs = [[[1, 0.2, 0.0], [2, 0.4, 0.0]], [[1, 0.4, 0.0], [2, 0.6, 0.0], [3, 0.8, 0.0]]]
    xs, ys = mean_curve(runs, CLIENT_MEAN)
    assert xs == [1, 2] and ys == pytest.approx([30.0, 50.0])  # up to the shortest run


def test_a_database_of_adhoc_runs_only_says_where_they_are(tmp_path):
    con = results.connect(tmp_path / "r.sqlite")
    _save(con, "FedAvg", 0, 0.5)
    _save(con, "Local", 0, 0.7)
    con.close()
    text = write_report(tmp_path / "r.sqlite", tmp_path / "out").read_text()
    assert "No registry experiment has been run yet: the paper's tables show the published numbers only; " \
        "2 ad-hoc runs of `fedcond run` under Ad-hoc runs." in text
    assert "No experiment has been run yet" not in text and "| Local | 1 | 0 | 70.0 |" in text
