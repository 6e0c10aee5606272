"""The report's JDFL section, from a fixture database written as a sweep writes it (no training)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from fedcond import results
from fedcond.report import write_report


def _result(acc, extra=None, accuracy=None, rounds=4):
    """What save_run reads of a MethodResult: global accuracy `acc`, mean over clients `accuracy`."""
    return SimpleNamespace(accuracy=acc if accuracy is None else accuracy, accuracy_std=0.0, weighted_accuracy=acc,
                           per_client=[acc], seconds=1.0, rounds=rounds, hyperparameters={}, extra=extra or {})


def _save(con, experiment, method, seed, acc, extra=None, accuracy=None):
    results.save_run(con, family="domain", dataset="pacs", scenario={}, method=method, seed=seed, protocol={},
                     result=_result(acc, extra, accuracy), experiment=experiment, protocol_name="short")


def test_jdfl_section_main_ablation_sweep_and_discovery(tmp_path):
    db = tmp_path / "j.sqlite"
    con = results.connect(db)
    doms = {"photo": 0.5, "art_painting": 0.4, "cartoon": 0.6, "sketch": 0.7}
    for seed, shift in ((0, 0.0), (1, 0.02)):
        _save(con, "JDFL/pacs/main", "FedAvg", seed, 0.40 + shift, {"cluster_accuracy": doms})
        _save(con, "JDFL/pacs/main", "FedAvg+jdfl-graded", seed, 0.45 + shift,
              {"cluster_accuracy": doms, "pseudo_domains": 4, "ari": 0.8})
        _save(con, "JDFL/pacs/main", "FedAvg+jdfl-random", seed, 0.38 + shift, {"cluster_accuracy": doms})
        _save(con, "JDFL/pacs/main", "SCAFFOLD", seed, 0.30)
        _save(con, "JDFL/pacs/main", "SCAFFOLD+jdfl-random", seed, 0.35)
    _save(con, "JDFL/pacs/ablation", "FedAvg+expanded-hard", 0, 0.39)
    _save(con, "JDFL/pacs/m_sweep", "FedAvg+jdfl-graded(M=3)", 0, 0.44)
    _save(con, "JDFL/pacs/replicate", "FedAvg+jdfl-random(init=replicate)", 0, 0.425)
    _save(con, "JDFL/pacs/random_per_sample", "FedAvg+jdfl-random(draw=sample)", 0, 0.43)
    for e0, ari, elbow in ((1, 0.25, 3), (3, 0.75, 4)):
        _save(con, "JDFL/pacs/discovery", f"discovery(e0={e0},batch=64,layers=B)", 0, float("nan"),
              {"ari": ari, "elbow": elbow, "true_domains": 4})
    con.close()
    text = write_report(db, tmp_path / "out").read_text()
    jd = text[text.index("### JDFL (SPEC Part C)"):]
    assert "| FedAvg | 41.0 ± 1.4 (n=2) | 46.0 ± 1.4 (n=2) [+5.0 pp] | 39.0 ± 1.4 (n=2) [-2.0 pp] |" in jd
    assert "| SCAFFOLD | 30.0 ± 0.0 (n=2) | not run | 35.0 ± 0.0 (n=2) [+5.0 pp] |" in jd
    # one seed against FedAvg's two: the difference is taken on the seed both ran (0.39 - 0.40), not
    # against FedAvg's two-seed mean (which would read -2.0 and mix seed 1's spread into it)
    assert "| expanded head, hard client-fixed joint labels | 39.0 (n=1) [-1.0 pp on seed 0] |" in jd
    assert "| 3 | 44.0 (n=1) [+4.0 pp on seed 0] | not run |" in jd
    assert "| FedAvg | 41.0 ± 1.4 (n=2) | not run | 42.5 (n=1) [+2.5 pp on seed 0] |" in jd  # the replicated head
    assert "| FedAvg | 41.0 ± 1.4 (n=2) | 39.0 ± 1.4 (n=2) [-2.0 pp] | 43.0 (n=1) [+3.0 pp on seed 0] |" in jd  # per-sample slot
    claims = jd[jd.index("The JDFL text's claims"):]
    assert "| FedAvg + graded beats FedAvg | +5.0 ± 0.0 pp (n=2; per seed +5.0, +5.0) | holds |" in claims
    assert "| FedAvg + random beats FedAvg | -2.0 ± 0.0 pp (n=2; per seed -2.0, -2.0) | does not hold |" in claims
    assert "| random helps FedAvg more (random minus graded) | -7.0 ± 0.0 pp (n=2; per seed -7.0, -7.0) | does not hold |" in claims
    assert "gives no gain" in claims and "| -1.0 pp (n=1; per seed -1.0) | holds (one seed: indicative) |" in claims
    assert "| every M in 2..7 beats M = 1 (graded; each M's mean over its seeds) | M=3: +4.0 pp | 1 of 6 M run (one seed: indicative) |" in claims
    assert "seed 0: M = 4, ARI 0.800" in jd and "| photo | art_painting | cartoon | sketch |" in jd.replace("method | ", "")
    assert "| 3 | - | - | - | - | - | - | - | 0.75 | - |" in jd
    assert "The elbow picked M = 4 (the true number) in 1 of 2 cells" in jd
    # JDFL has its own section: no column per method in the generic tables, which a JDFL-only
    # database under a non-paper protocol leaves out altogether (they would be all "not run")
    assert "### Experiments without a published table" not in text and "### Table X:" not in text
    assert "### Cells more than 3 pp" not in text and "### Figures" not in text and "accuracy_vs_k" not in text
    assert "### The earlier study" not in text
    # nor the legend of a published table's cells ("mean over clients"): JDFL's tables are global accuracy
    assert "Cells read *ours (published, difference)*" not in text


def test_best_round_table_and_curves_figure(tmp_path):
    from fedcond import results
    from fedcond.report import write_report

    con = results.connect(tmp_path / "r.sqlite")

    for method, final, best in (("FedAvg", 0.5, 0.6), ("FedAvg+jdfl-graded", 0.55, 0.7)):
        curve = [[1, 0.3, 0.3], [2, best, best], [3, final, final]]
        extra = {"curve": curve, "best_weighted_accuracy": best, "best_weighted_round": 2}
        results.save_run(con, family="domain", dataset="pacs", scenario={}, method=method, seed=0, protocol={},
                         result=_result(final, extra, rounds=3), experiment="JDFL/pacs/main", protocol_name="jdfl")
    con.close()
    text = write_report(tmp_path / "r.sqlite", tmp_path / "out").read_text()
    best = text.split("Best round")[1].split("\n\n")[1]
    assert "| FedAvg | 60.0 (n=1) | 70.0 (n=1) [+10.0 pp] |" in best
    # the ablation table shows main's cells: their best round too, with no ablation run of its own
    assert "| expanded head, graded (JDFL) | 55.0 (n=1) [+5.0 pp] | 70.0 (n=1) [+10.0 pp] |" in text
    assert (tmp_path / "out" / "jdfl_curves_pacs_jdfl.png").is_file() and "jdfl_curves_pacs_jdfl.png" in text


def test_a_variant_of_a_main_cell_gets_its_own_row_beside_that_cell_and_a_curve(tmp_path):
    """A probe such as FedProc(temperature=0.5) is not one of main's cells: it is listed beside the cell
    it varies (not dropped, and not a main table of 'not run' where it ran alone)."""
    from fedcond.report.jdfl import jdfl_section

    def row(method, final, best):
        extra = {"curve": [[1, 0.3, 0.3], [2, best, best], [3, final, final]], "best_weighted_accuracy": best,
                 "best_weighted_round": 2}
        return {"experiment": "JDFL/pacs/main", "protocol_name": "jdfl", "method": method, "seed": 0,
                "weighted_accuracy": final, "extra": extra}

    both = [row("FedProc", 0.60, 0.61), row("FedProc(temperature=0.5)", 0.615, 0.62)]
    text = "\n".join(jdfl_section("jdfl", both, "protocol `jdfl`", out_dir=tmp_path))
    assert "| `FedProc(temperature=0.5)` | 61.5 (n=1) [+1.5 pp] | 62.0 (n=1) [+1.0 pp] | 2 | `FedProc` |" in text
    assert "| FedProc | 60.0 (n=1) |" in text and (tmp_path / "jdfl_curves_pacs_jdfl.png").is_file()
    alone = "\n".join(jdfl_section("jdfl", both[1:], "protocol `jdfl`", out_dir=tmp_path))
    assert "Main table" not in alone and "Ablation" not in alone
    assert "| `FedProc(temperature=0.5)` | 61.5 (n=1) | 62.0 (n=1) | 2 | - |" in alone


def test_jdfl_protocol_is_named_as_its_own_reproduction_protocol():
    from fedcond.report.tables import protocol_label, reproduction_note

    assert protocol_label("jdfl") == "protocol `jdfl`" and "not a reproduction" not in protocol_label("jdfl")
    assert protocol_label("jdfl[epochs=60,momentum=0.0]") == "protocol `jdfl` with epochs=60,momentum=0.0"
    assert "learning rate 0.01" in reproduction_note("jdfl") and "probe or variant" in reproduction_note("jdfl[epochs=3]")
    assert "not a reproduction" in protocol_label("short")


def test_protocol_probes_name_where_fedavgs_curve_flattens(tmp_path):
    from fedcond import results
    from fedcond.report import write_report

    con = results.connect(tmp_path / "p.sqlite")

    rising = [[r, 0.0, 0.3 + 0.01 * r] for r in range(1, 31)]  # +10 pp per 10 rounds throughout
    flat = [[r, 0.0, min(0.5, 0.3 + 0.01 * r)] for r in range(1, 31)]  # flat from round 20 on
    for name, curve, momentum in (("jdfl[momentum=0.0]", rising, 0.0), ("jdfl", flat, 0.9)):
        results.save_run(con, family="domain", dataset="pacs", scenario={}, method="FedAvg", seed=0,
                         protocol={"momentum": momentum}, result=_result(curve[-1][2], {"curve": curve}, rounds=30),
                         experiment="JDFL/pacs/main", protocol_name=name)
    con.close()
    text = write_report(tmp_path / "p.sqlite", tmp_path / "out").read_text()
    probes = text.split("## JDFL protocol probes")[1]
    assert "| `jdfl` | 0 | 0.9 | 30 | 50.0 | 50.0 | 20: +10.0, 30: +0.0 | 30 |" in probes
    assert "| `jdfl[momentum=0.0]` | 0 | 0.0 | 30 | 60.0 | 60.0 | 20: +10.0, 30: +10.0 | not by 30 |" in probes
    assert (tmp_path / "out" / "jdfl_probes_pacs.png").is_file()


def test_a_dataset_without_runs_says_why_from_the_explanations_file(tmp_path):
    from fedcond import results
    from fedcond.report import write_report

    con = results.connect(tmp_path / "j.sqlite")
    _save(con, "JDFL/pacs/main", "FedAvg", 0, 0.40)
    con.close()
    why = tmp_path / "why.csv"
    why.write_text('experiment,method,explanation\nJDFL/office/main,*,"no copy of the data here"\n')
    text = write_report(tmp_path / "j.sqlite", tmp_path / "out", explanations=why).read_text()
    office = text[text.index("#### office"):]
    assert office.split("\n\n")[1] == "No run of this protocol: no copy of the data here"


def test_pairs_sample_by_sample_per_domain_with_mcnemar(tmp_path):
    import math

    import numpy as np

    from fedcond.report.paired import mcnemar_p
    from fedcond.results import pack_hits

    assert mcnemar_p(0, 0) == 1.0 and mcnemar_p(3, 3) == 1.0
    assert mcnemar_p(0, 5) == mcnemar_p(5, 0) == 2 / 32  # all five discordant samples one way
    assert mcnemar_p(2, 10) == pytest.approx(158 / 4096, rel=1e-12)  # 2 (1 + 12 + 66) / 2^12
    # many discordant samples (fast, as a report over MNIST-sized test sets needs): the normal tail, continuity-corrected
    assert mcnemar_p(9_900, 10_100) == pytest.approx(math.erfc(199 / math.sqrt(2 * 20_000)), rel=1e-3)
    clusters = ["photo", "photo", "sketch"]
    base = [np.array([1, 0, 0, 1], bool), np.array([1, 1, 0], bool), np.array([0, 0, 1, 1, 1], bool)]
    graded = [np.array([1, 1, 1, 1], bool), np.array([0, 1, 0], bool), np.array([0, 0, 1, 1, 0], bool)]
    db = tmp_path / "j.sqlite"
    con = results.connect(db)
    for method, hits in (("FedAvg", base), ("FedAvg+jdfl-graded", graded)):
        _save(con, "JDFL/pacs/main", method, 0, 0.5, {"test_hits": pack_hits(hits), "cluster_of_client": clusters,
                                                      "cluster_accuracy": {"photo": 0.5, "sketch": 0.6}})
    _save(con, "JDFL/pacs/main", "FedAvg+jdfl-random", 0, 0.5, {})  # kept no hits: no pair with it
    con.close()
    text = write_report(db, tmp_path / "out").read_text()
    pairs = text[text.index("Sample by sample"):]
    # photo: graded alone right on 2 (client 0) samples, base alone on 1 (client 1); sketch: base alone on 1
    assert "| pair | seed | photo | sketch | all | McNemar p |" in pairs
    assert "| FedAvg+jdfl-graded vs FedAvg | 0 | 2 / 1 | 0 / 1 | 2 / 2 | 1 |" in pairs
    assert "FedAvg+jdfl-random vs" not in pairs


def test_differences_pair_seeds_and_name_them_where_the_sets_differ():
    from fedcond.report.jdfl import _delta

    def rows(*pairs):
        return [{"seed": s, "weighted_accuracy": a} for s, a in pairs]

    base = rows((0, 0.50), (1, 0.60), (2, 0.70))
    assert _delta(rows((0, 0.52), (1, 0.61), (2, 0.73)), base) == " [+2.0 pp]"  # same seeds: no names
    assert _delta(rows((2, 0.71)), base) == " [+1.0 pp on seed 2]"  # not +11.0 against the three-seed mean
    assert _delta(rows((1, 0.62), (2, 0.70), (5, 0.9)), base) == " [+1.0 pp on seeds 1, 2]"
    assert _delta(rows((7, 0.9)), base) == " [no seed in common]" and _delta([], base) == ""


def test_feddyns_server_model_is_shown_beside_the_evaluated_client_average(tmp_path):
    db = tmp_path / "j.sqlite"
    con = results.connect(db)
    for seed, (avg, server) in enumerate(((0.60, 0.58), (0.62, 0.61))):
        _save(con, "JDFL/pacs/main", "FedDyn", seed, 0.65, {"server_model_accuracy": server}, accuracy=avg)
    _save(con, "JDFL/pacs/main", "FedAvg", 0, 0.65)
    con.close()
    jd = write_report(db, tmp_path / "out").read_text()
    assert "| FedDyn | 61.0 ± 1.4 (n=2) | 59.5 ± 2.1 (n=2) | -1.5 |" in jd
    assert "FedDyn+jdfl-graded |" not in jd.split("FedDyn's two models")[1].split("\n\n")[1]  # no row without runs


def test_side_tables_give_the_best_round_beside_the_last_where_runs_stored_curves():
    """The claims are judged on the best round; the ablation, M-sweep, replicate and per-sample tables
    show it beside the last round, else a run whose last round dipped reads as a gain it did not make."""
    from fedcond.report.jdfl import jdfl_section

    def row(experiment, method, final, best):
        extra = {"curve": [[1, 0.3, 0.3], [2, best, best], [3, final, final]], "best_weighted_accuracy": best,
                 "best_weighted_round": 2}
        return {"experiment": f"JDFL/pacs/{experiment}", "protocol_name": "jdfl", "method": method, "seed": 0,
                "weighted_accuracy": final, "extra": extra}

    rows = [row("main", "FedAvg", 0.50, 0.60), row("main", "FedAvg+jdfl-graded", 0.52, 0.58),
            row("main", "FedAvg+jdfl-random", 0.51, 0.57), row("ablation", "FedAvg+expanded-hard", 0.55, 0.56),
            row("m_sweep", "FedAvg+jdfl-random(M=2)", 0.53, 0.59),
            row("replicate", "FedAvg+jdfl-graded(init=replicate)", 0.54, 0.61)]
    text = "\n".join(jdfl_section("jdfl", rows, "protocol `jdfl`"))
    assert "| head and targets | accuracy, last round | accuracy, best round |" in text
    assert "| expanded head, hard client-fixed joint labels | 55.0 (n=1) [+5.0 pp] | 56.0 (n=1) [-4.0 pp] |" in text
    assert "| 2 | not run | not run | 53.0 (n=1) [+3.0 pp] | 59.0 (n=1) [-1.0 pp] |" in text
    assert "| FedAvg | 50.0 (n=1) | 60.0 (n=1) | 54.0 (n=1) [+4.0 pp] | 61.0 (n=1) [+1.0 pp] | not run | not run |" in text
