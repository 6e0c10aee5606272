"""The standard partitions (scenarios/partitioners.py, scenarios/standard.py) against their
definitions: Dirichlet proportions follow Dir(alpha), pathological clients hold exactly k classes,
shards are disjoint and cover the data, test labels follow train labels, determinism by seed;
and their wiring: options, ground truth, Oracle's refusal, describe, the registry, the report."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats as scipy_stats

from fedcond.errors import FedcondError
from fedcond.scenarios import ScenarioSpec, make_scenario
from fedcond.scenarios import partitioners as P
from fedcond_testing import sample_ids, tagged_dataset


def rng(seed=0):
    return np.random.default_rng(seed)


# ---- the definitions, on labels ------------------------------------------------------------------
def test_largest_remainder_is_exact_and_within_one():
    w = rng().random(37)
    parts = P.largest_remainder(1001, w)
    assert parts.sum() == 1001 and np.all(np.abs(parts - 1001 * w / w.sum()) < 1)


@pytest.mark.parametrize("alpha", [0.1, 0.5, 2.0])
def test_dirichlet_proportions_follow_the_dirichlet(alpha):
    """Each client's share of one class is Beta(alpha, (C-1) alpha), the Dirichlet's marginal: a KS
    test accepts the drawn proportions and rejects another alpha's marginal (so the test can fail);
    the counts are those proportions times the size, rounded (a share below 1/n rounds to 0, so
    the KS test on count shares is taken where the rounding cannot reach, above 1e-3)."""
    C, clients, n = 10, 1500, 20_000
    supply = np.full(C, clients * n)  # no class runs short: the counts are the rounded targets
    counts, q = P.dirichlet_counts(supply, np.full(clients, n), alpha, rng(1), exact=False)
    marginal = scipy_stats.beta(alpha, (C - 1) * alpha)
    assert scipy_stats.kstest(q[:, 3], marginal.cdf).pvalue > 0.01
    assert scipy_stats.kstest(q[:, 3], scipy_stats.beta(2 * alpha, 2 * (C - 1) * alpha).cdf).pvalue < 1e-6
    assert np.all(np.abs(counts - n * q) < 1) and np.all(counts.sum(axis=1) == n)
    share = np.sort(counts[:, 3] / n)
    grid = np.linspace(1e-3, 1, 400)
    gap = np.max(np.abs(np.searchsorted(share, grid, side="right") / clients - marginal.cdf(grid)))
    assert gap < 1.63 / np.sqrt(clients)  # the KS critical value at the 1% level


def test_dirichlet_on_the_whole_set_uses_every_sample_and_keeps_the_zeros():
    supply = np.array([600, 500, 700, 650, 550])
    sizes = P.client_sizes(int(supply.sum()), 30, 0.0, rng())
    counts, q = P.dirichlet_counts(supply, sizes, 0.2, rng(2), exact=True)
    assert np.array_equal(counts.sum(axis=0), supply)  # every sample dealt
    assert np.all(np.abs(counts.sum(axis=1) - sizes) <= len(supply))  # sizes kept up to rounding
    assert np.all(counts[q == 0] == 0)


def test_quantity_skew_sizes_are_log_normal_and_complete():
    sizes = P.client_sizes(60_000, 500, 1.0, rng(3))
    assert sizes.sum() == 60_000 and sizes.min() >= 1
    logs = np.log(sizes / sizes.mean())
    assert 0.8 < logs.std() < 1.2  # sigma of the log-normal draw (sizes are proportional to it)
    assert np.all(P.client_sizes(100, 10, 0.0, rng()) == 10)


def test_pathological_clients_hold_exactly_k_classes_and_cover_their_classes():
    supply = np.full(10, 100)
    counts, sets = P.pathological_counts(supply, 40, 3, rng(4))
    assert all(np.count_nonzero(row) == 3 for row in counts)
    assert all(set(np.flatnonzero(row)) == set(s) for row, s in zip(counts, sets))
    held = sorted({c for s in sets for c in s})
    assert np.array_equal(counts.sum(axis=0)[held], supply[held])  # a held class is dealt whole, evenly
    for c in held:
        col = counts[:, c][counts[:, c] > 0]
        assert col.max() - col.min() <= 1
    with pytest.raises(FedcondError, match="1 <= k <= 10"):
        P.pathological_counts(supply, 4, 11, rng())


def test_shards_are_disjoint_cover_the_data_and_follow_the_label_order():
    y = np.repeat(np.arange(10), 60)  # 10 classes x 60: shards of 15 lie inside one class
    parts = P.shards(y, 20, 2, rng(5))
    flat = np.concatenate(parts)
    assert len(flat) == len(y) and len(np.unique(flat)) == len(y)  # disjoint and covering
    assert all(len(p) == 30 for p in parts)
    assert all(len(np.unique(y[p])) <= 2 for p in parts)
    with pytest.raises(FedcondError, match="more than"):
        P.shards(y, 400, 2, rng())


def test_test_counts_follow_the_train_mix():
    train = np.array([[30, 0, 15], [30, 60, 45]])
    test = P.test_counts(train, np.array([60, 60, 60]), np.array([20, 20, 20]))
    assert np.array_equal(test, train // 3)  # every class 1/3 as many test samples


def test_deal_is_disjoint_and_deterministic():
    y = np.repeat(np.arange(4), 25)
    counts = np.array([[5, 0, 10, 3], [20, 25, 0, 3]])
    a, b = P.deal(y, counts, rng(6)), P.deal(y, counts, rng(6))
    assert all(np.array_equal(p, q) for p, q in zip(a, b))
    assert len(np.intersect1d(a[0], a[1])) == 0
    assert np.array_equal(np.bincount(y[a[0]], minlength=4), counts[0])


# ---- the families, on traceable images -----------------------------------------------------------
@pytest.fixture
def tagged_big():
    data = tagged_dataset(n_train=3000, n_test=1000)
    return lambda name: data


@pytest.mark.parametrize(
    "family,options",
    [("dirichlet", {"alpha": 0.3}), ("pathological", {"k": 2}), ("shards", {"shards": 2}), ("quantity", {"sigma": 1.0})],
)
def test_families_split_disjointly_and_deterministically(tagged_big, family, options):
    build = lambda seed: make_scenario(family, "tagged", tagged_big, clients=20, seed=seed, **options)  # noqa: E731
    sc = build(0)
    fed = sc.federation
    train = [sample_ids(c.x_train) for c in fed.clients]
    test = [sample_ids(c.x_test) for c in fed.clients]
    assert sum(map(len, train)) == len({i for ids in train for i in ids}) == 3000  # disjoint, whole train set
    assert len({i for ids in test for i in ids}) == sum(map(len, test))
    for c in fed.clients:  # test labels: only the client's own classes
        assert set(c.y_test.tolist()) <= set(c.y_train.tolist())
    again = build(0).federation
    assert all(sample_ids(a.x_train) == sample_ids(b.x_train) for a, b in zip(fed.clients, again.clients))
    assert any(sample_ids(a.x_train) != sample_ids(b.x_train) for a, b in zip(fed.clients, build(1).federation.clients))


def test_test_labels_follow_train_labels(tagged_big):
    fed = make_scenario("dirichlet", "tagged", tagged_big, clients=10, alpha=0.5).federation
    for c in fed.clients:  # tagged: 300 train / 100 test per class, so test = train / 3 up to rounding
        train = np.bincount(c.y_train.numpy(), minlength=10)
        assert np.all(np.abs(np.bincount(c.y_test.numpy(), minlength=10) - train / 3) <= 1)


def test_ground_truth_per_family(tagged_big):
    dirichlet = make_scenario("dirichlet", "tagged", tagged_big, clients=20)
    assert not dirichlet.truth.known and not make_scenario("shards", "tagged", tagged_big, clients=20).truth.known
    patho = make_scenario("pathological", "tagged", tagged_big, clients=30, k=2)
    assert patho.truth.known
    for k in range(patho.truth.num_clusters):  # a cluster: the clients with one class set
        sets = {frozenset(patho.federation.clients[i].y_train.tolist()) for i in np.flatnonzero(patho.truth.cluster == k)}
        assert len(sets) == 1 and len(next(iter(sets))) == 2
    quantity = make_scenario("quantity", "tagged", tagged_big, clients=20)
    assert quantity.truth.known and quantity.truth.num_clusters == 1
    assert all(len(set(c.y_train.tolist())) == 10 for c in quantity.federation.clients)


def test_samples_per_client_and_combined_quantity_skew(tagged_big):
    fed = make_scenario("dirichlet", "tagged", tagged_big, clients=10, samples=100, alpha=1.0).federation
    assert list(fed.sizes()) == [100] * 10
    skewed = make_scenario("dirichlet", "tagged", tagged_big, clients=10, samples=100, alpha=1.0, sigma=1.0)
    assert skewed.federation.sizes().sum() == 1000 and skewed.federation.sizes().std() > 20
    patho = make_scenario("pathological", "tagged", tagged_big, clients=10, k=3, samples=200, sigma=1.0)
    assert patho.federation.sizes().sum() == 2000


@pytest.mark.parametrize(
    "family,options,needle",
    [
        ("dirichlet", {"k": 3}, "--k does not apply to dirichlet"),
        ("shards", {"sigma": 1.0}, "--sigma does not apply to shards"),
        ("E1", {"alpha": 0.3}, "--alpha does not apply to E1"),
        ("dirichlet", {"alpha": 0.0}, "alpha must be > 0"),
        ("dirichlet", {"samples": 1000}, "at most 150 per client"),
        ("dirichlet", {"clients_per_cluster": 5}, "--clients-per-cluster does not apply"),
    ],
)
def test_wrong_options_are_one_clear_error(tagged_big, family, options, needle):
    with pytest.raises(FedcondError, match=needle):
        make_scenario(family, "tagged", tagged_big, **{"clients": 20, **options} if family != "E1" else options)


def test_oracle_refuses_and_ifca_keeps_its_own_k_without_true_clusters(tagged_big):
    from fedcond.protocol import PAPER
    from fedcond.simulate import prepare_run

    sc = make_scenario("dirichlet", "tagged", tagged_big, clients=6)
    with pytest.raises(FedcondError, match="Oracle needs the true clusters"):
        prepare_run(sc, "Oracle", PAPER)
    assert prepare_run(sc, "IFCA", PAPER).alg.k == 2  # its default, not the bookkeeping group's 1
    patho = make_scenario("pathological", "tagged", tagged_big, clients=12, k=5)
    assert prepare_run(patho, "IFCA", PAPER).alg.k == patho.truth.num_clusters


def test_spec_records_the_options_and_drops_the_e_default_k():
    spec = ScenarioSpec("dirichlet", "mnist", alpha=0.3, clients=100)
    assert spec.k is None
    assert spec.describe() == {"family": "dirichlet", "dataset": "mnist", "clients": 100, "seed": 0, "alpha": 0.3}


# ---- the command line, the registry, the report ---------------------------------------------------
def test_describe_summary_json_and_plot(capsys, tmp_path):
    from fedcond.cli import main

    png = tmp_path / "labels.png"
    assert main(["scenario", "describe", "dirichlet", "--dataset", "digits", "--clients", "20", "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert "no true clusters" in out and "classes per client: min" in out and png.stat().st_size > 10_000
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["scenario", "describe", "pathological", "--dataset", "digits", "--clients", "20", "--k", "2", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["clusters_known"] and d["summary"]["classes_min"] == d["summary"]["classes_max"] == 2
    assert main(["scenario", "describe", "dirichlet", "--plot", str(tmp_path / "x.pdf")]) == 2
    assert "ending in .png" in capsys.readouterr().err


def test_registry_names_and_methods():
    from fedcond.experiments import select

    exp = select("dirichlet/mnist/alpha=0.3/clients=100")[0]
    assert exp.name == "dirichlet/mnist/alpha=0.3/clients=100" and "Oracle" not in exp.methods
    assert exp.spec().alpha == 0.3 and exp.spec().clients == 100
    assert "Oracle" in select("pathological/mnist/k=2/clients=100")[0].methods
    assert {e.family for e in select("*/cifar10/*")} >= {"dirichlet", "pathological", "shards", "quantity"}


def test_report_has_a_section_per_standard_family(tmp_path):
    from types import SimpleNamespace

    from fedcond import results
    from fedcond.report import write_report

    con = results.connect(tmp_path / "r.sqlite")
    for method, acc in (("FedAvg", 0.91), ("Conditional", 0.95)):
        result = SimpleNamespace(accuracy=acc, accuracy_std=0.01, weighted_accuracy=acc, per_client=[acc], seconds=1.0,
                                 rounds=1, hyperparameters={}, extra={})
        results.save_run(con, family="dirichlet", dataset="mnist", scenario={"family": "dirichlet"}, method=method,
                         seed=0, protocol={"epochs": 1}, result=result, experiment="dirichlet/mnist/alpha=0.3/clients=100",
                         protocol_name="paper", status="ok", error=None)
    result.accuracy = 0.876  # a variant's row (Conditional-FedAvg with class means) in a --protocol paper report
    results.save_run(con, family="dirichlet", dataset="mnist", scenario={"family": "dirichlet"},
                     method="Conditional-FedAvg", seed=0, protocol={"epochs": 1, "statistic": "class_means"},
                     result=result, experiment="dirichlet/mnist/alpha=0.3/clients=100",
                     protocol_name="paper[statistic=class_means]", status="ok", error=None)
    con.close()
    text = write_report(tmp_path / "r.sqlite", tmp_path / "out", protocol_name="paper").read_text()
    section = text.split("### Standard partition: Dirichlet label skew (dirichlet)")[1].split("###")[0]
    assert "dirichlet/mnist/alpha=0.3/clients=100" in section and "95.0" in section and "91.0" in section
    assert "| `paper[statistic=class_means]` |" in section and "87.6" in section
    assert "| `paper` |" in section  # the protocol is a column: a variant's rows stand beside paper's
    picture = tmp_path / "out" / "labels_dirichlet_mnist_alpha0.3_clients100.png"
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and picture.name in section
    assert "dirichlet/" not in text.split("### Experiments without a published table")[1].split("###")[0]


def test_run_refuses_oracle_up_front_and_a_sweep_leaves_it_out(capsys, tmp_path):
    from fedcond.cli import main
    from fedcond.experiments import select
    from fedcond.sweep import plan, skipped_for_truth

    argv = ["run", "--scenario", "dirichlet", "--clients", "10", "--methods", "FedAvg,Oracle", "--db", str(tmp_path / "r")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Oracle needs the true clusters, and a dirichlet federation has none" in err
    exps = select("dirichlet/mnist/alpha=0.3/clients=100,pathological/mnist/k=2/clients=100")
    cells = plan(exps, "FedAvg,Oracle", [0], "smoke")
    assert {(c.experiment.family, c.method) for c in cells} == {
        ("dirichlet", "FedAvg"), ("pathological", "FedAvg"), ("pathological", "Oracle")}
    assert skipped_for_truth(exps, "FedAvg,Oracle") == [("dirichlet/mnist/alpha=0.3/clients=100", "Oracle")]


@pytest.mark.slow
def test_conditional_fedavg_with_class_means_trains_on_a_dirichlet_federation(capsys, tmp_path):
    from fedcond.cli import main

    argv = ["run", "--scenario", "dirichlet", "--alpha", "0.3", "--clients", "10", "--methods", "FedAvg,Conditional-FedAvg",
            "--statistic", "class_means", "--epochs", "1", "--db", str(tmp_path / "r.sqlite"), "--json", "--no-progress"]
    assert main(argv) == 0
    rows = json.loads(capsys.readouterr().out)["results"]
    assert [r["method"] for r in rows] == ["FedAvg", "Conditional-FedAvg"]
    assert all(r["status"] == "ok" and "cluster_accuracy" not in r["extra"] for r in rows)
    assert rows[0]["scenario"]["alpha"] == 0.3 and rows[0]["family"] == "dirichlet"
