"""Trackers (fedcond.tracking): each back-end read back from what it wrote; the round loop feeds them."""

import json

import pytest

from fedcond.cli import main
from fedcond.tracking import JsonlTracker, Trackers, TrackSpec, parse_track

ROUNDS = [(1, {"train_loss": 2.0}), (2, {"train_loss": 1.5, "accuracy": 0.6, "weighted_accuracy": 0.625})]
PARAMS = {"seed": 3, "protocol": {"epochs": 2, "lr": 0.01}}


def _feed(tracker) -> None:
    run = tracker.start("FedAvg(mu=0.1)", PARAMS)
    for r, m in ROUNDS:
        run.on_round(r, m)
    run.finish({"status": "ok", "accuracy": 0.6})
    tracker.close()


def test_jsonl_lines_read_back(tmp_path):
    _feed(JsonlTracker(tmp_path / "t.jsonl"))
    lines = [json.loads(x) for x in (tmp_path / "t.jsonl").read_text().splitlines()]
    assert [x["event"] for x in lines] == ["start", "round", "round", "finish"]
    assert lines[0]["params"] == PARAMS and lines[2] == {"method": "FedAvg(mu=0.1)", "event": "round", "round": 2, **ROUNDS[1][1]}
    assert lines[3]["accuracy"] == 0.6


def test_tensorboard_scalars_read_back(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from fedcond.tracking import TensorBoardTracker

    _feed(TensorBoardTracker(tmp_path))
    (run_dir,) = list(tmp_path.iterdir())
    assert run_dir.name == "FedAvg(mu=0.1)"
    acc = EventAccumulator(str(run_dir))
    acc.Reload()
    assert [(e.step, e.value) for e in acc.Scalars("train_loss")] == [(1, 2.0), (2, 1.5)]
    assert [(e.step, e.value) for e in acc.Scalars("accuracy")] == [(2, pytest.approx(0.6))]
    assert acc.Scalars("final/accuracy")[0].value == pytest.approx(0.6)


@pytest.mark.slow  # not training: MLflow creating its sqlite store takes ~10 s
def test_mlflow_run_read_back(tmp_path):
    pytest.importorskip("mlflow")
    pytest.importorskip("sqlalchemy")
    from mlflow.tracking import MlflowClient

    from fedcond.tracking import MlflowTracker

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    _feed(MlflowTracker(uri))
    client = MlflowClient(tracking_uri=uri)
    (run,) = client.search_runs([client.get_experiment_by_name("fedcond").experiment_id])
    assert run.info.run_name == "FedAvg(mu=0.1)" and run.info.status == "FINISHED"
    assert run.data.params["protocol.lr"] == "0.01" and run.data.params["seed"] == "3"
    history = client.get_metric_history(run.info.run_id, "train_loss")
    assert [(m.step, m.value) for m in history] == [(1, 2.0), (2, 1.5)]
    assert run.data.metrics["final_accuracy"] == 0.6


def test_track_option_is_checked_before_anything_runs(capsys, monkeypatch):
    with pytest.raises(SystemExit) as e:
        main(["run", "--track", "wandb:x"])
    assert e.value.code == 2 and "expected jsonl:..." in capsys.readouterr().err
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)  # as if the extra were not installed
    with pytest.raises(ValueError, match=r"fedcond\[tensorboard\]"):
        parse_track("tensorboard:runs")


def test_trackers_start_each_method_once(tmp_path):
    with Trackers([TrackSpec("jsonl", str(tmp_path / "t.jsonl"))], {"seed": 0}) as t:
        t.on_round("A", 1, {"train_loss": 1.0})
        t.on_round("B", 1, {"train_loss": 2.0})
        t.on_round("A", 2, {"train_loss": 0.5})
        t.finish("A", {"status": "ok"})
    events = [(x["method"], x["event"]) for x in map(json.loads, (tmp_path / "t.jsonl").read_text().splitlines())]
    assert events == [("A", "start"), ("A", "round"), ("B", "start"), ("B", "round"), ("A", "round"), ("A", "finish")]


@pytest.mark.slow
@pytest.mark.parametrize("workers", ["1", "2"])  # in this process, and from worker processes over the queue
def test_run_tracks_every_round_and_the_curve(capsys, tmp_path, workers):
    track = tmp_path / "t.jsonl"
    argv = ["run", "--methods", "FedAvg,Local", "--epochs", "3", "--eval-every", "2", "--k", "2", "--workers", workers,
            "--json", "--no-progress", "--db", str(tmp_path / "r.sqlite"), "--track", f"jsonl:{track}"]
    assert main(argv) == 0
    results = {r["method"]: r for r in json.loads(capsys.readouterr().out)["results"]}
    lines = [json.loads(x) for x in track.read_text().splitlines()]
    for method, res in results.items():
        rounds = [x for x in lines if x["method"] == method and x["event"] == "round"]
        assert [x["round"] for x in rounds] == [1, 2, 3]
        curve = res["extra"]["curve"]  # rounds 2 and 3 (the last) evaluated
        assert [[x["round"], x["accuracy"], x["weighted_accuracy"]] for x in rounds if "accuracy" in x] == curve
        (finish,) = [x for x in lines if x["method"] == method and x["event"] == "finish"]
        assert finish["accuracy"] == res["accuracy"] and finish["id"] == res["id"]


def test_a_tracker_that_cannot_open_stops_the_run_before_training(capsys, tmp_path):
    argv = ["run", "--methods", "FedAvg", "--epochs", "1", "--k", "2", "--no-progress", "--db", str(tmp_path / "r.sqlite"),
            "--track", f"jsonl:{tmp_path / 'missing' / 't.jsonl'}"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("fedcond: error: --track jsonl: cannot open") and len(err.splitlines()) == 1
    assert not (tmp_path / "r.sqlite").exists()  # nothing trained, nothing recorded
