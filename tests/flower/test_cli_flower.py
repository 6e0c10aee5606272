"""`fedcond flower ...` as a user meets it: one-line errors, the deployment's run config, a simulated run."""

import json

import pytest

from fedcond.cli import main

from fedcond_testing import SHARED, shared_file


def run_cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("argv, message", [
    (["--experiment", "E1/mnist/K=2/rich", "--method", "Local"], "trains on pooled data"),
    (["--experiment", "E1/mnist/K=2/rich", "--method", "NoSuchMethod"], "unknown method"),
    (["--experiment", "E9/none", "--method", "FedAvg"], "no experiment matches"),
    (["--experiment", "E1/mnist/K=2/rich", "--method", "FedAvg", "--fraction", "1.5"], "--fraction must be in (0, 1]"),
    (["--experiment", "E1/mnist/K=2/rich", "--method", "FedProc"], "custom local losses"),
    (["--experiment", "JDFL/pacs/main", "--method", "FedAvg+jdfl-graded"], "custom local losses"),
])
def test_bad_input_is_one_line(capsys, argv, message):
    pytest.importorskip("flwr")
    code, out, err = run_cli(capsys, "flower", "run-config", *argv)
    assert code == 2
    assert message in err and len(err.strip().splitlines()) == 1


def test_run_config_round_trips(capsys):
    pytest.importorskip("flwr")
    shared_file("mnist.npz.xz")
    from fedcond.flower.config import FlowerRun

    code, out, err = run_cli(capsys, "flower", "run-config", "--experiment", "E1/mnist/K=2/rich", "--method", "Conditional",
                             "--rounds", "3", "--fraction", "0.05", "--data-dir", str(SHARED), "--dp-noise", "0.8")
    assert code == 0, err
    run = FlowerRun.from_json(out)
    assert run.method == "Conditional-FedAvg"  # the paper's Conditional in its federated form
    assert run.clients == 10 and run.num_rounds == 3 and run.dp.noise_multiplier == 0.8
    assert FlowerRun.from_json(run.to_json()) == run


def test_run_config_takes_the_experiments_own_preset(capsys):
    pytest.importorskip("flwr")
    shared_file("pacs_photo.npz.xz")
    from fedcond.experiments import PROTOCOLS
    from fedcond.flower.config import FlowerRun

    code, out, err = run_cli(capsys, "flower", "run-config", "--experiment", "JDFL/pacs/main", "--method", "FedAvg",
                             "--fraction", "0.05", "--data-dir", str(SHARED))
    assert code == 0, err
    assert FlowerRun.from_json(out).protocol == PROTOCOLS["jdfl"][0]  # JDFL's rounds and momentum, not the paper's


@pytest.mark.flower
@pytest.mark.slow
def test_simulate_prints_json(capsys):
    pytest.importorskip("flwr")
    shared_file("mnist.npz.xz")
    code, out, err = run_cli(capsys, "flower", "simulate", "--experiment", "E1/mnist/K=2/rich", "--method", "FedAvg",
                             "--rounds", "1", "--fraction", "0.02", "--data-dir", str(SHARED), "--json")
    assert code == 0, err
    res = json.loads(out)
    assert res["method"] == "FedAvg" and res["rounds"] == 1 and len(res["per_client"]) == 10
    assert 0 <= res["accuracy"] <= 1
