"""DP-SGD (Opacus) on the clients: a private run of Conditional reports its (epsilon, delta); every method
DP accepts trains its jobs privately; a job DP cannot privatise is refused."""

import numpy as np
import pytest

from flower_testing import DP_DELTA, DP_NOISE

pytestmark = [pytest.mark.flower, pytest.mark.slow]


def test_private_conditional_reports_its_privacy_budget(fl_scenario, flower_session):
    from opacus.accountants import RDPAccountant

    res, _ = flower_session["DP"]
    plain, _ = flower_session["Conditional"]
    assert res["delta"] == DP_DELTA
    # the run reports its largest client budget: 2 rounds x E local epochs (Conditional-FedAvg's own, 5) of
    # m = ceil(n / b) Poisson-sampled steps at sampling rate q = 1 / m (Opacus's expected batch b: the protocol's
    # 64, or smaller where Conditional-FedAvg's min_local_steps shrinks a small client's batch)
    from fedcond.algorithms import make_algorithm

    alg = make_algorithm("Conditional-FedAvg")

    def epsilon(n: int) -> float:
        b = min(64, max(alg.min_batch_size, n // alg.min_local_steps))
        m = -(-n // b)
        acc = RDPAccountant()
        acc.history = [(DP_NOISE, 1 / m, 2 * alg.local_epochs * m)]
        return acc.get_epsilon(DP_DELTA)

    assert 0 < res["epsilon"] < np.inf
    largest = max(epsilon(int(n)) for n in set(fl_scenario.federation.sizes().tolist()))
    assert res["epsilon"] == pytest.approx(largest, rel=0.05)
    assert res["per_client"] != plain["per_client"]  # noise and clipping changed the training
    print(f"\nDP-SGD: epsilon {res['epsilon']:.2f} at delta {res['delta']:g}, accuracy {res['accuracy']:.4f} "
          f"(non-private {plain['accuracy']:.4f})")


@pytest.mark.parametrize("carried", [{"keep_momentum": True}, {"momentum": {}}])
def test_dp_refuses_a_job_that_carries_momentum_rather_than_resetting_it(carried):
    """DP-SGD runs its own optimiser, fresh every job: a job that brings buffers, or asks for them back
    (FedAvg(carry_momentum=True)'s first round brings none), is refused, not silently run fresh."""
    import torch

    from fedcond.engine import Job
    from fedcond.errors import FedcondError
    from fedcond.flower.dp import train_private

    job = Job(params={}, x=torch.zeros(1, 1, 2, 2, dtype=torch.uint8), y=torch.zeros(1, dtype=torch.long), s=None,
              epochs=1, seed=(0,), **carried)
    with pytest.raises(FedcondError, match="no regulariser, custom loss or carried momentum"):
        train_private(None, job, None, None, None)


def _accepted_by_dp():
    from fedcond.algorithms import make_algorithm
    from fedcond.commands.flower import flower_methods

    return [m for m in flower_methods() if make_algorithm(m, num_clusters=2).plain_jobs()]


@pytest.mark.parametrize("method", _accepted_by_dp())
def test_dp_trains_every_job_a_method_it_accepts_sends(method):
    """`fedcond flower --dp-noise` accepts a method whose jobs are plain (Gossip, DAC, IFCA, ...): each
    job its first round sends trains privately into finite weights of the same shapes, moved by training,
    and the client's accountant records the steps."""
    import torch
    from flwr.app import Context, RecordDict

    from fedcond.algorithms import make_algorithm
    from fedcond.engine import SGDConfig
    from fedcond.flower.config import DPConfig
    from fedcond.flower.dp import spent_epsilon, train_private
    from fedcond.protocol import Protocol
    from fedcond.simulate import make_context
    from fedcond_testing import RecordingEngine, small_e1_scenario

    sgd = SGDConfig(batch_size=16)
    engine = RecordingEngine(sgd)
    alg = make_algorithm(method, num_clusters=2)
    ctx = make_context(small_e1_scenario(), alg, Protocol(), 0, engine)
    alg.round(ctx, alg.init(ctx), 0)
    assert engine.sent
    client = Context(run_id=1, node_id=1, node_config={}, state=RecordDict(), run_config={})
    for spec, job in engine.sent[:2]:  # two jobs: a method's jobs differ only in data and start
        res = train_private(spec, job, sgd, DPConfig(DP_NOISE, 1.0, DP_DELTA), client)
        assert res.params.keys() == job.params.keys() and res.steps > 0
        assert all(res.params[k].shape == v.shape and torch.isfinite(res.params[k].float()).all()
                   for k, v in job.params.items())
        assert any(not torch.equal(res.params[k], v) for k, v in job.params.items())
    assert 0 < spent_epsilon(client, DP_DELTA) < float("inf")
