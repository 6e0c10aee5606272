"""Faults: a client that drops out mid-round, too few replies, and a server restarted from its checkpoint."""

import pytest

from fedcond.engine import SGDConfig
from fedcond.errors import FedcondError
from fedcond.simulate import run_method

from fedcond_testing import DroppingEngine
from flower_testing import THREE_ROUNDS, TWO_ROUNDS


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


def test_the_final_evaluation_keeps_whoever_answers_and_lists_who_dropped():
    """A client killed during training cannot evaluate: the others' scores are kept, it is named."""
    pytest.importorskip("flwr")
    from types import SimpleNamespace

    import torch

    from fedcond.algorithms import State
    from fedcond.flower.server import evaluate
    from fedcond.models import ModelSpec

    counts = {0: 7, 1: 5, 2: 9}  # client 3 was killed in round 1

    def exchange(contents, kind, group):
        return {i: {"result": {"correct": counts[i], "total": 10}} for i in contents if i in counts}

    ctx = SimpleNamespace(spec=lambda conditioned: ModelSpec((1, 8, 8), 10), federation=SimpleNamespace(num_clients=4))
    state = State(models=({"w": torch.zeros(2)},), assignment=(0, 0, 0, 0))
    scores = evaluate(exchange, ctx, state, conditioned=False)
    assert scores["per_client"] == [0.7, 0.5, 0.9, None] and scores["not_evaluated"] == [3]
    assert scores["accuracy"] == pytest.approx(0.7) and scores["weighted_accuracy"] == pytest.approx(0.7)
    with pytest.raises(FedcondError, match="evaluate: only 3 of 4 clients returned their evaluation"):
        evaluate(exchange, ctx, state, conditioned=False, min_replies=4)


class FakeProcess:
    def __init__(self, code=None, on_poll=None):
        self.code, self.on_poll = code, on_poll

    def poll(self):
        if self.on_poll:
            self.on_poll()
        return self.code


def test_a_deployment_outlives_a_minority_of_its_supernodes(tmp_path, monkeypatch):
    """One SuperNode of three gone: the run's result still comes back; two gone, or the SuperLink: it stops."""
    pytest.importorskip("flwr")
    from types import SimpleNamespace

    from fedcond.flower import deploy
    from fedcond.flower.config import FlowerRun
    from fedcond.run import ScenarioSpec

    monkeypatch.setattr(deploy.subprocess, "run", lambda *a, **k: SimpleNamespace(returncode=0, stdout="", stderr=""))
    run = FlowerRun(spec=ScenarioSpec(family="E1", dataset="digits", k=2), method="FedAvg", clients=3)
    out = tmp_path / "result.json"
    polls = []

    def result_after_three_polls():  # the ServerApp writes its result while the deployment is watched
        polls.append(1)
        if len(polls) == 3:
            out.write_text('[{"accuracy": 0.5}]')

    deployment = deploy.LocalDeployment(clients=3, workdir=tmp_path)
    deployment.procs = [FakeProcess(on_poll=result_after_three_polls), FakeProcess(), FakeProcess(-9), FakeProcess()]
    assert deployment.submit(run, out, timeout=60) == [{"accuracy": 0.5}]
    assert deployment.min_available == 2  # a majority by default
    deployment.procs = [FakeProcess(), FakeProcess(-9), FakeProcess(-9), FakeProcess()]
    with pytest.raises(FedcondError, match="only 1 of 3 SuperNodes are running \\(min_available=2"):
        deployment.submit(run, tmp_path / "never.json", timeout=60)
    deployment.procs = [FakeProcess(1), FakeProcess(), FakeProcess(), FakeProcess()]
    with pytest.raises(FedcondError, match="the SuperLink exited early"):
        deployment.submit(run, tmp_path / "never.json", timeout=60)
    with pytest.raises(FedcondError, match="min_available must be between 1 and the 3 SuperNodes"):
        deploy.LocalDeployment(clients=3, workdir=tmp_path, min_available=4)


class _Reply:
    """What the server reads of a Flower reply: its sender, an error or its content."""

    def __init__(self, node: int, content=None, reason: str | None = None):
        self.metadata = type("Meta", (), {"src_node_id": node})()
        self.content, self.error = content, (type("Err", (), {"reason": reason})() if reason else None)

    def has_error(self) -> bool:
        return self.error is not None


class _HelloGrid:
    """Three SuperNodes: one says hello, one fails with a traceback, one never answers."""

    def get_node_ids(self):
        return [11, 12, 13]

    def send_and_receive(self, messages, *, timeout=None):
        import json

        info = {"index": 0, "n_train": 5, "n_test": 2}
        return [_Reply(11, {"result": {"info": json.dumps(info)}}),
                _Reply(12, reason="Traceback (most recent call last):\n  ...\nFedcondError: no MNIST under /data")]


def test_a_supernode_that_fails_to_say_hello_is_named_with_its_reason(monkeypatch):
    from types import SimpleNamespace

    from fedcond.flower import server
    from fedcond.flower.server import connect

    monkeypatch.setattr(server, "_message", lambda content, node, kind, group: (node, kind))  # no Flower run here

    run = SimpleNamespace(clients=3, node_timeout=1.0, reply_timeout=1.0, to_json=lambda: {})
    logged = []
    with pytest.raises(FedcondError) as err:
        connect(_HelloGrid(), run, conditioned=False, log=logged.append)
    text = str(err.value)
    assert text.startswith("SuperNodes reported partitions [0]; expected 0..2, one each")
    assert "node 12 failed: FedcondError: no MNIST under /data" in text  # the traceback's last line, not all of it
    assert "node 13 did not answer" in text
    assert "\n" not in text
    assert any("client 1 failed in hello" in line for line in logged)
