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
    (["--experiment", "E1/mnist/K=2/rich", "--method", "FedAvg(carry_momentum=True)", "--dp-noise", "0.8"],
     "DP-SGD privatises plain local SGD only"),
    (["--experiment", "E1/mnist/K=2/rich", "--method", "FedProx", "--dp-noise", "0.8"],
     "DP-SGD privatises plain local SGD only"),
    (["--experiment", "E1/mnist/K=2/rich", "--method", "Ditto", "--dp-noise", "0.8"], "DP runs FedAvg, Gossip, IFCA"),
    (["--experiment", "E1/cifar10/K=2/rich", "--method", "FedAvg", "--dp-noise", "0.8", "--fraction", "0.05"],
     "DP-SGD cannot train its model (BatchNorm"),  # the CIFAR-10 CNN's batch norm: no per-sample gradients
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


@pytest.mark.flower
@pytest.mark.slow
def test_simulate_with_a_plugin_reaches_the_simulated_supernodes():
    """The plug-in's partition is built on every SuperNode (a Ray actor, handed the module through
    $FEDCOND_PLUGINS) and its algorithm runs on the server; without --plugin the method is unknown."""
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("flwr")
    shared_file("mnist.npz.xz")
    repo = Path(__file__).resolve().parents[2]
    argv = [sys.executable, "-m", "fedcond.cli", "flower", "simulate", "--experiment", "class_pairs/mnist/clients=20",
            "--method", "FedAvgM(beta=0.5)", "--rounds", "1", "--fraction", "0.02", "--data-dir", str(SHARED), "--json"]
    out = subprocess.run([*argv, "--plugin", "examples.plugins.fedavgm"], cwd=repo, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["method"] == "FedAvgM(beta=0.5)" and res["hyperparameters"] == {"beta": 0.5, "server_lr": 1.0}
    assert len(res["per_client"]) == 20 and not res["not_evaluated"]
    without = subprocess.run(argv, cwd=repo, capture_output=True, text=True, timeout=600)
    assert without.returncode == 2 and "no experiment matches 'class_pairs/mnist/clients=20'" in without.stderr
