"""Oracle-FedAvg: FedAvg within each true cluster. Its round is each cluster's weighted average of its own
clients' replies, every client trained from its cluster's model; a newcomer gets its cluster's model."""

import numpy as np
import pytest
import torch
from fedcond_testing import RecordingEngine, small_e1_scenario

from fedcond.algorithms import make_algorithm
from fedcond.engine import SGDConfig, weighted_average
from fedcond.errors import FedcondError
from fedcond.protocol import Protocol
from fedcond.simulate import make_context, run_method

PROTOCOL = Protocol(epochs=2, batch_size=32)


@pytest.fixture(scope="module")
def scenario():
    """E1, K=2, 3 clients per cluster (fedcond_testing's small tagged dataset)."""
    return small_e1_scenario()


def test_a_round_is_fedavg_within_each_cluster(scenario):
    alg = make_algorithm("Oracle-FedAvg(local_epochs=2)")
    ctx = make_context(scenario, alg, PROTOCOL, seed=0, engine=RecordingEngine(SGDConfig(0.01, 0.9, 32)))
    state = alg.init(ctx)
    cluster = scenario.truth.cluster
    assert state.assignment == tuple(int(c) for c in cluster) and len(state.models) == 2
    new = alg.round(ctx, state, 0)
    ((jobs, results),) = ctx.engine.calls
    sizes = ctx.federation.sizes()
    for i, job in enumerate(jobs):  # every client starts from its own cluster's model, for 2 epochs
        assert job.epochs == 2 and all(torch.equal(job.params[k], v) for k, v in state.models[cluster[i]].items())
    for k in range(2):
        members = np.flatnonzero(cluster == k)
        expected = weighted_average([results[i].params for i in members], sizes[members])
        assert all(torch.equal(new.models[k][n], expected[n]) for n in expected)


def test_server_momentum_keeps_one_state_per_cluster(scenario):
    alg = make_algorithm("Oracle-FedAvg(server_opt=momentum,server_momentum=0.5)")
    ctx = make_context(scenario, alg, PROTOCOL, seed=0)
    state = alg.round(ctx, alg.round(ctx, alg.init(ctx), 0), 1)
    assert len(state.extra["server"]) == 2 and state.round == 2


def test_needs_the_clusters_and_serves_a_newcomer_its_clusters_model(scenario):
    res = run_method(scenario, "Oracle-FedAvg", Protocol(epochs=1, batch_size=32, holdout_clients=1), seed=0)
    assert len(res.per_client) == 4 and 0.0 <= res.extra["unseen_accuracy"] <= 1.0
    with pytest.raises(FedcondError):
        make_algorithm("Oracle-FedAvg(local_epochs=0)")
    with pytest.raises(FedcondError):
        make_algorithm("Oracle-FedAvg(carry_momentum=True)")
