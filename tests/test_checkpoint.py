"""Checkpoints: a run stopped between rounds and resumed is the uninterrupted run, bit for bit, for
every algorithm; a checkpoint of other code or another run is not used; writes are atomic; a file
is data, never code (a planted pickle is refused unread)."""

import json
import os
from pathlib import Path

import pytest
import torch

from fedcond import data
from fedcond.algorithms import resolve_methods
from fedcond.checkpoint import Checkpoint, source_fingerprint
from fedcond.protocol import PAPER
from fedcond.scenarios import make_scenario
from fedcond.simulate import run_method

PROTOCOL = PAPER.replace(epochs=3, eval_every=1, batch_size=256)  # few steps: the resume, not the training, is tested


class Stop(Exception):
    pass


@pytest.fixture(scope="module")
def scenario():
    return make_scenario("E1", "digits", lambda n: data.load("digits"), k=2, clients_per_cluster=2, seed=0)


# The rivals small (the same code at a fraction of the time; tests/test_conformance.py says why).
LIGHT = {
    "pFedHN": "pFedHN(hidden=16,n_hidden=1)",
    "PeFLL": "PeFLL(hidden=16,n_hidden=1)",
    "FedRep": "FedRep(head_epochs=1)",
    "FedAvg-FT": "FedAvg-FT(finetune_epochs=1)",
}


def stop_after(rounds: int):
    def on_round(r, state):
        if r + 1 == rounds:
            raise Stop

    return on_round


def same(a, b):
    """Equal results: accuracies, loss and every extra (curve, ARI, FedDyn's server model, newcomers)."""
    timing = ("resumed_after_round", "cpu_seconds")  # how the run went, not what it computed
    extra = lambda r: json.dumps({k: v for k, v in r.extra.items() if k not in timing}, sort_keys=True)  # noqa: E731
    return a.per_client == b.per_client and a.train_loss == b.train_loss and extra(a) == extra(b)


@pytest.mark.parametrize("method,protocol", [(LIGHT.get(m, m), PROTOCOL) for m in resolve_methods("registry")] + [
    ("FedAvg+jdfl-graded(M=2,e0=1)", PROTOCOL), ("SCAFFOLD+jdfl-random(M=2,e0=1)", PROTOCOL),
    ("Conditional", PROTOCOL.replace(holdout_clients=1))])  # newcomers: statistics of the training clients only
def test_a_run_resumed_from_its_checkpoint_is_the_uninterrupted_run(scenario, tmp_path, method, protocol):
    whole = run_method(scenario, method, protocol, seed=0)
    ckpt = Checkpoint(tmp_path, {"method": method}, every_seconds=0)  # a checkpoint after every round
    with pytest.raises(Stop):
        run_method(scenario, method, protocol, seed=0, checkpoint=ckpt, on_round=stop_after(2))
    assert ckpt.path.exists()
    resumed = run_method(scenario, method, protocol, seed=0, checkpoint=Checkpoint(tmp_path, {"method": method}))
    assert resumed.extra["resumed_after_round"] == 2
    assert same(whole, resumed), (whole.per_client, resumed.per_client)
    assert resumed.seconds > 0


@pytest.mark.parametrize("kept", [250.0, None])
def test_a_resumed_run_adds_the_cpu_time_its_checkpoint_kept_and_none_when_it_kept_none(scenario, tmp_path, kept):
    ckpt = Checkpoint(tmp_path, {"cpu": 1}, every_seconds=0)
    with pytest.raises(Stop):
        run_method(scenario, "FedAvg", PROTOCOL, seed=0, checkpoint=ckpt, on_round=stop_after(2))
    saved = ckpt.load()
    assert saved.cpu_seconds is not None and 0 < saved.cpu_seconds <= saved.seconds * 1.05 + 0.5  # one thread
    # the same progress, but as if 250 CPU seconds (or an unknown amount: an older checkpoint) had gone before
    ckpt.save(saved.rounds_done, saved.state, saved.curve, saved.seconds, saved.traffic, cpu_seconds=kept)
    res = run_method(scenario, "FedAvg", PROTOCOL, seed=0, checkpoint=Checkpoint(tmp_path, {"cpu": 1}))
    if kept is None:
        assert "cpu_seconds" not in res.extra
    else:
        assert kept < res.extra["cpu_seconds"] < kept + res.seconds + 1


def test_a_whole_run_records_its_cpu_time_with_its_workers(scenario):
    from fedcond.engine import PoolEngine, SGDConfig

    alone = run_method(scenario, "FedAvg", PROTOCOL, seed=0)
    assert 0 < alone.extra["cpu_seconds"] <= alone.seconds * 1.05 + 0.5
    pool = PoolEngine(SGDConfig.of(PROTOCOL), workers=2)
    try:
        spread = run_method(scenario, "FedAvg", PROTOCOL, seed=0, engine=pool)
        assert pool.worker_cpu_seconds > 0
        # the workers did the training, so the run's CPU time holds theirs, not only this process's
        assert spread.extra["cpu_seconds"] >= pool.worker_cpu_seconds
    finally:
        pool.close()


def test_a_save_that_fails_warns_once_and_the_run_goes_on(scenario, tmp_path, monkeypatch):
    def full_disk(obj, f):
        open(f, "wb").write(b"half")
        raise RuntimeError("No space left on device")

    monkeypatch.setattr("fedcond.checkpoint.torch.save", full_disk)
    ckpt = Checkpoint(tmp_path, {"run": "full"}, every_seconds=0)
    with pytest.warns(UserWarning, match="cannot save a checkpoint") as caught:
        res = run_method(scenario, "FedAvg", PROTOCOL, seed=0, checkpoint=ckpt)
    assert len([w for w in caught if "checkpoint" in str(w.message)]) == 1
    assert same(res, run_method(scenario, "FedAvg", PROTOCOL, seed=0))
    assert os.listdir(tmp_path) == []  # the half-written temporary is gone


def test_the_last_round_writes_no_checkpoint_and_a_fresh_run_ignores_none(scenario, tmp_path):
    ckpt = Checkpoint(tmp_path, {"run": 1}, every_seconds=0)
    res = run_method(scenario, "FedAvg", PROTOCOL, seed=0, checkpoint=ckpt)
    assert "resumed_after_round" not in res.extra
    assert ckpt.path.exists()  # rounds 1 and 2 were saved; the caller removes it after recording the result
    assert ckpt.progress() == (2, ckpt.progress()[1])
    ckpt.remove()
    assert not ckpt.path.exists()


def test_a_checkpoint_of_other_code_or_another_run_is_not_used(scenario, tmp_path, monkeypatch):
    ckpt = Checkpoint(tmp_path, {"method": "FedAvg", "seed": 0}, every_seconds=0)
    with pytest.raises(Stop):
        run_method(scenario, "FedAvg", PROTOCOL, seed=0, checkpoint=ckpt, on_round=stop_after(1))
    assert Checkpoint(tmp_path, {"method": "FedAvg", "seed": 1}).load() is None  # another run: another file
    assert Checkpoint(tmp_path, {"method": "FedAvg", "seed": 0}).load().rounds_done == 1
    assert Checkpoint(tmp_path, {"method": "FedAvg", "seed": 1}).progress() is None
    monkeypatch.setattr("fedcond.checkpoint.source_fingerprint", lambda: "other code")
    assert Checkpoint(tmp_path, {"method": "FedAvg", "seed": 0}).load() is None
    assert Checkpoint(tmp_path, {"method": "FedAvg", "seed": 0}).progress() is None
    res = run_method(scenario, "FedAvg", PROTOCOL, seed=0, checkpoint=Checkpoint(tmp_path, {"method": "FedAvg", "seed": 0}))
    assert "resumed_after_round" not in res.extra


def test_a_torn_file_is_no_progress_and_temporaries_of_a_killed_save_are_removed(scenario, tmp_path):
    ckpt = Checkpoint(tmp_path, {"x": 1}, every_seconds=0)
    ckpt.path.write_bytes(b"not a checkpoint")
    with pytest.warns(UserWarning, match="not loaded"):
        assert ckpt.load() is None
    killed = tmp_path / f"{ckpt.path.name}.12345.tmp"  # what a save killed mid-write leaves
    killed.write_bytes(b"half")
    ckpt.save(1, {"anything": torch.zeros(2)}, [[1, 0.5, 0.5]], 3.0)
    assert ckpt.load().rounds_done == 1 and ckpt.load().seconds == 3.0
    assert ckpt.progress() == (1, 3.0)
    assert os.listdir(tmp_path) == [ckpt.path.name]
    killed.write_bytes(b"half")
    ckpt.remove()
    assert os.listdir(tmp_path) == []


def test_the_environment_is_part_of_the_key(scenario, tmp_path, monkeypatch):
    ckpt = Checkpoint(tmp_path, {"x": 2}, every_seconds=0)
    ckpt.save(1, {}, [], 1.0)
    assert ckpt.load() is not None
    monkeypatch.setattr("fedcond.checkpoint.environment", lambda: {"versions": {"torch": "another"}})
    assert Checkpoint(tmp_path, {"x": 2}).load() is None  # another process, under other libraries


def test_the_fingerprint_covers_the_source_and_is_stable(tmp_path, monkeypatch):
    import shutil

    import fedcond.checkpoint as checkpoint

    assert source_fingerprint() == source_fingerprint() and len(source_fingerprint()) == 16
    copy = tmp_path / "fedcond"  # a copy of the package: training code edited, report code edited
    shutil.copytree(Path(checkpoint.__file__).parent, copy, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    monkeypatch.setattr(checkpoint, "__file__", str(copy / "checkpoint.py"))
    before = checkpoint._hash_source()
    (copy / "report" / "tables.py").write_text((copy / "report" / "tables.py").read_text() + "\n# a report edit\n")
    assert checkpoint._hash_source() == before  # the report only reads finished rows
    (copy / "algorithms" / "fedavg.py").write_text((copy / "algorithms" / "fedavg.py").read_text() + "\n# an edit\n")
    assert checkpoint._hash_source() != before


class Planted:
    """A pickle that runs code when it is read: it makes the folder `marker`."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def plant(path: Path, marker: Path, legacy: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if legacy:  # a bare pickle, as torch.save(_use_new_zipfile_serialization=False) would write
        torch.save({"state": Planted(marker)}, path, _use_new_zipfile_serialization=False)
    else:
        torch.save({"key": {}, "rounds_done": 1, "state": Planted(marker), "seconds": 1.0}, path)


def test_the_planted_file_would_run_code(tmp_path):
    """The plant of the tests below is live: an unsafe reader runs it."""
    plant(tmp_path / "x.pt", tmp_path / "ran")
    torch.load(tmp_path / "x.pt", weights_only=False)
    assert (tmp_path / "ran").exists()


@pytest.mark.parametrize("legacy", [False, True])
def test_a_planted_sweep_checkpoint_is_refused_unread(capsys, tmp_path, legacy):
    from fedcond.cli import main
    from fedcond.experiments import EXPERIMENTS
    from fedcond.run import checkpoint_for
    from fedcond.sweep import Cell, checkpoint_dir

    db, marker = tmp_path / "r.sqlite", tmp_path / "ran"
    pname = "smoke[epochs=4]"
    spec, proto = Cell(EXPERIMENTS["E1/mnist/K=2/rich"], "FedAvg", 1, pname).setup(None)
    ckpt = checkpoint_for(checkpoint_dir(str(db)), spec, "FedAvg", proto, 1)
    plant(ckpt.path, marker, legacy)
    with pytest.warns(UserWarning, match="not loaded.*this run starts over"):
        code = main(["sweep", "E1/mnist/K=2/rich", "--protocol", "smoke", "--epochs", "4", "--methods", "FedAvg",
                     "--seeds", "1", "--db", str(db), "--dry-run"])
    out, _ = capsys.readouterr()
    assert code == 0 and "todo  E1/mnist/K=2/rich  FedAvg  seed 1" in out and "resumes" not in out
    with pytest.warns(UserWarning, match="not loaded"):
        assert ckpt.load() is None  # the run itself starts over too, and its first save replaces the file
    assert not marker.exists()


def test_an_older_fedcond_pickle_checkpoint_is_not_used(scenario, tmp_path):
    """The format before safe_state (a pickled State): ignored with a line; the run starts over."""
    from fedcond.algorithms import State

    ckpt = Checkpoint(tmp_path, {"old": 1}, every_seconds=0)
    state = State(models=({"w": torch.ones(2)},), assignment=(0,))
    torch.save({"key": ckpt.key(), "rounds_done": 1, "state": state, "curve": [], "seconds": 1.0}, ckpt.path)
    with pytest.warns(UserWarning, match="not loaded"):
        assert ckpt.load() is None


def test_a_planted_flower_server_checkpoint_is_refused_unread(tmp_path):
    pytest.importorskip("flwr")
    from fedcond.errors import FedcondError
    from fedcond.flower.config import FlowerRun
    from fedcond.flower.server import load_checkpoint, save_checkpoint
    from fedcond.run import ScenarioSpec

    run = FlowerRun(spec=ScenarioSpec(family="E1", dataset="digits", k=2), method="FedAvg", clients=2)
    marker = tmp_path / "ran"
    for legacy in (False, True):
        plant(tmp_path / "server.pt", marker, legacy)
        with pytest.raises(FedcondError, match="server.pt is not a readable fedcond safe-state file and was not loaded"):
            load_checkpoint(tmp_path / "server.pt", run)
    assert not marker.exists()
    from fedcond.algorithms import State

    state = State(models=({"w": torch.arange(3.0)},), assignment=(0, 0), extra={"c": (torch.zeros(1),), 2: "two"})
    save_checkpoint(tmp_path / "server.pt", run, state, 4)
    loaded, done = load_checkpoint(tmp_path / "server.pt", run)
    assert done == 4 and loaded.extra[2] == "two" and torch.equal(loaded.models[0]["w"], torch.arange(3.0))


def test_safe_state_round_trips_exactly():
    import numpy as np

    from fedcond import safe_state
    from fedcond.algorithms import State

    t = torch.randn(3, 2, dtype=torch.float64)
    obj = {"state": State(models=({"w": t, "v": t},), assignment=(1, 0), train_loss=float("nan"),
                          extra={"a": np.arange(4, dtype=np.int64), "f": np.float64(0.1), (1, 2): [-0.0, float("inf"), 1e-310]})}
    back = safe_state.decode(*safe_state.encode(obj))
    s = back["state"]
    assert type(s) is State and s.assignment == (1, 0) and s.train_loss != s.train_loss
    assert s.models[0]["w"] is s.models[0]["v"] and torch.equal(s.models[0]["w"], t)
    assert s.extra["a"].dtype == np.int64 and type(s.extra["f"]) is np.float64 and s.extra["f"] == np.float64(0.1)
    assert str(s.extra[(1, 2)]) == str([-0.0, float("inf"), 1e-310])
    with pytest.raises(TypeError, match="cannot store"):
        safe_state.encode({"f": lambda: 0})
