"""Each method's `plain_jobs()` (what `fedcond flower` reads to refuse a DP-SGD run up front) against the
jobs two of its rounds actually send: a method that says plain sends only plain jobs; one that says not
sends at least one that is not."""

import pytest

from fedcond_testing import RecordingEngine, small_e1_scenario
from fedcond.algorithms import make_algorithm
from fedcond.commands.flower import flower_methods
from fedcond.engine import Job, SGDConfig
from fedcond.engine.local_sgd import Regulariser
from fedcond.protocol import Protocol
from fedcond.simulate import make_context


@pytest.fixture(scope="module")
def small():
    return small_e1_scenario()


@pytest.mark.parametrize("method", flower_methods() + ["FedAvg(carry_momentum=True)", "Gossip(carry_momentum=True)"])
def test_plain_jobs_says_what_two_rounds_send(small, method):
    engine = RecordingEngine(SGDConfig(batch_size=16))
    alg = make_algorithm(method, num_clusters=2)
    ctx = make_context(small, alg, Protocol(), 0, engine)  # the simulator's context: statistics where conditioned
    state = alg.init(ctx)
    for r in range(2):
        state = alg.round(ctx, state, r)
    assert engine.sent
    assert all(job.plain for _, job in engine.sent) == alg.plain_jobs()


def test_a_job_is_plain_until_it_carries_anything():
    import torch

    base = dict(params={}, x=torch.zeros(1, 1, 2, 2, dtype=torch.uint8), y=torch.zeros(1, dtype=torch.long), s=None,
                epochs=1, seed=(0,))
    assert Job(**base).plain and Job(**base, sgd=SGDConfig(lr=0.1)).plain  # another optimiser setting is still plain
    for extra in ({"momentum": {}}, {"keep_momentum": True}, {"regulariser": Regulariser(mu=0.1)},
                  {"loss_fn": lambda model, x, s, y: 0}):
        assert not Job(**base, **extra).plain
