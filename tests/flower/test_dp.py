"""DP-SGD (Opacus) on the clients: a private run of Conditional reports its (epsilon, delta)."""

import numpy as np
import pytest

from flower_testing import DP_DELTA, DP_NOISE

pytestmark = [pytest.mark.flower, pytest.mark.slow]


def test_private_conditional_reports_its_privacy_budget(fl_scenario, flower_session):
    from opacus.accountants import RDPAccountant

    res, _ = flower_session["DP"]
    plain, _ = flower_session["Conditional"]
    assert res["delta"] == DP_DELTA
    # the largest budget is the smallest client's: 2 rounds x E local epochs (Conditional-FedAvg's own, 5)
    # of m = ceil(n / 64) Poisson-sampled steps at sampling rate q = 1 / m (Opacus's expected batch of 64)
    from fedcond.algorithms import make_algorithm

    epochs = make_algorithm("Conditional-FedAvg").local_epochs
    m = -(-int(fl_scenario.federation.sizes().min()) // 64)
    acc = RDPAccountant()
    acc.history = [(DP_NOISE, 1 / m, 2 * epochs * m)]
    assert 0 < res["epsilon"] < np.inf
    assert res["epsilon"] == pytest.approx(acc.get_epsilon(DP_DELTA), rel=0.05)
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
