"""Clients never seen in training: held out per cluster, evaluated with their own statistic."""

import numpy as np
import pytest
import torch

from fedcond import data
from fedcond.errors import FedcondError
from fedcond.holdout import hold_out
from fedcond.protocol import Protocol
from fedcond.scenarios import make_scenario
from fedcond.simulate import run_method


@pytest.fixture(scope="module")
def digits():
    return make_scenario("E1", "digits", lambda n: data.load("digits"), k=2, clients_per_cluster=3, seed=0)


def test_hold_out_takes_the_last_clients_of_every_cluster(digits):
    train, unseen = hold_out(digits, 1)
    cluster = digits.truth.cluster
    expected = sorted(int(np.flatnonzero(cluster == k)[-1]) for k in range(2))
    assert list(unseen.ids) == expected and list(unseen.cluster) == [cluster[i] for i in expected]
    assert train.federation.num_clients == 4 and sorted(train.truth.cluster.tolist()) == [0, 0, 1, 1]
    kept = [c for i, c in enumerate(digits.federation.clients) if i not in expected]
    assert all(a is b for a, b in zip(train.federation.clients, kept))
    with pytest.raises(FedcondError, match="at least one must stay"):
        hold_out(digits, 3)


@pytest.mark.parametrize("statistic", ["eigenvalues", "class_means", "random"])
def test_newcomers_are_evaluated_with_their_own_statistic(digits, statistic):
    proto = Protocol(epochs=3, batch_size=32, holdout_clients=1, statistic=statistic)
    res = run_method(digits, "Conditional", proto, seed=0)
    assert len(res.per_client) == 4 and len(res.extra["unseen_per_client"]) == 2
    assert 0.0 <= res.extra["unseen_accuracy"] <= 1.0 and res.extra["unseen_clients"] == list(hold_out(digits, 1)[1].ids)
    # which newcomer test samples were right, one bit each: the accuracies follow from them
    from fedcond.results import unpack_hits

    hits = unpack_hits(res.extra["unseen_test_hits"])
    assert [h.size for h in hits] == [c.n_test for c in hold_out(digits, 1)[1].clients]
    assert [float(np.float32(h.sum()) / np.float32(h.size)) for h in hits] == res.extra["unseen_per_client"]
    # the row keeps the statistic's width (digits: 10 labels, so class_means is 40 wide; the others 32)
    assert res.extra["statistic_width"] == (40 if statistic == "class_means" else 32)


def test_the_random_control_names_every_client_by_its_id_in_the_full_scenario(digits):
    """A newcomer's vector must not be a training client's: ids are the full scenario's."""
    from fedcond.client_stats import client_statistics

    proto = Protocol(statistic="random")
    train, unseen = hold_out(digits, 1)
    full, _ = client_statistics(digits, proto, seed=3)
    kept, _ = client_statistics(train, proto, seed=3, ids=unseen.kept)
    assert np.array_equal(kept, full[list(unseen.kept)])
    assert not any(np.allclose(full[i], k) for i in unseen.ids for k in kept)


def test_methods_without_a_model_for_a_newcomer_report_none(digits):
    proto = Protocol(epochs=2, batch_size=32, holdout_clients=1)
    assert "unseen_accuracy" not in run_method(digits, "Local", proto, seed=0).extra
    oracle = run_method(digits, "Oracle", Protocol(epochs=4, batch_size=32, holdout_clients=1), seed=0)
    # E1: the clusters hold disjoint classes, so the other cluster's model would score ~0 on a newcomer
    assert min(oracle.extra["unseen_per_client"]) > 0.5
    fedavg = run_method(digits, "FedAvg", proto, seed=0)
    assert "unseen_accuracy" in fedavg.extra and "statistic_width" not in fedavg.extra  # it takes no statistic
    # the per-sample hits and true clusters a row keeps are the training population's, as per_client is
    from fedcond.holdout import hold_out
    from fedcond.results import unpack_hits

    kept, _ = hold_out(digits, 1)
    hits = unpack_hits(fedavg.extra["test_hits"])
    assert [float(h.mean()) for h in hits] == fedavg.per_client and len(hits) == kept.federation.num_clients
    assert fedavg.extra["cluster_of_client"] == [kept.truth.cluster_names[k] for k in kept.truth.cluster]
    assert "unseen_accuracy" in run_method(digits, "FedDyn", proto, seed=0).extra  # two models, one assigned to all


def test_a_newcomer_gets_its_own_random_vector_and_the_training_population_normalisation():
    from fedcond import stats as S

    raw = S.random_vectors([0, 1, 2, 3], 8, seed=0)
    new = S.random_vectors([5], 8, seed=0)
    z = S.normalise_with(new, raw)
    assert np.allclose(z, (new - raw.mean(0)) / raw.std(0))
    assert not any(np.allclose(new[0], r) for r in raw)
    assert torch.is_tensor(torch.as_tensor(z))


def test_per_round_evaluation_stores_the_curve_and_the_best_round(digits):
    res = run_method(digits, "FedAvg", Protocol(epochs=3, batch_size=32, eval_every=1), seed=0)
    curve = res.extra["curve"]
    assert [r for r, _, _ in curve] == [1, 2, 3] and curve[-1][1:] == [res.accuracy, res.weighted_accuracy]
    assert res.extra["best_accuracy"] == max(a for _, a, _ in curve)
    assert res.extra["best_weighted_accuracy"] == max(w for _, _, w in curve)
    assert curve[[r for r, _, _ in curve].index(res.extra["best_round"])][1] == res.extra["best_accuracy"]
    every_two = run_method(digits, "FedAvg", Protocol(epochs=3, batch_size=32, eval_every=2), seed=0).extra["curve"]
    assert [r for r, _, _ in every_two] == [2, 3] and every_two == [curve[1], curve[2]]  # the last round always
    assert "curve" not in run_method(digits, "FedAvg", Protocol(epochs=2, batch_size=32), seed=0).extra


def test_feddyn_row_carries_the_server_models_accuracy(digits):
    res = run_method(digits, "FedDyn", Protocol(epochs=2, batch_size=32), seed=0)
    assert 0.0 <= res.extra["server_model_accuracy"] <= 1.0
