"""Checkpoints: a run stopped between rounds and resumed is the uninterrupted run, bit for bit, for
every algorithm; a checkpoint of other code or another run is not used; writes are atomic."""

import json
import os

import pytest
import torch

from fedcond import data
from fedcond.algorithms import resolve_methods
from fedcond.checkpoint import Checkpoint, source_fingerprint
from fedcond.protocol import PAPER
from fedcond.scenarios import make_scenario
from fedcond.simulate import run_method

PROTOCOL = PAPER.replace(epochs=3, eval_every=1)


class Stop(Exception):
    pass


@pytest.fixture(scope="module")
def scenario():
    return make_scenario("E1", "digits", lambda n: data.load("digits"), k=2, clients_per_cluster=2, seed=0)


def stop_after(rounds: int):
    def on_round(r, state):
        if r + 1 == rounds:
            raise Stop

    return on_round


def same(a, b):
    return (a.per_client == b.per_client and a.train_loss == b.train_loss
            and json.dumps(a.extra.get("curve")) == json.dumps(b.extra.get("curve")))


@pytest.mark.parametrize("method", resolve_methods("registry") + ["FedAvg+jdfl-graded(M=2,e0=1)",
                                                                   "SCAFFOLD+jdfl-random(M=2,e0=1)"])
def test_a_run_resumed_from_its_checkpoint_is_the_uninterrupted_run(scenario, tmp_path, method):
    whole = run_method(scenario, method, PROTOCOL, seed=0)
    ckpt = Checkpoint(tmp_path, {"method": method}, every_seconds=0)  # a checkpoint after every round
    with pytest.raises(Stop):
        run_method(scenario, method, PROTOCOL, seed=0, checkpoint=ckpt, on_round=stop_after(2))
    assert ckpt.path.exists()
    resumed = run_method(scenario, method, PROTOCOL, seed=0, checkpoint=Checkpoint(tmp_path, {"method": method}))
    assert resumed.extra["resumed_after_round"] == 2
    assert same(whole, resumed), (whole.per_client, resumed.per_client)
    assert resumed.seconds > 0


def test_the_last_round_writes_no_checkpoint_and_a_fresh_run_ignores_none(scenario, tmp_path):
    ckpt = Checkpoint(tmp_path, {"run": 1}, every_seconds=0)
    res = run_method(scenario, "FedAvg", PROTOCOL, seed=0, checkpoint=ckpt)
    assert "resumed_after_round" not in res.extra
    assert ckpt.path.exists()  # rounds 1 and 2 were saved; the caller removes it after recording the result
    assert torch.load(ckpt.path, weights_only=False)["rounds_done"] == 2
    ckpt.remove()
    assert not ckpt.path.exists()


def test_a_checkpoint_of_other_code_or_another_run_is_not_used(scenario, tmp_path, monkeypatch):
    ckpt = Checkpoint(tmp_path, {"method": "FedAvg", "seed": 0}, every_seconds=0)
    with pytest.raises(Stop):
        run_method(scenario, "FedAvg", PROTOCOL, seed=0, checkpoint=ckpt, on_round=stop_after(1))
    assert Checkpoint(tmp_path, {"method": "FedAvg", "seed": 1}).load() is None  # another run: another file
    assert Checkpoint(tmp_path, {"method": "FedAvg", "seed": 0}).load().rounds_done == 1
    monkeypatch.setattr("fedcond.checkpoint.source_fingerprint", lambda: "other code")
    assert Checkpoint(tmp_path, {"method": "FedAvg", "seed": 0}).load() is None
    res = run_method(scenario, "FedAvg", PROTOCOL, seed=0, checkpoint=Checkpoint(tmp_path, {"method": "FedAvg", "seed": 0}))
    assert "resumed_after_round" not in res.extra


def test_a_torn_file_is_no_progress_and_a_save_leaves_no_temporary(scenario, tmp_path):
    ckpt = Checkpoint(tmp_path, {"x": 1}, every_seconds=0)
    ckpt.path.write_bytes(b"not a checkpoint")
    assert ckpt.load() is None
    ckpt.save(1, {"anything": torch.zeros(2)}, [[1, 0.5, 0.5]], 3.0)
    assert ckpt.load().rounds_done == 1 and ckpt.load().seconds == 3.0
    assert os.listdir(tmp_path) == [ckpt.path.name]


def test_the_fingerprint_covers_the_source_and_is_stable():
    assert source_fingerprint() == source_fingerprint() and len(source_fingerprint()) == 16
