"""Options that name readings of the paper being probed (issue 40): raw inputs (`inputs=raw`, no
standardisation) and Gossip's momentum carried across rounds (`Gossip(carry_momentum=true)`)."""

import pytest
import torch

from fedcond import data
from fedcond.errors import FedcondError
from fedcond.experiments import variant_name
from fedcond.protocol import Protocol
from fedcond.scenarios import make_scenario
from fedcond.simulate import make_context, run_method
from fedcond.algorithms import make_algorithm

PROTOCOL = Protocol(epochs=2, batch_size=32)


@pytest.fixture(scope="module")
def digits():
    return make_scenario("E1", "digits", lambda n: data.load("digits"), k=2, clients_per_cluster=2, seed=0)


def test_raw_inputs_drop_the_standardisation_and_name_their_cell(digits):
    fed = digits.federation
    std = make_context(digits, make_algorithm("FedAvg"), PROTOCOL, 0).plain_model
    raw = make_context(digits, make_algorithm("FedAvg"), PROTOCOL.replace(inputs="raw"), 0).plain_model
    assert (std.mean, std.std) == (fed.mean, fed.std) and fed.std != (1.0,)
    assert raw.mean == (0.0,) * len(fed.mean) and raw.std == (1.0,) * len(fed.std)
    assert variant_name("paper", {"inputs": "raw"}) == "paper[inputs=raw]"
    assert variant_name("paper", {"inputs": "standardised"}) == "paper"  # the default names no variant
    a = run_method(digits, "FedAvg", PROTOCOL)
    b = run_method(digits, "FedAvg", PROTOCOL.replace(inputs="raw"))
    assert a.per_client != b.per_client
    with pytest.raises(FedcondError, match="inputs must be one of standardised, raw"):
        PROTOCOL.replace(inputs="pixels")


def test_gossip_carries_each_clients_momentum_only_when_asked(digits):
    seen = {}

    def keep(name):
        return lambda r, state: seen.setdefault(name, []).append(state)

    run_method(digits, "Gossip", PROTOCOL, on_round=keep("reset"))
    run_method(digits, "Gossip(carry_momentum=true)", PROTOCOL, on_round=keep("carried"))
    reset, carried = seen["reset"], seen["carried"]
    assert all(m is None for m in reset[-1].momentum)
    assert all(m is not None for m in carried[0].momentum)  # each client's buffer after round 1
    for a, b in zip(reset[0].models, carried[0].models):  # round 1 starts from zero buffers either way
        assert all(torch.equal(a[k], b[k]) for k in a)
    assert any(not torch.equal(a[k], b[k]) for a, b in zip(reset[1].models, carried[1].models) for k in a)
