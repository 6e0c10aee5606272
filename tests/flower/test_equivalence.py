"""Over Flower, our algorithms give exactly the simulator's numbers (same federation, seeds, schedule).

Tolerance: none. Clients receive the server's float32 weights bit for bit, rebuild the same jobs
and train them with the same `train_job` on one thread, so per-client accuracies and the training
loss must be equal, not close. (With several threads per process, convolutions may reorder sums.)
The secure z-score (masked sums in 32-bit fixed point) rounds to the same float32 s_i here.
"""

import pytest

from fedcond.simulate import run_method

from flower_testing import TWO_ROUNDS

pytestmark = [pytest.mark.flower, pytest.mark.slow]


@pytest.mark.parametrize("name, method", [("FedAvg", "FedAvg"), ("Conditional", "Conditional-FedAvg"), ("IFCA", "IFCA"),
                                          ("FedProx", "FedProx"), ("SCAFFOLD", "SCAFFOLD"), ("FedDyn", "FedDyn")])
def test_flower_equals_simulator(fl_scenario, flower_session, name, method):
    res, _ = flower_session[name]
    ref = run_method(fl_scenario, method, TWO_ROUNDS, seed=0)
    assert res["per_client"] == ref.per_client
    assert res["train_loss"] == ref.train_loss
    assert res["dropped"] == []
    print(f"\n{method}: Flower {res['accuracy']:.4f}, simulator {ref.accuracy:.4f}")


def test_log_normalisation_needs_no_coordination_and_matches_the_simulator(fl_scenario, flower_session):
    res, received = flower_session["Conditional-log"]
    assert "query.secagg" not in {m.metadata.message_type for m in received}
    ref = run_method(fl_scenario, "Conditional-FedAvg", TWO_ROUNDS.replace(stats_normalisation="log"), seed=0)
    assert res["per_client"] == ref.per_client


def test_class_means_statistic_over_flower_equals_the_simulator(fl_scenario, flower_session):
    """The new statistic, computed client-side and z-scored by the masked secure sum: the same numbers
    as the in-process Conditional-FedAvg (so the simulator's figures are the federated ones)."""
    res, _ = flower_session["Conditional-class_means"]
    ref = run_method(fl_scenario, "Conditional-FedAvg", TWO_ROUNDS.replace(statistic="class_means"), seed=0)
    assert res["per_client"] == ref.per_client and res["train_loss"] == ref.train_loss
