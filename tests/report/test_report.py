"""The report reads a results database and the published CSV: tables, cells, figures, refusals.

A fixture database is written through `results.save_run`, as a sweep writes it; no training.
"""

from __future__ import annotations

import sqlite3
import statistics
from pathlib import Path

import numpy as np
import pytest

from fedcond import results
from fedcond.errors import FedcondError
from fedcond.report import load_failed, load_runs, paper_results, write_report
from fedcond_testing import FakeResult


def save(con, experiment: str, method: str, seed: int, accuracy: float | None, protocol: str = "paper",
         error: str | None = None, extra: dict | None = None) -> None:
    family, dataset = experiment.split("/")[:2]
    result = None if error else FakeResult(accuracy, weighted_accuracy=accuracy, extra=extra or {})
    results.save_run(con, family=family, dataset=dataset, scenario={"family": family}, method=method, seed=seed,
                     protocol={"epochs": 1}, result=result, experiment=experiment, protocol_name=protocol,
                     status="failed" if error else "ok", error=error)


def published(table: str, dataset: str, setting: str, method: str) -> float:
    hits = [r["accuracy"] for r in paper_results()
            if (r["table"], r["dataset"], r["setting"], r["method"]) == (table, dataset, setting, method)]
    assert len(hits) == 1
    return hits[0]


def save_super_sparse(con, method: str, offset: float) -> None:
    """E1 MNIST K=2 super sparse, seed 0, `offset` (a fraction) away from its table XI value."""
    save(con, "E1/mnist/K=2/super_sparse", method, 0, published("XI", "mnist", "K=2,super_sparse", method) + offset)


def report_explained(tmp_path, explanations: str) -> str:
    """The report of tmp_path/r.sqlite with these explanations.csv rows (after its header)."""
    why = tmp_path / "explanations.csv"
    why.write_text("experiment,method,explanation\n" + explanations)
    return write_report(tmp_path / "r.sqlite", tmp_path / "out", explanations=why).read_text()


def gaps_of(text: str) -> str:
    return text.split("### Cells more than 3 pp")[1].split("###")[0]


FEDAVG_SEEDS = (0.970, 0.980)  # E1/mnist/K=2/rich FedAvg, seeds 0 and 1


def build_db(path: Path) -> Path:
    con = results.connect(path)
    for seed, acc in enumerate(FEDAVG_SEEDS):
        save(con, "E1/mnist/K=2/rich", "FedAvg", seed, acc)
    for exp, base in (("E1/mnist/K=2/rich", 0.0), ("E1/mnist/K=3/rich", -0.01), ("E1/mnist/K=2/sparse", -0.05)):
        save(con, exp, "Oracle", 0, 0.99 + base)
        save(con, exp, "Conditional", 0, 0.985 + base)
        save(con, exp, "IFCA", 0, 0.95 + base, extra={"ari": 0.75})
    save(con, "E2b/mnist/C1/rich", "Conditional", 0, 0.93)
    save(con, "E1/mnist/K=5/rich", "Ditto", 0, None, error="diverged: loss is nan at round 3")
    save(con, "E1/mnist/K=3/rich", "IFCA", 1, None, error="diverged | twice\nat round 7")  # beside a finished seed
    save(con, "E1/mnist/K=2/rich", "FedAvg", 0, 0.55, protocol="smoke")
    con.close()
    return path


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> tuple[Path, str]:
    tmp = tmp_path_factory.mktemp("report")
    db = build_db(tmp / "results.sqlite")
    path = write_report(db, tmp / "out")
    return path, path.read_text()


def section(text: str, heading: str) -> str:
    """The text from `heading` to the next heading of the same or a higher level."""
    start = text.index(heading)
    level = heading.split(" ")[0]
    nxt = [i for i in (text.find("\n" + "#" * n + " ", start + 1) for n in range(1, len(level) + 1)) if i != -1]
    return text[start:min(nxt) if nxt else len(text)]


def row(table_text: str, dataset: str, setting: str) -> list[str]:
    for line in table_text.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[:2] == [dataset, setting]:
            return cells
    raise AssertionError(f"no row {dataset} {setting}")


def column(table_text: str, name: str) -> int:
    head = next(line for line in table_text.splitlines() if line.startswith("| dataset"))
    return [c.strip() for c in head.strip("|").split("|")].index(name)


def test_loaders_split_ok_and_failed(tmp_path):
    db = build_db(tmp_path / "r.sqlite")
    ok, failed = load_runs(db), load_failed(db)
    assert len(ok) == 13 and all(r["status"] == "ok" and r["experiment"] for r in ok)
    assert [(r["experiment"], r["method"], r["error"]) for r in failed] == [
        ("E1/mnist/K=3/rich", "IFCA", "diverged | twice\nat round 7"), ("E1/mnist/K=5/rich", "Ditto", "diverged: loss is nan at round 3")]
    assert {r["method"]: r["extra"] for r in ok if r["experiment"] == "E1/mnist/K=2/rich"}["IFCA"] == {"ari": 0.75}
    assert paper_results()[0].keys() == {"table", "experiment", "dataset", "setting", "method", "accuracy"}


def test_one_table_per_published_table_and_protocol(report):
    _, text = report
    tables = list(dict.fromkeys(r["table"] for r in paper_results()))
    def table_headings(label):
        return [h.split()[2].rstrip(":") for h in text.splitlines() if h.startswith("### Table ") and h.endswith(label)]

    # paper, the reproduction's target, shows every published table; smoke only those it ran a cell of
    assert table_headings("protocol `paper`") == tables
    assert table_headings("protocol `smoke` (not a reproduction)") == ["X", "XI"]
    assert text.index("## Results, protocol `paper`") < text.index("## Results, protocol `smoke`")
    assert "### Table X: E1 label shift, protocol `paper`" in text
    assert "not the paper's protocol" in section(text, "## Results, protocol `smoke`")


def test_cell_shows_mean_spread_published_and_difference(report):
    _, text = report
    assert text.count("Cells read *ours (published, difference)*") == 1  # the legend, once, before the tables
    assert text.index("Cells read") < text.index("### Table X:")
    table = section(text, "### Table X: E1 label shift, protocol `paper`")
    cells = row(table, "mnist", "K=2")
    pub = published("X", "mnist", "K=2", "FedAvg")
    mean, std = statistics.fmean(FEDAVG_SEEDS), statistics.stdev(FEDAVG_SEEDS)
    expected = f"{100 * mean:.1f} ± {100 * std:.1f} ({100 * pub:.1f}, {100 * (mean - pub):+.1f} pp)"
    assert cells[column(table, "FedAvg")] == expected == "97.5 ± 0.7 (98.6, -1.1 pp)"
    assert cells[column(table, "seeds")] == "1-2"
    oracle = published("X", "mnist", "K=2", "Oracle")
    assert cells[column(table, "Oracle")] == f"99.0 ({100 * oracle:.1f}, {100 * (0.99 - oracle):+.1f} pp)"  # one seed: no spread
    # the smoke run of the same cell stays in its own table
    smoke = section(text, "### Table X: E1 label shift, protocol `smoke` (not a reproduction)")
    assert row(smoke, "mnist", "K=2")[column(smoke, "FedAvg")].startswith("55.0 (98.6, -43.6 pp)")


def test_missing_and_failed_cells_keep_the_published_value(report):
    _, text = report
    table = section(text, "### Table X: E1 label shift, protocol `paper`")
    pub = published("X", "fmnist", "K=3", "Gossip")
    assert row(table, "fmnist", "K=3")[column(table, "Gossip")] == f"not run ({100 * pub:.1f})"
    assert row(table, "mnist", "K=5")[column(table, "Ditto")] == f"failed ×1 ({100 * published('X', 'mnist', 'K=5', 'Ditto'):.1f})"
    ifca = published("X", "mnist", "K=3", "IFCA")
    assert row(table, "mnist", "K=3")[column(table, "IFCA")] == f"94.0 ({100 * ifca:.1f}, {100 * (0.94 - ifca):+.1f} pp; 1 seed failed)"
    assert "7 of 96 published cells run" in table  # K=2: FedAvg, IFCA, Oracle, Conditional; K=3: the last three
    # a setting in two tables (E1 K=2 rich: X and XI) shows in both, each beside its own published value
    xi = section(text, "### Table XI: E1 label shift, protocol `paper`")
    pub = published("XI", "mnist", "K=2,rich", "IFCA")
    assert row(xi, "mnist", "K=2,rich")[column(xi, "IFCA")] == f"95.0 ({100 * pub:.1f}, {100 * (0.95 - pub):+.1f} pp)"


def test_unpublished_ari_and_failed_sections(report):
    _, text = report
    unpub = section(text, "### Experiments without a published table, protocol `paper`")
    assert "| E4a/mnist+fmnist/clients=10 |" in unpub
    assert "E2b/" not in unpub  # E2b has its published table (XV) now
    xv = section(text, "### Table XV: E2b covariate shift by rotation, protocol `paper`")
    pub = published("XV", "mnist", "C1", "Conditional")
    assert row(xv, "mnist", "C1")[column(xv, "Conditional")] == f"93.0 ({100 * pub:.1f}, {100 * (0.93 - pub):+.1f} pp)"
    ari = section(text, "### Cluster recovery (adjusted Rand index), protocol `paper`")
    assert "| E1/mnist/K=2/rich | IFCA | 0.750 | 1 |" in ari
    failed = section(text, "## Failed runs")
    assert "| paper | E1/mnist/K=5/rich | Ditto | 0 | diverged: loss is nan at round 3 |" in failed
    assert "| paper | E1/mnist/K=3/rich | IFCA | 1 | diverged \\| twice at round 7 |" in failed  # one table cell, escaped


def test_figures_exist_and_are_referenced(report):
    path, text = report
    out = path.parent
    for key in ("accuracy_vs_k", "accuracy_vs_sparsity", "gap_to_oracle", "heatmap", "conditional_minus_oracle"):
        png = out / f"{key}_paper.png"
        assert png.stat().st_size > 1000 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"]({png.name})" in text
    # the smoke protocol holds one FedAvg cell: what it cannot draw is skipped and said so
    assert (out / "heatmap_smoke.png").is_file()
    assert not (out / "gap_to_oracle_smoke.png").exists()
    smoke_figs = section(text, "### Figures, protocol `smoke` (not a reproduction)")
    assert "Gap to Oracle across sparsity: skipped, no sparsity setting" in smoke_figs


def test_header_and_deterministic_output(report, tmp_path):
    path, text = report
    again = write_report(path.parent.parent / "results.sqlite", tmp_path / "again")
    assert again.read_text() == text
    assert (tmp_path / "again" / "heatmap_paper.png").read_bytes() == (path.parent / "heatmap_paper.png").read_bytes()
    assert "- Rows: 15 (13 finished experiment runs, 2 failed" in text
    assert "- Protocols: `paper` (14 rows), `smoke` (1 row)" in text
    assert "- Git revisions: `" in text
    # protocol filter: only the smoke tables
    only = write_report(path.parent.parent / "results.sqlite", tmp_path / "smoke", protocol_name="smoke").read_text()
    assert "protocol `paper`" not in only.split("## Failed runs")[0] and "### Table X: E1 label shift, protocol `smoke`" in only
    assert "None." in section(only, "## Failed runs")


def test_empty_database_and_unknown_protocol(tmp_path):
    db = tmp_path / "empty.sqlite"
    results.connect(db).close()
    text = write_report(db, tmp_path / "out").read_text()
    assert "No experiment has been run yet" in text
    table = section(text, "### Table XII: E1 label shift, no runs yet")
    pub = published("XII", "cifar100", "K=20", "Conditional")
    assert row(table, "cifar100", "K=20")[column(table, "Conditional")] == f"not run ({100 * pub:.1f})"
    assert "Accuracy vs K, one row per table with a K sweep: skipped" in text
    assert not list((tmp_path / "out").glob("*.png"))
    with pytest.raises(FedcondError, match="holds no run of protocol 'papr'"):
        write_report(db, tmp_path / "out", protocol_name="papr")


def test_missing_or_incompatible_database_is_refused(tmp_path):
    with pytest.raises(FedcondError, match="no results database"):
        load_runs(tmp_path / "absent.sqlite")
    assert not (tmp_path / "absent.sqlite").exists()  # a report never creates a database
    db = tmp_path / "old.sqlite"
    results.connect(db).close()
    with sqlite3.connect(db) as con:
        con.execute("UPDATE meta SET value = '999' WHERE key = 'schema_version'")
    con.close()
    with pytest.raises(FedcondError, match="schema version 999"):
        results.connect(db)
    with pytest.raises(FedcondError, match="schema version 999"):
        write_report(db, tmp_path / "out")


def test_earlier_study_rows_get_their_own_tables(tmp_path):
    """MCDC rows: RMSE for linear regression (lower is better), accuracy for logistic regression."""
    from types import SimpleNamespace

    from fedcond import results
    from fedcond.report import write_report

    db = tmp_path / "mcdc.sqlite"
    con = results.connect(db)
    for exp, method, value in (("MCDC/linreg/3clusters", "cluster", 0.1006), ("MCDC/logreg/8clusters", "mlp", 0.9525)):
        r = SimpleNamespace(accuracy=value, accuracy_std=0.0, weighted_accuracy=value, per_client=[value], seconds=1.0,
                            rounds=1, hyperparameters={}, extra={})
        results.save_run(con, family="MCDC", dataset="synthetic", scenario={}, method=method, seed=0, protocol={},
                         result=r, experiment=exp, protocol_name="paper")
    con.close()
    text = write_report(db, tmp_path / "out").read_text()
    section = text[text.index("The earlier study"):]
    assert "`MCDC/linreg/3clusters` (RMSE, lower is better)" in section and "0.1006" in section
    assert "`MCDC/logreg/8clusters` (accuracy, %)" in section and "95.2" in section
    assert "(not in the registry)" not in text


def test_header_names_the_database_as_given(tmp_path, monkeypatch):
    """A committed report must not carry the author's absolute paths."""
    build_db(tmp_path / "r.sqlite")
    monkeypatch.chdir(tmp_path)
    text = write_report(Path("r.sqlite"), tmp_path / "out").read_text()
    assert "- Database: `r.sqlite`" in text


def test_cells_beyond_3pp_are_listed_with_their_explanation_or_marked_unexplained(tmp_path):
    con = results.connect(tmp_path / "r.sqlite")
    save_super_sparse(con, "Gossip", +0.20)  # far off, explained
    save_super_sparse(con, "FedAvg", -0.05)  # far off, not explained
    save_super_sparse(con, "Oracle", +0.01)
    save(con, "E3b/mnist/K=2/rich", "Conditional", 0, 0.99, protocol="paper[statistic=random]")
    save(con, "E3b/mnist/K=2/rich", "Conditional", 0, 0.98)
    con.close()
    text = report_explained(tmp_path, "E1/mnist/K=2/super_sparse,Gossip,seed spread (seeds 1-2)\n")
    section = gaps_of(text)
    assert "2 cells; 1 unexplained; 0 explained by a reading other than the default" in section
    assert "| XI | E1/mnist/K=2/super_sparse | Gossip |" in section and "seed spread (seeds 1-2)" in section
    assert "| XI | E1/mnist/K=2/super_sparse | FedAvg |" in section and "**unexplained**" in section
    assert "Oracle" not in section
    control = text.split("### Control: Conditional with a random vector")[1].split("###")[0]
    assert "| E3b/mnist/K=2/rich | 98.0 | 99.0 |" in control
    assert "protocol `paper` with statistic=random" in text


def test_an_explanation_that_starts_unexplained_counts_as_unexplained_and_keeps_its_evidence(tmp_path):
    """A gap measured well (say, a seed spread that does not cover it) stays unexplained."""
    con = results.connect(tmp_path / "r.sqlite")
    save_super_sparse(con, "FedAvg", -0.08)
    con.close()
    text = report_explained(tmp_path, "E1/mnist/K=2/super_sparse,FedAvg,\"unexplained: seeds 0-2 sd 4 pp\"\n")
    section = gaps_of(text)
    assert "1 cell; 1 unexplained" in section
    assert "**unexplained**: seeds 0-2 sd 4 pp" in section


def test_a_gap_explained_by_another_reading_is_counted_apart(tmp_path):
    """The default does not reproduce such a cell; a probe under another reading does. The count says how
    many of the explained cells rest on that, so a reader can tell them from seed spread."""
    con = results.connect(tmp_path / "r.sqlite")
    save_super_sparse(con, "FedAvg", -0.08)
    save_super_sparse(con, "Gossip", +0.10)
    con.close()
    csv_text = ("E1/mnist/K=2/super_sparse,FedAvg,\"Reading of the loader: dropped gives the published value\"\n"
                "E1/mnist/K=2/super_sparse,Gossip,\"seed spread: seeds 0-2\"\n")
    section = gaps_of(report_explained(tmp_path, csv_text))
    assert "2 cells; 0 unexplained; 1 explained by a reading other than the default" in section


def test_readme_summary_block_is_refilled_from_the_database_and_the_rest_kept(tmp_path):
    from fedcond.report.readme import BEGIN, END

    con = results.connect(tmp_path / "r.sqlite")
    save_super_sparse(con, "FedAvg", -0.05)
    save_super_sparse(con, "Oracle", +0.01)
    con.close()
    readme = tmp_path / "README.md"
    readme.write_text(f"# title\nabove\n{BEGIN}\nstale table\n{END}\nbelow\n")
    write_report(tmp_path / "r.sqlite", tmp_path / "out", "paper", readme=readme)
    text = readme.read_text()
    assert text.startswith("# title\nabove\n" + BEGIN) and text.endswith(END + "\nbelow\n")
    assert "stale table" not in text
    assert "| XI (E1 label shift) | 2 of 120 | -2.0 pp | 3.0 pp |" in text
    assert "| XIII (E2a covariate shift by subclasses) | 0 of 72 | - | - |" in text
    assert "value: 1 cell; 1 unexplained; 0 explained by a reading other than the default" in text
    assert "`docs/results/explanations.csv`; in short: E1/mnist/K=2/super_sparse FedAvg" in text


def test_readme_without_its_markers_or_without_a_protocol_is_one_clear_error(tmp_path):
    db = build_db(tmp_path / "r.sqlite")
    readme = tmp_path / "README.md"
    readme.write_text("# no markers here\n")
    with pytest.raises(FedcondError, match="no .* block to fill"):
        write_report(db, tmp_path / "out", "paper", readme=readme)
    with pytest.raises(FedcondError, match="give --protocol too"):
        write_report(db, tmp_path / "out", readme=readme)
    assert readme.read_text() == "# no markers here\n"


def test_a_malformed_explanations_file_is_one_clear_error(tmp_path):
    db = build_db(tmp_path / "r.sqlite")
    bad = tmp_path / "why.csv"
    bad.write_text("exp,method,why\nE1/mnist/K=2/rich,FedAvg,x\n")
    with pytest.raises(FedcondError, match="no column experiment, explanation"):
        write_report(db, tmp_path / "out", explanations=bad)
    from fedcond.cli import main

    assert main(["report", "--db", str(db), "--out", str(tmp_path / "o2"), "--explanations", str(tmp_path / "none.csv")]) == 2


def test_newcomers_section_shows_seen_and_unseen_per_statistic(tmp_path):
    con = results.connect(tmp_path / "r.sqlite")
    for statistic, unseen in (("class_means", 0.97), ("eigenvalues", 0.55)):
        traffic = {"rounds": 20, "bytes_down_per_client": 2.5e6, "bytes_up_per_client": 2.5e6,
                   "samples_trained_per_client": 6000.0, "samples_forward_per_client": 0.0}
        extra = {"unseen_accuracy": unseen, **({"traffic": traffic} if statistic == "class_means" else {})}
        result = FakeResult(0.99, weighted_accuracy=0.99, extra=extra)
        results.save_run(con, family="E3b", dataset="mnist", scenario={}, method="Conditional", seed=0,
                         protocol={"statistic": statistic}, result=result, experiment="E3b/mnist/K=2/rich",
                         protocol_name=f"paper[statistic={statistic},holdout_clients=1]")
    con.close()
    text = write_report(tmp_path / "r.sqlite", tmp_path / "out").read_text()
    section = text.split("## Clients never seen in training")[1]
    assert "| E3b/mnist/K=2/rich | class_means | Conditional | 99.0 | 97.0 | -2.0 pp | 1 | 20 | 2.50 | 2.50 | 6000 |" in section
    assert "| E3b/mnist/K=2/rich | eigenvalues | Conditional | 99.0 | 55.0 | -44.0 pp | 1 | " in section
    assert "| -44.0 pp | 1 | 1 | - | - | - |" in section  # no traffic recorded: not measured, not zero
    assert "![seen against unseen accuracy](newcomers_seen_unseen.png)" in section
    assert (tmp_path / "out" / "newcomers_seen_unseen.png").read_bytes()[:4] == b"\x89PNG"
    from fedcond.report.newcomers import figure_panels

    # a point far below the rest gets the top right enlarged beside the whole; points all near it, one panel
    assert figure_panels(45.0) == [(42.0, "every configuration"), (85.0, "enlarged: 85-100%")]
    assert figure_panels(88.0) == [(85.0, "every configuration")]


def test_the_newcomers_figure_labels_each_method_with_its_measured_budget():
    """Rounds, and client compute against FedAvg's in the same configuration (mean over configurations);
    a method whose clients train nothing is 'pooled'; a method without traffic gets no label."""
    from fedcond.report.newcomers import budget_labels, distinct_colours

    def row(exp, method, samples, rounds=20, traffic=True):
        t = {"rounds": rounds, "bytes_down_per_client": 1.0, "bytes_up_per_client": 1.0,
             "samples_trained_per_client": samples}
        return {"experiment": exp, "method": method, "accuracy": 0.9, "rounds": rounds,
                "protocol": {"holdout_clients": 1}, "extra": {"unseen_accuracy": 0.9, **({"traffic": t} if traffic else {})}}

    rows = [row("E3b/mnist/K=2/rich", "FedAvg", 1000), row("E3b/mnist/K=2/rich", "FedRep", 11000),
            row("E3b/mnist/K=2/super_sparse", "FedAvg", 100), row("E3b/mnist/K=2/super_sparse", "FedRep", 900),
            row("E3b/mnist/K=2/rich", "Oracle", 0), row("E3b/mnist/K=2/rich", "PeFLL", 5, traffic=False)]
    labels = budget_labels(rows)
    assert labels["FedAvg"] == "20 rounds, 1.0x FedAvg's compute"
    assert labels["FedRep"] == "20 rounds, 10.0x FedAvg's compute"  # (11 + 9) / 2
    assert labels["Oracle"] == "20 epochs on pooled data"
    assert "PeFLL" not in labels
    assert len(set(distinct_colours(10))) == 10 and len(set(distinct_colours(14))) == 14  # no two methods share a colour


def test_newcomers_summary_says_who_wins_where_and_the_deployable_gap_to_oracle(tmp_path):
    """Two configurations: Conditional-FedAvg within 1.5 pp of Oracle on one (seen and unseen), 6 pp
    short on the other; Ditto has no model for a newcomer, so it is in the table with its seen
    accuracy only and never 'best on the newcomers'."""
    con = results.connect(tmp_path / "r.sqlite")
    scores = {
        "E3b/mnist/K=2/rich": {"Oracle": (0.99, 0.99), "Conditional-FedAvg": (0.985, 0.98), "FedAvg": (0.5, 0.5),
                               "Ditto": (0.99, None)},
        "E3b/mnist/K=2/super_sparse": {"Oracle": (0.99, 0.99), "Conditional-FedAvg": (0.93, 0.92),
                                       "FedAvg": (0.45, 0.45), "Ditto": (0.95, None)},
    }
    for exp, methods in scores.items():
        for method, (seen, unseen) in methods.items():
            extra = {} if unseen is None else {"unseen_accuracy": unseen}
            results.save_run(con, family="E3b", dataset="mnist", scenario={}, method=method, seed=0,
                             protocol={"statistic": "class_means", "holdout_clients": 1},
                             result=FakeResult(seen, weighted_accuracy=seen, extra=extra), experiment=exp,
                             protocol_name="paper[statistic=class_means,holdout_clients=1]")
    con.close()
    section = write_report(tmp_path / "r.sqlite", tmp_path / "out").read_text().split("## Clients never seen")[1]
    assert "| E3b/mnist/K=2/rich | - | Ditto | 99.0 | - | - | 1 |" in section
    assert "- Best method other than Oracle on the training clients (seen): Ditto on 2 of 2." in section
    assert "- Best method other than Oracle on the newcomers (unseen): Conditional-FedAvg on 2 of 2." in section
    assert ("- Conditional-FedAvg against Oracle, seen: within 1.5 pp on 1 of 2 configuration(s); mean -3.2 pp, "
            "worst -6.0 pp on E3b/mnist/K=2/super_sparse (class_means).") in section
    assert "- Conditional-FedAvg against Oracle, unseen: within 1.5 pp on 1 of 2" in section
    # its losses to a rival, as plainly: Ditto beats it on both configurations seen, nobody unseen
    assert ("- Conditional-FedAvg below a rival, seen: on 2 of 2 configuration(s): Ditto on "
            "E3b/mnist/K=2/super_sparse by 2.0 pp; Ditto on E3b/mnist/K=2/rich by 0.5 pp.") in section
    assert "- Conditional-FedAvg below a rival, unseen: on none of 2 configuration(s)." in section
    from fedcond.report.newcomers_table import _margin

    assert _margin(0.0003) == "less than 0.1 pp" and _margin(0.0006) == "0.1 pp"  # never "by 0.0 pp"


def test_wall_time_per_configuration_names_the_cpu(tmp_path):
    con = results.connect(tmp_path / "r.sqlite")
    # Ditto ran beside other runs: 30 minutes of wall time, 12 of CPU; FedAvg is from before CPU time was kept
    for method, seconds, extra in (("FedAvg", 300.0, {}), ("Ditto", 1800.0, {"cpu_seconds": 720.0})):
        results.save_run(con, family="E1", dataset="mnist", scenario={}, method=method, seed=0, protocol={},
                         result=FakeResult(0.9, seconds=seconds, extra=extra), experiment="E1/mnist/K=2/rich",
                         protocol_name="paper")
    con.execute("UPDATE runs SET versions = '{}' WHERE method = 'FedAvg'")  # a row from before the CPU was recorded
    con.commit()
    con.close()
    text = write_report(tmp_path / "r.sqlite", tmp_path / "out").read_text()
    section = text.split("## Wall time per configuration")[1].split("\n## ")[0]
    # core-hours: Ditto's CPU time (12 min) and FedAvg's wall time (5 min), the only time it has
    assert "In all: 2 rows, 0.3 core-hours." in section and "(1 of 2 rows:" in section
    line = next(x for x in section.splitlines() if x.startswith("| paper | E1/mnist/K=2/rich |"))
    assert line.startswith("| paper | E1/mnist/K=2/rich | 2 | 35 | 12 (1 row) | Ditto (30) | ") and "not recorded" in line
    assert results.versions()["cpu"] in line  # the recorded CPU, with its vector ISA
    # per published table: E1 K=2 rich is printed by X and XI, so its 0.3 core-hours count in both
    assert "| paper | X | 2 | 0.3 | " in section and "| paper | XI | 2 | 0.3 | " in section
    assert section.index("| paper | X |") < section.index("| paper | XI |") < section.index("Per configuration:")


def test_a_variant_protocol_shows_only_the_published_tables_it_ran(tmp_path):
    con = results.connect(tmp_path / "r.sqlite")
    save(con, "E3b/mnist/K=2/rich", "Conditional", 0, 0.98, protocol="paper[statistic=class_means]")
    save(con, "E1/mnist/K=2/rich", "FedAvg", 0, 0.98)
    con.close()
    text = write_report(tmp_path / "r.sqlite", tmp_path / "out").read_text()
    variant = text[text.index("## Results, protocol `paper` with statistic=class_means"):]
    assert "### Table XVII: E3b" in variant and "### Table X: E1" not in variant
    assert "### Table X: E1" in text and "### Table XVIII: E3b" in text  # the preset keeps every table
    # ... and of a table it ran, only the configurations it ran: the others would repeat the published numbers
    xvii = section(variant, "### Table XVII")
    assert "only the 1 of its 12 configurations this protocol ran are shown" in xvii
    assert row(xvii, "mnist", "K=2")[column(xvii, "Conditional")].startswith("98.0 (")
    assert "| mnist | K=3 |" not in xvii and "| fmnist |" not in xvii
    preset = section(text, "### Table X: E1")  # the preset still lists every configuration, run or not
    assert "| fmnist | K=5 |" in preset and "configurations this protocol ran" not in preset


def test_an_encoder_source_variant_stands_in_for_a_paper_cell_it_alone_ran(tmp_path):
    from fedcond.report.readme import BEGIN, END

    exp = "E1/cifar10/K=2/rich"
    pub_c, pub_o = (published("X", "cifar10", "K=2", m) for m in ("Conditional", "Oracle"))
    con = results.connect(tmp_path / "r.sqlite")
    save(con, exp, "Oracle", 0, pub_o - 0.01)
    save(con, exp, "Oracle", 0, 0.10, protocol="paper[encoder_source=pacs32]")  # paper's own cell wins
    save(con, exp, "Conditional", 0, pub_c - 0.05, protocol="paper[encoder_source=pacs32]")
    save(con, exp, "IFCA", 0, 0.50, protocol="paper[epochs=3,encoder_source=pacs32]")  # changes more: no stand-in
    con.close()
    readme = tmp_path / "README.md"
    readme.write_text(f"{BEGIN}\n{END}\n")
    text = write_report(tmp_path / "r.sqlite", tmp_path / "out", "paper", readme=readme).read_text()
    table = section(text, "### Table X: E1")
    cifar = row(table, "cifar10", "K=2")
    assert cifar[column(table, "Conditional")] == f"{100 * (pub_c - 0.05):.1f} † ({100 * pub_c:.1f}, -5.0 pp)"
    assert cifar[column(table, "Oracle")] == f"{100 * (pub_o - 0.01):.1f} ({100 * pub_o:.1f}, -1.0 pp)"
    assert cifar[column(table, "IFCA")].startswith("not run")
    assert "2 of 96 published cells run" in table and "† Run under `paper[encoder_source=pacs32]`" in table
    gaps = gaps_of(text)
    assert f"| X | {exp} | Conditional | {100 * (pub_c - 0.05):.1f} † |" in gaps and "Oracle" not in gaps
    assert "† Run under" in gaps
    summary = readme.read_text()
    assert "| X (E1 label shift) | 2 of 96 |" in summary and f"{exp} Conditional" in summary
    assert summary.rstrip().endswith("counts toward the table.\n" + END)
    # without its mark nothing else changes: a report of a database with no variant has no footnote
    assert "†" not in section(text, "### Table XIII: E2a")


def test_stands_in_reads_a_protocol_name_with_the_sweeps_own_parser():
    from fedcond.report.data import stands_in

    assert stands_in("paper[encoder_source=pacs32]")
    assert not stands_in("paper") and not stands_in(None)
    assert not stands_in("paper[encoder_source=pacs32,lr=0.02]")  # changes more than the missing input
    assert not stands_in("short[encoder_source=pacs32]")  # another preset's variant
    assert stands_in("short[encoder_source=pacs32]", preset="short")
    assert not stands_in("paper[nonsense=1]") and not stands_in("paper[encoder_source=pacs32")  # not a sweep's name


def test_a_bf16_variant_stands_in_on_cifar10_only_and_says_why(tmp_path):
    """bf16 was validated on E1/cifar10/K=2/rich and adopted for the CIFAR-10 grid: a `paper[precision=bf16]`
    cell fills a CIFAR-10 cell the paper protocol has no run of, with its own reason in the footnote
    (with the encoder's where both changed); on MNIST it stays a variant."""
    from fedcond.report.data import stands_in

    assert stands_in("paper[precision=bf16]", experiment="E1/cifar10/K=3/rich")
    assert stands_in("paper[encoder_source=pacs32,precision=bf16]", experiment="E1/cifar10/K=3/rich")
    assert not stands_in("paper[precision=bf16]", experiment="E1/mnist/K=3/rich")
    assert stands_in("paper[encoder_source=pacs32]", experiment="E1/mnist/K=3/rich")  # no dataset limit
    # the value adopted, not the option's name: another precision on CIFAR-10 stays a variant
    assert not stands_in("paper[precision=fp32]", experiment="E1/cifar10/K=3/rich")
    assert not stands_in("paper[precision=fp32]") and stands_in("paper[precision=bf16]")
    con = results.connect(tmp_path / "r.sqlite")
    pub_o, pub_c = (published("X", "cifar10", "K=3", m) for m in ("Oracle", "Conditional"))
    save(con, "E1/cifar10/K=3/rich", "Oracle", 0, pub_o - 0.01, protocol="paper[precision=bf16]")
    save(con, "E1/cifar10/K=3/rich", "Conditional", 0, pub_c - 0.02,
         protocol="paper[encoder_source=pacs32,precision=bf16]")
    save(con, "E1/mnist/K=3/rich", "Oracle", 0, 0.99, protocol="paper[precision=bf16]")
    # where the fp32 stand-in ran too, it fills the cell, not the bf16 one (fewer options changed)
    save(con, "E1/cifar10/K=2/rich", "Conditional", 0, 0.80, protocol="paper[encoder_source=pacs32,precision=bf16]")
    save(con, "E1/cifar10/K=2/rich", "Conditional", 0, 0.82, protocol="paper[encoder_source=pacs32]")
    con.close()
    text = write_report(tmp_path / "r.sqlite", tmp_path / "out", "paper").read_text()
    table = section(text, "### Table X: E1")
    assert row(table, "cifar10", "K=3")[column(table, "Oracle")].startswith(f"{100 * (pub_o - 0.01):.1f} † (")
    assert row(table, "cifar10", "K=3")[column(table, "Conditional")].startswith(f"{100 * (pub_c - 0.02):.1f} † (")
    assert row(table, "mnist", "K=3")[column(table, "Oracle")].startswith("not run")
    assert row(table, "cifar10", "K=2")[column(table, "Conditional")].startswith("82.0 † (")
    note = next(line for line in table.splitlines() if line.startswith("† Run under"))
    assert "`paper[encoder_source=pacs32,precision=bf16]`, `paper[encoder_source=pacs32]`, `paper[precision=bf16]`" in note
    assert "CIFAR-100 source" in note and "bf16 arithmetic, adopted for the CIFAR-10 grid" in note


def test_a_line_joins_only_neighbouring_levels_that_were_run():
    from fedcond.report.figures import _runs

    levels = [5, 10, 20, 50, 100]
    assert _runs([5, 100], levels) == [(0, 1), (1, 2)]  # rich and super sparse only: two markers, no line
    assert _runs([5, 10, 20, 100], levels) == [(0, 3), (3, 4)]
    assert _runs(levels, levels) == [(0, 5)]
    assert _runs([], levels) == []


def test_an_explanations_head_is_its_first_clause_without_a_parenthesis_left_open():
    from fedcond.report.tables import explanation_head

    assert explanation_head("seed spread: seeds 0-2 give .9") == "seed spread"
    assert explanation_head("Reading of the loader (issue 40; dropped, seed 0): .85") == "Reading of the loader"
    assert explanation_head("reading of Ditto's epochs (issue 40): .73") == "reading of Ditto's epochs (issue 40)"
    assert explanation_head("the grouping (FMNIST (K=5)); more") == "the grouping (FMNIST (K=5))"


def e1_fmnist_super_sparse_newcomers_section(tmp_path, scores: dict) -> str:
    """The newcomers section of a report on one configuration: method -> (seen, unseen), seed 0."""
    con = results.connect(tmp_path / "r.sqlite")
    for method, (seen, unseen) in scores.items():
        results.save_run(con, family="E1", dataset="fmnist", scenario={}, method=method, seed=0,
                         protocol={"statistic": "class_means", "holdout_clients": 1},
                         result=FakeResult(seen, weighted_accuracy=seen, extra={"unseen_accuracy": unseen}),
                         experiment="E1/fmnist/K=2/super_sparse",
                         protocol_name="paper[statistic=class_means,holdout_clients=1]")
    con.close()
    return write_report(tmp_path / "r.sqlite", tmp_path / "out").read_text().split("## Clients never seen")[1]


def test_newcomers_summary_reads_a_gap_to_oracle_against_the_federated_ceiling(tmp_path):
    """Where Oracle-FedAvg ran, the deployable Conditional's gap to it and the ceiling's own gap to Oracle
    are said per configuration, and an oracle is never 'the best method'."""
    ceiling = "Oracle-FedAvg(server_opt=momentum,server_momentum=0.5,local_epochs=5)"
    scores = {"Oracle": (0.924, 0.92), "Conditional-FedAvg": (0.886, 0.88), ceiling: (0.90, 0.93), "FedAvg": (0.68, 0.67)}
    section = e1_fmnist_super_sparse_newcomers_section(tmp_path, scores)
    assert "- Best method other than Oracle on the newcomers (unseen): Conditional-FedAvg on 1 of 1." in section
    assert (f"- Conditional-FedAvg against the federated ceiling {ceiling} (FedAvg within each true cluster), seen: "
            "E1/fmnist/K=2/super_sparse -1.4 pp (the ceiling against Oracle -2.4 pp).") in section
    assert "unseen: E1/fmnist/K=2/super_sparse -5.0 pp (the ceiling against Oracle +1.0 pp)." in section


def test_a_long_method_name_is_broken_at_its_commas_in_figures():
    from fedcond.report.figures import method_label

    assert method_label("FedAvg") == "FedAvg"
    label = method_label("Oracle-FedAvg(server_opt=momentum,server_momentum=0.5,local_epochs=5)")
    assert label.replace("\n", "") == "Oracle-FedAvg(server_opt=momentum,server_momentum=0.5,local_epochs=5)"
    assert max(len(line) for line in label.splitlines()) <= 24


def test_a_gap_to_oracle_is_said_as_the_test_samples_behind_it(tmp_path):
    """Beyond 1.5 pp, each gap is tested sample by sample: exactly where both rows kept their hits,
    as a lower bound on p from the newcomers' test-set sizes where they kept accuracies only."""
    from fedcond.report.paired import Paired, paired
    from fedcond.results import pack_hits

    oracle_seen = [np.array([True] * 90 + [False] * 10), np.array([True] * 50)]
    mine_seen = [np.array([True] * 80 + [False] * 20), np.array([True] * 48 + [False] * 2)]
    con = results.connect(tmp_path / "r.sqlite")
    rows = {
        "Oracle": (oracle_seen, {"unseen_per_client": [1.0, 0.975], "unseen_test_sizes": [59, 40]}),
        "Conditional-FedAvg": (mine_seen, {"unseen_per_client": [1.0, 0.925], "unseen_test_sizes": [59, 40]}),
    }
    for method, (hits, unseen) in rows.items():
        seen = statistics.fmean(float(h.mean()) for h in hits)
        extra = {"test_hits": pack_hits(hits), "unseen_accuracy": statistics.fmean(unseen["unseen_per_client"]), **unseen}
        results.save_run(con, family="E2a", dataset="mnist", scenario={}, method=method, seed=0,
                         protocol={"statistic": "class_means", "holdout_clients": 1},
                         result=FakeResult(seen, weighted_accuracy=seen, extra=extra),
                         experiment="E2a/mnist/K=2/super_sparse",
                         protocol_name="paper[statistic=class_means,holdout_clients=1]")
    con.close()
    section = write_report(tmp_path / "r.sqlite", tmp_path / "out").read_text().split("## Clients never seen")[1]
    # seen: 10 + 2 samples only Oracle got right, none only Conditional-FedAvg: p = 2 / 2^12
    assert ("- Conditional-FedAvg's gaps to Oracle beyond 1.5 pp, seen, sample by sample (the same test samples; "
            "right only for Conditional-FedAvg / only for Oracle, McNemar's exact p): E2a/mnist/K=2/super_sparse "
            "seed 0: 0 / 12 of 150 right only for one, p = 0.00049.") in section
    # unseen: 37 against 39 of 40 on one newcomer, the other the same: two samples, never below p = 0.5
    assert ("unseen, sample by sample (the same test samples; right only for Conditional-FedAvg / only for Oracle, "
            "McNemar's exact p): E2a/mnist/K=2/super_sparse seed 0: 2 fewer of 99 right, p >= 0.5 however they "
            "pair") in section
    assert Paired(99, 97, 99).p == 0.5 and Paired(99, 90, 99, 1, 10).p == pytest.approx(2 * 12 / 2048)  # 2 (1 + 11) / 2^11
    # rows without sizes, or with different test sets, are not compared
    a = {"extra": {"unseen_per_client": [0.9]}}
    assert paired(a, {"extra": {"unseen_per_client": [0.8], "unseen_test_sizes": [10]}}, unseen=True) is None
    assert paired({"extra": {"test_hits": pack_hits([np.ones(3, bool)])}},
                  {"extra": {"test_hits": pack_hits([np.ones(4, bool)])}}, unseen=False) is None


def test_newcomers_summary_reads_a_lead_over_fedavg_against_fedavg_at_another_budget(tmp_path):
    """Where FedAvg also ran at the deployable Conditional's budget, its lead over that FedAvg is said beside
    its lead over plain FedAvg: how much of the lead is the conditioning and how much the compute."""
    budget = "FedAvg(server_opt=momentum,server_momentum=0.5,local_epochs=5)"
    scores = {"Oracle": (0.924, 0.92), "Conditional-FedAvg": (0.886, 0.88), budget: (0.869, 0.87), "FedAvg": (0.676, 0.71)}
    section = e1_fmnist_super_sparse_newcomers_section(tmp_path, scores)
    assert (f"- Conditional-FedAvg against {budget} (FedAvg at another budget), seen: "
            "E1/fmnist/K=2/super_sparse +1.7 pp (against plain FedAvg +21.0 pp).") in section
    assert "unseen: E1/fmnist/K=2/super_sparse +1.0 pp (against plain FedAvg +17.0 pp)." in section


def test_prediction_interval_is_students_and_needs_three_seeds():
    """mean +- t(0.975, n-1) * sd * sqrt(1 + 1/n): for seeds .80, .82, .84 (sd .02) t(0.975, 2) = 4.3027."""
    from fedcond.report.seed_spread import prediction_interval, verdict

    assert prediction_interval([0.8, 0.9]) is None and verdict([0.8, 0.9], 0.5) == "-"
    iv = prediction_interval([0.80, 0.82, 0.84])
    half = 4.302653 * 0.02 * (4 / 3) ** 0.5
    assert abs(iv.low - (0.82 - half)) < 1e-6 and abs(iv.high - (0.82 + half)) < 1e-6 and iv.n == 3
    assert verdict([0.80, 0.82, 0.84], 0.90) == "inside 72.1-91.9 (n=3)"
    assert verdict([0.80, 0.82, 0.84], 0.93).startswith("outside")
    assert verdict([0.97, 0.99, 1.0], 0.99) == "inside 91.1-100.0 (n=3)"  # shown clipped to what an accuracy can be


def test_gap_rows_say_whether_the_published_value_is_inside_our_seeds_interval(tmp_path):
    """A measurement beside the label: the count says how many unexplained cells it covers; the labels stay."""
    con = results.connect(tmp_path / "r.sqlite")
    for seed, acc in enumerate((0.65, 0.69, 0.73)):  # FedAvg published .738: 4.8 pp off, inside a wide spread
        save(con, "E1/mnist/K=2/super_sparse", "FedAvg", seed, acc)
    for seed, acc in enumerate((0.30, 0.31, 0.32)):  # Gossip published .151: far outside a tight spread
        save(con, "E1/mnist/K=2/super_sparse", "Gossip", seed, acc)
    con.close()
    section = gaps_of(report_explained(tmp_path, ""))
    assert "2 cells; 2 unexplained; 0 explained by a reading other than the default (of the unexplained, 1 with " \
           "the published value inside our seeds' 95% prediction interval)" in section
    fedavg = next(line for line in section.splitlines() if "| FedAvg |" in line)
    gossip = next(line for line in section.splitlines() if "| Gossip |" in line)
    assert "| inside " in fedavg and "(n=3) | **unexplained** |" in fedavg
    assert "| outside 26.0-36.0 (n=3) |" in gossip
