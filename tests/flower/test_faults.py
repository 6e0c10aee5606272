"""Faults: a client that drops out mid-round, too few replies, and a server restarted from its checkpoint."""

import pytest

from fedcond.engine import LoopEngine, SGDConfig
from fedcond.errors import FedcondError
from fedcond.simulate import run_method

from flower_testing import THREE_ROUNDS, TWO_ROUNDS


class DroppingEngine(LoopEngine):
    """The simulator's engine, except that one client's reply is lost in one round."""

    def __init__(self, sgd, client: int, call: int):
        super().__init__(sgd)
        self.client, self.call, self.calls = client, call, 0

    def train(self, spec, jobs):
        self.calls += 1
        results = super().train(spec, jobs)
        if self.calls == self.call:
            results[self.client] = None
        return results


@pytest.mark.flower
@pytest.mark.slow
def test_a_client_dropping_out_mid_round_does_not_stop_the_run(fl_scenario, flower_session):
    res, _ = flower_session["dropout"]
    assert "error" not in res
    assert res["dropped"] == [["round 2", 1]]
    sgd = SGDConfig(TWO_ROUNDS.lr, TWO_ROUNDS.momentum, TWO_ROUNDS.batch_size)
    ref = run_method(fl_scenario, "FedAvg", TWO_ROUNDS, seed=0, engine=DroppingEngine(sgd, client=1, call=2))
    full, _ = flower_session["FedAvg"]
    assert res["per_client"] == ref.per_client  # round 2 averaged the 9 replies it got, weighted by their sizes
    assert res["per_client"] != full["per_client"]
    print(f"\ndropout: client 1 failed in round 2, the run went on; accuracy {res['accuracy']:.4f} "
          f"(without the dropout {full['accuracy']:.4f})")


@pytest.mark.flower
@pytest.mark.slow
def test_a_restarted_server_resumes_from_its_last_checkpoint(fl_scenario, flower_session):
    crash, _ = flower_session["crash"]
    assert "round 3: only 9 of 10 clients replied" in crash["error"]  # every reply required: the server stopped
    res, _ = flower_session["resume"]
    assert res["resumed_after"] == 2
    assert [h["round"] for h in res["history"]] == [3]
    ref = run_method(fl_scenario, "SCAFFOLD", THREE_ROUNDS, seed=0)
    assert res["per_client"] == ref.per_client  # as if never interrupted (weights and control variates restored)
    print(f"\nresume: stopped in round 3, resumed after round 2, accuracy {res['accuracy']:.4f} "
          f"= uninterrupted {ref.accuracy:.4f}")


def test_too_few_replies_stop_the_round():
    pytest.importorskip("flwr")
    from fedcond.flower.server import FlowerEngine

    engine = FlowerEngine(lambda contents, kind, group: {}, SGDConfig(), min_replies=2)
    engine.group = "round 4"
    with pytest.raises(FedcondError, match="round 4: only 1 of 3 clients replied"):
        engine._check(3, 1)
    engine._check(3, 2)
    engine._check(1, 1)  # a round that asks one client needs only that one
