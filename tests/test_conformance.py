"""One conformance suite over the whole registry: every algorithm obeys the same contract."""

import dataclasses

import pytest
import torch

from fedcond import data
from fedcond.algorithms import ALGORITHMS, hyperparameters, make_algorithm
from fedcond.protocol import Protocol
from fedcond.scenarios import make_scenario
from fedcond.simulate import make_context, run_method

PROTOCOL = Protocol(epochs=3, batch_size=32)

# The contract, not the method's size: the personalisation rivals at their defaults (hypernetworks
# of 100x3 generating every layer, 10 fine-tuning epochs) were a third of this file's time, and a
# small hypernetwork or one epoch runs the same code.
LIGHT = {
    "pFedHN": "pFedHN(hidden=16,n_hidden=1)",
    "PeFLL": "PeFLL(hidden=16,n_hidden=1)",
    "FedRep": "FedRep(head_epochs=1)",
    "FedAvg-FT": "FedAvg-FT(finetune_epochs=1)",
}


@pytest.fixture(scope="module")
def digits_scenario():
    return make_scenario("E1", "digits", lambda n: data.load("digits"), k=2, clients_per_cluster=3, seed=0)


def _snapshot(state):
    return [{k: v.clone() for k, v in m.items()} for m in state.models]


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_hyperparameters_round_trip(name):
    alg = make_algorithm(name)
    assert dataclasses.is_dataclass(alg) and alg.__dataclass_params__.frozen
    again = type(alg)(**hyperparameters(alg))
    assert again == alg and hash(again) == hash(alg)


# Gossip's default starts every client from its own weights, and averaging unrelated networks
# need not lower the loss in three rounds (the paper's collapse): its contract is checked on one
# shared initialisation.
LOSS_FALLS_UNDER = {"Gossip": "Gossip(independent_init=false)"}


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_rounds_do_not_mutate_state_and_loss_falls(name, digits_scenario):
    alg = make_algorithm(LOSS_FALLS_UNDER.get(name, LIGHT.get(name, name)))
    ctx = make_context(digits_scenario, alg, PROTOCOL, seed=0)
    state = alg.init(ctx)
    losses = []
    for r in range(3):
        before = _snapshot(state)
        new = alg.round(ctx, state, r)
        for b, m in zip(before, state.models):
            assert all(torch.equal(b[k], m[k]) for k in b), f"{name} changed its input state in round {r}"
        assert len(new.assignment) == digits_scenario.federation.num_clients
        assert all(0 <= a < len(new.models) for a in new.assignment)
        losses.append(new.train_loss)
        state = new
    assert losses[-1] < losses[0], f"{name}: training loss did not fall: {losses}"


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_same_seed_same_result(name, digits_scenario):
    name = LIGHT.get(name, name)
    a = run_method(digits_scenario, name, Protocol(epochs=2, batch_size=32), seed=5)
    b = run_method(digits_scenario, name, Protocol(epochs=2, batch_size=32), seed=5)
    assert a.per_client == b.per_client and a.train_loss == b.train_loss
