"""The report's "Readings probed" section (issue 40): each probed reading's fit against the default's
on the same cells, and the dead level a collapsed run sits at."""

from __future__ import annotations

import os

import pytest

from fedcond import results
from fedcond.cli import main
from fedcond.report import paper_results, write_report
from fedcond.report.data import published_tables
from fedcond.report.readings import candidates, dead_level, readings_section
from fedcond_testing import FakeResult

CELL = "E1/mnist/K=2/super_sparse"
PUBLISHED = {r["method"]: r["accuracy"] for r in paper_results() if (r["table"], r["setting"], r["dataset"]) ==
             ("XI", "K=2,super_sparse", "mnist")}


def row(method: str, accuracy: float, protocol: str = "paper", rid: int = 1, seed: int = 0) -> dict:
    return {"id": rid, "experiment": CELL, "method": method, "protocol_name": protocol, "seed": seed,
            "accuracy": accuracy}


def test_a_candidate_is_fitted_beside_the_default_on_the_same_cells_and_seed():
    main_rows = [row("Gossip", PUBLISHED["Gossip"] + 0.05), row("Gossip", 0.9, seed=1)]
    probes = [row("Gossip(carry_momentum=True)", PUBLISHED["Gossip"] + 0.01, "paper[inputs=raw]"),
              row("Gossip(independent_init=True)", PUBLISHED["Gossip"] + 0.05, rid=2)]
    found = candidates(probes, main_rows, published_tables(), levels=False)
    assert [(c.method, c.protocol, c.is_default) for c in found] == [
        ("Gossip(carry_momentum=True)", "paper[inputs=raw]", False), ("Gossip(independent_init=True)", "paper", True)]
    cell = found[0].cells[0]
    assert cell["default"] == pytest.approx(PUBLISHED["Gossip"] + 0.05)  # seed 0's row, not seed 1's
    lines = "\n".join(readings_section(probes, main_rows, published_tables(), levels=False))
    assert "| `Gossip(carry_momentum=True)` | `paper[inputs=raw]` | 1 | 1.0 pp | 5.0 pp | 1 of 1 | +4.0 pp | - |" in lines
    assert "(the default)" in lines
    assert readings_section([], main_rows, published_tables(), levels=False) == []


def test_a_run_evaluated_every_round_stands_for_the_best_round_reading():
    """`paper[eval_every=1]` leaves training as it was (its last round is the default's): its candidate is
    the best point of its curve, labelled so, and fitted against the default's last round."""
    main_rows = [row("FedAvg", PUBLISHED["FedAvg"] - 0.08)]
    curve = dict(row("FedAvg", PUBLISHED["FedAvg"] - 0.08, "paper[eval_every=1]"),
                 protocol={"eval_every": 1}, extra={"best_accuracy": PUBLISHED["FedAvg"] - 0.02, "best_round": 17})
    no_curve = dict(row("FedAvg", PUBLISHED["FedAvg"] - 0.03, "paper[lr=0.02]", rid=2), protocol={"lr": 0.02},
                    extra={"best_accuracy": 0.99})  # not evaluated along the way: its last round counts
    found = candidates([curve, no_curve], main_rows, published_tables(), levels=False)
    assert [(c.protocol, c.best_round, c.is_default) for c in found] == [
        ("paper[eval_every=1]", True, False), ("paper[lr=0.02]", False, False)]
    assert found[0].cells[0]["ours"] == pytest.approx(PUBLISHED["FedAvg"] - 0.02)
    assert found[1].cells[0]["ours"] == pytest.approx(PUBLISHED["FedAvg"] - 0.03)
    lines = "\n".join(readings_section([curve], main_rows, published_tables(), levels=False))
    assert "| `FedAvg`, best round | `paper[eval_every=1]` | 1 | 2.0 pp | 8.0 pp | 1 of 1 | +6.0 pp | - |" in lines


def test_a_protocol_reading_is_also_fitted_over_every_method_it_was_probed_on():
    """`paper[drop_last=True]` changes every method's training: its methods' cells together get a row, with the
    paired gain and its standard error; a method's own reading (`Gossip(...)`) joins no such row."""
    main_rows = [row("FedAvg", PUBLISHED["FedAvg"] + 0.04), row("DAC", PUBLISHED["DAC"] + 0.02),
                 row("Gossip", PUBLISHED["Gossip"] + 0.05)]
    probes = [row("FedAvg", PUBLISHED["FedAvg"] + 0.01, "paper[drop_last=True]"),
              row("DAC", PUBLISHED["DAC"] + 0.03, "paper[drop_last=True]", rid=2),
              row("Gossip(carry_momentum=True)", PUBLISHED["Gossip"], "paper[drop_last=True]", rid=3)]
    lines = "\n".join(readings_section(probes, main_rows, published_tables(), levels=False))
    # gains +3 and -1 pp: mean +1.0, standard error 2.0
    assert "| every method probed (FedAvg, DAC) | `paper[drop_last=True]` | 2 | 2.0 pp | 3.0 pp | 1 of 2 | +1.0 ± 2.0 pp | - |" in lines
    assert lines.count("every method probed") == 1


@pytest.mark.skipif(not os.path.isfile(os.path.join(os.environ.get("FEDCOND_DATA", ""), "mnist.npz.xz")),
                    reason="needs MNIST (FEDCOND_DATA)")
def test_the_dead_level_is_each_clients_majority_share():
    """E1 K=2: each client sees 5 of 10 digits, so a dead network scores about 1/5; E3b: all 10 digits
    under a permutation, about 1/10."""
    cache: dict = {}
    e1 = dead_level("E1/mnist/K=2/rich", "paper", 0, cache)
    e3b = dead_level("E3b/mnist/K=2/rich", "paper", 0, cache)
    assert 0.19 < e1 < 0.25 and 0.09 < e3b < 0.13
    assert dead_level("E1/mnist/K=2/rich", "paper", 0, cache) == e1 and len(cache) == 2
    assert dead_level("no/such/experiment", "paper", 0, cache) is None


def _db(path, method: str, accuracy: float, protocol: str = "paper") -> None:
    con = results.connect(path)
    results.save_run(con, family="E1", dataset="mnist", scenario={"family": "E1"}, method=method, seed=1,
                     protocol={"epochs": 1}, result=None, experiment=CELL, protocol_name=protocol,
                     status="failed", error="x")  # a failed row is never a reading
    results.save_run(con, family="E1", dataset="mnist", scenario={"family": "E1"}, method=method, seed=0,
                     protocol={"epochs": 1}, result=FakeResult(accuracy), experiment=CELL, protocol_name=protocol)
    con.close()


def test_the_report_reads_a_probes_database_beside_the_results(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("FEDCOND_DATA", str(tmp_path / "no-data"))  # no dead level: the column says "-"
    _db(tmp_path / "paper.sqlite", "Gossip", 0.2)
    assert "Readings probed" not in write_report(tmp_path / "paper.sqlite", tmp_path / "a").read_text()
    _db(tmp_path / "probes.sqlite", "Gossip(carry_momentum=True)", 0.15, "paper[inputs=raw]")
    assert main(["report", "--db", str(tmp_path / "paper.sqlite"), "--out", str(tmp_path / "b")]) == 0
    text = (tmp_path / "b" / "report.md").read_text()
    assert "### Readings probed" in text and "`Gossip(carry_momentum=True)` | `paper[inputs=raw]` | 1 |" in text
    capsys.readouterr()
    assert main(["report", "--db", str(tmp_path / "paper.sqlite"), "--probes", str(tmp_path / "none.sqlite")]) == 2
    assert capsys.readouterr().err.strip() == f"fedcond: error: no probes database at {tmp_path / 'none.sqlite'}"


def test_a_database_without_paper_rows_gets_no_readings_section_from_the_probes_beside_it(tmp_path, monkeypatch):
    """The rivals' database sits beside probes.sqlite; its rows (another protocol) are no default to compare with."""
    monkeypatch.setenv("FEDCOND_DATA", str(tmp_path / "no-data"))
    _db(tmp_path / "rivals.sqlite", "Gossip", 0.2, "paper[holdout_clients=1]")
    _db(tmp_path / "probes.sqlite", "Gossip(carry_momentum=True)", 0.15, "paper[inputs=raw]")
    assert main(["report", "--db", str(tmp_path / "rivals.sqlite"), "--out", str(tmp_path / "r")]) == 0
    assert "Readings probed" not in (tmp_path / "r" / "report.md").read_text()
